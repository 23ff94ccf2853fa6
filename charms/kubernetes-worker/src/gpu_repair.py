# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Repairing a quarantined GPU: which repair, the GPU reset, a reboot in flight, escalation.

`gpu-auto-repair` (off | reset | reboot) says how far the charm goes by itself:

- the catalog's action for the fault (xid_catalog.json: `reset-gpu` for NVIDIA's
  RESET_GPU bucket and the "reset the GPU or reboot the node" workflows, `reboot` for
  RESTART_BM, `support` for CONTACT_SUPPORT) decides whether a reset can suffice: only
  when every quarantined GPU's action is `reset-gpu`. `support` is never repaired
  automatically (the catalog knows no repair);
- a reset is `nvidia-smi -r -i <index>` for each quarantined GPU, on a drained node.
  nvidia-smi's manual (-r, --gpu-reset): "Requires root. There can't be any applications
  using these devices (e.g. CUDA application, graphics application like X server,
  monitoring application like other instance of nvidia-smi)"; from Ampere on, GPUs with
  NVLink connections can be reset one by one, on Ampere NVSwitch systems only with
  Fabric Manager running (Hopper and later no longer need it); otherwise GPUs linked by
  NVLink must be reset in the same command. nvidia-smi refuses what it cannot do
  ("Unable to reset GPU <bus id> because it's being used by some other process ...",
  recorded in tests/fakes/nvidia_driver.py). A reset refused because something holds the
  GPU (`IN_USE_WORDS`) ran no repair: it is recorded `refused`, never counted toward the
  escalation; with `reboot` the machine reboots instead, with `reset` the unit is
  Blocked naming the holder (`reset_refused_message`) and no reset is tried again while
  nvidia-smi still lists a compute process (unless one is now stuck, below). Any other
  refusal is a failed repair. A holder stuck in the kernel is no refusal either
  (`unkillable`): a process with a thread that has not left state `D` (proc_pid_stat(5),
  "Waiting in uninterruptible disk sleep": a signal is acted on only once it leaves) nor
  switched over the hung-task window (`hung_task_s`, as kernel/hung_task.c judges a task
  hung), or whose killed main thread stays a zombie nvidia-smi still lists, as CUDA
  processes are left when the driver waits on a GPU that no longer answers
  (NVIDIA/nvidia-docker#1553: a container on a GPU fallen off the bus survives `docker
  kill`; leptonai/gpud#117: `state:D` "blocked for more than 120 seconds" after an XID).
  Nor is a driver so hung that nvidia-smi itself does not answer (nvidia.SMI_TIMEOUT_S,
  RESET_TIMEOUT_S: `Reset.hung`). Only a reboot ends either; the reboot is this module's
  repair wherever a reset was refused or did not help, and NVIDIA's catalog names one
  beside the reset for XID 48 (double-bit ECC; WORKFLOW_XID_48: "A GPU reset or node
  reboot is needed"). XID 79 (fallen off the bus) is RESTART_BM: a reboot from the
  start, never a reset (under `reset` no automatic repair, the quarantine's Blocked
  status). With `reboot` the machine reboots at once, as after any refusal (no watch:
  the reboot follows whatever holds it; a hung driver is recorded as a failed reset
  first); with `reset` the reset is a failed repair (`unkillable_message`: it counts
  toward the two below, and `repair-gpu` then reboots, `choose`), and the next hook
  tries the reset again: it repairs if the holder is gone, else fails the second time
  and escalates (`escalation_message` says a reboot was never tried). A drain leaves the
  node's DaemonSet pods, and the device plugin and the DCGM exporter hold NVML handles
  on every GPU (refused with "In use by another client", NVIDIA/NVSentinel#1690), as
  does the watcher's nvidia-smi every 5 s: so during a reset the node's GPU clients are
  paused (`gpu_clients_paused`): the watcher's polls (gpu_watcher.PAUSE_FILE) and the
  GPU DaemonSets (the node label kube_objects.GPU_CLIENTS_LABEL, which their node
  affinity excludes: the GPU Operator's way, NVSentinel's too, #126 and #1243), until no
  pod of theirs (kube_objects.GPU_CLIENT_POD_LABEL) is left, for at most
  CLIENTS_TIMEOUT_S (compute processes still there, `nvidia-smi --query-compute-apps`,
  are logged); both are restored after the reset whatever it answered, and a pause a
  killed hook left behind is restored by the next one (`paused`, `resume_gpu_clients`);
- on an NVSwitch machine (every GPU NVLink-connected to every other through the
  switches) a reset is not even tried while Fabric Manager is not running (`reset_blocker`):
  the same manual's table "NVSwitch systems" allows a GPU to be reset alone only on
  Ampere and later *with Fabric Manager running* (without it, "All PEER connected GPUs
  must be reset in same command": all of the board's GPUs, with no compute application
  on any of them). Its text "On Hopper and later NVSwitch systems, the dependency on
  Fabric Manager to facilitate reset is removed" is not taken to mean a reset without it
  is safe: the table above it still says otherwise for Ampere+, and on an NVSwitch
  board "The CUDA initialization process can only begin after the GPUs complete their
  registration process with the NVLink fabric" (Fabric Manager user guide, as quoted in
  siderolabs/extensions#717; error 802 before that, driver.py), which Fabric Manager
  does (that a reset GPU registers again only through it is our reading, not checked on
  an NVSwitch machine). The repair is a reboot instead where `reboot` is
  allowed (Fabric Manager starts at boot, enabled by driver.fabric_state), else the
  unit is Blocked saying what it waits for; nothing is counted as a failed repair;
- `reboot` reboots the machine through Juju (`juju-reboot`, after the hook, as the
  driver's reboot turn does) where a reset does not suffice, was refused, or did not
  pass the gate. Juju refuses `juju-reboot` inside an action (juju worker/uniter/runner/
  jujuc/reboot.go: "juju-reboot is not supported when running an action"), so the
  `repair-gpu` action leaves a reboot to the next hook.

Two failed repairs within 24 hours escalate: the node stays cordoned, no repair is tried
again, and the unit says how to replace the machine. A reboot in flight is kept on the
machine (`PROGRESS`: its boot id), as the Kubernetes upgrade's steps are. No ops imports.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import gpu
import gpu_gate
import mig
import nvidia
from driver import FABRIC_SERVICE
from gpu_health import FAILED_KEPT_S, epoch, memory_faulted
from gpu_watcher import PAUSE_FILE, PAUSE_GATE, PAUSED_FOR, pause_text

from charms.gpu_k8s.v0.kube_objects import (
    GPU_CLIENT_POD_LABEL,
    GPU_CLIENTS_LABEL,
    GPU_CLIENTS_PAUSED,
)
from charms.gpu_k8s.v0.system import SYSTEMCTL, CommandError, Host

if TYPE_CHECKING:
    from gpu import GpuInventory

    from charms.gpu_k8s.v0.kubeclient import Kube

logger = logging.getLogger(__name__)

MODES = ("off", "reset", "reboot")
RESET, REBOOT = "reset", "reboot"
# A reset nvidia-smi refused because something holds the GPU (`nvidia-smi -r` needs every
# process off it, nvidia-smi(1) -r): recorded, never counted as a failed repair.
REFUSED = "refused"
# A gate with nothing to run on: a GPU in MIG mode with no MIG device (`all-enabled`,
# gpu_gate.GateResult.unproven). The machine is not shown broken: recorded, never counted
# as a failed repair, and no repair is tried again while the layout stays so (`still_bare`).
UNPROVEN = "unproven"
# nvidia-smi's words for that refusal (its exit status, 1 or 255 in the records below, is
# not documented for it: nvidia-smi(1) RETURN VALUE gives 255 to "other error"): "Unable to
# reset GPU <bus id> because it's being used by some other process (e.g. CUDA application)"
# (a public console record, tests/fakes/nvidia_driver.py); "The following GPUs could not be
# reset: / GPU <bus id>: In use by another client" (NVIDIA/NVSentinel#1690, exit=255;
# NVIDIA/mig-parted#181, exit status 255); "GPU <bus id> is currently in use by another
# process." (NVIDIA/gpu-operator#118). Read in lower case.
IN_USE_WORDS = ("being used by", "in use by another")
# A holder stuck in the kernel (the module docstring, `unkillable`): one of its threads
# (/proc/<pid>/task/<tid>/stat: /proc/<pid>/stat is the main thread's alone,
# fs/proc/array.c do_task_stat, and a CUDA program calls the driver from other threads)
# reads state `D` (proc_pid_stat(5), Linux man-pages 6.16: field 3 after the command name
# in parentheses, which may itself hold spaces and parentheses; "Waiting in uninterruptible
# disk sleep") at every read over the hung-task window, with no context switch meanwhile
# (proc_pid_status(5): voluntary_ctxt_switches + nonvoluntary_ctxt_switches unchanged): the
# kernel's own hung-task detector's test (kernel/hung_task.c check_hung_task, in newer
# kernels task_is_hung: a task in TASK_UNINTERRUPTIBLE whose nvcsw + nivcsw did not change
# over hung_task_timeout_secs). It also skips TASK_KILLABLE waits ("these can be killed"),
# which /proc shows as `D` too (TASK_REPORT has no bit for TASK_WAKEKILL): that is not
# visible from here, so a killable wait this long (a hard NFS mount that stopped answering)
# counts as well. Or its main thread is a zombie (`Z`: killed, but the group's other
# threads have not exited) that nvidia-smi still lists, at every read. Read each
# CLIENTS_POLL_S; one read that breaks it (or the process gone) and it is a live holder: a
# CUDA thread blocks in `D` for a moment too.
PROC_TASKS = "/proc/{pid}/task"
TASK_STAT = "/proc/{pid}/task/{tid}/stat"
TASK_STATUS = "/proc/{pid}/task/{tid}/status"
SWITCHES = ("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
BLOCKED, ZOMBIE = "D", "Z"
# The window: the machine's hung_task_timeout_secs (kernel/hung_task.c; sysctl
# kernel.hung_task_timeout_secs), bounded by HUNG_TASK_MAX_S as a hook waits it out; where
# it is absent (a kernel without CONFIG_DETECT_HUNG_TASK), unreadable or 0 ("disabled":
# the detector does not run, which says nothing of how long is too long), the kernel's
# default: lib/Kconfig.debug DEFAULT_HUNG_TASK_TIMEOUT, "The default is two minutes".
HUNG_TASK_SYSCTL = "/proc/sys/kernel/hung_task_timeout_secs"
HUNG_TASK_S = 120.0
HUNG_TASK_MAX_S = 600.0
# nvidia-smi's own bounds: on a hung driver nvidia-smi itself hangs in state D
# (leptonai/gpud#117: "nvidia-smi may get stuck forever, when the nvidia-smi process goes
# into D (uninterruptible) state"; NVIDIA/gpu-monitoring-tools#46, NVIDIA: nvidia-smi
# "unkillable (stuck in 'D' state)" means "the driver is hung"). A query answers in
# seconds (nvidia.SMI_TIMEOUT_S) and a reset of one GPU in seconds to tens of seconds
# (our choice of bounds; NVIDIA documents none): one that does not answer within them on
# a quarantined GPU is a driver hung, a failed repair only a reboot clears (`Reset.hung`).
# The runner gives a killed nvidia-smi that stays in D up after system.KILL_WAIT_S.
RESET_TIMEOUT_S = 120.0
NVIDIA_SMI = "nvidia-smi"
PROGRESS = "/var/lib/gpu-k8s/gpu-repair.json"
ESCALATE_AFTER = 2  # failed repairs ...
ESCALATE_WINDOW_S = FAILED_KEPT_S  # ... within this long (the history keeps them)
# How long a reset waits for the GPU clients to leave: a DaemonSet pod's default grace
# period is 30 s (core/v1 PodSpec terminationGracePeriodSeconds), then the kubelet's sync.
CLIENTS_TIMEOUT_S = 120.0
CLIENTS_POLL_S = 10.0
# The gate's pause (`gate`): the clients' wait, then DCGM's diagnostic bounded by the gate's
# timeout, then the clients coming back; the watcher polls again once it is over.
GATE_PAUSE_MARGIN_S = 60.0
# How often `mig_wait` reads the Node again where it may wait (the repair-gpu action).
MIG_POLL_S = 10.0
# One `<pid>, <uuid>` row per CUDA process, none when the GPUs are free (field names:
# nvidia-smi --help-query-compute-apps); NVML monitors are not listed, hence the pods.
COMPUTE_APPS = ("--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader")


def iso(epoch: float) -> str:
    """An ISO 8601 UTC stamp, as the watcher writes them."""
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def recent_failures(records: list[dict], now: float) -> list[dict]:
    """The failed repair attempts of the last 24 hours, one per attempt (not per GPU)."""
    seen: dict[tuple, dict] = {}
    for r in records:
        when = epoch(r.get("time"))
        if r.get("result") == "failed" and when is not None and now - when < ESCALATE_WINDOW_S:
            seen.setdefault((r.get("time"), r.get("method")), r)
    return list(seen.values())


def escalated(records: list[dict], now: float) -> bool:
    """Two failed repairs within 24 hours: no more automatic repairs."""
    return len(recent_failures(records, now)) >= ESCALATE_AFTER


def choose(entries: list[dict], mode: str, records: list[dict], now: float) -> str | None:
    """The repair to try now (RESET, REBOOT), or None: none is automatic here.

    A reset where the catalog says one suffices, unless a reset failed in the last 24
    hours and a reboot is allowed; else a reboot when `mode` allows one.
    """
    actions = {q.get("action") for q in entries}
    if mode == "off" or not entries or "support" in actions:
        return None
    failed = {r.get("method") for r in recent_failures(records, now)}
    if actions <= {"reset-gpu"} and (mode == RESET or RESET not in failed):
        return RESET
    return REBOOT if mode == REBOOT else None


class Reset(NamedTuple):
    """What `reset` did: `done` (every GPU reset) and what nvidia-smi `said`.

    `holders`: not None when nvidia-smi refused because something holds the GPU
    (`IN_USE_WORDS`): the compute processes on these GPUs nvidia-smi lists (none when the
    holder is no compute process: nvidia-persistenced, an NVML monitor); `words`: its
    refusal's words; `stuck`: those of them that did not leave the kernel over the window
    (`unkillable`; `watch_holders` reads it); `hung`: the nvidia-smi that did not answer in
    time (nvidia.SMI_TIMEOUT_S, RESET_TIMEOUT_S): the driver is hung.
    """

    done: bool
    said: str
    holders: tuple[str, ...] | None = None
    words: str = ""
    pids: tuple[str, ...] = ()  # the compute processes' ids, as `holders` names them
    stuck: tuple[str, ...] = ()  # the holders stuck in the kernel (`unkillable`)
    hung: str = ""


def reset(host: Host, entries: list[dict]) -> Reset:
    """`nvidia-smi -r -i <index>` for each quarantined GPU."""
    said = []
    for q in entries:
        try:
            out = host.run(NVIDIA_SMI, "-r", "-i", str(q.get("index")), timeout=RESET_TIMEOUT_S)
        except CommandError as e:
            if e.returncode == gpu.HUNG_EXIT:  # the runner's timeout
                return _hung(f"GPU {q.get('index')} reset", "nvidia-smi -r", RESET_TIMEOUT_S)
            # the first two lines name the GPU and why ("Unable to reset GPU <bus id>
            # because ...", or "The following GPUs could not be reset:" then the GPU)
            lines = [line.strip() for line in e.stderr.splitlines() if line.strip()]
            words = " ".join(lines[:2]) if lines else str(e)
            refused = f"GPU {q.get('index')} reset refused: {words}"
            if not any(w in e.stderr.lower() for w in IN_USE_WORDS):
                return Reset(False, refused)
            apps = _compute_apps(host)
            if apps is None:
                return _hung(refused, f"nvidia-smi {COMPUTE_APPS[0]}", nvidia.SMI_TIMEOUT_S)
            apps = _on(entries, apps)
            holders = _holders(entries, apps)
            return Reset(False, refused, holders, words, tuple(pid for pid, _ in apps))
        said.append(next((line for line in out.splitlines() if line.strip()), "reset"))
    return Reset(True, "; ".join(said))


def _hung(said: str, what: str, timeout: float) -> Reset:
    hung = f"{what} did not answer within {timeout:.0f} s: the NVIDIA driver is hung"
    return Reset(False, f"{said}: {hung}", hung=hung)


def _on(entries: list[dict], apps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The compute processes (`_compute_apps`) on the GPUs `entries` (by UUID)."""
    uuids = {str(g.get("uuid")) for g in entries}
    return [(pid, uuid) for pid, uuid in apps if uuid in uuids]


def _holders(entries: list[dict], apps: list[tuple[str, str]]) -> tuple[str, ...]:
    """`process <pid> on GPU <index>` for each compute process on `entries` (`_on`)."""
    names = {str(g.get("uuid")): str(g.get("index")) for g in entries}
    return tuple(f"process {pid} on GPU {names[uuid]}" for pid, uuid in apps)


def hung_task_s(host: Host) -> float:
    """The hung-task window: the machine's hung_task_timeout_secs (HUNG_TASK_SYSCTL)."""
    try:
        value = int((host.read(HUNG_TASK_SYSCTL) or "").strip())
    except (OSError, ValueError):
        return HUNG_TASK_S
    return min(float(value), HUNG_TASK_MAX_S) if value > 0 else HUNG_TASK_S


def _state(stat: str | None) -> str | None:
    """The state letter of a proc_pid_stat(5) line (field 3, after the LAST `)`)."""
    fields = (stat or "").rpartition(")")[2].split()
    return fields[0] if fields else None


def threads(host: Host, pid: str) -> dict[str, tuple[str, int]] | None:
    """{thread id: (state, context switches)} of process `pid`; None: no such process."""
    try:
        tids = [t.name for t in host.path(PROC_TASKS.format(pid=pid)).iterdir()]
    except OSError:  # it ended (ENOENT, ESRCH)
        return None
    found = {}
    for tid in sorted(t for t in tids if t.isdigit()):
        try:
            state = _state(host.read(TASK_STAT.format(pid=pid, tid=tid)))
            status = host.read(TASK_STATUS.format(pid=pid, tid=tid)) or ""
        except OSError:  # that thread ended between the listing and the read
            continue
        counts = [line.split()[-1] for line in status.splitlines() if line.startswith(SWITCHES)]
        if state is not None:
            found[tid] = (state, sum(int(c) for c in counts if c.isdigit()))
    return found or None


class _Watch(NamedTuple):
    """What keeps a holder stuck so far: its zombie leader, its threads in D (switches)."""

    zombie: bool
    blocked: dict[str, int]

    def then(self, pid: str, now: dict[str, tuple[str, int]] | None) -> _Watch | None:
        """The same after one more read `now` (`threads`); None: it is not stuck."""
        if now is None:
            return None
        zombie = self.zombie and now.get(pid, ("", 0))[0] == ZOMBIE
        blocked = {
            tid: count for tid, count in self.blocked.items() if now.get(tid) == (BLOCKED, count)
        }
        return _Watch(zombie, blocked) if zombie or blocked else None

    def says(self, pid: str, window: float) -> str:
        """Why process `pid` is stuck, for the unit's status."""
        if self.blocked:
            tid = min(self.blocked, key=int)
            which = "it" if tid == pid else f"its thread {tid}"
            return f"{which} has not left state D for {window:.0f} s"
        return f"killed, it has been a zombie for {window:.0f} s"


def unkillable(
    host: Host, pids: tuple[str, ...], *, sleep: Callable[[float], None], window: float
) -> dict[str, str]:
    """{pid: why} for the processes among `pids` stuck in the kernel over `window` s.

    Stuck (see PROC_TASKS): a thread in state D at every read with no context switch, or
    a zombie main thread at every read (that nvidia-smi still lists: `watch_holders`).
    """
    first = {pid: threads(host, pid) for pid in pids}
    watched = {
        pid: _Watch(
            found.get(pid, ("", 0))[0] == ZOMBIE,
            {tid: count for tid, (state, count) in found.items() if state == BLOCKED},
        )
        for pid, found in first.items()
        if found is not None
    }
    watched = {pid: w for pid, w in watched.items() if w.zombie or w.blocked}
    waited = 0.0
    while watched and waited < window:
        sleep(CLIENTS_POLL_S)
        waited += CLIENTS_POLL_S
        after = {pid: w.then(pid, threads(host, pid)) for pid, w in watched.items()}
        watched = {pid: w for pid, w in after.items() if w is not None}
    return {pid: w.says(pid, window) for pid, w in watched.items()}


def in_the_kernel(host: Host, pid: str) -> bool:
    """Whether process `pid` has a thread in state D or a zombie main thread now."""
    found = threads(host, pid) or {}
    return found.get(pid, ("", 0))[0] == ZOMBIE or any(s == BLOCKED for s, _ in found.values())


def watch_holders(
    host: Host, entries: list[dict], refused: Reset, *, sleep: Callable[[float], None]
) -> Reset:
    """`refused` with its holders stuck in the kernel (`stuck`), if any.

    Those nvidia-smi still lists on these GPUs once watched; nvidia-smi not answering
    then is a driver hung (`hung`).
    """
    window = hung_task_s(host)
    stuck = unkillable(host, refused.pids, sleep=sleep, window=window)
    if not stuck:
        return refused
    apps = _compute_apps(host)
    if apps is None:
        return _hung(refused.said, f"nvidia-smi {COMPUTE_APPS[0]}", nvidia.SMI_TIMEOUT_S)
    apps = [(pid, uuid) for pid, uuid in _on(entries, apps) if pid in stuck]
    if not apps:  # they let go meanwhile: a live refusal
        return refused
    found = tuple(
        f"{name} ({stuck[pid]})" for name, (pid, _) in zip(_holders(entries, apps), apps)
    )
    return refused._replace(said=f"{refused.said}; {', '.join(found)}", stuck=found)


def unkillable_message(node: str, unit: str, entries: list[dict], refused: Reset) -> str:
    """Blocked (or the action's failure): a reset cannot succeed now; a reboot clears it.

    A holder stuck in the kernel (`stuck`) or a hung driver (`hung`): a failed repair (it
    counts toward escalation); a reboot ends every process, and `repair-gpu` reboots once
    a reset failed within the day (`choose` with REBOOT).
    """
    first = entries[0]
    why = refused.hung or f"held by {', '.join(refused.stuck)}"
    return (
        f"GPU {first.get('index')} ({first.get('uuid')}) cannot be reset: {why}; a failed "
        f"repair; node {node} stays cordoned: a reboot clears it: `juju run {unit} "
        f"repair-gpu` (it reboots at the next hook) or set gpu-auto-repair=reboot"
    )


