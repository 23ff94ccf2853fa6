"""The fake API server evaluates the CRDs' x-kubernetes-validations as kube-apiserver does.

apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (Validator.validate,
validateExpressions) and pkg/registry/customresource/strategy.go (Validate,
ValidateUpdate, hasBlockingErr): each rule runs with `self` the value at its schema node
(the object defaulted as the server decodes it), a rule naming `oldSelf` only on an update
where the node has an old value; a false rule is `<path>: Invalid value: "<type>":
<message>` in the 422 Invalid Status, `<nil>` for the resource's root. The CRDs are the
pinned JobSet v0.12.0 and Kueue v0.19.2 ones (tests/fixtures/crds/README.md lists their
rules).
"""

from __future__ import annotations

import json

import manifests
import params
import pytest
from conftest import JOBSETS, NS, send

from fakes import crds
from fakes.kube_admission import Admission, rule_refusal
from fakes.kube_apiserver import ApiError

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
CTX = manifests.Context(
    namespace=NS,
    app="tensorflow",
    claim="efs-storage-tensorflow",
    default_image="tensorflow/tensorflow:2.21.0",
    tensorboard_image="tensorflow/tensorflow:2.21.0",
)


def _invalid(kind: str, name: str, field: str, detail: str, value: str = "object") -> dict:
    """The 422 Status of one failed rule (apierrors.NewInvalid)."""
    body = f'Invalid value: "{value}": {detail}'
    group = "jobset.x-k8s.io" if kind == "JobSet" else "kueue.x-k8s.io"
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{kind}.{group} "{name}" is invalid: {field}: {body}',
        "reason": "Invalid",
        "details": {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": body, "field": field}],
        },
        "code": 422,
    }


def _cluster_queue(name: str, **spec) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "cpu",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "4"},
                                {"name": "memory", "nominalQuota": "8Gi"},
                            ],
                        }
                    ],
                }
            ],
            **spec,
        },
    }


def test_a_cluster_queue_whose_flavor_misses_a_covered_resource_is_refused(api):
    cq = _cluster_queue("lopsided")
    del cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
    code, status = send(api, "POST", f"{KUEUE}/clusterqueues", cq)
    assert code == 422
    assert status == _invalid(
        "ClusterQueue",
        "lopsided",
        "spec.resourceGroups[0]",
        "flavors must have the same number of resources as the coveredResources",
    )


def test_the_rules_see_the_defaults_the_server_decodes_with(api):
    """The spec's preemption and flavorFungibility are defaulted ({}, then their fields').

    Without the defaults `self.reclaimWithinCohort` would be `no such key` on every queue.
    """
    ok = _cluster_queue("defaults", preemption={"withinClusterQueue": "LowerPriority"})
    assert send(api, "POST", f"{KUEUE}/clusterqueues", ok)[0] == 201
    bad = _cluster_queue(
        "borrows", preemption={"borrowWithinCohort": {"policy": "LowerPriority"}}
    )  # reclaimWithinCohort defaults to Never
    code, status = send(api, "POST", f"{KUEUE}/clusterqueues", bad)
    assert (code, status["message"]) == (
        422,
        'ClusterQueue.kueue.x-k8s.io "borrows" is invalid: spec.preemption: Invalid value: '
        '"object": reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never',
    )
    # whenCanBorrow defaults to MayStopSearch: a preference needs both set to TryNextFlavor
    pref = _cluster_queue("pref", flavorFungibility={"preference": "BorrowingOverPreemption"})
    code, status = send(api, "POST", f"{KUEUE}/clusterqueues", pref)
    assert code == 422
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "object": preference can only be set when both '
            "whenCanBorrow and whenCanPreempt are TryNextFlavor",
            "field": "spec.flavorFungibility",
        }
    ]


def test_a_schema_error_keeps_the_rules_from_running(api):
    """hasBlockingErr: an enum, type, required or size error stops CEL, with its own error."""
    cq = _cluster_queue("both", preemption={"withinClusterQueue": "Always"})
    del cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
    code, status = send(api, "POST", f"{KUEUE}/clusterqueues", cq)
    assert code == 422
    assert status["message"] == (
        'ClusterQueue.kueue.x-k8s.io "both" is invalid: [spec.preemption.withinClusterQueue: '
        'Unsupported value: "Always": supported values: "Never", "LowerPriority", '
        '"LowerOrNewerEqualPriority", <nil>: Invalid value: "null": some validation rules '
        "were not checked because the object was invalid; correct the existing errors to "
        "complete validation]"
    )


def _jobset() -> dict:
    return manifests.jobset(params.TrainRequest(job="mnist", workers=2, gpus_per_worker=1), CTX)


def test_a_jobset_that_breaks_a_rule_is_refused_and_the_charms_is_not(api):
    js = _jobset()
    js["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    js["spec"]["replicatedJobs"][-1]["dependsOn"] = [
        {"name": js["spec"]["replicatedJobs"][0]["name"], "status": "Ready"}
    ]
    code, status = send(api, "POST", JOBSETS.rstrip("/"), js)
    assert code == 422
    assert status == _invalid(
        "JobSet", "mnist", "spec", "StartupPolicy and DependsOn APIs are mutually exclusive"
    )
    assert send(api, "POST", JOBSETS.rstrip("/"), _jobset())[0] == 201


