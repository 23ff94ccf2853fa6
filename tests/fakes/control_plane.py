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

import dataclasses
import datetime
import json
import secrets
import string
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from ops import testing

from charms.gpu_k8s.v0.system import CommandError
from fakes.etcd import FakeEtcd
from fakes.kube_apiserver import FakeKubeApiServer
from fakes.kube_auth import KUBEADM_ADMIN
from fakes.machine import FakeMachine

ADMIN_TOKEN = "admintokenvalue0123456789"
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


def _ca_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
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
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM).decode()


CA_PEM = _ca_pem()


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
    ):
        self.machine = FakeMachine(root, hostname=hostname)
        self.api = api
        self.etcd = etcd
        self.inits: list[list[dict]] = []
        self.tokens: list[str] = []  # every token ever issued (for secret scans)
        self.live_tokens: set[str] = set()
        self.uploads: list[str] = []
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

        self.machine._join_phase = join_phase
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
        return yaml.safe_load(cm["data"]["ClusterConfiguration"]) if cm else {}

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
        docs = list(yaml.safe_load_all(self.machine.read(argv[argv.index("--config") + 1])))
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
        if "--config" in argv:
            path = self.machine.path(argv[argv.index("--config") + 1])
            if path.stat().st_mode & 0o077:
                raise CommandError(argv, 1, "fake: config must not be readable by others")
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
            init = next(d for d in docs if d.get("kind") == "InitConfiguration")
            key = init.get("certificateKey", "")
        else:
            key = argv[argv.index("--certificate-key") + 1]
        self.uploads.append(key)
        return "[upload-certs] Storing the certificates in Secret kubeadm-certs\n"

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
        docs = list(yaml.safe_load_all(path.read_text()))
        self.inits.append(docs)
        init = next(d for d in docs if d["kind"] == "InitConfiguration")
        for bt in init.get("bootstrapTokens", []):
            self.tokens.append(bt["token"])
            self.live_tokens.add(bt["token"])
        self.machine.write("/etc/kubernetes/admin.conf", self.api.kubeconfig(ADMIN_TOKEN), 0o600)
        self.machine.write("/etc/kubernetes/pki/ca.crt", CA_PEM)
        self.machine.write("/etc/kubernetes/kubelet.conf", "apiVersion: v1\nkind: Config\n")
        self.machine.kubelet_client_cert()
        name = init["nodeRegistration"]["name"]
        cluster = next(d for d in docs if d["kind"] == "ClusterConfiguration")
        self._write_apiserver_cert(name, init["localAPIEndpoint"]["advertiseAddress"], cluster)
        if self.etcd is not None:
            self.etcd.pki.install(self.machine.write)
            self.etcd.add(name)
        self.api.put_object(
            "/api/v1/namespaces/kube-system/configmaps/kubeadm-config",
            {"data": {"ClusterConfiguration": yaml.safe_dump(cluster)}},
        )
        self.api.put_object(f"/api/v1/nodes/{name}", node(name, control_plane=True))
        return "Your Kubernetes control-plane has initialized successfully!\n"

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
            return token + "\n"
        if argv[2] == "delete":
            ids = {t.split(".")[0]: t for t in self.live_tokens}
            if argv[3] not in ids:
                raise CommandError(argv, 1, f'bootstrap token "{argv[3]}" not found')
            self.live_tokens.discard(ids[argv[3]])
            return f"bootstrap token {argv[3]!r} deleted\n"
        raise CommandError(argv, 1, "fake kubeadm token: unsupported")


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
        {"data": {"ClusterConfiguration": yaml.safe_dump(cluster)}},
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
JOIN_LABEL = "kubernetes-cluster-join"


def peers(
    app: dict | None = None, units: dict[int, dict] | None = None, local: dict | None = None
) -> testing.PeerRelation:
    return testing.PeerRelation(
        "peers", local_app_data=app or {}, local_unit_data=local or {}, peers_data=units or {}
    )


def workers_relation(units: dict[int, dict], app: str = "kubernetes-worker") -> testing.Relation:
    return testing.Relation("workers", remote_app_name=app, remote_units_data=units)


def worker_bag(name: str, gpus: list[dict] | None = None) -> dict:
    bag = {"node-name": name}
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


def secret(state: testing.State, label: str) -> testing.Secret:
    return next(s for s in state.secrets if s.label == label)


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