def reset_refused_message(node: str, entries: list[dict], refused: Reset, then: str = "") -> str:
    """Blocked (or the action's failure): a holder stopped the reset; what to do about it.

    `then`: what follows stopping it (the action: "and run repair-gpu again").
    """
    first = entries[0]
    holders = list(refused.holders or ())
    held = (
        ", ".join(holders)
        if holders
        else f"a client nvidia-smi lists as no process ({refused.words})"
    )
    stop = ", ".join(holders) if holders else f"what holds GPU {first.get('index')}"
    return (
        f"GPU {first.get('index')} ({first.get('uuid')}) reset refused: held by {held}; "
        f"node {node} stays cordoned: stop {stop}{then}, or set gpu-auto-repair=reboot"
    )


def unproven_message(node: str, app: str, detail: str) -> str:
    """Blocked: the gate had no MIG device to run on; the way forward (no failed repair)."""
    return (
        f"node {node} stays cordoned: {detail.removeprefix('cuda FAILED: ').split(';')[0]}"
        f" (not a failed repair): `juju config {app} mig-profile=all-<profile>` (a profile "
        f"with instances) or `juju config {app} mig-profile=all-disabled`, then run repair-gpu"
    )


def still_bare(host: Host, entries: list[dict], records: list[dict], count: int) -> str | None:
    """The unproven gate to repeat without a new repair; None: repair (and gate) again.

    The last repair of these GPUs was `unproven` and a GPU is still in MIG mode with no
    MIG device (`nvidia-smi -L` answering): another repair would prove nothing either.
    """
    uuids = {q.get("uuid") for q in entries}
    last = next((r for r in reversed(records) if r.get("gpu_uuid") in uuids), None)
    if not last or last.get("result") != UNPROVEN:
        return None
    on = gpu_gate.targets(host, count)
    return str(last.get("detail") or "") if on.bare and on.listed else None


