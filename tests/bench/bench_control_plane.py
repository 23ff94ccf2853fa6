#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Control-plane reconcile cost with 10, 100 and 1,000 related worker units.

A bootstrapped leader (fake machine, fake API server) that knows N workers handles
`update-status` and a `workers` relation-changed (one unit's databag changed), in
turn. Printed: median wall time of one whole ops.testing run (framework included), the
growth ratio, and how many API requests and commands the timed runs made (target: none
when nothing changed).
Target (DESIGN.md): <= 50 ms at 1,000 workers, growth 100 -> 1,000 at most linear.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [
    str(ROOT / "charms/kubernetes-control-plane/src"),
    str(ROOT / "lib"),
    str(ROOT / "tests"),
]

from ops import testing  # noqa: E402

import charm  # noqa: E402
from fakes.control_plane import Clock, ControlPlaneMachine  # noqa: E402
from fakes.kube_apiserver import FakeKubeApiServer  # noqa: E402

SIZES = (10, 100, 1000)
SAMPLES = 15
GPU = '[{"count": 8, "model": "NVIDIA H100 80GB HBM3", "mig-capable": true}]'


def measure(api: FakeKubeApiServer, root: Path, n: int) -> tuple[float, int, int]:
    machine = ControlPlaneMachine(root, api)
    charm.KubernetesControlPlaneCharm.host_factory = staticmethod(machine.machine.host)
    charm.KubernetesControlPlaneCharm.clock = staticmethod(Clock())
    ctx = testing.Context(charm.KubernetesControlPlaneCharm)
    out = ctx.run(
        ctx.on.install(), testing.State(leader=True, relations=[testing.PeerRelation("peers")])
    )
    units = {
        i: {"node-name": f"worker-{i}", **({"gpu-inventory": GPU} if i % 4 == 0 else {})}
        for i in range(n)
    }
    rel = testing.Relation("workers", remote_app_name="kubernetes-worker", remote_units_data=units)
    # leadership settles with every worker already related: one full read of N databags
    out = ctx.run(
        ctx.on.leader_elected(), dataclasses.replace(out, relations=[*out.relations, rel])
    )
    rel = out.get_relation(rel.id)
    requests, calls = len(api.requests), len(machine.calls)
    times = []
    for i in range(SAMPLES):
        event = ctx.on.update_status() if i % 2 else ctx.on.relation_changed(rel, remote_unit=1)
        start = time.perf_counter()
        out = ctx.run(event, out)
        times.append((time.perf_counter() - start) * 1000)
    expected = f"Ready: v{charm.kubeadm.DEFAULT_MINOR}, 1 control-plane, {n} workers"
    assert out.unit_status.message.startswith(expected), out.unit_status.message
    return statistics.median(times), len(api.requests) - requests, len(machine.calls) - calls


def main() -> None:
    logging.disable(logging.CRITICAL)
    results = {}
    for n in SIZES:
        with FakeKubeApiServer() as api, tempfile.TemporaryDirectory() as tmp:
            results[n] = measure(api, Path(tmp), n)
        ms, req, cmds = results[n]
        print(
            f"{n:>5} workers: {ms:7.2f} ms median per event, "
            f"{req} API requests, {cmds} commands in {SAMPLES} events"
        )
    growth = results[1000][0] / results[100][0]
    print(f"growth 100 -> 1000 workers: {growth:.2f}x (linear would be 10x; target <= 10x)")
    print(f"1000 workers: {results[1000][0]:.1f} ms (target <= 50 ms)")


if __name__ == "__main__":
    main()
