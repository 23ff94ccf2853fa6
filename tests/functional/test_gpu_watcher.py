"""A failing GPU is quarantined by the node's own watcher within seconds (issue 32 items 1, 2).

The watcher (charms/kubernetes-worker/src/gpu_watcher.py) runs as a real process on the
machine tests/gpu_watcher_machine.py builds (its inputs at the Host boundary, the fake API
server over TLS as the node's kubelet: the Node authorizer and NodeRestriction decide what
it may do, as kube-apiserver would).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import charm_modules
import pytest
from gpu_watcher_machine import (
    ALL,
    GPUS,
    LINES,
    OTHER,
    OWN,
    READY,
    SMI_DRIVER_DOWN,
    SRC,
    UNIT,
    Machine,
    allocation,
    fake_juju_exec,
    gpu_machine,
    gpu_watcher,
    juju_exec_calls,
    program,
    readmit,
    smi_list,
    smi_rows,
    start,
    until,
    watcher_args,
    xid_line,
)
from kubectl_runner import Kubectl

PROMTOOL = shutil.which("promtool")


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Machine]:
    """Two GPU nodes with three pods each (one per GPU, one without); the watcher on the first."""
    with gpu_machine(tmp_path) as box:
        yield box


def test_a_fallen_gpu_quarantines_the_node_and_evicts_only_its_pods(machine):
    start(machine)
    machine.kernel("NVRM: GPU at PCI:0000:3b:00: " + GPUS[1][1])
    machine.kernel(xid_line("79", gpu=1))
    until(lambda: machine.condition() is not None and f"{OWN}/gpu1-job" not in machine.pods())
    condition = machine.condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Xid79")
    assert f"GPU 1 ({GPUS[1][1]})" in condition["message"]
    assert "XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" in condition["message"]
    node = machine.node()
    assert node["spec"]["unschedulable"] is True
    # marked as the charm's drain marks its cordon: readmission lifts it, an operator's stays
    assert node["metadata"]["annotations"]["gpu-k8s/cordoned"] == "true"
    assert READY in node["status"]["conditions"]  # the kubelet's conditions stay
    assert machine.pods() == ALL - {f"{OWN}/gpu1-job"}
    other = machine.node(OTHER)
    assert not other.get("spec", {}).get("unschedulable")
    assert other["status"]["conditions"] == [READY]
    state = machine.state()
    assert state["quarantined"][GPUS[1][1]]["action"] == "reboot"


def test_a_memory_fault_marks_the_quarantine_for_the_gates_memory_test(machine):
    """rereview44c R1: the gate must see DCGM's memory test pass a GPU a memory fault held.

    Marked whatever the record's strength: a row remap failure after an XID 79 keeps the
    reboot; nvidia-smi's double-bit ECC errors mark GPU 0's.
    """
    start(machine)
    machine.kernel(xid_line("79", gpu=1))
    until(lambda: GPUS[1][1] in machine.state()["quarantined"])
    assert "memory" not in machine.state()["quarantined"][GPUS[1][1]]
    machine.smi(smi_rows(dbe={0: 1}, recovery="N/A", remap_failed=1))
    until(lambda: GPUS[0][1] in machine.state()["quarantined"])
    until(lambda: machine.state()["quarantined"][GPUS[1][1]].get("memory"))
    held = machine.state()["quarantined"]
    assert (held[GPUS[1][1]]["action"], held[GPUS[0][1]]["memory"]) == ("reboot", True)


# juju-exec's exact command line: the unit, then one shell command for `bash -s`
# (gpu_watcher.py's docstring: Juju 3.6 juju-exec, ops' dispatch); nothing secret in it
WAKE = ["-u", UNIT, "JUJU_DISPATCH_PATH=hooks/gpu-quarantined ./dispatch"]


def test_a_quarantine_wakes_the_charm_with_juju_exec_once_for_the_taint(machine):
    fake_juju_exec(machine)
    start(machine, unit=UNIT)
    machine.kernel(xid_line("79", gpu=1))
    until(lambda: juju_exec_calls(machine) and machine.quarantined())
    calls = juju_exec_calls(machine)
    assert [c["argv"] for c in calls] == [WAKE]
    assert calls[0]["quarantined"] == [GPUS[1][1]]  # saved before: the hook reads it
    # the same fault again, and an application XID: nothing new for the control plane
    machine.kernel(xid_line("79", gpu=1))
    machine.kernel(xid_line("13", gpu=0))
    until(machine.handled)
    time.sleep(0.3)
    assert len(juju_exec_calls(machine)) == 1
    # a second GPU: asked again, with both in the state file
    machine.kernel(xid_line("79", gpu=0))
    until(lambda: len(juju_exec_calls(machine)) == 2)
    assert juju_exec_calls(machine)[1]["argv"] == WAKE
    assert juju_exec_calls(machine)[1]["quarantined"] == sorted([GPUS[0][1], GPUS[1][1]])
    assert "asked the charm for its hooks/gpu-quarantined hook" in watcher_log(machine)


def test_a_failing_juju_exec_is_retried_three_times_and_never_stops_the_watcher(machine):
    fake_juju_exec(machine, code=1)  # the hook failed (juju-exec passes its exit code on)
    start(machine, unit=UNIT)
    machine.kernel(xid_line("79", gpu=1))
    until(lambda: "gave up asking" in watcher_log(machine))
    assert [c["argv"] for c in juju_exec_calls(machine)] == [WAKE] * 3
    log = watcher_log(machine)
    assert "hooks/gpu-quarantined hook request 3/3 failed: exit 1" in log
    # the watcher goes on: the next fault still quarantines, and asks again
    machine.kernel(xid_line("79", gpu=0))
    until(lambda: len(juju_exec_calls(machine)) == 6)
    assert machine.state()["quarantined"].keys() == {GPUS[0][1], GPUS[1][1]}
    assert machine.process is not None and machine.process.poll() is None


def test_no_juju_exec_on_the_machine_is_logged_and_the_quarantine_holds(machine):
    start(machine, unit=UNIT)  # no juju-exec on its PATH (not a Juju 3 machine)
    machine.kernel(xid_line("79", gpu=1))
    until(lambda: f"{OWN}/gpu1-job" not in machine.pods() and machine.quarantined())
    until(lambda: "gave up asking" in watcher_log(machine))
    assert machine.process is not None and machine.process.poll() is None


def watcher_log(machine: Machine) -> str:
    return (machine.root / "watcher.log").read_text()


def test_application_xids_restart_the_job_and_escalate_on_the_third(machine):
    """Three application faults on one GPU within the window quarantine it (XidRepeated).

    Each XID here is its own fault, a minute apart by the kernel's stamps (one burst of
    lines is one fault: the test below).
    """
    start(machine, escalation="3/10m")
    program(machine, 4242, "gpu0-job")  # left running on its broken CUDA context
    machine.kernel(xid_line("13", gpu=0, pid=4242), usec=machine.at(60))
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods())
    assert machine.pods() == ALL - {f"{OWN}/gpu0-job"}
    assert machine.condition() is None
    assert not machine.node().get("spec", {}).get("unschedulable")
    machine.kernel(xid_line("13", gpu=0), usec=machine.at(120))
    time.sleep(0.5)  # several passes of the loop: still no quarantine after two
    assert machine.condition() is None
    machine.kernel(xid_line("13", gpu=0), usec=machine.at(180))
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"
    assert "3 application faults within 3/10m" in condition["message"]
    assert machine.node()["spec"]["unschedulable"] is True
    assert machine.pods() == ALL - {f"{OWN}/gpu0-job"}  # GPU 1's job runs on


def test_the_escalation_count_survives_a_watcher_restart(machine):
    """Two application faults, a restart, a third: the GPU is quarantined (issue 32).

    A restart (systemd's Restart=, a charm upgrade) between them used to start the count
    again, so a GPU faulting every few minutes across restarts was never repaired.
    """
    start(machine, escalation="3/10m")
    machine.kernel(xid_line("13", gpu=0), usec=machine.at(60))
    machine.kernel(xid_line("13", gpu=0), usec=machine.at(120))
    until(lambda: machine.state().get("app_faults", {}).get("clocks", {}).get(GPUS[0][1]))
    until(lambda: len(machine.state()["app_faults"]["clocks"][GPUS[0][1]]) == 2)
    machine.stop()
    start(machine, escalation="3/10m")
    machine.kernel(xid_line("13", gpu=0), usec=machine.at(180))
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"
    assert GPUS[0][1] not in machine.state()["app_faults"]["clocks"]  # counted afresh


# One program's fault as the driver wrote it: three XID 13 lines stamped the same second
# (tests/fixtures/gpu/xid/README.md: leptonai/gpud's XID README)
BURST = [line for line in LINES if line.startswith("NVRM: Xid (PCI:0000:cb:00): 13,")]


def burst(gpu: int) -> list[str]:
    """The recorded burst on the fake machine's GPU `gpu`."""
    bus = GPUS[gpu][2][9:11].lower()
    return [line.replace("(PCI:0000:cb:00)", f"(PCI:0000:{bus}:00)") for line in BURST]


def test_one_burst_of_xid_lines_is_one_application_fault(machine):
    """Issue 32 item 2 (review): the driver writes several XID 13 lines for one fault.

    Counted line by line, one crash of one program reached the default escalation (3 in
    10 minutes) and quarantined a healthy GPU: drain, reset, gate. A burst is one fault;
    every line still counts in the faults metric.
    """
    assert len(BURST) == 3
    start(machine, escalation="3/10m")
    for n, line in enumerate(burst(0)):  # within a millisecond, as the driver writes them
        machine.kernel(line, usec=machine.at(60) + 300 * n)
    until(machine.handled)
    time.sleep(0.3)  # several passes of the loop
    assert machine.condition() is None
    assert not machine.node().get("spec", {}).get("unschedulable")
    assert machine.state()["faults"][f"{GPUS[0][1]}|13|Xid13|application"] == 3
    # two more faults of the kind, a minute apart: the third fault escalates
    for at in (120, 180):
        for n, line in enumerate(burst(0)):
            machine.kernel(line, usec=machine.at(at) + 300 * n)
    lines = f"{GPUS[0][1]}|13|Xid13|application"
    until(lambda: machine.quarantined() and machine.state()["faults"][lines] == 9)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"
    assert "3 application faults within 3/10m" in condition["message"]


def test_killed_programs_xid_45_and_43_are_counted_and_never_quarantine_or_evict(machine):
    """review44b G2: XID 45 is a program the driver tore down, 43 one that ended: no GPU fault.

    NVIDIA's catalog (xid_catalog.json `source`): 45's immediate action is WORKFLOW_XID_45,
    "Not Solo: IGNORE (follow guidance in other Xid)", logged for "Control-C, GPU resets,
    sigkill", "not indicative of a bug but rather a user or system action"; 43's is IGNORE,
    "The GPU remains in a healthy state". Counted as application faults, three pods
    OOM-killed, preempted or stopped a minute apart quarantined a healthy GPU (NoExecute:
    every team's pods out, a repair turn taken). Now they are counted in the faults metric
    only: no escalation, and the program is left alone even while it still runs.
    """
    start(machine, escalation="3/10m")
    for n in range(3):
        program(machine, 4242 + n, "gpu0-job")  # still running when the wait is over
        machine.kernel(xid_line("45", gpu=0, pid=4242 + n), usec=machine.at(60 + 60 * n))
    machine.kernel(xid_line("43", gpu=0, pid=4245), usec=machine.at(240))
    faults = machine.state  # the counts, once all four lines are read
    until(lambda: sum(faults()["faults"].values()) == 4)
    time.sleep(0.6)  # twice --app-xid-wait: an application XID's program would be evicted
    assert machine.condition() is None
    assert not machine.node().get("spec", {}).get("unschedulable")
    assert machine.state()["quarantined"] == {}
    assert machine.pods() == ALL
    assert faults()["faults"] == {
        f"{GPUS[0][1]}|45|Xid45|info": 3,
        f"{GPUS[0][1]}|43|Xid43|info": 1,
    }
    assert GPUS[0][1] not in machine.state()["app_faults"]["clocks"]  # none counted


def test_an_application_xid_evicts_only_a_program_still_running_after_the_wait(machine):
    """Issue 32 item 2 (review): a program that crashed on its own fault fails its pod.

    Evicted, its launcher's held crash became exit 143 with DisruptionTarget, which the
    job's failure policy does not count: a job with a CUDA bug restarted for ever. Now the
    watcher evicts only the pod of a process still alive `--app-xid-wait` after its XID
    (left running on a CUDA context the fault broke), and an XID naming no process
    evicts nobody (it evicted every pod on the GPU, other tenants' shares included).
    """
    start(machine)
    program(machine, 4242, "gpu0-job")  # lingers on its broken context
    crashed = program(machine, 4243, "gpu1-job")
    machine.kernel(xid_line("13", gpu=1))  # no process named: nobody
    machine.kernel(xid_line("13", gpu=0, pid=4242), usec=machine.at(60))
    machine.kernel(xid_line("13", gpu=1, pid=4243), usec=machine.at(60))
    until(machine.handled)
    shutil.rmtree(crashed)  # GPU 1's program exits on its fault: its launcher's code counts
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods())
    until(lambda: "pid 4243 ended on its own" in watcher_log(machine))
    assert machine.pods() == ALL - {f"{OWN}/gpu0-job"}
    assert machine.condition() is None


