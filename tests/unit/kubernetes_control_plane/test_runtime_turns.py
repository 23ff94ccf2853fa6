"""containerd/runc security updates of the control plane's nodes, one drain turn at a time.

Issue 30 item 2 (the control plane's part): a runc fix in noble-security reaches three
control-plane units, each on its own fake machine against one API server; the leader
hands `runtime-turn` to one unit at a time, so no two nodes are drained at once, and a
containerd that does not restart keeps its node cordoned and the turn, and says why.
"""

from __future__ import annotations

import bootstrap
import pytest
import renewal
import runtime_turns
from context import UnitContext
from ops import testing
from peers import Peers

from charms.gpu_k8s.v0 import containerd
from charms.gpu_k8s.v0.kubeclient import Kube
from fakes.control_plane import (
    ADMIN_TOKEN,
    MANIFESTS,
    STATIC_PODS,
    ControlPlaneMachine,
    leader_member_state,
    member,
    peer,
    peers,
)

UNITS = (0, 1, 2)
RUNC_FIX = "1.3.4-0ubuntu1~24.04.2"
DAY = 24 * 3600.0


def apt_checks(machine) -> int:
    return sum(" -s install " in line for line in machine.lines("apt-get"))


def unit(i: int) -> str:
    return f"kubernetes-control-plane/{i}"


def node_name(i: int) -> str:
    return f"cp-{i}"  # what fakes.control_plane.member registers


class ControlPlanes:
    """Three joined control-plane units, each on its own machine, unit 0 leading.

    The peer relation's databags are kept here and handed to each unit's step as Juju
    would: its own unit databag (writable), the others' (read), the application's
    (writable by the leader only).
    """

    def __init__(self, tmp_path, api, clock):
        self.api = api
        self.app: dict[str, str] = {}
        self.units: dict[int, dict[str, str]] = {}
        self.stored: dict[int, dict[str, str]] = {i: {} for i in UNITS}
        self.machines: dict[int, ControlPlaneMachine] = {}
        self.now = 1_800_000_000.0
        self.monotonic = [0.0]
        self.drained_at_once = 0
        for i in UNITS:
            m = ControlPlaneMachine(tmp_path / f"root-{i}", api, hostname=node_name(i))
            host = m.machine.host()
            containerd.install(host)
            for pod in STATIC_PODS:
                host.write(f"{MANIFESTS}/{pod}.yaml", f"# {pod}\n")
            m.kubelet.sync()
            bootstrap.mark_joined(host, "join")
            self.units[i] = member(api, i)
            api.put_object(  # a pod the drain evicts
                f"/api/v1/namespaces/default/pods/web-{i}",
                {
                    "metadata": {},
                    "spec": {
                        "nodeName": node_name(i),
                        "containers": [{"name": "c", "image": "busybox"}],
                    },
                    "status": {"phase": "Running"},
                },
            )
            self._observe_restarts(m)
            self.machines[i] = m

    def _observe_restarts(self, m: ControlPlaneMachine) -> None:
        systemctl = m.machine._systemctl

        def observed(argv, stdin):
            if "restart" in argv and "containerd" in argv:
                self.drained_at_once = max(self.drained_at_once, len(self.cordoned()))
            return systemctl(argv, stdin)

        m.on("systemctl", observed)

    def cordoned(self) -> list[str]:
        nodes = [self.api.get_object(f"/api/v1/nodes/{node_name(i)}") for i in UNITS]
        return [n["metadata"]["name"] for n in nodes if n["spec"].get("unschedulable")]

    def sleep(self, seconds: float) -> None:
        self.monotonic[0] += seconds

    def run(self, i: int, *, upgrading: bool = False) -> runtime_turns.Found:
        host = self.machines[i].machine.host()
        app = self.app if i == 0 else dict(self.app)
        view = Peers(
            app, unit(i), self.units[i], {unit(j): self.units[j] for j in UNITS if j != i}
        )
        ctx = UnitContext(host, unit(i), i == 0, node_name(i), f"10.0.0.{5 + i}", None)
        with Kube.from_kubeconfig(self.api.kubeconfig(ADMIN_TOKEN)) as kube:
            turns = runtime_turns.RuntimeTurns(
                ctx,
                view,
                self.stored[i],
                lambda: kube,
                wall_clock=lambda: self.now,
                upgrading=upgrading,
                monotonic=lambda: self.monotonic[0],
                sleep=self.sleep,
            )
            found = turns.reconcile(leader=i == 0)
        assert app == self.app, "only the leader writes the application databag"
        return found

    def round(self) -> dict[int, runtime_turns.Found]:
        return {i: self.run(i) for i in UNITS}


