"""The repair gate's readings (gpu_gate.py) and the repair choice (gpu_repair.py).

DCGM's and nccl-tests' outputs come from the fakes that print them in their documented
forms (fakes.containerd_ctr names the sources); each refusal has its test.
"""

from __future__ import annotations

import json
from pathlib import Path

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


# DCGM 4.6.0's messages (dcgmlib/dcgm_errors.h DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR_MSG,
# DCGM_FR_ECC_DISABLED_MSG filled with "Memory" as nvvs/plugin_src/memory/memory.cpp does,
# DCGM_FR_ECC_UNSUPPORTED_MSG; memory.cpp's free-memory skip; Pcie.cpp's aborted run)
FABRIC = "Fabric Manager (Cluster UUID: 5f1c, Clique ID: 0, Health Mask: 0x2): training failed."
NO_ECC = "Skipping test Memory because ECC is not enabled on GPU 1"
ECC_UNSUPPORTED = "ECC Memory is not turned on or is unsupported. Skipping test."
HELD = "Only 10 mb of memory is free, but we need to allocate 64 mb to pass this test. Skipping"


def test_an_error_tied_to_no_gpu_fails_with_dcgms_reason_from_the_test_summary(ctr):
    """review44b G4: NVVS fails every GPU and quotes the error only in `test_summary`.

    The gate said "GPU 0 software: no detail" for each GPU, the reason an operator needs
    after an NVSwitch repair left out.
    """
    ctr.diag_unattributed = {"software": FABRIC}
    check = gpu_gate.parse_dcgm(diag(ctr), 4)
    assert not check.passed
    assert check.detail == f"dcgmi diag -r 2: software failed on GPUs 0, 1, 2, 3: {FABRIC}"


def test_a_gpu_failure_is_quoted_once_though_the_summary_repeats_it(ctr):
    ctr.diag_failures = {2: ("software", "Pending page retirements found on GPU 2")}
    ctr.diag_unattributed = {"software": "Found driver on the denylist: nouveau"}
    check = gpu_gate.parse_dcgm(diag(ctr), 4)
    assert check.detail == (
        "dcgmi diag -r 2: GPU 2 software: Pending page retirements found on GPU 2; software "
        "failed on GPUs 0, 1, 3: Found driver on the denylist: nouveau"
    )


@pytest.mark.parametrize("why", [NO_ECC, ECC_UNSUPPORTED])
def test_a_memory_test_skipped_for_ecc_off_is_named_and_fails_nothing(ctr, why):
    """DCGM's memory test skips a GPU with ECC off or unsupported: a healthy GPU.

    DCGM's own result stays Pass (nvvs Plugin::GetOverallResult); the GPU passed pcie, so
    the check passes and names the skip: failing it would hold a GPU with ECC off out of
    service for good.
    """
    ctr.diag_skips = {(1, "memory"): why}
    text = diag(ctr)
    memory = json.loads(text)["DCGM Diagnostic"]["test_categories"][2]["tests"][0]
    assert memory["test_summary"] == {"status": "Pass"}
    check = gpu_gate.parse_dcgm(text, 4)
    assert (check.passed, check.detail) == (
        True,
        f"dcgmi diag -r 2: 3 tests on 4 GPUs (GPU 1 memory skipped: {why})",
    )


@pytest.mark.parametrize(
    ("test", "why"),
    [
        ("memory", HELD),  # memory a stuck context still holds, right after a fault
        ("pcie", "Test aborted"),  # an aborted run marks its GPUs Skip
        ("memory", f"({NO_ECC})"),  # the healthy text, but not all of it
    ],
)
def test_another_skip_of_a_test_that_exercises_the_gpu_fails(ctr, test, why):
    """rereview44c R1: only ECC off excuses a skip; any other says the GPU was not tested."""
    ctr.diag_skips = {(1, test): why}
    check = gpu_gate.parse_dcgm(diag(ctr), 4)
    assert (check.passed, check.detail) == (
        False,
        f"dcgmi diag -r 2: GPU 1 {test} skipped, so not tested: {why}",
    )


