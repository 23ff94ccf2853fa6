import datetime

import pytest
from ops import testing

import charm
from fakes.kube_apiserver import FakeKubeApiServer
from fakes.kube_grants import store_grant, worker_grant
from fakes.machine import FakeMachine
from fakes.worker_scenario import NODE, SA_TOKEN


class FakeClock:
    """Monotonic time that only moves when the code under test sleeps."""

    def __init__(self):
        self.now = 1000.0
        self.slept = 0.0
        # what else moves while the code sleeps (a controller, the kubelet)
        self.meanwhile: list = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
        self.slept += seconds
        for act in self.meanwhile:
            act()


# The day the charm judges NVIDIA branches on (driver.END_OF_LIFE): tests that expect
# today's automatic branch must not break when a branch reaches its end of life.
TODAY = datetime.date(2026, 11, 27)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    m = FakeMachine(tmp_path / "root", hostname=NODE)
    monkeypatch.setattr(charm.KubernetesWorkerCharm, "host_factory", lambda self: m.host())
    monkeypatch.setattr(charm.KubernetesWorkerCharm, "today", staticmethod(lambda: TODAY))
    return m


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(charm.KubernetesWorkerCharm, "drain_clock", staticmethod(c))
    monkeypatch.setattr(charm.KubernetesWorkerCharm, "drain_sleep", staticmethod(c.sleep))
    return c


@pytest.fixture
def api(machine):
    """The cluster over TLS; the machine's kubelet bootstraps against it.

    The worker acts as its kubelet (`system:node:<name>`, the certificate the fake
    kubeadm join leaves); the control plane's kubeconfig in the join secret holds the
    token of the workers' grant, which only validate-gpu still uses.
    """
    with FakeKubeApiServer(tls=True) as server:
        # gpu-k8s-system enforces Pod Security baseline, as the grant labels it (issue 29
        # item 3, review S2): the CUDA validation pod must pass it
        store_grant(server, worker_grant(), SA_TOKEN)
        machine.cluster = server
        yield server


@pytest.fixture
def ctx():
    return testing.Context(charm.KubernetesWorkerCharm)


@pytest.fixture
def own_departure(monkeypatch):
    """Make `departing_unit` name this unit, as Juju does on `juju remove-unit`.

    ops.testing only builds departing units of the remote application, so the Juju
    environment it prepares is adjusted at that boundary (JUJU_DEPARTING_UNIT).
    """
    from scenario import _runtime

    real = _runtime.Runtime._get_event_env

    def env(self, state, event, charm_root):
        out = real(self, state, event, charm_root)
        if "JUJU_DEPARTING_UNIT" in out:
            out["JUJU_DEPARTING_UNIT"] = out["JUJU_UNIT_NAME"]
        return out

    monkeypatch.setattr(_runtime.Runtime, "_get_event_env", env)


@pytest.fixture
def reboots(monkeypatch):
    """Record `unit.reboot()` calls (the `now` flag of each).

    ops.testing 8 (ops 3.9) has no model of `juju-reboot`: its backend would run the
    hook tool. The fake is placed at that boundary, as `own_departure` does for
    JUJU_DEPARTING_UNIT.
    """
    from scenario import mocking

    calls: list[bool] = []
    monkeypatch.setattr(
        mocking._MockModelBackend,
        "reboot",
        lambda self, now=False: calls.append(now),
        raising=False,
    )
    return calls
