"""GPU enablement of the kubernetes-worker charm, end to end through ops.testing.

The machine is a `FakeMachine` with the sysfs tree of an EC2 g5.12xlarge (4x A10G) or a
CPU-only m5, a fake NVIDIA driver (`fakes.nvidia_driver`) and NVIDIA's toolkit
repository; the cluster is `FakeKubeApiServer`.
"""

import dataclasses
import json
import logging
import time

import drain_turns
import driver as nvidia_driver
import gpu_gate
import gpu_repair
import gpu_watcher
import pytest
import readme_examples
import toolkit
import validation
from ops import testing

import charm
from charms.gpu_k8s.v0 import containerd
from charms.gpu_k8s.v0.system import CommandError
from fakes.containerd_ctr import DRIVER_TOO_OLD, VECTORADD_OK, FakeCtr
from fakes.nvidia_driver import KERNEL, FakeDriver
from fakes.sysfs import PCI_IDS, build_machine
from fakes.worker_scenario import (
    NODE,
    QUARANTINED_GPU,
    SA_TOKEN,
    TOKEN,
    WATCHER_STATE,
    joined_state,
    leader_applies_taint,
    node,
    register_node,
    watcher_quarantines,
)

READY_580 = "Ready: 4x NVIDIA A10G, driver 580, CUDA 13.0"
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
NVIDIA_PROGRAMS = ("nvidia-smi", "ubuntu-drivers", "sh", "uname", "dpkg")
# Commands that only ask the machine something (on top of FakeMachine's READ_ONLY).
QUERIES = ("sh -c", "uname -r", "dpkg --print-architecture", "ubuntu-drivers")
UNIT = "kubernetes-worker/0"
NOT_LOADED = "the nvidia kernel module is not loaded"
MISMATCH = "the loaded NVIDIA kernel module does not match the installed driver"
# What `auto` installs on an A10G: ubuntu-drivers ranks 580-server-open first (branches
# from 560 prefer open modules), for the aws kernel flavour.
SERIES = nvidia_driver.Series("580", "server-open", "aws")
NEW_KERNEL = "6.8.0-1016-aws"
BOOT_NEW_KERNEL = (
    f"kernel {NEW_KERNEL} has the NVIDIA 580-server-open modules, the running {KERNEL} not"
)
SWITCH_TO_580 = "switching to NVIDIA driver 580-server-open"


@pytest.fixture
def driver(machine):
    """The A10G machine: GPUs in sysfs (no module loaded yet), driver fakes, toolkit repo."""
    d = FakeDriver(machine)
    d.serve_toolkit()
    build_machine(machine.path("/sys"), "g5-a10g", module_loaded=False)
    machine.write("/usr/share/misc/pci.ids", PCI_IDS)
    machine.write("/sys/class/dmi/id/product_name", "g5.12xlarge\n")  # EC2's DMI name
    return d


def changes(machine, since=0):
    """Commands after the `since`-th mutation that changed the machine."""
    return [line for line in machine.mutations()[since:] if not line.startswith(QUERIES)]


def installs(machine):
    return [line for line in machine.lines("apt-get") if " install " in line]


def writes(api):
    return [r for r in api.requests if r[0] != "GET"]


def gpu_labels(api):
    labels = node(api)["metadata"].get("labels") or {}
    return {k: v for k, v in labels.items() if k.startswith("nvidia.com/")}


def taints(api):
    return node(api).get("spec", {}).get("taints") or []


def with_config(state, **config):
    return dataclasses.replace(state, config={**state.config, **config})


def run_joined(ctx, api, config=None, **provider):
    register_node(api)
    state = joined_state(api, config=config, **provider)
    out = ctx.run(ctx.on.relation_changed(next(iter(state.relations))), state)
    return leader_applies_taint(api, out)


def unit_data(state):
    return next(iter(state.relations)).local_unit_data


# -- CPU nodes ------------------------------------------------------------------------


def test_cpu_node_runs_no_nvidia_program_and_installs_no_nvidia_package(ctx, machine, api):
    FakeDriver(machine).serve_toolkit()  # present but must stay unused

    out = run_joined(ctx, api)

    assert out.unit_status == testing.ActiveStatus("Ready (no GPU)")
    for program in NVIDIA_PROGRAMS:
        assert machine.lines(program) == []
    assert not [p for p in machine.dpkg if "nvidia" in p]
    assert not machine.path("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").exists()
    assert machine.read(containerd.CONFIG_PATH) == containerd.render_config()
    assert "gpu-inventory" not in unit_data(out)
    assert gpu_labels(api) == {} and taints(api) == []
    assert [r for r in api.requests if r[0] == "PATCH"] == []  # nothing to label or taint


# -- driver ---------------------------------------------------------------------------


def test_a10g_without_driver_installs_planned_packages_and_holds_them(ctx, machine, api, driver):
    out = run_joined(ctx, api)

    assert out.unit_status == testing.ActiveStatus(READY_580)
    planned = {*SERIES.userspace, SERIES.modules_meta, SERIES.modules(KERNEL)}
    assert planned <= set(machine.dpkg)
    # the driver is held; its modules never are (each ABI package is for one kernel)
    assert set(SERIES.userspace) <= machine.held
    assert not [p for p in machine.held if p.startswith("linux-")]
    assert {p: machine.dpkg[p] for p in toolkit.TOOLKIT_PACKAGES} == dict.fromkeys(
        toolkit.TOOLKIT_PACKAGES, toolkit.TOOLKIT_VERSION
    )
    assert set(toolkit.TOOLKIT_PACKAGES) <= machine.held
    config = machine.read(containerd.CONFIG_PATH)
    assert ".containerd.runtimes.nvidia]" in config
    assert 'default_runtime_name = "runc"' in config
    assert machine.services["containerd"].restarts == 1  # once, with the nvidia runtime
    assert len(machine.joins) == 1


def test_gpu_node_is_labelled_tainted_and_publishes_its_inventory(ctx, machine, api, driver):
    out = run_joined(ctx, api)

    assert gpu_labels(api) == {
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
        "nvidia.com/mps.capable": "false",
        # the device plugin runs where this is true (NVIDIA's mig-manager pauses it)
        "nvidia.com/gpu.deploy.device-plugin": "true",
    }
    assert taints(api) == [TAINT]
    data = unit_data(out)
    assert data["node-name"] == NODE
    assert json.loads(data["gpu-inventory"]) == [
        {
            "count": 4,
            "cuda": "13.0",
            "driver": "580.95.05",
            "memory-mib": 23028,
            "mig-capable": False,
            "model": "NVIDIA A10G",
            "pci-device-id": "2237",
        }
    ]


def test_gpu_labels_describe_the_control_planes_device_plugin_sharing(ctx, machine, api, driver):
    provider = {"mig-strategy": "single", "gpu-time-slicing-replicas": "4"}
    out = run_joined(ctx, api, **provider)

    labels = gpu_labels(api)
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A10G-SHARED"
    assert labels["nvidia.com/mig.strategy"] == "single"

    # the control plane stops sharing: back to GFD's values for a plain GPU
    relation = next(iter(out.relations))
    data = {k: v for k, v in relation.remote_app_data.items() if k not in provider}
    relation = dataclasses.replace(relation, remote_app_data=data)
    out = ctx.run(
        ctx.on.relation_changed(relation), dataclasses.replace(out, relations={relation})
    )

    labels = gpu_labels(api)
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A10G"
    assert "nvidia.com/mig.strategy" not in labels
    assert out.unit_status == testing.ActiveStatus(READY_580)


def test_host_with_a_working_driver_installs_no_driver(ctx, machine, api, driver):
    driver.preinstall("570")
    before = {p: v for p, v in machine.dpkg.items() if "nvidia-utils" in p}

    out = run_joined(ctx, api)

    assert out.unit_status == testing.ActiveStatus("Ready: 4x NVIDIA A10G, driver 570, CUDA 13.0")
    assert not [line for line in installs(machine) if "nvidia-utils" in line]
    assert {p: v for p, v in machine.dpkg.items() if "nvidia-utils" in p} == before
    assert machine.lines("ubuntu-drivers") == []


@pytest.mark.parametrize(
    ("value", "preinstalled", "branch", "status"),
    [
        ("auto", None, "580", READY_580),
        ("auto", "570", "570", "Ready: 4x NVIDIA A10G, driver 570, CUDA 13.0"),
        ("595", None, "595", "Ready: 4x NVIDIA A10G, driver 595, CUDA 13.0"),
        ("580", "580", "580", READY_580),
        ("none", "570", "570", "Ready: 4x NVIDIA A10G, driver 570, CUDA 13.0"),
    ],
)
def test_each_nvidia_driver_value(ctx, machine, api, driver, value, preinstalled, branch, status):
    if preinstalled:
        driver.preinstall(preinstalled)

    out = run_joined(ctx, api, config={"nvidia-driver": value})

    assert out.unit_status == testing.ActiveStatus(status)
    assert driver.userspace_branch() == branch
    if value in ("none",) or preinstalled == branch:
        assert not [line for line in installs(machine) if "nvidia-utils" in line]


def test_an_end_of_life_branch_blocks_and_installs_no_driver(ctx, machine, api, driver):
    """535 was `Ready` here until NVIDIA's R535 ended in June 2026 (review gpu.md N3)."""
    out = run_joined(ctx, api, config={"nvidia-driver": "535"})

    assert out.unit_status == testing.BlockedStatus(
        "NVIDIA driver branch 535 reached its end of life (June 2026, NVIDIA's data center "
        "driver support matrix) and gets no more security fixes; set nvidia-driver=auto for "
        "the newest long-term branch, or to a supported branch"
    )
    assert driver.userspace_branch() is None


def test_nvidia_driver_none_without_a_driver_blocks_with_what_to_do(ctx, machine, api, driver):
    out = run_joined(ctx, api, config={"nvidia-driver": "none"})

    assert out.unit_status == testing.BlockedStatus(
        "NVIDIA driver not working (absent: /usr/bin/nvidia-smi not installed); install one "
        "or set nvidia-driver=auto"
    )
    assert not [p for p in machine.dpkg if p.startswith(("nvidia-utils", "linux-modules"))]
    assert len(machine.joins) == 1  # the node still joins


def test_pinned_branch_replaces_a_working_branch_only_under_a_drain(ctx, machine, api, driver):
    driver.preinstall("570")

    out = run_joined(ctx, api, config={"nvidia-driver": "580"})

    assert driver.userspace_branch() == "570"  # nothing changed under the running pods
    packages = " ".join((*SERIES.userspace, SERIES.modules_meta, SERIES.modules(KERNEL)))
    assert out.unit_status == testing.BlockedStatus(
        f"reboot needed: {SWITCH_TO_580}; run `kubectl drain {NODE} --ignore-daemonsets "
        f"--delete-emptydir-data`, `juju ssh {UNIT} -- sudo apt-get install -y "
        f"--allow-change-held-packages {packages}`, `juju ssh {UNIT} -- sudo reboot`, then "
        f"`kubectl uncordon {NODE}` (or set auto-reboot=true)"
    )


def test_bad_nvidia_driver_blocks_and_runs_nothing_on_a_gpu_node(ctx, machine, api, driver):
    out = ctx.run(ctx.on.config_changed(), joined_state(api, config={"nvidia-driver": "abc"}))

    assert out.unit_status == testing.BlockedStatus(
        "Invalid config: nvidia-driver: must be auto, none, or a branch such as 580, "
        "580-server or 580-server-open, not 'abc'"
    )
    assert machine.calls == []
    assert writes(api) == []


def test_apt_failure_blocks_naming_the_package_and_does_not_join(ctx, machine, api, driver):
    machine.withdraw(SERIES.modules_meta)

    out = run_joined(ctx, api)

    assert out.unit_status == testing.BlockedStatus(
        f"failed to install {SERIES.modules_meta}: E: Unable to locate package "
        f"{SERIES.modules_meta}; check the package source and that the "
        "nvidia-driver branch exists for this kernel, or set nvidia-driver=none"
    )
    assert not [p for p in machine.dpkg if "nvidia" in p and p != "ubuntu-drivers-common"]
    assert machine.joins == []


def test_unreachable_toolkit_repository_blocks_naming_the_option(ctx, machine, api, driver):
    del machine.remote["https://nvidia.github.io/libnvidia-container/stable/deb/amd64"]

    out = run_joined(ctx, api)

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("failed to install nvidia-container-toolkit: ")
    assert "check that nvidia-apt-source" in out.unit_status.message
    assert machine.joins == []


def test_toolkit_from_a_mirror(ctx, machine, api, driver):
    mirror = "http://mirror.internal/nvidia/deb/amd64"
    machine.remote[mirror] = machine.remote.pop(
        "https://nvidia.github.io/libnvidia-container/stable/deb/amd64"
    )
    machine.urls["http://mirror.internal/nvidia/gpgkey"] = machine.urls[toolkit.TOOLKIT_KEY_URL]
    source = "http://mirror.internal/nvidia/deb/$(ARCH) / key=http://mirror.internal/nvidia/gpgkey"

    out = run_joined(ctx, api, config={"nvidia-apt-source": source})

    assert out.unit_status == testing.ActiveStatus(READY_580)
    assert not any("nvidia.github.io" in line for line in machine.lines())


def test_nvidia_default_runtime_option(ctx, machine, api, driver):
    out = run_joined(ctx, api)
    restarts = machine.services["containerd"].restarts

    ctx.run(ctx.on.config_changed(), with_config(out, **{"nvidia-default-runtime": True}))

    assert 'default_runtime_name = "nvidia"' in machine.read(containerd.CONFIG_PATH)
    assert machine.services["containerd"].restarts == restarts + 1


# -- reboots --------------------------------------------------------------------------


def needs_reboot(driver):
    """A newer kernel is installed, and only it has nvidia modules in the archive."""
    driver.stale_kernel(NEW_KERNEL)


def test_reboot_needed_without_auto_reboot_blocks_with_the_exact_commands(
    ctx, machine, api, driver, reboots
):
    needs_reboot(driver)
    register_node(api)
    state = joined_state(api)
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    state = dataclasses.replace(state, relations={*state.relations, agent})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status == testing.BlockedStatus(
        f"reboot needed: {BOOT_NEW_KERNEL}; run `kubectl drain {NODE} --ignore-daemonsets "
        f"--delete-emptydir-data`, `juju ssh {UNIT} -- sudo reboot`, then `kubectl uncordon "
        f"{NODE}` (or set auto-reboot=true)"
    )
    assert reboots == []
    assert not node(api).get("spec", {}).get("unschedulable")
    # tainted as a GPU node (it registers with the taint; the control plane sets it on a
    # Node that lacks it), but not labelled for the device plugin until the driver works
    assert machine.joins[0]["nodeRegistration"]["taints"] == [TAINT]
    leader_applies_taint(api, out)
    assert taints(api) == [TAINT]
    assert gpu_labels(api) == {}
    assert len(machine.joins) == 1
    # a related COS agent sees it too (unit_state): blocked, GPUs unusable until the reboot
    served = machine.host().read("/var/lib/gpu-k8s/unit-state/kubernetes-worker-0.prom")
    assert {
        'gpu_k8s_unit_status{status="blocked"} 1',
        "gpu_k8s_node_reboot_required 1",
        "gpu_k8s_node_gpus_usable 0",
    } <= set(served.splitlines())


def add_pod(api, name):
    api.put_object(
        f"/api/v1/namespaces/default/pods/{name}",
        {
            "metadata": {},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"},
        },
    )


def test_auto_reboot_drains_reboots_then_uncordons_on_the_new_boot(
    ctx, machine, api, driver, clock, reboots
):
    driver.preinstall("570")
    out = run_joined(ctx, api, config={"auto-reboot": True})
    assert out.unit_status == testing.ActiveStatus("Ready: 4x NVIDIA A10G, driver 570, CUDA 13.0")
    add_pod(api, "train-0")

    # the operator pins 580: drained first, then 580 replaces 570, then the reboot
    out = ctx.run(ctx.on.config_changed(), with_config(out, **{"nvidia-driver": "580"}))

    assert out.unit_status == testing.MaintenanceStatus(f"rebooting: {SWITCH_TO_580}")
    assert reboots == [False]  # after the hook, so that Juju records it
    assert node(api)["spec"]["unschedulable"] is True
    assert api.get_object("/api/v1/namespaces/default/pods/train-0") is None
    assert driver.userspace_branch() == "580"
    assert set(SERIES.userspace) <= machine.held

    # another hook before Juju reboots: nothing more happens
    before_machine, before_api = len(machine.mutations()), len(writes(api))
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.MaintenanceStatus("waiting for Juju to reboot this machine")
    assert reboots == [False]
    assert changes(machine, before_machine) == [] and len(writes(api)) == before_api

    driver.reboot()
    out = ctx.run(ctx.on.start(), out)

    assert out.unit_status == testing.ActiveStatus(READY_580)
    assert not node(api)["spec"].get("unschedulable")
    assert gpu_labels(api)["nvidia.com/cuda.driver.major"] == "580"
    assert reboots == [False]

    before_api = len(writes(api))
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus(READY_580)
    assert len(writes(api)) == before_api


def test_auto_reboot_before_joining_reboots_without_touching_the_api(
    ctx, machine, api, driver, reboots
):
    needs_reboot(driver)

    out = ctx.run(ctx.on.install(), testing.State(config={"auto-reboot": True}))

    assert reboots == [False]
    assert out.unit_status == testing.MaintenanceStatus(f"rebooting: {BOOT_NEW_KERNEL}")
    assert api.requests == []

    driver.reboot()
    out = ctx.run(ctx.on.start(), out)

    assert out.unit_status == testing.WaitingStatus(
        "not related to a control plane: integrate with kubernetes-control-plane"
    )
    assert api.requests == []
    assert reboots == [False]


def test_driver_still_broken_after_the_reboot_blocks_without_rebooting_again(
    ctx, machine, api, driver, clock, reboots
):
    needs_reboot(driver)
    out = run_joined(ctx, api, config={"auto-reboot": True})
    assert reboots == [False]

    driver.reboot()
    driver.loaded = None  # the module would not load on the new boot either
    machine.path("/sys/module/nvidia").rmdir()
    stderr = "modprobe: ERROR: could not insert 'nvidia': Unknown symbol in module"
    machine.fail("/usr/sbin/modprobe nvidia", stderr=stderr, times=2)
    out = ctx.run(ctx.on.start(), out)

    assert reboots == [False]
    assert out.unit_status == testing.BlockedStatus(
        f"driver still not working after reboot: {NOT_LOADED}; check `journalctl -k | grep "
        f"-i nvidia` on {UNIT}, then `kubectl uncordon {NODE}`; no other GPU node of this "
        "application gets a turn to reboot or reset its GPUs until this one works or is "
        "removed"
    )


def test_kernel_update_needing_a_newer_driver_drains_updates_reboots_and_uncordons(
    ctx, machine, api, driver, clock, reboots
):
    out = run_joined(ctx, api, config={"auto-reboot": True})
    assert out.unit_status == testing.ActiveStatus(READY_580)
    add_pod(api, "train-0")
    driver.driver_sru("580", "580.105.08")  # held: the node keeps 580.95.05
    driver.kernel_update(NEW_KERNEL)  # modules built against 580.105.08 only

    out = ctx.run(ctx.on.update_status(), out)

    reason = (
        f"kernel {NEW_KERNEL} needs a newer NVIDIA 580-server-open driver than the running "
        "580.95.05"
    )
    assert out.unit_status == testing.MaintenanceStatus(f"rebooting: {reason}")
    assert node(api)["spec"]["unschedulable"] is True  # drained before anything moved
    assert api.get_object("/api/v1/namespaces/default/pods/train-0") is None
    assert machine.dpkg[SERIES.userspace[1]].startswith("580.105.08-")
    assert SERIES.modules(NEW_KERNEL) in machine.dpkg
    assert reboots == [False]

    driver.reboot()
    out = ctx.run(ctx.on.start(), out)

    assert driver.running == NEW_KERNEL
    assert out.unit_status == testing.ActiveStatus(READY_580)
    assert gpu_labels(api)["nvidia.com/gpu.present"] == "true"
    assert not node(api)["spec"].get("unschedulable")


def test_a_driver_update_pauses_the_gpu_watchers_polls_from_its_install_to_the_reboot(
    ctx, machine, api, driver, clock, reboots
):
    """Review44b G1: the GPU health watcher does not judge the update's nvidia-smi.

    Between the update's install and Juju's reboot nvidia-smi answers "Driver/library
    version mismatch". The watcher's polls are paused (its pause file, as a GPU reset
    pauses them) before apt runs, for as long as the install and the reboot may take;
    the reboot ends it.
    """
    out = run_joined(ctx, api, config={"auto-reboot": True})
    driver.driver_sru("580", "580.105.08")
    driver.kernel_update(NEW_KERNEL)
    pause = machine.path(gpu_watcher.PAUSE_FILE)
    installs = []
    apt_get = machine.runner.handlers["apt-get"]  # the fake apt-get (the driver's), watched

    def watched(argv, stdin):
        if "install" in argv:
            installs.append((argv, pause.read_text() if pause.exists() else None))
        return apt_get(argv, stdin)

    machine.on("apt-get", watched)

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.message.startswith("rebooting: ")
    assert reboots == [False]
    said = gpu_watcher.pause_text(NODE, gpu_watcher.PAUSE_DRIVER, drain_turns.DRIVER_PAUSE_S)
    # the userspace (nvidia-utils: nvidia-smi, libnvidia-ml) installed with the pause on
    userspace = [paused for argv, paused in installs if "nvidia-utils-580-server" in argv]
    assert userspace == [said]
    assert pause.read_text() == said  # until the reboot (it clears /run)
    assert gpu_watcher.pause_seconds(said, gpu_watcher.PAUSE_MAX_S) == 3600
    assert "the NVIDIA driver's update and the reboot after it" in said


def test_kernel_update_needing_a_newer_driver_without_auto_reboot_says_what_to_run(
    ctx, machine, api, driver, reboots
):
    out = run_joined(ctx, api)
    driver.driver_sru("580", "580.105.08")
    driver.kernel_update(NEW_KERNEL)

    out = ctx.run(ctx.on.update_status(), out)

    packages = " ".join((*SERIES.userspace, SERIES.modules(NEW_KERNEL)))
    assert out.unit_status.name == "blocked"
    assert f"sudo apt-get install -y --allow-change-held-packages {packages}`" in (
        out.unit_status.message
    )
    assert machine.dpkg[SERIES.userspace[1]].startswith("580.95.05-")  # nothing moved
    assert reboots == []