def test_an_xid_newer_than_the_catalog_quarantines_with_no_automatic_repair(machine):
    """A driver newer than the catalog reports XID 173 (the catalog lists 1-172).

    Counted as an application fault it would leave the GPU in service (review, issue 32):
    the catalog's `unknown` entry makes it `support`, NVIDIA's default without a known repair.
    """
    start(machine)
    machine.kernel(xid_line("13", gpu=1).replace("): 13,", "): 173,"))
    until(machine.quarantined)
    held = machine.state()["quarantined"][GPUS[1][1]]
    assert (held["reason"], held["action"]) == ("Xid173", "support")
    assert "XID 173: not in NVIDIA's catalog as read on" in held["message"]
    until(lambda: f"{OWN}/gpu1-job" not in machine.pods())
    assert machine.node()["spec"]["unschedulable"] is True


@pytest.mark.parametrize(
    ("smi", "code", "gpu", "reason"),
    [
        # a GPU without error containment (V100, T4: no recovery action): any DBE
        (smi_rows(dbe=2, recovery="N/A"), 0, 0, "EccDoubleBit"),
        # the driver asks for a reset or a reboot (NVIDIA's names, as nvidia-smi prints them)
        (smi_rows(recovery={1: "Reset"}), 0, 1, "GpuRecoveryAction"),
        (smi_rows(dbe={0: 1}, recovery={0: "Reboot"}), 0, 0, "GpuRecoveryAction"),
        (smi_rows(lost=1), 15, 1, "GpuLost"),
        (smi_rows(remap_failed=1), 0, 1, "RowRemapFailure"),
        # NVSwitch machine: GPU 0's registration completed with an error, GPU 1's fine
        (smi_rows(fabric=(0, "Completed", "Unknown Error")), 0, 0, "FabricDegraded"),
    ],
)
def test_nvidia_smi_findings_quarantine_that_gpu(machine, smi, code, gpu, reason):
    start(machine)
    machine.smi(smi, code)
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == reason
    assert GPUS[gpu][1] in condition["message"]
    until(lambda: f"{OWN}/gpu{gpu}-job" not in machine.pods())
    assert machine.pods() == ALL - {f"{OWN}/gpu{gpu}-job"}


def events(machine: Machine, reason: str) -> list[dict]:
    """The watcher's events of `reason` in its state file, oldest first."""
    return [e for e in machine.state().get("events", []) if e["reason"] == reason]


@pytest.mark.parametrize("kind", sorted(SMI_DRIVER_DOWN))
def test_nvidia_smi_that_cannot_reach_the_driver_quarantines_no_gpu(machine, kind):
    """Review44b G1: nvidia-smi failing for the whole driver is no GPU lost from the bus.

    Between the charm's driver update (the new userspace over the running kernel module)
    and Juju's reboot, nvidia-smi answers "Driver/library version mismatch" and no row:
    read as every known GPU gone, every planned driver update quarantined every GPU, and
    the quarantine outlived the reboot. The watcher records that nvidia-smi is blind
    once, judges no GPU by it meanwhile, and still acts on the kernel's XIDs.
    """
    start(machine)
    polls = machine.smi_calls()
    machine.smi_driver_down(kind)
    until(lambda: machine.smi_calls() >= polls + 4)  # several polls answered so
    until(lambda: events(machine, "DriverUnavailable"))
    assert machine.state()["quarantined"] == {}
    assert machine.condition() is None
    assert not machine.node().get("spec", {}).get("unschedulable")
    assert machine.pods() == ALL
    said = events(machine, "DriverUnavailable")
    assert len(said) == 1  # once, not at every poll
    code, text = SMI_DRIVER_DOWN[kind]
    assert f"exit {code}: {text.splitlines()[0]}" in said[0]["meaning"]
    # the kernel's report of a GPU fault is still acted on, on the GPU known before
    machine.kernel(xid_line("79", gpu=1))
    until(machine.quarantined)
    assert machine.state()["quarantined"].keys() == {GPUS[1][1]}


def test_a_driver_unavailable_outside_a_pause_for_too_long_is_said_and_gauged(machine):
    """rereview44c R2: nvidia-smi blind with no driver update in progress is bounded.

    Past `--driver-blind` an event says so once, and while it lasts a gauge says since
    when (GpuDriverUnavailable alerts on it); a pause for the driver's update and the
    driver answering again end it.
    """
    start(machine, metrics=True, driver_blind=0.6)
    machine.smi_driver_down("mismatch")
    until(lambda: events(machine, "DriverUnavailable"))
    gauge = f'gpu_k8s_gpu_driver_unavailable_since_timestamp_seconds{{node="{OWN}"}}'
    until(lambda: gauge in machine.metrics())
    since = samples(machine.metrics())[gauge]
    assert time.time() - 30 < since <= time.time()
    assert not events(machine, "DriverUnavailableTooLong")  # not yet
    until(lambda: events(machine, "DriverUnavailableTooLong"))
    (said,) = events(machine, "DriverUnavailableTooLong")
    assert (said["gpu"], said["action"]) == ("all", "support")
    assert "no driver update paused its polls" in said["meaning"]
    assert machine.state()["quarantined"] == {}  # the running jobs go on (DRIVER_BLIND_S)
    polls = machine.smi_calls()
    until(lambda: machine.smi_calls() >= polls + 3)
    assert len(events(machine, "DriverUnavailableTooLong")) == 1  # once
    # the charm's driver update pauses the polls: no blind spell while it lasts
    pause = gpu_watcher.pause_text(OWN, gpu_watcher.PAUSE_DRIVER)
    machine.pause_path.write_text(pause)
    until(lambda: gauge not in machine.metrics())
    machine.pause_path.unlink()
    until(lambda: gauge in machine.metrics())  # blind again after it: counted afresh
    assert samples(machine.metrics())[gauge] > since
    machine.smi_driver_down(None)
    until(lambda: gauge not in machine.metrics())


