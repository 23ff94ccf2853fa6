"""Setting up HAProxy as the node-local API endpoint, on a fake machine.

HAProxy itself runs for real, with this configuration, in tests/functional/test_api_proxy.py.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from charms.gpu_k8s.v0 import api_proxy, apt

SERVERS = ["10.0.0.1:6443", "10.0.0.2:6443"]


def test_configure_installs_haproxy_points_its_unit_at_the_config_and_starts_it(machine):
    assert api_proxy.configure(machine.host(), SERVERS) is True

    assert apt.matches(machine.dpkg["haproxy"], api_proxy.SERIES)
    assert "haproxy" not in machine.held  # security updates within the series still land
    assert machine.preferences()["haproxy"] == ("2.8.*", 1001)
    assert machine.read(api_proxy.DROP_IN) == (
        "# Managed by the gpu-k8s charms: the node-local Kubernetes API endpoint.\n"
        "# The command lines name the config file: /etc/default/haproxy cannot move it.\n"
        "[Service]\n"
        "ExecStartPre=\n"
        "ExecStart=\n"
        "ExecStart=/usr/sbin/haproxy -Ws -f /etc/haproxy/gpu-k8s.cfg -p /run/haproxy.pid"
        " -S /run/haproxy-master.sock\n"
        "ExecReload=\n"
        "ExecReload=/usr/sbin/haproxy -Ws -f /etc/haproxy/gpu-k8s.cfg -c -q\n"
        "ExecReload=/bin/kill -USR2 $MAINPID\n"
    )
    assert machine.proxy_servers() == SERVERS
    service = machine.services[api_proxy.SERVICE]
    assert service.enabled and service.active
    assert machine.lines("systemctl")[-4:] == [
        "/usr/bin/systemctl is-active --quiet haproxy",  # before the package: not there
        "/usr/bin/systemctl daemon-reload",
        "/usr/bin/systemctl enable haproxy",
        "/usr/bin/systemctl restart haproxy",  # a new drop-in; the package runs its default
    ]


def test_the_config_listens_on_the_endpoint_in_tcp_mode_with_tls_health_checks():
    text = api_proxy.render_config(["10.0.0.1:6443", "[fd00::7]:6443"])

    assert "    bind 127.0.0.1:6444\n" in text
    assert "    mode tcp\n" in text
    assert "    option httpchk GET /readyz\n" in text
    assert "    http-check expect status 200\n" in text
    assert "check check-ssl verify none inter 2s fall 3 rise 2" in text
    assert "    retries 3\n    option redispatch\n" in text
    assert text.endswith("    server api-0 10.0.0.1:6443\n    server api-1 [fd00::7]:6443\n")
    assert "    user haproxy\n" in text and "    chroot /var/lib/haproxy\n" in text
    bare = api_proxy.render_config(["10.0.0.1:6443"], port=16444, service=False)
    assert "user haproxy" not in bare and "    bind 127.0.0.1:16444\n" in bare


def test_configure_again_changes_nothing(machine):
    api_proxy.configure(machine.host(), SERVERS)
    before = len(machine.mutations())

    assert api_proxy.configure(machine.host(), list(reversed(SERVERS))) is False
    assert machine.mutations()[before:] == []


def test_a_new_server_list_is_a_reload_that_keeps_open_connections(machine):
    api_proxy.configure(machine.host(), SERVERS)
    service = machine.services[api_proxy.SERVICE]
    restarts = service.restarts

    assert api_proxy.configure(machine.host(), [*SERVERS, "10.0.0.3:6443"]) is True

    assert machine.proxy_servers() == [*SERVERS, "10.0.0.3:6443"]
    assert service.reloads == 1 and service.restarts == restarts
    assert machine.lines("systemctl")[-1] == "/usr/bin/systemctl reload haproxy"


def test_a_failed_install_writes_nothing_so_the_next_call_tries_again(machine):
    machine.withdraw("haproxy")

    with pytest.raises(api_proxy.ProxyError, match="haproxy") as refused:
        api_proxy.configure(machine.host(), SERVERS)
    assert refused.value.blocked is True  # the operator must fix the archive
    assert str(refused.value).endswith("; check the machine's Ubuntu archive")
    assert not machine.path(api_proxy.CONFIG).exists()

    machine.publish("haproxy", "2.8.16-0ubuntu0.24.04.3")
    assert api_proxy.configure(machine.host(), SERVERS) is True
    assert machine.services[api_proxy.SERVICE].active


def test_a_failed_start_says_what_systemd_said_and_the_next_call_starts_it(machine):
    machine.fail_start("haproxy", stderr="Job for haproxy.service failed")

    with pytest.raises(api_proxy.ProxyError) as failed:
        api_proxy.configure(machine.host(), SERVERS)
    assert str(failed.value) == (
        "starting HAProxy: Job for haproxy.service failed; retrying on the next event"
    )
    assert failed.value.blocked is False
    # review deploy.md N3: the files were written, and the next call found nothing to do
    assert api_proxy.configure(machine.host(), SERVERS) is True
    assert machine.services[api_proxy.SERVICE].active
    assert machine.lines("systemctl")[-1] == "/usr/bin/systemctl restart haproxy"
    assert api_proxy.configure(machine.host(), SERVERS) is False


def test_a_failed_reload_is_tried_again_until_the_new_list_runs(machine):
    """deploy.md N3 (a): Ubuntu's ExecReload checks the file and keeps the running config."""
    api_proxy.configure(machine.host(), SERVERS)
    machine.fail("/usr/bin/systemctl reload haproxy", stderr="Job for haproxy.service failed")
    grown = [*SERVERS, "10.0.0.3:6443"]

    with pytest.raises(api_proxy.ProxyError):
        api_proxy.configure(machine.host(), grown)
    service = machine.services[api_proxy.SERVICE]
    assert service.reloads == 0

    assert api_proxy.configure(machine.host(), grown) is True
    assert service.reloads == 1
    assert machine.lines("systemctl")[-1] == "/usr/bin/systemctl reload haproxy"


