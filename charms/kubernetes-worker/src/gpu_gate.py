# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The gate a repaired GPU node passes before it takes work again (issue 32 item 4).

Three checks, each on every GPU of the machine, run through this machine's containerd
with NVIDIA's runtime as validate-gpu's CUDA check is (validation.py: no Kubernetes
credential is involved, the containers are privileged and removed afterwards):

1. the CUDA vectorAdd sample, once per GPU (NVIDIA_VISIBLE_DEVICES=<index>: the sample
   runs on the first GPU it sees);
2. DCGM's diagnostic `dcgmi diag -r 2 -j` (level 2, "medium": NVIDIA DCGM user guide,
   "DCGM Diagnostics": run levels 1-4) in NVIDIA's DCGM image. dcgmi talks to a host
   engine; the container starts its own (`nv-hostengine`, which daemonizes by default)
   in the container's own network namespace, so nothing on the node's port 5555 is
   touched. `-j` prints JSON whose form is NVIDIA/DCGM testing/python3/
   dcgm_diag_schema.json (DCGM 4.x): `"DCGM Diagnostic"` -> `test_categories[]` ->
   `tests[]` -> `results[]` of `{entity_group, entity_id, status, warnings[{warning}]}`,
   and `runtime_error` when the diagnostic could not run; a result's status is one of
   "Pass", "Fail", "Warn", "Skip", "Not Run" (dcgmi/Diag.cpp, to_string of
   dcgmDiagResult_t). dcgmi exits non-zero on a failed test and the runner keeps only a
   failed program's stderr, so the container's shell prints the JSON and exits 0: the
   JSON decides, and no JSON fails the check;
3. on a machine with more than one GPU, NCCL's all-reduce across all of them
   (nccl-tests `all_reduce_perf_mpi -g <n>`, one process driving every GPU; the MPI
   build runs as a single rank without mpirun), which prints `# Out of bounds values :
   <n> OK|FAILED` and `# Avg bus bandwidth    : <GB/s>` (NVIDIA/nccl-tests
   src/common.cu). Its bus bandwidth must reach the floor of the GPU model (`FLOORS`).

The gate stops at the first check that fails: a failed GPU is not asked more.

Its images are pulled first, each with its own bound (`PULL_TIMEOUT`; NVIDIA's PyTorch
image is many GB), apart from the checks' `timeout`: an image that cannot be pulled (the
registry down, a pull timing out) says nothing about the GPUs, so it raises `PullError`,
which the repair turn records as no repair at all (gpu_repairs.py), never as a failed one.
Nor does a machine without containerd's `ctr` (validation.CtrMissingError, at the first pull or
at any check's run): the gate could not run, it did not fail.
No ops imports: the charm runs the gate in a repair turn (gpu_repairs.py) and records
the outcome in the watcher's state file (gpu_health.record_repair).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shlex
import time
from collections.abc import Callable

import validation

from charms.gpu_k8s.v0.system import Host

# NVIDIA's DCGM image (NGC nvidia/cloud-native/dcgm; DCGM 4.x, whose `dcgmi diag -j`
# form is the schema named above). Tag read 2026-11-27 from the NGC tags NVIDIA's own
# deployments name (gpu-operator's and GoogleCloudPlatform/cluster-health-scanner's
# manifests use the 4.x line). Digest: not pinned yet (no registry reachable from the
# charm's build machine, no public record of this tag's digest found): issue 32 leftover.
DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"
DCGM_LEVEL = "2"
DCGM_SCRIPT = f"nv-hostengine >/dev/null 2>&1; dcgmi diag -r {DCGM_LEVEL} -j; exit 0"
DCGM_COMMAND = ("sh", "-c", DCGM_SCRIPT)
# NVIDIA's PyTorch image ships nccl-tests built with MPI under /usr/local/bin (NVIDIA
# Run:ai docs, "Validating GPU Cluster Communication with NCCL Tests", read 2026-11-27:
# "nvcr.io/nvidia/pytorch:26.01-py3 ... ships with the NCCL test binaries pre-built under
# /usr/local/bin/"). Digest: not pinned yet (two different digests for this tag appear in
# public Dockerfiles, 38ed2ecb... and a411b86d...; which one is the index was not
# verifiable from here): issue 32 leftover.
NCCL_IMAGE = "nvcr.io/nvidia/pytorch:26.01-py3"
NCCL_PROGRAM = "all_reduce_perf_mpi"
# 8 MiB to 256 MiB, doubling: large enough that the bus, not latency, bounds the result.
NCCL_ARGS = ("-b", "8M", "-e", "256M", "-f", "2")

