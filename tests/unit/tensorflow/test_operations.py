"""scale, job-status, list-jobs, logs, stop; gang restarts, success, preemption and queueing."""

from __future__ import annotations

import dataclasses
import json

import job_state
import kubernetes_validate
import manifests
import params
import pytest
import queues
import readme_examples
import scale_records
import training
from conftest import (
    CLAIM,
    CTX,
    NS,
    TOKEN,
    add_nodes,
    condition,
    job_objects,
    jobset,
    node,
    role_spec,
    run_action,
    tf_grant,
    training_pods,
)
from ops import testing

import charm
from charms.gpu_k8s.v0.kube_objects import moves_patch
from fakes import kueue_visibility
from fakes.kube_admission import KUBERNETES_VERSION
from fakes.kube_apiserver import stamp_seconds
from fakes.kube_grants import service_account_path

JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs/"
PODS = f"/api/v1/namespaces/{NS}/pods/"


def progress_line(
    step: int,
    steps: int = 1000,
    *,
    loss: float = 0.5,
    eps: float = 640.0,
    resumed_from: int = 0,
    state: str = "running",
    history: list[float] | None = None,
    **extra,
) -> str:
    data = {
        "step": step,
        "steps": steps,
        "loss": loss,
        "examples_per_sec": eps,
        "global_batch_size": 64,
        "time": 1.0,
        "resumed_from": resumed_from,
        "state": state,
        "loss_history": history if history is not None else [2.3, 1.5, 1.0, 0.7, 0.5],
        **extra,
    }
    return f"GPU_K8S_PROGRESS {json.dumps(data)}"


def chief_log(text: str):
    """Logs for the controller: `text` for worker 0 (the mwms chief), a line for others."""

    def logs(pod: dict) -> str:
        labels = pod["metadata"]["labels"]
        if "gpu-k8s.io/role" not in labels:  # not a training pod (the purge Job's, ...)
            return ""
        index = labels["batch.kubernetes.io/job-completion-index"]
        # worker 0 is the chief of an mwms job (these tests name ps jobs "ps..."): read
        # from the job's label, never the pod's name, whose random suffix may hold "ps"
        mwms = not labels["gpu-k8s.io/job"].startswith("ps")
        if labels["gpu-k8s.io/role"] in ("chief",) or (
            labels["gpu-k8s.io/role"] == "worker" and index == "0" and mwms
        ):
            return text
        return f"{labels['gpu-k8s.io/role']} {index} serving\nsecond line\n"

    return logs


def _chief_succeeds(controller, job: str = "mnist", role: str = "worker") -> None:
    """The chief's container exits 0; the controllers react (Job complete, JobSet done)."""
    controller.end_pod(job, role, 0, "Succeeded")
    controller.tick()


@pytest.fixture
def running(ctx, state, api, controller):
    """A running mwms job `mnist` with 2 workers of 1 GPU on a 4-GPU node.

    And a CPU node, where TensorBoard runs: it does not tolerate the GPU taint.
    """
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    controller.logs = chief_log("starting from step 0 (target 1000)\n" + progress_line(500))
    with readme_examples.repeatable():  # its pods' names are in examples the README shows
        run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1})
    return state


# -------------------------------------------------------------------- scale


def test_scale_relaunches_with_new_tf_config_and_reports_resumed_step(
    ctx, running, api, controller
):
    old_pods = {p["metadata"]["name"] for p in training_pods(api)}
    controller.logs = chief_log(
        "resumed from checkpoint at step 300 (target 1000)\n"
        + progress_line(310, resumed_from=300)
    )

    with readme_examples.repeatable(18):
        results, logs = run_action(ctx, running, "scale", job="mnist", workers=4)
    readme_examples.show("scale", readme_examples.juju_results(results))

    spec = role_spec(jobset(api, "mnist"), "worker")
    assert spec["completions"] == spec["parallelism"] == 4
    env = {e["name"]: e["value"] for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert env["GPU_K8S_WORKERS"] == "4"
    pods = {p["metadata"]["name"] for p in training_pods(api)}
    assert len(pods) == 4 and not pods & old_pods
    annotations = jobset(api, "mnist")["metadata"]["annotations"]
    assert json.loads(annotations["gpu-k8s.io/request"])["workers"] == 4
    assert results["resumed-from-step"] == "300"
    assert results["changed"] == "true"
    assert "4/4 workers running" in logs


def test_scale_to_the_same_size_changes_nothing(ctx, running, api):
    before = job_objects(api)
    results, _ = run_action(ctx, running, "scale", job="mnist", workers=2)
    assert results["changed"] == "false"
    assert job_objects(api) == before


def test_scale_beyond_the_cluster_fails_and_keeps_the_job(ctx, running, api):
    before = job_objects(api)
    with pytest.raises(testing.ActionFailed, match="needs 5 GPUs but the cluster's schedulable"):
        run_action(ctx, running, "scale", job="mnist", workers=5)
    assert job_objects(api) == before


def test_scale_beyond_the_free_quota_queues_the_new_size(ctx, running, api, controller):
    controller.logs = None
    run_action(ctx, running, "train", job="other", workers=2, **{"gpus-per-worker": 1})
    results, _ = run_action(ctx, running, "scale", job="mnist", workers=3)
    assert results["state"].startswith("queued: position 1: couldn't assign flavors")
    assert jobset(api, "mnist")["spec"]["suspend"] is True


_JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"
_CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps/"
_DENIED = 'admission webhook "vjobset.kb.io" denied the request: quota'


def test_a_scale_the_api_server_refuses_restores_the_job_and_says_to_retry(ctx, running, api):
    """The old JobSet is gone before the new one is made: a refusal brings it back (N9)."""
    api.inject(status=422, times=1, method="PATCH", path_prefix=_JOBSETS, message=_DENIED)
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, running, "scale", job="mnist", workers=3)
    assert "denied the request" in failed.value.message
    assert (
        "job mnist was restored with 2 workers (it resumes from its last checkpoint): "
        "run scale again"
    ) in failed.value.message
    stored = json.loads(jobset(api, "mnist")["metadata"]["annotations"]["gpu-k8s.io/request"])
    assert stored["workers"] == 2
    assert api.get_object(_CONFIGMAPS + "mnist-scale") is None  # the JobSet holds them
    results, _ = run_action(ctx, running, "list-jobs")
    assert "mnist" in results["jobs"]


def test_a_scale_whose_job_cannot_be_restored_says_how_to_scale_it_again(ctx, running, api):
    """Its parameters are kept (`scale_record`): the same scale relaunches it once fixed."""
    api.inject(status=422, times=2, method="PATCH", path_prefix=_JOBSETS, message=_DENIED)
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, running, "scale", job="mnist", workers=3)
    assert (
        "job mnist is stopped and could not be restored either; its checkpoints are kept "
        "in jobs/mnist and its parameters with them: run scale job=mnist workers=3 again "
        "once that is fixed (it relaunches the job from its last checkpoint)"
    ) in failed.value.message
    assert api.get_object(f"{_JOBSETS}/mnist") is None
    kept = api.get_object(_CONFIGMAPS + "mnist-scale")
    assert json.loads(kept["metadata"]["annotations"]["gpu-k8s.io/request"])["workers"] == 3


_HOLD = "example.com/still-stopping"


def _slow_to_stop(api, controller, index: int) -> str:
    """Worker `index` of mnist outlives its deletion: its container is still stopping.

    kubelet removes a deleted pod only once its containers stopped (up to the grace
    period, then SIGKILL, then its report); meanwhile the pod is listed, terminating
    (deletionTimestamp). A finalizer holds it here the same way (the fake deletes at once).
    """
    pod = controller.pod("mnist", "worker", index)
    path = PODS + pod["metadata"]["name"]
    api.put_object(path, {**pod, "metadata": {**pod["metadata"], "finalizers": [_HOLD]}})
    return path


