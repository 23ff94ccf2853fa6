# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The node-local Kubernetes API proxy: a stable control-plane endpoint with no load balancer.

kubeadm writes the cluster's `controlPlaneEndpoint` into every kubeconfig it creates
(kubelet, kube-proxy, admin, the `cluster-info` that joining nodes discover), so that
address must outlive any one control-plane machine. AWS has no floating IPs that ARP
based tools like keepalived or kube-vip could move, and a load balancer would need cloud
credentials on the control plane. Instead every node, control plane and worker alike,
runs this small TCP proxy on `127.0.0.1:6444` (`ENDPOINT`) and the cluster is
bootstrapped with that as its control-plane endpoint.

The proxy forwards each connection to the first API server in its list that accepts
one; a server that refused or timed out is skipped for `RETRY_AFTER` seconds (and tried
again only when every server failed). The charms write the list to `CONFIG` whenever the
control plane grows or shrinks; the proxy re-reads the file when it changed, at the next
connection, so no restart drops the connections that are open. It splices bytes and never
looks inside TLS: certificates are checked end to end by the clients, which is why the API
servers' certificates carry `127.0.0.1` among their names.

This file is both a charm library (`configure()` and `remove()` manage the proxy on a
`Host`) and the program systemd runs (`python3 api_proxy.py --config FILE`): it imports
only the standard library at run time.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import asyncio

    from charms.gpu_k8s.v0.system import Host

LIBID = "56d1a753a66d4124bddde98d7b960f09"
LIBAPI = 0
LIBPATCH = 1

LISTEN_HOST = "127.0.0.1"
PORT = 6444
ENDPOINT = f"{LISTEN_HOST}:{PORT}"
SERVICE = "gpu-k8s-api-proxy"
PROGRAM = "/usr/local/lib/gpu-k8s/api_proxy.py"
CONFIG = "/etc/gpu-k8s/api-proxy.json"
UNIT_FILE = f"/etc/systemd/system/{SERVICE}.service"
SYSTEMCTL = "/usr/bin/systemctl"
PYTHON = "/usr/bin/python3"
CONNECT_TIMEOUT = 3.0
RETRY_AFTER = 15.0
CHUNK = 256 * 1024

logger = logging.getLogger(__name__)

_SERVER = re.compile(
    r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+)):(?P<port>\d{1,5})$"
)

Server = tuple[str, int]


def parse_server(text: str) -> Server:
    """`10.0.0.1:6443` or `[fd00::1]:6443` as (host, port).

    Raises:
        ValueError: not host:port with a port from 1 to 65535.
    """
    match = _SERVER.match(text.strip())
    port = int(match["port"]) if match else 0
    if match is None or not 0 < port < 65536:
        raise ValueError(f"API server {text!r} must be host:port, such as 10.0.0.1:6443")
    return match["v6"] or match["host"], port


def spread(servers: Sequence[str], key: str) -> list[str]:
    """`servers` rotated by a stable hash of `key`, so that nodes share out the load.

    Every node connects to the first server that answers; rotating the list by the
    node's name sends different nodes to different API servers while keeping each
    node's choice the same from one hook to the next.
    """
    ordered = sorted(set(servers))
    if not ordered:
        return []
    start = zlib.crc32(key.encode()) % len(ordered)
    return ordered[start:] + ordered[:start]


