"""The NVIDIA driver kept in step with the kernel: series, modules per ABI, fabric manager.

The machine is `FakeMachine` with `FakeDriver`: kernels are ABIs with their packages, each
ABI's nvidia modules depend on one driver version, the archive keeps one version per
pocket and unattended-upgrades moves what is not held (see `fakes.nvidia_driver`).
"""

from __future__ import annotations

import datetime
from pathlib import Path

import driver
import gpu
import nvidia
import pytest

from charms.gpu_k8s.v0 import apt
from charms.gpu_k8s.v0.system import CommandError
from fakes import nvidia_driver
from fakes.machine import FakeMachine
from fakes.nvidia_driver import FABRIC_SERVICE, KERNEL, FakeDriver
from fakes.sysfs import build, build_machine, write_pci_ids
from fakes.sysfs import machine as pci_machine

NEW = "6.8.0-1016-aws"
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "gpu"
OPEN_580 = driver.Series("580", "server-open", "aws")
AUTO, NONE = driver.DriverChoice.parse("auto"), driver.DriverChoice.parse("none")


@pytest.fixture
def machine(tmp_path):
    return FakeMachine(tmp_path / "root")


@pytest.fixture
def fake(machine):
    return FakeDriver(machine)


def inventory(tmp_path, name, gpu_driver=None):
    root = build(tmp_path / f"sys-{name}", pci_machine(name, gpu_driver), module_loaded=False)
    return gpu.detect(root, write_pci_ids(tmp_path / "pci.ids"))


@pytest.fixture
def a10g(tmp_path):
    return inventory(tmp_path, "g5-a10g")


@pytest.fixture
def h100x8(tmp_path):
    return inventory(tmp_path, "p5-h100")


def installs(machine) -> list[str]:
    return [line for line in machine.lines("apt-get") if " install " in line]


QUERIES = ("sh -c", "uname -r", "ubuntu-drivers", "apt-cache")


def changes(machine, since: int = 0) -> list[str]:
    """Commands after the `since`-th mutation that changed the machine."""
    return [line for line in machine.mutations()[since:] if not line.startswith(QUERIES)]


# ------------------------------------------------------------------------ the choice


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("auto", driver.DriverChoice("auto")),
        (" NONE ", driver.DriverChoice("none")),
        ("580", driver.DriverChoice("branch", "580")),
        ("580-server", driver.DriverChoice("branch", "580", "server")),
        ("580-server-open", driver.DriverChoice("branch", "580", "server-open")),
    ],
)
def test_driver_choice_forms(value, expected):
    assert driver.DriverChoice.parse(value) == expected


@pytest.mark.parametrize("value", ["", "latest", "58", "580-open", "580.95", "nvidia"])
def test_driver_choice_refuses_anything_else_naming_the_forms(value):
    with pytest.raises(ValueError, match="auto, none, or a branch such as 580, 580-server"):
        driver.DriverChoice.parse(value)


def test_gpgpu_list_in_both_of_ubuntu_drivers_formats_keeps_server_series_in_order():
    listed = (
        "nvidia-driver-580-server-open, (kernel modules provided by "
        "linux-modules-nvidia-580-server-open-generic-hwe-24.04)\n"
        "nvidia-driver-580-server, (kernel modules provided by "
        "linux-modules-nvidia-580-server-aws-lts-24.04)\n"
        "nvidia-driver-580, (kernel modules provided by linux-modules-nvidia-580-aws)\n"
        "nvidia-driver-570-server\n"  # DKMS only: no prebuilt modules
    )
    recommended = "nvidia-driver-535-server linux-modules-nvidia-535-server-aws\n"

    assert driver.parse_gpgpu_list(listed) == [
        driver.Series("580", "server-open", "generic-hwe-24.04"),
        driver.Series("580", "server", "aws-lts-24.04"),
    ]
    assert driver.parse_gpgpu_list(recommended) == [driver.Series("535", "server", "aws")]


