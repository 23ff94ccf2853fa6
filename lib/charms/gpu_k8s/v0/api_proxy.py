# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The node-local Kubernetes API endpoint: HAProxy on 127.0.0.1:6444 in front of the API servers.

kubeadm writes the cluster's `controlPlaneEndpoint` into every kubeconfig it creates
(kubelet, kube-proxy, admin, the `cluster-info` that joining nodes discover), so that
address must outlive any one control-plane machine. AWS has no floating IPs that ARP
based tools like keepalived or kube-vip could move, and a load balancer would need cloud
credentials on the control plane. Instead every node, control plane and worker alike,
runs HAProxy from the Ubuntu archive on `127.0.0.1:6444` (`ENDPOINT`), the way kubespray's
localhost load balancing does, and the cluster is bootstrapped with that address as its
control-plane endpoint.

HAProxy runs in TCP mode and never looks inside TLS: certificates are checked end to end
by the clients, which is why the API servers' certificates carry `127.0.0.1` among their
names. It health-checks every API server (`GET /readyz` over TLS, which kube-apiserver
answers to anonymous clients), sends new connections round robin to the healthy ones,
and retries a refused connection on another server. The charms write the server list to
`CONFIG` whenever the control plane grows or shrinks and reload the service: HAProxy's
master starts a new worker with the new list and the old worker keeps serving the
connections it has until they close, so nothing open is dropped (master-worker mode,
`-Ws`, as Ubuntu's haproxy.service runs it; `systemctl reload` checks the file first and
keeps the running configuration when it is invalid). `systemctl reload` returns before the
master has loaded anything, and a master that then fails keeps the old workers, so a
reload counts as done only once HAProxy's current worker reports the new configuration's
fingerprint (its `description`) on the master CLI; until then every call reloads again.

The same HAProxy gives the machine's COS agent the metrics of this node's kubelet and,
on control-plane machines, of its API server (`MetricsAccess`). Both serve `/metrics`
only to an authorised client, and a bearer token cannot travel in the `cos_agent`
databag (plain relation data). The node already holds a credential both accept: the
kubelet's own client certificate (`KUBELET_CLIENT_CERT`, user `system:node:<name>` in
group `system:nodes`, signed by the cluster CA, its key in the same PEM), which the
control plane allows `get` on `/metrics` and `nodes/metrics` and nothing more. HAProxy
listens for plain HTTP on loopback (`KUBELET_METRICS_PORT`, `API_SERVER_METRICS_PORT`),
answers GET requests for `/metrics` and the paths below it (403 for anything else), and
forwards them over TLS with that certificate. kubelet's serving certificate is
self-signed (kubeadm leaves serverTLSBootstrap off), so that hop is not verified; it
never leaves the machine. The API server's is checked against the cluster CA. kubelet
rotates its certificate into a new dated file behind the `-current` link; the config
names the file the link points at, so a rotation changes the config and HAProxy
reloads (it reads certificates only when it starts or reloads). Upstream:
kubernetes/kubernetes pkg/kubelet/server/auth.go (every path under /metrics is the
`nodes/metrics` subresource), kubeadm's KubeletConfiguration defaults (x509 client CA,
webhook authorisation, rotateCertificates), HAProxy 2.6-2.8 doc/configuration.txt
(`crt`, `verify`, `ca-file` on a server line; `path`, `path_beg`, `METH_GET`).

The package's own unit is used with a drop-in that points it at `CONFIG`; the package's
`/etc/haproxy/haproxy.cfg` (a conffile) stays untouched, so package updates never ask
about it. The drop-in replaces the unit's command lines rather than setting its `CONFIG`
variable: the unit reads `/etc/default/haproxy` (`EnvironmentFile=`), and systemd lets
those files override `Environment=` (systemd.exec(5)), so an uncommented `CONFIG=` or an
`EXTRAOPTS` with `-f` there would point the endpoint at another file (review deploy.md
N10; the unit: tests/fixtures/haproxy/). Every new configuration is written beside
`CONFIG` first and checked by `haproxy -c`; one HAProxy refuses is never installed, so
neither a reload nor a restart can load it. Units set up by earlier charm revisions ran
a small Python proxy (`gpu-k8s-api-proxy.service`) on the same port; `configure()`
removes it first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from charms.gpu_k8s.v0 import apt
from charms.gpu_k8s.v0.system import SYSTEMCTL, CommandError, Host, poll_until

LIBID = "56d1a753a66d4124bddde98d7b960f09"
LIBAPI = 0
LIBPATCH = 8

