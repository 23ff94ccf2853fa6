# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Who reaches the Kubernetes API, and with what: consumers, workers, the operator.

- `kube-api` consumers (efs-storage, tensorflow) get a namespace, a ServiceAccount with
  the rules they asked for, and a kubeconfig in a Juju secret granted to their relation,
  whose token is a short-lived TokenRequest token renewed through new revisions of that
  secret (TOKEN_SECONDS below);
- workers act as their kubelets; the ServiceAccount workers of earlier revisions share
  stands, on a cluster an earlier revision made, only until none of them is registered,
  and is never made again (`worker_kubeconfig`);
- the operator reaches the API from outside once the application is exposed: port 6443
  is opened, and every API server's certificate names `api-extra-sans` and the unit's
  public address (the cluster's certSANs in kubeadm-config, each node's own
  certificate renewed when those names change, added or removed; kube-apiserver serves
  the new pair without a restart).

An ops component (relations, secrets, ports) that takes the kube-api endpoint, the model,
this unit's `context.UnitContext` and the hook's API client, never the charm; it returns
notes for the status. What it applies is in `rbac.py` and `bootstrap.py`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Callable, MutableMapping

import bootstrap
import ops
import rbac
import registry
import yaml
from charm_config import Config
from context import UnitContext
from literals import ADMIN_REFUSED_FIX, API_PORT, WORKER_NAMESPACE, WORKER_SERVICE_ACCOUNT
from peers import ENDPOINT, Peers

from charms.gpu_k8s.v0 import api_proxy, kube_objects
from charms.gpu_k8s.v0.kube_api import KubeApiProvider, Request, RequirerAppData
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import SECRET_LABEL
from charms.gpu_k8s.v0.status import StatusError, kube_status, on_error

logger = logging.getLogger(__name__)

# What the API server answers a request it will never take (bad request, invalid object,
# conflict with what exists, a body over its 3 MiB: 413, k8s.io/apiserver pkg/server/
# config.go MaxRequestBodyBytes): the consumer's alone, refused. So is etcd's refusal of
# an object over its 1.5 MiB (--max-request-bytes), which kube-apiserver answers as a 500
# with etcd's text (ErrGRPCRequestTooLarge; kubernetes/kubernetes#112152): tests/fakes/
# kube_apiserver.py cites both. Any other error skips that consumer for this hook (its
# grant stays as it was) and is raised once the others were served (`raise_skipped`).
REFUSED_GRANT = frozenset({400, 409, 413, 422})
ETCD_TOO_LARGE = "etcdserver: request is too large"
# The peer application databag: what was granted and written last, under these keys.
KUBE_API_KEY = "kube-api"  # {relation id: {app, namespace, fingerprint}} of kube-api grants
WORKER_GRANT_KEY = "worker-grant"  # the shared grant's fingerprint, or WORKER_GRANT_REMOVED
WORKER_GRANT_REMOVED = "removed"
CERT_SANS_KEY = "cert-sans"  # the certSANs last written to kubeadm-config
# a digest of the caps and the grants each granted team's databag was last told of (none
# once a databag was written whole again: grant and refuse remove `quota-capped`)
QUOTAS_ANNOUNCED_KEY = "kube-api-quotas-announced"

