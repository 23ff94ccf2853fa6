import tomllib

import pytest

from charms.gpu_k8s.v0 import apt, containerd
from charms.gpu_k8s.v0.containerd import RuntimeHandler

CRI = "io.containerd.cri.v1.runtime"
NVIDIA = {"nvidia": RuntimeHandler("/usr/bin/nvidia-container-runtime")}


def runtimes_of(config: dict) -> dict:
    return config["plugins"][CRI]["containerd"]["runtimes"]


def test_default_config_is_version_3_with_systemd_runc_and_pinned_sandbox():
    config = tomllib.loads(containerd.render_config())

    assert config["version"] == 3
    assert config["plugins"][CRI]["containerd"]["default_runtime_name"] == "runc"
    runc = runtimes_of(config)["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {"SystemdCgroup": True}
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10.1"


def test_nvidia_handler_is_registered_without_becoming_default():
    config = tomllib.loads(containerd.render_config(NVIDIA))

    assert config["plugins"][CRI]["containerd"]["default_runtime_name"] == "runc"
    nvidia = runtimes_of(config)["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"] == {
        "SystemdCgroup": True,
        "BinaryName": "/usr/bin/nvidia-container-runtime",
    }


def test_nvidia_becomes_default_only_when_asked():
    config = tomllib.loads(containerd.render_config(NVIDIA, "nvidia"))

    assert config["plugins"][CRI]["containerd"]["default_runtime_name"] == "nvidia"
    assert set(runtimes_of(config)) == {"runc", "nvidia"}


@pytest.mark.parametrize(
    ("runtimes", "default", "message"),
    [
        ({}, "nvidia", "not a registered handler"),
        ({"runc": RuntimeHandler("/usr/sbin/runc")}, "runc", "built in"),
        ({"Bad Name": RuntimeHandler("/x")}, "runc", "DNS label"),
    ],
)
def test_invalid_runtime_setups_are_refused(runtimes, default, message):
    with pytest.raises(ValueError, match=message):
        containerd.render_config(runtimes, default)


def test_runtime_binary_must_be_absolute():
    with pytest.raises(ValueError, match="absolute path"):
        RuntimeHandler("nvidia-container-runtime")


def test_install_takes_the_newest_of_the_pinned_series_and_holds_it(machine):
    assert containerd.install(machine.host())

    assert machine.dpkg["containerd"] == "2.2.1-0ubuntu1~24.04.3"  # noble-updates
    assert machine.dpkg["runc"] == "1.3.4-0ubuntu1~24.04.1"  # not -security's 1.3.3
    assert {"containerd", "runc"} <= machine.held
    assert machine.services["containerd"].active
    assert machine.preferences() == {
        "containerd": (containerd.CONTAINERD_SERIES, 1001),
        "runc": (containerd.RUNC_SERIES, 1001),
    }
    assert not containerd.install(machine.host())


def test_an_ubuntu_update_that_replaces_the_tested_version_still_installs(machine):
    """The archive keeps one version per pocket: an SRU removes the one tested before."""
    machine.publish("containerd", "2.2.1-0ubuntu1~24.04.4")
    machine.publish("runc", "1.3.4-0ubuntu1~24.04.2")

    assert containerd.install(machine.host())

    assert machine.dpkg["containerd"] == "2.2.1-0ubuntu1~24.04.4"
    assert machine.dpkg["runc"] == "1.3.4-0ubuntu1~24.04.2"
    # the lists from the machine's first boot named the old versions: refreshed first
    updates = [i for i, line in enumerate(machine.lines("apt-get")) if line.endswith(" update")]
    installs = [i for i, line in enumerate(machine.lines("apt-get")) if " install " in line]
    assert updates and installs and updates[0] < installs[0]


def test_a_new_minor_in_the_archive_is_taken_by_new_units(machine):
    machine.publish("containerd", "2.3.0-0ubuntu1~24.04.1")  # the SRU exception allows it

    assert containerd.install(machine.host())

    assert machine.dpkg["containerd"] == "2.3.0-0ubuntu1~24.04.1"


def test_a_major_the_archive_no_longer_has_is_refused_by_name(machine):
    machine.publish("containerd", "3.0.0-0ubuntu1~24.04.1")

    with pytest.raises(apt.AptError) as err:
        containerd.install(machine.host())

    assert err.value.package == "containerd"
    assert "Version '2.*' for 'containerd' was not found" in str(err.value)
    assert "containerd" not in machine.dpkg


def test_the_first_install_moves_an_older_runc_to_the_newest_of_its_series(machine):
    machine.dpkg["runc"] = "1.1.12-0ubuntu3"  # what the release pocket shipped

    assert containerd.install(machine.host())
    assert machine.dpkg["runc"] == "1.3.4-0ubuntu1~24.04.1"
    before = len(machine.mutations())
    assert not containerd.install(machine.host())  # in its series: nothing runs again
    assert machine.mutations()[before:] == []


def test_configure_restarts_containerd_only_when_the_file_changes(machine):
    containerd.install(machine.host())

    assert containerd.configure(machine.host())
    assert not containerd.configure(machine.host())
    assert machine.services["containerd"].restarts == 1

    assert containerd.configure(machine.host(), NVIDIA)
    assert machine.services["containerd"].restarts == 2
    assert "nvidia" in runtimes_of(tomllib.loads(machine.read(containerd.CONFIG_PATH)))


def test_invalid_configure_leaves_the_file_alone(machine):
    containerd.install(machine.host())
    containerd.configure(machine.host())
    before = machine.read(containerd.CONFIG_PATH)

    with pytest.raises(ValueError):
        containerd.configure(machine.host(), {}, "nvidia")

    assert machine.read(containerd.CONFIG_PATH) == before
    assert machine.services["containerd"].restarts == 1


def test_prepare_kernel_loads_modules_and_sets_sysctls_once(machine):
    assert containerd.prepare_kernel(machine.host())

    assert machine.read(containerd.MODULES_PATH) == "overlay\nbr_netfilter\n"
    assert machine.lines("modprobe") == [
        "/usr/sbin/modprobe overlay",
        "/usr/sbin/modprobe br_netfilter",
    ]
    assert machine.sysctl["net.ipv4.ip_forward"] == "1"
    assert machine.sysctl["net.bridge.bridge-nf-call-iptables"] == "1"
    before = len(machine.mutations())

    assert not containerd.prepare_kernel(machine.host())
    assert machine.mutations()[before:] == []


def test_swap_is_turned_off_and_kept_off_across_reboots(machine):
    machine.enable_swap()

    assert containerd.prepare_kernel(machine.host())

    assert machine.lines("swapoff") == ["/usr/sbin/swapoff -a"]
    fstab = machine.read("/etc/fstab")
    assert "# disabled for kubelet by gpu-k8s: /swap.img\tnone\tswap" in fstab
    assert fstab.startswith("LABEL=cloudimg-rootfs\t/\text4")
    assert not containerd.disable_swap(machine.host())
    assert len(machine.lines("swapoff")) == 1


def test_no_swap_means_no_swapoff_and_fstab_untouched(machine):
    fstab = machine.read("/etc/fstab")

    assert not containerd.disable_swap(machine.host())

    assert machine.lines("swapoff") == []
    assert machine.read("/etc/fstab") == fstab


def test_a_security_update_in_the_series_is_pending_until_update_installs_it(machine):
    # review deploy.md N8: held packages never move by themselves (apt-mark(8) hold)
    host = machine.host()
    containerd.install(host)
    installed = dict(machine.dpkg)
    assert containerd.pending_updates(host) == {}

    machine.publish("runc", "1.3.4-0ubuntu1~24.04.2", "security")  # same series
    machine.publish("runc", "2.0.0-0ubuntu1", "proposed")  # a new series: never taken
    containerd.install(host)  # what every hook runs: held, in its series, no move
    assert machine.dpkg == installed

    pending = containerd.pending_updates(host)
    assert pending == {"runc": "1.3.4-0ubuntu1~24.04.2"}
    assert machine.dpkg == installed  # a simulation changes nothing
    restarts = machine.services["containerd"].restarts

    assert containerd.update(host, pending)
    assert machine.dpkg["runc"] == "1.3.4-0ubuntu1~24.04.2"
    assert {"containerd", "runc"} <= machine.held
    assert machine.services["containerd"].restarts == restarts + 1
    assert containerd.pending_updates(host) == {}