def still_held(host: Host, entries: list[dict], records: list[dict]) -> Reset | None:
    """The refusal to repeat without a new try; None: try the reset again.

    The last reset of these GPUs was refused because something held them, and nvidia-smi
    still lists a compute process on them (the node was drained then and stays cordoned:
    it is that holder, or one like it), none of them in the kernel now (`in_the_kernel`):
    one that is (an operator's kill stuck there) is watched by a new try (`unkillable`),
    not waited for; nor is a driver whose nvidia-smi does not answer (the reset says it).
    """
    uuids = {q.get("uuid") for q in entries}
    last = next((r for r in reversed(records) if r.get("gpu_uuid") in uuids), None)
    if not last or (last.get("method"), last.get("result")) != (RESET, REFUSED):
        return None
    apps = _compute_apps(host)
    if apps is None:
        return None
    apps = _on(entries, apps)
    if any(in_the_kernel(host, pid) for pid, _ in apps):
        return None
    holders = _holders(entries, apps)
    return Reset(False, str(last.get("detail") or ""), holders) if holders else None


def _client_pods(kube: Kube, node: str) -> list[str]:
    """The GPU DaemonSets' pods still on this node (kube_objects.GPU_CLIENT_POD_LABEL)."""
    pods = kube.list(
        "v1",
        "Pod",
        label_selector=f"{GPU_CLIENT_POD_LABEL}=true",
        field_selector=f"spec.nodeName={node}",
    )
    return [f"pod {p['metadata'].get('namespace')}/{p['metadata']['name']}" for p in pods]


