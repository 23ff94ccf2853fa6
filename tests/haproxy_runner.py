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

from charms.gpu_k8s.v0 import api_proxy

BINARY = shutil.which("haproxy") or "/usr/sbin/haproxy"
MISSING = (
    "HAProxy is not installed: `sudo apt-get install haproxy` (.ci/run installs it); "
    "the node-local API endpoint tests run the real one"
)


def available() -> bool:
    """Whether the haproxy binary is here."""
    return Path(BINARY).is_file() and os.access(BINARY, os.X_OK)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HAProxy:
    """`haproxy -W -db -f <config>` on a free loopback port, forwarding to `servers`."""

    def __init__(self, servers: Sequence[str], metrics: api_proxy.MetricsAccess | None = None):
        self.port = free_port()
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
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._dir.cleanup()

    def __enter__(self) -> HAProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
