"""The repair gate's readings (gpu_gate.py) and the repair choice (gpu_repair.py).

DCGM's and nccl-tests' outputs come from the fakes that print them in their documented
forms (fakes.containerd_ctr names the sources); each refusal has its test.
"""

from __future__ import annotations

import json

import gpu_gate
import gpu_repair
import pytest

from fakes.containerd_ctr import FakeCtr
from fakes.machine import FakeMachine
from fakes.nvidia_driver import FakeDriver

NOW = 1_795_100_000.0


@pytest.fixture
def ctr(tmp_path):
    machine = FakeMachine(tmp_path / "root")
    return FakeCtr(machine, FakeDriver(machine))


def diag(ctr) -> str:
    return ctr._dcgm(list(gpu_gate.DCGM_COMMAND))


def all_reduce(ctr, gpus=4) -> str:
    return ctr._nccl(["sh", "-c", f"all_reduce_perf_mpi -b 8M -e 256M -f 2 -g {gpus} 2>&1"])


def test_a_passing_diagnostic_on_every_gpu_passes(ctr):
    check = gpu_gate.parse_dcgm(diag(ctr), 4)
    assert check == gpu_gate.Check("dcgm", True, "dcgmi diag -r 2: 3 tests on 4 GPUs")


def test_a_failed_gpu_result_fails_with_its_warning(ctr):
    ctr.diag_failures = {2: ("pcie", "PCIe replay count violation on GPU 2")}
    check = gpu_gate.parse_dcgm(diag(ctr), 4)
    assert not check.passed
    assert check.detail == "dcgmi diag -r 2: GPU 2 pcie: PCIe replay count violation on GPU 2"


def test_a_diagnostic_that_could_not_run_fails(ctr):
    ctr.diag_runtime_error = "Unable to connect to host engine"
    check = gpu_gate.parse_dcgm(diag(ctr), 4)
    assert check.detail == "dcgmi diag could not run: Unable to connect to host engine"
    assert not check.passed


def test_a_diagnostic_that_saw_fewer_gpus_fails(ctr):
    check = gpu_gate.parse_dcgm(diag(ctr), 8)
    assert (check.passed, check.detail) == (False, "dcgmi diag -r 2 tested 4 of 8 GPUs")


def test_no_json_fails():
    check = gpu_gate.parse_dcgm("Error: unable to establish a connection to the host engine", 4)
    assert not check.passed and check.detail.startswith("dcgmi diag printed no JSON result")
    assert not gpu_gate.parse_dcgm(json.dumps({"metadata": {}}), 4).passed


def test_all_reduce_at_or_over_the_floor_passes_and_under_it_fails(ctr):
    assert gpu_gate.parse_nccl(all_reduce(ctr), 4, "NVIDIA A10G").passed
    ctr.busbw = 7.9
    check = gpu_gate.parse_nccl(all_reduce(ctr), 4, "NVIDIA A10G")
    assert not check.passed and "under the floor 8 GB/s for NVIDIA A10G" in check.detail


def test_wrong_values_fail_whatever_the_bandwidth(ctr):
    ctr.wrong_values = 3
    check = gpu_gate.parse_nccl(all_reduce(ctr), 4, "NVIDIA H100 80GB HBM3")
    assert (check.passed, check.detail) == (False, "all_reduce_perf_mpi: 3 wrong values")


def test_an_all_reduce_that_did_not_finish_fails(ctr):
    check = gpu_gate.parse_nccl(all_reduce(ctr, gpus=8), 8, "NVIDIA A10G")
    assert not check.passed and check.detail.startswith("all_reduce_perf_mpi did not finish")


def test_a_model_without_a_floor_is_measured_not_judged(ctr):
    check = gpu_gate.parse_nccl(all_reduce(ctr), 4, "NVIDIA RTX PRO 6000")
    assert check.passed and "no floor known for NVIDIA RTX PRO 6000: not judged" in check.detail


@pytest.mark.parametrize(
    ("model", "floor"),
    [("NVIDIA H100 80GB HBM3", 112.0), ("NVIDIA A100-SXM4-80GB", 75.0), ("Tesla T4", 4.0)],
)
def test_floors_are_matched_on_the_model_name(model, floor):
    assert gpu_gate.floor_for(model)[0] == floor


@pytest.mark.parametrize("name", sorted(gpu_gate.FLOORS))
def test_every_name_in_the_table_resolves_to_its_own_entry(name):
    assert gpu_gate.floor_for(name) == gpu_gate.FLOORS[name]
    # drivers before R470 printed the same names without "NVIDIA " (gpu_gate._VENDOR)
    assert gpu_gate.floor_for(name.removeprefix("NVIDIA ")) == gpu_gate.FLOORS[name]


