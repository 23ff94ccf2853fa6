"""serve and unserve: TensorFlow Serving over a job's export, reached through the API server.

The model server is tests/fakes/tf_serving.py (TF Serving's documented REST API over the
export directory), registered as the Service's endpoint in the fake API server's service
proxy; the Deployment's pods are the emulator's (D1, D2: an image without
`tensorflow_model_server` cannot start).
"""

from __future__ import annotations

import dataclasses
import json

import kubernetes_validate
import pytest
import readme_examples
import yaml
from conftest import NS, add_nodes, node, run_action
from ops import testing

from fakes.addons import size_cohort
from fakes.batch import KUEUE_CONFIG_MAP
from fakes.kube_admission import KUBERNETES_VERSION
from fakes.tf_serving import FakeTfServing

DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments/"
SERVICES = f"/api/v1/namespaces/{NS}/services/"


def _predict(instances: list) -> list:
    return [{"class": 0, "probabilities": [1.0] + [0.0] * 9} for _ in instances]


@pytest.fixture
def export(tmp_path):
    version = tmp_path / "export" / "7"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"\x08\x01")  # read by the real server only
    return version.parent


@pytest.fixture
def model_server(api, export):
    add_nodes(api, node("cpu-0"), node("gpu-0", 1))
    with FakeTfServing("mnist", export, predict=_predict, width=64, loading_polls=2) as server:
        api.service_backends[(NS, "mnist-serving:8501")] = server.url
        yield server


def _sent(manifest: dict) -> dict:
    sent = {k: v for k, v in manifest.items() if k != "status"}
    sent["metadata"] = {
        k: v for k, v in manifest["metadata"].items() if k in ("name", "namespace", "labels")
    }
    return sent


