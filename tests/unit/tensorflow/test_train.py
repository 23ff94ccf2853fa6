"""The train action against the fake API server: what it creates, and what it refuses."""

from __future__ import annotations

import dataclasses
import json

import kubernetes_validate
import pytest
import tf_launcher
from conftest import (
    CLAIM,
    NS,
    add_nodes,
    gpu_pod,
    job_objects,
    jobset,
    node,
    role_spec,
    run_action,
    training_pods,
)
from ops import testing

from fakes.addons import join_team
from fakes.kube_admission import KUBERNETES_VERSION

MANAGED = "app.kubernetes.io/managed-by"
JOB_LABEL = "gpu-k8s.io/job"


def _jobsets_own(obj: dict) -> bool:
    """JobSet's headless Service, which it makes and controls (fakes/batch.py J8)."""
    refs = obj["metadata"].get("ownerReferences") or []
    return obj["kind"] == "Service" and any(r.get("controller") for r in refs)


def _kinds(objs: list[dict]) -> list[tuple[str, str]]:
    return sorted(
        (o["kind"], o["metadata"]["name"])
        for o in objs
        if o["kind"] not in ("Pod", "Job") and not _jobsets_own(o)
    )


def _strip(obj: dict) -> dict:
    """A stored object as a client would have sent it (no status or server metadata)."""
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {
        k: v
        for k, v in obj["metadata"].items()
        if k in ("name", "namespace", "labels", "annotations")
    }
    return {**out, "metadata": meta}


def test_train_creates_every_object_labelled_and_valid(ctx, state, api, controller):
    add_nodes(api, node("node-a", 2), node("node-b", 2), node("cpu-0"))
    controller.per_tick = 1

    results, logs = run_action(
        ctx, state, "train", job="mnist", workers=4, **{"gpus-per-worker": 1}
    )

    objs = job_objects(api)
    assert _kinds(objs) == [
        ("ConfigMap", "mnist-code"),
        ("Deployment", "mnist-tensorboard"),
        ("JobSet", "mnist"),
        ("Service", "mnist-tensorboard"),
    ]
    for obj in [o for o in objs if not _jobsets_own(o)]:
        assert obj["metadata"]["labels"][MANAGED] == "tensorflow"
        assert obj["metadata"]["labels"][JOB_LABEL] == "mnist"
        if obj["kind"] in ("ConfigMap", "Deployment", "Service"):
            kubernetes_validate.validate(_strip(obj), KUBERNETES_VERSION, strict=True)
    js = jobset(api, "mnist")
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert js["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "normal"
    assert "suspend" not in _strip(js)["spec"] or js["spec"]["suspend"] is False  # Kueue's
    # admitted by Kueue at once (it fits), then progress while pods start, one more per poll
    running = [m for m in logs if "workers running" in m]
    assert running == [f"{i}/4 workers running" for i in range(5 - len(running), 5)]
    assert len(running) >= 4
    assert results["job"] == "mnist"
    assert results["state"] == "running"
    assert len(results["pods"].split()) == 4
    assert results["pods-running"] == "all"
    assert results["tensorboard-url"] == f"http://mnist-tensorboard.{NS}.svc:6006"
    assert results["tensorboard"] == "running"
    # TensorBoard is queued in the team's quota at its job's priority (issue 29 item 6:
    # Kueue's pod integration admits every pod of the namespace, fakes/batch.py K12), and
    # its pod was admitted and ungated
    tensorboard = api.get_object(f"/apis/apps/v1/namespaces/{NS}/deployments/mnist-tensorboard")
    for labels in (
        tensorboard["metadata"]["labels"],
        tensorboard["spec"]["template"]["metadata"]["labels"],
    ):
        assert labels["kueue.x-k8s.io/queue-name"] == "training"
        assert labels["kueue.x-k8s.io/priority-class"] == "normal"
    [board] = [
        p
        for p in api.objects(f"/api/v1/namespaces/{NS}/pods/")
        if p["metadata"]["name"].startswith("mnist-tensorboard-")
    ]
    assert board["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
    assert "schedulingGates" not in board["spec"]


def test_a_tensorboard_image_without_tensorboard_is_reported_not_hidden(ctx, state, api):
    """tf.md #4: tensorflow/tensorflow:2.21.0 has no `tensorboard` (TF 2.21 dropped it).

    kubelet cannot start the container, and train and job-status say so.
    """
    add_nodes(api, node("node-a", 2), node("cpu-0"))
    state = dataclasses.replace(
        state, config={"tensorboard-image": "tensorflow/tensorflow:2.21.0"}
    )

    results, _ = run_action(ctx, state, "train", job="mnist", workers=1)

    assert results["state"] == "running"  # training itself is not held up
    board = results["tensorboard"]
    assert board.startswith("failed: CrashLoopBackOff after StartError: ")
    assert 'exec: "tensorboard": executable file not found in $PATH' in board
    assert board.endswith(
        "check the tensorboard-image config (the image must provide `tensorboard`)"
    )
    status, _ = run_action(ctx, state, "job-status", job="mnist")
    assert status["tensorboard"] == board


def test_worker_job_is_indexed_with_gpus_and_stable_hostnames(ctx, state, api):
    add_nodes(api, node("node-a", 4))
    run_action(ctx, state, "train", job="mnist", workers=4, **{"gpus-per-worker": 1})

    js = jobset(api, "mnist")
    assert js["spec"]["network"] == {
        "enableDNSHostnames": True,
        "subdomain": "mnist",
        "publishNotReadyAddresses": True,
    }
    spec = role_spec(js, "worker")
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 4
    assert spec["backoffLimit"] == 0  # a failed pod fails the Job: JobSet restarts the gang
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}  # the chief
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pod["tolerations"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["image"] == "tensorflow/tensorflow:2.21.0-gpu"
    assert container["command"][:3] == ["python3", "/opt/gpu-k8s/tf_launcher.py", "--"]
    assert {v["mountPath"] for v in container["volumeMounts"]} == {"/data", "/opt/gpu-k8s"}
    assert {"name": "data", "persistentVolumeClaim": {"claimName": CLAIM, "readOnly": False}} in (
        pod["volumes"]
    )

    # The launcher, given this pod's environment, names exactly the pods' DNS names:
    # JobSet's Job `<jobset>-<role>-0`, whose Indexed pods are `<job>-<index>`, under the
    # JobSet's subdomain.
    env = {e["name"]: e["value"] for e in container["env"]}
    tf_config = tf_launcher.build_tf_config(
        job=env["GPU_K8S_JOB"],
        service=env["GPU_K8S_SERVICE"],
        strategy=env["GPU_K8S_STRATEGY"],
        role=env["GPU_K8S_ROLE"],
        index=2,
        workers=int(env["GPU_K8S_WORKERS"]),
        ps=int(env["GPU_K8S_PS"]),
        port=int(env["GPU_K8S_PORT"]),
    )
    pods = training_pods(api)
    hostnames = [f"{p['spec']['hostname']}.{p['spec']['subdomain']}:2222" for p in pods]
    assert sorted(tf_config["cluster"]["worker"]) == sorted(hostnames)
    assert sorted(p["spec"]["hostname"] for p in pods) == [f"mnist-worker-0-{i}" for i in range(4)]


def _worker_resources(api, job: str = "mnist", role: str = "worker") -> dict:
    spec = role_spec(jobset(api, job), role)
    return spec["template"]["spec"]["containers"][0]["resources"]["requests"]


def test_gpu_workers_default_to_their_share_of_the_gpu_node(ctx, state, api):
    """A GPU worker's cpu and memory: its node's allocatable less a daemon reserve, per GPU.

    node() is 8 cpu and 64Gi with 4 GPUs: (8 - 1) / 4 = 1750m and (64 - 2) / 4 Gi = 15872Mi
    per GPU; the parameter-server roles without GPUs keep 1 cpu and 4Gi.
    """
    add_nodes(api, node("node-a", 4))
    run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 2})
    assert _worker_resources(api) == {"cpu": "3500m", "memory": "31744Mi"}
    stored = json.loads(jobset(api, "mnist")["metadata"]["annotations"]["gpu-k8s.io/request"])
    assert (stored["cpu"], stored["memory"]) == ("3500m", "31744Mi")  # scale keeps them

    run_action(
        ctx, state, "train", job="ps", strategy="ps", ps=1, workers=1, **{"gpus-per-worker": 1}
    )
    assert _worker_resources(api, "ps") == {"cpu": "1750m", "memory": "15872Mi"}
    assert _worker_resources(api, "ps", "chief") == {"cpu": "1", "memory": "4Gi"}
    assert _worker_resources(api, "ps", "ps") == {"cpu": "1", "memory": "4Gi"}