# All-reduce bus bandwidth floors per GPU model (GB/s), keyed by the name nvidia-smi
# prints (`--query-gpu=name`, NVML's nvmlDeviceGetName). nccl-tests doc/PERFORMANCE.md:
# busbw reflects "the speed of the inter-GPU communication" and can be compared "with the
# hardware peak bandwidth, independently of the number of ranks used": here the
# interconnect between the GPUs of one node. The floor is a quarter of that link's
# per-direction peak: a healthy node clears it with room (tuning, topology and message
# sizes move busbw, not by 4x); a GPU whose NVLink fell back to PCIe, or a PCIe link
# trained at x4 or x1, does not.
# Peaks (bidirectional datasheet figures halved for one direction): V100 SXM2 datasheet
# (NVLink 2: 300 GB/s), A100 datasheet (SXM: NVLink 3 600 GB/s; PCIe Gen4 64 GB/s), H100
# datasheet (SXM: NVLink 4 900 GB/s; PCIe and NVL: PCIe Gen5 128 GB/s, NVL's NVLink bridge
# joins only pairs), H200 datasheet (SXM: NVLink 900 GB/s; NVL: PCIe Gen5 128 GB/s, its
# bridge joins two or four), HGX B200 datasheet (NVLink 5: 1.8 TB/s per GPU), A10 (AWS's
# A10G is an A10), L4, L40S datasheets (PCIe Gen4 x16: 64 GB/s), T4 datasheet (PCIe Gen3
# x16: 32 GB/s).
# Names exactly as the driver prints them: NVIDIA/open-gpu-kernel-modules README.md
# "Compatible GPUs" (595.45.04: "Tesla T4" 1EB8, "NVIDIA A100-SXM4-40GB" 20B0, "NVIDIA
# A100-SXM4-80GB" 20B2, "NVIDIA A100 80GB PCIe" 20B5, "NVIDIA A100-PCIE-40GB" 20F1,
# "NVIDIA A10" 2236, "NVIDIA A10G" 2237, "NVIDIA H100 NVL" 2321, "NVIDIA H100 80GB HBM3"
# 2330, "NVIDIA H100 PCIe" 2331, "NVIDIA H200" 2335, "NVIDIA H200 NVL" 233B, "NVIDIA L40S"
# 26B9, "NVIDIA L4" 27B8, "NVIDIA B200" 2901); Volta is not in that table (the open
# modules start at Turing): "Tesla V100-SXM2-16GB" and "-32GB" as nvidia-smi and DCGM's
# modelName label print them (tests/fixtures/gpu/h100-sxm5-vm is our own record of
# "NVIDIA H100 80GB HBM3"). AWS: p3 V100 SXM2 16GB, p3dn V100 SXM2 32GB, p4d A100-SXM4-40GB,
# p4de A100-SXM4-80GB, p5 H100 80GB HBM3, p5e/p5en H200, p6-b200 B200, g4dn T4, g5 A10G,
# g6 L4, g6e L40S. A model not named here is measured, not judged (`floor_for` -> None):
# no prefix or substring match, which judged an "NVIDIA A100 80GB PCIe" as an A10 and an
# "NVIDIA H200 NVL" (PCIe) against the H200's NVLink.
_PCIE4 = "PCIe Gen4 x16, 32 GB/s per direction"
_PCIE5 = "PCIe Gen5 x16, 64 GB/s per direction"
FLOORS: dict[str, tuple[float, str]] = {
    "Tesla V100-SXM2-16GB": (37.5, "V100 SXM2 datasheet: NVLink 2, 150 GB/s per direction"),
    "Tesla V100-SXM2-32GB": (37.5, "V100 SXM2 datasheet: NVLink 2, 150 GB/s per direction"),
    "NVIDIA A100-SXM4-40GB": (75.0, "A100 datasheet: NVLink 3, 300 GB/s per direction"),
    "NVIDIA A100-SXM4-80GB": (75.0, "A100 datasheet: NVLink 3, 300 GB/s per direction"),
    "NVIDIA A100-PCIE-40GB": (8.0, f"A100 datasheet: {_PCIE4}"),
    "NVIDIA A100 80GB PCIe": (8.0, f"A100 datasheet: {_PCIE4}"),
    "NVIDIA H100 80GB HBM3": (112.0, "H100 datasheet: NVLink 4, 450 GB/s per direction"),
    "NVIDIA H100 PCIe": (16.0, f"H100 datasheet: {_PCIE5}"),
    "NVIDIA H100 NVL": (16.0, f"H100 NVL datasheet: {_PCIE5}"),
    "NVIDIA H200": (112.0, "H200 datasheet: NVLink 4, 450 GB/s per direction"),
    "NVIDIA H200 NVL": (16.0, f"H200 NVL datasheet: {_PCIE5}"),
    "NVIDIA B200": (225.0, "HGX B200 datasheet: NVLink 5, 900 GB/s per direction"),
    "NVIDIA A10G": (8.0, f"A10 datasheet: {_PCIE4}"),
    "NVIDIA A10": (8.0, f"A10 datasheet: {_PCIE4}"),
    "NVIDIA L40S": (8.0, f"L40S datasheet: {_PCIE4}"),
    "NVIDIA L4": (8.0, f"L4 datasheet: {_PCIE4}"),
    "Tesla T4": (4.0, "T4 datasheet: PCIe Gen3 x16, 16 GB/s per direction"),
}
# The one normalisation: drivers before R470 printed these names without "NVIDIA " (NVIDIA
# MIG user guide, R450: `nvidia-smi -L` -> "GPU 0: A100-SXM4-40GB (UUID: ...)"; 470.103.01
# prints "NVIDIA A100-SXM4-80GB": NVIDIA/CUDALibrarySamples#104). "Tesla" stays in both.
_VENDOR = "NVIDIA "


