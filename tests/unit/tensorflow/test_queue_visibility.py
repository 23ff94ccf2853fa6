"""Why a job waits, in numbers: Kueue's visibility API, the team's quota (issue 31 item 6)."""

from __future__ import annotations

import pytest
from conftest import NS, TOKEN, add_nodes, job_objects, node, run_action

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes import kueue_visibility

VIS = f"/apis/{kueue_visibility.GROUP}/{kueue_visibility.VERSION}"
PENDING = f"{VIS}/namespaces/{NS}/localqueues/training/pendingworkloads"
# a Workload holds one pod set at least (Kueue v0.19.2 CRD: spec.podSets minItems 1)
POD_SET = {
    "name": "main",
    "count": 1,
    "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
}


def _train(ctx, state, job: str, workers: int, priority: str = "normal"):
    # cpu and memory given: the numbers below are about the queue, not the GPU defaults
    params = {"gpus-per-worker": 1, "priority": priority, "cpu": "1", "memory": "4Gi"}
    return run_action(ctx, state, "train", job=job, workers=workers, **params)


def test_job_status_gives_kueues_position_reason_and_numbers(ctx, state, api, controller):
    """A queued job's position is Kueue's, with Kueue's reason and the numbers behind it.

    Priorities set the order (equal ones created in the same second go by UID, as
    cluster_queue.go baseCompareFunc does).
    """
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    assert _train(ctx, state, "big", 4, "high")[0]["state"] == "running"
    for job, priority in (("first", "normal"), ("second", "low")):
        assert _train(ctx, state, job, 2, priority)[0]["state"].startswith("queued: position")
    api.requests.clear()
    results, _ = run_action(ctx, state, "job-status", job="second")
    assert ("GET", PENDING) in api.requests  # the position is Kueue's own
    assert results["phase"] == "Queued"
    assert results["queue"].startswith("position 2: couldn't assign flavors to pod set worker:")
    assert results["quota"]["nvidia-com-gpu"] == (
        "job asks 2; gpu-nvidia-a10g: team nominal 0, uses 4, borrows 4, the cohort lends now "
        "0; Kueue: 2 more needed than the team's unused quota and what the cohort lends now"
    )
    # the three jobs' TensorBoards (512Mi each) are in the team's quota too: Kueue admits
    # every pod of its namespace (issue 29 item 6)
    assert results["quota"]["memory"] == (
        "job asks 8Gi; cpu: team nominal 0Gi, uses 17.5Gi, borrows 17.5Gi, the cohort lends"
        " now 110.5Gi"
    )


def test_the_visibility_api_orders_as_kueue_and_pages(api, controller):
    """Priority first, then creation time; positions count from 0 (types.go)."""
    add_nodes(api, node("gpu-0", 1))
    ws = "/apis/kueue.x-k8s.io/v1beta2"
    api.put_object(f"{ws}/namespaces/{NS}/localqueues/training", {"spec": {"clusterQueue": "q"}})
    api.put_object(f"{ws}/clusterqueues/q", {"spec": {"resourceGroups": []}})
    for name, priority, created in (
        ("old-low", 100, "2026-11-01T00:00:00Z"),
        ("new-high", 10000, "2026-11-02T00:00:00Z"),
        ("mid", 1000, "2026-11-03T00:00:00Z"),
    ):
        api.put_object(
            f"{ws}/namespaces/{NS}/workloads/{name}",
            {
                "metadata": {"creationTimestamp": created},
                "spec": {"queueName": "training", "priority": priority, "podSets": [POD_SET]},
                "status": {"conditions": []},
            },
        )
    summary = kueue_visibility.summary(api, PENDING, {})
    assert [(i["metadata"]["name"], i["positionInLocalQueue"]) for i in summary["items"]] == [
        ("new-high", 0),
        ("mid", 1),
        ("old-low", 2),
    ]
    paged = kueue_visibility.summary(api, PENDING, {"offset": "1", "limit": "1"})
    assert [i["metadata"]["name"] for i in paged["items"]] == ["mid"]