def test_a_hung_nvidia_smi_is_killed_said_gauged_and_quarantines_every_gpu_for_a_reboot(
    machine,
):
    """final44b N1: a poll that nvidia-smi never answers is a finding, not silence.

    Each call is killed with its process group at `--smi-timeout` and the polls go on; an
    event `SmiHung` once per outage and a gauge say since when; hung polls spanning
    `--smi-hung` quarantine every known GPU as lost, for the catalog's reboot.
    """
    start(machine, metrics=True, smi_timeout=0.3, smi_hung=1.0)
    gauge = f'gpu_k8s_gpu_smi_hung_since_timestamp_seconds{{node="{OWN}"}}'
    assert gauge not in machine.metrics()
    began = time.time()
    machine.smi_hang(60)
    until(lambda: events(machine, "SmiHung"))
    (said,) = events(machine, "SmiHung")
    assert (said["gpu"], said["action"]) == ("all", "info")
    assert "did not answer within 0.3s" in said["meaning"]
    until(lambda: gauge in machine.metrics())
    assert began - 1 <= samples(machine.metrics())[gauge] <= time.time()
    assert machine.state()["quarantined"] == {}  # one hung poll is no verdict yet
    until(lambda: len(machine.state()["quarantined"]) == 2)
    assert time.time() - began >= 1.0
    for _, uuid, _ in GPUS:
        record = machine.state()["quarantined"][uuid]
        assert (record["reason"], record["action"]) == ("GpuLost", "reboot")
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "GpuLost"
    until(lambda: not {f"{OWN}/gpu0-job", f"{OWN}/gpu1-job"} & machine.pods())
    # each hung call was killed with its group (the fake's wait inside it too), and the
    # poll thread went on
    polls = machine.smi_calls()
    until(lambda: machine.smi_calls() >= polls + 2)
    until(lambda: not machine.smi_sleepers())
    assert len(events(machine, "SmiHung")) == 1  # once per outage
    machine.smi_hang(None)
    until(lambda: gauge not in machine.metrics())
    machine.smi_hang(60)  # a new outage is said again
    until(lambda: len(events(machine, "SmiHung")) == 2)


def test_a_hung_nvidia_smi_under_a_pause_quarantines_nothing(machine):
    """A GPU reset or the gate may hold nvidia-smi: a pause in force is no hung driver."""
    start(machine, metrics=True, smi_timeout=0.3, smi_hung=0.8)
    machine.smi_hang(60)
    until(lambda: events(machine, "SmiHung"))
    machine.pause_path.write_text(gpu_watcher.pause_text(OWN, gpu_watcher.PAUSE_RESET))
    gauge = f'gpu_k8s_gpu_smi_hung_since_timestamp_seconds{{node="{OWN}"}}'
    until(lambda: gauge not in machine.metrics())
    time.sleep(1.5)
    assert machine.state()["quarantined"] == {}
    machine.pause_path.unlink()  # resumed, still hung: counted afresh, then quarantined
    until(lambda: gauge in machine.metrics())
    until(lambda: len(machine.state()["quarantined"]) == 2)


def test_a_gpu_lost_once_the_driver_answers_again_is_quarantined(machine):
    """The driver back (the reboot after the update): nvidia-smi judges the GPUs again."""
    start(machine)
    polls = machine.smi_calls()
    machine.smi_driver_down("mismatch")
    until(lambda: events(machine, "DriverUnavailable") and machine.smi_calls() >= polls + 3)
    machine.smi_driver_down(None)
    until(lambda: "nvidia-smi reaches the NVIDIA driver again" in watcher_log(machine))
    assert machine.condition() is None
    machine.smi(smi_rows(unreachable=0), 255)  # the other GPU still answers
    until(machine.quarantined)
    assert machine.state()["quarantined"].keys() == {GPUS[0][1]}
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "GpuLost"


@pytest.mark.parametrize(
    ("smi", "code", "lost"),
    [
        # one GPU unreachable, the other's row printed (NVML's Unknown Error: exit 255)
        (smi_rows(unreachable=1), 255, {1}),
        # the driver loaded and answering, but no GPU left to list (nvidia-smi(1) exit 6,
        # "A query to find an object was unsuccessful"): every GPU seen before is gone
        ("No devices were found\n", 6, {0, 1}),
    ],
)
def test_nvidia_smi_answering_without_a_gpu_seen_before_quarantines_it(machine, smi, code, lost):
    """What is not a driver-level failure keeps quarantining a GPU that went missing."""
    start(machine)
    machine.smi(smi, code)
    until(lambda: len(machine.state()["quarantined"]) == len(lost))
    assert machine.state()["quarantined"].keys() == {GPUS[i][1] for i in lost}
    assert {q["reason"] for q in machine.state()["quarantined"].values()} == {"GpuLost"}
    assert not events(machine, "DriverUnavailable")


def test_a_gpu_missing_while_mig_manager_applies_a_layout_waits_for_its_end(machine):
    """Review44b G1 (MIG): mig-manager resets a GPU to change its MIG mode.

    While its `nvidia.com/mig.config.state` label says `pending` a GPU missing from
    nvidia-smi's answer is its doing, not a GPU lost: the watcher holds that finding
    until the label says otherwise, then judges what nvidia-smi answers then.
    """
    start(machine)
    machine.mig_state("pending")
    polls = machine.smi_calls()
    machine.smi(smi_rows(unreachable=0), 255)  # the GPU under reset answers nothing
    until(lambda: "while mig-manager changes the MIG layout" in watcher_log(machine))
    until(lambda: machine.smi_calls() >= polls + 4)
    assert machine.state()["quarantined"] == {} and machine.condition() is None
    machine.smi(smi_rows())  # back, in its new mode
    polls = machine.smi_calls()
    until(lambda: machine.smi_calls() >= polls + 2)  # a poll that read it has begun: the
    machine.mig_state("success")  # one that read the GPU missing is over (polls run in turn)
    polls = machine.smi_calls()
    until(lambda: machine.smi_calls() >= polls + 3)
    assert machine.state()["quarantined"] == {}
    # a GPU that stays missing once mig-manager is done is lost
    machine.smi(smi_rows(unreachable=0), 255)
    until(machine.quarantined)
    assert machine.state()["quarantined"].keys() == {GPUS[0][1]}


def test_a_mig_change_that_never_ends_holds_a_missing_gpu_only_so_long(machine):
    """mig-manager stopped mid-apply leaves `pending` (mig.py): held `--mig-hold` at most."""
    start(machine, mig_hold=1.0)
    machine.mig_state("pending")
    machine.smi(smi_rows(unreachable=1), 255)
    until(lambda: "while mig-manager changes the MIG layout" in watcher_log(machine))
    until(machine.quarantined)
    assert machine.state()["quarantined"].keys() == {GPUS[1][1]}
    assert "held longer than" in watcher_log(machine)


def test_a_gpu_reset_pauses_the_polls_and_a_pause_older_than_its_bound_is_ignored(machine):
    """The charm's reset (gpu_repair.gpu_clients_paused) is no GPU lost from the bus.

    nvidia-smi -r wants no other nvidia-smi on the GPU, and the reset GPU answers nothing
    for a moment: while the pause file is fresh the watcher runs no nvidia-smi at all. Its
    log says what the pause is for, as the charm's pause file says it: a reset, then the
    gate's DCGM diagnostic (issue 32 leftover: both read "GPU reset").
    """
    start(machine)
    node = "gpu-node-1"
    machine.pause_path.write_text(gpu_watcher.pause_text(node, gpu_watcher.PAUSE_RESET))
    until(lambda: "nvidia-smi polls paused" in watcher_log(machine))
    assert "nvidia-smi polls paused for a GPU reset (" in watcher_log(machine)
    polls = machine.smi_calls()
    machine.smi(smi_rows(lost=1), 15)  # what a poll during the reset would have read
    time.sleep(1.0)  # five polls' worth
    assert not machine.quarantined() and machine.smi_calls() == polls
    machine.smi(smi_rows())  # reset: the GPU answers again
    machine.pause_path.unlink()
    until(lambda: "nvidia-smi polls resumed" in watcher_log(machine))
    until(lambda: machine.smi_calls() > polls)
    assert not machine.quarantined()

    # the gate's pause for dcgmi diag is named as such
    machine.pause_path.write_text(gpu_watcher.pause_text(node, gpu_watcher.PAUSE_GATE))
    gate = "nvidia-smi polls paused for the repair gate's DCGM diagnostic (dcgmi diag) ("
    until(lambda: gate in watcher_log(machine))
    assert watcher_log(machine).count("paused for a GPU reset") == 1
    machine.pause_path.unlink()
    until(lambda: watcher_log(machine).count("nvidia-smi polls resumed") == 2)

    # a gate's pause says how long it may last (its diagnostic's timeout): honoured past
    # PAUSE_MAX_S while within it
    long_gate = gpu_watcher.pause_text(node, gpu_watcher.PAUSE_GATE, 3 * gpu_watcher.PAUSE_MAX_S)
    machine.pause_path.write_text(long_gate)
    older = time.time() - gpu_watcher.PAUSE_MAX_S - 60
    os.utime(machine.pause_path, (older, older))
    until(lambda: watcher_log(machine).count(gate) == 2)
    machine.pause_path.unlink()
    until(lambda: watcher_log(machine).count("nvidia-smi polls resumed") == 3)

    # a pause a killed hook left is honoured PAUSE_MAX_S at most, or as long as it says up
    # to PAUSE_LONGEST_S: then polls go on
    machine.pause_path.write_text("reset\n")
    stale = time.time() - gpu_watcher.PAUSE_MAX_S - 1
    os.utime(machine.pause_path, (stale, stale))
    machine.smi(smi_rows(lost=1), 15)
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "GpuLost"