LISTEN_HOST = "127.0.0.1"
PORT = 6444
ENDPOINT = f"{LISTEN_HOST}:{PORT}"
SERVICE = "haproxy"
PACKAGE = "haproxy"
# Ubuntu 24.04 (noble) ships HAProxy 2.8 (an LTS branch): 2.8.5-1ubuntu3 in the release
# pocket, 2.8.16-0ubuntu0.24.04.3 in -updates (packages.ubuntu.com, 2026-11-22); pinned by
# series like containerd (see apt.py). Everything in the config below is documented from
# HAProxy 2.6 (Debian 12, where the tests run it) to 2.8 (doc/configuration.txt).
SERIES = "2.8.*"
CONFIG = "/etc/haproxy/gpu-k8s.cfg"
# A new configuration waits here until `haproxy -c` accepted it.
CANDIDATE = "/etc/haproxy/.gpu-k8s.cfg.new"
HAPROXY = "/usr/sbin/haproxy"
# What the package's unit runs (Debian/Ubuntu haproxy.service, tests/fixtures/haproxy/:
# `ExecStart=/usr/sbin/haproxy -Ws -f $CONFIG -p $PIDFILE $EXTRAOPTS`, with PIDFILE
# /run/haproxy.pid and EXTRAOPTS `-S /run/haproxy-master.sock`; `ExecReload=` checks with
# `-c -q`, then `kill -USR2 $MAINPID`), with every variable written out.
PID_FILE = "/run/haproxy.pid"
MASTER_SOCKET = "/run/haproxy-master.sock"
# The sha256 of the drop-in and config HAProxy last took (written once it runs them)
APPLIED = "/var/lib/gpu-k8s/api-proxy.applied"
# How long a reload may take to show in HAProxy's current worker (the master re-executes
# itself, parses the file and forks; well under a second for this config)
RELOAD_WAIT = 10
DROP_IN = f"/etc/systemd/system/{SERVICE}.service.d/gpu-k8s.conf"
# What the health check asks each API server, and how often: a server is taken out after
# 3 failed checks 2 s apart and back after 2 good ones.
HEALTH_PATH = "/readyz"
CHECK_INTERVAL = "2s"
# Connections live as long as their clients want (watches, `kubectl logs -f`, exec
# sessions); client-go pings idle HTTP/2 connections every 30 s, so an hour without a
# byte means the peer is gone.
IDLE_TIMEOUT = "1h"
# A node's endpoint carries kubelet, kube-proxy, the charms and kubectl (pods reach the API
# through the kubernetes Service, not this). HAProxy needs two descriptors per connection
# and refuses to start when it cannot raise its open-files limit that far.
MAX_CONNECTIONS = 4000
# Metrics for the COS agent (see the module docstring).
API_SERVER_METRICS_PORT = 6445
KUBELET_METRICS_PORT = 6446
KUBELET = "127.0.0.1:10250"  # kubelet's authenticated API (KubeletConfiguration port)
KUBELET_CLIENT_CERT = "/var/lib/kubelet/pki/kubelet-client-current.pem"
CLUSTER_CA = "/etc/kubernetes/pki/ca.crt"
# The proxy of earlier charm revisions (a Python program behind its own unit).
LEGACY_SERVICE = "gpu-k8s-api-proxy"
LEGACY_FILES = (
    f"/etc/systemd/system/{LEGACY_SERVICE}.service",
    "/usr/local/lib/gpu-k8s/api_proxy.py",
    "/etc/gpu-k8s/api-proxy.json",
)

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


@dataclasses.dataclass(frozen=True)
class MetricsAccess:
    """What the metrics frontends forward to, and with which credential."""

    client_cert: str  # a PEM file with the certificate and its key (not a link)
    api_server: str | None = None  # this machine's API server (control plane), host:port
    kubelet: str = KUBELET
    ca_file: str = CLUSTER_CA
    kubelet_port: int = KUBELET_METRICS_PORT
    api_server_port: int = API_SERVER_METRICS_PORT


def metrics_access(host: Host, *, api_server: str | None = None) -> MetricsAccess | None:
    """The kubelet's current client certificate as MetricsAccess; None before it has one.

    kubelet keeps `KUBELET_CLIENT_CERT` as an absolute link to the dated file it wrote
    last (client-go util/certificate/certificate_store.go); the config names that file.
    """
    link = host.path(KUBELET_CLIENT_CERT)
    current = KUBELET_CLIENT_CERT
    if link.is_symlink():
        current = str(PurePosixPath(KUBELET_CLIENT_CERT).parent / os.readlink(link))
    if not host.path(current).is_file():
        return None
    return MetricsAccess(client_cert=current, api_server=api_server)


