"""GPU detection over sysfs fixture trees, nvidia-smi parsing, and the reboot decision."""

from pathlib import Path

import gpu
import pytest
from gpu import SmiState

from fakes import sysfs
from fakes.sysfs import Function, build, build_machine, write_pci_ids


@pytest.fixture
def pci_ids(tmp_path) -> Path:
    return write_pci_ids(tmp_path / "pci.ids")


def detect_machine(tmp_path, name, pci_ids=None, *, module_loaded=True):
    root = build_machine(tmp_path / name, name, module_loaded=module_loaded)
    return gpu.detect(root, pci_ids)


# ------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    "name, count, model, mig",
    [
        ("g4dn-t4", 1, "NVIDIA Tesla T4", False),
        ("p3-v100", 4, "NVIDIA Tesla V100 SXM2 16GB", False),
        ("g5-a10g", 4, "NVIDIA A10G", False),
        ("p4d-a100", 8, "NVIDIA A100 SXM4 40GB", True),
        ("p5-h100", 8, "NVIDIA H100 SXM5 80GB", True),
        ("desktop-rtx3080", 1, "NVIDIA GeForce RTX 3080", False),
    ],
)
def test_detect_counts_only_gpu_functions_and_names_them_from_pci_ids(
    tmp_path, pci_ids, name, count, model, mig
):
    inventory = detect_machine(tmp_path, name, pci_ids)

    assert inventory.count == count
    assert inventory.models == {model: count}
    assert inventory.describe() == f"{count}x {model}"
    assert inventory.mig_capable is mig
    assert inventory.module_loaded is True
    assert all(d.kernel_driver == "nvidia" for d in inventory.devices)
    assert inventory.memory_mib is None  # unknown until nvidia-smi reports it


def test_detect_excludes_nvswitch_bridges_on_h100_and_a100(tmp_path, pci_ids):
    h100 = detect_machine(tmp_path, "p5-h100", pci_ids)
    a100 = detect_machine(tmp_path, "p4d-a100", pci_ids)

    assert {d.device_id for d in h100.devices} == {"2330"}
    assert {d.device_id for d in a100.devices} == {"20b0"}
    functions = sysfs.machine("p5-h100")
    nvswitches = [f for f in functions if f.device == 0x22A3]
    assert len(nvswitches) == 4  # in the tree, not counted as GPUs, counted as NVSwitches
    assert not {f.address for f in nvswitches} & {d.pci_address for d in h100.devices}
    assert (h100.nvswitches, a100.nvswitches) == (4, 6)
    assert detect_machine(tmp_path, "g5-a10g", pci_ids).nvswitches == 0


def test_detect_excludes_the_hdmi_audio_function_of_a_consumer_gpu(tmp_path, pci_ids):
    inventory = detect_machine(tmp_path, "desktop-rtx3080", pci_ids)

    assert [d.pci_address for d in inventory.devices] == ["0000:01:00.0"]
    assert inventory.devices[0].subsystem_id == "10de:1467"


def test_detect_records_pci_address_device_and_subsystem(tmp_path, pci_ids):
    inventory = detect_machine(tmp_path, "g5-a10g", pci_ids)

    assert [d.pci_address for d in inventory.devices] == [
        "0000:00:1b.0",
        "0000:00:1c.0",
        "0000:00:1d.0",
        "0000:00:1e.0",
    ]
    assert {(d.device_id, d.subsystem_id) for d in inventory.devices} == {("2237", "10de:152f")}


def test_cpu_only_host_has_no_gpus_even_with_a_non_nvidia_vga_device(tmp_path, pci_ids):
    inventory = detect_machine(tmp_path, "m5-cpu", pci_ids, module_loaded=False)

    assert inventory.count == 0
    assert inventory.model is None
    assert inventory.describe() == ""
    assert inventory.module_loaded is False


def test_module_not_loaded_and_gpu_unbound_before_the_driver_is_installed(tmp_path, pci_ids):
    inventory = detect_machine(tmp_path, "g4dn-t4", pci_ids, module_loaded=False)

    assert inventory.count == 1
    assert inventory.module_loaded is False
    assert inventory.devices[0].kernel_driver is None


def test_model_names_fall_back_to_built_in_table_without_pci_ids(tmp_path):
    missing = tmp_path / "no-such-pci.ids"

    assert detect_machine(tmp_path, "g5-a10g", missing).model == "NVIDIA A10G"
    assert detect_machine(tmp_path, "p5-h100", None).model == "NVIDIA H100 SXM5 80GB"


