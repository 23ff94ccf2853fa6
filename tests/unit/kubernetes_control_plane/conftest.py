"""Fixtures for the kubernetes-control-plane charm: a fake machine and a fake API server."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import addons
import batch_engines
import efs_csi
import pytest
from ops import testing

import charm
from fakes.addons import EFS_CSI_PATH, ManifestServer
from fakes.control_plane import (
    Clock,
    ControlPlaneMachine,
    deployed_charm,
    existing_cluster,
    peers,
)
from fakes.etcd import EtcdPki, FakeEtcd
from fakes.kube_apiserver import FakeKubeApiServer


@pytest.fixture(scope="session", autouse=True)
def parsed_once():
    """Each release's manifest parsed once per process, handed out as a fresh copy each time.

    The leader parses JobSet's, Kueue's, Calico's and the EFS CSI driver's files (libyaml,
    then PyYAML's Python constructor: ~12 ms for Kueue's) on every bootstrap of every
    test; the same bytes give the same objects, so what `parse` returned for them is kept
    (pickled) and a copy given, as a new parse would. A refusal (AddonError,
    DriverError) is never kept: bad bytes are parsed and refused every time.
    """
    kept: dict[object, bytes] = {}

    def once(parse: Callable, key: Callable) -> Callable:
        def parse_once(*args):
            k = key(*args)
            if k not in kept:
                kept[k] = pickle.dumps(parse(*args))
            return pickle.loads(kept[k])

        return parse_once

    with pytest.MonkeyPatch.context() as m:
        m.setattr(
            batch_engines, "parse", once(batch_engines.parse, lambda r, data: (repr(r), data))
        )
        m.setattr(
            efs_csi, "parse", once(efs_csi.parse, lambda files: tuple(sorted(files.items())))
        )
        yield


@pytest.fixture
def api():
    """The cluster, validating every write as kube-apiserver 1.36 (fakes/kube_admission.py).

    Built-in kinds against kubernetes-validate's 1.36 schemas, Kueue's Cohort,
    ResourceFlavor and WorkloadPriorityClass against their real CRDs once the charm applied
    Kueue's release (`fakes.addons`); afterwards no write may have lost an undeclared field
    (the server drops one with a warning when the client, as the charm's, sends no
    fieldValidation).
    """
    with FakeKubeApiServer() as server:
        server.available_deployments = True  # a healthy cluster's controllers roll them out
        yield server
        assert [w for w in server.warnings if "unknown field" in w[2]] == []


@pytest.fixture(scope="session")
def release_server():
    with ManifestServer() as server:
        yield server


@pytest.fixture(autouse=True)
def releases(release_server, monkeypatch):
    """The batch engines', Calico's and the EFS CSI driver's files, from 127.0.0.1."""
    release_server.requests.clear()
    release_server.redirects.clear()
    for name in ("JOBSET", "KUEUE", "CALICO_RELEASE"):
        monkeypatch.setattr(addons, name, release_server.local(getattr(addons, name)))
    monkeypatch.setattr(efs_csi, "UPSTREAM", f"{release_server.url}{EFS_CSI_PATH}")
    cls = charm.KubernetesControlPlaneCharm  # its own opener, trusting the server's CA
    monkeypatch.setattr(cls, "url_opener", staticmethod(release_server.opener(cls.url_opener)))
    return release_server


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(charm.KubernetesControlPlaneCharm, "clock", staticmethod(c))
    return c


PUBLIC_ADDRESS = "203.0.113.7"  # what `unit-get public-address` answers on AWS (TEST-NET-3)


@pytest.fixture(autouse=True)
def public_address(monkeypatch):
    """The unit's public address as Juju gives it (the charm asks `unit-get`)."""
    address = {"value": PUBLIC_ADDRESS}
    monkeypatch.setattr(
        charm.KubernetesControlPlaneCharm, "public_address", staticmethod(lambda: address["value"])
    )
    return address


@pytest.fixture(scope="session")
def etcd_pki():
    return EtcdPki()


@pytest.fixture
def etcd(etcd_pki, monkeypatch):
    with FakeEtcd(etcd_pki) as server:
        monkeypatch.setattr(charm.KubernetesControlPlaneCharm, "etcd_url", server.url)
        yield server


@pytest.fixture
def machine(tmp_path, api, monkeypatch, clock, etcd):
    existing_cluster(api)  # what units joining a running cluster find (init replaces it)
    api.clock = lambda: clock().timestamp()  # one time for the charm and the API server
    m = ControlPlaneMachine(tmp_path / "root", api, etcd=etcd, clock=clock)
    monkeypatch.setattr(
        charm.KubernetesControlPlaneCharm, "host_factory", staticmethod(lambda: m.machine.host())
    )
    # the restart's waits are kubelet's looks at its manifests; /readyz is the fake's
    monkeypatch.setattr(
        charm.KubernetesControlPlaneCharm, "restart_sleep", staticmethod(m.kubelet.sync)
    )
    monkeypatch.setattr(charm.KubernetesControlPlaneCharm, "local_api_server", api.url)
    return m


@pytest.fixture
def ctx(machine, tmp_path):
    """The charm in a charm directory as Juju deployed it (with its charm URL)."""
    root = deployed_charm(tmp_path / "charm")
    return testing.Context(charm.KubernetesControlPlaneCharm, charm_root=root)


@pytest.fixture
def bootstrapped(ctx, machine) -> testing.State:
    """The leader after its install hook: the cluster bootstrapped, no relation but peers."""
    return ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))


@pytest.fixture
def whoami(api) -> Callable[[str], str | None]:
    """Who `api` takes a bearer token for (SelfSubjectReview), or None when it refuses it."""
    from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

    def ask(token: str) -> str | None:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        with Kube.from_kubeconfig(api.kubeconfig(token), retries=0) as kube:
            try:
                answer = kube.request(
                    "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review
                )
            except KubeError as e:
                if e.status == 401:
                    return None
                raise
        return answer["status"]["userInfo"]["username"]

    return ask
