"""Detection and nvidia-smi parsing over outputs recorded on real GPU machines.

The fixtures under `tests/fixtures/gpu/` were captured by `tools/capture_gpu_fixtures.sh`
(each directory's README says where); these tests run the worker's own code on them.
"""

import json
import re
import xml.etree.ElementTree as ET

import gpu
import gpu_gate
import gpu_labels
import gpu_repair
import gpu_watcher
import gpu_watcher_machine
import nvidia
import pytest
import yaml

from fakes import sysfs
from fakes.machine import FakeMachine

H100 = sysfs.FIXTURES / "h100-sxm5-vm"


@pytest.fixture
def h100_report() -> gpu.SmiReport:
    query = (H100 / "nvidia-smi-query-gpu.csv").read_text()
    version = (H100 / "nvidia-smi-version.txt").read_text()
    return gpu.smi_report((0, query), (0, version))


def test_recorded_pci_functions_match_the_recorded_sysfs_attributes():
    functions = {f.address: f for f in sysfs.recorded("h100-sxm5-vm")}
    for attrs in (H100 / "sysfs").iterdir():
        function = functions[attrs.name]
        assert int((attrs / "vendor").read_text(), 16) == function.vendor
        assert int((attrs / "device").read_text(), 16) == function.device
        assert int((attrs / "class").read_text(), 16) == function.pci_class
        assert (attrs / "driver").read_text().strip() == function.driver


def test_one_h100_among_virtio_devices_is_found_and_named(tmp_path):
    root = sysfs.build(tmp_path / "vm", sysfs.recorded("h100-sxm5-vm"))
    inventory = gpu.detect(root, sysfs.write_pci_ids(tmp_path / "pci.ids"))
    assert [
        (d.pci_address, d.device_id, d.subsystem_id, d.kernel_driver) for d in inventory.devices
    ] == [("0000:00:06.0", "2330", "10de:16c1", "nvidia")]
    assert inventory.model == "NVIDIA H100 SXM5 80GB"
    assert inventory.mig_capable and inventory.module_loaded
    # one GPU of an HGX board, without its NVSwitches: no fabric manager needed
    assert inventory.nvswitches == 0


def test_recorded_nvidia_smi_of_a_working_h100_driver(h100_report):
    assert h100_report.state is gpu.SmiState.OK
    assert h100_report.driver_version == "580.159.04"
    assert h100_report.driver_branch == "580"
    assert h100_report.cuda_version == "13.0"
    (only,) = h100_report.gpus
    assert only.name == "NVIDIA H100 80GB HBM3"
    assert (only.memory_total_mib, only.memory_used_mib, only.mig_mode) == (81559, 0, "Disabled")
    assert only.pci_bus_id == "00000000:00:06.0"


def test_recorded_smi_matches_the_sysfs_gpu_by_bus_id_and_names_it(tmp_path, h100_report):
    root = sysfs.build(tmp_path / "vm", sysfs.recorded("h100-sxm5-vm"))
    inventory = gpu.with_smi(gpu.detect(root, None), h100_report)
    assert inventory.describe() == "1x NVIDIA H100 80GB HBM3"
    assert inventory.memory_mib == 81559
    assert gpu.status_message(inventory, h100_report) == (
        "Ready: 1x NVIDIA H100 80GB HBM3, driver 580, CUDA 13.0"
    )
    profiles = gpu.parse_mig_profiles((H100 / "nvidia-smi-mig-lgip.txt").read_text())
    assert gpu.inventory_records(inventory, h100_report, profiles) == [
        {
            "model": "NVIDIA H100 80GB HBM3",
            "count": 1,
            "memory_mib": 81559,
            "driver": "580.159.04",
            "cuda": "13.0",
            "mig_capable": True,
            "pci_device_id": "2330",
            "mig_profiles": {
                "1g.10gb": 7,
                "1g.10gb+me": 1,
                "1g.20gb": 4,
                "2g.20gb": 3,
                "3g.40gb": 2,
                "4g.40gb": 1,
                "7g.80gb": 1,
            },
        }
    ]


def test_the_table_header_gives_the_same_cuda_version_as_version_output():
    header = (H100 / "nvidia-smi.txt").read_text()
    assert gpu.parse_cuda_version(header) == "13.0"


