import pytest

from charms.gpu_k8s.v0 import apt

UPSTREAM = "https://pkgs.k8s.io/core:/stable:/v1.36/deb/"
KEY = "/etc/apt/keyrings/kubernetes-apt-keyring.gpg"


def add_k8s_source(machine, uri=UPSTREAM, key_url=UPSTREAM + "Release.key"):
    return apt.add_source(
        machine.host(),
        "kubernetes",
        uri=uri,
        suite="/",
        components=[],
        key_url=key_url,
        key_path=KEY,
    )


def test_install_pins_exact_version_and_holds(machine):
    changed = apt.install(machine.host(), {"containerd": "1.7.12-0ubuntu4"}, hold=True)

    assert changed
    assert machine.dpkg["containerd"] == "1.7.12-0ubuntu4"
    assert machine.held == {"containerd"}
    [install] = [line for line in machine.lines("apt-get") if " install " in line]
    assert install.endswith(
        "install -y --allow-change-held-packages --allow-downgrades --no-install-recommends"
        " containerd=1.7.12-0ubuntu4"
    )


def test_install_twice_runs_no_mutation_the_second_time(machine):
    apt.install(machine.host(), {"containerd": "1.7.12-0ubuntu4", "runc": None}, hold=True)
    before = len(machine.mutations())

    changed = apt.install(
        machine.host(), {"containerd": "1.7.12-0ubuntu4", "runc": None}, hold=True
    )

    assert not changed
    assert machine.mutations()[before:] == []


def test_install_moves_a_held_package_to_the_new_pin(machine):
    apt.install(machine.host(), {"containerd": "1.7.12-0ubuntu4"}, hold=True)

    apt.install(machine.host(), {"containerd": "2.2.1-0ubuntu1~24.04.3"}, hold=True)

    assert machine.dpkg["containerd"] == "2.2.1-0ubuntu1~24.04.3"
    assert machine.held == {"containerd"}
    assert len(machine.lines("apt-mark")) == 3  # showhold, hold, showhold: no second hold


def test_install_goes_back_to_an_older_pin(machine):
    apt.install(machine.host(), {"containerd": "2.2.1-0ubuntu1~24.04.3"}, hold=True)

    changed = apt.install(machine.host(), {"containerd": "1.7.12-0ubuntu4"}, hold=True)

    assert changed
    assert machine.dpkg["containerd"] == "1.7.12-0ubuntu4"
    assert machine.held == {"containerd"}


def test_install_without_hold_leaves_packages_unheld(machine):
    apt.install(machine.host(), {"runc": None}, hold=False)

    assert "runc" in machine.dpkg
    assert machine.held == set()


def test_apt_runs_noninteractive(machine, monkeypatch):
    envs = []
    real_run = machine.runner.run

    def run(argv, **kwargs):
        envs.append((argv[0], kwargs.get("env")))
        return real_run(argv, **kwargs)

    monkeypatch.setattr(machine.runner, "run", run)
    apt.install(machine.host(), {"runc": None}, hold=False)

    assert ("/usr/bin/apt-get", {"DEBIAN_FRONTEND": "noninteractive"}) in envs


def test_missing_version_raises_apt_error_naming_the_package(machine):
    with pytest.raises(apt.AptError) as err:
        apt.install(machine.host(), {"runc": None, "containerd": "9.9.9-0ubuntu1"}, hold=True)

    assert err.value.package == "containerd"
    assert err.value.detail == "E: Version '9.9.9-0ubuntu1' for 'containerd' was not found"
    assert "containerd exists at the requested version" in str(err.value)
    assert "containerd" not in machine.dpkg
    assert machine.held == set()


def test_unknown_package_raises_apt_error_naming_it(machine):
    with pytest.raises(apt.AptError) as err:
        apt.install(machine.host(), {"kubeadm": "1.36.5-1.1"}, hold=True)

    assert err.value.package == "kubeadm"
    assert "Unable to locate package kubeadm" in err.value.detail


def test_unexplained_failure_names_every_package_tried(machine):
    machine.fail(
        "/usr/bin/apt-get -o DPkg::Lock::Timeout=300 install",
        returncode=100,
        stderr="E: Sub-process /usr/bin/dpkg returned an error code (1)",
    )

    with pytest.raises(apt.AptError) as err:
        apt.install(machine.host(), {"runc": None, "containerd": None}, hold=False)

    assert err.value.package == "runc, containerd"
    assert err.value.detail.startswith("E: Sub-process")


def test_installed_version(machine):
    assert apt.installed_version(machine.host(), "runc") is None
    apt.install(machine.host(), {"runc": "1.3.3-0ubuntu1~24.04.3"}, hold=False)
    assert apt.installed_version(machine.host(), "runc") == "1.3.3-0ubuntu1~24.04.3"