def _compute_apps(host: Host) -> list[tuple[str, str]] | None:
    """The CUDA processes on the GPUs: (pid, GPU UUID) (`nvidia-smi --query-compute-apps`).

    None: nvidia-smi did not answer within nvidia.SMI_TIMEOUT_S (a hung driver).
    """
    try:
        out = host.run(NVIDIA_SMI, *COMPUTE_APPS, timeout=nvidia.SMI_TIMEOUT_S)
    except CommandError as e:
        if e.returncode == gpu.HUNG_EXIT:  # the runner's timeout
            return None
        return []  # the reset's own answer says what holds the GPU
    rows = [[f.strip() for f in line.split(",")] for line in out.splitlines()]
    return [(r[0], r[1] if len(r) > 1 else "") for r in rows if r[0].isdigit()]


def _compute_processes(host: Host) -> list[str]:
    """The CUDA processes on the GPUs, for the log."""
    apps = _compute_apps(host)
    if apps is None:
        return [f"nvidia-smi not answering within {nvidia.SMI_TIMEOUT_S:.0f} s"]
    return [f"process {pid}" for pid, _ in apps]


def _clients_for(node: str, purpose: str) -> str:
    return f"the GPU clients of node {node} for {PAUSED_FOR[purpose]}"


def pausing(node: str, purpose: str) -> str:
    """What the charm says as it pauses the GPU clients for `purpose` (PAUSED_FOR's words)."""
    return f"pausing {_clients_for(node, purpose)}"


