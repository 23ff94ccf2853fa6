"""Reboot decisions, container toolkit, containerd, labels, taints, validation pod.

The machine is `FakeMachine` (apt, dpkg, systemd on a temporary root) extended with a fake
NVIDIA driver: `nvidia-smi`, `modprobe nvidia`, `ubuntu-drivers`, `uname` and `dpkg`
behave as on an EC2 g5 instance running Ubuntu 24.04.
"""

from __future__ import annotations

import dataclasses
import re

import gpu
import nvidia
import pytest
from gpu_labels import (
    GPU_LABELS,
    MACHINE_TYPE_FILE,
    PluginConfig,
    apply_node_gpu_state,
    machine_type,
    merge_taints,
    node_labels,
    node_taints,
)
from toolkit import (
    TOOLKIT_CONFIG,
    TOOLKIT_KEY_URL,
    TOOLKIT_PACKAGES,
    TOOLKIT_VERSION,
    ToolkitSource,
    containerd_runtimes,
    install_toolkit,
)
from validation import VALIDATION_IMAGE, parse_validation_result, run_command

from charms.gpu_k8s.v0 import apt, containerd
from charms.gpu_k8s.v0.kubernetes_cluster import GPU_TAINT
from charms.gpu_k8s.v0.system import CommandError
from fakes.machine import ARMORED_KEY, FakeMachine, Service
from fakes.nvidia_driver import NVIDIA_REPO, TOOLKIT, FakeDriver
from fakes.sysfs import build_machine, write_pci_ids


@pytest.fixture
def machine(tmp_path):
    return FakeMachine(tmp_path / "root")


@pytest.fixture
def driver(machine):
    return FakeDriver(machine)


@pytest.fixture
def a10g(tmp_path):
    root = build_machine(tmp_path / "sys-a10g", "g5-a10g", module_loaded=False)
    return gpu.detect(root, write_pci_ids(tmp_path / "pci.ids"))


@pytest.fixture
def cpu_only(tmp_path):
    return gpu.detect(build_machine(tmp_path / "sys-cpu", "m5-cpu", module_loaded=False), None)


def apt_installs(machine) -> list[str]:
    return [line for line in machine.lines("apt-get") if " install " in line]


QUERIES = ("sh -c", "uname -r", "dpkg --print-architecture", "ubuntu-drivers")


def changes(machine, since: int = 0) -> list[str]:
    """Commands after the `since`-th mutation that changed the machine."""
    return [line for line in machine.mutations()[since:] if not line.startswith(QUERIES)]


# ---------------------------------------------------------------------------- reboots


def test_auto_reboot_path_drains_reboots_then_uncordons():
    act = nvidia.reboot_action
    reason = "the nvidia kernel module is not loaded"

    assert (
        act(reason, True, started_at_boot=None, current_boot="b1")
        is nvidia.RebootAction.DRAIN_AND_REBOOT
    )
    # the hook runs again before Juju reboots the machine: wait
    assert act(reason, True, started_at_boot="b1", current_boot="b1") is nvidia.RebootAction.NONE
    # back on a new boot with a working driver
    assert act(None, True, started_at_boot="b1", current_boot="b2") is nvidia.RebootAction.UNCORDON
    # back, but the driver still fails: no reboot loop
    assert act(reason, True, started_at_boot="b1", current_boot="b2") is nvidia.RebootAction.BLOCK


def test_manual_reboot_path_blocks_with_the_exact_commands():
    reason = "the nvidia kernel module is not loaded"

    action = nvidia.reboot_action(reason, False, started_at_boot=None, current_boot="b1")
    message = nvidia.reboot_blocked_message(reason, "kubernetes-worker-gpu/0", "ip-10-0-1-17")

    assert action is nvidia.RebootAction.BLOCK
    assert message == (
        "reboot needed: the nvidia kernel module is not loaded; run `kubectl drain "
        "ip-10-0-1-17 --ignore-daemonsets --delete-emptydir-data`, `juju ssh "
        "kubernetes-worker-gpu/0 -- sudo reboot`, then `kubectl uncordon ip-10-0-1-17` "
        "(or set auto-reboot=true)"
    )
    assert nvidia.reboot_action(None, False, started_at_boot=None, current_boot="b1") is (
        nvidia.RebootAction.NONE
    )


def test_boot_id_is_read_from_proc(machine, driver):
    assert nvidia.boot_id(machine.host()) == "b0b1d000-0000-4000-8000-000000000001"