def test_unknown_device_is_named_by_its_id(tmp_path, pci_ids):
    root = build(tmp_path / "new", [Function("0000:00:1e.0", 0x10DE, 0x2BB1, 0x030200)])

    inventory = gpu.detect(root, pci_ids)

    assert inventory.count == 1
    assert inventory.model == "NVIDIA device 0x2bb1"
    assert inventory.devices[0].subsystem_id is None


def test_pci_ids_parser_stops_at_the_next_vendor():
    names = gpu.parse_pci_ids(sysfs.PCI_IDS)

    assert names[0x2237] == "GA102GL [A10G]"  # not Emulex's 2237 that follows
    assert 0xEC20 not in names


def test_unreadable_or_malformed_functions_are_skipped(tmp_path, pci_ids):
    root = build_machine(tmp_path / "t4", "g4dn-t4")
    broken = root / "devices" / "pci0000:00" / "0000:00:1f.0"
    broken.mkdir()
    (broken / "vendor").write_text("0x10de\n")
    (broken / "class").write_text("garbage\n")
    (root / "bus" / "pci" / "devices" / "0000:00:1f.0").symlink_to(broken)

    assert gpu.detect(root, pci_ids).count == 1


def test_missing_sysfs_tree_means_no_gpus(tmp_path):
    assert gpu.detect(tmp_path / "empty", None) == gpu.GpuInventory()


def test_mixed_models_are_described_most_common_first(tmp_path, pci_ids):
    functions = [
        Function("0000:00:1c.0", 0x10DE, 0x1EB8, 0x030200),
        Function("0000:00:1d.0", 0x10DE, 0x2237, 0x030200),
        Function("0000:00:1e.0", 0x10DE, 0x2237, 0x030200),
    ]
    inventory = gpu.detect(build(tmp_path / "mixed", functions), pci_ids)

    assert inventory.describe() == "2x NVIDIA A10G + 1x NVIDIA Tesla T4"
    assert inventory.model == "NVIDIA A10G"


# ------------------------------------------------------------------------ nvidia-smi

# Shapes as nvidia-smi 590/595 print them (H100 with MIG on: utilization is [N/A]).
A10G_CSV = "".join(
    f"{i}, NVIDIA A10G, 23028, {used}, {util}, {temp}, [N/A], 580.95.05, 00000000:00:{slot}.0\n"
    for i, (used, util, temp, slot) in enumerate(
        [(0, 0, 27, "1B"), (512, 45, 41, "1C"), (0, 0, 26, "1D"), (22000, 100, 63, "1E")]
    )
)
H100_MIG_CSV = (
    "0, NVIDIA H100 80GB HBM3, 81559, 59, [N/A], 42, Enabled, 590.48.01, 00000000:53:00.0\n"
)
VERSION_595 = (
    "NVIDIA-SMI version  : 595.71.05\nNVML version        : 595.71\n"
    "DRIVER version      : 595.71.05\nCUDA Version        : 13.2\n"
)
VERSION_610 = (
    "NVIDIA-SMI version  : 610.57.04\nNVML version        : 610.57\n"
    'DRIVER version      : Deprecated, see "KMD version" instead\n'
    'CUDA version        : Deprecated, see "CUDA UMD version" instead\n'
    "KMD version         : 610.57.04\nCUDA UMD version    : 13.3\n"
)
MISMATCH = (
    "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n"
)


def test_smi_csv_is_parsed_per_gpu():
    gpus = gpu.parse_smi_csv(A10G_CSV)

    assert len(gpus) == 4
    assert gpus[3] == gpu.SmiGpu(
        index=3,
        name="NVIDIA A10G",
        memory_total_mib=23028,
        memory_used_mib=22000,
        utilization_pct=100,
        temperature_c=63,
        mig_mode=None,
        driver_version="580.95.05",
        pci_bus_id="00000000:00:1E.0",
    )


def test_smi_na_values_become_none_and_mig_mode_is_kept():
    (h100,) = gpu.parse_smi_csv(H100_MIG_CSV)

    assert h100.utilization_pct is None
    assert h100.mig_mode == "Enabled"
    assert h100.memory_total_mib == 81559


@pytest.mark.parametrize(
    ("tail", "compute"),
    [(", 8.6", "8.6"), (", 12.0", "12.0"), (", [N/A]", None), (", ", None), ("", None)],
)
def test_smi_compute_capability_is_read_when_reported(tail, compute):
    line = f"0, NVIDIA A10G, 23028, 0, 0, 30, [N/A], 580.95.05, 00000000:00:1B.0{tail}\n"

    (a10g,) = gpu.parse_smi_csv(line)

    assert a10g.compute_cap == compute
    assert a10g.pci_bus_id == "00000000:00:1B.0"


