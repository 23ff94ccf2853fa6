"""config image-pull-secret: a Juju secret becomes the pods' image pull Secret, and only that."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
from conftest import NS, add_nodes, job_objects, jobset, node, run_action
from ops import testing

SECRETS = f"/api/v1/namespaces/{NS}/secrets/"
PASSWORD = "s3cr3t-pa55"  # noqa: S105 - a test value, looked for where it must not be
LOGIN = {"registry": "registry.example.com:5000", "username": "robot", "password": PASSWORD}


def _with_secret(state: testing.State, content: dict[str, str]) -> tuple[testing.State, str]:
    secret = testing.Secret(content, owner=None)
    config = {**state.config, "image-pull-secret": secret.id}
    return dataclasses.replace(state, config=config, secrets=[*state.secrets, secret]), secret.id


def _docker_config(api) -> dict:
    stored = api.get_object(f"{SECRETS}tensorflow-image-pull")
    assert stored["type"] == "kubernetes.io/dockerconfigjson"
    return json.loads(base64.b64decode(stored["data"][".dockerconfigjson"]))


def test_the_secret_is_written_and_the_purge_job_names_it(ctx, state, api):
    add_nodes(api, node("node-a", 2))
    state, _ = _with_secret(state, LOGIN)

    out = ctx.run(ctx.on.config_changed(), state)

    auth = base64.b64encode(f"robot:{PASSWORD}".encode()).decode()
    assert _docker_config(api) == {
        "auths": {
            "registry.example.com:5000": {"username": "robot", "password": PASSWORD, "auth": auth}
        }
    }
    assert out.unit_status.name == "active"
    run_action(ctx, state, "train", job="private", workers=1)
    run_action(ctx, state, "stop", job="private", purge=True)
    purge = api.get_object(f"/apis/batch/v1/namespaces/{NS}/jobs/private-purge")
    assert purge["spec"]["template"]["spec"]["imagePullSecrets"] == [
        {"name": "tensorflow-image-pull"}
    ]


def test_train_names_it_in_the_jobset_and_tensorboard(ctx, state, api):
    add_nodes(api, node("node-a", 2))
    state, _ = _with_secret(state, LOGIN)

    run_action(ctx, state, "train", job="private", workers=1)

    worker = jobset(api, "private")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    board = api.get_object(f"/apis/apps/v1/namespaces/{NS}/deployments/private-tensorboard")
    for spec in (worker["spec"], board["spec"]["template"]["spec"]):
        assert spec["imagePullSecrets"] == [{"name": "tensorflow-image-pull"}]


def test_the_password_appears_nowhere_but_the_kubernetes_secret(ctx, state, api, caplog):
    add_nodes(api, node("node-a", 2))
    state, _ = _with_secret(state, LOGIN)

    out = ctx.run(ctx.on.config_changed(), state)
    results, logs = run_action(ctx, state, "train", job="private", workers=1)

    seen = [out.unit_status.message, json.dumps(results), *logs, caplog.text]
    seen += [json.dumps(dict(r.local_app_data)) for r in out.relations]
    assert not [text for text in seen if PASSWORD in text]
    # the job's objects (JobSet, ConfigMap, TensorBoard, pods) carry only the Secret's name
    assert not [o for o in job_objects(api) if PASSWORD in json.dumps(o)]
    assert "tensorflow-image-pull" in json.dumps(jobset(api, "private"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"registry": "r.example.com", "username": "u"}, "has no password"),
        ({"username": "u", "password": "p"}, "has no registry"),
        ({**LOGIN, "registry": "https://r.example.com/a b"}, "registry must be host"),
    ],
)
def test_an_incomplete_secret_blocks_and_train_refuses_without_making_pods(
    ctx, state, api, content, message
):
    add_nodes(api, node("node-a", 2))
    state, _ = _with_secret(state, content)

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status.name == "blocked" and message in out.unit_status.message
    assert api.get_object(f"{SECRETS}tensorflow-image-pull") is None
    with pytest.raises(testing.ActionFailed, match=message):
        run_action(ctx, state, "train", job="private", workers=1)
    assert (
        api.get_object(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/private") is None
    )


def test_a_secret_not_granted_blocks_with_the_grant_command(ctx, state, api):
    missing = "secret:0123456789abcdefghij"
    state = dataclasses.replace(state, config={"image-pull-secret": missing})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status == testing.BlockedStatus(
        f"cannot read the secret in config image-pull-secret ({missing}); grant it: "
        f"juju grant-secret {missing} tensorflow"
    )


def test_unsetting_it_deletes_the_kubernetes_secret_once(ctx, state, api):
    with_secret, _ = _with_secret(state, LOGIN)
    out = ctx.run(ctx.on.config_changed(), with_secret)
    assert api.get_object(f"{SECRETS}tensorflow-image-pull") is not None

    unset = dataclasses.replace(out, config={})
    out = ctx.run(ctx.on.config_changed(), unset)
    assert api.get_object(f"{SECRETS}tensorflow-image-pull") is None

    before = len(api.requests)
    ctx.run(ctx.on.update_status(), out)
    assert not [r for r in api.requests[before:] if r.path.startswith(SECRETS)]