@pytest.fixture
def planes(tmp_path, api, clock):
    cps = ControlPlanes(tmp_path, api, clock)
    cps.round()  # the first check: nothing pending yet
    return cps


def test_three_units_take_a_runc_fix_one_drained_node_at_a_time(planes):
    checks = {i: apt_checks(m) for i, m in planes.machines.items()}
    for m in planes.machines.values():
        m.publish("runc", RUNC_FIX, "security")  # same series; held: nothing moves
    planes.machines[1].fail_start("containerd", "Job for containerd.service failed")

    planes.now += 2 * 3600
    planes.round()  # within the day: nobody asks apt again
    assert {i: apt_checks(m) for i, m in planes.machines.items()} == checks
    assert "runtime-turn" not in planes.app and planes.cordoned() == []

    for i in (1, 2, 0):  # upgrade-charm asks apt; the leader updates its own node first
        planes.run(i, upgrading=True)
    assert planes.machines[0].dpkg["runc"] == RUNC_FIX
    assert planes.app["runtime-turn"] == unit(1)
    assert "runtime-updates" not in planes.units[0]

    found = planes.run(1)  # its containerd does not come back: cordoned, turn kept, why
    assert found.waiting == [
        "node cp-1 stays cordoned; containerd did not restart after its update: "
        "Job for containerd.service failed; retrying on the next hook"
    ]
    assert planes.cordoned() == ["cp-1"]
    assert planes.api.get_object("/api/v1/namespaces/default/pods/web-1") is None  # drained
    found = planes.run(2)
    assert found.notes == [
        f"containerd/runc security update pending: runc {RUNC_FIX}, waiting for {unit(1)}"
    ]
    assert planes.machines[2].dpkg["runc"] != RUNC_FIX
    assert planes.run(0).notes == []  # the leader keeps the turn where it is
    assert planes.app["runtime-turn"] == unit(1)

    for _ in range(3):
        planes.round()
        if "runtime-turn" not in planes.app:
            break

    assert "runtime-turn" not in planes.app
    assert planes.drained_at_once == 1
    assert planes.cordoned() == []
    for i, m in planes.machines.items():
        assert m.dpkg["runc"] == RUNC_FIX, i
        assert "runc" in m.held
        assert m.services["containerd"].active
        assert sorted(m.kubelet.running) == sorted(STATIC_PODS)
        assert "runtime-updates" not in planes.units[i]
        assert planes.stored[i].keys() == {"checked"}
    assert all(f == runtime_turns.Found([], []) for f in planes.round().values())


def test_nothing_pending_takes_no_turn_and_drains_nothing(planes):
    for i in UNITS:
        assert planes.run(i, upgrading=True) == runtime_turns.Found([], [])
    planes.now += DAY + 1  # a day later: asked again
    assert all(f == runtime_turns.Found([], []) for f in planes.round().values())

    assert "runtime-turn" not in planes.app and planes.drained_at_once == 0
    assert all(apt_checks(m) == 3 for m in planes.machines.values())  # first, upgrade, day
    assert all(m.services["containerd"].restarts == 0 for m in planes.machines.values())


