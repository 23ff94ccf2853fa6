"""What the charms read off Kubernetes objects: GPUs a pod holds, a Ready node, digests.

And a job's record of its moves off quarantined GPU nodes (issue 32 item 2).
"""

from __future__ import annotations

import json

import pytest

from charms.gpu_k8s.v0.kube_objects import (
    MOVES_ANNOTATION,
    MOVES_KEPT,
    MOVES_MAX_BYTES,
    MOVES_MAX_COUNT,
    fingerprint,
    gpu_fault,
    moves_of,
    moves_patch,
    node_ready,
    pod_gpus,
)


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


def _annotated(text: str) -> dict:
    return {"metadata": {"annotations": {MOVES_ANNOTATION: text}}}


def _apply(obj: dict, patch: dict | None) -> dict:
    """A merge patch of annotations applied to `obj`, as kube-apiserver would."""
    assert patch is not None
    annotations = {**obj.get("metadata", {}).get("annotations", {})}
    annotations.update(patch["metadata"]["annotations"])
    return {"metadata": {"annotations": annotations}}


def test_a_quarantine_is_one_move_however_often_it_is_recorded():
    js: dict = {"metadata": {"name": "big"}}
    assert moves_of(js) == (0, [])
    js = _apply(js, moves_patch(js, "gpu-a", "Xid79", "2026-11-28T06:00:00Z", False))
    assert moves_patch(js, "gpu-a", "Xid79 again", "2026-11-28T06:00:00Z", False) is None
    # the node quarantined again later (a new first fault), and a split gang's move
    js = _apply(js, moves_patch(js, "gpu-a", "Xid48", "2026-11-29T06:00:00Z", False))
    js = _apply(js, moves_patch(js, "gpu-b", "Xid79", "2026-11-29T06:00:00Z", True))
    count, last = moves_of(js)
    assert count == 2  # the JobSet's own restart counts the split gang's move
    assert [(e["node"], e["at"], e["restarted"]) for e in last] == [
        ("gpu-a", "2026-11-28T06:00:00Z", False),
        ("gpu-a", "2026-11-29T06:00:00Z", False),
        ("gpu-b", "2026-11-29T06:00:00Z", True),
    ]


def test_the_record_keeps_the_newest_moves_and_counts_them_all():
    js: dict = {"metadata": {}}
    for day in range(10, 10 + MOVES_KEPT + 2):
        js = _apply(js, moves_patch(js, f"gpu-{day}", "r", f"2026-11-{day}T00:00:00Z", False))
    count, last = moves_of(js)
    assert count == MOVES_KEPT + 2
    assert [e["node"] for e in last] == [f"gpu-{d}" for d in range(12, 12 + MOVES_KEPT)]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"count": "9", "last": "gpu-a"}',
        '{"count": true, "last": [{"node": 1, "reason": "r", "at": "t"}]}',
        '{"count": -3, "last": [["gpu-a"]]}',
        '{"count": ' + "9" * 5000 + "}",  # past Python's int digits: ValueError
        json.dumps({"count": 1, "last": [], "pad": "x" * 9000}),  # longer than written
    ],
)
def test_a_record_its_team_mangled_reads_as_no_move(text):
    """A team may write its JobSet's annotations: what is unreadable counts nothing."""
    assert moves_of(_annotated(text)) == (0, [])


def test_a_forged_record_is_read_bounded_and_rewritten_small():
    """Overlong fields are cut and the leader's write holds at most MOVES_KEPT entries."""
    forged = {
        "count": 7,
        "last": [
            {"node": "n" * 999, "reason": "r" * 9999, "at": "t" * 99, "restarted": "yes"},
            {"node": "gpu-a"},  # no reason, no time: dropped
        ],
    }
    count, last = moves_of(_annotated(json.dumps(forged)[:8192]))
    assert count == 0  # the 8192 cut made it unreadable JSON
    count, last = moves_of(_annotated(json.dumps({**forged, "last": forged["last"][1:]})))
    assert (count, last) == (7, [])
    small = {**forged, "last": [{**forged["last"][0], "reason": "r" * 3000}]}
    count, last = moves_of(_annotated(json.dumps(small)))
    assert count == 7
    assert [(len(e["node"]), len(e["reason"]), len(e["at"]), e["restarted"]) for e in last] == [
        (253, 200, 40, False)
    ]
    js = _apply(
        _annotated(json.dumps(small)),
        moves_patch(_annotated(json.dumps(small)), "gpu-b", "x" * 500, "t", False),
    )
    assert len(js["metadata"]["annotations"][MOVES_ANNOTATION]) < 1000
    assert moves_of(js)[0] == 8


