"""The node-local API endpoint for real: HAProxy with the charms' config, two TLS API servers.

The API servers are fake Kubernetes API servers serving HTTPS with one cluster CA (as
kubeadm's API servers share one), each with a Namespace that names it; the client is the
real `kubernetes` client, which checks the server certificate through HAProxy, so TLS goes
end to end. HAProxy is the Debian/Ubuntu package's binary (`.ci/run` installs it).
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from haproxy_runner import BINARY, MISSING, HAProxy, ServiceHAProxy, available
from tf_demo import free_ports

from charms.gpu_k8s.v0 import api_proxy
from charms.gpu_k8s.v0.kubeclient import Kube
from charms.gpu_k8s.v0.system import SubprocessRunner
from fakes.kube_apiserver import ADMIN_TOKEN, FakeKubeApiServer
from fakes.machine import FakeMachine
from fakes.tls import ServerCert, make_server_cert

ADMIN_BEARER = f"Bearer {ADMIN_TOKEN}"
pytestmark = pytest.mark.skipif(
    not available() and not os.environ.get("CI"), reason=MISSING
)  # in CI a missing haproxy fails the test instead


@pytest.fixture(scope="module")
def cert() -> ServerCert:
    return make_server_cert()


def _api_server(cert: ServerCert, name: str) -> FakeKubeApiServer:
    api = FakeKubeApiServer(tls=cert).start()
    api.put_object("/api/v1/namespaces/whoami", {"metadata": {"labels": {"server": name}}})
    return api


@pytest.fixture
def servers(cert) -> Iterator[dict[str, FakeKubeApiServer]]:
    apis = {name: _api_server(cert, name) for name in ("a", "b")}
    yield apis
    for api in apis.values():
        api.stop()


def served_by(proxy: HAProxy, cert: ServerCert) -> str:
    """Which API server answered one GET on a new connection through the proxy."""
    conn = http.client.HTTPSConnection(
        "127.0.0.1", proxy.port, context=cert.client_context(), timeout=5
    )
    try:
        return _whoami(conn)
    finally:
        conn.close()


def _whoami(conn: http.client.HTTPSConnection) -> str:
    # as the kubeadm admin: an anonymous request may read the health paths only
    conn.request("GET", "/api/v1/namespaces/whoami", headers={"Authorization": ADMIN_BEARER})
    response = conn.getresponse()
    body = response.read()
    assert response.status == 200, body
    return json.loads(body)["metadata"]["labels"]["server"]


def wait_for(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_kubernetes_client_reaches_both_api_servers_through_haproxy_with_tls(servers, cert):
    with HAProxy([api.address for api in servers.values()]) as proxy:
        kubeconfig = servers["a"].kubeconfig().replace(servers["a"].address, proxy.address)
        seen = set()
        with Kube.from_kubeconfig(kubeconfig) as kube:
            assert kube.get("v1", "Namespace", "whoami") is not None
        for _ in range(10):  # round robin over new connections
            seen.add(served_by(proxy, cert))
        assert seen == {"a", "b"}


def test_a_stopped_api_server_costs_no_request(servers, cert):
    with HAProxy([api.address for api in servers.values()]) as proxy:
        wait_for(lambda: {served_by(proxy, cert) for _ in range(4)} == {"a", "b"})
        servers["a"].stop()

        # at once, before any health check noticed: a refused connect is retried on "b"
        answers = [served_by(proxy, cert) for _ in range(20)]

        assert answers == ["b"] * 20


def test_a_server_failing_its_health_check_gets_no_new_connections(servers, cert):
    with HAProxy([api.address for api in servers.values()]) as proxy:
        wait_for(lambda: {served_by(proxy, cert) for _ in range(4)} == {"a", "b"})
        servers["a"].inject(status=500, times=10_000, path_prefix="/readyz")

        # "a" still accepts connections and answers requests: only /readyz says no
        wait_for(lambda: {served_by(proxy, cert) for _ in range(6)} == {"b"})

        assert {served_by(proxy, cert) for _ in range(10)} == {"b"}
        health = [r for r in servers["a"].requests if r[1] == "/readyz"]
        assert health, "HAProxy health-checks /readyz"
        assert all(r[0] == "GET" for r in health)


def test_a_reload_keeps_open_connections_and_sends_new_ones_to_the_new_list(servers, cert):
    with HAProxy([servers["a"].address]) as proxy:
        kept = http.client.HTTPSConnection(
            "127.0.0.1", proxy.port, context=cert.client_context(), timeout=5
        )
        assert _whoami(kept) == "a"

        proxy.reload([servers["b"].address])
        wait_for(lambda: served_by(proxy, cert) == "b")

        assert _whoami(kept) == "a"  # the old worker still serves what it had
        assert {served_by(proxy, cert) for _ in range(5)} == {"b"}
        kept.close()


# -- the node's metrics for the COS agent ------------------------------------------------


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client that failed its TLS handshake (a health check): nothing to report."""


