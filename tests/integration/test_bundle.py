"""The README's path on a real AWS controller: deploy the bundle, validate GPUs, train.

Needs `tox -e pack` first and a Juju controller on AWS with GPU quota; run with
`tox -e integration -- -k bundle`. Skipped with the reason when no controller is there.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "gpu-k8s.yaml"
CHARMS = ("kubernetes-control-plane", "kubernetes-worker", "efs-storage", "tensorflow")
APPS = (
    "kubernetes-control-plane",
    "kubernetes-worker",
    "kubernetes-worker-gpu",
    "efs-storage",
    "tensorflow",
)
JOB = "it-mnist"


async def run(ops_test, unit_name: str, action: str, **params) -> dict:
    """Run an action on a unit and return its results; fail the test if it failed."""
    unit = next(
        u for a in APPS for u in ops_test.model.applications[a].units if u.name == unit_name
    )
    done = await (await unit.run_action(action, **params)).wait()
    assert done.status == "completed", f"{action} on {unit_name}: {done.results}"
    return done.results


@pytest.mark.abort_on_fail
async def test_bundle_deploys_and_converges(ops_test):
    missing = [c for c in CHARMS if not (ROOT / "build" / f"{c}.charm").exists()]
    if missing:
        pytest.skip(f"run `tox -e pack` first; missing: {', '.join(missing)}")
    rc, _, err = await ops_test.juju("deploy", str(BUNDLE), "--trust")
    assert rc == 0, err
    await ops_test.model.wait_for_idle(list(APPS), status="active", timeout=5400, idle_period=60)


async def test_gpu_worker_validates(ops_test):
    results = await run(ops_test, "kubernetes-worker-gpu/0", "validate-gpu", timeout=600)
    assert results["passed"] == "true", results


async def test_train_runs_to_completion(ops_test):
    results = await run(
        ops_test,
        "tensorflow/0",
        "train",
        job=JOB,
        workers=1,
        **{"gpus-per-worker": 1, "steps": 300, "timeout": 900},
    )
    assert results["job"] == JOB
    for _ in range(120):
        status = await run(ops_test, "tensorflow/0", "job-status", job=JOB)
        if status.get("phase") == "Succeeded":
            break
        assert status.get("phase") != "Failed", status
        await asyncio.sleep(10)
    else:
        pytest.fail(f"{JOB} did not finish: {status}")


async def test_scale_and_stop_keep_the_checkpoints(ops_test):
    await run(ops_test, "tensorflow/0", "train", job=f"{JOB}-2", workers=1, steps=5000)
    scaled = await run(ops_test, "tensorflow/0", "scale", job=f"{JOB}-2", workers=2)
    assert scaled["workers"] == "2", scaled
    assert "resumed-from-step" in scaled
    await run(ops_test, "tensorflow/0", "stop", job=f"{JOB}-2")
    listed = await run(ops_test, "tensorflow/0", "list-jobs")
    assert f"{JOB}-2" not in json.dumps(listed)


async def test_added_gpu_worker_advertises_its_gpus(ops_test):
    app = ops_test.model.applications["kubernetes-worker-gpu"]
    await app.add_unit(count=1)
    await ops_test.model.wait_for_idle(list(APPS), status="active", timeout=3600)
    info = await run(ops_test, "kubernetes-control-plane/0", "cluster-info")
    nodes = json.loads(info["nodes"])
    assert sum(1 for n in nodes if n.get("gpus", 0) > 0) == 2, nodes


async def test_removed_gpu_worker_is_drained_and_deleted(ops_test):
    app = ops_test.model.applications["kubernetes-worker-gpu"]
    await app.units[-1].destroy()
    await ops_test.model.wait_for_idle(list(APPS), status="active", timeout=3600)
    info = await run(ops_test, "kubernetes-control-plane/0", "cluster-info")
    nodes = json.loads(info["nodes"])
    assert sum(1 for n in nodes if n.get("gpus", 0) > 0) == 1, nodes