def test_a_reload_the_master_refuses_is_not_taken_for_done_and_is_tried_again(machine):
    """`systemctl reload` only checks the file and signals the master (ExecReload=).

    The master then fails to load it (here: a port another process holds, which
    `haproxy -c` never tries) and keeps the old workers; the next hook must not find
    "nothing to do" while the old server list runs.
    """
    api_proxy.configure(machine.host(), SERVERS)
    grown = [*SERVERS, "10.0.0.3:6443"]
    machine.refuse_reload(
        "[ALERT]    (1000) : Binding [/etc/haproxy/gpu-k8s.cfg:31] for frontend kubelet-"
        "metrics: cannot bind socket (Address already in use) for [127.0.0.1:6446]"
    )

    with pytest.raises(api_proxy.ProxyError) as refused:
        api_proxy.configure(machine.host(), grown)

    assert str(refused.value) == (
        "HAProxy did not load its new configuration on reload (its master keeps the running "
        "one; journalctl -u haproxy says why); retrying on the next event"
    )
    assert refused.value.blocked is False
    assert machine.read(api_proxy.APPLIED) != _applied(grown)
    assert "10.0.0.3:6443" not in (machine.haproxy_loaded or "")
    service = machine.services[api_proxy.SERVICE]
    assert service.reloads == 1

    assert api_proxy.configure(machine.host(), grown) is True  # the next hook: again
    assert service.reloads == 2
    assert machine.haproxy_loaded == machine.read(api_proxy.CONFIG)
    assert api_proxy.configure(machine.host(), grown) is False


def _applied(servers: list[str]) -> str:
    config = api_proxy.render_config(sorted(servers))
    return api_proxy.fingerprint(api_proxy.render_drop_in(), config) + "\n"


