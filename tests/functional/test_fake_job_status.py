"""The fake API server checks Job status writes as kube-apiserver 1.36; /status only where it is.

Each rule of tests/fakes/kube_admission.py's Job status section (pkg/apis/batch/validation/
validation.go validateJobStatus and ValidateJobStatusUpdate, with pkg/registry/batch/job/
strategy.go getStatusValidationOptions' JobManagedBy options) is refused here with the real
message, through the real `kubernetes` client (`Kube`) as the Job controller writes: a merge
patch of jobs/status. Each write that breaks one rule is a valid finished (or running) status
with that one thing wrong, so the answer names one error.
"""

from __future__ import annotations

from typing import Any

import pytest

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes.addons import crd
from fakes.kube_apiserver import FakeKubeApiServer

START, END = "2026-11-27T10:00:00Z", "2026-11-27T10:05:00Z"
END_SHOWN = "2026-11-27 10:05:00 +0000 UTC"  # metav1.Time's String(), as ErrorBody prints it


def cond(kind: str, status: str = "True", reason: str = "R") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": "m"}


SUCCEEDED = [cond("SuccessCriteriaMet"), cond("Complete")]
FAILED = [cond("FailureTarget"), cond("Failed")]


@pytest.fixture
def ns(kube: Kube, kube_api: FakeKubeApiServer) -> Kube:
    """`kube`, the namespace `work` stored."""
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    return kube


@pytest.fixture
def work(ns: Kube) -> Kube:
    """`ns`, with a running Job `j` (startTime set) in `work`."""
    ns.create(job())
    write(ns, {"startTime": START, "active": 1})
    return ns


def job(name: str = "j", **spec: Any) -> dict:
    """A Job the server accepts (manual selector `app: <name>`), `spec` fields added."""
    template = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
    meta = {"name": name, "namespace": "work"}
    selector, labels = {"matchLabels": {"app": name}}, {"app": name}
    body = {"selector": selector, "manualSelector": True, **spec}
    body["template"] = {"metadata": {"labels": labels}, "spec": template}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": body}


def write(kube: Kube, status: dict, name: str = "j") -> dict:
    """The Job controller's write: a patch of jobs/status."""
    return kube.patch("batch/v1", "Job", name, {"status": status}, "work", subresource="status")


def refused(kube: Kube, status: dict, name: str = "j") -> str:
    """The message of the 422 that refuses `status`."""
    with pytest.raises(KubeError) as info:
        write(kube, status, name)
    assert (info.value.status, info.value.reason) == (422, "Invalid"), info.value.message
    return info.value.message


def invalid(*errors: str, name: str = "j") -> str:
    shown = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'Job.batch "{name}" is invalid: {shown}'


def test_what_the_job_controller_writes_is_accepted(work: Kube):
    """Interim condition, pods gone, then the terminal one with completionTime."""
    write(work, {"active": 0, "succeeded": 1, "conditions": [SUCCEEDED[0]]})
    done = write(work, {"completionTime": END, "conditions": SUCCEEDED})
    assert done["status"]["completionTime"] == END


def test_complete_needs_completion_time(work: Kube):
    assert refused(work, {"active": 0, "conditions": SUCCEEDED}) == invalid(
        "status.completionTime: Required value: completionTime is required for Complete jobs"
    )


def test_completion_time_only_with_complete(work: Kube):
    assert refused(work, {"completionTime": END}) == invalid(
        f"status.completionTime: Invalid value: {END_SHOWN}: cannot set completionTime when "
        "there is no Complete=True condition"
    )


def test_a_finished_job_needs_start_time(ns: Kube):
    ns.create(job())
    assert refused(ns, {"conditions": FAILED}) == invalid(
        "status.startTime: Required value: startTime is required for finished job"
    )


def test_complete_needs_success_criteria_met_first(work: Kube):
    status = {"active": 0, "completionTime": END, "conditions": [cond("Complete")]}
    assert refused(work, status) == invalid(
        "status.conditions: Invalid value: cannot set Complete=True condition without the "
        "SuccessCriteriaMet=true condition"
    )


