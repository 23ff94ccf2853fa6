"""The export action: a short-lived Job over the job's checkpoints, its answer reported.

The export pod's container is played by `ScriptedKubelet` (the trainer's --export-only
run is exercised with real TensorFlow in tests/functional): it exits with a given status
after printing what tf_trainer.py prints in that case.
"""

from __future__ import annotations

import dataclasses
import json

import kubernetes_validate
import pytest
import readme_examples
from conftest import NS, add_nodes, node, run_action
from ops import testing

from fakes.kube_admission import KUBERNETES_VERSION

JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs/"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps/"


class ScriptedKubelet:
    """Every pod's container prints `output` and exits with `code` at once."""

    def __init__(self, api, code: int, output: str):
        self.api, self.code, self.output = api, code, output
        self.commands: list[list[str]] = []

    def start(self, pod: dict) -> None:
        self.commands.append(pod["spec"]["containers"][0]["command"])
        self.api.set_pod_log(NS, pod["metadata"]["name"], self.output)

    def exit_code(self, pod: dict) -> int | None:
        return self.code

    def stop(self, pod: dict) -> None:
        pass

    def removed(self, present: set[str]) -> None:
        pass  # every container exited at its start: none is left to stop


@pytest.fixture
def cluster(api):
    add_nodes(api, node("cpu-0"))
    return api