def test_add_source_writes_deb822_fetches_key_and_updates(machine):
    assert add_k8s_source(machine)

    assert machine.read("/etc/apt/sources.list.d/kubernetes.sources") == (
        f"Types: deb\nURIs: {UPSTREAM}\nSuites: /\nSigned-By: {KEY}\n"
    )
    assert machine.path(KEY).exists()
    assert machine.lines("curl") == [
        f"/usr/bin/curl -fsSL --max-time 60 --retry 3 {UPSTREAM}Release.key"
    ]
    assert UPSTREAM in machine.indexed
    apt.install(machine.host(), {"kubeadm": "1.36.5-1.1"}, hold=True)
    assert machine.dpkg["kubeadm"] == "1.36.5-1.1"


def test_add_source_with_components(machine):
    machine.add_repository("https://mirror.example")
    uri = "https://mirror.example/core:/stable:/v1.37/deb/"
    apt.add_source(
        machine.host(),
        "extra",
        uri=uri,
        suite="noble",
        components=["main", "restricted"],
        key_url=uri + "Release.key",
        key_path="/etc/apt/keyrings/extra.gpg",
    )

    assert "Suites: noble\nComponents: main restricted\n" in machine.read(
        "/etc/apt/sources.list.d/extra.sources"
    )


def test_add_source_twice_is_a_no_op(machine):
    add_k8s_source(machine)
    before = len(machine.mutations())

    assert not add_k8s_source(machine)
    assert machine.mutations()[before:] == []


def test_changing_the_source_fetches_its_key_and_updates_again(machine):
    machine.add_repository("https://mirror.example/k8s")
    add_k8s_source(machine)
    mirror = "https://mirror.example/k8s/core:/stable:/v1.36/deb/"

    assert add_k8s_source(machine, uri=mirror, key_url=mirror + "Release.key")

    assert (
        machine.lines("curl")[-1]
        == f"/usr/bin/curl -fsSL --max-time 60 --retry 3 {mirror}Release.key"
    )
    assert machine.indexed == {mirror}


def test_unreachable_key_raises_and_writes_no_source(machine):
    with pytest.raises(apt.AptError) as err:
        add_k8s_source(machine, key_url="https://nowhere.example/Release.key")

    assert err.value.package == "kubernetes"
    assert "404" in err.value.detail
    assert "cannot use package source kubernetes" in str(err.value)
    assert machine.read("/etc/apt/sources.list.d/kubernetes.sources") is None
    assert not machine.path(KEY).exists()


def test_failed_update_raises_apt_error(machine):
    machine.fail(
        "/usr/bin/apt-get -o DPkg::Lock::Timeout=300 update",
        returncode=100,
        stderr="W: some warning\nE: Failed to fetch https://x/InRelease  Could not resolve 'x'",
    )

    with pytest.raises(apt.AptError) as err:
        add_k8s_source(machine)

    assert err.value.detail == "E: Failed to fetch https://x/InRelease  Could not resolve 'x'"


def test_source_without_key_url_needs_an_existing_keyring(machine):
    with pytest.raises(ValueError, match="keyring"):
        add_k8s_source(machine, key_url=None)

    machine.write(KEY, "key")
    assert add_k8s_source(machine, key_url=None)
    assert machine.lines("curl") == []


def test_bad_source_name_is_refused(machine):
    with pytest.raises(ValueError, match="package source name"):
        apt.add_source(
            machine.host(),
            "../evil",
            uri=UPSTREAM,
            suite="/",
            components=[],
            key_url=None,
            key_path=KEY,
        )


def test_a_version_glob_installs_the_highest_match_and_is_satisfied_by_it(machine):
    assert apt.install(machine.host(), {"runc": "1.3.*"}, hold=True)
    assert machine.dpkg["runc"] == "1.3.4-0ubuntu1~24.04.1"
    before = len(machine.mutations())

    assert not apt.install(machine.host(), {"runc": "1.3.*"}, hold=True)
    assert machine.mutations()[before:] == []  # satisfied: not even a lists refresh


def test_the_lists_are_refreshed_before_installing_unless_the_caller_just_did(machine):
    apt.install(machine.host(), {"curl": None}, hold=False)
    apt.install(machine.host(), {"runc": None}, hold=False, refresh=False)
    assert [line.split()[-2:] for line in machine.lines("apt-get")] == [
        ["DPkg::Lock::Timeout=300", "update"],
        ["--no-install-recommends", "curl"],
        ["--no-install-recommends", "runc"],
    ]


def test_preferences_pin_a_series_for_plain_installs(machine):
    assert apt.pin(machine.host(), "runtime", {"runc": "1.1.*", "containerd": "2.2.*"})
    assert machine.read("/etc/apt/preferences.d/gpu-k8s-runtime.pref") == (
        "Package: containerd\nPin: version 2.2.*\nPin-Priority: 1001\n\n"
        "Package: runc\nPin: version 1.1.*\nPin-Priority: 1001\n"
    )
    assert not apt.pin(machine.host(), "runtime", {"runc": "1.1.*", "containerd": "2.2.*"})

    apt.install(machine.host(), {"runc": None}, hold=False)
    assert machine.dpkg["runc"] == "1.1.12-0ubuntu3"  # the pinned series, not the newest