def test_serve_waits_for_the_model_sends_a_sample_and_says_how_to_reach_it(
    ctx, state, api, model_server
):
    results, logs = run_action(ctx, state, "serve", job="mnist")

    assert results["version"] == "7"
    assert results["rest-url"] == f"http://mnist-serving.{NS}.svc:8501/v1/models/mnist:predict"
    assert results["grpc-url"] == f"mnist-serving.{NS}.svc:8500"
    assert results["sample-request"] == "64 zeros"
    assert json.loads(results["sample-answer"]) == _predict([0])[0]
    assert results["from-your-machine"].startswith(
        f"kubectl -n {NS} port-forward svc/mnist-serving 8501 (leave it running), then in "
        "another terminal: curl -d"
    )
    assert logs == ["serving mnist from /data/jobs/mnist/export"]
    deployment = api.get_object(DEPLOYMENTS + "mnist-serving")
    service = api.get_object(SERVICES + "mnist-serving")
    for manifest in (deployment, service):
        kubernetes_validate.validate(_sent(manifest), KUBERNETES_VERSION, strict=True)
        # not a job's object: stop and JobSet's TTL leave it alone
        assert "gpu-k8s.io/job" not in manifest["metadata"]["labels"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "tensorflow/serving:2.20.0"
    assert container["command"] == [
        "tensorflow_model_server",
        "--port=8500",
        "--rest_api_port=8501",
        "--model_name=mnist",
        "--model_base_path=/data/jobs/mnist/export",
    ]
    assert deployment["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"][
        "readOnly"
    ]
    # the model server was asked what the docs say, through the service proxy
    proxied = [r.path for r in api.requests if "/proxy/" in r.path]
    base = f"/api/v1/namespaces/{NS}/services/mnist-serving:8501/proxy/v1/models/mnist"
    assert proxied[-3:] == [base, base + "/metadata", base + ":predict"]


def test_serving_outlives_stop_and_goes_with_unserve(ctx, state, api, model_server):
    run_action(ctx, state, "train", job="mnist", workers=1)
    run_action(ctx, state, "serve", job="mnist")
    run_action(ctx, state, "stop", job="mnist")
    assert api.get_object(DEPLOYMENTS + "mnist-serving") is not None
    assert api.get_object(SERVICES + "mnist-serving") is not None

    results, _ = run_action(ctx, state, "unserve", job="mnist")
    readme_examples.show("unserve", readme_examples.juju_results(results))
    readme_examples.show("tutorial-unserve", readme_examples.juju_results(results))
    assert results["deleted"] == "Deployment and Service mnist-serving"
    assert api.get_object(DEPLOYMENTS + "mnist-serving") is None
    with pytest.raises(testing.ActionFailed, match="mnist is not being served"):
        run_action(ctx, state, "unserve", job="mnist")


def test_serve_on_gpus_uses_the_gpu_image_and_asks_for_them(ctx, state, api, model_server):
    run_action(ctx, state, "serve", job="mnist", gpus=1, replicas=2)
    spec = api.get_object(DEPLOYMENTS + "mnist-serving")["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2
    assert pod["containers"][0]["image"] == "tensorflow/serving:2.20.0-gpu"
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    # a change replaces one pod at a time: a surge pod would need a GPU nobody has free
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }


def _gpu_quota(api, path: str) -> str:
    obj = api.get_object(f"/apis/kueue.x-k8s.io/v1beta2/{path}")
    groups = obj["spec"]["resourceGroups"]
    (gpus,) = [g for g in groups if "nvidia.com/gpu" in g["coveredResources"]]
    return gpus["flavors"][0]["resources"][0]["nominalQuota"]


def _gpus_used(api) -> str:
    """The GPUs the team's ClusterQueue holds (Kueue's status.flavorsUsage)."""
    cq = api.get_object(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-{NS}")
    return next(
        r["total"]
        for f in cq["status"]["flavorsUsage"]
        for r in f["resources"]
        if r["name"] == "nvidia.com/gpu"
    )


def test_a_model_servers_gpu_is_the_teams_quota_until_unserve(ctx, state, api, export, controller):
    """Kueue admits the server's pod within the team's quota and counts its GPU.

    Issue 29 item 6 (updated: the servers' GPUs left the cohort, held outside Kueue). Every
    pod of the team's namespace is Kueue's now (the control plane's kueue.configure: the
    pod and deployment integrations), so the cohort keeps the GPU (the control plane's
    kueue.capacity subtracts only GPUs of pods Kueue does not manage) and the team's
    ClusterQueue holds it while the server runs, at the served model's priority.
    """
    add_nodes(api, node("gpu-0", 1))
    with FakeTfServing("mnist", export, predict=_predict, width=64) as server:
        api.service_backends[(NS, "mnist-serving:8501")] = server.url
        run_action(ctx, state, "serve", job="mnist", gpus=1)
        size_cohort(api)
        assert _gpu_quota(api, "cohorts/gpu-k8s") == "1"
        assert _gpu_quota(api, "clusterqueues/team-tensorflow") == "0"
        assert _gpus_used(api) == "1"
        [pod] = api.objects(f"/api/v1/namespaces/{NS}/pods/")
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
        run_action(ctx, state, "unserve", job="mnist")
    size_cohort(api)
    assert _gpu_quota(api, "cohorts/gpu-k8s") == "1"
    controller.tick()
    assert _gpus_used(api) == "0"


def test_a_server_that_stops_answering_after_its_status_fails_serve(ctx, state, api, export):
    """Its status said AVAILABLE, then no endpoint (its one pod being replaced).

    Not a model of another shape, and not a success.
    """
    add_nodes(api, node("cpu-0"))
    with FakeTfServing("mnist", export, predict=_predict, width=64) as server:
        status_only = server.get
        server.get = lambda path: (  # type: ignore[method-assign]
            (503, {"error": "no endpoints"}) if path.endswith("/metadata") else status_only(path)
        )
        api.service_backends[(NS, "mnist-serving:8501")] = server.url
        with pytest.raises(testing.ActionFailed, match="answered its status but not its metadata"):
            run_action(ctx, state, "serve", job="mnist", timeout=10)
    assert api.objects(DEPLOYMENTS) == []  # a first serve leaves nothing


def test_a_cpu_server_rolls_out_as_deployments_do_by_default(ctx, state, api, model_server):
    run_action(ctx, state, "serve", job="mnist")
    spec = api.get_object(DEPLOYMENTS + "mnist-serving")["spec"]
    assert spec["strategy"] == {"type": "RollingUpdate"}  # surge 25% up, as upstream


def test_a_model_of_another_shape_is_served_without_a_sample(ctx, state, api, export):
    """An image model (4-D input): TF Serving serves it; only the zeros sample is skipped."""
    add_nodes(api, node("cpu-0"))
    image_model = FakeTfServing("mnist", export, predict=_predict, shape=(-1, 28, 28, 1))
    with image_model as server:
        api.service_backends[(NS, "mnist-serving:8501")] = server.url
        results, _ = run_action(ctx, state, "serve", job="mnist")

    assert results["version"] == "7"
    assert results["sample-request"].startswith(
        "none: the serving_default input is not [batch, width]"
    )
    assert "sample-answer" not in results
    assert results["from-your-machine"].endswith("/v1/models/mnist/metadata")
    assert api.get_object(DEPLOYMENTS + "mnist-serving") is not None  # still serving


def test_a_job_without_an_export_is_not_served_and_says_why(ctx, state, api, tmp_path):
    add_nodes(api, node("cpu-0"))
    with FakeTfServing("none", tmp_path / "nothing", predict=_predict, width=64) as server:
        api.service_backends[(NS, "none-serving:8501")] = server.url
        with pytest.raises(testing.ActionFailed) as failed:
            run_action(ctx, state, "serve", job="none", timeout=10)
    message = str(failed.value.message)
    assert message.startswith("none was not available within 10s: serving pod running")
    assert "is there an export under /data/jobs/none/export (export job=none)?" in message
    assert api.objects(DEPLOYMENTS) == [] and api.get_object(SERVICES + "none-serving") is None


def test_a_half_written_highest_version_is_never_served(ctx, state, api, export):
    """TF Serving loads the highest numbered directory, whole or not.

    At start it then never comes up: a first serve times out and leaves nothing.
    """
    (export / "9" / "variables").mkdir(parents=True)  # no saved_model.pb yet
    add_nodes(api, node("cpu-0"))
    with FakeTfServing("mnist", export, predict=_predict, width=64) as server:
        api.service_backends[(NS, "mnist-serving:8501")] = server.url
        with pytest.raises(testing.ActionFailed, match="mnist was not available within 10s"):
            run_action(ctx, state, "serve", job="mnist", timeout=10)
    assert api.objects(DEPLOYMENTS) == []


def test_an_image_without_the_model_server_is_reported(ctx, state, api, export):
    add_nodes(api, node("cpu-0"))
    wrong = dataclasses.replace(state, config={"serving-image": "tensorflow/tensorflow:2.21.0"})
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, wrong, "serve", job="mnist", timeout=10)
    message = str(failed.value.message)
    assert "serving pod failed: CrashLoopBackOff after StartError" in message
    assert "check the serving-image config" in message


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"job": "Bad_Name"}, "not a valid job name"),
        ({"job": "m", "replicas": 0}, "replicas"),
        ({"job": "m", "gpus": 2}, "gpus"),
    ],
)
def test_bad_serve_requests_fail_and_create_nothing(ctx, state, api, params, message):
    with pytest.raises(testing.ActionFailed, match=message):
        run_action(ctx, state, "serve", **params)
    assert api.objects(DEPLOYMENTS) == []


