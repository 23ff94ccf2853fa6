# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Bootstrapping the control plane with kubeadm: init, tokens, certificate uploads.

No ops imports: functions take a `Host` and plain data. Secret values (bootstrap tokens,
the certificate key) are passed in and out but never logged.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import json
import logging
import secrets
import string
from collections.abc import Sequence

import image_registry
import yaml
from literals import (
    ADMIN_CONF,
    ADMISSION_PLUGINS,
    API_PORT,
    APISERVER_CERT,
    APISERVER_KEY,
    CA_CERT,
    ETCD_MANIFEST,
    INIT_CONFIG,
    JOINED_MARKER,
    KUBEADM,
)

from charms.gpu_k8s.v0 import kubeadm
from charms.gpu_k8s.v0.system import CommandError, Host

logger = logging.getLogger(__name__)

_ALPHABET = string.ascii_lowercase + string.digits
UPLOAD_CONFIG = "/run/gpu-k8s/kubeadm-upload-certs.yaml"
CERTS_CONFIG = "/run/gpu-k8s/kubeadm-certs.yaml"
# kubeadm commands that only talk to the API server (tokens, uploaded certificates):
# kubeadm's own API calls retry for up to its defaults (kubernetesAPICall: 1m in
# kubeadm v1beta4 Timeouts), so twice that is a hang, not a slow server (review N16).
KUBEADM_API_TIMEOUT = 120


class BootstrapError(Exception):
    """A kubeadm step failed; the message carries kubeadm's last error line."""


@dataclasses.dataclass(frozen=True)
class InitSpec:
    """What `kubeadm init` needs to know."""

    node_name: str
    advertise_address: str
    control_plane_endpoint: str
    kubernetes_version: str
    pod_cidr: str
    service_cidr: str
    cert_sans: tuple[str, ...] = ()
    # `image-registry`: kubeadm pulls every image it runs from there ("" = upstream).
    image_registry: str = ""


def generate_token() -> str:
    """A new random bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}`."""
    head = "".join(secrets.choice(_ALPHABET) for _ in range(6))
    tail = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    return f"{head}.{tail}"


def generate_certificate_key() -> str:
    """A new key for encrypting uploaded control-plane certificates (32 bytes, hex)."""
    return secrets.token_hex(32)


def endpoint_host(address: str) -> str:
    """`address` as it goes into `host:port` (IPv6 addresses in brackets)."""
    try:
        if ipaddress.ip_address(address).version == 6:
            return f"[{address}]"
    except ValueError:
        pass
    return address


def render_init_config(spec: InitSpec, *, token: str, ttl_hours: int, certificate_key: str) -> str:
    """Return the kubeadm v1beta4 InitConfiguration + ClusterConfiguration documents.

    The first bootstrap token and the certificate key go into the file because kubeadm
    refuses `--certificate-key` together with `--config`; the file is mode 0600 and is
    removed once `kubeadm init` succeeded.
    """
    init = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "InitConfiguration",
        "bootstrapTokens": [
            {
                "token": token,
                "ttl": f"{ttl_hours}h0m0s",
                "description": "gpu-k8s join token",
                "usages": ["signing", "authentication"],
                "groups": ["system:bootstrappers:kubeadm:default-node-token"],
            }
        ],
        "certificateKey": certificate_key,
        "localAPIEndpoint": {"advertiseAddress": spec.advertise_address, "bindPort": API_PORT},
        "nodeRegistration": {"name": spec.node_name, "criSocket": kubeadm.CRI_SOCKET},
    }
    cluster = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "kubernetesVersion": spec.kubernetes_version,
        "controlPlaneEndpoint": spec.control_plane_endpoint,
        "networking": {"podSubnet": spec.pod_cidr, "serviceSubnet": spec.service_cidr},
        "apiServer": {
            # The control-plane endpoint is each node's local API proxy; clients check
            # the API server's certificate for that address (kubeadm adds the endpoint's
            # host too, this states it).
            "certSANs": cluster_cert_sans(spec.control_plane_endpoint, spec.cert_sans),
            "extraArgs": [
                {"name": "enable-admission-plugins", "value": ",".join(ADMISSION_PLUGINS)}
            ],
        },
        **image_registry.cluster_fields(spec.image_registry),
    }
    return yaml.safe_dump_all([init, cluster], sort_keys=False)