def test_installed_packages_include_held_ones_and_not_removed_ones():
    out = (
        "hi  nvidia-utils-580-server 580.95.05-0ubuntu0.24.04.1\n"  # held by the charm
        "ii  linux-modules-nvidia-580-server-aws 6.8.0-1015.15+3\n"
        "rc  nvidia-utils-570-server 570.95.05-0ubuntu0.24.04.1\n"  # removed, config left
    )

    installed = driver.parse_installed(out)

    assert set(installed.packages) == {
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-aws",
    }
    assert installed.series == driver.Series("580", "server", "aws")
    assert installed.driver_version == "580.95.05"


# -------------------------------------------------------------------- a first install


def test_auto_installs_what_ubuntu_drivers_recommends_and_loads_it_without_a_reboot(
    machine, fake, a10g
):
    result = driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert result.series == OPEN_580
    assert result.report.ok and result.report.driver_version == "580.95.05"
    assert result.reboot is None and result.update == () and result.problem is None
    assert {*OPEN_580.userspace, OPEN_580.modules_meta, OPEN_580.modules(KERNEL)} <= set(
        machine.dpkg
    )
    assert machine.held == set(OPEN_580.userspace)  # module packages are never held
    # ubuntu-drivers-common was not on the machine: installed first, then asked
    assert installs(machine)[0].endswith(" ubuntu-drivers-common")
    # auto reads the whole list and each listed branch's Support (review gpu.md N3)
    assert machine.lines("ubuntu-drivers") == ["/usr/bin/ubuntu-drivers list --gpgpu"]
    assert machine.lines("apt-cache") == [
        "/usr/bin/apt-cache show --no-all-versions nvidia-driver-595-server-open "
        "nvidia-driver-580-server-open nvidia-driver-535-server nvidia-driver-595-server "
        "nvidia-driver-580-server nvidia-driver-535-server-open"
    ]


@pytest.mark.parametrize(
    ("value", "open_modules", "series"),
    [
        ("580-server", True, driver.Series("580", "server", "aws")),
        ("580", True, OPEN_580),
        ("595", True, driver.Series("595", "server-open", "aws")),  # a PB, when asked for
        # auto is the newest long-term branch, not ubuntu-drivers' first line (595, a PB)
        ("auto", True, OPEN_580),
        # A V100 has no open modules; ubuntu-drivers then ranks 535-server (fit 3: no
        # Prefer-Variant before 560) above 580-server (fit 2); auto takes 580 (review N3)
        ("auto", False, driver.Series("580", "server", "aws")),
    ],
)
def test_the_series_follows_ubuntu_drivers_ranking(machine, a10g, value, open_modules, series):
    FakeDriver(machine, open_modules=open_modules)

    result = driver.ensure(machine.host(), driver.DriverChoice.parse(value), a10g, today=TODAY)

    assert result.series == series and result.report.ok


@pytest.mark.parametrize(
    ("open_modules", "first"),
    [
        (True, "nvidia-driver-595-server-open linux-modules-nvidia-595-server-open-aws"),
        (False, "nvidia-driver-535-server linux-modules-nvidia-535-server-aws"),
    ],
)
def test_the_fake_recommends_what_ubuntu_drivers_ranks_first_on_noble(
    machine, open_modules, first
):
    """What the review ran detect.py's comparator on (gpu.md N3): PB first, V100 535."""
    FakeDriver(machine, open_modules=open_modules)

    out = machine.host().run("/usr/bin/ubuntu-drivers", "list", "--gpgpu", "--recommended")

    assert out == f"{first}\n"


TODAY = datetime.date(2026, 11, 27)
AFTER_580 = datetime.date(2028, 9, 1)