def _bare(name: str) -> str:
    name = name.strip()
    return name[len(_VENDOR) :] if name.startswith(_VENDOR) else name


_BY_BARE_NAME = {_bare(name): floor for name, floor in FLOORS.items()}

# Seconds all of the gate's images may take to pull, together. NVIDIA's PyTorch image is
# by far the largest, many GB to download (its size not recorded here yet): 40 minutes
# carry 10 GB at ~4 MB/s; a mirror (image-registry) is faster. Bounded, so a hung pull
# ends the hook with a status rather than holding the machine's hook lock for ever.
PULL_TIMEOUT = 2400.0

_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", re.MULTILINE)
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.MULTILINE)


def floor_for(model: str) -> tuple[float, str] | None:
    """The bus bandwidth floor (GB/s) of the GPU model nvidia-smi names, and why.

    The exact name, with or without the "NVIDIA " that drivers before R470 left out; None for
    any other model (measured, not judged).
    """
    return _BY_BARE_NAME.get(_bare(model))


@dataclasses.dataclass(frozen=True)
class Check:
    """One check's outcome: its name, pass/fail and what it found (one line)."""

    name: str
    passed: bool
    detail: str


@dataclasses.dataclass(frozen=True)
class GateResult:
    """The gate's outcome: every check that ran, in order."""

    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        """Every check ran and passed."""
        return bool(self.checks) and all(c.passed for c in self.checks)

    def summary(self) -> str:
        """One line: each check's name and its finding."""
        return "; ".join(
            f"{c.name} {'passed' if c.passed else 'FAILED'}: {c.detail}" for c in self.checks
        )

    def record(self) -> dict:
        """What the watcher's state file keeps of it (gpu_health.record_repair)."""
        return {
            "passed": self.passed,
            **{c.name: ("passed: " if c.passed else "failed: ") + c.detail for c in self.checks},
        }


class PullError(validation.ValidationError):
    """An image of the gate could not be pulled: the gate did not run (not a failed repair)."""


def images_for(cuda_image: str, dcgm_image: str, nccl_image: str, count: int) -> list[str]:
    """The images the gate runs on `count` GPUs (NCCL only with more than one)."""
    return [cuda_image, dcgm_image] + ([nccl_image] if count > 1 else [])


def pull(
    host: Host,
    images: list[str],
    *,
    timeout: float = PULL_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[str], None] = lambda line: None,
) -> None:
    """Pull each image into containerd's k8s.io namespace, all within `timeout` seconds.

    Raises:
        PullError: ctr refused one (its last line) or the pulls outlived `timeout`.
        validation.CtrMissingError: ctr is not there.
    """
    started = clock()
    for image in images:
        left = timeout - (clock() - started)
        if left <= 0:
            raise PullError(f"pulling the gate's images took over {timeout:.0f}s (at {image})")
        try:
            pulled = validation.pull_image(host, image, left, progress)
        except validation.CtrMissingError:
            raise
        except validation.ValidationError as e:
            raise PullError(str(e)) from None
        if not pulled:
            raise PullError(f"pulling {image} outlived the gate's {timeout:.0f}s for its images")


def parse_dcgm(text: str, count: int) -> Check:
    """`dcgmi diag -j`'s JSON: passed when no GPU result failed and every GPU was seen."""
    start = text.find("{")
    try:
        found = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        found = None
    diag = found.get("DCGM Diagnostic") if isinstance(found, dict) else None
    if not isinstance(diag, dict):
        tail = text.strip().splitlines()[-1:] or ["no output"]
        return Check("dcgm", False, f"dcgmi diag printed no JSON result: {tail[0][:200]}")
    if diag.get("runtime_error"):
        return Check("dcgm", False, f"dcgmi diag could not run: {diag['runtime_error']}")
    failures, seen, tests = [], set(), 0
    for test in (t for c in diag.get("test_categories") or [] for t in c.get("tests") or []):
        tests += 1
        for result in test.get("results") or []:
            if result.get("entity_group") != "GPU":
                continue
            seen.add(result.get("entity_id"))
            if result.get("status") == "Fail":
                warnings = [w.get("warning", "") for w in result.get("warnings") or []]
                why = warnings[0] if warnings else "no detail"
                failures.append(f"GPU {result.get('entity_id')} {test.get('name')}: {why}")
    if failures:
        return Check("dcgm", False, f"dcgmi diag -r {DCGM_LEVEL}: " + "; ".join(failures))
    if len(seen) < count:
        return Check(
            "dcgm", False, f"dcgmi diag -r {DCGM_LEVEL} tested {len(seen)} of {count} GPUs"
        )
    return Check("dcgm", True, f"dcgmi diag -r {DCGM_LEVEL}: {tests} tests on {count} GPUs")