def test_export_runs_the_trainer_over_the_checkpoints_and_reports_the_version(
    ctx, state, cluster, controller
):
    answer = {"step": 1500, "path": "/data/jobs/mnist/export/1500"}
    kubelet = ScriptedKubelet(cluster, 0, f"exported ...\nGPU_K8S_EXPORT {json.dumps(answer)}\n")
    controller.kubelet = kubelet

    results, logs = run_action(ctx, state, "export", job="mnist")

    readme_examples.show("export", readme_examples.juju_results(results))
    assert results["version"] == "1500"
    assert results["path"] == "/data/jobs/mnist/export/1500"
    assert results["signature"].startswith("serving_default: x (float32 [batch, inputs])")
    assert logs == ["exporting the latest checkpoint of mnist (Job export-mnist)"]
    assert kubelet.commands == [
        [
            "python3",
            "/opt/gpu-k8s/tf_trainer.py",
            "--export-only",
            "--checkpoint-dir=/data/jobs/mnist/checkpoints",
            "--export-dir=/data/jobs/mnist/export",
        ]
    ]
    job = cluster.get_object(JOBS + "export-mnist")
    code = cluster.get_object(CONFIGMAPS + "export-mnist")
    assert code["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert "def export_latest" in code["data"]["tf_trainer.py"]
    for manifest in (job, code):
        sent = {k: v for k, v in manifest.items() if k != "status"}
        sent["metadata"] = {
            k: v for k, v in manifest["metadata"].items() if k in ("name", "namespace", "labels")
        }
        kubernetes_validate.validate(sent, KUBERNETES_VERSION, strict=True)

    # again later: the finished Job makes way for a new one
    run_action(ctx, state, "export", job="mnist")
    assert len(kubelet.commands) == 2


def test_an_export_without_a_checkpoint_fails_clearly_and_leaves_nothing(
    ctx, state, cluster, controller
):
    why = "no model.json in /data/jobs/nope/checkpoints: export works for jobs of the built-in"
    controller.kubelet = ScriptedKubelet(cluster, 1, f"export failed: {why} trainer\n")
    with pytest.raises(testing.ActionFailed, match=f"export of nope failed: {why}"):
        run_action(ctx, state, "export", job="nope")
    assert cluster.get_object(JOBS + "export-nope") is None


@pytest.mark.parametrize(
    ("params", "message"),
    [({"job": "Bad_Name"}, "not a valid job name"), ({"job": "x", "timeout": 0}, "timeout")],
)
def test_bad_export_requests_fail_and_create_nothing(ctx, state, cluster, params, message):
    with pytest.raises(testing.ActionFailed, match=message):
        run_action(ctx, state, "export", **params)
    assert cluster.objects(JOBS) == []


# ------------------------------------------------------------------------- fetch-model


@pytest.fixture
def volume(api, controller, tmp_path):
    """The pods' shell commands run for real over a directory standing for the volume."""
    from pathlib import Path

    from fakes.kubelet import ProcessKubelet

    data = tmp_path / "data"
    actions = Path(__file__).resolve().parents[3] / "actions"
    kubelet = ProcessKubelet(api, NS, {"/data": data, "/opt/gpu-k8s": actions}, tmp_path)
    controller.kubelet = kubelet
    yield data
    kubelet.stop_all()


def test_fetch_model_says_how_to_copy_the_highest_version_out(ctx, state, cluster, volume):
    for version in ("200", "1000", "40"):
        (volume / "jobs" / "mnist" / "export" / version).mkdir(parents=True)
    (volume / "jobs" / "mnist" / "export" / ".1200.tmp").mkdir()  # being written

    with readme_examples.repeatable():
        results, _ = run_action(ctx, state, "fetch-model", job="mnist")
    readme_examples.show("fetch-model", readme_examples.juju_results(results))

    pod = results["pod"]
    assert pod.startswith("fetch-mnist-")
    assert (results["version"], results["versions"]) == ("1000", "40 200 1000")
    assert results["copy"] == (
        f"kubectl -n {NS} cp {pod}:/data/jobs/mnist/export/1000 ./mnist-1000"
    )
    job = cluster.get_object(JOBS + "fetch-mnist")
    spec = job["spec"]["template"]["spec"]
    assert spec["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True
    assert job["spec"]["activeDeadlineSeconds"] > 3600
    kubernetes_validate.validate(
        {
            **{k: v for k, v in job.items() if k != "status"},
            "metadata": {k: job["metadata"][k] for k in ("name", "namespace", "labels")},
        },
        KUBERNETES_VERSION,
        strict=True,
    )

    results, _ = run_action(ctx, state, "fetch-model", job="mnist", version=200)
    assert results["copy"].endswith(":/data/jobs/mnist/export/200 ./mnist-200")
    with pytest.raises(
        testing.ActionFailed, match=r"no export version 7 \(versions: 40, 200, 1000\)"
    ):
        run_action(ctx, state, "fetch-model", job="mnist", version=7)
    assert cluster.get_object(JOBS + "fetch-mnist") is None


def test_fetch_model_of_a_job_without_export_fails_and_leaves_nothing(ctx, state, cluster, volume):
    with pytest.raises(
        testing.ActionFailed,
        match=r"no export in \S*/data/jobs/none/export \(export job=none first\)",
    ):
        run_action(ctx, state, "fetch-model", job="none")
    assert cluster.get_object(JOBS + "fetch-none") is None


# ------------------------------------------------------------- fetch-model to S3


@pytest.fixture(scope="module")
def s3():
    from signed_s3 import signed_s3

    with signed_s3() as server:
        server.bucket("models")
        yield server


def _with_credentials(state, s3):
    content = {
        "access-key-id": s3.env["AWS_ACCESS_KEY_ID"],
        "secret-access-key": s3.env["AWS_SECRET_ACCESS_KEY"],
        "region": s3.env["AWS_REGION"],
        "endpoint": s3.env["GPU_K8S_S3_ENDPOINT"],
    }
    secret = testing.Secret(content, owner=None)
    config = {"dataset-credentials": secret.id}
    return dataclasses.replace(state, secrets=[*state.secrets, secret], config=config)


def _saved_model(volume, job: str, version: str) -> None:
    model = volume / "jobs" / job / "export" / version
    (model / "variables").mkdir(parents=True)
    (model / "variables" / "variables.index").write_bytes(b"index " + version.encode())
    (model / "saved_model.pb").write_bytes(b"graph " + version.encode())


def test_fetch_model_uploads_the_version_to_s3_with_the_secret_keys_only_in_the_pod(
    ctx, state, cluster, volume, s3
):
    _saved_model(volume, "mnist", "200")
    _saved_model(volume, "mnist", "1000")
    with_creds = _with_credentials(state, s3)

    results, logs = run_action(
        ctx, with_creds, "fetch-model", job="mnist", destination="s3://models/digits"
    )

    readme_examples.show("fetch-model-s3", readme_examples.juju_results(results))
    assert results == {
        "job": "mnist",
        "version": "1000",
        "destination": "s3://models/digits/1000/",
        "files": "2",
        "size": "20 B",
        "list": "aws s3 ls --recursive s3://models/digits/1000/",
    }
    assert logs[0] == ("uploading the export of mnist to s3://models/digits (Job upload-mnist)")
    assert sorted(s3.keys("models")) == [
        "digits/1000/saved_model.pb",
        "digits/1000/variables/variables.index",
    ]
    body = s3.client.get_object(Bucket="models", Key="digits/1000/saved_model.pb")["Body"]
    assert body.read() == b"graph 1000"

    job = cluster.get_object(JOBS + "upload-mnist")
    code = cluster.get_object(CONFIGMAPS + "upload-mnist")
    assert sorted(code["data"]) == ["dataset_import.py", "model_upload.py"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "tensorflow-dataset-credentials"}}]
    assert container["volumeMounts"][0]["readOnly"] is True
    everything = json.dumps([results, logs, job, code])
    assert s3.env["AWS_SECRET_ACCESS_KEY"] not in everything
    assert s3.env["AWS_ACCESS_KEY_ID"] not in everything
    for manifest in (job, code):
        sent = {k: v for k, v in manifest.items() if k != "status"}
        sent["metadata"] = {
            k: v for k, v in manifest["metadata"].items() if k in ("name", "namespace", "labels")
        }
        kubernetes_validate.validate(sent, KUBERNETES_VERSION, strict=True)

    # again: the objects are there, nothing is overwritten, the failed Job goes
    with pytest.raises(
        testing.ActionFailed,
        match=r"upload of mnist failed: s3://models/digits/1000/ already holds objects",
    ):
        run_action(ctx, with_creds, "fetch-model", job="mnist", destination="s3://models/digits")
    assert cluster.get_object(JOBS + "upload-mnist") is None
    # an older version to another prefix
    results, _ = run_action(
        ctx, with_creds, "fetch-model", job="mnist", version=200, destination="s3://models/old"
    )
    assert results["destination"] == "s3://models/old/200/"


