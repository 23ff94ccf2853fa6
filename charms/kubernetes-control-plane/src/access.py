# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Who reaches the Kubernetes API, and with what: consumers, workers, the operator.

- `kube-api` consumers (efs-storage, tensorflow) get a namespace, a ServiceAccount with
  the rules they asked for, and a kubeconfig in a Juju secret granted to their relation;
- workers get one ServiceAccount to label, drain and validate their own node;
- the operator reaches the API from outside once the application is exposed: port 6443
  is opened, and every API server's certificate names `api-extra-sans` and the unit's
  public address (the cluster's certSANs in kubeadm-config, each node's own
  certificate renewed when it lacks one, then its API server restarted).

Ops code (relations, secrets, ports); what it applies is in `rbac.py` and `bootstrap.py`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

import bootstrap
import ops
import rbac
import registry
import yaml
from literals import API_PORT, WORKER_NAMESPACE, WORKER_SERVICE_ACCOUNT
from settings import Config

from charms.gpu_k8s.v0 import api_proxy, kube_objects, kubeadm
from charms.gpu_k8s.v0.kubernetes_cluster import SECRET_LABEL
from charms.gpu_k8s.v0.status import StatusError, on_error

if TYPE_CHECKING:
    from charm import KubernetesControlPlaneCharm

logger = logging.getLogger(__name__)


class Access:
    """Grants to consumers and workers, and the way in for the operator."""

    def __init__(self, charm: KubernetesControlPlaneCharm):
        self.charm = charm

    def worker_kubeconfig(self, bag: ops.RelationDataContent) -> str:
        """The workers' kubeconfig (one ServiceAccount for all), granted again when changed."""
        grant = rbac.worker_grant()
        fingerprint = kube_objects.fingerprint(rbac.manifests(grant), bag["endpoint"])
        if bag.get("worker-grant") == fingerprint:
            try:
                current = self.charm.model.get_secret(label=SECRET_LABEL).peek_content()
                if current.get("kubeconfig"):
                    return current["kubeconfig"]
            except ops.SecretNotFoundError:
                pass
        token = self.apply_grant(grant)
        text = rbac.kubeconfig(
            server=f"https://{bag['endpoint']}",
            ca_pem=bootstrap.read_ca(self.charm.host) or "",
            token=token,
            namespace=WORKER_NAMESPACE,
            user=WORKER_SERVICE_ACCOUNT,
        )
        bag["worker-grant"] = fingerprint
        return text

    def apply_grant(self, grant: rbac.Grant) -> str:
        """Apply a grant's RBAC objects; the ServiceAccount's token."""
        try:
            return rbac.apply(self.charm._kube_client(), grant)
        except rbac.TokenNotReadyError:
            raise StatusError.waiting(
                f"waiting for the token of {grant.service_account}"
            ) from None

    def serve_kube_api(self, bag: ops.RelationDataContent) -> None:
        """Grant what each kube-api consumer asks for; revoke what departed consumers had."""
        granted: dict[str, dict] = json.loads(bag.get("kube-api", "{}"))
        before = json.dumps(granted, sort_keys=True)
        seen = set()
        # Consumers run outside the cluster's nodes, without the local proxy: they get the
        # leader's API server, and a new address when leadership moves.
        endpoint = f"https://{self.charm._api_server()}"
        node_set = _node_set(registry.Registry.load(bag).nodes)
        for request in self.charm.kube_api.requests():
            key = str(request.relation.id)
            seen.add(key)
            previous = granted.get(key)
            if request.error or request.request is None:
                if previous:
                    self._revoke(previous, request.relation.id)
                    del granted[key]
                self.charm.kube_api.refuse(request.relation, request.error or "invalid request")
                self.charm._notes.append(f"refused kube-api request of {request.app_name}")
                continue
            ask = request.request
            fingerprint = kube_objects.fingerprint(ask.dump(), endpoint)
            answered = request.relation.data[self.charm.app].get("kubeconfig-secret-id")
            if previous and previous["fingerprint"] == fingerprint and answered:
                self.charm.kube_api.announce_nodes(request.relation, node_set)
                continue
            if previous and previous["namespace"] != ask.namespace:
                self._revoke(previous, None)
            grant = rbac.consumer_grant(
                request.app_name, ask.namespace, ask.rules, ask.cluster_rules
            )
            token = self.apply_grant(grant)
            text = rbac.kubeconfig(
                server=endpoint,
                ca_pem=bootstrap.read_ca(self.charm.host) or "",
                token=token,
                namespace=ask.namespace,
                user=grant.service_account,
            )
            self.charm.kube_api.grant(
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
            bag["kube-api"] = after

    def _relation_active(self, key: str) -> bool:
        return any(str(r.id) == key for r in self.charm.kube_api.relations)

    def _revoke(self, previous: dict, relation_id: int | None) -> None:
        grant = rbac.consumer_grant(previous["app"], previous["namespace"], [], [])
        rbac.remove(self.charm._kube_client(), grant)
        if relation_id is not None:
            self.charm.kube_api.remove(relation_id)

    def reach(self, config: Config, peers: ops.Relation, *, leader: bool) -> None:
        """Open the API port for `juju expose`; keep the certificate valid for outside names.

        The leader keeps the cluster's certSANs (kubeadm-config, which joining nodes read)
        equal to `api-extra-sans` (`cert-sans` in the peer data says what it last wrote);
        each node renews its own certificate when it lacks one of those names or its own
        public address, then restarts its API server. Nothing is asked of the API server
        when nothing changed.
        """
        self.charm.unit.set_ports(API_PORT)
        bag = peers.data[self.charm.app]
        sans = bootstrap.cluster_cert_sans(api_proxy.ENDPOINT, config.extra_sans)
        if leader and bag.get("cert-sans") != json.dumps(sans):
            kube = self.charm._kube_client()
            cluster = self._cluster_configuration(kube)
            if (cluster.get("apiServer") or {}).get("certSANs") != sans:
                server = {**(cluster.get("apiServer") or {}), "certSANs": sans}
                text = yaml.safe_dump({**cluster, "apiServer": server})
                patch = {"data": {"ClusterConfiguration": text}}
                kube.patch("v1", "ConfigMap", "kubeadm-config", patch, namespace="kube-system")
                logger.info("the cluster's API server certificates name %s", ", ".join(sans))
            bag["cert-sans"] = json.dumps(sans)
        public = self.charm.public_address()
        wanted = {*config.extra_sans, *([public] if public else [])}
        retry = "{error}; retrying on the next event"
        with on_error(ops.WaitingStatus, bootstrap.BootstrapError, message=retry):
            if not wanted <= bootstrap.apiserver_sans(self.charm.host):
                bootstrap.renew_apiserver_cert(
                    self.charm.host,
                    self._cluster_configuration(self.charm._kube_client()),
                    node_name=kubeadm.node_name(self.charm.host),
                    advertise_address=self.charm._address(),
                    extra=sorted(wanted),
                )

    @staticmethod
    def _cluster_configuration(kube: Any) -> dict:
        """The cluster's ClusterConfiguration, as kubeadm stored it in kubeadm-config."""
        cm = kube.get("v1", "ConfigMap", "kubeadm-config", namespace="kube-system")
        if cm is None:
            raise StatusError.waiting("waiting for kubeadm's kubeadm-config ConfigMap")
        return yaml.safe_load((cm.get("data") or {}).get("ClusterConfiguration") or "{}") or {}


def _node_set(nodes: set[str]) -> str:
    """A digest of the worker nodes, for kube-api consumers that follow them."""
    return hashlib.sha256(json.dumps(sorted(nodes)).encode()).hexdigest()[:16]
