"""A fatal XID quarantines the node end to end, within 60 s (issue 32 item 1).

The whole chain as it runs on a cluster, Juju's part played by the test:
1. the GPU health watcher (charms/kubernetes-worker/src/gpu_watcher.py) as a real process
   with the poll loop systemd gives it (gpu_health.unit_text: `--interval 5`, the default
   `--tick 0.5`) on the machine tests/gpu_watcher_machine.py builds; the XID line goes in
   through the worker's Host boundary (the file that stands for /dev/kmsg), stamped with
   the kernel's clock;
2. the watcher, as the node's kubelet over TLS (Node authorizer, NodeRestriction), sets
   the condition, cordons and evicts the GPU's pod, then runs `juju-exec`; the juju-exec
   on its PATH becomes the worker charm's real `gpu-quarantined` hook in the process it
   starts (tests/gpu_charms/worker_unit.py, worker_hook.py), which publishes
   `gpu-quarantine` and sets the unit's status;
3. the control-plane leader (tests/gpu_charms/control_plane.py: bootstrapped by its
   install hook) runs its real `workers` relation-changed with that databag in this
   process, as Juju runs it once the worker's hook has ended: it sets the NoExecute taint
   and records the move on the JobSet of the team's gang there (gang_release);
4. Kubernetes' taint manager (tests/fakes/taint_eviction.py) deletes the node's pods that
   do not tolerate the taint; the DCGM exporter's DaemonSet pod, which does, stays.
Every time is measured from the moment the line is written (CLOCK_MONOTONIC, read in
every process); nothing is slept but the 10 ms between two reads.

Not real: Juju's hook scheduling, machine lock and relation-data delivery (seconds on a
quiet controller), the hardware.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from charm_modules import load
from gpu_charms.control_plane import Leader, leader
from gpu_charms.worker_unit import hook_result, joined, juju_exec
from gpu_watcher_machine import (
    ALL,
    GPUS,
    OTHER,
    OWN,
    SRC,
    UNIT,
    Machine,
    gpu_machine,
    juju_exec_calls,
    program,
    start,
    until,
    xid_line,
)

from charms.gpu_k8s.v0.kubernetes_cluster import QUARANTINE_TAINT
from fakes.taint_eviction import NO_EXECUTE, NOT_READY, UNREACHABLE, TaintEvictionController

WITHIN = 60.0  # issue 32 item 1: condition, taint, status and alert within 60 s of the fault
CATALOG = json.loads((SRC / "xid_catalog.json").read_text())
NODE_PROBLEMS = (NOT_READY, UNREACHABLE)
EXPORTER = "dcgm-exporter-gpu-node-1"  # the DCGM exporter DaemonSet's pod on the node


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[tuple[Machine, Leader, TaintEvictionController]]:
    """The watcher's machine, its joined worker unit, the leader and the taint manager.

    The leader has seen the worker's databag (its node, acting as its kubelet) before
    the fault; the watcher runs as systemd runs it, waking the unit through juju-exec, and
    serves its metrics (what COS's alert reads). On the node beside the team's pods: the
    DCGM exporter's pod, as the DaemonSet controller makes it from its pod template.
    """
    with gpu_machine(tmp_path) as box, leader(box.api, tmp_path / "cp", UNIT) as cp:
        cp.changed(joined(box)["bag"])
        juju_exec(box)
        daemon_set = exporter_daemon_set()
        namespace = daemon_set["metadata"]["namespace"]  # the GPU components' namespace
        box.api.put_object(f"/api/v1/namespaces/{namespace}", {"metadata": {"name": namespace}})
        template = daemon_set["spec"]["template"]
        owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": True}
        owner |= {"name": daemon_set["metadata"]["name"], "uid": "d5e7"}
        spec = {"nodeName": OWN, "containers": [{"name": "exporter", "image": "dcgm:4"}]}
        # the DaemonSet controller's pod: its template's tolerations, then the node
        # problems' NoExecute ones for ever (kubernetes pkg/controller/daemon/util/
        # daemonset_util.go AddOrUpdateDaemonPodTolerations, stored commit 05c351a9; the
        # pressure and unschedulable ones are NoSchedule, which the taint manager skips)
        forever = [{"key": k, "operator": "Exists", "effect": NO_EXECUTE} for k in NODE_PROBLEMS]
        spec["tolerations"] = template["spec"]["tolerations"] + forever
        meta = {"labels": template["metadata"]["labels"], "ownerReferences": [owner]}
        box.api.put_object(exporter_path(), {"metadata": meta, "spec": spec})
        taints = TaintEvictionController(box.api)
        taints.tick()  # it has seen every Node untainted and every pod
        start(box, interval=5.0, tick=0.5, unit=UNIT, hook_retry=5.0, metrics=True)
        yield box, cp, taints


def exporter_daemon_set() -> dict:
    """The DCGM exporter's DaemonSet as the control plane applies it."""
    exporter = load("kubernetes-control-plane", "dcgm_exporter")
    return next(m for m in exporter.manifests() if m["kind"] == "DaemonSet")


def exporter_path() -> str:
    namespace = exporter_daemon_set()["metadata"]["namespace"]
    return f"/api/v1/namespaces/{namespace}/pods/{EXPORTER}"


def quarantine_taints(box: Machine, node: str = OWN) -> list[dict]:
    taints = (box.node(node).get("spec") or {}).get("taints") or []
    return [t for t in taints if t.get("key") == QUARANTINE_TAINT["key"]]


def alert_series(uuid: str) -> str:
    """The watcher's sample COS's GpuQuarantined alert fires on (`== 1`, `for: 0m`)."""
    gpu = next(index for index, u, _ in GPUS if u == uuid)
    return f'gpu_k8s_gpu_quarantined{{gpu="{gpu}",node="{OWN}",uuid="{uuid}"}} 1'


def team_jobset(box: Machine) -> str:
    """team-a's JobSet "train", Kueue-managed: its Job's pods are gpu0-job and gpu1-job on OWN.

    Shaped as JobSet v0.12.0 makes them (the Job owned by the JobSet, each pod labelled
    with the JobSet's name and restart attempt) and Kueue's Workload owned by the JobSet,
    admitted. Returns the JobSet's path.
    """
    ns = "team-a"
    box.api.put_object(
        f"/api/v1/namespaces/{ns}",
        {"metadata": {"name": ns, "labels": {"gpu-k8s.io/kueue": "managed"}}},
    )
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/train"
    job_spec = {"parallelism": 2, "completions": 2, "template": {"spec": {}}}
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": ns, "uid": "js-train"},
        "spec": {
            "replicatedJobs": [{"name": "worker", "replicas": 1, "template": {"spec": job_spec}}]
        },
        "status": {"restarts": 0},
    }
    box.api.put_object(path, js)
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "controller": True}
    owner |= {"name": "train", "uid": "js-train"}
    job = {"metadata": {"name": "train-worker-0", "namespace": ns, "uid": "job-train"}}
    job["metadata"]["ownerReferences"] = [owner]
    box.api.put_object(f"/apis/batch/v1/namespaces/{ns}/jobs/train-worker-0", job)
    for name in ("gpu0-job", "gpu1-job"):
        pod = box.api.get_object(f"/api/v1/namespaces/{ns}/pods/{name}-{OWN}")
        assert pod is not None
        pod["metadata"]["labels"] = {
            "jobset.sigs.k8s.io/jobset-name": "train",
            "jobset.sigs.k8s.io/restart-attempt": "0",
        }
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "train-worker-0", "uid": "job-train"}
        ]
        box.api.put_object(f"/api/v1/namespaces/{ns}/pods/{name}-{OWN}", pod)
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "jobset-train", "namespace": ns, "ownerReferences": [owner]},
        "spec": {"queueName": "training", "podSets": [{"name": "worker", "count": 2}]},
        "status": {"conditions": [{"type": "Admitted", "status": "True"}]},
    }
    box.api.put_object(
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads/jobset-train", workload
    )
    return path