def _metrics_sections(metrics: MetricsAccess) -> list[str]:
    targets = [("kubelet", metrics.kubelet_port, metrics.kubelet, "verify none")]
    if metrics.api_server:
        check = f"verify required ca-file {metrics.ca_file}"
        targets.append(("kube-apiserver", metrics.api_server_port, metrics.api_server, check))
    lines = []
    for name, port, address, verify in targets:
        lines += [
            "",
            f"frontend {name}-metrics",
            "    mode http",
            "    option httplog",
            f"    bind {LISTEN_HOST}:{port}",
            "    acl metrics path /metrics",
            "    acl metrics path_beg /metrics/",
            "    http-request deny unless METH_GET metrics",
            f"    default_backend {name}-metrics",
            "",
            f"backend {name}-metrics",
            "    mode http",
            f"    server {name} {address} ssl {verify} crt {metrics.client_cert}",
        ]
    return lines


def render_config(
    servers: Sequence[str],
    *,
    port: int = PORT,
    service: bool = True,
    metrics: MetricsAccess | None = None,
) -> str:
    """The HAProxy configuration forwarding `LISTEN_HOST:port` to `servers`.

    `service` adds what the systemd service needs around it (syslog, chroot and the
    unprivileged user the Ubuntu package creates); tests that run HAProxy as a plain
    process leave it out and get the same frontend and backend. `metrics` adds the
    metrics frontends (see the module docstring).

    Raises:
        ValueError: the list is empty or an entry is not host:port.
    """
    if not servers:
        raise ValueError("the API proxy needs at least one API server")
    parsed = [parse_server(s) for s in servers]
    lines = ["# Managed by the gpu-k8s charms; local changes are overwritten.", "global"]
    if service:
        lines += [
            "    log /dev/log local0 notice",
            "    chroot /var/lib/haproxy",
            "    user haproxy",
            "    group haproxy",
        ]
    lines += [
        f"    maxconn {MAX_CONNECTIONS}",
        # after a reload, the old worker's connections end by this time at the latest
        f"    hard-stop-after {IDLE_TIMEOUT}",
        "",
        "defaults",
        "    mode tcp",
        "    log global",
        "    option tcplog",
        "    option dontlognull",
        "    retries 3",
        "    option redispatch",
        "    timeout connect 5s",
        f"    timeout client {IDLE_TIMEOUT}",
        f"    timeout server {IDLE_TIMEOUT}",
        "    timeout check 5s",
        "",
        "frontend kube-apiserver",
        f"    bind {LISTEN_HOST}:{port}",
        "    default_backend kube-apiserver",
        "",
        "backend kube-apiserver",
        "    balance roundrobin",
        f"    option httpchk GET {HEALTH_PATH}",
        "    http-check expect status 200",
        f"    default-server check check-ssl verify none inter {CHECK_INTERVAL} fall 3 rise 2",
    ]
    for i, (host, server_port) in enumerate(parsed):
        address = f"[{host}]" if ":" in host else host
        lines.append(f"    server api-{i} {address}:{server_port}")
    if metrics is not None:
        lines += _metrics_sections(metrics)
    # what its worker reports as `description` (`show info`): `_loaded` reads it back
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    lines.insert(2, f"    description gpu-k8s {digest}")
    return "\n".join(lines) + "\n"


def render_drop_in() -> str:
    """The haproxy.service drop-in that makes the package's unit run `CONFIG`, only it.

    Its command lines name no variable that /etc/default/haproxy could set (see the
    module docstring); an empty assignment first resets each list (systemd.service(5)).
    """
    start = f"{HAPROXY} -Ws -f {CONFIG} -p {PID_FILE} -S {MASTER_SOCKET}"
    return "\n".join(
        [
            "# Managed by the gpu-k8s charms: the node-local Kubernetes API endpoint.",
            "# The command lines name the config file: /etc/default/haproxy cannot move it.",
            "[Service]",
            "ExecStartPre=",
            "ExecStart=",
            f"ExecStart={start}",
            "ExecReload=",
            f"ExecReload={HAPROXY} -Ws -f {CONFIG} -c -q",
            "ExecReload=/bin/kill -USR2 $MAINPID",
            "",
        ]
    )


class ProxyError(Exception):
    """`configure` could not make the proxy serve; the message says why and what happens.

    `blocked`: the operator must act (the package cannot be installed from the machine's
    archive); otherwise it clears by itself (the control plane publishes a good server
    list, systemd starts HAProxy on the next try).
    """

    def __init__(self, message: str, *, blocked: bool):
        super().__init__(message)
        self.blocked = blocked