def test_a_gpu_only_the_software_test_passed_is_not_proven(ctr):
    """rereview44c R1: the software test passes every GPU of a healthy node at once.

    Counted as a pass, it readmitted a GPU that neither pcie nor memory tested.
    """
    ctr.diag_skips = {(1, "pcie"): "Test aborted", (1, "memory"): NO_ECC}
    found = json.loads(diag(ctr))
    software = found["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    assert {row["status"] for row in software["results"]} == {"Pass"}
    check = gpu_gate.parse_dcgm(json.dumps(found), 4)
    assert not check.passed
    assert check.detail == (
        "dcgmi diag -r 2: GPU 1 pcie skipped, so not tested: Test aborted; GPU 1: no test that "
        f"exercises it (memory, pcie) passed it (GPU 1 memory skipped: {NO_ECC})"
    )


def test_the_fake_refuses_a_software_skip_dcgm_never_prints(ctr):
    ctr.diag_skips = {(1, "software"): NO_ECC}
    with pytest.raises(AssertionError, match="software test skips no GPU"):
        diag(ctr)


@pytest.mark.parametrize(
    ("skips", "failures", "passed"),
    [
        ({}, {}, True),
        ({(1, "memory"): NO_ECC}, {}, False),  # ECC off excuses no memory fault
        ({(2, "memory"): NO_ECC}, {}, True),  # another GPU's skip
        ({}, {1: ("memory", "DBE found on GPU 1")}, False),
    ],
)
def test_a_gpu_quarantined_for_a_memory_fault_must_pass_the_memory_test(
    ctr, skips, failures, passed
):
    ctr.diag_skips, ctr.diag_failures = skips, failures
    check = gpu_gate.parse_dcgm(diag(ctr), 4, memory=frozenset({1}))
    assert check.passed is passed
    if skips.get((1, "memory")):
        assert check.detail.startswith(
            "dcgmi diag -r 2: GPU 1: quarantined for a memory fault, and the memory test did "
            "not pass it ("
        )
    if failures:  # said once
        assert check.detail == "dcgmi diag -r 2: GPU 1 memory: DBE found on GPU 1"


def test_a_failed_summary_fails_even_when_every_gpu_result_passed(ctr):
    """Whatever the GPU rows say, a test_summary of Fail is a failed diagnostic."""
    found = json.loads(diag(ctr))
    memory = found["DCGM Diagnostic"]["test_categories"][2]["tests"][0]
    memory["test_summary"] = {"status": "Fail", "warnings": ["not an object", {"warning": 3}]}
    check = gpu_gate.parse_dcgm(json.dumps(found), 4)
    assert (check.passed, check.detail) == (False, "dcgmi diag -r 2: memory failed: no detail")


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


@pytest.mark.parametrize(
    ("gpus", "layout", "refusal"),
    [
        (4, {0: ["1g.10gb"] * 7}, "GPU 0's MIG configuration is incompatible with the diagnostic"),
        (4, {0: ["7g.80gb"]}, "CUDA does not support enumerating GPUs with MIG mode enabled"),
        (1, {}, "MIG is enabled, but no compute instances are configured"),
    ],
)
def test_under_mig_the_diagnostic_refuses_to_run_and_fails(ctr, gpus, layout, refusal):
    ctr.driver.gpus, ctr.driver.mig_devices, ctr.driver.mig_enabled = gpus, layout, True
    check = gpu_gate.parse_dcgm(diag(ctr), gpus)
    assert not check.passed
    assert check.detail.startswith("dcgmi diag could not run: Error: ") and refusal in check.detail


def test_the_diagnostic_runs_on_a_lone_gpu_with_one_instance_over_all_of_it(ctr):
    ctr.driver.gpus, ctr.driver.mig_devices = 1, {0: ["7g.80gb"]}
    assert gpu_gate.parse_dcgm(diag(ctr), 1).passed


RECORDED = (
    Path(__file__).parents[3] / "fixtures/gpu/nccl/all_reduce_perf-2x-rtx2080ti-pcie-no-p2p.txt"
)
BASELINE = {"model": "NVIDIA A10G", "gpus": 4, "busbw": 24.5, "recorded": "2026-11-02T10:00:00Z"}


def test_the_largest_size_is_judged_not_the_average_small_sizes_drag_down():
    text = RECORDED.read_text()  # a public record (see the fixture's README.md)
    assert "# Avg bus bandwidth    : 2.05774" in text
    assert gpu_gate.largest(text) == (1 << 30, 4.0)
    # a node that measured 6 GB/s at 1 GiB before: 4.0 is above half of it
    check = gpu_gate.parse_nccl(text, 2, "NVIDIA L4", {**BASELINE, "busbw": 6.0})
    assert check == gpu_gate.Check(
        "nccl",
        True,
        "all-reduce across 2 GPUs: bus bandwidth 4 GB/s at 1024 MiB (50% of this node's "
        "baseline 6 GB/s)",
    )


def test_under_half_of_the_nodes_baseline_fails(ctr):
    assert gpu_gate.parse_nccl(all_reduce(ctr), 4, "NVIDIA A10G", BASELINE).passed
    ctr.busbw = 12.2  # a GPU link trained at x8, or P2P lost
    check = gpu_gate.parse_nccl(all_reduce(ctr), 4, "NVIDIA A10G", BASELINE)
    assert check == gpu_gate.Check(
        "nccl",
        False,
        "all-reduce across 4 GPUs: bus bandwidth 12.2 GB/s at 256 MiB, under 50% of this "
        "node's baseline 24.5 GB/s (recorded 2026-11-02T10:00:00Z)",
    )


def test_an_nvlink_model_is_judged_by_its_floor_even_without_a_baseline(ctr):
    ctr.busbw = 111.9  # an H100 SXM node whose all-reduce runs over PCIe
    check = gpu_gate.parse_nccl(all_reduce(ctr), 4, "NVIDIA H100 80GB HBM3")
    assert not check.passed and check.detail.endswith(
        "under the floor 112 GB/s for NVIDIA H100 80GB HBM3 (H100 datasheet: NVLink 4, "
        "450 GB/s per direction)"
    )
    ctr.busbw = 400.0
    baseline = {**BASELINE, "model": "NVIDIA H100 80GB HBM3", "busbw": 450.0}
    check = gpu_gate.parse_nccl(all_reduce(ctr), 4, "NVIDIA H100 80GB HBM3", baseline)
    assert check.passed and check.detail.endswith(
        "(floor 112 GB/s for NVIDIA H100 80GB HBM3 and 50% of this node's baseline 450 GB/s)"
    )


def test_wrong_values_fail_whatever_the_bandwidth(ctr):
    ctr.wrong_values = 3
    check = gpu_gate.parse_nccl(all_reduce(ctr), 4, "NVIDIA H100 80GB HBM3")
    assert (check.passed, check.detail) == (False, "all_reduce_perf_mpi: 3 wrong values")


def test_an_all_reduce_that_did_not_finish_fails(ctr):
    check = gpu_gate.parse_nccl(all_reduce(ctr, gpus=8), 8, "NVIDIA A10G")
    assert check == gpu_gate.Check(
        "nccl",
        False,
        "all_reduce_perf_mpi did not finish: Invalid number of GPUs: 8 requested but only 4 "
        "were found.",
    )
    check = gpu_gate.parse_nccl("NCCL WARN Cuda failure 'out of memory'\n", 8, "NVIDIA A10G")
    assert (
        check.detail
        == "all_reduce_perf_mpi did not finish: NCCL WARN Cuda failure 'out of memory'"
    )


def test_under_mig_cuda_finds_one_device_so_an_all_reduce_across_gpus_cannot_run(ctr):
    ctr.driver.mig_devices = {0: ["3g.40gb", "3g.40gb"], 1: ["3g.40gb", "3g.40gb"]}
    assert "requested but only 1 were found" in all_reduce(ctr, gpus=4)
    assert not gpu_gate.parse_nccl(all_reduce(ctr, gpus=4), 4, "NVIDIA A10G").passed


@pytest.mark.parametrize("model", ["NVIDIA RTX PRO 6000", "NVIDIA A10G", "Tesla T4", "NVIDIA L4"])
def test_a_model_without_a_floor_and_no_baseline_is_measured_not_judged(ctr, model):
    ctr.busbw = 4.0  # under the datasheet quarter once used for PCIe models
    check = gpu_gate.parse_nccl(all_reduce(ctr), 4, model)
    assert check.passed and check.detail.endswith(
        f"4 GB/s at 256 MiB (no floor for {model} and no baseline yet: not judged)"
    )


@pytest.mark.parametrize(
    ("model", "floor"),
    [("NVIDIA H100 80GB HBM3", 112.0), ("NVIDIA A100-SXM4-80GB", 75.0), ("NVIDIA B200", 225.0)],
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
        # PCIe-only: judged against the node's baseline (gpu_gate.FLOORS)
        "NVIDIA A100 80GB PCIe",  # "A10" is a substring of it
        "NVIDIA H200 NVL",  # a PCIe card, once held to the H200 SXM's NVLink floor
        "NVIDIA H100 PCIe",
        "NVIDIA A10G",
        "Tesla T4",
        "",
    ],
)
def test_a_model_not_in_the_table_has_no_floor(model):
    assert gpu_gate.floor_for(model) is None