def cannot_pause(node: str, purpose: str) -> str:
    """What the charm says when the API refused that pause."""
    return f"cannot pause {_clients_for(node, purpose)}"


def paused(host: Host) -> bool:
    """Whether this machine's GPU clients may be paused (a pause in flight or cut short)."""
    return host.path(PAUSE_FILE).exists()


def resume_gpu_clients(host: Host, kube: Kube, node: str) -> None:
    """Give the node its GPU DaemonSets back, then the watcher its polls.

    The label goes first: the pause file stays as the mark of a pause to undo if the
    API refuses (the next hook tries again).
    """
    kube.patch("v1", "Node", node, {"metadata": {"labels": {GPU_CLIENTS_LABEL: None}}})
    path = host.path(PAUSE_FILE)
    if path.exists():
        path.unlink()


@contextlib.contextmanager
def gpu_clients_paused(
    host: Host,
    kube: Kube,
    node: str,
    *,
    purpose: str,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    timeout: float | None = None,
    longest: float | None = None,
) -> Iterator[list[str]]:
    """Pause the node's GPU clients for `purpose`; yields the clients still left.

    `longest`: how long the pause may last where that can pass the watcher's default
    (gpu_watcher.PAUSE_MAX_S): the file says so (gpu_watcher.pause_text).

    `purpose`: PAUSE_RESET (a GPU reset) or PAUSE_GATE (the gate's DCGM diagnostic), which
    the pause file and the logs name in gpu_watcher.PAUSED_FOR's words. The watcher's polls
    first (its pause file, new each time: the watcher trusts it
    only so long after it was written), then the GPU DaemonSets (the node label, as the
    kubelet: `kube` acts as this node); waits until no pod of theirs is left, at most
    `timeout` (default CLIENTS_TIMEOUT_S; a pod object goes once the kubelet saw its
    containers stop), then names the compute processes left: the drain waited for the
    other pods to go, so one still there belongs to no pod and is not waited for. What
    is left is yielded (nvidia-smi then refuses and says why). Both are restored on the
    way out, whatever happened.
    """
    path = host.path(PAUSE_FILE)
    if path.exists():
        path.unlink()  # a fresh mtime: the watcher honours a pause only so long
    host.write(PAUSE_FILE, pause_text(node, purpose, longest))
    try:
        kube.patch(
            "v1", "Node", node, {"metadata": {"labels": {GPU_CLIENTS_LABEL: GPU_CLIENTS_PAUSED}}}
        )
        deadline = clock() + (CLIENTS_TIMEOUT_S if timeout is None else timeout)
        left = _client_pods(kube, node)
        while left and clock() < deadline:
            sleep(CLIENTS_POLL_S)
            left = _client_pods(kube, node)
        left += _compute_processes(host)
        if left:
            logger.warning(
                "GPU clients still on node %s for %s: %s",
                node,
                PAUSED_FOR[purpose],
                ", ".join(left),
            )
        yield left
    finally:
        resume_gpu_clients(host, kube, node)


