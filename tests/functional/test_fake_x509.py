"""The fake API server authenticates client certificates as kube-apiserver does (x509.go).

One test per rule of the x509 authenticator in `fakes.kube_auth` (its docstring names the
sources: k8s.io/apiserver pkg/authentication/request/x509/x509.go `CommonNameUserConversion`
and `DefaultVerifyOptions`, pkg/server/secure_serving.go `tls.RequestClientCert`,
pkg/authentication/request/union/union.go, pkg/kubeapiserver/authenticator/config.go), each
over real TLS: Python's ssl, the `kubernetes` client through `Kube`, and the real kubectl.
"""

from __future__ import annotations

import datetime
import gc
import json
import socket
import ssl
import struct
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubectl_runner import Kubectl

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes.kube_apiserver import FakeKubeApiServer
from fakes.tls import make_server_cert

WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
NOW = datetime.datetime.now(datetime.timezone.utc)


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(tls=True) as server:
        yield server


def call(
    api: FakeKubeApiServer,
    method: str,
    path: str,
    client_pem: str | None,
    body: dict | None = None,
    token: str | None = None,
) -> tuple[int, dict]:
    """One request over TLS presenting `client_pem` (certificate and key) if given."""
    assert api.tls is not None
    context = api.tls.client_context()
    if client_pem is not None:
        with tempfile.NamedTemporaryFile("w", suffix=".pem") as pem:
            pem.write(client_pem)
            pem.flush()
            context.load_cert_chain(pem.name)
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.url + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def whoami(api: FakeKubeApiServer, client_pem: str | None, token: str | None = None):
    return call(api, "POST", WHOAMI, client_pem, REVIEW, token)


def test_a_client_that_resets_before_the_handshake_leaves_no_socket_open(api, capfd):
    """A TCP health check (HAProxy's) connects and resets: the server closes its side.

    Before, the half-made TLS socket of the failed accept was left to the garbage
    collector, whose ResourceWarning failed whichever test ran then (fakes/tls.py).
    """
    assert api.tls is not None
    host, port = api.url.removeprefix("https://").split(":")
    for _ in range(3):
        client = socket.create_connection((host, int(port)))
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # RST, no handshake
    socket.create_connection((host, int(port))).close()  # FIN: the handshake meets EOF
    # the server accepts one connection at a time: this one is served after the three
    assert whoami(api, api.tls.client_pem("jane", "team-a"))[0] == 201
    gc.collect()  # an unclosed socket warns here, an error under filterwarnings
    # and a dropped handshake is no traceback in the log (socketserver's handle_error)
    assert "Exception occurred during processing" not in capfd.readouterr().err


def test_the_common_name_is_the_user_and_each_organization_a_group(api):
    assert api.tls is not None
    pem = api.tls.client_pem("jane", ("team-a", "team-b"))
    code, review = whoami(api, pem)
    assert code == 201
    info = review["status"]["userInfo"]
    assert info["username"] == "jane"
    assert info["groups"] == ["team-a", "team-b", "system:authenticated"]
    # user.CredentialIDKey: the certificate's SHA-256 fingerprint
    [credential] = info["extra"]["authentication.kubernetes.io/credential-id"]
    assert credential.startswith("X509SHA256=") and len(credential) == len("X509SHA256=") + 64


def test_a_kubelet_certificate_is_its_node_and_the_node_authorizer_decides(api):
    api.put_object("/api/v1/nodes/n1", {"metadata": {"name": "n1"}})
    api.put_object("/api/v1/nodes/n2", {"metadata": {"name": "n2"}})
    with Kube.from_kubeconfig(api.certificate_kubeconfig(api.node_certificate("n1"))) as kube:
        own = kube.get("v1", "Node", "n1")
        assert own is not None and own["metadata"]["name"] == "n1"
        with pytest.raises(KubeError) as refused:
            kube.get("v1", "Node", "n2")
    assert refused.value.status == 403
    assert refused.value.message == (
        'nodes "n2" is forbidden: User "system:node:n1" cannot get resource "nodes" in API '
        "group \"\" at the cluster scope: node 'n1' cannot read 'n2', only its own Node object"
    )


def test_a_certificate_of_another_ca_is_401_not_a_failed_handshake(api):
    stranger = make_server_cert().client_pem("system:node:n1", "system:nodes")
    assert whoami(api, stranger) == (401, _unauthorized())


def test_an_expired_certificate_is_401(api):
    assert api.tls is not None
    expired = api.tls.client_pem(
        "system:node:n1",
        "system:nodes",
        valid_from=NOW - datetime.timedelta(days=2),
        valid_until=NOW - datetime.timedelta(days=1),
    )
    assert whoami(api, expired) == (401, _unauthorized())


def test_a_certificate_is_verified_at_the_servers_time(api):
    assert api.tls is not None
    pem = api.tls.client_pem(
        "system:node:n1", "system:nodes", valid_until=NOW + datetime.timedelta(hours=1)
    )
    assert whoami(api, pem)[0] == 201
    api.clock = lambda: (NOW + datetime.timedelta(hours=2)).timestamp()
    assert whoami(api, pem) == (401, _unauthorized())
    api.clock = lambda: (NOW - datetime.timedelta(days=2)).timestamp()  # not yet valid
    assert whoami(api, pem) == (401, _unauthorized())


def test_a_certificate_not_for_client_auth_is_401(api):
    assert api.tls is not None
    serving_only = api.tls.client_pem("jane", "x", usages=(ExtendedKeyUsageOID.SERVER_AUTH,))
    assert whoami(api, serving_only) == (401, _unauthorized())
    any_usage = api.tls.client_pem("jane", "x", usages=None)  # no extension: any usage
    assert whoami(api, any_usage)[0] == 201


def test_an_empty_common_name_leaves_the_request_to_the_other_authenticators(api):
    assert api.tls is not None
    nameless = api.tls.client_pem("", "system:masters")
    code, status = call(api, "GET", "/api/v1/nodes", nameless)
    assert code == 403
    assert status["message"].startswith('nodes is forbidden: User "system:anonymous"')


def test_a_valid_token_wins_over_a_certificate_that_failed_but_never_anonymous(api):
    stranger = make_server_cert().client_pem("system:node:n1", "system:nodes")
    code, review = whoami(api, stranger, token="admin-token")
    assert code == 201
    assert review["status"]["userInfo"]["username"] == "kubernetes-admin"
    assert whoami(api, stranger, token="not-a-token") == (401, _unauthorized())


def test_kubectl_authenticates_with_a_kubelet_kubeconfig(api, kubectl_binary: Path):
    kubectl = Kubectl(kubectl_binary, api)
    try:
        kubectl.kubeconfig.write_text(api.certificate_kubeconfig(api.node_certificate("n1")))
        api.put_object("/api/v1/nodes/n1", {"metadata": {"name": "n1"}})
        api.put_object("/api/v1/nodes/n2", {"metadata": {"name": "n2"}})
        done = kubectl.run("get", "node", "n1", "-o", "name")
        assert done.stdout == "node/n1\n"
        refused = kubectl.run("get", "node", "n2", check=False)
        assert refused.returncode == 1
        assert 'User "system:node:n1" cannot get resource "nodes"' in refused.stderr
    finally:
        kubectl.close()


def _unauthorized() -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


def test_without_a_client_ca_a_plain_tls_client_still_connects(api):
    """No certificate at all: the handshake completes (RequestClientCert), tokens decide."""
    assert whoami(api, None, token="admin-token")[0] == 201
    assert ssl.OPENSSL_VERSION  # the ssl module the callback is installed into
