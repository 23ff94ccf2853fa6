"""The charm's edits of the GPU health watcher's state file (gpu_health.py).

The watcher (a systemd service) writes its whole state each pass until it exits; the
charm changes the file only while it is stopped, reading it after the stop.
"""

from __future__ import annotations

import json

import gpu_health
import gpu_watcher

from charms.gpu_k8s.v0 import kube_objects
from charms.gpu_k8s.v0.system import SYSTEMCTL
from fakes.machine import FakeMachine

FAULT = {"at": "2026-11-27T10:00:05Z", "gpu": "2", "uuid": "GPU-2", "reason": "Xid79"}


def test_a_fault_the_watcher_wrote_just_before_it_stopped_survives_the_charms_edit(tmp_path):
    machine = FakeMachine(tmp_path / "root")
    machine.write(gpu_health.SERVICE_FILE, "[Service]\nExecStart=/bin/true\n")
    host = machine.host()
    host.run(SYSTEMCTL, "daemon-reload")
    host.run(SYSTEMCTL, "start", f"{gpu_health.SERVICE}.service")
    machine.write(gpu_health.STATE, json.dumps({"events": [], "quarantined": {}}))
    systemctl = machine.runner.handlers["systemctl"]

    def stop_after_a_last_pass(argv, stdin):
        if "stop" in argv and machine.services[gpu_health.SERVICE].active:
            # the watcher's pass in flight when the stop came: its write lands before it exits
            state = json.loads(machine.read(gpu_health.STATE))
            state["events"].append(FAULT)
            state["quarantined"]["GPU-2"] = {**FAULT, "index": "2", "action": "reboot"}
            machine.write(gpu_health.STATE, json.dumps(state))
        return systemctl(argv, stdin)

    machine.on("systemctl", stop_after_a_last_pass)
    record = {"time": "2026-11-27T10:00:06Z", "gpu": "1", "gpu_uuid": "GPU-1"}
    gpu_health.record_repairs(host, [{**record, "method": "reset", "result": "failed"}])

    state = json.loads(machine.read(gpu_health.STATE))
    assert state["events"] == [FAULT]  # kept: read after the stop
    assert "GPU-2" in state["quarantined"]
    assert [r["gpu_uuid"] for r in state["repairs"]] == ["GPU-1"]
    assert machine.services[gpu_health.SERVICE].active  # started again


def test_the_history_keeps_failures_of_the_last_day_past_its_50_and_trims_the_rest(tmp_path):
    """Escalation reads failures of 24 hours: refusals never trim them; older ones go."""
    machine = FakeMachine(tmp_path / "root")
    machine.write(gpu_health.SERVICE_FILE, "[Service]\nExecStart=/bin/true\n")
    host = machine.host()
    host.run(SYSTEMCTL, "daemon-reload")

    def record(time: str, result: str) -> dict:
        return {"time": time, "gpu": "1", "gpu_uuid": "GPU-1", "method": "reset", "result": result}

    gpu_health.record_repairs(
        host,
        [
            record("2026-11-26T09:00:00Z", "failed"),  # over a day before the newest: trimmed
            record("not a time", "failed"),  # unreadable: trimmed
            record("2026-11-26T11:00:00Z", "failed"),  # within the day: kept
            record("2026-11-26T11:30:00Z", "ok"),  # past the 50: trimmed
        ]
        + [record("2026-11-27T10:00:00Z", "refused")] * 50,
    )

    times = [(r["time"], r["result"]) for r in gpu_health.repairs(host)]
    assert (
        times == [("2026-11-26T11:00:00Z", "failed")] + [("2026-11-27T10:00:00Z", "refused")] * 50
    )


def test_the_watcher_sets_the_one_gpu_healthy_condition_the_charms_read():
    """rereview44b F11: the watcher runs on the machine's python3 without the lib.

    It spells the condition type itself; the charms (gpu_health's readmission, the
    control plane's record of a move, the tensorflow charm's job-status) read
    kube_objects.GPU_HEALTHY, which must be the same word.
    """
    assert gpu_watcher.CONDITION == kube_objects.GPU_HEALTHY
    readmitted = gpu_health._conditions_with_healthy(
        {"status": {"conditions": [{"type": gpu_watcher.CONDITION, "status": "False"}]}},
        "repaired",
        "2026-11-28T07:00:00Z",
    )
    assert [(c["type"], c["status"]) for c in readmitted] == [(gpu_watcher.CONDITION, "True")]
    assert kube_objects.gpu_fault({"status": {"conditions": readmitted}}) is None