def gate(
    host: Host,
    kube: Kube,
    node: str,
    inventory: GpuInventory,
    images: tuple[str, str, str],
    *,
    timeout: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    progress: Callable[[str], None],
) -> gpu_gate.GateResult:
    """The repair gate on every GPU (gpu_gate.run; `images`: CUDA, DCGM, NCCL).

    DCGM's diagnostic runs with the node's GPU clients paused (`gpu_clients_paused`): the
    DCGM exporter, which stays on a quarantined node, runs a DCGM host engine of its own,
    and NVIDIA supports one per node (gpu_gate.run's `alone`). The pause lasts while the
    clients leave (CLIENTS_TIMEOUT_S) and the diagnostic runs (`timeout`), which may be
    longer than the watcher's default pause: the pause file says how long. A GPU
    quarantined for a memory fault must pass DCGM's memory test (gpu_health.memory_faulted).
    """
    cuda, dcgm, nccl = images
    longest = CLIENTS_TIMEOUT_S + timeout + GATE_PAUSE_MARGIN_S

    def alone() -> contextlib.AbstractContextManager:
        progress(pausing(node, PAUSE_GATE))
        return gpu_clients_paused(
            host, kube, node, purpose=PAUSE_GATE, clock=clock, sleep=sleep, longest=longest
        )

    return gpu_gate.run(
        host,
        cuda_image=cuda,
        dcgm_image=dcgm,
        nccl_image=nccl,
        count=inventory.count,
        model=inventory.model or "",
        timeout=timeout,
        clock=clock,
        progress=progress,
        alone=alone,
        memory=memory_faulted(host),
    )