def test_failed_needs_failure_target_first(work: Kube):
    assert refused(work, {"active": 0, "conditions": [cond("Failed")]}) == invalid(
        "status.conditions: Invalid value: cannot set Failed=True condition without the "
        "FailureTarget=true condition"
    )


def test_a_finished_job_has_no_active_pods(work: Kube):
    assert refused(work, {"conditions": FAILED}) == invalid(
        "status.active: Invalid value: 1: active>0 is invalid for finished job"
    )


def test_complete_and_failed_together_are_refused(work: Kube):
    status = {"active": 0, "completionTime": END, "conditions": SUCCEEDED + FAILED}
    assert refused(work, status) == invalid(
        "status.conditions: Invalid value: cannot set Complete=True and Failed=true conditions",
        "status.conditions: Invalid value: cannot set Complete=True and FailureTarget=true "
        "conditions",
        "status.conditions: Invalid value: cannot set SuccessCriteriaMet=True and Failed=true "
        "conditions",
        "status.conditions: Invalid value: cannot set SuccessCriteriaMet=True and "
        "FailureTarget=true conditions",
    )


def test_terminal_conditions_cannot_be_removed_or_flipped(work: Kube):
    write(work, {"active": 0, "failed": 2, "conditions": FAILED})
    flipped = [cond("FailureTarget"), cond("Failed", "False")]
    assert refused(work, {"conditions": flipped}) == invalid(
        "status.conditions: Invalid value: cannot disable the terminal Failed=True condition"
    )
    assert refused(work, {"conditions": []}) == invalid(
        "status.conditions: Invalid value: cannot disable the terminal Failed=True condition",
        "status.conditions: Invalid value: cannot disable the terminal FailureTarget=True "
        "condition",
    )


def test_counters_never_decrease(work: Kube):
    write(work, {"failed": 2, "succeeded": 1})
    assert refused(work, {"failed": 1, "succeeded": 0}) == invalid(
        "status.failed: Invalid value: 1: cannot decrease the failed counter",
        "status.succeeded: Invalid value: 0: cannot decrease the succeeded counter",
    )


def test_completion_time_is_kept_once_set(work: Kube):
    write(work, {"active": 0, "completionTime": END, "conditions": SUCCEEDED})
    later = "2026-11-27T10:06:00Z"
    assert refused(work, {"completionTime": later}) == invalid(
        "status.completionTime: Invalid value: 2026-11-27 10:06:00 +0000 UTC: completionTime "
        "cannot be mutated"
    )


def test_start_time_of_an_unsuspended_job_is_kept(work: Kube):
    assert refused(work, {"startTime": "2026-11-27T10:01:00Z"}) == invalid(
        "status.startTime: Required value: startTime cannot be removed for unsuspended job"
    )


def test_completion_before_start_is_refused(work: Kube):
    status = {"active": 0, "completionTime": "2026-11-27T09:00:00Z", "conditions": SUCCEEDED}
    assert refused(work, status) == invalid(
        "status.completionTime: Invalid value: 2026-11-27 09:00:00 +0000 UTC: completionTime "
        "cannot be set before startTime"
    )


def test_no_more_ready_pods_than_active(work: Kube):
    assert refused(work, {"ready": 2}) == invalid(
        "status.ready: Invalid value: 2: cannot set more ready pods than active"
    )


def test_success_criteria_met_cannot_be_removed(work: Kube):
    write(work, {"conditions": [SUCCEEDED[0]]})
    assert refused(work, {"conditions": []}) == invalid(
        "status.conditions: Invalid value: cannot disable the SuccessCriteriaMet=True condition"
    )


def test_completed_indexes_only_for_an_indexed_job(work: Kube):
    assert refused(work, {"completedIndexes": "0"}) == invalid(
        'status.completedIndexes: Invalid value: "0": cannot set non-empty completedIndexes '
        "when non-indexed completion mode"
    )


