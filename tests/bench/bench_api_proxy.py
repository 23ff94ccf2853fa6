#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the node-local API proxy costs: request latency and bulk throughput, as ratios.

The proxy program runs as systemd runs it, on loopback. (1) The real `kubernetes`
client reads one Namespace from the fake API server again and again, straight and
through the proxy, alternating; the ratio of median request times is printed (1.0 means
free). (2) 64 MiB are streamed to a loopback sink straight and through the proxy; the
ratio of throughputs is printed. Loopback hides network latency, so these are upper
bounds on the relative cost: on a real network the extra hop is the same few
microseconds while every request takes longer.

    python tests/bench/bench_api_proxy.py [--requests 300] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for extra in ("lib", "tests"):
    sys.path.insert(0, str(ROOT / extra))

from charms.gpu_k8s.v0 import api_proxy  # noqa: E402
from charms.gpu_k8s.v0.kubeclient import Kube  # noqa: E402
from fakes.kube_apiserver import FakeKubeApiServer  # noqa: E402

BULK = 64 * 1024 * 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sink() -> tuple[socket.socket, int]:
    """A loopback server that reads and discards everything, one thread per connection."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_drain, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def _drain(conn: socket.socket) -> None:
    with conn:
        while conn.recv(1 << 20):
            pass
        conn.sendall(b"done")


def _stream(port: int) -> float:
    """Seconds to send BULK bytes to `port` and hear that all arrived."""
    block = b"\0" * (1 << 20)
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        for _ in range(BULK // len(block)):
            conn.sendall(block)
        conn.shutdown(socket.SHUT_WR)
        assert conn.recv(4) == b"done"
    return time.perf_counter() - start


def _requests(kubeconfig: str, count: int) -> float:
    """Median seconds of one GET (keep-alive connection, as kubelet and the charms use)."""
    times = []
    with Kube.from_kubeconfig(kubeconfig) as kube:
        kube.get("v1", "Namespace", "bench")
        for _ in range(count):
            start = time.perf_counter()
            kube.get("v1", "Namespace", "bench")
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Print the latency and throughput ratios of going through the proxy."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    sink, sink_port = _sink()
    with FakeKubeApiServer() as api, tempfile.TemporaryDirectory() as tmp:
        api.put_object("/api/v1/namespaces/bench", {"metadata": {}})
        config = Path(tmp) / "api-proxy.json"
        port = _free_port()
        proxy = subprocess.Popen(
            [sys.executable, "-I", api_proxy.__file__, "--config", str(config)]
            + ["--listen", f"127.0.0.1:{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            config.write_text(json.dumps({"servers": [api.url.removeprefix("http://")]}))
            assert proxy.stdout is not None and proxy.stdout.readline().strip() == "ready"
            direct = api.kubeconfig()
            proxied = direct.replace(api.url, f"http://127.0.0.1:{port}")
            to_api = json.dumps({"servers": [api.url.removeprefix("http://")]})
            to_sink = json.dumps({"servers": [f"127.0.0.1:{sink_port}"]})
            latency, throughput = [], []
            for rep in range(args.reps):
                order = (False, True) if rep % 2 == 0 else (True, False)
                seconds = {p: _requests(proxied if p else direct, args.requests) for p in order}
                config.write_text(to_sink)
                streamed = {p: _stream(port if p else sink_port) for p in order}
                config.write_text(to_api)
                latency.append(seconds[True] / seconds[False])
                throughput.append(streamed[False] / streamed[True])
        finally:
            proxy.terminate()
            proxy.wait(timeout=10)
            sink.close()
    print(
        f"request latency through the proxy / straight: {statistics.median(latency):.2f}x "
        f"(median of {args.reps} reps x {args.requests} GETs; per rep "
        f"{', '.join(f'{r:.2f}' for r in latency)})"
    )
    print(
        f"bulk throughput through the proxy / straight: {statistics.median(throughput):.2f}x "
        f"({BULK >> 20} MiB per run; per rep {', '.join(f'{r:.2f}' for r in throughput)})"
    )


if __name__ == "__main__":
    main()
