#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Control-plane reconcile cost with 10, 100 and 1,000 related worker units.

A bootstrapped leader (fake machine, fake API server, fake etcd) that knows N workers
handles a `workers` relation-changed (one unit's databag, nothing new: what 1,000
workers send all day) and `update-status` (every 5 minutes), each SAMPLES times.
Printed per event: median wall time of one whole ops.testing run (framework included)
and its median CPU time (`time.process_time`: this process's threads, the fake API
server's and etcd's included; on a shared machine the wall time mostly measures the
wait for a core: 147 ms wall for 31 ms CPU at a load average of 11 on 2 cores),
growth from 100 to 1,000 workers, and the API requests and commands the runs made, none
of them per worker. The cluster is a healthy one, as in the control plane's unit tests
(`available_deployments`: the Deployment controller's work done at once): the leader
reads each controller's readiness (calico-kube-controllers, JobSet's and Kueue's
managers) until it is Ready, then records it and asks no more, so a relation-changed
sends no request; update-status reads the Node table once (to count the Ready nodes),
Nodes and Pods once each for Kueue's cohort (`kueue.capacity`) and asks etcd for its
members once (not an API request). Until 2026-11-27 the bench's controllers never became
Ready, so every event read all three again (the "3 constant readiness GETs per event"
of issue 30) and Kueue's objects were never applied.

ops.testing reads and writes its YAML with libyaml, as it does in the unit tests (the
`libyaml_for_ops_testing` plugin pytest loads): pure-Python PyYAML writing the charm's
metadata into a new directory for every run was a quarter of a relation-changed's CPU
time at 1,000 workers (39.7 against 30.7 ms, 2026-11-27), a cost of the test framework
that no hook pays.
`GPU_K8S_BENCH_PURE_YAML=1` measures with the pure-Python YAML instead.

Offline: JobSet's, Kueue's, Calico's and the EFS CSI driver's files come from
`fakes.addons.ManifestServer` on 127.0.0.1, as in the control plane's unit tests (their
conftest), not from GitHub.

Target (DESIGN.md): <= 50 ms at 1,000 workers, growth 100 -> 1,000 at most linear.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
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

import addons  # noqa: E402
import efs_csi  # noqa: E402
import libyaml_for_ops_testing  # noqa: E402
from ops import testing  # noqa: E402

import charm  # noqa: E402
from fakes.addons import EFS_CSI_PATH, ManifestServer  # noqa: E402
from fakes.control_plane import Clock, ControlPlaneMachine, node  # noqa: E402
from fakes.etcd import EtcdPki, FakeEtcd  # noqa: E402
from fakes.kube_apiserver import FakeKubeApiServer  # noqa: E402

SIZES = (10, 100, 1000)
SAMPLES = 15
GPU = '[{"count": 8, "model": "NVIDIA H100 80GB HBM3", "mig-capable": true}]'


def measure(
    api: FakeKubeApiServer, etcd: FakeEtcd, root: Path, n: int
) -> dict[str, tuple[float, float, int, int]]:
    api.available_deployments = True  # a healthy cluster's controllers roll them out
    machine = ControlPlaneMachine(root, api, etcd=etcd)
    charm.KubernetesControlPlaneCharm.host_factory = staticmethod(machine.machine.host)
    charm.KubernetesControlPlaneCharm.clock = staticmethod(Clock())
    charm.KubernetesControlPlaneCharm.public_address = staticmethod(lambda: "203.0.113.7")
    charm.KubernetesControlPlaneCharm.etcd_url = etcd.url
    ctx = testing.Context(charm.KubernetesControlPlaneCharm)
    out = ctx.run(
        ctx.on.install(), testing.State(leader=True, relations=[testing.PeerRelation("peers")])
    )
    units = {
        i: {"node-name": f"worker-{i}", **({"gpu-inventory": GPU} if i % 4 == 0 else {})}
        for i in range(n)
    }
    for i in range(n):  # the Nodes kubeadm join registered
        api.put_object(f"/api/v1/nodes/worker-{i}", node(f"worker-{i}", gpus=8 * (i % 4 == 0)))
    rel = testing.Relation("workers", remote_app_name="kubernetes-worker", remote_units_data=units)
    # leadership settles with every worker already related: one full read of N databags
    out = ctx.run(
        ctx.on.leader_elected(), dataclasses.replace(out, relations=[*out.relations, rel])
    )
    rel = out.get_relation(rel.id)
    results = {}
    events = {
        "relation-changed": lambda: ctx.on.relation_changed(rel, remote_unit=1),
        "update-status": lambda: ctx.on.update_status(),
    }
    for name, event in events.items():
        requests, calls = len(api.requests), len(machine.calls)
        times, cpu = [], []
        for _ in range(SAMPLES):
            start, start_cpu = time.perf_counter(), time.process_time()
            out = ctx.run(event(), out)
            times.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
        results[name] = (
            statistics.median(times),
            statistics.median(cpu),
            len(api.requests) - requests,
            len(machine.calls) - calls,
        )
    expected = f"Ready: v{charm.kubeadm.DEFAULT_MINOR}, 1 control-plane, {n} workers"
    assert out.unit_status.message.startswith(expected), out.unit_status.message
    return results


@contextlib.contextmanager
def local_releases():
    """Every release asset from 127.0.0.1, as the unit tests' `releases` fixture serves them.

    JobSet's, Kueue's, Calico's and the EFS CSI driver's files.
    """
    names = ("JOBSET", "KUEUE", "CALICO_RELEASE")
    saved = [getattr(addons, n) for n in names]
    saved_csi, saved_opener = efs_csi.UPSTREAM, charm.KubernetesControlPlaneCharm.url_opener
    with ManifestServer() as server:
        for name in names:
            release = getattr(addons, name)
            local = f"{server.url}{server.path(release.name)}"
            setattr(addons, name, dataclasses.replace(release, upstream_url=local))
        efs_csi.UPSTREAM = f"{server.url}{EFS_CSI_PATH}"
        charm.KubernetesControlPlaneCharm.url_opener = staticmethod(server.opener())
        try:
            yield server
        finally:
            for name, release in zip(names, saved, strict=True):
                setattr(addons, name, release)
            efs_csi.UPSTREAM = saved_csi
            charm.KubernetesControlPlaneCharm.url_opener = staticmethod(saved_opener)


def main() -> None:
    logging.disable(logging.CRITICAL)
    pure = os.environ.get("GPU_K8S_BENCH_PURE_YAML") == "1"
    libyaml = not pure and libyaml_for_ops_testing.use_libyaml()
    print(f"ops.testing's YAML: {'libyaml' if libyaml else 'pure-Python PyYAML'}")
    results = {}
    for n in SIZES:
        with (
            local_releases(),
            FakeKubeApiServer() as api,
            FakeEtcd(EtcdPki()) as etcd,
            tempfile.TemporaryDirectory() as tmp,
        ):
            results[n] = measure(api, etcd, Path(tmp), n)
        for event, (ms, cpu, req, cmds) in results[n].items():
            print(
                f"{n:>5} workers, {event:>16}: {ms:7.2f} ms median ({cpu:6.2f} ms CPU), "
                f"{req} API requests, {cmds} commands in {SAMPLES} events"
            )
    for event in results[1000]:
        growth = results[1000][event][1] / results[100][event][1]
        print(
            f"{event}: growth 100 -> 1000 workers {growth:.2f}x in CPU time (target <= 10x), "
            f"{results[1000][event][0]:.1f} ms wall, {results[1000][event][1]:.1f} ms CPU at "
            "1000 workers (target <= 50 ms)"
        )


if __name__ == "__main__":
    main()