def test_a_stopped_haproxy_is_started_without_any_change(machine):
    """deploy.md N3 (b): stopped by hand, or systemd's start limit hit."""
    api_proxy.configure(machine.host(), SERVERS)
    machine.services[api_proxy.SERVICE].active = False

    assert api_proxy.configure(machine.host(), SERVERS) is True
    assert machine.services[api_proxy.SERVICE].active
    assert machine.lines("systemctl")[-1] == "/usr/bin/systemctl restart haproxy"


def test_a_stopped_haproxy_is_started_with_the_next_change(machine):
    api_proxy.configure(machine.host(), SERVERS)
    machine.services[api_proxy.SERVICE].active = False

    assert api_proxy.configure(machine.host(), [*SERVERS, "10.0.0.3:6443"]) is True
    assert machine.services[api_proxy.SERVICE].active


def _legacy_proxy_running(machine) -> None:
    for path in api_proxy.LEGACY_FILES:
        machine.write(path, "# earlier revision\n")
    machine.runner.run(["/usr/bin/systemctl", "daemon-reload"])
    machine.runner.run(["/usr/bin/systemctl", "enable", "--now", api_proxy.LEGACY_SERVICE])


def test_the_earlier_proxy_keeps_serving_when_haproxy_cannot_be_installed(machine):
    """deploy.md N2: the legacy proxy was removed before apt ran, leaving no listener."""
    _legacy_proxy_running(machine)
    machine.withdraw("haproxy")

    with pytest.raises(api_proxy.ProxyError):
        api_proxy.configure(machine.host(), SERVERS)
    assert machine.services[api_proxy.LEGACY_SERVICE].active
    assert all(machine.path(p).exists() for p in api_proxy.LEGACY_FILES)

    machine.publish("haproxy", "2.8.16-0ubuntu0.24.04.3")
    assert api_proxy.configure(machine.host(), SERVERS) is True
    assert api_proxy.LEGACY_SERVICE not in machine.services
    assert machine.services[api_proxy.SERVICE].active


def test_the_python_proxy_of_earlier_revisions_is_removed_before_haproxy_binds(machine):
    _legacy_proxy_running(machine)

    api_proxy.configure(machine.host(), SERVERS)

    assert api_proxy.LEGACY_SERVICE not in machine.services
    assert not any(machine.path(p).exists() for p in api_proxy.LEGACY_FILES)
    lines = machine.lines("systemctl")
    assert lines.index(f"/usr/bin/systemctl disable --now {api_proxy.LEGACY_SERVICE}") < (
        lines.index("/usr/bin/systemctl restart haproxy")
    )


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ([], "at least one API server"),
        (["10.0.0.1"], "must be host:port"),
        (["10.0.0.1:0"], "must be host:port"),
        (["10.0.0.1:70000"], "must be host:port"),
        (["fd00::1:6443"], "must be host:port"),
        (["10.0.0.1:6443 extra"], "must be host:port"),
    ],
)
def test_bad_server_lists_are_refused_and_nothing_is_written(machine, servers, message):
    with pytest.raises(api_proxy.ProxyError, match=message) as refused:
        api_proxy.configure(machine.host(), servers)
    assert str(refused.value).startswith("cannot configure the API proxy: ")
    assert refused.value.blocked is False  # the control plane publishes a good list

    assert not machine.path(api_proxy.CONFIG).exists()
    assert machine.calls == []


def test_remove_stops_haproxy_and_deletes_its_files_keeping_the_package(machine):
    api_proxy.configure(machine.host(), SERVERS)

    assert api_proxy.remove(machine.host()) is True

    assert not machine.path(api_proxy.CONFIG).exists()
    assert not machine.path(api_proxy.DROP_IN).exists()
    assert not machine.services[api_proxy.SERVICE].active
    assert "haproxy" in machine.dpkg
    assert api_proxy.remove(machine.host()) is False


def test_no_metrics_before_kubelet_has_its_certificate(machine):
    assert api_proxy.metrics_access(machine.host()) is None