def test_a_team_reads_its_own_queue_and_never_another_teams(api, controller):
    """V5: the grant's `localqueues/pendingworkloads` get holds in its namespace only."""
    add_nodes(api, node("gpu-0", 1))
    api.put_object("/api/v1/namespaces/other", {"metadata": {"name": "other"}})
    ws = "/apis/kueue.x-k8s.io/v1beta2"
    api.put_object(f"{ws}/namespaces/{NS}/localqueues/training", {"spec": {"clusterQueue": "q"}})
    api.put_object(f"{ws}/namespaces/other/localqueues/training", {"spec": {"clusterQueue": "q"}})
    kube = Kube.from_kubeconfig(api.kubeconfig(TOKEN), retries=0)
    assert kube.request("GET", PENDING) == {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
        "metadata": {"creationTimestamp": None},
        "items": [],
    }
    with pytest.raises(KubeError) as refused:
        kube.request("GET", PENDING.replace(f"/namespaces/{NS}/", "/namespaces/other/"))
    assert refused.value.status == 403
    with pytest.raises(KubeError) as refused:
        kube.request("GET", f"{VIS}/clusterqueues/q/pendingworkloads")
    assert refused.value.status == 403


def test_dry_run_says_admit_now_wait_or_never_and_writes_nothing(ctx, state, api, controller):
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    before = {o["metadata"]["name"] for o in job_objects(api)}
    writes = len([r for r in api.requests if r[0] != "GET"])

    def dry(workers: int, config: dict | None = None) -> dict:
        params = {"job": "try", "workers": workers, "gpus-per-worker": 1, "dry-run": True}
        params |= {"cpu": "1", "memory": "4Gi"}
        results, _ = run_action(ctx, state, "train", **params)
        return results

    now = dry(2)
    assert now["created"] == "false"
    # the team holds no quota of its own but the idle cohort lends it the cluster: Kueue
    # admits at once (the earlier answer, wait, counted the team's own quota only)
    assert now["dry-run"] == (
        "admit now: within what the team may take now (cpu: asks 2 of 16 in flavor cpu; "
        "memory: asks 8Gi of 128Gi in flavor cpu; nvidia.com/gpu: asks 2 of 4 in flavor "
        "gpu-nvidia-a10g); 0 workloads of the team waiting"
    )
    assert now["quota"]["nvidia-com-gpu"] == (
        "job asks 2; gpu-nvidia-a10g: team nominal 0, uses 0, borrows 0, the cohort lends now 4"
    )
    assert dry(8)["dry-run"].startswith("never: ")
    assert {o["metadata"]["name"] for o in job_objects(api)} == before
    after = [r for r in api.requests if r[0] != "GET"]
    assert not [r for r in after[writes:] if "/jobsets" in r[1] or "/workloads" in r[1]]


def test_the_team_queue_counts_its_jobs_as_kueue_and_dry_run_reads_them(
    ctx, state, api, controller
):
    """Kueue v0.19.2's ClusterQueue status (clusterqueue_controller.go updateCqStatusIfChanged).

    reservingWorkloads and admittedWorkloads count the jobs holding quota, pendingWorkloads
    the waiting ones, condition Active says whether it admits; without the visibility API,
    dry-run's count of waiting jobs is pendingWorkloads, and an inactive ClusterQueue (a
    ResourceFlavor it names gone) makes it wait with Kueue's message.
    """
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    assert _train(ctx, state, "big", 4, "high")[0]["state"] == "running"
    for job in ("first", "second"):
        assert _train(ctx, state, job, 2)[0]["state"].startswith("queued: position")
    cq = api.get_object(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-{NS}")
    status = cq["status"]
    # the job and the three TensorBoards' pods, each a Workload of Kueue's pod integration
    # (issue 29 item 6)
    assert (status["reservingWorkloads"], status["admittedWorkloads"]) == (4, 4)
    assert status["pendingWorkloads"] == 2
    active = {k: v for k, v in status["conditions"][0].items() if k != "lastTransitionTime"}
    assert active == {
        "type": "Active",
        "status": "True",
        "reason": "Ready",
        "message": "Can admit new workloads",
        "observedGeneration": cq["metadata"]["generation"],
    }
    del api.aggregated[VIS]  # the visibility API not served: 404
    params = {"job": "try", "workers": 1, "gpus-per-worker": 1, "dry-run": True}
    results, _ = run_action(ctx, state, "train", **params, cpu="1", memory="4Gi")
    assert results["dry-run"].endswith("; 2 workloads of the team waiting")
    flavor = status["flavorsUsage"][-1]["name"]
    api.delete_object(f"/apis/kueue.x-k8s.io/v1beta2/resourceflavors/{flavor}")
    controller.tick()
    results, _ = run_action(ctx, state, "train", **params, cpu="1", memory="4Gi")
    assert results["dry-run"] == (
        "wait: the team's ClusterQueue is inactive: Can't admit new workloads: references "
        f"missing ResourceFlavor(s): {flavor}.; 2 workloads of the team waiting"
    )