def _act(ctx, state, action: str, /, **params) -> dict:
    """Run an action on a unit that has reconciled already (the job's train did); results."""
    ctx.run(ctx.on.action(action, params=params), state)
    return dict(ctx.action_results or {})


def _stopped(api, path: str) -> None:
    """The held pod's container stopped: kubelet's report lets its deletion complete."""
    held = api.get_object(path)
    api.put_object(path, {**held, "metadata": {**held["metadata"], "finalizers": []}})
    api.delete_object(path)


def test_a_scale_whose_old_pods_outlive_the_wait_keeps_the_job_and_says_how_to_retry(
    ctx, running, api, controller, fake_time
):
    """Issue 31 item 2: a failed `scale` keeps the job and says how to retry.

    The old JobSet must go before the new one is made (its replicated Jobs are
    immutable), so its parameters are kept apart until the new one exists; a retry waits
    for the old pods again and relaunches the job at the asked size, nothing lost.
    """
    asked = json.loads(jobset(api, "mnist")["metadata"]["annotations"]["gpu-k8s.io/request"])
    held = _slow_to_stop(api, controller, 1)
    start = fake_time.now
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, running, "scale", job="mnist", workers=3, timeout=0)
    assert failed.value.message == (
        "old pods of mnist are still terminating after 90 s; the job's parameters are "
        "kept: run scale job=mnist workers=3 again in a minute (it waits for them, then "
        "relaunches the job from its last checkpoint)"
    )
    assert fake_time.now - start == pytest.approx(90)  # the grace period and a margin
    assert api.get_object(held)["metadata"]["deletionTimestamp"]
    assert api.get_object(f"{_JOBSETS}/mnist") is None

    _stopped(api, held)
    results = _act(ctx, running, "scale", job="mnist", workers=3, timeout=0)

    assert results["changed"] == "true" and results["workers"] == "3"
    stored = json.loads(jobset(api, "mnist")["metadata"]["annotations"]["gpu-k8s.io/request"])
    assert stored == {**asked, "workers": 3}  # every other parameter as trained
    assert role_spec(jobset(api, "mnist"), "worker")["parallelism"] == 3
    code = api.get_object(_CONFIGMAPS + "mnist-code")
    assert code is not None and code["data"] == training.read_code()
    assert api.get_object(JOBS + "mnist-purge") is None  # the checkpoints are untouched
    assert api.get_object(_CONFIGMAPS + "mnist-scale") is None  # the JobSet holds them again
    assert "mnist" in _act(ctx, running, "list-jobs")["jobs"]


def test_a_job_whose_scale_timed_out_can_be_trained_again_or_stopped(
    ctx, running, api, controller, fake_time
):
    """`train` of the job waits for the old pods, then replaces what the scale kept."""
    held = _slow_to_stop(api, controller, 1)
    with pytest.raises(testing.ActionFailed, match="still terminating"):
        run_action(ctx, running, "scale", job="mnist", workers=3, timeout=0)
    kept = api.get_object(_CONFIGMAPS + "mnist-scale")
    assert json.loads(kept["metadata"]["annotations"]["gpu-k8s.io/request"])["workers"] == 3
    with pytest.raises(testing.ActionFailed) as failed:
        _act(ctx, running, "train", job="mnist", workers=3, **{"gpus-per-worker": 1})
    assert failed.value.message == (
        "old pods of mnist are still terminating after a scale: run scale job=mnist "
        "workers=3 again in a minute (it waits for them, then relaunches the job from its "
        "last checkpoint)"
    )
    _stopped(api, held)
    _act(ctx, running, "train", job="mnist", workers=3, **{"gpus-per-worker": 1})
    assert api.get_object(_CONFIGMAPS + "mnist-scale") is None
    assert role_spec(jobset(api, "mnist"), "worker")["parallelism"] == 3
    api.put_object(_CONFIGMAPS + "mnist-scale", kept)  # as a scale that timed out leaves it
    _act(ctx, running, "stop", job="mnist")
    assert api.get_object(_CONFIGMAPS + "mnist-scale") is None  # with the job's objects


def test_scale_unknown_job_fails(ctx, state, api):
    with pytest.raises(testing.ActionFailed, match="no job 'nope' in namespace tensorflow"):
        run_action(ctx, state, "scale", job="nope", workers=3)


def test_scale_finished_job_fails(ctx, running, api, controller):
    _chief_succeeds(controller)
    with pytest.raises(testing.ActionFailed, match="has finished"):
        run_action(ctx, running, "scale", job="mnist", workers=3)


def test_scale_rejects_zero_workers(ctx, running, api):
    with pytest.raises(testing.ActionFailed, match="workers: must be between 1"):
        run_action(ctx, running, "scale", job="mnist", workers=0)


def _other_unit() -> manifests.Context:
    """Where another unit of the application runs jobs (only what a scale reads differs)."""
    return manifests.Context(
        namespace=NS, app="tensorflow", claim=CLAIM, default_image="-", tensorboard_image="-"
    )


def _from_other_unit(api, fake_time, operation, *args, **waits):
    """`operation` (scale, launch, status) as another unit's action runs it: its token."""
    from charms.gpu_k8s.v0.kubeclient import Kube

    if operation is not training.status:
        waits = {"log": lambda _: None, "clock": fake_time.monotonic, **waits}
    with Kube.from_kubeconfig(api.kubeconfig(TOKEN)) as kube:
        return operation(kube, _other_unit(), *args, now=fake_time.time, **waits)


def _scale_from_other_unit(api, fake_time, job: str, workers: int, **waits) -> dict:
    code = training.read_code()
    return _from_other_unit(api, fake_time, training.scale, job, workers, 0, code, **waits)


def test_job_status_shows_a_job_kept_by_a_failed_scale_and_how_to_retry(
    ctx, running, api, controller, fake_time
):
    """Issue 31: a job whose scale failed half-way is its record only; job-status shows it."""
    held = _slow_to_stop(api, controller, 1)
    with pytest.raises(testing.ActionFailed):
        run_action(ctx, running, "scale", job="mnist", workers=3, timeout=0)
    failed_at = scale_records.stamp(fake_time.time())

    results = _act(ctx, running, "job-status", job="mnist")

    assert results == {
        "job": "mnist",
        "phase": "Stopped",
        "scale": (
            f"stopped at {failed_at} by a scale to 3 workers: its old pods were still "
            "terminating after 90 s; run scale job=mnist workers=3 again in a minute (it "
            "waits for them, then relaunches the job from its last checkpoint)"
        ),
        "strategy": "mwms",
        "priority": "normal",
        "workers": "3",
        "old-pods": "1 still terminating",
        "gpus-held": "1",
        "data": "kept on the shared volume in jobs/mnist",
    }
    _stopped(api, held)
    assert _act(ctx, running, "job-status", job="mnist")["old-pods"] == "gone"


def test_list_jobs_shows_a_job_kept_by_a_failed_scale_and_how_to_retry(
    ctx, running, api, fake_time
):
    """Neither size could be made again: the record says so and what to run once fixed."""
    run_action(ctx, running, "train", job="other", workers=1, **{"gpus-per-worker": 1})
    api.inject(status=422, times=2, method="PATCH", path_prefix=_JOBSETS, message=_DENIED)
    with pytest.raises(testing.ActionFailed):
        run_action(ctx, running, "scale", job="mnist", workers=3)
    failed_at = scale_records.stamp(fake_time.time())

    jobs = _act(ctx, running, "list-jobs")["jobs"]

    assert jobs["mnist"] == (
        f"Stopped: stopped at {failed_at} by a scale to 3 workers: the API server refused "
        f"JobSet mnist: {_DENIED}, and it could not be restored either; once that is fixed, "
        "run scale job=mnist workers=3 again (it relaunches the job from its last checkpoint)"
    )
    assert jobs["other"].startswith("Running")
    assert _act(ctx, running, "list-jobs")["count"] == "2"