def test_smi_missing_binary_is_absent_without_running_it(machine, driver):
    report = nvidia.read_smi(machine.host())

    assert report.state is gpu.SmiState.ABSENT
    assert machine.lines("sh") == []


def test_smi_mismatch_is_read_through_the_combined_output(machine, driver):
    driver.preinstall("570")
    machine.dpkg["nvidia-utils-570-server"] = "570.211.01-0ubuntu0.24.04.1"  # by hand, held

    report = nvidia.read_smi(machine.host())

    assert report.state is gpu.SmiState.MISMATCH
    assert report.detail == "Failed to initialize NVML: Driver/library version mismatch"


def test_smi_reports_the_compute_capability(machine, driver):
    driver.preinstall("580")

    report = nvidia.read_smi(machine.host())

    assert report.ok
    assert [g.compute_cap for g in report.gpus] == ["8.6"] * 4


def test_smi_that_does_not_know_compute_cap_is_asked_again_without_it(machine, driver):
    driver.preinstall("580")
    current = machine.runner.handlers["nvidia-smi"]
    queries = []

    def older_smi(argv, input):
        if "--version" in argv:
            return current(argv, input)
        queries.append(argv[1])
        if "compute_cap" in argv[1]:
            raise CommandError(argv, 2, 'Field "compute_cap" is not a valid field to query.\n')
        return "".join(
            line.rsplit(", ", 1)[0] + "\n" for line in current(argv, input).splitlines()
        )

    machine.on("nvidia-smi", older_smi)

    report = nvidia.read_smi(machine.host())

    assert report.ok and len(report.gpus) == 4
    assert [g.compute_cap for g in report.gpus] == [None] * 4
    assert queries == [gpu.SMI_QUERY_ARGS[0], gpu.SMI_QUERY_ARGS_WITHOUT_COMPUTE_CAP[0]]


def test_every_read_of_a_hung_driver_ends_within_30_s_and_says_so(machine, driver):
    """hung44: nvidia-smi in state D never answers; each read is bounded and no exception."""
    driver.preinstall("580")
    driver.hung = {1}
    host = machine.host()

    report = nvidia.read_smi(host)

    assert report.state is gpu.SmiState.HUNG and not report.ok
    assert report.detail == "nvidia-smi did not answer within 30 s"
    assert nvidia.read_mig_profiles(host) == {} and nvidia.read_mig_devices(host) == {}
    assert nvidia.read_gpu_uuids(host) is None and nvidia.read_fabric(host) is None
    with pytest.raises(ValueError, match=r"^nvidia-smi failed \(hung\): nvidia-smi did not"):
        nvidia.read_gpu_info(host)
    assert [t for _, t in driver.hung_calls] == [30.0] * 6  # --version never asked
    assert [c.timeout for c in machine.runner.calls if c.argv[0] == "/bin/sh"] == [30.0] * 6


# ------------------------------------------------------------------ container toolkit


def test_toolkit_from_nvidia_repository_pinned_and_held(machine, driver):
    machine.remote[NVIDIA_REPO] = TOOLKIT
    machine.urls[TOOLKIT_KEY_URL] = ARMORED_KEY

    assert install_toolkit(machine.host(), ToolkitSource.parse(""))

    source = machine.read("/etc/apt/sources.list.d/nvidia-container-toolkit.sources")
    assert f"URIs: {NVIDIA_REPO}\n" in source and "Suites: /\n" in source
    assert {p: machine.dpkg[p] for p in TOOLKIT_PACKAGES} == dict.fromkeys(
        TOOLKIT_PACKAGES, TOOLKIT_VERSION
    )
    assert set(TOOLKIT_PACKAGES) <= machine.held
    before = len(machine.mutations())
    assert not install_toolkit(machine.host(), ToolkitSource.parse(""))
    assert changes(machine, before) == []


def test_toolkit_refuses_gpus_asked_for_by_environment_in_unprivileged_pods(machine, driver):
    driver.serve_toolkit()
    install_toolkit(machine.host(), ToolkitSource.parse(""))

    config = machine.read(TOOLKIT_CONFIG)
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n" in config
    assert "= true" not in config.split("[")[0]  # the package default is gone
    assert machine.lines("nvidia-ctk") == [
        "/usr/bin/nvidia-ctk config --in-place --set "
        "accept-nvidia-visible-devices-envvar-when-unprivileged=false"
    ]
    install_toolkit(machine.host(), ToolkitSource.parse(""))
    assert len(machine.lines("nvidia-ctk")) == 1  # set once


