"""The application as a Kueue team: its LocalQueue and the control plane's ClusterQueue.

The control plane writes the ClusterQueue from the quota the charm asks for on its kube-api
relation (issue 29 item 6).
"""

from __future__ import annotations

import dataclasses

import kubernetes_validate
import manifests
import params
import pytest
import queues
from conftest import (
    NS,
    add_nodes,
    condition,
    control_plane_reads,
    jobset,
    node,
    run_action,
    training_pods,
)
from ops import testing

from charms.gpu_k8s.v0.kubernetes_cluster import QUARANTINE_TAINT
from fakes import crds
from fakes.addons import join_team, leader_bag, leader_hook, size_cohort, team_quotas
from fakes.batch import JOB_INDEX, BatchControllers
from fakes.kube_admission import KUBERNETES_VERSION
from fakes.taint_eviction import TaintEvictionController

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
CQ = f"{KUEUE}/clusterqueues/team-tensorflow"
COHORT = f"{KUEUE}/cohorts/gpu-k8s"
LQS = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/localqueues/"
LQ = LQS + "training"
CONTROL_PLANE_TAINT = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]


def _quota(cq: dict) -> dict[tuple[str, str], str]:
    return {
        (flavor["name"], resource["name"]): resource["nominalQuota"]
        for group in cq["spec"]["resourceGroups"]
        for flavor in group["flavors"]
        for resource in flavor["resources"]
    }


def test_the_team_gets_a_queue_in_the_cohort_with_no_quota_of_its_own(ctx, state, api):
    """Unset quotas guarantee nothing: the team borrows from the cohort.

    The control plane sizes the cohort to the schedulable nodes (issue 29 item 6: the
    quotas never sum past them).
    """
    add_nodes(
        api,
        node("cpu-0"),
        node("gpu-0", 4),
        node("gpu-1", 1),
        node("control-plane-0", taints=CONTROL_PLANE_TAINT),  # never runs jobs
        node("gone", 8, ready=False),
    )
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status.name == "active", out.unit_status.message
    cq = api.get_object(CQ)
    assert cq["spec"]["cohortName"] == "gpu-k8s"
    assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NS}}
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert _quota(cq) == {
        ("cpu", "cpu"): "0",
        ("cpu", "memory"): "0",
        ("gpu-nvidia-a10g", "nvidia.com/gpu"): "0",
    }
    assert _quota(api.get_object(COHORT)) == {
        ("cpu", "cpu"): "24",
        ("cpu", "memory"): str(3 * 64 * 2**30),
        ("gpu-nvidia-a10g", "nvidia.com/gpu"): "5",
    }
    assert api.get_object(LQ)["spec"] == {"clusterQueue": "team-tensorflow"}
    # never `default`, which Kueue would make the namespace's queue for everything
    assert [q["metadata"]["name"] for q in api.objects(LQS)] == ["training"]


def test_the_default_queue_of_an_earlier_revision_goes_and_nobody_elses(ctx, state, api):
    add_nodes(api, node("gpu-0", 1))
    ours = {"app.kubernetes.io/managed-by": "tensorflow"}
    api.put_object(LQS + "default", {"metadata": {"labels": ours}, "spec": {"clusterQueue": "x"}})
    api.put_object(LQS + "theirs", {"metadata": {}, "spec": {"clusterQueue": "y"}})
    ctx.run(ctx.on.upgrade_charm(), state)
    assert [q["metadata"]["name"] for q in api.objects(LQS)] == ["theirs", "training"]

    api.put_object(LQS + "default", {"metadata": {}, "spec": {"clusterQueue": "z"}})  # a user's
    ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config={"gpu-quota": "1"}))
    assert api.get_object(LQS + "default") is not None


def test_configured_quotas_are_the_nominal_quota(ctx, state, api):
    """The charm asks for them on the relation; the control plane writes the queue."""
    # 16 CPUs and 128Gi: the asks fit (past the cluster they are clamped, issue 29)
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    config = {"gpu-quota": "2", "cpu-quota": "16", "memory-quota": "100Gi"}
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config=config))
    request = out.get_relations("kube-api")[0].local_app_data
    assert {k: request[k] for k in config} == config
    control_plane_reads(api, out)
    assert _quota(api.get_object(CQ)) == {
        ("cpu", "cpu"): "16",
        ("cpu", "memory"): str(100 * 2**30),
        ("gpu-nvidia-a10g", "nvidia.com/gpu"): "2",
    }
    # the charm itself wrote no ClusterQueue
    writes = [r.path for r in api.requests if r.method != "GET"]
    assert not [p for p in writes if "/clusterqueues/" in p]


