# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The `validate-gpu` action: its parameters, its pod (a CUDA check on this node), the outcome.

`validate` opens a client with the control plane's kubeconfig and `run_validation`
creates the pod, follows it until it finishes (or cannot), reads its log and deletes it
whatever happens. `check_image` also checks the `gpu-validation-image` option. No ops
imports: the charm turns the outcome, or a `ValidationError`, into action results.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pydantic
from gpu_labels import TAINT_EFFECT, TAINT_KEY
from toolkit import RUNTIME_NAME

from charms.gpu_k8s.v0.config import ActionParams
from charms.gpu_k8s.v0.kube_objects import GPU_RESOURCE
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.system import poll_until

# Namespace the control plane grants workers pod create/delete in, for validation pods
# (kubernetes-control-plane literals.GPU_VALIDATION_NAMESPACE).
VALIDATION_NAMESPACE = "gpu-k8s-system"
VALIDATION_POLL_S = 2.0
MAX_VALIDATION_TIMEOUT = 3600
# CUDA vectorAdd sample from NGC; prints "Test PASSED" and exits 0 on success.
VALIDATION_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
VALIDATION_COMMAND = ("/cuda-samples/vectorAdd",)
VALIDATION_TIMEOUT_S = 300
_STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)

_IMAGE = re.compile(r"^[a-z0-9]+([._/:@-][A-Za-z0-9_]+)*$")


def check_image(value: str) -> str:
    """Return a container image reference such as `nvcr.io/nvidia/cuda:13.0`, stripped.

    Raises:
        ValueError: empty, or not an image reference.
    """
    value = value.strip()
    if not _IMAGE.match(value) or len(value) > 512:
        raise ValueError(
            "must be a container image reference such as "
            "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
        )
    return value


class ValidateGpuParams(ActionParams):
    """Parameters of `validate-gpu`."""

    timeout: int = 300
    image: str | None = None

    @pydantic.field_validator("timeout")
    @classmethod
    def _timeout(cls, value: int) -> int:
        if not 10 <= value <= MAX_VALIDATION_TIMEOUT:
            raise ValueError(f"must be a number of seconds from 10 to {MAX_VALIDATION_TIMEOUT}")
        return value

    @pydantic.field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return None if value is None else check_image(value)


def validation_pod_name() -> str:
    """A fresh name for a validation pod (runs never collide with a leftover pod)."""
    return f"gpu-validation-{uuid.uuid4().hex[:10]}"


def validation_pod(
    node_name: str,
    namespace: str,
    image: str = VALIDATION_IMAGE,
    name: str = "gpu-validation",
    command: Sequence[str] | None = VALIDATION_COMMAND,
    deadline: int = VALIDATION_TIMEOUT_S,
) -> dict:
    """A pod pinned to `node_name` that asks for one GPU and runs a CUDA check.

    `deadline` (the action's timeout) becomes `activeDeadlineSeconds`, so the kubelet
    stops a check that runs longer, the same as the action stops waiting for it.

    Pinning goes through the scheduler (node affinity on `metadata.name`) rather than
    `spec.nodeName`, so a node whose GPUs are all taken leaves the pod Pending with a
    reason instead of the kubelet rejecting it.
    """
    if not node_name or not namespace or not image:
        raise ValueError("validation pod needs a node name, a namespace and an image")
    container: dict = {
        "name": "cuda-check",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {GPU_RESOURCE: "1"}},
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    if command:
        container["command"] = list(command)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "gpu-validation",
                "app.kubernetes.io/managed-by": "kubernetes-worker",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "runtimeClassName": RUNTIME_NAME,
            "activeDeadlineSeconds": deadline,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [node_name],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "tolerations": [
                {"key": TAINT_KEY, "operator": "Exists", "effect": TAINT_EFFECT},
            ],
            "containers": [container],
        },
    }


def validation_progress(pod: Mapping) -> tuple[str, str | None]:
    """(progress line, reason it cannot finish or None) for a validation pod's state."""
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = condition.get("message") or condition.get("reason") or "unschedulable"
            return f"{phase}: not scheduled: {message}", None
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            reason = waiting.get("reason", "waiting")
            line = f"{phase}: {reason}" + (
                f": {waiting['message']}" if waiting.get("message") else ""
            )
            return line, (line if reason in _STUCK_REASONS else None)
    return phase, None


