"""Setting up HAProxy as the node-local API endpoint, on a fake machine.

HAProxy itself runs for real, with this configuration, in tests/functional/test_api_proxy.py.
"""

from __future__ import annotations

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
        "[Service]\n"
        'Environment="CONFIG=/etc/haproxy/gpu-k8s.cfg"\n'
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