def test_kernel_update_with_its_modules_in_place_keeps_the_node_ready(
    ctx, machine, api, driver, reboots
):
    out = run_joined(ctx, api, config={"auto-reboot": True})
    driver.kernel_update(NEW_KERNEL)

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.ActiveStatus(
        f"{READY_580}; kernel {NEW_KERNEL} waits for a reboot"
    )
    assert reboots == []
    assert not node(api)["spec"].get("unschedulable")


@pytest.fixture
def p5(machine):
    """A p5.48xlarge: 8x H100 SXM5 on an NVSwitch board."""
    fake = FakeDriver(
        machine, gpus=8, nvswitch=True, model=("NVIDIA H100 80GB HBM3", 81559, "9.0")
    )
    fake.serve_toolkit()
    build_machine(machine.path("/sys"), "p5-h100", module_loaded=False)
    machine.write("/usr/share/misc/pci.ids", PCI_IDS)
    return fake


def test_nvswitch_node_blocks_while_fabric_manager_fails_and_withholds_labels(
    ctx, machine, api, p5
):
    p5.fabric_starts = False

    out = run_joined(ctx, api)

    # a Fabric Manager that does not start is the operator's to fix (gpu.md N5)
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(
        "NVIDIA Fabric Manager: nvidia-fabricmanager did not start ("
    )
    assert gpu_labels(api) == {}  # the device plugin stays away: CUDA would fail (802)
    assert taints(api) == [TAINT]
    assert {"nvidia-fabricmanager-580", "libnvidia-nscq-580"} <= machine.held

    p5.fabric_starts = True
    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "active"
    assert gpu_labels(api)["nvidia.com/gpu.count"] == "8"


def test_nvswitch_node_is_ready_only_once_fabric_registration_succeeds(ctx, machine, api, p5):
    out = run_joined(ctx, api)
    assert out.unit_status.name == "active"
    p5.fabric_status = "Unknown Error"  # Fabric Manager runs; registration failed

    out = ctx.run(ctx.on.update_status(), out)

    assert machine.services["nvidia-fabricmanager"].active
    assert out.unit_status == testing.BlockedStatus(
        "NVIDIA Fabric Manager: fabric registration failed (`nvidia-smi -q`, Fabric: GPUs "
        "0, 1, 2, 3, 4, 5, 6, 7: State Completed, Status Unknown Error); the GPUs stay "
        "unlabelled until it works"
    )
    assert gpu_labels(api) == {}


def p5_update_turn(ctx, api, p5, reboots, limit=1):
    """This p5 (the leader, of three) takes the turn for a driver update and reboots."""
    out = run_joined(ctx, api, config={"auto-reboot": True, "max-parallel-reboots": limit})
    out = with_peers(out, peers(turns=[], others={1: {}, 2: {}}), leader=True)
    p5.driver_sru("580", "580.105.08")
    p5.kernel_update(NEW_KERNEL)  # its modules need the newer driver: an update turn
    out = ctx.run(ctx.on.update_status(), out)
    assert reboots == [False] and node(api)["spec"]["unschedulable"] is True
    return out


def turns_of(out):
    relation = reboots_relation(out)
    return json.loads(relation.local_app_data["reboot-turns"]), relation


def test_fabric_manager_failing_after_the_update_reboot_keeps_the_turn_and_the_cordon(
    ctx, machine, api, p5, reboots
):
    """gpu.md N2: the next NVSwitch node must not walk into the same failure."""
    out = p5_update_turn(ctx, api, p5, reboots)
    p5.fabric_starts = False  # the new Fabric Manager does not come up
    p5.reboot()

    out = ctx.run(ctx.on.start(), out)

    assert out.unit_status.name == "blocked"
    message = out.unit_status.message
    assert message.startswith("NVIDIA Fabric Manager: nvidia-fabricmanager did not start (")
    assert "after the reboot; check `juju ssh kubernetes-worker/0 -- nvidia-smi -q`" in message
    assert (
        "no other NVSwitch node of this application gets a turn to reboot or reset its GPUs "
        "until this one works or is removed"
    ) in message
    assert node(api)["spec"]["unschedulable"] is True
    assert gpu_labels(api) == {}

    # the next p5 asks: it waits, hook after hook, while this one is broken
    turns, relation = turns_of(out)
    relation = dataclasses.replace(relation, peers_data={1: asked(time.time()), 2: {}})
    others = {r for r in out.relations if r.endpoint != "reboots"}
    out = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=1),
        dataclasses.replace(out, relations={*others, relation}),
    )
    out = ctx.run(ctx.on.update_status(), out)
    turns, relation = turns_of(out)
    assert turns == [UNIT] and "reboot-request" in relation.local_unit_data
    assert node(api)["spec"]["unschedulable"] is True
    assert reboots == [False]

    p5.fabric_starts = True  # the operator fixed it
    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "active"
    assert not node(api)["spec"].get("unschedulable")
    turns, relation = turns_of(out)
    assert turns == ["kubernetes-worker/1"] and "reboot-request" not in relation.local_unit_data


def test_a_fabric_manager_failure_holds_back_every_nvswitch_node_at_two_turns(
    ctx, machine, api, p5, reboots
):
    """Issue 30 item 8 at max-parallel-reboots=2: the second turn goes to no NVSwitch node.

    Unit 1 (a p5, oldest) waits while this p5's Fabric Manager fails after its reboot;
    unit 2 (an A10G node: no Fabric Manager) may take the free turn.
    """
    out = p5_update_turn(ctx, api, p5, reboots, limit=2)
    p5.fabric_starts = False
    p5.reboot()
    out = ctx.run(ctx.on.start(), out)
    assert out.unit_status.name == "blocked"
    assert (
        "no other NVSwitch node of this application gets a turn to reboot or reset its GPUs "
        "until this one works or is removed"
    ) in out.unit_status.message
    assert reboots_relation(out).local_unit_data["gpu"] == "nvswitch"
    assert reboots_relation(out).local_unit_data["reboot-failed"] == "fabric"

    now = time.time()
    relation = dataclasses.replace(
        reboots_relation(out),
        peers_data={1: {**asked(now), "gpu": "nvswitch"}, 2: {**asked(now + 1), "gpu": "gpu"}},
    )
    others = {r for r in out.relations if r.endpoint != "reboots"}
    out = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=1),
        dataclasses.replace(out, relations={*others, relation}),
    )
    assert turns_of(out)[0] == [UNIT, "kubernetes-worker/2"]

    p5.fabric_starts = True  # the operator fixed it: the held-back p5 gets its turn
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active"
    assert turns_of(out)[0] == ["kubernetes-worker/2", "kubernetes-worker/1"]
    assert "reboot-failed" not in reboots_relation(out).local_unit_data


def test_fabric_registering_after_the_reboot_waits_cordoned_with_its_turn(
    ctx, machine, api, p5, reboots
):
    out = p5_update_turn(ctx, api, p5, reboots)
    p5.fabric_registering = True  # Fabric Manager runs, the GPUs are not registered yet
    p5.reboot()

    out = ctx.run(ctx.on.start(), out)

    assert out.unit_status == testing.WaitingStatus(
        "waiting for NVIDIA Fabric Manager: fabric registration not finished "
        "(`nvidia-smi -q`, Fabric: GPUs 0, 1, 2, 3, 4, 5, 6, 7: State In Progress, Status "
        "N/A)"
    )
    assert node(api)["spec"]["unschedulable"] is True
    assert turns_of(out)[0] == [UNIT]

    p5.fabric_registering = False
    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "active" and turns_of(out)[0] == []
    assert not node(api)["spec"].get("unschedulable")


# -- node state -----------------------------------------------------------------------


def test_gpu_taint_follows_the_option(ctx, machine, api, driver):
    out = run_joined(ctx, api)
    assert taints(api) == [TAINT]

    # the node may not change its own taints: it asks the control-plane leader, which
    # answers on the worker's relation-changed; the request goes once the Node has it
    out = ctx.run(ctx.on.config_changed(), with_config(out, **{"gpu-taint": False}))
    assert unit_data(out)["gpu-taint"] == "false"
    assert taints(api) == [TAINT]
    leader_applies_taint(api, out)
    out = ctx.run(ctx.on.update_status(), out)
    assert taints(api) == [] and "gpu-taint" not in unit_data(out)
    assert gpu_labels(api)["nvidia.com/gpu.present"] == "true"

    out = ctx.run(ctx.on.config_changed(), with_config(out, **{"gpu-taint": True}))
    assert unit_data(out)["gpu-taint"] == "true"
    leader_applies_taint(api, out)
    assert taints(api) == [TAINT]


def test_worker_that_lost_its_gpus_drops_labels_taint_runtime_and_inventory(
    ctx, machine, api, driver
):
    out = run_joined(ctx, api)
    assert gpu_labels(api) and "gpu-inventory" in unit_data(out)
    for function in machine.path("/sys/bus/pci/devices").iterdir():
        function.unlink()  # the GPUs are gone (instance type changed)

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.ActiveStatus("Ready (no GPU)")
    assert gpu_labels(api) == {}
    assert unit_data(out)["gpu-taint"] == "false"  # the control plane removes it
    leader_applies_taint(api, out)
    assert taints(api) == []
    assert node(api)["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert "gpu-inventory" not in unit_data(out)
    assert "nvidia" not in machine.read(containerd.CONFIG_PATH)


# -- idempotency ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "event_name",
    ["install", "start", "config_changed", "update_status", "upgrade_charm", "relation_changed"],
)
def test_each_event_on_a_gpu_node_twice_changes_nothing_the_second_time(
    ctx, machine, api, driver, event_name
):
    register_node(api)
    state = joined_state(api)

    def event(current):
        if event_name == "relation_changed":
            return ctx.on.relation_changed(next(iter(current.relations)))
        return getattr(ctx.on, event_name)()

    out = ctx.run(event(state), state)
    assert out.unit_status == testing.ActiveStatus(READY_580)
    before_machine, before_api = len(machine.mutations()), len(writes(api))
    restarts = machine.services["containerd"].restarts

    again = ctx.run(event(out), out)

    assert again.unit_status == out.unit_status
    assert changes(machine, before_machine) == []
    assert len(writes(api)) == before_api
    assert machine.services["containerd"].restarts == restarts
    assert unit_data(again) == unit_data(out)


# -- gpu-info -------------------------------------------------------------------------


def test_gpu_info_reports_each_gpu(ctx, machine, driver):
    driver.preinstall("580")

    ctx.run(ctx.on.action("gpu-info"), testing.State())

    results = ctx.action_results
    assert results["count"] == "4"
    assert results["driver"] == "580.95.05" and results["cuda"] == "13.0"
    assert results["gpus"]["0"]["name"] == "NVIDIA A10G"
    assert results["gpus"]["3"]["memory"] == "0.0 GiB / 22.5 GiB"
    readme_examples.show("gpu-info", readme_examples.juju_results(results))


def test_gpu_info_on_a_cpu_node_fails_with_what_nvidia_smi_said(ctx, machine):
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("gpu-info"), testing.State())

    assert failed.value.message == "nvidia-smi failed (absent): /usr/bin/nvidia-smi not installed"


def test_gpu_info_with_a_broken_driver_fails_with_nvidia_smis_words(ctx, machine, driver):
    driver.preinstall("570")
    driver.driver_sru("570", "570.211.01")  # someone upgraded the held driver by hand
    machine.dpkg["nvidia-utils-570-server"] = "570.211.01-0ubuntu0.24.04.1"

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("gpu-info"), testing.State())

    assert failed.value.message == (
        "nvidia-smi failed (mismatch): Failed to initialize NVML: Driver/library version mismatch"
    )


# -- validate-gpu ---------------------------------------------------------------------


@pytest.fixture
def ctr(machine, driver):
    """The GPU machine's containerd client (fakes.containerd_ctr)."""
    return FakeCtr(machine, driver)


def joined_gpu_node(ctx, api, driver, config=None):
    driver.preinstall("580")
    return run_joined(ctx, api, config=config)


# The quarantine as the operator meets it without automatic repair (gpu_repairs.py
# repairs it with the default gpu-auto-repair=reboot: the tests at the end of this file).
NO_AUTO_REPAIR = {"gpu-auto-repair": "off"}


def ctr_lines(machine):
    return machine.lines("ctr")


def test_validate_gpu_runs_the_cuda_sample_through_containerd_and_makes_no_api_request(
    ctx, machine, api, driver, ctr
):
    state = joined_gpu_node(ctx, api, driver)
    requests = len(api.requests)

    ctx.run(ctx.on.action("validate-gpu", params={"timeout": 60}), state)

    # one run per GPU (issue 32: the sample runs on the first GPU it sees)
    assert ctx.action_results == {
        "passed": "true",
        "summary": "CUDA check passed on each of 4 GPUs (exit 0): Done",
        "output": VECTORADD_OK,
    }
    readme_examples.show("validate-gpu", readme_examples.juju_results(ctx.action_results))
    image = validation.VALIDATION_IMAGE
    assert ctx.action_logs[0] == f"pulling {image} into containerd (k8s.io)"
    assert ctx.action_logs[1].startswith(
        "running /cuda-samples/vectorAdd with /usr/bin/nvidia-container-runtime (container "
    )
    assert ctr_lines(machine) == [
        line
        for gpu, run in enumerate(ctr.runs)
        for line in (
            f"/usr/bin/ctr -n k8s.io images pull {image}",
            "/usr/bin/ctr -n k8s.io run --rm --privileged --runc-binary "
            f"/usr/bin/nvidia-container-runtime --env NVIDIA_VISIBLE_DEVICES={gpu} --env "
            f"NVIDIA_DRIVER_CAPABILITIES=compute,utility {image} {run['name']} "
            "/cuda-samples/vectorAdd",
        )
    ]
    assert len(ctr.runs) == 4
    # the worker's only credential is its node identity, which creates no pod
    assert api.requests[requests:] == []


def test_validate_gpu_image_from_the_mirror_registry(ctx, api, driver, ctr):
    state = joined_gpu_node(ctx, api, driver)
    mirror = with_config(state, **{"image-registry": "registry.local:5000/mirror"})

    ctx.run(ctx.on.action("validate-gpu"), mirror)
    assert ctr.runs[-1]["image"] == (
        "registry.local:5000/mirror/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
    )

    # an image given to the action is used as given
    ctx.run(ctx.on.action("validate-gpu", params={"image": "other.local/cuda:1"}), mirror)
    assert ctr.runs[-1]["image"] == "other.local/cuda:1"


@pytest.mark.parametrize(
    ("own", "control_plane", "sandbox"),
    [
        ("", None, "registry.k8s.io/pause:3.10.1"),
        ("", "cp.local/m", "cp.local/m/pause:3.10.1"),  # what the control plane publishes
        ("reg.local/w", "cp.local/m", "reg.local/w/pause:3.10.1"),  # this unit's option wins
    ],
)
def test_containerd_sandbox_image_follows_the_image_registry(
    ctx, machine, api, driver, own, control_plane, sandbox
):
    register_node(api)
    state = joined_state(api, config={"image-registry": own}, **{"image-registry": control_plane})

    ctx.run(ctx.on.config_changed(), state)

    assert f'  sandbox = "{sandbox}"\n' in machine.read(containerd.CONFIG_PATH)


def test_bad_image_registry_blocks_and_changes_nothing(ctx, machine, api, driver):
    out = ctx.run(
        ctx.on.config_changed(), joined_state(api, config={"image-registry": "https://reg"})
    )

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("Invalid config: image-registry: 'https://reg'")
    assert machine.calls == [] and writes(api) == []


def test_validate_gpu_image_from_param_or_config(ctx, api, driver, ctr):
    state = joined_gpu_node(ctx, api, driver)
    configured = with_config(state, **{"gpu-validation-image": "registry.local/cuda:check"})

    ctx.run(ctx.on.action("validate-gpu"), configured)
    assert ctr.runs[-1]["image"] == "registry.local/cuda:check"

    ctx.run(ctx.on.action("validate-gpu", params={"image": "other.local/cuda:1"}), configured)
    assert ctr.runs[-1]["image"] == "other.local/cuda:1"


def test_validate_gpu_failure_fails_the_action_with_the_output(ctx, api, driver, ctr):
    state = joined_gpu_node(ctx, api, driver)
    ctr.driver_too_old = True

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("validate-gpu"), state)

    assert "CUDA driver version is insufficient" in failed.value.message
    assert failed.value.message.startswith("GPU 0: CUDA check failed (exit 1): ")
    assert ctx.action_results["passed"] == "false"
    assert ctx.action_results["output"] == DRIVER_TOO_OLD.strip()


def test_validate_gpu_without_a_working_driver_fails_no_device(ctx, api, driver, ctr):
    state = joined_gpu_node(ctx, api, driver)
    driver.loaded = None  # the module went away (nvidia-smi: not loaded)

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("validate-gpu"), state)

    assert "no CUDA-capable device is detected" in failed.value.message


def test_validate_gpu_image_the_registry_lacks_fails_with_ctrs_answer(ctx, api, driver, ctr):
    state = joined_gpu_node(ctx, api, driver)
    ctr.registry = set()

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("validate-gpu", params={"image": "other.local/cuda:1"}), state)

    assert failed.value.message == (
        'cannot pull other.local/cuda:1: ctr: failed to resolve reference "other.local/cuda:1": '
        "not found"
    )
    assert ctr.runs == []


def test_validate_gpu_timeout_fails_and_removes_the_container(ctx, api, driver, ctr):
    state = joined_gpu_node(ctx, api, driver)
    ctr.hang = True

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("validate-gpu", params={"timeout": 10}), state)

    assert failed.value.message == "GPU 0: CUDA check timed out after 10s"
    assert ctr.containers["k8s.io"] == set()  # tasks delete --force, containers delete


def test_validate_gpu_on_a_cpu_node_fails_without_running_anything(ctx, machine, api):
    state = run_joined(ctx, api)
    before = len(writes(api))

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("validate-gpu"), state)

    assert failed.value.message == (
        "this machine has no NVIDIA GPU: run validate-gpu on a GPU worker"
    )
    assert len(writes(api)) == before
    assert machine.lines("ctr") == []


def test_validate_gpu_before_joining_fails(ctx, machine, driver):
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("validate-gpu"), testing.State())

    assert failed.value.message.startswith("not joined to a cluster yet: not related")


def test_validate_gpu_rejects_a_bad_timeout(ctx, machine, api, driver, ctr):
    state = joined_gpu_node(ctx, api, driver)

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("validate-gpu", params={"timeout": 1}), state)

    assert "timeout: must be a number of seconds from 10 to 3600" in failed.value.message
    assert machine.lines("ctr") == []


def test_an_unprivileged_container_gets_no_gpu_from_the_variable(machine, driver, ctr):
    """Why the check's container is privileged: the charm's toolkit config (toolkit.py)."""
    driver.preinstall("580")
    machine.dpkg.update({"containerd": "2.2.1", "nvidia-container-toolkit": "1.20.0-1"})
    host = machine.host()
    host.run(validation.CTR, "-n", "k8s.io", "images", "pull", "cuda:1")
    argv = validation.run_command("cuda:1", "x")
    argv.remove("--privileged")
    with pytest.raises(CommandError) as refused:
        host.run(*argv)
    assert "no CUDA-capable device is detected" in refused.value.stderr


# -- secrets --------------------------------------------------------------------------


def test_no_secret_in_logs_statuses_results_or_databags_on_a_gpu_node(
    ctx, machine, api, driver, ctr, clock, reboots, caplog
):
    seen = []
    with caplog.at_level(logging.DEBUG):
        needs_reboot(driver)
        out = run_joined(ctx, api, config={"auto-reboot": True})
        seen.append(out.unit_status.message)
        driver.reboot()
        out = ctx.run(ctx.on.start(), out)
        seen.append(out.unit_status.message)
        ctx.run(ctx.on.action("gpu-info"), out)
        seen.append(json.dumps(ctx.action_results))
        ctx.run(ctx.on.action("validate-gpu"), out)
        seen.append(json.dumps(ctx.action_results))
        seen.extend(ctx.action_logs)

    for relation in out.relations:
        seen.extend(relation.local_unit_data.values())
    seen.append(caplog.text)
    seen.extend(str(line) for line in ctx.juju_log)
    seen.extend(c.line + (c.input or "") for c in machine.calls)
    seen.append(json.dumps([s.content for s in out.stored_states]))
    text = "\n".join(seen)
    assert READY_580 in text  # the checks above saw real output
    for secret in (TOKEN, TOKEN.split(".")[1], SA_TOKEN):
        assert secret not in text


def test_auto_reboot_of_a_joined_node_without_api_access_waits_instead_of_rebooting(
    ctx, machine, api, driver, clock, reboots
):
    driver.preinstall("570")
    out = run_joined(ctx, api, config={"auto-reboot": True})
    # the worker drains as its kubelet: without the kubelet's certificate it has no access
    # (it used the control plane's join secret before issue 29 item 2)
    machine.path("/var/lib/kubelet/pki/kubelet-client-current.pem").unlink()

    out = ctx.run(ctx.on.config_changed(), with_config(out, **{"nvidia-driver": "580"}))

    assert reboots == []
    assert out.unit_status == testing.WaitingStatus(
        f"reboot needed ({SWITCH_TO_580}); cannot drain node {NODE} yet: kubelet.conf names "
        "the client certificate /var/lib/kubelet/pki/kubelet-client-current.pem, which is "
        "missing"
    )


# -- turns to reboot ------------------------------------------------------------------


def peers(turns=None, mine=None, others=None):
    """The `reboots` peer relation: the leader's turns, this unit's and others' requests."""
    return testing.PeerRelation(
        "reboots",
        local_app_data={"reboot-turns": json.dumps(turns)} if turns is not None else {},
        local_unit_data=mine or {},
        peers_data=others or {},
    )


def asked(since, reason="kernel"):
    return {"reboot-request": json.dumps({"since": since, "reason": reason})}


def with_peers(state, relation, leader=False):
    return dataclasses.replace(state, relations={*state.relations, relation}, leader=leader)


