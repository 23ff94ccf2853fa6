"""One turn mechanism: Kubernetes upgrades of several workers take drain turns.

A patch pin (a new charm revision) reaches three joined workers with
`max-parallel-reboots=1`: each upgrades by the kubeadm procedure in its own turn, the
others wait without touching their packages, and no two nodes are cordoned at once,
even when an upgrade fails half-way (review deploy.md N1 probe P6, gpu.md N9).
"""

import dataclasses
import json

import node_upgrade
from ops import testing

import charm
from charms.gpu_k8s.v0 import kubeadm
from fakes.machine import FakeMachine, deb
from fakes.worker_scenario import joined_state, node, register_node

UNITS = (0, 1, 2)
RESTART_KUBELET = f"{kubeadm.SYSTEMCTL} restart kubelet"


class Workers:
    """Three units of kubernetes-worker, each on its own fake machine, unit 0 leading.

    The `reboots` peer relation's databags are kept here and handed to each unit's
    hook as Juju would: its own unit databag, the others' as peers, the application's.
    """

    def __init__(self, tmp_path, api, monkeypatch):
        self.api = api
        self.machines = {}
        for i in UNITS:
            machine = FakeMachine(tmp_path / f"root-{i}", hostname=f"ip-10-0-1-{20 + i}")
            machine.cluster = api
            self.machines[f"kubernetes-worker/{i}"] = machine
        monkeypatch.setattr(
            charm.KubernetesWorkerCharm,
            "host_factory",
            lambda self: workers.machines[self.unit.name].host(),
        )
        workers = self
        self.app: dict[str, str] = {}
        self.units: dict[int, dict[str, str]] = {i: {} for i in UNITS}
        self.states: dict[int, testing.State] = {}
        self.cordoned_at_once = 0

    def node(self, i: int) -> str:
        return f"ip-10-0-1-{20 + i}"

    def cordoned(self) -> list[str]:
        return [
            self.node(i)
            for i in UNITS
            if (node(self.api, self.node(i)) or {}).get("spec", {}).get("unschedulable")
        ]

    def run(self, i: int, event: str = "update_status") -> testing.State:
        reboots = testing.PeerRelation(
            "reboots",
            local_app_data=dict(self.app),
            local_unit_data=dict(self.units[i]),
            peers_data={j: dict(self.units[j]) for j in UNITS if j != i},
        )
        state = self.states.get(i) or joined_state(self.api, **{"kubernetes-version": "1.36"})
        others = {r for r in state.relations if r.endpoint != "reboots"}
        state = dataclasses.replace(state, relations={*others, reboots}, leader=i == 0)
        ctx = testing.Context(charm.KubernetesWorkerCharm, unit_id=i)
        out = ctx.run(getattr(ctx.on, event)(), state)
        relation = out.get_relation(reboots.id)
        self.units[i] = dict(relation.local_unit_data)
        if i == 0:
            self.app = dict(relation.local_app_data)
        self.states[i] = out
        self.cordoned_at_once = max(self.cordoned_at_once, len(self.cordoned()))
        return out

    def deploy(self) -> None:
        for i in UNITS:
            register_node(self.api, self.node(i))
            assert self.run(i, "config_changed").unit_status.name == "active"

    def turns(self) -> list[str]:
        return json.loads(self.app.get("reboot-turns", "[]"))

    def all_run(self, version: str) -> None:
        """Every unit reports `version` (as its new kubelet posts it), Active, no turn asked."""
        for i in UNITS:
            assert self.states[i].workload_version == version
            assert self.states[i].unit_status.name == "active"
            assert "reboot-request" not in self.units[i]

    def node_info(self, i: int, edit) -> None:
        """Change what unit i's Node says in status.nodeInfo, as its kubelet would."""
        path = f"/api/v1/nodes/{self.node(i)}"
        current = self.api.get_object(path)
        edit(current["status"])
        self.api.put_object(path, current)

    def count_drained_at_restarts(self) -> None:
        """Also count the cordoned nodes while a kubelet restarts, inside a hook."""
        for machine in self.machines.values():
            systemctl = machine.runner.handlers["systemctl"]

            def counting(argv, stdin, systemctl=systemctl):
                if argv[1:] == ["restart", "kubelet"]:
                    self.cordoned_at_once = max(self.cordoned_at_once, len(self.cordoned()))
                return systemctl(argv, stdin)

            machine.on("systemctl", counting)


def new_patch(workers: Workers, monkeypatch, patch: str = "1.36.7") -> str:
    """A charm revision pinning a new patch, which pkgs.k8s.io serves."""
    pinned = dataclasses.replace(kubeadm.RELEASES["1.36"], kubernetes=patch)
    monkeypatch.setitem(kubeadm.RELEASES, "1.36", pinned)
    for machine in workers.machines.values():
        machine.serve_kubernetes(patch)
    return patch