def test_smi_output_that_is_not_csv_is_rejected():
    with pytest.raises(ValueError, match="unexpected nvidia-smi output"):
        gpu.parse_smi_csv("No devices were found\n")


@pytest.mark.parametrize(
    "text, cuda",
    [
        (VERSION_595, "13.2"),
        (VERSION_610, "13.3"),
        ("| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0     |", "13.0"),
        ("| NVIDIA-SMI 610.57.04   KMD Version: 610.57.04   CUDA UMD Version: 13.3  |", "13.3"),
        ("NVIDIA-SMI version  : 470.256.02\n", None),
    ],
)
def test_cuda_version_from_version_output_or_header(text, cuda):
    assert gpu.parse_cuda_version(text) == cuda


def test_driver_version_from_version_output_old_and_new_spelling():
    assert gpu.parse_driver_version(VERSION_595) == "595.71.05"
    assert gpu.parse_driver_version(VERSION_610) == "610.57.04"


def test_report_of_a_working_driver():
    report = gpu.smi_report((0, A10G_CSV), (0, VERSION_595))

    assert report.ok
    assert report.driver_version == "580.95.05"
    assert report.driver_branch == "580"
    assert report.cuda_version == "13.2"
    assert report.cuda_major == "13"
    assert len(report.gpus) == 4


@pytest.mark.parametrize(
    "code, output, state",
    [
        (18, MISMATCH, SmiState.MISMATCH),
        (255, MISMATCH, SmiState.MISMATCH),
        (
            9,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n",
            SmiState.NO_DRIVER,
        ),
        (127, "sh: 1: /usr/bin/nvidia-smi: not found\n", SmiState.ABSENT),
        (
            15,
            "Unable to determine the device handle for GPU0000:00:1E.0: GPU is lost.\n",
            SmiState.FAILED,
        ),
    ],
)
def test_failed_smi_is_classified(code, output, state):
    report = gpu.smi_report((code, output))

    assert report.state is state
    assert not report.ok
    assert report.detail == output.splitlines()[0].strip()
    assert report.driver_version is None


def test_mismatch_text_with_exit_status_zero_is_still_a_mismatch():
    report = gpu.smi_report((0, MISMATCH))

    assert report.state is SmiState.MISMATCH


def test_smi_fills_model_memory_and_mig_into_the_inventory(tmp_path, pci_ids):
    inventory = detect_machine(tmp_path, "g5-a10g", pci_ids)
    report = gpu.smi_report((0, A10G_CSV), (0, VERSION_595))

    merged = gpu.with_smi(inventory, report)

    assert merged.memory_mib == 23028
    assert merged.describe() == "4x NVIDIA A10G"
    assert merged.devices[3].pci_address == "0000:00:1e.0"
    assert gpu.with_smi(inventory, gpu.smi_report((18, MISMATCH))) == inventory


@pytest.mark.parametrize(
    ("name", "capability"),
    [
        ("g4dn-t4", "7.5"),
        ("p3-v100", "7.0"),
        ("g5-a10g", "8.6"),
        ("p4d-a100", "8.0"),
        ("p5-h100", "9.0"),
        ("desktop-rtx3080", None),
    ],
)
def test_compute_capability_of_known_models_before_smi_says(tmp_path, name, capability):
    inventory = detect_machine(tmp_path, name)

    assert inventory.compute_capability == capability
    assert inventory.pci_classes == ({0x0302} if capability else {0x0300})


def test_smi_compute_capability_overrides_the_built_in_one(tmp_path):
    inventory = detect_machine(tmp_path, "desktop-rtx3080")
    line = "0, NVIDIA GeForce RTX 3080, 10240, 0, 0, 40, [N/A], 580.95.05, 00000000:01:00.0, 8.6\n"

    merged = gpu.with_smi(inventory, gpu.smi_report((0, line), (0, VERSION_595)))

    assert merged.compute_capability == "8.6"


def test_smi_mig_mode_marks_a_gpu_mig_capable(tmp_path):
    root = build(tmp_path / "h100", [Function("0000:53:00.0", 0x10DE, 0x2324, 0x030200)])
    inventory = gpu.detect(root, None)  # an id outside the built-in MIG table
    assert not inventory.mig_capable

    merged = gpu.with_smi(inventory, gpu.smi_report((0, H100_MIG_CSV), (0, VERSION_595)))

    assert merged.mig_capable
    assert merged.model == "NVIDIA H100 80GB HBM3"