def test_the_smallest_share_of_the_gpu_nodes_that_could_hold_a_worker_wins(ctx, state, api):
    big = node("node-big", 8)
    big["status"]["allocatable"].update({"cpu": "96", "memory": "1152Gi"})
    add_nodes(api, node("node-a", 4), big, node("node-one", 1))
    run_action(ctx, state, "train", job="mnist", workers=1, **{"gpus-per-worker": 2})
    assert _worker_resources(api) == {"cpu": "3500m", "memory": "31744Mi"}  # node-a's


def test_given_cpu_and_memory_and_cpu_jobs_keep_their_values(ctx, state, api):
    add_nodes(api, node("node-a", 4), node("cpu-0"))
    run_action(ctx, state, "train", job="mnist", workers=1, cpu="2", **{"gpus-per-worker": 1})
    assert _worker_resources(api) == {"cpu": "2", "memory": "15872Mi"}
    run_action(ctx, state, "train", job="cpu", workers=1)
    assert _worker_resources(api, "cpu") == {"cpu": "1", "memory": "4Gi"}
    again, _ = run_action(
        ctx, state, "train", job="mnist", workers=1, cpu="2", **{"gpus-per-worker": 1}
    )
    assert again["created"] == "false"  # the same defaults again: the same job


def test_a_deadline_is_kueues_maximum_execution_time_of_the_job(ctx, state, api):
    """Kueue deactivates a job admitted `deadline` hours in all; its checkpoints stay.

    No deadline, no label.
    """
    run_action(ctx, state, "train", job="mnist", workers=1, deadline=2)
    labels = jobset(api, "mnist")["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/max-exec-time-seconds"] == "7200"
    run_action(ctx, state, "train", job="other", workers=1)
    assert "kueue.x-k8s.io/max-exec-time-seconds" not in jobset(api, "other")["metadata"]["labels"]
    with pytest.raises(testing.ActionFailed, match="already exists with other parameters"):
        run_action(ctx, state, "train", job="mnist", workers=1, deadline=3)


def test_configmap_holds_launcher_and_trainer(ctx, state, api):
    run_action(ctx, state, "train", job="cpu", workers=1)
    cm = api.get_object(f"/api/v1/namespaces/{NS}/configmaps/cpu-code")
    assert set(cm["data"]) == {"tf_launcher.py", "tf_trainer.py"}
    assert "def build_tf_config" in cm["data"]["tf_launcher.py"]


