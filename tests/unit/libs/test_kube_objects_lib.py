"""What the charms read off Kubernetes objects: GPUs a pod holds, a Ready node, digests."""

from __future__ import annotations

import pytest

from charms.gpu_k8s.v0.kube_objects import fingerprint, node_ready, pod_gpus


def _container(name: str, gpus: int = 0, *, part: str = "limits", **extra) -> dict:
    resources = {part: {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"name": name, "resources": resources, **extra}


def _pod(containers=(), init=()) -> dict:
    return {"spec": {"containers": list(containers), "initContainers": list(init)}}


@pytest.mark.parametrize(
    ("pod", "gpus"),
    [
        (_pod([_container("a", 1), _container("b", 2)]), 3),  # app containers add up
        (_pod([_container("a", 1, part="requests")]), 1),  # a request alone counts too
        (_pod([_container("a", 1)], [_container("init", 4)]), 4),  # an init runs alone
        # a sidecar (restartPolicy Always) keeps running beside the app containers
        (_pod([_container("a", 1)], [_container("side", 1, restartPolicy="Always")]), 2),
        # an init container runs beside the sidecars started before it, not after it
        (
            _pod(
                [_container("a", 1)],
                [
                    _container("side", 2, restartPolicy="Always"),
                    _container("init", 3),
                    _container("late", 1, restartPolicy="Always"),
                ],
            ),
            5,
        ),
        ({"spec": {}}, 0),
        ({}, 0),
    ],
)
def test_a_pod_holds_its_effective_gpu_request_as_the_scheduler_counts_it(pod, gpus):
    """kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/ (resource sharing)."""
    assert pod_gpus(pod) == gpus


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ([{"type": "Ready", "status": "True"}], True),
        (
            [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "False"}],
            False,
        ),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([], False),
    ],
)
def test_a_node_is_ready_only_when_its_ready_condition_is_true(conditions, ready):
    assert node_ready({"status": {"conditions": conditions}}) is ready


def test_a_fingerprint_follows_the_content_not_the_key_order():
    a = fingerprint({"kind": "Namespace", "metadata": {"name": "x"}}, "https://10.0.0.1:6443")
    b = fingerprint({"metadata": {"name": "x"}, "kind": "Namespace"}, "https://10.0.0.1:6443")

    assert a == b and len(a) == 16
    assert (
        fingerprint({"kind": "Namespace", "metadata": {"name": "y"}}, "https://10.0.0.1:6443") != a
    )
    assert (
        fingerprint({"kind": "Namespace", "metadata": {"name": "x"}}, "https://10.0.0.2:6443") != a
    )
