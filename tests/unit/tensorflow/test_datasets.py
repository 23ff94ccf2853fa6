"""import-dataset, list-datasets and `train dataset=`: the import Job really copies.

The import Job's pod runs actions/dataset_import.py as a local process (fakes/kubelet.py)
with the shared volume a temporary directory, against a local https server whose CA the
pod trusts (SSL_CERT_FILE), so what the action reports is what the program did.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

import kubernetes_validate
import pytest
import readme_examples
from conftest import NS, add_nodes, jobset, node, role_spec, run_action
from ops import testing

import charm
from fakes.kube_admission import KUBERNETES_VERSION
from fakes.kubelet import ProcessKubelet
from fakes.web import FileServer

ACTIONS = Path(__file__).resolve().parents[3] / "actions"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs/"
REGISTRY = f"/api/v1/namespaces/{NS}/configmaps/tensorflow-datasets"
SECRET = f"/api/v1/namespaces/{NS}/secrets/tensorflow-dataset-credentials"
DATA = os.urandom(200_000)
SHA = hashlib.sha256(DATA).hexdigest()


class PodKubelet(ProcessKubelet):
    """The import pod trusts the test server's CA, as a site would mount its own."""

    ca_file = ""

    def environment(self, pod: dict) -> dict[str, str]:
        return {**super().environment(pod), "SSL_CERT_FILE": self.ca_file}


@pytest.fixture
def web(tmp_path):
    with FileServer(tls_dir=tmp_path / "tls") as server:
        yield server


@pytest.fixture
def volume(api, controller, monkeypatch, tmp_path, web, fake_time):
    """The shared volume (a directory); pods run for real, and waiting takes real time."""
    data = tmp_path / "data"
    data.mkdir()
    add_nodes(api, node("cpu-0"))
    kubelet = PodKubelet(api, NS, {"/opt/gpu-k8s": ACTIONS, "/data": data}, tmp_path)
    kubelet.ca_file = str(web.ca_file)
    controller.kubelet = kubelet

    def sleep(seconds: float) -> None:
        fake_time.now += seconds
        time.sleep(0.05)
        controller.tick()

    monkeypatch.setattr(charm.TensorflowCharm, "sleep", staticmethod(sleep))
    yield data
    kubelet.stop_all()


def _registry(api) -> dict:
    return {k: json.loads(v) for k, v in (api.get_object(REGISTRY) or {}).get("data", {}).items()}


def test_an_https_file_is_imported_once_and_listed(ctx, state, api, web, volume):
    web.files["/pub/mnist.npz"] = DATA
    source = f"{web.url}/pub/mnist.npz"

    results, logs = run_action(
        ctx, state, "import-dataset", name="mnist", source=source, sha256=SHA
    )

    assert results["state"] == "imported", results
    assert (results["dataset"], results["path"]) == ("mnist", "/data/datasets/mnist")
    assert (results["bytes"], results["size"], results["files"]) == ("200000", "200.0 kB", "1")
    assert (results["sha256"], results["source"], results["created"]) == (SHA, source, "true")
    assert (volume / "datasets" / "mnist" / "mnist.npz").read_bytes() == DATA
    assert logs[0] == f"importing mnist from {source} (Job import-mnist)"
    assert "mnist.npz: 100% of 200.0 kB" in logs
    assert _registry(api)["mnist"]["size"] == 200000

    listed, _ = run_action(ctx, state, "list-datasets")
    # the test's server and data change every run: its port, the file's sha256, the time
    volatile = (r"127\.0\.0\.1:\d+", r"[0-9a-f]{64}", r"\d{4}-\d\d-\d\dT[\d:]+Z")
    readme_examples.show("import-dataset", readme_examples.juju_results(results), volatile)
    readme_examples.show("list-datasets", readme_examples.juju_results(listed), volatile)
    assert listed["count"] == "1"
    assert listed["datasets"]["mnist"].startswith(f"200.0 kB, 1 file, from {source}, imported ")

    gets = web.gets
    again, _ = run_action(ctx, state, "import-dataset", name="mnist", source=source)
    assert (again["state"], again["created"]) == ("imported", "false") and web.gets == gets
    with pytest.raises(testing.ActionFailed, match="already exists from https://"):
        run_action(ctx, state, "import-dataset", name="mnist", source=source + "2")


def test_a_failed_import_says_why_leaves_nothing_and_can_be_retried(ctx, state, api, web, volume):
    source = f"{web.url}/late.npz"
    with pytest.raises(testing.ActionFailed, match=r"import of late failed: .*late.npz: 404"):
        run_action(ctx, state, "import-dataset", name="late", source=source)
    assert not (volume / "datasets" / "late").exists()
    assert web.gets == 1  # a refusal is final: the Job's podFailurePolicy fails it at once
    listed, _ = run_action(ctx, state, "list-datasets")
    assert listed["datasets"]["late"].startswith("failed: ")

    web.files["/late.npz"] = DATA  # published now
    results, _ = run_action(ctx, state, "import-dataset", name="late", source=source)
    assert results["state"] == "imported" and results["created"] == "true"
    assert (volume / "datasets" / "late" / "late.npz").read_bytes() == DATA