# A consumer's token lives 48 hours (TokenRequest `expirationSeconds`, rbac.request_token).
# Its secret rotates DAILY: Juju fires secret-rotate on the leader once a day, and again
# until a new revision is written (ops SecretRotate, SecretRotateEvent), so each token is
# replaced about halfway through its life. Any hook also renews a token with under a
# third of its life left (RENEW_AFTER: 16 of 48 hours), so a rotate event that is late
# (the leader busy, leadership moving, the controller away) leaves a day and 16 hours
# of margin, not none; a consumer that runs no hook for that long loses access, which
# is what a short-lived credential is for. An API server that grants less than asked
# (--service-account-max-token-expiration) is renewed at a third of what it granted.
TOKEN_SECONDS = rbac.TOKEN_SECONDS
RENEW_AFTER = 2 / 3  # of the lifetime granted
ROTATE = ops.SecretRotate.DAILY
EXPIRES, RENEW, LEGACY = "expires", "renew", "legacy-token"  # keys of a KUBE_API_KEY entry
# and, for a storage provisioner, its `storage-consumers` (consumer app -> access point)
STORAGE = "storage"


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class Access:
    """Grants to consumers and workers, and the way in for the operator.

    `kube_api`: the kube-api endpoint; `model`: where the workers' secret is found and
    this unit's port opened; `ctx`: this unit; `kube`: the hook's API client; `clock`:
    the time (UTC), for the consumers' token renewal.
    """

    def __init__(
        self,
        kube_api: KubeApiProvider,
        model: ops.Model,
        ctx: UnitContext,
        kube: Callable[[], Kube],
        *,
        clock: Callable[[], datetime.datetime] = _utcnow,
    ):
        self._kube_api = kube_api
        self._model = model
        self._ctx = ctx
        self._kube = kube
        self._clock = clock
        # Blocked lines for the status: consumers that asked for a namespace they may not
        # have (another consumer's, or one the system or an operator made).
        self.blocked: list[str] = []
        # (consumer, error) of the grants and revocations an API error, or a token not
        # issued yet (a Waiting StatusError), skipped this hook
        self._skipped: list[tuple[str, KubeError | StatusError]] = []

    def worker_kubeconfig(self, peers: Peers) -> str:
        """The shared workers' kubeconfig while a worker still uses it; "" once it is gone.

        Workers of this revision act as their kubelet and say so (`node-identity`); the
        registry keeps the units that did not (`registry.SHARED_GRANT_KEY`). The grant is
        one an earlier revision made (`WORKER_GRANT_KEY` holds its fingerprint): while a
        unit that did not say `node-identity` is registered, its ServiceAccount and grant
        stand and its kubeconfig is published (granted again when changed); once none is,
        they are deleted, once (the mark is WORKER_GRANT_REMOVED), so no hook makes API
        calls for them afterwards. Before the registry exists (the first hooks after an
        upgrade) nothing is decided: the grant stays.

        It is never made again, and never on a cluster where no earlier revision made it:
        no worker revision without `node-identity` (before 917e912) can join a cluster of
        this revision, since it reads its token from the join secret, which holds none
        since a9c33ec (lib kubernetes_cluster.py). A unit that does not say it then is of
        a revision refreshed back, or root on it dropped the flag to get the shared
        token, which patches every Node and evicts any pod (issue 29 item 2): it gets
        nothing, and a Blocked line names it (`blocked`).
        """
        bag = peers.app
        known = registry.Registry.load(bag) if registry.WORKERS_KEY in bag else None
        legacy = sorted(known.shared_grant) if known is not None else []
        if bag.get(WORKER_GRANT_KEY, WORKER_GRANT_REMOVED) == WORKER_GRANT_REMOVED:
            self.blocked.extend(_refresh_lines(legacy))
            return ""
        if known is not None and not legacy:
            deleted = rbac.remove(self._kube(), rbac.worker_grant())
            logger.info(
                "every worker acts as its kubelet: removed the shared worker grant (%s)",
                ", ".join(deleted) or "nothing was left",
            )
            bag[WORKER_GRANT_KEY] = WORKER_GRANT_REMOVED
            return ""
        endpoint = bag[ENDPOINT]
        grant = rbac.worker_grant()
        fingerprint = kube_objects.fingerprint(rbac.manifests(grant), endpoint)
        if bag.get(WORKER_GRANT_KEY) == fingerprint:
            try:
                current = self._model.get_secret(label=SECRET_LABEL).peek_content()
                if current.get("kubeconfig"):
                    return current["kubeconfig"]
            except ops.SecretNotFoundError:
                pass
        token = self.apply_grant(grant)
        text = rbac.kubeconfig(
            server=f"https://{endpoint}",
            ca_pem=bootstrap.read_ca(self._ctx.host) or "",
            token=token,
            namespace=WORKER_NAMESPACE,
            user=WORKER_SERVICE_ACCOUNT,
        )
        bag[WORKER_GRANT_KEY] = fingerprint
        return text

    def apply_grant(self, grant: rbac.Grant) -> str:
        """Apply a grant's RBAC objects; the ServiceAccount's token."""
        try:
            return rbac.apply(self._kube(), grant)
        except rbac.TokenNotReadyError:
            raise StatusError.waiting(
                f"waiting for the token of {grant.service_account}"
            ) from None

    def _consumer_grant(
        self, grant: rbac.Grant, *, apply: bool = True
    ) -> tuple[rbac.IssuedToken | None, str]:
        """(token, "") once `grant` is applied (`apply`) and a token issued; else (None, why).

        (None, why) is for what is this consumer's to fix: a namespace another holds, or a
        request the API server will never take, refuses
        this consumer alone and never holds up the others; an unwell API server raises, as
        does a TokenRequest answered without a token (rbac.TokenNotReadyError): both skip
        this consumer for this hook (`serve_kube_api`).
        """
        try:
            if apply:
                rbac.apply_objects(self._kube(), grant)
            try:
                return rbac.request_token(self._kube(), grant, TOKEN_SECONDS), ""
            except KubeError as e:
                if apply or e.status != 404:
                    raise
            # its ServiceAccount is gone (deleted by hand): the whole grant again
            rbac.apply_objects(self._kube(), grant)
            return rbac.request_token(self._kube(), grant, TOKEN_SECONDS), ""
        except rbac.NamespaceTakenError as e:
            return None, str(e)
        except KubeError as e:
            if not _refused(e):
                raise
            return None, f"the API server refused the grant of {grant.consumer}: {e.message}"

    def _renewal_due(self, previous: dict, rotate: bool) -> bool:
        """Whether a granted consumer's token is to be replaced in this hook.

        When Juju asks (`rotate`), when under a third of its life is left, or when it is a
        token Secret's from before TokenRequest (no expiry recorded).
        """
        renew = previous.get(RENEW)
        if rotate or not renew:
            return True
        return self._clock() >= datetime.datetime.fromisoformat(renew)

    def serve_kube_api(
        self,
        peers: Peers,
        provisioners: frozenset[str] = frozenset(),
        *,
        rotate: int | None = None,
    ) -> list[str]:
        """Grant what each kube-api consumer asks for; revoke what departed consumers had.

        `provisioners`: the applications trusted with a storage provisioner's rules. A
        namespace belongs to the first consumer granted it: a later one asking for it is
        refused, with a Blocked line naming both (`blocked`). Each granted consumer's token
        is replaced when due (`_renewal_due`; `rotate`: the relation whose secret Juju
        asked to rotate) by a new revision of its secret; the RBAC objects are applied
        again only when the request changed. An API error on one consumer's grant or
        revocation skips that one alone (`raise_skipped` raises it after the reconcile).
        Returns notes for the status: the consumers whose request was refused.
        """
        bag = peers.app
        granted: dict[str, dict] = json.loads(bag.get(KUBE_API_KEY, "{}"))
        before = json.dumps(granted, sort_keys=True)
        seen = set()
        notes = []
        # Consumers may run outside the cluster's nodes, without the local proxy: they get
        # the leader's API server first and every other one after it (rbac.kubeconfig),
        # which their client fails over to when the first is lost (lib kubeclient.py).
        endpoint = f"https://{self._ctx.api_server}"
        also = [f"https://{s}" for s in peers.api_servers(None) if s != self._ctx.api_server]
        serving = _Serving(
            bag,
            granted,
            provisioners,
            rotate,
            endpoint,
            also,
            _node_set(registry.Registry.load(bag).nodes),
        )
        for request in self._kube_api.requests(provisioners):
            seen.add(str(request.relation.id))
            try:
                notes += self._serve(request, serving)
            except KubeError as e:
                self._skip(request.app_name, e)
            except rbac.TokenNotReadyError:
                waiting = StatusError.waiting(f"waiting for the token of {request.app_name}")
                self._skip(request.app_name, waiting)
        for key in [k for k in granted if k not in seen and not self._relation_active(k)]:
            try:
                self._revoke(granted[key], int(key), bag)
            except KubeError as e:
                self._skip(granted[key]["app"], e)
                continue
            del granted[key]
        after = json.dumps(granted, sort_keys=True)
        if after != before:
            bag[KUBE_API_KEY] = after
        return notes

    def _skip(self, consumer: str, error: KubeError | StatusError) -> None:
        logger.warning("kube-api: skipped %s for this hook: %s", consumer, error)
        self._skipped.append((consumer, error))

    def raise_skipped(self) -> None:
        """Report the API errors that skipped consumers (`serve_kube_api`), if any did.

        Called last in the leader's reconcile, so that one consumer's error holds up no
        other consumer and no other step. The first error reads as any API error does
        (`status.kube_status`), and a token not issued yet as Waiting, naming the consumers
        skipped; one that means no status (unexpected) is raised, naming them, and fails
        the hook.
        """
        if not self._skipped:
            return
        names = ", ".join(dict.fromkeys(name for name, _ in self._skipped))
        e = self._skipped[0][1]
        if isinstance(e, StatusError):
            raise StatusError(type(e.status)(f"kube-api grant of {names}: {e.status.message}"))
        status = kube_status(e, ADMIN_REFUSED_FIX)
        if status is None:
            raise KubeError(e.status, e.reason, f"kube-api grant of {names}: {e.message}")
        raise StatusError(type(status)(f"kube-api grant of {names}: {status.message}"))

    def _serve(self, request: Request, serving: _Serving) -> list[str]:
        """Grant, renew or refuse one consumer's request; notes for the status."""
        key = str(request.relation.id)
        granted, bag = serving.granted, serving.bag
        previous = granted.get(key)
        request = self._first_come(self._reserved(request), granted, key)
        if request.error or request.request is None:
            if previous:
                self._revoke(previous, request.relation.id, bag)
                del granted[key]
            self._kube_api.refuse(request.relation, request.error or "invalid request")
            _written_whole(bag)
            return [f"refused kube-api request of {request.app_name}"]
        ask = request.request
        provisioner = request.app_name in serving.provisioners
        # the Pod Security level and Kueue's label are part of what was granted (its
        # namespace's labels): a grant made before every consumer's namespace was
        # Kueue's (issue 29 review item 1) is applied again, labelling it
        level = "pod-security=baseline" if provisioner else "pod-security=restricted kueue=managed"
        dumped = ask.dump()  # its databag form, once
        fingerprint = kube_objects.fingerprint(
            _rbac_part(dumped), serving.endpoint, level, *serving.also
        )
        answered = request.relation.data[self._model.app].get("kubeconfig-secret-id")
        same = bool(previous and previous["fingerprint"] == fingerprint and answered)
        queue = _queue(ask, dumped)  # the team's wanted Kueue quota: addons writes its queue
        # whom a provisioner serves: addons fences its volumes and claims to them
        served = {STORAGE: ask.storage_consumers or {}} if provisioner else {}
        if same and not self._renewal_due(previous or {}, request.relation.id == serving.rotate):
            self._kube_api.announce_nodes(request.relation, serving.node_set)
            granted[key] = {**_without_storage(previous or {}), "queue": queue, **served}
            return []
        if previous and previous["namespace"] != ask.namespace:
            self._revoke(previous, None, bag)
        grant = rbac.consumer_grant(
            request.app_name, ask.namespace, ask.rules, ask.cluster_rules, provisioner=provisioner
        )
        issued, problem = self._consumer_grant(grant, apply=not same)
        if issued is None:
            if previous:
                self._revoke(previous, request.relation.id, bag)
                del granted[key]
            self._kube_api.refuse(request.relation, problem)
            _written_whole(bag)
            self.blocked.append(f"kube-api: {problem}")
            return []
        text = rbac.kubeconfig(
            server=serving.endpoint,
            ca_pem=bootstrap.read_ca(self._ctx.host) or "",
            token=issued.token,
            namespace=ask.namespace,
            user=grant.service_account,
            also=serving.also,
        )
        replaced = self._kube_api.grant(
            request.relation,
            serving.endpoint,
            ask.namespace,
            grant.service_account,
            text,
            serving.node_set,
            rotate=ROTATE,
        )
        _written_whole(bag)
        granted[key] = {
            "app": request.app_name,
            "namespace": ask.namespace,
            "fingerprint": fingerprint,
            "queue": queue,
            **served,
            **self._token_times(issued),
            **self._legacy_token(previous, grant, replaced),
        }
        logger.info(
            "granted %s access to namespace %s until %s",
            request.app_name,
            ask.namespace,
            issued.expires.isoformat(),
        )
        return []

    def admit_storage(self, admitted: dict[str, dict[str, str]]) -> None:
        """Answer each provisioner (by relation id) with the consumers its policy admits.

        Run after the policy was applied (addons.apply_provisioner_claims_policy), so a
        provisioner that sees its consumer admitted writes that consumer's claim unrefused.
        """
        for relation in self._kube_api.relations:
            consumers = admitted.get(str(relation.id))
            if consumers is not None:
                self._kube_api.admit_storage(relation, consumers)

    def announce_quotas(self, peers: Peers, capped: dict[str, list[dict[str, str]]]) -> None:
        """Tell each granted team what capped its quota ask (`capped`: by namespace).

        Run after Kueue's objects were sized (addons.team_caps), so a team's own status
        says what it asked, what it got and which option capped it (issue 29), not only
        this charm's log. Nothing is written to a consumer not granted, nor when unchanged;
        no databag is read while the caps and the grants are those last announced and no
        databag was written whole since (QUOTAS_ANNOUNCED_KEY: issue 29's cost rule).
        """
        bag = peers.app
        announced = kube_objects.fingerprint(capped, bag.get(KUBE_API_KEY, ""))
        if bag.get(QUOTAS_ANNOUNCED_KEY) == announced:
            return
        granted: dict[str, dict] = json.loads(bag.get(KUBE_API_KEY, "{}"))
        for relation in self._kube_api.relations:
            entry = granted.get(str(relation.id))
            if entry and relation.data[self._model.app].get("kubeconfig-secret-id"):
                self._kube_api.announce_quota(relation, capped.get(entry["namespace"], []))
        bag[QUOTAS_ANNOUNCED_KEY] = announced

    def _token_times(self, issued: rbac.IssuedToken) -> dict[str, str]:
        """When `issued` expires and when to renew it (a third of its life left)."""
        now = self._clock()
        renew = now + (issued.expires - now) * RENEW_AFTER
        return {EXPIRES: issued.expires.isoformat(), RENEW: renew.isoformat()}

    def _legacy_token(
        self, previous: dict | None, grant: rbac.Grant, replaced: int | None
    ) -> dict[str, int]:
        """What is left of a token Secret from before TokenRequest (`LEGACY`: its revision).

        A consumer granted by an earlier revision holds the Secret's long-lived token until
        it reads the TokenRequest kubeconfig written now: the Secret is deleted when Juju
        says no one tracks the revision that held it (secret-remove, `legacy_token_unused`)
        or, failing that, at the next renewal, when every consumer that ran a hook since
        holds a TokenRequest kubeconfig.
        """
        if previous is None:
            return {}
        if EXPIRES not in previous:  # granted before TokenRequest: its Secret's token
            if replaced is not None:
                return {LEGACY: replaced}
            rbac.delete_legacy_token(self._kube(), grant)  # no consumer read a kubeconfig
            return {}
        if LEGACY in previous:
            rbac.delete_legacy_token(self._kube(), grant)
            logger.info("deleted the long-lived token Secret of %s", grant.consumer)
        return {}

    def legacy_token_unused(self, peers: Peers, relation_id: int, revision: int) -> None:
        """Revision `revision` of a consumer's secret is tracked by no one (secret-remove).

        When it or a later one held the consumer's long-lived token Secret's token, delete
        that Secret: the consumer's units all read a TokenRequest kubeconfig since.
        """
        bag = peers.app
        granted: dict[str, dict] = json.loads(bag.get(KUBE_API_KEY, "{}"))
        entry = granted.get(str(relation_id))
        if not entry or LEGACY not in entry or revision > entry[LEGACY]:
            return
        grant = rbac.consumer_grant(entry["app"], entry["namespace"], [], [])
        rbac.delete_legacy_token(self._kube(), grant)
        del entry[LEGACY]
        bag[KUBE_API_KEY] = json.dumps(granted, sort_keys=True)
        logger.info("deleted the long-lived token Secret of %s: no one reads it", entry["app"])

    def _first_come(self, request: Request, granted: dict[str, dict], key: str) -> Request:
        """`request`, refused when another grant holds its namespace (with a Blocked line)."""
        if request.request is None or request.error:
            return request
        namespace = request.request.namespace
        holder = _holder(granted, key, namespace)
        if not holder:
            return request
        self.blocked.append(
            f"kube-api: {request.app_name} asks for namespace {namespace}, which "
            f"{holder} holds: relate {request.app_name} with another namespace"
        )
        error = f"namespace {namespace} is held by {holder}; ask for another namespace"
        return dataclasses.replace(request, error=error)

    def _reserved(self, request: Request) -> Request:
        """`request`, refused when its application has a reserved name (with a Blocked line)."""
        why = None if request.error else rbac.reserved_consumer(request.app_name)
        if why is None:
            return request
        self.blocked.append(f"kube-api: {why}")
        return dataclasses.replace(request, error=why)

    def _relation_active(self, key: str) -> bool:
        return any(str(r.id) == key for r in self._kube_api.relations)

    def _revoke(
        self, previous: dict, relation_id: int | None, bag: MutableMapping[str, str]
    ) -> None:
        grant = rbac.consumer_grant(previous["app"], previous["namespace"], [], [])
        rbac.remove(self._kube(), grant)
        if relation_id is not None:
            self._kube_api.remove(relation_id)
        if grant.role_name == rbac.worker_grant().role_name and (
            bag.get(WORKER_GRANT_KEY, WORKER_GRANT_REMOVED) != WORKER_GRANT_REMOVED
        ):
            # a consumer an earlier revision granted under the workers' name (review44a
            # G9) had replaced their ClusterRole and binding, and just deleted them: the
            # shared grant, which stands, is made whole again
            rbac.apply_objects(self._kube(), rbac.worker_grant())
            logger.info("applied the shared worker grant again after revoking %s", grant.consumer)

    def reach(self, config: Config, peers: Peers, *, leader: bool) -> None:
        """Open the API port for `juju expose`; keep the certificate valid for outside names.

        The leader keeps the cluster's certSANs (kubeadm-config, which joining nodes read)
        equal to `api-extra-sans` (`cert-sans` in the peer data says what it last wrote);
        each node renews its own certificate when the names it wants (those and its own
        public address) differ from those it was issued for, added or removed; the API
        server serves the new pair without a restart (`bootstrap.renew_apiserver_cert`).
        Nothing is asked of the API server when nothing changed. `leader`: this unit
        reconciles as the leader (one that has not joined the running cluster yet does not).
        """
        self._model.unit.set_ports(API_PORT)
        bag = peers.app
        sans = bootstrap.cluster_cert_sans(api_proxy.ENDPOINT, config.extra_sans)
        if leader and bag.get(CERT_SANS_KEY) != json.dumps(sans):
            kube = self._kube()
            cluster = self._cluster_configuration(kube)
            if (cluster.get("apiServer") or {}).get("certSANs") != sans:
                server = {**(cluster.get("apiServer") or {}), "certSANs": sans}
                text = yaml.safe_dump({**cluster, "apiServer": server})
                patch = {"data": {"ClusterConfiguration": text}}
                kube.patch("v1", "ConfigMap", "kubeadm-config", patch, namespace="kube-system")
                logger.info("the cluster's API server certificates name %s", ", ".join(sans))
            bag[CERT_SANS_KEY] = json.dumps(sans)
        public = self._ctx.public_address
        wanted = {*config.extra_sans, *([public] if public else [])}
        retry = "{error}; retrying on the next event"
        host = self._ctx.host
        issued = bootstrap.issued_extra_sans(host)
        lacking = not wanted <= bootstrap.apiserver_sans(host)
        if issued is None and not lacking:
            # a certificate from before the record (kubeadm init or an earlier revision)
            bootstrap.record_extra_sans(host, wanted)
            issued = wanted
        with on_error(ops.WaitingStatus, bootstrap.BootstrapError, message=retry):
            # a name taken out of the option, or a released public address, leaves the
            # certificate too (review deploy.md N18): renewed whenever the set differs
            if lacking or issued != wanted:
                bootstrap.renew_apiserver_cert(
                    self._ctx.host,
                    self._cluster_configuration(self._kube()),
                    node_name=self._ctx.node_name,
                    advertise_address=self._ctx.address,
                    extra=sorted(wanted),
                )

    @staticmethod
    def _cluster_configuration(kube: Kube) -> dict:
        """The cluster's ClusterConfiguration, as kubeadm stored it in kubeadm-config."""
        cm = kube.get("v1", "ConfigMap", "kubeadm-config", namespace="kube-system")
        if cm is None:
            raise StatusError.waiting("waiting for kubeadm's kubeadm-config ConfigMap")
        return yaml.safe_load((cm.get("data") or {}).get("ClusterConfiguration") or "{}") or {}