# ------------------------------------------------------------------------- decisions


def test_status_messages(tmp_path, pci_ids):
    inventory = detect_machine(tmp_path, "g5-a10g", pci_ids)
    report = gpu.smi_report(
        (0, A10G_CSV),
        (0, "DRIVER version      : 580.95.05\nCUDA Version        : 13.0\n"),
    )
    cpu = detect_machine(tmp_path, "m5-cpu", pci_ids)

    assert gpu.status_message(inventory, report) == "Ready: 4x NVIDIA A10G, driver 580, CUDA 13.0"
    assert gpu.status_message(cpu, gpu.SmiReport(SmiState.ABSENT)) == "Ready (no GPU)"


def test_gpu_info_results_per_gpu():
    report = gpu.smi_report((0, H100_MIG_CSV), (0, VERSION_610))

    info = gpu.gpu_info(report)

    assert info["count"] == "1"
    assert info["driver"] == "590.48.01"
    assert info["cuda"] == "13.3"
    assert info["gpus"]["0"] == {
        "name": "NVIDIA H100 80GB HBM3",
        "memory": "0.1 GiB / 79.6 GiB",
        "memory-used-mib": "59",
        "memory-total-mib": "81559",
        "utilization": "n/a",
        "temperature": "42C",
        "mig-mode": "Enabled",
    }


def test_gpu_info_refuses_a_broken_driver_with_what_smi_said():
    with pytest.raises(ValueError, match="mismatch.*Driver/library version mismatch"):
        gpu.gpu_info(gpu.smi_report((18, MISMATCH)))


def smi_csv(name: str, memory: int, buses: list[int], mig: str = "[N/A]") -> str:
    return "".join(
        f"{i}, {name}, {memory}, 0, 0, 30, {mig}, 590.48.01, 00000000:{bus:02X}:00.0\n"
        for i, bus in enumerate(buses)
    )


def test_published_inventory_has_one_record_per_model(tmp_path, pci_ids):
    inventory = detect_machine(tmp_path, "p5-h100", pci_ids)
    buses = [0x53, 0x64, 0x75, 0x86, 0x97, 0xA8, 0xB9, 0xCA]
    report = gpu.smi_report(
        (0, smi_csv("NVIDIA H100 80GB HBM3", 81559, buses, "Disabled")), (0, VERSION_595)
    )

    records = gpu.inventory_records(gpu.with_smi(inventory, report), report)

    assert records == [
        {
            "model": "NVIDIA H100 80GB HBM3",
            "count": 8,
            "memory_mib": 81559,
            "driver": "590.48.01",
            "cuda": "13.2",
            "mig_capable": True,
            "pci_device_id": "2330",
            "mig_profiles": None,  # not asked (see the recorded H100 test)
        }
    ]


def test_published_inventory_without_a_working_driver_or_gpus(tmp_path, pci_ids):
    mixed = gpu.detect(
        build(
            tmp_path / "mixed",
            [
                Function("0000:00:1d.0", 0x10DE, 0x20B0, 0x030200),
                Function("0000:00:1e.0", 0x10DE, 0x1EB8, 0x030200),
            ],
        ),
        pci_ids,
    )
    broken = gpu.smi_report((18, MISMATCH))

    assert gpu.inventory_records(mixed, broken) == [
        {
            "model": "NVIDIA A100 SXM4 40GB",
            "count": 1,
            "memory_mib": None,
            "driver": None,
            "cuda": None,
            "mig_capable": True,
            "pci_device_id": "20b0",
            "mig_profiles": None,
        },
        {
            "model": "NVIDIA Tesla T4",
            "count": 1,
            "memory_mib": None,
            "driver": None,
            "cuda": None,
            "mig_capable": False,
            "pci_device_id": "1eb8",
            "mig_profiles": None,
        },
    ]
    assert gpu.inventory_records(detect_machine(tmp_path, "m5-cpu", pci_ids), broken) == []


def test_published_records_fit_the_cluster_relation_model(tmp_path, pci_ids):
    from charms.gpu_k8s.v0.kubernetes_cluster import GpuInfo

    inventory = detect_machine(tmp_path, "g5-a10g", pci_ids)
    report = gpu.smi_report((0, A10G_CSV), (0, VERSION_595))

    (record,) = gpu.inventory_records(gpu.with_smi(inventory, report), report)

    info = GpuInfo(**record)
    assert (info.model, info.count, info.memory_mib, info.mig_capable) == (
        "NVIDIA A10G",
        4,
        23028,
        False,
    )
