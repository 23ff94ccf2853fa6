# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The gate a repaired GPU node passes before it takes work again (issue 32 item 4).

Three checks, each on every GPU of the machine, run through this machine's containerd
with NVIDIA's runtime as validate-gpu's CUDA check is (validation.py: no Kubernetes
credential is involved, the containers are privileged and removed afterwards):

1. the CUDA vectorAdd sample, once per GPU (NVIDIA_VISIBLE_DEVICES=<index>: the sample
   runs on the first GPU it sees); on a GPU in MIG mode, once per MIG device instead, by its
   UUID (NVIDIA_VISIBLE_DEVICES=MIG-<uuid>, which the NVIDIA container toolkit accepts from
   R470 drivers on: NVIDIA MIG user guide, "Running CUDA Applications as Containers"). A
   MIG GPU's memory and SMs are split among its MIG devices, so each is proven apart;
2. DCGM's diagnostic `dcgmi diag -r 2 -j` (level 2, "medium": NVIDIA DCGM user guide, "DCGM
   Diagnostics": run levels 1-4) in NVIDIA's DCGM image. dcgmi talks to a host engine; the
   container starts its own (`nv-hostengine`, which daemonizes by default) in the
   container's own network namespace, so nothing on the node's port 5555 is touched. `-j`
   prints JSON whose form is NVIDIA/DCGM testing/python3/dcgm_diag_schema.json (DCGM 4.x):
   `"DCGM Diagnostic"` -> `test_categories[]` -> `tests[]` -> `results[]` of `{entity_group,
   entity_id, status, warnings[{warning}]}` and a `test_summary` `{status, warnings}`, and
   `runtime_error` when the diagnostic could not run. A result's status is "Pass", "Fail" (a
   Warn too) or "Skip"; a GPU a test did not run on has no result (NVIDIA/DCGM @72fa3fea,
   DCGM 4.6.0, dcgmi/Diag.cpp HelperJsonAddResult, HelperDisplayDiagResult). Level 2 runs
   three tests (nvvs/src/NvidiaValidationSuite.cpp FillTestVectors: the software class's
   subtests, and from the medium suite on `memory`, hardware class, and `pcie`,
   integration class); only `memory` and `pcie` exercise a GPU (`EXERCISED`). The software
   test cannot prove one: its subtests set their result on every GPU at once (Software.cpp,
   PluginTest.cpp SetResult), and a GPU's result keeps the highest of them (Pass over Skip:
   DcgmNvvsResponseWrapper.cpp), so every GPU of a healthy node reads Pass there. The check
   passes only when no GPU's result of any test is Fail and every GPU passed an exercising
   test. A Skip is DCGM not testing that GPU with that test (NVVS starts each GPU at Skip
   until its plugin sets a result, PluginTest.cpp). A skip of an exercising test fails the
   check, but for the reasons a healthy GPU gets (`HEALTHY_SKIPS`: the memory test on a
   GPU with ECC off or unsupported, memory.cpp, whose texts are dcgmlib/dcgm_errors.h
   DCGM_FR_ECC_DISABLED_MSG and DCGM_FR_ECC_UNSUPPORTED_MSG), which are named with the
   plugin's reason (the result's `info`) and fail nothing, as DCGM's own overall result
   does not (Plugin::GetOverallResult): failing them would hold a GPU with ECC off out of
   service for good. Every other skip says the GPU was not tested: the memory test skips a
   GPU whose memory is still held ("Only N mb of memory is free ... Skipping", memory.cpp:
   a stuck context right after a fault) and the pcie test marks an aborted run Skip
   (Pcie.cpp). A GPU quarantined for a memory fault (xid_catalog.json's `memory`) must
   pass the memory test itself (`run`'s `memory`): ECC off does not excuse it. An error
   tied to no GPU (the software test's
   Fabric Manager training error or a denylisted driver: GpuIdTag::Unknown,
   nvvs/src/Software.cpp) fails every GPU with no warning of its own; dcgmi quotes it only
   in the test's `test_summary` (HelperJsonAddTestSummary: the test's status and all its
   errors), which the gate quotes, and a summary that says Fail fails the check. dcgmi exits
   non-zero on a failed test and the runner keeps only a failed program's stderr, so the
   container's shell prints the JSON and exits 0: the JSON decides, and no JSON fails the
   check. Not under MIG (`MIG_DCGM`): NVVS refuses before any test (NVIDIA/DCGM
   nvvs/src/NvidiaValidationSuite.cpp BuildCommonGpusList, @28bfbd4c and DCGM 4.6.0's
   72fa3fe) a MIG GPU when the diagnostic covers more than one GPU ("CUDA does not support
   enumerating GPUs with MIG mode enabled"), a MIG layout that is not one instance over the
   whole GPU ("prevents access to the entire GPU"), MIG without a compute instance, and a
   node mixing MIG and non-MIG GPUs; the check says it did not run, and the CUDA check on
   every MIG device is then the proof;
3. on a machine with more than one GPU, NCCL's all-reduce across all of them
   (nccl-tests `all_reduce_perf_mpi -g <n>`, one process driving every GPU; the MPI
   build runs as a single rank without mpirun), which prints a row per message size and
   `# Out of bounds values : <n> OK|FAILED` (NVIDIA/nccl-tests v2.19.6 src/util.cu). The
   bus bandwidth judged is the largest size's (`parse_nccl`), against the model's NVLink
   floor where it has one (`FLOORS`) and against this node's own baseline (`BASELINE`).
   Not under MIG: "a single CUDA process can only enumerate a single MIG device" (NVIDIA
   MIG user guide, "CUDA Device Enumeration"), so `-g <n>` cannot find n GPUs, and no MIG
   profile offers GPU-to-GPU P2P (`nvidia-smi mig -lgip`'s P2P column, "No" in the
   guide's listings): the check says it did not run and is not counted as failed.

The gate stops at the first check that fails: a failed GPU is not asked more. It passes
only when the CUDA check ran on every GPU (each MIG device, or the whole GPU where it has
none): a GPU in MIG mode whose devices `nvidia-smi -L` does not list (none made, as
`all-enabled` leaves it, or nvidia-smi failing) fails it, since nothing could prove it.
With no MIG device on a GPU that `nvidia-smi -L` did list, the result is `unproven`
(GateResult.unproven): the machine is not shown broken, its layout has nothing to run on,
so the repair turn records no failed repair (gpu_repairs.py); `nvidia-smi -L` failing
stays a failed proof (the driver could not answer).

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

import nvidia
import validation

from charms.gpu_k8s.v0.system import Host

# The level-2 tests that exercise each GPU (module docstring); the software test does not.
EXERCISED = ("memory", "pcie")
# The Skips a healthy GPU gets, per test: the memory plugin's texts (NVIDIA/DCGM @72fa3fe,
# DCGM 4.6.0, dcgmlib/dcgm_errors.h DCGM_FR_ECC_DISABLED_MSG "Skipping test %s because ECC
# is not enabled on GPU %u", filled with "Memory" by nvvs/plugin_src/memory/memory.cpp, and
# DCGM_FR_ECC_UNSUPPORTED_MSG).
HEALTHY_SKIPS = {
    "memory": re.compile(
        r"Skipping test Memory because ECC is not enabled on GPU \d+"
        r"|ECC Memory is not turned on or is unsupported\. Skipping test\."
    ),
}

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
# prints (`--query-gpu=name`, NVML's nvmlDeviceGetName), for the NVLink models only.
# nccl-tests doc/PERFORMANCE.md: busbw reflects "the speed of the inter-GPU communication"
# and can be compared "with the hardware peak bandwidth, independently of the number of
# ranks used"; its maintainer: busbw "should reach the peak bandwidth of your platform ...
# for large enough sizes" (NVIDIA/nccl-tests#40). The floor is a quarter of the NVLink's
# per-direction datasheet peak: an NVLink node that measures under it at 256 MiB runs its
# all-reduce over PCIe or a broken link (NVLink 3 at a quarter is 75 GB/s, above any
# PCIe Gen4 x16 link's 32 GB/s). NVIDIA publishes no acceptance value; the quarter is ours.
# PCIe-only models (A10G, L4, L40S, T4, the A100/H100/H200 PCIe and NVL cards) have no
# datasheet floor: their all-reduce runs through the host's PCIe root complex and, without
# GPU peer-to-peer (IOMMU on, as in many VMs), through CPU memory, so a healthy node
# measures what its host lets it. On two RTX 2080 Ti without P2P, PCIe Gen3 x16: 4.00 GB/s
# (tests/fixtures/gpu/nccl, a public record); 8x A100 80GB PCIe: 8-21 GB/s
# (NVIDIA/nccl#841); a node without P2P averaging ~6 GB/s (NVIDIA/nccl-tests#115). A
# datasheet quarter (8 GB/s for Gen4) fails such healthy nodes, so these are judged
# against this node's own baseline only (`BASELINE`), as are models not named here.
# Peaks (bidirectional datasheet figures halved for one direction): V100 SXM2 datasheet
# (NVLink 2: 300 GB/s), A100 datasheet (SXM: NVLink 3 600 GB/s), H100 datasheet (SXM:
# NVLink 4 900 GB/s), H200 datasheet (SXM: NVLink 900 GB/s), HGX B200 datasheet (NVLink 5:
# 1.8 TB/s per GPU).
# Names exactly as the driver prints them: NVIDIA/open-gpu-kernel-modules README.md
# "Compatible GPUs" (595.45.04: "NVIDIA A100-SXM4-40GB" 20B0, "NVIDIA A100-SXM4-80GB"
# 20B2, "NVIDIA H100 80GB HBM3" 2330, "NVIDIA H200" 2335, "NVIDIA B200" 2901); Volta is not
# in that table (the open modules start at Turing): "Tesla V100-SXM2-16GB" and "-32GB" as
# nvidia-smi and DCGM's modelName label print them (tests/fixtures/gpu/h100-sxm5-vm is our
# own record of "NVIDIA H100 80GB HBM3"). AWS: p3 V100 SXM2 16GB, p3dn V100 SXM2 32GB, p4d
# A100-SXM4-40GB, p4de A100-SXM4-80GB, p5 H100 80GB HBM3, p5e/p5en H200, p6-b200 B200. No
# prefix or substring match, which judged an "NVIDIA H200 NVL" (PCIe) against the H200's
# NVLink.
FLOORS: dict[str, tuple[float, str]] = {
    "Tesla V100-SXM2-16GB": (37.5, "V100 SXM2 datasheet: NVLink 2, 150 GB/s per direction"),
    "Tesla V100-SXM2-32GB": (37.5, "V100 SXM2 datasheet: NVLink 2, 150 GB/s per direction"),
    "NVIDIA A100-SXM4-40GB": (75.0, "A100 datasheet: NVLink 3, 300 GB/s per direction"),
    "NVIDIA A100-SXM4-80GB": (75.0, "A100 datasheet: NVLink 3, 300 GB/s per direction"),
    "NVIDIA H100 80GB HBM3": (112.0, "H100 datasheet: NVLink 4, 450 GB/s per direction"),
    "NVIDIA H200": (112.0, "H200 datasheet: NVLink 4, 450 GB/s per direction"),
    "NVIDIA B200": (225.0, "HGX B200 datasheet: NVLink 5, 900 GB/s per direction"),
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

# The CUDA check on a GPU in MIG mode with no MIG device listed: no CUDA program can run
# there, and DCGM's diagnostic refuses MIG (`MIG_DCGM`), so nothing proves it: a failure.
MIG_BARE = (
    "nothing could prove GPU {gpus}: MIG mode, and `nvidia-smi -L` lists no MIG device on "
    "it (none made, as `all-enabled` leaves it, or nvidia-smi failed), so no CUDA program "
    "can run there, and DCGM's diagnostic refuses MIG; give it a MIG layout with devices "
    "(mig-profile) or turn MIG off, then run repair-gpu"
)
# DCGM's diagnostic under MIG (see the module docstring, check 2).
MIG_DCGM = (
    "not run: MIG mode (DCGM's diagnostic refuses a MIG GPU unless it is the node's only GPU "
    "with one instance over all of it: NVIDIA/DCGM NvidiaValidationSuite.cpp "
    "BuildCommonGpusList); vectorAdd on each MIG device is the proof"
)
# The all-reduce check under MIG (see the module docstring, check 3).
MIG_NCCL = (
    "not run: MIG mode (CUDA enumerates one MIG device per process, and MIG devices have "
    "no GPU-to-GPU P2P or NVLink)"
)

# This node's own all-reduce baselines: the highest bus bandwidth a passing gate measured
# on it, one record per GPU model, GPU count and NCCL image ({"baselines": [{"model",
# "gpus", "image", "busbw", "bytes", "recorded"}, ...]}), so a gate on 7 GPUs (one lost)
# leaves the 8-GPU record alone, and a new NCCL image (a charm upgrade: another NCCL, other
# algorithms) starts its own. The first form, one record without "image", is read and kept
# but judges no image. Deleting the file clears them all (docs/how-to/gpu-day-2.md).
# Judged against it from the next gate on: at least BASELINE_SHARE of it. Recorded by the
# gate itself (validate-gpu runs no all-reduce), so the first gate after a repair, on a
# node that never passed one, measures without a baseline to judge by, and an NVLink
# model still has its floor. The highest, not the first: a first measurement taken on a
# link already degraded would otherwise lower the bar for good. Half: NCCL's tuning and
# the host's memory traffic move a healthy node's busbw by tens of percent, not by half
# (NVIDIA/nccl#841: 8-21 GB/s on one A100 PCIe node between BIOS settings); a GPU link
# that trained at x8 instead of x16, or lost P2P, halves it. A new machine (a new unit) or
# another GPU count, model or NCCL image starts without a baseline.
BASELINE = "/var/lib/gpu-k8s/nccl-baseline.json"
BASELINE_SHARE = 0.5

# A row of nccl-tests' table (src/util.cu: "%12li  %12li  %8s  %6s  %6s" for size, count,
# type, redop, root, then time, algbw, busbw, #wrong out of place, and the same in place).
_ROW = re.compile(
    r"^\s*(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+\S+\s+\S+\s+([0-9.eE+-]+)\s", re.MULTILINE
)
# What nccl-tests prints when it finds fewer GPUs than `-g` asks (src/util.cu, v2.17.2
# on), before its TESTCHECK line; otherwise the output's last line says why it stopped.
_TOO_FEW = re.compile(r"Invalid number of GPUs: .*")
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
    skipped: bool = False  # did not run, and why is in `detail` (not a failure)
    unproven: bool = False  # failed as nothing could run it (`all-enabled`): no failed repair

    @property
    def outcome(self) -> str:
        """`passed`, `FAILED` or `skipped`."""
        return "skipped" if self.skipped else "passed" if self.passed else "FAILED"


@dataclasses.dataclass(frozen=True)
class GateResult:
    """The gate's outcome: every check that ran, in order."""

    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        """Every check passed (or said why it did not run), and the CUDA check ran."""
        ran = any(c.name == "cuda" and c.passed and not c.skipped for c in self.checks)
        return ran and all(c.passed for c in self.checks)

    @property
    def unproven(self) -> bool:
        """Not passed only because a GPU has no MIG device to prove it on (`MIG_BARE`)."""
        return not self.passed and all(c.passed or c.unproven for c in self.checks)

    def summary(self) -> str:
        """One line: each check's name and its finding."""
        return "; ".join(f"{c.name} {c.outcome}: {c.detail}" for c in self.checks)

    def record(self) -> dict:
        """What the watcher's state file keeps of it (gpu_health.record_repair)."""
        return {
            "passed": self.passed,
            **{c.name: f"{c.outcome.lower()}: {c.detail}" for c in self.checks},
        }


class PullError(validation.ValidationError):
    """An image of the gate could not be pulled: the gate did not run (not a failed repair)."""


def images_for(
    cuda_image: str, dcgm_image: str, nccl_image: str, count: int, *, mig: bool = False
) -> list[str]:
    """The images the gate runs on `count` GPUs (NCCL's with several; only CUDA's in MIG)."""
    if mig:
        return [cuda_image]
    return [cuda_image, dcgm_image] + ([nccl_image] if count > 1 else [])


@dataclasses.dataclass(frozen=True)
class Targets:
    """What the CUDA check runs on: NVIDIA_VISIBLE_DEVICES values, and GPUs it cannot use.

    `mig`: some GPU is in MIG mode. `bare`: indexes of GPUs in MIG mode without a MIG
    device, where no CUDA program can run (MIG user guide: "Without creating GPU instances
    (and corresponding compute instances), CUDA workloads cannot be run on the GPU").
    `listed`: `nvidia-smi -L` answered, so `bare` is the layout (`all-enabled`), not a
    driver that could not list its devices (a failed proof).
    """

    devices: tuple[str, ...]
    mig: bool = False
    bare: tuple[int, ...] = ()
    listed: bool = True


def targets(host: Host, count: int) -> Targets:
    """Each GPU by index, or its MIG devices by UUID when it is in MIG mode (nvidia-smi)."""
    modes = {g.index: g.mig_mode for g in nvidia.read_smi(host).gpus}
    if "Enabled" not in modes.values():
        return Targets(tuple(str(i) for i in range(count)))
    listed = nvidia.list_mig_devices(host)
    found = listed or {}
    devices: list[str] = []
    bare: list[int] = []
    for index in range(count):
        if modes.get(index) != "Enabled":
            devices.append(str(index))
        elif found.get(index):
            devices += [d["uuid"] for d in found[index]]
        else:
            bare.append(index)
    return Targets(tuple(devices), mig=True, bare=tuple(bare), listed=listed is not None)


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


def parse_dcgm(text: str, count: int, memory: frozenset[int] = frozenset()) -> Check:
    """`dcgmi diag -j`'s JSON: passed when no GPU failed and each passed an exercising test.

    Only `EXERCISED` tests prove a GPU; a Skip of one fails unless `HEALTHY_SKIPS` names
    its reason, and then it is named (module docstring). Each GPU of `memory` (quarantined
    for a memory fault) must pass the memory test. A failed test's `test_summary` warnings
    that no GPU's result quotes (errors tied to no GPU) are quoted.
    """
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
    failures, said, skips, tests = [], {}, [], 0
    for test in (t for c in diag.get("test_categories") or [] for t in c.get("tests") or []):
        tests += 1
        failures += _test_failures(test, said, skips)
    seen = {gpu for _, gpu in said}
    proven = {
        gpu for (name, gpu), status in said.items() if status == "Pass" and name in EXERCISED
    }
    failures += [
        f"GPU {gpu}: no test that exercises it ({', '.join(EXERCISED)}) passed it"
        for gpu in sorted(seen - proven, key=str)
    ]
    failures += [
        f"GPU {gpu}: quarantined for a memory fault, and the memory test did not pass it"
        for gpu in sorted(memory)
        if said.get(("memory", gpu)) not in ("Pass", "Fail")  # a Fail is quoted already
    ]
    skipped = f" ({'; '.join(skips)})" if skips else ""
    if failures:
        return Check(
            "dcgm", False, f"dcgmi diag -r {DCGM_LEVEL}: " + "; ".join(failures) + skipped
        )
    if len(seen) < count:
        return Check(
            "dcgm", False, f"dcgmi diag -r {DCGM_LEVEL} tested {len(seen)} of {count} GPUs"
        )
    return Check(
        "dcgm", True, f"dcgmi diag -r {DCGM_LEVEL}: {tests} tests on {count} GPUs{skipped}"
    )


def _warnings(entry: dict) -> list[str]:
    """The `warnings[].warning` texts of one DCGM result or test summary."""
    said = [w.get("warning") for w in entry.get("warnings") or [] if isinstance(w, dict)]
    return [w for w in said if isinstance(w, str) and w]


def _test_failures(test: dict, said: dict, skips: list[str]) -> list[str]:
    """What one DCGM test says against the GPUs.

    Records each GPU's status in `said` by (test, GPU), and each Skip a healthy GPU gets
    (`HEALTHY_SKIPS`; any Skip of a test that exercises nothing), with the plugin's reason
    (its `info`), in `skips`. Returns each GPU's failure with its own warning and each
    other Skip of an exercising test with its reason; GPUs failed with no warning of
    their own, and a failed test summary, with the summary's warnings no GPU quoted (or
    "no detail").
    """
    name, failures, quoted, bare = test.get("name"), [], set(), []
    for result in test.get("results") or []:
        if result.get("entity_group") != "GPU":
            continue
        gpu, status, warned = result.get("entity_id"), result.get("status"), _warnings(result)
        said[(name, gpu)] = status
        quoted.update(warned)
        if status == "Skip":
            info = [i for i in result.get("info") or [] if isinstance(i, str) and i]
            why = (info or warned or ["no reason given"])[0]
            healthy = HEALTHY_SKIPS.get(str(name))
            if name not in EXERCISED or (healthy and any(healthy.fullmatch(i) for i in info)):
                skips.append(f"GPU {gpu} {name} skipped: {why}")
            else:
                failures.append(f"GPU {gpu} {name} skipped, so not tested: {why}")
        elif status != "Pass" and warned:
            failures.append(f"GPU {gpu} {name}: {warned[0]}")
        elif status != "Pass":
            bare.append(gpu)
    summary = test.get("test_summary") or {}
    extra = [w for w in _warnings(summary) if w not in quoted]
    if bare or (summary.get("status") == "Fail" and (extra or not failures)):
        on = f" on GPU{'s' if len(bare) > 1 else ''} {', '.join(map(str, bare))}" if bare else ""
        failures.append(f"{name} failed{on}: {'; '.join(extra) or 'no detail'}")
    return failures


def largest(text: str) -> tuple[int, float] | None:
    """(bytes, out-of-place busbw GB/s) of the largest size in nccl-tests' table, or None.

    Not `# Avg bus bandwidth`: it averages every size, and small sizes are latency-bound
    (nccl-tests' maintainer on NVIDIA/nccl-tests#115: the average "has no meaning" over
    `-b 8 -e 1G`; what matters is "the value to which the BusBW is converging as sizes
    increase").
    """
    rows = [(int(m.group(1)), float(m.group(2))) for m in _ROW.finditer(text)]
    return max(rows, key=lambda row: row[0]) if rows else None


def _baselines(host: Host) -> list[dict]:
    """Every record in BASELINE (the first form's one record too); [] when unreadable."""
    try:
        found = json.loads(host.read(BASELINE) or "null")
    except ValueError:
        return []
    if isinstance(found, dict) and "model" in found:  # the first form: one record
        found = {"baselines": [found]}
    records = found.get("baselines") if isinstance(found, dict) else None
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def _key(record: dict) -> tuple:
    return record.get("model"), record.get("gpus"), record.get("image")


def load_baseline(host: Host, count: int, model: str, image: str) -> dict | None:
    """This node's recorded all-reduce baseline for `count` GPUs of `model` under `image`."""
    for found in _baselines(host):
        if _key(found) == (model, count, image) and isinstance(found.get("busbw"), (int, float)):
            return found
    return None


def parse_nccl(text: str, count: int, model: str, baseline: dict | None = None) -> Check:
    """all_reduce_perf's table: no wrong values; the largest size's busbw judged.

    Against the model's NVLink floor (`FLOORS`) and, when one is recorded, BASELINE_SHARE
    of this node's `baseline` (`load_baseline`); measured, not judged, without either.
    """
    wrong = _OUT_OF_BOUNDS.search(text)
    measured = largest(text)
    if measured is None or wrong is None:
        too_few = _TOO_FEW.search(text)
        tail = text.strip().splitlines()[-1:] or ["no output"]
        said = too_few.group(0) if too_few else tail[0]
        return Check("nccl", False, f"{NCCL_PROGRAM} did not finish: {said[:200]}")
    if int(wrong.group(1)):
        return Check("nccl", False, f"{NCCL_PROGRAM}: {wrong.group(1)} wrong values")
    size, busbw = measured
    said = f"all-reduce across {count} GPUs: bus bandwidth {busbw:g} GB/s at {size >> 20} MiB"
    floor = floor_for(model)
    if floor is not None and busbw < floor[0]:
        return Check(
            "nccl", False, f"{said}, under the floor {floor[0]:g} GB/s for {model} ({floor[1]})"
        )
    if baseline is not None and busbw < BASELINE_SHARE * baseline["busbw"]:
        return Check(
            "nccl",
            False,
            f"{said}, under {BASELINE_SHARE:.0%} of this node's baseline "
            f"{baseline['busbw']:g} GB/s (recorded {baseline.get('recorded', '?')})",
        )
    judged = [f"floor {floor[0]:g} GB/s for {model}"] if floor else []
    if baseline is not None:
        judged.append(f"{BASELINE_SHARE:.0%} of this node's baseline {baseline['busbw']:g} GB/s")
    if not judged:
        return Check(
            "nccl", True, f"{said} (no floor for {model} and no baseline yet: not judged)"
        )
    return Check("nccl", True, f"{said} ({' and '.join(judged)})")


def record_baseline(
    host: Host,
    text: str,
    count: int,
    model: str,
    image: str,
    baseline: dict | None,
    now: str,
) -> None:
    """Keep a passing all-reduce as its key's baseline when it is the highest yet.

    The other keys' records stay as they are.
    """
    measured = largest(text)
    if measured is None or (baseline is not None and measured[1] <= baseline["busbw"]):
        return
    body = {"model": model, "gpus": count, "image": image, "bytes": measured[0]}
    mine = {**body, "busbw": measured[1], "recorded": now}
    kept = [r for r in _baselines(host) if _key(r) != _key(mine)]
    host.write(BASELINE, json.dumps({"baselines": [*kept, mine]}, sort_keys=True))


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
    wall_clock: Callable[[], float] = time.time,
    memory: frozenset[int] = frozenset(),
) -> GateResult:
    """Run the gate on this machine's `count` GPUs of `model`; stops at the first failure.

    Its images are pulled first, within `pull_timeout` together (`pull`); then `timeout`
    bounds each container's run. DCGM's diagnostic runs inside `alone()`, which clears the
    node of other DCGM host engines (the exporter's: one per node, NVIDIA/DCGM#108 "not an
    officially supported configuration ... may lead to deadlocks in the driver"; the caller
    pauses the GPU clients, gpu_repair.gpu_clients_paused) for that check only. A passing
    all-reduce may become this node's baseline (`record_baseline`, stamped `wall_clock`).
    The GPUs of `memory` (by index: quarantined for a memory fault) must pass DCGM's
    memory test (`parse_dcgm`).

    Raises:
        PullError: an image cannot be pulled (the gate did not run).
        validation.CtrMissingError: ctr is not there (the gate did not run, or stopped).
    """
    if count < 1:  # no GPU to prove: never a pass
        return GateResult((Check("cuda", False, "no NVIDIA GPU found on this machine"),))
    on = targets(host, count)
    pull(
        host,
        images_for(cuda_image, dcgm_image, nccl_image, count, mig=on.mig),
        timeout=pull_timeout,
        clock=clock,
        progress=progress,
    )
    checks = [_cuda(host, on, cuda_image, count, timeout, clock, progress)]
    if not checks[-1].passed:
        return GateResult(tuple(checks))
    if on.mig:
        checks.append(Check("dcgm", True, MIG_DCGM, skipped=True))
        if count > 1:
            checks.append(Check("nccl", True, MIG_NCCL, skipped=True))
        return GateResult(tuple(checks))
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
    checks.append(parse_dcgm(output, count, memory))
    if not checks[-1].passed or count < 2:
        return GateResult(tuple(checks))
    checks.append(_nccl(host, nccl_image, count, model, timeout, clock, progress, wall_clock))
    return GateResult(tuple(checks))


def _cuda(
    host: Host,
    on: Targets,
    image: str,
    count: int,
    timeout: float,
    clock: Callable[[], float],
    progress: Callable[[str], None],
) -> Check:
    """The CUDA sample on each of `on`'s devices (each GPU, or each MIG device by UUID).

    Fails before running anything when a GPU has nothing it could run on (`on.bare`).
    """
    if on.bare:
        said = MIG_BARE.format(gpus=", ".join(map(str, on.bare)))
        return Check("cuda", False, said, unproven=on.listed)
    for device in on.devices:
        outcome = validation.validate(
            host,
            image,
            timeout=timeout,
            clock=clock,
            progress=progress,
            devices=device,
            pull=False,
        )
        if not outcome.passed:
            where = device if device.startswith("MIG-") else f"GPU {device}"
            return Check("cuda", False, f"{where}: {outcome.summary}")
    if not on.mig:
        return Check("cuda", True, f"vectorAdd passed on each of {count} GPUs")
    migs = sum(d.startswith("MIG-") for d in on.devices)
    said = f"vectorAdd passed on each of {len(on.devices)} devices ({migs} MIG devices"
    said += f", {len(on.devices) - migs} whole GPUs)" if len(on.devices) > migs else ")"
    return Check("cuda", True, said)


def _nccl(
    host: Host,
    image: str,
    count: int,
    model: str,
    timeout: float,
    clock: Callable[[], float],
    progress: Callable[[str], None],
    wall_clock: Callable[[], float],
) -> Check:
    """The all-reduce across the `count` GPUs, judged (`parse_nccl`); a pass may be kept."""
    script = f"{shlex.join((NCCL_PROGRAM, *NCCL_ARGS, '-g', str(count)))} 2>&1; exit 0"
    code, output = validation.run_tool(
        host,
        image,
        ("sh", "-c", script),
        timeout=timeout,
        clock=clock,
        progress=progress,
        pull=False,
    )
    if code == -1:
        return Check("nccl", False, f"{NCCL_PROGRAM} timed out after {timeout:.0f}s")
    baseline = load_baseline(host, count, model, image)
    check = parse_nccl(output, count, model, baseline)
    if check.passed:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall_clock()))
        record_baseline(host, output, count, model, image, baseline, now)
    return check