@pytest.mark.parametrize("key", ["upgrade-turn", "certificate-renewal-turn"])
def test_no_runtime_turn_while_another_restart_turn_is_out(planes, key):
    for m in planes.machines.values():
        m.publish("runc", RUNC_FIX, "security")
    planes.app[key] = unit(2)
    planes.now += 2 * 3600  # upgrade-charm refreshes the lists an hour after the last time

    planes.run(0, upgrading=True)

    assert "runtime-turn" not in planes.app
    assert planes.machines[0].dpkg["runc"] != RUNC_FIX
    del planes.app[key]
    planes.run(0)
    assert planes.machines[0].dpkg["runc"] == RUNC_FIX


def test_static_pods_that_do_not_come_back_keep_the_turn(planes):
    m = planes.machines[0]
    m.publish("runc", RUNC_FIX, "security")
    m.machine.path(f"{MANIFESTS}/kube-scheduler.yaml").unlink()  # kubelet stops it
    m.kubelet.sync()
    m.machine.write(f"{MANIFESTS}/kube-scheduler.yaml", "# kube-scheduler\n")  # not yet back
    planes.now += 2 * 3600

    found = planes.run(0, upgrading=True)

    assert found.waiting == [
        "node cp-0 stays cordoned; static pods not running 300 s after containerd's restart: "
        "kube-scheduler; retrying on the next hook"
    ]
    assert planes.app["runtime-turn"] == unit(0) and planes.cordoned() == ["cp-0"]
    m.kubelet.sync()  # kubelet starts it
    assert planes.run(0) == runtime_turns.Found([], [])
    assert "runtime-turn" not in planes.app and planes.cordoned() == []


# -- the charm: one leader ---------------------------------------------------------------


def test_the_leader_updates_its_own_node_in_its_turn(ctx, machine, api, clock):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    machine.publish("runc", RUNC_FIX, "security")
    clock.advance(hours=2)  # upgrade-charm refreshes the lists an hour after the last time
    machine.fail_start("containerd", "Job for containerd.service failed")

    out = ctx.run(ctx.on.upgrade_charm(), out)

    node = "ip-10-0-1-17"
    assert out.unit_status == testing.WaitingStatus(
        f"node {node} stays cordoned; containerd did not restart after its update: "
        "Job for containerd.service failed; retrying on the next hook"
    )
    assert peer(out).local_app_data["runtime-turn"] == "kubernetes-control-plane/0"
    assert api.get_object(f"/api/v1/nodes/{node}")["spec"]["unschedulable"]

    out = ctx.run(ctx.on.update_status(), out)

    assert machine.dpkg["runc"] == RUNC_FIX
    assert not api.get_object(f"/api/v1/nodes/{node}")["spec"].get("unschedulable")
    assert "runtime-turn" not in peer(out).local_app_data
    assert "runtime-updates" not in peer(out).local_unit_data
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")


def test_a_member_says_what_is_pending_while_it_waits(ctx, machine, api, clock):
    out = ctx.run(ctx.on.install(), leader_member_state())  # joined another's cluster
    machine.publish("runc", RUNC_FIX, "security")
    clock.advance(days=1, seconds=1)  # update-status asks again a day later

    out = ctx.run(ctx.on.update_status(), out)

    assert peer(out).local_unit_data["runtime-updates"] == f'{{"runc": "{RUNC_FIX}"}}'
    assert f"containerd/runc security update pending: runc {RUNC_FIX}" in out.unit_status.message
    assert machine.dpkg["runc"] != RUNC_FIX


def test_no_renewal_turn_while_a_runtime_turn_is_out(planes, clock):
    planes.app["runtime-turn"] = unit(1)
    planes.units[2]["certificates-renewal"] = "true"
    view = Peers(planes.app, unit(0), planes.units[0], {unit(j): planes.units[j] for j in (1, 2)})
    ctx = UnitContext(planes.machines[0].machine.host(), unit(0), True, "cp-0", "10.0.0.5", None)
    turns = renewal.Renewal(ctx, view, {}, ready=lambda: True, clock=clock, days=30)

    assert turns.pass_turn() is None
    assert "certificate-renewal-turn" not in planes.app
    del planes.app["runtime-turn"]
    assert turns.pass_turn() == unit(2)
