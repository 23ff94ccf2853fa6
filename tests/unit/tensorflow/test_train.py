"""The train action against the fake API server: what it creates, and what it refuses."""

from __future__ import annotations

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
    node,
    run_action,
)
from ops import testing

MANAGED = "app.kubernetes.io/managed-by"
JOB_LABEL = "gpu-k8s.io/job"


def _kinds(objs: list[dict]) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for o in objs if o["kind"] != "Pod")


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
        ("Job", "mnist-worker"),
        ("Service", "mnist"),
        ("Service", "mnist-tensorboard"),
    ]
    for obj in objs:
        assert obj["metadata"]["labels"][MANAGED] == "tensorflow"
        assert obj["metadata"]["labels"][JOB_LABEL] == "mnist"
        if obj["kind"] != "Pod":
            kubernetes_validate.validate(_strip(obj), "1.33", strict=True)
    # progress while pods start, one more per poll
    assert [m for m in logs if "running" in m] == [f"{i}/4 workers running" for i in range(5)]
    assert results["job"] == "mnist"
    assert len(results["pods"].split()) == 4
    assert results["pods-running"] == "all"
    assert results["tensorboard-url"] == f"http://mnist-tensorboard.{NS}.svc:6006"


def test_worker_job_is_indexed_with_gpus_and_stable_hostnames(ctx, state, api):
    add_nodes(api, node("node-a", 4))
    run_action(ctx, state, "train", job="mnist", workers=4, **{"gpus-per-worker": 1})

    job = api.get_object(f"/apis/batch/v1/namespaces/{NS}/jobs/mnist-worker")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 4
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "mnist"
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
    service = api.get_object(f"/api/v1/namespaces/{NS}/services/mnist")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == pod_labels_subset(job)

    # The launcher, given this pod's environment, names exactly the pods' DNS names:
    # Indexed Job hostname `<job-name>-<index>` + subdomain = the headless Service.
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
    hostnames = [f"{job['metadata']['name']}-{i}.{pod['subdomain']}:2222" for i in range(4)]
    assert tf_config["cluster"] == {"worker": hostnames}
    pods = api.objects(f"/api/v1/namespaces/{NS}/pods/")
    assert sorted(p["spec"]["hostname"] for p in pods) == [h.split(".")[0] for h in hostnames]


def pod_labels_subset(job: dict) -> dict:
    labels = job["spec"]["template"]["metadata"]["labels"]
    return {k: v for k, v in labels.items() if k != "gpu-k8s.io/role"}


def test_configmap_holds_launcher_and_trainer(ctx, state, api):
    run_action(ctx, state, "train", job="cpu", workers=1)
    cm = api.get_object(f"/api/v1/namespaces/{NS}/configmaps/cpu-code")
    assert set(cm["data"]) == {"tf_launcher.py", "tf_trainer.py"}
    assert "def build_tf_config" in cm["data"]["tf_launcher.py"]


