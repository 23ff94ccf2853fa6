# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""A consumer's own directory on EFS, owned by the user its pods run as.

Why not EFS access points
-------------------------
An access point would create the directory and force the owner, but a client only goes
through one when it mounts with the EFS mount helper over TLS (`mount -t efs -o
tls,accesspoint=fsap-...`; AWS EFS user guide, "Mounting with EFS access points"), which
needs `amazon-efs-utils` on every node or the EFS CSI driver. The PersistentVolumes here
are plain NFS v4.1 mounts by kubelet (`nfs-common` on the workers), so this charm makes the
directory itself and points the volume's `nfs.path` at it.

How
---
A one-off Job in this application's namespace mounts the file system's root over NFS
(as root: EFS's default file system policy lets any client that reaches a mount target
act as root, "no_root_squash"; EFS user guide, "Using IAM to control access to file
systems", "Default EFS file system policy") and runs `mkdir -p`, `chown uid:gid` and
`chmod 2775` on the directory alone, never on what is already inside it. Once the Job
succeeded the volume is applied with the directory and owner recorded on it
(`claims.ANNOTATION_OWNER`), and the Job is deleted; a volume that already records them needs no
Job, so a steady-state reconcile sends no request for it.

Job semantics relied on (kubernetes.io/docs/concepts/workloads/controllers/job/): a Job
is finished when a condition `Complete` or `Failed` has status "True"; its pods carry the
label `batch.kubernetes.io/job-name` (Kubernetes 1.27+); `terminationMessagePolicy:
FallbackToLogsOnError` puts the tail of a failed container's log in
`state.terminated.message` (kubernetes.io/docs/tasks/debug/debug-application/
determine-reason-pod-failure/).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any

from claims import LABEL_CONSUMER, ClaimSpec, Owner, Preparation, fit_name, owner_text
from literals import FIELD_MANAGER

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.system import poll_until

logger = logging.getLogger(__name__)

# Docker Hub's official busybox image (hub.docker.com/_/busybox), 1.37.0 released
# 2024-09-26; Docker keeps version tags of official images. Pinned 2026-11-23. Pulled from
# `image-registry` when that is set.
HELPER_IMAGE = "busybox:1.37.0"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
MOUNT = "/efs"
JOB_DEADLINE_SECONDS = 300
JOB_TTL_SECONDS = 86400  # Kubernetes removes a Job this charm could not delete itself
POLL_SECONDS = 2.0

# $1: where the file system's root is mounted, $2: the directory below it (components of
# [A-Za-z0-9._-] only, shared_storage.check_directory), $3: uid:gid. A path that crosses a
# symbolic link is refused: a consumer owning a parent could otherwise point another's
# directory anywhere, root included. Only the directory itself is chowned (-h: never a
# link's target); chmod after chown keeps the setgid bit (FSETID).
SCRIPT = (
    'set -eu; p="$1"; for c in $(echo "$2" | tr / \' \'); do p="$p/$c"; '
    'if [ -L "$p" ]; then echo "refusing: $p is a symbolic link" >&2; exit 1; fi; done; '
    'd="$1/$2"; mkdir -p "$d"; chown -h "$3" "$d"; chmod 2775 "$d"; ls -ldn "$d"'
)

# What the GPU workers are tainted with (kubernetes-worker nvidia.TAINT_KEY): a cluster of
# GPU nodes only can still run the Job.
_GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def upstream_images() -> tuple[str, ...]:
    """Every image this charm pulls, as upstream publishes it: the directory Job's helper.

    What a mirror must hold for `image-registry` (moved by `images.mirrored` in charm.py);
    the option's help text and docs/how-to/air-gapped.md are checked against it
    (tests/unit/docs/test_images.py).
    """
    return (HELPER_IMAGE,)


def _parts(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part)


def overlap(a: str, b: str) -> bool:
    """Whether two paths on the file system are the same, or one lies in the other.

    The root (`/`) overlaps every path: whoever is served it reaches every directory.
    """
    pa, pb = _parts(a), _parts(b)
    shorter = min(len(pa), len(pb))
    return pa[:shorter] == pb[:shorter]


@dataclasses.dataclass
class Holdings:
    """Who holds which path on the file system: consumer application -> path.

    Keyed on the consumer's identity (its Juju application name, which Juju gives the
    relation, never what the consumer writes): the first consumer served a path keeps it,
    and one asking later for that path, a path inside it or a path that contains it is
    refused, whatever the names sort like or the order the relations come in (review N2).
    The root (a consumer that asks for no directory) is a path like any other: it overlaps
    every directory, so it is served only while no other consumer holds one (review N3),
    unless the operator names that consumer in `root-consumers` (`exempt`).
    """

    held: dict[str, str]

    @classmethod
    def load(cls, text: str | None) -> Holdings | None:
        """The holdings recorded as JSON; None when none were ever recorded."""
        if not text:
            return None
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the recorded directory holdings are not a JSON object")
        return cls({str(k): str(v) for k, v in data.items()})

    def dump(self) -> str:
        """The holdings as the peer data records them (sorted: unchanged text, no write)."""
        return json.dumps(self.held, sort_keys=True, separators=(",", ":"))

    def holder(self, consumer: str, path: str) -> tuple[str, str] | None:
        """The other consumer holding a path that overlaps `path`, and that path."""
        for other, held in sorted(self.held.items()):
            if other != consumer and overlap(held, path):
                return other, held
        return None

    def claim(self, consumer: str, path: str) -> tuple[str, str] | None:
        """Record `path` for `consumer` unless another holds an overlapping one (returned)."""
        taken = self.holder(consumer, path)
        if taken is None:
            self.held[consumer] = path
        return taken

    def release(self, consumer: str) -> None:
        """Forget what `consumer` holds."""
        self.held.pop(consumer, None)

    def keep_only(self, consumers: set[str]) -> None:
        """Forget the holdings of consumers that are gone (no relation, no claim left)."""
        for consumer in set(self.held) - consumers:
            del self.held[consumer]


def job_name(app: str, spec: ClaimSpec) -> str:
    """A name per (consumer, file system, path, owner): a changed request is a new Job."""
    key = f"{spec.namespace}/{spec.consumer}:{spec.server}:{spec.path}:{spec.directory_owner}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return fit_name(f"{app}-dir-{spec.consumer}", 63 - 9) + f"-{digest}"


def job_manifest(owner: Owner, spec: ClaimSpec, *, namespace: str, image: str) -> dict[str, Any]:
    """The Job that makes `spec.path` on the file system and gives it to its owner."""
    labels = {**owner.labels, LABEL_CONSUMER: spec.consumer}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(owner.app, spec),
            "namespace": namespace,
            "labels": labels,
        },
        "spec": {
            "backoffLimit": 2,
            # a retry only once the failed pod is gone: the control plane refuses a Job
            # replacing a terminating pod in a consumer's namespace, this one's included
            # (kubernetes-control-plane admission_policies CONSUMER_TERMINATING)
            "podReplacementPolicy": "Failed",
            "activeDeadlineSeconds": JOB_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": JOB_TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "tolerations": [_GPU_TOLERATION],
                    # Root with CHOWN, DAC_OVERRIDE, FOWNER and FSETID and an nfs volume:
                    # Pod Security `baseline` admits it, `restricted` cannot (it forbids
                    # runAsUser 0, any added capability but NET_BIND_SERVICE and nfs
                    # volumes; kubernetes.io/docs/concepts/security/pod-security-
                    # standards/). So this namespace needs `baseline` until EFS access
                    # points make the directory (issue 29 item 5); the rest of restricted
                    # is met: seccomp RuntimeDefault, no escalation, drop ALL, no token.
                    "securityContext": {
                        "runAsUser": 0,
                        "runAsGroup": 0,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "prepare",
                            "image": image,
                            "command": ["sh", "-c", SCRIPT, "prepare-directory"],
                            "args": [
                                MOUNT,
                                spec.path.lstrip("/"),
                                owner_text(spec.directory_owner),
                            ],
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {
                                    "drop": ["ALL"],
                                    "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"],
                                },
                            },
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "16Mi"},
                                "limits": {"memory": "64Mi"},
                            },
                            "volumeMounts": [{"name": "efs", "mountPath": MOUNT}],
                        }
                    ],
                    "volumes": [{"name": "efs", "nfs": {"server": spec.server, "path": "/"}}],
                },
            },
        },
    }