def test_a_node_joining_changes_nothing_the_team_writes(ctx, state, api):
    """The cohort grows (the control plane's work); the team's queue stays as it was."""
    add_nodes(api, node("gpu-0", 1))
    out = ctx.run(ctx.on.update_status(), state)
    before = api.get_object(CQ)
    writes = len([r for r in api.requests if r.method != "GET"])
    add_nodes(api, node("gpu-1", 1))
    assert _quota(api.get_object(COHORT))[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "2"
    ctx.run(ctx.on.update_status(), out)
    assert len([r for r in api.requests if r.method != "GET"]) == writes
    assert api.get_object(CQ) == before


@pytest.mark.parametrize(
    "config,fragment",
    [
        ({"gpu-quota": "-1"}, "gpu-quota"),
        ({"gpu-quota": "two"}, "gpu-quota"),
        ({"cpu-quota": "lots"}, "cpu-quota"),
        ({"memory-quota": "-5Gi"}, "memory-quota"),
    ],
)
def test_a_bad_quota_blocks_and_changes_nothing(ctx, state, api, config, fragment):
    before = api.get_object(CQ)
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config=config))
    assert out.unit_status.name == "blocked"
    assert fragment in out.unit_status.message
    # no quota asked for on the relation (none of its own meanwhile); the queue unchanged
    request = out.get_relations("kube-api")[0].local_app_data
    assert not {"gpu-quota", "cpu-quota", "memory-quota"} & set(request)
    control_plane_reads(api, out)
    assert api.get_object(CQ) == before


def test_without_kueue_in_the_cluster_it_waits_saying_what_to_do(ctx, state, api):
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
    for crd in api.objects(crds):
        api.delete_object(crds + crd["metadata"]["name"])
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status == testing.WaitingStatus(
        "Kueue is not installed in the cluster: set batch-engines=true on kubernetes-control-plane"
    )
    assert [r for r in api.requests if r.method != "GET"] == []


def test_the_queue_objects_are_valid_kueue_objects():
    """Checked against the fields of kueue v1beta2's Go types (see queues.py)."""
    from charm_modules import load

    kueue = load("kubernetes-control-plane", "kueue")
    cq = kueue.team_queue(kueue.Team("tf"), ["gpu-nvidia-a10g"])
    (lq,) = queues.team_objects("tf", "tf")
    spec = cq["spec"]
    assert set(spec) <= {
        "resourceGroups", "cohortName", "queueingStrategy", "namespaceSelector",
        "flavorFungibility", "preemption", "admissionChecksStrategy", "stopPolicy",
        "fairSharing", "admissionScope",
    }  # fmt: skip
    assert set(spec["preemption"]) <= {
        "reclaimWithinCohort",
        "borrowWithinCohort",
        "withinClusterQueue",
    }
    assert spec["queueingStrategy"] in ("StrictFIFO", "BestEffortFIFO")
    for group in spec["resourceGroups"]:
        assert set(group) == {"coveredResources", "flavors"}
        for flavor in group["flavors"]:
            assert set(flavor) == {"name", "resources"}
            assert {r["name"] for r in flavor["resources"]} == set(group["coveredResources"])
            for r in flavor["resources"]:
                params.quantity(r["nominalQuota"])
    assert set(lq["spec"]) == {"clusterQueue"}
    # and against Kueue v0.19.2's CRDs, as the API server validates them (fakes/crds.py)
    crds.validate(cq)
    crds.validate(lq)
    # metadata and names as the API server validates any object
    for obj in (cq, lq):
        shell = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
        kubernetes_validate.validate(shell, KUBERNETES_VERSION, strict=True)


# -- two teams share the cohort (issue 29 item 6) -------------------------------------------

OTHER = "other"