def _node_labels(kube: Kube, node: str) -> dict:
    obj = kube.get("v1", "Node", node) or {}
    return (obj.get("metadata") or {}).get("labels") or {}


def forget_mig_answer(kube: Kube, node: str) -> None:
    """Before a repair: remove mig-manager's last answer from a node with a MIG layout.

    After a reboot, or a reset's pause of the GPU clients (which takes mig-manager's pod
    away: it is one of them), its container starts again and writes a new answer (main.go
    `start` -> reconfigure.go `Run`: `pending` then `success` or `failed`, or `success` at
    once when the GPUs hold the layout), so what the gate reads (`mig_wait`) is of after
    the repair: a `failed` from before it would fail the gate. Removing the label does not
    wake mig-manager (main.go `ContinuouslySyncMigConfigChanges` reacts only to a change
    of nvidia.com/mig.config). As the kubelet: NodeRestriction lets a node set its own
    labels outside kubernetes.io (mig_layout writes this one too).
    """
    labels = _node_labels(kube, node)
    if labels.get(mig.LABEL_CONFIG) and mig.LABEL_STATE in labels:
        kube.patch("v1", "Node", node, {"metadata": {"labels": {mig.LABEL_STATE: None}}})


def mig_wait(
    host: Host,
    kube: Kube,
    node: str,
    *,
    waited: float,
    wait_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    progress: Callable[[str], None],
) -> mig.Decision:
    """Whether mig-manager has applied the node's MIG layout again (mig.gate_wait).

    From the Node's labels (read as this node's kubelet) and, once mig-manager reports
    `success`, nvidia-smi (`mig.applied`); read again every MIG_POLL_S for at most `wait_s`
    (0 in a hook: the next hook reads again); `waited`: seconds waited before. Act.NOTHING:
    the gate may run.
    """
    started = clock()
    while True:
        labels = _node_labels(kube, node)
        layout, shown = labels.get(mig.LABEL_CONFIG), False
        if layout and labels.get(mig.LABEL_STATE) == "success":
            modes = [g.mig_mode for g in nvidia.read_smi(host).gpus]
            profiles = nvidia.read_mig_profiles(host)
            shown = mig.applied(layout, modes, nvidia.read_mig_devices(host), profiles)
        decision = mig.gate_wait(labels, shown=shown, waited=waited + clock() - started)
        if decision.act is not mig.Act.WAIT or clock() - started + MIG_POLL_S > wait_s:
            return decision
        progress(decision.message)
        sleep(MIG_POLL_S)