def test_cpu_job_has_no_gpu_runtime_and_uses_default_image(ctx, state, api):
    run_action(ctx, state, "train", job="cpu", workers=2, steps=50, args="--batch-size 32")
    pod = role_spec(jobset(api, "cpu"), "worker")["template"]
    container = pod["spec"]["containers"][0]
    assert "runtimeClassName" not in pod["spec"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert container["image"] == "tensorflow/tensorflow:2.21.0"
    assert container["command"][3:] == ["--steps", "50", "--batch-size", "32"]


def test_user_command_and_env(ctx, state, api):
    run_action(
        ctx,
        state,
        "train",
        job="own",
        workers=1,
        command="python3 /data/train.py",
        args="--epochs 3",
        env="SEED=7 NAME='a b'",
        image="example/tf:1",
    )
    container = role_spec(jobset(api, "own"), "worker")["template"]["spec"]["containers"][0]
    assert container["command"][3:] == ["python3", "/data/train.py", "--epochs", "3"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SEED"] == "7" and env["NAME"] == "a b"
    assert container["image"] == "example/tf:1"


def test_ps_strategy_creates_chief_ps_and_workers(ctx, state, api):
    # the GPU workers' default share takes the GPU node's cpu: chief and ps need a CPU node
    add_nodes(api, node("node-a", 2), node("cpu-0"))
    results, _ = run_action(
        ctx, state, "train", job="ps-job", strategy="ps", ps=2, workers=2, **{"gpus-per-worker": 1}
    )
    js = jobset(api, "ps-job")
    assert [r["name"] for r in js["spec"]["replicatedJobs"]] == ["chief", "ps", "worker"]
    # the job ends when the chief succeeds; JobSet then deletes the ps and workers
    assert js["spec"]["successPolicy"] == {"operator": "Any", "targetReplicatedJobs": ["chief"]}
    assert role_spec(js, "ps")["completions"] == 2
    assert role_spec(js, "chief")["completions"] == 1
    assert "successPolicy" not in role_spec(js, "worker")  # under ps the chief is its own
    chief = role_spec(js, "chief")["template"]["spec"]
    assert "runtimeClassName" not in chief
    worker = role_spec(js, "worker")["template"]["spec"]
    assert worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert len(results["pods"].split()) == 5


def test_each_role_gets_its_own_resources_and_the_ps_their_image(ctx, state, api):
    add_nodes(api, node("node-a", 2), node("cpu-0"))  # 14 CPUs asked, 8 on each node
    params = {
        "gpus-per-worker": 1,
        "cpu": "4",
        "memory": "16Gi",
        "chief-cpu": "2",
        "ps-memory": "32Gi",
        "ps-image": "registry.example.com/tf-ps:1",
    }
    run_action(ctx, state, "train", job="roles", strategy="ps", ps=1, workers=2, **params)

    js = jobset(api, "roles")
    containers = {
        role: role_spec(js, role)["template"]["spec"]["containers"][0]
        for role in ("chief", "ps", "worker")
    }
    # CPU is requested, never limited (TensorFlow sizes its threads by the node's cores);
    # memory is requested and limited.
    assert {r: c["resources"]["requests"] for r, c in containers.items()} == {
        "chief": {"cpu": "2", "memory": "16Gi"},
        "ps": {"cpu": "4", "memory": "32Gi"},
        "worker": {"cpu": "4", "memory": "16Gi"},
    }
    assert {r: c["resources"]["limits"] for r, c in containers.items()} == {
        "chief": {"memory": "16Gi"},
        "ps": {"memory": "32Gi"},
        "worker": {"memory": "16Gi", "nvidia.com/gpu": "1"},
    }
    assert {r: c["image"] for r, c in containers.items()} == {
        "chief": "tensorflow/tensorflow:2.21.0",
        "ps": "registry.example.com/tf-ps:1",
        "worker": "tensorflow/tensorflow:2.21.0-gpu",
    }


def test_gang_restarts_and_finishes_are_jobsets(ctx, state, api):
    run_action(ctx, state, "train", job="mnist", workers=2)
    spec = jobset(api, "mnist")["spec"]
    assert spec["failurePolicy"] == {
        "maxRestarts": 3,
        # the old gang is gone before the new one starts (review N5)
        "restartStrategy": "BlockingRecreate",
        "rules": [
            {
                "name": "noRestartWithoutGPU",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": ["failed with exit code (82|83) matching FailJob"],
            },
            {  # a real failure counts even when other Jobs stopped with it
                "name": "failureCounts",
                "action": "RestartJobSet",
                "onJobFailureReasons": ["BackoffLimitExceeded"],
            },
            {
                "name": "stoppedNotCounted",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": ["failed with exit code 143 matching FailJob rule"],
            },
        ],
    }
    assert spec["ttlSecondsAfterFinished"] == 24 * 3600
    rules = role_spec(jobset(api, "mnist"), "worker")["podFailurePolicy"]["rules"]
    assert [(r["action"], r.get("onExitCodes", {}).get("values")) for r in rules] == [
        ("Ignore", None),  # DisruptionTarget: drained or preempted
        ("FailJob", [143]),  # stopped on a SIGTERM: the JobSet restarts it, not counted
        ("FailJob", [82, 83]),  # the launcher cannot start the task, or sees no GPU
    ]
    pod = role_spec(jobset(api, "mnist"), "worker")["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 60
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["GPU_K8S_GRACE_SECONDS"] == "60"


def test_train_twice_with_same_parameters_is_idempotent(ctx, state, api):
    add_nodes(api, node("node-a", 2))
    run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1})
    before = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in job_objects(api)}

    results, logs = run_action(
        ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1}
    )

    after = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in job_objects(api)}
    assert after == before
    assert results["created"] == "false"
    assert any("already exists" in m for m in logs)


def test_train_again_with_only_wait_or_timeout_different_is_the_same_job(ctx, state, api):
    """`wait` and `timeout` say how long the action waits, not what the job is (N3)."""
    add_nodes(api, node("node-a", 2))
    run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1})
    before = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in job_objects(api)}

    results, logs = run_action(
        ctx, state, "train", job="mnist", workers=2, wait=True, timeout=600,
        **{"gpus-per-worker": 1},
    )  # fmt: skip

    after = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in job_objects(api)}
    assert after == before
    assert results["created"] == "false"
    assert any("already exists with these parameters" in m for m in logs)


def test_a_job_stored_with_wait_and_timeout_by_an_earlier_revision_is_the_same_job(
    ctx, state, api
):
    """Earlier revisions stored `wait` and `timeout` in the request: they still compare."""
    run_action(ctx, state, "train", job="mnist", workers=2)
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/mnist"
    js = jobset(api, "mnist")
    stored = json.loads(js["metadata"]["annotations"]["gpu-k8s.io/request"])
    old = {**stored, "wait": False, "timeout": 300}
    js["metadata"]["annotations"]["gpu-k8s.io/request"] = json.dumps(old)
    api.put_object(path, js)

    results, _ = run_action(ctx, state, "train", job="mnist", workers=2, wait=True, timeout=5)

    assert results["created"] == "false"


