"""The local API proxy program, run as systemd runs it, against real servers on 127.0.0.1.

Backends are small TCP servers that greet with their name and then echo; the last test
puts the real `kubernetes` client behind the proxy, in front of the fake API server.
"""

from __future__ import annotations

import json
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from charms.gpu_k8s.v0 import api_proxy
from charms.gpu_k8s.v0.kubeclient import Kube

PROGRAM = Path(api_proxy.__file__)


class _Greeter(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(self.server.name.encode() + b"\n")  # type: ignore[attr-defined]
        while data := self.request.recv(65536):
            self.request.sendall(data)


class Backend(socketserver.ThreadingTCPServer):
    """A TCP server on a free loopback port that says its name, then echoes."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, name: str):
        super().__init__(("127.0.0.1", 0), _Greeter)
        self.name = name
        self.address = f"127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy:
    """The proxy program in its own process, like `gpu-k8s-api-proxy.service`."""

    def __init__(self, config: Path):
        self.config = config
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(PROGRAM), "--config", str(config)]
            + ["--listen", f"127.0.0.1:{self.port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"

    def set_servers(self, *servers: str) -> None:
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(json.dumps({"servers": list(servers)}))
        tmp.replace(self.config)

    def connect(self) -> socket.socket:
        conn = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return conn

    def greeting(self) -> str:
        """Connect and return the name of the backend that answered ('' if none did)."""
        with self.connect() as conn:
            return _read_line(conn)

    def stop(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=10)
        return self.process.returncode, err


def _read_line(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


@pytest.fixture
def backends() -> Iterator[list[Backend]]:
    servers = [Backend("alpha"), Backend("beta")]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def proxy(tmp_path: Path, backends: list[Backend]) -> Iterator[Proxy]:
    config = tmp_path / "api-proxy.json"
    config.write_text(api_proxy.render_config([b.address for b in backends]))
    running = Proxy(config)
    yield running
    if running.process.poll() is None:
        running.stop()


def test_connections_go_to_the_first_server_and_carry_bytes_both_ways_intact(proxy):
    payload = bytes(range(256)) * 8192  # 2 MiB
    with proxy.connect() as conn:
        assert _read_line(conn) == "alpha"
        sender = threading.Thread(target=lambda: (conn.sendall(payload), conn.shutdown(1)))
        sender.start()
        received = b""
        while chunk := conn.recv(1 << 20):
            received += chunk
        sender.join()
    assert received == payload


class _Flood(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        block = b"x" * (1 << 20)
        for _ in range(FLOOD_MIB):
            self.request.sendall(block)


FLOOD_MIB = 128


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_slow_client_makes_the_proxy_wait_instead_of_buffering(proxy):
    flood = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Flood)
    flood.daemon_threads = True
    threading.Thread(target=flood.serve_forever, args=(0.05,), daemon=True).start()
    try:
        proxy.set_servers(f"127.0.0.1:{flood.server_address[1]}")
        before = _rss_kib(proxy.process.pid)
        with proxy.connect() as conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
            assert conn.recv(1)  # the relay is up; now read nothing for a while
            time.sleep(1.0)
            grown = _rss_kib(proxy.process.pid) - before
            received = 1
            while chunk := conn.recv(1 << 20):
                received += len(chunk)
        assert received == FLOOD_MIB << 20
        assert grown < 16 * 1024, f"proxy grew by {grown} KiB while the client did not read"
    finally:
        flood.shutdown()
        flood.server_close()


def test_a_dead_server_is_skipped_and_reported_once(proxy, backends):
    backends[0].stop()

    assert [proxy.greeting() for _ in range(5)] == ["beta"] * 5
    code, log = proxy.stop()
    assert code == 0
    assert log.count(f"API server {backends[0].address} is unreachable") == 1


def test_a_new_server_list_is_used_without_a_restart_and_open_connections_survive(proxy, backends):
    gamma = Backend("gamma")
    try:
        with proxy.connect() as old:
            assert _read_line(old) == "alpha"
            proxy.set_servers(gamma.address)

            assert proxy.greeting() == "gamma"
            old.sendall(b"still here\n")
            assert _read_line(old) == "still here"
    finally:
        gamma.stop()


def test_a_server_back_up_is_used_again_when_every_other_failed(proxy, backends):
    dead = f"127.0.0.1:{free_port()}"
    proxy.set_servers(dead, backends[1].address)
    assert proxy.greeting() == "beta"
    backends[1].stop()
    # Every server failed: the proxy still tries them (oldest failure first) rather
    # than refusing, so a control plane that comes back is used at once.
    revived = Backend("beta-again")
    try:
        proxy.set_servers(dead, revived.address)
        assert proxy.greeting() == "beta-again"
    finally:
        revived.stop()


def test_no_reachable_server_closes_the_client_connection(proxy):
    proxy.set_servers(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")

    assert proxy.greeting() == ""
    code, log = proxy.stop()
    assert code == 0
    assert "no API server accepted a connection (tried 2)" in log


def test_a_broken_config_file_keeps_the_last_good_server_list(proxy):
    proxy.config.write_text("{not json")
    assert proxy.greeting() == "alpha"

    proxy.config.write_text(json.dumps({"servers": ["not-a-server"]}))
    assert proxy.greeting() == "alpha"
    code, log = proxy.stop()
    assert "keeping the previous servers" in log


def test_the_kubernetes_client_reaches_the_api_server_through_the_proxy(proxy, kube_api, tmp_path):
    dead = f"127.0.0.1:{free_port()}"
    proxy.set_servers(dead, kube_api.url.removeprefix("http://"))
    kubeconfig = kube_api.kubeconfig(token="admin-token").replace(
        kube_api.url, f"http://127.0.0.1:{proxy.port}"
    )

    with Kube.from_kubeconfig(kubeconfig, backoff=0.01) as kube:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "through"}})
        names = [ns["metadata"]["name"] for ns in kube.list("v1", "Namespace")]
    assert "through" in names
