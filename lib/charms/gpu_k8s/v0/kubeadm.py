# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""kubeadm, kubelet and kubectl from pkgs.k8s.io (or a mirror), and joining a node.

Versions are pinned per Kubernetes minor in `RELEASES`, including those of cri-tools and
kubernetes-cni, which come from the same repository. Join material holds a bootstrap
token (and for control-plane peers a certificate key): it goes to kubeadm only inside a
0600 config file under /run that is removed right after, never on a command line, and
`JoinMaterial`'s repr and every error raised here leave it out.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import logging
import re
from collections.abc import Mapping, Sequence

import yaml

from charms.gpu_k8s.v0 import apt
from charms.gpu_k8s.v0.system import SYSTEMCTL, CommandError, Host

LIBID = "f766a8bf76ef4d8f9f47cf1d41d1f95c"
LIBAPI = 0
LIBPATCH = 15

logger = logging.getLogger(__name__)

_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")


@dataclasses.dataclass(frozen=True)
class Release:
    """The upstream versions pinned for one Kubernetes minor, installed as `X.Y.Z-*`.

    pkgs.k8s.io keeps every version it published but may publish a patch under another
    package revision than -1.1 (1.36.2 exists only as 1.36.2-2.1, kubernetes/release#4156),
    so the pin is the upstream version and apt takes the newest revision of it.

    Attributes:
        kubernetes: kubeadm, kubelet and kubectl, e.g. "1.36.5".
        cri_tools: cri-tools (crictl).
        cni: kubernetes-cni (the CNI plugins in /opt/cni/bin).

    Raises:
        ValueError: a version is not `X.Y.Z`.
    """

    kubernetes: str
    cri_tools: str
    cni: str

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not _VERSION.fullmatch(value):
                raise ValueError(f"{field.name} version {value!r} must look like 1.36.5")

    @property
    def version(self) -> str:
        """The upstream Kubernetes version ("1.36.5")."""
        return self.kubernetes

    def packages(self, *, with_kubectl: bool) -> dict[str, str]:
        """Return {package: apt version glob} for every package `install` puts on a node."""
        packages = {"kubeadm": self.kubernetes, "kubelet": self.kubernetes}
        if with_kubectl:
            packages["kubectl"] = self.kubernetes
        packages["cri-tools"] = self.cri_tools
        packages["kubernetes-cni"] = self.cni
        return {name: f"{version}-*" for name, version in packages.items()}


