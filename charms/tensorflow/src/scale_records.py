# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The ConfigMap `<job>-scale`: a job's parameters while `scale` relaunches it (no ops).

A JobSet's replicated Jobs are immutable, so `scale` deletes the job's JobSet and makes
it again at the new size (training.scale). Meanwhile the JobSet, which holds the job's
request, is gone: the record holds it instead, with what is happening in its own words
(`ANNOTATION_STATE`, which `job-status` and `list-jobs` show) and, while a scale runs,
until when that scale holds it (`ANNOTATION_UNTIL`, a lease).

The lease is what makes a second scale of the same job wait: `scale` is `parallel: true`
and each unit runs its own actions, so two units can scale one job at once. The first
creates the record (a second create is refused 409 AlreadyExists) or takes over a record
whose scale failed or whose lease ran out with a JSON merge patch carrying the
resourceVersion it read (refused 409 Conflict when another took it meanwhile: the patched
object keeps that resourceVersion, and kube-apiserver's registry Store.Update refuses one
that is not the stored one, staging/src/k8s.io/apiserver/pkg/registry/generic/registry/
store.go, OptimisticLockErrorMsg; controller-runtime's MergeFromWithOptimisticLock relies
on the same). A scale whose action was killed holds the job only until its lease ends.

A record outlives its scale only where the scale failed: the job is then stopped and the
record is all there is of it (with its checkpoints on the shared volume) until the
operator scales it again (the record's words say how), trains it again or stops it. Once
a JobSet of the job exists again and no scale holds the record, the record is stale: the
leader's reconcile deletes it (training.at_a_glance).
"""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime, timezone
from typing import Any

from literals import (
    COMPONENT_SCALE,
    LABEL_COMPONENT,
    LABEL_JOB,
    LABEL_MANAGED_BY,
)
from params import TrainRequest

from charms.gpu_k8s.v0.kube_objects import pod_gpus

ANNOTATION_STATE = "gpu-k8s.io/scale-state"  # what is happening to the job, and what to do
ANNOTATION_UNTIL = "gpu-k8s.io/scale-until"  # while a scale runs: its lease's end (UTC)
# A scale holds its job for as long as it waits for the old pods, and this much more for
# the relaunch's few requests (a lease that ends early lets a second scale in)
MARGIN_SECONDS = 60
SCALING = "Scaling"  # job-status phase while a scale holds the job
STOPPED = "Stopped"  # once it failed: job_state.phase's word for a job without a JobSet


def name(job: str) -> str:
    """The record's name."""
    return f"{job}-scale"


def stamp(seconds: float) -> str:
    """A wall-clock time as RFC 3339 UTC, as Kubernetes writes times."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def seconds(text: str) -> float | None:
    """Seconds since the epoch of a time `stamp` writes (as Kubernetes does); None if not one."""
    try:
        parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError):
        return None
    return parsed.replace(tzinfo=timezone.utc).timestamp()


def manifest(
    request: TrainRequest, namespace: str, app: str, words: str, until: float | None
) -> dict:
    """The record of `request` (the job at its new size) saying `words`, leased to `until`.

    Owned by nothing, so that it outlives the old JobSet. Labelled as the job's (`stop`
    deletes it with the job's other objects) and as component `scale` (one list finds
    every record).
    """
    annotations = {**request.annotations(), ANNOTATION_STATE: words}
    if until is not None:
        annotations[ANNOTATION_UNTIL] = stamp(until)
    labels = {LABEL_MANAGED_BY: app, LABEL_JOB: request.job, LABEL_COMPONENT: COMPONENT_SCALE}
    meta = {
        "name": name(request.job),
        "namespace": namespace,
        "labels": labels,
        "annotations": annotations,
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


@dataclasses.dataclass(frozen=True)
class Record:
    """A record as read back: its request, its words, its lease and its version."""

    request: TrainRequest
    words: str
    until: float | None
    resource_version: str

    @classmethod
    def of(cls, obj: dict) -> Record:
        """Read a record (ValueError: its request is unreadable)."""
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        request = TrainRequest.from_annotations(annotations)
        until = annotations.get(ANNOTATION_UNTIL)
        return cls(
            request=request,
            words=annotations.get(ANNOTATION_STATE, ""),
            until=seconds(until) if until else None,
            resource_version=str(meta.get("resourceVersion", "")),
        )

    def held(self, now: float) -> bool:
        """Whether a scale holds the job now (its lease has not ended)."""
        return self.until is not None and now < self.until

    def state(self, now: float) -> tuple[str, str]:
        """(phase, what is happening and what to do), as job-status and list-jobs say it."""
        if self.held(now):
            return SCALING, self.words
        if self.until is not None:  # the scale's action ended without saying how
            return STOPPED, ended(self.request.job, self.request.workers, self.until)
        return STOPPED, self.words or kept(self.request.job, self.request.workers)


def _again(job: str, workers: int) -> str:
    return (
        f"run scale job={job} workers={workers} again (it relaunches the job from its last "
        "checkpoint)"
    )


def under_way(workers: int, since: float, until: float) -> str:
    """A running scale's words."""
    return (
        f"being scaled to {workers} workers since {stamp(since)}: its old pods stop, saving a "
        f"checkpoint, then it is relaunched from it; if it has not finished by {stamp(until)}, "
        f"run scale again"
    )


