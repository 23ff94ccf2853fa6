"""Nothing of a team runs outside Kueue; a job past its deadline is stopped (issues 29, 31).

The control plane runs Kueue with `manageJobsWithoutQueueName` over the teams' namespaces
(its kueue.configure, which `fakes.addons.install_kueue` writes into the fake's
kueue-manager-config, and `fakes.batch` reads as kueue-controller-manager does): a batch
Job the team's identity creates without a queue is suspended and never admitted, one in
its queue waits for its quota, and the charm's own Jobs name the queue and run.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
import yaml
from charm_modules import load
from conftest import NS, TOKEN, add_nodes, control_plane_reads, jobset, node, run_action
from literals import NAMESPACED_RULES, cluster_rules

from fakes.addons import join_team, put_gpu_flavors
from fakes.batch import KUEUE_CONFIG_MAP, SIGTERM_IGNORED, BatchControllers
from fakes.kube_grants import consumer_grant, store_grant

JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists"}


def _team_creates_job(
    api,
    name: str,
    labels: dict | None = None,
    cpu: str = "1",
    *,
    namespace: str = NS,
    token: str = TOKEN,
    gpus: int = 0,
    pods: int = 1,
    spec: dict | None = None,
    annotations: dict | None = None,
    pod: dict | None = None,
) -> dict:
    """A plain batch Job, POSTed with the team's own token (its kube-api grant).

    `pods` > 1: an Indexed Job of that many pods at once; `gpus` per pod, tolerating the
    GPU nodes' taint as the charm's pods do; `spec`: more of the Job's spec, `pod`: of its
    pods' spec.
    """
    many = {"completionMode": "Indexed", "completions": pods, "parallelism": pods}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            **(many if pods > 1 else {}),
            "podReplacementPolicy": "Failed",  # gpu-k8s-consumer-terminating-pods-bounded
            **(spec or {}),
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {**_pod_spec(gpus, cpu), **(pod or {})},
            },
        },
    }
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    status, _, body, *_ = api.handle("POST", path, headers, json.dumps(job).encode())
    assert status == 201, body
    return json.loads(body)


def _pod_spec(gpus: int, cpu: str = "1", restart: str = "Never") -> dict:
    """A pod spec Pod Security `restricted` admits, asking `gpus` GPUs (tolerating their taint)."""
    return {
        "restartPolicy": restart,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "miner",
                "image": "tensorflow/tensorflow:2.21.0",
                "command": ["python3", "-c", "pass"],
                "resources": {
                    "requests": {"cpu": cpu, "memory": "1Gi"},
                    **({"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}),
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        **({"tolerations": [GPU_TOLERATION]} if gpus else {}),
    }


def _pods(api, job: str) -> list[dict]:
    return [
        p
        for p in api.objects(f"/api/v1/namespaces/{NS}/pods/")
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job
    ]


def _reserved(workload: dict) -> dict:
    return next(c for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved")


def test_a_job_without_a_queue_stays_suspended_and_never_runs(ctx, state, api, controller):
    """Issue 29 leftover 3: it ran at once, outside the team's quota (Kueue left it alone)."""
    add_nodes(api, node("cpu-0"))
    ctx.run(ctx.on.update_status(), state)  # the team's LocalQueue exists
    created = _team_creates_job(api, "miner")
    assert created["spec"]["suspend"] is True  # Kueue's Job webhook, on create
    for _ in range(3):
        controller.tick()
    assert api.get_object(f"{JOBS}/miner")["spec"]["suspend"] is True
    assert _pods(api, "miner") == []
    workload = controller.workload("miner", kind="Job")
    assert workload is not None and "queueName" not in workload["spec"]
    assert _reserved(workload)["message"] == "LocalQueue  doesn't exist"