def parse_nccl(text: str, count: int, model: str) -> Check:
    """all_reduce_perf's summary: no wrong values, bus bandwidth at or above the floor."""
    bandwidth = _AVG_BUSBW.search(text)
    wrong = _OUT_OF_BOUNDS.search(text)
    if bandwidth is None or wrong is None:
        tail = text.strip().splitlines()[-1:] or ["no output"]
        return Check("nccl", False, f"{NCCL_PROGRAM} did not finish: {tail[0][:200]}")
    busbw = float(bandwidth.group(1))
    if int(wrong.group(1)):
        return Check("nccl", False, f"{NCCL_PROGRAM}: {wrong.group(1)} wrong values")
    floor = floor_for(model)
    measured = f"all-reduce across {count} GPUs: bus bandwidth {busbw:g} GB/s"
    if floor is None:
        return Check("nccl", True, f"{measured} (no floor known for {model}: not judged)")
    if busbw < floor[0]:
        return Check(
            "nccl",
            False,
            f"{measured}, under the floor {floor[0]:g} GB/s for {model} ({floor[1]})",
        )
    return Check("nccl", True, f"{measured} (floor {floor[0]:g} GB/s for {model})")


def run(
    host: Host,
    *,
    cuda_image: str,
    dcgm_image: str,
    nccl_image: str,
    count: int,
    model: str,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[str], None] = lambda line: None,
    pull_timeout: float = PULL_TIMEOUT,
    alone: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> GateResult:
    """Run the gate on this machine's `count` GPUs of `model`; stops at the first failure.

    Its images are pulled first, within `pull_timeout` together (`pull`); then `timeout`
    bounds each container's run. DCGM's diagnostic runs inside `alone()`, which clears the
    node of other DCGM host engines (the exporter's: one per node, NVIDIA/DCGM#108 "not an
    officially supported configuration ... may lead to deadlocks in the driver"; the caller
    pauses the GPU clients, gpu_repair.gpu_clients_paused) for that check only.

    Raises:
        PullError: an image cannot be pulled (the gate did not run).
        validation.CtrMissingError: ctr is not there (the gate did not run, or stopped).
    """
    if count < 1:  # no GPU to prove: never a pass
        return GateResult((Check("cuda", False, "no NVIDIA GPU found on this machine"),))
    pull(
        host,
        images_for(cuda_image, dcgm_image, nccl_image, count),
        timeout=pull_timeout,
        clock=clock,
        progress=progress,
    )
    checks: list[Check] = []
    for index in range(count):
        outcome = validation.validate(
            host,
            cuda_image,
            timeout=timeout,
            clock=clock,
            progress=progress,
            devices=str(index),
            pull=False,
        )
        if not outcome.passed:
            checks.append(Check("cuda", False, f"GPU {index}: {outcome.summary}"))
            return GateResult(tuple(checks))
    checks.append(Check("cuda", True, f"vectorAdd passed on each of {count} GPUs"))
    with alone():
        code, output = validation.run_tool(
            host,
            dcgm_image,
            DCGM_COMMAND,
            timeout=timeout,
            clock=clock,
            progress=progress,
            pull=False,
        )
    if code == -1:
        checks.append(Check("dcgm", False, f"dcgmi diag timed out after {timeout:.0f}s"))
        return GateResult(tuple(checks))
    checks.append(parse_dcgm(output, count))
    if not checks[-1].passed or count < 2:
        return GateResult(tuple(checks))
    script = f"{shlex.join((NCCL_PROGRAM, *NCCL_ARGS, '-g', str(count)))} 2>&1; exit 0"
    code, output = validation.run_tool(
        host,
        nccl_image,
        ("sh", "-c", script),
        timeout=timeout,
        clock=clock,
        progress=progress,
        pull=False,
    )
    if code == -1:
        checks.append(Check("nccl", False, f"{NCCL_PROGRAM} timed out after {timeout:.0f}s"))
    else:
        checks.append(parse_nccl(output, count, model))
    return GateResult(tuple(checks))