def test_an_end_of_life_branch_is_refused_saying_when_it_ended(machine, fake, a10g):
    with pytest.raises(driver.DriverPlanError) as e:
        driver.ensure(machine.host(), driver.DriverChoice.parse("535"), a10g, today=TODAY)

    assert str(e.value) == (
        "NVIDIA driver branch 535 reached its end of life (June 2026, NVIDIA's data center "
        "driver support matrix) and gets no more security fixes; set nvidia-driver=auto for "
        "the newest long-term branch, or to a supported branch"
    )
    assert installs(machine) == [] or all("nvidia-utils" not in i for i in installs(machine))


def test_auto_refuses_when_no_long_term_branch_is_supported_any_more(machine, tmp_path):
    """A V100 once 580, the last branch for Volta, has ended: nothing long-term is left."""
    FakeDriver(machine, open_modules=False)
    v100 = inventory(tmp_path, "p3-v100")

    with pytest.raises(driver.DriverPlanError) as e:
        driver.ensure(machine.host(), AUTO, v100, today=AFTER_580)

    assert str(e.value) == (
        "ubuntu-drivers lists no NVIDIA long-term support branch NVIDIA still supports for "
        f"{v100.describe()}: 535-server (LTSB, ended June 2026), 595-server (PB), 580-server "
        "(LTSB, ended August 2028); set nvidia-driver to a listed branch to accept a "
        "shorter-lived one, or install a driver and set nvidia-driver=none"
    )
    assert not [p for p in machine.dpkg if p.startswith("nvidia-utils")]


def test_the_date_given_decides_and_after_580_ends_an_a10g_gets_no_auto_branch(
    machine, fake, a10g
):
    """Whatever the machine's clock says: the caller's date (the charm passes today's)."""
    host = machine.host()

    with pytest.raises(driver.DriverPlanError) as e:
        driver.ensure(host, AUTO, a10g, today=AFTER_580)
    assert "580-server-open (LTSB, ended August 2028)" in str(e.value)
    with pytest.raises(driver.DriverPlanError, match="branch 580 reached its end of life"):
        driver.ensure(host, driver.DriverChoice.parse("580"), a10g, today=AFTER_580)
    assert not [p for p in machine.dpkg if p.startswith("nvidia-utils")]

    assert driver.ensure(host, AUTO, a10g, today=TODAY).series == OPEN_580


@pytest.mark.parametrize(
    ("branch", "today", "ended"),
    [
        ("535", datetime.date(2026, 6, 30), None),
        ("535", datetime.date(2026, 7, 1), "June 2026"),
        ("570", TODAY, "February 2026"),
        ("575", TODAY, "before 2026"),  # "all other previous driver branches ... are EOL"
        ("580", TODAY, None),
        ("595", TODAY, None),  # newer than NVIDIA's table: not known to have ended
    ],
)
def test_end_of_life_follows_nvidias_support_matrix(branch, today, ended):
    assert driver.end_of_life(branch, today) == ended


def test_support_is_read_from_apt_cache_stanzas():
    text = (
        "Package: nvidia-driver-580-server-open\nVersion: 580.126.20-0ubuntu0.24.04.2\n"
        "Prefer-Variant: Open\nSupport: LTSB\n\n"
        "Package: nvidia-driver-595-server\nVersion: 595.58.03-0ubuntu0.24.04.1\n"
        "Support: PB\n\nPackage: nvidia-driver-470-server\n\n"
    )

    assert driver.parse_support(text) == {"580-server-open": "LTSB", "595-server": "PB"}


def test_a_working_driver_from_the_image_is_left_alone_under_auto(machine, fake, a10g):
    fake.preinstall("570")
    before = dict(machine.dpkg)

    result = driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert result.report.ok and result.reboot is None
    assert machine.dpkg == before and installs(machine) == []


def test_none_never_installs_nor_reboots(machine, fake, a10g):
    fake.kernel_update(NEW)

    result = driver.ensure(machine.host(), NONE, a10g, today=TODAY)

    assert result == driver.DriverResult(None, False, result.report)
    assert installs(machine) == []