def test_the_xml_report_agrees_with_the_csv_query(h100_report):
    root = ET.parse(H100 / "nvidia-smi-q.xml").getroot()
    assert root.findtext("driver_version") == h100_report.driver_version
    assert root.findtext("cuda_version") == h100_report.cuda_version
    (xml_gpu,) = root.findall("gpu")
    assert xml_gpu.get("id") == h100_report.gpus[0].pci_bus_id
    assert xml_gpu.findtext("mig_mode/current_mig") == h100_report.gpus[0].mig_mode


def test_recorded_h100_gets_the_labels_gfd_writes_for_a_hopper(tmp_path, h100_report):
    root = sysfs.build(tmp_path / "vm", sysfs.recorded("h100-sxm5-vm"))
    inventory = gpu.with_smi(gpu.detect(root, None), h100_report)
    report = h100_report

    labels = gpu_labels.node_labels(inventory, report.driver_version, report.cuda_version)

    # captured before the query asked for compute_cap: the capability is the built-in 9.0
    assert {k: v for k, v in labels.items() if v is not None} == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.machine": "unknown",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "159",
        "nvidia.com/cuda.driver-version.revision": "04",
        "nvidia.com/cuda.driver-version.full": "580.159.04",
        "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0",
        "nvidia.com/cuda.runtime-version.full": "13.0",
        "nvidia.com/cuda.driver.major": "580",
        "nvidia.com/cuda.driver.minor": "159",
        "nvidia.com/cuda.driver.rev": "04",
        "nvidia.com/cuda.runtime.major": "13",
        "nvidia.com/cuda.runtime.minor": "0",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mps.capable": "false",
    }


# One H200 SXM in a Firecracker guest, 2026-11-28 (tests/fixtures/gpu/h200-sxm-vm/README.md)
H200 = sysfs.FIXTURES / "h200-sxm-vm"
MIG_MODELS = yaml.safe_load(
    (sysfs.FIXTURES.parent / "mig" / "nvidia-mig-models.yaml").read_text()
)["models"]


@pytest.fixture
def h200_report() -> gpu.SmiReport:
    query = (H200 / "nvidia-smi-query-gpu.csv").read_text()
    version = (H200 / "nvidia-smi-version.txt").read_text()
    return gpu.smi_report((0, query), (0, version))


def test_recorded_h200_is_found_named_and_given_its_mig_profiles(tmp_path, h200_report):
    root = sysfs.build(tmp_path / "vm", sysfs.recorded("h200-sxm-vm"))
    inventory = gpu.detect(root, sysfs.write_pci_ids(tmp_path / "pci.ids"))
    assert [(d.pci_address, d.device_id, d.subsystem_id) for d in inventory.devices] == [
        ("0000:00:06.0", "2335", "10de:18bf")
    ]
    assert inventory.model == "NVIDIA H200 SXM 141GB" and inventory.mig_capable

    merged = gpu.with_smi(inventory, h200_report)
    assert (
        gpu.status_message(merged, h200_report) == "Ready: 1x NVIDIA H200, driver 580, CUDA 13.0"
    )
    profiles = gpu.parse_mig_profiles((H200 / "nvidia-smi-mig-lgip.txt").read_text())
    (record,) = gpu.inventory_records(merged, h200_report, profiles)
    assert (record["model"], record["memory_mib"], record["pci_device_id"]) == (
        "NVIDIA H200",
        143771,
        "2335",
    )
    # what the driver lists is what both charms' MIG tables are checked against
    assert record["mig_profiles"] == MIG_MODELS["2335"]["profiles"]


def test_the_repair_gate_has_a_floor_for_the_name_the_h200_driver_prints(h200_report):
    assert gpu_gate.floor_for(h200_report.gpus[0].name) is not None


def _fields(help_text: str) -> set[str]:
    """The field names `nvidia-smi --help-query-*` lists (each line starting with a quote)."""
    return {
        name
        for line in help_text.splitlines()
        if line.startswith('"')
        for name in re.findall(r'"([^"]+)"', line)
    }


def _queried(argv: tuple[str, ...], option: str) -> list[str]:
    (query,) = [a for a in argv if a.startswith(f"{option}=")]
    return query.split("=", 1)[1].split(",")