def refused_while_held(job: str, record: Record) -> str:
    """Why a second scale (or a train) of a job that a scale holds is refused."""
    until = stamp(record.until) if record.until is not None else "?"
    return (
        f"job {job!r} is being scaled by another scale action (to {record.request.workers} "
        f"workers, until {until} at most): job-status job={job} shows it; run scale again "
        "once it has finished"
    )


def old_pods_left(job: str, workers: int, at: float, wait: float) -> str:
    """The words of a scale whose old pods outlived its wait."""
    return (
        f"stopped at {stamp(at)} by a scale to {workers} workers: its old pods were still "
        f"terminating after {wait:.0f} s; run scale job={job} workers={workers} again in a "
        "minute (it waits for them, then relaunches the job from its last checkpoint)"
    )


def not_restored(job: str, workers: int, at: float, refusal: str) -> str:
    """The words of a scale whose new size and old size were both refused."""
    return (
        f"stopped at {stamp(at)} by a scale to {workers} workers: {refusal}, and it could not "
        f"be restored either; once that is fixed, {_again(job, workers)}"
    )


def half_way(job: str, workers: int, at: float, error: str) -> str:
    """The words of a scale that ended on an error it did not expect."""
    return (
        f"stopped at {stamp(at)} by a scale to {workers} workers that ended half-way "
        f"({error}); {_again(job, workers)}"
    )


def ended(job: str, workers: int, until: float) -> str:
    """The words of a record whose scale's lease ended (its action was killed or cancelled)."""
    return (
        f"stopped by a scale to {workers} workers that did not finish by {stamp(until)} (its "
        f"action ended or was cancelled); {_again(job, workers)}"
    )


def kept(job: str, workers: int) -> str:
    """The words of a record that says nothing (written by an earlier revision)."""
    return f"stopped by a scale to {workers} workers; {_again(job, workers)}"


def summary(record: Record, now: float, pods: list[dict[str, Any]]) -> dict:
    """`job-status` of a job that only its record holds; `pods`: its training pods left."""
    phase, words = record.state(now)
    request = record.request
    pods = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    gpus = sum(pod_gpus(p) for p in pods)
    return {
        "job": request.job,
        "phase": phase,
        "scale": words,
        "strategy": request.strategy,
        "priority": request.priority,
        "workers": str(request.workers),
        "old-pods": f"{len(pods)} still terminating" if pods else "gone",
        "gpus-held": str(gpus),
        "data": f"kept on the shared volume in jobs/{request.job}",
    }


def one_line(record: Record, now: float) -> str:
    """`list-jobs`' line of a job that only its record holds."""
    phase, words = record.state(now)
    return f"{phase}: {words}"