def configure(host: Host, servers: Sequence[str], metrics: MetricsAccess | None = None) -> bool:
    """Install HAProxy and make it forward `ENDPOINT` to `servers`; True when anything changed.

    With `metrics`, it also serves the node's metrics (see the module docstring).

    Nothing runs when HAProxy is running with what it should run (`APPLIED` records what
    HAProxy last took: after a start systemd waited for, or a reload its current worker
    confirmed, see `_loaded`; a failed reload or start is tried again on the next call).
    Otherwise the package is installed first (a failure leaves everything as it was,
    the earlier revisions' proxy still serving), then a changed server list is a reload
    (open connections stay), a new drop-in a restart, and a service that is not running
    (stopped by hand, systemd's start limit) is enabled and started.

    Raises:
        ProxyError: `servers` is empty or malformed (nothing is written), the package could
            not be installed (blocked), or systemctl failed.
    """
    try:
        return _configure(host, servers, metrics)
    except ValueError as e:
        raise ProxyError(f"cannot configure the API proxy: {e}", blocked=False) from None
    except apt.AptError as e:
        raise ProxyError(f"{e}; check the machine's Ubuntu archive", blocked=True) from None
    except CommandError as e:
        raise ProxyError(
            f"starting HAProxy: {e.last_line}; retrying on the next event", blocked=False
        ) from None


def fingerprint(drop_in: str, config: str) -> str:
    """What `APPLIED` holds once HAProxy runs `drop_in` and `config`."""
    return hashlib.sha256(f"{drop_in}\0{config}".encode()).hexdigest()


def _configure(host: Host, servers: Sequence[str], metrics: MetricsAccess | None) -> bool:
    config = render_config(sorted(set(servers)), metrics=metrics)
    drop_in = render_drop_in()
    applied = fingerprint(drop_in, config) + "\n"
    legacy = [path for path in LEGACY_FILES if host.path(path).exists()]
    pinned = apt.pin(host, PACKAGE, {PACKAGE: SERIES})
    running = _active(host)
    if running and not legacy and not pinned and host.read(APPLIED) == applied:
        if host.read(DROP_IN) == drop_in and host.read(CONFIG) == config:
            return False
    # the package first: while apt runs (or when it fails), the earlier proxy still serves
    apt.install(host, {PACKAGE: SERIES}, hold=False)
    _check(host, config)  # before anything changes: a refused config is never loaded
    unit_changed = host.write(DROP_IN, drop_in)
    host.write(CONFIG, config)
    if unit_changed:
        host.run(SYSTEMCTL, "daemon-reload")
    if legacy:  # it holds the port: stopped right before HAProxy binds it
        _remove_legacy(host)
        running = False
    if unit_changed or not running:
        host.run(SYSTEMCTL, "enable", SERVICE)
        host.run(SYSTEMCTL, "restart", SERVICE)
        logger.info("(re)started HAProxy, the local API endpoint on %s", ENDPOINT)
    else:
        before = _master(host)
        host.run(SYSTEMCTL, "reload", SERVICE)
        _loaded(host, config, before)
    # only once HAProxy runs it: a failed reload or start is tried again on the next call
    host.write(APPLIED, applied)
    logger.info("local API endpoint %s forwards to %s", ENDPOINT, ", ".join(sorted(servers)))
    return True


def _master(host: Host) -> tuple[int, str] | None:
    """HAProxy's failed reloads and its current worker's `description`; None: no answer.

    Asked on the master CLI (`-S`, management guide 9.4: the master's socket): `show proc`
    gives the master's line `<pid> master <reloads> [failed: <n>] ...` (9.4.1), and
    `@1 show info` the first current worker's `show info`, whose `description:` line is
    the global `description` (src/stats.c INF_DESCRIPTION "Node description
    (global.description)"). A failed reload adds one to `failed` and leaves the old
    worker as @1; a reload that works sets it back to 0 (src/haproxy.c at v2.8.0:
    `child->failedreloads++` on a failure, `proc_self->failedreloads = 0` once loaded).
    """
    try:
        answer = host.request(MASTER_SOCKET, "show proc; @1 show info\n", timeout=1)
    except CommandError:
        return None  # stopped, or the master is re-executing itself right now
    failed = re.search(r"^\d+\s+master\s+\d+\s+\[failed: (\d+)\]", answer, re.MULTILINE)
    description = re.search(r"^description: *(.*)$", answer, re.MULTILINE)
    if failed is None or description is None:
        return None
    return int(failed[1]), description[1].strip()


