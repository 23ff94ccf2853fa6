"""Kubernetes minor upgrades of a joined worker node, one node at a time, in its turn."""

import dataclasses
import logging

import pytest
from node_upgrade import UPGRADE_STATE
from ops import testing

import charm
from charms.gpu_k8s.v0 import kubeadm
from fakes.machine import deb
from fakes.worker_scenario import (
    NODE,
    joined_state,
    node,
    register_node,
    watcher_quarantines,
)

READY = "Ready (no GPU)"
UNIT = "kubernetes-worker/0"  # the unit ops.testing runs the charm as
KUBEADM_UPGRADE_NODE = f"{kubeadm.KUBEADM} upgrade node"
RESTART_KUBELET = f"{kubeadm.SYSTEMCTL} restart kubelet"


def pins(minor):
    return deb(kubeadm.RELEASES[minor].kubernetes)


def add_pod(api, name, labels=None):
    api.put_object(
        f"/api/v1/namespaces/default/pods/{name}",
        {
            "metadata": {"labels": labels or {}},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"},
        },
    )


def pod(api, name):
    return api.get_object(f"/api/v1/namespaces/default/pods/{name}")


def cordoned(api):
    return bool(node(api).get("spec", {}).get("unschedulable"))


def joined_on(ctx, api, minor="1.35", config=None):
    """A node that joined a control plane running `minor` (registered, labelled, Ready)."""
    register_node(api)
    out = ctx.run(
        ctx.on.config_changed(),
        joined_state(api, config=config, **{"kubernetes-version": minor}),
    )
    assert out.unit_status == testing.ActiveStatus(READY)
    return out


def republish(state, **data):
    """The control plane's databag changed to `data` (None removes a key)."""
    relation = next(iter(state.relations))
    bag = {**relation.remote_app_data, **data}
    relation = dataclasses.replace(
        relation, remote_app_data={k: v for k, v in bag.items() if v is not None}
    )
    return relation, dataclasses.replace(state, relations={relation})


def published_minor(state):
    return next(iter(state.relations)).local_unit_data.get("kubernetes-version")


def mutating_api_requests(api):
    return [r for r in api.requests if r[0] != "GET"]


@pytest.mark.parametrize("turn", [None, "kubernetes-worker/1"])
def test_joined_node_on_an_older_minor_waits_for_its_turn_untouched(ctx, machine, api, turn):
    out = joined_on(ctx, api)
    assert published_minor(out) == "1.35"
    add_pod(api, "web-1")
    before_machine, before_api = len(machine.mutations()), mutating_api_requests(api)
    relation, state = republish(out, **{"kubernetes-version": "1.36", "upgrade-turn": turn})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == testing.ActiveStatus(f"{READY}; upgrade to 1.36 waits for its turn")
    assert machine.mutations()[before_machine:] == []
    assert machine.dpkg["kubeadm"] == machine.dpkg["kubelet"] == pins("1.35")
    assert machine.upgrades == []
    assert mutating_api_requests(api) == before_api
    assert pod(api, "web-1") is not None
    assert not cordoned(api)
    assert published_minor(out) == "1.35"