def test_cpu_machine_runs_no_driver_program(machine, fake, tmp_path):
    cpu = inventory(tmp_path, "m5-cpu")

    result = driver.ensure(machine.host(), AUTO, cpu, today=TODAY)

    assert result.series is None and installs(machine) == []
    assert machine.lines("ubuntu-drivers") == [] and machine.lines("uname") == []


def test_ensure_twice_changes_nothing_the_second_time(machine, fake, a10g):
    driver.ensure(machine.host(), AUTO, a10g, today=TODAY)
    before = len(machine.mutations())

    again = driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert not again.changed
    assert changes(machine, before) == []


def test_unknown_series_says_what_to_set(machine, fake, a10g):
    with pytest.raises(driver.DriverPlanError, match="lists no driver 590 .* set nvidia-driver"):
        driver.ensure(machine.host(), driver.DriverChoice.parse("590"), a10g, today=TODAY)

    assert [line for line in installs(machine) if "nvidia" in line] == []


def test_apt_failure_names_the_package_and_holds_nothing(machine, fake, a10g):
    machine.withdraw(OPEN_580.modules_meta)

    with pytest.raises(apt.AptError) as caught:
        driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert caught.value.package == OPEN_580.modules_meta
    assert machine.held == set()


def test_modules_the_archive_lost_fail_the_install_and_hold_nothing(machine, fake, a10g):
    machine.withdraw(OPEN_580.modules(KERNEL))  # the metapackage still depends on it

    with pytest.raises(apt.AptError) as caught:
        driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert "held broken packages" in caught.value.detail
    assert machine.held == set() and OPEN_580.userspace[1] not in machine.dpkg


def test_first_install_on_an_image_the_archive_moved_past_boots_the_new_kernel(
    machine, fake, a10g
):
    # enable-os-upgrade=false: only the image's kernel is installed; its modules in the
    # archive are built for an older driver than the userspace apt installs now
    fake.stale_kernel(NEW, os_upgrade=False)

    result = driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert f"linux-image-{NEW}" in machine.dpkg  # pulled by the modules metapackage
    assert OPEN_580.modules(NEW) in machine.dpkg
    assert result.reboot == (
        f"kernel {NEW} has the NVIDIA 580-server-open modules, the running {KERNEL} not"
    )
    fake.reboot()
    assert driver.ensure(machine.host(), AUTO, a10g, today=TODAY).report.ok


# ------------------------------------------------------------------------ kernel updates


def test_a_kernel_update_is_not_a_driver_reboot_when_its_modules_are_in_place(machine, fake, a10g):
    driver.ensure(machine.host(), AUTO, a10g, today=TODAY)
    fake.kernel_update(NEW)  # unattended-upgrades: kernel and modules metapackage move

    result = driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert result.report.ok
    assert result.reboot is None and result.update == ()
    assert result.note == f"; kernel {NEW} waits for a reboot"
    assert OPEN_580.modules(NEW) in machine.dpkg
    fake.reboot()  # whoever reboots it, the GPUs come back on the new kernel
    assert fake.running == NEW and driver.ensure(machine.host(), AUTO, a10g, today=TODAY).report.ok


def test_a_held_modules_metapackage_from_an_earlier_revision_is_released(machine, fake, a10g):
    driver.ensure(machine.host(), AUTO, a10g, today=TODAY)
    machine.held.add(OPEN_580.modules_meta)  # what the charm used to do
    fake.kernel_update(NEW)  # so unattended-upgrades left the modules behind
    assert OPEN_580.modules(NEW) not in machine.dpkg

    result = driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert OPEN_580.modules(NEW) in machine.dpkg
    assert OPEN_580.modules_meta not in machine.held
    assert result.reboot is None and result.report.ok


