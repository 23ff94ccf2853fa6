#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Control-plane cost of kube-api consumers: 1, 4 and 16 related teams.

A bootstrapped leader (fake machine, fake API server, fake etcd; Kueue and JobSet from
`fakes.addons.ManifestServer` on 127.0.0.1, as bench_control_plane.py: offline) with four
workers, one with 8 GPUs, relates N teams one after another. Each team is a tensorflow
application's request (its namespace, LocalQueues, the cluster-wide reads tensorflow asks
for, a GPU and CPU quota ask: a Kueue team), so relating one makes the grant (Namespace,
ServiceAccount, Role, RoleBinding, ClusterRole, ClusterRoleBinding, a TokenRequest), the
namespace's NetworkPolicies and the team's ClusterQueue, and sizes the cohort again.

Printed per N: relating the Nth team (the last relation-changed: one run, the team's
first), then, SAMPLES times each with every team granted, a relation-changed of the first
team (nothing new: what a team's every hook sends) and update-status (every 5 minutes):
median wall and main-thread CPU (`time.thread_time` in the thread that runs ops.testing
and the charm: the hook with ops.testing's own work, not the fake servers' threads) and
the API requests per hook, so what grows with the teams shows; and which requests
relating the last team sent. ops.testing reads and writes its YAML with libyaml, as in
bench_control_plane.py and the unit tests (a cost of the test framework that no hook
pays). Numbers only: no target is asserted (run.py: timed assertions are flaky on a
shared machine).

First run (2026-11-27, 2 shared cores): a team's steady hooks send nothing and
update-status 4 requests at every N (main-thread CPU ~27 and ~33 ms, flat); relating the
Nth team sends 21, 30 and 66 requests at N = 1, 4, 16: its own grant (9) and the cohort's
sizing stay constant, but every granted namespace's two NetworkPolicies are applied again
(2N PATCHes: addons.apply_team_network_policies applies all of them when the set of
namespaces changes) and every team's ClusterQueue (N: the fair shares change with N, so
most of them do change). On 2026-11-28 (3128517): 21, 24 and 36 requests, only the new
namespace's NetworkPolicies applied, every team's ClusterQueue still; update-status sends
3, then 2 (the Namespaces only while a GPU pod Kueue would hold runs). Compared with
ed618d9 (issue 29's "today") in docs/explanation/design-choices.md.

`--smoke`: 1 team, one sample of each hook (each code path once; not to quote).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

from bench_control_plane import (  # puts the charm, lib and tests on sys.path
    installed_leader,
    local_releases,
)
from ops import testing  # noqa: E402
from run import options  # noqa: E402

from fakes.control_plane import kube_api_relation, node  # noqa: E402
from fakes.etcd import EtcdPki, FakeEtcd  # noqa: E402
from fakes.kube_apiserver import FakeKubeApiServer  # noqa: E402

SIZES = (1, 4, 16)
SAMPLES = 9
SMOKE_SIZES = (1,)
WORKERS = 4
GPU = '[{"count": 8, "model": "NVIDIA A10G"}]'
# What the tensorflow charm asks for, in the shape that makes it a Kueue team (LocalQueues)
TEAM_RULES = [
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get", "create"]},
    {"api-groups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "create"]},
    {"api-groups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
]
TEAM_CLUSTER_RULES = [{"api-groups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]


def _team(i: int) -> testing.Relation:
    return kube_api_relation(
        f"team-{i}",
        f"team-{i}",
        TEAM_RULES,
        TEAM_CLUSTER_RULES,
        **{"gpu-quota": "2", "cpu-quota": "4"},
    )


def _timed(ctx, event, state, api):
    """(state after, wall ms, main-thread CPU ms, API requests) of one run."""
    requests = len(api.requests)
    start, start_main = time.perf_counter(), time.thread_time()
    out = ctx.run(event, state)
    main = (time.thread_time() - start_main) * 1000
    return out, (time.perf_counter() - start) * 1000, main, len(api.requests) - requests


def _kinds(requests: list) -> str:
    """The requests as `METHOD resource xcount`, most first (what grows with the teams)."""
    counts = collections.Counter(f"{method} {_resource(path)}" for method, path, *_ in requests)
    return ", ".join(f"{k} x{v}" for k, v in counts.most_common())


def _resource(path: str) -> str:
    """The resource (plural, with a subresource) a request path names."""
    parts = path.split("?")[0].strip("/").split("/")
    if "namespaces" in parts[:-1] and len(parts) > parts.index("namespaces") + 2:
        parts = parts[parts.index("namespaces") + 2 :]
    else:
        parts = parts[2:] if parts[0] == "api" else parts[3:]
    return "/".join(parts[::2])


def measure(
    api: FakeKubeApiServer, etcd: FakeEtcd, root: Path, n: int, samples: int = SAMPLES
) -> dict[str, tuple]:
    """Per event: (wall ms, main-thread CPU ms, API requests per hook) with `n` teams."""
    ctx, out, _ = installed_leader(api, etcd, root)
    units = {
        i: {
            "node-name": f"worker-{i}",
            "node-identity": "true",  # workers of this revision act as their kubelet (424fd87)
            **({"gpu-inventory": GPU} if i == 0 else {}),
        }
        for i in range(WORKERS)
    }
    for i in range(WORKERS):
        api.put_object(f"/api/v1/nodes/worker-{i}", node(f"worker-{i}", gpus=8 * (i == 0)))
    rel = testing.Relation("workers", remote_app_name="kubernetes-worker", remote_units_data=units)
    out = ctx.run(
        ctx.on.leader_elected(), dataclasses.replace(out, relations=[*out.relations, rel])
    )
    results: dict[str, tuple] = {}
    for i in range(n):
        team = _team(i)
        out = dataclasses.replace(out, relations=[*out.relations, team])
        before = len(api.requests)
        out, ms, main, requests = _timed(ctx, ctx.on.relation_changed(team), out, api)
        results["relate the last team"] = (ms, main, requests)
        results["requests relating the last team"] = _kinds(api.requests[before:])
    first = next(r for r in out.relations if r.endpoint == "kube-api")
    events = {
        "relation-changed": lambda: ctx.on.relation_changed(out.get_relation(first.id)),
        "update-status": lambda: ctx.on.update_status(),
    }
    for name, event in events.items():
        times, cpu, sent = [], [], []
        for _ in range(samples):
            out, ms, main, requests = _timed(ctx, event(), out, api)
            times.append(ms)
            cpu.append(main)
            sent.append(requests)
        results[name] = (statistics.median(times), statistics.median(cpu), max(sent))
    granted = json.loads(
        next(r for r in out.relations if r.endpoint == "peers").local_app_data["kube-api"]
    )
    assert len(granted) == n, granted
    assert out.unit_status.name == "active", out.unit_status.message
    return results


def main() -> None:
    args = options(__doc__).parse_args()
    sizes, samples = (SMOKE_SIZES, 1) if args.smoke else (SIZES, SAMPLES)
    logging.disable(logging.CRITICAL)
    import libyaml_for_ops_testing  # tests/, on sys.path once bench_control_plane is imported

    libyaml = libyaml_for_ops_testing.use_libyaml()
    print(f"ops.testing's YAML: {'libyaml' if libyaml else 'pure-Python PyYAML'}")
    for n in sizes:
        with (
            local_releases(),
            FakeKubeApiServer() as api,
            FakeEtcd(EtcdPki()) as etcd,
            tempfile.TemporaryDirectory() as tmp,
        ):
            found = measure(api, etcd, Path(tmp), n, samples)
        kinds = found.pop("requests relating the last team")
        print(f"{n:>3} teams, requests relating the last: {kinds}")
        for event, (ms, main, requests) in found.items():
            each = "one run" if event.startswith("relate") else f"median of {samples}"
            print(
                f"{n:>3} teams, {event:>21}: {ms:7.2f} ms wall, {main:6.2f} ms main-thread "
                f"CPU ({each}), {requests} API requests per hook"
            )


if __name__ == "__main__":
    main()
