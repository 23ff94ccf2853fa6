# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Who reaches the Kubernetes API, and with what: consumers, workers, the operator.

- `kube-api` consumers (efs-storage, tensorflow) get a namespace, a ServiceAccount with
  the rules they asked for, and a kubeconfig in a Juju secret granted to their relation;
- workers act as their kubelets; the ServiceAccount workers of earlier revisions share
  stands only while one of them is registered (`worker_kubeconfig`);
- the operator reaches the API from outside once the application is exposed: port 6443
  is opened, and every API server's certificate names `api-extra-sans` and the unit's
  public address (the cluster's certSANs in kubeadm-config, each node's own
  certificate renewed when it lacks one, then its API server restarted).

An ops component (relations, secrets, ports) that takes the kube-api endpoint, the model,
this unit's `context.UnitContext` and the hook's API client, never the charm; it returns
notes for the status. What it applies is in `rbac.py` and `bootstrap.py`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable

import bootstrap
import ops
import rbac
import registry
import yaml
from charm_config import Config
from context import UnitContext
from literals import API_PORT, WORKER_NAMESPACE, WORKER_SERVICE_ACCOUNT
from peers import ENDPOINT, Peers

from charms.gpu_k8s.v0 import api_proxy, kube_objects
from charms.gpu_k8s.v0.kube_api import KubeApiProvider, Request
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import SECRET_LABEL
from charms.gpu_k8s.v0.status import StatusError, on_error

logger = logging.getLogger(__name__)

# The peer application databag: what was granted and written last, under these keys.
# What the API server answers a request it will never take (bad request, invalid object,
# conflict with what exists): the consumer's alone, refused; anything else is the server's
REFUSED_GRANT = frozenset({400, 409, 422})
KUBE_API_KEY = "kube-api"  # {relation id: {app, namespace, fingerprint}} of kube-api grants
WORKER_GRANT_KEY = "worker-grant"  # the shared grant's fingerprint, or WORKER_GRANT_REMOVED
WORKER_GRANT_REMOVED = "removed"
CERT_SANS_KEY = "cert-sans"  # the certSANs last written to kubeadm-config