def cluster_cert_sans(control_plane_endpoint: str, extra: Sequence[str]) -> list[str]:
    """The ClusterConfiguration's certSANs: the node-local endpoint, then the extra names."""
    return [control_plane_endpoint.rsplit(":", 1)[0], *sorted(set(extra))]


def apiserver_sans(host: Host) -> set[str]:
    """The names and addresses this node's API server certificate is valid for."""
    from cryptography import x509

    pem = host.read(APISERVER_CERT)
    if pem is None:
        return set()
    cert = x509.load_pem_x509_certificate(pem.encode())
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(name.value) for name in names}


def renew_apiserver_cert(
    host: Host, cluster: dict, *, node_name: str, advertise_address: str, extra: Sequence[str]
) -> None:
    """Issue this node a new API server certificate that also names `extra`.

    `cluster` is the cluster's ClusterConfiguration (the kubeadm-config ConfigMap), so the
    certificate keeps what kubeadm puts in it (the first Service IP of the real service
    network, the control-plane endpoint, the cluster's certSANs). `kubeadm init phase
    certs apiserver` refuses an existing certificate that lacks a wanted name (phases/
    certs `validateCertificateWithConfig`: "certificate apiserver is invalid"), so the old
    pair is moved aside first and put back if kubeadm fails (kubernetes/website
    kubeadm-reconfigure.md renews it this way). No restart follows: kube-apiserver watches
    its serving certificate files and serves a new pair as soon as it is written
    (k8s.io/apiserver `SecureServingOptions.ApplyTo` ->
    `dynamiccertificates.NewDynamicServingContentFromFiles`), so no API server stops,
    and units renewing at the same time take nothing down.

    Raises:
        BootstrapError: kubeadm failed (the old certificate is back in place).
    """
    config = {
        **cluster,
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "apiServer": {
            **(cluster.get("apiServer") or {}),
            "certSANs": sorted(
                {*((cluster.get("apiServer") or {}).get("certSANs") or []), *extra}
            ),
        },
    }
    init = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "InitConfiguration",
        "localAPIEndpoint": {"advertiseAddress": advertise_address, "bindPort": API_PORT},
        "nodeRegistration": {"name": node_name, "criSocket": kubeadm.CRI_SOCKET},
    }
    host.write(CERTS_CONFIG, yaml.safe_dump_all([init, config], sort_keys=False), mode=0o600)
    moved = []
    try:
        for path in (APISERVER_CERT, APISERVER_KEY):
            if host.path(path).exists():
                host.path(path).replace(host.path(path + ".old"))
                moved.append(path)
        host.run(
            KUBEADM, "init", "phase", "certs", "apiserver", "--config", CERTS_CONFIG, timeout=120
        )
    except CommandError as e:
        for path in moved:
            host.path(path + ".old").replace(host.path(path))
        raise BootstrapError(f"renewing the API server certificate: {e.last_line}") from None
    finally:
        host.path(CERTS_CONFIG).unlink(missing_ok=True)
    for path in moved:
        host.path(path + ".old").unlink(missing_ok=True)
    record_extra_sans(host, extra)
    logger.info("renewed the API server certificate for %s", ", ".join(sorted(extra)))


# The names beyond kubeadm's own that this node's API server certificate was last issued
# for (`api-extra-sans` and the unit's public address): a name dropped from them is only
# seen by comparing with what was issued, since the certificate's other names are
# kubeadm's (certs/certlist.go GetAPIServerAltNames: node name, kubernetes.default...,
# the first Service IP, the advertise address, the control-plane endpoint, certSANs).
EXTRA_SANS_RECORD = "/var/lib/kubernetes-control-plane/apiserver-extra-sans.json"


def issued_extra_sans(host: Host) -> set[str] | None:
    """The extra names of the last certificate issued here, or None before any record."""
    text = host.read(EXTRA_SANS_RECORD)
    return set(json.loads(text)) if text else None