def test_a_second_scale_of_a_job_is_refused_while_one_runs(
    ctx, running, api, controller, fake_time, monkeypatch
):
    """A scale holds its job's record until it could have ended: other units wait.

    `scale` is parallel: true and every unit runs its own actions (Juju's uniter runs one
    operation of a unit at a time: juju/juju internal/worker/uniter/operation/executor.go),
    so two units can scale one job at once. A second scale from another unit is refused
    meanwhile, and a train of the job too; the first relaunches the job at its own size.
    """
    held = _slow_to_stop(api, controller, 1)
    sleep = charm.TensorflowCharm.sleep
    seen: list = []

    def meanwhile(seconds: float) -> None:  # the first scale waits for its old pods
        if not seen:  # other units' actions (the scenario runs one action at a time)
            with pytest.raises(training.JobError) as second:
                _scale_from_other_unit(api, fake_time, "mnist", 4, sleep=sleep)
            seen.append(str(second.value))
            again = params.TrainRequest(job="mnist", workers=4, gpus_per_worker=1)
            code = training.read_code()
            with pytest.raises(training.JobError) as train:
                _from_other_unit(api, fake_time, training.launch, again, code, sleep=sleep)
            seen.append(str(train.value))
            seen.append(_from_other_unit(api, fake_time, training.status, "mnist"))
            _stopped(api, held)
        sleep(seconds)

    monkeypatch.setattr(charm.TensorflowCharm, "sleep", staticmethod(meanwhile))
    start = fake_time.time()
    results, _ = run_action(ctx, running, "scale", job="mnist", workers=3, timeout=0)

    until = scale_records.stamp(start + 90 + scale_records.MARGIN_SECONDS)
    refusal = (
        "job 'mnist' is being scaled by another scale action (to 3 workers, until "
        f"{until} at most): job-status job=mnist shows it; run scale again once it has "
        "finished"
    )
    assert seen[:2] == [refusal, refusal]
    assert seen[2]["phase"] == "Scaling"
    assert seen[2]["scale"] == (
        f"being scaled to 3 workers since {scale_records.stamp(start)}: its old pods stop, "
        f"saving a checkpoint, then it is relaunched from it; if it has not finished by "
        f"{until}, run scale again"
    )
    assert results["changed"] == "true"
    assert role_spec(jobset(api, "mnist"), "worker")["parallelism"] == 3
    assert api.get_object(_CONFIGMAPS + "mnist-scale") is None


def _past_the_lease(api, fake_time) -> None:
    """The wall clock moves past the end of the scale's lease on mnist's record."""
    found = api.get_object(_CONFIGMAPS + "mnist-scale")
    until = scale_records.Record.of(found).until
    fake_time.now += until - fake_time.time()


class _Killed(BaseException):
    """The action's process ends here (Juju cancelled it, or the machine went down)."""


def test_a_scale_whose_action_was_killed_holds_the_job_only_until_its_lease_ends(
    ctx, running, api, controller, fake_time
):
    def killed(seconds: float) -> None:
        raise _Killed

    held = _slow_to_stop(api, controller, 1)
    with pytest.raises(_Killed):
        _scale_from_other_unit(api, fake_time, "mnist", 3, sleep=killed)
    lease = api.get_object(_CONFIGMAPS + "mnist-scale")["metadata"]["annotations"]
    until = lease["gpu-k8s.io/scale-until"]
    with pytest.raises(testing.ActionFailed, match="is being scaled by another scale action"):
        _act(ctx, running, "scale", job="mnist", workers=4)

    _past_the_lease(api, fake_time)
    results = _act(ctx, running, "job-status", job="mnist")
    assert (results["phase"], results["scale"]) == (
        "Stopped",
        f"stopped by a scale to 3 workers that did not finish by {until} (its action ended "
        "or was cancelled); run scale job=mnist workers=3 again (it relaunches the job from "
        "its last checkpoint)",
    )
    _stopped(api, held)
    results = _act(ctx, running, "scale", job="mnist", workers=3, timeout=0)
    assert results["changed"] == "true"
    assert role_spec(jobset(api, "mnist"), "worker")["parallelism"] == 3
    assert api.get_object(_CONFIGMAPS + "mnist-scale") is None


def test_a_takeover_of_a_failed_record_loses_to_one_made_meanwhile(
    ctx, running, api, controller, fake_time
):
    """Two scales take over one failed record at once: the later patch is refused (409).

    Its patch carries the resourceVersion it read, which the other's write moved on
    (kube-apiserver Store.Update; the fake answers the same: test_fake_writes).
    """
    from charms.gpu_k8s.v0.kubeclient import Kube

    held = _slow_to_stop(api, controller, 1)
    with pytest.raises(testing.ActionFailed):
        run_action(ctx, running, "scale", job="mnist", workers=3, timeout=0)
    path = _CONFIGMAPS + "mnist-scale"
    until = scale_records.stamp(fake_time.time() + 600)

    class Racing(Kube):
        """Another unit's scale takes the record over between this one's read and patch."""

        def patch(self, api_version, kind, name, patch, namespace=None, **kwargs):
            if name == "mnist-scale" and api.get_object(path) is not None:
                other = api.get_object(path)
                other["metadata"]["annotations"][scale_records.ANNOTATION_UNTIL] = until
                api.put_object(path, other)
            return super().patch(api_version, kind, name, patch, namespace, **kwargs)

    code = training.read_code()
    with (
        Racing.from_kubeconfig(api.kubeconfig(TOKEN)) as kube,
        pytest.raises(training.JobError, match="is being scaled by another scale action"),
    ):
        training.scale(
            kube,
            _other_unit(),
            "mnist",
            4,
            0,
            code,
            now=fake_time.time,
            log=lambda _: None,
            clock=fake_time.monotonic,
        )
    record = api.get_object(path)["metadata"]["annotations"]
    assert record[scale_records.ANNOTATION_UNTIL] == until  # still the other's lease
    _stopped(api, held)


def test_a_stop_while_a_scale_waits_wins(ctx, running, api, controller, fake_time):
    """The scale relaunches nothing once its record is gone."""
    held = _slow_to_stop(api, controller, 1)

    def meanwhile(seconds: float) -> None:
        if api.get_object(_CONFIGMAPS + "mnist-scale") is not None:
            _act(ctx, running, "stop", job="mnist")
            _stopped(api, held)
        fake_time.now += seconds
        controller.tick()

    with pytest.raises(training.JobError) as failed:
        _scale_from_other_unit(api, fake_time, "mnist", 3, sleep=meanwhile)
    assert str(failed.value) == (
        "job 'mnist' was stopped while this scale waited for its old pods (or another "
        "scale took it over): nothing was relaunched"
    )
    assert job_objects(api) == []


def test_no_stale_scale_record_outlives_the_new_jobset(ctx, running, api, fake_time):
    """A scale whose action ended after making the new JobSet leaves its record behind.

    While its lease runs the record is left alone (a scale may be about to delete it);
    then the leader's next reconcile deletes it: the JobSet holds the job's request.
    """
    api.inject(status=403, times=1, method="DELETE", path_prefix=_CONFIGMAPS + "mnist-scale")
    with pytest.raises(testing.ActionFailed, match="Kubernetes API error"):
        _act(ctx, running, "scale", job="mnist", workers=3)
    assert role_spec(jobset(api, "mnist"), "worker")["parallelism"] == 3
    assert api.get_object(_CONFIGMAPS + "mnist-scale") is not None
    ctx.run(ctx.on.update_status(), running)
    assert api.get_object(_CONFIGMAPS + "mnist-scale") is not None  # its lease still runs
    assert _act(ctx, running, "list-jobs")["jobs"]["mnist"].endswith(
        "worker 0/3, 0 GPU, step unknown/1000"
    )

    _past_the_lease(api, fake_time)
    ctx.run(ctx.on.update_status(), running)
    assert api.get_object(_CONFIGMAPS + "mnist-scale") is None
    assert _act(ctx, running, "job-status", job="mnist")["pods-ready"] == {"worker": "0/3"}


