"""tensorflow's actions never hold machine 0 (issue 30 item 9; review readme.md).

The control plane, efs-storage and tensorflow share machine 0, and Juju runs every hook
and every action of the units on one machine under one machine lock. An action that
waits (a `train` up to `timeout`, `import-dataset`, `fetch-model` to S3) would hold the
control plane's hooks for as long. Juju takes the lock for an action only when it is not
parallel or names an execution group: juju/juju internal/worker/uniter/operation/
runaction.go `NeedsGlobalMachineLock` returns `!Parallel() || ExecutionGroup() != ""`,
and state/unit.go takes `Parallel`/`ExecutionGroup` from the charm's action spec
(charmcraft.yaml `actions.<name>.parallel`, documented in charmcraft's reference). So
every tensorflow action is `parallel: true`, and none may touch the machine: they talk to
the Kubernetes API only, which is what these tests show. The unit's own hooks still wait
for its action (the uniter runs one operation of a unit at a time).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from conftest import add_nodes, node
from ops import testing

import charm

CHARMCRAFT = yaml.safe_load((Path(charm.__file__).parents[1] / "charmcraft.yaml").read_text())
ACTIONS = CHARMCRAFT["actions"]


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_every_action_runs_without_the_machine_lock(name):
    spec = ACTIONS[name]
    assert spec.get("parallel") is True, f"{name} would take machine 0's lock"
    assert "execution-group" not in spec, f"{name}: an execution group takes the lock again"


def test_actions_run_no_command_on_the_machine(ctx, state, api, unit_machine):
    """What a parallel action may not do: apt, systemctl, the machine's shared services.

    With a COS agent related, every hook serves the unit's state from a server shared by
    the charms on the machine (unit_state): an action leaves it to the hooks.
    """
    add_nodes(api, node("node-a", 2), node("cpu-0"))
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    state = dataclasses.replace(state, relations=[*state.relations, agent])
    reconciled = ctx.run(ctx.on.update_status(), state)
    assert unit_machine.calls, "a hook serves the unit's state on the machine"
    for action, params in (
        ("train", {"job": "mnist", "workers": 1}),
        ("job-status", {"job": "mnist"}),
        ("list-jobs", {}),
        ("logs", {"job": "mnist"}),
        ("list-datasets", {}),
        ("stop", {"job": "mnist"}),
    ):
        before = len(unit_machine.calls)
        files = unit_machine.path("/").rglob("*")
        snapshot = {p: p.stat().st_mtime_ns for p in files if p.is_file()}
        try:
            ctx.run(ctx.on.action(action, params=params), reconciled)
        except testing.ActionFailed:
            pass  # refused or failed: it still must not have touched the machine
        ran = unit_machine.calls[before:]
        assert not ran, f"{action} ran {[c.argv for c in ran]}"
        after = {p: p.stat().st_mtime_ns for p in unit_machine.path("/").rglob("*") if p.is_file()}
        assert after == snapshot, f"{action} wrote on the machine"