def test_a_unit_waits_for_its_turn_while_another_reboots(ctx, machine, api, driver, reboots):
    needs_reboot(driver)
    register_node(api)
    state = with_peers(
        joined_state(api, config={"auto-reboot": True}),
        peers(turns=["kubernetes-worker/1"], others={1: asked(100.0)}),
    )

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status == testing.WaitingStatus(
        f"reboot needed ({BOOT_NEW_KERNEL}); waiting for a turn (max-parallel-reboots: 1 node "
        "at once); rebooting now: kubernetes-worker/1"
    )
    assert reboots == []
    assert not node(api).get("spec", {}).get("unschedulable")  # not drained
    mine = out.get_relation(next(r.id for r in out.relations if r.endpoint == "reboots"))
    assert json.loads(mine.local_unit_data["reboot-request"])["reason"] == BOOT_NEW_KERNEL


def test_a_unit_with_its_turn_drains_and_reboots(ctx, machine, api, driver, clock, reboots):
    needs_reboot(driver)
    register_node(api)
    state = with_peers(
        joined_state(api, config={"auto-reboot": True}),
        peers(turns=[UNIT], mine=asked(50.0)),
    )

    out = ctx.run(ctx.on.update_status(), state)  # the leader granted this unit a turn

    assert out.unit_status == testing.MaintenanceStatus(f"rebooting: {BOOT_NEW_KERNEL}")
    assert reboots == [False]
    relation = next(r for r in out.relations if r.endpoint == "reboots")
    assert "reboot-request" in relation.local_unit_data  # the turn outlives the reboot


def test_the_leader_grants_the_oldest_request_first_and_the_turn_ends_after_the_reboot(
    ctx, machine, api, driver, clock, reboots
):
    needs_reboot(driver)
    register_node(api)
    state = with_peers(
        joined_state(api, config={"auto-reboot": True}),
        peers(turns=[], others={1: asked(10.0), 2: asked(20.0)}),
        leader=True,
    )

    out = ctx.run(ctx.on.update_status(), state)

    relation = next(r for r in out.relations if r.endpoint == "reboots")
    assert json.loads(relation.local_app_data["reboot-turns"]) == ["kubernetes-worker/1"]
    assert reboots == [] and out.unit_status.name == "waiting"

    # two at a time: the next oldest (unit 2) gets the second turn, this unit still waits
    out = ctx.run(ctx.on.config_changed(), with_config(out, **{"max-parallel-reboots": 2}))
    relation = next(r for r in out.relations if r.endpoint == "reboots")
    assert json.loads(relation.local_app_data["reboot-turns"]) == [
        "kubernetes-worker/1",
        "kubernetes-worker/2",
    ]

    # unit 1 is back: its request is gone, and this unit gets the free turn and reboots
    relation = dataclasses.replace(relation, peers_data={1: {}, 2: asked(20.0)})
    others = {r for r in out.relations if r.endpoint != "reboots"}
    out = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=1),
        dataclasses.replace(out, relations={*others, relation}),
    )
    relation = next(r for r in out.relations if r.endpoint == "reboots")
    assert json.loads(relation.local_app_data["reboot-turns"]) == ["kubernetes-worker/2", UNIT]
    assert reboots == [False]

    driver.reboot()
    out = ctx.run(ctx.on.start(), out)

    relation = next(r for r in out.relations if r.endpoint == "reboots")
    assert "reboot-request" not in relation.local_unit_data  # the turn is given back
    assert json.loads(relation.local_app_data["reboot-turns"]) == ["kubernetes-worker/2"]
    assert out.unit_status.name == "active"


def test_a_turn_wait_is_reported_under_what_the_node_waits_for(ctx, machine, api, driver, reboots):
    needs_reboot(driver)  # joins, but its Node has not registered with the API server yet
    state = with_peers(
        joined_state(api, config={"auto-reboot": True}),
        peers(turns=["kubernetes-worker/1"], others={1: asked(100.0)}),
    )

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status == testing.WaitingStatus(f"waiting for node {NODE} to register")
    assert reboots == []


def test_an_api_error_during_the_reboot_drain_fails_the_hook_without_rebooting(
    ctx, machine, api, driver, clock, reboots
):
    out = run_joined(ctx, api, config={"auto-reboot": True})
    needs_reboot(driver)
    state = with_peers(out, peers(turns=[UNIT], mine=asked(50.0)))
    api.inject(status=403, times=1, method="PATCH", path_prefix=f"/api/v1/nodes/{NODE}")

    with pytest.raises(testing.errors.UncaughtCharmError):
        ctx.run(ctx.on.update_status(), state)

    assert reboots == []
    assert not node(api).get("spec", {}).get("unschedulable")

    # Juju retries the hook with the state from before it
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status.name == "maintenance"
    assert out.unit_status.message.startswith(f"rebooting: kernel {NEW_KERNEL} ")
    assert node(api)["spec"]["unschedulable"] is True
    assert reboots == [False]


def test_any_failure_of_the_driver_update_gives_the_watchers_polls_back(
    ctx, machine, api, driver, clock, reboots
):
    """rereview44c R7: the pause for the update went only when apt failed.

    A failure after apt (marking the kernel's module packages automatic) left it, and each
    retry of the failing hook wrote it again: the polls stayed paused while it failed.
    """
    out = run_joined(ctx, api, config={"auto-reboot": True})
    driver.driver_sru("580", "580.105.08")
    driver.kernel_update(NEW_KERNEL)
    machine.fail("/usr/bin/apt-mark auto", stderr="E: Could not get lock", returncode=100)

    with pytest.raises(testing.errors.UncaughtCharmError):
        ctx.run(ctx.on.update_status(), out)

    assert reboots == []
    assert not machine.path(gpu_watcher.PAUSE_FILE).exists()


def test_an_update_apt_cannot_fetch_after_the_drain_keeps_the_node_cordoned_until_done(
    ctx, machine, api, driver, clock, reboots
):
    out = run_joined(ctx, api, config={"auto-reboot": True})
    driver.driver_sru("580", "580.105.08")
    driver.kernel_update(NEW_KERNEL)
    utils = SERIES.userspace[1]
    published = machine.archive[utils]["updates"]
    machine.archive[utils]["updates"] = "580.95.05-0ubuntu0.24.04.1"  # a mirror half-synced

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(f"node {NODE} stays cordoned; failed to install")
    assert node(api)["spec"]["unschedulable"] is True
    assert reboots == []
    # no reboot comes: the GPU health watcher polls again (its pause for the update is gone)
    assert not machine.path(gpu_watcher.PAUSE_FILE).exists()

    machine.archive[utils]["updates"] = published  # the mirror caught up
    out = ctx.run(ctx.on.update_status(), out)
    assert reboots == [False]
    driver.reboot()
    out = ctx.run(ctx.on.start(), out)

    assert out.unit_status == testing.ActiveStatus(READY_580)
    assert not node(api)["spec"].get("unschedulable")  # the charm remembered its cordon


def test_a_node_drained_for_an_update_no_longer_needed_is_uncordoned(
    ctx, machine, api, driver, clock, reboots
):
    out = run_joined(ctx, api, config={"auto-reboot": True})
    driver.driver_sru("580", "580.105.08")
    driver.kernel_update(NEW_KERNEL)
    utils = SERIES.userspace[1]
    machine.archive[utils]["updates"] = "580.95.05-0ubuntu0.24.04.1"  # cannot fetch
    out = ctx.run(ctx.on.update_status(), out)
    assert node(api)["spec"]["unschedulable"] is True

    # the operator removes the new kernel instead: nothing needs the update any more
    machine.dpkg.pop(f"linux-image-{NEW_KERNEL}")
    machine.dpkg.pop(SERIES.modules(NEW_KERNEL), None)
    machine.path(f"/boot/vmlinuz-{NEW_KERNEL}").unlink()
    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.ActiveStatus(READY_580)
    assert not node(api)["spec"].get("unschedulable")
    assert reboots == []


# -- shared storage -------------------------------------------------------------------


@pytest.mark.parametrize("gpu_node", [False, True])
def test_every_worker_installs_the_nfs_client_unpinned_and_unheld(
    ctx, machine, api, gpu_node, request
):
    if gpu_node:
        request.getfixturevalue("driver")

    run_joined(ctx, api)

    # kubelet mounts the EFS claim with mount.nfs from nfs-common
    assert machine.dpkg["nfs-common"] == "1:2.6.4-3ubuntu5"
    assert "nfs-common" not in machine.held  # unattended-upgrades keeps it current
    assert not [line for line in machine.lines("apt-get") if "nfs-common=" in line]


# -- MIG layouts ----------------------------------------------------------------------

H100_PROFILES = {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "7g.80gb": 1}
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
MIG_MANAGER = "nvidia.com/gpu.deploy.mig-manager"
PLUGIN_DEPLOY = "nvidia.com/gpu.deploy.device-plugin"


@pytest.fixture
def h100(machine):
    """A p5.48xlarge: 8x H100 SXM5 80GB (MIG-capable) on an NVSwitch board."""
    fake = FakeDriver(
        machine,
        gpus=8,
        nvswitch=True,
        model=("NVIDIA H100 80GB HBM3", 81559, "9.0"),
        mig_profiles=H100_PROFILES,
    )
    fake.serve_toolkit()
    build_machine(machine.path("/sys"), "p5-h100", module_loaded=False)
    machine.write("/usr/share/misc/pci.ids", PCI_IDS)
    return fake


def node_labels(api):
    return node(api)["metadata"].get("labels") or {}


def set_labels(api, **labels):
    """What NVIDIA's mig-manager (or an operator) writes on the Node."""
    obj = node(api)
    for key, value in labels.items():
        if value is None:
            obj["metadata"]["labels"].pop(key, None)
        else:
            obj["metadata"]["labels"][key] = value
    api.put_object(f"/api/v1/nodes/{NODE}", obj)


def mig_manager_applies(api, fake, layout_devices, state="success"):
    """mig-manager applied a layout: the GPUs show it, the state label says so."""
    fake.mig_devices = layout_devices
    set_labels(api, **{MIG_STATE: state})


def run_mig(ctx, api, strategy="mixed", **config):
    register_node(api)
    state = joined_state(api, config=config, **{"mig-strategy": strategy})
    return ctx.run(ctx.on.relation_changed(next(iter(state.relations))), state)


def reboots_relation(out):
    return next((r for r in out.relations if r.endpoint == "reboots"), None)


ALL_1G = {i: ["1g.10gb"] * 7 for i in range(8)}


def test_h100_node_publishes_its_mig_profiles_for_the_control_plane(ctx, machine, api, h100):
    out = run_joined(ctx, api)

    (record,) = json.loads(unit_data(out)["gpu-inventory"])
    assert record["pci-device-id"] == "2330"
    assert record["mig-profiles"] == H100_PROFILES
    assert node_labels(api)["nvidia.com/mig.capable"] == "true"
    assert node_labels(api)[PLUGIN_DEPLOY] == "true"
    assert MIG_MANAGER not in node_labels(api)  # no layout asked: mig-manager stays away


def test_a_mig_layout_is_applied_by_mig_manager_under_a_drain_in_a_turn(
    ctx, machine, api, h100, clock, reboots
):
    out = run_mig(ctx, api)
    add_pod(api, "train-0")
    mine = dataclasses.replace(out, relations={*out.relations, peers(turns=[UNIT])})

    out = ctx.run(ctx.on.config_changed(), with_config(mine, **{"mig-profile": "all-1g.10gb"}))

    labels = node_labels(api)
    assert labels[MIG_CONFIG] == "all-1g.10gb" and labels[MIG_MANAGER] == "true"
    assert node(api)["spec"]["unschedulable"] is True  # drained first
    assert api.get_object("/api/v1/namespaces/default/pods/train-0") is None
    assert out.unit_status == testing.WaitingStatus(
        "applying MIG layout all-1g.10gb: NVIDIA mig-manager reports not started"
    )

    set_labels(api, **{MIG_STATE: "pending", PLUGIN_DEPLOY: "paused-for-mig-change"})
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.WaitingStatus(
        "applying MIG layout all-1g.10gb: NVIDIA mig-manager reports pending"
    )
    assert node_labels(api)[PLUGIN_DEPLOY] == "paused-for-mig-change"  # left to mig-manager
    assert "reboot-request" in reboots_relation(out).local_unit_data  # the turn is kept

    set_labels(api, **{PLUGIN_DEPLOY: "true"})
    mig_manager_applies(api, h100, ALL_1G)
    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "active"
    assert not node(api)["spec"].get("unschedulable")
    assert "reboot-request" not in reboots_relation(out).local_unit_data
    assert reboots == []
    before = len(writes(api))
    ctx.run(ctx.on.update_status(), out)
    assert len(writes(api)) == before  # applied: nothing more to do


def test_an_api_error_during_the_mig_drain_fails_the_hook_and_the_retry_goes_on(
    ctx, machine, api, h100, clock
):
    out = run_mig(ctx, api)
    mine = dataclasses.replace(out, relations={*out.relations, peers(turns=[UNIT])})
    state = with_config(mine, **{"mig-profile": "all-1g.10gb"})
    api.inject(status=403, times=1, method="PATCH", path_prefix=f"/api/v1/nodes/{NODE}")

    with pytest.raises(testing.errors.UncaughtCharmError):
        ctx.run(ctx.on.config_changed(), state)

    assert MIG_CONFIG not in node_labels(api)

    # Juju retries the hook with the state from before it
    out = ctx.run(ctx.on.config_changed(), state)
    assert node_labels(api)[MIG_CONFIG] == "all-1g.10gb"
    assert node(api)["spec"]["unschedulable"] is True
    assert out.unit_status == testing.WaitingStatus(
        "applying MIG layout all-1g.10gb: NVIDIA mig-manager reports not started"
    )


def test_success_the_gpus_do_not_show_keeps_the_node_cordoned(ctx, machine, api, h100, clock):
    out = run_mig(ctx, api, **{"mig-profile": "all-1g.10gb"})
    # mig-manager's config had no entry for this model yet: it asserts nothing, succeeds
    mig_manager_applies(api, h100, {})

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.WaitingStatus(
        "MIG layout all-1g.10gb: reported applied, not on the GPUs yet"
    )
    assert node(api)["spec"]["unschedulable"] is True


def test_a_node_not_ready_mid_change_stays_cordoned_and_keeps_mig_manager(
    ctx, machine, api, h100, clock
):
    out = run_mig(ctx, api, **{"mig-profile": "all-1g.10gb"})
    set_labels(api, **{MIG_STATE: "pending"})
    h100.fabric_starts = False  # the GPUs reset under mig-manager: Fabric Manager restarts
    machine.services["nvidia-fabricmanager"].active = False

    out = ctx.run(ctx.on.update_status(), out)

    assert node(api)["spec"]["unschedulable"] is True
    assert node_labels(api)[MIG_MANAGER] == "true"
    # a Fabric Manager that does not start is Blocked, not a wait (gpu.md N5)
    assert out.unit_status.name == "blocked"


def test_clearing_mig_profile_mid_change_waits_for_mig_manager_then_uncordons(
    ctx, machine, api, h100, clock
):
    out = run_mig(ctx, api, **{"mig-profile": "all-1g.10gb"})
    set_labels(api, **{MIG_STATE: "pending", PLUGIN_DEPLOY: "paused-for-mig-change"})

    out = ctx.run(ctx.on.config_changed(), with_config(out, **{"mig-profile": ""}))

    assert node(api)["spec"]["unschedulable"] is True
    assert node_labels(api)[MIG_MANAGER] == "true"  # never pulled from under a change
    assert out.unit_status == testing.WaitingStatus(
        "applying MIG layout all-1g.10gb: NVIDIA mig-manager reports pending"
    )

    set_labels(api, **{PLUGIN_DEPLOY: "true"})
    mig_manager_applies(api, h100, ALL_1G)
    out = ctx.run(ctx.on.update_status(), out)
    assert not node(api)["spec"].get("unschedulable")
    assert node_labels(api)[MIG_CONFIG] == "all-1g.10gb"  # the layout stays, as documented


def test_a_new_layout_waits_until_mig_manager_finishes_the_last(ctx, machine, api, h100, clock):
    out = run_mig(ctx, api, **{"mig-profile": "all-1g.10gb"})
    set_labels(api, **{MIG_STATE: "pending"})

    out = ctx.run(ctx.on.config_changed(), with_config(out, **{"mig-profile": "all-2g.20gb"}))

    assert node_labels(api)[MIG_CONFIG] == "all-1g.10gb"
    assert out.unit_status == testing.WaitingStatus(
        "MIG layout all-2g.20gb waits for NVIDIA mig-manager to finish all-1g.10gb"
    )


def test_a_failed_mig_layout_blocks_and_keeps_the_node_cordoned(ctx, machine, api, h100, clock):
    out = run_mig(ctx, api, **{"mig-profile": "all-2g.20gb"})
    set_labels(api, **{MIG_STATE: "failed"})

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(
        f"MIG layout all-2g.20gb failed on node {NODE}: see `kubectl -n gpu-k8s-gpu logs "
        "$(kubectl -n gpu-k8s-gpu get pod -l app=nvidia-mig-manager --field-selector "
        f"spec.nodeName={NODE} -o name)`"
    )
    assert node(api)["spec"]["unschedulable"] is True


def test_mig_manager_that_never_answers_is_reported(ctx, machine, api, h100, monkeypatch):
    import time

    out = run_mig(ctx, api, **{"mig-profile": "all-1g.10gb"})
    started = time.time()
    monkeypatch.setattr(time, "time", lambda: started + 31 * 60)

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.BlockedStatus(
        "MIG layout all-1g.10gb: NVIDIA mig-manager has not answered for 31 minutes "
        "(state: not started); check its pod in gpu-k8s-gpu"
    )


def test_a_layout_the_gpus_do_not_offer_blocks_without_draining(ctx, machine, api, h100):
    out = run_mig(ctx, api, **{"mig-profile": "all-1g.5gb"})  # an A100-40GB profile

    assert out.unit_status == testing.BlockedStatus(
        "mig-profile all-1g.5gb: GPU 0 offers no 1g.5gb instances; this node's GPUs offer "
        "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 7g.80gb"
    )
    assert MIG_CONFIG not in node_labels(api) and MIG_MANAGER not in node_labels(api)
    assert not node(api).get("spec", {}).get("unschedulable")


def test_a_layout_without_a_mig_strategy_blocks(ctx, machine, api, h100):
    out = run_mig(ctx, api, strategy=None, **{"mig-profile": "all-1g.10gb"})

    assert out.unit_status == testing.BlockedStatus(
        "mig-profile all-1g.10gb needs the control plane's mig-strategy set to single or "
        "mixed: with none the device plugin offers MIG GPUs as whole GPUs"
    )
    assert MIG_CONFIG not in node_labels(api)


def test_an_operators_device_plugin_false_is_kept(ctx, machine, api, h100):
    out = run_mig(ctx, api)
    set_labels(api, **{PLUGIN_DEPLOY: "false"})

    ctx.run(ctx.on.update_status(), out)

    assert node_labels(api)[PLUGIN_DEPLOY] == "false"


def test_gpu_info_lists_the_mig_devices(ctx, machine, h100):
    h100.preinstall("580")
    h100.mig_devices = {0: ["3g.40gb", "3g.40gb"]}

    ctx.run(ctx.on.action("gpu-info"), testing.State())

    gpu0 = ctx.action_results["gpus"]["0"]
    assert gpu0["mig-mode"] == "Enabled"
    assert gpu0["mig-profiles"] == "1g.10gb x7, 1g.20gb x4, 2g.20gb x3, 3g.40gb x2, 7g.80gb x1"
    assert gpu0["mig-devices"] == {
        "0": {"profile": "3g.40gb", "uuid": "MIG-00000000-1111-2222-3333-444444444444"},
        "1": {"profile": "3g.40gb", "uuid": "MIG-01000000-1111-2222-3333-444444444444"},
    }


@pytest.mark.parametrize("value", ["1g.10gb", "all-mixed", "all-1g", "all-1g.10gb+me"])
def test_a_bad_mig_profile_blocks_naming_the_forms(ctx, machine, api, value):
    out = ctx.run(ctx.on.config_changed(), joined_state(api, config={"mig-profile": value}))

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("Invalid config: mig-profile: must be empty")


def test_the_leader_keeps_its_mig_turn_while_another_unit_waits(ctx, machine, api, h100, clock):
    register_node(api)
    base = joined_state(api, config={"mig-profile": "all-1g.10gb"}, **{"mig-strategy": "mixed"})
    state = with_peers(base, peers(turns=[], others={1: asked(10.0)}), leader=True)
    # unit 1 asked first: it gets the turn, this unit waits
    out = ctx.run(ctx.on.update_status(), state)
    assert MIG_CONFIG not in node_labels(api)

    # unit 1 is done: this unit gets the turn, drains and hands the layout over
    relation = dataclasses.replace(reboots_relation(out), peers_data={1: {}})
    others = {r for r in out.relations if r.endpoint != "reboots"}
    out = ctx.run(ctx.on.update_status(), dataclasses.replace(out, relations={*others, relation}))
    assert node_labels(api)[MIG_CONFIG] == "all-1g.10gb"

    # unit 1 asks again while mig-manager works here: the turn stays with this unit
    relation = dataclasses.replace(reboots_relation(out), peers_data={1: asked(99.0)})
    others = {r for r in out.relations if r.endpoint != "reboots"}
    out = ctx.run(ctx.on.update_status(), dataclasses.replace(out, relations={*others, relation}))
    assert json.loads(reboots_relation(out).local_app_data["reboot-turns"]) == [UNIT]
    assert node(api)["spec"]["unschedulable"] is True


MIG_WAIT = "MIG layout all-1g.10gb"


NVSWITCH_NODE = {"gpu": "nvswitch"}  # what an H100 (p5) unit says of its GPUs


def mig_waiter(api, mine, others, turns, leader=False):
    """A joined H100 unit that wants all-1g.10gb; another unit holds the turn."""
    register_node(api)
    base = joined_state(api, config={"mig-profile": "all-1g.10gb"}, **{"mig-strategy": "mixed"})
    mine = {**mine, **NVSWITCH_NODE}  # said by an earlier hook
    return with_peers(base, peers(turns=turns, mine=mine, others=others), leader=leader)