def _as_an_older_revision_wrote_it(api, job: str, workers: int) -> dict:
    """`<job>-scale` as the revisions before f64c7fa wrote it, the job's JobSet gone.

    fc34adc training.py scale_record: the job's labels only (manifests.labels(app, job), no
    component label), the request annotation only (no words, no lease); a scale that
    failed after deleting the old JobSet left it so.
    """
    js = jobset(api, job)
    request = json.loads(js["metadata"]["annotations"]["gpu-k8s.io/request"])
    labels = {k: v for k, v in js["metadata"]["labels"].items() if k != "gpu-k8s.io/component"}
    annotations = {"gpu-k8s.io/request": json.dumps({**request, "workers": workers})}
    meta = {"name": f"{job}-scale", "namespace": NS, "labels": labels}
    meta["annotations"] = annotations
    api.delete_object(f"{_JOBSETS}/{job}")
    return api.put_object(_CONFIGMAPS + f"{job}-scale", {"metadata": meta})


def test_a_record_an_older_revision_wrote_is_listed_once_the_leader_refreshed(ctx, running, api):
    """list-jobs lists the records by their component label: an older one has none.

    The leader labels such records on upgrade-charm (one list of the application's
    ConfigMaps without a component label, one patch each), so list-jobs and job-status keep
    their request counts and find the job as a record of today's revision would show it.
    """
    _as_an_older_revision_wrote_it(api, "mnist", 3)
    before = len(api.requests)
    assert "mnist" not in _act(ctx, running, "list-jobs").get("jobs", {})  # until refreshed
    list_cost = len(api.requests) - before
    ctx.run(ctx.on.upgrade_charm(), running)
    labels = api.get_object(_CONFIGMAPS + "mnist-scale")["metadata"]["labels"]
    assert labels["gpu-k8s.io/component"] == "scale"
    assert (
        api.get_object(_CONFIGMAPS + "mnist-code")["metadata"]["labels"].get(
            "gpu-k8s.io/component"
        )
        is None
    )  # the job's code ConfigMap has no component either: left alone
    before = len(api.requests)
    jobs = _act(ctx, running, "list-jobs")["jobs"]
    assert len(api.requests) - before == list_cost
    assert jobs["mnist"] == (
        "Stopped: stopped by a scale to 3 workers; run scale job=mnist workers=3 again (it "
        "relaunches the job from its last checkpoint)"
    )
    assert _act(ctx, running, "job-status", job="mnist")["phase"] == "Stopped"


# -------------------------------------------------------------------- status, list, logs


def test_job_status_reads_progress_from_the_chief_log(ctx, running, api):
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["phase"] == "Running"
    assert results["pods-ready"] == {"worker": "2/2"}
    assert results["gpus-held"] == "2"
    assert results["step"] == "500/1000"
    assert results["loss"] == "0.5000"
    assert results["examples-per-sec"] == "640.0"
    assert results["eta"] == "50s"  # 500 steps at 10 steps/s
    assert results["loss-trend"] == "█▅▃▁▁"
    assert results["tensorboard-url"].startswith("http://mnist-tensorboard.")


def test_job_status_shows_the_held_out_evaluation_and_the_export(ctx, state, api, controller):
    add_nodes(api, node("cpu-0"))
    export = "/data/jobs/mnist/export/1000"
    line = progress_line(1000, state="finished", eval_step=1000, eval_loss=0.3125)
    line = line[:-1] + f', "eval_accuracy": 0.9137, "export": "{export}"}}'
    controller.logs = chief_log(f"eval at step 1000: loss 0.3125 accuracy 0.9137\n{line}\n")
    run_action(ctx, state, "train", job="mnist", workers=1)
    results, _ = run_action(ctx, state, "job-status", job="mnist")
    assert results["eval"] == "loss 0.3125, accuracy 91.4% (held out, step 1000)"
    assert results["export"] == export


def test_job_status_without_progress_yet(ctx, state, api, controller):
    controller.logs = chief_log("starting from step 0 (target 1000)\n")
    run_action(ctx, state, "train", job="fresh", workers=1)
    results, _ = run_action(ctx, state, "job-status", job="fresh")
    assert results["step"] == "unknown/1000"
    assert "no progress report yet" in results["progress"]


def test_job_status_succeeded(ctx, running, api, controller):
    _chief_succeeds(controller)
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["phase"] == "Succeeded"
    assert results["restarts"] == "0 of 3"


def test_job_status_unknown_job_fails(ctx, state, api):
    with pytest.raises(testing.ActionFailed, match="no job 'ghost'"):
        run_action(ctx, state, "job-status", job="ghost")


def test_list_jobs_one_line_each(ctx, running, api, controller):
    controller.logs = None
    run_action(ctx, running, "train", job="other", workers=1)
    results, _ = run_action(ctx, running, "list-jobs")
    assert results["count"] == "2"
    assert results["jobs"]["mnist"].startswith("Running, worker 2/2, 2 GPU, step 500/1000")
    assert "loss 0.5000 █▅▃▁▁" in results["jobs"]["mnist"]
    assert results["jobs"]["other"] == "Running, worker 1/1, 0 GPU, step unknown/1000"


def test_a_queued_job_says_why_and_where_in_status_and_list(ctx, running, api, controller):
    controller.logs = None
    queued, _ = run_action(ctx, running, "train", job="big", workers=3, **{"gpus-per-worker": 1})
    results, _ = run_action(ctx, running, "job-status", job="big")
    assert results["phase"] == "Queued"
    assert results["queue"].startswith("position 1: couldn't assign flavors to pod set")
    assert results["gpus-held"] == "0"
    listed, _ = run_action(ctx, running, "list-jobs")
    assert listed["jobs"]["big"].startswith("Queued, position 1: couldn't assign flavors")
    readme_examples.show("train-queued", readme_examples.juju_results(queued))
    readme_examples.show("list-jobs", readme_examples.juju_results(listed))


def test_list_jobs_empty(ctx, state, api):
    results, _ = run_action(ctx, state, "list-jobs")
    assert results == {"count": "0"}


def test_logs_prefix_every_line_with_role_and_index(ctx, running, api):
    results, _ = run_action(ctx, running, "logs", job="mnist", lines=1)
    lines = results["logs"].splitlines()
    assert lines[0].startswith("[worker-0] GPU_K8S_PROGRESS ")
    assert lines[1] == "[worker-1] second line"
    assert len(lines) == 2


def test_logs_of_ps_job_cover_every_role(ctx, state, api, controller):
    add_nodes(api, node("cpu-0"))
    controller.logs = chief_log("chief says hi\n")
    run_action(ctx, state, "train", job="pst", strategy="ps", ps=1, workers=2)
    results, _ = run_action(ctx, state, "logs", job="pst")
    prefixes = [line.split()[0] for line in results["logs"].splitlines()]
    assert prefixes == [
        "[chief-0]",
        "[ps-0]",
        "[ps-0]",
        "[worker-0]",
        "[worker-0]",
        "[worker-1]",
        "[worker-1]",
    ]


def test_logs_of_one_role_or_one_replica(ctx, state, api, controller):
    add_nodes(api, node("cpu-0"))
    controller.logs = chief_log("hi\n")
    run_action(ctx, state, "train", job="pst", strategy="ps", ps=1, workers=3)

    def prefixes(**params) -> set[str]:
        results, _ = run_action(ctx, state, "logs", job="pst", **params)
        return {line.split()[0] for line in results["logs"].splitlines()}

    assert prefixes(role="worker") == {"[worker-0]", "[worker-1]", "[worker-2]"}
    assert prefixes(role="worker", index=2) == {"[worker-2]"}
    assert prefixes(role="ps") == {"[ps-0]"}
    with pytest.raises(testing.ActionFailed, match=r"has 3 worker replicas \(index 0 to 2\)"):
        run_action(ctx, state, "logs", job="pst", role="worker", index=3)
    with pytest.raises(testing.ActionFailed, match="index needs role"):
        run_action(ctx, state, "logs", job="pst", index=1)