def _condition(job: dict, kind: str) -> dict | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


class Directories:
    """Runs the Jobs that make consumers' directories, waiting a bounded time for each.

    Nothing runs until `efs_ready` (every mount target available, the VPC's DNS on): the
    Job's pod mounts the file system by its DNS name like any consumer.
    """

    def __init__(
        self,
        kube: Kube,
        owner: Owner,
        *,
        namespace: str,
        image: str,
        wait: float,
        sleep: Callable[[float], None],
        monotonic: Callable[[], float],
        efs_ready: bool = True,
    ):
        self.efs_ready = efs_ready
        self.kube = kube
        self.owner = owner
        self.namespace = namespace
        self.image = image
        self.wait = wait
        self.sleep = sleep
        self.monotonic = monotonic

    def prepare(self, spec: ClaimSpec) -> Preparation:
        """Start (or look at) the Job for `spec` and wait up to `wait` seconds for it.

        A failed Job is deleted after its reason is read, so that the next event tries
        again (the operator fixes the cause: a file system policy that squashes root, a
        node that cannot reach the mount target).
        """
        if not self.efs_ready:  # its pod could not mount the file system yet
            return Preparation(
                done=False, problem=f"{spec.path} for {spec.consumer} is made once EFS is ready"
            )
        manifest = job_manifest(self.owner, spec, namespace=self.namespace, image=self.image)
        name = manifest["metadata"]["name"]
        job = self.kube.get("batch/v1", "Job", name, self.namespace)
        if job is None:
            logger.info("creating Job %s/%s to prepare %s", self.namespace, name, spec.path)
            try:
                job = self.kube.apply(manifest, field_manager=FIELD_MANAGER)
            except KubeError as e:
                if e.status != 404:
                    raise
                missing = f"namespace {self.namespace} for the directory Jobs does not exist yet"
                return Preparation(done=False, problem=missing)
        seen = [job]  # the first look is the Job just read or made; each later one reads it

        def finished() -> Preparation | None:
            job = seen.pop() if seen else self.kube.get("batch/v1", "Job", name, self.namespace)
            return self._outcome(spec, name, job or manifest)

        outcome = poll_until(
            finished, self.wait, poll=POLL_SECONDS, clock=self.monotonic, sleep=self.sleep
        )
        if outcome is not None:
            return outcome
        return Preparation(
            done=False,
            problem=(
                f"preparing {spec.path} for {spec.consumer} "
                f"(Job {self.namespace}/{name} not finished)"
            ),
        )

    def _outcome(self, spec: ClaimSpec, name: str, job: dict) -> Preparation | None:
        """What a finished Job did (a failed one is deleted); None while it runs."""
        if _condition(job, "Complete"):
            logger.info(
                "directory %s ready, owned by %s", spec.path, owner_text(spec.directory_owner)
            )
            return Preparation(done=True)
        failed = _condition(job, "Failed")
        if not failed:
            return None
        why = self._failure(name) or failed.get("message") or failed.get("reason") or ""
        self.forget(spec)
        return Preparation(
            done=False,
            failed=True,
            problem=(
                f"could not prepare {spec.path} on {spec.file_system_id} for "
                f"{spec.consumer} (Job {self.namespace}/{name}: {why.strip()}); "
                "retried at the next event"
            ),
        )

    def forget(self, spec: ClaimSpec) -> None:
        """Delete the Job for `spec` and its pods (nothing when it is gone already)."""
        name = job_name(self.owner.app, spec)
        self.kube.delete("batch/v1", "Job", name, self.namespace, propagation="Background")

    def _failure(self, name: str) -> str | None:
        """The last words of the Job's failed container (its log tail), if any."""
        pods = self.kube.list("v1", "Pod", self.namespace, f"{LABEL_JOB_NAME}={name}")
        newest_first = sorted(
            pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True
        )
        for pod in newest_first:
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                terminated = (status.get("state") or {}).get("terminated") or {}
                if terminated.get("exitCode"):
                    message = (terminated.get("message") or "").strip().splitlines()
                    tail = message[-1] if message else ""
                    return f"exit code {terminated['exitCode']}: {tail}".rstrip(": ")
        return None