def test_a_mig_waiter_files_once_and_keeps_its_place(ctx, machine, api, h100, clock):
    """A MIG waiter files once and keeps its `since` (gpu.md N1).

    The review named it test_mig_wait_request_is_withdrawn_and_renewed_every_reconcile,
    after the defect; renamed for what it asserts: it keeps its place (oldest first). Its
    status says what the drain is for (a MIG change reboots nothing).
    """
    state = mig_waiter(
        api, asked(7300.0, MIG_WAIT), {1: asked(100.0)}, turns=["kubernetes-worker/1"]
    )

    out = ctx.run(ctx.on.update_status(), state)
    out = ctx.run(ctx.on.update_status(), out)

    assert reboots_relation(out).local_unit_data == {**asked(7300.0, MIG_WAIT), **NVSWITCH_NODE}
    assert out.unit_status == testing.WaitingStatus(
        f"{MIG_WAIT} needs a drain; waiting for a turn (max-parallel-reboots: 1 node at "
        "once); drained now: kubernetes-worker/1"
    )
    assert MIG_CONFIG not in node_labels(api)


def test_a_peer_change_leaves_a_mig_waiters_request_as_it_was(ctx, machine, api, h100, clock):
    """Another waiter's change rewrites nothing here (gpu.md N1).

    The review named it test_a_peer_change_makes_a_mig_waiter_rewrite_its_request, after
    the defect; renamed for what it asserts: this unit's databag stays as it was, so it
    wakes no peer (two waiters no longer wake each other without end).
    """
    state = mig_waiter(
        api,
        asked(7300.0, MIG_WAIT),
        {1: asked(100.0), 2: asked(8000.0, MIG_WAIT)},
        turns=["kubernetes-worker/1"],
    )

    out = ctx.run(ctx.on.relation_changed(reboots_relation(state), remote_unit=2), state)

    assert reboots_relation(out).local_unit_data == {**asked(7300.0, MIG_WAIT), **NVSWITCH_NODE}


def test_a_mig_waiter_keeps_its_place_before_a_later_reboot_request(
    ctx, machine, api, h100, clock
):
    state = mig_waiter(
        api,
        asked(30.0, MIG_WAIT),
        {1: asked(10.0), 2: asked(50.0)},
        turns=["kubernetes-worker/1"],
        leader=True,
    )
    out = ctx.run(ctx.on.update_status(), state)
    assert MIG_CONFIG not in node_labels(api)

    # unit 1 is done: the MIG waiter (asked at 30) goes before unit 2 (asked at 50)
    relation = dataclasses.replace(reboots_relation(out), peers_data={1: {}, 2: asked(50.0)})
    others = {r for r in out.relations if r.endpoint != "reboots"}
    out = ctx.run(ctx.on.update_status(), dataclasses.replace(out, relations={*others, relation}))

    assert json.loads(reboots_relation(out).local_app_data["reboot-turns"]) == [UNIT]
    assert node_labels(api)[MIG_CONFIG] == "all-1g.10gb"
    kept = {**asked(30.0, MIG_WAIT), **NVSWITCH_NODE}
    assert reboots_relation(out).local_unit_data == kept  # kept in flight


def test_a_mig_waiter_whose_layout_is_cleared_gives_its_place_back(ctx, machine, api, h100, clock):
    state = mig_waiter(
        api, asked(7300.0, MIG_WAIT), {1: asked(100.0)}, turns=["kubernetes-worker/1"]
    )

    out = ctx.run(ctx.on.config_changed(), with_config(state, **{"mig-profile": ""}))

    assert "reboot-request" not in reboots_relation(out).local_unit_data
    assert out.unit_status.name == "active"


# -- telemetry ------------------------------------------------------------------------


def _cos_config(api, tmp_path) -> dict:
    """What the unit publishes to a related COS agent (the cos_agent `config` key).

    The charm's root holds its shipped rules and dashboards, as the packed charm does.
    """
    import shutil
    from pathlib import Path

    import charm

    src = Path(charm.__file__).parent
    for part in ("prometheus_alert_rules", "grafana_dashboards"):
        shutil.copytree(src / part, tmp_path / "charm" / "src" / part)
    ctx = testing.Context(charm.KubernetesWorkerCharm, charm_root=tmp_path / "charm")
    register_node(api)
    state = joined_state(api)
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    state = dataclasses.replace(state, relations={*state.relations, agent})
    out = ctx.run(ctx.on.relation_joined(agent), state)
    return json.loads(out.get_relation(agent.id).local_unit_data["config"])


def test_a_gpu_node_has_its_dcgm_exporter_scraped_with_the_gpu_rules_and_dashboards(
    machine, api, driver, tmp_path
):
    from cosl import LZMABase64

    config = _cos_config(api, tmp_path)

    def job(name: str, port: int, path: str = "/metrics") -> dict:
        return {
            "job_name": f"kubernetes-worker_{name}",
            "metrics_path": path,
            "static_configs": [{"targets": [f"localhost:{port}"], "labels": {"instance": NODE}}],
        }

    # the event joined the node: its kubelet through HAProxy (as the node), DCGM, and the
    # unit's own state (unit_state)
    cadvisor = job("kubelet-cadvisor", 6446, "/metrics/cadvisor")
    cadvisor["metric_relabel_configs"] = [
        {
            "source_labels": ["__name__"],
            "regex": "container_cpu_usage_seconds_total|container_memory_working_set_bytes",
            "action": "keep",
        }
    ]
    assert config["metrics_scrape_jobs"] == [
        cadvisor,  # the kubelet's: only what the dashboards read (cos_agent.NODE_METRICS)
        job("dcgm-exporter", 9400),
        # the GPU health watcher's gauges (gpu_health.py), with no interval of its own: the
        # collector overwrites it with its global_scrape_interval (cos.yaml sets 30s)
        job("gpu-watcher", 6448),
        job("unit-state", 6447, "/metrics/kubernetes-worker-0"),
    ]
    state = machine.host().read("/var/lib/gpu-k8s/unit-state/kubernetes-worker-0.prom")
    lines = state.splitlines()
    assert 'gpu_k8s_unit_status{status="active"} 1' in lines
    assert {"gpu_k8s_node_gpus 4", "gpu_k8s_node_gpus_usable 4"} <= set(lines)
    assert "gpu_k8s_node_reboot_required 0" in lines
    alerts = {
        rule["alert"]: rule
        for group in config["metrics_alert_rules"]["groups"]
        for rule in group["rules"]
    }
    assert {"GpuApplicationXid", "GpuUncorrectableEccErrors", "GpuAllocatedButIdle"} <= set(alerts)
    assert alerts["GpuApplicationXid"]["labels"]["juju_application"] == "kubernetes-worker"
    # the watcher's group keeps its 15 s evaluation through cosl (issue 32: alert in 60 s)
    intervals = {g["name"]: g.get("interval") for g in config["metrics_alert_rules"]["groups"]}
    assert [v for k, v in intervals.items() if k.endswith("gpu_watcher_rules")] == ["15s"]
    titles = sorted(json.loads(LZMABase64.decompress(d))["title"] for d in config["dashboards"])
    assert titles == ["gpu-k8s / GPU nodes", "gpu-k8s / training jobs"]


def test_gpu_scrape_jobs_wait_for_their_servers_on_a_fresh_gpu_node(ctx, machine, api, driver):
    """No scrape target before its server can answer (review F-19).

    Else ScrapeTargetDown (15 minutes) fires on a healthy first deploy. The DCGM exporter's
    DaemonSet runs on nodes labelled `nvidia.com/gpu.present=true` (dcgm_exporter.py), the
    watcher once the node joined.
    """
    needs_reboot(driver)  # the driver only works after a reboot into the new kernel
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")

    def jobs(out):
        config = json.loads(out.get_relation(agent.id).local_unit_data["config"])
        return [j["job_name"].split("_", 1)[1] for j in config["metrics_scrape_jobs"]]

    out = ctx.run(ctx.on.config_changed(), testing.State(relations={agent}))
    assert machine.joins == []
    assert jobs(out) == ["unit-state"]  # not joined: no kubelet, no watcher, no exporter

    register_node(api)
    state = joined_state(api)
    out = ctx.run(
        ctx.on.config_changed(), dataclasses.replace(state, relations={*state.relations, agent})
    )
    assert len(machine.joins) == 1 and gpu_labels(api) == {}  # no exporter lands there yet
    assert jobs(out) == ["kubelet-cadvisor", "gpu-watcher", "unit-state"]
    # with a working driver the node is labelled and the exporter scraped:
    # test_a_gpu_node_has_its_dcgm_exporter_scraped_with_the_gpu_rules_and_dashboards


def test_a_cpu_node_offers_no_gpu_scrape_job(machine, api, tmp_path):
    FakeDriver(machine).serve_toolkit()
    config = _cos_config(api, tmp_path)
    names = [j["job_name"] for j in config["metrics_scrape_jobs"]]
    assert names == [
        "kubernetes-worker_kubelet-cadvisor",
        "kubernetes-worker_unit-state",
    ]
    assert config["dashboards"]  # the same rules and dashboards: the app may hold both


# -- the GPU health watcher (issue 32 items 1, 2; gpu_health.py, gpu_watcher.py)

WATCHER = "gpu-k8s-gpu-watcher"


def test_a_joined_gpu_node_runs_the_gpu_health_watcher_as_its_node(ctx, machine, api, driver):
    state = joined_gpu_node(ctx, api, driver)
    unit = machine.path(f"/etc/systemd/system/{WATCHER}.service")
    assert unit.stat().st_mode & 0o777 == 0o644
    text = unit.read_text()
    assert "--node ip-10-0-1-17" in text and "--escalation 3/10m" in text
    assert "--unit kubernetes-worker/0" in text  # the unit it wakes for the taint (juju-exec)
    program = machine.path("/usr/local/lib/gpu-k8s/gpu_watcher.py")
    assert program.stat().st_mode & 0o777 == 0o644
    assert json.loads(machine.path("/usr/local/lib/gpu-k8s/xid_catalog.json").read_text())["xids"]
    api_file = machine.path("/etc/gpu-k8s/gpu-watcher-api.json")
    assert api_file.stat().st_mode & 0o777 == 0o600
    access = json.loads(api_file.read_text())
    assert access["client"] == "/var/lib/kubelet/pki/kubelet-client-current.pem"  # a path only
    assert "PRIVATE KEY" not in api_file.read_text()
    assert machine.services[WATCHER].active and machine.services[WATCHER].enabled
    restarts = machine.services[WATCHER].restarts
    ctx.run(ctx.on.update_status(), state)  # nothing changed: left running
    assert machine.services[WATCHER].restarts == restarts


def test_the_watcher_restarts_when_stopped_or_its_escalation_changes(ctx, machine, api, driver):
    state = joined_gpu_node(ctx, api, driver)
    machine.services[WATCHER].active = False  # it died (systemctl is-active says so)
    ctx.run(ctx.on.update_status(), state)
    assert machine.services[WATCHER].active
    restarts = machine.services[WATCHER].restarts
    ctx.run(ctx.on.config_changed(), with_config(state, **{"gpu-xid-escalation": "5/1h"}))
    assert machine.services[WATCHER].restarts == restarts + 1
    unit = machine.path(f"/etc/systemd/system/{WATCHER}.service").read_text()
    assert "--escalation 5/1h" in unit


def test_a_bad_escalation_blocks_with_the_form_it_takes(ctx, machine, api, driver):
    state = joined_gpu_node(ctx, api, driver)
    out = ctx.run(ctx.on.config_changed(), with_config(state, **{"gpu-xid-escalation": "3"}))
    assert out.unit_status.name == "blocked"
    assert "gpu-xid-escalation" in out.unit_status.message
    assert "<count>/<window> such as 3/10m" in out.unit_status.message


def test_a_quarantined_gpu_blocks_the_unit_naming_it_and_what_comes_next(
    ctx, machine, api, driver
):
    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    uuid = "GPU-7f3e9a2c-5d41-4b8e-9c0a-1e2f3a4b5c6d"
    record = {
        "index": "1",
        "uuid": uuid,
        "reason": "Xid79",
        "action": "reboot",
        "at": "2026-11-28T10:00:00Z",
        "since": 1.0,
        "message": "",
        "applied": True,
    }
    machine.path("/var/lib/gpu-k8s").mkdir(parents=True, exist_ok=True)
    machine.path("/var/lib/gpu-k8s/gpu-health.json").write_text(
        json.dumps({"quarantined": {uuid: record}})
    )
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status == testing.BlockedStatus(
        f"GPU 1 ({uuid}) quarantined at 2026-11-28T10:00:00Z: Xid79; node ip-10-0-1-17 "
        "cordoned with condition GpuHealthy=False and its pods evicted; NVIDIA's catalog asks "
        "for a reboot of the machine; it stays out of service until repaired and readmitted "
        "(readmit-gpu on kubernetes-worker/0: docs/how-to/gpu-day-2.md)"
    )


# -- a quarantined GPU keeps its node cordoned through every turn (issue 32) ----------


def test_a_reboot_turn_ending_while_a_gpu_is_quarantined_leaves_the_node_cordoned(
    ctx, machine, api, driver, clock, reboots
):
    driver.preinstall("570")
    out = run_joined(ctx, api, config={"auto-reboot": True, **NO_AUTO_REPAIR})
    out = ctx.run(ctx.on.config_changed(), with_config(out, **{"nvidia-driver": "580"}))
    assert reboots == [False] and node(api)["spec"]["unschedulable"] is True
    watcher_quarantines(machine)  # a GPU fell off the bus while the node was drained

    driver.reboot()
    out = ctx.run(ctx.on.start(), out)

    assert node(api)["spec"]["unschedulable"] is True  # the quarantine keeps it out
    assert out.unit_status.name == "blocked"
    assert f"GPU 1 ({QUARANTINED_GPU}) quarantined" in out.unit_status.message


def test_a_mig_change_ending_while_a_gpu_is_quarantined_leaves_the_node_cordoned(
    ctx, machine, api, h100, clock, reboots
):
    out = run_mig(ctx, api, **NO_AUTO_REPAIR)
    mine = dataclasses.replace(out, relations={*out.relations, peers(turns=[UNIT])})
    out = ctx.run(ctx.on.config_changed(), with_config(mine, **{"mig-profile": "all-1g.10gb"}))
    assert node(api)["spec"]["unschedulable"] is True
    watcher_quarantines(machine)

    mig_manager_applies(api, h100, ALL_1G)
    out = ctx.run(ctx.on.update_status(), out)

    assert node(api)["spec"]["unschedulable"] is True
    assert out.unit_status.name == "blocked"
    assert "reboot-request" not in reboots_relation(out).local_unit_data


def leader_applies_quarantine_taint(api, out, name=NODE):
    """The control-plane leader answering `gpu-quarantine`, as admin (fleet.py's rule)."""
    from charms.gpu_k8s.v0.kubernetes_cluster import quarantine_taint_patch

    cluster = next(r for r in out.relations if r.endpoint == "cluster")
    request = cluster.local_unit_data.get("gpu-quarantine")
    current = node(api, name)
    if request is None or current is None:
        return out
    patch = quarantine_taint_patch(current, bool(json.loads(request)))
    if patch is not None:
        current.setdefault("spec", {})["taints"] = patch["spec"]["taints"]
        if not current["spec"]["taints"]:
            del current["spec"]["taints"]
        api.put_object(f"/api/v1/nodes/{name}", current)
    return out


def watcher_cordons(api):
    """What the watcher wrote to the Node (functional/test_gpu_watcher.py runs it for real)."""
    current = node(api)
    current["metadata"].setdefault("annotations", {})["gpu-k8s/cordoned"] = "true"
    current.setdefault("spec", {})["unschedulable"] = True
    condition = {"type": "GpuHealthy", "status": "False", "reason": "Xid79", "message": "m"}
    current["status"]["conditions"].append(condition)
    api.put_object(f"/api/v1/nodes/{NODE}", current)


def gpu_healthy(api):
    return next(c for c in node(api)["status"]["conditions"] if c["type"] == "GpuHealthy")


QUARANTINE_TAINT = {"key": "gpu-k8s.io/gpu-unhealthy", "effect": "NoExecute"}


# -- the taint within seconds: the watcher wakes the charm (its `gpu-quarantined` hook) --


def test_the_hook_the_watcher_dispatches_is_the_charms_gpu_quarantined_event():
    """Ops names the event after JUJU_DISPATCH_PATH's last part, `-` read as `_`."""
    from pathlib import Path

    import gpu_watcher
    from ops._main import _Dispatcher

    dispatcher = object.__new__(_Dispatcher)  # ops' own rule, without its process setup
    dispatcher._set_name_from_path(Path(gpu_watcher.HOOK))
    assert dispatcher.event_name == "gpu_quarantined"
    event = getattr(charm.KubernetesWorkerCharm.on, dispatcher.event_name)
    assert event.event_type is charm.GpuQuarantinedEvent


def gpu_quarantined():
    """The event as ops emits it for the watcher's juju-exec (hooks/gpu-quarantined).

    `charm.on.gpu_quarantined`: ctx.on.custom finds only events of objects other than the
    charm, ops.testing's plain `_Event` runs the charm's own.
    """
    from scenario.state import _Event

    return _Event("gpu_quarantined")


@pytest.mark.parametrize(
    ("config", "status"),
    [
        (
            {},  # gpu-auto-repair=reboot, the default: the next update-status repairs
            testing.WaitingStatus(
                f"GPU 1 ({QUARANTINED_GPU}) quarantined at 2026-11-28T10:00:00Z: Xid79; node "
                f"{NODE} cordoned with condition GpuHealthy=False and its pods evicted; "
                "NoExecute taint asked of the control plane; gpu-auto-repair: a reboot in "
                "this unit's turn from its next update-status"
            ),
        ),
        (
            NO_AUTO_REPAIR,
            testing.BlockedStatus(
                f"GPU 1 ({QUARANTINED_GPU}) quarantined at 2026-11-28T10:00:00Z: Xid79; node "
                f"{NODE} cordoned with condition GpuHealthy=False and its pods evicted; "
                "NVIDIA's catalog asks for a reboot of the machine; it stays out of service "
                f"until repaired and readmitted (readmit-gpu on {UNIT}: docs/how-to/gpu-day-2.md)"
            ),
        ),
    ],
)
def test_the_watchers_hook_asks_for_the_taint_at_once_and_says_what_comes_next(
    ctx, machine, api, driver, config, status
):
    state = joined_gpu_node(ctx, api, driver, config)
    watcher_quarantines(machine)
    watcher_cordons(api)
    requests, mutations = len(api.requests), len(machine.mutations())

    out = ctx.run(gpu_quarantined(), state)

    assert json.loads(unit_data(out)["gpu-quarantine"]) == [QUARANTINED_GPU]
    assert out.unit_status == status
    # nothing else in that hook (it ends in a moment): no API request, no repair, no turn
    assert api.requests[requests:] == []
    assert machine.mutations()[mutations:] == []
    assert {r.endpoint for r in out.relations} == {r.endpoint for r in state.relations}
    # the leader's relation-changed taints the node (fleet.py)
    leader_applies_quarantine_taint(api, out)
    assert QUARANTINE_TAINT in taints(api)


def test_the_watchers_hook_after_a_readmission_changes_nothing(ctx, machine, api, driver):
    state = joined_gpu_node(ctx, api, driver)
    requests = len(api.requests)
    out = ctx.run(gpu_quarantined(), state)
    assert "gpu-quarantine" not in unit_data(out)
    assert out.unit_status == state.unit_status
    assert api.requests[requests:] == []


def test_a_quarantined_gpu_is_reported_tainted_and_readmitted_only_after_every_gpu_passes(
    ctx, machine, api, driver, ctr
):
    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    watcher_quarantines(machine)
    watcher_cordons(api)

    # the worker asks the leader for the NoExecute taint on its own node
    out = leader_applies_quarantine_taint(api, ctx.run(ctx.on.update_status(), state))
    assert json.loads(unit_data(out)["gpu-quarantine"]) == [QUARANTINED_GPU]
    assert QUARANTINE_TAINT in taints(api)
    assert out.unit_status.name == "blocked"

    ctx.run(ctx.on.action("gpu-health"), out)
    assert ctx.action_results == {
        "state": "quarantined",
        "quarantined": (
            f"2026-11-28T10:00:00Z GPU 1 ({QUARANTINED_GPU}): Xid79; repair: a reboot of the "
            "machine"
        ),
        "events": (
            f"2026-11-28T10:00:00Z GPU 1 ({QUARANTINED_GPU}) Xid79: XID 79 GPU has fallen off "
            "the bus -> reboot"
        ),
        "repairs": "none",
        "gates": "none",
        "watcher": "running",
    }

    # a GPU fails its check: nothing changes
    ctr.output = "[Vector addition of 50000 elements]\nTest FAILED\n"
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("readmit-gpu", params={"confirm": "yes"}), out)
    assert failed.value.message.startswith("GPU 0: CUDA check failed (exit 0)")
    assert failed.value.message.endswith("it stays quarantined")
    assert node(api)["spec"]["unschedulable"] is True
    assert gpu_healthy(api)["status"] == "False"
    assert json.loads(machine.read(WATCHER_STATE))["quarantined"]

    # repaired: every GPU passes, one at a time
    ctr.output = VECTORADD_OK
    runs = len(ctr.runs)
    restarts = machine.services[WATCHER].restarts
    out = ctx.run(ctx.on.action("readmit-gpu", params={"confirm": "yes"}), out)
    # the repair gate (stricter than the CUDA check alone since issue 32 item 4): CUDA on
    # each GPU, then DCGM's diagnostic and NCCL's all-reduce across all of them
    visible = [r["env"]["NVIDIA_VISIBLE_DEVICES"] for r in ctr.runs[runs:]]
    assert visible == ["0", "1", "2", "3", "all", "all"]
    assert [r["image"] for r in ctr.runs[runs + 4 :]] == [gpu_gate.DCGM_IMAGE, gpu_gate.NCCL_IMAGE]
    assert ctx.action_results["readmitted"] == f"GPU 1 ({QUARANTINED_GPU})"
    assert json.loads(machine.read(WATCHER_STATE))["quarantined"] == {}
    assert json.loads(machine.read(WATCHER_STATE))["events"][-1]["reason"] == "Readmitted"
    assert machine.services[WATCHER].active  # stopped while its state changed, started
    assert machine.services[WATCHER].restarts >= restarts
    assert not node(api)["spec"].get("unschedulable")
    assert gpu_healthy(api)["status"] == "True"
    assert gpu_healthy(api)["reason"] == "Readmitted"
    assert unit_data(out)["gpu-quarantine"] == "[]"  # the leader lifts the taint

    out = leader_applies_quarantine_taint(api, out)
    assert QUARANTINE_TAINT not in taints(api)
    out = ctx.run(ctx.on.update_status(), out)
    assert "gpu-quarantine" not in unit_data(out)  # in line: no request any more
    assert out.unit_status == testing.ActiveStatus(READY_580)