# Supported minors only (kubernetes.io/releases: each minor gets patches for about 14
# months). 1.32, 1.33 and 1.34 reached end of life on 2026-02-28, 2026-06-28 and
# 2026-10-27 and were removed on 2026-11-22; a cluster running one of them upgrades with
# an earlier charm revision first. 1.35's end of life is 2027-02-28.
#
# kubernetes: the newest patch of each minor found on 2026-11-21/22: 1.36.5 (kubernetes.io
# /releases/1.36 lists it for 2026-09-15; public installs of 1.36.5-1.1), 1.37.1 (2026-09-15),
# 1.35.9. Whether newer patches were published since mid-September was not verified; a
# new patch needs a new charm revision (this table), a re-published revision does not.
#
# cri_tools and cni: what each minor's repository on pkgs.k8s.io serves next to kubeadm
# (public apt logs and package listings, 2026-11-21; cri-tools release issues announce each
# publication): 1.35: cri-tools 1.35.0, kubernetes-cni 1.8.0; 1.36: cri-tools 1.36.0,
# kubernetes-cni 1.9.1; 1.37: kubernetes-cni 1.9.1 (a 1.37.0 node), cri-tools 1.37.0 NOT
# confirmed: it follows the <minor>.0 every earlier repository got and the upstream
# cri-tools v1.37.0 release (2026-09-01).
# Depends the pins must satisfy (kubernetes/release cmd/krel/templates/latest/metadata.yaml):
# kubelet >= 1.28 needs kubernetes-cni >= 1.2.0; kubeadm debs built before 2026-04-24 need
# cri-tools >= 1.30.0.
RELEASES = {
    "1.35": Release(kubernetes="1.35.9", cri_tools="1.35.0", cni="1.8.0"),
    "1.36": Release(kubernetes="1.36.5", cri_tools="1.36.0", cni="1.9.1"),
    "1.37": Release(kubernetes="1.37.1", cri_tools="1.37.0", cni="1.9.1"),
}
DEFAULT_MINOR = "1.36"
UPSTREAM = "https://pkgs.k8s.io"
SOURCE_NAME = "kubernetes"
KEYRING = "/etc/apt/keyrings/kubernetes-apt-keyring.gpg"
KUBEADM = "/usr/bin/kubeadm"
HOSTNAME = "/usr/bin/hostname"
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
JOIN_CONFIG = "/run/gpu-k8s/kubeadm-join.yaml"
CNI_CONFIG_DIR = "/etc/cni/net.d"
CRI_SOCKET = "unix:///run/containerd/containerd.sock"
ADMIN_CONF = "/etc/kubernetes/admin.conf"
# kubelet's serving certificate when kubeadm leaves serverTLSBootstrap off (its default):
# kubelet finds no tlsCertFile/tlsPrivateKeyFile in its configuration, takes these two
# files in its --cert-dir (/var/lib/kubelet/pki), and only when it cannot read them
# writes a new self-signed pair (kubernetes/kubernetes 001332b0 cmd/kubelet/app/server.go
# InitializeTLS: certutil.CanReadCertAndKey, then certutil.GenerateSelfSignedCertKey).
# That pair (client-go util/cert/cert.go GenerateSelfSignedCertKeyWithFixtures, 04791b49)
# is a one-off CA "<host>-ca@<unix time>" and the serving certificate "<host>@<unix
# time>" it signed, both valid from an hour ago for 365 days, in one PEM (serving
# certificate first, then the CA). kubelet makes a pair only as it starts, but while it
# runs it serves whatever pair these files hold: InitializeTLS sets TLSOptions.CertFile
# and KeyFile to them even for the pair it made, and NewMainKubelet (pkg/kubelet/
# kubelet.go) then serves through NewKubeletServerCertificateDynamicFileManager (pkg/
# kubelet/certificate/kubelet.go), which re-reads them on every fsnotify event and at
# least once a minute (k8s.io/apiserver dynamiccertificates FileRefreshDuration) and keeps
# the last pair whose key matches its certificate. That is feature gate
# ReloadKubeletServerCertificateFile, beta and on by default since 1.31 and still in
# 1.36 (the 1.36 component reference: "ReloadKubeletServerCertificateFile=true|false
# (BETA - default=true)"); every minor in RELEASES has it. So the charms renew the pair
# by writing a new one of kubelet's own shape, with no kubelet restart (a restart can
# fail running GPU pods: see `rotate_kubelet_serving_certificate`).
KUBELET_SERVING_CERT = "/var/lib/kubelet/pki/kubelet.crt"
KUBELET_SERVING_KEY = "/var/lib/kubelet/pki/kubelet.key"
# Rotated this many days before it expires: the default of the control plane's
# certificate-renewal-days, fixed here because the worker has no such option and one
# kubelet is like another; a month of update-status hooks leaves room for every retry.
KUBELET_SERVING_RENEWAL_DAYS = 30
_SELF_SIGNED_LEAF = re.compile(r"^(?P<host>.+)@[0-9]+$")
_SELF_SIGNED_CA = re.compile(r"^(?P<host>.+)-ca@[0-9]+$")
# Files a failed `kubeadm join` may leave behind; their presence blocks a retry. A
# control-plane join writes pki/ and admin.conf in its control-plane-prepare phase, before
# kubelet-start and the etcd member join (cmd/kubeadm/app/cmd/join.go).
_PARTIAL_JOIN = (
    "/etc/kubernetes/bootstrap-kubelet.conf",
    "/etc/kubernetes/pki/ca.crt",
    ADMIN_CONF,
    KUBELET_CONF,
)

# The shape of a kubeadm bootstrap token.
TOKEN_PATTERN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
_CA_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_CERT_KEY = re.compile(r"^[0-9a-f]{64}$")
_ENDPOINT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$")


class KubeadmError(Exception):
    """kubeadm failed; the message carries its last error line with secrets removed."""


