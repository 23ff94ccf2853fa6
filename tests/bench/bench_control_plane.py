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
sends no request; update-status reads every Node and the running Pods once each for
Kueue's cohort (`kueue.capacity`; the same Nodes say which are Ready: until 2026-11-27 the
Node table was read for that too, a fourth request; the Namespaces Kueue manages only while
a GPU pod Kueue would hold runs, none in this bench, since 2026-11-28) and asks etcd for
its members once (not an API request). Until 2026-11-27 the bench's
controllers never became Ready, so every event read all three again (the "3 constant
readiness GETs per event" of issue 30) and Kueue's objects were never applied.

ops.testing reads and writes its YAML with libyaml, as it does in the unit tests (the
`libyaml_for_ops_testing` plugin pytest loads): pure-Python PyYAML writing the charm's
metadata into a new directory for every run was a quarter of a relation-changed's CPU
time at 1,000 workers (39.7 against 30.7 ms, 2026-11-27), a cost of the test framework
that no hook pays.
`GPU_K8S_BENCH_PURE_YAML=1` measures with the pure-Python YAML instead.

Offline: JobSet's, Kueue's, Calico's and the EFS CSI driver's files come from
`fakes.addons.ManifestServer` on 127.0.0.1, as in the control plane's unit tests (their
conftest), not from GitHub.