def _train_again_with_wait(ctx, state, workers: int = 2):
    return run_action(
        ctx, state, "train", job="mnist", workers=workers, wait=True, timeout=5,
        **{"gpus-per-worker": 1},
    )  # fmt: skip


def _small_gpu_node() -> dict:
    small = node("node-small", 1)
    small["status"]["allocatable"].update({"cpu": "4", "memory": "16Gi"})
    return small


def test_train_again_with_wait_after_a_smaller_gpu_node_joined_is_the_same_job(ctx, state, api):
    """The GPU defaults are what the nodes give now; the job is what the user asked (review31).

    After the first train a 4-cpu, 16Gi node with one GPU joins, so the smallest share of
    memory is now its 14336Mi, not node-a's 15872Mi: the job is still the same.
    """
    add_nodes(api, node("node-a", 4))
    run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1})
    before = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in job_objects(api)}
    add_nodes(api, _small_gpu_node())

    results, logs = _train_again_with_wait(ctx, state)

    assert results["created"] == "false"
    assert any("already exists with these parameters" in m for m in logs)
    after = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in job_objects(api)}
    assert after == before
    assert _worker_resources(api) == {"cpu": "1750m", "memory": "15872Mi"}


def test_train_again_with_wait_while_the_only_gpu_node_is_cordoned_is_the_same_job(
    ctx, state, api
):
    """A drained or quarantined GPU node leaves no node to size the defaults by (review31)."""
    add_nodes(api, node("node-a", 4))
    run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1})
    cordoned = api.get_object("/api/v1/nodes/node-a")
    cordoned.setdefault("spec", {})["unschedulable"] = True
    api.put_object("/api/v1/nodes/node-a", cordoned)

    results, _ = _train_again_with_wait(ctx, state)

    assert results["created"] == "false"


def test_a_request_that_differs_from_the_stored_one_is_refused_after_the_nodes_changed(
    ctx, state, api
):
    """What the user asks is compared: another value, or a value where they left the default."""
    add_nodes(api, node("node-a", 4))
    run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1})
    add_nodes(api, _small_gpu_node())
    before = job_objects(api)
    for params in ({"workers": 3}, {"cpu": "3500m"}, {"memory": "8Gi"}, {"steps": 5}):
        with pytest.raises(testing.ActionFailed, match="already exists with other parameters"):
            run_action(
                ctx,
                state,
                "train",
                **{"job": "mnist", "workers": 2, "gpus-per-worker": 1, **params},
            )
    assert job_objects(api) == before
    again, _ = run_action(  # the values the defaults gave, now given: the very same job
        ctx, state, "train", job="mnist", workers=2, cpu="1750m", memory="15872Mi",
        **{"gpus-per-worker": 1},
    )  # fmt: skip
    assert again["created"] == "false"


# What `train job=mnist workers=2 gpus-per-worker=1` stored before the GPU defaults (the
# parent of b0237a3: cpu and memory defaulted to 1 and 4Gi, no deadline, no record of the
# values the charm filled in); and what it stored from b0237a3 until the filled-in values
# were recorded (node-a's share, unmarked).
_BEFORE_GPU_DEFAULTS = {
    "job": "mnist", "image": "", "script": "", "command": "", "args": "", "env": "",
    "strategy": "mwms", "workers": 2, "ps": 0, "gpus_per_worker": 1, "cpu": "1",
    "memory": "4Gi", "chief_cpu": "", "chief_memory": "", "ps_cpu": "", "ps_memory": "",
    "ps_image": "", "steps": 1000, "priority": "normal", "dataset": "",
}  # fmt: skip
_GPU_DEFAULTS_UNRECORDED = {
    **_BEFORE_GPU_DEFAULTS, "cpu": "1750m", "memory": "15872Mi", "deadline": 0,
}  # fmt: skip


_GPU = {"gpus-per-worker": 1}


