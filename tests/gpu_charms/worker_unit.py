# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The joined kubernetes-worker unit on the GPU watcher's machine, as Juju would run its hooks.

Shared by tests/bench/bench_gpu_watcher.py and tests/functional/test_gpu_quarantine_chain.py.
`joined` writes what the unit's hook process needs (`<root>/worker-unit.json`: its name,
node, config, the databag a joined worker of this revision has, the API server's address
and the node's certificate); `juju_exec` puts on the watcher's PATH a `juju-exec` that runs
the worker charm's real `gpu-quarantined` hook in the process it starts (worker_hook.py),
whose result `hook_result` reads (`<root>/worker-hook.json`, written whole).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from gpu_watcher_machine import GPUS, OWN, UNIT, Machine, juju_exec_program

from fakes.worker_scenario import SA_TOKEN

ROOT = Path(__file__).resolve().parents[2]
HOOK = Path(__file__).resolve().parent / "worker_hook.py"
# What a joined worker of this revision has published (kubernetes_cluster.publish_node):
# the node it registered, acting as its kubelet. The leader saw it before the fault.
JOINED = {"node-name": OWN, "node-identity": "true"}
# The worker charm's processes: its modules, the libraries, the fakes (worker_hook.py).
WORKER_PATH = os.pathsep.join(
    str(p) for p in (ROOT / "charms" / "kubernetes-worker" / "src", ROOT / "lib", ROOT / "tests")
)


def joined(box: Machine, config: dict | None = None) -> dict:
    """The unit's setup for its hook processes, written to `<root>/worker-unit.json`."""
    assert box.api.tls is not None
    unit = {"node": OWN, "unit": UNIT, "config": config or {}, "bag": JOINED}
    unit["uuids"] = {index: uuid for index, uuid, _ in GPUS}  # the hook machine's driver's
    unit["kubeconfig"] = box.api.kubeconfig(token=SA_TOKEN)
    unit |= {"server": box.api.url, "ca": box.api.tls.ca_pem}
    unit["node-certificate"] = box.api.node_certificate(OWN)
    (box.root / "worker-unit.json").write_text(json.dumps(unit))
    return unit


def juju_exec(box: Machine) -> None:
    """A `juju-exec` on the watcher's PATH that runs the worker charm's hook.

    It records the call (gpu_watcher_machine.juju_exec_program), then becomes the hook
    process (worker_hook.py, the worker charm's modules on its path) and exits with its
    status, as juju-exec passes on the exit code of what it ran.
    """
    juju_exec_program(
        box,
        f"os.environ['PYTHONPATH'] = {WORKER_PATH!r}\n"
        f"os.execv({sys.executable!r}, [{sys.executable!r}, {str(HOOK)!r}, {str(box.root)!r}])\n",
    )


def hook_result(box: Machine) -> dict | None:
    """What the last `gpu-quarantined` hook left (its databag, status, times), or None yet."""
    path = box.root / "worker-hook.json"
    return json.loads(path.read_text()) if path.exists() else None