def test_a_patch_bump_on_three_workers_drains_one_at_a_time(tmp_path, api, monkeypatch, clock):
    workers = Workers(tmp_path, api, monkeypatch)
    old = kubeadm.RELEASES["1.36"].version
    workers.deploy()
    assert {m.running("kubelet") for m in workers.machines.values()} == {deb(old)}
    patch = new_patch(workers, monkeypatch)
    # the first upgrade fails after its drain: that node stays cordoned and keeps its turn
    first = workers.machines["kubernetes-worker/1"]
    first.fail(RESTART_KUBELET, stderr="Job for kubelet.service failed")

    # upgrade-charm everywhere: each asks for a turn; the leader grants the oldest request
    for i in (1, 2, 0):
        workers.run(i, "upgrade_charm")
    assert workers.turns() == ["kubernetes-worker/1"]
    out = workers.run(1)
    assert first.upgrades == [("node", patch)]
    assert out.unit_status.name == "waiting"  # the restart failed; retried, turn kept
    assert workers.cordoned() == [workers.node(1)]
    outs = {i: workers.run(i) for i in (2, 0)}
    for i in (0, 2):  # no turn: packages untouched, not drained (probe P6)
        machine = workers.machines[f"kubernetes-worker/{i}"]
        assert machine.upgrades == []
        assert machine.dpkg["kubelet"] == deb(old)
        assert not any(f"kubelet={patch}" in line for line in machine.lines())
    assert outs[2].unit_status == testing.WaitingStatus(
        f"Kubernetes upgrade to {patch}; waiting for a turn (max-parallel-reboots: 1 node at "
        "once); drained now: kubernetes-worker/1"
    )
    assert workers.cordoned() == [workers.node(1)]

    for _ in range(4):  # update-status rounds, until every node runs the patch
        for i in UNITS:
            workers.run(i)
        if all(m.running("kubelet") == deb(patch) for m in workers.machines.values()):
            break

    assert workers.cordoned_at_once == 1
    assert workers.cordoned() == []
    assert workers.turns() == []
    for unit, machine in workers.machines.items():
        assert machine.upgrades == [("node", patch)], unit  # once, the failed one resumed
        assert machine.dpkg["kubelet"] == deb(patch)
        assert machine.running("kubelet") == deb(patch)  # restarted: the new binary runs
    workers.all_run(patch)


def test_a_new_kubelet_package_not_restarted_is_restarted_in_its_turn(
    tmp_path, api, monkeypatch, clock
):
    """Issue 30 item 2: a kubelet whose package is new but whose process is old.

    An earlier revision installed a patch in place without restarting kubelet (review
    deploy.md N1): the debs are new, the old binary runs. The worker reports the version
    its kubelet posts on its Node (`kubelet --version` would say the new one), then
    restarts it by the upgrade procedure (`kubeadm upgrade node`, drain, restart,
    uncordon) in an upgrade turn, one node at a time, and reports the new version once
    the Node shows it.
    """
    workers = Workers(tmp_path, api, monkeypatch)
    old = kubeadm.RELEASES["1.36"].version
    workers.deploy()
    patch = new_patch(workers, monkeypatch)
    restarts = {}
    for unit, machine in workers.machines.items():
        for package in ("kubeadm", "kubelet"):  # replaced on disk, the process left alone
            machine.dpkg[package] = deb(patch)
        restarts[unit] = machine.services["kubelet"].restarts
    assert workers.machines["kubernetes-worker/0"].running("kubelet") == deb(old)
    workers.count_drained_at_restarts()

    out = workers.run(0)

    assert out.workload_version == old
    cluster = next(r for r in out.relations if r.endpoint == "cluster")
    assert cluster.local_unit_data["kubernetes-version"] == "1.36"

    most_turns, waits = 0, set()
    for _ in range(5):  # update-status rounds, until every node runs the patch
        for i in UNITS:
            status = workers.run(i).unit_status
            most_turns = max(most_turns, len(workers.turns()))
            if "waiting for a turn" in status.message:
                waits.add(status.message.split(";")[0])
        if all(m.running("kubelet") == deb(patch) for m in workers.machines.values()):
            break

    for i in UNITS:  # one more update-status: the leader sees the last turn given back
        workers.run(i)
    assert waits == {f"Kubernetes upgrade to {patch}"}  # the others waited for the turn
    assert most_turns == 1 and workers.cordoned_at_once == 1
    assert workers.cordoned() == [] and workers.turns() == []
    for unit, machine in workers.machines.items():
        assert machine.running("kubelet") == deb(patch), unit
        assert machine.services["kubelet"].restarts == restarts[unit] + 1, unit  # once
        assert machine.upgrades == [("node", patch)], unit
    workers.all_run(patch)


def one_stale_kubelet(tmp_path, api, monkeypatch):
    """Unit 0's kubelet package moved to a new patch in place, the old kubelet running.

    Returns (workers, unit 0's machine, the patch, its kubelet's restarts so far).
    """
    workers = Workers(tmp_path, api, monkeypatch)
    workers.deploy()
    patch = new_patch(workers, monkeypatch)
    machine = workers.machines["kubernetes-worker/0"]
    machine.dpkg["kubelet"] = deb(patch)
    return workers, machine, patch, machine.services["kubelet"].restarts