def reset_blocker(host: Host, nvswitches: int) -> str | None:
    """Why no GPU of this machine may be reset alone now (None: nothing stops it).

    An NVSwitch machine whose Fabric Manager is not active (see the module docstring).
    """
    if not nvswitches:
        return None
    try:
        host.run(SYSTEMCTL, "is-active", "--quiet", FABRIC_SERVICE)
    except CommandError:
        return f"{FABRIC_SERVICE} is not running on this NVSwitch machine (nvidia-smi -r needs it)"
    return None


def reset_blocked_message(node: str, entries: list[dict], blocker: str) -> str:
    """Blocked: `gpu-auto-repair=reset` and no reset is possible (`reset_blocker`)."""
    first = entries[0]
    return (
        f"GPU {first.get('index')} ({first.get('uuid')}) cannot be reset alone: {blocker}; "
        f"node {node} stays cordoned: start {FABRIC_SERVICE} or set gpu-auto-repair=reboot"
    )


def load_progress(host: Host) -> dict | None:
    """The reboot this unit asked for a repair (method, boot id, GPUs), or None."""
    try:
        found = json.loads(host.read(PROGRESS) or "null")
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def save_progress(
    host: Host,
    *,
    method: str,
    boot: str,
    started: str,
    gpus: list[str],
    mig_since: str | None = None,
) -> None:
    """Record a reboot asked for a repair (the machine outlives the charm's state).

    `mig_since`: when the gate began to wait for mig-manager (`mig_wait`), if it does.
    """
    body = {"method": method, "boot": boot, "started": started, "gpus": gpus}
    if mig_since is not None:
        body["mig_since"] = mig_since
    host.write(PROGRESS, json.dumps(body, sort_keys=True))


def clear_progress(host: Host) -> None:
    """The repair in flight ended (passed, failed or no longer needed)."""
    path = host.path(PROGRESS)
    if path.exists():
        path.unlink()


def escalation_message(
    node: str,
    unit: str,
    app: str,
    zone: str | None,
    failures: list[dict],
    *,
    reboot_untried: bool = False,
) -> str:
    """Blocked: the repairs failed twice; the commands that replace this machine.

    `reboot_untried`: none of the failures was a reboot and one may repair (the faults'
    catalog action is no `support`): `repair-gpu` reboots then (`choose`), which is said
    first, as a reboot clears what a reset cannot (a holder stuck in the kernel).

    `juju add-unit <app> --to zone=<zone>`: `--to` takes placement directives and
    `zone=<zone>` names an availability zone (Juju docs, "Placement directive" and "juju
    add-unit"); the zone is the one Juju gives the hook (JUJU_AVAILABILITY_ZONE, juju
    worker/uniter/runner/context env). Without a zone, a plain add-unit (Juju spreads
    units over the zones itself).
    """
    last = "; ".join(f"{f.get('time')} {f.get('method')}: {f.get('detail')}" for f in failures)
    place = f" --to zone={zone}" if zone else ""
    reboot = (
        f"; no reboot was tried: `juju run {unit} repair-gpu` reboots at the next hook"
        if reboot_untried
        else ""
    )
    return (
        f"GPU repairs failed {len(failures)} times within 24 hours ({last}){reboot}; node {node} "
        f"stays cordoned: replace this machine: `juju add-unit {app}{place}` then "
        f"`juju remove-unit {unit}`"
    )
