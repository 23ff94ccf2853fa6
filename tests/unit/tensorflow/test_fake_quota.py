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
import serving
from charm_modules import load
from conftest import CTX, JOBSETS, NS, add_nodes, jobset, node

from fakes import kube_quota

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
    names = {"count_pods": "count/pods", "count_jobs_batch": "count/jobs.batch"}
    lowered = {**quota["spec"]["hard"], **{names.get(k, k): str(v) for k, v in hard.items()}}
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


def test_a_jobsets_job_past_count_jobs_is_refused_and_retried(api, controller):
    """JobSet's Jobs pass `count/jobs.batch` as any create (fakes/batch.py J1).

    A ps job is three Jobs (chief, ps, worker); with room for one, the chief's is made
    and the parameter server's refused: JobCreationFailed on the JobSet with JobSet's
    message around the plugin's, the worker's not tried (the reconcile ends at the first
    refusal), again at each tick. Once the count is raised, both are made.
    """
    controller.expect_refusals = True
    add_nodes(api, node("cpu-0"))
    request = params.TrainRequest(job="ps", strategy="ps", workers=1, ps=1, gpus_per_worker=0)
    js = manifests.jobset(request, CTX)
    js["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    controller.managed = False
    _limit(api, count_jobs_batch=1)
    api.put_object(f"{JOBSETS}ps", js)
    controller.tick()
    controller.tick()
    jobs = [j["metadata"]["name"] for j in api.objects(f"/apis/batch/v1/namespaces/{NS}/jobs/")]
    assert jobs == ["ps-chief-0"]
    refusal = (
        'job "ps-ps-0" creation failed with error: jobs.batch "ps-ps-0" is forbidden:'
        " exceeded quota: gpu-k8s-object-counts, requested: count/jobs.batch=1, used:"
        " count/jobs.batch=1, limited: count/jobs.batch=1"
    )
    assert set(controller.refused) == {refusal} and len(controller.refused) >= 2  # retried
    notes = [
        (e["reason"], e["note"])
        for e in api.objects(f"/apis/events.k8s.io/v1/namespaces/{NS}/events/")
        if e["regarding"]["name"] == "ps"
    ]
    assert notes == [("JobCreationFailed", refusal)]  # a series, not one Event per try
    _limit(api, count_jobs_batch=3)
    controller.tick()
    jobs = [j["metadata"]["name"] for j in api.objects(f"/apis/batch/v1/namespaces/{NS}/jobs/")]
    assert sorted(jobs) == ["ps-chief-0", "ps-ps-0", "ps-worker-0"]


def test_a_jobsets_headless_service_past_services_stops_its_reconcile(api, controller):
    """J8: JobSet makes its subdomain's headless Service first; refused, no Job either.

    With `services` at what is used, the Service is refused (HeadlessServiceCreationFailed,
    the plugin's message) and the reconcile ends before any Job (jobset v0.12.0 returns
    the error). With room, the Service comes, as JobSet writes it, then the Jobs.
    """
    controller.expect_refusals = True
    _limit(api, services=0)
    _start(api, controller, workers=1)
    controller.tick()
    jobs = f"/apis/batch/v1/namespaces/{NS}/jobs/"
    assert api.objects(jobs) == []
    refusal = (
        'services "fp" is forbidden: exceeded quota: gpu-k8s-object-counts, requested:'
        " services=1, used: services=0, limited: services=0"
    )
    assert set(controller.refused) == {refusal}
    notes = [
        (e["reason"], e["note"])
        for e in api.objects(f"/apis/events.k8s.io/v1/namespaces/{NS}/events/")
        if e["regarding"]["name"] == "fp"
    ]
    assert notes == [("HeadlessServiceCreationFailed", refusal)]
    _limit(api, services=1)
    controller.tick()
    service = api.get_object(f"/api/v1/namespaces/{NS}/services/fp")
    uid = jobset(api, "fp")["metadata"]["uid"]
    assert service["metadata"]["ownerReferences"][0]["uid"] == uid
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "fp"}
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert [j["metadata"]["name"] for j in api.objects(jobs)] == ["fp-worker-0"]


# -- the default counts (team_quota.COUNTS) hold the workload they are sized for ----------