def test_a_consumer_without_local_queues_has_its_gpu_job_held(api, controller):
    """Issue 29 review item 1: a consumer that asked for no LocalQueues ran GPU Jobs at once.

    Its namespace lacked Kueue's label, so its Job ran outside every quota (and the
    cohort, counting Job pods as Kueue's, kept its GPUs).

    Another kube-api consumer asks only for batch Jobs (no LocalQueues); its grant, as the
    control plane makes it, labels its namespace managed: Kueue's webhook suspends the Job
    it creates with its own token and its Workload names no queue, so it never runs.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    jobs = [{"api-groups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}]
    store_grant(api, consumer_grant("miner", "miner", jobs, []), "miner-token")
    miner = BatchControllers(api, "miner")
    created = _team_creates_job(api, "gpus", namespace="miner", token="miner-token", gpus=4)
    assert created["spec"].get("suspend") is True
    for _ in range(3):
        miner.tick()
    held = api.get_object("/apis/batch/v1/namespaces/miner/jobs/gpus")
    assert held["spec"]["suspend"] is True
    assert api.objects("/api/v1/namespaces/miner/pods/") == []
    workload = miner.workload("gpus", kind="Job")
    assert workload is not None and "queueName" not in workload["spec"]
    assert _reserved(workload)["message"] == "LocalQueue  doesn't exist"


@pytest.mark.parametrize("without_queue", [False, True])
def test_an_empty_queue_label_names_no_queue(api, controller, without_queue):
    """Kueue v0.19.2 reads the label's value (jobframework QueueNameForObject), "" naming none.

    With manageJobsWithoutQueueName off (upstream's default) it leaves such a Job alone
    (reconciler.go "queue-name label is not set, ignoring the job"); on (the control
    plane's), it holds it as one without the label.
    """
    add_nodes(api, node("cpu-0"))
    key = "controller_manager_config.yaml"
    config = yaml.safe_load(api.get_object(KUEUE_CONFIG_MAP)["data"][key])
    config["manageJobsWithoutQueueName"] = without_queue
    api.put_object(KUEUE_CONFIG_MAP, {"data": {key: yaml.dump(config)}})
    created = _team_creates_job(api, "blank", {"kueue.x-k8s.io/queue-name": ""})
    assert bool(created["spec"].get("suspend")) is without_queue  # Kueue's Job webhook
    controller.tick()
    workload = controller.workload("blank", kind="Job")
    if without_queue:
        assert _pods(api, "blank") == [] and "queueName" not in workload["spec"]
    else:
        assert workload is None and [p["status"]["phase"] for p in _pods(api, "blank")] == [
            "Running"
        ]


def test_a_job_in_the_teams_queue_waits_for_its_quota(ctx, state, api, controller):
    """Kueue admits a plain Job against the team's cpu/memory quota, as a JobSet."""
    add_nodes(api, node("cpu-0"))  # 8 CPUs: the cohort the team borrows from
    ctx.run(ctx.on.update_status(), state)  # the team's LocalQueue
    queue = {"kueue.x-k8s.io/queue-name": "training"}
    _team_creates_job(api, "small", queue, cpu="6")
    controller.tick()
    _team_creates_job(api, "large", queue, cpu="4")
    controller.tick()
    assert api.get_object(f"{JOBS}/small")["spec"]["suspend"] is False
    assert [p["status"]["phase"] for p in _pods(api, "small")] == ["Running"]
    assert api.get_object(f"{JOBS}/large")["spec"]["suspend"] is True
    assert _pods(api, "large") == []
    waiting = _reserved(controller.workload("large", kind="Job"))
    assert waiting["message"].startswith("couldn't assign flavors to pod set main")
    assert "insufficient unused quota for cpu in flavor cpu, 2 more needed" in waiting["message"]


def test_kueue_admits_each_pod_set_to_one_gpu_flavor(ctx, state, api, controller):
    """Issue 31 N8: the fake Kueue admitted on the sum of GPUs over all models.

    Two GPU flavors of 2 GPUs each (an A10G node and a T4 node: the cohort the team, with
    no quota of its own, borrows from). Kueue v0.19.2 gives a pod set one flavor per
    resource group, the first in the ClusterQueue's order that fits (flavorassigner.go
    findFlavorForPodSets), so 4 pods of one GPU fit neither flavor, though the two hold 4
    GPUs together: the Workload stays pending with fitsResourceQuota's "insufficient quota
    for %s in flavor %s, previously considered podsets requests (%s) + current podset
    request (%s) > maximum capacity (%s)" for each flavor, sorted and joined with ", "
    (Status.Message) after "couldn't assign flavors to pod set <name>: "
    (Assignment.Message). 2 such pods are admitted to the first flavor, and the next 2 to
    the second (the first is full: whenCanPreempt TryNextFlavor). Kueue then puts each
    flavor's nodeLabels into the pod set's nodeSelector (podset.go FromAssignment, the
    job's RunWithPodSetsInfo), so the pods run on that flavor's nodes: the T4 node is
    named first here, where a scheduler ignoring the flavor would put them.
    """
    put_gpu_flavors(api, {"gpu-tesla-t4": "Tesla-T4"})
    add_nodes(api, node("gpu-0", 2, product="Tesla-T4"), node("gpu-1", 2), node("cpu-0"))
    ctx.run(ctx.on.update_status(), state)  # the team's LocalQueue
    queue = {"kueue.x-k8s.io/queue-name": "training"}
    _team_creates_job(api, "four", queue, gpus=1, pods=4)
    controller.tick()
    assert api.get_object(f"{JOBS}/four")["spec"]["suspend"] is True
    reserved = _reserved(controller.workload("four", kind="Job"))
    assert (reserved["status"], reserved["reason"]) == ("False", "Pending")
    assert reserved["message"] == (
        "couldn't assign flavors to pod set main: "
        "insufficient quota for nvidia.com/gpu in flavor gpu-nvidia-a10g, previously "
        "considered podsets requests (0) + current podset request (4) > maximum capacity "
        "(2), insufficient quota for nvidia.com/gpu in flavor gpu-tesla-t4, previously "
        "considered podsets requests (0) + current podset request (4) > maximum capacity (2)"
    )
    for name, flavor, node_name in (
        ("a10g", "gpu-nvidia-a10g", "gpu-1"),
        ("t4", "gpu-tesla-t4", "gpu-0"),
    ):
        _team_creates_job(api, name, queue, gpus=1, pods=2)
        controller.tick()
        admission = controller.workload(name, kind="Job")["status"]["admission"]
        [assigned] = admission["podSetAssignments"]
        assert assigned["flavors"] == {"cpu": "cpu", "memory": "cpu", "nvidia.com/gpu": flavor}
        assert assigned["resourceUsage"]["nvidia.com/gpu"] == "2"
        pods = _pods(api, name)
        assert [p["spec"].get("nodeName") for p in pods] == [node_name, node_name]
        assert [p["status"]["phase"] for p in pods] == ["Running", "Running"]
    assert api.get_object(f"{JOBS}/four")["spec"]["suspend"] is True


def test_the_charms_own_jobs_name_the_teams_queue_and_run(ctx, state, api, controller):
    """The purge Job (and every one-shot Job, oneshot.queued) is queued and admitted."""
    add_nodes(api, node("node-a", 1), node("cpu-0"))
    run_action(ctx, state, "train", job="mnist", workers=1)
    run_action(ctx, state, "stop", job="mnist", purge=True)
    purge = api.get_object(f"{JOBS}/mnist-purge")
    labels = purge["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "training"
    assert labels["kueue.x-k8s.io/priority-class"] == "normal"
    for _ in range(3):
        controller.tick()
    workload = controller.workload("mnist-purge", kind="Job")
    assert workload is not None
    assert {c["type"]: c["status"] for c in workload["status"]["conditions"]}["Admitted"] == "True"
    assert _pods(api, "mnist-purge") != []


def test_a_job_past_its_deadline_is_deactivated_by_kueue(ctx, state, api, controller, fake_time):
    """Issue 31 leftover: Kueue v0.19.2's maximumExecutionTimeSeconds, emulated (K9).

    Admitted at the start; an hour of admitted time later the Workload is deactivated and
    evicted, the JobSet suspended (its pods stopped, the checkpoints stay), its quota
    freed and it is never admitted again; job-status says why.
    """
    add_nodes(api, node("node-a", 1), node("cpu-0"))
    results, _ = run_action(ctx, state, "train", job="mnist", deadline=1)
    assert results["state"] == "running", results
    workload = controller.workload("mnist")
    assert workload["spec"]["maximumExecutionTimeSeconds"] == 3600
    fake_time.now += 3599
    controller.tick()
    assert jobset(api, "mnist")["spec"]["suspend"] is False
    fake_time.now += 1
    controller.tick()
    workload = controller.workload("mnist")
    assert workload["spec"]["active"] is False
    evicted = next(c for c in workload["status"]["conditions"] if c["type"] == "Evicted")
    assert evicted["reason"] == "DeactivatedDueToMaximumExecutionTimeExceeded"
    assert evicted["message"] == (
        "The workload is deactivated due to exceeding the maximum execution time"
    )
    assert "admission" not in workload["status"]
    assert jobset(api, "mnist")["spec"]["suspend"] is True
    for _ in range(3):
        controller.tick()
    assert jobset(api, "mnist")["spec"]["suspend"] is True  # never requeued
    status, _ = run_action(ctx, state, "job-status", job="mnist")
    assert "DeactivatedDueToMaximumExecutionTimeExceeded" in status["queue"], status


def test_the_deadline_counts_admitted_time_only(ctx, state, api, controller, fake_time):
    """Time queued after a preemption does not count; admitted time before it does."""
    add_nodes(api, node("node-a", 1), node("cpu-0"))
    run_action(ctx, state, "train", job="mnist", deadline=1)
    fake_time.now += 3000
    controller.enabled = False  # preempted; nothing readmits it while time passes
    controller.preempt("mnist")
    fake_time.now += 5000
    controller.enabled = True
    controller.tick()
    workload = controller.workload("mnist")
    assert workload["status"]["accumulatedPastExecutionTimeSeconds"] == 3000
    assert jobset(api, "mnist")["spec"]["suspend"] is False  # admitted again
    fake_time.now += 599
    controller.tick()
    assert controller.workload("mnist")["spec"].get("active", True) is True
    fake_time.now += 1
    controller.tick()
    assert controller.workload("mnist")["spec"]["active"] is False


def test_a_deactivation_clears_the_requeue_count(ctx, state, api, controller, fake_time):
    """K15: only a deactivation resets status.requeueState (workload_controller.go)."""
    add_nodes(api, node("node-a", 1), node("cpu-0"))
    run_action(ctx, state, "train", job="mnist", deadline=1)
    fake_time.now += 1000
    controller.time_out("mnist")
    assert controller.workload("mnist")["status"]["requeueState"]["count"] == 1
    fake_time.now += 60  # the first backoff
    controller.tick()
    assert jobset(api, "mnist")["spec"]["suspend"] is False  # admitted again, count kept
    assert controller.workload("mnist")["status"]["requeueState"] == {"count": 1}
    status, _ = run_action(ctx, state, "job-status", job="mnist")
    assert status["requeues"] == "1 (its pods were not all ready in time)"
    fake_time.now += 2600  # an hour admitted in all
    controller.tick()
    workload = controller.workload("mnist")
    assert workload["spec"]["active"] is False
    assert "requeueState" not in workload["status"]
    status, _ = run_action(ctx, state, "job-status", job="mnist")
    assert "requeues" not in status


def test_the_fakes_workloads_are_checked_against_the_real_crd(api):
    """Issue 31 leftover: Kueue's fake creates Workloads through the validating path."""
    controller = BatchControllers(api, NS)
    bad = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": NS},
        "spec": {"podSets": [], "maximumExecutionTimeSeconds": 0},
    }
    with pytest.raises(AssertionError, match="refused the Workload"):
        controller._create_workload(bad)


def test_the_fakes_status_writes_are_checked_against_the_real_crds(api):
    """Issue 31 leftover: Kueue's fake writes statuses through `/status`, validated.

    A Workload condition without lastTransitionTime (what the fake wrote before:
    metav1.Condition requires it), an undeclared status field, and a ClusterQueue usage
    without its flavor's name are each refused as kube-apiserver refuses them under the
    v0.19.2 CRDs; a write keeps the stored spec (the status subresource's strategy).
    """
    controller = BatchControllers(api, NS)
    workload = controller._create_workload(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": NS},
            "spec": {"queueName": "training", "podSets": [_POD_SET]},
        }
    )
    condition = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": ""}
    workload["status"] = {"conditions": [condition]}
    with pytest.raises(AssertionError, match=r"lastTransitionTime: Required value"):
        controller._write_status(workload)
    workload["status"] = {"admittedAt": {}}
    with pytest.raises(AssertionError, match=r'unknown field \\\\"status.admittedAt\\\\"'):
        controller._write_status(workload)
    condition["lastTransitionTime"] = "2026-11-27T00:00:00Z"
    workload["status"] = {"conditions": [condition]}
    workload["spec"]["active"] = False
    controller._write_status(workload)
    stored = api.get_object(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/w")
    assert stored["status"] == {"conditions": [condition]}
    assert "active" not in stored["spec"]  # the status write kept the spec
    cq = api.objects("/apis/kueue.x-k8s.io/v1beta2/clusterqueues/")[0]
    cq["status"] = {"flavorsUsage": [{"resources": []}]}
    with pytest.raises(AssertionError, match=r"status.flavorsUsage\[0\].name: Required value"):
        controller._write_status(cq)


_POD_SET = {
    "name": "main",
    "count": 1,
    "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
}


def test_jobset_job_and_kubelet_status_writes_go_through_status_validated(api):
    """Issue 31 leftover: JobSet, the Job controller and kubelet write status via `/status`.

    As their real controllers do (JobSet Status().Update, the Job controller UpdateStatus,
    kubelet's pods/status PATCH): each write is decoded strictly and validated (a JobSet
    condition without lastTransitionTime, which metav1.Condition requires under the v0.12.0
    CRD, and an undeclared Pod status field are refused), keeps the stored spec, and is not
    counted among the charm's requests.
    """
    controller = BatchControllers(api, NS)
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/j"
    template = {"spec": {"template": {"spec": _POD_SET["template"]["spec"]}}}
    spec = {"replicatedJobs": [{"name": "w", "template": template}]}
    api.put_object(path, {"kind": "JobSet", "spec": spec})
    js = api.get_object(path)
    js["status"] = {"conditions": [{"type": "Completed", "status": "True", "reason": "X"}]}
    with pytest.raises(AssertionError, match=r"status.conditions\[0\].lastTransitionTime"):
        controller._write_status(js)
    js["status"]["conditions"][0].update(lastTransitionTime="2026-11-28T00:00:00Z", message="")
    js["spec"]["suspend"] = True
    before = len(api.requests)
    controller._write_status(js)
    stored = api.get_object(path)
    assert stored["status"] == js["status"] and not stored["spec"].get("suspend")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }
    controller._create(pod)
    pod["spec"]["nodeName"] = "elsewhere"
    pod["status"] = {"phase": "Failed", "exitCode": 1}
    with pytest.raises(AssertionError, match=r'unknown field \\\\"status.exitCode\\\\"'):
        controller._write_status(pod)
    pod["status"] = {"phase": "Failed"}
    controller._write_status(pod)
    stored = api.get_object(f"/api/v1/namespaces/{NS}/pods/p")
    assert stored["status"] == {"phase": "Failed"} and "nodeName" not in stored["spec"]
    assert len(api.requests) == before


def test_a_local_queue_pointing_at_another_teams_cluster_queue_admits_nothing(
    ctx, state, api, controller
):
    """Issue 29 item 6: team b cannot spend team tensorflow's guarantee.

    A team's grant lets it create LocalQueues in its own namespace (RBAC never reads a
    spec), so team b, with its own token, points one at team-tensorflow's ClusterQueue.
    That ClusterQueue's namespaceSelector (the control plane's kueue.team_queue) selects
    the tensorflow namespace only: Kueue's scheduler leaves b's Workload pending with
    "workload namespace doesn't match ClusterQueue selector" (v0.19.2 ValidateAdmissibility),
    though the queue's 4 CPUs are free, while the same Job in tensorflow's own LocalQueue
    is admitted at once (the positive control).
    """
    add_nodes(api, node("cpu-0"))
    out = ctx.run(ctx.on.config_changed(), replace(state, config={"cpu-quota": "4"}))
    control_plane_reads(api, out)  # team-tensorflow, 4 CPUs its own (its fair share: 8)
    store_grant(api, consumer_grant("b", "b", NAMESPACED_RULES, cluster_rules("b")), "b-token")
    join_team(api, "b")
    steal = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "steal"},
        "spec": {"clusterQueue": "team-tensorflow"},
    }
    headers = {"Authorization": "Bearer b-token", "Content-Type": "application/json"}
    path = "/apis/kueue.x-k8s.io/v1beta2/namespaces/b/localqueues"
    status, _, body, *_ = api.handle("POST", path, headers, json.dumps(steal).encode())
    assert status == 201, body  # its grant allows it: Kueue, not RBAC, refuses the use
    b = BatchControllers(api, "b")
    queue = {"kueue.x-k8s.io/queue-name": "steal"}
    _team_creates_job(api, "stolen", queue, cpu="2", namespace="b", token="b-token")
    for _ in range(3):
        b.tick()
    assert api.get_object("/apis/batch/v1/namespaces/b/jobs/stolen")["spec"]["suspend"] is True
    assert api.objects("/api/v1/namespaces/b/pods/") == []
    reserved = _reserved(b.workload("stolen", kind="Job"))
    assert (reserved["status"], reserved["reason"]) == ("False", "Pending")
    assert reserved["message"] == "workload namespace doesn't match ClusterQueue selector"
    _team_creates_job(api, "own", {"kueue.x-k8s.io/queue-name": "training"}, cpu="2")
    controller.tick()
    assert api.get_object(f"{JOBS}/own")["spec"]["suspend"] is False