def test_a_restarted_kubelet_that_has_not_posted_yet_is_not_restarted_again(
    tmp_path, api, monkeypatch, clock
):
    """Until the new kubelet posts its status, its Node still names the old one."""
    old = kubeadm.RELEASES["1.36"].version
    workers, machine, patch, restarts = one_stale_kubelet(tmp_path, api, monkeypatch)
    workers.run(0)  # plans the restart
    workers.run(0)  # restarts kubelet in its turn
    assert machine.services["kubelet"].restarts == restarts + 1
    workers.node_info(0, lambda status: status["nodeInfo"].update(kubeletVersion=f"v{old}"))

    for _ in range(2):
        assert workers.run(0).workload_version == old

    assert machine.services["kubelet"].restarts == restarts + 1
    assert "reboot-request" not in workers.units[0]
    machine.kubelet_posts_status()  # its next status update
    assert workers.run(0).workload_version == patch


def test_a_node_without_node_info_plans_no_kubelet_restart(tmp_path, api, monkeypatch, clock):
    """A Node whose kubelet has not posted its nodeInfo yet says nothing of what runs."""
    workers, machine, _, restarts = one_stale_kubelet(tmp_path, api, monkeypatch)
    workers.node_info(0, lambda status: status.pop("nodeInfo"))

    workers.run(0)
    out = workers.run(0)  # a second hook: nothing was planned for it either

    assert out.unit_status.name == "active"
    assert "reboot-request" not in workers.units[0] and workers.cordoned_at_once == 0
    assert machine.services["kubelet"].restarts == restarts and machine.upgrades == []
    assert not machine.path(node_upgrade.UPGRADE_STATE).exists()


# -- containerd/runc security updates (issue 30 item 2) ------------------------------

RUNC_FIX = "1.3.4-0ubuntu1~24.04.2"


def apt_checks(machine) -> int:
    return sum(" -s install " in line for line in machine.lines("apt-get"))


def wall_clock(monkeypatch) -> list[float]:
    """The charm's wall clock (when it last asked apt), moved by the test."""
    now = [1_800_000_000.0]
    monkeypatch.setattr(charm.KubernetesWorkerCharm, "wall_clock", staticmethod(lambda: now[0]))
    return now


def test_a_runc_security_fix_reaches_three_workers_one_drain_at_a_time(
    tmp_path, api, monkeypatch, clock
):
    now = wall_clock(monkeypatch)
    workers = Workers(tmp_path, api, monkeypatch)
    workers.deploy()
    checks = {u: apt_checks(m) for u, m in workers.machines.items()}
    for machine in workers.machines.values():
        machine.publish("runc", RUNC_FIX, "security")  # same series; held: nothing moves
    first = workers.machines["kubernetes-worker/1"]
    first.fail_start("containerd", "Job for containerd.service failed")

    now[0] += 2 * 3600
    for i in UNITS:  # update-status within the day: nothing asks apt again
        workers.run(i)
    assert {u: apt_checks(m) for u, m in workers.machines.items()} == checks
    assert workers.turns() == [] and workers.cordoned() == []

    for i in (1, 2, 0):  # upgrade-charm asks apt; each asks for a turn, the oldest gets it
        workers.run(i, "upgrade_charm")
    outs = {i: workers.run(i) for i in UNITS}
    assert workers.turns() == ["kubernetes-worker/1"]
    assert workers.cordoned() == [workers.node(1)]  # its restart failed: it keeps the turn
    for i in (0, 2):
        assert outs[i].unit_status == testing.WaitingStatus(
            f"containerd/runc security update pending: runc {RUNC_FIX}; waiting for a turn "
            "(max-parallel-reboots: 1 node at once); drained now: kubernetes-worker/1"
        )
        assert workers.machines[f"kubernetes-worker/{i}"].dpkg["runc"] != RUNC_FIX

    for _ in range(4):
        for i in UNITS:
            workers.run(i)
        if workers.turns() == [] and workers.cordoned() == []:
            break

    assert workers.cordoned_at_once == 1
    assert workers.cordoned() == [] and workers.turns() == []
    for unit, machine in workers.machines.items():
        assert machine.dpkg["runc"] == RUNC_FIX, unit
        assert "runc" in machine.held
        assert machine.services["containerd"].restarts >= 1
    for i in UNITS:
        assert workers.states[i].unit_status.name == "active"


def test_nothing_pending_takes_no_turn_and_drains_nothing(tmp_path, api, monkeypatch, clock):
    now = wall_clock(monkeypatch)
    workers = Workers(tmp_path, api, monkeypatch)
    workers.deploy()

    for i in UNITS:
        assert workers.run(i, "upgrade_charm").unit_status.name == "active"
    now[0] += 25 * 3600  # a day later: update-status asks again
    for i in UNITS:
        assert workers.run(i).unit_status.name == "active"

    assert workers.turns() == [] and workers.cordoned_at_once == 0
    assert all(apt_checks(m) == 3 for m in workers.machines.values())  # deploy, upgrade, day
