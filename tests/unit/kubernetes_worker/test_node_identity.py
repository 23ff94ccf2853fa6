"""The worker's own identity: its kubelet's client certificate (issue 29 item 2, review S2).

`node_identity.kubeconfig(host)` reads kubelet.conf as kubelet writes it after its TLS
bootstrap (its docstring names the source) from a fake machine, and the client built from
it is, at a TLS fake API server, `system:node:<name>` in `system:nodes`: its own Node only.
"""

import base64

import node_identity
import pytest
import yaml

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes.kube_apiserver import FakeKubeApiServer
from fakes.machine import FakeMachine
from fakes.worker_scenario import NODE

PKI = "/var/lib/kubelet/pki"
CURRENT = f"{PKI}/kubelet-client-current.pem"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


@pytest.fixture
def api():
    with FakeKubeApiServer(tls=True) as server:
        for name in (NODE, "another-node"):
            server.put_object(f"/api/v1/nodes/{name}", {"metadata": {"name": name}})
        yield server


def kubelet_conf(api, *, ca_file=None):
    """kubelet.conf as bootstrap.go writeKubeconfigFromBootstrapping writes it."""
    cluster = {"server": api.url}
    if ca_file:
        cluster["certificate-authority"] = ca_file
    else:
        cluster["certificate-authority-data"] = base64.b64encode(api.tls.ca_pem.encode()).decode()
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "default-cluster", "cluster": cluster}],
            "users": [
                {
                    "name": "default-auth",
                    "user": {"client-certificate": CURRENT, "client-key": CURRENT},
                }
            ],
            "contexts": [
                {
                    "name": "default-context",
                    "context": {
                        "cluster": "default-cluster",
                        "user": "default-auth",
                        "namespace": "default",
                    },
                }
            ],
            "current-context": "default-context",
        }
    )


def joined(tmp_path, api, **kwargs):
    """A machine whose kubelet bootstrapped: kubelet.conf, a dated PEM, the -current link."""
    machine = FakeMachine(tmp_path / "root", hostname=NODE)
    machine.write("/etc/kubernetes/kubelet.conf", kubelet_conf(api, **kwargs), 0o600)
    dated = f"{PKI}/kubelet-client-2026-11-28-10-00-00.pem"
    machine.write(dated, api.node_certificate(NODE), 0o600)
    machine.path(CURRENT).symlink_to(dated)  # absolute, a path on the machine
    return machine


def test_the_worker_acts_as_its_kubelet_and_reaches_only_its_own_node(tmp_path, api):
    machine = joined(tmp_path, api)
    with Kube.from_kubeconfig(node_identity.kubeconfig(machine.host()), retries=0) as kube:
        review = kube.request("POST", WHOAMI, body={"kind": "SelfSubjectReview"})
        info = review["status"]["userInfo"]
        assert info["username"] == f"system:node:{NODE}"
        assert info["groups"] == ["system:nodes", "system:authenticated"]
        assert kube.get("v1", "Node", NODE) is not None
        with pytest.raises(KubeError) as refused:
            kube.get("v1", "Node", "another-node")
    assert refused.value.status == 403


def test_a_rotated_certificate_is_the_one_used(tmp_path, api):
    machine = joined(tmp_path, api)
    rotated = f"{PKI}/kubelet-client-2026-12-28-10-00-00.pem"
    machine.write(rotated, api.tls.client_pem("system:node:rotated", "system:nodes"), 0o600)
    machine.path(CURRENT).unlink()
    machine.path(CURRENT).symlink_to(rotated)
    with Kube.from_kubeconfig(node_identity.kubeconfig(machine.host()), retries=0) as kube:
        review = kube.request("POST", WHOAMI, body={"kind": "SelfSubjectReview"})
    assert review["status"]["userInfo"]["username"] == "system:node:rotated"


def test_a_ca_file_is_inlined_too(tmp_path, api):
    machine = joined(tmp_path, api, ca_file="/etc/kubernetes/pki/ca.crt")
    machine.write("/etc/kubernetes/pki/ca.crt", api.tls.ca_pem)
    with Kube.from_kubeconfig(node_identity.kubeconfig(machine.host()), retries=0) as kube:
        assert kube.get("v1", "Node", NODE) is not None


def test_no_kubelet_conf_is_not_joined(tmp_path):
    machine = FakeMachine(tmp_path / "root", hostname=NODE)
    with pytest.raises(node_identity.NodeIdentityError, match="has not joined"):
        node_identity.kubeconfig(machine.host())


def test_a_missing_certificate_is_named_and_no_key_is_echoed(tmp_path, api):
    machine = joined(tmp_path, api)
    machine.path(CURRENT).unlink()
    with pytest.raises(node_identity.NodeIdentityError) as missing:
        node_identity.kubeconfig(machine.host())
    assert (
        str(missing.value)
        == f"kubelet.conf names the client certificate {CURRENT}, which is missing"
    )
    machine.path(CURRENT).symlink_to(f"{PKI}/kubelet-client-2026-11-28-10-00-00.pem")
    conf = machine.path("/etc/kubernetes/kubelet.conf")
    config = yaml.safe_load(conf.read_text())
    config["users"][0]["user"] = {"token": "a-token"}
    conf.write_text(yaml.safe_dump(config))
    with pytest.raises(node_identity.NodeIdentityError) as tokened:
        node_identity.kubeconfig(machine.host())
    assert "a-token" not in str(tokened.value)
    assert str(tokened.value).endswith("holds no client certificate and key")