def test_in_its_turn_a_node_upgrades_by_the_kubeadm_procedure_once(ctx, machine, api, clock):
    out = joined_on(ctx, api)
    add_pod(api, "web-1")
    restarts = machine.services["kubelet"].restarts
    seen = []  # what the cluster and kubelet looked like when kubelet changed
    run = machine.runner.run

    def spy(argv, **kwargs):
        line = " ".join(argv)
        if line == RESTART_KUBELET or "kubelet=1.36.5-*" in line:
            step = "restart" if line == RESTART_KUBELET else "install"
            seen.append((step, cordoned(api), pod(api, "web-1"), machine.dpkg["kubelet"]))
        return run(argv, **kwargs)

    machine.runner.run = spy
    relation, state = republish(out, **{"kubernetes-version": "1.36", "upgrade-turn": UNIT})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == testing.ActiveStatus(READY)
    assert machine.upgrades == [("node", kubeadm.RELEASES["1.36"].version)]
    assert machine.dpkg["kubeadm"] == machine.dpkg["kubelet"] == pins("1.36")
    assert machine.dpkg["cri-tools"] == deb(kubeadm.RELEASES["1.36"].cri_tools)
    assert {"kubeadm", "kubelet"} <= machine.held
    lines = machine.lines()
    upgrade = lines.index(KUBEADM_UPGRADE_NODE)
    kubeadm_install = max(i for i, line in enumerate(lines[:upgrade]) if "kubeadm=1.36" in line)
    kubelet_install = next(i for i, line in enumerate(lines) if "kubelet=1.36.5-*" in line)
    assert kubeadm_install < upgrade < kubelet_install < lines.index(RESTART_KUBELET)
    # drained before kubelet changed, uncordoned after
    assert seen == [("install", True, None, pins("1.35")), ("restart", True, None, pins("1.36"))]
    assert machine.services["kubelet"].restarts == restarts + 1
    assert not cordoned(api)
    assert published_minor(out) == "1.36"
    assert machine.read(UPGRADE_STATE) is None
    assert len(machine.joins) == 1

    before_machine, before_api = len(machine.mutations()), mutating_api_requests(api)
    again = ctx.run(ctx.on.update_status(), out)

    assert again.unit_status == testing.ActiveStatus(READY)
    assert machine.mutations()[before_machine:] == []
    assert mutating_api_requests(api) == before_api
    assert machine.upgrades == [("node", kubeadm.RELEASES["1.36"].version)]


def test_failed_kubeadm_upgrade_node_waits_then_the_next_event_finishes(ctx, machine, api, clock):
    out = joined_on(ctx, api)
    add_pod(api, "web-1")
    machine.fail(KUBEADM_UPGRADE_NODE, stderr="[upgrade] FATAL: unable to fetch kubeadm-config")
    relation, state = republish(out, **{"kubernetes-version": "1.36", "upgrade-turn": UNIT})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == testing.WaitingStatus(
        "upgrade to Kubernetes 1.36 failed: kubeadm upgrade node failed: [upgrade] FATAL: "
        "unable to fetch kubeadm-config; retrying on the next update-status"
    )
    assert machine.upgrades == []
    assert machine.dpkg["kubelet"] == pins("1.35")  # kubelet waits for kubeadm upgrade node
    assert not cordoned(api)
    assert pod(api, "web-1") is not None
    assert published_minor(out) == "1.35"  # the control plane keeps this unit's turn
    assert machine.read(UPGRADE_STATE) is not None

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.ActiveStatus(READY)
    assert machine.upgrades == [("node", kubeadm.RELEASES["1.36"].version)]
    assert machine.dpkg["kubelet"] == pins("1.36")
    assert pod(api, "web-1") is None
    assert not cordoned(api)
    assert published_minor(out) == "1.36"


def test_failed_kubelet_restart_says_the_node_stays_cordoned_and_resumes(ctx, machine, api, clock):
    out = joined_on(ctx, api)
    machine.fail(RESTART_KUBELET, stderr="Job for kubelet.service failed")
    relation, state = republish(out, **{"kubernetes-version": "1.36", "upgrade-turn": UNIT})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == testing.WaitingStatus(
        f"upgrade to Kubernetes 1.36 failed: {RESTART_KUBELET} exited 1: Job for "
        f"kubelet.service failed; node {NODE} stays cordoned; retrying on the next update-status"
    )
    assert cordoned(api)
    assert published_minor(out) == "1.35"

    # the turn moved on meanwhile (say the control plane changed its mind): a node that
    # is half-way still finishes its upgrade rather than stay cordoned
    relation, state = republish(out, **{"upgrade-turn": "kubernetes-worker/1"})
    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == testing.ActiveStatus(READY)
    assert not cordoned(api)
    assert machine.upgrades == [("node", kubeadm.RELEASES["1.36"].version)]  # not again
    assert [line for line in machine.lines() if line == RESTART_KUBELET] == [
        RESTART_KUBELET,  # the one that failed
        RESTART_KUBELET,
    ]
    assert published_minor(out) == "1.36"


