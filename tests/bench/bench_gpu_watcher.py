#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""From a fatal XID to the NoExecute taint, to readmission by hand and by the automatic repair.

What is real: the GPU health watcher (charms/kubernetes-worker/src/gpu_watcher.py) as a
process with the defaults systemd gives it (gpu_health.unit_text: `--interval 5`, the
default `--tick 0.5`) on the machine tests/gpu_watcher_machine.py builds (a file for
/dev/kmsg, a fake nvidia-smi, the kubelet's checkpoint); the fake API server over TLS
(the watcher as the node, Node authorizer and NodeRestriction); both charms' code under
ops.testing. What is not: Juju's hook scheduling and machine lock, the delivery of
relation data between units, the hardware.

Each run bootstraps the control-plane leader (its install hook, as
tests/unit/kubernetes_control_plane/conftest.py builds it: tests/gpu_charms/
control_plane.py) against the watcher's API server, lets it see the joined worker's
databag, then appends XID 79 (fallen off the bus, fixture line) stamped with the kernel's
clock and times, from that moment:

1. quarantine: the Node cordoned with GpuHealthy=False and the GPU's pod evicted (read on
   the API server as admin every 10 ms);
2. the watcher's `juju-exec -u <unit> JUJU_DISPATCH_PATH=hooks/gpu-quarantined ./dispatch`:
   the juju-exec on its PATH records the call and becomes the hook process
   (tests/gpu_charms/worker_hook.py, the worker charm's modules on its path, as the
   unit agent starts a hook): the worker charm's real `gpu_quarantined` on the state a
   joined worker has (tests/fakes/worker_scenario.py), its Host the machine's files where
   the watcher keeps its state; it publishes `gpu-quarantine`;
3. the leader's real `workers` relation-changed with that databag, in this process (the
   control plane's: the charms' modules share names, so the worker's run elsewhere; the
   fake API server lives here): one GET, one PATCH;
4. the taint read on the API server.
Between 2 and 3 Juju delivers the relation data (seconds, once no other hook holds the
leader's machine lock); here the bench notices the hook's output within 10 ms.

Readmission: right after the taint, through the worker's real `readmit-gpu` action
(operator_actions.py) in a process of its own, as the unit agent starts it for `juju run
<unit> readmit-gpu confirm=yes` (tests/gpu_charms/worker_hook.py): the repair gate
on the joined A10G machine's 4 GPUs, with the fake ctr printing the CUDA sample's,
`dcgmi diag -r 2 -j`'s and all_reduce_perf's documented outputs (the checks themselves
take minutes on GPUs: not timed), then the readmission (gpu_health.readmit: systemctl
stop of the watcher, answered by this process as systemd would, its state cleared, the
watcher started, GpuHealthy=True as the node, uncordon) and `gpu-quarantine: []`; then
the leader's relation-changed with that databag lifting the taint, read on the API server.
Timed from the gate's end (gpu_gate.run's return, read in the action's process).

Readmission through the automatic repair (issue 32 items 3-4, no human command): a run of
its own with the unit's `gpu-auto-repair=reset` and XID 46 (RESET_GPU in the catalog), to
the taint as above; then the worker's next hook (update-status) in a process of its own
(tests/gpu_charms/worker_hook.py `repair`): its reconcile's gpu_repairs.step takes the turn
(a unit alone holds it at once), drains the node as its kubelet, resets the GPU through the
fake driver's `nvidia-smi -r` with the GPU clients paused (the real watcher honours the
pause file), runs the gate (the fake ctr as above), readmits and publishes
`gpu-quarantine: []`; then the leader's relation-changed lifting the taint. Timed from the
fault to the taint's removal; under Juju the wait for that next hook (update-status-hook-
interval) comes on top.

Issue 32's target: fault to taint < 60 s.

    python tests/bench/bench_gpu_watcher.py [--runs 5] [--smoke]

`--smoke`: one run (each code path once; the numbers are not to quote).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# actions/ for tf_demo.free_ports (gpu_watcher_machine)
for extra in (ROOT / "tests", ROOT / "lib", ROOT / "actions"):
    sys.path.insert(0, str(extra))

from gpu_charms.control_plane import leader  # noqa: E402
from gpu_charms.worker_unit import HOOK, WORKER_PATH, hook_result, joined, juju_exec  # noqa: E402
from gpu_watcher_machine import (  # noqa: E402
    GPUS,
    OWN,
    UNIT,
    Machine,
    gpu_machine,
    juju_exec_calls,
    start,
    xid_line,
)
from run import options  # noqa: E402

from charms.gpu_k8s.v0.kubernetes_cluster import QUARANTINE_TAINT  # noqa: E402


