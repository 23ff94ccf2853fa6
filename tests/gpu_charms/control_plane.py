# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The kubernetes-control-plane leader, run with ops.testing against a given fake API server.

Used by tests/bench/bench_gpu_watcher.py and tests/functional/test_gpu_quarantine_chain.py,
in the process that runs the fake API server. The control plane's modules come through
tests/charm_modules.py: the worker charm's modules are named alike, and the worker's hook
runs in the process the watcher's juju-exec starts (tests/gpu_charms/worker_hook.py).
The leader is built as tests/unit/kubernetes_control_plane/conftest.py builds it
(ControlPlaneMachine, FakeEtcd, the release files from a local ManifestServer, its
public address and clock), bootstrapped (install) against the API server the GPU watcher
writes to, and then answers its `workers` relation-changed as Juju runs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

from charm_modules import load, plain_names
from ops import testing

from fakes.addons import EFS_CSI_PATH, ManifestServer
from fakes.control_plane import (
    Clock,
    ControlPlaneMachine,
    existing_cluster,
    peers,
    workers_relation,
)
from fakes.etcd import EtcdPki, FakeEtcd
from fakes.kube_apiserver import FakeKubeApiServer

addons = load("kubernetes-control-plane", "addons")
efs_csi = load("kubernetes-control-plane", "efs_csi")
charm = load("kubernetes-control-plane", "charm")
PUBLIC_ADDRESS = "203.0.113.7"  # as conftest.py: `unit-get public-address` on AWS


class Leader:
    """The leader unit's state between hooks; `changed` runs one relation-changed."""

    def __init__(self, ctx: testing.Context, state: testing.State, worker: str):
        self.ctx, self.state, self.worker = ctx, state, worker
        self.relation: testing.Relation | None = None

    def changed(self, bag: dict[str, str]) -> None:
        """The worker unit's databag changed: Juju runs `workers` relation-changed."""
        unit = int(self.worker.split("/")[1])
        if self.relation is None:
            relation = workers_relation({unit: bag}, app=self.worker.split("/")[0])
            others = list(self.state.relations)
        else:
            relation = dataclasses.replace(
                self.state.get_relation(self.relation.id), remote_units_data={unit: bag}
            )
            others = [r for r in self.state.relations if r.id != relation.id]
        assert isinstance(relation, testing.Relation)
        self.relation = relation
        self.state = dataclasses.replace(self.state, relations=[*others, relation])
        event = self.ctx.on.relation_changed(relation, remote_unit=unit)
        with plain_names("kubernetes-control-plane"):  # what its code imports when it runs
            self.state = self.ctx.run(event, self.state)


@contextlib.contextmanager
def leader(api: FakeKubeApiServer, root: Path, worker: str) -> Iterator[Leader]:
    """A bootstrapped leader of the cluster `api` serves (its install hook run)."""
    releases = ManifestServer()
    with releases, FakeEtcd(EtcdPki()) as etcd, pytest_free_patches() as patch:
        api.available_deployments = True  # a healthy cluster's controllers roll them out
        for name in ("JOBSET", "KUEUE", "CALICO_RELEASE"):
            patch(addons, name, releases.local(getattr(addons, name)))
        patch(efs_csi, "UPSTREAM", f"{releases.url}{EFS_CSI_PATH}")
        cls = charm.KubernetesControlPlaneCharm
        patch(cls, "url_opener", staticmethod(releases.opener(cls.url_opener)))
        patch(cls, "public_address", staticmethod(lambda: PUBLIC_ADDRESS))
        clock = Clock()
        patch(cls, "clock", staticmethod(clock))
        patch(cls, "etcd_url", etcd.url)
        existing_cluster(api)
        machine = ControlPlaneMachine(root, api, etcd=etcd, clock=clock)
        patch(cls, "host_factory", staticmethod(lambda: machine.machine.host()))
        patch(cls, "restart_sleep", staticmethod(machine.kubelet.sync))
        patch(cls, "local_api_server", api.url)
        ctx = _context(cls)
        state = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
        yield Leader(ctx, state, worker)


def _context(cls: type) -> testing.Context:
    """testing.Context(cls), its charmcraft.yaml found beside the charm's module.

    ops.testing finds it through inspect.getfile(cls), which reads
    sys.modules[cls.__module__]: charm_modules.load leaves the control plane's `charm` out
    of sys.modules, so it is there while the Context is made, and only then.
    """
    name, saved = cls.__module__, sys.modules.get(cls.__module__)
    sys.modules[name] = charm
    try:
        return testing.Context(cls)
    finally:
        if saved is None:
            del sys.modules[name]
        else:
            sys.modules[name] = saved


@contextlib.contextmanager
def pytest_free_patches() -> Iterator:
    """setattr, undone on the way out (as pytest's monkeypatch, without pytest)."""
    undo: list[tuple[object, str, object]] = []

    def patch(target: object, name: str, value: object) -> None:
        undo.append((target, name, getattr(target, name)))
        setattr(target, name, value)

    try:
        yield patch
    finally:
        for target, name, value in reversed(undo):
            setattr(target, name, value)