# ------------------------------------------------- a refresh queues older Deployments

PODS = f"/api/v1/namespaces/{NS}/pods/"
WORKLOADS = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/"
QUEUE, PRIORITY = "kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"
# what Kueue's deployment webhook writes into a template (deployment_webhook.go Default)
MANAGED, PARENT = "kueue.x-k8s.io/managed", "kueue.x-k8s.io/pod-suspending-parent"


def _pods_of(api, deployment: dict) -> list[dict]:
    selector = deployment["spec"]["selector"]["matchLabels"]
    return [
        p
        for p in api.objects(PODS)
        if selector.items() <= (p["metadata"].get("labels") or {}).items()
    ]


def _workloads_of(api, pod: dict) -> list[dict]:
    return [
        w
        for w in api.objects(WORKLOADS)
        if w["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    ]


def _delete_pods(api, deployment: dict) -> None:
    """Its pods gone at once, their Workloads with them (the garbage collector's part)."""
    for pod in _pods_of(api, deployment):
        for workload in _workloads_of(api, pod):
            api.delete_object(WORKLOADS + workload["metadata"]["name"])
        api.delete_object(PODS + pod["metadata"]["name"])


def _new_pod(api, controller, deployment: dict) -> dict:
    """The Deployment's pod after its old one went (a drain), as the fake makes it."""
    _delete_pods(api, deployment)
    controller.tick()
    controller.tick()  # Kueue admits what the first tick gated
    [pod] = _pods_of(api, deployment)
    return pod


def _as_an_older_revision_made_it(
    api, controller, name: str, copy_of: str | None = None, changes: dict | None = None
) -> dict:
    """The Deployment as tensorflow revisions before kueuepod41 (94427d7) made it, running.

    No queue or priority label on it or its template, and its template unmarked (the
    control plane ran no deployment integration then); one ready replica, its pod made
    before the refresh (or a copy of Deployment `copy_of` with other labels: `changes`).
    """
    found = api.get_object(DEPLOYMENTS + (copy_of or name))
    for meta in (found["metadata"], found["spec"]["template"]["metadata"]):
        meta["labels"] = {
            k: v for k, v in meta["labels"].items() if k not in (QUEUE, PRIORITY, MANAGED)
        }
        meta.pop("annotations", None)
    seed = {
        "metadata": {"labels": found["metadata"]["labels"]},
        "spec": found["spec"],
        "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1},
    }
    if changes:
        seed["metadata"]["labels"] = {**seed["metadata"]["labels"], **changes}
        selector = seed["spec"]["selector"]
        selector["matchLabels"] = {**selector["matchLabels"], **changes}
        seed["spec"]["template"]["metadata"]["labels"] = {
            **seed["spec"]["template"]["metadata"]["labels"],
            **changes,
        }
    _delete_pods(api, found)
    seeded = api.put_object(DEPLOYMENTS + name, seed)
    controller.tick()
    return seeded


def test_a_refresh_queues_the_older_revisions_deployments_of_this_app_only(
    ctx, state, api, model_server, controller
):
    """Issue 29 item 6 follow-up: TensorBoard and model servers an older revision made.

    Such a Deployment names no queue, and Kueue v0.19.2 (the control plane's pod and
    deployment integrations, manageJobsWithoutQueueName) never gates its pods: its
    Deployment counts as their managed ancestor (jobframework
    FindAncestorJobManagedByKueue), so they run outside the team's quota. After the
    refresh the leader labels the pod template of each one this app owns as `serve` and
    `train` would (queue `training`, the server's priority high, TensorBoard its job's);
    Kueue's webhook marks the template on that update, and the next pods are gated and
    admitted in the team's queue. The Deployments keep their own labels as they were:
    Kueue refuses a queue or priority label added to a Deployment with ready replicas
    (deployment_webhook.go ValidateUpdate). Another app's Deployments are not touched.
    """
    run_action(ctx, state, "train", job="mnist", workers=1, priority="low")
    run_action(ctx, state, "serve", job="mnist")
    served_name = "mnist-serving"
    served = _as_an_older_revision_made_it(api, controller, served_name)
    board = _as_an_older_revision_made_it(api, controller, "mnist-tensorboard")
    mine = {"app.kubernetes.io/managed-by": "other", "gpu-k8s.io/serving": "other"}
    other = _as_an_older_revision_made_it(api, controller, "other-serving", served_name, mine)
    for deployment in (served, board, other):  # before: ungated, no Workload, no queue
        [pod] = _pods_of(api, deployment)
        assert MANAGED not in pod["metadata"]["labels"]
        assert not pod["spec"].get("schedulingGates") and pod["spec"].get("nodeName")
        assert _workloads_of(api, pod) == []

    ctx.run(ctx.on.upgrade_charm(), state)

    for deployment, priority in ((served, "high"), (board, "low")):
        name = deployment["metadata"]["name"]
        now = api.get_object(DEPLOYMENTS + name)
        assert QUEUE not in now["metadata"]["labels"]  # Kueue refuses it while it runs
        template = now["spec"]["template"]["metadata"]
        assert {k: template["labels"].get(k) for k in (QUEUE, PRIORITY, MANAGED)} == {
            QUEUE: "training",
            PRIORITY: priority,
            MANAGED: "true",
        }
        assert template["annotations"] == {PARENT: "deployment"}
        pod = _new_pod(api, controller, now)
        assert pod["metadata"]["labels"][MANAGED] == "true"
        assert pod["metadata"]["labels"][PRIORITY] == priority
        assert not pod["spec"].get("schedulingGates") and pod["spec"].get("nodeName")
        [workload] = _workloads_of(api, pod)
        assert workload["spec"]["queueName"] == "training"
        assert any(c["type"] == "Admitted" for c in workload["status"]["conditions"])
    # serve again (more replicas) keeps the Deployment's own labels as Kueue lets them be
    run_action(ctx, state, "serve", job="mnist", replicas=2)
    now = api.get_object(DEPLOYMENTS + "mnist-serving")
    assert now["spec"]["replicas"] == 2 and QUEUE not in now["metadata"]["labels"]
    untouched = api.get_object(DEPLOYMENTS + "other-serving")
    assert untouched["metadata"]["resourceVersion"] == other["metadata"]["resourceVersion"]


def test_a_refresh_leaves_queued_deployments_alone_and_a_non_leader_does_nothing(
    ctx, state, api, model_server, controller
):
    """A Deployment this revision made is queued already: no patch, so no rollout.

    And only the leader labels: another unit's refresh sends no write at all.
    """
    run_action(ctx, state, "serve", job="mnist")
    _as_an_older_revision_made_it(api, controller, "old-serving", "mnist-serving")
    del api.requests[:]
    ctx.run(ctx.on.upgrade_charm(), dataclasses.replace(state, leader=False))
    assert [r for r in api.requests if r.method not in ("GET",)] == []

    ctx.run(ctx.on.upgrade_charm(), state)
    patched = [r.path for r in api.requests if r.method == "PATCH" and "deployments" in r.path]
    assert patched == [DEPLOYMENTS + "old-serving"]  # mnist-serving: Kueue marked it


def test_refreshed_before_the_control_plane_the_charm_queues_them_once_kueue_marks_them(
    ctx, state, api, model_server, controller
):
    """The teams are refreshed before the control plane (docs/how-to/upgrade.md).

    At the refresh Kueue runs no deployment integration yet, so nothing marks the
    Deployment's template: the leader labels it and tries again at each hook (a patch that
    changes nothing, so no rollout) until the refreshed control plane's Kueue marks it on
    that update; then its next pod is queued and the leader stops.
    """
    run_action(ctx, state, "serve", job="mnist")
    served = _as_an_older_revision_made_it(api, controller, "mnist-serving")
    key = "controller_manager_config.yaml"
    newer = api.get_object(KUEUE_CONFIG_MAP)["data"][key]
    older = yaml.safe_load(newer)  # the control plane before kueuepod41: Jobs and JobSets
    older["integrations"]["frameworks"] = ["batch/job", "jobset.x-k8s.io/jobset"]
    api.put_object(KUEUE_CONFIG_MAP, {"data": {key: yaml.dump(older)}})

    refreshed = ctx.run(ctx.on.upgrade_charm(), state)
    template = api.get_object(DEPLOYMENTS + "mnist-serving")["spec"]["template"]["metadata"]
    assert template["labels"][QUEUE] == "training" and "annotations" not in template
    version = api.get_object(DEPLOYMENTS + "mnist-serving")["metadata"]["resourceVersion"]
    refreshed = ctx.run(ctx.on.update_status(), refreshed)
    now = api.get_object(DEPLOYMENTS + "mnist-serving")
    assert now["metadata"]["resourceVersion"] == version  # tried again: nothing changed

    api.put_object(KUEUE_CONFIG_MAP, {"data": {key: newer}})
    refreshed = ctx.run(ctx.on.update_status(), refreshed)
    now = api.get_object(DEPLOYMENTS + "mnist-serving")
    assert now["spec"]["template"]["metadata"]["annotations"] == {PARENT: "deployment"}
    pod = _new_pod(api, controller, served)
    assert pod["metadata"]["labels"][MANAGED] == "true" and pod["spec"].get("nodeName")
    [workload] = _workloads_of(api, pod)
    assert workload["spec"]["queueName"] == "training"
    del api.requests[:]
    ctx.run(ctx.on.update_status(), refreshed)
    assert not [r for r in api.requests if "deployments" in r.path]  # done: not even a list