# -- Issue 29 item 6: every GPU pod of a team goes through Kueue (the control plane's
# kueue.configure enables Kueue v0.19.2's pod and deployment integrations; fakes/batch.py
# K12 does what they do).
GATE = {"name": "kueue.x-k8s.io/admission"}
MANAGED = "kueue.x-k8s.io/managed"


def _post(api, path: str, obj: dict, token: str) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    status, _, body, *_ = api.handle("POST", path, headers, json.dumps(obj).encode())
    return status, json.loads(body)


def _miner(api, rules: list[dict]) -> BatchControllers:
    """Another kube-api consumer `miner` granted `rules` in its namespace (no LocalQueue)."""
    store_grant(api, consumer_grant("miner", "miner", rules, []), "miner-token")
    return BatchControllers(api, "miner")


def _deployment(name: str, gpus: int, replicas: int, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": _pod_spec(gpus, restart="Always"),
            },
        },
    }


def _training_queue(api, namespace: str = NS) -> dict[str, str]:
    """The team's LocalQueue `training` in its ClusterQueue (as the charm's queues.py makes it).

    Returns the labels naming it.
    """
    local_queue = {"spec": {"clusterQueue": f"team-{namespace}"}}
    api.put_object(
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/training", local_queue
    )
    return {"kueue.x-k8s.io/queue-name": "training"}


def test_a_teams_bare_gpu_pod_is_gated_and_never_runs_outside_kueue(api):
    """Issue 29 item 6: a team's bare pod asking for 4 GPUs was scheduled at once.

    The GPUs came off the cohort's shared pool, past every quota. Kueue's pod webhook now
    gates it on create (the scheduling gate, the managed label and finalizer); it names no
    queue, so its Workload (one pod) is never admitted and the pod is never bound.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    miner = _miner(api, [{"api-groups": [""], "resources": ["pods"], "verbs": ["create"]}])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpus"}}
    pod["spec"] = _pod_spec(4)
    status, created = _post(api, "/api/v1/namespaces/miner/pods", pod, "miner-token")
    assert status == 201, created
    assert created["spec"]["schedulingGates"] == [GATE]
    assert created["metadata"]["labels"][MANAGED] == "true"
    assert created["metadata"]["finalizers"] == [MANAGED]
    for _ in range(3):
        miner.tick()
    held = api.get_object("/api/v1/namespaces/miner/pods/gpus")
    assert held["spec"].get("nodeName") is None
    assert held["spec"]["schedulingGates"] == [GATE]
    workload = miner.workload("gpus", kind="Pod")
    assert workload is not None and "queueName" not in workload["spec"]
    assert workload["spec"]["podSets"][0]["count"] == 1
    assert _reserved(workload)["message"] == "LocalQueue  doesn't exist"


def test_a_teams_gpu_deployment_runs_only_within_its_quota(api, controller):
    """Issue 29 item 6: the team's token (deployments create) ran 8 GPUs outside Kueue.

    The cohort holds the 4 GPUs of node-a. A Deployment in the team's queue of two pods
    asking 4 GPUs each: the deployment webhook puts its queue on the pods, each pod is
    one Workload, the first is admitted (ungated, bound to node-a) and the second waits,
    gated, for quota. One naming no queue is gated for good.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    queue = _training_queue(api)
    deployments = f"/apis/apps/v1/namespaces/{NS}/deployments"
    status, body = _post(api, deployments, _deployment("miner", 4, 2, queue), TOKEN)
    assert status == 201, body
    status, body = _post(api, deployments, _deployment("unqueued", 1, 1), TOKEN)
    assert status == 201, body
    for _ in range(2):
        controller.tick()
    pods = {
        p["metadata"]["name"]: p
        for p in api.objects(f"/api/v1/namespaces/{NS}/pods/")
        if p["metadata"]["labels"].get("app") == "miner"
    }
    assert len(pods) == 2
    running = [p for p in pods.values() if p["spec"].get("nodeName")]
    assert [p["spec"]["nodeName"] for p in running] == ["node-a"]
    assert [p["status"]["phase"] for p in running] == ["Running"]
    [waiting] = [p for p in pods.values() if not p["spec"].get("nodeName")]
    assert waiting["spec"]["schedulingGates"] == [GATE]
    pending = controller.workload(waiting["metadata"]["name"], kind="Pod")
    assert pending["spec"]["queueName"] == "training"
    assert "insufficient unused quota for nvidia.com/gpu" in _reserved(pending)["message"]
    [unqueued] = [
        p
        for p in api.objects(f"/api/v1/namespaces/{NS}/pods/")
        if p["metadata"]["labels"].get("app") == "unqueued"
    ]
    assert unqueued["spec"]["schedulingGates"] == [GATE]
    assert unqueued["spec"].get("nodeName") is None


