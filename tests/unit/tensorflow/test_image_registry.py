"""The image-registry option: the charm's images from a mirror, explicit images as given."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import NS, add_nodes, job_objects, node, run_action
from ops import testing

MIRROR = "registry.example.com:5000/mirror"
JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs/"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments/"


def _with(state: testing.State, **config: str) -> testing.State:
    return dataclasses.replace(state, config={k.replace("_", "-"): v for k, v in config.items()})


def _image(obj: dict) -> str:
    return obj["spec"]["template"]["spec"]["containers"][0]["image"]


def _worker_image(api, job: str) -> str:
    worker = api.get_object(f"{JOBSETS}{job}")["spec"]["replicatedJobs"][0]["template"]
    return _image(worker)


def _tensorboard_image(api, job: str) -> str:
    return _image(api.get_object(f"{DEPLOYMENTS}{job}-tensorboard"))


@pytest.mark.parametrize(
    ("gpus", "training"),
    [
        (0, f"{MIRROR}/tensorflow/tensorflow:2.21.0"),
        (1, f"{MIRROR}/tensorflow/tensorflow:2.21.0-gpu"),
    ],
)
def test_registry_moves_the_training_and_tensorboard_images(ctx, state, api, gpus, training):
    add_nodes(api, node("node-a", 2))
    run_action(
        ctx, _with(state, image_registry=MIRROR), "train", workers=2, **{"gpus-per-worker": gpus}
    )
    assert _worker_image(api, "mnist") == training
    assert _tensorboard_image(api, "mnist") == f"{MIRROR}/tensorflow/tensorflow:2.20.0"


def test_registry_moves_the_purge_job_image(ctx, state, api):
    mirrored = _with(state, image_registry=MIRROR)
    run_action(ctx, mirrored, "train", job="mnist", workers=1)
    run_action(ctx, mirrored, "stop", job="mnist", purge=True)
    assert _image(api.get_object(f"{JOBS}mnist-purge")) == (
        f"{MIRROR}/tensorflow/tensorflow:2.21.0"
    )


def test_explicit_train_image_is_used_as_given(ctx, state, api):
    mirrored = _with(state, image_registry=MIRROR)
    add_nodes(api, node("node-a", 4))
    run_action(
        ctx,
        mirrored,
        "train",
        job="own",
        workers=1,
        image="example/tf:1",
        **{"gpus-per-worker": 1},
    )
    assert _worker_image(api, "own") == "example/tf:1"
    # the charm's own TensorBoard still comes from the mirror
    assert _tensorboard_image(api, "own") == f"{MIRROR}/tensorflow/tensorflow:2.20.0"

    # scale relaunches the stored request: the explicit image stays as given
    run_action(ctx, mirrored, "scale", job="own", workers=2)
    assert _worker_image(api, "own") == "example/tf:1"


@pytest.mark.parametrize(
    ("configured", "training"),
    [
        # already the mirrored name: not moved a second time, still gets -gpu
        (f"{MIRROR}/tensorflow/tensorflow:2.21.0", f"{MIRROR}/tensorflow/tensorflow:2.21.0-gpu"),
        # another upstream registry: moved below the mirror keeping its path
        ("nvcr.io/nvidia/tensorflow:25.02-tf2-py3", f"{MIRROR}/nvidia/tensorflow:25.02-tf2-py3"),
        ("docker.io/tensorflow/tensorflow:2.21.0", f"{MIRROR}/tensorflow/tensorflow:2.21.0-gpu"),
    ],
)
def test_configured_default_images_are_moved_once(ctx, state, api, configured, training):
    add_nodes(api, node("node-a", 2))
    config = _with(
        state,
        image_registry=MIRROR,
        default_image=configured,
        tensorboard_image=f"{MIRROR}/tensorflow/tensorflow:2.21.0",
    )
    run_action(ctx, config, "train", workers=1, **{"gpus-per-worker": 1})
    assert _worker_image(api, "mnist") == training
    assert _tensorboard_image(api, "mnist") == f"{MIRROR}/tensorflow/tensorflow:2.21.0"


def test_registry_trailing_slash_is_ignored(ctx, state, api):
    run_action(ctx, _with(state, image_registry=f"{MIRROR}/"), "train", workers=1)
    assert _worker_image(api, "mnist") == f"{MIRROR}/tensorflow/tensorflow:2.21.0"


def test_empty_registry_keeps_upstream_images(ctx, state, api):
    add_nodes(api, node("node-a", 2))
    run_action(ctx, _with(state, image_registry=""), "train", workers=2, **{"gpus-per-worker": 1})
    assert _worker_image(api, "mnist") == "tensorflow/tensorflow:2.21.0-gpu"
    assert _tensorboard_image(api, "mnist") == "tensorflow/tensorflow:2.20.0"


def test_status_names_the_image_pulled_from_the_mirror(ctx, state):
    out = ctx.run(ctx.on.update_status(), _with(state, image_registry=MIRROR))
    assert out.unit_status == testing.ActiveStatus(
        f"Ready: namespace {NS}, claim efs-storage-tensorflow, "
        f"image {MIRROR}/tensorflow/tensorflow:2.21.0"
    )


@pytest.mark.parametrize(
    ("registry", "message"),
    [
        ("https://x", "image-registry: 'https://x' is a URL; give the registry host"),
        ("bad host", "image-registry: 'bad host' is not a registry host[:port][/path]"),
        ("reg.example.com/UPPER", "is not a registry host[:port][/path]"),
    ],
)
def test_invalid_registry_blocks_and_creates_nothing(ctx, state, api, registry, message):
    bad = _with(state, image_registry=registry)
    out = ctx.run(ctx.on.config_changed(), bad)
    assert isinstance(out.unit_status, testing.BlockedStatus)
    assert message in out.unit_status.message
    assert out.unit_status.message.endswith("such as registry.example.com:5000/mirror")

    with pytest.raises(testing.ActionFailed, match="charm config is invalid: image-registry"):
        run_action(ctx, bad, "train", workers=1)
    assert job_objects(api) == []
    assert not [r for r in api.requests if r.method in ("POST", "PATCH", "PUT", "DELETE")]