def parse_validation_result(phase: str, logs: str) -> tuple[bool, str]:
    """Pass/fail and a one-line summary from a finished validation pod.

    Passes when the pod Succeeded and its output does not report a failed test.

    Raises:
        ValueError: the pod has not finished (phase other than Succeeded/Failed).
    """
    if phase not in ("Succeeded", "Failed"):
        raise ValueError(f"validation pod has not finished (phase {phase})")
    lines = [line.strip() for line in logs.splitlines() if line.strip()]
    failed_marker = any("FAILED" in line or "error" in line.lower() for line in lines)
    passed = phase == "Succeeded" and not failed_marker
    tail = lines[-1] if lines else "no output"
    verdict = "passed" if passed else "failed"
    return passed, f"CUDA check {verdict} (pod {phase}): {tail}"


@dataclasses.dataclass(frozen=True)
class ValidationOutcome:
    """The result of a `validate-gpu` run."""

    passed: bool
    summary: str
    phase: str
    logs: str

    def results(self) -> dict[str, str]:
        """The action's results."""
        return {
            "passed": str(self.passed).lower(),
            "summary": self.summary,
            "output": self.logs or "(no output)",
        }


def run_validation(
    kube: Any,
    node: str,
    namespace: str,
    name: str,
    *,
    image: str = VALIDATION_IMAGE,
    timeout: float = 300.0,
    poll: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] = lambda line: None,
) -> ValidationOutcome:
    """Run the validation pod on `node`, wait for it, and delete it whatever happens.

    `progress` gets each new state line (for `event.log`). Stops early when the pod
    cannot finish (image pull failure and the like) and at `timeout`.

    Raises:
        KubeError: the API server refused to create or read the pod.
    """
    kube.create(validation_pod(node, namespace, image, name, deadline=max(1, round(timeout))))
    last = ""

    def outcome() -> ValidationOutcome | None:
        nonlocal last
        pod = kube.get("v1", "Pod", name, namespace)
        if pod is None:
            return ValidationOutcome(False, "validation pod was deleted", "Unknown", "")
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase in ("Succeeded", "Failed"):
            logs = kube.pod_logs(name, namespace, tail_lines=50)
            passed, summary = parse_validation_result(phase, logs)
            return ValidationOutcome(passed, summary, phase, logs)
        line, stuck = validation_progress(pod)
        if line != last:
            progress(line)
            last = line
        if stuck:
            return ValidationOutcome(False, f"CUDA check failed: {stuck}", phase, "")
        return None

    try:
        done = poll_until(outcome, timeout, poll=poll, clock=clock, sleep=sleep)
        return done or ValidationOutcome(
            False, f"CUDA check timed out after {timeout:.0f}s: {last}", "Pending", ""
        )
    finally:
        kube.delete("v1", "Pod", name, namespace)


class ValidationError(Exception):
    """The validation pod could not run; the message is the action's failure."""


def validate(
    kubeconfig: str,
    node: str,
    image: str,
    *,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] = lambda line: None,
) -> ValidationOutcome:
    """Run a freshly named validation pod on `node` with the control plane's `kubeconfig`.

    `progress` gets what runs where, then each new state line (for `event.log`).

    Raises:
        ValidationError: the kubeconfig is unusable, or the API refused the pod.
    """
    name = validation_pod_name()
    progress(f"running {image} on node {node} (pod {VALIDATION_NAMESPACE}/{name})")
    try:
        with Kube.from_kubeconfig(kubeconfig) as kube:
            return run_validation(
                kube,
                node,
                VALIDATION_NAMESPACE,
                name,
                image=image,
                timeout=timeout,
                poll=VALIDATION_POLL_S,
                clock=clock,
                sleep=sleep,
                progress=progress,
            )
    except ValueError as e:
        raise ValidationError(f"control plane kubeconfig is unusable: {e}") from None
    except KubeError as e:
        raise ValidationError(
            f"Kubernetes API refused the validation pod: {e.status} {e.reason}"
        ) from None