def test_a_team_may_not_lift_kueues_gate_nor_claim_a_queued_jobs_pod(api):
    """Issue 29 item 6: the two ways past Kueue's pod integration a grant could open.

    A consumer granted pods create and patch (any may ask for them in its namespace)
    could remove the scheduling gate itself, or create a pod naming its own queued Job as
    controller (Kueue does not gate a pod a job it manages owns: FindAncestorJobManagedBy-
    Kueue, "same-namespace ownership spoofing is out of scope"). The control plane's
    policy gpu-k8s-consumer-pods-off-the-control-plane refuses both to the team's token.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    rules = [
        {"api-groups": [""], "resources": ["pods"], "verbs": ["create", "patch"]},
        {"api-groups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
    ]
    miner = _miner(api, rules)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpus"}}
    pod["spec"] = _pod_spec(4)
    status, created = _post(api, "/api/v1/namespaces/miner/pods", pod, "miner-token")
    assert status == 201, created
    headers = {
        "Authorization": "Bearer miner-token",
        "Content-Type": "application/merge-patch+json",
    }
    patch = json.dumps({"spec": {"schedulingGates": None}}).encode()
    status, _, body, *_ = api.handle("PATCH", "/api/v1/namespaces/miner/pods/gpus", headers, patch)
    assert status == 403, body
    assert "only Kueue removes a pod's scheduling gate kueue.x-k8s.io/admission" in body.decode()
    job = _team_creates_job(api, "cover", namespace="miner", token="miner-token")
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "cover", "controller": True}
    owner["uid"] = job["metadata"]["uid"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "claimed"}}
    pod["metadata"]["ownerReferences"] = [owner]
    pod["spec"] = _pod_spec(4)
    status, refused = _post(api, "/api/v1/namespaces/miner/pods", pod, "miner-token")
    assert status == 403, refused
    assert "names a controller only when that controller makes it" in refused["message"]
    miner.tick()
    assert api.get_object("/api/v1/namespaces/miner/pods/gpus")["spec"].get("nodeName") is None


_CONTROLLED = {  # what a consumer may be granted in its namespace, and who makes its pods
    ("apps/v1", "ReplicaSet", "replicasets"): "replicaset-controller",
    ("apps/v1", "StatefulSet", "statefulsets"): "statefulset-controller",
    ("v1", "ReplicationController", "replicationcontrollers"): "replication-controller",
}


def test_the_pods_of_every_other_workload_kind_wait_for_kueue(api):
    """Issue 29 item 6: ReplicaSets, StatefulSets, ReplicationControllers.

    A consumer may be granted any of them in its namespace (lib kube_api; not DaemonSets,
    whose pods the control plane refuses there: test_kube_api_escalation). Kueue v0.19.2
    manages none of them itself here, so FindAncestorJobManagedByKueue stops at their
    pods, and its pod webhook gates each pod their controllers (kube-controller-manager's
    ServiceAccounts, kubeadm's --use-service-account-credentials) create: each pod is a
    Workload of its own, never bound while not admitted (miner has no LocalQueue).
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    resources = [plural for _, _, plural in _CONTROLLED]
    rules = [{"api-groups": ["apps", ""], "resources": resources, "verbs": ["create"]}]
    miner = _miner(api, rules)
    selector = {"matchLabels": {"app": "gpus"}}
    template = {"metadata": {"labels": {"app": "gpus"}}, "spec": _pod_spec(1, restart="Always")}
    for (version, kind, plural), account in _CONTROLLED.items():
        spec = {"selector": selector, "template": template}
        if kind == "StatefulSet":
            spec["serviceName"] = "gpus"
        if kind == "ReplicationController":
            spec["selector"] = selector["matchLabels"]
        base = "/api/v1" if version == "v1" else f"/apis/{version}"
        name = plural[:-1]
        obj = {"apiVersion": version, "kind": kind, "metadata": {"name": name}, "spec": spec}
        if kind == "ReplicationController":
            # the fake serves none; Kueue never looks up an owner no integration knows
            made = {"metadata": {"uid": "3f1c2b4a-8d7e-4f60-9b1a-2c3d4e5f6a7b"}}
        else:
            status, made = _post(api, f"{base}/namespaces/miner/{plural}", obj, "miner-token")
            assert status == 201, (kind, made)
        token = f"{account}-token"
        api.add_token(token, f"system:serviceaccount:kube-system:{account}", ("system:masters",))
        owner = {"apiVersion": version, "kind": kind, "name": name, "controller": True}
        owner["uid"] = made["metadata"]["uid"]
        pod = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"]}
        pod["metadata"] = {
            "name": f"{name}-0",
            "labels": {"app": "gpus"},
            "ownerReferences": [owner],
        }
        status, created = _post(api, "/api/v1/namespaces/miner/pods", pod, token)
        assert status == 201, created
        assert created["spec"]["schedulingGates"] == [GATE], kind
    for _ in range(2):
        miner.tick()
    for _, _, plural in _CONTROLLED:
        name = f"{plural[:-1]}-0"
        held = api.get_object(f"/api/v1/namespaces/miner/pods/{name}")
        assert held["spec"].get("nodeName") is None, name
        assert (
            _reserved(miner.workload(name, kind="Pod"))["message"] == "LocalQueue  doesn't exist"
        )


def test_a_team_may_not_start_its_own_queued_job(api, controller):
    """Issue 29 item 6: the team's grant (jobs and jobsets patch) unsuspended its Job.

    Kueue v0.19.2 validates no suspend change (jobframework/validation.go
    ValidateJobOnUpdate), and it suspends again a job unsuspended without admission only
    once it sees it (reconciler.go "Running job is not admitted by a cluster queue,
    suspending"): meanwhile the Job controller made its GPU pods, which no gate holds (a
    managed Job's pods are the Job's), past every quota. The control plane's policy
    gpu-k8s-consumer-jobs-started-by-kueue refuses the team's token the change.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    _team_creates_job(api, "held", gpus=4)  # no queue: held for good
    controller.tick()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/merge-patch+json"}
    patch = json.dumps({"spec": {"suspend": False}}).encode()
    status, _, body, *_ = api.handle("PATCH", f"{JOBS}/held", headers, patch)
    assert status == 403, body
    assert "only Kueue starts a job in a consumer's namespace" in body.decode()
    controller.tick()
    assert api.get_object(f"{JOBS}/held")["spec"]["suspend"] is True
    assert _pods(api, "held") == []


_CONTROLLERS_POLICY = "gpu-k8s-consumer-controllers-by-kube-system"


def _controlled_by(obj: dict, owner: dict) -> dict:
    """`obj` naming `owner` (a stored object) as its controller, as a team could write it."""
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "controller": True}
    ref.update(name=owner["metadata"]["name"], uid=owner["metadata"]["uid"])
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


def _refused(api, controllers, status: int, body: dict, namespace: str = NS) -> None:
    """The write was refused by the controllers policy; had it not been, what ran ungated."""
    if status != 403:
        for _ in range(2):
            controllers.tick()
        ran = [
            p["metadata"]["name"]
            for p in api.objects(f"/api/v1/namespaces/{namespace}/pods/")
            if p["spec"].get("nodeName") and "nvidia.com/gpu" in json.dumps(p["spec"])
        ]
        raise AssertionError(f"accepted ({status}); GPU pods running past Kueue: {ran}")
    assert f"'{_CONTROLLERS_POLICY}'" in body["message"], body
    assert "names a controller only when kube-controller-manager makes it" in body["message"]


def _jobset_manifest(name: str, gpus: int, labels: dict | None = None) -> dict:
    job = {"parallelism": 1, "completions": 1, "template": {"spec": _pod_spec(gpus)}}
    job["podReplacementPolicy"] = "Failed"  # gpu-k8s-consumer-terminating-pods-bounded
    template = {"spec": job}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "network": {"enableDNSHostnames": True, "subdomain": name},
            "replicatedJobs": [{"name": "w", "template": template}],
        },
    }


def test_a_teams_deployment_may_not_name_its_held_job_as_controller(api, controller):
    """Issue 29 item 6 review blocker: a Deployment claiming a held Job ran GPUs ungated.

    Kueue v0.19.2's deployment webhook marks the template only when
    WorkloadShouldBeSuspended, which is false once FindAncestorJobManagedByKueue finds a
    managed ancestor by the controller reference (jobframework/utils.go); the pod webhook
    then leaves the pods alone (a managed job's). gpu-k8s-consumer-controllers-by-kube-
    system refuses the team's token such a Deployment, on create and on a patch adding
    the reference.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    held = _team_creates_job(api, "held", gpus=4)  # no queue: held for good
    deployments = f"/apis/apps/v1/namespaces/{NS}/deployments"
    claim = _controlled_by(_deployment("claim", 4, 1), held)
    status, body = _post(api, deployments, claim, TOKEN)
    _refused(api, controller, status, body)
    status, body = _post(api, deployments, _deployment("later", 4, 0), TOKEN)
    assert status == 201, body
    # and unmarks its template: Kueue's webhook does not mark it again on this update
    unmarked = {"annotations": {"kueue.x-k8s.io/pod-suspending-parent": None}}
    unmarked["labels"] = {MANAGED: None}
    patch = _controlled_by({"metadata": {}}, held)
    patch["spec"] = {"replicas": 1, "template": {"metadata": unmarked}}
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/merge-patch+json"}
    status, _, raw, *_ = api.handle(
        "PATCH", f"{deployments}/later", headers, json.dumps(patch).encode()
    )
    _refused(api, controller, status, json.loads(raw))
    # a reference without `controller` is never walked (metav1.GetControllerOf): allowed
    patch["metadata"]["ownerReferences"][0].pop("controller")
    status, _, raw, *_ = api.handle(
        "PATCH", f"{deployments}/later", headers, json.dumps(patch).encode()
    )
    assert status == 200, raw
    for _ in range(2):
        controller.tick()
    [later] = [
        p
        for p in api.objects(f"/api/v1/namespaces/{NS}/pods/")
        if p["metadata"]["labels"].get("app") == "later"
    ]
    assert later["spec"]["schedulingGates"] == [GATE] and not later["spec"].get("nodeName")


def test_a_teams_jobset_may_not_name_its_running_jobset_as_controller(api, controller):
    """Issue 29 item 6 review blocker: a JobSet claiming the team's running JobSet.

    Kueue's JobSet webhook does not suspend a JobSet with a managed ancestor
    (WorkloadShouldBeSuspended), its reconciler gives it no Workload of its own (not a
    top-level job) and its Jobs' pods are never gated: its GPUs ran outside the quota.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    queue = _training_queue(api)
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"
    status, running = _post(api, jobsets, _jobset_manifest("small", 0, queue), TOKEN)
    assert status == 201, running
    for _ in range(2):
        controller.tick()
    assert api.get_object(f"{jobsets}/small")["spec"]["suspend"] is False  # admitted
    claim = _controlled_by(_jobset_manifest("claim", 4), running)
    status, body = _post(api, jobsets, claim, TOKEN)
    _refused(api, controller, status, body)


@pytest.mark.parametrize("kind", ["ReplicaSet", "StatefulSet"])
def test_a_consumers_replicaset_or_statefulset_may_not_name_its_job_as_controller(api, kind):
    """Issue 29 item 6 review blocker: any consumer granted replicasets/statefulsets create.

    Kueue walks from a pod through a ReplicaSet, and through a StatefulSet although its
    integration is off (isKnownOwner: any registered integration), up to the consumer's
    Job: the pods their controllers make are a managed job's, never gated.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    plural = f"{kind.lower()}s"
    rules = [
        {"api-groups": ["apps"], "resources": [plural], "verbs": ["create"]},
        {"api-groups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
    ]
    miner = _miner(api, rules)
    job = _team_creates_job(api, "cover", namespace="miner", token="miner-token")
    template = {"metadata": {"labels": {"app": "gpus"}}, "spec": _pod_spec(4, restart="Always")}
    spec = {"selector": {"matchLabels": {"app": "gpus"}}, "template": template}
    if kind == "StatefulSet":
        spec["serviceName"] = "gpus"
    obj = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "gpus"}, "spec": spec}
    status, made = _post(
        api, f"/apis/apps/v1/namespaces/miner/{plural}", _controlled_by(obj, job), "miner-token"
    )
    if status != 403:  # its controller (kube-controller-manager's account) makes its pod
        account = {"ReplicaSet": "replicaset-controller"}.get(kind, "statefulset-controller")
        token = f"{account}-token"
        api.add_token(token, f"system:serviceaccount:kube-system:{account}", ("system:masters",))
        pod = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"]}
        pod["metadata"] = {"name": "gpus-0", "labels": {"app": "gpus"}}
        created = _post(api, "/api/v1/namespaces/miner/pods", _controlled_by(pod, made), token)
        assert created[0] == 201, created
    _refused(api, miner, status, made, namespace="miner")


_JOBS_POLICY = "gpu-k8s-consumer-jobs-started-by-kueue"


def _patch_job(api, name: str, spec: dict, token: str = TOKEN) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"}
    body = json.dumps({"spec": spec}).encode()
    status, _, answer, *_ = api.handle("PATCH", f"{JOBS}/{name}", headers, body)
    return status, json.loads(answer)


def _gpu_pods_running(api, job: str) -> list[str]:
    return [p["metadata"]["name"] for p in _pods(api, job) if p["spec"].get("nodeName")]


@pytest.mark.parametrize(
    ("spec", "change", "annotations"),
    [
        ({"completions": 4, "parallelism": 1}, {"parallelism": 4}, {}),  # NonIndexed
        # an Indexed Job's completions change with parallelism (kube-apiserver
        # ValidateJobSpecUpdate: elastic Indexed Jobs); a NonIndexed one's are immutable
        (
            {"completionMode": "Indexed", "completions": 1, "parallelism": 1},
            {"completions": 4, "parallelism": 4},
            {},
        ),
        # Kueue's elastic Job (ElasticJobsViaWorkloadSlices, on in v0.19.2): the same
        # change is its way to grow (admission_policies CONSUMER_JOBS); the fake models no
        # workload slices, the policy refuses the change before Kueue would see it
        (
            {"completions": 4, "parallelism": 1},
            {"parallelism": 4},
            {"kueue.x-k8s.io/elastic-job": "true"},
        ),
    ],
    ids=["parallelism", "indexed-completions", "elastic"],
)
def test_a_team_may_not_grow_its_admitted_running_job(api, controller, spec, change, annotations):
    """Issue 29 item 6 (review29e gap 2): the team's grant (jobs patch) grew its running Job.

    Kueue v0.19.2 validates no parallelism or completions change of a running Job but with
    partial admission (job_webhook.go validatePartialAdmissionUpdate) and stops the Job
    only once its reconciler sees that the Workload no longer matches (reconciler.go
    ensureOneWorkload, "No matching Workload; restoring pod templates according to
    existent Workload"); meanwhile the Job controller makes min(parallelism, completions -
    succeeded) pods (job_controller.go manageJob). A Job admitted for one 1-GPU pod at a
    time, patched to 4, ran 4 GPUs on a 1-GPU admission.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    queue = _training_queue(api)
    _team_creates_job(api, "grow", queue, gpus=1, spec=spec, annotations=annotations)
    controller.tick()
    assert api.get_object(f"{JOBS}/grow")["spec"]["suspend"] is False
    assert len(_gpu_pods_running(api, "grow")) == 1
    status, body = _patch_job(api, "grow", change)
    if status != 403:
        for _ in range(2):
            controller.tick()
        ran = _gpu_pods_running(api, "grow")
        raise AssertionError(f"{change} accepted ({status}); GPU pods running: {ran}")
    assert f"'{_JOBS_POLICY}'" in body["message"], body
    assert "only Kueue changes a running job's parallelism or completions" in body["message"]
    controller.tick()
    assert len(_gpu_pods_running(api, "grow")) == 1


def test_kueue_resizes_a_running_job_and_a_team_its_suspended_one(api, controller):
    """Kueue still sets a running Job's parallelism; a team resizes a Job it suspends.

    Kueue writes a partially admitted Job's parallelism (job_controller.go
    RunWithPodSetsInfo, RestorePodSetsInfo), here with Kueue's ServiceAccount bound to
    `patch` on jobs (its manager-role has it: kueue v0.19.2 config/components/rbac/
    role.yaml). A team may resize a Job it suspends in the same write: Kueue then admits
    it again as it is.
    """
    kueue = "system:serviceaccount:kueue-system:kueue-controller-manager"
    role = {"rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["patch"]}]}
    api.put_object("/apis/rbac.authorization.k8s.io/v1/clusterroles/kueue-jobs", role)
    binding = {
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"},
        "subjects": [{"kind": "ServiceAccount", "name": kueue.split(":")[-1]}],
    }
    binding["roleRef"]["name"] = "kueue-jobs"
    binding["subjects"][0]["namespace"] = "kueue-system"
    api.put_object("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kueue-jobs", binding)
    api.add_token("kueue-token", kueue, ("system:serviceaccounts",))
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    spec = {"completions": 4, "parallelism": 2}
    _team_creates_job(api, "grow", _training_queue(api), gpus=1, spec=spec)
    controller.tick()
    assert api.get_object(f"{JOBS}/grow")["spec"]["suspend"] is False
    status, body = _patch_job(api, "grow", {"parallelism": 1}, token="kueue-token")
    assert status == 200, body
    status, body = _patch_job(api, "grow", {"suspend": True, "parallelism": 4})
    assert status == 200, body


def test_a_team_may_not_grow_its_running_jobset(api, controller):
    """JobSet v0.12.0's own webhook keeps replicatedJobs immutable (ValidateUpdate).

    So the control plane needs no policy for a JobSet: the team's grant (jobsets patch)
    cannot grow replicas or parallelism of its running JobSet (ElasticJobSet, which
    would allow it, is alpha and off).
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"
    status, body = _post(api, jobsets, _jobset_manifest("gang", 1, _training_queue(api)), TOKEN)
    assert status == 201, body
    for _ in range(2):
        controller.tick()
    assert api.get_object(f"{jobsets}/gang")["spec"]["suspend"] is False
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/merge-patch+json"}
    for grow in ({"replicas": 4}, {"parallelism": 4, "completions": 4}):
        replicated = api.get_object(f"{jobsets}/gang")["spec"]["replicatedJobs"]
        target = replicated[0] if "replicas" in grow else replicated[0]["template"]["spec"]
        target.update(grow)
        patch = json.dumps({"spec": {"replicatedJobs": replicated}}).encode()
        status, _, answer, *_ = api.handle("PATCH", f"{jobsets}/gang", headers, patch)
        assert status == 422, answer
        message = json.loads(answer)["message"]
        assert message.startswith('admission webhook "vjobset.kb.io" denied the request: ')
        assert "spec.replicatedJobs: Invalid value: " in message
        assert message.endswith(": field is immutable")