def _train_then_record(
    ctx, state, api, annotations: dict, *, keep: bool = False, params: dict = _GPU
) -> None:
    """Train on node-a, give its JobSet `annotations` (beside its own: `keep`); a node joins."""
    add_nodes(api, node("node-a", 4))
    run_action(ctx, state, "train", job="mnist", workers=2, **params)
    js = jobset(api, "mnist")
    js["metadata"]["annotations"] = {
        **(js["metadata"]["annotations"] if keep else {}), **annotations
    }  # fmt: skip
    api.put_object(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/mnist", js)
    add_nodes(api, _small_gpu_node())


@pytest.mark.parametrize(
    "stored", [_BEFORE_GPU_DEFAULTS, _GPU_DEFAULTS_UNRECORDED], ids=["before", "unrecorded"]
)
def test_a_job_stored_by_an_earlier_revision_is_the_same_job_and_keeps_its_size(
    ctx, state, api, stored
):
    """Its record is read as it is: `train` again is the same job, `scale` keeps its cpu/memory."""
    _train_then_record(ctx, state, api, {"gpu-k8s.io/request": json.dumps(stored)})

    again, _ = _train_again_with_wait(ctx, state)
    assert again["created"] == "false"
    with pytest.raises(testing.ActionFailed, match="already exists with other parameters"):
        run_action(ctx, state, "train", job="mnist", workers=3, **{"gpus-per-worker": 1})

    run_action(ctx, state, "scale", job="mnist", workers=3, timeout=0)
    assert _worker_resources(api) == {"cpu": stored["cpu"], "memory": stored["memory"]}
    annotations = jobset(api, "mnist")["metadata"]["annotations"]
    assert json.loads(annotations["gpu-k8s.io/request"]) == {
        **_GPU_DEFAULTS_UNRECORDED, **stored, "workers": 3
    }  # fmt: skip
    assert "gpu-k8s.io/defaulted" not in annotations  # still not known
    again, _ = _train_again_with_wait(ctx, state, workers=3)
    assert again["created"] == "false"


_PS = {"strategy": "ps", "ps": 1, **_GPU}
# b0237a3 on, strategy=ps with GPU workers: the chief's and the ps's cpu and memory were
# filled in with CPU_DEFAULT and MEMORY_DEFAULT beside the workers' share
_PS_UNRECORDED = {
    **_GPU_DEFAULTS_UNRECORDED, "strategy": "ps", "ps": 1, "chief_cpu": "1",
    "chief_memory": "4Gi", "ps_cpu": "1", "ps_memory": "4Gi",
}  # fmt: skip
_CPU_ONLY_BEFORE = {**_BEFORE_GPU_DEFAULTS, "gpus_per_worker": 0}  # the defaults 1 and 4Gi
_CPU_ONLY_UNRECORDED = {**_GPU_DEFAULTS_UNRECORDED, "gpus_per_worker": 0, "cpu": "", "memory": ""}


@pytest.mark.parametrize(
    "stored,params,same",
    [
        pytest.param(_CPU_ONLY_BEFORE, {}, True, id="cpu-only-before-defaults"),
        pytest.param(_PS_UNRECORDED, _PS, True, id="ps-unrecorded-defaults"),
        # what the user gave, where no earlier revision filled anything in: compared exactly
        pytest.param({**_CPU_ONLY_BEFORE, "cpu": "2"}, {}, False, id="cpu-only-before-cpu"),
        pytest.param(
            {**_CPU_ONLY_BEFORE, "memory": "8Gi"}, {}, False, id="cpu-only-before-memory"
        ),
        pytest.param(
            {**_CPU_ONLY_UNRECORDED, "cpu": "2"}, {}, False, id="cpu-only-unrecorded-cpu"
        ),
        pytest.param({**_BEFORE_GPU_DEFAULTS, "cpu": "2"}, _GPU, False, id="gpu-before-cpu"),
        # b0237a3 wrote a GPU worker's share as millicores and Mi: "2" and "16Gi" were given
        pytest.param(
            {**_GPU_DEFAULTS_UNRECORDED, "cpu": "2"}, _GPU, False, id="gpu-unrecorded-cpu"
        ),
        pytest.param(
            {**_GPU_DEFAULTS_UNRECORDED, "memory": "16Gi"}, _GPU, False, id="gpu-unrecorded-memory"
        ),
        pytest.param(
            {**_PS_UNRECORDED, "chief_cpu": "2"}, _PS, False, id="ps-unrecorded-chief-cpu"
        ),
        pytest.param(
            {**_PS_UNRECORDED, "ps_memory": "8Gi"}, _PS, False, id="ps-unrecorded-ps-memory"
        ),
    ],
)
def test_an_earlier_revision_s_record_ignores_only_what_that_revision_could_fill_in(
    ctx, state, api, stored, params, same
):
    """A value no earlier revision wrote for an empty field was the user's (review31 finding 2).

    Before b0237a3 an empty cpu/memory was stored as 1/4Gi; from b0237a3 a GPU job's as its
    worker's share of the GPU node, and under strategy=ps its chief's and ps's as 1/4Gi.
    Anything else (a CPU-only job's 2) was given: `train` again leaving it empty is another job.
    """
    _train_then_record(ctx, state, api, {"gpu-k8s.io/request": json.dumps(stored)}, params=params)
    before = job_objects(api)

    if same:
        again, _ = run_action(ctx, state, "train", job="mnist", workers=2, wait=True, **params)
        assert again["created"] == "false"
    else:
        with pytest.raises(testing.ActionFailed, match="already exists with other parameters"):
            run_action(ctx, state, "train", job="mnist", workers=2, **params)
    assert job_objects(api) == before


def test_the_values_the_charm_filled_in_are_kept_through_a_scale(ctx, state, api):
    """A scale's record and the new JobSet say what was filled in: train again still matches."""
    add_nodes(api, node("node-a", 4))
    run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1})
    annotations = jobset(api, "mnist")["metadata"]["annotations"]
    assert annotations["gpu-k8s.io/defaulted"] == "cpu,memory"

    run_action(ctx, state, "scale", job="mnist", workers=3, timeout=0)
    add_nodes(api, _small_gpu_node())

    assert jobset(api, "mnist")["metadata"]["annotations"]["gpu-k8s.io/defaulted"] == "cpu,memory"
    again, _ = _train_again_with_wait(ctx, state, workers=3)
    assert again["created"] == "false"
    assert _worker_resources(api) == {"cpu": "1750m", "memory": "15872Mi"}


def test_an_edited_record_of_what_was_filled_in_is_read_as_not_known(ctx, state, api):
    """Bad input in the annotation loses nothing: the request is read, compared as an old one."""
    _train_then_record(ctx, state, api, {"gpu-k8s.io/defaulted": "cpu,workers"}, keep=True)

    again, _ = _train_again_with_wait(ctx, state)
    assert again["created"] == "false"
    with pytest.raises(testing.ActionFailed, match="already exists with other parameters"):
        run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 2})
    status, _ = run_action(ctx, state, "job-status", job="mnist")
    assert status["job"] == "mnist"


def test_train_same_name_other_parameters_fails_and_changes_nothing(ctx, state, api):
    run_action(ctx, state, "train", job="mnist", workers=2)
    before = job_objects(api)
    with pytest.raises(testing.ActionFailed, match="already exists with other parameters"):
        run_action(ctx, state, "train", job="mnist", workers=3)
    assert job_objects(api) == before


def test_train_without_waiting(ctx, state, api, controller, fake_time):
    add_nodes(api, node("cpu-0"))  # Kueue counts cpu and memory: a quota needs nodes
    controller.per_tick = 0
    results, _ = run_action(ctx, state, "train", job="mnist", workers=2, timeout=0)
    assert results["pods-running"] == "not yet: see job-status"
    assert results["state"] == "admitted"


def test_train_gives_up_waiting_after_timeout(ctx, state, api, controller, fake_time):
    add_nodes(api, node("cpu-0"))  # Kueue counts cpu and memory: a quota needs nodes
    controller.per_tick = 0
    results, logs = run_action(ctx, state, "train", job="mnist", workers=2, timeout=10)
    assert results["pods-running"] == "not yet: see job-status"
    assert logs.count("0/2 workers running") == 1