@dataclasses.dataclass(frozen=True)
class JoinMaterial:
    """What a node needs to join: API endpoint, CA pin, bootstrap token, cert key.

    Raises:
        ValueError: a field is malformed; the message never repeats a secret value.
    """

    endpoint: str
    ca_cert_hash: str
    token: str = dataclasses.field(repr=False)
    certificate_key: str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        if not _ENDPOINT.match(self.endpoint):
            raise ValueError(f"join endpoint {self.endpoint!r} must be host:port")
        if not 0 < int(self.endpoint.rsplit(":", 1)[1]) < 65536:
            raise ValueError(f"join endpoint {self.endpoint!r} has an invalid port")
        if not _CA_HASH.match(self.ca_cert_hash):
            raise ValueError("CA cert hash must be sha256: followed by 64 hex digits")
        if not TOKEN_PATTERN.match(self.token):
            raise ValueError("bootstrap token is malformed (expected [a-z0-9]{6}.[a-z0-9]{16})")
        if self.certificate_key is not None and not _CERT_KEY.match(self.certificate_key):
            raise ValueError("certificate key is malformed (expected 64 hex digits)")


def check_minor(minor: str) -> str:
    """Return `minor` when this library has a pinned release for it, else raise ValueError."""
    if minor not in RELEASES:
        supported = ", ".join(RELEASES)
        raise ValueError(f"Kubernetes version {minor!r} is not supported; use one of {supported}")
    return minor


def package_source(minor: str, mirror: str | None = None) -> tuple[str, str]:
    """Return (repository URI, signing key URL) for `minor`.

    `mirror` replaces `https://pkgs.k8s.io` and must serve the same layout
    (`<mirror>/core:/stable:/v1.36/deb/` with its `Release.key`).
    """
    check_minor(minor)
    base = (mirror or UPSTREAM).rstrip("/")
    if not re.match(r"^https?://[^\s/]+(/\S*)?$", base):
        raise ValueError(f"package mirror {mirror!r} must be an http:// or https:// URL")
    uri = f"{base}/core:/stable:/v{minor}/deb/"
    return uri, f"{uri}Release.key"


def release(minor: str, version: str | None = None) -> Release:
    """The pins of `minor`, with kubeadm/kubelet/kubectl at `version` ("1.36.5") when given.

    A node keeps the patch it runs until its upgrade moves it (a new charm revision's pin
    is reached by `kubeadm upgrade`, in turn, never by an install in place).

    Raises:
        ValueError: unsupported minor, or `version` not of that minor.
    """
    pinned = RELEASES[check_minor(minor)]
    if version is None or version == pinned.kubernetes:
        return pinned
    if minor_of(version) != minor:
        raise ValueError(f"Kubernetes {version} is not of minor {minor}")
    return dataclasses.replace(pinned, kubernetes=version)


def minor_of(version: str) -> str:
    """The minor of a version: "1.36.5", "v1.36.5" and "1.36" give "1.36"."""
    return ".".join(version.strip().lstrip("v").split(".")[:2])


def version_key(version: str) -> tuple[int, ...]:
    """A version ("1.36.5", "1.36") as a tuple that sorts by version; ValueError if malformed."""
    return tuple(int(part) for part in version.strip().lstrip("v").split("."))


def upstream_version(package_version: str) -> str:
    """The upstream part of a pkgs.k8s.io package version ("1.36.5-1.1" gives "1.36.5")."""
    return package_version.split("-", 1)[0]


def installed_release(host: Host) -> str | None:
    """The Kubernetes version of the installed kubelet package ("1.36.5"), or None.

    kubelet is the package an install or an upgrade moves last, so it says which patch the
    node was brought to; the running kubelet is that one once it was restarted.
    """
    version = apt.installed_version(host, "kubelet")
    return upstream_version(version) if version else None


def install(
    host: Host,
    minor: str,
    *,
    mirror: str | None = None,
    with_kubectl: bool,
    version: str | None = None,
) -> bool:
    """Install kubeadm + kubelet (+ kubectl), cri-tools and kubernetes-cni pinned for `minor`.

    kubeadm, kubelet and kubectl at `version` (a patch of `minor`) when given, else at the
    minor's pin. All of them go in one `apt-get install` and are held; kubelet is enabled.

    Returns True when anything changed.

    Raises:
        ValueError: unsupported minor or malformed mirror.
        apt.AptError: the source or a package could not be installed.
    """
    changed = _use_source(host, minor, mirror)
    packages = release(minor, version).packages(with_kubectl=with_kubectl)
    changed = apt.install(host, packages, hold=True, refresh=not changed) or changed
    return _enable_kubelet(host) or changed