def test_indexes_are_parsed_as_upstream(kube: Kube, ns: Kube):
    indexed = {"completionMode": "Indexed", "completions": 4, "parallelism": 4}
    kube.create(job("ix", backoffLimitPerIndex=1, **indexed))
    assert refused(kube, {"completedIndexes": "0,4"}, "ix") == invalid(
        'status.completedIndexes: Invalid value: "0,4": error parsing completedIndexes: too '
        'large index: "4"',
        name="ix",
    )
    write(kube, {"completedIndexes": "0-2"}, "ix")
    assert refused(kube, {"failedIndexes": "2,3"}, "ix") == invalid(
        'status.failedIndexes: Invalid value: "2,3": failedIndexes and completedIndexes '
        "overlap at index: 2",
        name="ix",
    )


def test_a_rule_is_checked_only_when_its_fields_change(work: Kube, kube_api: FakeKubeApiServer):
    """A status already wrong (stored as is) does not block an unrelated write."""
    path = "/apis/batch/v1/namespaces/work/jobs/j"
    stored = work.get("batch/v1", "Job", "j", "work") or {}
    stored["status"] = {"startTime": START, "conditions": [cond("Complete")]}  # no completionTime
    kube_api.put_object(path, stored)
    assert write(work, {"failed": 1})["status"]["failed"] == 1


# -- /status only where the kind has that subresource


def test_status_of_a_kind_without_it_is_not_found(work: Kube):
    work.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "work"}}
    )
    for method in ("GET", "PUT", "PATCH"):
        with pytest.raises(KubeError) as info:
            work.request(
                method,
                "/api/v1/namespaces/work/configmaps/c/status",
                body=None if method == "GET" else {"data": {}},
                content_type="application/merge-patch+json"
                if method == "PATCH"
                else "application/json",
            )
        assert (info.value.status, info.value.reason, info.value.message) == (
            404,
            "NotFound",
            "the server could not find the requested resource",
        )


def widgets(status: bool) -> dict:
    """The CRD of example.io/v1 Widgets, with or without the status subresource."""
    made = crd("example.io", "Widget", "widgets", "Namespaced", ["v1"])
    if not status:
        del made["spec"]["versions"][0]["subresources"]
    return made


def test_status_of_a_custom_resource_without_the_subresource_is_not_found(work: Kube):
    work.create(widgets(status=False))
    widget = {"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}}
    work.request("POST", "/apis/example.io/v1/namespaces/work/widgets", body=widget)
    path = "/apis/example.io/v1/namespaces/work/widgets/w/status"
    patch = {"body": {"status": {}}, "content_type": "application/merge-patch+json"}
    with pytest.raises(KubeError) as info:
        work.request("PATCH", path, **patch)
    assert (info.value.status, info.value.reason, info.value.message) == (
        404,
        "NotFound",
        'widgets.example.io "w" not found',
    )
    work.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.io")
    work.create(widgets(status=True))
    work.request("POST", "/apis/example.io/v1/namespaces/work/widgets", body=widget)
    assert work.request("PATCH", path, **patch)["status"] == {}


def test_policies_and_crds_keep_their_status_on_update(work: Kube, kube_api: FakeKubeApiServer):
    """Each has a status subresource: a write of the object keeps the stored status."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "validations": [{"expression": "true"}],
        },
    }
    path = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/p"
    created = work.create(policy)
    checked = {"observedGeneration": 1, "typeChecking": {}}
    kube_api.put_object(path, {**created, "status": checked})
    stored = work.get("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "p") or {}
    assert work.replace({**stored, "status": {}})["status"] == checked
    assert work.request("GET", path + "/status")["status"] == checked
    work.create(widgets(status=False))
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.io"
    assert work.request("GET", path + "/status")["metadata"]["name"] == "widgets.example.io"
