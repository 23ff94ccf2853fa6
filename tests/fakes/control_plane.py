"""A fake control-plane machine and ops.testing state builders for the control-plane charm.

`FakeMachine` (shared) emulates apt, dpkg, systemctl and `kubeadm join/reset`; here it
learns what only a control plane runs: `kubeadm init` (writes admin.conf pointing at the
fake API server, a real CA certificate and API server certificate, registers the Node and
stores the `kubeadm-config` ConfigMap, as its upload-config phase does), `kubeadm token
create/delete`, `kubeadm init phase upload-certs`, `kubeadm init phase certs apiserver`
(which, like the real one, reuses an existing certificate and key only when they carry
every wanted name, and refuses them otherwise: "certificate apiserver is invalid"; no
`crictl`: kube-apiserver reloads its serving certificate from disk, so nothing restarts
it), and a control-plane `kubeadm join` whose API server certificate carries the
certSANs of the cluster's `kubeadm-config` ConfigMap, as the real join reads them there.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import json
import re
import secrets
import string
from collections.abc import Callable
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from ops import testing

from charms.gpu_k8s.v0.system import CommandError
from fakes.etcd import FakeEtcd, snapshot_status
from fakes.kube_apiserver import FakeKubeApiServer
from fakes.kube_auth import KUBEADM_ADMIN
from fakes.machine import FakeMachine

ADMIN_TOKEN = "admintokenvalue0123456789"
# libyaml's loader and dumper (in PyYAML's wheels): kubeconfigs parsed per certificate
# issued and read, kubeadm's init configuration and the ClusterConfiguration ConfigMap per
# bootstrap (the same data as yaml.safe_load/safe_dump), ~10x faster than PyYAML's own
_YAML = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
NOW = datetime.datetime(2026, 11, 21, 9, 0, tzinfo=datetime.timezone.utc)


# kubeadm's SANs for every API server certificate (cmd/kubeadm/app/util/pkiutil
# GetAPIServerAltNames): the node name, the kubernetes Service names and first Service IP,
# the advertise address, the controlPlaneEndpoint host, then ClusterConfiguration certSANs.
SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


def apiserver_cert_pem(sans: list[str]) -> str:
    """A real certificate whose subjectAltName lists `sans` (IPs as IP addresses)."""
    import ipaddress

    from cryptography.hazmat.primitives import serialization

    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for san in dict.fromkeys(sans):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            names.append(x509.DNSName(san))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - datetime.timedelta(days=1))
        .not_valid_after(NOW + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _ca(common_name: str = "kubernetes") -> tuple[str, str]:
    """A self-signed CA valid ten years from NOW (kubeadm's CACertificateValidityPeriod)."""
    from cryptography.hazmat.primitives import serialization

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - datetime.timedelta(days=1))
        .not_valid_after(NOW + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem


def sa_keys() -> tuple[str, str]:
    """A ServiceAccount signing key pair as kubeadm writes it: sa.key and sa.pub (PEM).

    kubeadm's default EncryptionAlgorithm is RSA-2048 (cmd/kubeadm/app/phases/certs/
    certs.go CreateServiceAccountKeyAndPublicKeyFiles: pkiutil.NewPrivateKey(keyType)).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode(), key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


CA_PEM, CA_KEY_PEM = _ca()
FRONT_PROXY_CA_PEM, FRONT_PROXY_CA_KEY_PEM = _ca("front-proxy-ca")
SA_KEY_PEM, SA_PUB_PEM = sa_keys()


@dataclasses.dataclass
class Clock:
    now: datetime.datetime = NOW

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += datetime.timedelta(**delta)


class ControlPlaneMachine:
    """A FakeMachine extended with the control-plane side of kubeadm."""

    def __init__(
        self,
        root: Path,
        api: FakeKubeApiServer,
        hostname: str = "ip-10-0-1-17",
        etcd: FakeEtcd | None = None,
        clock=None,
    ):
        self.machine = FakeMachine(root, hostname=hostname)
        self.api = api
        self.etcd = etcd
        self.pki = KubeadmPki(self.machine, clock or Clock(), etcd)
        self.machine.clock = self.pki.clock  # kubelet dates its serving certificate by it
        self.kubelet = FakeKubelet(self.machine, self.pki)
        # the API server serves the certificate its pod loaded when kubelet started it
        api.serving_expiry = self._serving_expiry
        self.machine.on_kubeadm("certs", self.pki.command)
        self.machine.on_kubeadm("upgrade", self._kubeadm_upgrade)
        self.crictl = FakeCrictl(self.machine, self.kubelet, etcd)
        self.machine.on("crictl", self.crictl.command)
        self.kubelet.on_start["etcd"] = self.crictl.load_data_dir
        self.inits: list[list[dict]] = []
        self.tokens: list[str] = []  # every token ever issued (for secret scans)
        self.live_tokens: set[str] = set()
        self.uploads: list[str] = []
        # the kubernetesVersion each upload-certs phase ran with; "stable-1" is kubeadm's
        # default when the config has no ClusterConfiguration (v1beta4 defaults.go
        # DefaultKubernetesVersion), which it resolves by fetching
        # https://dl.k8s.io/release/stable-1.txt before it falls back to its own version
        self.upload_versions: list[str] = []
        self.machine.on_kubeadm("init", self._init)
        self.machine.on_kubeadm("token", self._token)
        # admin.conf's user: kubernetes-admin in kubeadm:cluster-admins (fakes.kube_auth)
        api.auth.add_token(ADMIN_TOKEN, KUBEADM_ADMIN)
        self.machine.admin_conf = api.kubeconfig(ADMIN_TOKEN)
        self.machine.ca_pem = CA_PEM
        base_join_phase = self.machine._join_phase

        def join_phase(phase: str, argv: list[str], config: dict) -> None:
            base_join_phase(phase, argv, config)
            if phase == "etcd-join" and self.etcd is not None:
                self.etcd.add(config["nodeRegistration"]["name"])  # a learner, then promoted
            if phase == "control-plane-prepare":  # the cluster's certSANs, from the ConfigMap
                if not self.cluster_configuration():
                    raise CommandError(argv, 1, "unable to fetch the kubeadm-config ConfigMap")
                if self.etcd is not None:
                    self.etcd.pki.install(self.machine.write)
                plane = config.get("controlPlane", {}).get("localAPIEndpoint", {})
                self._write_apiserver_cert(
                    config["nodeRegistration"]["name"],
                    plane.get("advertiseAddress", "192.0.2.0"),
                    self.cluster_configuration(),
                )
                self.pki.install(super_admin=False)

        self.machine._join_phase = join_phase
        base_join = self.machine._kubeadm["join"]

        def join(argv: list[str], input: str | None) -> str:
            try:
                return base_join(argv, input)
            finally:
                self.kubelet.sync()

        self.machine.on_kubeadm("join", join)
        base_reset = self.machine._kubeadm["reset"]

        def reset(argv: list[str], input: str | None) -> str:
            out = base_reset(argv, input)
            return self._reset_etcd_member() + out

        self.machine.on_kubeadm("reset", reset)

    def _reset_etcd_member(self) -> str:
        """Kubeadm reset's remove-etcd-member phase: a warning and exit 0 when it cannot."""
        if self.etcd is None:
            return ""
        name = self.machine.hostname
        if not self.etcd.reachable:
            return (
                "[reset] Failed to remove etcd member: etcdserver: request timed out, "
                "please manually remove this etcd member using etcdctl\n"
            )
        self.etcd.members = [m for m in self.etcd.members if m.name != name]
        return "[reset] Removing etcd member\n"

    def __getattr__(self, name: str):
        return getattr(self.machine, name)

    def __setattr__(self, name: str, value) -> None:
        inner = self.__dict__.get("machine")
        if inner is not None and name in vars(inner):  # join_error, ...: the machine's
            setattr(inner, name, value)
        else:
            object.__setattr__(self, name, value)

    def cluster_configuration(self) -> dict:
        """The ClusterConfiguration stored in the kubeadm-config ConfigMap ({} if none)."""
        cm = self.api.get_object("/api/v1/namespaces/kube-system/configmaps/kubeadm-config")
        return yaml.load(cm["data"]["ClusterConfiguration"], Loader=_YAML) if cm else {}

    def apiserver_sans(self) -> list[str]:
        """The subjectAltNames of this machine's API server certificate."""
        pem = self.machine.read("/etc/kubernetes/pki/apiserver.crt")
        cert = x509.load_pem_x509_certificate(pem.encode())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return [str(n.value) for n in names]

    def _write_apiserver_cert(self, name: str, address: str, cluster: dict) -> None:
        import ipaddress

        endpoint = (cluster.get("controlPlaneEndpoint") or "").rsplit(":", 1)[0]
        services = (cluster.get("networking") or {}).get("serviceSubnet") or "10.96.0.0/12"
        first = str(next(ipaddress.ip_network(services).hosts()))  # the kubernetes Service
        sans = [name, *SERVICE_NAMES, first, address, endpoint]
        sans += (cluster.get("apiServer") or {}).get("certSANs") or []
        self.machine.write("/etc/kubernetes/pki/apiserver.crt", apiserver_cert_pem(sans))
        self.machine.write("/etc/kubernetes/pki/apiserver.key", "fake key\n", 0o600)

    def _certs_phase(self, argv: list[str]) -> str:
        if argv[4:5] != ["apiserver"] or "--config" not in argv:
            raise CommandError(argv, 1, "fake kubeadm init phase certs: unsupported")
        docs = list(
            yaml.load_all(self.machine.read(argv[argv.index("--config") + 1]), Loader=_YAML)
        )
        init = next(d for d in docs if d["kind"] == "InitConfiguration")
        cluster = next(d for d in docs if d["kind"] == "ClusterConfiguration")
        if self.machine.path("/etc/kubernetes/pki/apiserver.crt").exists() and (
            self.machine.path("/etc/kubernetes/pki/apiserver.key").exists()
        ):  # phases/certs/certs.go validateCertificateWithConfig: reused only if it fits
            wanted = set((cluster.get("apiServer") or {}).get("certSANs") or [])
            if not wanted <= set(self.apiserver_sans()):
                raise CommandError(argv, 1, "error: certificate apiserver is invalid")
            return "[certs] Using existing apiserver certificate and key on disk\n"
        self._write_apiserver_cert(
            init["nodeRegistration"]["name"],
            init["localAPIEndpoint"]["advertiseAddress"],
            cluster,
        )
        return '[certs] Generating "apiserver" certificate and key\n'

    def _upload_certs_phase(self, argv: list[str]) -> str:
        if argv[3] != "upload-certs" or "--upload-certs" not in argv:
            raise CommandError(argv, 1, "fake kubeadm init phase: unsupported")
        # The phase takes the key from --certificate-key or from the --config file's
        # InitConfiguration.certificateKey (cmd/kubeadm/app/cmd/phases/init/uploadcerts.go)
        if "--config" in argv and "--certificate-key" in argv:  # ValidateMixedArguments
            raise CommandError(argv, 1, "can not mix '--config' with arguments [certificate-key]")
        version = "stable-1"
        if "--config" in argv:
            path = self.machine.path(argv[argv.index("--config") + 1])
            if path.stat().st_mode & 0o077:
                raise CommandError(argv, 1, "fake: config must not be readable by others")
            docs = [d for d in yaml.load_all(path.read_text(), Loader=_YAML) if d]
            init = next(d for d in docs if d.get("kind") == "InitConfiguration")
            key = init.get("certificateKey", "")
            cluster = next((d for d in docs if d.get("kind") == "ClusterConfiguration"), {})
            version = cluster.get("kubernetesVersion") or version
        else:
            key = argv[argv.index("--certificate-key") + 1]
        self.upload_versions.append(version)
        self.uploads.append(key)
        out = "[upload-certs] Storing the certificates in Secret kubeadm-certs\n"
        # cmd/kubeadm/app/cmd/phases/init/uploadcerts.go: unless SkipCertificateKeyPrint
        if "--skip-certificate-key-print" not in argv:
            out += f"[upload-certs] Using certificate key:\n{key}\n"
        return out

    def _init_etcd(self, name: str, address: str) -> None:
        """The etcd phase: its static pod, its member and data directory, its client files."""
        self.machine.write(f"{MANIFESTS}/etcd.yaml", etcd_manifest(name, address))
        if self.etcd is None:
            return
        self.etcd.pki.install(self.machine.write)
        self.etcd.add(name)
        for part in ("snap", "wal"):  # etcd's member/{snap,wal}
            self.machine.path(f"/var/lib/etcd/member/{part}").mkdir(parents=True)

    def _kubeadm_upgrade(self, argv: list[str], stdin: str | None) -> str:
        """`kubeadm upgrade apply|node`, then the certificates it renews on its way.

        With its default `--certificate-renewal=true` an upgrade renews the certificates of
        every control-plane component it upgrades and the one embedded in admin.conf
        (kubernetes cmd/kubeadm/app/phases/upgrade/staticpods.go StaticPodControlPlane,
        renewCertsByComponent): here, every present certificate whose CA key is on the node.
        """
        out = self.machine._kubeadm_upgrade(argv, stdin)
        if self.pki.certificate("admin.conf") is not None:
            self.pki.renew_for_upgrade()
        return out

    def _serving_expiry(self) -> float | None:
        """The notAfter of the apiserver certificate the running kube-apiserver pod loaded."""
        loaded = self.kubelet.running.get("kube-apiserver")
        return loaded.timestamp() if loaded is not None else None

    def _init(self, argv: list[str], _input: str | None) -> str:
        if argv[2:4] == ["phase", "certs"]:
            return self._certs_phase(argv)
        if argv[2:3] == ["phase"]:
            return self._upload_certs_phase(argv)
        path = self.machine.path(argv[argv.index("--config") + 1])
        if path.stat().st_mode & 0o077:
            raise CommandError(argv, 1, "fake: init config must not be readable by others")
        if "--certificate-key" in argv:
            raise CommandError(argv, 1, "can not mix '--config' with arguments [certificate-key]")
        docs = list(yaml.load_all(path.read_text(), Loader=_YAML))
        self.inits.append(docs)
        init = next(d for d in docs if d["kind"] == "InitConfiguration")
        ttls = []
        for bt in init.get("bootstrapTokens", []):
            self.tokens.append(bt["token"])
            self.live_tokens.add(bt["token"])
            ttls.append((bt["token"], _hours(bt.get("ttl", "24h")), bt.get("groups")))
        self.machine.write("/etc/kubernetes/admin.conf", self.api.kubeconfig(ADMIN_TOKEN), 0o600)
        if not self.machine.path("/etc/kubernetes/pki/ca.key").exists():
            self.machine.write("/etc/kubernetes/pki/ca.crt", CA_PEM)  # else kubeadm keeps it
        self.machine.write("/etc/kubernetes/kubelet.conf", "apiVersion: v1\nkind: Config\n")
        self.machine.kubelet_client_cert()
        self.machine.kubelet_serving_cert()
        name = init["nodeRegistration"]["name"]
        cluster = next(d for d in docs if d["kind"] == "ClusterConfiguration")
        self.machine.cluster_version = str(cluster.get("kubernetesVersion", "")).lstrip("v")
        self._write_apiserver_cert(name, init["localAPIEndpoint"]["advertiseAddress"], cluster)
        for conf in ("controller-manager.conf", "scheduler.conf", "super-admin.conf"):
            self.machine.write(f"/etc/kubernetes/{conf}", self.machine.admin_conf, 0o600)
        for pod in STATIC_PODS:
            self.machine.write(f"{MANIFESTS}/{pod}.yaml", f"# {pod}\n")
        for token, hours, groups in ttls:  # kubeadm's bootstrap-token phase, once it can
            self._put_token_secret(token, hours, groups)
        self._init_etcd(name, init["localAPIEndpoint"]["advertiseAddress"])
        self.pki.install(super_admin=True, keep_existing=True)
        self.kubelet.sync()
        self.api.put_object(
            "/api/v1/namespaces/kube-system/configmaps/kubeadm-config",
            {"data": {"ClusterConfiguration": yaml.dump(cluster, Dumper=_YAML_DUMPER)}},
        )
        self.api.put_object(f"/api/v1/nodes/{name}", node(name, control_plane=True))
        return "Your Kubernetes control-plane has initialized successfully!\n"

    def _put_token_secret(self, token: str, hours: float, groups: list | None) -> None:
        token_id, token_secret = token.split(".")
        expires = self.api.clock() + hours * 3600
        data = {
            "token-id": token_id,
            "token-secret": token_secret,
            "expiration": datetime.datetime.fromtimestamp(expires, datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": ",".join(groups or DEFAULT_TOKEN_GROUPS),
        }
        self.api.put_object(
            f"{TOKEN_SECRETS}/bootstrap-token-{token_id}",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "bootstrap.kubernetes.io/token",
                "data": {k: _b64(v) for k, v in data.items()},
            },
        )

    def _token(self, argv: list[str], _input: str | None) -> str:
        if argv[2] == "create":
            alphabet = string.ascii_lowercase + string.digits
            token = (
                "".join(secrets.choice(alphabet) for _ in range(6))
                + "."
                + "".join(secrets.choice(alphabet) for _ in range(16))
            )
            self.tokens.append(token)
            self.live_tokens.add(token)
            ttl = argv[argv.index("--ttl") + 1] if "--ttl" in argv else "24h"
            self._put_token_secret(token, _hours(ttl), None)
            return token + "\n"
        if argv[2] == "delete":
            ids = {t.split(".")[0]: t for t in self.live_tokens}
            if argv[3] not in ids:
                raise CommandError(argv, 1, f'bootstrap token "{argv[3]}" not found')
            self.live_tokens.discard(ids[argv[3]])
            self.api.delete_object(f"{TOKEN_SECRETS}/bootstrap-token-{argv[3]}")
            return f"bootstrap token {argv[3]!r} deleted\n"
        raise CommandError(argv, 1, "fake kubeadm token: unsupported")


# Where kubeadm keeps bootstrap tokens: one Secret per token (kubeadm
# cmd/kubeadm/app/apis/bootstraptoken/v1/utils.go BootstrapTokenToSecret; its keys are
# k8s.io/cluster-bootstrap token/api/types.go's), read by kube-apiserver's bootstrap token
# authenticator (fakes.kube_auth) and deleted by `kubeadm token delete`.
TOKEN_SECRETS = "/api/v1/namespaces/kube-system/secrets"
# kubeadm's default groups for a token (constants.go NodeBootstrapTokenAuthGroup)
DEFAULT_TOKEN_GROUPS = ["system:bootstrappers:kubeadm:default-node-token"]


def _hours(ttl: str) -> float:
    """Hours of a kubeadm `--ttl`/`ttl` duration ("24h", "6h0m0s", "30m")."""
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", ttl)
    if not match or not ttl:
        raise ValueError(f"fake kubeadm: unsupported ttl {ttl!r}")
    h, m, sec = (int(x or 0) for x in match.groups())
    return h + m / 60 + sec / 3600


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


CHARM_URL = "ch:amd64/kubernetes-control-plane-1"


def deployed_charm(root: Path, url: str = CHARM_URL) -> Path:
    """`root` as Juju's unit agent leaves a charm directory: the charm URL it deployed.

    The agent writes the URL into `.juju-charm` once the charm's files are in place, at
    install and at each refresh (juju/juju worker/uniter/charm/manifest_deployer.go
    finishDeploy; charm.go WriteCharmURL: go-yaml's document of the string, a plain
    scalar and a newline for a URL like this one). Returns `root`, for ops.testing's
    `charm_root`.
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / ".juju-charm").write_text(f"{url}\n")
    return root


def existing_cluster(api: FakeKubeApiServer, service_subnet: str = "10.96.0.0/12") -> None:
    """The kubeadm-config ConfigMap of a cluster another control-plane unit bootstrapped."""
    cluster = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "controlPlaneEndpoint": "127.0.0.1:6444",
        "networking": {"podSubnet": "10.244.0.0/16", "serviceSubnet": service_subnet},
        "apiServer": {"certSANs": ["127.0.0.1"]},
    }
    api.put_object(
        "/api/v1/namespaces/kube-system/configmaps/kubeadm-config",
        {"data": {"ClusterConfiguration": yaml.dump(cluster, Dumper=_YAML_DUMPER)}},
    )


def node(
    name: str,
    *,
    control_plane: bool = False,
    ready: bool = True,
    gpus: int = 0,
    unschedulable: bool = False,
) -> dict:
    """A Node object as the API server would store it."""
    labels = {"kubernetes.io/hostname": name}
    if control_plane:
        labels["node-role.kubernetes.io/control-plane"] = ""
    status: dict = {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "nodeInfo": {"kubeletVersion": "v1.36.4"},
        "allocatable": {"cpu": "4"},
    }
    if gpus:
        labels["nvidia.com/gpu.product"] = "NVIDIA-A10G"
        status["allocatable"]["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": status,
    }


# -- ops.testing state builders ------------------------------------------------------

PEER_LABEL = "control-plane-join"
JOIN_LABEL = "kubernetes-cluster-join-shared"  # lib kubernetes_cluster SECRET_LABEL


def peers(
    app: dict | None = None, units: dict[int, dict] | None = None, local: dict | None = None
) -> testing.PeerRelation:
    return testing.PeerRelation(
        "peers", local_app_data=app or {}, local_unit_data=local or {}, peers_data=units or {}
    )


def workers_relation(units: dict[int, dict], app: str = "kubernetes-worker") -> testing.Relation:
    return testing.Relation("workers", remote_app_name=app, remote_units_data=units)


def worker_bag(name: str, gpus: list[dict] | None = None, *, identity: bool = True) -> dict:
    """A worker unit's databag once it registered its node.

    A worker of this revision acts as its kubelet and says so (`node-identity`);
    `identity=False` is one of an earlier revision (before 917e912), or one whose root
    dropped the flag.
    """
    bag = {"node-name": name, **({"node-identity": "true"} if identity else {})}
    if gpus is not None:
        bag["gpu-inventory"] = json.dumps(gpus)
    return bag


def kube_api_relation(
    app: str, namespace: str, rules=None, cluster_rules=None, **extra
) -> testing.Relation:
    data = {"namespace": namespace}
    if rules is not None:
        data["rules"] = json.dumps(rules)
    if cluster_rules is not None:
        data["cluster-rules"] = json.dumps(cluster_rules)
    data.update(extra)
    return testing.Relation("kube-api", remote_app_name=app, remote_app_data=data)


def granted(ctx: testing.Context, state: testing.State, *rels: testing.Relation) -> testing.State:
    """`state` with the kube-api relations `rels` added, each changed in turn (granted)."""
    state = dataclasses.replace(state, relations=[*state.relations, *rels])
    for rel in rels:
        state = ctx.run(ctx.on.relation_changed(state.get_relation(rel.id)), state)
    return state


def member(api: FakeKubeApiServer | None, index: int, **extra: str) -> dict:
    """The peer unit databag of joined control-plane unit `index` (its Node registered Ready).

    What `_mark_member` publishes: joined, node name and API server, plus `extra`.
    """
    name = f"cp-{index}"
    if api is not None:
        api.put_object(f"/api/v1/nodes/{name}", node(name, control_plane=True))
    return {"joined": "true", "node-name": name, "api-server": f"10.0.0.{5 + index}:6443", **extra}


def peer(state: testing.State) -> testing.PeerRelation:
    return next(r for r in state.relations if r.endpoint == "peers")


def earlier_revision_cluster(state: testing.State) -> testing.State:
    """A cluster an earlier revision made: it recorded the shared worker grant it applied.

    Every earlier revision applied the grant when it first published to workers and kept
    its fingerprint under `worker-grant` (access.py WORKER_GRANT_KEY); any value but
    `removed` is such a one (a mismatch: the leader applies the grant again, as the
    earlier revision had). A cluster this revision made never has the grant.
    """
    bag = peer(state).local_app_data
    grant = dataclasses.replace(peer(state), local_app_data={**bag, "worker-grant": "earlier"})
    others = [r for r in state.relations if r.id != grant.id]
    return dataclasses.replace(state, relations=[*others, grant])


def secret(state: testing.State, label: str) -> testing.Secret:
    return next(s for s in state.secrets if s.label == label)


def token_secret(state: testing.State, unit: str = "kubernetes-worker/0") -> testing.Secret:
    """The secret that holds the workers' token for joining `unit` (granted to it alone)."""
    # lib kubernetes_cluster UNIT_SECRET_PREFIX
    return secret(state, "kubernetes-cluster-join-token-" + unit.replace("/", "-"))


def leader_member_state(**kw) -> testing.State:
    """Cluster bootstrapped by another (former) leader, seen from a unit not yet joined."""
    join = testing.Secret(
        {"token": "abcdef.0123456789abcdef", "certificate-key": "ab" * 32},
        owner="app",
        label=PEER_LABEL,
    )
    app = {
        "endpoint": "127.0.0.1:6444",
        "ca-cert-hash": "sha256:" + "a" * 64,
        "join-secret-id": join.id,
        "cluster-version": "1.36",
        "token-expires": (NOW.replace(hour=23)).isoformat(),
        "certs-uploaded-at": NOW.isoformat(),
        # the leader found every node it expects Ready at its last look
        "node-health": json.dumps({"missing": [], "not-ready": []}),
    }
    member = {"joined": "true", "api-server": "10.0.0.5:6443", "node-name": "ip-10-0-0-5"}
    return testing.State(relations=[peers(app, {1: member})], secrets=[join], **kw)


def join_workers(
    ctx, state: testing.State, rel: testing.Relation, api: FakeKubeApiServer | None = None
) -> testing.State:
    """Add `rel` and run relation-changed once per remote unit, as Juju would.

    With `api`, each unit's node is registered Ready first, as `kubeadm join` does before a
    worker publishes its node name.
    """
    out = dataclasses.replace(state, relations=[*state.relations, rel])
    for bag in rel.remote_units_data.values() if api else ():
        try:  # a worker whose databag is broken is left to the test
            name = bag["node-name"]
            gpus = sum(g["count"] for g in json.loads(bag.get("gpu-inventory", "[]")))
        except (KeyError, TypeError, ValueError):
            continue
        api.put_object(f"/api/v1/nodes/{name}", node(name, gpus=gpus))
    for unit in sorted(rel.remote_units_data):
        out = ctx.run(ctx.on.relation_changed(out.get_relation(rel.id), remote_unit=unit), out)
    return out


# -- kubeadm's PKI: `kubeadm certs check-expiration -o json` and `kubeadm certs renew all` --

PKI = "/etc/kubernetes/pki"
# What `kubeadm certs` manages on a stacked-etcd control plane (kubeadm 1.36,
# cmd/kubeadm/app/phases/certs/renewal/manager.go NewManager: the certificates of
# certsphase.GetDefaultCertList under their CA, then admin.conf, super-admin.conf,
# controller-manager.conf and scheduler.conf, all signed by "ca"; kubelet.conf is left
# to kubelet). Name -> (file, CA name, subject CN, subject O).
KUBEADM_CERTS: dict[str, tuple[str, str, str, str]] = {
    "admin.conf": (
        "/etc/kubernetes/admin.conf",
        "ca",
        "kubernetes-admin",
        "kubeadm:cluster-admins",
    ),
    "apiserver": (f"{PKI}/apiserver.crt", "ca", "kube-apiserver", ""),
    "apiserver-etcd-client": (
        f"{PKI}/apiserver-etcd-client.crt",
        "etcd-ca",
        "kube-apiserver-etcd-client",
        "",
    ),
    "apiserver-kubelet-client": (
        f"{PKI}/apiserver-kubelet-client.crt",
        "ca",
        "kube-apiserver-kubelet-client",
        "kubeadm:cluster-admins",
    ),
    "controller-manager.conf": (
        "/etc/kubernetes/controller-manager.conf",
        "ca",
        "system:kube-controller-manager",
        "",
    ),
    "etcd-healthcheck-client": (
        f"{PKI}/etcd/healthcheck-client.crt",
        "etcd-ca",
        "kube-etcd-healthcheck-client",
        "",
    ),
    "etcd-peer": (f"{PKI}/etcd/peer.crt", "etcd-ca", "etcd-peer", ""),
    "etcd-server": (f"{PKI}/etcd/server.crt", "etcd-ca", "etcd-server", ""),
    "front-proxy-client": (
        f"{PKI}/front-proxy-client.crt",
        "front-proxy-ca",
        "front-proxy-client",
        "",
    ),
    "scheduler.conf": ("/etc/kubernetes/scheduler.conf", "ca", "system:kube-scheduler", ""),
    "super-admin.conf": (
        "/etc/kubernetes/super-admin.conf",
        "ca",
        "kubernetes-super-admin",
        "system:masters",
    ),
}
# CA name -> file base (certs/certlist.go KubeadmCertRootCA, KubeadmCertEtcdCA,
# KubeadmCertFrontProxyCA).
KUBEADM_CAS = {
    "ca": f"{PKI}/ca",
    "etcd-ca": f"{PKI}/etcd/ca",
    "front-proxy-ca": f"{PKI}/front-proxy-ca",
}
# kubeadm's constants.CertificateValidityPeriod: one year.
CERT_VALIDITY = datetime.timedelta(days=365)
MANIFESTS = "/etc/kubernetes/manifests"
STATIC_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


class KubeadmPki:
    """The x509 files kubeadm keeps on one control-plane node, and `kubeadm certs`.

    Certificates are real, signed by the CA whose key lies next to it on the machine, valid
    from the CA's notBefore to one year after their issue (pkiutil.NewSignedCert: NotBefore
    is the CA's, NotAfter now + CertificateValidityPeriod). The client certificates of the
    kubeconfig files are their `client-certificate-data`, as kubeadm's kubeconfig
    readwriter reads them (renewal/readwriter.go).

    `check-expiration -o json` prints kubeadm 1.36's output object (cmd/kubeadm/app/cmd/
    certs.go fetchCertificateExpirationInfo; apis/output/v1alpha3 CertificateExpirationInfo
    and Certificate): kind and apiVersion, `certificates` and `certificateAuthorities` in
    name order (renewal.Manager.Certificates/CAs sort), each with name, expirationDate
    (metav1.Time: RFC 3339 in UTC; null when missing), residualTime (seconds),
    externallyManaged, caName (omitted for CAs) and missing; JSON indented by four
    spaces (k8s.io/cli-runtime printers.JSONPrinter). A missing file is `missing: true`.
    A CA whose key is absent makes its certificates externally managed
    (certs.go UsingExternalCA: CA certificate present, key absent).

    `renew all` renews every present certificate in name order, in place
    (certs.go renewCert, renewal.Manager.RenewUsingLocalCA): "MISSING! <long name>" for an
    absent one, "Detected external <ca>, <long name> can't be renewed" (exit 0) when its
    CA's key is absent, "<long name> renewed" otherwise, then the reminder to restart the
    control-plane components. A CA key that does not parse fails the command at that
    certificate (exit 1) with certsphase.LoadCertificateAuthority's wording, after the
    certificates before it were renewed.
    """

    LONG_NAMES = {  # the handlers' LongName (certs/certlist.go, renewal/manager.go)
        "admin.conf": (
            "certificate embedded in the kubeconfig file for the admin to use and for kubeadm"
            " itself"
        ),
        "apiserver": "certificate for serving the Kubernetes API",
        "apiserver-etcd-client": "certificate the apiserver uses to access etcd",
        "apiserver-kubelet-client": "certificate for the API server to connect to kubelet",
        "controller-manager.conf": (
            "certificate embedded in the kubeconfig file for the controller manager to use"
        ),
        "etcd-healthcheck-client": "certificate for liveness probes to healthcheck etcd",
        "etcd-peer": "certificate for etcd nodes to communicate with each other",
        "etcd-server": "certificate for serving etcd",
        "front-proxy-client": "certificate for the front proxy client",
        "scheduler.conf": (
            "certificate embedded in the kubeconfig file for the scheduler manager to use"
        ),
        "super-admin.conf": "certificate embedded in the kubeconfig file for the super-admin",
    }

    def __init__(self, machine: FakeMachine, clock, etcd: FakeEtcd | None):
        self.machine = machine
        self.clock = clock
        self.etcd = etcd
        self.renewals = 0  # `kubeadm certs renew all` that succeeded

    # -- files ------------------------------------------------------------------------

    def install(self, *, super_admin: bool, keep_existing: bool = False) -> None:
        """What init (super_admin) or a control-plane join leaves: CAs, keys, certificates.

        `keep_existing` (init): a CA whose .crt and .key are both there already, and an
        sa.key already there, are used as they are (kubeadm 1.36 cmd/kubeadm/app/cmd/
        phases/init/certs.go runCAPhase: "Using existing %s certificate authority";
        phases/certs/certs.go CreateServiceAccountKeyAndPublicKeyFiles: "Using the
        existing "sa" key"). A control-plane join writes the cluster's, downloaded.
        """
        from cryptography.hazmat.primitives import serialization

        m = self.machine

        def kept(base: str) -> bool:
            return keep_existing and all(
                m.path(f"{base}{ext}").exists() for ext in (".crt", ".key")
            )

        if not kept(f"{PKI}/ca"):
            m.write(f"{PKI}/ca.crt", CA_PEM)
            m.write(f"{PKI}/ca.key", CA_KEY_PEM, 0o600)
        if not kept(f"{PKI}/front-proxy-ca"):
            m.write(f"{PKI}/front-proxy-ca.crt", FRONT_PROXY_CA_PEM)
            m.write(f"{PKI}/front-proxy-ca.key", FRONT_PROXY_CA_KEY_PEM, 0o600)
        if not (keep_existing and m.path(f"{PKI}/sa.key").exists()):
            m.write(f"{PKI}/sa.key", SA_KEY_PEM, 0o600)
            m.write(f"{PKI}/sa.pub", SA_PUB_PEM)
        if kept(f"{PKI}/etcd/ca"):
            pass  # kubeadm uses it
        elif self.etcd is not None:  # the fake etcd's CA: its server trusts what it signs
            pki = self.etcd.pki
            m.write(f"{PKI}/etcd/ca.crt", pki.ca.public_bytes(serialization.Encoding.PEM).decode())
            key = pki._ca_key.private_bytes(  # noqa: SLF001 - the CA key kubeadm keeps
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ).decode()
            m.write(f"{PKI}/etcd/ca.key", key, 0o600)
        else:
            pem, key = _ca("etcd-ca")
            m.write(f"{PKI}/etcd/ca.crt", pem)
            m.write(f"{PKI}/etcd/ca.key", key, 0o600)
        for name in KUBEADM_CERTS:
            if name == "super-admin.conf" and not super_admin:
                continue  # kubeadm writes it on the node that ran init only (1.29+)
            if name == "apiserver":
                continue  # the join and init handlers write it with its SANs
            self._issue(name)

    def _issue(self, name: str) -> None:
        from cryptography.hazmat.primitives import serialization

        path, ca_name, cn, org = KUBEADM_CERTS[name]
        ca, ca_key = self._ca(ca_name)
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else []
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(ca.not_valid_before_utc)
            .not_valid_after(self.clock() + CERT_VALIDITY)
        )
        old = self.certificate(name)
        if old is not None:  # renewal keeps the names (renewal/manager.go certToConfig)
            try:
                sans = old.extensions.get_extension_for_class(x509.SubjectAlternativeName)
                builder = builder.add_extension(sans.value, critical=False)
            except x509.ExtensionNotFound:
                pass
        cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        if path.endswith(".conf"):
            text = self.machine.read(path) or self.machine.admin_conf
            config = yaml.load(text, Loader=_YAML)
            for user in config.get("users") or []:
                user["user"]["client-certificate-data"] = _b64(cert_pem)
                user["user"]["client-key-data"] = _b64(key_pem)
            self.machine.write(
                path, yaml.dump(config, Dumper=_YAML_DUMPER, sort_keys=False), 0o600
            )
        else:
            self.machine.write(path, cert_pem)
            self.machine.write(path.removesuffix(".crt") + ".key", key_pem, 0o600)

    def _ca(self, name: str):
        from cryptography.hazmat.primitives import serialization

        base = KUBEADM_CAS[name]
        cert = x509.load_pem_x509_certificate((self.machine.read(f"{base}.crt") or "").encode())
        key = serialization.load_pem_private_key(
            (self.machine.read(f"{base}.key") or "").encode(), None
        )
        return cert, key

    def certificate(self, name: str) -> x509.Certificate | None:
        """The certificate `name` as it is on the machine, or None when missing."""
        import base64

        path = KUBEADM_CERTS[name][0]
        text = self.machine.read(path)
        if text is None:
            return None
        if path.endswith(".conf"):
            users = (yaml.load(text, Loader=_YAML) or {}).get("users") or []
            data = users[0]["user"].get("client-certificate-data") if users else None
            if not data:
                return None
            text = base64.b64decode(data).decode()
        return x509.load_pem_x509_certificate(text.encode())

    def expires(self, name: str) -> datetime.datetime | None:
        cert = self.certificate(name)
        return cert.not_valid_after_utc if cert is not None else None

    def _external(self, ca_name: str) -> bool:
        base = KUBEADM_CAS[ca_name]
        return (
            self.machine.path(f"{base}.crt").exists()
            and not self.machine.path(f"{base}.key").exists()
        )

    # -- kubeadm certs ----------------------------------------------------------------

    def command(self, argv: list[str], _input: str | None) -> str:
        if argv[2:] == ["check-expiration", "-o", "json"]:
            return self._check_expiration()
        if argv[2:] == ["renew", "all"]:
            return self._renew_all(argv)
        raise CommandError(argv, 1, f"fake kubeadm certs does not handle {argv[2:]}")

    def _entry(
        self, name: str, cert: x509.Certificate | None, ca_name: str | None, external: bool
    ) -> dict:
        entry: dict = {"name": name}
        if cert is None:
            entry.update(expirationDate=None, residualTime=0, externallyManaged=False)
        else:
            expires = cert.not_valid_after_utc
            entry["expirationDate"] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
            entry["residualTime"] = int((expires - self.clock()).total_seconds())
            entry["externallyManaged"] = external
        if ca_name and cert is not None:
            entry["caName"] = ca_name
        entry["missing"] = cert is None
        return entry

    def _check_expiration(self) -> str:
        certificates = [
            self._entry(name, self.certificate(name), ca, self._external(ca))
            for name, (_path, ca, _cn, _org) in sorted(KUBEADM_CERTS.items())
        ]
        authorities = []
        for name, base in sorted(KUBEADM_CAS.items()):
            pem = self.machine.read(f"{base}.crt")
            cert = x509.load_pem_x509_certificate(pem.encode()) if pem else None
            authorities.append(self._entry(name, cert, None, self._external(name)))
        info = {
            "kind": "CertificateExpirationInfo",
            "apiVersion": "output.kubeadm.k8s.io/v1alpha3",
            "certificates": certificates,
            "certificateAuthorities": authorities,
        }
        return json.dumps(info, indent=4) + "\n"

    def renew_for_upgrade(self) -> None:
        """What `kubeadm upgrade` renews: each present certificate of a CA whose key is here."""
        for name, (_path, ca, _cn, _org) in sorted(KUBEADM_CERTS.items()):
            if self.certificate(name) is not None and not self._external(ca):
                self._issue(name)

    def _renew_all(self, argv: list[str]) -> str:
        out = []
        for name, (_path, ca, _cn, _org) in sorted(KUBEADM_CERTS.items()):
            long_name = self.LONG_NAMES[name]
            if self.certificate(name) is None:
                out.append(f"MISSING! {long_name}")
                continue
            if self._external(ca):
                out.append(f"Detected external {ca}, {long_name} can't be renewed")
                continue
            try:
                self._ca(ca)
            except ValueError as e:
                base = KUBEADM_CAS[ca]
                raise CommandError(
                    argv,
                    1,
                    "\n".join(out)
                    + f"\nfailure loading {ca} certificate authority: couldn't load the private "
                    f"key file {base}.key: {e}",
                ) from None
            self._issue(name)
            out.append(f"{long_name} renewed")
        self.renewals += 1
        out.append(
            "\nDone renewing certificates. You must restart the kube-apiserver, "
            "kube-controller-manager, kube-scheduler and etcd, so that they can use the new "
            "certificates."
        )
        return "\n".join(out) + "\n"


