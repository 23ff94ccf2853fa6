"""The fake controllers' pods pass the team's object counts (fakes/batch.py B8, B10).

kube-apiserver's ResourceQuota plugin admits every create, a controller's as much as a
team's (k8s.io/apiserver pkg/admission/plugin/resourcequota/controller.go CheckRequest).
The team's namespace holds the control plane's gpu-k8s-object-counts (store_grant, as
addons.apply_team_quotas writes it): `pods` counts the pods not finished, `count/pods`
every pod stored (kubernetes pkg/quota/v1/evaluator/core/pods.go). A Job whose pod is
refused records FailedCreate and tries again; it neither fails nor makes other pods
meanwhile (job_controller.go manageJob's slow start). Before, the fake controllers stored
their pods past any count (rereview43a F1).
"""

from __future__ import annotations

import manifests
import params
from conftest import CLAIM, JOBSETS, NS, add_nodes, jobset, node

CTX = manifests.Context(
    namespace=NS,
    app="tensorflow",
    claim=CLAIM,
    default_image="tensorflow/tensorflow:2.21.0",
    tensorboard_image="tensorflow/tensorflow:2.21.0",
)
QUOTA = f"/api/v1/namespaces/{NS}/resourcequotas/gpu-k8s-object-counts"
PODS = f"/api/v1/namespaces/{NS}/pods/"


def _start(api, controller, workers: int) -> None:
    """The charm's JobSet `fp` of `workers` CPU workers, run by the fake controllers.

    Without Kueue (as test_fake_jobset: in a namespace it manages, its admission would
    come first); the quota is the namespace's all the same.
    """
    add_nodes(api, node("cpu-0"))
    js = manifests.jobset(params.TrainRequest(job="fp", workers=workers, gpus_per_worker=0), CTX)
    js["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    controller.managed = False
    api.put_object(f"{JOBSETS}fp", js)


def _limit(api, **hard: int) -> None:
    """The operator lowers counts (`team-object-counts`): what is stored stays."""
    quota = api.get_object(QUOTA)
    lowered = {**quota["spec"]["hard"], **{k.replace("_", "/"): str(v) for k, v in hard.items()}}
    api.put_object(QUOTA, {**quota, "spec": {"hard": lowered}})


def _workers(api) -> list[tuple[str, str]]:
    """(hostname, phase) of each of the job's pods stored, sorted."""
    return sorted(
        (p["spec"]["hostname"], p["status"].get("phase", ""))
        for p in api.objects(PODS)
        if p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == "fp"
    )


def _failed_creates(api) -> list[str]:
    events = api.objects(f"/api/v1/namespaces/{NS}/events/")
    return [
        e["message"]
        for e in events
        if e["reason"] == "FailedCreate" and e["involvedObject"]["name"] == "fp-worker-0"
    ]


def _refusal(used: str, name: str = "pods") -> str:
    return (
        f"is forbidden: exceeded quota: gpu-k8s-object-counts, requested: {name}=1,"
        f" used: {name}={used}, limited: {name}={used}"
    )


def test_a_replacement_past_the_live_pod_count_waits_until_a_pod_finishes(api, controller):
    """`pods` counts live pods: refused (FailedCreate, tried each tick) until one finishes.

    Three workers run when the operator lowers `pods` to 2: they keep running. Worker 1
    is evicted (DisruptionTarget: the podFailurePolicy replaces it uncounted); its
    replacement would be the third live pod, refused with the plugin's message on each
    try, the Job and JobSet meanwhile neither failed nor restarted. Worker 2 succeeding
    frees a live count: the replacement comes at the next tick.
    """
    controller.expect_refusals = True
    _start(api, controller, workers=3)
    controller.tick()
    assert _workers(api) == [(f"fp-worker-0-{i}", "Running") for i in range(3)]
    _limit(api, pods=2)
    controller.end_pod("fp", "worker", 1, "Failed", disrupted=True, exit_code=143)
    controller.tick()
    controller.tick()
    running = ("fp-worker-0-0", "Running"), ("fp-worker-0-2", "Running")
    assert _workers(api) == [running[0], ("fp-worker-0-1", "Failed"), running[1]]
    assert len(controller.refused) == 2  # one try per tick, each a new generated name
    assert sorted(_failed_creates(api)) == sorted(
        f"Error creating: {r}" for r in controller.refused
    )
    for refused in controller.refused:
        assert refused.startswith('pods "fp-worker-0-1-') and refused.endswith(_refusal("2"))
    job = api.get_object(f"/apis/batch/v1/namespaces/{NS}/jobs/fp-worker-0")
    assert [c["type"] for c in (job.get("status") or {}).get("conditions") or []] == []
    status = jobset(api, "fp").get("status") or {}
    assert int(status.get("restarts", 0)) == 0
    assert not [c for c in status.get("conditions") or [] if c["status"] == "True"]

    controller.end_pod("fp", "worker", 2, "Succeeded")
    assert api.get_object(QUOTA)["status"]["used"]["pods"] == "1"
    controller.tick()
    assert _workers(api) == [  # index 1 again
        ("fp-worker-0-0", "Running"),
        ("fp-worker-0-1", "Failed"),
        ("fp-worker-0-1", "Running"),
        ("fp-worker-0-2", "Succeeded"),
    ]
    assert len(controller.refused) == 2
    assert api.get_object(QUOTA)["status"]["used"]["pods"] == "2"


def test_a_finished_pod_still_counts_toward_count_pods(api, controller):
    """`count/pods` counts every pod stored: a finished one holds it until deleted.

    The evicted worker's pod ended (no longer a live pod: `pods` has room), but it is
    still stored, so its replacement would pass `count/pods`: refused, naming only that
    count. Deleting the finished pod (as JobSet's ttl deletes the job's) frees it.
    """
    controller.expect_refusals = True
    _start(api, controller, workers=2)
    controller.tick()
    _limit(api, count_pods=2)
    controller.end_pod("fp", "worker", 1, "Failed", disrupted=True, exit_code=143)
    controller.tick()
    used = api.get_object(QUOTA)["status"]["used"]
    assert (used["pods"], used["count/pods"]) == ("1", "2")
    (refused,) = controller.refused
    assert refused.startswith('pods "fp-worker-0-1-')
    assert refused.endswith(_refusal("2", "count/pods"))
    (ended,) = [p for p in api.objects(PODS) if p["status"].get("phase") == "Failed"]
    api.delete_object(f"{PODS}{ended['metadata']['name']}")
    controller.tick()
    assert _workers(api) == [("fp-worker-0-0", "Running"), ("fp-worker-0-1", "Running")]
    assert len(controller.refused) == 1


def test_a_refused_job_tries_in_slow_start_batches(api, controller):
    """B10: batches of 1, 2, 4; after a batch with a refusal, no more that tick.

    Five workers under `pods` = 2: the first batch (one pod) and the second (two pods,
    the second refused) are tried; the remaining two are not, one FailedCreate only.
    The next tick tries one pod (a batch of one, refused) and stops again.
    """
    controller.expect_refusals = True
    _limit(api, pods=2)
    _start(api, controller, workers=5)
    controller.tick()
    assert len(_workers(api)) == 2
    assert len(controller.refused) == 1
    controller.tick()
    assert len(_workers(api)) == 2
    assert len(controller.refused) == 2
    assert len(_failed_creates(api)) == 2