def test_every_field_the_worker_asks_nvidia_smi_for_is_in_a_real_drivers_list():
    gpu_fields = _fields((H200 / "health" / "help-query-gpu.txt").read_text())
    app_fields = _fields((H200 / "health" / "help-query-compute-apps.txt").read_text())
    asked = {
        "gpu.SMI_FIELDS": list(gpu.SMI_FIELDS),
        "gpu_watcher.SMI_FIELDS": list(gpu_watcher.SMI_FIELDS),
        "nvidia.FABRIC_QUERY_ARGS": _queried(nvidia.FABRIC_QUERY_ARGS, "--query-gpu"),
    }
    assert {k: [f for f in v if f not in gpu_fields] for k, v in asked.items()} == {
        k: [] for k in asked
    }
    compute = _queried(gpu_repair.COMPUTE_APPS, "--query-compute-apps")
    assert [f for f in compute if f not in app_fields] == []


def test_the_watchers_health_query_on_a_healthy_h200_finds_nothing():
    out = (H200 / "health" / "watcher-smi.csv").read_text()
    gpus, lost = gpu_watcher.parse_smi(out)
    assert lost == set() and list(gpus) == ["0000:00:06"]
    (row,) = gpus.values()
    assert row["uuid"] == "GPU-229229c1-6a3b-ae5c-fab2-735129948cb3"
    assert gpu_watcher.smi_findings(row) == []
    # the fake machine's healthy rows print these fields as the driver did; the recorded
    # query predates `gpu_recovery_action` and `fabric.health.summary`, which the
    # recorded `-q` shows as `None` and `N/A`
    fake = gpu_watcher_machine.smi_rows().splitlines()[0].split(", ")
    recorded = out.strip().split(", ")
    assert fake[3 : len(recorded)] == recorded[3:]
    assert fake[len(recorded) :] == ["None", "N/A"]
    xml = (H200 / "nvidia-smi-q.xml").read_text()
    assert "<gpu_recovery_action>None</gpu_recovery_action>" in xml
    assert "<health>\n\t\t\t\t<summary>N/A</summary>" in xml
    assert gpu_watcher.smi_findings(row | {"gpu_recovery_action": "None"}) == []


RECORDED_QUERY = (H200 / "health" / "watcher-smi.csv").read_text()
DOWN = gpu_watcher_machine.SMI_DRIVER_DOWN


@pytest.mark.parametrize(
    ("code", "out", "down"),
    [
        *[(code, text, True) for code, text in DOWN.values()],
        (255, DOWN["mismatch"][1], True),  # the words decide (gpu.py reads 255 so too)
        # rereview44c R2: any other NVML start failure is the hardware's (nvml.h nvmlReturn_t
        # texts; nvidia-smi exits with the code NVML gave): the path of GPUs not answering
        (255, "Failed to initialize NVML: Unknown Error\n", False),
        (15, "Failed to initialize NVML: GPU is lost\n", False),
        (14, "Failed to initialize NVML: Corrupted infoROM\n", False),
        (10, "Failed to initialize NVML: Interrupt request issue\n", False),
        (8, "Failed to initialize NVML: Insufficient External Power\n", False),
        (255, DOWN["mismatch"][1].lower(), False),  # the exact words, not any casing
        (9, "", True),  # nvidia-smi(1): 9, "NVIDIA driver is not loaded"
        (0, RECORDED_QUERY, False),  # the healthy H200
        # a GPU nvidia-smi names is an answer about that GPU, NVML started
        (15, gpu_watcher_machine.smi_rows(lost=1), False),
        (15, "Unable to determine the device handle for GPU0000:00:1E.0: GPU is lost.\n", False),
        (
            255,
            "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n",
            False,
        ),
        (6, "No devices were found\n", False),  # NVML answered: no GPU left on the bus
        (2, 'Field "fabric.health.summary" is not a valid field to query.\n', False),
    ],
)
def test_only_an_answer_naming_no_gpu_and_saying_nvml_did_not_start_is_driver_level(
    code, out, down
):
    gpus, lost = gpu_watcher.parse_smi(out)
    assert gpu_watcher.driver_down(code, out, gpus, lost) is down