def _loaded(host: Host, config: str, before: tuple[int, str] | None) -> None:
    """Wait until HAProxy's current worker runs `config` after `systemctl reload`.

    Ubuntu's `ExecReload=` checks the file (`haproxy -c`, which "exits before trying to
    bind") and sends SIGUSR2 to the master, which then re-executes itself, parses the
    file and forks new workers (HAProxy 2.8 management guide, 4 "Stopping and restarting
    HAProxy"): systemctl succeeds before the master has loaded anything. A master that
    cannot load it (a port another process holds, a file gone since the check) logs it,
    counts a failed reload and keeps the workers it had ("show proc"; the prompt reads
    `master[ReloadFailed]>`, 9.4.1). HAProxy 2.7+ answers a `reload` on the master CLI
    with its outcome, but 2.6 (Debian 12, where the tests run it) does not; this works
    on both. The unit: tests/fixtures/haproxy/haproxy.service.

    Raises:
        ProxyError: the master counted a failed reload, or the worker did not report the
            new configuration within `RELOAD_WAIT` (`APPLIED` stays: tried again).
    """
    want = next(
        line.split(None, 1)[1]
        for line in config.splitlines()
        if line.split()[:1] == ["description"]
    )

    def outcome() -> bool | None:
        now = _master(host)
        if now is None:
            return None
        if before is not None and now[0] > before[0]:
            return False
        return True if now[1] == want else None

    result = poll_until(outcome, RELOAD_WAIT, poll=0.1)
    if result is None:
        raise ProxyError(
            f"HAProxy did not report its new configuration within {RELOAD_WAIT} s of a "
            "reload; retrying on the next event",
            blocked=False,
        )
    if result is False:
        raise ProxyError(
            "HAProxy did not load its new configuration on reload (its master keeps the "
            "running one; journalctl -u haproxy says why); retrying on the next event",
            blocked=False,
        )


def _check(host: Host, config: str) -> None:
    """Have HAProxy check `config` as it would load it, before anything loads it.

    `haproxy -c -f`: HAProxy's management guide, "-c : only performs a check of the
    configuration files and exits before trying to bind"; exit 0 when valid.

    Without `-q`, which silences the reason too: HAProxy prints its errors as
    `[ALERT] (pid) : config : <what>` lines, the first naming the file, line and server.

    Raises:
        ProxyError: HAProxy refused it (the running configuration stays).
    """
    host.write(CANDIDATE, config)
    try:
        host.run(HAPROXY, "-c", "-f", CANDIDATE, timeout=60)
    except CommandError as e:
        raise ProxyError(
            f"HAProxy refused its new configuration ({_alert(e)}); it keeps the running one, "
            "retrying on the next event",
            blocked=False,
        ) from None
    finally:
        host.path(CANDIDATE).unlink(missing_ok=True)


def _alert(error: CommandError) -> str:
    """HAProxy's first `[ALERT]` line without its prefix and the candidate's name."""
    for line in error.stderr.splitlines():
        if line.startswith("[ALERT]"):
            what = line.split(" : ", 2)[-1].strip()
            return re.sub(r"^\[[^]]*:\d+\] : ", "", what)
    return error.last_line


def _active(host: Host) -> bool:
    try:
        host.run(SYSTEMCTL, "is-active", "--quiet", SERVICE)
    except CommandError:
        return False
    return True


def remove(host: Host) -> bool:
    """Stop forwarding and remove what `configure` wrote (the package stays); True if it did."""
    if not host.path(DROP_IN).exists() and not host.path(CONFIG).exists():
        return _remove_legacy(host)
    host.run(SYSTEMCTL, "disable", "--now", SERVICE)
    host.path(DROP_IN).unlink(missing_ok=True)
    host.path(CONFIG).unlink(missing_ok=True)
    host.path(APPLIED).unlink(missing_ok=True)
    host.run(SYSTEMCTL, "daemon-reload")
    _remove_legacy(host)
    return True


def _remove_legacy(host: Host) -> bool:
    """Stop and delete the Python proxy of earlier charm revisions (it holds the port)."""
    present = [path for path in LEGACY_FILES if host.path(path).exists()]
    if not present:
        return False
    try:
        host.run(SYSTEMCTL, "disable", "--now", LEGACY_SERVICE)
    except CommandError:
        logger.debug("the earlier API proxy unit was not loaded")
    for path in present:
        host.path(path).unlink()
    host.run(SYSTEMCTL, "daemon-reload")
    logger.info("removed the earlier local API proxy (%s)", LEGACY_SERVICE)
    return True