def test_a_fatal_xid_taints_the_node_through_both_charms_and_its_pods_leave(chain):
    box, cp, taint_manager = chain
    train = team_jobset(box)
    index, uuid, _ = GPUS[1]
    fault = time.monotonic()
    box.kernel(xid_line("79", gpu=1), usec=int(fault * 1e6))
    seen: dict[str, float] = {}
    hook: dict = {}
    while len(seen) < 4:
        waited = time.monotonic() - fault
        assert waited < WITHIN, f"after {waited:.1f} s only {sorted(seen)}"
        condition = box.condition()
        if "condition" not in seen and condition and condition["status"] == "False":
            seen["condition"] = time.monotonic()
        if "hook" not in seen and (result := hook_result(box)) is not None:
            seen["hook"] = time.monotonic()
            hook = result
            # the watcher evicted the GPU's pod only: the others wait for the taint
            assert f"{OWN}/cpu-job" in box.pods() and f"{OWN}/gpu0-job" in box.pods()
            assert quarantine_taints(box) == []  # nobody but the leader taints
            cp.changed(hook["bag"])  # Juju: the worker's hook ended, the leader's runs
            assert quarantine_taints(box) == [QUARANTINE_TAINT], "the leader set no taint"
            seen["taint"] = time.monotonic()
        taint_manager.tick()
        if "evicted" not in seen and not {f"{OWN}/cpu-job", f"{OWN}/gpu0-job"} & box.pods():
            seen["evicted"] = time.monotonic()
        time.sleep(0.01)
    alert = box.metrics()
    done = {step: round(at - fault, 2) for step, at in seen.items()}
    print(f"fault -> {done}")  # shown with -s, or on a failure below
    assert max(done.values()) < WITHIN
    assert done["condition"] <= done["hook"] <= done["taint"] <= done["evicted"], done

    # the node condition names the GPU's index and UUID, the XID and its meaning
    condition = box.condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Xid79")
    entry = CATALOG["xids"]["79"]
    assert f"GPU {index} ({uuid})" in condition["message"]
    assert f"XID 79 {entry['mnemonic']}: {entry['description']}" in condition["message"]
    assert box.node()["spec"]["unschedulable"] is True

    # the worker's hook, started by the watcher's juju-exec, asked for that GPU only
    (call,) = juju_exec_calls(box)
    assert call["argv"][:2] == ["-u", UNIT]
    assert call["quarantined"] == [uuid]  # saved before: the hook reads it
    assert json.loads(hook["bag"]["gpu-quarantine"]) == [uuid]
    state, message = hook["status"]
    assert state == "waiting", hook["status"]
    assert message.startswith(f"GPU {index} ({uuid}) quarantined at ")
    assert f": Xid79; node {OWN} cordoned with condition GpuHealthy=False" in message
    assert "NoExecute taint asked of the control plane" in message
    assert "gpu-auto-repair: a reboot in this unit's turn" in message  # the default, reboot

    # the leader recorded the move on the team's JobSet whose whole gang ran there: the
    # node, the fault and when it began as the watcher's condition says them (job-status)
    record = box.api.get_object(train)["metadata"]["annotations"]["gpu-k8s.io/moves"]
    moved = {"node": OWN, "reason": condition["message"][:200], "restarted": False}
    assert json.loads(record) == {
        "count": 1,
        "last": [{**moved, "at": condition["lastTransitionTime"]}],
    }

    # the taint on that node only; its pods gone, the exporter's (tolerating it) stays
    assert quarantine_taints(box, OTHER) == []
    assert box.pods() == ALL - {f"{OWN}/gpu0-job", f"{OWN}/gpu1-job", f"{OWN}/cpu-job"}
    assert box.api.get_object(exporter_path()) is not None
    assert taint_manager.refused == []
    assert taint_manager.scheduled() == {}  # nothing left to delete later

    # COS: the sample its GpuQuarantined alert fires on, for that GPU only
    assert alert_series(uuid) in alert
    assert alert_series(GPUS[0][1]) not in alert