def test_the_kernels_stamps_are_read_on_the_clock_the_watcher_maps_them_with():
    """The H200 recording: kmsg's stamps are time.monotonic()'s clock, within a millisecond.

    A fresh /dev/kmsg reader got this boot's whole ring buffer (358 records), and the
    record it wrote came back stamped 1 ms from time.monotonic().
    """
    watcher = json.loads((H200 / "health" / "capture.json").read_text())["watcher"]
    assert watcher["kmsg_records"] > 300  # what a first start in a boot finds there
    (back,) = watcher["read_back"]
    usec, lag = back["usec"], back["lag_s"]
    written = usec / 1e6 + lag  # time.monotonic() when it was written
    assert gpu_watcher.kernel_time(usec, 1e9, written) == pytest.approx(1e9, abs=0.01)
    assert gpu_watcher.kernel_wall(usec, 1e9, written + 3600) == pytest.approx(
        1e9 - 3600, abs=0.01
    )
    assert gpu_watcher.kernel_time(usec, 1e9, written + 3600) is None  # timings: too old
    assert gpu_watcher.kernel_wall(-1, 1e9, written) is None  # no stamp
    # rereview44c R6: printk's clock ahead of CLOCK_MONOTONIC (drift over a long uptime,
    # dmesg(1) -T: "could be inaccurate") stamps its record now, not "not stamped"
    assert gpu_watcher.kernel_wall(usec, 1e9, written - 5) == 1e9


def test_the_mig_instances_of_each_mig_device_are_read_from_nvidia_smis_xml():
    """`nvidia-smi -q -x` names each MIG device by its index on the GPU, with its GI and CI.

    The recorded H200 (MIG off) lists none; the MIG form is composed as the sources in
    gpu_watcher.mig_instances quote it, and joined to `-L`'s `Device <n>` UUIDs.
    """
    recorded = (H200 / "nvidia-smi-q.xml").read_text()
    uuid = "GPU-229229c1-6a3b-ae5c-fab2-735129948cb3"
    assert gpu_watcher.mig_instances(recorded, {(uuid, "0"): "MIG-x"}) == {}
    layout = {0: ["MIG-a0", "MIG-a1"], 1: ["MIG-b0"]}
    listed = gpu_watcher_machine.smi_list(layout).splitlines()
    indexes = {}
    parent = ""
    for line in listed:
        head, device = gpu_watcher.SMI_GPU.match(line), gpu_watcher.SMI_MIG.match(line)
        if head:
            parent = head["uuid"]
        elif device:
            indexes[(parent, device["index"])] = device["uuid"]
    assert len(indexes) == 3
    xml = gpu_watcher_machine.smi_query(layout)
    assert gpu_watcher.mig_instances(xml, indexes) == {
        "MIG-a0": ("2", "0"),
        "MIG-a1": ("3", "0"),
        "MIG-b0": ("2", "0"),
    }
    # a device -L does not list, bad IDs and unreadable XML map nothing
    assert gpu_watcher.mig_instances(xml, {}) == {}
    bad = xml.replace(
        "<gpu_instance_id>3</gpu_instance_id>", "<gpu_instance_id>N/A</gpu_instance_id>"
    )
    assert "MIG-a1" not in gpu_watcher.mig_instances(bad, indexes)
    assert gpu_watcher.mig_instances("<nvidia_smi_log><gpu>", indexes) == {}


def test_the_repair_reads_the_cuda_process_a_real_driver_lists(tmp_path):
    recorded = (H200 / "health" / "compute-apps.csv").read_text()
    machine = FakeMachine(tmp_path / "root")
    machine.on("nvidia-smi", lambda argv, _input: recorded)
    # the capture's PyTorch process, pid 653, held the GPU (health/capture.json)
    assert gpu_repair._compute_processes(machine.host()) == ["process 653"]


def test_a_healthy_h200s_recovery_action_and_fabric_health_raise_no_finding():
    # `--query-gpu=<health fields> --format=csv` with its header, recorded 2026-11-28
    lines = (H200 / "health" / "health-fields.csv").read_text().splitlines()
    fields = tuple(f.strip() for f in lines[0].split(","))
    gpus, lost = gpu_watcher.parse_smi("\n".join(lines[1:]), fields)
    assert lost == set()
    (row,) = gpus.values()
    assert (row["gpu_recovery_action"], row["fabric.health.summary"]) == ("None", "N/A")
    assert gpu_watcher.smi_read(row["gpu_recovery_action"])
    assert gpu_watcher.smi_findings(row) == []