@pytest.mark.parametrize(
    ("destination", "message"),
    [
        ("https://bucket/x", r"destination must be s3://<bucket>\[/<prefix>\]"),
        ("s3:///x", r"destination must be s3://<bucket>\[/<prefix>\]"),
        ("s3://bucket/x?X-Amz-Signature=abc", "no user, password, query or fragment"),
    ],
)
def test_a_bad_destination_fails_and_creates_nothing(ctx, state, cluster, destination, message):
    with pytest.raises(testing.ActionFailed, match=message):
        run_action(ctx, state, "fetch-model", job="mnist", destination=destination)
    assert cluster.objects(JOBS) == []


def test_an_upload_without_credentials_or_version_fails_and_leaves_nothing(
    ctx, state, cluster, volume, s3
):
    with pytest.raises(testing.ActionFailed, match="an s3 destination needs credentials"):
        run_action(ctx, state, "fetch-model", job="mnist", destination="s3://models/x")
    assert cluster.objects(JOBS) == []

    _saved_model(volume, "mnist", "40")
    with pytest.raises(
        testing.ActionFailed,
        match=r"upload of mnist failed: no export version 7 in \S+ \(versions: 40\)",
    ):
        run_action(
            ctx,
            _with_credentials(state, s3),
            "fetch-model",
            job="mnist",
            version=7,
            destination="s3://models/x",
        )
    assert cluster.objects(JOBS) == []
    assert s3.keys("models", "x/") == []