def test_logs_of_a_role_the_job_lacks_fail_clearly(ctx, running):
    with pytest.raises(testing.ActionFailed, match="job 'mnist' has no ps: its roles are worker"):
        run_action(ctx, running, "logs", job="mnist", role="ps")


def test_logs_say_when_a_replica_has_no_pod(ctx, running, api):
    for pod in training_pods(api):
        if pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1":
            api.delete_object(PODS + pod["metadata"]["name"])
    results, _ = run_action(ctx, running, "logs", job="mnist")
    assert (
        "[worker-1] (no pod; its output is kept on the shared volume in "
        "jobs/mnist/pod-logs/worker-1.log)" in results["logs"].splitlines()
    )


def test_logs_show_a_crashed_containers_last_words_and_how_each_instance_ended(ctx, running, api):
    tutorial, _ = run_action(ctx, running, "logs", job="mnist", lines=20)  # before the crash
    readme_examples.show("tutorial-logs", readme_examples.juju_results(tutorial))
    pod = next(
        p
        for p in training_pods(api)
        if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1"
    )
    name = pod["metadata"]["name"]
    pod["status"]["containerStatuses"] = [
        {
            "name": "tensorflow",
            "restartCount": 2,
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            "state": {"running": {}},
        }
    ]
    api.put_object(PODS + name, pod)
    api.set_pod_log(NS, name, "Traceback (most recent call last):\nMemoryError\n", previous=True)
    results, _ = run_action(ctx, running, "logs", job="mnist", lines=5)
    readme_examples.show("logs", readme_examples.juju_results(results))
    lines = results["logs"].splitlines()
    assert (
        "[worker-1] (restarted 2 times; previous container ended with exit code 137 (OOMKilled))"
        in lines
    )
    assert "[worker-1] previous: MemoryError" in lines
    assert "[worker-1] second line" in lines  # the current instance's log follows
    assert not any(line.startswith("[worker-0] (") for line in lines)  # it simply runs


def test_logs_of_a_container_that_never_restarted_ask_for_no_previous_log(ctx, running, api):
    pod = next(p for p in training_pods(api))
    pod["status"]["containerStatuses"] = [
        {"name": "tensorflow", "restartCount": 0, "state": {"terminated": {"exitCode": 1}}}
    ]
    api.put_object(PODS + pod["metadata"]["name"], pod)
    before = len(api.requests)
    results, _ = run_action(ctx, running, "logs", job="mnist")
    assert "(container ended with exit code 1)" in results["logs"]
    assert not [r for r in api.requests[before:] if r.query.get("previous")]


# -------------------------------------------------------------------- stop


