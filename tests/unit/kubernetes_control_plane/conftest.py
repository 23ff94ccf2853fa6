"""Fixtures for the kubernetes-control-plane charm: a fake machine and a fake API server."""

from __future__ import annotations

import pytest
from ops import testing

import charm
from fakes.control_plane import Clock, ControlPlaneMachine
from fakes.kube_apiserver import FakeKubeApiServer


@pytest.fixture
def api():
    with FakeKubeApiServer() as server:
        yield server


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(charm.KubernetesControlPlaneCharm, "clock", staticmethod(c))
    return c


@pytest.fixture
def machine(tmp_path, api, monkeypatch, clock):
    m = ControlPlaneMachine(tmp_path / "root", api)
    monkeypatch.setattr(
        charm.KubernetesControlPlaneCharm, "host_factory", staticmethod(lambda: m.machine.host())
    )
    return m


@pytest.fixture
def ctx(machine):
    return testing.Context(charm.KubernetesControlPlaneCharm)