def test_toolkit_from_a_mirror_configured_by_option(machine, driver):
    mirror = "http://mirror.internal/nvidia/deb/amd64"
    machine.remote[mirror] = TOOLKIT
    machine.urls["http://mirror.internal/nvidia/gpgkey"] = ARMORED_KEY
    source = ToolkitSource.parse(
        "http://mirror.internal/nvidia/deb/$(ARCH) / key=http://mirror.internal/nvidia/gpgkey"
    )

    install_toolkit(machine.host(), source)

    assert f"URIs: {mirror}\n" in machine.read(
        "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
    )
    assert not any("nvidia.github.io" in line for line in machine.lines())
    assert machine.dpkg["nvidia-container-toolkit"] == TOOLKIT_VERSION


def test_air_gapped_mirror_without_key_or_keyring_is_an_apt_error(machine, driver):
    source = ToolkitSource.parse("http://mirror.internal/nvidia/deb/amd64 /")

    with pytest.raises(apt.AptError, match="keyring .* does not exist") as caught:
        install_toolkit(machine.host(), source)

    assert caught.value.package == "nvidia-container-toolkit"
    assert not machine.path("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").exists()


def test_unreachable_toolkit_version_names_the_package(machine, driver):
    machine.remote[NVIDIA_REPO] = {p: {"1.17.8-1"} for p in TOOLKIT_PACKAGES}
    machine.urls[TOOLKIT_KEY_URL] = ARMORED_KEY

    with pytest.raises(apt.AptError) as caught:
        install_toolkit(machine.host(), ToolkitSource.parse(""))

    assert caught.value.package in TOOLKIT_PACKAGES
    assert TOOLKIT_VERSION in caught.value.detail


@pytest.mark.parametrize(
    "value, error",
    [("mirror.internal/nvidia", "must be '<uri>"), ("http://m/x / key=ftp://m/k", "key= must be")],
)
def test_bad_toolkit_source_option_says_the_form(value, error):
    with pytest.raises(ValueError, match=error):
        ToolkitSource.parse(value)


def test_toolkit_source_with_suite_and_components():
    source = ToolkitSource.parse("https://repo.example/ubuntu noble main restricted")

    assert source == ToolkitSource(
        uri="https://repo.example/ubuntu",
        suite="noble",
        components=("main", "restricted"),
        key_url=None,
    )


# ------------------------------------------------------------------------ containerd


def test_nvidia_runtime_registered_but_not_default_and_restart_only_on_change(machine):
    machine.services["containerd"] = Service()
    host = machine.host()

    runtimes, default = containerd_runtimes(has_gpu=True)
    assert containerd.configure(host, runtimes, default)
    assert not containerd.configure(host, *containerd_runtimes(has_gpu=True))

    config = machine.read(containerd.CONFIG_PATH)
    assert 'default_runtime_name = "runc"' in config
    assert ".containerd.runtimes.nvidia]" in config
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in config
    assert machine.services["containerd"].restarts == 1


def test_nvidia_default_runtime_only_when_configured(machine):
    machine.services["containerd"] = Service()
    host = machine.host()
    containerd.configure(host, *containerd_runtimes(has_gpu=True))

    assert containerd.configure(host, *containerd_runtimes(True, default_nvidia=True))

    assert 'default_runtime_name = "nvidia"' in machine.read(containerd.CONFIG_PATH)
    assert machine.services["containerd"].restarts == 2


def test_worker_that_lost_its_gpus_drops_the_runtime(machine):
    machine.services["containerd"] = Service()
    host = machine.host()
    containerd.configure(host, *containerd_runtimes(has_gpu=True))

    assert containerd_runtimes(has_gpu=False) == ({}, "runc")
    containerd.configure(host, *containerd_runtimes(has_gpu=False, default_nvidia=True))

    assert "nvidia" not in machine.read(containerd.CONFIG_PATH)


# --------------------------------------------------------------- labels and taints


A10G_SMI = "0, NVIDIA A10G, 23028, 0, 0, 30, [N/A], 580.95.05, 00000000:00:1B.0, 8.6\n"
# Kubernetes' label value syntax (apimachinery IsValidLabelValue), written out again here.
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
SINGLE_SHARED = {"mig_strategy": "single", "replicas": 4}  # PluginConfig fields