def test_an_import_still_copying_is_reported_and_listed_when_done(
    ctx, state, api, web, volume, controller
):
    web.files["/big.npz"] = DATA
    web.slow = 0.1  # four 64 KiB writes: about half a second
    source = f"{web.url}/big.npz"
    results, _ = run_action(ctx, state, "import-dataset", name="big", source=source, timeout=0)
    assert results["state"].startswith("importing")
    assert results["next"] == "list-datasets shows it once the copy is complete"
    deadline = time.monotonic() + 60
    listed: dict = {}
    while time.monotonic() < deadline:
        listed, _ = run_action(ctx, state, "list-datasets")
        if listed.get("datasets", {}).get("big", "").startswith("200.0 kB"):
            break
        time.sleep(0.2)
        controller.tick()  # the cluster goes on between the operator's commands
    assert listed["datasets"]["big"].startswith("200.0 kB, 1 file")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"name": "Bad", "source": "https://h/f.npz"}, "not a valid dataset name"),
        ({"name": "ok", "source": "http://h/f.npz"}, "must be an https:// or s3:// URL"),
        ({"name": "ok", "source": "ftp://h/f.npz"}, "must be an https:// or s3:// URL"),
        ({"name": "ok", "source": "https://h/dir/"}, "an https source must name a file"),
        ({"name": "ok", "source": "https://u:p@h/f.npz"}, "hold no user, password or query"),
        ({"name": "ok", "source": "https://h/f.npz?X-Amz-Signature=abc"}, "a presigned URL"),
        ({"name": "ok", "source": "https://h/f", "sha256": "abc"}, "64 hexadecimal digits"),
        ({"name": "ok", "source": "s3://bucket/prefix"}, "an s3 source needs credentials"),
    ],
)
def test_bad_imports_fail_clearly_and_create_nothing(ctx, state, api, params, message):
    with pytest.raises(testing.ActionFailed, match=message):
        run_action(ctx, state, "import-dataset", **params)
    assert api.objects(JOBS) == []


def test_s3_credentials_reach_the_import_pod_and_nothing_else(ctx, state, api):
    content = {"access-key-id": "AKIAEXAMPLE", "secret-access-key": "very-secret-value"}
    secret = testing.Secret(content, owner=None)
    config = {"dataset-credentials": secret.id}
    with_creds = dataclasses.replace(state, secrets=[*state.secrets, secret], config=config)

    results, logs = run_action(
        ctx, with_creds, "import-dataset", name="imgs", source="s3://bucket/imgs/", timeout=0
    )

    stored = api.get_object(SECRET)
    assert set(stored["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    job = api.get_object(JOBS + "import-imgs")
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["envFrom"] == [
        {"secretRef": {"name": "tensorflow-dataset-credentials"}}
    ]
    everything = json.dumps(
        [results, logs, job, api.objects(f"/api/v1/namespaces/{NS}/configmaps/")]
    )
    assert "very-secret-value" not in everything and "AKIAEXAMPLE" not in everything
    for manifest in (job, api.get_object(f"/api/v1/namespaces/{NS}/configmaps/import-imgs")):
        sent = {k: v for k, v in manifest.items() if k != "status"}
        sent["metadata"] = {
            k: v for k, v in manifest["metadata"].items() if k in ("name", "namespace", "labels")
        }
        kubernetes_validate.validate(sent, KUBERNETES_VERSION, strict=True)

    # unset: the Secret goes
    out = ctx.run(ctx.on.config_changed(), with_creds)
    ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={}))
    assert api.get_object(SECRET) is None


def test_credentials_without_a_required_key_block_with_the_key_named(ctx, state, api):
    secret = testing.Secret({"access-key-id": "AKIAEXAMPLE"}, owner=None)
    out = ctx.run(
        ctx.on.config_changed(),
        dataclasses.replace(
            state, secrets=[*state.secrets, secret], config={"dataset-credentials": secret.id}
        ),
    )
    assert out.unit_status.name == "blocked"
    assert "missing: secret-access-key" in out.unit_status.message
    assert "AKIAEXAMPLE" not in out.unit_status.message


def test_train_reads_an_imported_dataset_and_refuses_an_unknown_one(
    ctx, state, api, web, volume, controller
):
    web.files["/mnist.npz"] = DATA
    source = f"{web.url}/mnist.npz"
    with pytest.raises(testing.ActionFailed, match="dataset 'mnist' has not been imported"):
        run_action(ctx, state, "train", job="j", workers=1, dataset="mnist")
    assert api.get_object(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/j") is None

    run_action(ctx, state, "import-dataset", name="mnist", source=source)
    controller.kubelet = None  # no TensorFlow here: the training pods only need to exist
    run_action(ctx, state, "train", job="j", workers=1, dataset="mnist", timeout=0)
    env = role_spec(jobset(api, "j"), "worker")["template"]["spec"]["containers"][0]["env"]
    assert {"name": "GPU_K8S_DATASET_DIR", "value": "/data/datasets/mnist"} in env


def test_an_import_pod_that_cannot_start_is_said_and_removed(ctx, state, api, controller):
    add_nodes(api, node("cpu-0"))
    content = {"access-key-id": "AKIAEXAMPLE", "secret-access-key": "very-secret-value"}
    secret = testing.Secret(content, owner=None)
    with_creds = dataclasses.replace(
        state, secrets=[*state.secrets, secret], config={"dataset-credentials": secret.id}
    )
    run_action(ctx, with_creds, "import-dataset", name="imgs", source="s3://b/imgs", timeout=0)
    api.delete_object(SECRET)  # gone before the pod starts (an operator unset it meanwhile)
    controller.tick()

    listed, _ = run_action(ctx, state, "list-datasets")
    assert listed["datasets"]["imgs"] == (
        'cannot start: CreateContainerConfigError: secret "tensorflow-dataset-credentials" '
        "not found"
    )
    with pytest.raises(testing.ActionFailed, match="the import pod of imgs cannot start"):
        run_action(ctx, with_creds, "import-dataset", name="imgs", source="s3://b/imgs")
    assert api.get_object(JOBS + "import-imgs") is None