def test_stop_deletes_every_object_and_keeps_the_data(ctx, running, api):
    results, _ = run_action(ctx, running, "stop", job="mnist")
    readme_examples.show("stop", readme_examples.juju_results(results))
    assert job_objects(api) == []
    # the JobSet; its Jobs and pods, the code ConfigMap and TensorBoard go with it
    assert results["deleted-objects"] == "1"
    assert "kept on the shared volume in jobs/mnist" in results["data"]
    assert api.get_object(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/{CLAIM}")


def test_stop_twice_is_harmless(ctx, running, api):
    run_action(ctx, running, "stop", job="mnist")
    results, _ = run_action(ctx, running, "stop", job="mnist")
    assert results["deleted-objects"] == "0"
    assert job_objects(api) == []


def test_stop_with_purge_starts_a_cleanup_job(ctx, running, api, controller):
    results, _ = run_action(ctx, running, "stop", job="mnist", purge=True)
    controller.tick()
    remaining = [o for o in job_objects(api) if o["kind"] != "Pod"]
    assert [o["metadata"]["name"] for o in remaining] == ["mnist-purge"]
    purge = remaining[0]
    container = purge["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["rm", "-rf", "--", "/data/jobs/mnist"]
    assert purge["spec"]["template"]["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}
    ]
    assert purge["spec"]["ttlSecondsAfterFinished"] > 0
    assert purge["metadata"]["labels"]["gpu-k8s.io/job"] == "mnist"
    # in the team's queue: Kueue manages every Job of the namespace (issue 29 leftover 3);
    # it asks for no cpu or memory, so it is admitted at once
    assert purge["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert purge["spec"]["suspend"] is False
    manifest = {k: v for k, v in purge.items() if k != "status"}
    manifest["metadata"] = {k: purge["metadata"][k] for k in ("name", "namespace", "labels")}
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    assert results["data"] == "being removed by Job mnist-purge"


def test_train_waits_for_a_running_purge(ctx, running, api):
    run_action(ctx, running, "stop", job="mnist", purge=True)
    with pytest.raises(testing.ActionFailed, match="still being purged"):
        run_action(ctx, running, "train", job="mnist", workers=2)
    assert [o["metadata"]["name"] for o in job_objects(api)] == ["mnist-purge"]


def test_stop_rejects_a_bad_name(ctx, state, api):
    with pytest.raises(testing.ActionFailed, match="not a valid job name"):
        run_action(ctx, state, "stop", job="../etc", purge=True)
    assert not [r for r in api.requests if r.method != "GET" and "queues" not in r.path]


# -------------------------------------------------------------------- gang semantics


def test_one_dead_worker_of_six_restarts_the_gang_which_then_finishes(ctx, state, api, controller):
    """Today's Indexed Jobs failed such a job at its first fault (tf.md #1); JobSet restarts it."""
    add_nodes(api, node("node-a", 8))
    controller.logs = None
    run_action(ctx, state, "train", job="six", workers=6, **{"gpus-per-worker": 1})
    first = {p["metadata"]["name"] for p in training_pods(api)}
    controller.end_pod("six", "worker", 3, "Failed")
    controller.tick()  # the Job fails; JobSet deletes every Job and makes them again
    results, _ = run_action(ctx, state, "job-status", job="six")
    assert (results["phase"], results["restarts"]) == ("Restarting", "1 of 3")
    controller.tick()  # the pods come back
    results, _ = run_action(ctx, state, "job-status", job="six")
    assert results["phase"] == "Running"
    assert results["restarts"] == "1 of 3"
    assert results["pods-ready"] == {"worker": "6/6"}
    pods = training_pods(api)
    assert not {p["metadata"]["name"] for p in pods} & first  # every pod was recreated
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in pods} == {"1"}
    _chief_succeeds(controller, "six")
    results, _ = run_action(ctx, state, "job-status", job="six")
    assert results["phase"] == "Succeeded"
    assert [p for p in training_pods(api) if p["status"]["phase"] == "Running"] == []


def test_a_gang_that_keeps_failing_fails_after_max_restarts(ctx, state, api, controller):
    controller.logs = None
    add_nodes(api, node("cpu-0"))  # Kueue counts cpu and memory: a quota needs nodes
    state = dataclasses.replace(state, config={"max-restarts": 1})
    run_action(ctx, state, "train", job="flaky", workers=2)
    assert jobset(api, "flaky")["spec"]["failurePolicy"]["maxRestarts"] == 1
    for _ in range(2):
        controller.end_pod("flaky", "worker", 1, "Failed")
        controller.tick()
        controller.tick()
    results, _ = run_action(ctx, state, "job-status", job="flaky")
    assert results["phase"] == "Failed"
    assert results["restarts"] == "1 of 1"


def test_a_drained_pod_is_replaced_without_restarting_the_gang(ctx, running, api, controller):
    controller.end_pod("mnist", "worker", 1, "Failed", disrupted=True)
    controller.tick()
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["phase"] == "Running" and results["restarts"] == "0 of 3"


@pytest.mark.parametrize("order", ["condition first", "exit code first", "no fault window"])
def test_a_gpu_fault_s_crash_held_until_the_eviction_is_not_counted(
    ctx, running, api, controller, order
):
    """Issue 32 item 2: worker 1's GPU fails its program before the watcher's eviction.

    Its launcher holds the exit for its fault window (tf_launcher.py FAULT_WINDOW) until
    the eviction's SIGTERM, exits 143 and marks its stop; worker 0 stops on the mark, 143.
    Whichever the Job controller reads first, the evicted pod's DisruptionTarget with 143
    (podFailurePolicy rule 0, Ignore: replaced, then worker 0's 143) or a 143 alone (rule
    1, FailJob), the gang restarts under the JobSet's stoppedNotCounted rule. Without
    the window the crashed pod was Failed with the program's 1 before anything else:
    BackoffLimitExceeded, counted.
    """
    if order == "condition first":  # Eviction API: the condition, then kubelet's SIGTERM
        controller.evict("mnist", "worker", 1)
        controller.tick()  # rule 0: replaced, not counted; the Job goes on
        controller.end_pod("mnist", "worker", 0, "Failed", exit_code=143)  # on the mark
    else:
        controller.end_pod("mnist", "worker", 1, "Failed", exit_code=143 if "exit" in order else 1)
    controller.tick()
    assert jobset(api, "mnist")["status"]["restarts"] == 1
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["restarts"] == ("1 of 3" if order == "no fault window" else "0 of 3")


def test_job_status_says_a_job_was_moved_off_a_node_whose_gpu_failed(
    ctx, running, api, controller
):
    """Review43b G6: "counts as a node fault" showed nowhere in job-status.

    While the evicted pod terminates, its DisruptionTarget and its node's GpuHealthy=False
    (the worker's quarantine) say where it moved from and why; once JobSet restarted the
    gang, its status keeps the count (restarts less restartsCountTowardsMax) after the pods
    are gone.
    """
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert "moves" not in results  # nothing moved yet
    controller.kubelet = None
    pod = controller.pod("mnist", "worker", 1)
    where = pod["spec"]["nodeName"]
    found = api.get_object(f"/api/v1/nodes/{where}")
    found["status"]["conditions"].append(
        {"type": "GpuHealthy", "status": "False", "reason": "Xid79"}
    )
    api.put_object(f"/api/v1/nodes/{where}", found)
    pod["status"].setdefault("conditions", []).append(
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    )
    controller._write_status(pod)  # the watcher's eviction; the pod still terminates

    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["moves"] == f"0 so far, now off node {where}: GPU fault"

    controller.end_pod("mnist", "worker", 1, "Failed", exit_code=143, disrupted=True)
    controller.tick()
    controller.end_pod("mnist", "worker", 0, "Failed", exit_code=143)  # on the mark
    controller.tick()
    controller.tick()
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["restarts"] == "0 of 3"
    moved = (  # a split gang: JobSet's restart counts the move
        "1 (not counted toward max-restarts: a drain, a GPU quarantine or an eviction took "
        "the job's pods back)"
    )
    assert results["moves"] == moved
    # the control plane's record of that quarantine names it, counting it no second time
    js = jobset(api, "mnist")
    fault = "GPU 0 (GPU-1): GPU has fallen off the bus; repair: reboot"
    record = moves_patch(js, where, fault, "2026-11-28T06:00:00Z", restarted=True)
    assert record is not None
    js["metadata"].setdefault("annotations", {}).update(record["metadata"]["annotations"])
    api.put_object(f"{_JOBSETS}/mnist", js)
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["moves"] == (
        f"{moved}; off node {where} after a GPU fault at 2026-11-28T06:00:00Z: {fault}"
    )


def test_job_status_names_who_took_a_pod_back_when_no_gpu_failed(ctx, running, api, controller):
    controller.kubelet = None
    pod = controller.pod("mnist", "worker", 1)
    pod["status"].setdefault("conditions", []).append(
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
    )
    controller._write_status(pod)
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["moves"] == f"0 so far, now off node {pod['spec']['nodeName']}: NoExecute taint"


def test_a_program_crashed_by_its_own_application_xid_counts_toward_max_restarts(
    ctx, state, api, controller
):
    """Issue 32 item 2 (review): a job with a CUDA bug fails after its max-restarts.

    An application XID (13, 31, 43...) is the program's own fault: the GPU health watcher
    does not evict a pod whose program crashed on it (gpu_watcher.py: it evicts only a
    process still running after the launcher's fault window and a margin). No stop comes
    within the fault window, so the launcher exits with the program's code (1) and the
    failure counts; evicted, it was a 143 with DisruptionTarget, not counted, for ever.
    """
    controller.logs = None
    add_nodes(api, node("node-a", 8))
    state = dataclasses.replace(state, config={"max-restarts": 1})
    run_action(ctx, state, "train", job="buggy", workers=2, **{"gpus-per-worker": 1})
    controller.end_pod("buggy", "worker", 1, "Failed", exit_code=1)  # its XID 13, no eviction
    controller.tick()
    results, _ = run_action(ctx, state, "job-status", job="buggy")
    assert (results["phase"], results["restarts"]) == ("Restarting", "1 of 1")
    controller.tick()  # the gang is back, on whichever GPU: the same bug, the same crash
    controller.end_pod("buggy", "worker", 1, "Failed", exit_code=1)
    controller.tick()
    results, _ = run_action(ctx, state, "job-status", job="buggy")
    assert (results["phase"], results["restarts"]) == ("Failed", "1 of 1")


def test_ps_and_workers_stop_when_the_chief_finishes(ctx, state, api, controller):
    controller.logs = None
    add_nodes(api, node("cpu-0"))  # Kueue counts cpu and memory: a quota needs nodes
    run_action(ctx, state, "train", job="pst", strategy="ps", ps=2, workers=2)
    _chief_succeeds(controller, "pst", "chief")
    assert [j["metadata"]["name"] for j in api.objects(JOBS)] == ["pst-chief-0"]
    running = [p for p in training_pods(api) if p["status"]["phase"] == "Running"]
    assert running == []
    results, _ = run_action(ctx, state, "job-status", job="pst")
    assert results["phase"] == "Succeeded"


def test_a_preempted_job_is_requeued_and_resumes_when_admitted_again(
    ctx, running, api, controller
):
    controller.enabled = False  # Kueue preempts it; no quota frees until it is re-admitted
    controller.preempt("mnist")
    controller.enabled = True
    controller._jobset()  # JobSet suspends its Jobs
    controller._job_controller()  # which lose their pods
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["phase"] in ("Preempted", "Running")  # requeued and re-admitted by now
    controller.tick()
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["phase"] == "Running"
    assert results["restarts"] == "0 of 3"  # a preemption is not a failure


def test_a_high_priority_job_preempts_a_normal_one_which_resumes_after_it(
    ctx, state, api, controller
):
    """README "Train": `train job=urgent ... priority=high  # preempts mnist`."""
    add_nodes(api, node("node-a", 2))
    run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1})

    results, _ = run_action(
        ctx, state, "train", job="urgent", workers=1, priority="high", **{"gpus-per-worker": 1}
    )

    assert results["pods-running"] == "all"  # Kueue evicted mnist for it
    status, _ = run_action(ctx, state, "job-status", job="mnist")
    assert status["phase"] == "Preempted"
    assert status["queue"] == (
        "position 1: preempted by job urgent (prioritization in the ClusterQueue); it waits "
        "for quota and resumes from its checkpoint"
    )
    assert status["gpus-held"] == "0" and status["restarts"] == "0 of 3"
    workload = controller.workload("mnist")
    assert workload is not None
    requeued = [c for c in workload["status"]["conditions"] if c["type"] == "Requeued"]
    assert requeued[0]["status"] == "True" and requeued[0]["reason"] == "Preempted"
    # Kueue put its flavor's node labels into each admitted pod set and took them out of
    # the stopped one (fakes/batch.py K11); the resumed Job still selects that flavor
    a10g = {"nvidia.com/gpu.product": "NVIDIA-A10G"}
    urgent = role_spec(jobset(api, "urgent"), "worker")["template"]["spec"]
    assert urgent["nodeSelector"] == a10g
    assert "nodeSelector" not in role_spec(jobset(api, "mnist"), "worker")["template"]["spec"]

    controller.end_pod("urgent", "worker", 0, "Succeeded")
    controller.tick()
    controller.tick()
    status, _ = run_action(ctx, state, "job-status", job="mnist")
    assert status["phase"] == "Running"
    resumed = api.get_object(f"{JOBS}mnist-worker-0")
    assert resumed["spec"]["template"]["spec"]["nodeSelector"] == a10g