def record_extra_sans(host: Host, names: Sequence[str] | set[str]) -> None:
    """Remember `names` as the extra names this node's certificate was issued for."""
    host.write(EXTRA_SANS_RECORD, json.dumps(sorted(names)))


# Written before `kubeadm join --control-plane` runs and removed only when it exited 0
# (`mark_joined`): while it is there, what a failed join left (kubelet.conf, admin.conf,
# etcd's manifest: a join can fail in control-plane-join or wait-control-plane, after
# all three) never counts as joined, and the next join resets first (review deploy.md N5).
JOIN_PENDING = "/var/lib/kubernetes-control-plane/join-pending"


def is_bootstrapped(host: Host) -> bool:
    """Whether this machine is a control-plane member: `kubeadm init` or `join` exited 0.

    A unit set up by a charm revision without the marker counts when kubeadm got as far
    as the etcd member (its static pod manifest is written in the last join phase); the
    marker is written for it then. Never while a join of this revision is pending.
    """
    if host.path(JOINED_MARKER).exists():
        return True
    if join_pending(host):
        return False
    if host.path(ADMIN_CONF).exists() and host.path(ETCD_MANIFEST).exists():
        logger.info("a control plane set up by an earlier charm revision: marking it joined")
        mark_joined(host, "found")
        return True
    return False


def mark_joined(host: Host, how: str) -> None:
    """Record that kubeadm made this machine a control-plane member (`how`: init, join)."""
    host.write(JOINED_MARKER, f"{how}\n")
    host.path(JOIN_PENDING).unlink(missing_ok=True)


def join_pending(host: Host) -> bool:
    """Whether a `kubeadm join` of this machine started and never exited 0."""
    return host.path(JOIN_PENDING).exists()


def begin_join(host: Host) -> None:
    """Before `kubeadm join --control-plane`: reset what an earlier failed one left.

    `kubeadm.join` resets a failed control-plane join at once, but that reset can fail
    too (and `kubeadm.join` then takes a left kubelet.conf for a finished join). So while
    a join is pending, the reset must succeed before kubeadm joins again.

    Raises:
        kubeadm.KubeadmError: that reset failed (the node stays unjoined).
    """
    if join_pending(host):
        kubeadm.reset(host)
    host.write(JOIN_PENDING, "join\n")


def forget_joined(host: Host) -> None:
    """This machine left the control plane (after `kubeadm reset`)."""
    host.path(JOINED_MARKER).unlink(missing_ok=True)


def init(host: Host, config: str) -> None:
    """Run `kubeadm init` with `config` (does nothing when already bootstrapped).

    Raises:
        BootstrapError: kubeadm failed (nothing is left half-configured by us: kubeadm
            is reset so that the next attempt starts clean).
    """
    if is_bootstrapped(host):
        return
    host.write(INIT_CONFIG, config, mode=0o600)
    try:
        host.run(
            KUBEADM,
            "init",
            "--config",
            INIT_CONFIG,
            "--upload-certs",
            "--skip-token-print",
            # kubeadm prints the key otherwise (phases/init/uploadcerts.go): out of any log
            "--skip-certificate-key-print",
            timeout=900,
        )
    except CommandError as e:
        try:
            host.run(KUBEADM, "reset", "--force", timeout=300)
        except CommandError:
            logger.warning("kubeadm reset after a failed init failed too")
        raise BootstrapError(f"kubeadm init failed: {e.last_line}") from None
    finally:
        host.path(INIT_CONFIG).unlink(missing_ok=True)
    mark_joined(host, "init")


def create_token(host: Host, ttl_hours: int) -> str:
    """Create a bootstrap token valid for `ttl_hours` and return it."""
    try:
        out = host.run(
            KUBEADM,
            "token",
            "create",
            "--ttl",
            f"{ttl_hours}h",
            "--description",
            "gpu-k8s join token",
            "--kubeconfig",
            ADMIN_CONF,
            timeout=KUBEADM_API_TIMEOUT,
        )
    except CommandError as e:
        raise BootstrapError(f"kubeadm token create failed: {e.last_line}") from None
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if not lines or not kubeadm.TOKEN_PATTERN.match(lines[-1]):
        raise BootstrapError("kubeadm token create printed no token")
    return lines[-1]


