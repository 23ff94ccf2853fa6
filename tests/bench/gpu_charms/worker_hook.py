#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The kubernetes-worker charm's real `gpu-quarantined` hook, run as the fake juju-exec asks.

Started (exec'd) by the bench's juju-exec with `charms/kubernetes-worker/src`, `lib` and
`tests` on PYTHONPATH, as Juju's unit agent starts a hook: a fresh Python process that
imports ops and the charm. The charm runs under ops.testing on the state the joined worker
unit has (tests/fakes/worker_scenario.py `joined_state`: the `cluster` relation with the
control plane's data, the join secret; the unit's own databag as its earlier hooks left
it), with its Host the machine's file system `<root>/host`, where the real watcher keeps
its state file. What it wrote to its unit databag and its status go to
`<root>/worker-hook.json` (what Juju would share with the control plane when the hook
ends), with CLOCK_MONOTONIC at its start, once ops and the charm are imported, and at its end.

    worker_hook.py <root>
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

STARTED = time.monotonic()

import dataclasses  # noqa: E402

from ops import testing  # noqa: E402
from scenario.state import _Event  # noqa: E402

import charm  # noqa: E402
from fakes.machine import FakeMachine  # noqa: E402
from fakes.worker_scenario import joined_state  # noqa: E402

IMPORTED = time.monotonic()


class _Api:
    """What `joined_state` asks of the API server: the workers' kubeconfig (pre-made)."""

    def __init__(self, kubeconfig: str):
        self._kubeconfig = kubeconfig

    def kubeconfig(self, token: str) -> str:
        return self._kubeconfig


def main(root: Path) -> int:
    setup = json.loads((root / "worker-unit.json").read_text())
    machine = FakeMachine(root / "host", hostname=setup["node"])
    charm.KubernetesWorkerCharm.host_factory = lambda self: machine.host()
    state = joined_state(_Api(setup["kubeconfig"]), config=setup["config"])
    (cluster,) = state.relations
    cluster = dataclasses.replace(cluster, local_unit_data=setup["bag"])
    state = dataclasses.replace(state, relations={cluster})
    ctx = testing.Context(charm.KubernetesWorkerCharm, unit_id=int(setup["unit"].split("/")[1]))
    # `charm.on.gpu_quarantined`, as ops emits it for JUJU_DISPATCH_PATH=hooks/gpu-quarantined
    # (tests/unit/kubernetes_worker/test_gpu_charm.py gpu_quarantined)
    out = ctx.run(_Event("gpu_quarantined"), state)
    (cluster,) = out.relations
    result = {
        "started": STARTED,
        "imported": IMPORTED,
        "ended": time.monotonic(),
        "bag": dict(cluster.local_unit_data),
        "status": [out.unit_status.name, out.unit_status.message],
    }
    path = root / "worker-hook.json"
    path.with_suffix(".tmp").write_text(json.dumps(result))
    path.with_suffix(".tmp").rename(path)  # whole, for the control plane's side
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