@contextlib.contextmanager
def systemd(box: Machine) -> Iterator[None]:
    """The watcher's service manager: `systemctl` of its unit from the worker's processes.

    systemctl asks systemd, another process, to stop or start the unit and returns when
    the job is done; here this process, which owns the watcher, does it on `<root>/
    systemd.sock` (one line, the verb; `ok` once done, `active` or `inactive` for
    is-active) with the options it was started with (tests/gpu_watcher_machine.start).
    """
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(box.root / "systemd.sock"))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the run is over
                return
            with conn:
                verb = conn.makefile().readline().strip()
                if verb == "is-active":
                    running = box.process is not None and box.process.poll() is None
                    conn.sendall(b"active\n" if running else b"inactive\n")
                    continue
                if verb in ("stop", "restart"):
                    box.stop()
                if verb in ("start", "restart"):
                    start(box, **(box.started_with or {}))
                known = verb in ("stop", "start", "restart")
                conn.sendall(b"ok\n" if known else b"unknown\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept() (Linux)
        server.close()
        thread.join(timeout=10)


def worker_process(box: Machine, entry: str) -> dict:
    """The worker's `readmit-gpu` action or `repair` hook in its own process; its result.

    As the unit agent starts `juju run <unit> readmit-gpu confirm=yes`, or the unit's next
    hook (update-status) that repairs (tests/gpu_charms/worker_hook.py).
    """
    env = {**os.environ, "PYTHONPATH": WORKER_PATH}
    argv = [sys.executable, str(HOOK), str(box.root), entry]
    subprocess.run(argv, env=env, check=True, timeout=120)
    written = {"readmit-gpu": "worker-action.json", "repair": "worker-repair.json"}[entry]
    return json.loads((box.root / written).read_text())


def _poll(check, timeout: float = 120.0) -> float:
    """CLOCK_MONOTONIC when check() first holds, read every 10 ms (the read's time included)."""
    begin = time.monotonic()
    while not check():
        if time.monotonic() - begin > timeout:
            raise TimeoutError("not within 2 minutes")
        time.sleep(0.01)
    return time.monotonic()


def _quarantined(box: Machine) -> bool:
    """The watcher's writes: the Node cordoned with GpuHealthy=False, the GPU's pod gone."""
    pod = f"/api/v1/namespaces/team-a/pods/gpu1-job-{OWN}"
    return box.quarantined() and box.api.get_object(pod) is None


def _tainted(box: Machine) -> bool:
    taints = (box.node().get("spec") or {}).get("taints") or []
    return any(t.get("key") == QUARANTINE_TAINT["key"] for t in taints)


def _to_taint(box: Machine, cp, unit: dict, xid: str) -> dict:
    """From XID `xid` on GPU 1 to the NoExecute taint; the moments and the hook's result.

    The watcher started as systemd runs it, the fault's line stamped with the kernel's
    clock, then one loop every 10 ms: the quarantine's writes and the worker hook's end
    (then the leader's relation-changed at once), whichever comes first.
    """
    cp.changed(unit["bag"])
    juju_exec(box)
    start(box, interval=5.0, tick=0.5, unit=UNIT, hook_retry=5.0)  # as systemd runs it
    time.sleep(1.0)  # in its loop, between two reads
    fault = time.monotonic()
    box.kernel(xid_line(xid, gpu=1), usec=int(fault * 1e6))
    seen: dict[str, float] = {}
    hook: dict = {}
    delivered = cp_done = 0.0
    while "quarantine" not in seen or "hook" not in seen:
        assert time.monotonic() - fault < 120, f"not within 2 minutes: {seen}"
        if "quarantine" not in seen and _quarantined(box):
            seen["quarantine"] = time.monotonic()
        if "hook" not in seen and (result := hook_result(box)) is not None:
            seen["hook"] = delivered = time.monotonic()  # the leader's hook starts
            hook = result
            assert json.loads(hook["bag"]["gpu-quarantine"]) == [GPUS[1][1]], hook
            cp.changed(hook["bag"])
            cp_done = time.monotonic()
            continue  # read the API again before sleeping
        time.sleep(0.01)
    return {
        "fault": fault,
        "quarantined": seen["quarantine"],
        "asked": juju_exec_calls(box)[0]["monotonic"],  # CLOCK_MONOTONIC, as `fault`
        "delivered": delivered,
        "cp_done": cp_done,
        "tainted": _poll(lambda: _tainted(box)),
        "hook": hook,
    }


def _readmitted(box: Machine) -> None:
    """The node back in service: uncordoned, GpuHealthy=True, GPU 1 not quarantined."""
    node = box.node()
    condition = box.condition() or {}
    assert not node["spec"].get("unschedulable") and condition.get("status") == "True"
    assert GPUS[1][1] not in box.state()["quarantined"]


def _readmission(box: Machine, cp, unit: dict, hook: dict, entry: str) -> tuple[dict, dict, float]:
    """The worker's `entry` process, then the leader's relation-changed with its databag.

    After the quarantine's hook: its result, and seconds per step (`process`, of which
    `imports`, `setup` and up `to gate`; `worker readmission` from the gate's end to the
    process's, the `delivery` to the leader, its `control-plane readmission`, and from
    the gate's end to no taint, `readmission`), and the moment the taint was gone.
    """
    (box.root / "worker-unit.json").write_text(json.dumps({**unit, "bag": hook["bag"]}))
    with systemd(box):
        result = worker_process(box, entry)
    assert result["bag"]["gpu-quarantine"] == "[]", result
    delivered = time.monotonic()
    cp.changed(result["bag"])
    untainted = _poll(lambda: not _tainted(box))
    _readmitted(box)
    return (
        result,
        {
            "process": result["ended"] - result["started"],
            "imports": result["imported"] - result["started"],
            "setup": result["ready"] - result["imported"],
            "to gate": result["gate"] - result["ready"],
            "worker readmission": result["ended"] - result["gate"],
            "delivery": delivered - result["ended"],
            "control-plane readmission": untainted - delivered,
            "readmission": untainted - result["gate"],
        },
        untainted,
    )


def one_run(root: Path) -> dict:
    """Seconds from the fault (or from the gate's pass) to each step."""
    with gpu_machine(root) as box, leader(box.api, root / "cp", UNIT) as cp:
        unit = joined(box)
        t = _to_taint(box, cp, unit, "79")
        fault, asked, hook = t["fault"], t["asked"], t["hook"]
        # the worker's readmit-gpu action (its gate, then the readmission and its
        # `gpu-quarantine: []`), then the leader's relation-changed with that databag
        action, steps, _ = _readmission(box, cp, unit, hook, "readmit-gpu")
        return {
            "quarantine": t["quarantined"] - fault,
            "juju-exec": asked - fault,
            "worker hook": hook["ended"] - asked,
            "hook imports": hook["imported"] - asked,
            "delivery": t["delivered"] - hook["ended"],
            "control-plane hook": t["cp_done"] - t["delivered"],
            "taint": t["tainted"] - fault,
            **{f"action {k}": v for k, v in steps.items()},
            "status": hook["status"],
            "readmitted": action["results"]["readmitted"],
        }


# The automatic path: a fault the catalog says a GPU reset clears (XID 46, "GPU stopped
# processing", bucket RESET_GPU in xid_catalog.json), with the unit's gpu-auto-repair=reset
AUTO_XID = "46"
AUTO_CONFIG = {"gpu-auto-repair": "reset"}


def auto_run(root: Path) -> dict:
    """Seconds from the fault to readmission through the automatic repair, and its steps.

    The worker's next hook (update-status under Juju, every update-status-hook-interval:
    5m by default, juju environs/config/config.go as backups.py cites it)
    starts as soon as the taint is read here: Juju's wait for it is not in the numbers.
    """
    with gpu_machine(root) as box, leader(box.api, root / "cp", UNIT) as cp:
        unit = joined(box, AUTO_CONFIG)
        t = _to_taint(box, cp, unit, AUTO_XID)
        hook = t["hook"]
        assert hook["status"][0] == "waiting" and "reset" in hook["status"][1], hook
        repair, steps, lifted = _readmission(box, cp, unit, hook, "repair")
        (record,) = box.state()["repairs"]
        assert (record["method"], record["result"]) == ("reset", "ok"), record
        return {
            "taint": t["tainted"] - t["fault"],
            **{f"repair {k}": v for k, v in steps.items()},
            "fault to readmission": lifted - t["fault"],
            "status": repair["status"],
        }


def _stats(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s, max {max(values):.2f} s"


def _repeat(count: int, run: Callable[[Path], dict], line: Callable[[int, dict], str]) -> list:
    """`run` `count` times, each in a directory of its own, each printed by `line`."""
    done: list[dict] = []
    for n in range(count):
        with tempfile.TemporaryDirectory(prefix="bench-watcher-") as tmp:
            done.append(run(Path(tmp)))
        print(line(n + 1, done[-1]))
    return done


def _columns(runs: list[dict]) -> Callable[[str], str]:
    """The median and max of one key over `runs`."""
    return lambda key: _stats([r[key] for r in runs])


def main(argv: list[str]) -> int:
    """Run and print."""
    parser = options("Time a fatal XID to the taint and readmission.")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs = 1
    runs = _repeat(
        args.runs,
        one_run,
        lambda n, r: (
            f"run {n}: fault -> quarantine {r['quarantine']:.2f} s, -> juju-exec "
            f"{r['juju-exec']:.2f} s, worker hook {r['worker hook']:.2f} s, control-plane hook "
            f"{r['control-plane hook']:.2f} s, fault -> taint {r['taint']:.2f} s; gate passed "
            f"-> taint lifted {r['action readmission']:.2f} s"
        ),
    )
    print(f"worker status after its hook: {runs[-1]['status'][0]}: {runs[-1]['status'][1]}")
    col = _columns(runs)

    print(f"\nXID 79 line written -> NoExecute taint on the Node, {args.runs} runs:")
    print(f"  fault -> quarantine (cordon, GpuHealthy=False, eviction): {col('quarantine')}")
    print(f"  fault -> watcher's juju-exec:                           {col('juju-exec')}")
    print(f"  worker's gpu-quarantined hook (process start included): {col('worker hook')}")
    print(f"    of which Python's start and imports (ops, the charm): {col('hook imports')}")
    print(f"  hook end -> leader's hook starts (a 10 ms poll, not Juju):  {col('delivery')}")
    print(f"  leader's workers relation-changed:                      {col('control-plane hook')}")
    print(
        f"  fault -> taint read on the API server:                  {col('taint')} (target < 60 s)"
    )
    print(f"\nreadmit-gpu action -> taint lifted, {args.runs} runs:")
    print(f"  worker's readmit-gpu action (process start included):   {col('action process')}")
    print(f"    of which Python's start and imports (ops, the charm): {col('action imports')}")
    print(f"    of which the bench builds the A10G machine's fakes:   {col('action setup')}")
    print(f"    of which the gate (fake ctr: CUDA x4, DCGM, NCCL):    {col('action to gate')}")
    ended = col("action worker readmission")
    print(f"  gate passed -> action's end (readmission, databag):     {ended}")
    print(f"  action end -> leader's hook starts (not Juju):          {col('action delivery')}")
    print(
        f"  leader's relation-changed lifting the taint:            "
        f"{col('action control-plane readmission')}"
    )
    print(f"  gate passed -> no taint on the API server:              {col('action readmission')}")
    print(f"readmit-gpu's result: readmitted {runs[-1]['readmitted']}")

    autos = _repeat(
        args.runs,
        auto_run,
        lambda n, a: (
            f"auto run {n}: fault -> taint {a['taint']:.2f} s, repair hook "
            f"{a['repair process']:.2f} s, fault -> taint lifted {a['fault to readmission']:.2f} s"
        ),
    )
    auto = _columns(autos)

    print(
        f"\nXID {AUTO_XID} line written -> readmission by the automatic repair "
        f"(gpu-auto-repair=reset), {args.runs} runs:"
    )
    print(f"  fault -> taint read on the API server:                  {auto('taint')}")
    print(f"  worker's next hook, update-status (process included):   {auto('repair process')}")
    print(f"    of which Python's start and imports (ops, the charm): {auto('repair imports')}")
    print(f"    of which the bench builds the A10G machine's fakes:   {auto('repair setup')}")
    print(f"    of which reconcile, turn, drain, reset, gate (fake):  {auto('repair to gate')}")
    ended = auto("repair worker readmission")
    print(f"  gate passed -> hook's end (readmission, databag):       {ended}")
    print(f"  hook end -> leader's hook starts (not Juju):            {auto('repair delivery')}")
    lifted = auto("repair control-plane readmission")
    print(f"  leader's relation-changed lifting the taint:            {lifted}")
    print(
        f"  gate passed -> no taint on the API server:              {auto('repair readmission')}"
    )
    print(
        f"  fault -> no taint on the API server:                    {auto('fault to readmission')}"
    )
    print("    plus, under Juju, the wait for the worker's next hook (update-status every")
    print("    update-status-hook-interval, 5 min by default): not in these numbers")
    print(f"worker status after the repair: {autos[-1]['status'][0]}: {autos[-1]['status'][1]}")
    print(
        "\nreal: the watcher process and its poll loop (--interval 5, --tick 0.5), both charms' "
        "code under ops.testing (the worker's hook in its own process started by juju-exec, "
        "its readmit-gpu action and the update-status hook that repairs each in its own process, "
        "the leader's hooks in this one), the fake "
        "API server (TLS, Node authorizer, admission). "
        "Not real: Juju's hook scheduling, the machine lock, relation-data delivery between "
        "units (seconds under Juju when no other hook holds the lock), the hardware, and the "
        "gate's checks (a fake ctr prints their outputs: CUDA, dcgmi diag -r 2 and NCCL take "
        "minutes on GPUs), and the GPU reset (the fake driver's nvidia-smi -r)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
