"""Detection and nvidia-smi parsing over outputs recorded on real GPU machines.

The fixtures under `tests/fixtures/gpu/` were captured by `tools/capture_gpu_fixtures.sh`
(each directory's README says where); these tests run the worker's own code on them.
"""

import xml.etree.ElementTree as ET

import gpu
import gpu_labels
import pytest

from fakes import sysfs

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
