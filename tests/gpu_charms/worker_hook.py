#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The kubernetes-worker charm's real `gpu-quarantined` hook or `readmit-gpu` action.

The hook runs as the fake juju-exec asks; the action as `juju run <unit> readmit-gpu
confirm=yes` would have the unit agent start it, in a process of its own.

Started (exec'd) by the juju-exec of tests/gpu_charms/worker_unit.py with
`charms/kubernetes-worker/src`, `lib` and `tests` on PYTHONPATH, as Juju's unit agent
starts a hook: a fresh Python process that imports ops and the charm. The charm runs
under ops.testing on the state the joined worker unit has (tests/fakes/worker_scenario.py
`joined_state`: the `cluster` relation with the control plane's data, the join secret;
the unit's own databag as its earlier hooks left it), with its Host the machine's file
system `<root>/host`, where the real watcher keeps its state file. What it wrote to its
unit databag and its status go to `<root>/worker-hook.json` (what Juju would share with
the control plane when the hook ends), with CLOCK_MONOTONIC at its start, once ops and
the charm are imported, and at its end.

The action (`worker_hook.py <root> readmit-gpu`) runs on the machine a joined A10G worker
has (tests/unit/kubernetes_worker/test_gpu_charm.py's fixtures: the g5.12xlarge sysfs tree,
driver 580 loaded, containerd with the fake ctr that runs the gate's CUDA, DCGM and NCCL
checks in their documented forms; kubelet.conf with the node's certificate from the
bench's API server, as the fake kubeadm join leaves it), built in this process before its
clock starts. `systemctl stop|start gpu-k8s-gpu-watcher` goes to the bench, which owns the
real watcher process as systemd would (`<root>/systemd.sock`). The gate's end is read by
wrapping gpu_gate.run (a timing probe: its result is returned unchanged).

The automatic repair (`worker_hook.py <root> repair`): the unit's next hook after the
quarantine (update-status) on the same machine, with the driver naming GPUs 0 and 1 as the
watcher's machine does; its result goes to `<root>/worker-repair.json`.

    worker_hook.py <root> [readmit-gpu | repair]
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

STARTED = time.monotonic()

import dataclasses  # noqa: E402

import gpu_gate  # noqa: E402
import gpu_health  # noqa: E402
import toolkit  # noqa: E402
from ops import testing  # noqa: E402
from scenario.state import _Event  # noqa: E402

import charm  # noqa: E402
from charms.gpu_k8s.v0.system import CommandError  # noqa: E402
from fakes.containerd_ctr import FakeCtr  # noqa: E402
from fakes.machine import FakeMachine  # noqa: E402
from fakes.nvidia_driver import FakeDriver  # noqa: E402
from fakes.sysfs import PCI_IDS, build_machine  # noqa: E402
from fakes.worker_scenario import joined_state  # noqa: E402

IMPORTED = time.monotonic()


class _Api:
    """What `joined_state` asks of the API server: the workers' kubeconfig (pre-made)."""

    def __init__(self, kubeconfig: str):
        self._kubeconfig = kubeconfig

    def kubeconfig(self, token: str) -> str:
        return self._kubeconfig


class _Cluster:
    """The bench's API server as the fake kubeadm join needs it (`FakeMachine.cluster`)."""

    def __init__(self, setup: dict):
        self.url, self._node = setup["server"], setup["node"]
        self._certificate = setup["node-certificate"]
        self.tls = type("Tls", (), {"ca_pem": setup["ca"]})()

    def node_certificate(self, node: str) -> str:
        assert node == self._node, node  # the bench signed this node's only
        return self._certificate


def _state(setup: dict) -> testing.State:
    state = joined_state(_Api(setup["kubeconfig"]), config=setup["config"])
    (cluster,) = state.relations
    cluster = dataclasses.replace(cluster, local_unit_data=setup["bag"])
    return dataclasses.replace(state, relations={cluster})


def _write(root: Path, result: dict, name: str) -> None:
    path = root / name
    path.with_suffix(".tmp").write_text(json.dumps(result))
    path.with_suffix(".tmp").rename(path)  # whole, for the control plane's side


def _systemd(root: Path, watcher: str, machine: FakeMachine):
    """The watcher unit's `systemctl`, answered by the bench's service manager.

    `stop`, `start`, `restart` and `is-active` go to the bench, which owns the watcher's
    process as systemd would; `enable` changes nothing there. Any other unit's (containerd's
    restart in a hook's reconcile) as the fake machine's systemd answers it.
    """
    others = machine._systemctl

    def systemctl(argv: list[str], _input: str | None) -> str:
        if watcher not in argv:
            return others(argv, _input)
        verb = [a for a in argv[1:] if not a.startswith("-")][0]
        assert verb in ("stop", "start", "restart", "is-active", "enable"), argv
        if verb == "enable":
            return ""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(root / "systemd.sock"))
            sock.sendall(f"{verb}\n".encode())
            answer = sock.makefile().readline()
        if verb == "is-active" and answer == "inactive\n":
            raise CommandError(argv, 3, "")  # systemctl is-active's exit for a stopped unit
        assert answer in ("ok\n", "active\n"), (argv, answer)
        return ""

    return systemctl


def hook(root: Path) -> int:
    """`gpu-quarantined`, as the watcher's juju-exec asks."""
    setup = json.loads((root / "worker-unit.json").read_text())
    machine = FakeMachine(root / "host", hostname=setup["node"])
    charm.KubernetesWorkerCharm.host_factory = lambda self: machine.host()
    ctx = testing.Context(charm.KubernetesWorkerCharm, unit_id=int(setup["unit"].split("/")[1]))
    # `charm.on.gpu_quarantined`, as ops emits it for JUJU_DISPATCH_PATH=hooks/gpu-quarantined
    # (tests/unit/kubernetes_worker/test_gpu_charm.py gpu_quarantined)
    out = ctx.run(_Event("gpu_quarantined"), _state(setup))
    (cluster,) = out.relations
    result = {
        "started": STARTED,
        "imported": IMPORTED,
        "ended": time.monotonic(),
        "bag": dict(cluster.local_unit_data),
        "status": [out.unit_status.name, out.unit_status.message],
    }
    _write(root, result, "worker-hook.json")
    return 0


def _gpu_worker(root: Path, setup: dict) -> dict[str, float]:
    """The machine a joined A10G worker has, as the charm's Host; where the gate's end goes.

    test_gpu_charm.py's `driver` and `ctr`: the g5.12xlarge sysfs tree, driver 580,
    containerd with the fake ctr, kubelet.conf from the bench's API server. The driver
    names its GPUs 0 and 1 with the watcher machine's UUIDs (`setup["uuids"]`), so the
    GPU the watcher quarantined is on the machine after its repair.
    """
    machine = FakeMachine(root / "host", hostname=setup["node"])
    charm.KubernetesWorkerCharm.host_factory = lambda self: machine.host()
    uuids = {int(index): uuid for index, uuid in (setup.get("uuids") or {}).items()}

    class Driver(FakeDriver):
        @staticmethod
        def uuid(index: int) -> str:
            return uuids.get(index) or FakeDriver.uuid(index)

    driver = Driver(machine)
    driver.serve_toolkit()  # a hook's reconcile checks the toolkit's packages
    build_machine(machine.path("/sys"), "g5-a10g", module_loaded=False)
    machine.write("/usr/share/misc/pci.ids", PCI_IDS)
    machine.write("/sys/class/dmi/id/product_name", "g5.12xlarge\n")  # EC2's DMI name
    driver.preinstall("580")
    machine.dpkg["containerd"] = next(iter(machine.archive["containerd"].values()))
    machine.dpkg |= dict.fromkeys(toolkit.TOOLKIT_PACKAGES, toolkit.TOOLKIT_VERSION)
    FakeCtr(machine, driver)
    machine.cluster = _Cluster(setup)
    machine._kubelet_bootstrapped(  # what the fake kubeadm join leaves: kubelet.conf
        {
            "discovery": {"bootstrapToken": {"apiServerEndpoint": "10.0.0.1:6443"}},
            "nodeRegistration": {"name": setup["node"]},
        }
    )
    machine.on("systemctl", _systemd(root, f"{gpu_health.SERVICE}.service", machine))
    marks: dict[str, float] = {}
    gate = gpu_gate.run

    def timed_gate(*args, **kwargs):
        result = gate(*args, **kwargs)
        marks["gate"] = time.monotonic()
        return result

    gpu_gate.run = timed_gate
    return marks


def readmit_gpu(root: Path) -> int:
    """`readmit-gpu confirm=yes` on the joined A10G machine, after the gate's checks."""
    setup = json.loads((root / "worker-unit.json").read_text())
    marks = _gpu_worker(root, setup)
    state = _state(setup)
    ctx = testing.Context(charm.KubernetesWorkerCharm, unit_id=int(setup["unit"].split("/")[1]))
    ready = time.monotonic()
    out = ctx.run(ctx.on.action("readmit-gpu", params={"confirm": "yes"}), state)
    (cluster,) = out.relations
    result = {
        "started": STARTED,
        "imported": IMPORTED,
        "ready": ready,
        "gate": marks["gate"],
        "ended": time.monotonic(),
        "bag": dict(cluster.local_unit_data),
        "results": ctx.action_results,
    }
    _write(root, result, "worker-action.json")
    return 0


def repair(root: Path) -> int:
    """The next hook after the quarantine (update-status): the automatic repair.

    gpu_repairs.step with the unit's `gpu-auto-repair` (the bench's: reset): the turn (a
    unit alone takes it at once), the drain as the node, the GPU's reset by the fake
    driver with the GPU clients paused, the gate, the readmission and `gpu-quarantine: []`.
    """
    setup = json.loads((root / "worker-unit.json").read_text())
    marks = _gpu_worker(root, setup)
    state = _state(setup)
    ctx = testing.Context(charm.KubernetesWorkerCharm, unit_id=int(setup["unit"].split("/")[1]))
    ready = time.monotonic()
    out = ctx.run(ctx.on.update_status(), state)
    (cluster,) = out.relations
    result = {
        "started": STARTED,
        "imported": IMPORTED,
        "ready": ready,
        "gate": marks.get("gate"),  # None: no gate ran (the bench says why)
        "ended": time.monotonic(),
        "bag": dict(cluster.local_unit_data),
        "status": [out.unit_status.name, out.unit_status.message],
    }
    _write(root, result, "worker-repair.json")
    return 0


ENTRIES = {"readmit-gpu": readmit_gpu, "repair": repair}


if __name__ == "__main__":
    root = Path(sys.argv[1])
    sys.exit(ENTRIES[sys.argv[2]](root) if sys.argv[2:] else hook(root))
