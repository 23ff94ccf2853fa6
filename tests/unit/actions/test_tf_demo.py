# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The local demo's port picker, which the tests' pods, servers and the benches use too.

An ephemeral port, released, may go to any process's next outgoing connection before the
server it was picked for binds it ("Could not start gRPC server", a restart counted):
`tf_demo.free_ports` picks none of them.
"""

from __future__ import annotations

import socket

import pytest
import tf_demo
from tf_demo import free_ports


def test_ports_are_distinct_free_and_none_the_kernel_hands_out_to_connections():
    low, high = tf_demo.ephemeral_range()
    ports = free_ports(40)
    assert len(set(ports)) == 40
    assert all(tf_demo.LOWEST_PORT <= port < low or high < port <= 65535 for port in ports)
    for port in ports:  # free on every address, as TensorFlow binds 0.0.0.0:<port>
        with socket.socket() as s:
            s.bind(("", port))
    with socket.socket() as s:  # one that is taken is never picked
        s.bind(("", ports[0]))
        s.listen()
        assert ports[0] not in {p for _ in range(20) for p in free_ports(40)}


def test_the_range_is_read_from_the_kernel_and_ports_above_it_are_used_too(tmp_path, monkeypatch):
    """A machine whose ephemeral ports start low (1024) still gets ports: above the range."""
    sysctl = tmp_path / "ip_local_port_range"
    sysctl.write_text("1024\t60999\n")  # as /proc prints it
    monkeypatch.setattr(tf_demo, "EPHEMERAL", sysctl)
    assert tf_demo.ephemeral_range() == (1024, 60999)
    assert all(60999 < port <= 65535 for port in free_ports(20))


def test_no_ports_outside_the_kernel_s_range_is_an_error_that_names_it(tmp_path, monkeypatch):
    sysctl = tmp_path / "ip_local_port_range"
    sysctl.write_text("1024 65535\n")
    monkeypatch.setattr(tf_demo, "EPHEMERAL", sysctl)
    with pytest.raises(RuntimeError, match="no 2 free TCP ports outside .* 1024-65535"):
        free_ports(2)


def test_without_the_sysctl_ports_come_from_below_linux_s_default_start(tmp_path, monkeypatch):
    """Not Linux (macOS hands out 49152-65535): only ports below 32768."""
    monkeypatch.setattr(tf_demo, "EPHEMERAL", tmp_path / "absent")
    assert all(tf_demo.LOWEST_PORT <= port < 32768 for port in free_ports(20))