def test_a_transition_rule_runs_on_update_only(api):
    """`self == oldSelf`: create passes it (no old value), an update changing it is refused.

    JobSet's failurePolicy and a LocalQueue's clusterQueue.
    """
    code, stored = send(api, "POST", JOBSETS.rstrip("/"), _jobset())
    assert code == 201
    changed = json.loads(json.dumps(stored))
    changed["spec"]["failurePolicy"]["maxRestarts"] += 1
    code, status = send(api, "PUT", f"{JOBSETS}mnist", changed)
    assert code == 422
    assert status == _invalid("JobSet", "mnist", "spec.failurePolicy", "Value is immutable")
    stored["metadata"].setdefault("labels", {})["touched"] = "yes"  # the rule holds
    assert send(api, "PUT", f"{JOBSETS}mnist", stored)[0] == 200

    lq = {"metadata": {"name": "team"}, "spec": {"clusterQueue": "a"}}
    assert send(api, "POST", f"{KUEUE}/namespaces/{NS}/localqueues", lq)[0] == 201
    lq_now = api.get_object(f"{KUEUE}/namespaces/{NS}/localqueues/team")
    lq_now["spec"]["clusterQueue"] = "b"
    code, status = send(api, "PUT", f"{KUEUE}/namespaces/{NS}/localqueues/team", lq_now)
    assert (code, status["message"]) == (
        422,
        'LocalQueue.kueue.x-k8s.io "team" is invalid: spec.clusterQueue: Invalid value: '
        '"string": field is immutable',
    )


def _workload(api) -> dict:
    wl = {
        "metadata": {"name": "wl"},
        "spec": {
            "queueName": "team",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                }
            ],
        },
    }
    code, stored = send(api, "POST", f"{KUEUE}/namespaces/{NS}/workloads", wl)
    assert code == 201, stored
    return stored


def test_a_workload_status_that_breaks_a_rule_is_refused(api):
    wl = _workload(api)
    path = f"{KUEUE}/namespaces/{NS}/workloads/wl/status"
    wl["status"] = {"clusterName": "east", "nominatedClusterNames": ["west"]}
    code, status = send(api, "PUT", path, wl)
    assert code == 422
    assert status["message"] == (
        'Workload.kueue.x-k8s.io "wl" is invalid: status: Invalid value: "object": '
        "clusterName and nominatedClusterNames are mutually exclusive"
    )
    # a rule at the resource's root: its path is the nil field.Path's "<nil>"
    wl["status"] = {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "reserved",
                "lastTransitionTime": "2026-11-27T00:00:00Z",
            }
        ],
        "admission": {"clusterQueue": "team", "podSetAssignments": []},
    }
    code, status = send(api, "PUT", path, wl)
    assert code == 422, status
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "object": podSetAssignments must have the same number '
            "of podSets as the spec",
            "field": "<nil>",
        }
    ]


def test_an_unchanged_value_keeps_its_old_errors(api):
    """A failing rule without oldSelf on a value the update leaves as it was is no error.

    CRDValidationRatcheting (GA), validation.go shouldRatchetError.
    """
    cq = _cluster_queue("old")
    del cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
    # stored before the rule was there: seeded under the CRD without it, which the pinned
    # one then replaces (put_object validates a seed as a create under the CRD it finds)
    name = "clusterqueues.kueue.x-k8s.io"
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    older = crds.crd(name)
    for version in older["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        del schema["properties"]["resourceGroups"]["items"]["x-kubernetes-validations"]
    api.put_shared(path, older)
    api.put_object(f"{KUEUE}/clusterqueues/old", cq)
    api.put_shared(path, crds.shared(name))
    stored = api.get_object(f"{KUEUE}/clusterqueues/old")
    stored["spec"]["stopPolicy"] = "Hold"
    assert send(api, "PUT", f"{KUEUE}/clusterqueues/old", stored)[0] == 200
    stored = api.get_object(f"{KUEUE}/clusterqueues/old")
    stored["spec"]["resourceGroups"][0]["coveredResources"].append("pods")
    code, status = send(api, "PUT", f"{KUEUE}/clusterqueues/old", stored)
    assert code == 422
    assert "flavors must have the same number of resources" in status["message"]


def test_every_rule_of_the_pinned_crds_is_evaluated():
    """No rule of the pinned CRDs uses what the fake's CEL refuses (README lists them)."""
    refused = [
        (name, rule["rule"], rule_refusal(rule))
        for name in (crds.JOBSET, *crds.KUEUE)
        for version in crds.shared(name)["spec"]["versions"]
        for rule in _rules(version["schema"]["openAPIV3Schema"])
        if rule_refusal(rule)
    ]
    assert refused == []


def _rules(raw: dict) -> list[dict]:
    found = list(raw.get("x-kubernetes-validations") or [])
    for sub in (raw.get("properties") or {}).values():
        found += _rules(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(raw.get(key), dict):
            found += _rules(raw[key])
    return found


def test_a_rule_the_fake_cannot_evaluate_refuses_the_write():
    """A rule using a Kubernetes CEL library the fake lacks refuses the write, saying so.

    Here quantity's isQuantity: never passed, never a plain evaluation error.
    """
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"size": {"type": "string"}},
                "x-kubernetes-validations": [
                    {"rule": "isQuantity(self.size)", "message": "size must be a quantity"}
                ],
            }
        },
    }
    crd = {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}}
    obj = {"apiVersion": "example.io/v1", "kind": "Widget", "spec": {"size": "1Gi"}}
    with pytest.raises(ApiError) as refused:
        Admission.validate("example.io/v1", "Widget", obj, "w", crd)
    assert refused.value.code == 422
    assert refused.value.message.startswith(
        'Widget.example.io "w" is invalid: spec: Invalid value: "object": the fake API server '
        "cannot evaluate the rule 'isQuantity(self.size)': the fake's CEL does not model the "
        "function isQuantity()"
    )