def test_an_application_xid_restarts_the_job_and_quarantines_nothing(chain):
    """The catalog's "restart the application" class (XID 13): only the job's pod goes.

    Its program still runs on the GPU `--app-xid-wait` after the XID (the harness's 0.3 s,
    15 s by default): the watcher evicts its pod, and that is all.
    """
    box, _, taint_manager = chain
    program(box, 4242, "gpu0-job")  # lingers on its broken CUDA context
    fault = time.monotonic()
    box.kernel(xid_line("13", gpu=0, pid=4242), usec=int(fault * 1e6))
    until(lambda: f"{OWN}/gpu0-job" not in box.pods(), timeout=WITHIN)
    evicted = time.monotonic() - fault
    key = f"{GPUS[0][1]}|13|Xid13|application"
    assert box.state()["faults"][key] == 1  # read and counted as the application's fault
    assert taint_manager.tick() == 0  # no taint: nothing for it to delete
    print(f"fault -> job's pod evicted {evicted:.2f} s")
    assert box.condition() is None
    assert not box.node().get("spec", {}).get("unschedulable")
    assert box.state()["quarantined"] == {}
    assert juju_exec_calls(box) == [] and hook_result(box) is None  # no hook asked for
    assert quarantine_taints(box) == []
    assert box.pods() == ALL - {f"{OWN}/gpu0-job"}
    assert box.api.get_object(exporter_path()) is not None
    assert "gpu_k8s_gpu_quarantined{" in (metrics := box.metrics())
    assert alert_series(GPUS[0][1]) not in metrics