def test_an_xid_is_acted_on_while_nvidia_smi_hangs_on_the_fallen_gpu(machine):
    """The eviction must reach the crashed task within its fault window (10 s).

    On XID 79 nvidia-smi may block on the GPU that fell off the bus; the polls run on
    their own thread, so the kernel's record is still read at the next tick.
    """
    start(machine)
    polls = machine.smi_calls()
    machine.smi_hang(12)  # each poll from now on outlasts what follows
    until(lambda: machine.smi_calls() > polls)  # a poll has begun, and hangs
    began = time.monotonic()
    machine.kernel(xid_line("79", gpu=1))
    until(lambda: f"{OWN}/gpu1-job" not in machine.pods(), timeout=8.0)
    assert time.monotonic() - began < 5.0
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "Xid79"


def test_a_restarted_watcher_does_not_act_twice_on_old_records(machine):
    path = f"/api/v1/namespaces/team-a/pods/gpu1-job-{OWN}"
    pod = machine.api.get_object(path)
    assert pod is not None
    start(machine)
    program(machine, 4243, "gpu1-job")  # still running after the wait: evicted
    machine.kernel(xid_line("13", gpu=1, pid=4243))
    until(lambda: f"{OWN}/gpu1-job" not in machine.pods())
    # stopped once it saved what it handled: the record's position, and the program check
    # that evicted the pod gone from `app_checks` (both are saved at the end of the step
    # that evicted; stopped between the eviction and that save, the restarted watcher
    # evicts again: at least once, never lost, and the test was flaky under load)
    until(lambda: machine.handled() and not machine.state().get("app_checks"))
    machine.stop()
    machine.api.put_object(
        path, {"metadata": {"uid": pod["metadata"]["uid"]}, "spec": pod["spec"]}
    )
    start(machine)
    time.sleep(0.5)
    assert machine.pods() == ALL  # the XID 13 before the restart is not handled again


def test_a_first_start_records_older_kernel_faults_without_counting_them(machine):
    """Review44b G3: a first start in a boot does not judge older kernel records as new.

    With no position in this boot's kernel log, the watcher read its
    whole ring buffer as new: three program crashes of the last half hour quarantined a
    healthy GPU (3 in 10 minutes by the time it read them), and a pid named then was
    looked up in today's pods. Records already there when it starts are recorded as
    events, "before the watcher started", and neither counted nor acted on.
    """
    now = time.monotonic()
    program(machine, 4242, "gpu0-job")  # pid 4242 now runs in a pod: reused, innocent
    for age, pid in ((24 * 60, 4242), (18 * 60, 4243), (12 * 60, 4244)):
        machine.kernel(xid_line("13", gpu=0, pid=pid), usec=max(0, int((now - age) * 1e6)))
    start(machine, escalation="3/10m")
    until(lambda: len(events(machine, "Xid13")) == 3)
    time.sleep(0.6)  # past --app-xid-wait: no check was due
    assert machine.condition() is None and machine.state()["quarantined"] == {}
    assert machine.pods() == ALL
    assert all("before the watcher started" in e["meaning"] for e in events(machine, "Xid13"))
    assert machine.state()["app_faults"].get("clocks", {}) == {}  # none counted
    # the next fault is the first one counted
    machine.kernel(xid_line("13", gpu=0), usec=int(time.monotonic() * 1e6))
    until(lambda: len(machine.state()["app_faults"].get("clocks", {}).get(GPUS[0][1], [])) == 1)
    assert machine.condition() is None


def test_a_fatal_xid_logged_before_the_first_start_quarantines_a_gpu_still_lost(machine):
    """A fatal XID of this boot logged before the watcher ran, its GPU still off the bus.

    No reboot came since (same boot), and nvidia-smi cannot reach the GPU now: the GPU is
    quarantined, and the XID's event says it was logged before the watcher started
    (docs/how-to/upgrade.md says why).
    """
    logged = max(0, int((time.monotonic() - 30 * 60) * 1e6))
    machine.kernel(xid_line("79", gpu=1), usec=logged)
    machine.smi(smi_rows(lost=1), 15)
    start(machine)
    until(lambda: machine.state()["quarantined"] and events(machine, "Xid79"))
    (held,) = machine.state()["quarantined"].values()  # by its PCI address: no UUID answered
    assert held["action"] == "reboot"  # the poll's GpuLost or the XID, whichever came first
    (said,) = events(machine, "Xid79")
    assert "before the watcher started" in said["meaning"]


@pytest.mark.parametrize(
    ("recovery", "held"),
    [
        ("None", False),  # reset since, or contained: nothing to repair now
        ({1: "Reset"}, True),  # the driver still asks for the reset
        ("N/A", True),  # a GPU that reports no recovery action: nothing clears it
    ],
)
def test_an_old_fatal_xid_quarantines_only_when_the_gpus_state_now_confirms_it(
    machine, recovery, held
):
    """rereview44c R3: the first start on a fleet drained every node with an old fatal XID.

    A backlog XID (here NVLink's 74, a reset) quarantines when the driver asks for a
    recovery action now, or reports none; with the action None it is recorded only.
    """
    logged = max(0, int((time.monotonic() - 30 * 60) * 1e6))
    machine.kernel(xid_line("74", gpu=1), usec=logged)
    machine.smi(smi_rows(recovery=recovery))
    start(machine)
    until(lambda: events(machine, "Xid74"))
    until(lambda: "XID 74" in watcher_log(machine) or machine.quarantined())
    if held:
        until(lambda: machine.state()["quarantined"].get(GPUS[1][1], {}).get("applied"))
        return
    time.sleep(0.3)  # polls, steps: nothing acts on it
    assert machine.state()["quarantined"] == {} and machine.condition() is None
    assert machine.pods() == ALL
    assert "XID 74 logged before the watcher read it, not acted on" in watcher_log(machine)
    (said,) = events(machine, "Xid74")
    assert "before the watcher started" in said["meaning"]


def test_records_written_while_a_watcher_was_down_are_new_on_its_restart(machine):
    """Only a first start in a boot looks back: a restart knows its position.

    Its position in this boot's log known (the state file), a restarted watcher acts on
    what was written while it was down.
    """
    start(machine)
    until(machine.handled)
    machine.stop()
    program(machine, 4242, "gpu0-job")  # left running on its broken context
    machine.kernel(xid_line("13", gpu=0, pid=4242), usec=int(time.monotonic() * 1e6))
    start(machine)
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods())
    assert "before the watcher started" not in json.dumps(events(machine, "Xid13"))


@pytest.mark.parametrize("drift", [600.0, -600.0])
def test_fresh_xids_escalate_on_a_kernel_clock_drifted_from_monotonic(machine, drift):
    """final44b N2: the kernel's clock is not CLOCK_MONOTONIC after months of uptime.

    Stamped 10 minutes behind it, every live XID read as logged before the watcher
    started: no count, no eviction. The watcher learns the lag from its own record
    (gpu_watcher.calibrate): three faults of the last two minutes, by the kernel's clock,
    evict the job and quarantine the GPU, either way the clock drifted.
    """
    machine.drift = drift
    start(machine, escalation="3/10m")
    program(machine, 4242, "gpu0-job")
    machine.kernel(xid_line("13", gpu=0, pid=4242), usec=machine.clock(120))
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods())
    machine.kernel(xid_line("13", gpu=0), usec=machine.clock(60))
    machine.kernel(xid_line("13", gpu=0), usec=machine.clock())
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"
    assert not any("before the watcher" in e["meaning"] for e in events(machine, "Xid13"))
    assert "not calibrated" not in watcher_log(machine)


def test_a_kernel_that_ignores_the_watchers_record_leaves_its_clock_as_monotonic(machine):
    """printk_devkmsg=off: the write succeeds and logs nothing (printk.c devkmsg_write).

    The watcher says so once and judges stamps on CLOCK_MONOTONIC, as before: a fresh
    fatal XID still quarantines.
    """
    machine.devkmsg = "off"
    start(machine)
    until(lambda: "kernel clock not calibrated" in watcher_log(machine))
    machine.kernel(xid_line("79", gpu=1))
    until(machine.quarantined)
    (said,) = events(machine, "Xid79")
    assert "before the watcher" not in said["meaning"]
    assert watcher_log(machine).count("not calibrated") == 1


@pytest.mark.parametrize(
    ("drift", "age"),
    [
        (0.0, 40 * 60),
        # final44b N2: 7 minutes old by a kernel clock 10 minutes ahead of CLOCK_MONOTONIC
        # read as 3 minutes ahead of now, so as now, and the reused pid was evicted
        (600.0, 7 * 60),
        (-600.0, 7 * 60),
    ],
)
def test_a_restarted_watcher_looks_up_no_pid_of_a_record_logged_long_before(machine, drift, age):
    """rereview44c R4: records written while a watcher was down for long are not live.

    Stopped 40 minutes, the watcher read an XID 13 naming pid 4242 as new: the pid now
    runs cpu-job, a pod that holds no GPU, and it was evicted. A record read more than
    KERNEL_CLOCK_SKEW after the kernel logged it, by the kernel's clock (the lag behind
    CLOCK_MONOTONIC learnt: gpu_watcher.calibrate), is recorded, neither counted nor
    looked into, as a first start's backlog is, either way the clock drifted.
    """
    machine.drift = drift
    start(machine)
    until(machine.handled)
    machine.stop()
    program(machine, 4242, "cpu-job")  # the pid, reused since
    machine.kernel(xid_line("13", gpu=0, pid=4242), usec=machine.clock(age))
    start(machine)
    until(lambda: events(machine, "Xid13"))
    time.sleep(0.6)  # past --app-xid-wait: no check was due
    assert machine.pods() == ALL
    (said,) = events(machine, "Xid13")
    assert "before the watcher started" in said["meaning"]
    assert GPUS[0][1] not in machine.state()["app_faults"]["clocks"]  # not counted