@pytest.fixture
def a10g_smi(a10g):
    report = gpu.smi_report((0, A10G_SMI), (0, "CUDA Version        : 13.0\n"))
    return gpu.with_smi(a10g, report), report


def test_labels_of_a_gpu_node_are_gfds_keys_and_values(a10g_smi):
    inventory, report = a10g_smi

    labels = node_labels(
        inventory, report.driver_version, report.cuda_version, machine="g5.12xlarge\n"
    )

    assert labels == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A10G",
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": "23028",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "6",
        "nvidia.com/gpu.machine": "g5.12xlarge",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "95",
        "nvidia.com/cuda.driver-version.revision": "05",
        "nvidia.com/cuda.driver-version.full": "580.95.05",
        "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0",
        "nvidia.com/cuda.runtime-version.full": "13.0",
        "nvidia.com/cuda.driver.major": "580",
        "nvidia.com/cuda.driver.minor": "95",
        "nvidia.com/cuda.driver.rev": "05",
        "nvidia.com/cuda.runtime.major": "13",
        "nvidia.com/cuda.runtime.minor": "0",
        "nvidia.com/mig.capable": "false",
        "nvidia.com/mig.strategy": None,  # strategy none: GFD writes no such label
        "nvidia.com/mps.capable": "false",
    }


def test_time_slicing_replicas_label_the_sharing_and_mark_the_product_shared(a10g_smi):
    inventory, report = a10g_smi
    plugin = PluginConfig(replicas=4)

    labels = node_labels(inventory, report.driver_version, None, plugin=plugin)

    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A10G-SHARED"
    assert labels["nvidia.com/gpu.count"] == "4"  # physical GPUs, as GFD counts them


@pytest.mark.parametrize(
    ("strategy", "label"), [("none", None), ("single", "single"), ("mixed", "mixed")]
)
def test_mig_strategy_is_labelled_when_the_plugin_uses_one(a10g_smi, strategy, label):
    inventory, _ = a10g_smi
    plugin = PluginConfig(mig_strategy=strategy)

    labels = node_labels(inventory, None, None, plugin=plugin)

    assert labels["nvidia.com/mig.strategy"] == label
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A10G"


@pytest.mark.parametrize(
    ("capability", "family"),
    [
        ("3.7", "kepler"),
        ("6.0", "pascal"),
        ("7.0", "volta"),
        ("7.5", "turing"),
        ("8.0", "ampere"),
        ("8.6", "ampere"),
        ("8.9", "ada-lovelace"),
        ("9.0", "hopper"),
        ("10.0", "blackwell"),
        ("11.0", "undefined"),
        ("12.0", "blackwell"),
        ("13.0", "rubin"),
    ],
)
def test_family_and_compute_labels_follow_the_compute_capability(a10g, capability, family):
    major, minor = capability.split(".")
    devices = tuple(dataclasses.replace(d, compute_capability=capability) for d in a10g.devices)

    labels = node_labels(dataclasses.replace(a10g, devices=devices), None, None)

    assert labels["nvidia.com/gpu.family"] == family
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == (
        major,
        minor,
    )


def test_unknown_compute_capability_leaves_family_and_compute_out(a10g):
    devices = tuple(dataclasses.replace(d, compute_capability=None) for d in a10g.devices)

    labels = node_labels(dataclasses.replace(a10g, devices=devices), None, None)

    assert labels["nvidia.com/gpu.family"] is None
    assert labels["nvidia.com/gpu.compute.major"] is None


def test_two_part_driver_version_has_an_empty_revision(a10g):
    labels = node_labels(a10g, "580.95", "12.10")

    assert labels["nvidia.com/cuda.driver-version.revision"] == ""
    assert labels["nvidia.com/cuda.driver.rev"] == ""
    assert labels["nvidia.com/cuda.driver-version.full"] == "580.95"
    assert labels["nvidia.com/cuda.runtime-version.minor"] == "10"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.10"


def test_machine_is_unknown_when_the_dmi_product_name_cannot_be_read(machine, a10g):
    assert machine_type(machine.host()) is None
    assert node_labels(a10g, None, None)["nvidia.com/gpu.machine"] == "unknown"

    machine.write(MACHINE_TYPE_FILE, "p5.48xlarge\n")
    name = machine_type(machine.host())

    assert node_labels(a10g, None, None, machine=name)["nvidia.com/gpu.machine"] == ("p5.48xlarge")