def test_api_error_during_the_drain_fails_the_hook_and_a_retry_resumes(ctx, machine, api, clock):
    out = joined_on(ctx, api)
    add_pod(api, "web-1")
    relation, state = republish(out, **{"kubernetes-version": "1.36", "upgrade-turn": UNIT})
    api.inject(status=403, times=1, method="PATCH", path_prefix=f"/api/v1/nodes/{NODE}")

    with pytest.raises(testing.errors.UncaughtCharmError):
        ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.dpkg["kubelet"] == pins("1.35")
    assert pod(api, "web-1") is not None

    # Juju retries the hook with the state from before it (stored state rolled back)
    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == testing.ActiveStatus(READY)
    assert machine.upgrades == [("node", kubeadm.RELEASES["1.36"].version)]  # not run twice
    assert pod(api, "web-1") is None
    assert not cordoned(api)
    assert machine.dpkg["kubelet"] == pins("1.36")
    assert published_minor(out) == "1.36"


def test_a_destroyed_model_starts_no_upgrade_in_the_hooks_before_stop(ctx, machine, api, clock):
    """`juju destroy-model` during this node's upgrade turn, the control plane gone.

    The dying worker leaves the `cluster` relation (departed, broken) before its stop:
    with every unit going, those hooks start nothing (the upgrade's drain would fail
    them for ever with the API gone, and the model would never go away).
    """
    out = joined_on(ctx, api)
    relation, state = republish(out, **{"kubernetes-version": "1.36", "upgrade-turn": UNIT})
    state = dataclasses.replace(state, planned_units=0)
    api.stop()

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)
    assert out.unit_status == testing.MaintenanceStatus(charm.GOING)
    out = ctx.run(ctx.on.relation_broken(out.get_relation(relation.id)), out)
    assert out.unit_status == testing.MaintenanceStatus(charm.GOING)

    assert machine.upgrades == []
    assert machine.dpkg["kubelet"] == pins("1.35")
    assert kubeadm.is_joined(machine.host())  # the stop hook drains and resets it


def test_a_node_the_operator_cordoned_stays_cordoned_after_its_upgrade(ctx, machine, api, clock):
    out = joined_on(ctx, api)
    add_pod(api, "web-1")
    api.put_object(f"/api/v1/nodes/{NODE}", {**node(api), "spec": {"unschedulable": True}})
    relation, state = republish(out, **{"kubernetes-version": "1.36", "upgrade-turn": UNIT})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == testing.ActiveStatus(READY)
    assert machine.dpkg["kubelet"] == pins("1.36")
    assert pod(api, "web-1") is None  # drained all the same
    assert cordoned(api)