def install_kubeadm(
    host: Host, minor: str, *, mirror: str | None = None, version: str | None = None
) -> bool:
    """Switch the package source to `minor` and install only kubeadm at its pin, held.

    At `version` (a patch of `minor`) when given.

    The first step of upgrading a node: kubeadm must be the new version before
    `kubeadm upgrade`, kubelet only after it (`install` then brings the rest).

    Raises:
        ValueError: unsupported minor or malformed mirror.
        apt.AptError: the source or the package could not be installed.
    """
    changed = _use_source(host, minor, mirror)
    pin = release(minor, version).packages(with_kubectl=False)["kubeadm"]
    return apt.install(host, {"kubeadm": pin}, hold=True, refresh=not changed) or changed


def _use_source(host: Host, minor: str, mirror: str | None) -> bool:
    """Point apt at `minor`'s repository (upstream or `mirror`); True when it changed."""
    uri, key_url = package_source(minor, mirror)
    return apt.add_source(
        host, SOURCE_NAME, uri=uri, suite="/", components=[], key_url=key_url, key_path=KEYRING
    )


def upgrade_node(host: Host) -> None:
    """Run `kubeadm upgrade node` to match the node to the installed kubeadm's version.

    That is kubelet's configuration, and on a control-plane node its static pods too.

    Raises:
        KubeadmError: kubeadm failed; the message carries its last error line.
    """
    try:
        host.run(KUBEADM, "upgrade", "node", timeout=900)
    except CommandError as e:
        raise KubeadmError(f"kubeadm upgrade node failed: {e.last_line}") from None


def restart_kubelet(host: Host) -> None:
    """Restart kubelet so that a new package and configuration take effect.

    Installing a new kubelet package does not restart the service: the deb's maintainer
    scripts come from kubernetes/release cmd/krel/templates/latest/kubelet/kubelet.spec,
    whose `%systemd_postun kubelet.service` (not `%systemd_postun_with_restart`) leaves
    the running kubelet alone, so the old binary runs until this restart.
    """
    host.run(SYSTEMCTL, "daemon-reload")
    host.run(SYSTEMCTL, "restart", "kubelet")


def next_minor(minor: str) -> str:
    """The minor after `minor` ("1.36" gives "1.37")."""
    major, number = minor.split(".")
    return f"{major}.{int(number) + 1}"


def check_upgrade(running: str, wanted: str) -> None:
    """Accept `wanted` for a cluster running `running`: the same minor or the next one.

    Raises:
        ValueError: a downgrade or a skipped minor; the message says what to set instead.
    """
    if wanted == running:
        return
    if minor_key(wanted) < minor_key(running):
        raise ValueError(
            f"kubernetes-version {wanted} is older than the running cluster's {running}: "
            f"downgrades are not supported; set it back to {running}"
        )
    if wanted != next_minor(running):
        raise ValueError(
            f"kubernetes-version {wanted} skips a minor: clusters upgrade one minor at a time; "
            f"set {next_minor(running)} first"
        )


def minor_key(minor: str) -> tuple[int, int]:
    """`minor` ("1.36") as a tuple that sorts by version; ValueError when malformed."""
    major, number = minor.split(".")
    return int(major), int(number)


def _enable_kubelet(host: Host) -> bool:
    try:
        host.run(SYSTEMCTL, "is-enabled", "--quiet", "kubelet")
        return False
    except CommandError:
        host.run(SYSTEMCTL, "enable", "kubelet")
        return True


def installed_minor(host: Host) -> str | None:
    """Return the minor version of the installed kubeadm ("1.36"), or None."""
    version = apt.installed_version(host, "kubeadm")
    if version is None:
        return None
    return ".".join(version.split(".")[:2])


def node_name(host: Host) -> str:
    """Return the name kubelet registers this machine under: its hostname, lowercased."""
    text = (host.read("/etc/hostname") or "").strip()
    if not text:
        text = host.run(HOSTNAME).strip()
    return text.lower()


def is_joined(host: Host) -> bool:
    """Return True when this machine's kubelet has joined a cluster."""
    return host.path(KUBELET_CONF).exists()