_TERMINATING_POLICY = "gpu-k8s-consumer-terminating-pods-bounded"
_YEAR = 365 * 24 * 3600


def _refused_by_terminating(status: int, body: dict, words: str) -> None:
    assert status == 403, f"accepted ({status}): {body}"
    assert f"'{_TERMINATING_POLICY}'" in body["message"], body
    assert words in body["message"], body


def _job(name: str, spec: dict, **job_fields) -> dict:
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {**job_fields, "template": template},
    }


def test_a_teams_pods_may_not_outlast_kueues_quota_by_a_long_grace_period(api):
    """Review29e gap 1: a one-year grace period held GPUs long after Kueue counted them free.

    A terminating pod keeps its GPUs for its grace period while Kueue v0.19.2 counts only
    active pods (a preempted Job's quota is freed once no pod is active: KEP-83 "While
    Pods are terminating, a ClusterQueue's quota could be oversubscribed"). The team's pods,
    bare or through any workload's template, may ask for at most 120 s.
    """
    spec = {**_pod_spec(4), "terminationGracePeriodSeconds": _YEAR}
    job = _job("linger", spec, podReplacementPolicy="Failed")
    status, body = _post(api, JOBS, job, TOKEN)
    _refused_by_terminating(status, body, "terminationGracePeriodSeconds of at most 120 s")
    deployments = f"/apis/apps/v1/namespaces/{NS}/deployments"
    deployment = _deployment("linger", 4, 1)
    deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = _YEAR
    status, body = _post(api, deployments, deployment, TOKEN)
    _refused_by_terminating(status, body, "terminationGracePeriodSeconds of at most 120 s")
    # nor raised later on a template (a Deployment's is mutable)
    status, body = _post(api, deployments, _deployment("later", 4, 0), TOKEN)
    assert status == 201, body
    patch = {"spec": {"template": {"spec": {"terminationGracePeriodSeconds": _YEAR}}}}
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/merge-patch+json"}
    status, _, raw, *_ = api.handle(
        "PATCH", f"{deployments}/later", headers, json.dumps(patch).encode()
    )
    _refused_by_terminating(status, json.loads(raw), "at most 120 s")
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"
    linger = _jobset_manifest("linger", 4)
    linger["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].update(
        terminationGracePeriodSeconds=_YEAR
    )
    status, body = _post(api, jobsets, linger, TOKEN)
    _refused_by_terminating(status, body, "at most 120 s")
    _miner(api, [{"api-groups": [""], "resources": ["pods"], "verbs": ["create"]}])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "linger"}, "spec": spec}
    status, body = _post(api, "/api/v1/namespaces/miner/pods", pod, "miner-token")
    _refused_by_terminating(status, body, "at most 120 s")
    # the cap itself passes
    job = _job("brief", {**_pod_spec(4), "terminationGracePeriodSeconds": 120})
    job["spec"]["podReplacementPolicy"] = "Failed"
    status, body = _post(api, JOBS, job, TOKEN)
    assert status == 201, body