def render_unit() -> str:
    """The systemd unit running the proxy as an unprivileged, sandboxed dynamic user."""
    return "\n".join(
        [
            "[Unit]",
            f"Description=gpu-k8s local Kubernetes API proxy on {ENDPOINT}",
            "After=network-online.target",
            "Wants=network-online.target",
            "Before=kubelet.service",
            "",
            "[Service]",
            f"ExecStart={PYTHON} -I {PROGRAM} --config {CONFIG}",
            "Restart=always",
            "RestartSec=2",
            "DynamicUser=yes",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "ProtectHome=yes",
            "PrivateTmp=yes",
            "LimitNOFILE=65536",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def render_config(servers: Sequence[str]) -> str:
    """The proxy's config file: the API servers to try, in order.

    Raises:
        ValueError: the list is empty or an entry is not host:port.
    """
    if not servers:
        raise ValueError("the API proxy needs at least one API server")
    for server in servers:
        parse_server(server)
    return json.dumps({"servers": list(servers)}, indent=2) + "\n"


def configure(host: Host, servers: Sequence[str]) -> bool:
    """Install or update the proxy on `host` to forward to `servers`; True when anything changed.

    A new server list is picked up by the running proxy by itself; the service restarts
    only when its program or unit file changed (a charm upgrade), and systemd restarts
    it if it ever exits.

    Raises:
        ValueError: `servers` is empty or malformed (nothing is written).
        CommandError: systemctl failed.
    """
    config = render_config(servers)
    program = host.write(PROGRAM, Path(__file__).read_text())
    listed = host.write(CONFIG, config)
    unit = host.write(UNIT_FILE, render_unit())
    if unit:
        host.run(SYSTEMCTL, "daemon-reload")
        host.run(SYSTEMCTL, "enable", SERVICE)
    if unit or program:
        host.run(SYSTEMCTL, "restart", SERVICE)
        logger.info("(re)started the local API proxy on %s", ENDPOINT)
    if listed:
        logger.info("local API proxy forwards to %s", ", ".join(servers))
    return program or listed or unit


def remove(host: Host) -> bool:
    """Stop the proxy and delete its files; True when there was anything to remove."""
    unit = host.path(UNIT_FILE)
    if not unit.exists():
        return False
    host.run(SYSTEMCTL, "disable", "--now", SERVICE)
    for path in (UNIT_FILE, CONFIG, PROGRAM):
        host.path(path).unlink(missing_ok=True)
    host.run(SYSTEMCTL, "daemon-reload")
    return True


# -- the proxy program -------------------------------------------------------------------


class Backends:
    """The API servers from the config file, with the ones that failed recently set aside."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic):
        self._path = path
        self._clock = clock
        self._stamp: tuple[int, int, int] | None = None
        self._servers: list[Server] = []
        self._failed: dict[Server, float] = {}

    def servers(self) -> list[Server]:
        """The configured servers, re-read when the file changed; the last good list on error."""
        try:
            stat = self._path.stat()
            stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # writers replace the file
            if stamp != self._stamp:
                listed = json.loads(self._path.read_text())["servers"]
                servers = [parse_server(s) for s in listed]
                if not servers:
                    raise ValueError("no servers listed")
                if servers != self._servers:
                    logger.info("API servers: %s", ", ".join(f"{h}:{p}" for h, p in servers))
                self._servers, self._stamp = servers, stamp
        except (OSError, ValueError, KeyError, TypeError) as e:
            if self._stamp is not None or not self._servers:
                logger.error("cannot read %s (%s); keeping the previous servers", self._path, e)
            self._stamp = None
        return list(self._servers)

    def order(self) -> list[Server]:
        """Servers to try now: healthy ones in configured order, then recent failures."""
        now = self._clock()
        servers = self.servers()
        healthy = [s for s in servers if now - self._failed.get(s, -RETRY_AFTER) >= RETRY_AFTER]
        failed = sorted((s for s in servers if s not in healthy), key=lambda s: self._failed[s])
        return healthy + failed

    def failed(self, server: Server, why: str) -> None:
        """Set `server` aside for `RETRY_AFTER` seconds."""
        if server not in self._failed:
            logger.warning("API server %s:%d is unreachable (%s)", *server, why)
        self._failed[server] = self._clock()

    def succeeded(self, server: Server) -> None:
        """`server` accepted a connection."""
        if self._failed.pop(server, None) is not None:
            logger.info("API server %s:%d is reachable again", *server)


def _protocol(factory: Callable[[], _Side]) -> Callable[[], asyncio.Protocol]:
    """`factory`, typed the way asyncio wants protocol factories.

    asyncio takes any object with a protocol's methods; subclassing `asyncio.Protocol`
    instead would import asyncio into every charm hook that imports this library.
    """
    return factory  # type: ignore[return-value]


class _Side:
    """One connection of a relayed pair (an asyncio protocol): what it reads, its peer writes.

    Flow control goes across: when the peer's send buffer fills up, this side stops reading,
    so a slow reader never makes the proxy buffer without bound. End of file is passed on
    as a half-close; the pair is closed once both directions ended or either side failed.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.ended = False  # this side sent end of file
        self.early: list[bytes] = []  # read before the pair was joined

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.peer is None or self.peer.transport is None:
            self.early.append(data)
        else:
            self.peer.transport.write(data)

    def join(self, peer: _Side) -> None:
        """Pair with `peer`, passing on what either side read before."""
        self.peer, peer.peer = peer, self
        for side in (self, peer):
            assert side.peer is not None and side.peer.transport is not None
            for data in side.early:
                side.peer.transport.write(data)
            side.early.clear()
            if side.ended and side.peer.transport.can_write_eof():
                side.peer.transport.write_eof()

    def eof_received(self) -> bool:
        self.ended = True
        peer = self.peer.transport if self.peer else None
        if peer is not None and peer.can_write_eof() and not peer.is_closing():
            peer.write_eof()
        if self.peer is not None and self.peer.ended:
            self.close()
        return True  # keep the other direction open

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def close(self) -> None:
        """Close both connections of the pair."""
        for side in (self, self.peer):
            if side is not None and side.transport is not None and not side.transport.is_closing():
                side.transport.close()


class _Client(_Side):
    """A connection accepted from a local client; it reads nothing until upstream is there."""

    def __init__(self, proxy: ApiProxy) -> None:
        super().__init__()
        self.proxy = proxy

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        transport.pause_reading()  # type: ignore[attr-defined]
        self.proxy.start(self)


class ApiProxy:
    """Accepts connections and relays each to the first API server that takes it."""

    def __init__(self, backends: Backends, connect_timeout: float = CONNECT_TIMEOUT):
        self.backends = backends
        self.connect_timeout = connect_timeout
        self._tasks: set[asyncio.Task] = set()

    def accept(self) -> _Client:
        """Protocol factory of the listening socket."""
        return _Client(self)

    def start(self, client: _Client) -> None:
        """Find an upstream for `client` in the background."""
        import asyncio

        task = asyncio.get_running_loop().create_task(self._relay(client))
        self._tasks.add(task)  # keep a reference until it is done
        task.add_done_callback(self._tasks.discard)

    async def _relay(self, client: _Client) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        candidates = self.backends.order()
        for server in candidates:
            try:
                _, upstream = await asyncio.wait_for(
                    loop.create_connection(_protocol(_Side), *server), self.connect_timeout
                )
            except (OSError, asyncio.TimeoutError) as e:
                self.backends.failed(server, str(e) or type(e).__name__)
                continue
            self.backends.succeeded(server)
            upstream = cast(_Side, upstream)
            assert client.transport is not None
            if client.transport.is_closing():  # the client gave up meanwhile
                upstream.close()
                return
            client.join(upstream)
            client.transport.resume_reading()
            return
        logger.error("no API server accepted a connection (tried %d)", len(candidates))
        client.close()


async def serve(config: Path, listen: Server, ready: Callable[[], None] | None = None) -> None:
    """Run the proxy until SIGTERM or SIGINT."""
    import asyncio

    proxy = ApiProxy(Backends(config))
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        _protocol(proxy.accept), *listen, reuse_address=True, backlog=1024
    )
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    logger.info("listening on %s:%d", *listen)
    proxy.backends.servers()
    if ready is not None:
        ready()
    async with server:
        await stop.wait()
    logger.info("stopped")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the proxy program."""
    import argparse
    import asyncio

    parser = argparse.ArgumentParser(description="Local Kubernetes API proxy (gpu-k8s)")
    parser.add_argument("--config", type=Path, default=Path(CONFIG))
    parser.add_argument("--listen", default=ENDPOINT, help="host:port to listen on")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
    try:
        listen = parse_server(args.listen)
    except ValueError as e:
        parser.error(str(e))
    asyncio.run(serve(args.config, listen, ready=lambda: print("ready", flush=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
