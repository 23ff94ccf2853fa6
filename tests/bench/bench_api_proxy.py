#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the node-local API endpoint (HAProxy) costs: request latency and bulk throughput.

HAProxy runs the charms' own configuration (health checks included) on loopback, in front
of TLS servers. (1) The real `kubernetes` client reads one Namespace from a fake API
server (in its own process) over TLS again and again, straight and through HAProxy, one
request each in turn; the ratio of median request times is printed (1.00 means free),
with the time the hop adds. (2) 256 MiB go over TLS to a sink in another process,
straight and through HAProxy; the ratio of throughputs is printed. Loopback hides network
latency, so these are upper bounds on the relative cost: on a real network the extra hop
is the same few microseconds while every request takes longer.
Targets (DESIGN.md): latency <= 1.05x, throughput >= 0.95x.

    python tests/bench/bench_api_proxy.py [--requests 300] [--reps 5] [--smoke]

`--smoke`: one rep of 3 requests and SMOKE_BULK (each code path once; numbers not to quote).
"""

from __future__ import annotations

import base64
import multiprocessing
import socket
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
for extra in ("lib", "tests", "actions"):
    sys.path.insert(0, str(ROOT / extra))

from haproxy_runner import MISSING, HAProxy, available  # noqa: E402
from run import options  # noqa: E402

from charms.gpu_k8s.v0.kubeclient import Kube  # noqa: E402
from fakes.kube_apiserver import FakeKubeApiServer  # noqa: E402
from fakes.tls import ServerCert, make_server_cert  # noqa: E402

BULK = 256 * 1024 * 1024
SMOKE_BULK = 4 * 1024 * 1024
BLOCK = 1 << 20


def _sink(cert: ServerCert, ready, port_out) -> None:
    """A TLS server: `/readyz` gets `ok` (the health check); a stream is read to its length.

    A stream starts with `BULK` and its length in 8 bytes; `done` answers the last byte.
    """
    import threading

    context = cert.server_context()
    server = socket.create_server(("127.0.0.1", 0))
    port_out.value = server.getsockname()[1]
    ready.set()

    def handle(raw: socket.socket) -> None:
        try:
            with context.wrap_socket(raw, server_side=True) as conn:
                first = conn.recv(12)
                if first.startswith(b"GET "):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    return
                while len(first) < 12:
                    first += conn.recv(12 - len(first))
                left = int.from_bytes(first[4:], "big")
                while left > 0:
                    left -= len(conn.recv(min(BLOCK, left)))
                conn.sendall(b"done")
        except OSError:
            pass

    while True:
        raw, _ = server.accept()
        threading.Thread(target=handle, args=(raw,), daemon=True).start()


def _api_server(cert: ServerCert, ready, port_out, stop) -> None:
    """A fake API server over TLS in its own process (no GIL shared with the client)."""
    with FakeKubeApiServer(tls=cert) as api:
        api.put_object("/api/v1/namespaces/bench", {"metadata": {}})
        port_out.value = int(api.address.rsplit(":", 1)[1])
        ready.set()
        stop.wait()


def _kubeconfig(cert: ServerCert, address: str) -> str:
    """A kubeconfig for the API server at `address`, trusting `cert`'s CA."""
    ca = base64.b64encode(cert.ca_pem.encode()).decode()
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "bench",
                    "cluster": {
                        "server": f"https://{address}",
                        "certificate-authority-data": ca,
                    },
                }
            ],
            "users": [{"name": "bench", "user": {"token": "admin-token"}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
            "current-context": "bench",
        }
    )