def test_a_kernel_that_needs_a_newer_driver_moves_them_together_under_a_drain(machine, fake, a10g):
    host = machine.host()
    driver.ensure(host, AUTO, a10g, today=TODAY)
    fake.driver_sru("580", "580.105.08")  # the driver is held: nothing moves
    fake.kernel_update(NEW)  # its modules are built against 580.105.08 only
    assert OPEN_580.modules(NEW) not in machine.dpkg

    result = driver.ensure(host, AUTO, a10g, today=TODAY)

    assert result.report.ok  # nothing changed under the running pods
    assert machine.dpkg[OPEN_580.userspace[1]].startswith("580.95.05-")
    assert result.update == (*OPEN_580.userspace, OPEN_580.modules(NEW))
    assert result.reboot == (
        f"kernel {NEW} needs a newer NVIDIA 580-server-open driver than the running 580.95.05"
    )

    driver.apply_update(host, result.update)  # what the charm does once drained
    fake.reboot()

    after = driver.ensure(host, AUTO, a10g, today=TODAY)
    assert after.report.ok and after.report.driver_version == "580.105.08"
    assert after.reboot is None and after.update == ()
    assert set(OPEN_580.userspace) <= machine.held


def test_a_kernel_without_modules_in_the_archive_blocks_instead_of_rebooting(machine, fake, a10g):
    driver.ensure(machine.host(), AUTO, a10g, today=TODAY)
    fake.kernel_update(NEW)
    machine.dpkg.pop(OPEN_580.modules(NEW))
    machine.withdraw(OPEN_580.modules(NEW))

    result = driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert result.reboot is None and result.report.ok
    assert result.problem.startswith(
        f"kernel {NEW} is installed but Ubuntu has no 580-server-open modules for it yet"
    )
    assert "a reboot would start it without GPUs" in result.problem


def test_a_stale_image_kernel_reboots_into_the_kernel_with_modules(machine, fake, a10g):
    fake.stale_kernel(NEW)

    result = driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert not result.report.ok
    assert result.reboot == (
        f"kernel {NEW} has the NVIDIA 580-server-open modules, the running {KERNEL} not"
    )
    fake.reboot()
    assert driver.ensure(machine.host(), AUTO, a10g, today=TODAY).report.ok


def test_reboot_required_by_a_package_does_not_reboot_a_working_gpu_node(machine, fake, a10g):
    driver.ensure(machine.host(), AUTO, a10g, today=TODAY)
    machine.write(gpu.REBOOT_REQUIRED_FILE, "*** System restart required ***\n")
    machine.write(gpu.REBOOT_REQUIRED_FILE + ".pkgs", "linux-image-6.8.0-1016-aws\nlibc6\n")

    assert driver.ensure(machine.host(), AUTO, a10g, today=TODAY).reboot is None


# ----------------------------------------------------------------------- NVSwitch machines


def test_nvswitch_machine_gets_fabric_manager_at_the_driver_version(machine, h100x8):
    FakeDriver(machine, gpus=8, nvswitch=True)

    result = driver.ensure(machine.host(), AUTO, h100x8, today=TODAY)

    assert h100x8.nvswitches == 4
    assert result.report.ok and result.fabric is None
    for package in OPEN_580.fabric:
        assert machine.dpkg[package].startswith("580.95.05-")
        assert package in machine.held
    assert machine.services[FABRIC_SERVICE].enabled and machine.services[FABRIC_SERVICE].active


def test_fabric_manager_that_does_not_start_is_reported_and_retried(machine, h100x8):
    fake = FakeDriver(machine, gpus=8, nvswitch=True)
    fake.fabric_starts = False

    result = driver.ensure(machine.host(), AUTO, h100x8, today=TODAY)

    assert result.report.ok and result.fabric.failed  # a failure, not a wait (gpu.md N5)
    assert result.fabric.reason.startswith(f"{FABRIC_SERVICE} did not start (")
    assert f"journalctl -u {FABRIC_SERVICE}" in result.fabric.reason

    fake.fabric_starts = True
    assert driver.ensure(machine.host(), AUTO, h100x8, today=TODAY).fabric is None


H100 = ("NVIDIA H100 80GB HBM3", 81559, "9.0")


