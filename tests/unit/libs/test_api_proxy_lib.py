"""The local API proxy as the charms manage it: files, systemd unit, restarts, ordering.

The proxy program itself runs for real in tests/functional/test_api_proxy.py.
"""

import json
from collections import Counter
from pathlib import Path

import pytest

from charms.gpu_k8s.v0 import api_proxy

SERVERS = ["10.0.0.5:6443", "10.0.0.6:6443"]


def test_configure_installs_program_config_and_an_enabled_running_service(machine):
    assert api_proxy.configure(machine.host(), SERVERS) is True

    program = machine.read(api_proxy.PROGRAM)
    assert program == Path(api_proxy.__file__).read_text()
    assert json.loads(machine.read(api_proxy.CONFIG)) == {"servers": SERVERS}
    unit = machine.read(api_proxy.UNIT_FILE)
    assert f"ExecStart=/usr/bin/python3 -I {api_proxy.PROGRAM} --config {api_proxy.CONFIG}" in unit
    assert "DynamicUser=yes" in unit and "Restart=always" in unit
    service = machine.services[api_proxy.SERVICE]
    assert service.enabled and service.active
    assert machine.lines("systemctl") == [
        "/usr/bin/systemctl daemon-reload",
        f"/usr/bin/systemctl enable {api_proxy.SERVICE}",
        f"/usr/bin/systemctl restart {api_proxy.SERVICE}",
    ]


def test_configure_again_changes_nothing(machine):
    api_proxy.configure(machine.host(), SERVERS)
    before = len(machine.calls)

    assert api_proxy.configure(machine.host(), SERVERS) is False
    assert machine.calls[before:] == []


def test_a_new_server_list_reaches_the_running_proxy_without_a_restart(machine):
    api_proxy.configure(machine.host(), SERVERS)
    before = len(machine.calls)

    assert api_proxy.configure(machine.host(), [*SERVERS, "[fd00::7]:6443"]) is True
    assert json.loads(machine.read(api_proxy.CONFIG))["servers"][-1] == "[fd00::7]:6443"
    assert machine.calls[before:] == []
    assert machine.services[api_proxy.SERVICE].restarts == 1


def test_a_changed_program_restarts_the_service(machine):
    api_proxy.configure(machine.host(), SERVERS)
    machine.write(api_proxy.PROGRAM, "# an older revision of the proxy\n")

    assert api_proxy.configure(machine.host(), SERVERS) is True
    assert machine.services[api_proxy.SERVICE].restarts == 2
    assert machine.read(api_proxy.PROGRAM) == Path(api_proxy.__file__).read_text()


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ([], "at least one API server"),
        (["10.0.0.5"], "must be host:port"),
        (["10.0.0.5:0"], "must be host:port"),
        (["10.0.0.5:70000"], "must be host:port"),
        (["fd00::1:6443"], "must be host:port"),
        (["10.0.0.5:6443", "https://10.0.0.6:6443"], "must be host:port"),
    ],
)
def test_bad_server_lists_are_refused_and_nothing_is_written(machine, servers, message):
    with pytest.raises(ValueError, match=message):
        api_proxy.configure(machine.host(), servers)
    assert machine.read(api_proxy.CONFIG) is None
    assert machine.read(api_proxy.PROGRAM) is None
    assert machine.calls == []


def test_parse_server_accepts_names_ipv4_and_bracketed_ipv6():
    assert api_proxy.parse_server("10.0.0.5:6443") == ("10.0.0.5", 6443)
    assert api_proxy.parse_server("[fd00::5]:6443") == ("fd00::5", 6443)
    assert api_proxy.parse_server("ip-10-0-0-5.ec2.internal:6443") == (
        "ip-10-0-0-5.ec2.internal",
        6443,
    )


def test_remove_stops_the_service_and_deletes_its_files(machine):
    api_proxy.configure(machine.host(), SERVERS)

    assert api_proxy.remove(machine.host()) is True
    for path in (api_proxy.UNIT_FILE, api_proxy.CONFIG, api_proxy.PROGRAM):
        assert machine.read(path) is None
    assert api_proxy.SERVICE not in machine.services
    assert api_proxy.remove(machine.host()) is False


def test_spread_is_stable_per_node_and_shares_nodes_across_servers():
    servers = ["10.0.0.7:6443", "10.0.0.5:6443", "10.0.0.6:6443"]
    first = Counter()
    for i in range(300):
        node = f"ip-10-0-1-{i}"
        order = api_proxy.spread(servers, node)
        assert sorted(order) == sorted(servers)
        assert order == api_proxy.spread(list(reversed(servers)), node)
        first[order[0]] += 1
    assert set(first) == set(servers)
    assert min(first.values()) > 50
    assert api_proxy.spread([], "node") == []
