# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The `validate-gpu` action: its parameters, a CUDA check on this machine, the outcome.

The check runs the CUDA vectorAdd sample through this machine's containerd with NVIDIA's
container runtime, the runtime the kubelet's `nvidia` RuntimeClass reaches (toolkit.py).
It needs no Kubernetes credential: the worker's only credential is its kubelet's node
identity, which cannot create pods (kubernetes plugin/pkg/admission/noderestriction/
admission.go admitPod: a node may create only mirror pods bound to itself; the Node
authorizer grants nodes no pod create), and a pod made for it by the control plane could
not answer within the action (Juju commits what an action writes to a relation when the
action ends: juju docs reference/action "after the action completes successfully, a
<endpoint>-relation-changed event will be emitted").

`ctr -n k8s.io images pull <image>` then `ctr -n k8s.io run --rm --privileged
--runc-binary /usr/bin/nvidia-container-runtime --env NVIDIA_VISIBLE_DEVICES=all <image>
<id> /cuda-samples/vectorAdd` (containerd cmd/ctr/commands/run: `--rm`, `--privileged`,
`--env`, and `--runc-binary` among its Linux flags; NVIDIA container toolkit docs,
"Running a Sample Workload" with containerd: `--runc-binary` naming
nvidia-container-runtime with NVIDIA_VISIBLE_DEVICES). The container is privileged
because the charm has the runtime ignore NVIDIA_VISIBLE_DEVICES from unprivileged
containers (toolkit.ENVVAR_UNPRIVILEGED; nvidia-container-toolkit internal/modifier/cdi.go
takes the variable when `AcceptEnvvarUnprivileged || image.IsPrivileged(spec)`). The charm
is root on this machine already: the container gives it nothing it lacks. The image lands
in containerd's `k8s.io` namespace, the kubelet's, whose image garbage collection removes it.
No ops imports: the charm turns the outcome, or a `ValidationError`, into action results.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Callable
from typing import Literal

import pydantic
from toolkit import RUNTIME_BINARY

from charms.gpu_k8s.v0.config import ActionParams
from charms.gpu_k8s.v0.system import CommandError, Host

CTR = "/usr/bin/ctr"  # containerd's client, in Ubuntu's containerd package
# The kubelet's containerd namespace (the CRI plugin's, k8s.io): images pulled here are
# the kubelet's to garbage-collect.
CTR_NAMESPACE = "k8s.io"
MAX_VALIDATION_TIMEOUT = 3600
# CUDA vectorAdd sample from NGC; prints "Test PASSED" and exits 0 on success.
VALIDATION_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
VALIDATION_COMMAND = ("/cuda-samples/vectorAdd",)
VALIDATION_TIMEOUT_S = 300
# What NVIDIA's runtime gives the container: every GPU, compute and nvidia-smi's libraries
# (NVIDIA_DRIVER_CAPABILITIES, nvidia-container-toolkit docs "Environment variables").
VALIDATION_ENV = ("NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility")

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


class ReadmitGpuParams(ActionParams):
    """Parameters of `readmit-gpu`: `confirm=yes`, and each GPU's check's timeout."""

    confirm: Literal["yes"]
    timeout: int = 300

    @pydantic.field_validator("timeout")
    @classmethod
    def _timeout(cls, value: int) -> int:
        return ValidateGpuParams._timeout(value)


def container_name() -> str:
    """A fresh name for a validation container (runs never collide with a leftover)."""
    return f"gpu-validation-{uuid.uuid4().hex[:10]}"


def run_command(
    image: str,
    name: str,
    devices: str = "all",
    command: tuple[str, ...] = VALIDATION_COMMAND,
) -> list[str]:
    """The `ctr run` of a check: privileged, NVIDIA's runtime, removed when done.

    `devices`: NVIDIA_VISIBLE_DEVICES (`all`, or one GPU's index or UUID: the sample runs
    on the first GPU it sees, so checking each GPU takes one run per GPU); `command`: what
    runs in the container (the CUDA sample; the gate's DCGM and NCCL checks, gpu_gate.py).
    """
    pairs = [p for p in VALIDATION_ENV if not p.startswith("NVIDIA_VISIBLE_DEVICES=")]
    pairs.insert(0, f"NVIDIA_VISIBLE_DEVICES={devices}")
    env = [arg for pair in pairs for arg in ("--env", pair)]
    return [
        CTR,
        "-n",
        CTR_NAMESPACE,
        "run",
        "--rm",
        "--privileged",
        "--runc-binary",
        RUNTIME_BINARY,
        *env,
        image,
        name,
        *command,
    ]


def parse_validation_result(exit_code: int, output: str) -> tuple[bool, str]:
    """Pass/fail and a one-line summary from the finished check's exit code and output.

    Passes when the sample exited 0 and its output does not report a failed test.
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    failed_marker = any("FAILED" in line or "error" in line.lower() for line in lines)
    passed = exit_code == 0 and not failed_marker
    tail = lines[-1] if lines else "no output"
    verdict = "passed" if passed else "failed"
    return passed, f"CUDA check {verdict} (exit {exit_code}): {tail}"


@dataclasses.dataclass(frozen=True)
class ValidationOutcome:
    """The result of a `validate-gpu` run."""

    passed: bool
    summary: str
    exit_code: int
    logs: str

    def results(self) -> dict[str, str]:
        """The action's results."""
        return {
            "passed": str(self.passed).lower(),
            "summary": self.summary,
            "output": self.logs or "(no output)",
        }


class ValidationError(Exception):
    """The check could not run (image not pulled, containerd missing); the action's failure."""


class CtrMissingError(ValidationError):
    """containerd's client is not on this machine (yet): nothing was checked."""

    def __init__(self) -> None:
        super().__init__(f"containerd's client {CTR} is not on this machine yet")


def _ctr_missing(e: CommandError) -> bool:
    """`e` says ctr itself could not be started, not that it or a container failed.

    The runner's answer for a program that is not there (system.SubprocessRunner: exit
    127, "<argv[0]>: not found"). A container's own exit 127 (a shell's missing command)
    comes through `ctr run` with the shell's message instead, so the text decides.
    """
    return e.returncode == 127 and e.last_line == f"{CTR}: not found"


def _remove(host: Host, name: str) -> None:
    """Remove a container `ctr run --rm` left behind (killed at the timeout)."""
    for argv in (
        (CTR, "-n", CTR_NAMESPACE, "tasks", "delete", "--force", name),
        (CTR, "-n", CTR_NAMESPACE, "containers", "delete", name),
    ):
        try:
            host.run(*argv)
        except CommandError:
            pass  # not there: --rm removed it, or the task never started


def pull_image(host: Host, image: str, timeout: float, progress: Callable[[str], None]) -> bool:
    """Pull `image` into containerd; False when the pull outlived `timeout`.

    Raises:
        CtrMissingError: ctr is not there.
        ValidationError: the image cannot be pulled.
    """
    progress(f"pulling {image} into containerd ({CTR_NAMESPACE})")
    try:
        host.run(CTR, "-n", CTR_NAMESPACE, "images", "pull", image, timeout=timeout)
    except CommandError as e:
        if e.returncode == -1:
            return False
        if _ctr_missing(e):
            raise CtrMissingError() from None
        raise ValidationError(f"cannot pull {image}: {e.last_line}") from None
    return True


def run_tool(
    host: Host,
    image: str,
    command: tuple[str, ...],
    *,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[str], None] = lambda line: None,
    pull: bool = True,
) -> tuple[int, str]:
    """Pull `image` and run `command` in it on every GPU; (exit status, output).

    The exit status is -1 when the pull and the run together outlived `timeout` (the
    container is removed). What the command printed is its stdout, or its stderr when it
    failed (the runner keeps a failed program's stderr only). `pull` False: the image is
    in containerd already (the repair gate pulls first, gpu_gate.pull).

    Raises:
        CtrMissingError: ctr is not there.
        ValidationError: the image cannot be pulled.
    """
    name = container_name()
    started = clock()
    if pull and not pull_image(host, image, timeout, progress):
        return -1, ""
    left = max(1.0, timeout - (clock() - started))
    progress(f"running {command[0]} in {image} (container {name})")
    try:
        return 0, host.run(*run_command(image, name, "all", command), timeout=left)
    except CommandError as e:
        if _ctr_missing(e):
            raise CtrMissingError() from None
        if e.returncode == -1:
            _remove(host, name)
        return e.returncode, e.stderr