IMAGE = gpu_gate.NCCL_IMAGE


def test_the_baseline_is_this_nodes_for_its_model_and_count_and_only_rises(ctr):
    host = ctr.machine.host()
    assert gpu_gate.load_baseline(host, 4, "NVIDIA A10G", IMAGE) is None
    ctr.machine.write(gpu_gate.BASELINE, "{not json")
    assert gpu_gate.load_baseline(host, 4, "NVIDIA A10G", IMAGE) is None
    ctr.machine.write(gpu_gate.BASELINE, '{"baselines": [3, {"model": 1}]}')
    assert gpu_gate.load_baseline(host, 4, "NVIDIA A10G", IMAGE) is None
    first = "2026-11-02T10:00:00Z"
    gpu_gate.record_baseline(host, all_reduce(ctr), 4, "NVIDIA A10G", IMAGE, None, first)
    recorded = gpu_gate.load_baseline(host, 4, "NVIDIA A10G", IMAGE)
    assert recorded == {**BASELINE, "image": IMAGE, "bytes": 256 << 20}
    assert gpu_gate.load_baseline(host, 8, "NVIDIA A10G", IMAGE) is None  # another GPU count
    assert gpu_gate.load_baseline(host, 4, "NVIDIA L4", IMAGE) is None  # another model
    ctr.busbw = 20.0  # lower: the baseline stays
    gpu_gate.record_baseline(host, all_reduce(ctr), 4, "NVIDIA A10G", IMAGE, recorded, "later")
    assert gpu_gate.load_baseline(host, 4, "NVIDIA A10G", IMAGE) == recorded
    ctr.busbw = 30.0  # higher: it rises
    gpu_gate.record_baseline(host, all_reduce(ctr), 4, "NVIDIA A10G", IMAGE, recorded, "later")
    assert gpu_gate.load_baseline(host, 4, "NVIDIA A10G", IMAGE)["busbw"] == 30.0