def test_fabric_manager_running_is_not_ready_until_registration_completes(machine, h100x8):
    """Ready is State Completed + Status Success on every GPU, not `systemctl is-active`."""
    fake = FakeDriver(machine, gpus=8, nvswitch=True, model=H100)
    host = machine.host()
    assert driver.ensure(host, AUTO, h100x8, today=TODAY).fabric is None  # Completed, Success
    fake.fabric_status = "Unknown Error"  # registration completed with an error

    result = driver.ensure(host, AUTO, h100x8, today=TODAY)

    assert machine.services[FABRIC_SERVICE].active  # the service runs all the same
    assert result.fabric == nvidia.Fabric(
        "fabric registration failed (`nvidia-smi -q`, Fabric: GPUs 0, 1, 2, 3, 4, 5, 6, 7: "
        "State Completed, Status Unknown Error)",
        failed=True,
    )


def test_fabric_still_registering_is_a_wait_not_a_failure():
    rows = {0: ("Completed", "Success"), 1: ("In Progress", "N/A"), 2: ("Not Started", "N/A")}

    found = nvidia.fabric_problem(rows)

    assert found == nvidia.Fabric(
        "fabric registration not finished (`nvidia-smi -q`, Fabric: GPU 1: State In Progress, "
        "Status N/A; GPU 2: State Not Started, Status N/A)"
    )
    assert nvidia.fabric_problem({0: ("N/A", "N/A")}) is None  # no fabric: the service says


def _q_fabric(name: str) -> tuple[str, str]:
    """(State, Status) of a recorded `nvidia-smi -q` Fabric section."""
    text = (FIXTURES / "fabric" / name).read_text()
    values = {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in text.splitlines()[1:])
    }
    return values["State"], values["Status"]


def test_the_fake_prints_the_recorded_fabric_values(machine, h100x8):
    FakeDriver(machine, gpus=8, nvswitch=True, model=H100)
    host = machine.host()
    driver.ensure(host, AUTO, h100x8, today=TODAY)  # installs and starts Fabric Manager
    query = (nvidia.NVIDIA_SMI, *nvidia.FABRIC_QUERY_ARGS)

    done = nvidia.parse_fabric(host.run(*query))
    machine.services[FABRIC_SERVICE].active = False
    registering = nvidia.parse_fabric(host.run(*query))

    assert done[0] == _q_fabric("completed.txt")
    assert registering[0] == _q_fabric("in-progress.txt")
    recorded = (FIXTURES / "h100-sxm5-vm" / "nvidia-smi-fabric.csv").read_text()
    assert nvidia.parse_fabric(recorded) == {0: ("N/A", "N/A")}  # one GPU, no NVSwitch


def test_machines_without_nvswitch_get_no_fabric_manager(machine, fake, a10g):
    result = driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert a10g.nvswitches == 0 and result.fabric is None
    assert not [p for p in machine.dpkg if "fabricmanager" in p or "nscq" in p]


def test_fabric_manager_moves_with_the_driver(machine, h100x8):
    fake = FakeDriver(machine, gpus=8, nvswitch=True)
    host = machine.host()
    driver.ensure(host, AUTO, h100x8, today=TODAY)
    fake.driver_sru("580", "580.105.08")
    fake.kernel_update(NEW)

    result = driver.ensure(host, AUTO, h100x8, today=TODAY)
    driver.apply_update(host, result.update)
    fake.reboot()

    assert set(OPEN_580.fabric) <= set(result.update)
    assert driver.ensure(host, AUTO, h100x8, today=TODAY).fabric is None
    for package in OPEN_580.fabric:
        assert machine.dpkg[package].startswith("580.105.08-")


# ----------------------------------------------------------------------------- nouveau