def test_a_teams_job_replaces_a_pod_only_once_it_is_gone(api):
    """Review29e gap 1: a Job replaced the pod the team deleted while it still held its GPUs.

    Under podReplacementPolicy TerminatingOrFailed (the default without a podFailurePolicy)
    the Job controller makes a new pod as soon as the old one terminates, and Kueue counts
    only the active one: N GPUs on a one-GPU admission. A team's Job, and each Job of its
    JobSets, must wait for the old pod (Failed, or a podFailurePolicy, whose default that is).
    """
    words = "podReplacementPolicy Failed"
    status, body = _post(api, JOBS, _job("swap", _pod_spec(1)), TOKEN)
    _refused_by_terminating(status, body, words)
    job = _job("swap", _pod_spec(1), podReplacementPolicy="TerminatingOrFailed")
    status, body = _post(api, JOBS, job, TOKEN)
    _refused_by_terminating(status, body, words)
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"
    swap = _jobset_manifest("swap", 1)
    swap["spec"]["replicatedJobs"][0]["template"]["spec"].pop("podReplacementPolicy")
    status, body = _post(api, jobsets, swap, TOKEN)
    _refused_by_terminating(status, body, words)
    # Failed, or a podFailurePolicy (whose default Failed is): admitted
    waits = _job("wait", _pod_spec(1), podReplacementPolicy="Failed")
    status, body = _post(api, JOBS, waits, TOKEN)
    assert status == 201, body
    rule = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
    ruled = _job("ruled", _pod_spec(1), podFailurePolicy={"rules": [rule]})
    status, body = _post(api, JOBS, ruled, TOKEN)
    assert status == 201, body
    status, body = _post(api, jobsets, _jobset_manifest("wait", 1), TOKEN)
    assert status == 201, body


@pytest.mark.parametrize("kind", ["ReplicaSet", "StatefulSet", "DaemonSet"])
def test_no_workload_kind_of_a_consumer_gives_its_pods_a_long_grace_period(api, kind):
    """Every other kind whose controller makes a consumer's pods: the same 120 s cap.

    (ReplicationControllers too, by the same rule: the fake API server serves none.)
    """
    plural = f"{kind.lower()}s"
    _miner(api, [{"api-groups": ["apps"], "resources": [plural], "verbs": ["create"]}])
    spec = {**_pod_spec(4, restart="Always"), "terminationGracePeriodSeconds": _YEAR}
    template = {"metadata": {"labels": {"app": "gpus"}}, "spec": spec}
    body = {"selector": {"matchLabels": {"app": "gpus"}}, "template": template}
    if kind == "StatefulSet":
        body["serviceName"] = "gpus"
    obj = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "gpus"}, "spec": body}
    status, answer = _post(api, f"/apis/apps/v1/namespaces/miner/{plural}", obj, "miner-token")
    _refused_by_terminating(status, answer, "at most 120 s")