def test_train_fails_when_image_cannot_be_pulled(ctx, state, api, controller):
    add_nodes(api, node("cpu-0"))
    controller.waiting_reason = "ErrImagePull"
    with pytest.raises(testing.ActionFailed, match="ErrImagePull.*fix the image"):
        run_action(ctx, state, "train", job="mnist", workers=2, image="nope/nope:0")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"workers": 0}, "workers: must be between 1 and 1000"),
        ({"gpus-per-worker": -1}, "gpus-per-worker: must be between 0 and 16"),
        ({"job": "Bad_Name"}, "not a valid job name"),
        ({"job": "x" * 41}, "not a valid job name"),
        ({"script": "resnet"}, "unknown script 'resnet'"),
        ({"script": "mnist", "command": "python3 x.py"}, "either script or command"),
        ({"strategy": "ps", "ps": 0}, "needs at least one parameter server"),
        ({"ps": 2}, "ps=2 needs strategy=ps"),
        ({"cpu": "lots"}, "cpu: 'lots' is not a Kubernetes quantity"),
        ({"env": "TF_CONFIG=x"}, "TF_CONFIG is set by the charm"),
        ({"env": "novalue"}, "is not KEY=VALUE"),
        ({"args": "'unclosed"}, "cannot parse args"),
        ({"steps": 0}, "steps: must be at least 1"),
        ({"deadline": -1}, "deadline: must be between 0 and 8760 hours"),
        ({"priority": "urgent"}, "priority"),
        ({"ps-cpu": "2"}, "ps-cpu apply to strategy=ps only"),
        ({"strategy": "ps", "ps": 1, "ps-memory": "-1Gi"}, "memory: '-1Gi' is not a Kubernetes"),
        ({"strategy": "ps", "ps": 1, "ps-image": "bad image"}, "is not an image reference"),
        # names the charm derives for another job's objects (review N6)
        ({"job": "resnet-serving"}, "'resnet-serving' is reserved: .*serving job resnet"),
        ({"job": "resnet-tensorboard"}, "reserved: .*TensorBoard of job resnet"),
        ({"job": "resnet-code"}, "reserved: .*code ConfigMap of job resnet"),
        ({"job": "resnet-purge"}, "reserved: .*purge Job of job resnet"),
        ({"job": "export-resnet"}, "reserved: .*export Job of job resnet"),
        ({"job": "fetch-resnet"}, "reserved: .*fetch-model Job of job resnet"),
        ({"job": "upload-resnet"}, "reserved: .*upload Job of job resnet"),
        ({"job": "import-cifar"}, "reserved: .*import Job of dataset cifar"),
    ],
)
def test_invalid_train_creates_nothing(ctx, state, api, params, message):
    add_nodes(api, node("node-a", 8))
    with pytest.raises(testing.ActionFailed, match=message):
        run_action(ctx, state, "train", **params)
    assert job_objects(api) == []
    assert not [
        r
        for r in api.requests
        if r.method in ("POST", "PATCH", "PUT", "DELETE") and "queues" not in r.path
    ]


def test_a_job_named_like_another_jobs_serving_service_never_takes_it(ctx, state, api):
    """JobSet adopts any Service named like its subdomain (review N6): refused, kept intact."""
    add_nodes(api, node("cpu-0"))
    service = f"/api/v1/namespaces/{NS}/services/resnet-serving"
    api.put_object(service, {"metadata": {"labels": {MANAGED: "tensorflow"}}, "spec": {}})
    before = api.get_object(service)
    with pytest.raises(testing.ActionFailed, match="choose a job name that does not end in"):
        run_action(ctx, state, "train", job="resnet-serving", workers=1)
    assert api.get_object(service) == before
    assert job_objects(api) == [before]


def test_a_job_an_earlier_revision_made_with_a_reserved_name_can_still_be_stopped(ctx, state, api):
    run_action(ctx, state, "train", job="mnist", workers=1)
    results, _ = run_action(ctx, state, "stop", job="mnist-serving")  # names a job: allowed
    assert results["deleted-objects"] == "0"


def test_a_job_beyond_the_free_gpus_is_queued_not_refused(ctx, state, api):
    # two CPU nodes: the GPU workers' default share leaves the GPUs the one quota short
    add_nodes(api, node("node-a", 2), node("node-b", 2), node("cpu-0"), node("cpu-1"))
    run_action(ctx, state, "train", job="first", workers=3, **{"gpus-per-worker": 1})
    results, logs = run_action(
        ctx, state, "train", job="mnist", workers=4, **{"gpus-per-worker": 1}
    )
    assert results["state"].startswith("queued: position 1: couldn't assign flavors")
    assert "insufficient unused quota for nvidia.com/gpu" in results["state"]
    assert results["pods-running"].startswith("not yet: queued")
    assert jobset(api, "mnist")["spec"]["suspend"] is True
    assert not [p for p in training_pods(api) if "mnist" in p["metadata"]["name"]]
    assert any(m.startswith("queued: ") for m in logs)


def test_more_gpus_per_worker_than_any_node_has_is_refused(ctx, state, api):
    add_nodes(api, node("node-a", 2), node("node-b", 2))
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, state, "train", job="big", workers=1, **{"gpus-per-worker": 4})
    assert (
        "can never run on this cluster: each worker needs 4 GPUs but the largest "
        "schedulable node has 2"
    ) in failed.value.message
    assert job_objects(api) == []


def test_more_gpus_than_the_cluster_has_is_refused(ctx, state, api):
    add_nodes(api, node("node-a", 2), node("node-b", 2))
    api.put_object("/api/v1/namespaces/other/pods/busy", gpu_pod("busy", "node-a", 1))
    with pytest.raises(testing.ActionFailed, match="needs 6 GPUs but the cluster's schedulable"):
        run_action(ctx, state, "train", job="big", workers=6, **{"gpus-per-worker": 1})
    assert job_objects(api) == []


