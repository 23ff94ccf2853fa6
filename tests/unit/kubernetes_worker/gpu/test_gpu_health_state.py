"""The charm's edits of the GPU health watcher's state file (gpu_health.py).

The watcher (a systemd service) writes its whole state each pass until it exits; the
charm changes the file only while it is stopped, reading it after the stop.
"""

from __future__ import annotations

import json

import gpu_health

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