def test_the_escalation_window_is_judged_by_the_kernels_stamps(machine):
    """Review44b G3: the window compares when faults were logged, not when they were read.

    Three faults read at once but logged 6 minutes apart (a watcher that was down, or
    behind) are not 3 within 10 minutes: the first is out of the window.
    """
    start(machine, escalation="3/10m")
    for at in (60, 420, 780):  # seconds after boot, by the kernel's clock
        machine.kernel(xid_line("13", gpu=0), usec=machine.at(at))
    until(machine.handled)
    time.sleep(0.6)  # past --burst-wait: each decided
    assert machine.condition() is None and machine.state()["quarantined"] == {}
    assert len(machine.state()["app_faults"]["clocks"][GPUS[0][1]]) == 2
    machine.kernel(xid_line("13", gpu=0), usec=machine.at(900))  # 3 within 10 minutes now
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"


def test_a_pending_application_xid_check_survives_a_watcher_restart(machine):
    """Issue 32: the check `--app-xid-wait` after an application XID is kept on disk.

    In memory only, a restart inside the wait (systemd's Restart=, a charm upgrade that
    rewrites the unit) lost it: the kernel record counts as handled, so the program left
    running on its broken CUDA context was never moved. The restarted watcher resumes
    the check at its due time; a check whose program ended meanwhile evicts nobody.
    """
    # a wait long enough that the stop below lands inside it on a loaded machine (1 s
    # did not, once: the first watcher evicted before it was stopped)
    start(machine, app_wait=3.0)
    program(machine, 4242, "gpu0-job")  # lingers on its broken context
    ended = program(machine, 4243, "gpu1-job")  # exits on its fault during the restart
    machine.kernel(xid_line("13", gpu=0, pid=4242), usec=machine.at(60))
    machine.kernel(xid_line("13", gpu=1, pid=4243), usec=machine.at(60))
    until(machine.handled)
    machine.stop()  # inside the wait
    assert machine.pods() == ALL
    shutil.rmtree(ended)
    start(machine, app_wait=3.0)
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods(), timeout=10.0)
    until(lambda: "pid 4243 ended on its own" in watcher_log(machine), timeout=10.0)
    assert machine.pods() == ALL - {f"{OWN}/gpu0-job"}
    assert machine.state()["app_checks"] == []  # both done


POD_READY = {"type": "Ready", "status": "True"}


def budgeted(machine: Machine, pod: str) -> str:
    """`pod` Ready under a PodDisruptionBudget with no disruption left; the pod's path."""
    path = f"/api/v1/namespaces/team-a/pods/{pod}-{OWN}"
    found = machine.api.get_object(path)
    assert found is not None
    found["metadata"]["labels"] = {"app": "server"}
    found["status"] = {"phase": "Running", "conditions": [POD_READY]}
    machine.api.put_object(path, found)
    machine.api.put_object(
        "/apis/policy/v1/namespaces/team-a/poddisruptionbudgets/server",
        {
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "server"}}},
            "status": {
                "observedGeneration": 1,
                "currentHealthy": 1,
                "desiredHealthy": 1,
                "expectedPods": 1,
                "disruptionsAllowed": 0,
            },
        },
    )
    return path


def test_a_budget_that_refuses_the_eviction_does_not_hold_a_pod_on_a_quarantined_gpu(machine):
    """Issue 32: a tenant's PodDisruptionBudget answered the eviction 429 and the pod stayed.

    On a GPU that fell off the bus it makes no progress; its program's crash, held by the
    launcher for its fault window with no SIGTERM coming, counted toward max-restarts
    (the taint's own deletion, past any budget, comes later). The node deletes it as the
    taint manager would: DisruptionTarget, then DELETE.
    """
    path = budgeted(machine, "gpu0-job")
    start(machine)
    machine.kernel(xid_line("79", gpu=0))
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods())
    until(lambda: f"deleted team-a/gpu0-job-{OWN}" in watcher_log(machine))  # said after

    asked = [
        tuple(r)
        for r in machine.api.requests
        if tuple(r)
        in (("POST", f"{path}/eviction"), ("PATCH", f"{path}/status"), ("DELETE", path))
    ]
    # the eviction first, refused by the budget; then the condition, then the DELETE
    assert asked == [("POST", f"{path}/eviction"), ("PATCH", f"{path}/status"), ("DELETE", path)]
    assert "Cannot evict pod as it would violate the pod's disruption budget" in (
        watcher_log(machine)
    )
    assert f"deleted team-a/gpu0-job-{OWN} on quarantined GPU {GPUS[0][1]}" in (
        watcher_log(machine)
    )
    assert machine.pods() == ALL - {f"{OWN}/gpu0-job"}
    assert machine.quarantined()


def test_an_application_xid_waits_for_the_budget(machine):
    """The GPU works: a budget with no disruption left keeps the pod; retried until it allows."""
    path = budgeted(machine, "gpu0-job")
    start(machine)
    program(machine, 4242, "gpu0-job")  # left running on its broken context
    machine.kernel(xid_line("13", gpu=0, pid=4242), usec=machine.at(60))
    until(lambda: "would violate the pod's disruption budget" in watcher_log(machine))
    assert machine.api.get_object(path) is not None
    assert machine.condition() is None
    machine.api.delete_object("/apis/policy/v1/namespaces/team-a/poddisruptionbudgets/server")
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods())
    assert f"evicted team-a/gpu0-job-{OWN}" in watcher_log(machine)


# -- XID 154, MIG devices, a lifted cordon (issue 32 leftovers) ---------------------------


def recovery_line(gpu: int, to: str) -> str:
    """XID 154 as the fixture has it, naming another recovery action."""
    line = xid_line("154", gpu=gpu)
    return line.split(" to 0x", 1)[0] + f" to {to}"


def test_xid_154_quarantines_as_the_recovery_action_it_names(machine):
    start(machine)
    machine.kernel(recovery_line(0, "0x0 (None)"))  # nothing to do: the GPU serves on
    until(machine.handled)
    assert machine.condition() is None
    assert machine.state()["events"][-1]["action"] == "info"

    machine.kernel(xid_line("154", gpu=0))  # the fixture: to 0x1 (GPU Reset Required)
    until(machine.quarantined)
    held = machine.state()["quarantined"][GPUS[0][1]]
    assert (held["reason"], held["action"]) == ("Xid154", "reset-gpu")
    assert "(GPU Reset Required)" in held["message"]
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods())

    # the driver asks for more: the quarantine's repair becomes a reboot, the condition says so
    machine.kernel(recovery_line(0, "0x2 (Node Reboot Required)"))
    until(lambda: "Node Reboot Required" in (machine.condition() or {}).get("message", ""))
    held = machine.state()["quarantined"][GPUS[0][1]]
    assert held["action"] == "reboot"
    assert machine.state()["quarantines"] == {f"{GPUS[0][1]}|Xid154": 1}  # one quarantine


def test_mig_devices_and_shares_of_the_failed_gpu_are_evicted_and_no_others(machine):
    start(machine)
    # made after the watcher started (its `nvidia-smi -L` is read again when a MIG device
    # in the checkpoint is not known yet): a MIG slice of each GPU, a time-sliced share
    mig = {0: ["MIG-0d1e3a44-7c4c-5c1b-9f6a-1b2c3d4e5f60"]}
    mig[1] = [
        "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f",
        "MIG-5e1f5b34-2e3b-5b0e-8d1c-aa2b3c4d5e6f",
    ]
    machine.smi_list(smi_list(mig))
    slices = machine.pod("mig-job")  # single strategy: MIG devices as nvidia.com/gpu
    machine.checkpoint(allocation(slices, "nvidia.com/gpu", mig[1][1]))
    mixed = machine.pod("other-job")  # mixed strategy: nvidia.com/mig-<profile>
    machine.checkpoint(allocation(mixed, "nvidia.com/mig-1g.5gb", mig[0][0]))
    shared = machine.pod("mig-job", OTHER)  # not on this node: never evicted by it
    machine.checkpoint(allocation(shared, "nvidia.com/gpu", f"{GPUS[1][1]}::3"))
    machine.kernel(xid_line("79", gpu=1))
    until(lambda: f"{OWN}/mig-job" not in machine.pods())
    until(lambda: f"{OWN}/gpu1-job" not in machine.pods())
    assert machine.pods() == ALL - {f"{OWN}/gpu1-job"} | {f"{OWN}/other-job", f"{OTHER}/mig-job"}


def test_a_time_sliced_share_of_the_failed_gpu_is_evicted(machine):
    start(machine)
    replica = machine.pod("other-job")  # k8s-device-plugin NewAnnotatedID: <uuid>::<n>
    machine.checkpoint(allocation(replica, "nvidia.com/gpu", f"{GPUS[0][1]}::2"))
    machine.smi(smi_rows(dbe=1, recovery="N/A"))
    until(lambda: f"{OWN}/other-job" not in machine.pods())
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods())
    assert machine.pods() == ALL - {f"{OWN}/gpu0-job"}


def test_a_field_this_drivers_nvidia_smi_does_not_know_leaves_the_others_read(machine):
    """A query nvidia-smi refuses for one unknown field still reads the others.

    nvidia-smi refuses the whole query for one field it does not know (fields come and go
    between driver branches): the watcher drops that field and still sees a double-bit ECC
    error.
    """
    older = ("fabric.state", "fabric.status", "gpu_recovery_action")  # before driver 550
    machine.smi_unknown(*older)
    known = tuple(f for f in gpu_watcher.SMI_FIELDS if f not in older)
    machine.smi(smi_rows(dbe=1, fields=known))  # no recovery action read: any DBE
    start(machine)
    until(machine.quarantined)
    assert machine.condition()["message"].startswith(f"GPU 0 ({GPUS[0][1]})")
    log = (machine.root / "watcher.log").read_text()
    assert "nvidia-smi does not know fabric.state: not read on this driver" in log
    assert "nvidia-smi does not know fabric.status: not read on this driver" in log
    assert "nvidia-smi does not know gpu_recovery_action: not read on this driver" in log


