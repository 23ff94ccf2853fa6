"""The node-local API endpoint for real: HAProxy with the charms' config, two TLS API servers.

The API servers are fake Kubernetes API servers serving HTTPS with one cluster CA (as
kubeadm's API servers share one), each with a Namespace that names it; the client is the
real `kubernetes` client, which checks the server certificate through HAProxy, so TLS goes
end to end. HAProxy is the Debian/Ubuntu package's binary (`.ci/run` installs it).
"""

from __future__ import annotations

import http.client
import json
import os
import time
from collections.abc import Iterator

import pytest
from haproxy_runner import MISSING, HAProxy, available

from charms.gpu_k8s.v0.kubeclient import Kube
from fakes.kube_apiserver import FakeKubeApiServer
from fakes.tls import ServerCert, make_server_cert

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
    conn.request("GET", "/api/v1/namespaces/whoami")
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