def _stream(cert: ServerCert, port: int, size: int) -> float:
    """Seconds to send `size` bytes over TLS to `port` and hear that all arrived."""
    block = b"\0" * BLOCK
    context = cert.client_context()
    start = time.perf_counter()
    with context.wrap_socket(
        socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1"
    ) as conn:
        conn.sendall(b"BULK" + size.to_bytes(8, "big"))
        for _ in range(size // BLOCK):
            conn.sendall(block)
        assert conn.recv(4) == b"done"
    return time.perf_counter() - start


def _latency(direct: str, proxied: str, count: int) -> tuple[float, float]:
    """(ratio, added seconds): median GET time through HAProxy vs straight, one by one.

    Two clients keep their connections open (as kubelet and the charms do) and take turns,
    so load that comes and goes on the machine falls on both alike.
    """
    times: dict[bool, list[float]] = {False: [], True: []}
    with Kube.from_kubeconfig(direct) as straight, Kube.from_kubeconfig(proxied) as through:
        for kube in (straight, through):
            kube.get("v1", "Namespace", "bench")
        for i in range(count):
            for via in (False, True) if i % 2 else (True, False):
                kube = through if via else straight
                start = time.perf_counter()
                kube.get("v1", "Namespace", "bench")
                times[via].append(time.perf_counter() - start)
    through_median, straight_median = (statistics.median(times[v]) for v in (True, False))
    return through_median / straight_median, through_median - straight_median


def _wait_up(proxy: HAProxy, cert: ServerCert) -> None:
    """Until HAProxy forwards (its first health checks passed)."""
    context = cert.client_context()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with context.wrap_socket(
                socket.create_connection(("127.0.0.1", proxy.port), timeout=1),
                server_hostname="127.0.0.1",
            ) as conn:
                conn.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
                if conn.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("HAProxy never forwarded")


def main() -> None:
    """Print the latency and throughput ratios of going through HAProxy."""
    parser = options(__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    bulk = BULK
    if args.smoke:
        args.requests, args.reps, bulk = 3, 1, SMOKE_BULK
    if not available():
        print(f"skipped: {MISSING}")
        return
    cert = make_server_cert()
    ready, port = multiprocessing.Event(), multiprocessing.Value("i", 0)
    sink = multiprocessing.Process(target=_sink, args=(cert, ready, port), daemon=True)
    api_ready, api_port, stop = (
        multiprocessing.Event(),
        multiprocessing.Value("i", 0),
        multiprocessing.Event(),
    )
    api = multiprocessing.Process(
        target=_api_server, args=(cert, api_ready, api_port, stop), daemon=True
    )
    sink.start()
    api.start()
    ready.wait(10)
    api_ready.wait(10)
    api_address = f"127.0.0.1:{api_port.value}"
    with HAProxy([api_address]) as to_api, HAProxy([f"127.0.0.1:{port.value}"]) as to_sink:
        _wait_up(to_api, cert)
        _wait_up(to_sink, cert)
        direct = _kubeconfig(cert, api_address)
        proxied = _kubeconfig(cert, to_api.address)
        latency, added, throughput = [], [], []
        for rep in range(args.reps):
            order = (False, True) if rep % 2 == 0 else (True, False)
            ratio, extra = _latency(direct, proxied, args.requests)
            latency.append(ratio)
            added.append(extra)
            streamed = {p: _stream(cert, to_sink.port if p else port.value, bulk) for p in order}
            throughput.append(streamed[False] / streamed[True])
    stop.set()
    api.join(10)
    sink.terminate()
    print(
        f"request latency through HAProxy / straight: {statistics.median(latency):.2f}x "
        f"(target <= 1.05x; median of {args.reps} reps x {args.requests} GET pairs over TLS; "
        f"per rep {', '.join(f'{r:.2f}' for r in latency)}; the hop adds "
        f"{statistics.median(added) * 1e6:.0f} us to each request, which a real network and "
        "API server dwarf)"
    )
    print(
        f"bulk throughput through HAProxy / straight: {statistics.median(throughput):.2f}x "
        f"(target >= 0.95x; {bulk >> 20} MiB of TLS per run; "
        f"per rep {', '.join(f'{r:.2f}' for r in throughput)})"
    )


if __name__ == "__main__":
    main()