def test_a_gate_on_fewer_gpus_or_another_image_keeps_its_own_record_beside_the_others(ctr):
    host = ctr.machine.host()
    ctr.busbw = 300.0
    gpu_gate.record_baseline(host, all_reduce(ctr), 4, "NVIDIA A10G", IMAGE, None, "t1")
    ctr.busbw = 100.0  # 3 GPUs (one lost): lower, and its own record
    gpu_gate.record_baseline(host, all_reduce(ctr, 3), 3, "NVIDIA A10G", IMAGE, None, "t2")
    ctr.busbw = 50.0  # a new NCCL image starts its own
    gpu_gate.record_baseline(host, all_reduce(ctr), 4, "NVIDIA A10G", "nvcr.io/p:2", None, "t3")
    assert gpu_gate.load_baseline(host, 4, "NVIDIA A10G", IMAGE)["busbw"] == 300.0
    assert gpu_gate.load_baseline(host, 3, "NVIDIA A10G", IMAGE)["busbw"] == 100.0
    assert gpu_gate.load_baseline(host, 4, "NVIDIA A10G", "nvcr.io/p:2")["busbw"] == 50.0
    assert len(json.loads(ctr.machine.read(gpu_gate.BASELINE))["baselines"]) == 3


def test_a_baseline_of_the_first_form_is_read_kept_and_judges_no_image(ctr):
    host = ctr.machine.host()
    ctr.machine.write(gpu_gate.BASELINE, json.dumps(BASELINE))  # one record, no image
    assert gpu_gate.load_baseline(host, 4, "NVIDIA A10G", IMAGE) is None
    gpu_gate.record_baseline(host, all_reduce(ctr), 4, "NVIDIA A10G", IMAGE, None, "t1")
    kept, mine = json.loads(ctr.machine.read(gpu_gate.BASELINE))["baselines"]
    assert kept == BASELINE and mine["image"] == IMAGE


def test_a_skipped_check_is_neither_passed_nor_failed_in_what_is_said_and_kept():
    result = gpu_gate.GateResult(
        (gpu_gate.Check("cuda", True, "ok"), gpu_gate.Check("nccl", True, "not run", skipped=True))
    )
    assert result.passed
    assert result.summary() == "cuda passed: ok; nccl skipped: not run"
    assert result.record() == {"passed": True, "cuda": "passed: ok", "nccl": "skipped: not run"}


@pytest.mark.parametrize(
    "checks",
    [
        (),
        (gpu_gate.Check("cuda", True, "not run", skipped=True),),
        (
            gpu_gate.Check("cuda", True, "not run", skipped=True),
            gpu_gate.Check("dcgm", True, "dcgmi diag -r 2: 3 tests on 8 GPUs"),
        ),
        (gpu_gate.Check("dcgm", True, "not run", skipped=True),),
    ],
)
def test_a_gate_where_the_cuda_check_did_not_run_never_passes(checks):
    assert not gpu_gate.GateResult(checks).passed


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