@pytest.mark.parametrize(
    ("model", "machine", "product"),
    [
        ("NVIDIA A100-SXM4 (40GB) [rev. a1]!", "g5.12xlarge", "NVIDIA-A100-SXM4-40GB-rev.-a1"),
        ("NVIDIA GeForce RTX 3080/Ti", "To Be Filled By O.E.M.", "NVIDIA-GeForce-RTX-3080Ti"),
        ("  NVIDIA H100  80GB HBM3 ", "NVIDIA DGX H100", "NVIDIA-H100-80GB-HBM3"),
        ("-" + "Very Long Name " * 6 + ".", "x" * 80, None),
        ("(((", "", None),
    ],
)
@pytest.mark.parametrize("sharing", [{}, SINGLE_SHARED])
def test_every_label_value_is_a_valid_kubernetes_label_value(model, machine, product, sharing):
    plugin = PluginConfig(**sharing)
    odd = gpu.GpuInventory(
        devices=(gpu.GpuDevice("0000:00:1e.0", "20b0", None, model, compute_capability="8.0"),)
    )

    labels = node_labels(odd, "580.95.05", "13.0", machine=machine, plugin=plugin)

    for key, value in labels.items():
        assert value is None or (len(value) <= 63 and LABEL_VALUE.fullmatch(value)), key
    if product is not None:  # GFD's sanitise: odd characters dropped, words joined by "-"
        shared = "-SHARED" if plugin.replicas > 1 else ""
        assert labels["nvidia.com/gpu.product"] == product + shared


def test_labels_without_a_working_driver_leave_versions_out(a10g):
    labels = node_labels(a10g, None, None)

    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/cuda.driver.major"] is None
    assert labels["nvidia.com/cuda.runtime.major"] is None
    assert labels["nvidia.com/cuda.driver-version.full"] is None
    assert labels["nvidia.com/cuda.runtime-version.full"] is None


def test_worker_that_lost_its_gpus_removes_every_gpu_label_and_the_taint(a10g_smi, cpu_only):
    inventory, report = a10g_smi
    plugin = PluginConfig(**SINGLE_SHARED)
    every = node_labels(inventory, "580.95.05", "13.0", machine="g5.12xlarge", plugin=plugin)

    labels = node_labels(cpu_only, "580.95.05", "13.0", plugin=plugin)

    assert labels == dict.fromkeys(GPU_LABELS)  # None = delete in a merge patch
    assert set(labels) == set(every) and None not in every.values()
    assert node_taints(gpu_taint=True, has_gpu=False) == []


def test_gpu_taint_follows_the_option_and_keeps_other_taints():
    others = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    ours = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}

    tainted = merge_taints(others, node_taints(gpu_taint=True))
    assert tainted == [*others, ours]
    assert merge_taints(tainted, node_taints(gpu_taint=True)) == tainted

    untainted = merge_taints(tainted, node_taints(gpu_taint=False))
    assert untainted == others


# ---------------------------------------------------------------------- validate-gpu

VECTORADD_OK = (
    "[Vector addition of 50000 elements]\nCopy input data from the host memory to the CUDA "
    "device\nCUDA kernel launch with 196 blocks of 256 threads\nCopy output data from the "
    "CUDA device to the host memory\nTest PASSED\nDone\n"
)
VECTORADD_FAIL = (
    "[Vector addition of 50000 elements]\nFailed to allocate device vector A (error code "
    "CUDA driver version is insufficient for CUDA runtime version)!\n"
)


def test_validation_result_pass_and_fail():
    assert parse_validation_result(0, VECTORADD_OK) == (True, "CUDA check passed (exit 0): Done")
    passed, summary = parse_validation_result(1, VECTORADD_FAIL)
    assert not passed
    assert "insufficient for CUDA runtime version" in summary
    assert parse_validation_result(0, "Test FAILED\n")[0] is False
    assert parse_validation_result(1, "") == (False, "CUDA check failed (exit 1): no output")


def test_validation_runs_privileged_with_nvidias_runtime_and_removes_its_container():
    argv = run_command(VALIDATION_IMAGE, "gpu-validation-1")

    assert argv[:5] == ["/usr/bin/ctr", "-n", "k8s.io", "run", "--rm"]
    assert argv[argv.index("--runc-binary") + 1] == "/usr/bin/nvidia-container-runtime"
    assert "--privileged" in argv
    assert argv[-3:] == [VALIDATION_IMAGE, "gpu-validation-1", "/cuda-samples/vectorAdd"]