class Access:
    """Grants to consumers and workers, and the way in for the operator.

    `kube_api`: the kube-api endpoint; `model`: where the workers' secret is found and
    this unit's port opened; `ctx`: this unit; `kube`: the hook's API client.
    """

    def __init__(
        self,
        kube_api: KubeApiProvider,
        model: ops.Model,
        ctx: UnitContext,
        kube: Callable[[], Kube],
    ):
        self._kube_api = kube_api
        self._model = model
        self._ctx = ctx
        self._kube = kube
        # Blocked lines for the status: consumers that asked for a namespace they may not
        # have (another consumer's, or one the system or an operator made).
        self.blocked: list[str] = []

    def worker_kubeconfig(self, peers: Peers) -> str:
        """The shared workers' kubeconfig while a worker still uses it; "" once it is gone.

        Workers of this revision act as their kubelet and say so (`node-identity`); the
        registry keeps the units that did not (`registry.SHARED_GRANT_KEY`). While one is
        registered the ServiceAccount and its grant stand and its kubeconfig is published
        (granted again when changed); once none is, they are deleted, once (the mark is
        WORKER_GRANT_REMOVED), so no hook makes API calls for them afterwards. A worker of
        an earlier revision related later brings the grant back. Before the registry exists
        (the first hooks) nothing is decided: the grant stays.
        """
        bag = peers.app
        if registry.WORKERS_KEY in bag and not registry.Registry.load(bag).shared_grant:
            if bag.get(WORKER_GRANT_KEY) != WORKER_GRANT_REMOVED:
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

    def _consumer_grant(self, grant: rbac.Grant) -> tuple[str, str]:
        """(token, "") once `grant` is applied; ("", why) when it is this consumer's to fix.

        A namespace another holds, or a request the API server will never take, refuses
        this consumer alone and never holds up the others; an unwell API server raises.
        """
        try:
            return self.apply_grant(grant), ""
        except rbac.NamespaceTakenError as e:
            return "", str(e)
        except KubeError as e:
            if e.status not in REFUSED_GRANT:
                raise
            return "", f"the API server refused the grant of {grant.consumer}: {e.message}"

    def serve_kube_api(
        self, peers: Peers, provisioners: frozenset[str] = frozenset()
    ) -> list[str]:
        """Grant what each kube-api consumer asks for; revoke what departed consumers had.

        `provisioners`: the applications trusted with a storage provisioner's rules. A
        namespace belongs to the first consumer granted it: a later one asking for it is
        refused, with a Blocked line naming both (`blocked`). Returns notes for the status:
        the consumers whose request was refused.
        """
        bag = peers.app
        granted: dict[str, dict] = json.loads(bag.get(KUBE_API_KEY, "{}"))
        before = json.dumps(granted, sort_keys=True)
        seen = set()
        notes = []
        # Consumers run outside the cluster's nodes, without the local proxy: they get the
        # leader's API server, and a new address when leadership moves.
        endpoint = f"https://{self._ctx.api_server}"
        node_set = _node_set(registry.Registry.load(bag).nodes)
        for request in self._kube_api.requests(provisioners):
            key = str(request.relation.id)
            seen.add(key)
            previous = granted.get(key)
            request = self._first_come(request, granted, key)
            if request.error or request.request is None:
                if previous:
                    self._revoke(previous, request.relation.id)
                    del granted[key]
                self._kube_api.refuse(request.relation, request.error or "invalid request")
                notes.append(f"refused kube-api request of {request.app_name}")
                continue
            ask = request.request
            provisioner = request.app_name in provisioners
            # the Pod Security level is part of what was granted (its namespace's labels)
            level = "pod-security=baseline" if provisioner else "pod-security=restricted"
            fingerprint = kube_objects.fingerprint(ask.dump(), endpoint, level)
            answered = request.relation.data[self._model.app].get("kubeconfig-secret-id")
            if previous and previous["fingerprint"] == fingerprint and answered:
                self._kube_api.announce_nodes(request.relation, node_set)
                continue
            if previous and previous["namespace"] != ask.namespace:
                self._revoke(previous, None)
            grant = rbac.consumer_grant(
                request.app_name,
                ask.namespace,
                ask.rules,
                ask.cluster_rules,
                provisioner=provisioner,
            )
            token, problem = self._consumer_grant(grant)
            if problem:
                if previous:
                    self._revoke(previous, request.relation.id)
                    del granted[key]
                self._kube_api.refuse(request.relation, problem)
                self.blocked.append(f"kube-api: {problem}")
                continue
            text = rbac.kubeconfig(
                server=endpoint,
                ca_pem=bootstrap.read_ca(self._ctx.host) or "",
                token=token,
                namespace=ask.namespace,
                user=grant.service_account,
            )
            self._kube_api.grant(
                request.relation, endpoint, ask.namespace, grant.service_account, text, node_set
            )
            granted[key] = {
                "app": request.app_name,
                "namespace": ask.namespace,
                "fingerprint": fingerprint,
            }
            logger.info("granted %s access to namespace %s", request.app_name, ask.namespace)
        for key in [k for k in granted if k not in seen and not self._relation_active(k)]:
            self._revoke(granted.pop(key), int(key))
        after = json.dumps(granted, sort_keys=True)
        if after != before:
            bag[KUBE_API_KEY] = after
        return notes

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

    def _relation_active(self, key: str) -> bool:
        return any(str(r.id) == key for r in self._kube_api.relations)

    def _revoke(self, previous: dict, relation_id: int | None) -> None:
        grant = rbac.consumer_grant(previous["app"], previous["namespace"], [], [])
        rbac.remove(self._kube(), grant)
        if relation_id is not None:
            self._kube_api.remove(relation_id)

    def reach(self, config: Config, peers: Peers, *, leader: bool) -> None:
        """Open the API port for `juju expose`; keep the certificate valid for outside names.

        The leader keeps the cluster's certSANs (kubeadm-config, which joining nodes read)
        equal to `api-extra-sans` (`cert-sans` in the peer data says what it last wrote);
        each node renews its own certificate when it lacks one of those names or its own
        public address, then restarts its API server. Nothing is asked of the API server
        when nothing changed. `leader`: this unit reconciles as the leader (one that has
        not joined the running cluster yet does not).
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
        with on_error(ops.WaitingStatus, bootstrap.BootstrapError, message=retry):
            if not wanted <= bootstrap.apiserver_sans(self._ctx.host):
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


def _node_set(nodes: set[str]) -> str:
    """A digest of the worker nodes, for kube-api consumers that follow them."""
    return kube_objects.fingerprint(sorted(nodes))
