#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The kubernetes-control-plane charm: kubeadm control plane, join material, access.

One `_reconcile()` handles every event: read config and relation data, compute what
should be, change only what differs, and remember enough in the peer application
databag that an event with nothing new does no command and no API request.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bootstrap
import cluster_info
import device_plugin
import etcd
import node
import ops
import pydantic
import rbac
import registry
import rolling
import yaml
from literals import (
    ADMIN_SECRET_LABEL,
    API_PORT,
    CERTS_REUPLOAD_AFTER_SECONDS,
    CERTS_VALID_SECONDS,
    DRAIN_TIMEOUT_SECONDS,
    FIELD_MANAGER,
    FLANNEL_VERSION,
    KUBE_API,
    MEMBER_REUPLOAD_AFTER_SECONDS,
    MEMBER_TOKEN_LABEL,
    MEMBER_TOKEN_MARGIN_MINUTES,
    PEER_SECRET_LABEL,
    PEERS,
    POD_CIDR_PLACEHOLDER,
    TOKEN_ROTATION_MARGIN_HOURS,
    WORKER_NAMESPACE,
    WORKER_SERVICE_ACCOUNT,
    WORKERS,
)

from charms.gpu_k8s.v0 import api_proxy, kubeadm
from charms.gpu_k8s.v0.apt import AptError
from charms.gpu_k8s.v0.config import ActionParams, CharmConfig
from charms.gpu_k8s.v0.databag import write
from charms.gpu_k8s.v0.kube_api import KubeApiProvider
from charms.gpu_k8s.v0.kubeclient import KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import SECRET_LABEL, ClusterProvider
from charms.gpu_k8s.v0.system import CommandError, Host, SubprocessRunner

logger = logging.getLogger(__name__)

FLANNEL_MANIFEST = Path(__file__).parent.parent / "files" / "kube-flannel.yml"
_MIRROR = re.compile(r"^https?://[^\s/]+(/\S*)?$")
# A DNS name a certificate may carry: RFC 1123 labels, a wildcard first label allowed
# (kubeadm validates certSANs the same way: IsDNS1123Subdomain or its wildcard form).
_DNS_NAME = re.compile(
    r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)


def _split_names(text: str) -> list[str]:
    return [name for name in re.split(r"[\s,]+", text.strip()) if name]