@pytest.mark.parametrize(
    ("model", "floor", "why"),
    [
        # "A10" is a substring of it: was judged as an A10
        ("NVIDIA A100 80GB PCIe", 8.0, "A100 datasheet: PCIe Gen4 x16, 32 GB/s per direction"),
        ("NVIDIA A100-PCIE-40GB", 8.0, "A100 datasheet: PCIe Gen4 x16, 32 GB/s per direction"),
        # a PCIe card: was held to the H200 SXM's NVLink floor, so a healthy node failed
        ("NVIDIA H200 NVL", 16.0, "H200 NVL datasheet: PCIe Gen5 x16, 64 GB/s per direction"),
        ("Tesla V100-SXM2-16GB", 37.5, "V100 SXM2 datasheet: NVLink 2, 150 GB/s per direction"),
        ("Tesla V100-SXM2-32GB", 37.5, "V100 SXM2 datasheet: NVLink 2, 150 GB/s per direction"),
        ("NVIDIA B200", 225.0, "HGX B200 datasheet: NVLink 5, 900 GB/s per direction"),
    ],
)
def test_each_model_is_judged_by_its_own_interconnect(ctr, model, floor, why):
    assert gpu_gate.floor_for(model) == (floor, why)
    ctr.busbw = floor - 0.1
    check = gpu_gate.parse_nccl(all_reduce(ctr), 4, model)
    assert not check.passed and check.detail.endswith(f"for {model} ({why})")


@pytest.mark.parametrize(
    "model",
    [
        "NVIDIA RTX PRO 6000",
        "NVIDIA L40",  # not an L4
        "NVIDIA A10M",  # not an A10
        "NVIDIA GH200 120GB",  # not an H200
        "NVIDIA H100",  # 2339: its interconnect not recorded here
        "NVIDIA A800-SXM4-80GB",
        "A100 SXM4 80GB",  # pci.ids' name, not nvidia-smi's
        "",
    ],
)
def test_a_model_not_in_the_table_has_no_floor(model):
    assert gpu_gate.floor_for(model) is None


def quarantine(action):
    return [{"index": "1", "uuid": "GPU-1", "action": action, "at": "2026-11-19T10:00:00Z"}]


def failed(method, at=NOW - 60):
    return {"time": gpu_repair.iso(at), "method": method, "result": "failed", "gpu": "1"}


@pytest.mark.parametrize(
    ("mode", "action", "history", "expected"),
    [
        ("reboot", "reset-gpu", [], "reset"),
        ("reboot", "reset-gpu", [failed("reset")], "reboot"),  # the reset did not help
        ("reset", "reset-gpu", [failed("reset")], "reset"),  # no reboot allowed
        ("reboot", "reboot", [], "reboot"),
        ("reset", "reboot", [], None),  # a reset cannot repair a GPU off the bus
        ("reboot", "support", [], None),  # the catalog knows no repair
        ("off", "reset-gpu", [], None),
        ("reboot", "reset-gpu", [failed("reset", NOW - 25 * 3600)], "reset"),  # a day ago
    ],
)
def test_the_repair_chosen(mode, action, history, expected):
    assert gpu_repair.choose(quarantine(action), mode, history, NOW) == expected


def test_two_failed_attempts_within_a_day_escalate_one_per_attempt_not_per_gpu():
    two_gpus = [{**failed("reset"), "gpu": "1"}, {**failed("reset"), "gpu": "2"}]
    assert not gpu_repair.escalated(two_gpus, NOW)
    assert gpu_repair.escalated([*two_gpus, failed("reboot", NOW - 30)], NOW)
    assert not gpu_repair.escalated([failed("reset", NOW - 90_000), failed("reboot")], NOW)


def test_no_gpu_never_passes_the_gate():
    result = gpu_gate.run(
        None,  # type: ignore[arg-type]  # asked nothing without a GPU
        cuda_image="c",
        dcgm_image="d",
        nccl_image="n",
        count=0,
        model="",
        timeout=10,
    )
    assert not result.passed
    assert result.summary() == "cuda FAILED: no NVIDIA GPU found on this machine"


def gate(ctr, **kwargs):
    ctr.machine.dpkg.update({"containerd": "1.7", "nvidia-container-toolkit": "1.17"})
    return gpu_gate.run(
        ctr.machine.host(),
        cuda_image="nvcr.io/c:1",
        dcgm_image=gpu_gate.DCGM_IMAGE,
        nccl_image=gpu_gate.NCCL_IMAGE,
        count=4,
        model="NVIDIA A10G",
        timeout=60,
        **kwargs,
    )


def test_the_gate_pulls_its_images_once_first_then_runs_its_checks(ctr):
    gate(ctr)  # (no GPU on this fake machine: the first check fails, after the pulls)
    verbs = [" ".join(line.split()[3:5]) for line in ctr.machine.lines("ctr")]
    assert verbs[:3] == ["images pull"] * 3 and "images pull" not in verbs[3:]
    assert ctr.pulls == ["nvcr.io/c:1", gpu_gate.DCGM_IMAGE, gpu_gate.NCCL_IMAGE]
    assert len(ctr.runs) == 1


def test_an_image_that_cannot_be_pulled_raises_before_any_check_runs(ctr):
    ctr.pull_hangs = 1
    with pytest.raises(gpu_gate.PullError) as e:
        gate(ctr, pull_timeout=900)
    assert str(e.value) == "pulling nvcr.io/c:1 outlived the gate's 900s for its images"
    ctr.registry = {"nvcr.io/c:1"}
    with pytest.raises(gpu_gate.PullError, match="cannot pull nvcr.io/nvidia/cloud-native/dcgm"):
        gate(ctr)
    assert ctr.runs == []