# ------------------------------------------------------------------ the node, over HTTP

NODE = "ip-10-0-1-17"
NODE_PATH = f"/api/v1/nodes/{NODE}"


@pytest.fixture
def api():
    from fakes.kube_apiserver import FakeKubeApiServer

    with FakeKubeApiServer() as server:
        yield server


@pytest.fixture
def kube(api):
    """A client with the worker's identity: the token of the workers' grant."""
    from charms.gpu_k8s.v0.kubeclient import Kube
    from fakes.kube_grants import store_grant, worker_grant

    token = store_grant(api, worker_grant(), "worker-sa-token")
    with Kube.from_kubeconfig(api.kubeconfig(token), retries=0, timeout=5) as client:
        yield client


def gpu_labels(obj: dict) -> dict:
    labels = obj["metadata"].get("labels") or {}
    return {k: v for k, v in labels.items() if k.startswith("nvidia.com/")}


def test_node_labels_and_taint_follow_config_and_gpus(api, kube, a10g, cpu_only):
    others = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    api.put_object(
        NODE_PATH,
        {"metadata": {"labels": {"kubernetes.io/hostname": NODE}}, "spec": {"taints": others}},
    )
    plugin = PluginConfig(**SINGLE_SHARED)
    labels = node_labels(a10g, "580.95.05", "13.0", machine="g5.12xlarge", plugin=plugin)

    assert apply_node_gpu_state(kube, NODE, labels, node_taints(True))
    node = api.get_object(NODE_PATH)
    assert gpu_labels(node)["nvidia.com/gpu.count"] == "4"
    assert gpu_labels(node)["nvidia.com/mig.strategy"] == "single"
    assert gpu_labels(node)["nvidia.com/gpu.product"] == "NVIDIA-A10G-SHARED"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert node["spec"]["taints"] == [
        *others,
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    ]
    patches = len([r for r in api.requests if r[0] == "PATCH"])

    # same state again: no write
    assert not apply_node_gpu_state(kube, NODE, labels, node_taints(True))
    assert len([r for r in api.requests if r[0] == "PATCH"]) == patches

    # gpu-taint=false: our taint goes, the other stays
    assert apply_node_gpu_state(kube, NODE, labels, node_taints(False))
    assert api.get_object(NODE_PATH)["spec"]["taints"] == others

    # the worker lost its GPUs: every GPU label removed, other labels kept
    gone = node_labels(cpu_only, None, None)
    assert apply_node_gpu_state(kube, NODE, gone, node_taints(True, has_gpu=False))
    node = api.get_object(NODE_PATH)
    assert gpu_labels(node) == {}
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": NODE}


def test_a_taint_added_between_the_read_and_the_patch_is_kept(api, kube, a10g):
    """`spec.taints` is replaced whole: the patch carries the resourceVersion read.

    The server refuses it (409) when an operator tainted the Node meanwhile, and the Node
    is read again (kubernetes controller_utils.go PatchNodeTaints' precondition).
    """
    api.put_object(NODE_PATH, {"metadata": {"labels": {"kubernetes.io/hostname": NODE}}})
    operator = {"key": "example.com/maintenance", "value": "disk", "effect": "NoSchedule"}
    done: list[str] = []

    def operator_taints(method: str, path: str) -> None:
        if method == "GET" and path == NODE_PATH and not done:
            done.append(path)
            current = api.get_object(NODE_PATH)
            api.put_object(NODE_PATH, {**current, "spec": {"taints": [operator]}})

    api.meanwhile.append(operator_taints)

    assert apply_node_gpu_state(kube, NODE, node_labels(a10g, None, None), node_taints(True))

    assert done
    assert api.get_object(NODE_PATH)["spec"]["taints"] == [operator, GPU_TAINT]
    assert len([r for r in api.requests if r[0] == "PATCH"]) == 2


def test_cpu_node_without_gpu_labels_is_not_patched(api, kube, cpu_only):
    api.put_object(NODE_PATH, {"metadata": {"labels": {"kubernetes.io/hostname": NODE}}})

    changed = apply_node_gpu_state(
        kube, NODE, node_labels(cpu_only, None, None), node_taints(True, False)
    )

    assert not changed
    assert not [r for r in api.requests if r[0] == "PATCH"]


def test_unregistered_node_is_a_lookup_error(kube, a10g):
    with pytest.raises(LookupError, match="not registered"):
        apply_node_gpu_state(kube, NODE, node_labels(a10g, None, None), [])