def test_a_team_may_not_delete_its_pod_with_a_long_grace_period(api, controller):
    """A DeleteOptions' gracePeriodSeconds overrides the pod's own (CheckGracefulDelete).

    The team's grant holds pods delete: deleting its admitted pod with a one-year grace
    period left the pod holding its GPUs for a year once Kueue freed its quota (evicted,
    the Job has no active pod). Refused past 120 s, in the body or the query; a plain
    delete (the pod's own grace period) goes.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    _team_creates_job(api, "runs", _training_queue(api), gpus=1)
    for _ in range(2):
        controller.tick()
    [pod] = _pods(api, "runs")
    assert pod["spec"].get("nodeName"), pod
    path = f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}"
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    options = json.dumps(
        {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": _YEAR}
    )
    status, _, raw, *_ = api.handle("DELETE", path, headers, options.encode())
    _refused_by_terminating(status, json.loads(raw), "deleted or evicted with a grace period")
    status, _, raw, *_ = api.handle("DELETE", f"{path}?gracePeriodSeconds={_YEAR}", headers, b"")
    _refused_by_terminating(status, json.loads(raw), "at most 120 s")
    status, _, raw, *_ = api.handle("DELETE", path, headers, b"")
    assert status == 200, raw


def test_a_consumer_may_not_evict_its_pod_with_a_long_grace_period(api):
    """An Eviction's deleteOptions the same (eviction.go deletes with them)."""
    _miner(
        api,
        [
            {"api-groups": [""], "resources": ["pods"], "verbs": ["create"]},
            {"api-groups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        ],
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": _pod_spec(0)}
    status, body = _post(api, "/api/v1/namespaces/miner/pods", pod, "miner-token")
    assert status == 201, body
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "miner"},
        "deleteOptions": {"gracePeriodSeconds": _YEAR},
    }
    status, body = _post(api, "/api/v1/namespaces/miner/pods/p/eviction", eviction, "miner-token")
    _refused_by_terminating(status, body, "deleted or evicted with a grace period")


# -- the harm CONSUMER_TERMINATING bounds, on a fake that ends pods gracefully -------------

OTHER = "other"
OTHER_TOKEN = "other-sa-token"
_HOUR = 3600
_CAP = load("kubernetes-control-plane", "admission_policies").GRACE_CAP_SECONDS
_WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{}/workloads/"


def _two_gpu_teams(api, controller) -> tuple[BatchControllers, list[float]]:
    """Two teams of a 1-GPU quota on one node of 2 GPUs; pods end gracefully; fake time.

    The other team is a second kube-api consumer with the same grant, its LocalQueue in
    its ClusterQueue. Both clocks (the API server's deadlines, Kueue's conditions) start
    now (the teams' tokens are valid for 48 hours from it) and move only by `_round`.
    """
    api.graceful_pods = True
    now = [float(int(time.time()))]
    api.clock = controller.clock = lambda: now[0]
    add_nodes(api, node("gpu-0", 2), node("cpu-0"))
    grant = consumer_grant(OTHER, OTHER, NAMESPACED_RULES, cluster_rules(OTHER))
    store_grant(api, grant, OTHER_TOKEN)
    other = BatchControllers(api, OTHER)
    other.clock = controller.clock
    join_team(api, NS, {"gpu-quota": "1"})
    join_team(api, OTHER, {"gpu-quota": "1"})
    return other, now


def _round(now: list[float], step: int, *controllers: BatchControllers) -> None:
    """`step` fake seconds pass, then every controller (and kubelet) acts once."""
    now[0] += step
    for each in controllers:
        each.tick()


def _gpus_held(api, namespace: str) -> int:
    """GPUs the namespace's pods hold on nodes: every bound pod not ended, terminating or not.

    kube-scheduler counts a pod on its node until it is deleted or has ended (pkg/scheduler
    scheduler.go newPodInformer: non-terminal pods; eventhandlers.go deletePodFromCache).
    """
    return sum(
        int(c["resources"].get("limits", {}).get("nvidia.com/gpu", 0))
        for p in api.objects(f"/api/v1/namespaces/{namespace}/pods/")
        if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
        for c in p["spec"]["containers"]
    )


def _gpus_admitted(api, namespace: str, job: str | None = None) -> int:
    """GPUs Kueue reserved for the namespace's Workloads (or `job`'s): their resourceUsage."""
    return sum(
        int(assigned["resourceUsage"].get("nvidia.com/gpu", 0))
        for w in api.objects(_WORKLOADS.format(namespace))
        if job in (None, w["metadata"]["ownerReferences"][0]["name"])
        for assigned in ((w.get("status") or {}).get("admission") or {}).get("podSetAssignments")
        or []
    )


def _running(api, namespace: str, job: str) -> list[dict]:
    """The job's pods bound to a node and not terminating."""
    return [
        p
        for p in api.objects(f"/api/v1/namespaces/{namespace}/pods/")
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job
        and p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
    ]


def _delete_own_pod(api, job: str) -> dict:
    """The team deletes its job's pod with its own token, a plain DELETE (its grace period)."""
    [pod] = _running(api, NS, job)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    path = f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}"
    status, _, raw, *_ = api.handle("DELETE", path, headers, b"")
    assert status == 200, raw
    assert json.loads(raw)["metadata"]["deletionGracePeriodSeconds"] > 0  # terminating
    return pod