def render_join_config(
    material: JoinMaterial,
    *,
    node_name: str,
    labels: Mapping[str, str],
    control_plane: bool,
    advertise_address: str | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> str:
    """Return the kubeadm JoinConfiguration (v1beta4) YAML for this node.

    `taints` (workers only) are the taints the Node registers with: kubeadm hands a
    worker's `nodeRegistration.taints` to kubelet as `--register-with-taints` (kubernetes
    cmd/kubeadm/app/cmd/phases/join/kubelet.go: `registerTaintsUsingFlags :=
    cfg.ControlPlane == nil`; cmd/kubeadm/app/phases/kubelet/flags.go), and kubelet
    creates its Node with them, which NodeRestriction allows on create only (a kubelet
    may not change them later). This text holds the bootstrap token: write it only to a
    0600 file.
    """
    registration: dict = {"name": node_name, "criSocket": CRI_SOCKET}
    if taints and not control_plane:
        registration["taints"] = [dict(t) for t in taints]
    if labels:
        value = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        registration["kubeletExtraArgs"] = [{"name": "node-labels", "value": value}]
    config: dict = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": material.endpoint,
                "token": material.token,
                "caCertHashes": [material.ca_cert_hash],
            },
        },
        "nodeRegistration": registration,
    }
    if control_plane:
        if material.certificate_key is None:
            raise ValueError("a control-plane join needs the certificate key")
        plane: dict = {"certificateKey": material.certificate_key}
        if advertise_address:
            plane["localAPIEndpoint"] = {"advertiseAddress": advertise_address}
        config["controlPlane"] = plane
    return yaml.safe_dump(config, sort_keys=False)


