"""The fake API server validates JobSet and Kueue objects against their real CRDs.

The CRDs are JobSet v0.12.0's and Kueue v0.19.2's (tests/fixtures/crds/, `fakes.crds`), which
`install_kueue` puts in as the control plane leaves them. What the server does with a
custom resource is apiextensions-apiserver's (kube_admission.py): undeclared fields are
pruned, warned about, or refused under `fieldValidation=Strict` (400 `strict decoding
error`); a wrong type, a value outside an enum or a missing required field is 422 Invalid
with the field's path. Kubernetes docs, "Specifying a structural schema" and "Field
pruning" (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
custom-resource-definitions/#specifying-a-structural-schema).
"""

from __future__ import annotations

import manifests
import params
import pytest
from conftest import CTX, JOBSETS, send, unknown_fields

from fakes import crds
from fakes.kube_apiserver import ApiError


def _jobset() -> dict:
    return manifests.jobset(params.TrainRequest(job="mnist", workers=2, gpus_per_worker=1), CTX)


def _post(api, path: str, obj: dict, query: str = "") -> tuple[int, dict]:
    return send(api, "POST", f"{path}{query}", obj)


def test_the_charms_jobset_is_accepted_as_written(api):
    code, stored = _post(api, JOBSETS.rstrip("/"), _jobset(), "?fieldValidation=Strict")
    assert code == 201, stored
    assert stored["spec"]["failurePolicy"] == _jobset()["spec"]["failurePolicy"]


def test_a_misspelled_jobset_field_is_refused_under_strict_and_pruned_otherwise(api):
    js = _jobset()
    js["spec"]["failurePolicy"]["maxRestart"] = 3  # maxRestarts
    code, status = _post(api, JOBSETS.rstrip("/"), js, "?fieldValidation=Strict")
    assert code == 400
    assert status["reason"] == "BadRequest"
    assert status["message"] == (
        'JobSet in version "v1alpha2" cannot be handled as a JobSet: strict decoding error: '
        'unknown field "spec.failurePolicy.maxRestart"'
    )
    # the Python client sends no fieldValidation: Warn, the field dropped (pruning.go)
    code, stored = _post(api, JOBSETS.rstrip("/"), js)
    assert code == 201
    assert "maxRestart" not in stored["spec"]["failurePolicy"]
    assert [w[2] for w in unknown_fields(api)] == ['unknown field "spec.failurePolicy.maxRestart"']
    api.warnings.clear()  # written on purpose (the fixture refuses any other)


def test_a_wrong_jobset_enum_is_422_with_the_field_path(api):
    js = _jobset()
    js["spec"]["failurePolicy"]["restartStrategy"] = "Sometimes"
    code, status = _post(api, JOBSETS.rstrip("/"), js)
    assert code == 422
    assert status["reason"] == "Invalid"
    # the CRD has CEL rules, which an enum error keeps from running (strategy.go
    # hasBlockingErr): kube-apiserver says so after the schema's errors
    assert status["message"] == (
        'JobSet.jobset.x-k8s.io "mnist" is invalid: [spec.failurePolicy.restartStrategy: '
        'Unsupported value: "Sometimes": supported values: "Recreate", "BlockingRecreate", '
        '"InPlaceRestart", <nil>: Invalid value: "null": some validation rules were not '
        "checked because the object was invalid; correct the existing errors to complete "
        "validation]"
    )
    assert status["details"]["causes"][0]["field"] == "spec.failurePolicy.restartStrategy"
    assert api.get_object(f"{JOBSETS}mnist") is None


def test_a_failure_rule_without_a_name_is_422(api):
    """The CRD requires `name` and `action` in each rule (the old hand-written schema not)."""
    js = _jobset()
    js["spec"]["failurePolicy"]["rules"][0].pop("name")
    code, status = _post(api, JOBSETS.rstrip("/"), js)
    assert code == 422
    assert "spec.failurePolicy.rules[0].name: Required value" in status["message"]


def test_a_wrong_type_in_a_kueue_object_is_422(api):
    from charm_modules import load  # the control plane writes a team's ClusterQueue

    kueue = load("kubernetes-control-plane", "kueue")
    cq = kueue.team_queue(kueue.Team("other"), [])  # (the fixture's team-<NS> exists)
    cq["spec"]["queueingStrategy"] = "Fastest"
    code, status = _post(api, "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", cq)
    assert code == 422
    assert 'spec.queueingStrategy: Unsupported value: "Fastest"' in status["message"]


def test_validate_refuses_as_the_server_does_without_one():
    crds.validate(_jobset())
    js = _jobset()
    js["spec"]["replicatedJobs"][0]["replicas"] = "two"
    with pytest.raises(ApiError, match="replicas in body must be of type integer"):
        crds.validate(js)
    js = _jobset()
    js["spec"]["sucessPolicy"] = {"operator": "All"}
    with pytest.raises(ApiError, match='unknown field "spec.sucessPolicy"'):
        crds.validate(js)