@dataclasses.dataclass(frozen=True)
class _Serving:
    """What serving every consumer in one hook shares (`Access.serve_kube_api`)."""

    bag: MutableMapping[str, str]  # the peer application databag
    granted: dict[str, dict]  # KUBE_API_KEY's record, updated in place
    provisioners: frozenset[str]
    rotate: int | None  # the relation whose secret Juju asked to rotate
    endpoint: str  # the leader's API server, first in every kubeconfig
    also: list[str]  # the other API servers
    node_set: str  # the digest of the worker nodes (`_node_set`)


def _refused(error: KubeError) -> bool:
    """Whether the API server will never take this grant (REFUSED_GRANT, ETCD_TOO_LARGE)."""
    return error.status in REFUSED_GRANT or (
        error.status == 500 and ETCD_TOO_LARGE in error.message
    )


_QUOTA_KEYS = {"gpu-quota": "gpus", "cpu-quota": "cpu", "memory-quota": "memory"}
# changes the provisioner's admission policy (addons), not its grant
_NOT_RBAC = {*_QUOTA_KEYS, "storage-consumers"}


def _written_whole(bag: MutableMapping[str, str]) -> None:
    """A consumer's databag was written whole (its `quota-capped` gone): announce again."""
    if QUOTAS_ANNOUNCED_KEY in bag:
        del bag[QUOTAS_ANNOUNCED_KEY]