def test_readmit_gpu_asks_for_confirmation_and_a_quarantine(ctx, machine, api, driver, ctr):
    state = joined_gpu_node(ctx, api, driver)
    with pytest.raises(testing.ActionFailed):
        ctx.run(ctx.on.action("readmit-gpu", params={"confirm": "no"}), state)
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("readmit-gpu", params={"confirm": "yes"}), state)
    assert failed.value.message == "no GPU of this machine is quarantined: nothing to readmit"
    assert ctr.runs == []


# -- repair through Juju and the gate before readmission (issue 32 items 3-5) ---------


def quarantined_for(machine, api, action, reason, *, tainted=True):
    """The watcher quarantined GPU 1 for a fault of `action`, as an earlier hook left it.

    Cordoned with condition GpuHealthy=False, and the leader's NoExecute taint set (not
    yet when `tainted` is False: the leader's relation-changed has not run).
    """
    watcher_quarantines(machine, reason=reason)
    state = json.loads(machine.read(WATCHER_STATE))
    state["quarantined"][QUARANTINED_GPU]["action"] = action
    machine.write(WATCHER_STATE, json.dumps(state))
    watcher_cordons(api)
    if not tainted:
        return
    current = node(api)
    taint = dict(QUARANTINE_TAINT)
    current["spec"]["taints"] = [t for t in taints(api) if t["key"] != taint["key"]] + [taint]
    api.put_object(f"/api/v1/nodes/{NODE}", current)


def watcher_state(machine):
    return json.loads(machine.read(WATCHER_STATE))


def resets(machine):
    return [line for line in machine.lines("nvidia-smi") if " -r " in f"{line} "]


NOW = 1_795_100_000.0  # 2026-11-19T14:53:20Z, the wall clock of these tests


@pytest.fixture
def wall(monkeypatch):
    now = [NOW]
    monkeypatch.setattr(charm.KubernetesWorkerCharm, "wall_clock", lambda self: now[0])
    return now


def test_a_gpu_the_catalog_says_a_reset_repairs_is_reset_in_a_turn_gated_and_readmitted(
    ctx, machine, api, driver, ctr, wall, clock
):
    state = joined_gpu_node(ctx, api, driver)
    quarantined_for(machine, api, "reset-gpu", "Xid48")

    out = leader_applies_quarantine_taint(api, ctx.run(ctx.on.update_status(), state))

    assert resets(machine) == ["nvidia-smi -r -i 1"] and driver.resets == [1]
    images = [r["image"] for r in ctr.runs]
    assert images[-2:] == [gpu_gate.DCGM_IMAGE, gpu_gate.NCCL_IMAGE]
    assert [r["env"]["NVIDIA_VISIBLE_DEVICES"] for r in ctr.runs[:4]] == ["0", "1", "2", "3"]
    found = watcher_state(machine)
    assert found["quarantined"] == {}
    (repair,) = found["repairs"]
    assert repair["method"] == "reset" and repair["result"] == "ok"
    assert repair["gpu_uuid"] == QUARANTINED_GPU and repair["gpu"] == "1"
    assert repair["gate"]["passed"] is True
    assert set(repair["gate"]) == {"passed", "cuda", "dcgm", "nccl"}
    assert found["readmitted_at"] == repair["time"] == "2026-11-19T14:53:20Z"
    assert gpu_healthy(api)["status"] == "True"
    assert not node(api)["spec"].get("unschedulable")
    assert unit_data(out)["gpu-quarantine"] == "[]"  # the leader lifts the taint
    assert QUARANTINE_TAINT not in taints(api)
    assert out.unit_status == testing.ActiveStatus(
        f"{READY_580}; GPU 1 repaired by reset at 2026-11-19T14:53:20Z (gate passed)"
    )

    ctx.run(ctx.on.action("gpu-health"), out)
    assert ctx.action_results["repairs"] == (
        f"2026-11-19T14:53:20Z GPU 1 ({QUARANTINED_GPU}) reset: ok "
        "(GPU 00000000:00:1C.0 was successfully reset.)"
    )
    assert "dcgm passed: dcgmi diag -r 2: 3 tests on 4 GPUs" in ctx.action_results["gates"]


def test_a_gpu_that_does_not_come_back_from_its_repair_fails_it_by_uuid_not_index(
    ctx, machine, api, driver, ctr, wall, clock
):
    """Issue 32 review gap 6: GPU 1 of 4 lost for good after its reset.

    nvidia-smi then numbers the three left 0-2, so index 1 is another GPU: looked up by
    index the lost GPU was "there", the gate passed on the others and the repair was
    recorded ok. By UUID it is missing: a failed repair, the node stays cordoned.
    """
    state = joined_gpu_node(ctx, api, driver)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.lost_on_reset = {1}

    out = ctx.run(ctx.on.update_status(), state)

    assert driver.resets == [1] and driver.present() == [0, 2, 3]
    found = watcher_state(machine)
    (repair,) = found["repairs"]
    assert (repair["method"], repair["result"]) == ("reset", "failed")
    assert repair["detail"] == (
        f"GPU 1 ({QUARANTINED_GPU}) is not on the machine after the reset: nvidia-smi "
        "does not list its UUID"
    )
    assert list(found["quarantined"]) == [QUARANTINED_GPU]
    assert node(api)["spec"]["unschedulable"] is True
    assert out.unit_status.name == "waiting"
    assert "is not on the machine after the reset" in out.unit_status.message


def test_a_reset_refused_while_a_process_uses_the_gpu_reboots_then_gates_on_the_new_boot(
    ctx, machine, api, driver, ctr, wall, clock, reboots
):
    state = joined_gpu_node(ctx, api, driver)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use = {1}

    out = ctx.run(ctx.on.update_status(), state)

    assert driver.resets == [] and reboots == [False]
    assert out.unit_status.name == "maintenance"
    assert out.unit_status.message.startswith("rebooting: GPU 1")
    (refused,) = watcher_state(machine)["repairs"]  # no failed repair: none ran
    assert refused["method"] == "reset" and refused["result"] == "refused"
    assert "because it's being used by some other process" in refused["detail"]
    assert refused["gate"] == {}
    assert node(api)["spec"]["unschedulable"] is True
    out = ctx.run(ctx.on.update_status(), out)  # Juju has not rebooted yet
    assert reboots == [False] and out.unit_status.name == "maintenance"

    driver.gpu_in_use = set()
    driver.reboot()
    out = ctx.run(ctx.on.start(), out)

    repairs = watcher_state(machine)["repairs"]
    assert [(r["method"], r["result"]) for r in repairs] == [
        ("reset", "refused"),
        ("reboot", "ok"),
    ]
    assert watcher_state(machine)["repair_counts"] == {  # gpu_k8s_gpu_repairs_total's source
        f"{QUARANTINED_GPU}|1|reset|refused": 1,
        f"{QUARANTINED_GPU}|1|reboot|ok": 1,
    }
    assert watcher_state(machine)["quarantined"] == {}
    assert not node(api)["spec"].get("unschedulable")
    assert "repaired by reboot" in out.unit_status.message


def test_resets_refused_three_times_in_a_day_are_no_failed_repairs_when_reboots_repair(
    ctx, machine, api, driver, ctr, wall, clock, reboots
):
    """A reset nvidia-smi refused ran no repair: it is recorded as refused, not failed.

    So GpuRepairFailed (repairs with result "failed") stays quiet while reboots repair,
    and each fault tries the cheaper reset first again (review, issue 32).
    """
    state = joined_gpu_node(ctx, api, driver)
    out = state
    for boot in range(2, 5):
        quarantined_for(machine, api, "reset-gpu", "Xid48")
        driver.gpu_in_use = {1}
        out = ctx.run(ctx.on.update_status(), out)
        assert out.unit_status.name == "maintenance", out.unit_status
        assert out.unit_status.message.startswith("rebooting: GPU 1")
        driver.gpu_in_use = set()
        driver.reboot(f"b0b1d000-0000-4000-8000-00000000000{boot}")
        out = ctx.run(ctx.on.start(), out)
        assert "repaired by reboot" in out.unit_status.message
        wall[0] += 3600

    results = [(r["method"], r["result"]) for r in watcher_state(machine)["repairs"]]
    assert results == [("reset", "refused"), ("reboot", "ok")] * 3
    assert len(reboots) == 3
    assert not [k for k in watcher_state(machine)["repair_counts"] if k.endswith("|failed")]


def test_a_dcgm_diagnostic_failure_keeps_the_node_cordoned_and_is_recorded(
    ctx, machine, api, driver, ctr, wall, clock
):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    ctr.diag_failures = {1: ("memory", "Pending page retirements found on GPU 1")}

    out = ctx.run(ctx.on.update_status(), state)

    assert driver.resets == [1]
    assert not [r for r in ctr.runs if r["image"] == gpu_gate.NCCL_IMAGE]  # stopped at DCGM
    (failed,) = watcher_state(machine)["repairs"]
    assert failed["result"] == "failed" and failed["gate"]["passed"] is False
    assert failed["gate"]["dcgm"] == (
        "failed: dcgmi diag -r 2: GPU 1 memory: Pending page retirements found on GPU 1"
    )
    assert watcher_state(machine)["quarantined"]
    assert node(api)["spec"]["unschedulable"] is True
    assert gpu_healthy(api)["status"] == "False"
    assert out.unit_status == testing.WaitingStatus(
        "node ip-10-0-1-17 stays cordoned: the gate failed after the reset: cuda passed: "
        "vectorAdd passed on each of 4 GPUs; dcgm FAILED: dcgmi diag -r 2: GPU 1 memory: "
        "Pending page retirements found on GPU 1"
    )


@pytest.mark.parametrize(("reason", "passed"), [("Xid48", False), ("Xid74", True)])
def test_a_memory_fault_is_readmitted_only_when_dcgms_memory_test_passed_its_gpu(
    ctx, machine, api, driver, ctr, wall, clock, reason, passed
):
    """rereview44c R1: ECC off excuses DCGM's memory test, not after a memory fault (XID 48)."""
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", reason)
    ctr.diag_skips = {(1, "memory"): "Skipping test Memory because ECC is not enabled on GPU 1"}

    ctx.run(ctx.on.update_status(), state)

    (repair,) = watcher_state(machine)["repairs"]
    assert repair["gate"]["passed"] is passed
    assert bool(watcher_state(machine)["quarantined"]) is not passed
    said = "quarantined for a memory fault, and the memory test did not pass it"
    assert (said in repair["gate"]["dcgm"]) is not passed


def test_an_all_reduce_under_the_floor_fails_the_gate(ctx, machine, api, driver, ctr, wall, clock):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid74")
    # the node's baseline, from an earlier passing gate (gpu_gate.BASELINE)
    record = {"model": "NVIDIA A10G", "gpus": 4, "image": gpu_gate.NCCL_IMAGE, "busbw": 12.4}
    record |= {"bytes": 268435456, "recorded": "2026-11-02T10:00:00Z"}
    machine.write(gpu_gate.BASELINE, json.dumps({"baselines": [record]}))
    ctr.busbw = 3.1  # an A10G node whose PCIe links trained narrow

    ctx.run(ctx.on.update_status(), state)

    (failed,) = watcher_state(machine)["repairs"]
    assert failed["gate"]["nccl"] == (
        "failed: all-reduce across 4 GPUs: bus bandwidth 3.1 GB/s at 256 MiB, under 50% of "
        "this node's baseline 12.4 GB/s (recorded 2026-11-02T10:00:00Z)"
    )
    assert node(api)["spec"]["unschedulable"] is True


def test_a_pcie_node_without_a_baseline_is_measured_and_its_first_pass_recorded(
    ctx, machine, api, driver, ctr, wall, clock
):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid74")
    ctr.busbw = 4.0  # no GPU peer-to-peer: under the old 8 GB/s floor, healthy

    ctx.run(ctx.on.update_status(), state)

    (repair,) = watcher_state(machine)["repairs"]
    assert repair["result"] == "ok"
    assert repair["gate"]["nccl"] == (
        "passed: all-reduce across 4 GPUs: bus bandwidth 4 GB/s at 256 MiB (no floor for "
        "NVIDIA A10G and no baseline yet: not judged)"
    )
    (recorded,) = json.loads(machine.read(gpu_gate.BASELINE))["baselines"]
    assert recorded == {
        "model": "NVIDIA A10G",
        "gpus": 4,
        "image": gpu_gate.NCCL_IMAGE,
        "bytes": 268435456,
        "busbw": 4.0,
        "recorded": recorded["recorded"],
    }


def test_a_baseline_file_of_the_first_form_is_read_without_error_and_kept(
    ctx, machine, api, driver, ctr, wall, clock
):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid74")
    old = {"model": "NVIDIA A10G", "gpus": 4, "bytes": 268435456, "busbw": 12.4}
    old["recorded"] = "2026-11-02T10:00:00Z"  # one record, no image: judges no image
    machine.write(gpu_gate.BASELINE, json.dumps(old))
    ctr.busbw = 4.0

    ctx.run(ctx.on.update_status(), state)

    (repair,) = watcher_state(machine)["repairs"]
    assert repair["result"] == "ok"
    assert repair["gate"]["nccl"].endswith(
        "(no floor for NVIDIA A10G and no baseline yet: not judged)"
    )
    kept, mine = json.loads(machine.read(gpu_gate.BASELINE))["baselines"]
    assert kept == old
    assert (mine["image"], mine["busbw"]) == (gpu_gate.NCCL_IMAGE, 4.0)


def test_off_or_a_reboot_only_fault_under_reset_leaves_the_quarantine_to_the_operator(
    ctx, machine, api, driver, ctr, wall, reboots
):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reboot", "Xid79")  # fallen off the bus: a reset cannot
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status.name == "blocked" and "quarantined" in out.unit_status.message
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    out = ctx.run(ctx.on.config_changed(), with_config(out, **{"gpu-auto-repair": "off"}))
    assert out.unit_status.name == "blocked"
    assert resets(machine) == [] and reboots == [] and ctr.runs == []


def test_a_repair_waits_for_a_turn_while_another_node_drains(ctx, machine, api, driver, ctr, wall):
    state = joined_gpu_node(ctx, api, driver)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    other = asked(1.0)
    state = with_peers(state, peers(turns=["kubernetes-worker/1"], others={1: other}))

    out = ctx.run(ctx.on.update_status(), state)

    assert resets(machine) == [] and ctr.runs == []
    assert out.unit_status == testing.WaitingStatus(
        f"GPU 1 ({QUARANTINED_GPU}) repair by reset; waiting for a turn "
        "(max-parallel-reboots: 1 node at once); drained now: kubernetes-worker/1"
    )
    assert "repair" in json.loads(reboots_relation(out).local_unit_data["reboot-request"])["for"]


def test_two_failed_repairs_within_24_hours_block_with_the_commands_to_replace_the_machine(
    ctx, machine, api, driver, ctr, wall, clock, monkeypatch
):
    monkeypatch.setenv("JUJU_AVAILABILITY_ZONE", "us-east-1a")
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    ctr.diag_failures = {1: ("memory", "Pending page retirements found on GPU 1")}
    out = ctx.run(ctx.on.update_status(), state)  # reset, the gate failed: failed once
    assert out.unit_status.name == "waiting"
    wall[0] += 3600
    out = ctx.run(ctx.on.update_status(), out)  # again: failed twice
    wall[0] += 3600
    out = ctx.run(ctx.on.update_status(), out)

    assert driver.resets == [1, 1]  # no third try
    assert node(api)["spec"]["unschedulable"] is True
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("GPU repairs failed 2 times within 24 hours (")
    assert out.unit_status.message.endswith(
        "node ip-10-0-1-17 stays cordoned: replace this machine: `juju add-unit "
        "kubernetes-worker --to zone=us-east-1a` then `juju remove-unit kubernetes-worker/0`"
    )
    wall[0] += 24 * 3600  # a day later the repairs are tried again
    ctx.run(ctx.on.update_status(), out)
    assert driver.resets == [1, 1, 1]


def test_a_reset_refused_because_a_process_holds_the_gpu_blocks_naming_it_never_escalating(
    ctx, machine, api, driver, ctr, wall, clock
):
    """Issue 32 review43b G5: under `reset`, nvidia-smi refusing the reset is no failed repair.

    A CUDA process no pod owns holds GPU 1 (the drain cannot end it): nvidia-smi refuses
    ("... because it's being used by some other process ..."). Counted as failed, two such
    hooks told the operator to replace a healthy machine. Now: recorded `refused`, the unit
    Blocked naming the process and the way forward, the turn given back, and no new drain
    or reset while nvidia-smi still lists the process; once it is gone the reset repairs.
    """
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    state = with_peers(state, peers(turns=[UNIT]))  # the turn is this unit's
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use = {1}
    blocked = testing.BlockedStatus(
        f"GPU 1 ({QUARANTINED_GPU}) reset refused: held by process 4201 on GPU 1; node "
        "ip-10-0-1-17 stays cordoned: stop process 4201 on GPU 1, or set "
        "gpu-auto-repair=reboot"
    )

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status == blocked
    (refused,) = watcher_state(machine)["repairs"]
    assert (refused["method"], refused["result"]) == ("reset", "refused")
    assert "because it's being used by some other process" in refused["detail"]
    assert "reboot-request" not in reboots_relation(out).local_unit_data  # turn given back
    for _ in range(3):  # three hours, three hooks: still held, nothing tried, no escalation
        wall[0] += 3600
        out = ctx.run(ctx.on.update_status(), out)
        assert out.unit_status == blocked
    assert len(resets(machine)) == 1 and driver.resets == []
    assert len(watcher_state(machine)["repairs"]) == 1
    assert not [k for k in watcher_state(machine)["repair_counts"] if k.endswith("|failed")]
    assert node(api)["spec"]["unschedulable"] is True

    driver.gpu_in_use = set()  # the operator stopped it
    out = ctx.run(ctx.on.update_status(), out)

    assert driver.resets == [1] and "repaired by reset" in out.unit_status.message
    results = [(r["method"], r["result"]) for r in watcher_state(machine)["repairs"]]
    assert results == [("reset", "refused"), ("reset", "ok")]


def test_a_reset_refused_by_a_client_nvidia_smi_lists_as_no_process_says_so_and_retries(
    ctx, machine, api, driver, ctr, wall, clock
):
    """Refused "In use by another client" (NVIDIA/NVSentinel#1690: nvidia-persistenced), exit 255.

    No compute process to name: the unit says what nvidia-smi said; the next hook retries.
    """
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    holds = [{1}]
    driver.clients.append(lambda: holds[0])

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status == testing.BlockedStatus(
        f"GPU 1 ({QUARANTINED_GPU}) reset refused: held by a client nvidia-smi lists as no "
        "process (The following GPUs could not be reset: GPU 00000000:00:1C.0: In use by "
        "another client); node ip-10-0-1-17 stays cordoned: stop what holds GPU 1, or set "
        "gpu-auto-repair=reboot"
    )
    (refused,) = watcher_state(machine)["repairs"]
    assert refused["result"] == "refused"

    holds[0] = set()
    wall[0] += 3600
    out = ctx.run(ctx.on.update_status(), out)
    assert driver.resets == [1] and "repaired by reset" in out.unit_status.message


# A holder stuck in the kernel (gpu_repair.unkillable): its worker thread in state D with
# no context switch over gpu_repair.HUNG_TASK_S (the main thread waits in S), as CUDA
# processes are left on a GPU that stopped answering.
HOLDER_STUCK = "process 4201 on GPU 1 (its thread 5201 has not left state D for 120 s)"
STUCK = (
    f"GPU 1 ({QUARANTINED_GPU}) cannot be reset: held by {HOLDER_STUCK}; a failed repair; "
    "node ip-10-0-1-17 stays cordoned: a reboot clears it: `juju run kubernetes-worker/0 "
    "repair-gpu` (it reboots at the next hook) or set gpu-auto-repair=reboot"
)


def test_a_reset_held_by_a_process_stuck_in_the_kernel_fails_escalates_and_repair_gpu_reboots(
    ctx, machine, api, driver, ctr, wall, clock, reboots, monkeypatch
):
    """rereview43b finding 4: under `reset` a D-state holder left the node Blocked for good.

    Recorded `refused` (never counted), the unit asked to stop a process no signal ends.
    Now a failed repair (GpuRepairFailed fires), the unit says a reboot clears it; the
    next hook tries again, fails again and escalates, saying no reboot was tried; and
    `repair-gpu`, as both statuses say, reboots, after which the gate readmits the node.
    """
    monkeypatch.setenv("JUJU_AVAILABILITY_ZONE", "us-east-1a")
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    state = with_peers(state, peers(turns=[UNIT]))  # the turn is this unit's
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use, driver.stuck = {1}, {1}
    slept = clock.slept

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status == testing.BlockedStatus(STUCK)
    assert clock.slept - slept >= gpu_repair.HUNG_TASK_S  # watched, not judged at one read
    (failed,) = watcher_state(machine)["repairs"]
    assert (failed["method"], failed["result"]) == ("reset", "failed")
    assert failed["detail"].endswith(f"; {HOLDER_STUCK}")
    assert watcher_state(machine)["repair_counts"] == {f"{QUARANTINED_GPU}|1|reset|failed": 1}
    assert "reboot-request" not in reboots_relation(out).local_unit_data  # turn given back
    assert node(api)["spec"]["unschedulable"] is True and reboots == []

    wall[0] += 600
    out = ctx.run(ctx.on.update_status(), out)  # tried again: still stuck, failed twice

    assert len(resets(machine)) == 2 and driver.resets == [] and reboots == []
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("GPU repairs failed 2 times within 24 hours (")
    assert out.unit_status.message.endswith(
        "for 120 s)); no reboot was tried: `juju run kubernetes-worker/0 repair-gpu` reboots "
        "at the next hook; node ip-10-0-1-17 stays cordoned: replace this machine: `juju "
        "add-unit kubernetes-worker --to zone=us-east-1a` then `juju remove-unit "
        "kubernetes-worker/0`"
    )
    wall[0] += 600
    out = ctx.run(ctx.on.update_status(), out)
    assert len(resets(machine)) == 2 and out.unit_status.name == "blocked"  # no third try

    out = ctx.run(ctx.on.action("repair-gpu"), out)
    assert ctx.action_results == {"repair": "reboot", "node": NODE}
    out = ctx.run(ctx.on.update_status(), out)
    assert reboots == [False] and out.unit_status.message.startswith("rebooting: GPU 1")

    driver.reboot()  # no process outlives it
    out = ctx.run(ctx.on.start(), out)

    assert "repaired by reboot" in out.unit_status.message
    results = [(r["method"], r["result"]) for r in watcher_state(machine)["repairs"]]
    assert results == [("reset", "failed"), ("reset", "failed"), ("reboot", "ok")]
    assert not node(api)["spec"].get("unschedulable")