Main-thread CPU (`time.thread_time` in the thread that runs ops.testing and the charm)
leaves out the fake API server's and etcd's threads, which `time.process_time` counts:
it is what the hook itself costs (with ops.testing's own work), the number the target
is about.

The upgrade scenario: the control plane on v1.36, half the workers (every odd unit)
still publishing and running the previous minor, as in the middle of an upgrade; its
API requests show the turn adding none per worker per hook.

Every worker of both the steady and the identity scenario says `node-identity` (it acts
as its kubelet): since 424fd87 a worker that does not gets no credential on a cluster this
revision made (the shared workers' grant is only kept while `worker-grant` holds an
earlier revision's fingerprint), so a bench of such workers would measure refusals, not
the registry. The identity scenario is kept under its own name (at its own sizes) because
docs/explanation/design-choices.md quotes it for item 2's rule ("within 10% of today at
1,000 workers"); the shared-grant path of an earlier revision's cluster is not benched.

Target (DESIGN.md): <= 50 ms at 1,000 workers, growth 100 -> 1,000 at most linear.

    python tests/bench/bench_control_plane.py [--smoke]

`--smoke`: the steady and upgrade scenarios at 2 and 4 workers, one event each (each code
path once; the numbers are not to quote); identity is measured as steady is.
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
from run import options  # noqa: E402

import charm  # noqa: E402
from fakes.addons import EFS_CSI_PATH, ManifestServer  # noqa: E402
from fakes.control_plane import Clock, ControlPlaneMachine, deployed_charm, node  # noqa: E402
from fakes.etcd import EtcdPki, FakeEtcd  # noqa: E402
from fakes.kube_apiserver import FakeKubeApiServer  # noqa: E402

# Workers per scenario; the growth printed is from the second largest to the largest
SIZES = {"steady": (10, 100, 1000), "identity": (100, 1000), "upgrade": (100, 1000)}
SMOKE_SIZES = {"steady": (2, 4), "upgrade": (2, 4)}
PREVIOUS_MINOR = "1.35"
SAMPLES = 15
GPU = '[{"count": 8, "model": "NVIDIA H100 80GB HBM3", "mig-capable": true}]'


def installed_leader(
    api: FakeKubeApiServer, etcd: FakeEtcd, root: Path
) -> tuple[testing.Context, testing.State, ControlPlaneMachine]:
    """The control plane's leader after install on a fake machine, in a healthy cluster."""
    api.available_deployments = True  # a healthy cluster's controllers roll them out
    machine = ControlPlaneMachine(root, api, etcd=etcd)
    charm.KubernetesControlPlaneCharm.host_factory = staticmethod(machine.machine.host)
    charm.KubernetesControlPlaneCharm.clock = staticmethod(Clock())
    charm.KubernetesControlPlaneCharm.public_address = staticmethod(lambda: "203.0.113.7")
    charm.KubernetesControlPlaneCharm.etcd_url = etcd.url
    # a charm directory as Juju leaves it (its charm URL), as in the unit tests' conftest
    ctx = testing.Context(
        charm.KubernetesControlPlaneCharm, charm_root=deployed_charm(root / "charm-dir")
    )
    out = ctx.run(
        ctx.on.install(), testing.State(leader=True, relations=[testing.PeerRelation("peers")])
    )
    return ctx, out, machine


def measure(
    api: FakeKubeApiServer,
    etcd: FakeEtcd,
    root: Path,
    n: int,
    *,
    upgrading: bool = False,
    samples: int = SAMPLES,
) -> dict[str, tuple[float, float, float, int, int]]:
    """Per event: median wall ms, process CPU ms, main-thread CPU ms, requests, commands.

    `upgrading`: every odd worker on the previous minor (its databag and its Node).
    """
    ctx, out, machine = installed_leader(api, etcd, root)
    minor = charm.kubeadm.DEFAULT_MINOR

    def version(i: int) -> str:
        return PREVIOUS_MINOR if upgrading and i % 2 else minor

    units = {
        i: {
            "node-name": f"worker-{i}",
            "node-identity": "true",  # workers of this revision act as their kubelet
            **({"gpu-inventory": GPU} if i % 4 == 0 else {}),
            **({"kubernetes-version": version(i)} if upgrading else {}),
        }
        for i in range(n)
    }
    for i in range(n):  # the Nodes kubeadm join registered
        obj = node(f"worker-{i}", gpus=8 * (i % 4 == 0))
        obj["status"]["nodeInfo"]["kubeletVersion"] = f"v{version(i)}.4"
        api.put_object(f"/api/v1/nodes/worker-{i}", obj)
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
        times, cpu, main = [], [], []
        for _ in range(samples):
            start, start_cpu = time.perf_counter(), time.process_time()
            start_main = time.thread_time()
            out = ctx.run(event(), out)
            main.append((time.thread_time() - start_main) * 1000)
            times.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
        results[name] = (
            statistics.median(times),
            statistics.median(cpu),
            statistics.median(main),
            len(api.requests) - requests,
            len(machine.calls) - calls,
        )
    expected = f"Ready: v{minor}, 1 control-plane, {n} workers"
    assert out.unit_status.message.startswith(expected), out.unit_status.message
    if upgrading:
        behind = f"upgrading to v{minor}: {n // 2} node(s) to go"
        assert behind in out.unit_status.message, out.unit_status.message
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
            setattr(addons, name, server.local(getattr(addons, name)))
        efs_csi.UPSTREAM = f"{server.url}{EFS_CSI_PATH}"
        charm.KubernetesControlPlaneCharm.url_opener = staticmethod(server.opener(saved_opener))
        try:
            yield server
        finally:
            for name, release in zip(names, saved, strict=True):
                setattr(addons, name, release)
            efs_csi.UPSTREAM = saved_csi
            charm.KubernetesControlPlaneCharm.url_opener = staticmethod(saved_opener)


def main() -> None:
    args = options(__doc__).parse_args()
    sizes, samples = (SMOKE_SIZES, 1) if args.smoke else (SIZES, SAMPLES)
    logging.disable(logging.CRITICAL)
    pure = os.environ.get("GPU_K8S_BENCH_PURE_YAML") == "1"
    libyaml = not pure and libyaml_for_ops_testing.use_libyaml()
    print(f"ops.testing's YAML: {'libyaml' if libyaml else 'pure-Python PyYAML'}")
    scenarios = [(scenario, n) for scenario, ns in sizes.items() for n in ns]
    results: dict[tuple[str, int], dict] = {}
    for scenario, n in scenarios:
        with (
            local_releases(),
            FakeKubeApiServer() as api,
            FakeEtcd(EtcdPki()) as etcd,
            tempfile.TemporaryDirectory() as tmp,
        ):
            found = measure(
                api,
                etcd,
                Path(tmp),
                n,
                upgrading=scenario == "upgrade",
                samples=samples,
            )
        results[scenario, n] = found
        for event, (ms, cpu, main_cpu, req, cmds) in found.items():
            print(
                f"{scenario:>8} {n:>5} workers, {event:>16}: {ms:7.2f} ms median "
                f"({cpu:6.2f} ms CPU, {main_cpu:6.2f} ms main thread), "
                f"{req} API requests, {cmds} commands in {samples} events"
            )
    for scenario, ns in sizes.items():
        small_n, big_n = ns[-2:]
        for event in results[scenario, big_n]:
            big, small = results[scenario, big_n][event], results[scenario, small_n][event]
            print(
                f"{scenario} {event}: growth {small_n} -> {big_n} workers "
                f"{big[2] / small[2]:.2f}x in main-thread CPU (target <= 10x), {big[0]:.1f} ms "
                f"wall, {big[1]:.1f} ms CPU, {big[2]:.1f} ms main-thread CPU at {big_n} workers "
                "(target <= 50 ms)"
            )


if __name__ == "__main__":
    main()