def test_drain_timeout_upgrades_anyway_and_logs_the_pods_left(ctx, machine, api, clock, caplog):
    out = joined_on(ctx, api, config={"drain-timeout": 30})
    add_pod(api, "db-0", labels={"app": "db"})
    api.put_object(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/db",
        {"spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}},
    )
    relation, state = republish(out, **{"kubernetes-version": "1.36", "upgrade-turn": UNIT})

    with caplog.at_level(logging.WARNING):
        out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == testing.ActiveStatus(READY)
    assert 29 <= clock.slept <= 31
    assert f"drain of node {NODE} timed out after 30s" in caplog.text
    assert "default/db-0" in caplog.text
    assert pod(api, "db-0") is not None
    assert machine.dpkg["kubelet"] == pins("1.36")
    assert not cordoned(api)


def test_node_two_minors_behind_upgrades_one_minor_per_step(ctx, machine, api, clock):
    out = joined_on(ctx, api)
    relation, state = republish(out, **{"kubernetes-version": "1.37", "upgrade-turn": UNIT})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.upgrades == [("node", kubeadm.RELEASES["1.36"].version)]
    assert published_minor(out) == "1.36"
    assert out.unit_status == testing.ActiveStatus(
        f"{READY}; upgrade to 1.37 continues on the next update-status"
    )

    out = ctx.run(ctx.on.update_status(), out)

    assert machine.upgrades == [
        ("node", kubeadm.RELEASES["1.36"].version),
        ("node", kubeadm.RELEASES["1.37"].version),
    ]
    assert machine.dpkg["kubelet"] == pins("1.37")
    assert published_minor(out) == "1.37"
    assert out.unit_status == testing.ActiveStatus(READY)


def test_node_newer_than_the_control_plane_blocks_with_the_fix(ctx, machine, api):
    out = joined_on(ctx, api, minor="1.36")
    before = len(machine.mutations())
    relation, state = republish(out, **{"kubernetes-version": "1.35", "upgrade-turn": UNIT})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == testing.BlockedStatus(
        "this node runs Kubernetes 1.36 but the control plane runs 1.35: upgrade the control "
        "plane (juju config kubernetes-control-plane kubernetes-version=1.36)"
    )
    assert machine.mutations()[before:] == []
    assert machine.dpkg["kubelet"] == pins("1.36")
    assert machine.upgrades == []
    assert published_minor(out) == "1.36"


def test_corrupt_upgrade_record_blocks_with_what_to_do(ctx, machine, api):
    out = joined_on(ctx, api)
    machine.write(UPGRADE_STATE, "{not json")
    relation, state = republish(out, **{"kubernetes-version": "1.36", "upgrade-turn": UNIT})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == testing.BlockedStatus(
        f"the record of this node's Kubernetes upgrade ({UPGRADE_STATE}) is corrupt: "
        "finish the upgrade by hand (kubeadm upgrade node, kubelet, uncordon) and delete it"
    )
    assert machine.upgrades == []
    assert machine.dpkg["kubelet"] == pins("1.35")


def test_a_record_left_on_a_node_that_was_reset_is_dropped_before_joining(ctx, machine, api):
    machine.write(
        UPGRADE_STATE,
        '{"source": "1.34", "target": "1.35", "done": ["node"], "cordoned": true}\n',
    )
    register_node(api)

    out = ctx.run(ctx.on.config_changed(), joined_state(api))

    assert out.unit_status == testing.ActiveStatus(READY)
    assert machine.read(UPGRADE_STATE) is None
    assert machine.upgrades == []
    assert len(machine.joins) == 1
    assert published_minor(out) == "1.35"


# -- a quarantined GPU keeps its node cordoned when a turn ends (issue 32) -------------


def test_an_upgrade_ending_while_a_gpu_is_quarantined_leaves_the_node_cordoned(
    ctx, machine, api, clock
):
    out = joined_on(ctx, api)
    watcher_quarantines(machine)  # the watcher's record: the node must stay out
    relation, state = republish(out, **{"kubernetes-version": "1.36", "upgrade-turn": UNIT})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.dpkg["kubelet"] == pins("1.36")  # the upgrade itself went through
    assert published_minor(out) == "1.36"
    assert cordoned(api)


def test_a_runtime_update_ending_while_a_gpu_is_quarantined_leaves_the_node_cordoned(
    ctx, machine, api, clock, monkeypatch
):
    now = [1_800_000_000.0]
    monkeypatch.setattr(charm.KubernetesWorkerCharm, "wall_clock", staticmethod(lambda: now[0]))
    out = joined_on(ctx, api)
    machine.publish("runc", "1.3.4-0ubuntu1~24.04.2", "security")
    watcher_quarantines(machine)
    now[0] += 2 * 3600

    out = ctx.run(ctx.on.upgrade_charm(), out)  # upgrade-charm asks apt, lists refreshed

    assert machine.dpkg["runc"] == "1.3.4-0ubuntu1~24.04.2"
    assert cordoned(api)