def test_metrics_go_with_the_file_kubelets_link_names(machine):
    machine.write(api_proxy.CLUSTER_CA, machine.ca_pem)  # a control plane: kubeadm wrote it
    first = machine.kubelet_client_cert(issued="2026-11-24-10-00-00")
    access = api_proxy.metrics_access(machine.host(), api_server="127.0.0.1:6443")
    assert access == api_proxy.MetricsAccess(client_cert=first, api_server="127.0.0.1:6443")
    assert api_proxy.configure(machine.host(), SERVERS, access) is True
    assert f"crt {first}" in machine.read(api_proxy.CONFIG)

    rotated = machine.kubelet_client_cert(issued="2027-10-01-00-00-00")
    again = api_proxy.metrics_access(machine.host(), api_server="127.0.0.1:6443")

    assert again is not None and again.client_cert == rotated
    assert api_proxy.configure(machine.host(), SERVERS, again) is True  # a reload
    assert f"crt {first}" not in machine.read(api_proxy.CONFIG)


def test_a_link_to_a_missing_file_is_no_certificate(machine):
    machine.path(machine.kubelet_client_cert()).unlink()
    assert api_proxy.metrics_access(machine.host()) is None


# -- the drop-in wins over /etc/default/haproxy (review deploy.md N10) -------------------

FIXTURES = Path(__file__).parents[2] / "fixtures" / "haproxy"
LISTS = ("Environment", "EnvironmentFile", "ExecStartPre", "ExecStart", "ExecReload")


def _resolve(unit: str, drop_in: str, files: dict[str, str]) -> dict[str, list[list[str]]]:
    """The command lines systemd runs for `unit` with `drop_in` and environment `files`.

    systemd.unit(5): drop-ins are read after the unit. systemd.service(5)/systemd.exec(5):
    ExecStart=, ExecStartPre=, ExecReload=, Environment= and EnvironmentFile= are lists
    and an empty assignment resets the list; "Settings from these files [EnvironmentFile=]
    override settings made with Environment=" ("-" before the path: a missing file is
    fine); in a command line, "$FOO" as a word is split on whitespace into words and
    "${FOO}" inside a word is replaced as is.
    """
    settings = _settings(unit, drop_in)
    env: dict[str, str] = {}
    for value in settings["Environment"]:
        env.update(item.split("=", 1) for item in shlex.split(value))
    for value in settings["EnvironmentFile"]:
        env.update(_environment_file(files.get(value.removeprefix("-")) or ""))
    return {
        key: [_expand(value, env) for value in settings[key]]
        for key in ("ExecStartPre", "ExecStart", "ExecReload")
    }


def _settings(*texts: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {key: [] for key in LISTS}
    for text in texts:
        section = ""
        for line in map(str.strip, text.splitlines()):
            if line.startswith("["):
                section = line
            elif section == "[Service]" and "=" in line and not line.startswith("#"):
                key, _, value = line.partition("=")
                if key in settings:
                    settings[key] = [] if value == "" else [*settings[key], value]
    return settings


def _environment_file(text: str) -> dict[str, str]:
    env = {}
    for line in map(str.strip, text.splitlines()):
        if line and not line.startswith("#"):
            key, _, raw = line.partition("=")
            env[key] = raw.strip('"')
    return env


def _expand(value: str, env: dict[str, str]) -> list[str]:
    words: list[str] = []
    for word in shlex.split(value):
        if word.startswith("$") and word[1:].isidentifier():
            words += env.get(word[1:], "").split()
        else:
            words.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m[1], ""), word))
    return words


def _configs(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == "-f"]


def test_the_resolver_reads_the_package_unit_as_systemd_does():
    unit = (FIXTURES / "haproxy.service").read_text()
    shipped = {"/etc/default/haproxy": (FIXTURES / "default").read_text()}

    commands = _resolve(unit, "", shipped)

    assert commands["ExecStart"] == [
        "/usr/sbin/haproxy -Ws -f /etc/haproxy/haproxy.cfg -p /run/haproxy.pid "
        "-S /run/haproxy-master.sock".split()
    ]
    assert _configs(commands["ExecReload"][0]) == ["/etc/haproxy/haproxy.cfg"]