def _san(name: str) -> str:
    """`name` if it is an IP address or a DNS name a certificate may list, else ValueError."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    if len(name) > 253 or not _DNS_NAME.match(name):
        raise ValueError(f"{name!r} is not a DNS name or IP address")
    return name


class Config(CharmConfig):
    """The charm's configuration."""

    kubernetes_version: str = kubeadm.DEFAULT_MINOR
    package_mirror: str = ""
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/12"
    join_token_ttl: int = pydantic.Field(default=24)
    api_extra_sans: str = ""
    mig_strategy: str = "none"
    gpu_time_slicing_replicas: int = 1

    @pydantic.field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if value not in kubeadm.RELEASES:
            raise ValueError(
                f"must be a supported minor version, one of {', '.join(kubeadm.RELEASES)}"
            )
        return value

    @pydantic.field_validator("package_mirror")
    @classmethod
    def _mirror(cls, value: str) -> str:
        if value and not _MIRROR.match(value):
            raise ValueError("must be empty or an http(s) URL serving pkgs.k8s.io's layout")
        return value

    @pydantic.field_validator("pod_cidr", "service_cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            ipaddress.ip_network(value, strict=True)
        except ValueError:
            raise ValueError(f"{value!r} is not a network such as 10.244.0.0/16") from None
        return value

    @pydantic.field_validator("api_extra_sans")
    @classmethod
    def _sans(cls, value: str) -> str:
        for name in _split_names(value):
            _san(name.lower())
        return value

    @property
    def extra_sans(self) -> list[str]:
        """The names and addresses of `api-extra-sans`, normalised and sorted."""
        return sorted({_san(name.lower()) for name in _split_names(self.api_extra_sans)})

    @pydantic.field_validator("mig_strategy")
    @classmethod
    def _mig(cls, value: str) -> str:
        if value not in device_plugin.MIG_STRATEGIES:
            raise ValueError("must be none, single or mixed")
        return value

    @pydantic.field_validator("gpu_time_slicing_replicas")
    @classmethod
    def _replicas(cls, value: int) -> int:
        if not 1 <= value <= 64:
            raise ValueError("must be between 1 (no sharing) and 64")
        return value

    @pydantic.field_validator("join_token_ttl")
    @classmethod
    def _ttl(cls, value: int) -> int:
        if value < 2:
            raise ValueError("must be at least 2 (hours)")
        return value

    @pydantic.field_validator("service_cidr")
    @classmethod
    def _disjoint(cls, value: str, info: pydantic.ValidationInfo) -> str:
        pod_cidr = info.data.get("pod_cidr")
        if pod_cidr:
            pods, services = ipaddress.ip_network(pod_cidr), ipaddress.ip_network(value)
            if pods.version == services.version and pods.overlaps(services):  # type: ignore[arg-type]
                raise ValueError(f"overlaps pod-cidr {pod_cidr}; choose disjoint networks")
        return value


class NoParams(ActionParams):
    """Actions without parameters."""


class KubeconfigParams(ActionParams):
    """get-kubeconfig: the API server the kubeconfig names (default: the public address)."""

    server: str = ""

    @pydantic.field_validator("server")
    @classmethod
    def _server(cls, value: str) -> str:
        if not value:
            return value
        match = re.fullmatch(
            r"(?:https://)?(\[[0-9a-fA-F:.]+\]|[^\s/:\[\]]+)(?::(\d{1,5}))?/?", value
        )
        if match is None or not 0 < int(match[2] or API_PORT) < 65536:
            raise ValueError(f"{value!r} must be https://host:port or a host name or address")
        return f"https://{match[1]}:{match[2] or API_PORT}"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _machine() -> Host:
    return Host(SubprocessRunner())


def _juju_public_address() -> str | None:
    """This unit's public address as Juju knows it (`unit-get public-address`), or None.

    ops has no call for it (network-get gives the bound addresses, which on AWS are the
    VPC's); canonical/k8s-operator asks the same hook tool for its external kubeconfig.
    """
    import shutil
    import subprocess

    tool = shutil.which("unit-get")
    if tool is None:
        return None
    try:
        done = subprocess.run(
            [tool, "public-address"], capture_output=True, text=True, check=True, timeout=60
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def _parse_time(text: str | None) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


class StatusError(Exception):
    """Stops the reconcile with a status: Blocked (operator must act) or Waiting."""

    def __init__(self, status: ops.StatusBase):
        super().__init__(status.message)
        self.status = status


@contextlib.contextmanager
def _status_of(*errors: type[Exception]) -> Iterator[None]:
    """Turn a workload module's error (with `.blocked`) into Blocked or Waiting."""
    try:
        yield
    except errors as e:
        status = ops.BlockedStatus if getattr(e, "blocked", False) else ops.WaitingStatus
        raise StatusError(status(str(e))) from None


class KubernetesControlPlaneCharm(ops.CharmBase):
    """Runs a kubeadm control plane and serves workers and kube-api consumers."""

    # Boundaries that tests replace: the machine, the API client factory and the clocks.
    host_factory = staticmethod(_machine)
    public_address = staticmethod(_juju_public_address)
    etcd_url = etcd.URL
    clock = staticmethod(_now)
    drain_clock = staticmethod(time.monotonic)
    drain_sleep = staticmethod(time.sleep)
    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        # status: [name, message] as the last reconcile found it (see _on_collect_status)
        self._stored.set_default(left_cluster=False, status=None)
        self.workers = ClusterProvider(self, WORKERS)
        self.kube_api = KubeApiProvider(self, KUBE_API)
        self._host: Host | None = None
        self._kube: Any = None
        self._problem: ops.StatusBase | None = None
        self._notes: list[str] = []
        on = self.on
        for event in (
            on.install,
            on.config_changed,
            on.upgrade_charm,
            on.update_status,
            on.leader_elected,
            on[PEERS].relation_created,
            on[PEERS].relation_changed,
            on[WORKERS].relation_joined,
            on[WORKERS].relation_changed,
            on[WORKERS].relation_departed,
            on[WORKERS].relation_broken,
            on[KUBE_API].relation_changed,
            on[KUBE_API].relation_broken,
        ):
            framework.observe(event, self._on_event)
        framework.observe(on.secret_expired, self._on_secret_expired)
        framework.observe(on[PEERS].relation_departed, self._on_peer_departed)
        framework.observe(on.secret_remove, self._on_secret_remove)
        framework.observe(on.collect_unit_status, self._on_collect_status)
        framework.observe(on.get_kubeconfig_action, self._on_get_kubeconfig)
        framework.observe(on.cluster_info_action, self._on_cluster_info)

    # -- boundaries ---------------------------------------------------------------------

    @property
    def host(self) -> Host:
        """The machine this unit runs on."""
        if self._host is None:
            self._host = type(self).host_factory()
        return self._host

    def _kube_client(self) -> Any:
        """An API client authenticated as cluster admin (created once per hook)."""
        if self._kube is None:
            from charms.gpu_k8s.v0.kubeclient import Kube

            text = bootstrap.read_admin_kubeconfig(self.host)
            if text is None:
                raise StatusError(ops.WaitingStatus("waiting for the admin kubeconfig"))
            self._kube = Kube.from_kubeconfig(text)
        return self._kube

    @property
    def _peers(self) -> ops.Relation | None:
        return self.model.get_relation(PEERS)

    def _address(self) -> str:
        binding = self.model.get_binding(PEERS)
        address = binding.network.ingress_address if binding else None
        if address is None:
            raise StatusError(ops.WaitingStatus("waiting for a network address"))
        return str(address)

    def _api_server(self) -> str:
        """This unit's API server as host:port (what the node proxies and consumers reach)."""
        return f"{bootstrap.endpoint_host(self._address())}:{API_PORT}"

    def _api_servers(self, peers: ops.Relation) -> list[str]:
        """API servers of the joined control-plane units, this unit's once it serves one.

        The leader about to bootstrap lists itself: its API server is what `kubeadm init`
        starts behind the proxy.
        """
        servers = {
            peers.data[u].get("api-server", "")
            for u in peers.units
            if peers.data[u].get("joined") == "true"
        }
        bootstrapping = self.unit.is_leader() and not peers.data[self.app].get("cluster-version")
        if self._joined() or bootstrapping:
            servers.add(self._api_server())
        return sorted(s for s in servers if s)

    def _configure_api_proxy(self, peers: ops.Relation) -> None:
        """Point this node's API proxy (the cluster's controlPlaneEndpoint) at the API servers."""
        servers = self._api_servers(peers)
        if not servers:
            raise StatusError(
                ops.WaitingStatus("waiting for a joined control-plane unit to publish its address")
            )
        try:
            api_proxy.configure(self.host, servers)
        except ValueError as e:
            raise StatusError(ops.WaitingStatus(f"cannot configure the API proxy: {e}")) from None
        except AptError as e:
            raise StatusError(
                ops.BlockedStatus(f"{e}; check the machine's Ubuntu archive")
            ) from None
        except CommandError as e:
            raise StatusError(
                ops.WaitingStatus(f"starting HAProxy: {e.last_line}; retrying on the next event")
            ) from None

    # -- event handling -----------------------------------------------------------------

    def _on_event(self, event: ops.EventBase) -> None:
        if self._stored.left_cluster:
            return  # see _on_collect_status
        try:
            self._reconcile(event)
        except StatusError as p:
            self._problem = p.status
        except KubeError as e:
            logger.warning("Kubernetes API request failed: %s", e)
            self._problem = ops.WaitingStatus(
                f"Kubernetes API error ({e.status} {e.reason}); retrying on the next event"
            )
        finally:
            if self._kube is not None:
                self._kube.close()
                self._kube = None
        status = self._problem or self._ready_status()
        self._stored.status = [status.name, status.message]

    def _on_secret_expired(self, event: ops.SecretExpiredEvent) -> None:
        """Rotate what expired; remove the expired revision once a newer one replaced it.

        Juju fires secret-expired until the owner removes the revision. The hook that
        rotates the token writes a new revision, which Juju commits when the hook ends;
        the next firing finds the expired revision replaced, moves this unit's own
        tracking to the latest one (owners track revisions since Juju 3.3.1,
        LP#2037120) and removes it. A revision nothing replaced yet (rotation not due or
        failed) stays, so the event comes back and rotation is retried.
        """
        replaced = event.secret.get_info().revision > event.revision
        self._on_event(event)
        if replaced:
            event.secret.get_content(refresh=True)
            event.remove_revision()
            logger.info("removed the expired revision %d of %s", event.revision, event.secret.id)

    def _on_peer_departed(self, event: ops.RelationDepartedEvent) -> None:
        if event.departing_unit == self.unit:
            self._leave()
        else:
            self._on_event(event)

    def _leave(self) -> None:
        """Take this unit out of the control plane when `juju remove-unit` removes it.

        Drain the node, `kubeadm reset` (which removes this etcd member, so the others keep
        quorum), then delete the Node through the other API servers, reached through this
        node's proxy, which goes last. Juju sends this only when another control-plane
        unit exists; on application removal nothing is reset, so etcd's data stays.
        An API error fails the hook, so Juju retries rather than leaving etcd half-shrunk.
        """
        if self._stored.left_cluster or not self._joined():
            return
        if self.app.planned_units() == 0:
            logger.warning("the application is being removed: etcd data stays on this machine")
            return
        node = kubeadm.node_name(self.host)
        kube = self._kube_client()
        try:
            registered = self._drain(kube, node, "stop with it")
            kubeadm.reset(self.host)
            bootstrap.forget_joined(self.host)
            if registered:
                kube.delete_node(node)
        finally:
            kube.close()
            self._kube = None
        api_proxy.remove(self.host)
        self._stored.left_cluster = True
        logger.info("left the control plane: node %s drained, reset and deleted", node)

    def _drain(self, kube: Any, node: str, fate: str) -> bool:
        """Cordon and drain this unit's node; False when it is not registered (nothing to do).

        Pods still there after `DRAIN_TIMEOUT_SECONDS` are named in a warning: they `fate`.
        """
        result = kube.drain(
            node, timeout=DRAIN_TIMEOUT_SECONDS, clock=self.drain_clock, sleep=self.drain_sleep
        )
        if result is None:
            return False
        if result.remaining:
            logger.warning("pods left on %s %s: %s", node, fate, " ".join(result.remaining))
        return True

    def _on_secret_remove(self, event: ops.SecretRemoveEvent) -> None:
        # Nobody tracks this old revision (rotated token, older kubeconfig) any more.
        event.remove_revision()

    def _reconcile(self, event: ops.EventBase) -> None:
        """Bring this unit to what config and relations ask for.

        `event` only narrows which worker databags need reading (see `_sync_workers`).
        """
        try:
            config = self.load_config(Config, errors="raise")
        except ValueError as e:  # as errors="blocked" words it, but kept past this hook
            raise StatusError(ops.BlockedStatus(f"Invalid config: {e}")) from None
        peers = self._peers
        if peers is None:
            raise StatusError(ops.WaitingStatus("waiting for the peers relation"))
        bag = peers.data[self.app]
        cluster_version = bag.get("cluster-version")
        if cluster_version:
            try:
                kubeadm.check_upgrade(cluster_version, config.kubernetes_version)
            except ValueError as e:
                raise StatusError(ops.BlockedStatus(str(e))) from None
        fixed = (
            ("pod-cidr", config.pod_cidr, bag.get("pod-cidr")),
            ("service-cidr", config.service_cidr, bag.get("service-cidr")),
        )
        for option, wanted, running in fixed:
            if running and wanted != running:
                raise StatusError(
                    ops.BlockedStatus(
                        f"{option} {wanted} differs from the running cluster's {running}; "
                        f"set it back to {running}"
                    )
                )
        with _status_of(node.NodeError):
            self._node.settle_abandoned_upgrade(
                config.kubernetes_version, cluster_version, config.package_mirror
            )
            self._node.install(self._node_minor(config, cluster_version), config.package_mirror)
        if self.unit.is_leader() and not (cluster_version and not self._joined()):
            self._reconcile_leader(config, peers, event)
        else:
            self._reconcile_member(config, peers)

    @property
    def _node(self) -> node.Node:
        return node.Node(self.host)

    def _installed(self) -> dict:
        """What was installed on this machine (see `node.Node.installed`)."""
        return self._node.installed()

    def _node_minor(self, config: Config, cluster_version: str | None) -> str:
        """The minor this node runs: a joined node keeps its own until it upgrades."""
        return self._node.minor(self._joined(), cluster_version or config.kubernetes_version)

    def _upgrade_node(self, config: Config, minor: str, *, first: bool) -> None:
        """Upgrade this node to `minor` (see `node.Node.upgrade`), draining it for kubelet."""
        name = kubeadm.node_name(self.host)
        with _status_of(node.NodeError):
            self._node.upgrade(
                minor,
                config.package_mirror,
                first=first,
                drain=lambda: self._drain(self._kube_client(), name, "restart with kubelet"),
                uncordon=lambda: self._kube_client().uncordon(name),
            )

    def _joined(self) -> bool:
        return bootstrap.is_bootstrapped(self.host)

    # -- leader -------------------------------------------------------------------------

    def _reconcile_leader(self, config: Config, peers: ops.Relation, event: ops.EventBase) -> None:
        bag = peers.data[self.app]
        self._configure_api_proxy(peers)
        if not self._joined():
            self._bootstrap(config, peers)
        elif not bag.get("join-secret-id"):
            self._recover_join_material(config, peers)
        self._mark_member(peers)
        join = self._join_secret()
        content = join.get_content(refresh=True)
        token = self._rotate_token_if_due(config, bag, join, content)
        self._reupload_certs_if_needed(bag, content["certificate-key"], peers)
        self._apply_cni(config, bag)
        control_plane_done = self._upgrade_control_plane(config, peers)
        self._prune_etcd(peers, event)
        added = self._sync_workers(bag, event)
        self._observe_nodes(peers, event, added)
        self._publish_to_workers(config, peers, token, control_plane_done)
        self._apply_device_plugin(config, bag)
        self._serve_kube_api(bag)
        self._reach(config, peers, leader=True)

    def _bootstrap(self, config: Config, peers: ops.Relation) -> None:
        address = self._address()
        spec = bootstrap.InitSpec(
            node_name=kubeadm.node_name(self.host),
            advertise_address=address,
            control_plane_endpoint=api_proxy.ENDPOINT,
            kubernetes_version="v" + kubeadm.RELEASES[config.kubernetes_version].version,
            pod_cidr=config.pod_cidr,
            service_cidr=config.service_cidr,
            # this node's public address too: its first certificate needs no renewal
            cert_sans=tuple(sorted({*config.extra_sans, *filter(None, [self.public_address()])})),
        )
        token = bootstrap.generate_token()
        key = bootstrap.generate_certificate_key()
        text = bootstrap.render_init_config(
            spec, token=token, ttl_hours=config.join_token_ttl, certificate_key=key
        )
        logger.info("bootstrapping the cluster with kubeadm init")
        try:
            bootstrap.init(self.host, text)
        except bootstrap.BootstrapError as e:
            raise StatusError(ops.WaitingStatus(f"{e}; retrying on the next event")) from None
        self._record_cluster(config, peers, token, key)
        logger.info("bootstrapped Kubernetes %s at %s", spec.kubernetes_version, address)

    def _recover_join_material(self, config: Config, peers: ops.Relation) -> None:
        """Make new join material when kubeadm init ran but its material was never recorded."""
        key = bootstrap.generate_certificate_key()
        try:
            token = bootstrap.create_token(self.host, config.join_token_ttl)
            bootstrap.upload_certs(self.host, key)
        except bootstrap.BootstrapError as e:
            raise StatusError(ops.WaitingStatus(f"{e}; retrying on the next event")) from None
        self._record_cluster(config, peers, token, key)
        logger.info("recorded new join material for the running cluster")

    def _record_cluster(self, config: Config, peers: ops.Relation, token: str, key: str) -> None:
        now = type(self).clock()
        secret = self._store_join_secret({"token": token, "certificate-key": key})
        ca = bootstrap.read_ca(self.host) or ""
        peers.data[self.app].update(
            {
                "endpoint": api_proxy.ENDPOINT,
                "ca-cert-hash": kubeadm.ca_cert_hash(ca),
                "join-secret-id": secret.id or secret.get_info().id,
                "cluster-version": config.kubernetes_version,
                "pod-cidr": config.pod_cidr,
                "service-cidr": config.service_cidr,
                "token-expires": bootstrap.token_expiry(now, config.join_token_ttl).isoformat(),
                "certs-uploaded-at": now.isoformat(),
            }
        )

    def _store_join_secret(self, content: dict[str, str]) -> ops.Secret:
        try:
            secret = self.model.get_secret(label=PEER_SECRET_LABEL)
            secret.set_content(content)
            return secret
        except ops.SecretNotFoundError:
            return self.app.add_secret(
                content, label=PEER_SECRET_LABEL, description="control-plane join material"
            )

    def _join_secret(self) -> ops.Secret:
        try:
            return self.model.get_secret(label=PEER_SECRET_LABEL)
        except ops.SecretNotFoundError:
            raise StatusError(
                ops.BlockedStatus(
                    "control-plane join secret is missing; remove this unit and add a new one"
                )
            ) from None

    def _rotate_token_if_due(
        self, config: Config, bag: ops.RelationDataContent, secret: ops.Secret, content: dict
    ) -> str:
        now = type(self).clock()
        expires = _parse_time(bag.get("token-expires"))
        margin = datetime.timedelta(hours=TOKEN_ROTATION_MARGIN_HOURS)
        if expires is not None and now < expires - margin:
            return content["token"]
        old = content["token"]
        try:
            new = bootstrap.create_token(self.host, config.join_token_ttl)
        except bootstrap.BootstrapError as e:
            raise StatusError(ops.WaitingStatus(f"{e}; retrying on the next event")) from None
        secret.set_content({**content, "token": new})
        bag["token-expires"] = bootstrap.token_expiry(now, config.join_token_ttl).isoformat()
        try:
            bootstrap.delete_token(self.host, old)
        except bootstrap.BootstrapError:
            logger.warning("could not delete the previous bootstrap token; it expires by itself")
        logger.info("rotated the bootstrap token (valid %d h)", config.join_token_ttl)
        return new

    def _reupload_certs_if_needed(
        self, bag: ops.RelationDataContent, key: str, peers: ops.Relation
    ) -> None:
        waiting = [u for u in peers.units if peers.data[u].get("joined") != "true"]
        if not waiting:
            return
        uploaded = _parse_time(bag.get("certs-uploaded-at"))
        now = type(self).clock()
        if uploaded and (now - uploaded).total_seconds() < CERTS_REUPLOAD_AFTER_SECONDS:
            return
        try:
            bootstrap.upload_certs(self.host, key)
        except bootstrap.BootstrapError as e:
            raise StatusError(ops.WaitingStatus(f"{e}; retrying on the next event")) from None
        bag["certs-uploaded-at"] = now.isoformat()
        logger.info("re-uploaded control-plane certificates for %d joining units", len(waiting))

    def _apply_cni(self, config: Config, bag: ops.RelationDataContent) -> None:
        want = f"flannel {FLANNEL_VERSION} {config.pod_cidr}"
        if bag.get("cni") == want:
            return
        text = FLANNEL_MANIFEST.read_text().replace(POD_CIDR_PLACEHOLDER, config.pod_cidr)
        kube = self._kube_client()
        for manifest in yaml.safe_load_all(text):
            if manifest:
                kube.apply(manifest, field_manager=FIELD_MANAGER)
        bag["cni"] = want
        logger.info("applied flannel %s for pod network %s", FLANNEL_VERSION, config.pod_cidr)

    def _apply_device_plugin(self, config: Config, bag: ops.RelationDataContent) -> None:
        """Run the NVIDIA device plugin while any worker reports GPUs; remove it after."""
        gpus = bool(registry.Registry.load(bag).gpu_workers)
        want = (
            f"{device_plugin.VERSION} {config.mig_strategy} {config.gpu_time_slicing_replicas}"
            if gpus
            else ""
        )
        if bag.get("device-plugin", "") == want:
            return
        kube = self._kube_client()
        objects = device_plugin.manifests(config.mig_strategy, config.gpu_time_slicing_replicas)
        if want:
            for manifest in objects:
                kube.apply(manifest, field_manager=FIELD_MANAGER)
            bag["device-plugin"] = want
            logger.info("applied the NVIDIA device plugin %s (%s)", device_plugin.VERSION, want)
            return
        for manifest in reversed(objects):
            meta = manifest["metadata"]
            kube.delete(
                manifest["apiVersion"], manifest["kind"], meta["name"], meta.get("namespace")
            )
        del bag["device-plugin"]
        logger.info("removed the NVIDIA device plugin: no worker reports GPUs any more")

    def _upgrade_control_plane(self, config: Config, peers: ops.Relation) -> bool:
        """Move the control plane to `kubernetes-version`, one unit at a time.

        The leader goes first (`kubeadm upgrade apply`) once every unit runs the cluster's
        minor; then the turn passes through the others (`kubeadm upgrade node`), each
        taking it when the peer data names it. Returns True when every control-plane
        unit runs the cluster's minor, which is when workers may start.
        """
        bag = peers.data[self.app]
        running = bag["cluster-version"]
        wanted = config.kubernetes_version
        # A joined unit that does not say its minor is taken as behind: it gets a turn.
        versions = self._member_versions(peers, self._node_minor(config, running), "")
        if wanted != running:
            behind = rolling.pending(versions, running)
            if behind:
                self._notes.append(f"upgrade to v{wanted} waits for {', '.join(behind)}")
                return False
            self._upgrade_node(config, wanted, first=True)
            bag["cluster-version"] = running = versions[self.unit.name] = wanted
            logger.info("the cluster runs Kubernetes %s; the other nodes follow in turn", wanted)
        holder = rolling.pass_turn(bag, "upgrade-turn", rolling.pending(versions, running))
        if holder == self.unit.name:  # the leader changed in the middle of an upgrade
            self._upgrade_node(config, running, first=False)
            versions[self.unit.name] = running
            holder = rolling.pass_turn(bag, "upgrade-turn", rolling.pending(versions, running))
        self._mark_member(peers)
        return holder is None

    def _member_versions(
        self, peers: ops.Relation, mine: str | None, unknown: str | None
    ) -> dict[str, str | None]:
        """The minor of each joined control-plane unit, this one's being `mine`."""
        members = {u.name: peers.data[u] for u in peers.units}
        return rolling.member_versions(members, self.unit.name, mine, unknown)

    @staticmethod
    def _worker_turn(bag: ops.RelationDataContent, control_plane_done: bool) -> str | None:
        """The worker unit that may upgrade now, once the control plane has finished."""
        versions = registry.Registry.load(bag).versions()
        waiting = rolling.pending(versions, bag["cluster-version"]) if control_plane_done else []
        return rolling.pass_turn(bag, "worker-upgrade-turn", waiting)

    def _publish_to_workers(
        self, config: Config, peers: ops.Relation, token: str, control_plane_done: bool
    ) -> None:
        if not self.workers.relations:
            return
        bag = peers.data[self.app]
        expires = _parse_time(bag.get("token-expires"))
        expire = (
            expires - datetime.timedelta(hours=TOKEN_ROTATION_MARGIN_HOURS) if expires else None
        )
        kubeconfig = self._worker_kubeconfig(bag)
        endpoint = f"https://{bag['endpoint']}"
        version = bag["cluster-version"]
        if not control_plane_done:  # mid-upgrade: no kubelet newer than any API server
            mine = self._installed().get("kubernetes")
            version = rolling.lowest(self._member_versions(peers, mine, None), version)
        self.workers.publish(
            endpoint,
            self._api_servers(peers),
            bag["ca-cert-hash"],
            version,
            token,
            kubeconfig,
            expire=expire,
            upgrade_turn=self._worker_turn(bag, control_plane_done),
        )

    def _worker_kubeconfig(self, bag: ops.RelationDataContent) -> str:
        grant = rbac.worker_grant()
        fingerprint = _fingerprint(rbac.manifests(grant), bag["endpoint"])
        if bag.get("worker-grant") == fingerprint:
            try:
                current = self.model.get_secret(label=SECRET_LABEL).peek_content()
                if current.get("kubeconfig"):
                    return current["kubeconfig"]
            except ops.SecretNotFoundError:
                pass
        token = self._apply_grant(grant)
        text = rbac.kubeconfig(
            server=f"https://{bag['endpoint']}",
            ca_pem=bootstrap.read_ca(self.host) or "",
            token=token,
            namespace=WORKER_NAMESPACE,
            user=WORKER_SERVICE_ACCOUNT,
        )
        bag["worker-grant"] = fingerprint
        return text

    def _apply_grant(self, grant: rbac.Grant) -> str:
        try:
            return rbac.apply(self._kube_client(), grant)
        except rbac.TokenNotReadyError:
            raise StatusError(
                ops.WaitingStatus(f"waiting for the token of {grant.service_account}")
            ) from None

    def _sync_workers(self, bag: ops.RelationDataContent, event: ops.EventBase) -> set[str]:
        """Keep the worker registry in the peer databag current; remove departed nodes.

        A hook about one worker unit reads that unit's databag only; all of them are read
        when there is no registry yet, when leadership moved, or after an upgrade.
        Returns the node names that are new to the registry.
        """
        before = registry.Registry.load(bag) if registry.WORKERS_KEY in bag else None
        if before is None or isinstance(event, (ops.LeaderElectedEvent, ops.UpgradeCharmEvent)):
            workers = self.workers.workers()
            now = registry.Registry.rebuild(workers, self.workers.problems(), self._relation_of)
        else:
            now = registry.Registry.load(bag)
            if isinstance(event, ops.RelationEvent) and event.relation.name == WORKERS:
                self._update_registry(event, now)
        pending, left = registry.departed_nodes(bag, before, now)
        if left:
            left = self._remove_drained_nodes(left)
        registry.save_pending(bag, pending, left)
        now.save(bag)
        return now.nodes - (before.nodes if before is not None else set())

    def _observe_nodes(self, peers: ops.Relation, event: ops.EventBase, added: set[str]) -> None:
        """Record which expected Nodes the API reports not Ready or does not have.

        One list of every Node on the events that come rarely (update-status, a new
        leader, a charm upgrade, the first time); otherwise one GET per node name that is
        new (`added` workers; the control-plane nodes when a peer changed), so a hook
        about one worker costs at most one request however large the cluster.
        """
        bag = peers.data[self.app]
        planes = self._control_plane_nodes(peers)
        expected = planes | registry.Registry.load(bag).nodes
        health = cluster_info.NodeHealth.load(bag)
        kube = self._kube_client()
        if health is None or isinstance(event, _FULL_NODE_CHECK):
            health = cluster_info.NodeHealth.from_nodes(expected, kube.list("v1", "Node"))
        else:
            names = set(added)
            if isinstance(event, ops.RelationEvent) and event.relation.name == PEERS:
                names |= planes
            for name in sorted(names & expected):
                health.observe(name, kube.get("v1", "Node", name))
            health.keep_only(expected)
        health.save(bag)

    def _control_plane_nodes(self, peers: ops.Relation) -> set[str]:
        """Node names of the joined control-plane units, this one's included once joined."""
        names = {
            peers.data[u]["node-name"]
            for u in peers.units
            if peers.data[u].get("joined") == "true" and peers.data[u].get("node-name")
        }
        if self._joined():
            names.add(kubeadm.node_name(self.host))
        return names

    def _update_registry(self, event: ops.RelationEvent, known: registry.Registry) -> None:
        """Apply one workers relation event to the registry, reading one databag at most."""
        if isinstance(event, ops.RelationBrokenEvent):
            known.forget(known.units_of_relation(event.relation.id))
            return
        if isinstance(event, ops.RelationDepartedEvent):
            known.forget([event.departing_unit.name] if event.departing_unit else [])
            return
        if event.unit is None:
            return
        known.forget([event.unit.name])
        info, problem = self.workers.read_worker(event.relation, event.unit)
        known.record(event.unit.name, info, problem, event.relation.id)

    def _relation_of(self, unit_name: str) -> int:
        for relation in self.workers.relations:
            if any(u.name == unit_name for u in relation.units):
                return relation.id
        return -1

    def _remove_drained_nodes(self, pending: set[str]) -> set[str]:
        kube = self._kube_client()
        left = set()
        for name in sorted(pending):
            node = kube.get("v1", "Node", name)
            if node is None:
                continue
            pods = kube.list("v1", "Pod", field_selector=f"spec.nodeName={name}")
            ok, why = cluster_info.removable(node, pods)
            if ok:
                kube.delete_node(name)
                logger.info("deleted Node %s of a departed worker (%s)", name, why)
            else:
                logger.info("keeping Node %s of a departed worker for now: %s", name, why)
                left.add(name)
        return left

    def _serve_kube_api(self, bag: ops.RelationDataContent) -> None:
        granted: dict[str, dict] = json.loads(bag.get("kube-api", "{}"))
        before = json.dumps(granted, sort_keys=True)
        seen = set()
        # Consumers run outside the cluster's nodes, without the local proxy: they get the
        # leader's API server, and a new address when leadership moves.
        endpoint = f"https://{self._api_server()}"
        for request in self.kube_api.requests():
            key = str(request.relation.id)
            seen.add(key)
            previous = granted.get(key)
            if request.error or request.request is None:
                if previous:
                    self._revoke(previous, request.relation.id)
                    del granted[key]
                self.kube_api.refuse(request.relation, request.error or "invalid request")
                self._notes.append(f"refused kube-api request of {request.app_name}")
                continue
            ask = request.request
            fingerprint = _fingerprint(ask.dump(), endpoint)
            answered = request.relation.data[self.app].get("kubeconfig-secret-id")
            if previous and previous["fingerprint"] == fingerprint and answered:
                continue
            if previous and previous["namespace"] != ask.namespace:
                self._revoke(previous, None)
            grant = rbac.consumer_grant(
                request.app_name, ask.namespace, ask.rules, ask.cluster_rules
            )
            token = self._apply_grant(grant)
            text = rbac.kubeconfig(
                server=endpoint,
                ca_pem=bootstrap.read_ca(self.host) or "",
                token=token,
                namespace=ask.namespace,
                user=grant.service_account,
            )
            self.kube_api.grant(
                request.relation, endpoint, ask.namespace, grant.service_account, text
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
        return any(str(r.id) == key for r in self.kube_api.relations)

    def _revoke(self, previous: dict, relation_id: int | None) -> None:
        grant = rbac.consumer_grant(previous["app"], previous["namespace"], [], [])
        rbac.remove(self._kube_client(), grant)
        if relation_id is not None:
            self.kube_api.remove(relation_id)

    # -- etcd membership ------------------------------------------------------------------

    def _prune_etcd(self, peers: ops.Relation, event: ops.EventBase) -> None:
        """Remove the etcd members that departed control-plane units left behind.

        `kubeadm reset` on a leaving unit removes its member, or only warns when it cannot.
        The leader remembers the joined control-plane nodes (`control-plane-nodes`); one
        that is no longer among them departed, and a member by its name is removed here.
        Members of no unit at all are reported, never removed: a unit joining right now
        has its member before its databag says so. What could not be done is kept in
        `etcd-problems` for every unit's status and retried on later events.
        """
        bag = peers.data[self.app]
        current = self._control_plane_nodes(peers)
        known = set(json.loads(bag.get("control-plane-nodes", "[]")))
        problems: dict[str, str] = json.loads(bag.get("etcd-problems", "{}"))
        gone = (known - current) | {n for n in problems if n not in current}
        if gone or isinstance(event, ops.UpdateStatusEvent):
            problems = self._check_etcd(current, gone)
        write(
            bag,
            {
                "control-plane-nodes": json.dumps(sorted(current)),
                **({"etcd-problems": json.dumps(problems, sort_keys=True)} if problems else {}),
            },
            remove=["etcd-problems"],
        )

    def _check_etcd(self, current: set[str], gone: set[str]) -> dict[str, str]:
        """{node name: problem} after removing the members of `gone` nodes."""
        client = etcd.Etcd(self.host, type(self).etcd_url)
        try:
            members = client.members()
        except etcd.EtcdError as e:
            return dict.fromkeys(gone, f"etcd members of departed units not checked: {e}")
        problems = {}
        for member in members:
            if member.name in gone:
                try:
                    client.remove(member)
                    logger.info("removed etcd member %s of a departed unit", member.name)
                except etcd.EtcdError as e:
                    problems[member.name] = (
                        f"etcd member {member.name} of a departed unit is still there: {e}; "
                        "retrying"
                    )
            elif member.name and member.name not in current and not member.learner:
                problems[member.name] = (
                    f"etcd member {member.name} belongs to no unit: if its machine is gone, "
                    f"remove it with `etcdctl member remove {int(member.id):x}`"
                )
        return problems

    # -- reaching the API from outside -------------------------------------------------

    def _reach(self, config: Config, peers: ops.Relation, *, leader: bool) -> None:
        """Open the API port for `juju expose`; keep the certificate valid for outside names.

        The leader keeps the cluster's certSANs (kubeadm-config, which joining nodes read)
        equal to `api-extra-sans` (`cert-sans` in the peer data says what it last wrote);
        each node renews its own certificate when it lacks one of those names or its own
        public address, then restarts its API server. Nothing is asked of the API server
        when nothing changed.
        """
        self.unit.set_ports(API_PORT)
        bag = peers.data[self.app]
        sans = bootstrap.cluster_cert_sans(api_proxy.ENDPOINT, config.extra_sans)
        if leader and bag.get("cert-sans") != json.dumps(sans):
            kube = self._kube_client()
            cluster = self._cluster_configuration(kube)
            if (cluster.get("apiServer") or {}).get("certSANs") != sans:
                server = {**(cluster.get("apiServer") or {}), "certSANs": sans}
                text = yaml.safe_dump({**cluster, "apiServer": server})
                patch = {"data": {"ClusterConfiguration": text}}
                kube.patch("v1", "ConfigMap", "kubeadm-config", patch, namespace="kube-system")
                logger.info("the cluster's API server certificates name %s", ", ".join(sans))
            bag["cert-sans"] = json.dumps(sans)
        public = self.public_address()
        wanted = {*config.extra_sans, *([public] if public else [])}
        try:
            if not wanted <= bootstrap.apiserver_sans(self.host):
                bootstrap.renew_apiserver_cert(
                    self.host,
                    self._cluster_configuration(self._kube_client()),
                    node_name=kubeadm.node_name(self.host),
                    advertise_address=self._address(),
                    extra=sorted(wanted),
                )
            bootstrap.restart_apiserver_if_pending(self.host)
        except bootstrap.BootstrapError as e:
            raise StatusError(ops.WaitingStatus(f"{e}; retrying on the next event")) from None

    @staticmethod
    def _cluster_configuration(kube: Any) -> dict:
        """The cluster's ClusterConfiguration, as kubeadm stored it in kubeadm-config."""
        cm = kube.get("v1", "ConfigMap", "kubeadm-config", namespace="kube-system")
        if cm is None:
            raise StatusError(ops.WaitingStatus("waiting for kubeadm's kubeadm-config ConfigMap"))
        return yaml.safe_load((cm.get("data") or {}).get("ClusterConfiguration") or "{}") or {}

    # -- other units --------------------------------------------------------------------

    def _mark_member(self, peers: ops.Relation) -> None:
        mine = {
            "joined": "true",
            "node-name": kubeadm.node_name(self.host),
            "api-server": self._api_server(),
        }
        minor = self._installed().get("kubernetes")
        if minor:
            mine["kubernetes-version"] = minor
        write(peers.data[self.unit], mine)

    def _reconcile_member(self, config: Config, peers: ops.Relation) -> None:
        bag = peers.data[self.app]
        if self._joined():
            self._configure_api_proxy(peers)
            running = bag.get("cluster-version")
            mine = self._node_minor(config, running)
            if running and mine != running and bag.get("upgrade-turn") == self.unit.name:
                self._upgrade_node(config, running, first=False)
            self._mark_member(peers)
            self._help_joining_units(config, peers)
            self._reach(config, peers, leader=False)
            return
        if not bag.get("join-secret-id") or not bag.get("endpoint"):
            raise StatusError(ops.WaitingStatus("waiting for the leader to bootstrap the cluster"))
        uploaded = self._newest(peers, "certs-uploaded-at")
        fresh = datetime.timedelta(seconds=CERTS_VALID_SECONDS - 600)
        if uploaded is None or type(self).clock() - uploaded[0] > fresh:
            if peers.data[self.unit].get("joined") != "false":
                peers.data[self.unit]["joined"] = "false"  # asks for a re-upload
            raise StatusError(
                ops.WaitingStatus(
                    "waiting for a joined unit to re-upload control-plane certificates"
                )
            )
        try:
            content = self.model.get_secret(id=bag["join-secret-id"]).get_content(refresh=True)
            material = kubeadm.JoinMaterial(
                endpoint=bag["endpoint"],
                ca_cert_hash=bag.get("ca-cert-hash", ""),
                token=self._join_token(peers, content.get("token", "")),
                certificate_key=content.get("certificate-key", ""),
            )
        except (ops.SecretNotFoundError, ops.ModelError):
            raise StatusError(ops.WaitingStatus("waiting for access to the join secret")) from None
        except ValueError as e:
            raise StatusError(ops.WaitingStatus(f"join material from the leader: {e}")) from None
        self._configure_api_proxy(peers)
        logger.info(
            "joining the control plane through the local API proxy at %s", material.endpoint
        )
        try:
            kubeadm.join(
                self.host,
                material,
                node_name=kubeadm.node_name(self.host),
                labels={},
                control_plane=True,
                advertise_address=self._address(),
            )
        except kubeadm.KubeadmError as e:
            raise StatusError(ops.WaitingStatus(f"{e}; retrying on the next event")) from None
        bootstrap.mark_joined(self.host, "join")
        self._configure_api_proxy(peers)  # this node's own API server now answers too
        self._mark_member(peers)
        logger.info("joined the control plane")
        self._reach(config, peers, leader=False)  # its public address is not in the cert yet

    def _newest(
        self, peers: ops.Relation, key: str
    ) -> tuple[datetime.datetime, ops.Unit | None] | None:
        """The latest time under `key` in the app databag (unit None) or a unit's databag."""
        found = [(_parse_time(peers.data[self.app].get(key)), None)]
        found += [(_parse_time(peers.data[u].get(key)), u) for u in {self.unit, *peers.units}]
        known = [(when, unit) for when, unit in found if when is not None]
        return max(known, key=lambda item: item[0]) if known else None

    def _join_token(self, peers: ops.Relation, leader_token: str) -> str:
        """The leader's bootstrap token while it is valid, else the newest a member minted."""
        newest = self._newest(peers, "token-expires")
        if newest is None or newest[1] is None:
            return leader_token
        secret_id = peers.data[newest[1]].get("join-token-secret-id", "")
        return self.model.get_secret(id=secret_id).get_content(refresh=True).get("token", "")

    def _help_joining_units(self, config: Config, peers: ops.Relation) -> None:
        """Re-upload certificates and mint a token for joining units the leader lets down.

        Only the leader uploads certificates and rotates the token, and only once it has
        joined itself. A leader that has not (leadership moved to a unit still joining)
        would wait for itself for ever, so the joined unit with the lowest number steps in
        when units wait and the leader let the upload or the token lapse. What it does
        goes to its own unit databag: the upload time, and the ID of a unit secret holding
        the token, granted to the peers.
        """
        waiting = [u for u in peers.units if peers.data[u].get("joined") != "true"]
        number = int(self.unit.name.rsplit("/", 1)[1])
        lower = [
            u
            for u in peers.units
            if peers.data[u].get("joined") == "true" and int(u.name.rsplit("/", 1)[1]) < number
        ]
        if not waiting or lower:
            return
        now = type(self).clock()
        mine = peers.data[self.unit]
        uploaded = self._newest(peers, "certs-uploaded-at")
        try:
            if (
                uploaded is None
                or (now - uploaded[0]).total_seconds() >= MEMBER_REUPLOAD_AFTER_SECONDS
            ):
                key = self._join_secret().get_content(refresh=True)["certificate-key"]
                bootstrap.upload_certs(self.host, key)
                mine["certs-uploaded-at"] = now.isoformat()
                logger.info("re-uploaded control-plane certificates in the leader's stead")
            expires = self._newest(peers, "token-expires")
            margin = datetime.timedelta(minutes=MEMBER_TOKEN_MARGIN_MINUTES)
            if expires is None or now >= expires[0] - margin:
                token = bootstrap.create_token(self.host, config.join_token_ttl)
                secret = self._store_member_token(token, peers)
                mine["join-token-secret-id"] = secret.id or secret.get_info().id
                mine["token-expires"] = bootstrap.token_expiry(
                    now, config.join_token_ttl
                ).isoformat()
                logger.info("minted a bootstrap token for joining units in the leader's stead")
        except bootstrap.BootstrapError as e:
            raise StatusError(ops.WaitingStatus(f"{e}; retrying on the next event")) from None

    def _store_member_token(self, token: str, peers: ops.Relation) -> ops.Secret:
        content = {"token": token}
        try:
            secret = self.model.get_secret(label=MEMBER_TOKEN_LABEL)
            secret.set_content(content)
        except ops.SecretNotFoundError:
            secret = self.unit.add_secret(
                content, label=MEMBER_TOKEN_LABEL, description="bootstrap token for joining peers"
            )
        secret.grant(peers)
        return secret

    # -- status -------------------------------------------------------------------------

    def _nodes_behind(self, peers: ops.Relation, version: str, known: registry.Registry) -> int:
        """Nodes (control plane and workers) that still run an older minor than `version`."""
        planes = self._member_versions(peers, self._installed().get("kubernetes"), None)
        return len(rolling.pending(planes, version)) + len(
            rolling.pending(known.versions(), version)
        )

    def _ready_status(self) -> ops.StatusBase:
        """`Ready: v1.36, 3 control-plane, 5 workers (2 with 8 GPUs: ...)`, from what the API said.

        Nodes count once the API reported them Ready (see `_observe_nodes`); GPUs count on
        Ready workers; not Ready and unregistered nodes are named after the counts.
        """
        peers = self._peers
        if peers is None or not self._joined():
            return ops.WaitingStatus("waiting to join the cluster")
        bag = peers.data[self.app]
        version = bag.get("cluster-version", "?")
        health = cluster_info.NodeHealth.load(bag)
        if health is None:
            return ops.ActiveStatus(f"Ready: v{version}; node readiness not checked yet")
        known = registry.Registry.load(bag)
        planes = len(health.ready(self._control_plane_nodes(peers)))
        workers = [w for w in known.workers.values() if health.ready([w.node])]
        message = f"Ready: v{version}, {planes} control-plane, {len(workers)} workers"
        gpu_workers = [w for w in workers if w.gpus]
        if gpu_workers:
            models = cluster_info.gpu_totals([w.models for w in gpu_workers])
            total = sum(w.gpus for w in gpu_workers)
            message += f" ({len(gpu_workers)} with {total} GPUs{': ' + models if models else ''})"
        message += health.problems()
        behind = self._nodes_behind(peers, version, known)
        if behind:
            message += f"; upgrading to v{version}: {behind} node(s) to go"
        pending = registry.pending_count(bag)
        if pending:
            message += f"; {pending} departed node(s) pending removal"
        etcd_problems = json.loads(bag.get("etcd-problems", "{}"))
        message += "".join(f"; {p}" for p in sorted(set(etcd_problems.values())))
        skipped = sorted(known.problems.values())
        if skipped:
            message += f"; ignoring {len(skipped)} worker(s) with invalid data: {skipped[0]}"
        message += "".join(f"; {note}" for note in self._notes)
        return ops.ActiveStatus(message)

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        """Report what the last reconcile found, in every hook (actions included).

        Hooks that do not reconcile (actions, secret-remove) must not replace a Blocked
        status with a fresh Ready one, so the status is computed at the end of each
        reconcile and kept in StoredState.
        """
        if self._stored.left_cluster:
            event.add_status(ops.MaintenanceStatus("left the cluster; this unit is being removed"))
        elif self._stored.status:
            event.add_status(ops.StatusBase.from_name(*self._stored.status))
        else:
            event.add_status(ops.WaitingStatus("waiting to join the cluster"))

    # -- actions ------------------------------------------------------------------------

    def _on_get_kubeconfig(self, event: ops.ActionEvent) -> None:
        params = event.load_params(KubeconfigParams, errors="fail")
        text = bootstrap.read_admin_kubeconfig(self.host)
        if text is None or not self._joined():
            event.fail("this unit has not joined the cluster yet; retry once it is Ready")
            return
        public = self.public_address()
        try:
            default = f"https://{bootstrap.endpoint_host(public or self._address())}:{API_PORT}"
        except StatusError as e:
            event.fail(f"cannot name this unit's API server: {e}")
            return
        server = params.server or default
        text = bootstrap.with_server(text, server)
        try:
            secret = self.model.get_secret(label=ADMIN_SECRET_LABEL)
            if secret.peek_content().get("kubeconfig") != text:
                secret.set_content({"kubeconfig": text})
        except ops.SecretNotFoundError:
            secret = self.unit.add_secret(
                {"kubeconfig": text},
                label=ADMIN_SECRET_LABEL,
                description="cluster-admin kubeconfig",
            )
        secret_id = secret.id or secret.get_info().id
        event.set_results(
            {
                "secret-id": secret_id,
                "server": server,
                "command": (
                    f"juju show-secret --reveal {secret_id} --format json"
                    " | jq -r '.[].content.Data.kubeconfig' > kubeconfig"
                ),
                "note": (
                    f"from outside the VPC, run `juju expose {self.app.name}` once: it opens "
                    f"port {API_PORT} of the control-plane machines to the internet (or to "
                    "the CIDRs given with --to-cidrs)"
                ),
            }
        )

    def _on_cluster_info(self, event: ops.ActionEvent) -> None:
        event.load_params(NoParams, errors="fail")
        try:
            nodes = cluster_info.summarize_all(self._kube_client().list("v1", "Node"))
        except StatusError:
            event.fail("this unit has not joined the cluster yet; retry once it is Ready")
            return
        except KubeError as e:
            event.fail(f"cannot list nodes: {e}")
            return
        finally:
            if self._kube is not None:
                self._kube.close()
                self._kube = None
        ready = sum(1 for n in nodes if n.ready)
        models = cluster_info.gpu_totals([{n.gpu_product: n.gpus} for n in nodes if n.gpu_product])
        event.set_results(
            {
                "summary": f"{len(nodes)} nodes, {ready} ready, "
                f"{sum(n.gpus for n in nodes)} GPUs allocatable",
                "gpus-by-model": models or "none",
                "nodes": json.dumps([n.as_dict() for n in nodes], sort_keys=True),
            }
        )


# Events after which the leader lists every Node to see which are Ready.
_FULL_NODE_CHECK = (
    ops.UpdateStatusEvent,
    ops.LeaderElectedEvent,
    ops.UpgradeCharmEvent,
    ops.InstallEvent,
    ops.ConfigChangedEvent,
)


def _fingerprint(data: Any, *extra: str) -> str:
    text = json.dumps(data, sort_keys=True) + "".join(extra)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


if __name__ == "__main__":  # pragma: nocover
    ops.main(KubernetesControlPlaneCharm)