def test_preemption_takes_only_the_jobs_it_needs(ctx, state, api, controller):
    """Kueue gives back candidates it did not need (preemption.go fillBackWorkloads)."""
    add_nodes(api, node("node-a", 3), node("cpu-0"))
    gpu = {"gpus-per-worker": 1}
    run_action(ctx, state, "train", job="d", workers=2, priority="low", **gpu)
    run_action(ctx, state, "train", job="c", workers=1, priority="low", **gpu)

    results, _ = run_action(ctx, state, "train", job="urgent", workers=2, priority="high", **gpu)

    assert results["pods-running"] == "all"
    phases = {job: run_action(ctx, state, "job-status", job=job)[0]["phase"] for job in "cd"}
    # c, admitted last, was the first candidate; d alone frees enough, so c was kept
    assert phases == {"c": "Running", "d": "Preempted"}
    kept = controller.workload("c")
    assert kept is not None
    assert "Preempted" not in {c["type"] for c in kept["status"]["conditions"]}


def test_a_job_of_equal_priority_waits_instead_of_preempting(ctx, state, api, controller):
    add_nodes(api, node("node-a", 2))
    run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1})

    results, _ = run_action(ctx, state, "train", job="later", workers=1, **{"gpus-per-worker": 1})

    assert results["state"].startswith("queued: position 1: couldn't assign flavors")
    status, _ = run_action(ctx, state, "job-status", job="mnist")
    assert status["phase"] == "Running"


def test_a_job_whose_pods_were_not_ready_in_time_is_requeued_not_preempted(
    ctx, running, api, controller, fake_time
):
    """Kueue queues it again only after its backoff (fakes/batch.py K15); job-status says when."""
    controller.time_out("mnist")
    controller.tick()  # Kueue does not queue it again within the backoff
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["phase"] == "Requeued"
    # no position: Kueue holds it out of the queue until the backoff ends
    assert results["queue"].startswith("its pods did not all run within")
    assert "Exceeded the PodsReady timeout" in results["queue"]
    assert results["gpus-held"] == "0"
    at = (controller.workload("mnist") or {})["status"]["requeueState"]["requeueAt"]
    assert stamp_seconds(at) == int(fake_time.time()) + 60  # the first backoff: 60 s
    assert results["requeues"] == (
        f"1 (its pods were not all ready in time); Kueue holds it out of the queue until {at} "
        "(1m 00s from now), its backoff doubling with each requeue"
    )
    listed, _ = run_action(ctx, running, "list-jobs")
    assert listed["jobs"]["mnist"].startswith("Requeued")

    fake_time.now += 59
    controller.tick()
    assert run_action(ctx, running, "job-status", job="mnist")[0]["phase"] == "Requeued"
    fake_time.now += 1
    controller.tick()
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert results["phase"] == "Running"
    # Kueue keeps the count for as long as the job exists
    assert results["requeues"] == "1 (its pods were not all ready in time)"


def test_kueue_keeps_a_jobs_requeue_count_and_doubles_its_backoff_up_to_the_cap(
    ctx, running, api, controller, fake_time
):
    """Kueue v0.19.2 never resets requeueState.count on readmission or PodsReady (K15).

    Each PodsReadyTimeout of the same job waits twice as long as the one before, up to the
    control plane's backoffMaxSeconds (kueue.BACKOFF_MAX_SECONDS, 600, not Kueue's 3600).
    While it waits it is neither admitted nor pending in the team's ClusterQueue nor in
    Kueue's visibility API.
    """
    cq = f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{queues.cluster_queue_name(NS)}"
    for count, wait in enumerate((60, 120, 240, 480, 600, 600), start=1):
        for _ in range(2):  # the gang runs again, ready: PodsReady True
            controller.tick()
        workload = controller.workload("mnist") or {}
        assert condition(workload, "PodsReady")["status"] == "True"
        controller.time_out("mnist")
        evicted_at = int(fake_time.time())
        state = (controller.workload("mnist") or {})["status"]["requeueState"]
        assert state["count"] == count
        assert stamp_seconds(state["requeueAt"]) == evicted_at + wait

        fake_time.now += wait - 1
        controller.tick()
        workload = controller.workload("mnist") or {}
        assert condition(workload, "Admitted")["status"] == "False"
        requeued = condition(workload, "Requeued")
        assert (requeued["status"], requeued["reason"]) == ("False", "PodsReadyTimeout")
        assert (api.get_object(cq) or {})["status"]["pendingWorkloads"] == 0
        assert kueue_visibility.summary(api, queues.pending_path(NS), {})["items"] == []

        fake_time.now += 1
        controller.tick()
        workload = controller.workload("mnist") or {}
        assert condition(workload, "Admitted")["status"] == "True"
        requeued = condition(workload, "Requeued")
        assert (requeued["status"], requeued["reason"], requeued["message"]) == (
            "True",
            "BackoffFinished",
            "The workload backoff was finished",
        )
        assert workload["status"]["requeueState"] == {"count": count}


def test_finished_jobs_are_deleted_by_jobset_after_job_ttl(ctx, state, api):
    run_action(ctx, dataclasses.replace(state, config={"job-ttl": 2}), "train", workers=1)
    assert jobset(api, "mnist")["spec"]["ttlSecondsAfterFinished"] == 7200


def test_reconcile_waits_quietly_on_api_errors(ctx, running, api, monkeypatch):
    # an API server that still fails after the client's retries (1 + 5, no backoff here)
    monkeypatch.setattr(charm.TensorflowCharm, "kube_backoff", 0.0)
    api.inject(status=503, times=6, method="GET", path_prefix="/apis/kueue.x-k8s.io")
    out = ctx.run(ctx.on.update_status(), running)
    assert isinstance(out.unit_status, testing.WaitingStatus)
    assert "Kubernetes API" in out.unit_status.message


@pytest.mark.parametrize("refusal", ["forbidden", "unauthorized"])
def test_reconcile_blocks_on_refused_requests_naming_the_grant(ctx, running, api, refusal):
    """A grant without a rule the charm needs (403) or a token no longer valid (401)."""
    if refusal == "forbidden":
        api.inject(status=403, times=1, method="GET", path_prefix="/apis/kueue.x-k8s.io")
    else:
        api.delete_object(service_account_path(tf_grant()))  # the control plane revoked it
    out = ctx.run(ctx.on.update_status(), running)
    assert isinstance(out.unit_status, testing.BlockedStatus)
    code = "403" if refusal == "forbidden" else "401 Unauthorized"
    assert out.unit_status.message.startswith(f"Kubernetes refused a request ({code}")
    assert out.unit_status.message.endswith("; check the kube-api grant on the control plane")


def test_purge_waits_for_the_pods_to_go_first(ctx, running, api, fake_time):
    lingering = training_pods(api)[0]
    lingering["metadata"].pop("ownerReferences")
    api.put_object(PODS + "lingering", lingering)  # a pod that takes its time to terminate
    start = fake_time.now

    _, logs = run_action(ctx, running, "stop", job="mnist", purge=True)

    assert fake_time.now - start == pytest.approx(120)
    assert "pods of mnist are still terminating; purging anyway" in logs
    assert api.get_object(JOBS + "mnist-purge") is not None


