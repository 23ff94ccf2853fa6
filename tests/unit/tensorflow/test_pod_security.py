"""Pod Security `restricted` in the team's namespace (issue 29 item 3, review S7).

The namespace carries the control plane's labels (enforce, warn and audit `restricted`,
pinned to v1.36), and the fake API server's PodSecurity admission refuses what
kube-apiserver 1.36's refuses, with its message (fakes/kube_admission.py). Every other
test of this suite runs its pods under that label (conftest `controller` checks that
none was refused); these show that the label bites, and that `run-as` root is refused
before anything is created.
"""

from __future__ import annotations

import copy
import dataclasses

import manifests
import pytest
import queues
from conftest import NS, TOKEN, add_nodes, job_objects, jobset, node, run_action
from ops import testing
from params import TrainRequest

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

CTX = manifests.Context(
    namespace=NS,
    app="tensorflow",
    claim="claim",
    default_image="tensorflow/tensorflow:2.21.0",
    tensorboard_image="tensorflow/tensorflow:2.20.0",
)


def _pod(spec: dict, name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "probe"}},
        "spec": spec,
    }


def _worker_spec() -> dict:
    req = TrainRequest(job="probe", workers=1)
    return manifests.replicated_job(req, CTX, "worker")["template"]["spec"]["template"]["spec"]


def _without(spec: dict, where: str) -> dict:
    """`spec` with one field restricted requires taken out."""
    spec = copy.deepcopy(spec)
    container = spec["containers"][0]
    if where == "allowPrivilegeEscalation":
        del container["securityContext"]["allowPrivilegeEscalation"]
    elif where == "capabilities":
        del container["securityContext"]["capabilities"]
    elif where == "runAsNonRoot":
        del spec["securityContext"]["runAsNonRoot"]
    elif where == "seccompProfile":
        del spec["securityContext"]["seccompProfile"]
    return spec


# pod-security-admission policy/check_*.go at restricted:v1.36, as the fake words them.
REFUSALS = {
    "allowPrivilegeEscalation": 'allowPrivilegeEscalation != false (container "tensorflow" '
    "must set securityContext.allowPrivilegeEscalation=false)",
    "capabilities": 'unrestricted capabilities (container "tensorflow" must set '
    'securityContext.capabilities.drop=["ALL"])',
    "runAsNonRoot": 'runAsNonRoot != true (pod or container "tensorflow" must set '
    "securityContext.runAsNonRoot=true)",
    "seccompProfile": 'seccompProfile (pod or container "tensorflow" must set '
    'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
}


def _admin(api) -> Kube:
    """The cluster's admin (kubeadm's admin.conf).

    The tensorflow charm itself may not create pods (its grant), and even cluster-admin
    is subject to PodSecurity (no exempt users in our kubeadm setup).
    """
    return Kube.from_kubeconfig(api.kubeconfig())


def test_a_training_pod_as_the_charm_makes_it_is_admitted(api):
    kube = _admin(api)
    with kube:
        kube.create(_pod(_worker_spec(), "probe-ok"))
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/probe-ok") is not None
    assert [w for w in api.warnings if "PodSecurity" in w[2]] == []


@pytest.mark.parametrize("missing", sorted(REFUSALS))
def test_the_namespace_refuses_a_pod_missing_one_restricted_field(api, missing):
    """The label bites: such a pod is refused, whoever creates it."""
    kube = _admin(api)
    with kube, pytest.raises(KubeError) as refused:
        kube.create(_pod(_without(_worker_spec(), missing), "probe"))
    assert refused.value.status == 403
    assert refused.value.message == (
        'pods "probe" is forbidden: violates PodSecurity "restricted:v1.36": ' + REFUSALS[missing]
    )
    assert api.get_object(f"/api/v1/namespaces/{NS}/pods/probe") is None


def test_the_teams_identity_may_write_a_job_whose_pods_break_restricted_only_with_a_warning(
    api, controller
):
    """PodSecurity only warns on workload objects; their pods are refused (B8).

    Updated: the Job names the team's queue, which Kueue admits it from (a Job without one
    is now held by Kueue and never gets as far as a pod, tests/unit/tensorflow/
    test_kueue_jobs.py).
    """
    controller.expect_refusals = True
    add_nodes(api, node("cpu-0"))  # the cohort has quota for its requests
    (lq,) = queues.team_objects("tensorflow", NS)
    api.put_object(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/localqueues/training", lq)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "hostile",
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "training"},
        },
        "spec": {
            # what gpu-k8s-consumer-terminating-pods-bounded requires of every team's Job
            "podReplacementPolicy": "Failed",
            "template": {
                "metadata": {"labels": {"app": "hostile"}},
                "spec": {**_without(_worker_spec(), "capabilities"), "restartPolicy": "Never"},
            },
        },
    }
    with Kube.from_kubeconfig(api.kubeconfig(TOKEN)) as kube:
        kube.create(job)
    assert [w[2] for w in api.warnings if "PodSecurity" in w[2]] == [
        'would violate PodSecurity "restricted:v1.36": ' + REFUSALS["capabilities"]
    ]
    controller.tick()
    assert api.objects(f"/api/v1/namespaces/{NS}/pods/") == []
    assert controller.refused and "unrestricted capabilities" in controller.refused[0]


def test_a_job_whose_template_breaks_restricted_gets_no_pod_and_a_failed_create_event(
    ctx, state, api, controller
):
    """A controller's pod create is admitted too (fakes/batch.py B8)."""
    controller.expect_refusals = True
    add_nodes(api, node("cpu-0"))
    run_action(ctx, state, "train", job="mnist", workers=1, timeout=0)
    js = jobset(api, "mnist")
    worker = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    del worker["securityContext"]["seccompProfile"]
    api.put_object(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/mnist-bad", js)
    for _ in range(3):
        controller.tick()
    pods = api.objects(f"/api/v1/namespaces/{NS}/pods/")
    bad = [p for p in pods if p["metadata"]["name"].startswith("mnist-bad")]
    assert bad == []
    events = [
        e
        for e in api.objects(f"/api/v1/namespaces/{NS}/events/")
        if e["involvedObject"]["name"] == "mnist-bad-worker-0"
    ]
    assert events
    assert {e["reason"] for e in events} == {"FailedCreate"}
    assert events[0]["message"].startswith("Error creating: pods ")
    assert events[0]["message"].endswith(
        'is forbidden: violates PodSecurity "restricted:v1.36": seccompProfile (pod or '
        'container "tensorflow" must set securityContext.seccompProfile.type to '
        '"RuntimeDefault" or "Localhost")'
    )


def test_train_as_root_fails_before_anything_is_created(ctx, state, api):
    add_nodes(api, node("cpu-0"))
    state = dataclasses.replace(state, config={"run-as": "0:0"})
    with pytest.raises(testing.ActionFailed) as failed:
        run_action(ctx, state, "train", job="mnist", workers=1)
    assert failed.value.message == (
        "charm config is invalid: run-as: uid 0 (root) is refused: the namespace enforces "
        "Pod Security restricted; use a non-root uid:gid such as 1000:1000"
    )
    assert job_objects(api) == []