def _wait_for_gpu(api, now, step: int, controllers, job: str) -> float:
    """Rounds until the other team's `job` runs: the seconds it waited once Kueue admitted it.

    Meanwhile both GPUs of the node are held, one of them by the team's terminating pod.
    """
    admitted_at = None
    for _ in range(2 * _HOUR // step):
        if admitted_at is None and _gpus_admitted(api, OTHER, job):
            admitted_at = now[0]
        if _running(api, OTHER, job):
            assert admitted_at is not None
            return now[0] - admitted_at
        if admitted_at is not None:
            assert _gpus_held(api, NS) + _gpus_held(api, OTHER) == 2
        _round(now, step, *controllers)
    raise AssertionError(f"{job} never ran: {api.objects(f'/api/v1/namespaces/{OTHER}/pods/')}")


def test_without_the_policy_a_pod_ignoring_sigterm_held_a_second_gpu_its_whole_grace(
    api, controller
):
    """Issue 29: the harm the terminating-pods policy bounds, on pods that end gracefully.

    A Job as gpu-k8s-consumer-terminating-pods-bounded refuses it (an hour's grace,
    podReplacementPolicy TerminatingOrFailed), seeded as one written before the policy,
    with the policy's binding removed (under it, the Job controller's pod of such a Job
    is refused too: fakes/batch.py B8); its pod ignores SIGTERM. The team deletes its own
    pod (its grant holds pods delete; a plain delete asks the pod's own grace period, which
    the policy lets through). The Job
    controller makes a replacement at once (TerminatingOrFailed), which the scheduler puts
    on the node's second GPU while the old pod keeps the first for its whole grace period:
    2 GPUs on a 1-GPU admission. The other team, whose quota Kueue counts free and
    admits, waits the hour for a GPU.
    """
    other, now = _two_gpu_teams(api, controller)
    api.delete_object(f"{_BINDINGS}{_TERMINATING_POLICY}")
    step = 300
    spec = {**_pod_spec(1), "terminationGracePeriodSeconds": _HOUR}
    linger = _job("linger", spec, podReplacementPolicy="TerminatingOrFailed", suspend=True)
    linger["metadata"]["labels"] = _training_queue(api)
    api.put_object(f"{JOBS}/linger", linger)
    controller.stop_ticks = {"linger": SIGTERM_IGNORED}
    _round(now, step, controller, other)
    assert (_gpus_held(api, NS), _gpus_admitted(api, NS)) == (1, 1)
    old = _delete_own_pod(api, "linger")
    _round(now, step, controller, other)
    assert (_gpus_held(api, NS), _gpus_admitted(api, NS)) == (2, 1)
    labels = _training_queue(api, OTHER)
    _team_creates_job(api, "waits", labels, namespace=OTHER, token=OTHER_TOKEN, gpus=1)
    waited = _wait_for_gpu(api, now, step, (controller, other), "waits")
    assert _HOUR - 2 * step <= waited <= _HOUR
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/{old['metadata']['name']}") is None
    assert (_gpus_held(api, NS), _gpus_admitted(api, NS)) == (1, 1)


def test_under_the_policy_a_team_holds_what_kueue_admitted_and_others_wait_at_most_the_cap(
    api, controller
):
    """Issue 29: with the policy, the team cannot make the overlap; what passes bounds it.

    With its own token the hour's grace and TerminatingOrFailed are refused (403 naming
    the policy). With what passes (a grace period of GRACE_CAP_SECONDS, podReplacementPolicy
    Failed) and a pod ignoring SIGTERM, its own delete leaves the Job without a
    replacement until the old pod is gone: never more GPUs held than Kueue admitted. When
    Kueue stops the job (its maximum execution time, K9) it frees the quota at once (the
    Job has no active pod: kueue jobframework reconciler "The job is no longer active")
    while the pod terminates: the other team's job, admitted on it, waits for the GPU at
    most GRACE_CAP_SECONDS by the fake clock.
    """
    other, now = _two_gpu_teams(api, controller)
    step = 30
    queue = _training_queue(api)
    grace = {"terminationGracePeriodSeconds": _HOUR}
    for spec, pod in (({"podReplacementPolicy": "TerminatingOrFailed"}, {}), ({}, grace)):
        job = _job("linger", {**_pod_spec(1), **pod}, **{"podReplacementPolicy": "Failed", **spec})
        job["metadata"]["labels"] = queue
        status, body = _post(api, JOBS, job, TOKEN)
        _refused_by_terminating(status, body, "at most 120 s" if pod else "Failed")
    controller.stop_ticks = {"brief": SIGTERM_IGNORED}
    deadline = {**queue, "kueue.x-k8s.io/max-exec-time-seconds": str(_HOUR // 4)}
    capped = {"terminationGracePeriodSeconds": _CAP}
    _team_creates_job(api, "brief", deadline, gpus=1, pod=capped)
    _round(now, step, controller, other)
    old = _delete_own_pod(api, "brief")
    deleted_at = now[0]
    while not _running(api, NS, "brief"):
        assert _gpus_held(api, NS) <= _gpus_admitted(api, NS) == 1
        _round(now, step, controller, other)
        assert now[0] - deleted_at <= _CAP + step
    assert now[0] - deleted_at >= _CAP  # the replacement waited for the old pod to go
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/{old['metadata']['name']}") is None
    # the other team fills its quota and queues a job that borrows the team's, once free
    labels = _training_queue(api, OTHER)
    _team_creates_job(api, "first", labels, namespace=OTHER, token=OTHER_TOKEN, gpus=1)
    _round(now, step, controller, other)
    assert _running(api, OTHER, "first")
    _team_creates_job(api, "second", labels, namespace=OTHER, token=OTHER_TOKEN, gpus=1)
    waited = _wait_for_gpu(api, now, step, (controller, other), "second")
    assert 0 < waited <= _CAP
    assert _gpus_held(api, NS) == _gpus_admitted(api, NS) == 0


# -- a team orphaning its own job's pods (issue 29; grace42's report, "Noticed" 2) ---------

_BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/"


def _quota_held(api, namespace: str) -> int:
    """GPUs Kueue counts against the namespace: its admitted Workloads not Finished (K4)."""
    return sum(
        int(assigned["resourceUsage"].get("nvidia.com/gpu", 0))
        for w in api.objects(_WORKLOADS.format(namespace))
        if not any(
            c["type"] == "Finished" and c["status"] == "True"
            for c in (w.get("status") or {}).get("conditions") or []
        )
        for assigned in ((w.get("status") or {}).get("admission") or {}).get("podSetAssignments")
        or []
    )


def _delete(api, path: str, query: str = "", body: dict | None = None, token: str = TOKEN):
    """A DELETE as the team (or `token`'s holder) sends it: (status, answer)."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    raw = json.dumps(body).encode() if body is not None else b""
    status, _, answer, *_ = api.handle("DELETE", f"{path}{query}", headers, raw)
    return status, json.loads(answer)


def test_without_the_policy_a_team_orphaning_its_job_ran_gpus_outside_its_quota(api, controller):
    """Issue 29: a batch/v1 Job deleted with no propagationPolicy orphans its pods.

    kube-apiserver's default for a batch/v1 Job is OrphanDependents (kubernetes pkg/registry
    /batch/job/strategy.go DefaultGarbageCollectionPolicy) and the team's grant holds jobs
    delete. Kueue v0.19.2 finishes the Workload whose job is gone (OwnerNotFound, K14) and
    frees its quota, while the orphaned pod keeps its GPU: the team's next job is admitted
    on the same quota, 2 GPUs held on 1 counted, and the other team, admitted by Kueue,
    finds no GPU. Shown with the consumer jobs policy's binding removed, as before it.
    """
    other, now = _two_gpu_teams(api, controller)
    api.delete_object(f"{_BINDINGS}gpu-k8s-consumer-jobs-started-by-kueue")
    queue = _training_queue(api)
    _team_creates_job(api, "first", queue, gpus=1)
    _round(now, 30, controller, other)
    assert (_gpus_held(api, NS), _quota_held(api, NS)) == (1, 1)
    status, body = _delete(api, f"{JOBS}/first")
    assert status == 200, body
    _round(now, 30, controller, other)
    [pod] = _running(api, NS, "first")
    assert "ownerReferences" not in pod["metadata"]  # the garbage collector orphaned it
    assert _quota_held(api, NS) == 0  # Kueue: the Workload's owner no longer exists
    _team_creates_job(api, "second", queue, gpus=1)
    _round(now, 30, controller, other)
    assert (_gpus_held(api, NS), _quota_held(api, NS)) == (2, 1)
    labels = _training_queue(api, OTHER)
    _team_creates_job(api, "waits", labels, namespace=OTHER, token=OTHER_TOKEN, gpus=1)
    for _ in range(10):
        _round(now, 300, controller, other)
    assert _quota_held(api, OTHER) == 1 and not _running(api, OTHER, "waits")


_ORPHANS_WORDS = "propagationPolicy=Background"


def _refused_orphaning(status: int, body: dict) -> None:
    assert status == 403, f"accepted ({status}): {body}"
    assert f"'{_JOBS_POLICY}'" in body["message"], body
    assert _ORPHANS_WORDS in body["message"], body


def test_a_team_may_not_delete_its_job_or_jobset_leaving_their_pods(api, controller):
    """Issue 29: a DELETE that orphans a job's pods is refused; one that takes them goes.

    Refused with the team's own token: no options (a batch/v1 Job's default orphans),
    propagationPolicy Orphan or orphanDependents true, in the query or the body; a JobSet
    with Orphan, or carrying the `orphan` finalizer and deleted with no options (store.go
    shouldOrphanDependents reads it). Its running pod keeps what Kueue admitted. With
    propagationPolicy Background (kubectl's default) the Job goes with its pod and its
    Workload: nothing held, nothing counted. A JobSet with no options takes its Jobs
    (a custom resource's default), and so does a JobSet whose `orphan` finalizer an
    explicit Background overrides.
    """
    other, now = _two_gpu_teams(api, controller)
    _team_creates_job(api, "first", _training_queue(api), gpus=1)
    _round(now, 30, controller, other)
    orphaning = (
        ("", None),
        ("?propagationPolicy=Orphan", None),
        ("?orphanDependents=true", None),
        ("", {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"}),
        ("", {"kind": "DeleteOptions", "apiVersion": "v1", "orphanDependents": True}),
    )
    for query, body in orphaning:
        _refused_orphaning(*_delete(api, f"{JOBS}/first", query, body))
    _round(now, 30, controller, other)
    assert (len(_running(api, NS, "first")), _quota_held(api, NS)) == (1, 1)
    status, body = _delete(api, f"{JOBS}/first", "?propagationPolicy=Background")
    assert status == 200, body
    _round(now, 30, controller, other)
    assert (_gpus_held(api, NS), _quota_held(api, NS)) == (0, 0)
    assert api.objects(_WORKLOADS.format(NS)) == []
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"
    for name, finalizers in (("plain", []), ("marked", ["orphan"])):
        manifest = _jobset_manifest(name, 0)
        manifest["metadata"]["finalizers"] = finalizers
        status, body = _post(api, jobsets, manifest, TOKEN)
        assert status == 201, body
    _refused_orphaning(*_delete(api, f"{jobsets}/plain", "?propagationPolicy=Orphan"))
    _refused_orphaning(*_delete(api, f"{jobsets}/marked"))
    for name, query in (("plain", ""), ("marked", "?propagationPolicy=Background")):
        status, body = _delete(api, f"{jobsets}/{name}", query)
        assert status == 200, body


@pytest.mark.parametrize(
    ("account", "propagation"),
    [
        # kube-controller-manager's controllers, each its own ServiceAccount (kubeadm)
        (("kube-system", "generic-garbage-collector"), "Background"),
        (("kube-system", "ttl-after-finished-controller"), "Foreground"),
        (("kube-system", "namespace-controller"), "Background"),
        (("jobset-system", "jobset-controller-manager"), "Foreground"),
        (("kueue-system", "kueue-controller-manager"), "Background"),
    ],
)
def test_the_clusters_own_deleters_of_a_consumers_jobs_still_delete_them(
    api, account, propagation
):
    """Each deleter of a consumer's Jobs names a propagation that keeps no pod running.

    The garbage collector (Background, or Foreground per the dependent's finalizers:
    garbagecollector.go attemptToDeleteItem), the TTL-after-finished controller
    (Foreground, ttlafterfinished_controller.go processJob), the namespace controller
    (Background, a deletecollection first: namespaced_resources_deleter.go), the JobSet
    controller (Foreground, jobset v0.12.0 deleteJobs) and Kueue (Background,
    reconciler.go handleWorkloadAfterDeactivatedPolicy) all pass; the same account
    orphaning is refused, cluster-admin included: the policy names no one.
    """
    user = f"system:serviceaccount:{account[0]}:{account[1]}"
    api.add_token("controller-token", user, ("system:masters",))

    def put(name: str) -> None:
        job = _job(name, _pod_spec(0), suspend=True, podReplacementPolicy="Failed")
        api.put_object(f"{JOBS}/{name}", job)

    put("taken")
    query = f"?propagationPolicy={propagation}"
    where = JOBS if account[1] == "namespace-controller" else f"{JOBS}/taken"
    status, body = _delete(api, where, query, token="controller-token")
    assert status == 200, body
    assert api.get_object(f"{JOBS}/taken") is None
    put("kept")
    orphan = "?propagationPolicy=Orphan"
    _refused_orphaning(*_delete(api, f"{JOBS}/kept", orphan, token="controller-token"))
    api.add_token("admin", "kubernetes-admin", ("system:masters",))
    _refused_orphaning(*_delete(api, f"{JOBS}/kept", orphan, token="admin"))