def test_a_stuck_holder_under_reboot_reboots_at_once_without_watching_it(
    ctx, machine, api, driver, ctr, wall, clock, reboots
):
    """With `reboot` the reboot follows any refusal: nothing to learn by watching the holder."""
    state = joined_gpu_node(ctx, api, driver)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use, driver.stuck = {1}, {1}
    slept = clock.slept

    out = ctx.run(ctx.on.update_status(), state)

    assert reboots == [False] and out.unit_status.message.startswith("rebooting: GPU 1")
    assert clock.slept - slept < gpu_repair.HUNG_TASK_S
    (refused,) = watcher_state(machine)["repairs"]
    assert (refused["method"], refused["result"]) == ("reset", "refused")

    driver.reboot()
    out = ctx.run(ctx.on.start(), out)
    assert "repaired by reboot" in out.unit_status.message


def test_a_stuck_holder_that_ends_lets_the_next_hook_reset_and_readmit(
    ctx, machine, api, driver, ctr, wall, clock
):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use, driver.stuck = {1}, {1}
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status == testing.BlockedStatus(STUCK)

    driver.gpu_in_use, driver.stuck = set(), set()  # its driver call returned; it ended
    wall[0] += 600
    out = ctx.run(ctx.on.update_status(), out)

    assert driver.resets == [1] and "repaired by reset" in out.unit_status.message
    results = [(r["method"], r["result"]) for r in watcher_state(machine)["repairs"]]
    assert results == [("reset", "failed"), ("reset", "ok")]


def test_a_holder_that_leaves_state_d_while_watched_is_a_live_holder_refused(
    ctx, machine, api, driver, ctr, wall, clock
):
    """A CUDA process is in D for a moment too: one read outside D and it can be stopped."""
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use, driver.stuck = {1}, {1}
    watched = []

    def returns_after_30_s():
        watched.append(clock.now)
        if driver.stuck and len(watched) * gpu_repair.CLIENTS_POLL_S >= 30:
            driver.stuck = set()  # its driver call returned: state S again

    out = ctx.run(ctx.on.update_status(), state)  # the first hook's pause polls once
    assert out.unit_status == testing.BlockedStatus(STUCK)
    driver.gpu_in_use, driver.stuck = {1}, {1}
    wall[0] += 600
    clock.meanwhile.append(returns_after_30_s)

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.message.startswith(
        f"GPU 1 ({QUARANTINED_GPU}) reset refused: held by process 4201 on GPU 1;"
    )
    results = [(r["method"], r["result"]) for r in watcher_state(machine)["repairs"]]
    assert results == [("reset", "failed"), ("reset", "refused")]


def test_a_live_holder_that_gets_stuck_after_its_refusal_is_tried_again_and_fails(
    ctx, machine, api, driver, ctr, wall, clock
):
    """Refused (state S), then the operator's kill hangs in the kernel (state D).

    Asking them to stop it again would say nothing true: the next hook tries the reset
    again, watches the holder and fails the repair.
    """
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use = {1}
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status.message.startswith(f"GPU 1 ({QUARANTINED_GPU}) reset refused")

    driver.stuck = {1}
    wall[0] += 600
    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.BlockedStatus(STUCK)
    results = [(r["method"], r["result"]) for r in watcher_state(machine)["repairs"]]
    assert results == [("reset", "refused"), ("reset", "failed")]


def test_repair_gpu_held_by_a_stuck_process_fails_the_repair_and_run_again_reboots(
    ctx, machine, api, driver, ctr, wall, clock
):
    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use, driver.stuck = {1}, {1}

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("repair-gpu", params={"timeout": 60}), state)

    assert failed.value.message == STUCK
    (record,) = watcher_state(machine)["repairs"]
    assert (record["method"], record["result"]) == ("reset", "failed")
    ctx.run(ctx.on.action("repair-gpu", params={"timeout": 60}), state)
    assert ctx.action_results == {"repair": "reboot", "node": NODE}


# rereview44b F1: nvidia-smi on a hung driver hangs in state D itself (FakeDriver.hung)
HUNG = (
    f"GPU 1 ({QUARANTINED_GPU}) cannot be reset: nvidia-smi -r did not answer within 120 s: "
    "the NVIDIA driver is hung; a failed repair; node ip-10-0-1-17 stays cordoned: a reboot "
    "clears it: `juju run kubernetes-worker/0 repair-gpu` (it reboots at the next hook) or "
    "set gpu-auto-repair=reboot"
)


def _repair_smi_calls(machine):
    """The nvidia-smi the repair ran itself (not through `sh`, as nvidia.py does)."""
    return [c for c in machine.runner.calls if c.argv[0] == "nvidia-smi"]


def test_a_reset_that_never_answers_is_a_failed_repair_each_nvidia_smi_bounded(
    ctx, machine, api, driver, ctr, wall, clock, reboots
):
    """A reset whose nvidia-smi never answers neither holds the hook for ever nor is refused.

    Every nvidia-smi the repair runs asks for a bound of its own (DEFAULT_TIMEOUT is 30 min
    and a killed nvidia-smi in state D was waited for without end); no answer within it
    on a quarantined GPU is a hung driver: a failed repair that only a reboot clears.
    """
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    state = with_peers(state, peers(turns=[UNIT]))
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.reset_hangs = {1}
    before = len(machine.runner.calls)

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status == testing.BlockedStatus(HUNG)
    (failed,) = watcher_state(machine)["repairs"]
    assert (failed["method"], failed["result"]) == ("reset", "failed")
    assert "reboot-request" not in reboots_relation(out).local_unit_data  # turn given back
    smi = [c for c in machine.runner.calls[before:] if c.argv[0] == "nvidia-smi"]
    assert smi and all(c.timeout is not None and c.timeout <= 120 for c in smi)
    assert [t for _, t in driver.hung_calls] == [120.0] and reboots == []

    wall[0] += 600
    out = ctx.run(ctx.on.update_status(), out)  # tried again, hangs again: escalated
    assert out.unit_status.message.startswith("GPU repairs failed 2 times within 24 hours (")
    assert "no reboot was tried: `juju run kubernetes-worker/0 repair-gpu`" in (
        out.unit_status.message
    )


def test_repair_gpu_on_a_driver_whose_nvidia_smi_hangs_fails_and_gives_its_turn_back(
    ctx, machine, api, driver, ctr, wall, clock
):
    """leptonai/gpud#117: every nvidia-smi hangs; the action ends, bounded, and says why."""
    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    state = with_peers(state, peers(turns=[UNIT]))
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use, driver.hung = {1}, {1}

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("repair-gpu", params={"timeout": 60}), state)

    assert failed.value.message == HUNG
    assert driver.hung_calls and all(t <= 120 for _, t in driver.hung_calls)
    out = failed.value.state
    assert out is not None and "reboot-request" not in reboots_relation(out).local_unit_data
    (record,) = watcher_state(machine)["repairs"]
    assert (record["method"], record["result"]) == ("reset", "failed")
    ctx.run(ctx.on.action("repair-gpu", params={"timeout": 60}), out)
    assert ctx.action_results == {"repair": "reboot", "node": NODE}


def test_a_hung_driver_under_reboot_is_a_failed_reset_then_the_reboot(
    ctx, machine, api, driver, ctr, wall, clock, reboots
):
    state = joined_gpu_node(ctx, api, driver)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.reset_hangs = {1}

    out = ctx.run(ctx.on.update_status(), state)

    assert reboots == [False] and out.unit_status.message.startswith("rebooting: GPU 1")
    (failed,) = watcher_state(machine)["repairs"]
    assert (failed["method"], failed["result"]) == ("reset", "failed")
    assert failed["detail"].endswith(
        "nvidia-smi -r did not answer within 120 s: the NVIDIA driver is hung"
    )
    driver.reboot()
    out = ctx.run(ctx.on.start(), out)
    assert "repaired by reboot" in out.unit_status.message


# hung44 (issue 32 item 3): every nvidia-smi hangs, the hook's driver step's too
# (nvidia.py). Each answers within nvidia.SMI_TIMEOUT_S or is the driver hung.
DRIVER_HUNG = (
    "NVIDIA driver hung: nvidia-smi did not answer within 30 s; a reboot clears it: "
    "`kubectl drain ip-10-0-1-17 --ignore-daemonsets --delete-emptydir-data`, `juju ssh "
    "kubernetes-worker/0 -- sudo reboot`, then `kubectl uncordon ip-10-0-1-17`"
)


def _bounded(driver, hung_before=0):
    """Every hung nvidia-smi asked for 120 s at most, and there were few of them."""
    hung = driver.hung_calls[hung_before:]
    assert hung and all(t <= 120 for _, t in hung)
    assert sum(t for _, t in hung) <= 300  # a hook bounded in minutes, not 30 min per call
    return hung


def test_a_hung_driver_on_a_gpu_fallen_off_the_bus_reboots_in_its_turn_and_readmits(
    ctx, machine, api, driver, ctr, wall, clock, reboots
):
    """XID 79 (RESTART_BM) under `reboot`: the driver step neither blocks nor reinstalls."""
    state = joined_gpu_node(ctx, api, driver)
    quarantined_for(machine, api, "reboot", "Xid79")
    driver.hung, packages, before = {1}, dict(machine.dpkg), len(driver.hung_calls)

    out = ctx.run(ctx.on.update_status(), state)

    assert reboots == [False] and out.unit_status.message.startswith("rebooting: GPU 1")
    assert dict(machine.dpkg) == packages  # nothing reinstalled or switched
    assert [t for _, t in _bounded(driver, before)] == [30.0]  # the driver step's; no reset
    assert watcher_state(machine).get("repairs", []) == []  # no failed gate or repair yet
    driver.reboot()
    out = ctx.run(ctx.on.start(), out)
    assert "repaired by reboot" in out.unit_status.message
    assert [(r["method"], r["result"]) for r in watcher_state(machine)["repairs"]] == [
        ("reboot", "ok")
    ]
    assert not node(api)["spec"].get("unschedulable")


def test_a_hung_driver_under_reset_is_a_failed_repair_a_reboot_clears(
    ctx, machine, api, driver, ctr, wall, clock, reboots
):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    state = with_peers(state, peers(turns=[UNIT]))
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.hung, packages, before = {1}, dict(machine.dpkg), len(driver.hung_calls)

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status == testing.BlockedStatus(HUNG) and reboots == []
    (failed,) = watcher_state(machine)["repairs"]
    assert (failed["method"], failed["result"]) == ("reset", "failed")
    assert dict(machine.dpkg) == packages
    _bounded(driver, before)
    assert "reboot-request" not in reboots_relation(out).local_unit_data  # turn given back


@pytest.mark.parametrize("choice", ["580", "570"])
def test_a_hung_driver_without_a_quarantine_is_blocked_naming_it_and_changes_nothing(
    ctx, machine, api, driver, ctr, reboots, choice
):
    """Not a 30-minute hang per call, no reinstall, no switch to another branch, no reboot."""
    state = joined_gpu_node(ctx, api, driver)
    driver.hung, packages, before = {1}, dict(machine.dpkg), len(driver.hung_calls)

    out = ctx.run(ctx.on.config_changed(), with_config(state, **{"nvidia-driver": choice}))

    assert out.unit_status == testing.BlockedStatus(DRIVER_HUNG)
    assert dict(machine.dpkg) == packages and reboots == []
    assert [t for _, t in _bounded(driver, before)] == [30.0]  # asked once per hook
    driver.hung = set()
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name in ("active", "blocked")  # the driver answers again
    assert "hung" not in out.unit_status.message


def test_a_process_stuck_on_another_gpu_neither_fails_nor_escalates_a_refused_reset(
    ctx, machine, api, driver, ctr, wall, clock
):
    """rereview44b F2: only the quarantined GPUs' holders are watched and named.

    GPU 1 is quarantined and held by a live process; a process on healthy GPU 0 hangs in
    the kernel (a pod's read of a dead NFS mount whose drain timed out). It was watched,
    turned the refusal into a failed repair, then an escalation, and was named "GPU GPU-...".
    """
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use, driver.stuck = {0, 1}, {0}
    blocked = testing.BlockedStatus(
        f"GPU 1 ({QUARANTINED_GPU}) reset refused: held by process 4201 on GPU 1; node "
        "ip-10-0-1-17 stays cordoned: stop process 4201 on GPU 1, or set "
        "gpu-auto-repair=reboot"
    )
    slept = clock.slept

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status == blocked
    assert clock.slept - slept < gpu_repair.HUNG_TASK_S  # GPU 0's process is not watched
    wall[0] += 600
    out = ctx.run(ctx.on.update_status(), out)  # still held by a live process: no new try
    assert out.unit_status == blocked
    results = [(r["method"], r["result"]) for r in watcher_state(machine)["repairs"]]
    assert results == [("reset", "refused")]


def test_a_thread_in_state_d_that_keeps_switching_is_a_live_holder_refused(
    ctx, machine, api, driver, ctr, wall, clock
):
    """kernel/hung_task.c check_hung_task: a task that switched in the window is not hung.

    (A driver's polling wait sleeps in D again and again.)
    """
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use, driver.waking = {1}, {1}
    driver.tick()
    clock.meanwhile.append(driver.tick)

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status.message.startswith(
        f"GPU 1 ({QUARANTINED_GPU}) reset refused: held by process 4201 on GPU 1;"
    )
    (refused,) = watcher_state(machine)["repairs"]
    assert refused["result"] == "refused"


def test_a_killed_holder_whose_thread_stays_in_the_kernel_is_a_zombie_and_fails_the_repair(
    ctx, machine, api, driver, ctr, wall, clock
):
    """rereview44b F3 (b): after the operator's kill -9 the main thread is a zombie (`Z`).

    Read from /proc/<pid>/stat alone it was no holder in D, and the unit asked for ever
    to stop a process that was already killed.
    """
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use, driver.waking = {1}, {1}
    clock.meanwhile.append(driver.tick)
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status.message.startswith(f"GPU 1 ({QUARANTINED_GPU}) reset refused")

    driver.kill(1)  # as the status asks; its thread stays in the driver
    wall[0] += 600
    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.BlockedStatus(
        f"GPU 1 ({QUARANTINED_GPU}) cannot be reset: held by process 4201 on GPU 1 (killed, "
        "it has been a zombie for 120 s); a failed repair; node ip-10-0-1-17 stays cordoned: "
        "a reboot clears it: `juju run kubernetes-worker/0 repair-gpu` (it reboots at the "
        "next hook) or set gpu-auto-repair=reboot"
    )
    results = [(r["method"], r["result"]) for r in watcher_state(machine)["repairs"]]
    assert results == [("reset", "refused"), ("reset", "failed")]


def test_the_watch_lasts_the_machines_hung_task_timeout(
    ctx, machine, api, driver, ctr, wall, clock
):
    """rereview44b F5: kernel.hung_task_timeout_secs; 0 (the detector off) means the default."""
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use, driver.stuck = {1}, {1}
    machine.write(gpu_repair.HUNG_TASK_SYSCTL, "60\n")
    slept = clock.slept

    out = ctx.run(ctx.on.update_status(), state)

    assert "(its thread 5201 has not left state D for 60 s)" in out.unit_status.message
    assert 60 <= clock.slept - slept < gpu_repair.HUNG_TASK_S
    machine.write(gpu_repair.HUNG_TASK_SYSCTL, "0\n")
    wall[0] += 600
    out = ctx.run(ctx.on.update_status(), out)
    assert "not left state D for 120 s" in out.unit_status.message


def test_a_refused_repair_gpu_gives_its_turn_back_under_gpu_auto_repair_off(
    ctx, machine, api, driver, ctr, wall, clock
):
    """rereview44b F4: a failed action kept its turn, and no hook under `off` gave it back.

    (It counted against max-parallel-reboots until someone ran the action again.)
    """
    state = with_peers(joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR), peers(turns=[UNIT]))
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use = {1}  # a live holder: the reset is refused

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("repair-gpu", params={"timeout": 60}), state)

    assert failed.value.message.startswith(f"GPU 1 ({QUARANTINED_GPU}) reset refused")
    assert failed.value.state is not None
    assert "reboot-request" not in reboots_relation(failed.value.state).local_unit_data


def test_a_reset_refused_for_another_reason_under_reset_is_a_failed_repair(
    ctx, machine, api, p5, wall, clock
):
    """Only a holder makes a refusal: nvidia-smi refusing for the GPU's NVLink peers fails it.

    (Fabric Manager stops between the charm's `systemctl is-active` and the reset.)
    """
    FakeCtr(machine, p5)
    state = run_joined(ctx, api, config={"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    p5.fabric_active = lambda: False  # what nvidia-smi finds at the reset

    out = ctx.run(ctx.on.update_status(), state)

    (failed,) = watcher_state(machine)["repairs"]
    assert (failed["method"], failed["result"]) == ("reset", "failed")
    assert "must be reset in the same command" in failed["detail"]
    assert out.unit_status.name == "waiting"


def test_repair_gpu_refused_by_a_process_fails_naming_it_and_counts_no_failed_repair(
    ctx, machine, api, driver, ctr, wall, clock
):
    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use = {1}

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("repair-gpu", params={"timeout": 60}), state)

    assert failed.value.message == (
        f"GPU 1 ({QUARANTINED_GPU}) reset refused: held by process 4201 on GPU 1; node "
        "ip-10-0-1-17 stays cordoned: stop process 4201 on GPU 1 and run repair-gpu again, "
        "or set gpu-auto-repair=reboot"
    )
    (refused,) = watcher_state(machine)["repairs"]
    assert (refused["method"], refused["result"]) == ("reset", "refused")


def test_a_gate_whose_images_cannot_be_pulled_is_no_failed_repair_and_runs_at_the_next_hook(
    ctx, machine, api, driver, ctr, wall, clock
):
    """A registry down or a pull timing out says nothing about the GPU (review, issue 32).

    Counted as failed repairs, two of them Blocked the unit with "replace this machine".
    """
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    ctr.registry = {validation.VALIDATION_IMAGE, gpu_gate.DCGM_IMAGE}  # no PyTorch image

    out = ctx.run(ctx.on.update_status(), state)

    assert driver.resets == [1]  # repaired
    assert ctr.runs == []  # the images first: no check ran without all of them
    assert out.unit_status == testing.WaitingStatus(
        "node ip-10-0-1-17 stays cordoned: the reset is done but the gate could not run: "
        f'cannot pull {gpu_gate.NCCL_IMAGE}: ctr: failed to resolve reference "'
        f'{gpu_gate.NCCL_IMAGE}": not found; pulled and run again at the next hook (not a '
        "failed repair)"
    )
    ctr.pull_hangs = 1  # the registry answers again, too slowly: the pull times out
    wall[0] += 3600
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "waiting"  # twice: no escalation ("replace this machine")
    assert "the gate could not run: pulling" in out.unit_status.message
    assert "repairs" not in watcher_state(machine)  # nothing recorded, nothing counted
    assert watcher_state(machine)["quarantined"] and node(api)["spec"]["unschedulable"]
    assert driver.resets == [1]  # proving again is no new repair

    ctr.registry = None  # the registry is back
    out = ctx.run(ctx.on.update_status(), out)

    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reset", "ok")
    assert driver.resets == [1] and watcher_state(machine)["quarantined"] == {}
    assert not node(api)["spec"].get("unschedulable")
    assert "repaired by reset" in out.unit_status.message


def test_a_gate_without_containerds_ctr_is_no_failed_repair_and_runs_once_ctr_is_there(
    ctx, machine, api, driver, ctr, wall, clock
):
    """No `ctr` (containerd not installed yet, or removed) says nothing about the GPU.

    Issue 32's leftover: it counted as a failed repair, two of which escalate to "replace
    this machine". Like an image that cannot be pulled, the gate is "cannot check yet":
    the node stays cordoned, nothing is recorded, the next hook (whose reconcile installs
    containerd first) proves it without repairing again.
    """
    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    installed = machine.dpkg.pop("containerd")  # ctr's package (fakes.containerd_ctr)

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("repair-gpu", params={"timeout": 60}), state)

    assert failed.value.message == (
        "node ip-10-0-1-17 stays cordoned: the reset is done but the gate could not run: "
        f"containerd's client {validation.CTR} is not on this machine yet; run again at the "
        "next hook (not a failed repair)"
    )
    assert driver.resets == [1] and ctr.runs == []
    assert "repairs" not in watcher_state(machine)  # nothing recorded, nothing counted
    assert watcher_state(machine)["quarantined"] and node(api)["spec"]["unschedulable"]

    out = ctx.run(ctx.on.update_status(), state)

    assert machine.dpkg["containerd"] == installed  # the reconcile installed it again
    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reset", "ok")
    assert driver.resets == [1] and not node(api)["spec"].get("unschedulable")
    assert "repaired by reset" in out.unit_status.message