def test_cpu_job_has_no_gpu_runtime_and_uses_default_image(ctx, state, api):
    run_action(ctx, state, "train", job="cpu", workers=2, steps=50, args="--batch-size 32")
    pod = api.get_object(f"/apis/batch/v1/namespaces/{NS}/jobs/cpu-worker")["spec"]["template"]
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
    container = api.get_object(f"/apis/batch/v1/namespaces/{NS}/jobs/own-worker")["spec"][
        "template"
    ]["spec"]["containers"][0]
    assert container["command"][3:] == ["python3", "/data/train.py", "--epochs", "3"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SEED"] == "7" and env["NAME"] == "a b"
    assert container["image"] == "example/tf:1"


def test_ps_strategy_creates_chief_ps_and_workers(ctx, state, api):
    add_nodes(api, node("node-a", 2))
    results, _ = run_action(
        ctx, state, "train", job="ps-job", strategy="ps", ps=2, workers=2, **{"gpus-per-worker": 1}
    )
    jobs_ = {
        j["metadata"]["name"]: j for j in api.objects(f"/apis/batch/v1/namespaces/{NS}/jobs/")
    }
    assert set(jobs_) == {"ps-job-chief", "ps-job-ps", "ps-job-worker"}
    assert jobs_["ps-job-ps"]["spec"]["completions"] == 2
    assert jobs_["ps-job-chief"]["spec"]["completions"] == 1
    chief = jobs_["ps-job-chief"]["spec"]["template"]["spec"]
    assert "runtimeClassName" not in chief
    worker = jobs_["ps-job-worker"]["spec"]["template"]["spec"]
    assert worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert len(results["pods"].split()) == 5


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


def test_train_same_name_other_parameters_fails_and_changes_nothing(ctx, state, api):
    run_action(ctx, state, "train", job="mnist", workers=2)
    before = job_objects(api)
    with pytest.raises(testing.ActionFailed, match="already exists with other parameters"):
        run_action(ctx, state, "train", job="mnist", workers=3)
    assert job_objects(api) == before


def test_train_without_waiting(ctx, state, api, controller, fake_time):
    controller.enabled = False
    results, _ = run_action(ctx, state, "train", job="mnist", workers=2, timeout=0)
    assert results["pods-running"] == "not yet: see job-status"
    assert fake_time.sleeps == 0


def test_train_gives_up_waiting_after_timeout(ctx, state, api, controller, fake_time):
    controller.enabled = False
    results, logs = run_action(ctx, state, "train", job="mnist", workers=2, timeout=10)
    assert results["pods-running"] == "not yet: see job-status"
    assert fake_time.now - 1000.0 == pytest.approx(10)
    assert logs.count("0/2 workers running") == 1


def test_train_fails_when_image_cannot_be_pulled(ctx, state, api, controller):
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
    ],
)
def test_invalid_train_creates_nothing(ctx, state, api, params, message):
    add_nodes(api, node("node-a", 8))
    with pytest.raises(testing.ActionFailed, match=message):
        run_action(ctx, state, "train", **params)
    assert job_objects(api) == []
    assert not [r for r in api.requests if r.method in ("POST", "PATCH", "PUT", "DELETE")]


def test_not_enough_gpus_fails_with_the_numbers(ctx, state, api):
    add_nodes(api, node("node-a", 2), node("node-b", 2), node("cpu-0"))
    api.put_object("/api/v1/namespaces/other/pods/busy", gpu_pod("busy", "node-a", 1))
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, state, "train", job="mnist", workers=4, **{"gpus-per-worker": 1})
    assert "needs 4x1 GPU, free: node-a 1, node-b 2" in failed.value.message
    assert job_objects(api) == []


def test_more_gpus_per_worker_than_any_node_has(ctx, state, api):
    add_nodes(api, node("node-a", 2), node("node-b", 2))
    with pytest.raises(testing.ActionFailed, match="needs 1x4 GPU, free: node-a 2, node-b 2"):
        run_action(ctx, state, "train", job="big", workers=1, **{"gpus-per-worker": 4})
    assert job_objects(api) == []


def test_no_gpu_nodes_at_all(ctx, state, api):
    add_nodes(api, node("cpu-0"))
    with pytest.raises(testing.ActionFailed, match="needs 2x1 GPU, free: none"):
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
    run_action(ctx, state, "train", job="mnist", workers=3, steps=10)
    service = api.get_object(f"/api/v1/namespaces/{NS}/services/mnist")
    stored = json.loads(service["metadata"]["annotations"]["gpu-k8s.io/request"])
    assert stored["workers"] == 3 and stored["steps"] == 10 and stored["job"] == "mnist"


def test_launch_requests_do_not_grow_with_workers(ctx, state, api):
    for i in range(3):
        add_nodes(api, node(f"gpu-{i}", 8))
    counts = []
    for name, workers in (("small", 2), ("large", 16)):
        before = len(api.requests)
        run_action(ctx, state, "train", job=name, workers=workers, **{"gpus-per-worker": 1})
        counts.append(len(api.requests) - before)
    assert counts[0] == counts[1]