def upgrade_apply(host: Host, version: str) -> None:
    """`kubeadm upgrade apply v<version>`: the cluster's configuration and this node.

    Run on one control-plane node, with kubeadm of `version` installed; kubeadm checks
    the cluster's health and the version skew itself and refuses what it cannot do.
    """
    try:
        host.run(KUBEADM, "upgrade", "apply", f"v{version}", "--yes", timeout=1200)
    except CommandError as e:
        raise BootstrapError(f"kubeadm upgrade apply failed: {e.last_line}") from None


def delete_token(host: Host, token: str) -> None:
    """Delete a bootstrap token by its public ID; an unknown token is not an error."""
    token_id = token.split(".", 1)[0]
    try:
        host.run(
            KUBEADM,
            "token",
            "delete",
            token_id,
            "--kubeconfig",
            ADMIN_CONF,
            timeout=KUBEADM_API_TIMEOUT,
        )
    except CommandError as e:
        if "not found" not in e.stderr:
            raise BootstrapError(f"kubeadm token delete failed: {e.last_line}") from None


def upload_certs(host: Host, certificate_key: str) -> None:
    """(Re-)upload the control-plane certificates encrypted with `certificate_key`.

    The key goes to kubeadm in a 0600 InitConfiguration (`certificateKey`), never on the
    command line, where any local user could read it in /proc while kubeadm runs; the
    phase takes it from `--config` as well as from `--certificate-key`. A
    ClusterConfiguration names the version this node runs (its kubelet package): without
    one kubeadm defaults `kubernetesVersion` to "stable-1" (cmd/kubeadm/app/apis/kubeadm/
    v1beta4 defaults.go DefaultKubernetesVersion) and resolves it by fetching
    dl.k8s.io/release/stable-1.txt, which an air-gapped site waits out (review deploy.md
    N11). `--skip-certificate-key-print` keeps the key out of kubeadm's output.
    """
    init = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "InitConfiguration",
        "certificateKey": certificate_key,
        "nodeRegistration": {"criSocket": kubeadm.CRI_SOCKET},
    }
    docs = [init]
    version = kubeadm.installed_release(host)
    if version:
        cluster = {"kubernetesVersion": f"v{version}"}
        docs.append({"apiVersion": init["apiVersion"], "kind": "ClusterConfiguration", **cluster})
    text = yaml.safe_dump_all(docs, sort_keys=False)
    host.write(UPLOAD_CONFIG, text, mode=0o600)
    try:
        host.run(
            KUBEADM,
            "init",
            "phase",
            "upload-certs",
            "--upload-certs",
            "--config",
            UPLOAD_CONFIG,
            "--skip-certificate-key-print",
            "--kubeconfig",
            ADMIN_CONF,
            timeout=KUBEADM_API_TIMEOUT,
        )
    except CommandError as e:
        raise BootstrapError(f"kubeadm upload-certs failed: {e.last_line}") from None
    finally:
        host.path(UPLOAD_CONFIG).unlink(missing_ok=True)


def read_ca(host: Host) -> str | None:
    """The cluster CA certificate (PEM), or None before bootstrap."""
    return host.read(CA_CERT)


def read_admin_kubeconfig(host: Host) -> str | None:
    """The admin kubeconfig kubeadm wrote, or None before bootstrap/join."""
    return host.read(ADMIN_CONF)


def with_server(kubeconfig: str, server: str) -> str:
    """`kubeconfig` with every cluster's server set to `server`.

    kubeadm's kubeconfigs point at the control-plane endpoint, the node-local proxy;
    a copy handed to someone off the node must name a reachable API server instead.
    """
    config = yaml.safe_load(kubeconfig)
    for cluster in config.get("clusters") or []:
        cluster["cluster"]["server"] = server
    return yaml.safe_dump(config, sort_keys=False)


def token_expiry(now: datetime.datetime, ttl_hours: int) -> datetime.datetime:
    """When a token created at `now` with `ttl_hours` expires."""
    return now + datetime.timedelta(hours=ttl_hours)