def test_a_gpu_fault_is_the_false_gpu_healthy_condition():
    fault = {"type": "GpuHealthy", "status": "False", "reason": "Xid79"}
    assert gpu_fault({"status": {"conditions": [{"type": "Ready", "status": "True"}, fault]}}) == (
        fault
    )
    assert gpu_fault({"status": {"conditions": [{**fault, "status": "True"}]}}) is None
    assert gpu_fault({"status": {}}) is None
    assert gpu_fault(None) is None


def test_a_forged_record_of_non_ascii_and_a_huge_count_is_rewritten_within_the_read_bound():
    """The leader's write reads back: printable ASCII only, `count` capped (rereview44b F6).

    json.dumps' default ensure_ascii writes an astral character as 12 characters: the
    leader once turned a 2 KB forged record into 13 KB, past its own read bound, and lost
    its entry and the once-per-quarantine dedupe with it.
    """
    forged = {
        "count": int("9" * 1000),
        "last": [
            {"node": "\U0001f600" * 253, "reason": "\U0001f600" * 200, "at": "\u00e9" * 40}
            for _ in range(2)
        ],
    }
    js = _annotated(json.dumps(forged, ensure_ascii=False))
    count, last = moves_of(js)
    assert count == MOVES_MAX_COUNT
    assert {e["node"] for e in last} == {"?" * 253}  # no team text reaches job-status raw
    js = _apply(js, moves_patch(js, "gpu-\u00e9", "Xid79\x1b[2J\n", "2026-11-28T06:00:00Z", False))
    text = js["metadata"]["annotations"][MOVES_ANNOTATION]
    assert text.isascii() and text.isprintable()
    count, last = moves_of(js)
    assert count == MOVES_MAX_COUNT
    assert last[-1] == {
        "node": "gpu-?",
        "reason": "Xid79?[2J?",
        "at": "2026-11-28T06:00:00Z",
        "restarted": False,
    }
    assert moves_patch(js, "gpu-\u00e9", "again", "2026-11-28T06:00:00Z", False) is None


def test_the_longest_record_the_leader_writes_reads_back():
    """Each field at its bound, of the characters JSON escapes, count at its cap."""
    full = {"node": '"' * 253, "reason": "\\" * 200, "at": '"' * 40, "restarted": False}
    js = _annotated(json.dumps({"count": MOVES_MAX_COUNT, "last": [full] * MOVES_KEPT}))
    assert moves_of(js) == (MOVES_MAX_COUNT, [full] * MOVES_KEPT)
    js = _apply(js, moves_patch(js, '"' * 300, "\\" * 300, "t" * 50, False))
    assert len(js["metadata"]["annotations"][MOVES_ANNOTATION].encode()) <= MOVES_MAX_BYTES
    count, last = moves_of(js)
    assert (count, len(last), last[-1]["at"]) == (MOVES_MAX_COUNT, MOVES_KEPT, "t" * 40)


def test_a_record_still_too_long_to_read_back_keeps_its_count_and_the_new_move(monkeypatch):
    """Should the bounds ever allow a write past the read bound, the old entries go."""
    import charms.gpu_k8s.v0.kube_objects as lib

    js = _annotated(json.dumps({"count": 4, "last": [{"node": "a", "reason": "r", "at": "t"}]}))
    monkeypatch.setattr(lib, "MOVES_MAX_BYTES", 120)
    js = _apply(js, moves_patch(js, "gpu-b", "Xid79", "2026-11-28T06:00:00Z", False))
    assert moves_of(js) == (
        5,
        [{"node": "gpu-b", "reason": "Xid79", "at": "2026-11-28T06:00:00Z", "restarted": False}],
    )


def test_a_moves_record_nested_past_the_parsers_depth_reads_as_none():
    """last44a H1: a record nested past json's depth reads as none.

    A team's annotation of 5,000 brackets (under MOVES_MAX_BYTES) raised RecursionError out
    of the leader's quarantine hook.
    """
    deep = {"metadata": {"annotations": {MOVES_ANNOTATION: "[" * 5000}}}
    assert moves_of(deep) == (0, [])