def test_a_ctr_that_goes_missing_after_the_pulls_is_no_failed_gpu_check(
    ctx, machine, api, driver, ctr, wall, clock
):
    """The checks' `ctr run` finding no ctr is the machine's fault, not a GPU's: not failed."""
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    pull = ctr._pull

    def pull_then_remove(argv, namespace, ref):
        done = pull(argv, namespace, ref)
        if ref == gpu_gate.NCCL_IMAGE:  # the last pull: containerd goes away after it
            machine.dpkg.pop("containerd")
        return done

    ctr._pull = pull_then_remove

    out = ctx.run(ctx.on.update_status(), state)

    assert "repairs" not in watcher_state(machine)
    assert out.unit_status.message.endswith("(not a failed repair)")
    assert "is not on this machine yet" in out.unit_status.message


def test_an_nvswitch_machine_whose_fabric_manager_is_down_reboots_instead_of_a_reset(
    ctx, machine, api, p5, wall, clock, reboots
):
    """No GPU reset on an NVSwitch machine without Fabric Manager (issue 32 leftover).

    nvidia-smi's manual (-r): on an NVSwitch system one GPU is reset alone only with
    Fabric Manager running; without it every NVLink peer (here all 8) must be reset in the
    same command. The charm tried `-r -i 1` anyway, nvidia-smi refused, and the refusal
    counted as a failed repair. Now no reset is tried: a reboot (which starts Fabric
    Manager again) repairs it, and nothing counts as failed.
    """
    p5.fabric_starts = False  # Fabric Manager does not come up (the node is Blocked for it)
    state = run_joined(ctx, api)
    quarantined_for(machine, api, "reset-gpu", "Xid48")

    ctx.run(ctx.on.action("repair-gpu"), state)  # the action: a reboot, left to the hook
    assert ctx.action_results == {"repair": "reboot", "node": NODE}
    assert resets(machine) == []
    machine.path(gpu_repair.PROGRESS).unlink()  # the hook decides by itself too

    ctx.run(ctx.on.update_status(), state)

    assert resets(machine) == [] and p5.resets == []
    assert reboots == [False]
    assert "repairs" not in watcher_state(machine)


def test_gpu_auto_repair_reset_waits_for_fabric_manager_then_resets(
    ctx, machine, api, p5, wall, clock, reboots
):
    """With reboots not allowed, the reset waits for Fabric Manager; the unit says so."""
    ctr = FakeCtr(machine, p5)
    p5.fabric_starts = False
    state = run_joined(ctx, api, config={"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")

    out = ctx.run(ctx.on.update_status(), state)

    assert resets(machine) == [] and reboots == [] and ctr.runs == []
    assert "repairs" not in watcher_state(machine)
    assert out.unit_status == testing.BlockedStatus(
        f"GPU 1 ({QUARANTINED_GPU}) cannot be reset alone: nvidia-fabricmanager is not "
        "running on this NVSwitch machine (nvidia-smi -r needs it); node ip-10-0-1-17 stays "
        "cordoned: start nvidia-fabricmanager or set gpu-auto-repair=reboot"
    )

    p5.fabric_starts = True  # the operator fixed Fabric Manager: the hook starts it
    out = ctx.run(ctx.on.update_status(), out)

    assert p5.resets == [1] and reboots == []
    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reset", "ok")


def test_repair_gpu_resets_and_gates_now_or_leaves_a_reboot_to_the_next_hook(
    ctx, machine, api, driver, ctr, wall, clock, reboots
):
    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("repair-gpu"), state)
    assert failed.value.message == "no GPU of this machine is quarantined: nothing to repair"

    quarantined_for(machine, api, "reset-gpu", "Xid48")
    out = ctx.run(ctx.on.action("repair-gpu", params={"timeout": 60}), state)
    assert ctx.action_results["repair"] == "reset"
    assert driver.resets == [1] and watcher_state(machine)["quarantined"] == {}
    assert unit_data(out)["gpu-quarantine"] == "[]"

    quarantined_for(machine, api, "reboot", "Xid79")
    out = ctx.run(ctx.on.action("repair-gpu"), out)
    assert ctx.action_results == {"repair": "reboot", "node": NODE}
    assert reboots == []  # juju-reboot is refused in an action: the next hook reboots
    out = ctx.run(ctx.on.update_status(), out)
    assert reboots == [False] and out.unit_status.name == "maintenance"


def test_validate_gpu_checks_every_gpu_not_only_the_first(ctx, api, driver, ctr):
    state = joined_gpu_node(ctx, api, driver)
    ctr.failing_gpus = {"2"}  # vectorAdd fails verification on GPU 2 only

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("validate-gpu"), state)

    assert failed.value.message == (
        "GPU 2: CUDA check failed (exit 1): Result verification failed at element 7!"
    )
    assert [r["env"]["NVIDIA_VISIBLE_DEVICES"] for r in ctr.runs] == ["0", "1", "2"]
    assert ctx.action_results["passed"] == "false"


# -- a reset empties the GPUs of their clients first (issue 32): nvidia-smi -r refuses a GPU
# in use, a drain leaves the GPU DaemonSets' pods, and the watcher polls nvidia-smi ------

PAUSE_LABEL = "gpu-k8s.io/gpu-clients"


@pytest.fixture
def gpu_clients(api, driver, machine, clock, ctr):
    """The node's GPU clients as the control plane deploys them, and the watcher's polls.

    The device plugin's and the DCGM exporter's DaemonSets, made by the control plane's
    own modules; their controller and kubelet (fakes.csi_node.sync_daemonset) act while
    the charm sleeps. A running pod of either holds every GPU open (NVML), and so does the
    watcher's nvidia-smi while its service runs unpaused: a poll every 5 s that a reset
    meets now and then, here always, so that a charm leaving it on cannot pass by luck.
    `sync()` runs the controller now; `pods()` names the GPU client pods on the node.
    """
    import types

    import charm_modules
    import gpu_watcher

    from fakes.csi_node import sync_daemonset

    plugin = charm_modules.load("kubernetes-control-plane", "device_plugin")
    dcgm = charm_modules.load("kubernetes-control-plane", "dcgm_exporter")
    mig_manager = charm_modules.load("kubernetes-control-plane", "mig_manager")
    every_set = [*plugin.manifests("none", 1), *dcgm.manifests(), *mig_manager.manifests([])]
    sets = [o for o in every_set if o["kind"] == "DaemonSet"]

    def sync():
        for ds in sets:
            sync_daemonset(api, ds)

    def pods():
        return sorted(
            p["metadata"]["name"]
            for p in api.objects("/api/v1/namespaces/", kind="Pod")
            if p["spec"].get("nodeName") == NODE
            and p["metadata"].get("labels", {}).get("gpu-k8s.io/gpu-client") == "true"
        )

    def watcher_polls():
        service = machine.services.get(WATCHER)
        pause = machine.path(gpu_watcher.PAUSE_FILE)
        honoured = (
            pause.exists() and abs(time.time() - pause.stat().st_mtime) < gpu_watcher.PAUSE_MAX_S
        )
        return bool(service and service.active and not honoured)

    every = set(range(driver.gpus))
    driver.clients += [
        lambda: every if pods() else set(),
        lambda: every if watcher_polls() else set(),
    ]
    # the exporter's embedded DCGM host engine (fakes.containerd_ctr: one per node)
    ctr.hostengines.append(lambda: [p for p in pods() if p.startswith("dcgm-exporter-")])
    clock.meanwhile.append(sync)
    return types.SimpleNamespace(sync=sync, pods=pods, watcher_polls=watcher_polls)


def at_reset(driver, api, gpu_clients):
    """What held the GPUs each time nvidia-smi was asked to reset (a spy among clients)."""
    seen = []

    def spy():
        label = node_labels(api).get(PAUSE_LABEL)
        seen.append((label, gpu_clients.pods(), gpu_clients.watcher_polls()))
        return set()

    driver.clients.append(spy)
    return seen


def test_a_reset_pauses_the_gpu_daemonsets_and_the_watcher_and_restores_both(
    ctx, machine, api, driver, ctr, wall, clock, gpu_clients
):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    # the node had a MIG layout applied once: NVIDIA's MIG manager runs there too
    set_labels(api, **{"nvidia.com/gpu.deploy.mig-manager": "true"})
    gpu_clients.sync()
    every = [f"dcgm-exporter-{NODE}", f"nvidia-device-plugin-{NODE}", f"nvidia-mig-manager-{NODE}"]
    assert gpu_clients.pods() == every
    assert gpu_clients.watcher_polls()
    # the leader's NoExecute taint would evict the device plugin (the DCGM exporter
    # tolerates it); the repair may come before it
    quarantined_for(machine, api, "reset-gpu", "Xid48", tainted=False)
    seen = at_reset(driver, api, gpu_clients)

    out = ctx.run(ctx.on.update_status(), state)

    # without the pause nvidia-smi refused: "In use by another client" (NVSentinel#1690)
    assert driver.resets == [1], watcher_state(machine)["repairs"]
    assert seen == [("paused", [], False)]  # the label set, no pod left, no poll
    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reset", "ok")
    assert out.unit_status.name == "active"
    # both given back: the label gone (the DaemonSets come back), the watcher polls again
    assert PAUSE_LABEL not in node_labels(api)
    assert gpu_clients.watcher_polls() and machine.services[WATCHER].active
    gpu_clients.sync()
    assert gpu_clients.pods() == every


def test_a_reset_still_refused_restores_the_gpu_clients_and_the_next_hook_retries(
    ctx, machine, api, driver, ctr, wall, clock, gpu_clients
):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    gpu_clients.sync()
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    driver.gpu_in_use = {1}  # a CUDA process the drain did not end (no pod's)
    seen = at_reset(driver, api, gpu_clients)
    slept = clock.slept

    out = ctx.run(ctx.on.update_status(), state)

    assert driver.resets == [] and seen == [("paused", [], False)]
    # the pods left within a poll; a process no pod owns is not waited for (the drain
    # waited for every other pod already)
    assert clock.slept - slept == gpu_repair.CLIENTS_POLL_S
    (refused,) = watcher_state(machine)["repairs"]
    assert refused["result"] == "refused"  # no failed repair (review43b G5)
    assert "because it's being used by some other process" in refused["detail"]
    assert out.unit_status.name == "blocked" and "process 4201" in out.unit_status.message
    assert PAUSE_LABEL not in node_labels(api) and gpu_clients.watcher_polls()
    assert node(api)["spec"]["unschedulable"] is True  # still out of service

    driver.gpu_in_use = set()
    wall[0] += 3600
    out = ctx.run(ctx.on.update_status(), out)
    assert driver.resets == [1] and out.unit_status.name == "active"
    assert PAUSE_LABEL not in node_labels(api) and gpu_clients.watcher_polls()


def test_an_api_error_mid_reset_fails_the_hook_with_the_gpu_clients_restored(
    ctx, machine, api, driver, ctr, wall, clock, gpu_clients
):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    gpu_clients.sync()
    quarantined_for(machine, api, "reset-gpu", "Xid48", tainted=False)
    faults = []

    def refuse_the_next_pod_list():  # inside the wait: it sleeps while the pods leave
        if not faults:
            faults.append(node_labels(api).get(PAUSE_LABEL))
            api.inject(403, method="GET", path_prefix="/api/v1/pods")

    clock.meanwhile.append(refuse_the_next_pod_list)

    with pytest.raises(testing.errors.UncaughtCharmError, match="pods is forbidden"):
        ctx.run(ctx.on.update_status(), state)

    assert faults == ["paused"] and driver.resets == []
    assert PAUSE_LABEL not in node_labels(api) and gpu_clients.watcher_polls()


def test_a_pause_a_killed_hook_left_is_undone_by_the_next_hook(
    ctx, machine, api, driver, ctr, wall, clock, gpu_clients
):
    import gpu_watcher

    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    set_labels(api, **{PAUSE_LABEL: "paused"})  # the hook was killed inside the pause
    machine.write(gpu_watcher.PAUSE_FILE, f"{NODE}: GPU reset\n")
    gpu_clients.sync()
    assert gpu_clients.pods() == [] and not gpu_clients.watcher_polls()

    ctx.run(ctx.on.update_status(), state)

    assert PAUSE_LABEL not in node_labels(api) and gpu_clients.watcher_polls()
    gpu_clients.sync()
    assert len(gpu_clients.pods()) == 2


def test_only_the_node_itself_may_pause_its_gpu_clients(api, machine, driver, ctx):
    from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

    joined_gpu_node(ctx, api, driver)
    register_node(api, "ip-10-0-1-18")
    pause = {"metadata": {"labels": {PAUSE_LABEL: "paused"}}}
    with Kube.from_kubeconfig(api.kubeconfig(api.node_token("ip-10-0-1-18")), retries=0) as kube:
        with pytest.raises(KubeError) as refused:
            kube.patch("v1", "Node", NODE, pause)
        assert refused.value.status == 403
        assert f'node "ip-10-0-1-18" is not allowed to modify node "{NODE}"' in str(refused.value)
        kube.patch("v1", "Node", "ip-10-0-1-18", pause)  # its own: NodeRestriction allows it
    assert PAUSE_LABEL not in node_labels(api)


def test_a_gpu_client_that_does_not_leave_is_waited_for_a_bounded_time(
    ctx, machine, api, driver, ctr, wall, clock, gpu_clients, monkeypatch
):
    monkeypatch.setattr(gpu_repair, "CLIENTS_TIMEOUT_S", 30.0)  # three polls, not twelve
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    # a GPU client of the operator's, labelled as ours but without our node affinity
    api.put_object(
        f"/api/v1/namespaces/default/pods/own-exporter-{NODE}",
        {
            "metadata": {
                "labels": {"gpu-k8s.io/gpu-client": "true"},
                "ownerReferences": [  # a DaemonSet's: the drain leaves it
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": "own-exporter",
                        "uid": "u-1",
                        "controller": True,
                    }
                ],
            },
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "e"}]},
        },
    )
    slept = clock.slept

    out = ctx.run(ctx.on.update_status(), state)

    assert clock.slept - slept == gpu_repair.CLIENTS_TIMEOUT_S
    (refused,) = watcher_state(machine)["repairs"]
    assert "In use by another client" in refused["detail"] and refused["result"] == "refused"
    assert out.unit_status == testing.BlockedStatus(  # the holder named (review43b G5)
        f"GPU 1 ({QUARANTINED_GPU}) reset refused: held by pod default/own-exporter-{NODE}; "
        f"node {NODE} stays cordoned: stop pod default/own-exporter-{NODE}, or set "
        "gpu-auto-repair=reboot"
    )
    assert PAUSE_LABEL not in node_labels(api) and gpu_clients.watcher_polls()


# -- a quarantined node keeps its DCGM exporter (issue 32): its GPUs' metrics are what the
# operator most wants to see; it steps aside only while a GPU is reset or DCGM's diagnostic
# runs (one DCGM host engine per node: fakes.containerd_ctr) ------------------------------


def test_the_repair_gate_runs_dcgm_diag_with_the_exporter_paused_then_gives_it_back(
    ctx, machine, api, driver, ctr, wall, clock, gpu_clients
):
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    gpu_clients.sync()
    quarantined_for(machine, api, "reset-gpu", "Xid48")  # the leader's NoExecute taint set
    gpu_clients.sync()
    # the exporter tolerates the quarantine's taint; the device plugin leaves (see
    # device_plugin.py: a fresh one after readmission reports the repaired GPU healthy)
    assert gpu_clients.pods() == [f"dcgm-exporter-{NODE}"]

    out = ctx.run(ctx.on.update_status(), state)

    assert ctr.diag_beside == [[]]  # the diagnostic's engine was the node's only one
    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reset", "ok"), repair
    assert out.unit_status.name == "active"
    assert PAUSE_LABEL not in node_labels(api) and gpu_clients.watcher_polls()
    gpu_clients.sync()
    assert gpu_clients.pods() == [f"dcgm-exporter-{NODE}"]  # the taint is the leader's to lift


def test_readmit_gpu_runs_dcgm_diag_with_the_exporter_paused_then_gives_it_back(
    ctx, machine, api, driver, ctr, wall, clock, gpu_clients
):
    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    quarantined_for(machine, api, "reboot", "Xid79")
    gpu_clients.sync()

    ctx.run(ctx.on.action("readmit-gpu", params={"confirm": "yes"}), state)

    assert ctr.diag_beside == [[]]
    assert ctx.action_results["readmitted"] == f"GPU 1 ({QUARANTINED_GPU})"
    assert PAUSE_LABEL not in node_labels(api) and gpu_clients.watcher_polls()
    gpu_clients.sync()
    assert gpu_clients.pods() == [f"dcgm-exporter-{NODE}"]  # the taint is the leader's to lift


def test_the_pause_file_and_the_logs_say_a_reset_then_the_gates_diagnostic(
    ctx, machine, api, driver, ctr, wall, clock, gpu_clients
):
    """One pause mechanism, two purposes: each is named for what it is (issue 32 leftover).

    The pause file, the watcher reads and logs it (tests/functional/test_gpu_watcher.py),
    said "GPU reset" during the gate's dcgmi diag too.
    """
    import gpu_watcher

    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    said = []

    def pause_file():
        said.append(machine.read(gpu_watcher.PAUSE_FILE))
        return set()

    driver.clients.append(pause_file)  # asked at the reset
    ctr.hostengines.append(lambda: pause_file() and [])  # asked at dcgmi diag

    ctx.run(ctx.on.action("repair-gpu", params={"timeout": 1200}), state)

    # the gate's pause outlasts the watcher's default (PAUSE_MAX_S: 600 s): the clients'
    # wait (120 s), dcgmi diag's timeout and a minute, so the watcher stays off as long
    assert said == [
        f"{NODE}: paused for a GPU reset\n",
        f"{NODE}: paused for the repair gate's DCGM diagnostic (dcgmi diag)\nfor at most 1380 s\n",
    ]
    default = gpu_watcher.PAUSE_MAX_S
    assert [gpu_watcher.pause_seconds(text, default) for text in said] == [default, 1380]
    assert [line for line in ctx.action_logs if line.startswith("pausing")] == [
        f"pausing the GPU clients of node {NODE} for a GPU reset",
        f"pausing the GPU clients of node {NODE} for the repair gate's DCGM diagnostic "
        "(dcgmi diag)",
    ]
    assert [gpu_watcher.paused_for(text) for text in said] == [
        "a GPU reset",
        "the repair gate's DCGM diagnostic (dcgmi diag)",
    ]
    assert not machine.path(gpu_watcher.PAUSE_FILE).exists()  # both given back


def test_a_pause_is_honoured_as_long_as_it_says_within_the_watchers_bounds():
    """A pause file a killed hook left silences the watcher PAUSE_LONGEST_S at most."""
    import gpu_watcher

    default, longest = gpu_watcher.PAUSE_MAX_S, gpu_watcher.PAUSE_LONGEST_S
    gate = gpu_watcher.PAUSE_GATE
    assert gpu_watcher.pause_seconds(gpu_watcher.pause_text(NODE, gate), default) == default
    short = gpu_watcher.pause_text(NODE, gate, default / 2)
    assert gpu_watcher.pause_seconds(short, default) == default
    assert gpu_watcher.pause_seconds(gpu_watcher.pause_text(NODE, gate, 99999), default) == (
        longest
    )
    assert gpu_watcher.pause_seconds("for at most 1x s\n", default) == default


def test_the_gates_pause_refused_by_the_api_says_it_was_for_the_diagnostic(
    ctx, machine, api, driver, ctr, wall, clock, gpu_clients
):
    state = joined_gpu_node(ctx, api, driver, NO_AUTO_REPAIR)
    quarantined_for(machine, api, "reboot", "Xid79")
    api.inject(403, method="PATCH", path_prefix=f"/api/v1/nodes/{NODE}")

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("readmit-gpu", params={"confirm": "yes"}), state)

    assert failed.value.message.startswith(
        f"cannot pause the GPU clients of node {NODE} for the repair gate's DCGM diagnostic "
        "(dcgmi diag): "
    )
    assert failed.value.message.endswith("; it stays quarantined")


# -- a quarantine in the middle of a MIG change (issue 32 leftover): the MIG manager stops
# mid-apply (its container killed) and applies the layout again when it starts again; it
# tolerates the quarantine's taint (the control plane's mig_manager.py), so the taint does
# not take it off the node (mig.py's docstring: mig-parted v0.15.0; fakes.mig_manager) ----


def test_a_mig_manager_stopped_mid_apply_applies_the_layout_again_after_readmission(
    ctx, machine, api, h100, clock, wall, reboots, monkeypatch
):
    from fakes.csi_node import sync_daemonset
    from fakes.mig_manager import MigManager

    now = [time.time()]
    monkeypatch.setattr(time, "time", lambda: now[0])  # the MIG step's clock (charm._mig)
    ctr = FakeCtr(machine, h100)  # the gate's containers
    ctr.busbw = 400.0  # above the H100 SXM floor
    out = run_mig(ctx, api, **NO_AUTO_REPAIR)
    mine = dataclasses.replace(out, relations={*out.relations, peers(turns=[UNIT])})
    out = ctx.run(ctx.on.config_changed(), with_config(mine, **{"mig-profile": "all-1g.10gb"}))
    manager = MigManager(api, NODE, h100, {"all-1g.10gb": ALL_1G})
    sync_daemonset(api, manager.daemonset)
    first = manager.token()
    manager.start(first, stopped_mid_apply=True)
    assert node_labels(api)[MIG_STATE] == "pending"
    assert node_labels(api)[PLUGIN_DEPLOY] == "paused-for-mig-change"

    # the fault mid-apply: the watcher's quarantine, the leader's taint, which the MIG
    # manager's pod tolerates and stays; nothing its stopped container began is finished
    quarantined_for(machine, api, "reboot", "Xid79")
    sync_daemonset(api, manager.daemonset)
    assert manager.running()

    now[0] += 3 * 3600  # hours in quarantine: no "mig-manager has not answered"
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "blocked"
    assert "quarantined" in out.unit_status.message
    assert "has not answered" not in out.unit_status.message

    # half the layout on the GPUs: those without a MIG device can be proven by nothing
    # (no CUDA program runs there, DCGM's diagnostic refuses MIG), so no readmission yet
    with pytest.raises(testing.ActionFailed) as refused:
        ctx.run(ctx.on.action("readmit-gpu", params={"confirm": "yes"}), out)
    assert refused.value.message.startswith("nothing could prove GPU 4, 5, 6, 7: MIG mode")
    assert watcher_state(machine)["quarantined"]
    assert gpu_gate.DCGM_IMAGE not in {r["image"] for r in ctr.runs}

    # its container started again (main.go `start`): the whole layout applied again
    sync_daemonset(api, manager.daemonset)
    assert manager.running()
    manager.start(first)
    assert node_labels(api)[MIG_STATE] == "success"
    assert node_labels(api)[PLUGIN_DEPLOY] == "true"  # maybeSetTrue of the paused value
    out = ctx.run(ctx.on.action("readmit-gpu", params={"confirm": "yes"}), out)
    assert ctx.action_results["node"].startswith(f"{NODE}: GpuHealthy=True"), ctx.action_results
    out = leader_applies_quarantine_taint(api, out)
    now[0] += 60
    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "active", out.unit_status
    assert not node(api)["spec"].get("unschedulable")
    assert "reboot-request" not in reboots_relation(out).local_unit_data
    assert reboots == []


