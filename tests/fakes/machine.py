"""A fake Ubuntu machine: apt, dpkg, systemd, kernel knobs and kubeadm, on a temp root.

`FakeMachine` registers handlers on a `FakeRunner` that behave like the real programs
as far as the host libraries can tell, and records what it installed in an in-memory
dpkg database; `dpkg-query`, `apt-mark`, `systemctl` and `kubeadm` read and change that
state. apt behaves like the real one where the charms have been caught out before:

- The Ubuntu archive holds ONE version of a package per pocket (release, -security,
  -updates; packages.ubuntu.com lists one per suite): an update replaces the version in
  its pocket and the old .deb is gone (`publish()`). Upstream repositories such as
  pkgs.k8s.io keep every version they ever published.
- apt knows only what the last `apt-get update` indexed (`lists`; a new machine's lists
  are as fresh as its first boot). Installing a version the lists name but the archive no
  longer has fails to fetch, as on a machine whose lists went stale.
- `pkg=version` accepts apt's version globs (`2.2.*`, `1.36.5-*`; the highest match
  wins), and `/etc/apt/preferences.d` pins (`Pin: version 2.2.*`) restrict the candidate
  of `apt-get install pkg` the way apt_preferences(5) describes.

Other tests extend it without subclassing:

```python
machine = FakeMachine(tmp_path)
machine.on_kubeadm("init", my_init)          # kubeadm <subcommand> handler
machine.on("kubectl", my_kubectl)            # any other program
machine.fail("/usr/bin/apt-get -o DPkg::Lock::Timeout=300 install", stderr="E: ...")
```
Secrets never reach `runner.calls` through these handlers: `kubeadm join` reads its
token from the config file, which the handler parses into `machine.joins`.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import fnmatch
import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from charms.gpu_k8s.v0 import api_proxy, kubeadm
from charms.gpu_k8s.v0.system import CommandError, Host
from fakes.host import FakeRunner, Handler


def _yaml_text(data: Any) -> str:
    """`yaml.safe_dump` on libyaml's emitter where PyYAML has it: the same document.

    The pure-Python emitter spent ~4 ms on each kubelet.conf with its inlined
    certificates (a joined worker's every test writes one).
    """
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))


# libyaml's loader (in PyYAML's wheels) for the configs kubeadm reads: the same data as
# yaml.safe_load, ~10x faster than PyYAML's pure-Python scanner
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


ARMORED_KEY = (
    "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGMHxxxfakekeyforpkgsk8sio\n"
    "-----END PGP PUBLIC KEY BLOCK-----\n"
)
# Programs that only exist once their package is installed.
PROGRAM_PACKAGES = {
    "kubeadm": "kubeadm",
    "kubectl": "kubectl",
    "kubelet": "kubelet",
    "haproxy": "haproxy",
}
# The Ubuntu 24.04 archive as the fake starts it: one version per pocket. These are
# versions noble has published (packages.ubuntu.com, launchpad publishing history); the
# charms pin series (containerd 2.*), so an update in a pocket must not break them.
UBUNTU_ARCHIVE: dict[str, dict[str, str]] = {
    "containerd": {"release": "1.7.12-0ubuntu4", "updates": "2.2.1-0ubuntu1~24.04.3"},
    "runc": {
        "release": "1.1.12-0ubuntu3",
        "security": "1.3.3-0ubuntu1~24.04.3",
        "updates": "1.3.4-0ubuntu1~24.04.1",
    },
    "curl": {"release": "8.5.0-2ubuntu10", "updates": "8.5.0-2ubuntu10.6"},
    "haproxy": {"release": "2.8.5-1ubuntu3", "updates": "2.8.16-0ubuntu0.24.04.3"},
    # Not checked against the archive: the charms ask nfs-common for no version.
    "nfs-common": {"release": "1:2.6.4-3ubuntu5"},
}
# The phases of `kubeadm join` in their order since 1.35 (kubernetes/kubernetes
# cmd/kubeadm/app/cmd/join.go NewJoinCmd: AddPhase calls; ControlPlaneKubeletLocalMode
# moved the etcd member join before the control-plane phase); the control-plane and etcd
# phases run only for --control-plane joins.
JOIN_PHASES = (
    "preflight",
    "control-plane-prepare",
    "check-etcd",
    "kubelet-start",
    "etcd-join",
    "kubelet-wait-bootstrap",
    "control-plane-join",
    "wait-control-plane",
)
CONTROL_PLANE_PHASES = ("control-plane-prepare", "check-etcd", "etcd-join", "control-plane-join")
# Commands that only read state (everything else counts as a mutation).
READ_ONLY = (
    "dpkg-query",
    "apt-mark showhold",
    "apt-get -s",
    "systemctl is-enabled",
    "systemctl is-active",
    "hostname",
    "kubeadm version",
    "kubelet --version",
    "haproxy -c",
)


def deb(version: str) -> str:
    """The package version the fake pkgs.k8s.io serves for an upstream version (X.Y.Z-1.1)."""
    return f"{version}-1.1"


@dataclasses.dataclass
class Service:
    """A systemd unit's state."""

    enabled: bool = True
    active: bool = True
    restarts: int = 0
    reloads: int = 0
    # the package version of the binary the running process was started from: a package
    # upgrade replaces the file, not the process (the kubelet deb does not restart it:
    # kubernetes/release cmd/krel/templates/latest/kubelet/kubelet.spec `%systemd_postun`)
    running: str | None = None


def _key(version: str) -> tuple[int, ...]:
    """Order Debian versions by their numbers (enough for the versions tests use)."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def _fail(argv: list[str], code: int, stderr: str) -> CommandError:
    return CommandError(argv, code, stderr)


class FakeMachine:
    """An Ubuntu 24.04 machine emulated on a temporary root directory."""

    def __init__(self, root: Path, *, hostname: str = "ip-10-0-1-17"):
        self.root = root
        self.runner = FakeRunner(root)
        self.hostname = hostname
        # {package: {pocket: version}}: what the Ubuntu archive serves now
        self.archive: dict[str, dict[str, str]] = {
            name: dict(pockets) for name, pockets in UBUNTU_ARCHIVE.items()
        }
        self.remote: dict[str, dict[str, set[str]]] = {}
        self.urls: dict[str, str] = {}
        self.add_repository(kubeadm.UPSTREAM)
        self.indexed: set[str] = set()
        # {package: versions} apt knows: the archive as of the first boot's update
        self.lists: dict[str, set[str]] = self._archive_versions()
        self.dpkg: dict[str, str] = {}
        self.held: set[str] = set()
        self.services: dict[str, Service] = {}
        self._start_failures: dict[str, list[str]] = {}  # fail_start
        # HAProxy's master-worker process (see `_haproxy_master`): the configuration its
        # current worker runs (None: not running), the master's reloads and failed reloads
        # (`show proc`), and the reloads its master will refuse (`refuse_reload`)
        self.haproxy_loaded: str | None = None
        self.haproxy_reloads = [0, 0]
        self._reload_refusals: list[str] = []
        self._kubelet_served: str | None = None  # kubelet_serves
        self.unit_files: set[str] = set()  # services defined by files systemd has loaded
        self.sysctl: dict[str, str] = {}
        self.joins: list[dict] = []
        self.upgrades: list[tuple[str, str]] = []  # (apply|node, kubeadm version it ran)
        # the version `kubeadm upgrade apply` last moved the cluster to (None: not known,
        # the version policy's cluster-version checks are then left out)
        self.cluster_version: str | None = None
        # `kubeadm join` fails with this message in phase `join_fails_in`, after the
        # phases before it wrote their files (see `_kubeadm_join`).
        self.join_error: str | None = None
        self.join_fails_in = "preflight"
        # `kubeadm reset` fails with this message, before it removed anything, while set
        # (as its preflight phase does, or a reset cut short by the charm's timeout);
        # kubeadm's reset phases: preflight, remove-etcd-member, cleanup-node
        # (cmd/kubeadm/app/cmd/phases/reset).
        self.reset_error: str | None = None
        self.ca_pem = "-----BEGIN CERTIFICATE-----\nfake\n"
        self.admin_conf = "apiVersion: v1\nkind: Config\n# cluster-admin\n"
        self.on_etcd_join: Handler | None = None  # a control plane's etcd member add
        # The cluster this machine's kubelet bootstraps against: a TLS FakeKubeApiServer,
        # whose CA signs the kubelet's client certificate at join (`_kubelet_bootstrapped`).
        # Without one, kubelet.conf names the join endpoint and the PEM is a placeholder.
        self.cluster: Any = None
        self.kubelet_enabled_on_install = True
        # the machine's time (UTC): when kubelet dates the serving certificate it makes
        self.clock: Any = lambda: datetime.datetime.now(datetime.timezone.utc)
        self._kubeadm: dict[str, Handler] = {
            "join": self._kubeadm_join,
            "reset": self._kubeadm_reset,
            "upgrade": self._kubeadm_upgrade,
            "version": self._kubeadm_version,
        }
        self.write("/etc/hostname", f"{hostname}\n")
        self.write("/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n")
        self.write(
            "/etc/fstab", "LABEL=cloudimg-rootfs\t/\text4\tdiscard,errors=remount-ro\t0 1\n"
        )
        for program, handler in {
            "dpkg-query": self._dpkg_query,
            "apt-get": self._apt_get,
            "apt-mark": self._apt_mark,
            "curl": self._curl,
            "gpg": self._gpg,
            "systemctl": self._systemctl,
            "modprobe": self._modprobe,
            "sysctl": self._sysctl,
            "swapoff": self._swapoff,
            "hostname": lambda argv, _input: f"{self.hostname}\n",
            "kubeadm": self._kubeadm_dispatch,
            "kubelet": self._kubelet,
            "haproxy": self._haproxy,
        }.items():
            self.on(program, handler)
        self.runner.on_socket(api_proxy.MASTER_SOCKET, self._haproxy_master_cli)

    # -- extension points -------------------------------------------------------------

    def host(self) -> Host:
        """A `Host` for the code under test."""
        return self.runner.host()

    def on(self, program: str, handler: Handler) -> None:
        """Emulate another program, or replace one of the built-in handlers."""
        program_package = PROGRAM_PACKAGES.get(program)
        if program_package:
            self.runner.on(program, self._needs_package(program_package, handler))
        else:
            self.runner.on(program, handler)

    def on_kubeadm(self, subcommand: str, handler: Handler) -> None:
        """Emulate `kubeadm <subcommand>` (e.g. `init`, `token`); gets the full argv."""
        self._kubeadm[subcommand] = handler

    def fail(self, prefix: str, *, returncode: int = 1, stderr: str = "", times: int = 1) -> None:
        """Make the next `times` commands starting with `prefix` fail (see FakeRunner)."""
        self.runner.fail(prefix, returncode=returncode, stderr=stderr, times=times)

    def fail_start(self, name: str, stderr: str, times: int = 1) -> None:
        """Make the next `times` (re)starts of service `name` fail, leaving it inactive.

        As systemd does when a unit's start fails: `restart` stopped it first, and the unit
        is left failed (`is-active` answers `failed`) until a start succeeds.
        """
        self._start_failures.setdefault(name, []).extend([stderr] * times)

    def refuse_reload(self, alert: str, times: int = 1) -> None:
        """HAProxy's master refuses the next `times` reloads, after `systemctl reload` succeeded.

        As HAProxy does with a configuration `haproxy -c` passed but the master cannot
        load, such as a listener whose port another process holds (`haproxy -c` "exits
        before trying to bind", management guide 3): `ExecReload=` only checks and sends
        SIGUSR2, so systemctl reports success; the master logs `alert`, counts a failed
        reload and keeps the workers it had (management guide 9.4.1 "show proc", "prompt":
        "master[ReloadFailed]>"; seen with Debian's 2.6.12, tests/functional).
        """
        self._reload_refusals.extend([alert] * times)

    def add_repository(self, base: str) -> None:
        """Serve a pkgs.k8s.io-layout repository (every pinned minor) under `base`.

        Each minor's repository has the pinned versions as revision -1.1 and, for
        kubeadm/kubelet/kubectl, the patch before too (upstream keeps every version).
        """
        for minor, release in kubeadm.RELEASES.items():
            uri = f"{base.rstrip('/')}/core:/stable:/v{minor}/deb/"
            pins = release.packages(with_kubectl=True)
            served = {pkg: {glob.replace("*", "1.1")} for pkg, glob in pins.items()}
            major_minor, patch = release.kubernetes.rsplit(".", 1)
            if int(patch) > 0:
                for pkg in ("kubeadm", "kubelet", "kubectl"):
                    served[pkg].add(f"{major_minor}.{int(patch) - 1}-1.1")
            self.remote[uri] = served
            self.urls[f"{uri}Release.key"] = ARMORED_KEY

    def serve_kubernetes(self, version: str) -> None:
        """pkgs.k8s.io publishes kubeadm/kubelet/kubectl `version` (as X.Y.Z-1.1) in its minor."""
        minor = ".".join(version.split(".")[:2])
        for uri, served in self.remote.items():
            if uri.endswith(f"/v{minor}/deb/"):
                for pkg in ("kubeadm", "kubelet", "kubectl"):
                    served.setdefault(pkg, set()).add(deb(version))

    def running(self, service: str) -> str | None:
        """The package version service `service` runs (started from), or None when stopped."""
        state = self.services.get(service)
        return state.running if state is not None and state.active else None

    def publish(self, package: str, version: str, pocket: str = "updates") -> None:
        """The archive publishes `version` in `pocket`, replacing what the pocket held."""
        self.archive.setdefault(package, {})[pocket] = version

    def withdraw(self, package: str) -> None:
        """The archive has no such package (and never had: the lists do not name it)."""
        self.archive.pop(package, None)
        self.lists.pop(package, None)

    def enable_swap(self) -> None:
        """Give the machine an active swap file listed in /etc/fstab."""
        self.write(
            "/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n/swap.img\tfile\t4G\t0\t-2\n"
        )
        fstab = self.read("/etc/fstab") or ""
        self.write("/etc/fstab", fstab + "/swap.img\tnone\tswap\tsw\t0\t0\n")

    # -- inspection -------------------------------------------------------------------

    @property
    def calls(self):
        """Every command run so far."""
        return self.runner.calls

    def lines(self, program: str | None = None) -> list[str]:
        """Command lines run so far, optionally of one program (basename)."""
        return self.runner.lines(program)

    def mutations(self) -> list[str]:
        """Command lines that changed the machine (read-only queries left out)."""
        out = []
        for call in self.runner.calls:
            line = " ".join([os.path.basename(call.argv[0]), *call.argv[1:]])
            if not line.startswith(READ_ONLY):
                out.append(line)
        return out

    def proxy_servers(self) -> list[str]:
        """The API servers the node-local HAProxy forwards to (its `server api-N` lines)."""
        text = self.read(api_proxy.CONFIG) or ""
        return [
            line.split()[2] for line in text.splitlines() if line.strip().startswith("server api-")
        ]

    def path(self, absolute: str) -> Path:
        """`absolute` under the machine's root."""
        return self.root / absolute.lstrip("/")

    def read(self, absolute: str) -> str | None:
        """A file's text, or None."""
        p = self.path(absolute)
        return p.read_text() if p.exists() else None

    def write(self, absolute: str, text: str, mode: int = 0o644) -> None:
        """Put a file on the machine."""
        p = self.path(absolute)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        p.chmod(mode)

    def kubelet_client_cert(
        self, issued: str = "2026-11-24-10-00-00", pem: str | None = None
    ) -> str:
        """Kubelet's client certificate after its TLS bootstrap (or a rotation).

        As client-go's certificate store does (util/certificate/certificate_store.go):
        certificate and key in one dated PEM, 0600, and `kubelet-client-current.pem`
        an absolute link to it, replaced at each rotation. Returns the dated path.
        """
        pki = "/var/lib/kubelet/pki"
        dated = f"{pki}/kubelet-client-{issued}.pem"
        placeholder = "-----BEGIN CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----\n"
        self.write(dated, pem or placeholder, 0o600)
        link = self.path(f"{pki}/kubelet-client-current.pem")
        link.unlink(missing_ok=True)
        link.symlink_to(dated)  # absolute, a path on the machine
        return dated

    def kubelet_serves(self) -> str | None:
        """The common name of the serving certificate the running kubelet serves, or None.

        kubelet serves the pair in kubelet.crt and kubelet.key even while it runs: its
        dynamic file manager (ReloadKubeletServerCertificateFile, on by default since 1.31:
        pkg/kubelet/certificate/kubelet.go NewKubeletServerCertificateDynamicFileManager)
        re-reads them and takes a pair only when the key matches the first certificate
        (crypto/tls X509KeyPair); otherwise it keeps the last pair it took. None when
        kubelet is not running.
        """
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.x509.oid import NameOID

        service = self.services.get("kubelet")
        if service is None or not service.active:
            return None
        cert = self.read(kubeadm.KUBELET_SERVING_CERT)
        key = self.read(kubeadm.KUBELET_SERVING_KEY)
        try:
            leaf = x509.load_pem_x509_certificates(cert.encode())[0] if cert else None
            private = serialization.load_pem_private_key(key.encode(), None) if key else None
        except ValueError:
            leaf = private = None
        if leaf is not None and private is not None:
            if leaf.public_key() == private.public_key():
                name = leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
                self._kubelet_served = str(name)
        return self._kubelet_served

    def kubelet_posts_status(self) -> None:
        """The version the running kubelet posts in its Node's status as it starts.

        kubelet sets `status.nodeInfo.kubeletVersion` to its own binary's version on every
        node status update, the first as it starts (kubernetes pkg/kubelet/nodestatus/
        setters.go MachineInfo: `version.Get().String()`, "v1.36.5"), so it names the
        process that runs, not the package on disk. Only with `cluster` attached and the
        Node registered (the tests register it, `worker_scenario.register_node`).
        """
        service = self.services.get("kubelet")
        if self.cluster is None or service is None or not service.active or not service.running:
            return
        path = f"/api/v1/nodes/{self.hostname}"
        node = self.cluster.get_object(path)
        if node is None:
            return
        info = node.setdefault("status", {}).setdefault("nodeInfo", {})
        info["kubeletVersion"] = "v" + service.running.split("-")[0]
        self.cluster.put_object(path, node)

    def kubelet_serving_cert(self) -> bool:
        """What a starting kubelet does about its serving certificate; True if it wrote one.

        kubeadm leaves serverTLSBootstrap off and names no tlsCertFile, so kubelet uses
        /var/lib/kubelet/pki/kubelet.crt and kubelet.key, and only when it cannot read both
        writes a new self-signed pair (kubernetes/kubernetes cmd/kubelet/app/server.go
        InitializeTLS). The pair is client-go's GenerateSelfSignedCertKey (util/cert/
        cert.go): a CA "<hostname>-ca@<unix time>" and the serving certificate
        "<hostname>@<unix time>" (DNS SAN the hostname, serverAuth) it signed, both valid
        from an hour before `clock()` for 365 days, serving certificate then CA in one PEM,
        the key alone in kubelet.key. kubelet's keys are RSA 2048; these are P-256, which
        nothing here reads and which are quicker to make.
        """
        cert, key = kubeadm.KUBELET_SERVING_CERT, kubeadm.KUBELET_SERVING_KEY
        if self.path(cert).is_file() and self.path(key).is_file():
            return False
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = self.clock()
        valid_from = now - datetime.timedelta(hours=1)
        valid_until = valid_from + datetime.timedelta(days=365)
        stamp = int(now.timestamp())

        def name(common_name: str) -> x509.Name:
            return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

        ca_key, leaf_key = (
            ec.generate_private_key(ec.SECP256R1()),
            ec.generate_private_key(ec.SECP256R1()),
        )
        ca_name = name(f"{self.hostname}-ca@{stamp}")
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(1)
            .not_valid_before(valid_from)
            .not_valid_after(valid_until)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        leaf = (
            x509.CertificateBuilder()
            .subject_name(name(f"{self.hostname}@{stamp}"))
            .issuer_name(ca_name)
            .public_key(leaf_key.public_key())
            .serial_number(2)
            .not_valid_before(valid_from)
            .not_valid_after(valid_until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(self.hostname)]), False)
            .sign(ca_key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        self.write(cert, (leaf.public_bytes(pem) + ca.public_bytes(pem)).decode())
        key_pem = leaf_key.private_bytes(
            pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
        self.write(key, key_pem.decode(), 0o600)
        return True

    # -- programs ---------------------------------------------------------------------

    def _needs_package(self, package: str, handler: Handler) -> Handler:
        def run(argv: list[str], input: str | None) -> str:
            if package not in self.dpkg:
                raise _fail(argv, 127, f"{argv[0]}: command not found")
            return handler(argv, input)

        return run

    def _dpkg_query(self, argv: list[str], _input: str | None) -> str:
        package = argv[-1]
        if package not in self.dpkg:
            raise _fail(argv, 1, f"dpkg-query: no packages found matching {package}")
        fmt = argv[argv.index("-f") + 1] if "-f" in argv else "${Package}\t${Version}\n"
        return (
            # `${Status}` starts with the desired action: `hold` for a held package.
            fmt.replace(
                "${Status}",
                "hold ok installed" if package in self.held else "install ok installed",
            )
            .replace("${Version}", self.dpkg[package])
            .replace("${Package}", package)
        )

    def _apt_args(self, argv: list[str]) -> list[str]:
        args, skip = [], False
        for arg in argv[1:]:
            if skip:
                skip = False
            elif arg == "-o":
                skip = True
            elif not arg.startswith("-"):
                args.append(arg)
        return args

    def _apt_get(self, argv: list[str], _input: str | None) -> str:
        args = self._apt_args(argv)
        if args[:1] == ["update"]:
            return self._apt_update(argv)
        if args[:1] == ["install"] and ("-s" in argv or "--simulate" in argv):
            return self._apt_simulate(argv, args[1:])
        if args[:1] == ["install"]:
            return self._apt_install(argv, args[1:])
        raise _fail(argv, 100, f"E: fake apt-get does not handle {args[:1]}")

    def _sources(self) -> list[tuple[str, str]]:
        """(URI, Signed-By) of every deb822 source on the machine."""
        out = []
        directory = self.path(kubeadm.apt.SOURCES_DIR)
        for f in sorted(directory.glob("*.sources")) if directory.is_dir() else []:
            fields = dict(
                line.split(": ", 1) for line in f.read_text().splitlines() if ": " in line
            )
            out.append((fields.get("URIs", ""), fields.get("Signed-By", "")))
        return out

    def _archive_versions(self) -> dict[str, set[str]]:
        return {name: set(pockets.values()) for name, pockets in self.archive.items()}

    def _apt_update(self, argv: list[str]) -> str:
        indexed = set()
        for uri, key in self._sources():
            if uri not in self.remote:
                raise _fail(argv, 100, f"E: Failed to fetch {uri}InRelease  404  Not Found")
            if not key or not self.path(key).exists():
                raise _fail(argv, 100, f"E: The repository '{uri} InRelease' is not signed.")
            indexed.add(uri)
        self.indexed = indexed
        lists = self._archive_versions()
        for uri in indexed:
            for name, versions in self.remote[uri].items():
                lists.setdefault(name, set()).update(versions)
        self.lists = lists
        return "Reading package lists... Done\n"

    def available(self) -> dict[str, set[str]]:
        """Package versions apt can install now: those its lists name."""
        return {name: set(versions) for name, versions in self.lists.items()}

    def _fetchable(self, name: str, version: str) -> bool:
        if version in self.archive.get(name, {}).values():
            return True
        return any(version in repo.get(name, ()) for repo in self.remote.values())

    def preferences(self) -> dict[str, tuple[str, int]]:
        """{package: (version glob, priority)} from /etc/apt/preferences.d (apt_preferences(5))."""
        pins: dict[str, tuple[str, int]] = {}
        directory = self.path("/etc/apt/preferences.d")
        for f in sorted(directory.iterdir()) if directory.is_dir() else []:
            for stanza in f.read_text().split("\n\n"):
                fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
                pin = fields.get("Pin", "")
                if not pin.startswith("version ") or "Pin-Priority" not in fields:
                    continue
                for package in fields.get("Package", "").split():
                    pins[package] = (pin.removeprefix("version "), int(fields["Pin-Priority"]))
        return pins

    def _candidate(self, argv: list[str], name: str, wanted: str, available: set[str]) -> str:
        """The version `apt-get install name[=wanted]` picks, or the error apt prints."""
        if wanted:
            matching = {v for v in available if fnmatch.fnmatchcase(v, wanted)}
            if not matching:
                raise _fail(argv, 100, f"E: Version '{wanted}' for '{name}' was not found")
            return max(matching, key=_key)
        pin = self.preferences().get(name)
        if pin and pin[1] > 0:
            pinned = {v for v in available if fnmatch.fnmatchcase(v, pin[0])}
            if pinned:  # a pin matching no version does not apply (apt_preferences(5))
                return max(pinned, key=_key)
        return max(available, key=_key)

    def _apt_install(self, argv: list[str], specs: list[str]) -> str:
        available = self.available()
        chosen = {}
        for spec in specs:
            name, _, version = spec.partition("=")
            if not available.get(name):
                raise _fail(argv, 100, f"E: Unable to locate package {name}")
            chosen[name] = self._candidate(argv, name, version, available[name])
        changes_held = [n for n, v in chosen.items() if n in self.held and self.dpkg.get(n) != v]
        if changes_held and "--allow-change-held-packages" not in argv:
            raise _fail(
                argv,
                100,
                "E: Held packages were changed and -y was used without "
                "--allow-change-held-packages.",
            )
        older = [n for n, v in chosen.items() if n in self.dpkg and _key(v) < _key(self.dpkg[n])]
        if older and "--allow-downgrades" not in argv:
            raise _fail(
                argv,
                100,
                "E: Packages were downgraded and -y was used without --allow-downgrades.",
            )
        gone = [
            (n, v)
            for n, v in chosen.items()
            if self.dpkg.get(n) != v and not self._fetchable(n, v)
        ]
        if gone:
            name, version = gone[0]
            raise _fail(
                argv,
                100,
                f"E: Failed to fetch http://archive.ubuntu.com/ubuntu/pool/main/{name[0]}/{name}/"
                f"{name}_{version}_amd64.deb  404  Not Found [IP: 185.125.190.83 80]\n"
                "E: Unable to fetch some archives, maybe run apt-get update or try with "
                "--fix-missing?",
            )
        for name, version in chosen.items():
            self.dpkg[name] = version
            if name in ("containerd", "kubelet", "haproxy"):
                enabled = name != "kubelet" or self.kubelet_enabled_on_install
                service = Service(enabled=enabled, active=enabled)
                service.running = version if enabled else None
                self.services.setdefault(name, service)  # an upgrade leaves it running
        return "".join(f"Setting up {n} ({v}) ...\n" for n, v in chosen.items())

    def _apt_simulate(self, argv: list[str], specs: list[str]) -> str:
        """`apt-get -s install`: what it would change, as apt's simulation prints it.

        "Inst <pkg> [<installed>] (<candidate> <archive> [amd64])" for each package that
        would move (apt-get(8) --simulate; apt-pkg/algorithms.cc pkgSimulate); nothing
        changes. A held package moves only with --allow-change-held-packages, as for a
        real install.
        """
        available = self.available()
        out = []
        for spec in specs:
            name, _, version = spec.partition("=")
            if not available.get(name):
                raise _fail(argv, 100, f"E: Unable to locate package {name}")
            chosen = self._candidate(argv, name, version, available[name])
            installed = self.dpkg.get(name)
            if chosen == installed:
                continue
            if name in self.held and "--allow-change-held-packages" not in argv:
                raise _fail(
                    argv,
                    100,
                    "E: Held packages were changed and -y was used without "
                    "--allow-change-held-packages.",
                )
            pocket = next(
                (p for p, v in self.archive.get(name, {}).items() if v == chosen), "release"
            )
            suite = "noble" if pocket == "release" else f"noble-{pocket}"
            old = f" [{installed}]" if installed else ""
            out.append(f"Inst {name}{old} ({chosen} Ubuntu:24.04/{suite} [amd64])")
        return "".join(f"{line}\n" for line in out)

    def _apt_mark(self, argv: list[str], _input: str | None) -> str:
        verb, names = argv[1], argv[2:]
        if verb == "showhold":
            return "".join(f"{n}\n" for n in sorted(self.held))
        for name in names:
            if name not in self.dpkg:
                raise _fail(argv, 100, f"E: Unable to locate package {name}")
        if verb == "hold":
            self.held.update(names)
            return "".join(f"{n} set on hold.\n" for n in names)
        if verb == "unhold":
            self.held.difference_update(names)
            return "".join(f"Canceled hold on {n}.\n" for n in names)
        raise _fail(argv, 100, f"E: fake apt-mark does not handle {verb}")

    def _curl(self, argv: list[str], _input: str | None) -> str:
        args = argv[1:]
        for option in ("--max-time", "--retry"):  # options that take a value
            if option in args:
                i = args.index(option)
                del args[i : i + 2]
        url = next(a for a in args if not a.startswith("-"))
        if url not in self.urls:
            raise _fail(argv, 22, "curl: (22) The requested URL returned error: 404")
        return self.urls[url]

    def _gpg(self, argv: list[str], input: str | None) -> str:
        if "--dearmor" not in argv or "-o" not in argv:
            raise _fail(argv, 2, "gpg: fake handles only --dearmor -o FILE")
        if not (input or "").startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----"):
            raise _fail(argv, 2, "gpg: no valid OpenPGP data found.")
        out = Path(argv[argv.index("-o") + 1])
        if not out.is_relative_to(self.root):
            raise _fail(argv, 2, f"gpg: fake refuses to write outside the machine root: {out}")
        out.write_bytes(b"\x99\x02" + hashlib.sha256(input.encode()).digest())
        return ""

    def _haproxy(self, argv: list[str], _input: str | None) -> str:
        """`haproxy -c -f FILE`: the checks the fake can make as HAProxy 2.6-2.8 makes them.

        A file it cannot open, and a server's `ca-file` or `crt` that is not there, are
        refused with the ALERT lines Debian's HAProxy 2.6.12 printed for them; what needs the
        network (name resolution) only the real binary decides
        (tests/functional/test_api_proxy.py). Tests inject other refusals with `fail`.
        """
        if "-c" not in argv or "-f" not in argv:
            raise _fail(argv, 1, "fake haproxy only checks configurations (-c -f FILE)")
        name = argv[argv.index("-f") + 1]
        text = self.read(name)
        if text is None:
            raise _fail(
                argv,
                1,
                f"[ALERT]    (1) : Cannot open configuration file/directory {name} : "
                "No such file or directory",
            )
        section = ""
        for number, line in enumerate(text.splitlines(), 1):
            words = line.split()
            if words[:1] in (["backend"], ["frontend"]):
                section = words[1]
            if words[:1] != ["server"]:
                continue
            where = f"[ALERT]    (1) : config : [{name}:{number}] : 'server {section}/{words[1]}'"
            if "ca-file" in words[:-1]:  # checked before crt, as HAProxy 2.6 does
                path = words[words.index("ca-file") + 1]
                if not self.path(path).is_file():
                    raise _fail(
                        argv,
                        1,
                        f"{where} : Couldn't open the ca-file '{path}' (No such file or "
                        "directory).",
                    )
            if "crt" in words[:-1]:
                path = words[words.index("crt") + 1]
                if not self.path(path).is_file():
                    raise _fail(
                        argv,
                        1,
                        f"{where} : unable to stat SSL certificate from file '{path}' : No "
                        "such file or directory.",
                    )
        return "Configuration file is valid\n"

    def _systemctl(self, argv: list[str], _input: str | None) -> str:
        args = [a for a in argv[1:] if not a.startswith("-")]
        verb, units = args[0], args[1:]
        if verb == "daemon-reload":
            self._load_unit_files()
            return ""
        for unit in units:
            name = unit.removesuffix(".service")
            service = self.services.get(name)
            if service is None:
                raise _fail(
                    argv, 5 if verb != "is-enabled" else 1, f"Unit {name}.service not found."
                )
            failures = self._start_failures.get(name)
            if verb in ("restart", "start") and failures:
                service.active = False
                raise _fail(argv, 1, failures.pop(0))
            if name == api_proxy.SERVICE and verb == "reload" and service.active:
                self._haproxy_reload(argv)
            self._service_verb(argv, verb, name, service)
            if name == api_proxy.SERVICE:
                self._haproxy_process(verb, service)
            if verb in ("restart", "start") and service.active:
                if verb == "restart" or service.running is None:
                    service.running = self.dpkg.get(name)
                if name == "kubelet" and self.path(kubeadm.KUBELET_CONF).exists():
                    self.kubelet_serving_cert()  # a kubelet that runs (joined) serves
                    self.kubelet_posts_status()
        return ""

    def _haproxy_reload(self, argv: list[str]) -> None:
        """The drop-in's `ExecReload=`: `haproxy -c -q` on the file, then SIGUSR2 to the master.

        systemctl fails only when the check does; what the master then does with the
        signal (`_haproxy_process`) is not systemd's to know.
        """
        check = self.runner.handlers["haproxy"]  # this fake's, or a test's real binary
        try:
            check([api_proxy.HAPROXY, "-Ws", "-c", "-q", "-f", api_proxy.CONFIG], None)
        except CommandError:
            raise _fail(
                argv,
                1,
                "Job for haproxy.service failed because the control process exited with "
                "error code.",
            ) from None

    def _haproxy_process(self, verb: str, service: Service) -> None:
        """What HAProxy's master-worker process runs after systemctl `verb`."""
        if not service.active:
            self.haproxy_loaded = None
        elif verb in ("restart", "start") or self.haproxy_loaded is None:
            # a new master (Type=notify: systemd waits for it); it reads the file now
            self.haproxy_loaded = self.read(api_proxy.CONFIG)
            self.haproxy_reloads = [0, 0]
        elif verb == "reload":
            self.haproxy_reloads[0] += 1
            if self._reload_refusals:
                self._reload_refusals.pop(0)
                self.haproxy_reloads[1] += 1
            else:  # Debian's 2.6.12 shows `[failed: 0]` again after a reload that worked
                self.haproxy_loaded = self.read(api_proxy.CONFIG)
                self.haproxy_reloads[1] = 0

    def _haproxy_master_cli(self, text: str) -> str:
        """HAProxy's master CLI (`-S`): `show proc` and `@1 show info`, as 2.6-2.8 answer.

        Only while the service runs (the socket is its master's); every other command is
        unknown to this fake. The formats: management guide 9.4.1, and what Debian's
        2.6.12 printed (tests/functional/test_api_proxy.py runs it).
        """
        service = self.services.get(api_proxy.SERVICE)
        if service is None or not service.active or self.haproxy_loaded is None:
            raise CommandError(["connect", api_proxy.MASTER_SOCKET], 111, "Connection refused")
        out = []
        for command in (c.strip() for c in re.split(r"[;\n]", text)):
            if command == "show proc":
                reloads, failed = self.haproxy_reloads
                out.append(
                    "#<PID>          <type>          <reloads>       <uptime>        <version>\n"
                    f"1000            master          {reloads} [failed: {failed}]   "
                    "0d00h01m00s     2.8.16-0ubuntu0.24.04.3\n# workers\n"
                    "1100            worker          0               0d00h00m10s     "
                    "2.8.16-0ubuntu0.24.04.3\n# programs\n"
                )
            elif command == "@1 show info":
                description = ""
                for line in self.haproxy_loaded.splitlines():
                    if line.split()[:1] == ["description"]:
                        description = line.split(None, 1)[1]
                out.append(f"Name: HAProxy\nVersion: 2.8.16\ndescription: {description}\n")
            elif command:
                out.append("Unknown command, but maybe one of the following ones ...\n")
        return "\n".join(out) + "\n"

    @staticmethod
    def _service_verb(argv: list[str], verb: str, name: str, service: Service) -> None:
        if verb in ("is-enabled", "is-active"):
            ok = service.enabled if verb == "is-enabled" else service.active
            if not ok:
                raise _fail(argv, 1, "disabled" if verb == "is-enabled" else "inactive")
        elif verb in ("restart", "start"):
            service.active = True
            service.restarts += verb == "restart"
        elif verb == "reload":
            if not service.active:
                raise _fail(argv, 1, f"Job for {name}.service failed: unit is not active.")
            service.reloads += 1
        elif verb == "stop":
            service.active = False
        elif verb in ("enable", "disable"):
            service.enabled = verb == "enable"
            if "--now" in argv:
                service.active = service.enabled
        else:
            raise _fail(argv, 1, f"fake systemctl does not handle {verb}")

    def _load_unit_files(self) -> None:
        """Like systemd: units whose files appeared exist, units whose files went do not."""
        directory = self.path("/etc/systemd/system")
        files = {p.name.removesuffix(".service") for p in directory.glob("*.service")}
        for name in files - self.unit_files:
            self.services.setdefault(name, Service(enabled=False, active=False))
        for name in self.unit_files - files:
            self.services.pop(name, None)
        self.unit_files = files

    def _modprobe(self, argv: list[str], _input: str | None) -> str:
        self.path(f"/sys/module/{argv[-1]}").mkdir(parents=True, exist_ok=True)
        return ""

    def _sysctl(self, argv: list[str], _input: str | None) -> str:
        if argv[1:] != ["--system"]:
            raise _fail(argv, 1, "fake sysctl handles only --system")
        directory = self.path("/etc/sysctl.d")
        for f in sorted(directory.glob("*.conf")) if directory.is_dir() else []:
            for line in f.read_text().splitlines():
                if "=" in line and not line.lstrip().startswith("#"):
                    key, value = (part.strip() for part in line.split("=", 1))
                    self.sysctl[key] = value
        return ""

    def _swapoff(self, argv: list[str], _input: str | None) -> str:
        self.write("/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n")
        return ""

    def _kubeadm_dispatch(self, argv: list[str], input: str | None) -> str:
        handler = self._kubeadm.get(argv[1] if len(argv) > 1 else "")
        if handler is None:
            raise _fail(argv, 1, f"fake kubeadm does not handle {argv[1:2]}")
        return handler(argv, input)

    def _kubelet(self, argv: list[str], _input: str | None) -> str:
        """`kubelet --version`: the binary on disk (the installed package), as kubelet says."""
        if argv[1:] != ["--version"]:
            raise _fail(argv, 1, "fake kubelet handles only --version")
        return f"Kubernetes v{self.dpkg['kubelet'].split('-')[0]}\n"

    def _kubeadm_version(self, argv: list[str], _input: str | None) -> str:
        return f"v{self.dpkg['kubeadm'].split('-')[0]}\n"

    def _kubeadm_join(self, argv: list[str], _input: str | None) -> str:
        """`kubeadm join --config FILE`, phase by phase, each writing what the real one does.

        kubeadm (cmd/kubeadm/app/cmd/join.go) runs preflight, control-plane-prepare
        (control planes: certificates, then admin.conf and the other kubeconfigs, then the
        static pod manifests), check-etcd, kubelet-start (the CA and bootstrap-kubelet.conf
        only), etcd-join (control planes: the etcd member and its manifest),
        kubelet-wait-bootstrap (kubelet's TLS bootstrap writes kubelet.conf; kubeadm
        deletes bootstrap-kubelet.conf), control-plane-join and wait-control-plane. Since
        ControlPlaneKubeletLocalMode (default since 1.33) kubelet-start no longer waits for
        the bootstrap: kubelet-wait-bootstrap does (cmd/kubeadm/app/cmd/phases/join/
        kubelet.go runKubeletStartJoinPhase, runKubeletWaitBootstrapPhase), so a control
        plane that fails in etcd-join has no kubelet.conf yet, and one that fails in
        control-plane-join has it. A failure in one phase leaves the files of the phases
        before it, which is what the charms must clean up before they try again.
        """
        config_path = Path(argv[argv.index("--config") + 1])
        real = self.path(str(config_path))
        if not real.exists():
            raise _fail(argv, 1, f"unable to read config from {config_path}")
        if real.stat().st_mode & 0o077:
            raise _fail(argv, 1, f"fake: {config_path} must not be readable by others")
        config = yaml.load(real.read_text(), Loader=_YAML_LOADER)
        if config.get("kind") != "JoinConfiguration":
            raise _fail(argv, 1, "no JoinConfiguration kind was found in the YAML file")
        self.joins.append(config)
        control_plane = "controlPlane" in config
        for phase in JOIN_PHASES:
            if phase in CONTROL_PLANE_PHASES and not control_plane:
                continue
            if self.join_error and phase == self.join_fails_in:
                raise _fail(argv, 1, f"error execution phase {phase}: {self.join_error}")
            self._join_phase(phase, argv, config)
        return "This node has joined the cluster\n"

    def _join_phase(self, phase: str, argv: list[str], config: dict) -> None:
        if phase == "control-plane-prepare":
            self.write("/etc/kubernetes/pki/ca.crt", self.ca_pem)
            self.write("/etc/kubernetes/pki/apiserver.crt", "-----BEGIN CERTIFICATE-----\n")
            for name in ("admin.conf", "controller-manager.conf", "scheduler.conf"):
                self.write(f"/etc/kubernetes/{name}", self.admin_conf, 0o600)
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
                self.write(f"/etc/kubernetes/manifests/{name}.yaml", f"# {name}\n")
        elif phase == "kubelet-start":
            self._kubelet_start(config)
        elif phase == "kubelet-wait-bootstrap":
            self._kubelet_bootstrapped(config)
        elif phase == "etcd-join":
            if self.on_etcd_join is not None:
                self.on_etcd_join(argv, _yaml_text(config))
            self.write("/etc/kubernetes/manifests/etcd.yaml", "# etcd\n")

    def _kubelet_start(self, config: dict) -> None:
        """The CA and bootstrap-kubelet.conf (the bootstrap token's kubeconfig), as kubeadm."""
        endpoint = config["discovery"]["bootstrapToken"]["apiServerEndpoint"]
        ca_pem = self.cluster.tls.ca_pem if self.cluster is not None else self.ca_pem
        if not self.path("/etc/kubernetes/pki/ca.crt").exists():
            self.write("/etc/kubernetes/pki/ca.crt", ca_pem)
        bootstrap = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubernetes", "cluster": {"server": f"https://{endpoint}"}}],
            "users": [{"name": "tls-bootstrap-token-user", "user": {"token": "<bootstrap>"}}],
        }
        self.write("/etc/kubernetes/bootstrap-kubelet.conf", _yaml_text(bootstrap), 0o600)

    def _kubelet_bootstrapped(self, config: dict) -> None:
        """kubelet.conf and the client certificate kubelet's TLS bootstrap leaves.

        kubelet.conf as kubelet writes it (kubernetes pkg/kubelet/certificate/bootstrap/
        bootstrap.go writeKubeconfigFromBootstrapping): cluster `default-cluster` with the
        CA inline, user `default-auth` whose certificate and key are both
        kubelet-client-current.pem. With `cluster` attached the server is that fake (the
        node-local proxy's endpoint stands for it) and the certificate is the one its CA
        signs for `system:node:<nodeRegistration.name>`.
        """
        node = (config.get("nodeRegistration") or {}).get("name") or self.hostname
        endpoint = config["discovery"]["bootstrapToken"]["apiServerEndpoint"]
        server, ca_pem, pem = f"https://{endpoint}", self.ca_pem, None
        if self.cluster is not None:
            server, ca_pem = self.cluster.url, self.cluster.tls.ca_pem
            pem = self.cluster.node_certificate(node)
        self.write("/etc/kubernetes/pki/ca.crt", ca_pem)
        current = "/var/lib/kubelet/pki/kubelet-client-current.pem"
        conf = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "default-cluster",
                    "cluster": {
                        "server": server,
                        "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode(),
                    },
                }
            ],
            "users": [
                {
                    "name": "default-auth",
                    "user": {"client-certificate": current, "client-key": current},
                }
            ],
            "contexts": [
                {
                    "name": "default-context",
                    "context": {
                        "cluster": "default-cluster",
                        "user": "default-auth",
                        "namespace": "default",
                    },
                }
            ],
            "current-context": "default-context",
        }
        self.write(kubeadm.KUBELET_CONF, _yaml_text(conf), 0o600)
        self.kubelet_client_cert(pem=pem)
        self.kubelet_serving_cert()
        self.kubelet_posts_status()
        self.path("/etc/kubernetes/bootstrap-kubelet.conf").unlink(missing_ok=True)

    def _kubeadm_upgrade(self, argv: list[str], _input: str | None) -> str:
        verb = argv[2] if len(argv) > 2 else ""
        installed = self.dpkg.get("kubeadm", "").split("-")[0]
        if not self.path(kubeadm.KUBELET_CONF).exists():
            raise _fail(argv, 1, "couldn't create a Kubernetes client: this node has not joined")
        if verb == "apply":
            target = argv[3].lstrip("v") if len(argv) > 3 else ""
            if "--yes" not in argv:
                raise _fail(argv, 1, "fake kubeadm refuses to prompt: pass --yes")
            problem = self._version_policy(target, installed, forced="--force" in argv)
            if problem:
                raise _fail(argv, 1, f"[upgrade/version] FATAL: {problem}")
            self.cluster_version = target
        elif verb != "node":
            raise _fail(argv, 1, f"fake kubeadm upgrade does not handle {verb!r}")
        self.upgrades.append((verb, installed))
        return "[upgrade] SUCCESS! Your cluster was upgraded\n"

    def _version_policy(self, target: str, kubeadm_version: str, *, forced: bool) -> str | None:
        """What `kubeadm upgrade apply vX.Y.Z` (and `upgrade plan`) refuse, or None.

        kubernetes/kubernetes cmd/kubeadm/app/phases/upgrade/policy.go
        EnforceVersionPolicies: one minor at a time up or down (mandatory); a target of a
        newer minor than kubeadm's (mandatory); a newer patch than kubeadm's (skippable
        with --force, which the charms never pass). The message texts are kubeadm's.
        """
        new, tool = _key(target), _key(kubeadm_version)
        if len(new) != 3:
            return f'Specified version to upgrade to "v{target}" is not a valid version'
        if self.cluster_version:
            cluster = _key(self.cluster_version)
            if new[1] > cluster[1] + 1:
                return (
                    f'Specified version to upgrade to "v{target}" is too high; kubeadm can '
                    "upgrade only 1 minor version at a time"
                )
            if new[1] < cluster[1] - 1:
                return (
                    f'Specified version to downgrade to "v{target}" is too low; kubeadm can '
                    "downgrade only 1 minor version at a time"
                )
        if tool < new:
            if new[1] > tool[1]:
                return (
                    f'Specified version to upgrade to "v{target}" is at least one minor '
                    f"release higher than the kubeadm minor release ({new[1]} > {tool[1]}). "
                    "Such an upgrade is not supported"
                )
            if not forced:
                return (
                    f'Specified version to upgrade to "v{target}" is higher than the kubeadm '
                    f'version "v{kubeadm_version}". Upgrade kubeadm first using the tool you '
                    "used to install kubeadm"
                )
        return None

    def _kubeadm_reset(self, argv: list[str], _input: str | None) -> str:
        if self.reset_error:
            raise _fail(argv, 1, f"error execution phase preflight: {self.reset_error}")
        etc = self.path("/etc/kubernetes")
        if etc.is_dir():
            for entry in etc.iterdir():
                if entry.name == "manifests":
                    for manifest in entry.iterdir():
                        manifest.unlink()
                elif entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        return "The reset process does not clean CNI configuration.\n"