def test_a_job_larger_than_the_cohort_can_ever_give_is_refused_with_the_numbers(ctx, state, api):
    """The nodes hold 4 GPUs but a model server outside Kueue holds 1: the cohort has 3 (N4).

    Kueue never admits more than the cohort's whole quota to one of its ClusterQueues
    (resource_node.go potentialAvailable), so such a job would queue for ever.
    """
    add_nodes(api, node("node-a", 2), node("node-b", 2), node("cpu-0"))
    api.put_object("/api/v1/namespaces/other/pods/busy", gpu_pod("busy", "node-a", 1))
    add_nodes(api)  # the control plane's next update-status sizes the cohort again
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, state, "train", job="big", workers=4, **{"gpus-per-worker": 1})
    assert (
        "job 'big' can never be admitted: its 4 worker pods need 4 nvidia.com/gpu of one "
        "flavor but the cohort gpu-k8s can give team-tensorflow at most 3 (flavor "
        "gpu-nvidia-a10g: the cohort's own 3 + its ClusterQueues' nominal 0)"
    ) in failed.value.message
    assert "lower workers or gpus-per-worker" in failed.value.message
    assert job_objects(api) == []


def test_dry_run_says_never_with_the_numbers_train_refuses_with(ctx, state, api):
    """dry-run checks the cohort as train does, and gives the very same refusal."""
    add_nodes(api, node("node-a", 2), node("node-b", 2), node("cpu-0"))
    api.put_object("/api/v1/namespaces/other/pods/busy", gpu_pod("busy", "node-a", 1))
    add_nodes(api)  # the cohort holds 3 GPUs
    params = {"job": "big", "workers": 4, "gpus-per-worker": 1}
    results, _ = run_action(ctx, state, "train", **params, **{"dry-run": True})
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, state, "train", **params)
    never = results["dry-run"].removeprefix("never: ")
    assert never != results["dry-run"]
    assert never.startswith("job 'big' can never be admitted: its 4 worker pods need 4 ")
    assert failed.value.message.endswith(never)
    assert job_objects(api) == []


def test_a_job_larger_than_the_cohorts_cpu_is_refused(ctx, state, api):
    """A node joined after the control plane sized the cohort: Kueue counts it only later."""
    add_nodes(api, node("cpu-0"))
    # another team asks the control plane for 2 CPUs of its own (its kube-api request):
    # the cohort holds 8 - 2 = 6, team-other 2: 8 in all
    join_team(api, "other", {"cpu-quota": "2"})
    api.put_object("/api/v1/nodes/cpu-1", node("cpu-1"))  # not counted yet: nodes have 16
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, state, "train", job="big", workers=5, cpu="2")
    assert (
        "job 'big' can never be admitted: it needs 10 cpu of flavor cpu but the cohort "
        "gpu-k8s can give team-tensorflow at most 8 (the cohort's own 6 + its "
        "ClusterQueues' nominal 2): lower workers or cpu, or add nodes (the control "
        "plane counts them into the cohort on its next update-status)"
    ) in failed.value.message


def test_other_teams_unused_guarantees_count_toward_what_the_cohort_gives(ctx, state, api):
    """team-other's nominal 2 of 4 GPUs is lent while unused: a 4-GPU job is not refused."""
    add_nodes(api, node("node-a", 2), node("node-b", 2), node("cpu-0"))
    other = {"spec": {"cohortName": "gpu-k8s", "resourceGroups": [{
        "coveredResources": ["nvidia.com/gpu"],
        "flavors": [{"name": "gpu-nvidia-a10g", "resources": [
            {"name": "nvidia.com/gpu", "nominalQuota": "2"}
        ]}],
    }]}}  # fmt: skip
    api.put_object("/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-other", other)
    add_nodes(api)  # the cohort holds 4 - 2 = 2
    results, _ = run_action(ctx, state, "train", job="big", workers=4, **{"gpus-per-worker": 1})
    assert results["created"] == "true"


def test_more_multi_gpu_pods_than_the_nodes_hold_is_refused(ctx, state, api):
    """9 GPUs on 3 nodes of 3 hold 3 pods of 2 GPUs, not 4: refused, not queued forever."""
    add_nodes(api, node("node-a", 3), node("node-b", 3), node("node-c", 3))
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, state, "train", job="big", workers=4, **{"gpus-per-worker": 2})
    assert (
        "can never run on this cluster: the 4 worker pods need 2 GPUs each on one node, but "
        "the schedulable nodes of one GPU model hold at most 3 such pods"
    ) in failed.value.message
    assert job_objects(api) == []


def test_two_time_sliced_gpus_per_worker_are_refused(ctx, state, api):
    """Issue 31 leftover: under time-slicing a pod gets one shared GPU, said before anything."""
    shared = node("node-a", 4)
    shared["metadata"]["labels"]["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
    add_nodes(api, shared)
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, state, "train", job="pair", workers=1, **{"gpus-per-worker": 2})
    assert (
        "can never run on this cluster: each worker asks for 2 GPUs but this cluster's GPUs "
        "are time-sliced"
    ) in failed.value.message
    assert job_objects(api) == []


def test_no_gpu_nodes_at_all(ctx, state, api):
    add_nodes(api, node("cpu-0"))
    with pytest.raises(testing.ActionFailed, match="the largest schedulable node has 0"):
        run_action(ctx, state, "train", workers=2, **{"gpus-per-worker": 1})


def test_api_error_midway_rolls_back(ctx, state, api):
    api.inject(
        status=403,
        times=1,
        method="PATCH",
        path_prefix=f"/apis/apps/v1/namespaces/{NS}/deployments",
    )
    with pytest.raises(testing.ActionFailed, match="refused Deployment mnist-tensorboard"):
        run_action(ctx, state, "train", job="mnist", workers=2)
    assert job_objects(api) == []


def test_train_refused_while_relations_not_ready(ctx, api):
    with pytest.raises(testing.ActionFailed, match="not ready: missing relation"):
        run_action(ctx, testing.State(leader=True), "train", workers=2)