def _rbac_part(request: dict[str, str]) -> dict[str, str]:
    """The request less its quota and consumers (they change a queue or a policy, not RBAC)."""
    return {k: v for k, v in request.items() if k not in _NOT_RBAC}


def _without_storage(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k != STORAGE}


def _queue(request: RequirerAppData, dumped: dict[str, str]) -> dict[str, str] | None:
    """The quota a consumer that asks for LocalQueues (a Kueue team) wants; else None.

    `dumped`: `request`'s databag form (`request.dump()`).
    """
    team = any(
        "kueue.x-k8s.io" in r.api_groups and "localqueues" in r.resources for r in request.rules
    )
    if not team:
        return None
    return {field: dumped.get(key, "") for key, field in _QUOTA_KEYS.items()}


def _holder(granted: dict[str, dict], key: str, namespace: str) -> str | None:
    """The application another grant gave `namespace` to, if one did (first come keeps it).

    Where two grants made before this rule share a namespace, the older relation keeps it.
    """
    mine = (granted.get(key) or {}).get("namespace") == namespace
    for other, entry in granted.items():
        if (
            other != key
            and entry["namespace"] == namespace
            and (not mine or int(other) < int(key))
        ):
            return entry["app"]
    return None


def _refresh_lines(units: list[str]) -> list[str]:
    """A Blocked line per worker application whose `units` do not act as their kubelet."""
    by_app: dict[str, list[str]] = {}
    for unit in units:
        by_app.setdefault(unit.split("/")[0], []).append(unit)
    return [
        f"{', '.join(names)} {'does' if len(names) == 1 else 'do'} not act as "
        f"{'its' if len(names) == 1 else 'their'} kubelet (no node-identity) and "
        f"{'gets' if len(names) == 1 else 'get'} no shared worker credential: "
        f"juju refresh {app}"
        for app, names in sorted(by_app.items())
    ]


def _node_set(nodes: set[str]) -> str:
    """A digest of the worker nodes, for kube-api consumers that follow them."""
    return kube_objects.fingerprint(sorted(nodes))