def test_gpus_bound_to_nouveau_are_released_through_a_reboot(machine, tmp_path):
    """The driver's own package blacklists nouveau in the initramfs (review gpu.md N11c)."""
    fake = FakeDriver(machine, nouveau=True)
    gpus = inventory(tmp_path, "g5-a10g", gpu_driver="nouveau")

    result = driver.ensure(machine.host(), AUTO, gpus, today=TODAY)

    assert not result.report.ok
    assert result.report.state is gpu.SmiState.NO_DRIVER  # nvidia.ko could not load
    assert result.reboot == "nouveau holds the GPUs (now blacklisted; a reboot releases them)"
    assert "blacklist nouveau" in machine.read(nvidia_driver.GRAPHICS_DRIVERS_CONF)
    # nvidia-kernel-common's postinst rebuilt the initramfs: nothing of the charm's own
    assert machine.read(driver.NOUVEAU_BLACKLIST) is None
    assert machine.lines("update-initramfs") == []
    fake.reboot()
    bound = build_inventory_bound(tmp_path)
    assert driver.ensure(machine.host(), AUTO, bound, today=TODAY).report.ok


def test_without_the_packages_blacklist_the_charm_writes_its_own(machine, tmp_path):
    fake = nouveau_without_the_packages_blacklist(machine)
    gpus = inventory(tmp_path, "g5-a10g", gpu_driver="nouveau")
    before = len(machine.lines("update-initramfs"))

    result = driver.ensure(machine.host(), AUTO, gpus, today=TODAY)

    assert result.reboot == "nouveau holds the GPUs (now blacklisted; a reboot releases them)"
    assert "blacklist nouveau" in machine.read(driver.NOUVEAU_BLACKLIST)
    assert machine.lines("update-initramfs")[before:] == ["/usr/sbin/update-initramfs -u"]
    fake.reboot()
    assert not fake.nouveau_bound


def nouveau_without_the_packages_blacklist(machine) -> FakeDriver:
    """A driver installed, its modprobe file removed by hand, an initramfs built since."""
    fake = FakeDriver(machine, nouveau=True)
    fake.preinstall("580", loaded=False, variant="server-open")
    machine.path(nvidia_driver.GRAPHICS_DRIVERS_CONF).unlink()
    machine.host().run("/usr/sbin/update-initramfs", "-u")
    fake.reboot()
    assert fake.nouveau_bound
    return fake


def test_the_fake_nvidia_smi_cannot_reach_a_driver_while_nouveau_holds_the_gpus(machine):
    nouveau_without_the_packages_blacklist(machine)

    with pytest.raises(CommandError) as e:
        machine.host().run(nvidia.NVIDIA_SMI)
    assert e.value.returncode == 9  # not 6 "No devices were found": nvidia.ko is not loaded
    assert "couldn't communicate with the NVIDIA driver" in e.value.stderr


def build_inventory_bound(tmp_path):
    root = build_machine(tmp_path / "sys-after", "g5-a10g", module_loaded=True)
    return gpu.detect(root, write_pci_ids(tmp_path / "pci.ids"))


# --------------------------------------------------------------------- turns to reboot


def test_turns_go_to_the_oldest_requests_up_to_the_limit():
    from reboot_turns import grant

    asks = {"w/3": 30.0, "w/1": 10.0, "w/2": 10.0}

    assert grant(asks, [], 1) == ["w/1"]  # same time: lower unit number first
    assert grant(asks, [], 2) == ["w/1", "w/2"]
    assert grant(asks, ["w/3"], 2) == ["w/3", "w/1"]  # a holder keeps its turn
    assert grant(asks, ["w/3", "w/2"], 1) == ["w/3", "w/2"]  # never taken away
    assert grant({"w/2": 5.0}, ["w/1"], 1) == ["w/2"]  # w/1 is done (or gone)
    assert grant({}, ["w/1"], 1) == []
    assert grant(asks, [], 0) == ["w/1"]  # at least one