def test_stored_request_is_the_validated_parameters(ctx, state, api):
    run_action(ctx, state, "train", job="mnist", workers=3, steps=10, priority="high")
    stored = json.loads(jobset(api, "mnist")["metadata"]["annotations"]["gpu-k8s.io/request"])
    assert stored["workers"] == 3 and stored["steps"] == 10 and stored["job"] == "mnist"
    assert stored["priority"] == "high"
    assert jobset(api, "mnist")["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"


def test_launch_requests_do_not_grow_with_workers(ctx, state, api):
    for i in range(3):
        add_nodes(api, node(f"gpu-{i}", 8))
    reconciled = ctx.run(ctx.on.update_status(), state)  # the team's queue exists
    counts = []
    for name, workers in (("small", 2), ("large", 16)):
        before = len(api.requests)
        params = {"job": name, "workers": workers, "gpus-per-worker": 1}
        ctx.run(ctx.on.action("train", params=params), reconciled)
        counts.append(len(api.requests) - before)
    assert counts[0] == counts[1]


def _placement(api) -> dict[str, str]:
    return {
        "{}-{}".format(
            p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"],
            p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
        ): p["spec"].get("nodeName", "")
        for p in training_pods(api)
    }


def test_roles_without_gpus_run_on_tainted_gpu_nodes_whose_cpus_the_quota_counts(ctx, state, api):
    # only GPU nodes (tainted nvidia.com/gpu, as kubernetes-worker does): the team's cpu
    # quota is theirs, so the chief and the parameter server must be able to land there
    add_nodes(api, node("gpu-0", 2), node("gpu-1", 2))
    params = {"strategy": "ps", "ps": 1, "workers": 2, "gpus-per-worker": 1}
    results, _ = run_action(ctx, state, "train", job="ps", **params)
    assert results["state"] == "running"
    assert all(_placement(api).values()), _placement(api)


def test_roles_without_gpus_prefer_nodes_without_gpus(ctx, state, api):
    add_nodes(api, node("gpu-0", 4), node("cpu-0"))
    params = {"strategy": "ps", "ps": 1, "workers": 2, "gpus-per-worker": 1}
    run_action(ctx, state, "train", job="ps", **params)
    assert _placement(api) == {
        "chief-0": "cpu-0",
        "ps-0": "cpu-0",
        "worker-0": "gpu-0",
        "worker-1": "gpu-0",
    }


def test_a_job_kueue_does_not_manage_runs_with_a_warning(ctx, state, api, controller):
    """Kueue 0.19 leaves a JobSet alone outside its managed namespaces: no queue, no quota."""
    add_nodes(api, node("node-a", 2), node("cpu-0"))
    controller.managed = False  # the namespace lacks the control plane's label

    results, logs = run_action(ctx, state, "train", job="mnist", **{"gpus-per-worker": 1})

    assert results["warning"].startswith("Kueue does not manage this namespace")
    assert results["state"] == "running"
    assert any(m.startswith("warning: Kueue does not manage") for m in logs)
    assert jobset(api, "mnist")["spec"].get("suspend") is None
    status, _ = run_action(ctx, state, "job-status", job="mnist")
    assert status["phase"] == "Running"
    assert status["queue"].startswith("none: Kueue does not manage this namespace")


def test_a_cluster_queue_without_its_flavors_holds_the_job_saying_so(ctx, state, api):
    """Kueue marks a ClusterQueue inactive while a ResourceFlavor it names is missing."""
    add_nodes(api, node("node-a", 2), node("cpu-0"))
    api.delete_object("/apis/kueue.x-k8s.io/v1beta2/resourceflavors/cpu")

    results, _ = run_action(ctx, state, "train", job="mnist", **{"gpus-per-worker": 1})

    assert results["state"] == "queued: position 1: ClusterQueue team-tensorflow is inactive"
    assert jobset(api, "mnist")["spec"]["suspend"] is True


def test_a_missing_priority_class_leaves_the_job_unpicked(ctx, state, api):
    """No Workload until the WorkloadPriorityClass exists (the control plane makes them)."""
    add_nodes(api, node("node-a", 2), node("cpu-0"))
    api.delete_object("/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses/normal")

    results, _ = run_action(ctx, state, "train", job="mnist", **{"gpus-per-worker": 1})

    assert results["state"] == "unknown: Kueue has not picked the job up yet"
    assert jobset(api, "mnist")["spec"]["suspend"] is True


def test_a_team_at_its_object_counts_gets_a_clear_refusal_and_no_half_made_job(
    ctx, state, api, controller
):
    """The control plane's object-count quota (review43 G4) counts what a job makes.

    The team's namespace holds the ResourceQuota gpu-k8s-object-counts (store_grant, as
    the control plane applies it): a job counts its JobSet, Jobs, pods, code ConfigMap,
    TensorBoard, the JobSet's headless Service and NetworkPolicies. At a count the
    operator lowered to what is used, the next job is refused naming the quota, and what
    it had made is rolled back.
    """
    quota_path = f"/api/v1/namespaces/{NS}/resourcequotas/gpu-k8s-object-counts"
    add_nodes(api, node("node-a", 2), node("cpu-0"))
    controller.per_tick = 2
    run_action(ctx, state, "train", job="mnist", workers=2, **{"gpus-per-worker": 1})
    used = api.get_object(quota_path)["status"]["used"]
    assert used["count/jobsets.jobset.x-k8s.io"] == "1"
    assert used["count/jobs.batch"] == "1"
    assert used["configmaps"] == "1"  # the job's code
    assert used["count/deployments.apps"] == "1"  # its TensorBoard
    assert used["services"] == "2"  # TensorBoard's and the JobSet's headless one (its subdomain)
    assert used["count/networkpolicies.networking.k8s.io"] == "2"
    assert int(used["count/pods"]) >= 2
    quota = api.get_object(quota_path)
    lowered = {**quota["spec"]["hard"], "configmaps": used["configmaps"]}
    api.put_object(quota_path, {**quota, "spec": {"hard": lowered}})
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, state, "train", job="second", workers=1)
    assert (
        'the API server refused ConfigMap second-code: configmaps "second-code" is forbidden:'
        " exceeded quota: gpu-k8s-object-counts, requested: configmaps=1, used: configmaps=1,"
        " limited: configmaps=1"
    ) in failed.value.message
    assert [o["metadata"]["name"] for o in job_objects(api) if o["kind"] == "JobSet"] == ["mnist"]