def join(
    host: Host,
    material: JoinMaterial,
    *,
    node_name: str,
    labels: Mapping[str, str],
    control_plane: bool,
    advertise_address: str | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> bool:
    """Join the cluster unless already joined; return True when it joined now.

    Leftovers of an earlier failed join are reset first. A control-plane join that fails
    is reset at once: it may have failed after writing admin.conf and the static pod
    manifests, or after adding its etcd member, and none of that may look joined. The
    config file holding the token is removed whether kubeadm succeeds or not.

    Raises:
        KubeadmError: kubeadm failed (message without any secret).
    """
    if is_joined(host):
        return False
    if any(host.path(p).exists() for p in _PARTIAL_JOIN):
        reset(host)
    content = render_join_config(
        material,
        node_name=node_name,
        labels=labels,
        control_plane=control_plane,
        advertise_address=advertise_address,
        taints=taints,
    )
    host.write(JOIN_CONFIG, content, mode=0o600)
    try:
        host.run(KUBEADM, "join", "--config", JOIN_CONFIG, timeout=600)
    except CommandError as e:
        host.path(JOIN_CONFIG).unlink(missing_ok=True)
        if control_plane:
            try:
                reset(host)
            except KubeadmError:  # the next attempt resets first (see _PARTIAL_JOIN)
                pass
        raise KubeadmError(f"kubeadm join failed: {_scrub(e.stderr, material)}") from None
    finally:
        host.path(JOIN_CONFIG).unlink(missing_ok=True)
    return True


def _scrub(text: str, material: JoinMaterial) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    last = lines[-1].strip() if lines else "no error output"
    secrets = [material.token, material.token.split(".")[-1], material.certificate_key]
    for secret in secrets:
        if secret:
            last = last.replace(secret, "<redacted>")
    return last


def reset(host: Host) -> bool:
    """Undo a join (`kubeadm reset --force`) and clear CNI config; True when it did.

    Does nothing when there is nothing to reset, so it is safe to call on every removal.
    """
    cni = host.path(CNI_CONFIG_DIR)
    # CNI configs that networks wrote; dotfiles belong to packages (kubernetes-cni ships
    # .kubernetes-cni-keep there) and stay.
    cni_files = (
        sorted(p for p in cni.iterdir() if not p.name.startswith(".")) if cni.is_dir() else []
    )
    leftovers = any(host.path(p).exists() for p in _PARTIAL_JOIN)
    if not leftovers and not cni_files:
        return False
    if leftovers:
        try:
            host.run(KUBEADM, "reset", "--force", "--cri-socket", CRI_SOCKET, timeout=300)
        except CommandError as e:
            raise KubeadmError(f"kubeadm reset failed: {e.last_line}") from None
    for entry in cni_files:
        if entry.is_file() or entry.is_symlink():
            entry.unlink()
    return True


def kubelet_serving_expiry(host: Host) -> datetime.datetime | None:
    """When the serving certificate kubelet generated for itself expires (UTC), or None.

    None when there is no `KUBELET_SERVING_CERT` or it is not one kubelet made: exactly
    two certificates, the first named "<host>@<digits>" and issued by the second, a
    self-signed CA named "<host>-ca@<digits>" for the same host, whose key signed both
    (see `KUBELET_SERVING_CERT`). A certificate an operator put there (signed by another
    CA, or any other shape) is never kubelet's, so it is left alone.
    """
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.x509.oid import NameOID

    path = host.path(KUBELET_SERVING_CERT)
    if not path.is_file():
        return None
    try:
        certs = x509.load_pem_x509_certificates(path.read_bytes())
    except ValueError:
        return None
    if len(certs) != 2:
        return None
    leaf, ca = certs

    def common_name(name: x509.Name) -> str:
        values = name.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(values[0].value) if len(values) == 1 and len(name) == 1 else ""

    served = _SELF_SIGNED_LEAF.fullmatch(common_name(leaf.subject))
    authority = _SELF_SIGNED_CA.fullmatch(common_name(ca.subject))
    if not served or not authority or served["host"] != authority["host"]:
        return None
    if leaf.issuer != ca.subject or ca.issuer != ca.subject:
        return None
    try:
        ca.verify_directly_issued_by(ca)
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return None
    return leaf.not_valid_after_utc


def rotate_kubelet_serving_certificate(
    host: Host, now: datetime.datetime, days: int = KUBELET_SERVING_RENEWAL_DAYS
) -> datetime.datetime | None:
    """Give kubelet a new serving certificate when its own expires within `days`.

    Writes a new pair of kubelet's own shape (`self_signed_serving_pair`, for the host
    the old one names, dated `now`) over `KUBELET_SERVING_KEY` and then
    `KUBELET_SERVING_CERT`; the running kubelet loads it from the files by itself (see
    `KUBELET_SERVING_CERT`; between the two writes its loader finds a key that does not
    match and keeps the old pair). kubelet is not restarted: a restart can fail a pod that
    holds a device-plugin resource (GPUs) with UnexpectedAdmissionError when kubelet admits
    it again before the device plugin has registered (kubernetes/kubernetes#133382,
    #138446). Only a certificate `kubelet_serving_expiry` knows as kubelet's is touched.
    Returns the old expiry, or None when nothing was due.
    """
    expires = kubelet_serving_expiry(host)
    if expires is None or expires - now > datetime.timedelta(days=days):
        return None
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    leaf = x509.load_pem_x509_certificates(host.path(KUBELET_SERVING_CERT).read_bytes())[0]
    name = str(leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
    served = _SELF_SIGNED_LEAF.fullmatch(name)
    assert served is not None  # kubelet_serving_expiry checked its shape
    cert_pem, key_pem = self_signed_serving_pair(served["host"], now)
    host.write(KUBELET_SERVING_KEY, key_pem, 0o600)
    host.write(KUBELET_SERVING_CERT, cert_pem)
    logger.info(
        "kubelet's serving certificate expired %s: wrote a new one, which kubelet loads", expires
    )
    return expires


def self_signed_serving_pair(hostname: str, now: datetime.datetime) -> tuple[str, str]:
    """A serving certificate as kubelet makes its own: (certificate PEM, key PEM).

    As client-go util/cert GenerateSelfSignedCertKeyWithFixtures (called by kubelet's
    InitializeTLS with no other names): an RSA 2048 CA "<host>-ca@<unix time>" (CA,
    certSign) that signed an RSA 2048 serving certificate "<host>@<unix time>"
    (serverAuth, the host as its DNS name or IP address), both valid from an hour before
    `now` for 365 days; the serving certificate then the CA in one PEM, its key (PKCS#1)
    alone.
    """
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    valid_from = now - datetime.timedelta(hours=1)
    valid_until = valid_from + datetime.timedelta(days=365)
    stamp = int(now.timestamp())
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def named(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def usage(*, signs: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=True,
            content_commitment=False,
            key_encipherment=True,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=signs,
            crl_sign=False,
            encipher_only=False,
            decipher_only=False,
        )

    try:
        san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(hostname))
    except ValueError:
        san = x509.DNSName(hostname)
    ca_name = named(f"{hostname}-ca@{stamp}")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(valid_from)
        .not_valid_after(valid_until)
        .add_extension(usage(signs=True), critical=True)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(named(f"{hostname}@{stamp}"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(valid_from)
        .not_valid_after(valid_until)
        .add_extension(usage(signs=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([san]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    return (leaf.public_bytes(pem) + ca.public_bytes(pem)).decode(), key_pem.decode()


def ca_cert_hash(pem: str) -> str:
    """Return kubeadm's CA pin for a PEM certificate: sha256 of its DER public key info."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(pem.encode())
    der = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"sha256:{hashlib.sha256(der).hexdigest()}"