team_quota = load("kubernetes-control-plane", "team_quota")
# What the cluster's controllers store for what the charm applies, by kind: (group, resource)
_RESOURCES = {
    "JobSet": ("jobset.x-k8s.io", "jobsets"),
    "Job": ("batch", "jobs"),
    "Pod": ("", "pods"),
    "Deployment": ("apps", "deployments"),
    "ReplicaSet": ("apps", "replicasets"),
    "Service": ("", "services"),
    "ConfigMap": ("", "configmaps"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
    "Workload": ("kueue.x-k8s.io", "workloads"),
}


def _stored(manifest: dict, phase: str = "Running", history: int = 1) -> list[tuple]:
    """(group, resource, object) of `manifest` and of what the controllers make of it.

    A JobSet: its Kueue Workload (one per job, K1), its headless Service (jobset v0.12.0
    jobset_controller.go createHeadlessSvcIfNecessary, with network.enableDNSHostnames),
    a Job per replicated Job's replica (J1) and each Job's `completions` pods, in `phase`.
    A Deployment: `history` ReplicaSets (the current one and those kept by
    revisionHistoryLimit), `replicas` pods and a Workload per pod (Kueue's pod
    integration, K12). Anything else: itself.
    """

    def obj(kind: str, **status: str) -> tuple:
        return (*_RESOURCES[kind], {"kind": kind, "status": status})

    out = [(*_RESOURCES[manifest["kind"]], manifest)]
    spec = manifest.get("spec") or {}
    if manifest["kind"] == "JobSet":
        out.append(obj("Workload"))
        if (spec.get("network") or {}).get("enableDNSHostnames"):
            out.append(obj("Service"))
        for rjob in spec["replicatedJobs"]:
            for _ in range(rjob.get("replicas", 1)):
                out.append(obj("Job"))
                pods = rjob["template"]["spec"]["completions"]
                out += [obj("Pod", phase=phase) for _ in range(pods)]
    if manifest["kind"] == "Deployment":
        out += [obj("ReplicaSet") for _ in range(history)]
        for _ in range(spec.get("replicas", 1)):
            out += [obj("Pod", phase="Running"), obj("Workload")]
    return out


def _sized_workload() -> list[tuple]:
    """What a team holds at once at the sizes team_quota.py names.

    team_quota.JOBS jobs: two of the largest (MAX_WORKERS workers, a chief and a
    parameter server), one running and one being stopped (its pods terminating, still
    live), and the others small, finished and kept until `job-ttl` (their pods Succeeded
    and stored), each with its code, TensorBoard and policies; SERVED models served with
    SERVING_REPLICAS replicas each, re-served often enough to keep their whole history.
    """
    stored = []
    for n in range(team_quota.JOBS):
        large = n < 2
        request = params.TrainRequest(
            job=f"j{n}",
            strategy="ps",
            workers=team_quota.MAX_WORKERS if large else 1,
            ps=1,
            gpus_per_worker=0,
        )
        for manifest in manifests.manifests(request, CTX, {"train.py": ""}):
            stored += _stored(manifest, "Running" if large else "Succeeded")
    for n in range(team_quota.SERVED):
        served = serving.ServeParams(job=f"m{n}", replicas=team_quota.SERVING_REPLICAS)
        for manifest in serving.manifests(served, CTX, "tensorflow/serving:2.20.0"):
            stored += _stored(manifest, history=team_quota.HISTORY + 1)
    return stored


def test_the_default_counts_hold_the_workload_they_are_sized_for(api):
    """The namespace's quota as the control plane writes it admits the sized workload.

    What `_sized_workload` stores (the charm's own manifests, expanded as JobSet, the Job
    and Deployment controllers and Kueue store them) stays within every count, as the
    quota controller counts it (kube_quota.status), and one more pod is still admitted
    (a replacement).
    The table before rereview43a F1 (`count/pods` no more than `pods`) refused it: the
    finished jobs' kept pods filled it.
    """
    quota = api.get_object(QUOTA)
    assert quota["spec"]["hard"] == {k: str(v) for k, v in team_quota.COUNTS.items()}
    workload = _sized_workload()
    pods = [o for g, r, o in workload if r == "pods"]
    assert len(pods) - sum(p["status"]["phase"] == "Succeeded" for p in pods) == (
        2 * (team_quota.MAX_WORKERS + 2)
        + team_quota.JOBS
        + team_quota.SERVED * team_quota.SERVING_REPLICAS
    )
    status = kube_quota.status(quota, workload)
    used = {name: int(n) for name, n in status["used"].items()}
    over = {n: (used[n], team_quota.COUNTS[n]) for n in used if used[n] > team_quota.COUNTS[n]}
    assert over == {}
    kube_quota.admit([{**quota, "status": status}], "", "pods", "one-more", {"kind": "Pod"})

    before = {**quota["spec"]["hard"], "count/pods": quota["spec"]["hard"]["pods"]}
    old = {**quota, "spec": {"hard": before}}
    assert int(kube_quota.status(old, workload)["used"]["count/pods"]) > int(before["pods"])