@pytest.mark.parametrize(
    "defaults",
    [
        "",
        'CONFIG="/etc/haproxy/haproxy.cfg"\n',  # uncommented, as the file suggests
        'CONFIG="/etc/haproxy/other.cfg"\nEXTRAOPTS="-de -m 16 -f /etc/haproxy/more.cfg"\n',
    ],
)
def test_haproxy_loads_only_the_charms_config_whatever_etc_default_says(defaults):
    """deploy.md N10: the unit reads /etc/default/haproxy, which overrides Environment=."""
    unit = (FIXTURES / "haproxy.service").read_text()
    files = {"/etc/default/haproxy": defaults}

    commands = _resolve(unit, api_proxy.render_drop_in(), files)

    assert [_configs(argv) for argv in commands["ExecStart"]] == [[api_proxy.CONFIG]]
    # the reload checks the file it loads, then signals the master
    assert [_configs(argv) for argv in commands["ExecReload"]] == [[api_proxy.CONFIG], []]
    assert "-c" in commands["ExecReload"][0]
    assert all(_configs(argv) == [api_proxy.CONFIG] for argv in commands["ExecStartPre"])


# -- haproxy -c before every reload or restart -----------------------------------------

# What Debian's haproxy 2.6 printed for `haproxy -c -f` of the charms' config with a server
# name that does not resolve (tests/functional/test_api_proxy.py runs the real one).
UNRESOLVED = (
    "[NOTICE]   (24915) : haproxy version is 2.6.12-1+deb12u4\n"
    "[NOTICE]   (24915) : path to executable is /usr/sbin/haproxy\n"
    "[ALERT]    (24915) : config : [/etc/haproxy/.gpu-k8s.cfg.new:27] : 'server "
    "kube-apiserver/api-2' : could not resolve address 'api.invalid'.\n"
    "[ALERT]    (24915) : config : Failed to initialize server(s) addr.\n"
)


def test_every_new_config_is_checked_before_systemd_loads_it(machine):
    api_proxy.configure(machine.host(), SERVERS)
    api_proxy.configure(machine.host(), [*SERVERS, "10.0.0.3:6443"])

    programs = [
        line.split()[1] if line.startswith("/usr/bin/systemctl") else "check"
        for line in machine.lines()
        if line.startswith(("/usr/sbin/haproxy", "/usr/bin/systemctl restart"))
        or line.startswith("/usr/bin/systemctl reload")
    ]
    assert programs == ["check", "restart", "check", "reload"]
    assert machine.lines("haproxy")[-1] == (
        "/usr/sbin/haproxy -c -f /etc/haproxy/.gpu-k8s.cfg.new"
    )
    assert not machine.path(api_proxy.CANDIDATE).exists()


def test_a_config_haproxy_refuses_is_never_loaded_and_the_error_says_why(machine):
    api_proxy.configure(machine.host(), SERVERS)
    service = machine.services[api_proxy.SERVICE]
    machine.fail("/usr/sbin/haproxy -c", stderr=UNRESOLVED, times=2)
    grown = [*SERVERS, "api.invalid:6443"]

    with pytest.raises(api_proxy.ProxyError) as refused:
        api_proxy.configure(machine.host(), grown)

    assert str(refused.value) == (
        "HAProxy refused its new configuration ('server kube-apiserver/api-2' : could not "
        "resolve address 'api.invalid'.); it keeps the running one, retrying on the next event"
    )
    assert refused.value.blocked is False
    assert machine.proxy_servers() == SERVERS  # the file systemd would load is the old one
    assert not machine.path(api_proxy.CANDIDATE).exists()
    assert service.reloads == 0 and service.restarts == 1
    # a stopped HAProxy is not started with it either
    service.active = False
    with pytest.raises(api_proxy.ProxyError):
        api_proxy.configure(machine.host(), grown)
    assert service.restarts == 1 and machine.proxy_servers() == SERVERS

    assert api_proxy.configure(machine.host(), grown) is True  # it resolves now
    assert machine.proxy_servers() == sorted(grown)
