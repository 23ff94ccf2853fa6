"""The real HAProxy (Debian/Ubuntu package) as a child process, for tests and benchmarks.

It runs the configuration the charms write (`api_proxy.render_config`, without the
systemd-only global lines) in master-worker mode, as Ubuntu's haproxy.service does
(`-W`; `-db` keeps it in the foreground), and reloads it the way `systemctl reload
haproxy` does: a new configuration file, then SIGUSR2 to the master.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tf_demo import free_ports

from charms.gpu_k8s.v0 import api_proxy
from charms.gpu_k8s.v0.system import CommandError, SubprocessRunner

BINARY = shutil.which("haproxy") or "/usr/sbin/haproxy"
MISSING = (
    "HAProxy is not installed: `sudo apt-get install haproxy` (.ci/run installs it); "
    "the node-local API endpoint tests run the real one"
)


def available() -> bool:
    """Whether the haproxy binary is here."""
    return Path(BINARY).is_file() and os.access(BINARY, os.X_OK)


def _terminate(process: subprocess.Popen) -> None:
    """SIGTERM (the master stops its workers), then SIGKILL after 10 s; waited for."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class HAProxy:
    """`haproxy -W -db -f <config>` on a free loopback port, forwarding to `servers`."""

    def __init__(self, servers: Sequence[str], metrics: api_proxy.MetricsAccess | None = None):
        self.port = free_ports(1)[0]
        self.metrics = metrics
        self._dir = tempfile.TemporaryDirectory(prefix="haproxy-")
        self.config = Path(self._dir.name) / "haproxy.cfg"
        self.write(servers)
        self.log = Path(self._dir.name) / "haproxy.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [BINARY, "-W", "-db", "-f", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._wait_listening()

    @property
    def address(self) -> str:
        """host:port clients connect to."""
        return f"127.0.0.1:{self.port}"

    def write(self, servers: Sequence[str]) -> None:
        """Write the charms' configuration for `servers` (not applied until `reload`)."""
        text = api_proxy.render_config(
            servers, port=self.port, service=False, metrics=self.metrics
        )
        self.config.write_text(text)
        check = subprocess.run(
            [BINARY, "-c", "-q", "-f", str(self.config)], capture_output=True, text=True
        )
        assert check.returncode == 0, f"haproxy -c refused the config: {check.stderr}"

    def reload(self, servers: Sequence[str]) -> None:
        """Apply a new server list the way `systemctl reload haproxy` does."""
        self.write(servers)
        self.process.send_signal(signal.SIGUSR2)

    def _wait_listening(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"haproxy exited: {self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("haproxy did not start listening")

    def stop(self) -> None:
        """Stop HAProxy and remove its files."""
        _terminate(self.process)
        self._dir.cleanup()

    def __enter__(self) -> HAProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServiceHAProxy:
    """The real HAProxy behind a FakeMachine's `haproxy.service`, run as the drop-in runs it.

    `systemctl start|restart` starts `haproxy -W -S <socket> -f <config>` on the charms'
    `api_proxy.CONFIG` (waiting until it listens, as systemd waits for Type=notify's
    READY), `stop` (or `disable --now`) stops it, and `reload` does what the drop-in's
    `ExecReload=` lines do: `haproxy -c -q` on the file (systemctl fails when it does),
    then SIGUSR2 to the master, whatever the master then makes of it. The machine's
    master CLI socket (`api_proxy.MASTER_SOCKET`) is the real master's.

    What runs is the charms' file with two changes for a test process: the endpoint's
    port is a free one (6444 may be taken), and the lines only the service needs (syslog,
    chroot, the haproxy user) are left out, as `render_config(service=False)` leaves them.
    """

    SERVICE_ONLY = ("log ", "chroot ", "user ", "group ")

    def __init__(self, machine) -> None:  # a fakes.machine.FakeMachine
        self.machine = machine
        self.port = free_ports(1)[0]
        self._dir = tempfile.TemporaryDirectory(prefix="hx-")  # short: sun_path is 108 bytes
        self.config = Path(self._dir.name) / "haproxy.cfg"
        self.socket = str(Path(self._dir.name) / "master.sock")
        self.log = Path(self._dir.name) / "haproxy.log"
        self.process: subprocess.Popen | None = None
        self._systemctl = machine.runner.handlers["systemctl"]
        machine.on("systemctl", self._on_systemctl)
        machine.runner.on_socket(api_proxy.MASTER_SOCKET, self._ask)

    def _ask(self, text: str) -> str:
        return SubprocessRunner().request(self.socket, text, timeout=5)

    def _write(self) -> None:
        text = self.machine.read(api_proxy.CONFIG) or ""
        lines = [
            line.replace(f"bind {api_proxy.ENDPOINT}", f"bind 127.0.0.1:{self.port}")
            for line in text.splitlines()
            if not line.strip().startswith(self.SERVICE_ONLY)
        ]
        self.config.write_text("\n".join(lines) + "\n")

    def _on_systemctl(self, argv: list[str], input: str | None) -> str:
        units = [a.removesuffix(".service") for a in argv[2:] if not a.startswith("-")]
        verb = argv[1] if not argv[1].startswith("-") else argv[2]
        if api_proxy.SERVICE not in units:
            return self._systemctl(argv, input)
        if verb == "reload" and self.running:
            self._write()
        # the fake's bookkeeping and failures; for a reload, ExecReload's `haproxy -c`
        out = self._systemctl(argv, input)
        service = self.machine.services[api_proxy.SERVICE]
        if verb in ("restart", "start", "stop") or "--now" in argv:
            if verb in ("restart", "stop", "disable") or not service.active:
                self.stop_process()
            if service.active and not self.running:
                self._start(argv)
        elif verb == "reload":
            assert self.process is not None
            self.process.send_signal(signal.SIGUSR2)
        return out

    @property
    def running(self) -> bool:
        """Whether the master runs."""
        return self.process is not None and self.process.poll() is None

    def _start(self, argv: list[str]) -> None:
        self._write()
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [BINARY, "-W", "-db", "-S", self.socket, "-f", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.machine.services[api_proxy.SERVICE].active = False
                raise CommandError(argv, 1, "Job for haproxy.service failed")
            try:  # READY (Type=notify): the worker listens and answers its CLI
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                if "description:" in self._ask("@1 show info\n"):
                    return
            except (OSError, CommandError):
                pass
            time.sleep(0.05)
        raise RuntimeError("haproxy did not start listening")

    def loaded(self) -> str:
        """The `description` HAProxy's current worker reports (its config's fingerprint)."""
        for line in self._ask("@1 show info\n").splitlines():
            if line.startswith("description:"):
                return line.split(":", 1)[1].strip()
        raise AssertionError("no description in show info")

    def stop_process(self) -> None:
        """Stop the master and its workers (SIGTERM: systemd's stop, KillMode=mixed)."""
        if self.process is not None:
            _terminate(self.process)
        self.process = None

    def __enter__(self) -> ServiceHAProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_process()
        self._dir.cleanup()