class _MetricsServer:
    """kubelet's or an API server's HTTPS port, answering who asked.

    Only a client certificate from the cluster CA gets in, as kubeadm configures both.
    """

    def __init__(self, serving: ServerCert, cluster: ServerCert):
        self.requests: list[tuple[str, str]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # no 40 ms Nagle stall: tests/fakes/__init__.py

            def setup(self) -> None:
                # The TLS handshake here, not in accept(): a health check that drops the
                # handshake then fails this request, whose socket the server closes,
                # instead of leaving accept()'s half-made SSLSocket to the garbage
                # collector (a ResourceWarning in whichever test runs then).
                self.request.do_handshake()
                super().setup()

            def _answer(self) -> None:
                outer.requests.append((self.command, self.path))
                subject = dict(x[0] for x in self.connection.getpeercert()["subject"])
                body = f"# asked by {subject['commonName']}\nup 1\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # noqa: N815 (http.server's names)

            def log_message(self, *args: object) -> None:
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.socket = cluster.mutual_server_context(serving).wrap_socket(
            self.server.socket, server_side=True, do_handshake_on_connect=False
        )
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _access(
    cert: ServerCert, tmp_path, api_server: str, kubelet: str = api_proxy.KUBELET
) -> api_proxy.MetricsAccess:
    """Metrics frontends on free ports; the node's client PEM and the CA from `cert`."""
    client = tmp_path / "kubelet-client-2026-11-24-10-00-00.pem"
    client.write_text(cert.client_pem("system:node:ip-10-0-1-17", "system:nodes"))
    ca_file = tmp_path / "ca.crt"
    ca_file.write_text(cert.ca_pem)
    kubelet_port, api_server_port = free_ports(2)
    return api_proxy.MetricsAccess(
        client_cert=str(client),
        api_server=api_server,
        kubelet=kubelet,
        ca_file=str(ca_file),
        kubelet_port=kubelet_port,
        api_server_port=api_server_port,
    )


@pytest.fixture
def node_metrics(cert, servers, tmp_path) -> Iterator[tuple[HAProxy, _MetricsServer, ...]]:
    """HAProxy with the metrics frontends in front of a kubelet and an API server.

    kubelet serves a self-signed certificate of its own, the API server one from the
    cluster CA; the node's client PEM is from that CA.
    """
    kubelet = _MetricsServer(make_server_cert("ip-10-0-1-17@1700000000"), cert)
    api_server = _MetricsServer(cert, cert)
    metrics = _access(cert, tmp_path, api_server.address, kubelet=kubelet.address)
    with HAProxy([servers["a"].address], metrics=metrics) as proxy:
        yield proxy, kubelet, api_server
    kubelet.stop()
    api_server.stop()


def _get(port: int, path: str, method: str = "GET") -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_the_agent_reads_kubelet_and_api_server_metrics_as_the_node(node_metrics):
    proxy, kubelet, api_server = node_metrics
    ports = proxy.metrics

    for port, path in (
        (ports.kubelet_port, "/metrics"),
        (ports.kubelet_port, "/metrics/cadvisor"),
        (ports.api_server_port, "/metrics"),
    ):
        status, body = _get(port, path)
        assert status == 200, body
        assert "# asked by system:node:ip-10-0-1-17" in body  # the kubelet's own identity

    assert kubelet.requests == [("GET", "/metrics"), ("GET", "/metrics/cadvisor")]
    assert api_server.requests == [("GET", "/metrics")]


def test_nothing_but_reading_metrics_gets_through(node_metrics):
    proxy, kubelet, api_server = node_metrics
    ports = proxy.metrics

    # the kubelet's certificate could read pods, logs or exec: HAProxy lets none of it by
    for port, path, method in (
        (ports.kubelet_port, "/pods", "GET"),
        (ports.kubelet_port, "/metricsx", "GET"),
        (ports.kubelet_port, "/run/default/pod/container", "POST"),
        (ports.kubelet_port, "/metrics", "POST"),
        (ports.api_server_port, "/api/v1/secrets", "GET"),
    ):
        assert _get(port, path, method)[0] == 403, (port, path, method)

    assert kubelet.requests == [] and api_server.requests == []


def test_an_api_server_the_cluster_ca_did_not_sign_gets_no_request(cert, tmp_path):
    impostor = _MetricsServer(make_server_cert("kube-apiserver"), cert)
    metrics = _access(cert, tmp_path, impostor.address)
    try:
        with HAProxy([impostor.address], metrics=metrics) as proxy:
            status, _ = _get(proxy.metrics.api_server_port, "/metrics")
    finally:
        impostor.stop()
    assert status == 503  # the TLS check failed: no server to send it to
    assert impostor.requests == []


# -- the charms' check before every reload, by the real binary ---------------------------


def _machine_with_real_haproxy(root) -> FakeMachine:
    """A fake machine whose `haproxy -c -f FILE` is the real binary on the file under root."""
    machine = FakeMachine(root)
    real = SubprocessRunner()

    def check(argv: list[str], _input: str | None) -> str:
        name = argv[argv.index("-f") + 1]
        at = [*argv[:-1], str(machine.path(name))]
        return real.run([BINARY, *at[1:]], timeout=30)

    machine.on("haproxy", check)
    return machine


def test_a_config_the_real_haproxy_refuses_is_never_loaded_and_the_status_says_why(tmp_path):
    """The service config (syslog, chroot, user haproxy) as the charms write it."""
    machine = _machine_with_real_haproxy(tmp_path / "root")
    assert api_proxy.configure(machine.host(), ["10.0.0.1:6443"]) is True
    service = machine.services[api_proxy.SERVICE]

    # RFC 6761: names under .invalid never resolve; HAProxy resolves servers at load
    with pytest.raises(api_proxy.ProxyError) as refused:
        api_proxy.configure(machine.host(), ["10.0.0.1:6443", "api.invalid:6443"])

    assert str(refused.value) == (
        "HAProxy refused its new configuration ('server kube-apiserver/api-1' : could not "
        "resolve address 'api.invalid'.); it keeps the running one, retrying on the next event"
    )
    assert machine.proxy_servers() == ["10.0.0.1:6443"]
    assert service.reloads == 0
    assert api_proxy.configure(machine.host(), ["10.0.0.1:6443", "10.0.0.2:6443"]) is True
    assert service.reloads == 1


# -- the charms' reload, confirmed on the real master ------------------------------------


@pytest.fixture
def unit(tmp_path) -> Iterator[tuple[FakeMachine, ServiceHAProxy]]:
    """A fake machine whose haproxy.service is the real HAProxy (ServiceHAProxy)."""
    machine = _machine_with_real_haproxy(tmp_path / "root")
    with ServiceHAProxy(machine) as service:
        yield machine, service


def _description(machine: FakeMachine) -> str:
    text = machine.read(api_proxy.CONFIG) or ""
    words = [line.split(None, 1) for line in text.splitlines()]
    return next(w[1] for w in words if w[:1] == ["description"])


def test_a_reload_the_real_master_refuses_is_tried_again_until_it_runs(unit, cert, tmp_path):
    """`haproxy -c` passes (it "exits before trying to bind"); the master cannot bind.

    systemctl reload succeeds all the same (ExecReload= only checks and signals); the
    master keeps the old worker, and the charm must not record the new config as taken.
    """
    machine, service = unit
    servers = ["127.0.0.1:16443"]
    assert api_proxy.configure(machine.host(), servers) is True
    first = machine.read(api_proxy.APPLIED)
    assert service.loaded() == _description(machine)

    pem = tmp_path / "kubelet-client.pem"
    pem.write_text(cert.client_pem("system:node:ip-10-0-1-17", "system:nodes"))
    holder = socket.socket()  # another process's listener on the metrics port
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    metrics = api_proxy.MetricsAccess(client_cert=str(pem), kubelet_port=port)
    try:
        with pytest.raises(api_proxy.ProxyError) as refused:
            api_proxy.configure(machine.host(), servers, metrics)
        assert "did not load its new configuration on reload" in str(refused.value)
        assert machine.read(api_proxy.APPLIED) == first
        assert service.loaded() != _description(machine)  # the old worker still serves
        assert "cannot bind socket (Address already in use)" in service.log.read_text()
    finally:
        holder.close()

    assert api_proxy.configure(machine.host(), servers, metrics) is True  # the next hook
    assert service.loaded() == _description(machine)
    assert _get(port, "/nope")[0] == 403  # the new frontend listens
    assert api_proxy.configure(machine.host(), servers, metrics) is False


def test_a_stopped_real_haproxy_is_started(unit):
    machine, service = unit
    assert api_proxy.configure(machine.host(), ["127.0.0.1:16443"]) is True
    machine.runner.run(["/usr/bin/systemctl", "stop", "haproxy"])
    assert not service.running

    assert api_proxy.configure(machine.host(), ["127.0.0.1:16443"]) is True

    assert service.running
    assert service.loaded() == _description(machine)
    socket.create_connection(("127.0.0.1", service.port), timeout=2).close()