class FakeKubelet:
    """kubelet's static pods: it runs what /etc/kubernetes/manifests holds.

    kubelet looks at the manifest directory every fileCheckFrequency (20 s by default,
    KubeletConfiguration): a manifest removed stops its pod, one that comes back starts a
    new pod, which loads the certificates on disk then (kubernetes.io "Certificate
    Management with kubeadm", manual certificate renewal). `sync()` is one such look;
    `loaded[pod]` is the apiserver certificate's notAfter when the pod last started.
    """

    def __init__(self, machine: FakeMachine, pki: KubeadmPki):
        self.machine = machine
        self.pki = pki
        self.running: dict[str, datetime.datetime | None] = {}
        self.events: list[tuple[str, str]] = []  # ("stop" | "start", pod)
        self.on_start: dict[str, Callable[[], None]] = {}  # pod: what its start does

    def sync(self, *_seconds: float) -> None:
        directory = self.machine.path(MANIFESTS)
        present = {p.stem for p in directory.glob("*.yaml")} if directory.is_dir() else set()
        for pod in sorted(set(self.running) - present):
            del self.running[pod]
            self.events.append(("stop", pod))
        for pod in sorted(present - set(self.running)):
            self.running[pod] = self.pki.expires("apiserver")
            self.events.append(("start", pod))
            if pod in self.on_start:
                self.on_start[pod]()