def test_a_lifted_cordon_is_put_back_while_the_gpu_is_quarantined(machine, kubectl_binary):
    start(machine)
    machine.kernel(xid_line("79", gpu=1))
    until(lambda: machine.quarantined() and machine.state()["quarantined"][GPUS[1][1]]["applied"])
    kubectl = Kubectl(kubectl_binary, machine.api)  # an operator, as cluster admin
    try:
        assert kubectl.run("uncordon", OWN).stdout == f"node/{OWN} uncordoned\n"
    finally:
        kubectl.close()
    until(lambda: machine.node()["spec"].get("unschedulable") is True)
    assert machine.node()["metadata"]["annotations"]["gpu-k8s/cordoned"] == "true"
    said = f"node {OWN} was uncordoned while GPU 1 ({GPUS[1][1]}) is quarantined: cordoned again"
    # the watcher logs it after its PATCH answered: the cordon can be read back first
    until(lambda: said in (machine.root / "watcher.log").read_text())


# -- what COS counts (issue 32 item 6) ------------------------------------------------------


def samples(text: str) -> dict[str, float]:
    """`name{labels}` -> value of each sample line."""
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def series(name: str, uuid: str, **labels: str) -> str:
    gpu = next(index for index, u, _ in GPUS if u == uuid)
    every = {"gpu": gpu, "node": OWN, "uuid": uuid, **labels}
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(every.items())) + "}"


@pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"),
    reason="promtool is not installed: `sudo apt-get install prometheus` (.ci/run does)",
)
def test_the_watcher_counts_faults_quarantines_repairs_and_times_for_cos(machine):
    sick, well = GPUS[1][1], GPUS[0][1]
    start(machine, metrics=True)
    page = samples(machine.metrics())
    # every known GPU's repairs at zero before any (increase() sees the first one)
    for uuid in (sick, well):
        for method in ("reset", "reboot"):
            for result in ("ok", "failed"):
                key = series("gpu_k8s_gpu_repairs_total", uuid, method=method, result=result)
                assert page[key] == 0

    machine.kernel(xid_line("13", gpu=0))  # a program's fault: counted, no quarantine
    machine.kernel(xid_line("79", gpu=1), usec=int(time.monotonic() * 1e6))  # the kernel's time
    until(lambda: machine.state()["quarantined"].get(sick, {}).get("applied"))
    text = machine.metrics()
    lint = subprocess.run(
        [PROMTOOL or "promtool", "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr  # names, TYPE, HELP as Prometheus
    assert "# TYPE gpu_k8s_gpu_faults_total counter" in text
    assert "# TYPE gpu_k8s_gpu_fault_to_quarantine_seconds gauge" in text
    page = samples(text)
    fault = {"xid": "79", "reason": "Xid79", "class": "reboot"}
    assert page[series("gpu_k8s_gpu_faults_total", sick, **fault)] == 1
    app = {"xid": "13", "reason": "Xid13", "class": "application"}
    assert page[series("gpu_k8s_gpu_faults_total", well, **app)] == 1
    assert page[series("gpu_k8s_gpu_quarantines_total", sick, reason="Xid79")] == 1
    assert page[series("gpu_k8s_gpu_quarantined", sick)] == 1
    assert page[series("gpu_k8s_gpu_quarantined", well)] == 0
    since = page[series("gpu_k8s_gpu_quarantined_since_timestamp_seconds", sick)]
    assert time.time() - 30 < since <= time.time()
    to_quarantine = page[series("gpu_k8s_gpu_fault_to_quarantine_seconds", sick)]
    assert 0 < to_quarantine < 10  # from the kernel's stamp: the poll's wait counts too
    assert series("gpu_k8s_gpu_fault_to_quarantine_seconds", well) not in page

    # the charm repaired it (a failed reset, then a reboot) and readmitted it after its gate,
    # recorded by the charm's own writer (gpu_health: `repairs` history + `repair_counts`)
    gpu_health = charm_modules.load("kubernetes-worker", "gpu_health")
    state = json.loads(machine.state_path.read_text())
    gpu_health._append_repairs(
        state,
        [
            {
                "time": "2026-11-28T10:01:00Z",
                "gpu": "1",
                "gpu_uuid": sick,
                "method": "reset",
                "result": "failed",
            },
            {
                "time": "2026-11-28T10:09:00Z",
                "gpu": "1",
                "gpu_uuid": sick,
                "method": "reboot",
                "result": "ok",
            },
        ],
    )
    machine.stop()
    machine.state_path.write_text(json.dumps(state))
    readmit(machine, now=now_iso())
    page = samples(machine.metrics())
    assert page[series("gpu_k8s_gpu_repairs_total", sick, method="reset", result="failed")] == 1
    assert page[series("gpu_k8s_gpu_repairs_total", sick, method="reboot", result="ok")] == 1
    assert page[series("gpu_k8s_gpu_repairs_total", well, method="reboot", result="ok")] == 0
    assert page[series("gpu_k8s_gpu_quarantined", sick)] == 0
    assert series("gpu_k8s_gpu_quarantined_since_timestamp_seconds", sick) not in page
    to_readmission = page[series("gpu_k8s_gpu_fault_to_readmission_seconds", sick)]
    assert to_quarantine <= to_readmission + 1 < 60
    assert page[series("gpu_k8s_gpu_faults_total", sick, **fault)] == 1  # kept

    # the charm trims its history (REPAIRS_KEPT): what was counted stays counted
    machine.stop()
    state = json.loads(machine.state_path.read_text())
    state["repairs"] = state["repairs"][1:]
    machine.state_path.write_text(json.dumps(state))
    start(machine, metrics=True)
    page = samples(machine.metrics())
    assert page[series("gpu_k8s_gpu_repairs_total", sick, method="reset", result="failed")] == 1
    assert page[series("gpu_k8s_gpu_repairs_total", sick, method="reboot", result="ok")] == 1


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# -- XIDs attributed to a MIG instance (issue 32 review gap 1) ------------------------------


def test_xids_a_mig_instance_names_count_and_quarantine_the_gpu_that_holds_it(machine):
    """The driver names the MIG instance of an XID it can attribute (kernel_rc.c).

    `NVRM: Xid (PCI:... GPU-I:02 GPU-CI:00): 13, ...` was not read at all: on a node with
    a MIG layout no application XID counted toward the escalation and an attributed fatal
    XID quarantined nothing. Now both act on the GPU that holds the instance, and the
    event names the instance.
    """
    mig = {0: ["MIG-0d1e3a44-7c4c-5c1b-9f6a-1b2c3d4e5f60"]}
    mig[1] = ["MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"]
    machine.smi_list(smi_list(mig))
    start(machine, escalation="3/10m")
    for n in range(3):  # three faults of programs in GPU 0's instance, a minute apart
        machine.kernel(xid_line("13", gpu=0, pid=5000 + n, mig=True), usec=machine.at(60 + 60 * n))
    until(machine.quarantined)
    held = machine.state()["quarantined"]
    assert list(held) == [GPUS[0][1]]
    assert held[GPUS[0][1]]["reason"] == "XidRepeated"
    event = next(e for e in machine.state()["events"] if e["reason"] == "Xid13")
    assert (event["gpu"], event["uuid"]) == ("0", GPUS[0][1])
    assert (event["gpu_instance"], event["compute_instance"]) == ("2", "0")
    assert "(MIG GPU instance 2, compute instance 0)" in event["meaning"]

    machine.kernel(xid_line("109", gpu=1, mig=True))  # a fatal XID in GPU 1's instance
    until(lambda: GPUS[1][1] in machine.state()["quarantined"])
    held = machine.state()["quarantined"][GPUS[1][1]]
    assert (held["reason"], held["action"]) == ("Xid109", "reset-gpu")
    assert held["message"].startswith(f"GPU 1 ({GPUS[1][1]}): XID 109 ")
    assert "(MIG GPU instance 3)" in held["message"]
    until(lambda: f"{OWN}/gpu1-job" not in machine.pods())


def test_a_later_line_of_another_mig_instance_is_not_the_bursts(machine):
    """rereview44c R9: a 45 naming another instance's live program joined the burst.

    Team-b's program faults in GPU instance 2 and ends; within the burst's seconds the
    driver stops team-a's program in instance 5 (XID 45): not that fault's line, so
    team-a's pod is left alone.
    """
    other_team_gpu_pod(machine, gpu=0)
    start(machine)
    ran = program(machine, 4242, "other-job", TEAM_B)
    machine.kernel(xid_line("13", gpu=0, pid=4242, mig=True), usec=machine.at(60))
    until(machine.handled)
    shutil.rmtree(ran)  # ends on its fault
    program(machine, 4244, "gpu0-job")
    line = xid_line("45", gpu=0, pid=4244).replace("): 45,", " GPU-I:05): 45,")
    machine.kernel(line, usec=machine.at(60) + 900)
    until(machine.handled)
    time.sleep(0.8)  # past --app-xid-wait: a burst line's program would be evicted
    assert f"{OWN}/gpu0-job" in machine.pods()
    assert machine.state()["quarantined"] == {}


# -- uncorrectable memory errors with error containment (issue 32 review gap 3) -------------


def test_a_contained_memory_error_restarts_only_the_job_and_keeps_the_gpu(machine):
    """XID 94: the driver contained an uncorrectable ECC error to the program that hit it.

    The volatile uncorrectable counter counts it all the same (the fake driver raises it,
    gpu_watcher_machine.Machine.memory_error), and the poll quarantined on any count: a
    contained error, for which NVIDIA says no reset is needed and new work may start,
    drained the node. On a GPU that reports its recovery action, that action decides;
    the catalog's RESTART_APP for 94 stands.
    """
    start(machine)
    program(machine, 4242, "gpu0-job")  # left running on its broken context
    machine.kernel(xid_line("94", gpu=0, pid=4242, mig=True), usec=machine.at(60))
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods())  # the job restarts
    assert machine.ecc == {0: 1}
    polls = machine.smi_calls()
    until(lambda: machine.smi_calls() >= polls + 3)  # polls that read the raised counter
    assert machine.condition() is None
    assert not machine.node().get("spec", {}).get("unschedulable")
    assert machine.state()["quarantined"] == {}
    assert machine.state()["faults"][f"{GPUS[0][1]}|94|Xid94|application"] == 1
    # the driver then asks for a reset (row remapping pending, say): quarantined for it
    machine.smi(smi_rows(dbe=machine.ecc, recovery={0: "Reset"}))
    until(machine.quarantined)
    held = machine.state()["quarantined"][GPUS[0][1]]
    assert (held["reason"], held["action"]) == ("GpuRecoveryAction", "reset-gpu")
    assert "the driver asks for a recovery action: Reset" in held["message"]


# -- readmission clears only what the gate proved (issue 32 review gap 5) -------------------


def test_a_fault_recorded_while_the_gate_ran_stays_quarantined_after_readmission(machine):
    """The gate proves the GPUs held when it started, not a fault that came during it.

    Readmission cleared every quarantine in the state file: an XID 79 on another GPU
    during the gate's NCCL run was readmitted with it, its kernel record handled, so
    never seen again. Now it stays: its condition and cordon too.
    """
    start(machine)
    machine.kernel(xid_line("79", gpu=1))
    until(lambda: machine.state()["quarantined"].get(GPUS[1][1], {}).get("applied"))
    gate_started = time.time()
    time.sleep(0.05)
    machine.kernel(xid_line("79", gpu=0))  # during the gate
    until(lambda: machine.state()["quarantined"].get(GPUS[0][1], {}).get("applied"))
    cleared, cordoned = readmit(machine, now=now_iso(), gate_started=gate_started)
    assert [q["uuid"] for q in cleared] == [GPUS[1][1]]
    assert cordoned is not None and f"GPU 0 ({GPUS[0][1]})" in cordoned
    held = machine.state()["quarantined"]
    assert list(held) == [GPUS[0][1]]
    readmitted = [e["uuid"] for e in machine.state()["events"] if e["reason"] == "Readmitted"]
    assert readmitted == [GPUS[1][1]]
    # the restarted watcher writes the condition again, for GPU 0 alone
    until(lambda: GPUS[1][1] not in (machine.condition() or {}).get("message", GPUS[1][1]))
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "Xid79"
    assert GPUS[0][1] in condition["message"] and GPUS[1][1] not in condition["message"]
    assert machine.node()["spec"]["unschedulable"] is True


def test_a_fault_read_by_a_step_that_began_before_the_gate_is_stamped_when_read(machine):
    """CI caught it under load: the step's time predated the gate, the fault was cleared.

    A step takes its time, then waits for the lock while the poller's pass holds it; a line
    written meanwhile, after the gate started, was stamped with the step's earlier time, so
    readmission counted it as proved by the gate (gpu_health.readmit) and cleared it. The
    watcher runs in this process here, to begin the step before the gate deterministically.
    """
    args = gpu_watcher.arguments(watcher_args(machine))
    api = gpu_watcher.Api(json.loads((machine.root / "api.json").read_text()))
    catalog = json.loads((SRC / "xid_catalog.json").read_text())
    watcher = gpu_watcher.Watcher(args, api, catalog)
    watcher.poll(time.time())
    step_began = time.time()  # then it waits for the lock
    time.sleep(0.01)
    gate_started = time.time()
    time.sleep(0.01)
    machine.kernel(xid_line("79", gpu=0))  # during the gate
    watcher.step(step_began)
    held = watcher.state["quarantined"][GPUS[0][1]]
    assert held["since"] > gate_started, (held["since"], gate_started)


def test_a_stronger_fault_raised_while_the_gate_ran_stays_quarantined_after_readmission(machine):
    """rereview32 finding 3: XID 154 asked for a reset before the gate, XID 79 during it.

    The held record took the reboot but kept its first `since`, so readmission proved
    it by the gate that started after it and cleared the reboot: the fault was lost.
    """
    start(machine)
    machine.kernel(xid_line("154", gpu=1))  # reset-gpu, before the gate
    until(lambda: machine.state()["quarantined"].get(GPUS[1][1], {}).get("applied"))
    gate_started = time.time()
    time.sleep(0.05)
    machine.kernel(xid_line("79", gpu=1))  # during the gate: fallen off the bus, reboot
    until(lambda: machine.state()["quarantined"][GPUS[1][1]]["action"] == "reboot")
    cleared, cordoned = readmit(machine, now=now_iso(), gate_started=gate_started)
    assert cleared == []
    assert cordoned is not None and f"GPU 1 ({GPUS[1][1]})" in cordoned
    held = machine.state()["quarantined"][GPUS[1][1]]
    assert (held["reason"], held["action"]) == ("Xid79", "reboot")
    until(lambda: (machine.condition() or {}).get("reason") == "Xid79")
    assert machine.node()["spec"]["unschedulable"] is True


# -- the NVLink fabric's health summary (issue 32 review gap 9) ------------------------------


def test_the_fabric_health_summary_is_recorded_when_it_changes_and_quarantines_nothing(machine):
    """Driver 580 reports `fabric.health.summary` (degraded bandwidth, unhealthy routes).

    NVML defines its values (NVML_GPU_FABRIC_HEALTH_SUMMARY_*: not supported, healthy,
    unhealthy, limited capacity), but no source we could read shows the words nvidia-smi
    prints for them: the watcher records a change in the GPU's events (what `gpu-health`
    shows) and leaves the quarantine to the fabric state and status it reads.
    """
    start(machine)
    machine.smi(smi_rows(fabric=(0, "Completed", "Success"), fabric_health={0: "Unhealthy"}))
    until(lambda: any(e["reason"] == "FabricHealth" for e in machine.state()["events"]))
    event = next(e for e in machine.state()["events"] if e["reason"] == "FabricHealth")
    assert (event["gpu"], event["uuid"], event["action"]) == ("0", GPUS[0][1], "info")
    assert event["meaning"].startswith("NVLink fabric health summary: Unhealthy")
    polls = machine.smi_calls()
    until(lambda: machine.smi_calls() >= polls + 2)
    assert machine.condition() is None  # recorded, not acted on
    assert [e["reason"] for e in machine.state()["events"]].count("FabricHealth") == 1
    # a restarted watcher remembers the last summary (the state file): no event again
    machine.stop()
    start(machine)
    polls = machine.smi_calls()
    until(lambda: machine.smi_calls() >= polls + 2)
    assert [e["reason"] for e in machine.state()["events"]].count("FabricHealth") == 1


# -- one team's crashing job may not drain a node other teams share (issue 32 review gap 4) ----


TEAM_B = "team-b"


def other_team_gpu_pod(machine: Machine, gpu: int = 1, share: str = "") -> dict:
    """A pod of another tenant (team-b) that holds `gpu` (`share`: a time-sliced replica)."""
    pod = machine.pod("other-job", namespace=TEAM_B)
    machine.checkpoint(allocation(pod, "nvidia.com/gpu", GPUS[gpu][1] + share))
    return pod


def crashes(machine: Machine, pid: int, pod: str, at: int, namespace: str = "team-a") -> None:
    """A program of `pod` faults on GPU 0 (XID 13 naming it) at `at` s, then exits on its own."""
    ran = program(machine, pid, pod, namespace)
    machine.kernel(xid_line("13", gpu=0, pid=pid), usec=machine.at(at))
    until(machine.handled)
    shutil.rmtree(ran)  # CUDA's error is sticky: the program ends, its pod fails


def one_team_events(machine: Machine) -> list[dict]:
    return [e for e in machine.state()["events"] if e["reason"] == "XidRepeatedOneTeam"]


def test_one_teams_repeated_faults_restart_its_job_and_leave_the_shared_node_alone(machine):
    """A team crashing its own job 3 times used to quarantine the GPU: NoExecute, every team out.

    With another team's GPU pod on the node, faults all from one namespace's pods restart
    only that job: no condition, no cordon, an event and a counter. Once the other team's
    GPU pods are gone (its entry may linger in the checkpoint), the next fault escalates.
    """
    other = other_team_gpu_pod(machine)
    start(machine, escalation="3/10m", metrics=True)
    for n in range(3):  # the Job's pod restarted by its controller each time: new pids
        crashes(machine, 4242 + n, "gpu0-job", at=60 + 60 * n)
    until(lambda: one_team_events(machine))
    time.sleep(0.3)  # several passes of the loop
    assert machine.condition() is None
    assert not machine.node().get("spec", {}).get("unschedulable")
    assert machine.state()["quarantined"] == {}
    assert machine.api.get_object(f"/api/v1/namespaces/{TEAM_B}/pods/other-job-{OWN}")
    assert machine.pods() == ALL  # each program exited by itself: nobody evicted
    (event,) = one_team_events(machine)
    assert (event["gpu"], event["uuid"], event["namespace"]) == ("0", GPUS[0][1], "team-a")
    assert event["action"] == "application"
    said = "3 application faults within 3/10m, all from pods of namespace team-a,"
    assert said in event["meaning"]
    page = samples(machine.metrics())
    key = series("gpu_k8s_gpu_xid_repeated_one_team_total", GPUS[0][1], namespace="team-a")
    assert page[key] == 1

    # the other team's job ends (its checkpoint entry stays until the next allocation)
    machine.api.delete_object(f"/api/v1/namespaces/{TEAM_B}/pods/other-job-{OWN}")
    assert other["metadata"]["uid"] in (machine.root / "checkpoint").read_text()
    crashes(machine, 4250, "gpu0-job", at=240)
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"
    assert "from pods of namespace team-a" in condition["message"]
    assert len(one_team_events(machine)) == 1


def test_faults_from_two_teams_pods_on_one_gpu_quarantine_it(machine):
    """Two tenants' programs fault on one (time-sliced) GPU: the GPU is the likely cause.

    Whom each fault was blamed on is kept across a watcher restart, with the count.
    """
    other_team_gpu_pod(machine, gpu=0, share="::1")
    start(machine, escalation="3/10m")
    crashes(machine, 4242, "gpu0-job", at=60)
    crashes(machine, 4243, "other-job", at=120, namespace=TEAM_B)
    machine.stop()
    start(machine, escalation="3/10m")
    crashes(machine, 4244, "gpu0-job", at=180)
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"
    assert "from pods of namespaces team-a, team-b" in condition["message"]
    assert not one_team_events(machine)


def test_one_team_alone_on_the_node_with_gpus_is_quarantined_as_before(machine):
    """Other namespaces' pods that hold no GPU (DaemonSets, a finished job) do not shield it.

    The device plugin's and DCGM exporter's DaemonSets run on every GPU node in other
    namespaces: only pods holding a GPU count, and not one in a terminal phase, whose
    checkpoint entry lingers until the kubelet's next allocation.
    """
    machine.pod("exporter", namespace=TEAM_B)  # no GPU
    done = machine.pod("done-job", namespace=TEAM_B)
    machine.checkpoint(allocation(done, "nvidia.com/gpu", GPUS[1][1]))
    path = f"/api/v1/namespaces/{TEAM_B}/pods/done-job-{OWN}"
    finished = machine.api.get_object(path)
    assert finished is not None
    finished["status"] = {"phase": "Succeeded"}
    machine.api.put_object(path, finished)
    start(machine, escalation="3/10m")
    for n in range(3):
        crashes(machine, 4242 + n, "gpu0-job", at=60 + 60 * n)
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"
    assert not one_team_events(machine)


def test_faults_naming_no_process_count_for_the_team_holding_the_gpu(machine):
    """XID 13 often names no process: the pods holding that GPU (the checkpoint) are blamed.

    Each fault is the recorded burst of three lines: the escalation held back is recorded
    and counted once per fault, not per line.
    """
    other_team_gpu_pod(machine)
    start(machine, escalation="3/10m")
    for at in (60, 120, 180):  # pid '<unknown>', as the recorded burst's lines
        for n, line in enumerate(burst(0)):
            machine.kernel(line, usec=machine.at(at) + 300 * n)
    until(lambda: one_team_events(machine) and machine.handled())
    time.sleep(0.3)  # several passes of the loop
    assert machine.condition() is None
    assert not machine.node().get("spec", {}).get("unschedulable")
    assert [e["namespace"] for e in one_team_events(machine)] == ["team-a"]
    assert machine.state()["xid_repeated_one_team"] == {f"{GPUS[0][1]}|team-a": 1}


def test_faults_no_pod_can_be_blamed_for_quarantine_the_gpu(machine):
    """No process named, nobody holds the GPU: no team to blame, so the GPU is."""
    other_team_gpu_pod(machine)
    gpu0 = machine.api.get_object(f"/api/v1/namespaces/team-a/pods/gpu0-job-{OWN}")
    assert gpu0 is not None
    machine.release(gpu0)
    start(machine, escalation="3/10m")
    for n in range(3):
        machine.kernel(xid_line("13", gpu=0), usec=machine.at(60 + 60 * n))
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"
    assert "unattributed" in condition["message"]


# -- one team's faults on a GPU it shares by MIG or time-slicing (rereview32 finding 1) -------

SLICES = ["MIG-0d1e3a44-7c4c-5c1b-9f6a-1b2c3d4e5f60", "MIG-1d1e3a44-7c4c-5c1b-9f6a-1b2c3d4e5f61"]


def share_gpu0(machine: Machine, layout: str) -> None:
    """team-a's gpu0-job and team-b's other-job share GPU 0: MIG slices 0 and 1, or replicas.

    MIG device 0 is GPU instance 2 (gpu_watcher_machine.smi_query), the instance the
    fixture's MIG XID 13 line names.
    """
    gpu0 = machine.api.get_object(f"/api/v1/namespaces/team-a/pods/gpu0-job-{OWN}")
    assert gpu0 is not None
    machine.release(gpu0)
    other = machine.pod("other-job", namespace=TEAM_B)
    if layout == "mig":
        machine.mig({0: SLICES})
        machine.checkpoint(allocation(gpu0, "nvidia.com/mig-1g.5gb", SLICES[0]))
        machine.checkpoint(allocation(other, "nvidia.com/mig-1g.5gb", SLICES[1]))
    else:  # time-slicing: the device plugin's replicas of one GPU (NewAnnotatedID)
        machine.checkpoint(allocation(gpu0, "nvidia.com/gpu", GPUS[0][1] + "::0"))
        machine.checkpoint(allocation(other, "nvidia.com/gpu", GPUS[0][1] + "::1"))


@pytest.mark.parametrize("layout", ["mig", "time-sliced"])
def test_one_teams_faults_on_a_shared_gpu_leave_the_team_sharing_it_alone(machine, layout):
    """team-a's program faults 3 times on its share of GPU 0; each process exited unread.

    The pid then maps to no pod, and the fault fell back to every pod holding any device of
    the GPU: "from pods of namespaces team-a, team-b", the node cordoned, team-b's pod
    evicted. On MIG the line names the instance (GPU-I/GPU-CI), whose device only team-a
    holds; with time-slicing nothing tells the two teams apart, and a fault either may
    have caused is no proof of two teams.
    """
    share_gpu0(machine, layout)
    start(machine, escalation="3/10m", metrics=True)
    for n in range(3):  # each names its process, which exited before it was read
        line = xid_line("13", gpu=0, pid=7000 + n, mig=layout == "mig")
        machine.kernel(line, usec=machine.at(60 + 60 * n))
    until(lambda: one_team_events(machine) and machine.handled())
    time.sleep(0.5)  # several passes of the loop, past --burst-wait
    assert machine.condition() is None
    assert not machine.node().get("spec", {}).get("unschedulable")
    assert machine.state()["quarantined"] == {}
    assert machine.api.get_object(f"/api/v1/namespaces/{TEAM_B}/pods/other-job-{OWN}")
    (event,) = one_team_events(machine)
    team = "team-a" if layout == "mig" else "team-a,team-b"
    assert event["namespace"] == team
    if layout == "mig":
        assert "all from pods of namespace team-a, while pods of team-b" in event["meaning"]
    else:
        assert "each from a pod of namespace team-a or team-b sharing the GPU" in event["meaning"]
    page = samples(machine.metrics())
    assert page[series("gpu_k8s_gpu_xid_repeated_one_team_total", GPUS[0][1], namespace=team)]


def test_faults_of_two_teams_mig_slices_on_one_gpu_quarantine_it(machine):
    """MIG attribution still tells two teams apart: the GPU fails under both."""
    share_gpu0(machine, "mig")
    machine.mig({0: SLICES})
    start(machine, escalation="3/10m")
    for n, gi in enumerate(("02", "03", "02")):  # slices 0, 1, 0: team-a, team-b, team-a
        line = xid_line("13", gpu=0, pid=7000 + n, mig=True).replace("GPU-I:02", f"GPU-I:{gi}")
        machine.kernel(line, usec=machine.at(60 + 60 * n))
    until(machine.quarantined)
    condition = machine.condition()
    assert (
        condition is not None and "from pods of namespaces team-a, team-b" in condition["message"]
    )


def test_an_unattributed_fault_among_one_teams_counts_against_the_gpu(machine):
    """rereview32 finding 2: a fault no pod can be blamed for is evidence against the GPU.

    It was left out, and the team's two faults held the escalation back.
    """
    other_team_gpu_pod(machine)
    gpu0 = machine.api.get_object(f"/api/v1/namespaces/team-a/pods/gpu0-job-{OWN}")
    assert gpu0 is not None
    machine.release(gpu0)  # its process still names the pod; nobody holds GPU 0
    start(machine, escalation="3/10m")
    crashes(machine, 4242, "gpu0-job", at=60)
    crashes(machine, 4243, "gpu0-job", at=120)
    machine.kernel(xid_line("13", gpu=0), usec=machine.at(180))  # names no process
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"
    assert not one_team_events(machine)


@pytest.mark.parametrize("names", ["13", "43", "45"])
def test_a_burst_naming_no_process_first_is_decided_once_it_names_one(machine, names):
    """A later line of the burst names the process: the burst is decided once it is read.

    The driver's XID 43 usually does (tests/fixtures/gpu/xid/README.md), or the 45 it
    writes as it tears the program down; an XID 13 naming it, too. 43 and 45 alone are no
    fault (test_killed_programs_xid_45_and_43_...); inside the burst they are its lines.

    Decided at its first line, the third fault was unattributed (nobody holds GPU 0) and
    quarantined the node for team-a's own job.
    """
    other_team_gpu_pod(machine)
    gpu0 = machine.api.get_object(f"/api/v1/namespaces/team-a/pods/gpu0-job-{OWN}")
    assert gpu0 is not None
    machine.release(gpu0)
    start(machine, escalation="3/10m", burst_wait=1.0)
    crashes(machine, 4242, "gpu0-job", at=60)
    crashes(machine, 4243, "gpu0-job", at=120)
    ran = program(machine, 4244, "gpu0-job")
    machine.kernel(xid_line("13", gpu=0), usec=machine.at(180))
    until(machine.handled)  # read alone (the driver's next line comes a moment later)
    time.sleep(0.2)
    machine.kernel(xid_line(names, gpu=0, pid=4244), usec=machine.at(180) + 900)
    until(lambda: one_team_events(machine))
    shutil.rmtree(ran)
    assert machine.condition() is None
    assert machine.state()["quarantined"] == {}