def validate(
    host: Host,
    image: str,
    *,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[str], None] = lambda line: None,
    devices: str = "all",
    pull: bool = True,
) -> ValidationOutcome:
    """Pull `image` and run the CUDA check on this machine's GPUs through containerd.

    `timeout` bounds the pull and the run together; `progress` gets what runs where;
    `pull` False: the image is in containerd already (gpu_gate.pull).

    Raises:
        CtrMissingError: ctr is not there.
        ValidationError: the image cannot be pulled.
    """
    name = container_name()
    started = clock()
    if pull and not pull_image(host, image, timeout, progress):
        return ValidationOutcome(
            False, f"CUDA check timed out after {timeout:.0f}s pulling {image}", -1, ""
        )
    left = max(1.0, timeout - (clock() - started))
    progress(f"running {' '.join(VALIDATION_COMMAND)} with {RUNTIME_BINARY} (container {name})")
    try:
        output = host.run(*run_command(image, name, devices), timeout=left)
    except CommandError as e:
        if _ctr_missing(e):
            raise CtrMissingError() from None
        if e.returncode == -1:
            _remove(host, name)
            return ValidationOutcome(False, f"CUDA check timed out after {timeout:.0f}s", -1, "")
        passed, summary = parse_validation_result(e.returncode, e.stderr)
        return ValidationOutcome(passed, summary, e.returncode, e.stderr)
    passed, summary = parse_validation_result(0, output)
    return ValidationOutcome(passed, summary, 0, output)