def _other_team(api, request: dict[str, str] | None = None) -> BatchControllers:
    """A second tensorflow application's team, its LocalQueue as that charm writes it.

    Its ClusterQueue as the control plane writes it from that charm's kube-api `request`.
    """
    # Kueue's, as the control plane labels every consumer's namespace (rbac.consumer_grant)
    labels = {"gpu-k8s.io/kueue": "managed"}
    api.put_object(f"/api/v1/namespaces/{OTHER}", {"metadata": {"name": OTHER, "labels": labels}})
    (lq,) = queues.team_objects("other", OTHER)
    api.put_object(f"{KUEUE}/namespaces/{OTHER}/localqueues/{lq['metadata']['name']}", lq)
    join_team(api, OTHER, request)
    return BatchControllers(api, OTHER)


def _other_job(api, controllers: BatchControllers, name: str, workers: int) -> dict:
    """Its `train job=<name> workers=<workers> gpus-per-worker=1`, one Kueue round later."""
    ctx = manifests.Context(
        namespace=OTHER,
        app="other",
        claim="claim",
        default_image="tensorflow/tensorflow:2.21.0",
        tensorboard_image="tensorflow/tensorflow:2.21.0",
    )
    js = manifests.jobset(params.TrainRequest(job=name, workers=workers, gpus_per_worker=1), ctx)
    api.put_object(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{OTHER}/jobsets/{name}", js)
    controllers.tick()
    workload = controllers.workload(name)
    assert workload is not None
    return workload


def _admitted(workload: dict) -> bool:
    return any(
        c["type"] == "Admitted" and c["status"] == "True" for c in workload["status"]["conditions"]
    )


def test_two_teams_on_defaults_are_never_admitted_past_the_cluster(
    ctx, state, api, controller, fake_time
):
    """Two teams on defaults share the one cluster the cohort holds.

    Each once held the whole cluster as its own nominal quota: two summed to twice what
    exists, and Kueue admitted jobs whose pods could never all be scheduled.
    """
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    other = _other_team(api)
    results, _ = run_action(ctx, state, "train", job="a", workers=3, **{"gpus-per-worker": 1})
    assert results["state"] == "running"
    # 1 GPU is left for the other team's 2-GPU job. Under fair sharing (the control
    # plane's Kueue configuration) Kueue preempts the first team's job for it: with it the
    # other team borrows 2 of the 4 GPUs the cohort lends (share 500), less than the first
    # team borrows now (3 of 4, 750): kueue v0.19.2 preemption.go runSecondFsStrategy,
    # LessThanInitialShare. (The old fake preempted within a ClusterQueue only and had
    # the job wait; updated to what Kueue does.)
    waiting = _other_job(api, other, "b", 2)
    assert not _admitted(waiting)  # admitted once the preempted job stopped
    first = controller.workload("a")
    assert first is not None and not _admitted(first)
    (preempted,) = [c for c in first["status"]["conditions"] if c["type"] == "Preempted"]
    assert preempted["reason"] == "InCohortFairSharing"
    assert (
        "due to Fair Sharing within the cohort; preemptor path: /gpu-k8s/team-other;"
        in (preempted["message"])
    )
    other.tick()
    assert _admitted(other.workload("b") or {})
    # the first team's 3-GPU job cannot take them back (750 is not below 500): it waits,
    # and the other team borrows the GPU left idle: a 1-GPU job runs
    assert _admitted(_other_job(api, other, "c", 1))
    controller.tick()
    assert not _admitted(controller.workload("a") or {})
    used = [
        a["resourceUsage"].get("nvidia.com/gpu", "0")
        for w in api.objects(f"{KUEUE}/namespaces/", kind="Workload")
        if _admitted(w)
        for a in w["status"]["admission"]["podSetAssignments"]
    ]
    assert sum(int(u) for u in used) == 3


def test_a_high_priority_job_preempts_its_own_team_never_another_within_its_share(
    ctx, state, api, controller, fake_time
):
    """Issue 29: `train priority=high` is no way past fair sharing into another team.

    Kueue v0.19.2 with fair sharing (the control plane's configuration) picks another
    ClusterQueue's victims by share, whatever their priority (preemption.go
    fairPreemptions; `borrowWithinCohort` is read by classicalPreemptions only): with
    the urgent job this team would borrow all 4 GPUs the cohort lends (share 1000), more
    than the other team's 2 (500), so the other team's job stays; the team's own normal
    job goes (withinClusterQueue: LowerPriority) and the urgent one runs.
    """
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    other = _other_team(api)
    gpu = {"gpus-per-worker": 1}
    results, _ = run_action(ctx, state, "train", job="a", workers=2, **gpu)
    assert results["state"] == "running"
    assert _admitted(_other_job(api, other, "b", 2))

    run_action(ctx, state, "train", job="urgent", workers=2, priority="high", **gpu)
    other.tick()

    assert _admitted(other.workload("b") or {})
    first = controller.workload("a")
    assert first is not None and not _admitted(first)
    (preempted,) = [c for c in first["status"]["conditions"] if c["type"] == "Preempted"]
    assert preempted["reason"] == "InClusterQueue"
    assert _admitted(controller.workload("urgent") or {})


def test_a_team_borrows_the_whole_cohort_while_the_other_is_idle(
    ctx, state, api, controller, fake_time
):
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    _other_team(api)
    results, _ = run_action(ctx, state, "train", job="all", workers=4, **{"gpus-per-worker": 1})
    assert results["state"] == "running"


def test_guarantees_past_the_cluster_block_the_control_plane(ctx, state, api):
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    # updated (issue 29 item 6): a team's ask is capped by its allowance (a fair share,
    # 2 of 4 each, unless the operator's team-quotas names more), so only the operator's
    # allowances can overcommit the cluster: they give both teams their asks here
    team_quotas(api)["text"] = "tensorflow=gpu:3 other=gpu:2"
    _other_team(api, {"gpu-quota": "2"})
    config = {"gpu-quota": "3"}
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config=config))
    sized = control_plane_reads(api, out)
    # updated (issue 29 leftover 4): the team that joined later holds what is left of the
    # cluster, not its ask; this one (related first) keeps its 3
    assert sized["overcommitted"] == (
        "team-quotas overcommit the cluster: 5 nvidia.com/gpu of flavor gpu-nvidia-a10g "
        "guaranteed (team-other 2, team-tensorflow 3) but the cluster has 4 (team-other "
        "given 1 of 2): lower team-quotas of kubernetes-control-plane, or add nodes"
    )
    assert _quota(sized["cohort"])[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "0"
    assert _quota(api.get_object(CQ))[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "3"
    other = api.get_object(f"{KUEUE}/clusterqueues/team-{OTHER}")
    assert _quota(other)[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "1"


def test_a_teams_guarantee_is_reclaimed_from_a_borrower(ctx, state, api, controller, fake_time):
    """Kueue reclaims a team's nominal quota from a team that borrowed it.

    The control plane turns fair sharing on: Kueue v0.19.2 preemption.go fairPreemptions,
    a preemptor that stays within its nominal quota preempts borrowers of the cohort
    whatever their priority (FairSharingPreemptWithinNominal; `reclaimWithinCohort: Any`),
    reason InCohortReclamation. The old fake preempted within a ClusterQueue only, so the
    team waited behind the borrower for ever.
    """
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    other = _other_team(api)
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config={"gpu-quota": "2"}))
    control_plane_reads(api, out)  # the cohort lends the 2 GPUs nobody is guaranteed
    borrower = _other_job(api, other, "all", 4)  # the other team borrows all 4
    assert _admitted(borrower)
    config = dataclasses.replace(state, config={"gpu-quota": "2"})
    results, _ = run_action(ctx, config, "train", job="mine", workers=2, **{"gpus-per-worker": 1})
    assert results["state"] == "running"
    evicted = other.workload("all")
    assert evicted is not None and not _admitted(evicted)
    preempted = condition(evicted, "Preempted")
    assert (preempted["status"], preempted["reason"]) == ("True", "InCohortReclamation")
    mine = controller.workload("mine")
    assert mine is not None
    assert preempted["message"] == (
        f"Preempted to accommodate a workload (UID: {mine['metadata']['uid']}, JobUID: "
        f"{mine['metadata']['labels']['kueue.x-k8s.io/job-uid']}) due to reclamation within "
        "the cohort; preemptor path: /gpu-k8s/team-tensorflow; preemptee path: "
        "/gpu-k8s/team-other"
    )


# the worker's GPU health watcher's condition (kubernetes-worker gpu_watcher.py
# _set_condition): the reason and message of the GPU's fault, since its first fault
XID79 = {
    "type": "GpuHealthy",
    "status": "False",
    "reason": "Xid79",
    "message": "GPU 0 (GPU-7f3e9a2c): GPU has fallen off the bus; repair: reboot",
    "lastTransitionTime": "2026-11-28T06:00:00Z",
}


def _quarantine_big(
    ctx, state, api, controller, fake_time, *, released: bool, room: int = 3, near: bool = False
):
    """The job "big" (2 GPUs) runs on gpu-a; the other team's "theirs" (2) on gpu-b (`room` GPUs).

    The watcher quarantines GPU 0 of gpu-a: the node is cordoned and tainted, and the
    leader sizes the cohort without the node (as test_tf_gang), `released`: with the
    control plane's gang_release (its quarantine hook), else without. The watcher evicts
    the pod on that GPU (worker 0), Kubernetes' taint manager every other pod there:
    worker 1 gets DisruptionTarget (DeletionByTaintManager) and terminates for its grace
    period. Returns the other team's controllers and the taint manager.
    """
    gpu = {"gpus-per-worker": 1, "cpu": "1", "memory": "4Gi"}
    add_nodes(api, node("gpu-a", 2), node("cpu-0"))
    results, _ = run_action(ctx, state, "train", job="big", workers=2, **gpu)
    assert results["state"] == "running"
    add_nodes(api, node("gpu-b", room))
    if near:  # a job of the team on gpu-b only
        results, _ = run_action(ctx, state, "train", job="near", workers=1, **gpu)
        assert results["state"] == "running"
    other = _other_team(api)
    other.clock = fake_time.time  # Kueue's times are wall-clock times (conftest)
    assert _admitted(_other_job(api, other, "theirs", 2))
    on = {p["metadata"]["name"].split("-")[0]: p["spec"]["nodeName"] for p in training_pods(api)}
    assert on == {"big": "gpu-a", **({"near": "gpu-b"} if near else {})}
    controller.tick()  # Kueue sees the gang ready
    started = condition(controller.workload("big") or {}, "PodsReady")
    assert (started["status"], started["reason"]) == ("True", "Started")

    api.graceful_pods = True  # the terminating pod is seen, then kubelet's part (B5)
    taints = TaintEvictionController(api)
    taints.clock = fake_time.monotonic
    taints.tick()  # running since the cluster started: nothing tainted yet
    path = "/api/v1/nodes/gpu-a"
    quarantined = api.get_object(path)
    quarantined["status"]["conditions"].append(XID79)  # the watcher's, then its cordon
    quarantined["spec"]["unschedulable"] = True
    quarantined["spec"]["taints"].append(dict(QUARANTINE_TAINT))  # the leader's
    api.put_object(path, quarantined)
    size_cohort(api, released=["gpu-a"] if released else [])
    controller.evict("big", "worker", 0)
    taints.tick()
    return other, taints


def test_a_gang_a_quarantine_leaves_no_room_frees_its_quota_within_the_recovery_timeout(
    ctx, state, api, controller, fake_time
):
    """Issue 32's review, gap 7: a quarantined node's gang cannot fit elsewhere.

    Kueue keeps its Workload admitted while JobSet restarts the gang (K10), PodsReady
    False, WaitForRecovery; the control plane's waitForPodsReady.recoveryTimeout (3
    minutes, kueue.RECOVERY_TIMEOUT_MINUTES, not the 10 of pods-ready-timeout) then
    evicts it and frees its quota, and the other team's job that could not preempt it
    (its share would be above this team's: kueue v0.19.2 preemption.go fairPreemptions)
    is admitted.
    """
    # without the control plane's gang_release (a Workload it could not judge)
    other, taints = _quarantine_big(ctx, state, api, controller, fake_time, released=False)
    (left,) = [p for p in training_pods(api) if p["spec"]["nodeName"] == "gpu-a"]
    assert left["metadata"]["labels"][JOB_INDEX] == "1" and left["metadata"]["deletionTimestamp"]
    assert [
        c["reason"] for c in left["status"]["conditions"] if c["type"] == "DisruptionTarget"
    ] == ["DeletionByTaintManager"]
    for _ in range(3):
        controller.tick()
        taints.tick()
    assert not [p for p in training_pods(api) if p["spec"].get("nodeName") == "gpu-a"]
    big = controller.workload("big")
    assert big is not None and _admitted(big)
    recovering = condition(big, "PodsReady")
    assert (recovering["status"], recovering["reason"]) == ("False", "WaitForRecovery")
    # 3 GPUs left, this team's 2 and the other team's 2 admitted: no room for one more
    waiting = _other_job(api, other, "late", 1)
    assert not _admitted(waiting)

    fake_time.now += 170
    controller.tick()
    other.tick()
    assert _admitted(controller.workload("big") or {})
    assert not _admitted(other.workload("late") or {})

    fake_time.now += 10  # 3 minutes since PodsReady turned False
    controller.tick()
    other.tick()

    big = controller.workload("big")
    assert big is not None and not _admitted(big)
    evicted = condition(big, "Evicted")
    assert (evicted["status"], evicted["reason"]) == ("True", "PodsReadyTimeout")
    assert evicted["message"] == f"Exceeded the PodsReady timeout {NS}/{big['metadata']['name']}"
    assert "admission" not in big["status"]
    assert _admitted(other.workload("late") or {})
    status, _ = run_action(ctx, state, "job-status", job="big")
    assert (status["phase"], status["gpus-held"]) == ("Requeued", "0")
    assert "within Kueue's recovery timeout" in status["queue"]


def test_a_gang_a_quarantine_leaves_no_room_gives_its_quota_back_at_once(
    ctx, state, api, controller, fake_time
):
    """Issue 32 item 2 (review43b G3): the quota of a gang that no longer fits is free at once.

    The leader's quarantine hook deactivates "big" (4 GPUs held by admitted Workloads, 3
    left); Kueue evicts it, reason Deactivated (K16), and stops its JobSet; a later
    leader hook activates it again, and Kueue requeues it, reason Reactivated, without
    a backoff. The other team's "late" is admitted without waiting for recoveryTimeout.
    """
    other, _ = _quarantine_big(ctx, state, api, controller, fake_time, released=True)
    big = controller.workload("big")
    assert big is not None and big["spec"].get("active") is False
    controller.tick()
    big = controller.workload("big")
    assert big is not None and not _admitted(big) and "admission" not in big["status"]
    evicted = condition(big, "Evicted")
    assert (evicted["status"], evicted["reason"]) == ("True", "Deactivated")
    assert evicted["message"] == "The workload is deactivated"
    assert "requeueState" not in big["status"]
    assert not training_pods(api) or all(
        p["metadata"].get("deletionTimestamp") for p in training_pods(api)
    )

    leader_hook(api)  # Kueue evicted it: activated again
    controller.tick()
    big = controller.workload("big")
    assert big is not None and big["spec"]["active"] is True
    requeued = condition(big, "Requeued")
    assert (requeued["status"], requeued["reason"], requeued["message"]) == (
        "True",
        "Reactivated",
        "The workload was reactivated",
    )
    assert not _admitted(big)  # 1 GPU free: it waits, queued, holding nothing
    waiting = _other_job(api, other, "late", 1)
    assert _admitted(waiting)  # at once, not after recoveryTimeout
    leader_hook(api)
    assert "kueue-deactivated" not in leader_bag(api)


def test_a_gang_that_still_fits_after_a_quarantine_is_never_touched(
    ctx, state, api, controller, fake_time
):
    """A quarantine that leaves room for every admitted gang deactivates nothing.

    gpu-b has 4 GPUs: "theirs" (2) and "big" (2) still fit once gpu-a is gone; big keeps
    its admission and its gang restarts on gpu-b (K10).
    """
    _quarantine_big(ctx, state, api, controller, fake_time, released=True, room=4)
    assert "kueue-deactivated" not in leader_bag(api)
    for _ in range(3):
        controller.tick()
    big = controller.workload("big")
    assert big is not None and big["spec"].get("active", True) is True
    assert _admitted(big)
    assert not [c for c in big["status"]["conditions"] if c["type"] in ("Evicted", "Requeued")]
    assert {p["spec"].get("nodeName") for p in training_pods(api)} == {"gpu-b"}


UNCOUNTED = (
    "1 (not counted toward max-restarts: a drain, a GPU quarantine or an eviction took the "
    "job's pods back)"
)


def _settled_moves(ctx, state, api, controller, *, restarts: int) -> str:
    """The job "big" settles on gpu-b after `restarts` JobSet restarts; its `moves` then."""
    for _ in range(3):
        controller.tick()
    assert {p["spec"].get("nodeName") for p in training_pods(api)} == {"gpu-b"}
    assert jobset(api, "big")["status"].get("restarts", 0) == restarts
    results, _ = run_action(ctx, state, "job-status", job="big")
    return results["moves"]


def test_a_whole_gang_on_a_quarantined_node_counts_one_move_naming_the_node_and_the_fault(
    ctx, state, api, controller, fake_time
):
    """Issue 32 item 2 (rereview43b finding 3): the move outlives the pods that moved.

    "big" ran all on gpu-a: each Job replaces its own pods on gpu-b (podFailurePolicy
    Ignore on DisruptionTarget) and JobSet never restarts it, so its status counts
    nothing. The leader's quarantine hook recorded the move on the JobSet (gang_release):
    job-status says 1, with the node, the fault and when it began, after the pods are
    gone. The hook run again while the pods still leave adds nothing; a job of the team
    that had no pod there shows no move.
    """
    _quarantine_big(ctx, state, api, controller, fake_time, released=True, room=5, near=True)
    assert "kueue-deactivated" not in leader_bag(api)  # it fits: only the record
    where = (
        "off node gpu-a after a GPU fault at 2026-11-28T06:00:00Z: GPU 0 (GPU-7f3e9a2c): "
        "GPU has fallen off the bus; repair: reboot"
    )
    results, _ = run_action(ctx, state, "job-status", job="big")
    assert results["moves"] == f"1 so far, now off node gpu-a: GPU fault; {where}"
    assert [p["spec"]["nodeName"] for p in training_pods(api) if "big" in p["metadata"]["name"]]

    size_cohort(api, released=["gpu-a"])  # the same hook again: its pods still leave gpu-a

    assert _settled_moves(ctx, state, api, controller, restarts=0) == f"{UNCOUNTED}; {where}"
    results, _ = run_action(ctx, state, "job-status", job="near")
    assert "moves" not in results


def test_a_gang_whose_peer_stopped_before_the_leaders_hook_counts_its_move_once(
    ctx, state, api, controller, fake_time
):
    """rereview44b F9: JobSet's restart, not the record, counts this move.

    "big" (3 workers) all on gpu-a: the watcher evicts worker 0 (the bad GPU's), worker
    1's launcher sees the gang stop and exits 143 with no DisruptionTarget (its Job
    fails, FailJob) before the leader's quarantine hook, while worker 2 still runs
    there. JobSet restarts the gang (stoppedNotCounted) and counts it; the record says
    `restarted`, so job-status says 1, not 2.
    """
    gpu = {"gpus-per-worker": 1, "cpu": "1", "memory": "4Gi"}
    add_nodes(api, node("gpu-a", 3), node("cpu-0"))
    results, _ = run_action(ctx, state, "train", job="big", workers=3, **gpu)
    assert results["state"] == "running"
    add_nodes(api, node("gpu-b", 3))
    path = "/api/v1/nodes/gpu-a"
    quarantined = api.get_object(path)
    quarantined["status"]["conditions"].append(XID79)  # the watcher's, then its cordon
    quarantined["spec"]["unschedulable"] = True
    api.put_object(path, quarantined)
    controller.evict("big", "worker", 0)
    controller.end_pod("big", "worker", 1, "Failed", exit_code=143)
    quarantined = api.get_object(path)
    quarantined["spec"]["taints"].append(dict(QUARANTINE_TAINT))  # the leader's hook
    api.put_object(path, quarantined)
    size_cohort(api, released=["gpu-a"])

    assert _settled_moves(ctx, state, api, controller, restarts=1) == (
        f"{UNCOUNTED}; off node gpu-a after a GPU fault at 2026-11-28T06:00:00Z: "
        "GPU 0 (GPU-7f3e9a2c): GPU has fallen off the bus; repair: reboot"
    )


# -- train dry-run=true agrees with Kueue (issue 31 item 6) ---------------------------------


def _dry_then_train(ctx, state, workers: int, job: str) -> tuple[str, dict]:
    """dry-run's answer, then what the fake Kueue does with the same job on the same state."""
    params = {"gpus-per-worker": 1, "cpu": "1", "memory": "4Gi"}
    dry, _ = run_action(
        ctx, state, "train", job=job, workers=workers, **params, **{"dry-run": True}
    )
    real, _ = run_action(ctx, state, "train", job=job, workers=workers, **params)
    return dry["dry-run"], real


def test_dry_run_says_admit_now_on_an_idle_default_cluster_and_kueue_admits_at_once(
    ctx, state, api, controller, fake_time
):
    """The team holds no quota of its own: Kueue admits by borrowing the idle cohort.

    kueue v0.19.2 flavorassigner.go fitsResourceQuota: Fit when the request is within the
    ClusterQueue's Available (resource_node.go available: what the cohort has left).
    """
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    _other_team(api)
    said, real = _dry_then_train(ctx, state, 2, "now")
    assert said == (
        "admit now: within what the team may take now (cpu: asks 2 of 16 in flavor cpu; "
        "memory: asks 8Gi of 128Gi in flavor cpu; nvidia.com/gpu: asks 2 of 4 in flavor "
        "gpu-nvidia-a10g); 0 workloads of the team waiting"
    )
    assert real["state"] == "running"


def test_dry_run_says_wait_with_the_numbers_while_another_team_uses_the_gpus(
    ctx, state, api, controller, fake_time
):
    """team-other holds its guarantee of 3 GPUs, the cohort lends the team the 4th.

    A second job waits: Kueue preempts neither for it (team-other is within its nominal
    quota, so no fair-sharing target: kueue v0.19.2 preemption.go, fairsharing
    ordering.go; and the team has no guarantee to reclaim).
    """
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    other = _other_team(api, {"gpu-quota": "3"})
    assert _admitted(_other_job(api, other, "theirs", 3))
    said, real = _dry_then_train(ctx, state, 1, "one")
    assert said.startswith("admit now: ")
    assert "nvidia.com/gpu: asks 1 of 1 in flavor gpu-nvidia-a10g" in said
    assert real["state"] == "running"
    said, real = _dry_then_train(ctx, state, 1, "two")
    assert said == (
        "wait: nvidia.com/gpu: asks 1 but the team may take 0 now in flavor gpu-nvidia-a10g "
        "(its unused nominal 0 + what the cohort lends now 0): admitted once jobs holding 1 "
        "finish or Kueue preempts them; 0 workloads of the team waiting"
    )
    assert real["state"].startswith("queued: ")
    other.tick()
    controller.tick()
    assert not _admitted(controller.workload("two") or {})
    results, _ = run_action(ctx, state, "job-status", job="two")
    assert results["quota"]["nvidia-com-gpu"].startswith(
        "job asks 1; gpu-nvidia-a10g: team nominal 0, uses 1, borrows 1, the cohort lends now 0;"
    )


def test_dry_run_counts_only_what_a_lending_limit_lets_the_cohort_lend(
    ctx, state, api, controller, fake_time
):
    """team-other keeps 1 of its 2 GPUs (lendingLimit 1): the team may take 3 of 4, never 4.

    kueue v0.19.2 resource_node.go: a member's localQuota (nominal - lendingLimit) stays
    out of the cohort's SubtreeQuota (accumulateFromChild), so potentialAvailable and
    available of the other members leave it out.
    """
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    _other_team(api, {"gpu-quota": "2"})
    path = f"{KUEUE}/clusterqueues/team-{OTHER}"
    cq = api.get_object(path)
    gpus = cq["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]
    assert gpus == {"name": "nvidia.com/gpu", "nominalQuota": "2"}
    gpus["lendingLimit"] = "1"
    api.put_object(path, cq)
    params = {"gpus-per-worker": 1, "cpu": "1", "memory": "4Gi"}
    dry, _ = run_action(ctx, state, "train", job="all", workers=4, **params, **{"dry-run": True})
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, state, "train", job="all", workers=4, **params)
    refusal = (
        "job 'all' can never be admitted: its 4 worker pods need 4 nvidia.com/gpu of one "
        "flavor but the cohort gpu-k8s can give team-tensorflow at most 3 (flavor "
        "gpu-nvidia-a10g: the cohort's own 2 + its ClusterQueues' nominal 2, less 1 kept "
        "by their lendingLimit)"
    )
    assert refusal in failed.value.message
    assert dry["dry-run"].startswith(f"never: {refusal}")
    said, real = _dry_then_train(ctx, state, 3, "most")
    assert said.startswith("admit now: ")
    assert "nvidia.com/gpu: asks 3 of 3 in flavor gpu-nvidia-a10g" in said
    assert real["state"] == "running"