def test_an_automatic_repair_mid_mig_change_gates_once_mig_manager_applied_the_layout(
    ctx, machine, api, h100, clock, wall, reboots
):
    from fakes.csi_node import sync_daemonset
    from fakes.mig_manager import MigManager

    ctr = FakeCtr(machine, h100)
    ctr.busbw = 400.0  # above the H100 SXM floor
    out = run_mig(ctx, api, **{"gpu-auto-repair": "reset"})
    mine = dataclasses.replace(out, relations={*out.relations, peers(turns=[UNIT])})
    out = ctx.run(ctx.on.config_changed(), with_config(mine, **{"mig-profile": "all-1g.10gb"}))
    manager = MigManager(api, NODE, h100, {"all-1g.10gb": ALL_1G})
    sync_daemonset(api, manager.daemonset)
    manager.start(manager.token(), stopped_mid_apply=True)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    sync_daemonset(api, manager.daemonset)

    out = ctx.run(ctx.on.update_status(), out)

    # reset, then the gate waits: half of the layout is on the GPUs, no answer yet (the
    # reset's pause took mig-manager's pod away; nothing is recorded meanwhile)
    assert h100.resets == [1]
    assert "repairs" not in watcher_state(machine) and ctr.runs == []
    assert watcher_state(machine)["quarantined"]
    assert node(api)["spec"]["unschedulable"] is True
    assert out.unit_status == testing.WaitingStatus(
        "applying MIG layout all-1g.10gb: NVIDIA mig-manager reports not started"
    )
    assert "reboot-request" in reboots_relation(out).local_unit_data

    # its pod back after the pause: the whole layout applied again, then the gate
    sync_daemonset(api, manager.daemonset)
    manager.start(manager.token())
    out = ctx.run(ctx.on.update_status(), out)

    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reset", "ok"), repair
    assert watcher_state(machine)["quarantined"] == {}
    assert h100.mig_devices == ALL_1G
    assert not node(api)["spec"].get("unschedulable"), out.unit_status
    assert "reboot-request" not in reboots_relation(out).local_unit_data


# -- the gate after a repair on a node with a MIG layout waits for mig-manager (issue 32
# leftover): MIG devices do not survive the repair's reboot and mig-manager makes them
# again after the boot (pending, then success or failed; mig.py GATE_WAIT_S) -------------


def mig_node_repaired_by_reboot(ctx, machine, api, h100, reboots):
    """A node with MIG layout all-1g.10gb applied, quarantined (Xid79) and rebooted."""
    ctr = FakeCtr(machine, h100)
    ctr.busbw = 400.0  # above the H100 SXM floor
    out = run_mig(ctx, api, **{"gpu-auto-repair": "reboot"})
    mine = dataclasses.replace(out, relations={*out.relations, peers(turns=[UNIT])})
    out = ctx.run(ctx.on.config_changed(), with_config(mine, **{"mig-profile": "all-1g.10gb"}))
    mig_manager_applies(api, h100, ALL_1G)
    out = ctx.run(ctx.on.update_status(), out)
    assert not node(api)["spec"].get("unschedulable")  # the layout is in place
    quarantined_for(machine, api, "reboot", "Xid79")
    out = ctx.run(ctx.on.update_status(), out)
    assert reboots == [False], out.unit_status
    # mig-manager's answer from before the boot is no answer for the new boot
    assert MIG_STATE not in node_labels(api) and node_labels(api)[MIG_CONFIG] == "all-1g.10gb"
    h100.reboot()
    assert h100.mig_devices == {} and h100.mig_enabled  # the devices are gone, the mode kept
    return ctr, ctx.run(ctx.on.start(), out)


def mig_failed_message(layout, name, unit):
    import mig

    return mig.failed_message(layout, name, unit)


def test_the_gate_after_a_reboot_repair_waits_for_mig_manager_then_runs(
    ctx, machine, api, h100, clock, wall, reboots
):
    ctr, out = mig_node_repaired_by_reboot(ctx, machine, api, h100, reboots)

    # before mig-manager's container starts again: no state, no MIG device; the MIG step
    # says the wait first (mig.waiting_message), the repair's line is in the log
    assert out.unit_status == testing.WaitingStatus(
        "applying MIG layout all-1g.10gb: NVIDIA mig-manager reports not started"
    )
    assert ctr.runs == [] and "repairs" not in watcher_state(machine)  # no gate, no record
    assert node(api)["spec"]["unschedulable"] is True
    assert watcher_state(machine)["quarantined"]

    set_labels(api, **{MIG_STATE: "pending"})  # reconfigure.go Run: the devices are missing
    out = ctx.run(ctx.on.update_status(), out)
    # the MIG step says the same wait first (mig.waiting_message)
    assert out.unit_status == testing.WaitingStatus(
        "applying MIG layout all-1g.10gb: NVIDIA mig-manager reports pending"
    )
    assert ctr.runs == [] and "repairs" not in watcher_state(machine)

    mig_manager_applies(api, h100, ALL_1G)
    out = ctx.run(ctx.on.update_status(), out)

    # under MIG: vectorAdd on each MIG device by its UUID, and neither DCGM's diagnostic
    # (NVVS refuses MIG) nor the all-reduce (one CUDA device per process): their images
    # are not even pulled
    cuda = [
        r["env"]["NVIDIA_VISIBLE_DEVICES"]
        for r in ctr.runs
        if r["image"] == validation.VALIDATION_IMAGE
    ]
    assert len(set(cuda)) == len(cuda) == 8 * 7 and all(v.startswith("MIG-") for v in cuda)
    assert {r["image"] for r in ctr.runs} | set(ctr.pulls) == {validation.VALIDATION_IMAGE}
    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reboot", "ok")
    assert repair["gate"]["dcgm"] == f"skipped: {gpu_gate.MIG_DCGM}"
    assert repair["gate"]["nccl"] == f"skipped: {gpu_gate.MIG_NCCL}"
    assert watcher_state(machine)["quarantined"] == {}
    assert not node(api)["spec"].get("unschedulable")
    assert "repaired by reboot" in out.unit_status.message


def all_enabled_node_rebooted(ctx, machine, api, h100):
    """An `all-enabled` node quarantined for Xid79, rebooted by its automatic repair."""
    out = run_mig(ctx, api, **{"gpu-auto-repair": "reboot"})
    mine = dataclasses.replace(out, relations={*out.relations, peers(turns=[UNIT])})
    out = ctx.run(ctx.on.config_changed(), with_config(mine, **{"mig-profile": "all-enabled"}))
    h100.mig_enabled = True  # `all-enabled`: MIG mode, no GPU instance
    mig_manager_applies(api, h100, {})
    out = ctx.run(ctx.on.update_status(), out)
    quarantined_for(machine, api, "reboot", "Xid79")
    out = ctx.run(ctx.on.update_status(), out)
    h100.reboot()
    out = ctx.run(ctx.on.start(), out)
    mig_manager_applies(api, h100, {})
    return out


def test_a_mig_node_without_mig_devices_is_unproven_as_nothing_can_prove_its_gpus(
    ctx, machine, api, h100, clock, wall, reboots
):
    ctr = FakeCtr(machine, h100)
    out = all_enabled_node_rebooted(ctx, machine, api, h100)

    out = ctx.run(ctx.on.update_status(), out)

    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reboot", "unproven"), repair
    assert repair["gate"]["cuda"] == "failed: " + gpu_gate.MIG_BARE.format(
        gpus="0, 1, 2, 3, 4, 5, 6, 7"
    )
    assert set(repair["gate"]) == {"passed", "cuda"}  # nothing else ran
    assert ctr.runs == []  # no CUDA program, no DCGM diagnostic, no all-reduce
    assert watcher_state(machine)["quarantined"]
    assert node(api)["spec"]["unschedulable"] is True


def test_two_repairs_of_an_all_enabled_node_never_say_replace_this_machine(
    ctx, machine, api, h100, clock, wall, reboots
):
    """No MIG device to prove the GPUs on is no broken machine (issue 32, allen43).

    Before: each gate found nothing to run on and recorded a failed repair; after two
    repairs the unit said to replace a machine whose only fault was its MIG layout.
    """
    FakeCtr(machine, h100)
    out = all_enabled_node_rebooted(ctx, machine, api, h100)
    out = ctx.run(ctx.on.update_status(), out)  # the first gate: unproven
    said = [out.unit_status]

    # the next hooks try no repair again: the layout still has nothing to prove
    out = ctx.run(ctx.on.update_status(), out)
    said.append(out.unit_status)
    assert len(reboots) == 1
    # the watcher's hook (another fault on the GPU) announces no repair either
    said.append(ctx.run(gpu_quarantined(), out).unit_status)

    # the operator asks for a second repair anyway: a reboot, gated on the next boot
    ctx.run(ctx.on.action("repair-gpu"), out)
    out = ctx.run(ctx.on.update_status(), out)
    assert len(reboots) == 2
    h100.reboot("b0b1d000-0000-4000-8000-000000000003")
    out = ctx.run(ctx.on.start(), out)
    mig_manager_applies(api, h100, {})
    out = ctx.run(ctx.on.update_status(), out)
    said.append(out.unit_status)
    out = ctx.run(ctx.on.update_status(), out)
    said.append(out.unit_status)

    results = [r["result"] for r in watcher_state(machine)["repairs"]]
    assert results == ["unproven", "unproven"]
    assert not any("replace this machine" in s.message for s in said), said
    for status in said:
        assert status.name == "blocked"
        assert status.message.startswith(
            "node ip-10-0-1-17 stays cordoned: nothing could prove GPU 0, 1, 2, 3, 4, 5, 6, "
            "7: MIG mode"
        ), status.message
        assert status.message.endswith(
            "(not a failed repair): `juju config kubernetes-worker mig-profile=all-<profile>` "
            "(a profile with instances) or `juju config kubernetes-worker "
            "mig-profile=all-disabled`, then run repair-gpu"
        ), status.message
    assert watcher_state(machine)["quarantined"]
    assert node(api)["spec"]["unschedulable"] is True


def test_a_mig_gate_whose_nvidia_smi_lists_no_device_fails_never_passes(
    ctx, machine, api, h100, clock, wall, reboots
):
    ctr, out = mig_node_repaired_by_reboot(ctx, machine, api, h100, reboots)
    mig_manager_applies(api, h100, ALL_1G)

    def broken(argv, _input):
        if argv[1:] == ["-L"]:  # NVML's answer when it cannot read the devices
            raise CommandError(argv, 255, "Failed to initialize NVML: Unknown Error")
        return h100.nvidia_smi(argv, _input)

    machine.on("nvidia-smi", broken)
    result = gpu_gate.run(
        machine.host(),
        cuda_image=validation.VALIDATION_IMAGE,
        dcgm_image=gpu_gate.DCGM_IMAGE,
        nccl_image=gpu_gate.NCCL_IMAGE,
        count=8,
        model="NVIDIA H100 80GB HBM3",
        timeout=60,
    )

    assert not result.passed
    assert not result.unproven  # the driver could not answer: a failed proof, counted
    assert result.summary().startswith("cuda FAILED: nothing could prove GPU 0, 1, 2, 3, 4")
    assert ctr.runs == []


def test_the_gate_fails_when_mig_manager_reports_failed_after_the_reboot(
    ctx, machine, api, h100, clock, wall, reboots
):
    ctr, out = mig_node_repaired_by_reboot(ctx, machine, api, h100, reboots)
    set_labels(api, **{MIG_STATE: "failed"})

    out = ctx.run(ctx.on.update_status(), out)

    assert ctr.runs == []  # no GPU check ran: the layout is not there to check
    (failed,) = watcher_state(machine)["repairs"]
    assert (failed["method"], failed["result"]) == ("reboot", "failed")
    assert failed["gate"] == {
        "passed": False,
        "mig": "failed: NVIDIA mig-manager reports failed for MIG layout all-1g.10gb (not a "
        "GPU check): see the nvidia-mig-manager pod's log in gpu-k8s-gpu",
    }
    # the MIG step's Blocked status names the command that shows mig-manager's log
    assert out.unit_status == testing.BlockedStatus(mig_failed_message("all-1g.10gb", NODE, UNIT))
    assert node(api)["spec"]["unschedulable"] is True


def test_the_gate_fails_with_the_time_waited_when_mig_manager_never_applies_the_layout(
    ctx, machine, api, h100, clock, wall, reboots
):
    ctr, out = mig_node_repaired_by_reboot(ctx, machine, api, h100, reboots)
    set_labels(api, **{MIG_STATE: "pending"})
    wall[0] += 10 * 60
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "waiting"
    assert "repairs" not in watcher_state(machine)  # a wait is no failed repair

    wall[0] += 21 * 60
    out = ctx.run(ctx.on.update_status(), out)

    assert ctr.runs == []
    (failed,) = watcher_state(machine)["repairs"]
    assert failed["result"] == "failed"  # counts toward the two in 24 hours
    assert failed["gate"]["mig"] == (
        "failed: NVIDIA mig-manager did not apply MIG layout all-1g.10gb within 31 minutes "
        "(reports pending): see the nvidia-mig-manager pod's log in gpu-k8s-gpu"
    )
    assert node(api)["spec"]["unschedulable"] is True


def test_a_node_without_a_mig_layout_gates_at_once_after_a_reboot_repair(
    ctx, machine, api, h100, clock, wall, reboots
):
    ctr = FakeCtr(machine, h100)
    ctr.busbw = 400.0
    out = run_mig(ctx, api, **{"gpu-auto-repair": "reboot"})
    quarantined_for(machine, api, "reboot", "Xid79")
    out = ctx.run(ctx.on.update_status(), out)
    h100.reboot()

    out = ctx.run(ctx.on.start(), out)

    assert "repaired by reboot" in out.unit_status.message, out.unit_status
    assert MIG_CONFIG not in node_labels(api)


@pytest.mark.parametrize(
    ("labels", "shown", "waited", "act", "said"),
    [
        ({}, False, 0, "nothing", ""),
        ({MIG_CONFIG: "all-1g.10gb", MIG_STATE: "success"}, True, 0, "nothing", ""),
        ({MIG_CONFIG: "all-1g.10gb", MIG_STATE: "success"}, False, 0, "wait", "success, not"),
        ({MIG_CONFIG: "all-1g.10gb"}, False, 60, "wait", "not started, 1 of 30"),
        ({MIG_CONFIG: "all-1g.10gb", MIG_STATE: "rebooting"}, False, 0, "wait", "rebooting"),
        ({MIG_CONFIG: "all-1g.10gb", MIG_STATE: "failed"}, True, 0, "failed", "reports failed"),
        ({MIG_CONFIG: "all-1g.10gb", MIG_STATE: "pending"}, False, 1801, "failed", "within 30"),
    ],
)
def test_mig_gate_wait(labels, shown, waited, act, said):
    import mig

    decision = mig.gate_wait(labels, shown=shown, waited=waited)

    assert decision.act.value == act and said in decision.message


def test_mig_manager_on_a_quarantined_node_applies_the_layout_after_a_reboot_repair(
    ctx, machine, api, h100, clock, wall, reboots
):
    """The MIG manager's DaemonSet as the control plane makes it, its pod as kubelet runs it.

    It stays on the quarantined node (the control plane's mig_manager: it tolerates the
    quarantine's taint), and its container starts again after the repair's reboot:
    main.go `start` -> reconfigure.go `Run` finds the devices gone and applies them again.
    """
    from fakes.csi_node import sync_daemonset
    from fakes.mig_manager import MigManager

    ctr = FakeCtr(machine, h100)
    ctr.busbw = 400.0
    out = run_mig(ctx, api, **{"gpu-auto-repair": "reboot"})
    mine = dataclasses.replace(out, relations={*out.relations, peers(turns=[UNIT])})
    out = ctx.run(ctx.on.config_changed(), with_config(mine, **{"mig-profile": "all-1g.10gb"}))
    manager = MigManager(api, NODE, h100, {"all-1g.10gb": ALL_1G})
    sync_daemonset(api, manager.daemonset)
    manager.start(manager.token())
    out = ctx.run(ctx.on.update_status(), out)
    assert not node(api)["spec"].get("unschedulable")
    quarantined_for(machine, api, "reboot", "Xid79")
    sync_daemonset(api, manager.daemonset)
    assert manager.running()  # the quarantine's taint leaves it on the node
    out = ctx.run(ctx.on.update_status(), out)
    assert reboots == [False], out.unit_status

    h100.reboot()
    out = ctx.run(ctx.on.start(), out)  # before the MIG manager's container is back
    assert out.unit_status.name == "waiting", out.unit_status
    assert ctr.runs == []

    manager.start(manager.token())  # its container after the boot: pending, apply, success
    assert h100.mig_devices == ALL_1G
    out = ctx.run(ctx.on.update_status(), out)

    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reboot", "ok"), out.unit_status
    assert not node(api)["spec"].get("unschedulable")


def test_a_failed_mig_answer_from_before_the_repair_reboot_does_not_fail_the_gate(
    ctx, machine, api, h100, clock, wall, reboots
):
    ctr = FakeCtr(machine, h100)
    ctr.busbw = 400.0
    out = run_mig(ctx, api, **{"gpu-auto-repair": "reboot"})
    mine = dataclasses.replace(out, relations={*out.relations, peers(turns=[UNIT])})
    out = ctx.run(ctx.on.config_changed(), with_config(mine, **{"mig-profile": "all-1g.10gb"}))
    mig_manager_applies(api, h100, ALL_1G, state="failed")  # e.g. a re-apply that failed
    quarantined_for(machine, api, "reboot", "Xid79")
    out = ctx.run(ctx.on.update_status(), out)
    assert reboots == [False], out.unit_status
    h100.reboot()

    out = ctx.run(ctx.on.start(), out)

    assert "repairs" not in watcher_state(machine)  # waits for the new boot's answer
    assert out.unit_status.name == "waiting", out.unit_status
    mig_manager_applies(api, h100, ALL_1G)
    out = ctx.run(ctx.on.update_status(), out)
    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reboot", "ok"), out.unit_status


def test_repair_gpu_on_a_mig_node_waits_for_mig_manager_then_gates(
    ctx, machine, api, h100, clock, wall, reboots
):
    from fakes.csi_node import sync_daemonset
    from fakes.mig_manager import MigManager

    ctr = FakeCtr(machine, h100)
    ctr.busbw = 400.0
    out = run_mig(ctx, api, **NO_AUTO_REPAIR)
    mine = dataclasses.replace(out, relations={*out.relations, peers(turns=[UNIT])})
    out = ctx.run(ctx.on.config_changed(), with_config(mine, **{"mig-profile": "all-1g.10gb"}))
    manager = MigManager(api, NODE, h100, {"all-1g.10gb": ALL_1G})
    sync_daemonset(api, manager.daemonset)
    manager.start(manager.token())
    out = ctx.run(ctx.on.update_status(), out)
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    h100.mig_devices = {}  # as if the reset took the MIG devices (not recorded either way)
    started = []

    def mig_manager_comes_back():  # its DaemonSet's pod after the reset's pause
        sync_daemonset(api, manager.daemonset)
        if h100.resets and manager.running() and not started:
            started.append(clock.now)
            manager.start(manager.token())

    clock.meanwhile.append(mig_manager_comes_back)
    out = ctx.run(ctx.on.action("repair-gpu", params={"timeout": 300}), out)

    assert ctx.action_results["repair"] == "reset"
    assert any("the repair gate waits for NVIDIA mig-manager" in line for line in ctx.action_logs)
    assert h100.mig_devices == ALL_1G
    (repair,) = watcher_state(machine)["repairs"]
    assert (repair["method"], repair["result"]) == ("reset", "ok")
    cluster = next(r for r in out.relations if r.endpoint == "cluster")
    assert cluster.local_unit_data["gpu-quarantine"] == "[]"  # the taint's removal asked


def test_resets_refused_by_an_unlisted_client_never_push_a_failed_repair_out_of_the_history(
    ctx, machine, api, driver, ctr, wall, clock
):
    """Issue 32 rereview43b finding 4: failed, refused x50, failed still escalates.

    Each hook's refusal by a client nvidia-smi lists as no process adds a record; the
    history keeps the last 50 (gpu_health.REPAIRS_KEPT), so these pushed the first
    failure out and the second never escalated. Failures of the last 24 hours are kept.
    """
    state = joined_gpu_node(ctx, api, driver, {"gpu-auto-repair": "reset"})
    quarantined_for(machine, api, "reset-gpu", "Xid48")
    ctr.diag_failures = {1: ("memory", "Pending page retirements found on GPU 1")}
    out = ctx.run(ctx.on.update_status(), state)  # reset, the gate failed: failed once
    assert out.unit_status.name == "waiting"
    holds = [{1}]
    driver.clients.append(lambda: holds[0])
    for _ in range(50):  # update-status every 5 minutes, ~4 hours of refusals
        wall[0] += 300
        out = ctx.run(ctx.on.update_status(), out)
        assert "reset refused" in out.unit_status.message
    holds[0] = set()
    wall[0] += 300
    out = ctx.run(ctx.on.update_status(), out)  # reset, the gate failed: failed twice
    wall[0] += 300
    out = ctx.run(ctx.on.update_status(), out)

    assert driver.resets == [1, 1]  # no third try
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("GPU repairs failed 2 times within 24 hours (")
    results = [r["result"] for r in watcher_state(machine)["repairs"]]
    assert results == ["failed"] + ["refused"] * 49 + ["failed"]  # the oldest refusal trimmed