def test_purge_starts_at_once_when_pods_are_gone(ctx, running, api, fake_time):
    start = fake_time.now
    run_action(ctx, running, "stop", job="mnist", purge=True)
    assert fake_time.now == start


def test_the_code_and_tensorboard_go_with_the_jobset(ctx, running, api):
    """JobSet's TTL deletes the JobSet; the garbage collector takes what it owns."""
    js = jobset(api, "mnist")
    kinds = ("ConfigMap", "Deployment", "Service")
    made = [o for o in job_objects(api) if o["kind"] in kinds]
    # the charm's, not JobSet's headless Service (its controller is the JobSet: fakes/batch.py J8)
    owned = [o for o in made if not o["metadata"]["ownerReferences"][0].get("controller")]
    assert len(owned) == 3 and len(made) == 4
    for obj in owned:
        assert obj["metadata"]["ownerReferences"] == [
            {
                "apiVersion": js["apiVersion"],
                "kind": "JobSet",
                "name": "mnist",
                "uid": js["metadata"]["uid"],
            }
        ]
    from charms.gpu_k8s.v0.kubeclient import Kube

    with Kube.from_kubeconfig(api.kubeconfig()) as kube:
        kube.kinds[(js["apiVersion"], "JobSet")] = ("jobsets", True)
        kube.delete(js["apiVersion"], "JobSet", "mnist", NS)  # as JobSet's TTL controller
    assert job_objects(api) == []  # the garbage collector took every dependent


def test_the_status_line_shows_the_jobs_at_a_glance(ctx, running, api, controller, unit_machine):
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    running = dataclasses.replace(running, relations={*running.relations, agent})
    out = ctx.run(ctx.on.update_status(), running)
    assert out.unit_status == testing.ActiveStatus("Ready: 1 running (mnist 50% ETA 50s)")
    controller.logs = None
    run_action(ctx, running, "train", job="big", workers=3, **{"gpus-per-worker": 1})
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus(
        "Ready: 1 running (mnist 50% ETA 50s), 1 queued"
    )
    # the same count is served to a related COS agent (unit_state), every phase named
    served = unit_machine.host().read("/var/lib/gpu-k8s/unit-state/tensorflow-0.prom")
    lines = served.splitlines()
    assert {
        'gpu_k8s_training_jobs{phase="running"} 1',
        'gpu_k8s_training_jobs{phase="queued"} 1',
        'gpu_k8s_training_jobs{phase="failed"} 0',
        'gpu_k8s_training_jobs{phase="succeeded"} 0',
    } <= set(lines)
    run_action(ctx, running, "stop", job="mnist")
    run_action(ctx, running, "stop", job="big")
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.message.startswith("Ready: namespace tensorflow")  # no jobs


def test_a_gang_that_stopped_together_after_saving_comes_back_uncounted(
    ctx, running, api, controller
):
    """A drain SIGTERMs one worker; the launchers stop the whole gang at one saved step (143).

    The Job fails (FailJob on 143) and JobSet restarts the gang without counting
    (RestartJobSetAndIgnoreMaxRestarts): the old pods are gone before new ones start.
    """
    first = {p["metadata"]["name"] for p in training_pods(api)}
    for index in (0, 1):
        controller.end_pod("mnist", "worker", index, "Failed", exit_code=143)
    controller.tick()
    js = api.get_object("/apis/jobset.x-k8s.io/v1alpha2/namespaces/tensorflow/jobsets/mnist")
    assert (js["status"]["restarts"], js["status"].get("restartsCountTowardsMax", 0)) == (1, 0)
    controller.tick()
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert (results["phase"], results["restarts"]) == ("Running", "0 of 3")
    running_pods = [p for p in training_pods(api) if p["status"]["phase"] == "Running"]
    assert len(running_pods) == 2 and not {p["metadata"]["name"] for p in running_pods} & first


def test_no_gpu_in_tensorflow_fails_the_job_at_once_without_restarts(
    ctx, running, api, controller
):
    controller.end_pod("mnist", "worker", 1, "Failed", exit_code=83)  # tf_launcher EXIT_NO_GPU
    controller.tick()
    results, _ = run_action(ctx, running, "job-status", job="mnist")
    assert (results["phase"], results["restarts"]) == ("Failed", "0 of 3")


# One row each of the exit-code table (docs/explanation/training-jobs.md "Stops and exit
# codes", tf_launcher.py's docstring; 83 is the test above): worker 1 (worker 0, the chief
# under MWMS, for 0) of the charm's own JobSet ends so, and the Job's podFailurePolicy then
# the JobSet's failurePolicy act as the fake controllers emulate them (fakes/batch.py B3:
# kubernetes.io "Handling retriable and non-retriable pod failures with Pod failure
# policy", rules in order, the first match wins, pkg/controller/job/pod_failure_policy.go's
# FailJob message; J3: JobSet v0.12.0 failure_policy.go findFirstFailedPolicyRuleAndJob,
# ruleIsApplicable). Row 1 is the launcher's report of a program's 82, 83 or 143
# (test_tf_launcher.py); here it is one more code that counts.
# code: (DisruptionTarget, phase, what JobSet did, restarts, of which counted)
_FAIL_JOBSET = "Failed FailJobSetFailurePolicyAction"
_COUNTED = "RestartingJobSet FailurePolicy_failureCounts"
_NOT_COUNTED = "RestartingJobSet FailurePolicy_stoppedNotCounted"
_EXIT_ROWS = {
    "0 the program finished": (False, "Succeeded", "Completed AllJobsCompleted", 0, 0),
    "143 stopped on a SIGTERM": (False, "Restarting", _NOT_COUNTED, 1, 0),
    "82 cannot start": (False, "Failed", _FAIL_JOBSET, 0, 0),
    "1 a reserved code remapped": (False, "Restarting", _COUNTED, 1, 1),
    "3 any other": (False, "Restarting", _COUNTED, 1, 1),
    "137 killed": (False, "Restarting", _COUNTED, 1, 1),
    "137 evicted, killed at its grace": (True, "Running", "", 0, 0),
}


@pytest.mark.parametrize("row", list(_EXIT_ROWS))
def test_each_exit_code_does_what_the_table_says(api, controller, row):
    disrupted, phase, acted, restarts, counted = _EXIT_ROWS[row]
    code = int(row.split()[0])
    add_nodes(api, node("node-a", 4))
    request = params.TrainRequest(job="mnist", workers=2, gpus_per_worker=1)
    js = manifests.jobset(request, CTX)
    js["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    controller.managed = False  # no Kueue: the failure policies alone (test_fake_jobset.py)
    api.put_object(f"{_JOBSETS}/mnist", js)
    controller.tick()
    first = controller.pod("mnist", "worker", 1)["metadata"]["name"]
    end = "Succeeded" if code == 0 else "Failed"
    index = 0 if code == 0 else 1
    controller.end_pod("mnist", "worker", index, end, exit_code=code, disrupted=disrupted)
    controller.tick()

    js = jobset(api, "mnist")
    assert job_state.phase(js, None, training_pods(api)) == phase  # as job-status reads it
    status = js.get("status") or {}
    done = [
        f"{c['type']} {c['reason']}" for c in status.get("conditions", []) if c["status"] == "True"
    ]
    assert done == ([acted] if acted else [])
    assert (status.get("restarts", 0), status.get("restartsCountTowardsMax", 0)) == (
        restarts,
        counted,
    )
    if disrupted:  # podFailurePolicy rule 0, Ignore: the pod is replaced, the gang goes on
        index = "batch.kubernetes.io/job-completion-index"
        replaced = [
            p["metadata"]["name"]
            for p in training_pods(api)
            if p["metadata"]["labels"][index] == "1" and p["status"]["phase"] == "Running"
        ]
        assert len(replaced) == 1 and replaced != [first]