ETCD_CONTAINER = "3f0c6b1e9a7d52c4e8b0a1f2d3c4b5a6978812ab34cd56ef7890ab12cd34ef56"


def etcd_manifest(name: str, address: str) -> str:
    """Kubeadm's etcd static pod, as far as a restore reads it (phases/etcd/local.go)."""
    command = [
        "etcd",
        f"--advertise-client-urls=https://{address}:2379",
        "--data-dir=/var/lib/etcd",
        f"--initial-advertise-peer-urls=https://{address}:2380",
        f"--initial-cluster={name}=https://{address}:2380",
        f"--name={name}",
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "etcd", "namespace": "kube-system"},
        "spec": {"containers": [{"name": "etcd", "command": command}]},
    }
    return yaml.dump(pod, Dumper=_YAML_DUMPER)


class FakeCrictl:
    """`crictl ps` and `crictl exec` into the etcd static pod's container.

    crictl asks containerd's CRI socket: while the containerd service is not active it
    fails as cri-tools does when it cannot connect (cmd/crictl/main.go, the runtime
    service's "validate service connection" error).
    `crictl ps --name=^NAME$ --state=Running --quiet` lists the container of each static
    pod kubelet runs (`FakeKubelet`): kubelet names a static pod's container as its
    manifest does, kubeadm after the component (phases/controlplane/manifests.go).
    The etcd container runs while kubelet runs the etcd static pod (`FakeKubelet`). Its
    image (registry.k8s.io/etcd) carries etcdctl and etcdutl; the pod mounts the data
    directory and /etc/kubernetes/pki/etcd at the host's paths (kubeadm
    phases/etcd/local.go), so a path inside it is the same path on the host. Emulated:
    - `crictl ps --name=^etcd$ --state=Running --quiet`: the container ID per line;
    - `etcdctl ... snapshot save FILE`: the member's stream written to FILE.part, renamed
      to FILE when complete; prints "Snapshot saved at FILE" (etcdctl 3.5.1 as run here,
      2026-11-27). An unreachable member fails, exit 5, after --command-timeout, with
      "Error: context deadline exceeded" last and FILE.part left behind (same run);
    - `etcdutl snapshot status FILE --write-out=json` (see fakes.etcd.snapshot_status);
      a file that is no snapshot fails with "Error: invalid database";
    - `etcdutl snapshot restore FILE --name --initial-cluster
      --initial-advertise-peer-urls --data-dir DIR`: a new data directory (refused when
      DIR exists, as etcdutl refuses), whose keyspace a member started on it serves
      (`load_data_dir`, run when kubelet starts the etcd pod).
    """

    def __init__(self, machine: FakeMachine, kubelet: FakeKubelet, etcd: FakeEtcd | None):
        self.machine = machine
        self.kubelet = kubelet
        self.etcd = etcd
        self.restores: list[dict[str, str]] = []  # the flags of each `etcdutl snapshot restore`
        self._loaded = b""

    def _running(self) -> bool:
        return self.etcd is not None and "etcd" in self.kubelet.running

    def _container(self, name: str) -> str | None:
        if name in self.kubelet.running and name == "etcd":
            return ETCD_CONTAINER
        if name in self.kubelet.running:
            return hashlib.sha256(name.encode()).hexdigest()
        return None

    def command(self, argv: list[str], _input: str | None) -> str:
        args = [a for a in argv[1:] if not a.startswith("--runtime-endpoint")]
        containerd = self.machine.services.get("containerd")
        if containerd is not None and not containerd.active:
            raise CommandError(
                argv,
                1,
                "validate service connection: validate CRI v1 runtime API for endpoint "
                '"unix:///run/containerd/containerd.sock": rpc error: code = Unavailable '
                'desc = connection error: desc = "transport: Error while dialing: dial unix '
                '/run/containerd/containerd.sock: connect: connection refused"',
            )
        if args[:1] == ["ps"]:
            names = [a.removeprefix("--name=") for a in args if a.startswith("--name=")]
            name = names[0].removeprefix("^").removesuffix("$") if names else "etcd"
            found = self._container(name)
            return f"{found}\n" if found else ""
        if args[:2] != ["exec", ETCD_CONTAINER] or not self._running():
            raise CommandError(argv, 1, f'execing command in container "{args[1:2]}": not found')
        program, rest = args[2], args[3:]
        if program == "etcdctl" and rest[-3:-1] == ["snapshot", "save"]:
            return self._save(argv, rest)
        if program == "etcdutl" and rest[:2] == ["snapshot", "restore"]:
            return self._restore(argv, rest)
        if program == "etcdutl" and rest[:2] == ["snapshot", "status"]:
            data = self.machine.path(rest[2]).read_bytes()
            try:
                return json.dumps(snapshot_status(data), separators=(",", ":")) + "\n"
            except ValueError as e:
                raise CommandError(argv, 1, f"Error: {e}") from None
        raise CommandError(argv, 1, f"fake crictl: {program} {' '.join(rest)} not emulated")

    def _restore(self, argv: list[str], rest: list[str]) -> str:
        flags = dict(a.split("=", 1) for a in rest if a.startswith("--"))
        data_dir = self.machine.path(flags["--data-dir"])
        if data_dir.exists():  # etcdutl/snapshot/v3_snapshot.go Restore
            raise CommandError(
                argv, 1, f'Error: data-dir "{flags["--data-dir"]}" not empty or could not be read'
            )
        data = self.machine.path(rest[2]).read_bytes()
        try:
            snapshot_status(data)
        except ValueError as e:
            raise CommandError(argv, 1, f"Error: {e}") from None
        self.restores.append(flags)
        db = data_dir / "member" / "snap" / "db"
        db.parent.mkdir(parents=True)
        db.write_bytes(data)
        return ""

    def load_data_dir(self) -> None:
        """The etcd pod starts: a member on a restored data directory serves its keyspace."""
        db = self.machine.path("/var/lib/etcd/member/snap/db")
        if self.etcd is None or not db.is_file():
            return
        data = db.read_bytes()
        if data != self._loaded:
            self.etcd.restore(data)
            self._loaded = data

    def _save(self, argv: list[str], rest: list[str]) -> str:
        assert self.etcd is not None
        flags = dict(a.split("=", 1) for a in rest if a.startswith("--"))
        for flag in ("--cacert", "--cert", "--key"):
            if not self.machine.path(flags[flag]).is_file():
                raise CommandError(argv, 128, f"Error: open {flags[flag]}: no such file")
        target = self.machine.path(rest[-1])
        target.parent.mkdir(parents=True, exist_ok=True)  # the data directory etcd runs on
        part = target.with_name(target.name + ".part")
        part.write_bytes(b"")
        if not self.etcd.reachable:
            raise CommandError(argv, 5, "Error: context deadline exceeded")
        part.write_bytes(self.etcd.snapshot())
        part.replace(target)
        return f"Snapshot saved at {rest[-1]}\n"