def test_a_holder_whose_gpus_fail_after_its_reboot_holds_back_who_could_fail_alike():
    from reboot_turns import held_back

    gpus = {"w/0": "nvswitch", "w/1": "nvswitch", "w/2": "gpu", "w/3": None}
    asks = {"w/1": ["reboot"], "w/2": ["repair"], "w/3": ["reboot"]}
    fabric, driver = {"w/0": "fabric"}, {"w/0": "driver"}

    assert held_back(gpus, fabric, asks, ["w/0"]) == {"w/1"}  # only NVSwitch nodes
    assert held_back(gpus, driver, asks, ["w/0"]) == {"w/1", "w/2"}  # every GPU node
    assert held_back(gpus, fabric, asks, []) == set()  # a failed node without a turn
    assert held_back(gpus, fabric, {"w/1": ["upgrade", "runtime"]}, ["w/0"]) == set()
    assert held_back(gpus, fabric, {"w/1": ["upgrade", "reboot"]}, ["w/0"]) == {"w/1"}
    assert held_back(gpus, fabric, asks, ["w/0", "w/1"]) == set()  # a holder keeps it


# ------------------------------------------------------------------------- MIG layouts


def test_mig_layouts_are_named_as_mig_parted_names_them():
    import mig

    assert mig.validate(" all-1g.10gb ") == "all-1g.10gb"
    assert mig.validate("all-1g.10gb.me") == "all-1g.10gb.me"  # `+me` in a label value
    with pytest.raises(ValueError, match="all-<profile>"):
        mig.validate("all-1g.10gb+me")  # a label value cannot hold `+`
    offered = {0: {"1g.10gb": 7, "1g.10gb+me": 1}}
    assert mig.unavailable("all-1g.10gb.me", offered) is None
    assert mig.unavailable("all-2g.20gb", offered).startswith("mig-profile all-2g.20gb: GPU 0")


# ------------------------------------------------------------------ old kernels go away


def test_old_kernels_and_their_modules_autoremove(machine, fake, a10g):
    """ABI packages are marked auto, so no manual package pins an old kernel (review N4).

    The driver moves with kernel 1016 (the update path installs its ABI package by
    name), then kernels 1017 and 1018 arrive: 1015 and 1016 are neither running nor one
    of the two newest any more, so autoremove takes them with their modules (before,
    1016's manual ABI package kept it).
    """
    host, kernels = machine.host(), ("6.8.0-1017-aws", "6.8.0-1018-aws")
    driver.ensure(host, AUTO, a10g, today=TODAY)
    fake.driver_sru("580", "580.105.08")
    fake.kernel_update(NEW)
    driver.apply_update(host, driver.ensure(host, AUTO, a10g, today=TODAY).update)
    fake.reboot()
    for abi in kernels:
        driver.ensure(host, AUTO, a10g, today=TODAY)
        fake.kernel_update(abi)
        driver.ensure(host, AUTO, a10g, today=TODAY)
        fake.reboot()
    driver.ensure(host, AUTO, a10g, today=TODAY)

    removed = fake.autoremove()

    assert removed == "".join(
        f"Removing {name} ...\n"
        for name in (
            f"linux-image-{KERNEL}",
            f"linux-image-{NEW}",
            OPEN_580.modules(KERNEL),
            OPEN_580.modules(NEW),
        )
    )
    assert fake.kernels() == list(kernels)  # the running (latest) and the second-latest
    assert {OPEN_580.modules(abi) for abi in kernels} <= set(machine.dpkg)
    assert {*OPEN_580.userspace, OPEN_580.modules_meta} <= fake.manual()
    assert driver.ensure(host, AUTO, a10g, today=TODAY).report.ok


def test_abi_packages_an_earlier_revision_installed_by_name_are_marked_auto(machine, fake, a10g):
    driver.ensure(machine.host(), AUTO, a10g, today=TODAY)
    machine.host().run("/usr/bin/apt-mark", "manual", OPEN_580.modules(KERNEL))

    driver.ensure(machine.host(), AUTO, a10g, today=TODAY)

    assert OPEN_580.modules(KERNEL) in fake.auto
    before = len(machine.mutations())
    driver.ensure(machine.host(), AUTO, a10g, today=TODAY)
    assert changes(machine, before) == []  # marked once
