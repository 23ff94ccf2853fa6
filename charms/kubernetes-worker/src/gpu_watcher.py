# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The GPU health watcher: a node-local program that quarantines a failing GPU within seconds.

Run by systemd on each GPU worker (`gpu-k8s-gpu-watcher.service`, installed and kept
running by the charm: gpu_health.py) with the machine's python3 and the standard library
only, so it keeps running while Juju replaces the charm's files. Its inputs:

- the kernel log, read from `/dev/kmsg` (Documentation/ABI/testing/dev-kmsg: each read
  returns one record `<prio>,<seq>,<usec>,<flags>;<text>`, continuation lines start with
  a space; a reader that fell behind gets EPIPE once and goes on). /dev/kmsg rather than
  `journalctl -k -f`: no dependency on journald forwarding the kernel's ring buffer or on
  its rate limit, and the sequence number lets a restarted watcher skip what it handled
  (kept in the state file with the boot id). The records' stamps are the kernel's
  local_clock (kernel/printk/printk.c `ts_nsec = local_clock()`), which NTP does not
  slew while it slews CLOCK_MONOTONIC: over months of uptime they part by minutes (10-30
  ppm). So the watcher learns the kernel clock's lag behind CLOCK_MONOTONIC (`calibrate`):
  it writes a record of its own to /dev/kmsg (root may: Documentation/ABI/testing/
  dev-kmsg "Injecting messages"; tools/capture_gpu_health.py --inject-kmsg read its own
  record back on the H200 VM: tests/fixtures/gpu/h200-sxm-vm/health/capture.json
  `read_back`) at start and hourly (CALIBRATE_S), on a fresh open each
  time (the default `printk_devkmsg=ratelimit` allows 10 writes per 5 s per open file:
  printk.c devkmsg_write, commit 750afe7babd1), reads its stamp back, and judges every
  record's age on the kernel's clock now (`kernel_now`). A write the kernel ignores
  (`printk_devkmsg=off`, or rate-limited: devkmsg_write returns success and logs nothing)
  leaves the last lag learnt (none: 0, CLOCK_MONOTONIC as is), said once. A first start
  in a boot (no position kept: the boot's own start, the first revision with the
  watcher, a lost state file) finds the ring buffer's older records there: recorded as
  events "before the watcher started", not counted toward the escalation nor looked
  into, a fatal one quarantining
  (`handle_xid` says why). The NVIDIA driver's XID line
  `NVRM: Xid (PCI:<domain>:<bus>:<device>): <xid>, pid=<pid>, name=<comm>, <text>` (pid
  `'<unknown>'` when no process is involved; some lines carry only the XID; on a MIG GPU
  `(PCI:... GPU-I:<gi>)` or `(PCI:... GPU-I:<gi> GPU-CI:<ci>)` for an XID the driver
  attributes to an instance: it acts on the GPU that holds it and names it): examples in
  NVIDIA/NVSentinel health-monitors/syslog-health-monitor/pkg/xid/parser/csv_test.go and
  NVIDIA's catalog page, recorded in tests/fixtures/gpu/xid/lines.txt;
- `nvidia-smi --query-gpu=index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total,
  remapped_rows.failure,fabric.state,fabric.status,gpu_recovery_action --format=csv,noheader`
  (the ECC counter decides only on a GPU without a recovery action: `smi_findings`) every
  `--interval` seconds (field names: `nvidia-smi --help-query-gpu`; fabric as nvidia.py
  reads it), except while the charm resets a GPU or runs the repair gate's DCGM diagnostic
  (`--pause`, PAUSE_FILE), or the charm's driver update until its reboot. A GPU it cannot
  reach (`... GPU is lost ...`, or a GPU seen before that is missing) is lost, unless
  mig-manager is changing the MIG layout (the Node's MIG_STATE_LABEL, read only then:
  `hold_for_mig`). An answer that says nvidia-smi cannot reach the driver at all
  (`driver_down`: a driver/library version mismatch, no driver loaded, no NVML) judges
  no GPU: an event `DriverUnavailable` says so once, and the kernel's XIDs still act;
  blind for `--driver-blind` (DRIVER_BLIND_S) outside a pause, `DriverUnavailableTooLong`.
  The polls run on their own thread, so a poll that blocks on a lost GPU (each is bounded
  at `--smi-timeout`, then killed: `run_smi`) never delays the kernel's XIDs, read every
  `--tick`. A poll nvidia-smi never answers is a hung driver (`smi_hung`): `SmiHung` once,
  and after `--smi-hung` (SMI_HUNG_S) outside a pause every known GPU is lost;
- the classification, xid_catalog.json (NVIDIA's XID catalog, its source and date inside).
  An XID the catalog lacks (a newer driver's) is classified as its `unknown` entry says:
  support, a quarantine with no automatic repair (the catalog's reasons inside).

What it does for a GPU whose fault the catalog says needs a reset, a reboot or support
(or a health finding), as the node itself (its kubelet's client certificate: the Node
authorizer and NodeRestriction let a node write its own Node status and
spec.unschedulable and evict pods bound to it, not change its taints: kubernetes
plugin/pkg/admission/noderestriction/admission.go):

1. Node condition `GpuHealthy=False` (reason `Xid79`, `EccDoubleBit`, ...; the message names
   the GPU's index, UUID, the XID and its meaning) through nodes/status, the whole
   conditions list with the Node's resourceVersion (a 409 is read again and retried);
2. cordon (`spec.unschedulable: true`): no new pod lands;
3. evicts the pods that hold that GPU: the kubelet's device-manager checkpoint
   (`/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint`: kubernetes
   pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go, PodDeviceEntries with PodUID,
   ResourceName and DeviceIDs per NUMA node) maps each device of an `nvidia.com/` resource
   to the pod it was allocated to. The NVIDIA device plugin's device IDs
   (k8s-device-plugin `--device-id-strategy`, default `uuid`; internal/rm/nvml_devices.go,
   device_map.go) are the GPU's UUID (`GPU-...`), a MIG device's own UUID (`MIG-...`, under
   `nvidia.com/gpu` with the single strategy or `nvidia.com/mig-<profile>` with mixed), or
   either with a time-slicing replica suffix `::<n>` (internal/rm/devices.go
   NewAnnotatedID). A MIG device is mapped to its parent GPU with `nvidia-smi -L` (the MIG
   user guide's listing: a `GPU <i>: ... (UUID: GPU-...)` line, then one
   `MIG <profile> Device <n>: (UUID: MIG-...)` line per device, as mig.py reads it), taken at
   each health poll and kept, since a GPU that fell off the bus lists nothing.
4. while a GPU is quarantined, the Node is read at each health poll: a cordon someone
   lifted (`kubectl uncordon`) is put back, and said so in the log; only readmission
   (gpu_health.readmit, which stops this program first) ends it.

The NoExecute taint is the control plane's to set (a node may not change its taints:
NodeRestriction refuses it, "node %q is not allowed to modify taints"). The unit asks the
control plane's leader for it over the `cluster` relation (`gpu-quarantine`), which only
a hook can write: so right after recording a quarantine (before the API steps, which the
taint does not need) this program wakes its charm, the standard way a machine charm's
service does, with `juju-exec -u <unit> JUJU_DISPATCH_PATH=hooks/gpu-quarantined
./dispatch` (`--unit`; HookRequest). juju-exec (Juju 3.6 reference, "juju-exec": "Run the
specified commands in the hook context for the unit", run by `/bin/bash -s`) asks the
unit agent to run the command once no other hook holds the machine's lock, in the charm's
directory (juju worker/uniter/runner/runner.go runCommandsWithTimeout: WorkingDir
`paths.GetCharmDir()`), so charmcraft's `dispatch` starts the charm with our
JUJU_DISPATCH_PATH (it keeps one that is set: `${JUJU_DISPATCH_PATH:-$0}`), and ops emits
the charm event named by the path's last part, `-` as `_` (ops/_main.py
_Dispatcher._set_name_from_path, _emit_charm_event: `charm.on.gpu_quarantined`). That
hook publishes `gpu-quarantine`; the leader's `cluster` relation-changed taints the Node.
Postgres' charm wakes itself the same way (canonical/postgresql-operator
src/cluster_topology_observer.py `dispatch`). No secret is on that command line: the
unit's name and the hook's. The request runs in its own thread (juju-exec waits while a
hook runs), `HOOK_ATTEMPTS` times at most, each bounded by `--hook-timeout`; a failure is
logged and the watcher goes on (the charm's next update-status asks for the taint too).

An application-class XID (the catalog's RESTART_APP, "restart the application") never
quarantines, and the watcher leaves the restart to the program wherever it can (issue 32
item 2). XIDs 43 and 45 are no fault (the catalog: IGNORE, WORKFLOW_XID_45; a program
ended or torn down, by a kill, a preemption or a GPU reset): counted, nothing else, but
for a line naming a pid within an application fault's burst, which is that fault's
(`burst_line`: it names the process the burst's first line may not).

- the program the fault hit crashes by itself (CUDA's error is sticky: APP_WAIT_S), and
  its pod fails with the program's own exit code, which the job's failure policy counts
  toward max-restarts: a job with a CUDA bug fails after them instead of restarting for
  ever (an eviction would make its launcher's held crash a stop, exit 143 with
  DisruptionTarget, which is not counted: tf_launcher.py "A GPU fault"), and it does not
  walk the escalation from GPU to GPU on other nodes;
- so the pod of the process named by `pid=` (its cgroup names the pod's UID,
  /proc/<pid>/cgroup, read when the XID comes) is evicted only if that process still runs
  in that pod `--app-xid-wait` seconds later (APP_WAIT_S: the launcher's fault window plus
  a margin): a program left running on its broken CUDA context;
- an XID that names no process (`pid='<unknown>'`, usual for XID 13) evicts nobody: the
  process is not known, and the pods holding that GPU may be other tenants' time-sliced
  shares (the burst's XID 43 usually names the process).
- a check not yet due is kept in the state file (`app_checks`: due time, GPU, pid, pod
  UID) and resumed at start: a restart inside the wait (systemd's Restart=, a charm
  upgrade rewriting the unit) would otherwise lose it, the kernel record counting as
  handled already. Not across a reboot (another boot id: pids are reused, the pod's
  processes are gone); a pid reused by another pod is told apart by the pod UID. The
  escalation's memory (each GPU's application faults in the window, its last burst, the
  processes counted) is kept the same way (`app_faults`), so that a restart between the
  second and the third fault does not start the count again; a quarantine of the GPU
  does (its repair and gate come next).

`--escalation N/<window>` application faults on one GPU within the window quarantine it
(reason `XidRepeated`): a GPU that keeps failing whatever runs on it. One fault is one
burst of lines (APP_BURST_S: the same GPU within seconds by the kernel's stamps, or the
same pid), since the driver writes several lines for one fault. A quarantine's NoExecute
taint evicts every team's pods from the node, so one team's program that keeps crashing
must not buy it (issue 32 review, gap 4: a hostile or buggy tenant draining a node other
teams share). Each fault counted is attributed to namespaces: the pod of the process the
line names (its cgroup), else, for a line the driver attributes to a MIG instance, the
pods holding that instance's MIG device (`mig_instances`: `nvidia-smi -q -x` gives each
MIG device's GI and CI), else the pods the kubelet's checkpoint shows holding that GPU
(several with time-slicing or MIG: the fault is ambiguous, any of them may be the
cause), else none (`unattributed`); a later line of the burst that blames better (the
XID 43 naming the process after a pid-less XID 13) replaces them, and a fault whose
first line names no process is decided only `--burst-wait` (APP_BURST_S) later. The
escalation quarantines when no one namespace can have caused every fault of the window
(two teams or more: the GPU fails whatever runs on it), when none is named (the GPU is
the likely cause), or when the quarantine would evict no running GPU pod of a namespace
that may be innocent (only GPU holders count: other namespaces' DaemonSets, the device
plugin and the DCGM exporter, run on every node). Otherwise (one namespace, or the
namespaces sharing the GPU, may have caused every fault while others hold GPUs here) it
records the event `XidRepeatedOneTeam` (its `namespace`: that one, or the suspects
joined by `,`), counts it and restarts only that job, as each application XID does; once
the other teams' GPU pods are gone, the next fault escalates. Without the API the fault
is unattributed and the escalation quarantines, as before.

XID 154 (GPU_RECOVERY_ACTION_CHANGED) has no action of its own in the catalog (bucket
XID_154): it names the recovery action the driver now asks for the GPU (`... changed from
0x0 (None) to 0x2 (Node Reboot Required)`), classified by its number (the catalog's
`recovery_actions`, NVML's nvmlDeviceGpuRecoveryAction_t).

It writes what it found to `--state` (JSON, read by the charm for the unit's status and
`gpu-health`) and serves its metrics on 127.0.0.1:`--metrics-port` for the unit's COS
agent (Prometheus text format 0.0.4; `metrics()` names each):

- `gpu_k8s_gpu_faults_total{node,gpu,uuid,xid,reason,class}`: each XID the driver reported
  and each nvidia-smi finding (xid "" there), `class` the catalog's action for it;
- `gpu_k8s_gpu_quarantines_total{node,gpu,uuid,reason}` and `gpu_k8s_gpu_quarantined`;
- `gpu_k8s_gpu_xid_repeated_one_team_total{node,gpu,uuid,namespace}`: escalations held
  back because the faults all came from that namespace's pods, or from a GPU that
  namespaces share with no process named (then `namespace` joins them with `,`)
  (`XidRepeatedOneTeam`);
- `gpu_k8s_gpu_repairs_total{node,gpu,uuid,method,result}`: the repair attempts the charm
  counted in the state file (`repair_counts`, gpu_health.py: never truncated, unlike its
  `repairs` history); zero for every known GPU, method and result until then, so
  `increase()` sees the first one;
- `gpu_k8s_gpu_quarantined_since_timestamp_seconds` while a GPU is quarantined (alerts:
  quarantined for too long);
- `gpu_k8s_gpu_driver_unavailable_since_timestamp_seconds{node}` while nvidia-smi cannot
  reach the driver outside a pause (`driver_unavailable`; alert: for too long);
- `gpu_k8s_gpu_smi_hung_since_timestamp_seconds{node}` while nvidia-smi's polls go
  unanswered outside a pause (`smi_hung`; alert: past SMI_HUNG_S);
- `gpu_k8s_gpu_fault_to_quarantine_seconds` and `gpu_k8s_gpu_fault_to_readmission_seconds`:
  the last fault's times per GPU, last values rather than histograms: a GPU faults a few
  times a year, so buckets would hold almost nothing and need keeping across reboots,
  while each value stays on the dashboard as a point per GPU and
  `max_over_time(...[30d])` shows the worst. The fault's time is the kernel's timestamp
  of the XID record where it can be read (/dev/kmsg's microseconds since boot, on the
  kernel's clock `calibrate` learnt: within 5 minutes of now), else when this program read it;
  readmission is the charm's `Readmitted` event (gpu_health.readmit) or `readmitted_at`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import http.client
import http.server
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from xml.etree import ElementTree

# the driver's line; the PCI part is domain:bus:device (NVSentinel csv_test.go, the catalog),
# followed by the MIG instance the driver attributes the XID to, where it can: `GPU-I:<gi>`
# or `GPU-I:<gi> GPU-CI:<ci>` (NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/
# kernel_rc.c, XID_PRINT_WITH_ATTR: "PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u")
XID_LINE = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F]+)(?:\.\d)?"
    r"(?:\s+GPU-I:(?P<gi>\d+)(?:\s+GPU-CI:(?P<ci>\d+))?)?\): "
    r"(?P<xid>\d+)(?:, pid=(?P<pid>'?<unknown>'?|\d+))?(?:, name=(?P<name>[^,]*))?"
    r"(?:, (?P<text>.*))?$"
)
SMI_FIELDS = (
    "index",
    "uuid",
    "pci.bus_id",
    "ecc.errors.uncorrected.volatile.total",
    "remapped_rows.failure",
    "fabric.state",
    "fabric.status",
    "gpu_recovery_action",
    # recorded when it changes (`fabric_health`), acted on by no rule: NVML defines its
    # values (nvmlGpuFabricInfo_v4_t healthSummary, NVML_GPU_FABRIC_HEALTH_SUMMARY_*: not
    # supported, healthy, unhealthy, limited capacity) but no source we read shows the
    # words nvidia-smi prints for them; the fabric's state and status still quarantine
    "fabric.health.summary",
)
# How nvidia-smi prints the recovery action the driver asks for a GPU (`gpu_recovery_action`,
# NVML's nvmlDeviceGpuRecoveryAction_t): the names of NVIDIA's GPU Memory Error Management
# guide, "Error Recovery and Response Flags" (None = NVML_GPU_RECOVERY_ACTION_NONE, Reset =
# _GPU_RESET, Reboot = _NODE_REBOOT, Drain P2P = _DRAIN_P2P, Drain and Reset =
# _DRAIN_AND_RESET), `None` as the H200 recording shows it
# (tests/fixtures/gpu/h200-sxm-vm/nvidia-smi-q.xml); by number too, since no capture of the
# other names from `--query-gpu` was found. `N/A`: the GPU does not report it.
SMI_RECOVERY_ACTIONS = {
    "none": "0",
    "reset": "1",
    "reboot": "2",
    "drain p2p": "3",
    "drain and reset": "4",
}
# The fields every row needs; the others are health readings a driver may not know
# (fields come and go between driver branches: nvidia-smi --help-query-gpu).
SMI_KEYS = ("index", "uuid", "pci.bus_id")
# nvidia-smi refusing the whole query for one field it does not know (exit non-zero, no
# row), as users quote it: `Field "cuda_version" is not a valid field to query.`
SMI_UNKNOWN_FIELD = re.compile(r'Field "(?P<field>[^"]+)" is not a valid field to query')
# nvidia-smi on a GPU it cannot reach, as users quote it: "Unable to determine the device
# handle for GPU0: 0000:01:00.0: GPU is lost. Reboot the system to recover this GPU" (also
# "for gpu 0000:01:00.0:" and "for GPU:0000:01:00.0:"): the PCI address is the one to find
LOST = re.compile(r"(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d)\b.*GPU is lost")
# nvidia-smi naming a GPU it could not open, whatever the reason it gives ("GPU is lost",
# "Unknown Error": NVIDIA/open-gpu-kernel-modules#387, a GPU that fell off the bus): an
# answer about that GPU, so NVML itself started
GPU_HANDLE = re.compile(r"Unable to determine the device handle for", re.IGNORECASE)
# nvidia-smi failing for the whole driver, not for a GPU (`driver_down`): no GPU row, no
# GPU named, and its exit status or its words say NVML could not start. Exit statuses:
# nvidia-smi(1) RETURN VALUE (docs.nvidia.com/deploy/nvidia-smi) 9 "NVIDIA driver is not
# loaded", 12 "NVML Shared Library couldn't be found or loaded"; 18 is NVML's
# NVML_ERROR_LIB_RM_VERSION_MISMATCH ("RM detects a driver/library version mismatch", nvml.h
# nvmlReturn_t), which the man page does not list. Or its exact words for these three (an
# exit status other tools may not pass on): "Failed to initialize NVML: Driver/library
# version mismatch", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA
# driver", "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system" (gpu.py reads
# the first two for the charm's status; tests/gpu_watcher_machine.py SMI_DRIVER_DOWN names
# where each was seen). Not any "Failed to initialize NVML: ...": nvmlInit_v2 also fails
# with NVML_ERROR_UNKNOWN "on any unexpected error" (nvml.h), and nvidia-smi exits with the
# nvmlReturn_t it got (15 "GPU is lost", 14 "Corrupted infoROM", 10 an interrupt issue, 8
# "Insufficient External Power", 255 "Unknown Error"): states of the hardware, which take
# the path of a GPU not answering (each GPU known before is lost).
# The charm's own driver update gives the first between its install and Juju's reboot
# (drain_turns.py): no GPU fell off the bus. A GPU that does (XID 79) leaves NVML working
# and the others answering: nvidia-smi names it (GPU_HANDLE) or leaves its row out.
SMI_DRIVER_CODES = (9, 12, 18)
SMI_DRIVER_TEXTS = (
    "Failed to initialize NVML: Driver/library version mismatch",
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
    "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system",
)
# How long nvidia-smi may stay blind (`driver_down`) outside a pause before the watcher says
# so (`DriverUnavailableTooLong` and the gauge gpu_k8s_gpu_driver_unavailable_since_
# timestamp_seconds, which GpuDriverUnavailable alerts on past the same 10 minutes). The
# charm's own update pauses the polls until its reboot (PAUSE_DRIVER), so a blind poll
# outside a pause is a driver nobody is updating (a package updated outside the charm, a
# module that did not load) or a fault with no XID: no GPU is judged meanwhile. Not a
# quarantine of every GPU: the commonest cause, a userspace update ahead of the loaded
# module, leaves the running jobs working (their processes hold the loaded library), and
# evicting them would end good work for a fault no GPU has; the kernel's XIDs still act.
DRIVER_BLIND_S = 600.0
# Each nvidia-smi call is bounded (`run_smi`): at `--smi-timeout` its process group is
# killed and the call is given up SMI_KILL_WAIT_S later whatever happened, since a process
# in state D (a hung driver) does not end on SIGKILL until the driver returns, and
# CPython's subprocess.run() waits for the killed child without bound (Lib/subprocess.py,
# v3.11.7, run(): `process.kill()` then `process.wait()`). A call that timed out answers
# SMI_HUNG_EXIT, the charm's runner's timeout status (gpu.py HUNG_EXIT); the charm calls
# that driver SmiState.HUNG. A hung poll is a finding (`smi_hung`): an event `SmiHung` once
# per outage, the gauge gpu_k8s_gpu_smi_hung_since_timestamp_seconds (GpuSmiHung), and hung
# polls spanning `--smi-hung` outside a pause quarantine every known GPU as lost (XID 79's
# catalog entry: a reboot, the repair for a hung driver). Both bounds are our choice: NVIDIA
# documents none for nvidia-smi (hung44's nvidia.py SMI_TIMEOUT_S gives the charm 30 s).
# 45 s and 3 minutes, not less (last44b M1): on idle GPUs without persistence mode a
# healthy nvidia-smi initialises the driver on each call and may take ~30 s on a
# multi-GPU machine (Azure/aks-gpu PR #105: persistence cut it "from 30 to 2 sec"), and
# a slow answer must never quarantine a healthy node; a hung driver still does, past
# SMI_HUNG_S.
SMI_TIMEOUT_S = 45.0
SMI_KILL_WAIT_S = 3.0
SMI_HUNG_EXIT = -1
SMI_HUNG_S = 180.0
# A node-wide event's GPU (`DriverUnavailable`): it is about no one GPU
EVERY_GPU = {"index": "all", "uuid": "-"}
# mig-manager's state label (mig.py LABEL_STATE; NVIDIA/mig-parted v0.15.0
# pkg/mig/reconfigure/reconfigure.go): `pending` while it applies a layout, `rebooting`
# while the node reboots for one, then `success` or `failed`. Changing a GPU's MIG mode
# resets it (NVIDIA's MIG user guide, "Deployment Considerations": every client holding the
# driver must stop; the A100 guide: enabling MIG resets the GPU), so a GPU missing from
# nvidia-smi's answer meanwhile is mig-manager's doing (`hold_for_mig`), for `--mig-hold`
# (MIG_HOLD_S) at most: mig-manager stopped mid-apply leaves `pending` behind (mig.py).
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_CHANGING = ("pending", "rebooting")
MIG_HOLD_S = 900.0
POD_CGROUP = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
QUARANTINE = ("reset-gpu", "reboot", "support")  # weakest first: a later fault may raise it
CONDITION = "GpuHealthy"  # kube_objects.GPU_HEALTHY: no lib here (stdlib only); a test pins it
CORDONED = "gpu-k8s/cordoned"  # lib drain.py CORDON_ANNOTATION: a cordon the charm lifts
NVIDIA_RESOURCES = "nvidia.com/"  # nvidia.com/gpu, nvidia.com/mig-<profile>, renamed shares
WINDOW_UNITS = {"s": 1, "m": 60, "h": 3600}
# A pod's phases after which it runs nothing (core/v1 types.go PodSucceeded, PodFailed): its
# device entry lingers in the kubelet's checkpoint until the next allocation frees it
# (kubernetes pkg/kubelet/cm/devicemanager/manager.go UpdateAllocatedDevices)
TERMINAL_PHASES = ("Succeeded", "Failed")
UNATTRIBUTED = "unattributed"  # an application fault no pod can be blamed for
# How an application fault was attributed: by its process's pod, by the pods holding its GPU
# or by the pods holding the MIG device of the instance the line names
BY_PROCESS, BY_GPU, BY_INSTANCE = "process", "gpu", "instance"
# XID 154's text: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
RECOVERY_ACTION = re.compile(r"\bto\s+0x(?P<code>[0-9a-fA-F]+)(?:\s*\((?P<name>[^)]*)\))?")
# `nvidia-smi -L` (MIG user guide, mig.py): a GPU line, then its MIG devices, each with its
# index on that GPU (`MIG 1g.5gb      Device  0: (UUID: MIG-...)`)
SMI_GPU = re.compile(r"^GPU\s+\d+:.*\(UUID:\s*(?P<uuid>GPU-[^)\s]+)\)")
SMI_MIG = re.compile(
    r"^\s+MIG\s.*?(?:Device\s+(?P<index>\d+):\s*)?\(UUID:\s*(?P<uuid>MIG-[^)\s]+)\)"
)
KERNEL_CLOCK_SKEW = 300.0  # a kernel timestamp further than this from now is not trusted
# the watcher's own /dev/kmsg record, to learn the kernel clock's lag (`calibrate`): at
# start, then at most this often (30 ppm of drift is 0.1 s an hour); LOG_USER, info
# (devkmsg_write: the `<N>` prefix's lower 3 bits are the level, the rest the facility)
KMSG_MARK = "gpu-k8s-gpu-watcher: kernel clock mark"
KMSG_MARK_PRIO = 14
CALIBRATE_S = 3600.0
CALIBRATE_WAIT = 0.5  # the kernel stores the record within write(); a fake, within ms
REPAIR_METHODS = ("reset", "reboot")  # gpu-auto-repair's methods: zero series for each
REPAIR_RESULTS = ("ok", "failed", "refused")  # refused: gpu_repair.REFUSED
# While the charm resets a GPU or runs the repair gate's DCGM diagnostic
# (gpu_repair.gpu_clients_paused) this file exists and the watcher runs no nvidia-smi:
# nvidia-smi -r refuses a GPU that another nvidia-smi holds
# (nvidia-smi(1) -r: "There can't be any applications using these devices (... monitoring
# application like other instance of nvidia-smi)"), and a GPU the reset takes away for a
# moment is no GPU lost from the bus. The kernel's XID records are still read. The file is
# honoured only while its mtime is within PAUSE_MAX_S of now, so a hook killed mid-reset
# cannot silence the watcher for longer (the charm's next hook removes it: gpu_repairs.py).
# Under /run: a tmpfs, so a reboot forgets it too.
PAUSE_FILE = "/run/gpu-k8s/gpu-watcher-pause"
PAUSE_MAX_S = 600.0
# A pause that says how long it may last (`pause_text`'s `longest`: the repair gate's
# DCGM diagnostic, bounded by the gate's timeout, up to repair-gpu's longest: 3600 s,
# charm_config.MAX_DRAIN_TIMEOUT) is honoured that long, never past PAUSE_LONGEST_S.
PAUSE_LONGEST_S = 7200.0
PAUSE_LONGEST_LINE = re.compile(r"^for at most (?P<seconds>\d+) s$", re.MULTILINE)
# What the charm pauses the GPU clients for, the one place these words live: the pause
# file holds `<node>: paused for <words>` (`pause_text`), the watcher's log says them
# (`paused_for`) and so do the charm's logs. The repair gate pauses them too, for DCGM's
# diagnostic only (one DCGM host engine per node: gpu_gate.run's `alone`).
PAUSE_RESET, PAUSE_GATE, PAUSE_DRIVER = "reset", "gate", "driver"
PAUSED_FOR = {
    PAUSE_RESET: "a GPU reset",
    PAUSE_GATE: "the repair gate's DCGM diagnostic (dcgmi diag)",
    # drain_turns.py: the new driver's userspace over the running kernel module until Juju
    # reboots the machine (nvidia-smi: "Driver/library version mismatch"); the reboot
    # clears /run, so the pause ends with it
    PAUSE_DRIVER: "the NVIDIA driver's update and the reboot after it",
}


def pause_text(node: str, purpose: str, longest: float | None = None) -> str:
    """The pause file's text for `purpose` (PAUSE_RESET, PAUSE_GATE).

    `longest`: how long the pause may last, in seconds, where it may outlast PAUSE_MAX_S
    (a second line the watcher reads: `pause_seconds`); None: PAUSE_MAX_S.
    """
    text = f"{node}: paused for {PAUSED_FOR[purpose]}\n"
    if longest is not None:
        text += f"for at most {int(longest + 0.999)} s\n"
    return text


def pause_seconds(text: str, default: float) -> float:
    """How long a pause file's text is honoured, in seconds after it was written.

    Its `longest` line, at least `default` (the watcher's --pause-max) and at most
    PAUSE_LONGEST_S; `default` without one.
    """
    found = PAUSE_LONGEST_LINE.search(text)
    if found is None:
        return default
    return min(max(float(found["seconds"]), default), max(PAUSE_LONGEST_S, default))


def paused_for(text: str) -> str:
    """What a pause file says the pause is for (`pause_text`), or its first line as it is."""
    line = (text.splitlines() or [""])[0].strip()
    said = line.partition(": paused for ")[2]
    return said or line or "an unnamed pause"


# One program fault is a burst of XID lines: the driver writes each exception of the fault
# (Warp Exception, Global Exception, Graphics Exception ESR) as its own XID 13 line, often
# followed by an XID 43 naming the process, all within a millisecond or so; the recorded
# burst (tests/fixtures/gpu/xid/lines.txt, from leptonai/gpud's XID README) is three
# lines that `dmesg --ctime` stamps the same second. Application XIDs on one GPU whose
# kernel stamps lie within APP_BURST_S of the burst's first line are one fault toward the
# escalation: a thousand times the spread seen, and far below the time a job takes to
# fault again after a restart (a new pod: its sandbox, image, the framework's import and
# a new CUDA context). The same process (pid) faulting again within the escalation window
# is the same fault too. Every line still counts in gpu_k8s_gpu_faults_total.
APP_BURST_S = 5.0
# How long after an application XID the process it names may still run before its pod is
# evicted (`--app-xid-wait`): the training launcher's fault window (actions/tf_launcher.py
# FAULT_WINDOW, 10 s) plus a 5 s margin. A program the fault hit fails at its next CUDA
# call and exits by itself long before: the error is sticky ("This leaves the process in
# an inconsistent state and any further CUDA work will return the same error. To continue
# using CUDA, the process must be terminated and relaunched": CUDA runtime API,
# cudaErrorLaunchFailure, cudaErrorIllegalAddress), which is what the catalog's
# RESTART_APP asks. One still alive then was left running on its broken context (a server
# that catches the error serves errors for hours: antirez/ds4#759), and only an eviction
# restarts it.
APP_WAIT_S = 15.0
# The reason of the DisruptionTarget condition the watcher sets on a pod it deletes from a
# quarantined GPU past its PodDisruptionBudget (`Watcher._delete`). The reasons Kubernetes
# sets name who disrupted the pod (EvictionByEvictionAPI: eviction.go; DeletionByTaintManager:
# taint_eviction.go; TerminationByKubelet, PreemptionByScheduler: core/v1 types.go); a
# Job's podFailurePolicy reads only the condition's type and status (onPodConditions), so
# this one names the watcher.
DISRUPTION_REASON = "DeletionByGpuHealthWatcher"


class Gauge(tuple):
    """One sample: (name, help, value, labels), rendered as a gauge."""

    kind = "gauge"

    def __new__(cls, name: str, help: str, value: float, labels: dict | None = None):  # noqa: D102
        return super().__new__(cls, (name, help, value, labels or {}))


class Counter(Gauge):
    """One sample of a counter (its name ends in `_total`)."""

    kind = "counter"


class AppFault:
    """One application fault counted toward the escalation: when, and whom it is blamed on.

    `at`: the kernel's stamp of its first line, in seconds since boot (the window's clock);
    `namespaces`: of the pods it is attributed to (UNATTRIBUTED: none); `by`: BY_PROCESS,
    BY_INSTANCE, BY_GPU or "" (nobody).
    """

    def __init__(self, at: float, namespaces: set[str], by: str):
        self.at, self.namespaces, self.by = at, namespaces, by

    def merge(self, line: AppFault) -> bool:
        """A later line of the same burst: it may blame better (process, instance, GPU).

        A process it names outranks the holders of the MIG instance it names, which
        outrank the GPU's holders.

        Whether whom the fault is blamed on changed.
        """
        before = (set(self.namespaces), self.by)
        rank = ("", BY_GPU, BY_INSTANCE, BY_PROCESS).index
        if rank(line.by) > rank(self.by):
            self.namespaces, self.by = set(line.namespaces), line.by
        elif line.by and line.by == self.by:
            self.namespaces |= line.namespaces
        return (self.namespaces, self.by) != before


def pci_key(text: str) -> str:
    """`0000:3b:00` from `PCI:0000:3B:00`, `00000000:3B:00.0` or `0000:3b:00.0`."""
    domain, bus, device = text.split(".")[0].split(":")[-3:]
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"


def parse_escalation(text: str) -> tuple[int, float]:
    """`3/10m` -> (3, 600.0)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*([smh])\s*", text)
    if not match or int(match[1]) < 1 or int(match[2]) < 1:
        raise ValueError(f"{text!r} is not <count>/<window> such as 3/10m")
    return int(match[1]), float(int(match[2]) * WINDOW_UNITS[match[3]])


def parse_xid(text: str) -> dict | None:
    """The XID record of one kernel log text, or None."""
    match = XID_LINE.search(text)
    if not match:
        return None
    pid = match["pid"] or ""
    gi, ci = match["gi"], match["ci"]
    return {
        "pci": pci_key(match["pci"]),
        "xid": match["xid"],
        "pid": int(pid) if pid.isdigit() else None,
        "text": (match["text"] or "").strip(),
        # the MIG instance the driver attributed it to (None: the whole GPU)
        "gpu_instance": str(int(gi)) if gi is not None else None,
        "compute_instance": str(int(ci)) if ci is not None else None,
    }


def mig_instances(xml: str, indexes: dict[tuple[str, str], str]) -> dict[str, tuple[str, str]]:
    """{MIG device UUID: (GPU instance, compute instance)} from `nvidia-smi -q -x`.

    `indexes`: {(GPU UUID, MIG device index): MIG device UUID}, from `nvidia-smi -L`
    (`Device <n>`). The XML names each MIG device of a GPU by the same index, with its GPU
    instance and compute instance IDs and no UUID: `<gpu><mig_devices><mig_device>
    <index>0</index><gpu_instance_id>1</gpu_instance_id><compute_instance_id>0</...>`
    (not captured on MIG hardware here: the form as gpustack's nvidia_smi.py
    decode_gpu_devices_xml quotes driver 575.57.08's output, and ceems-dev/ceems
    pkg/collector/lsf_test.go @353c8dd, driver 535.129.03). The driver's XID line names
    the same IDs (`GPU-I:<gi> GPU-CI:<ci>`); the device plugin maps a MIG device to them
    through NVML (k8s-device-plugin internal/rm/health.go getMigDeviceParts). Unreadable XML: {}.
    """
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as e:
        print(f"nvidia-smi -q -x unreadable: {e}", file=sys.stderr)
        return {}
    found = {}
    for gpu in root.iter("gpu"):
        uuid = (gpu.findtext("uuid") or "").strip()
        for device in gpu.iter("mig_device"):
            index = (device.findtext("index") or "").strip()
            gi = (device.findtext("gpu_instance_id") or "").strip()
            ci = (device.findtext("compute_instance_id") or "").strip()
            mig = indexes.get((uuid, index))
            if mig and gi.isdigit() and ci.isdigit():
                found[mig] = (str(int(gi)), str(int(ci)))
    return found


def mig_instance(record: dict) -> str:
    """` (MIG GPU instance 2, compute instance 0)` for an XID attributed to one, else ``."""
    if record.get("gpu_instance") is None:
        return ""
    said = f"MIG GPU instance {record['gpu_instance']}"
    if record.get("compute_instance") is not None:
        said += f", compute instance {record['compute_instance']}"
    return f" ({said})"


def parse_smi(out: str, fields: tuple[str, ...] = SMI_FIELDS) -> tuple[dict[str, dict], set[str]]:
    """(GPUs by PCI key, PCI keys nvidia-smi reported lost) from the query's output.

    `fields`: the columns the query asked for; a field of SMI_FIELDS left out reads N/A.
    """
    gpus, lost = {}, set()
    for line in out.splitlines():
        found = LOST.search(line)
        if found:
            lost.add(pci_key(found["pci"]))
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < len(SMI_KEYS) + 1 or not cells[0].isdigit():
            continue
        cells += ["N/A"] * (len(fields) - len(cells))
        row = dict.fromkeys(SMI_FIELDS, "N/A") | dict(zip(fields, cells))
        gpus[pci_key(row["pci.bus_id"])] = row
    return gpus, lost


def smi_read(value: str) -> bool:
    """Whether nvidia-smi read a field's value (not `N/A`, nor `[Unknown Error]` and such)."""
    value = value.strip()
    return bool(value) and value != "N/A" and not value.startswith("[")


def recovery_code(value: str) -> str | None:
    """NVML's number of the recovery action nvidia-smi printed (by number or name), or None.

    None as well for a word this watcher does not know (a driver that spells them
    otherwise): it decides nothing, and the GPU is judged by its uncorrectable ECC count,
    as one without the field is, rather than every GPU of every node that reports that
    word being quarantined at once.
    """
    value = value.strip()
    if not smi_read(value):
        return None
    return value if value.isdigit() else SMI_RECOVERY_ACTIONS.get(value.lower())


def smi_recovery_action(catalog: dict, value: str) -> tuple[str, str]:
    """(action, what the driver asks) for nvidia-smi's `gpu_recovery_action`.

    By name (SMI_RECOVERY_ACTIONS) or number, through the catalog's `recovery_actions`
    (XID 154's, NVML's numbers); one it does not know quarantines with `support`.
    """
    code = recovery_code(value)
    actions = catalog["xids"]["154"]["recovery_actions"]
    return (actions.get(code, "support") if code is not None else "support"), value.strip()


def smi_findings(row: dict) -> list[str]:
    """Health findings of one GPU row: ecc-dbe or recovery, row-remap-failure, fabric.

    A GPU that reports its recovery action (error containment: A100, H100 and later) is
    quarantined by that action (`recovery`, unless it is None): its volatile
    uncorrectable ECC counter also counts the errors the GPU contained to the program
    that hit them (XID 94), after which "additional workloads can be launched on this GPU
    without requiring a GPU reset" (NVIDIA's GPU Memory Error Management guide, "Response
    to Uncorrectable Contained ECC Errors"; "Recovery action flag will be triggered for
    uncorrectable errors": "Error Recovery and Response Flags"). A GPU that does not
    (`N/A`: V100, T4, no containment; or a driver without the field), or reports a
    word this watcher cannot read (`recovery_code`), is quarantined on any
    uncorrectable error (`ecc-dbe`), as every workload on it was hit.
    """
    found = []
    dbe, recovery = row["ecc.errors.uncorrected.volatile.total"], row["gpu_recovery_action"]
    code = recovery_code(recovery)
    if code is not None:
        if code != "0":
            found.append("recovery")
    elif dbe.isdigit() and int(dbe) > 0:
        found.append("ecc-dbe")
    if row["remapped_rows.failure"] in ("Yes", "1"):
        found.append("row-remap-failure")
    if row["fabric.state"] == "Completed" and row["fabric.status"] not in ("Success", "N/A"):
        found.append("fabric")
    return found


class Api:
    """The Kubernetes API as this node (client certificate), over TLS, standard library only."""

    def __init__(self, config: dict):
        url = urllib.parse.urlsplit(config["server"])
        self.host, self.port = url.hostname or "", url.port or 443
        self.ca, self.client = config["ca"], config["client"]

    def request(self, method: str, path: str, body: dict | None = None, ctype: str = "") -> dict:
        """One request; raises ApiError with the status on anything but 2xx."""
        context = ssl.create_default_context(cadata=self.ca)
        context.load_cert_chain(self.client)  # read anew: kubelet rotates it
        conn = http.client.HTTPSConnection(self.host, self.port, context=context, timeout=10)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = ctype or "application/json"
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            text = response.read().decode()
        finally:
            conn.close()
        if response.status >= 300:
            raise ApiError(response.status, text)
        return json.loads(text) if text else {}


class ApiError(Exception):
    """A refused or failed API request."""

    def __init__(self, status: int, text: str):
        super().__init__(f"{status}: {text[:300]}")
        self.status = status


def now_iso(clock: float) -> str:
    """RFC 3339 seconds, as Kubernetes writes times."""
    return datetime.datetime.fromtimestamp(clock, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def parse_iso(text: str) -> float | None:
    """Seconds since the epoch of `2026-11-28T10:00:00Z` (None if it is not such a time)."""
    try:
        when = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError):
        return None
    return when.replace(tzinfo=datetime.timezone.utc).timestamp()


def kernel_wall(usec: int, wall: float, kernel: float) -> float | None:
    """The wall-clock time of a kernel record stamped `usec` after boot, roughly.

    /dev/kmsg stamps records with the kernel's local clock in microseconds since boot
    (Documentation/ABI/testing/dev-kmsg; kernel/printk/printk.c `ts_nsec = local_clock()`),
    close to the clock time.monotonic() reads on Linux (CLOCK_MONOTONIC: 1 ms apart on
    the H200 recording, tests/fixtures/gpu/h200-sxm-vm/health/capture.json): neither counts
    time suspended, which /proc/stat's `btime` (whole seconds, from CLOCK_BOOTTIME) does.
    Over months the two drift apart by minutes (NTP slews CLOCK_MONOTONIC, not the local
    clock; dmesg(1) -T warns its times "could be inaccurate"), so `kernel` is the kernel's
    clock now, in seconds: CLOCK_MONOTONIC less the lag `calibrate` learnt. A stamp ahead
    of it (drift since the last calibration) is now. None: no stamp.
    """
    if usec < 0:
        return None
    return wall - max(kernel - usec / 1e6, 0.0)


def kernel_time(usec: int, wall: float, kernel: float) -> float | None:
    """`kernel_wall`, only for a stamp within KERNEL_CLOCK_SKEW of now (the fault's timings)."""
    if kernel - usec / 1e6 > KERNEL_CLOCK_SKEW:
        return None
    return kernel_wall(usec, wall, kernel)


def run_smi(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run nvidia-smi in its own process group, bounded (SMI_TIMEOUT_S says why and how).

    Past `timeout` the group is killed, waited for SMI_KILL_WAIT_S at most, then left (a
    child that outlives its kill is reaped by subprocess at a later Popen, or by init):
    the answer is SMI_HUNG_EXIT. OSError (no such program) is the caller's.
    """
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if child.poll() is None:  # not reaped: its pid is still its group's id
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
        try:
            child.wait(timeout=SMI_KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            print(f"nvidia-smi did not end {SMI_KILL_WAIT_S:g}s after SIGKILL: left", flush=True)
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()
        said = f"nvidia-smi did not answer within {timeout:g}s"
        return subprocess.CompletedProcess(argv, SMI_HUNG_EXIT, "", said)
    return subprocess.CompletedProcess(argv, child.returncode, out, err)


def driver_down(code: int, out: str, gpus: dict, lost: set) -> bool:
    """Whether nvidia-smi's answer says it cannot reach the driver at all (SMI_DRIVER_CODES).

    Never when it printed a GPU's row or named a GPU: then NVML started.
    """
    if code == 0 or gpus or lost or GPU_HANDLE.search(out):
        return False
    return code in SMI_DRIVER_CODES or any(text in out for text in SMI_DRIVER_TEXTS)


def recovery_action(entry: dict, text: str) -> tuple[str, str]:
    """XID 154's (action, what the driver asks): by the number the line names.

    A number the catalog does not list quarantines with `support` (fail closed).
    """
    found = RECOVERY_ACTION.search(text)
    if not found:
        return "support", "a recovery action this watcher cannot read"
    code = str(int(found["code"], 16))
    name = (found["name"] or "").strip() or f"0x{found['code']}"
    return entry["recovery_actions"].get(code, "support"), name


def classify(catalog: dict, xid: str, text: str) -> tuple[str, str]:
    """(action, meaning) of one XID: the catalog's entry, or its `unknown` one.

    An XID the catalog lacks was added by a driver newer than the catalog as read: it
    quarantines with `support` (the catalog's `unknown.why`), never as an application fault.
    """
    entry = catalog["xids"].get(xid)
    if entry is None:
        unknown = catalog["unknown"]
        return unknown["action"], (
            f"XID {xid}: not in NVIDIA's catalog as read on {catalog['read']} "
            "(a newer driver's XID: no automatic repair is known)"
        )
    meaning = f"XID {xid} {entry['mnemonic']}: {entry['description']}"
    if "recovery_actions" in entry:  # XID 154: the action is in the line
        action, asked = recovery_action(entry, text)
        return action, f"{meaning} ({asked})"
    return entry["action"], meaning


HOOK = "hooks/gpu-quarantined"  # the charm's `gpu_quarantined` event (charm.py)
HOOK_ATTEMPTS = 3  # juju-exec runs at most this often per request, `--hook-retry` * 3^n apart


def hook_argv(juju_exec: str, unit: str) -> list[str]:
    """juju-exec's command line that dispatches the charm's `gpu_quarantined` event."""
    return [juju_exec, "-u", unit, f"JUJU_DISPATCH_PATH={HOOK} ./dispatch"]


class HookRequest:
    """Ask the unit agent for a `gpu-quarantined` hook, off the watcher's loop.

    One request runs at a time; one asked while it runs runs again after it (the hook
    reads the state file when it runs, so one more run covers every quarantine before).
    """

    def __init__(self, argv: list[str], retry: float, timeout: float):
        self.argv, self.retry, self.timeout = argv, retry, timeout
        self.lock = threading.Lock()
        self.running = self.again = False

    def ask(self) -> None:
        """Request the hook (returns at once)."""
        with self.lock:
            if self.running:
                self.again = True
                return
            self.running = True
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self._request()
            with self.lock:
                if not self.again:
                    self.running = False
                    return
                self.again = False

    def _request(self) -> None:
        for attempt in range(HOOK_ATTEMPTS):
            if attempt:
                time.sleep(self.retry * 3 ** (attempt - 1))
            try:
                done = subprocess.run(
                    self.argv, capture_output=True, text=True, timeout=self.timeout
                )
            except (OSError, subprocess.TimeoutExpired) as e:
                said = str(e)
            else:
                if done.returncode == 0:
                    print(f"asked the charm for its {HOOK} hook (taint)", flush=True)
                    return
                said = f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}"
            print(
                f"{HOOK} hook request {attempt + 1}/{HOOK_ATTEMPTS} failed: {said}",
                file=sys.stderr,
                flush=True,
            )
        print(
            f"gave up asking for the {HOOK} hook: the taint waits for the charm's next hook",
            file=sys.stderr,
            flush=True,
        )


class Watcher:
    """The loop's state and its actions; `step()` is one pass."""

    def __init__(self, args: argparse.Namespace, api: Api, catalog: dict):
        self.args, self.api, self.catalog = args, api, catalog
        self.node = args.node
        memory = catalog.get("memory") or {}  # the memory faults: the gate's memory test
        self.memory_reasons = {f"Xid{x}" for x in memory.get("xids") or ()}
        self.memory_reasons |= {catalog["health"][h]["reason"] for h in memory.get("health") or ()}
        self.count, self.window = parse_escalation(args.escalation)
        self.gpus: dict[str, dict] = {}  # by PCI key, from the last good poll
        self.smi_fields = SMI_FIELDS  # less those this driver's nvidia-smi does not know
        self.mig_parent: dict[str, str] = {}  # MIG device UUID -> its GPU's UUID
        self.mig_ids: dict[str, tuple[str, str]] = {}  # MIG device UUID -> (GI, CI)
        self.mig_read = -60.0  # time.monotonic() of the last `nvidia-smi -L`
        self.state = self._load_state()
        self._count_repairs()
        # The application faults' escalation memory, kept in the state file with the boot
        # (`app_faults`) so that a restart inside the window does not forget the first two
        # of three: per GPU UUID, the faults' kernel times (`clocks`: the kernel's stamps in
        # seconds since boot, which the window compares) and whom each is attributed to
        # (`teams`: its namespaces and how they were found; none in a state file from
        # before 2026-11-28), the kernel time of its last fault's start (bursts) and the
        # processes counted (`pid_clocks`: pid -> kernel time). A state file written before
        # the window went by the kernel's stamps kept read times (`times`, `pids`): not
        # comparable, so not read (a count in flight at that upgrade starts again).
        memory = self.state.pop("app_faults", None) or {}
        self.app_xids: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        for uuid, times in (memory.get("clocks") or {}).items():
            teams = list((memory.get("teams") or {}).get(uuid) or [])
            teams += [{}] * (len(times) - len(teams))
            for t, team in zip(times, teams):
                names = team.get("namespaces") if isinstance(team, dict) else None
                fault = AppFault(float(t), set(names or []), str(team.get("by") or ""))
                self.app_xids[uuid].append(fault)
        self.bursts: dict[str, float] = {
            uuid: float(clock) for uuid, clock in (memory.get("bursts") or {}).items()
        }
        # the MIG GPU instance each burst's first line named (`_burst_line`; not kept)
        self.burst_instances: dict[str, str] = {}
        self.app_pids: dict[str, dict[int, float]] = collections.defaultdict(dict)
        for uuid, pids in (memory.get("pid_clocks") or {}).items():
            self.app_pids[uuid].update({int(pid): float(t) for pid, t in pids.items()})
        # the faults to decide once their burst is read (`decide_bursts`): GPU UUID ->
        # (due, GPU, meaning)
        self.pending: dict[str, tuple[float, dict, str]] = {
            uuid: (float(p["due"]), p["gpu"], str(p["meaning"]))
            for uuid, p in (memory.get("pending") or {}).items()
            if isinstance(p, dict) and {"due", "gpu", "meaning"} <= p.keys()
        }
        # (due, GPU, pid, its pod's UID): the application XIDs' pending checks, kept in
        # the state file (`app_checks`) so that a restart resumes them
        self.checks: list[tuple[float, dict, int, str]] = [
            (c["due"], c["gpu"], c["pid"], c["uid"])
            for c in self.state.pop("app_checks", None) or []
            if isinstance(c, dict) and {"due", "gpu", "pid", "uid"} <= c.keys()
        ]
        self.kmsg = os.open(args.kmsg, os.O_RDONLY | os.O_NONBLOCK)
        # the kernel clock's lag behind CLOCK_MONOTONIC, in seconds (`calibrate`), learnt
        # when (time.monotonic()), the marks written, and whether a failure was said
        self.kernel_lag, self.calibrated, self.marks, self.uncalibrated_told = 0.0, 0.0, 0, False
        self.calibrate()
        self.partial = b""
        # A first start in this boot (no position in its kernel log: a new boot, the first
        # revision with the watcher, a lost state file) reads what the ring buffer already
        # holds now, before the first poll: every record of it was logged before this
        # watcher started (`handle_xid`'s `before`). Handled at the first step, once the
        # first poll named the GPUs; the position is saved only then, so a stop in between
        # reads them again rather than never.
        self.backlog: list[tuple[str, int]] | None = None
        self.backlog_seq = -1
        if self.state["kmsg_seq"] < 0:
            self.backlog = self.read_kernel()
            self.backlog_seq, self.state["kmsg_seq"] = self.state["kmsg_seq"], -1
        self.last_poll = 0.0
        self.driver_down: str | None = None  # nvidia-smi's words while it cannot reach it
        self.blind_since: float | None = None  # wall time it went blind, outside any pause
        self.blind_told = False  # DriverUnavailableTooLong said for this blind spell
        self.hung_since: float | None = None  # wall time of the first poll of a hung spell
        self.mig_since: float | None = None  # a lost GPU held for mig-manager since then
        self.was_paused: str | None = None  # what the pause in force is for (`paused_for`)
        self.fault_at: float | None = None  # the kernel's time of the record in hand
        self.lock = threading.Lock()
        self.hook = (
            HookRequest(hook_argv(args.juju_exec, args.unit), args.hook_retry, args.hook_timeout)
            if args.unit
            else None
        )

    # -- state

    def _load_state(self) -> dict:
        try:
            with open(self.args.state) as f:
                state = json.load(f)
        except (OSError, ValueError):
            state = {}
        boot = self._boot_id()
        if state.get("boot_id") != boot:  # kmsg's sequence numbers restart with each boot
            state["boot_id"], state["kmsg_seq"] = boot, -1
            state["app_checks"] = []  # that boot's processes are gone
            state["app_faults"] = {}  # and its faults: the reboot was a repair
        counters = ("faults", "quarantines", "xid_repeated_one_team")
        for key in ("quarantined", *counters, "timings", "repairs_counted", "fabric_health"):
            state.setdefault(key, {})
        state.setdefault("events", [])
        state.pop("repairs_seen", None)  # before repair_counts (2026-11-27)
        for key, count in (state.pop("counts", None) or {}).items():  # before faults_total
            uuid, xid = key.split("|")
            cls = classify(self.catalog, xid, "")[0]
            state["faults"][f"{uuid}|{xid}|Xid{xid}|{cls}"] = count
        self._readmissions(state)
        return state

    def _readmissions(self, state: dict) -> None:
        """Fault-to-readmission of each GPU the charm readmitted since (gpu_health.readmit).

        The charm stops this program, clears `quarantined` and adds a `Readmitted` event per
        GPU (or sets `readmitted_at`); the fault's time stays in `timings`.
        """
        readmitted = {
            e.get("uuid"): e.get("at")
            for e in state["events"]
            if e.get("reason") == "Readmitted" and e.get("uuid")
        }
        for uuid, timing in state["timings"].items():
            if uuid in state["quarantined"] or "readmitted" in timing:
                continue
            when = parse_iso(readmitted.get(uuid) or state.get("readmitted_at") or "")
            if when is not None and when >= int(timing["fault_at"]):
                timing["readmitted"] = when
                timing["fault_to_readmission"] = max(0.0, when - timing["fault_at"])

    def _count_repairs(self) -> None:
        """The charm's repair counts (gpu_health `repair_counts`) by GPU UUID, method, result."""
        counted: dict[str, int] = {}
        for key, count in (self.state.get("repair_counts") or {}).items():
            uuid, _index, method, result = (key.split("|") + ["", "", "", ""])[:4]
            if not isinstance(count, int) or not (uuid and method and result):
                continue
            mark = f"{uuid}|{method}|{result}"
            counted[mark] = counted.get(mark, 0) + count
        self.state["repairs_counted"] = counted

    def _boot_id(self) -> str:
        try:
            with open(self.args.boot_id) as f:
                return f.read().strip()
        except OSError:
            return ""

    def _save(self) -> None:
        tmp = f"{self.args.state}.tmp"
        checks = [{"due": c[0], "gpu": c[1], "pid": c[2], "uid": c[3]} for c in self.checks]
        faults = {
            "clocks": {uuid: [f.at for f in seen] for uuid, seen in self.app_xids.items() if seen},
            "teams": {
                uuid: [{"namespaces": sorted(f.namespaces), "by": f.by} for f in seen]
                for uuid, seen in self.app_xids.items()
                if seen
            },
            "bursts": self.bursts,
            "pending": {
                uuid: {"due": due, "gpu": gpu, "meaning": meaning}
                for uuid, (due, gpu, meaning) in self.pending.items()
            },
            "pid_clocks": {
                uuid: {str(p): t for p, t in pids.items()}
                for uuid, pids in self.app_pids.items()
                if pids
            },
        }
        kept = {"app_checks": checks, "app_faults": faults}
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "w") as f:
            json.dump(self.state | kept, f, indent=1, sort_keys=True)
        os.replace(tmp, self.args.state)

    # -- inputs

    def read_kernel(self) -> list[tuple[str, int]]:
        """New kernel log (text, microseconds since boot), one read per /dev/kmsg record."""
        texts = []
        while True:
            try:
                chunk = os.read(self.kmsg, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # records overwritten before we read them: go on
                continue
            if not chunk:
                break
            data = self.partial + chunk
            lines = data.split(b"\n")
            self.partial = lines.pop()
            for raw in lines:
                text = self._record(raw.decode(errors="replace"))
                if text is not None:
                    texts.append(text)
        return texts

    def calibrate(self) -> None:
        """Learn the kernel clock's lag behind CLOCK_MONOTONIC from a record of our own.

        Written on a fresh open positioned at the log's end (dev-kmsg: SEEK_END), read back
        on it, its stamp compared with CLOCK_MONOTONIC around the write. No record back
        within CALIBRATE_WAIT (the kernel ignored it: `printk_devkmsg`), or no write allowed:
        the last lag stays, said once.
        """
        self.calibrated = time.monotonic()
        self.marks += 1
        mark = f"{KMSG_MARK} {os.getpid()}.{self.marks}"
        stamp, wrote, why = None, 0.0, "no record came back"
        try:
            fd = os.open(self.args.kmsg, os.O_RDWR | os.O_APPEND | os.O_NONBLOCK)
        except OSError as e:
            fd, why = -1, f"cannot open it to write: {e.strerror}"
        if fd >= 0:
            try:
                os.lseek(fd, 0, os.SEEK_END)
                wrote = time.monotonic()
                os.write(fd, f"<{KMSG_MARK_PRIO}>{mark}\n".encode())
                wrote = (wrote + time.monotonic()) / 2
                stamp = self._read_mark(fd, mark)
            except OSError as e:
                why = f"cannot write it: {e.strerror}"
            finally:
                os.close(fd)
        if stamp is not None:
            self.kernel_lag, self.uncalibrated_told = wrote - stamp / 1e6, False
        elif not self.uncalibrated_told:
            self.uncalibrated_told = True
            print(
                f"kernel clock not calibrated ({self.args.kmsg}: {why}): its lag behind "
                f"CLOCK_MONOTONIC is taken as {self.kernel_lag:.3f} s",
                flush=True,
            )

    def _read_mark(self, fd: int, mark: str) -> int | None:
        """The stamp of the record `mark` (`calibrate`), read on `fd`; None: not there."""
        deadline, partial = time.monotonic() + CALIBRATE_WAIT, b""
        while time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                chunk = b""
            except BrokenPipeError:
                continue
            if not chunk:
                time.sleep(0.005)
                continue
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            for raw in lines:
                prefix, _, text = raw.decode(errors="replace").partition(";")
                fields = prefix.split(",")
                if text == mark and len(fields) >= 3 and fields[2].isdigit():
                    return int(fields[2])
        return None

    def kernel_now(self) -> float:
        """The kernel's clock now, in seconds since boot (`kernel_wall`)."""
        return time.monotonic() - self.kernel_lag

    def _record(self, line: str) -> tuple[str, int] | None:
        if not line or line.startswith(" ") or ";" not in line:
            return None  # a continuation (key=value) line
        prefix, text = line.split(";", 1)
        fields = prefix.split(",")
        if len(fields) < 3 or not fields[1].isdigit():
            return None
        seq = int(fields[1])
        if seq <= self.state["kmsg_seq"]:
            return None  # handled before this watcher restarted
        self.state["kmsg_seq"] = seq
        return text, int(fields[2]) if fields[2].isdigit() else -1

    def _query_smi(self) -> subprocess.CompletedProcess | None:
        """nvidia-smi's health query, less the fields this driver's nvidia-smi refused.

        nvidia-smi refuses the whole query for one field it does not know; without that
        field the others (ECC, a GPU lost from the bus) are still read.
        """
        while True:
            argv = [
                self.args.nvidia_smi,
                f"--query-gpu={','.join(self.smi_fields)}",
                "--format=csv,noheader",
            ]
            try:
                done = run_smi(argv, self.args.smi_timeout)
            except OSError as e:
                print(f"nvidia-smi failed: {e}", file=sys.stderr)
                return None
            unknown = SMI_UNKNOWN_FIELD.search(done.stdout + done.stderr)
            field = unknown["field"] if unknown else ""
            if done.returncode == 0 or field in SMI_KEYS or field not in self.smi_fields:
                return done
            self.smi_fields = tuple(f for f in self.smi_fields if f != field)
            print(f"nvidia-smi does not know {field}: not read on this driver", flush=True)

    def poll_smi(self, done: subprocess.CompletedProcess | None) -> list[tuple[str, str]]:
        """(PCI key, finding) for each unhealthy GPU nvidia-smi's answer `done` shows."""
        if done is None:
            return []
        if done.returncode == SMI_HUNG_EXIT:
            return self.smi_hung(done.stderr)
        if self.hung_since is not None:
            print("nvidia-smi answers again", flush=True)
            self.hung_since = None
        out = done.stdout + done.stderr
        gpus, lost = parse_smi(out, self.smi_fields)
        if driver_down(done.returncode, out, gpus, lost):
            self.driver_unavailable(done.returncode, out)
            return []
        if self.driver_down is not None:
            print(f"nvidia-smi reaches the NVIDIA driver again ({self.driver_down})", flush=True)
            self.driver_down = None
        self.blind_since, self.blind_told = None, False
        findings = [(pci, "lost") for pci in lost]
        for pci, known in self.gpus.items():
            if pci not in gpus and pci not in lost and done.returncode != 0:
                findings.append((pci, "lost"))
                gpus[pci] = known
        for pci, row in gpus.items():
            findings += [(pci, f) for f in smi_findings(row)]
            self.fabric_health(row)
        self.gpus.update(gpus)
        return findings

    def driver_unavailable(self, code: int, out: str) -> None:
        """nvidia-smi cannot reach the driver (`driver_down`): no GPU is judged by it meanwhile.

        An event `DriverUnavailable` when it begins (its exit status and first line), not
        at each poll; the log says when nvidia-smi answers again. The GPUs known stay
        known, and the kernel's XIDs are still read and acted on: a GPU that fails
        meanwhile is still quarantined by its XID (79 for one that fell off the bus).
        Blind for `--driver-blind` (DRIVER_BLIND_S) with no pause between: an event
        `DriverUnavailableTooLong`, once, and the gauge says since when (`metrics`).
        """
        now = time.time()
        self.blind_since = now if self.blind_since is None else self.blind_since
        if self.driver_down is None:
            said = next((line.strip() for line in out.splitlines() if line.strip()), "")
            self.driver_down = f"exit {code}: {said}" if said else f"exit {code}"
            meaning = (
                f"nvidia-smi cannot reach the NVIDIA driver ({self.driver_down}): no GPU is "
                "judged by nvidia-smi until it answers again (a driver update before its "
                "reboot, or no driver loaded: the unit's status says which); kernel XIDs are "
                "still acted on"
            )
            self._event(now, EVERY_GPU, "DriverUnavailable", meaning, "info")
        if now - self.blind_since >= self.args.driver_blind and not self.blind_told:
            self.blind_told = True
            meaning = (
                f"nvidia-smi has not reached the NVIDIA driver for {now - self.blind_since:.0f}s"
                f" ({self.driver_down}) and no driver update paused its polls: no GPU is "
                "judged by nvidia-smi; the unit's status says why (a reboot may load the driver)"
            )
            self._event(now, EVERY_GPU, "DriverUnavailableTooLong", meaning, "support")

    def smi_hung(self, said: str) -> list[tuple[str, str]]:
        """A poll nvidia-smi did not answer (`run_smi`): every known GPU lost, in the end.

        An event `SmiHung` when the outage begins, and the gauge says since when
        (`metrics`). Hung polls spanning `--smi-hung` with no pause begun meanwhile (a GPU
        reset or the gate may hold nvidia-smi) find each known GPU lost: the catalog's
        reboot (SMI_TIMEOUT_S). A pause ends the spell (`poll`).
        """
        now = time.time()
        if self.hung_since is None:
            self.hung_since = self.last_poll
            meaning = (
                f"{said}: its call was killed; every known GPU is quarantined for a reboot if "
                f"no poll answers within {self.args.smi_hung:g}s; kernel XIDs are still acted on"
            )
            self._event(now, EVERY_GPU, "SmiHung", meaning, "info")
        if now - self.hung_since < self.args.smi_hung or self.paused(now):
            return []
        return [(pci, "lost") for pci in self.gpus]

    def hold_for_mig(self, findings: list[tuple[str, str]], at: float) -> list[tuple[str, str]]:
        """The findings less a GPU gone missing while mig-manager changes the MIG layout.

        Only when a GPU looks lost is the Node read (its own, as the node), and only then:
        while its MIG_STATE_LABEL says MIG_CHANGING, `lost` is held, for `--mig-hold` at
        most since it was first held (a label mig-manager left behind holds nothing for
        ever). The API not answering holds nothing: the GPU is judged lost.
        """
        held = self.state["quarantined"]
        gone = [
            f"GPU {self.gpus.get(pci, {}).get('index', pci)}"
            for pci, finding in findings
            if finding == "lost" and self.gpus.get(pci, {}).get("uuid") not in held
        ]
        if not gone:
            self.mig_since = None
            return findings
        try:
            node = self.api.request("GET", f"/api/v1/nodes/{self.node}")
        except (ApiError, OSError) as e:
            print(f"cannot read node {self.node}'s MIG state: {e}", file=sys.stderr)
            node = {}
        state = ((node.get("metadata") or {}).get("labels") or {}).get(MIG_STATE_LABEL)
        if state not in MIG_CHANGING:
            self.mig_since = None
            return findings
        missing = ", ".join(gone)
        if self.mig_since is None:
            self.mig_since = at
            print(
                f"{missing} missing from nvidia-smi while mig-manager changes the MIG layout "
                f"({MIG_STATE_LABEL}={state}): not judged lost until it is done, "
                f"{self.args.mig_hold:g}s at most",
                flush=True,
            )
        if at - self.mig_since > self.args.mig_hold:
            print(
                f"{missing} still missing, held longer than {self.args.mig_hold:g}s for "
                f"mig-manager ({MIG_STATE_LABEL}={state}): judged lost",
                flush=True,
            )
            return findings
        return [(pci, finding) for pci, finding in findings if finding != "lost"]

    def fabric_health(self, row: dict) -> None:
        """An event when a GPU's NVLink fabric health summary changes (`SMI_FIELDS` says why).

        The last summary of each GPU is kept in the state file (`fabric_health`), so a
        restarted watcher records only a change, not every GPU's summary again.
        """
        summary = row["fabric.health.summary"].strip()
        if not smi_read(summary):
            return
        seen = self.state["fabric_health"]
        if seen.get(row["uuid"]) == summary:
            return
        seen[row["uuid"]] = summary
        meaning = (
            f"NVLink fabric health summary: {summary} (recorded; the fabric's state and "
            "status decide a quarantine)"
        )
        self._event(time.time(), row, "FabricHealth", meaning, "info")

    # -- decisions

    def handle_xid(self, record: dict, at: float, before: float | None = None) -> None:
        """Classify one XID; quarantine, or restart the job (escalating on repeats).

        `before`: a record the watcher did not read live, and when it was logged
        (`kernel_wall`; -1: not known): this boot's kernel logged it before the watcher's
        first start in it (`backlog`), or it is read more than KERNEL_CLOCK_SKEW after the
        kernel logged it, by the kernel's clock (a restarted watcher, stopped or crash-
        looping meanwhile: `_kernel_record`). It is recorded (an event saying so, stamped
        when it was logged, and faults_total), and:
        - an application XID is neither counted toward the escalation nor looked into:
          its faults may be hours old (three crashes of the last day are no 3 in 10
          minutes), and its pid may name another program by now, whose pod would be
          evicted;
        - a fatal one quarantines only when the GPU's state now confirms a fault
          (`confirms`): it is missing from nvidia-smi's answer, or the driver asks for a
          recovery action, or the GPU reports none (then, as before, nothing the watcher
          reads can clear it). A GPU whose driver says None now was reset since, or its
          error was contained: the fault is recorded and the GPU left in service
          (docs/how-to/upgrade.md, gpu-day-2.md). So the first start on a fleet does not
          drain every node that logged a fatal XID in this boot at once.
        """
        xid = record["xid"]
        gpu = self.gpus.get(record["pci"], {"index": "?", "uuid": f"PCI:{record['pci']}"})
        action, meaning = classify(self.catalog, xid, record["text"])
        meaning += mig_instance(record)  # the GPU that holds the instance acts for it
        if before is not None:
            logged = now_iso(before) if before >= 0 else "at a time the kernel did not stamp"
            meaning += f" (logged {logged}, before the watcher started)"
        self._count("faults", gpu["uuid"], xid, f"Xid{xid}", action)
        instance = {k: record[k] for k in ("gpu_instance", "compute_instance") if record.get(k)}
        stamp = before if before is not None and before >= 0 else at
        self._event(stamp, gpu, f"Xid{xid}", meaning, action, **instance)
        if action in QUARANTINE and (before is None or self.confirms(record["pci"])):
            self.quarantine(gpu, f"Xid{xid}", meaning, action, at)
        elif action in QUARANTINE:
            print(
                f"GPU {gpu['index']}: XID {xid} logged before the watcher read it, not acted "
                f"on: the driver asks for no recovery action now ({gpu['uuid']})",
                flush=True,
            )
        elif before is None and (action == "application" or self._burst_line(gpu["uuid"], record)):
            self.application_fault(gpu, record, meaning, at)

    def confirms(self, pci: str) -> bool:
        """Whether the GPU's last poll confirms a fault an old XID named (`handle_xid`).

        Yes when nvidia-smi did not answer for it (no row: lost, or no poll yet), when
        the driver asks for a recovery action (NVML's current action: what XID 154
        reports, `gpu_recovery_action`), and when the GPU reports none or a word this
        watcher cannot read (V100, T4, older drivers: nothing on record can clear it).
        Not when the action is None: NVIDIA's GPU Memory Error Management guide, "Error
        Recovery and Response Flags": None, the GPU "can be used again by a new process".
        """
        row = self.gpus.get(pci)
        if row is None:
            return True
        return recovery_code(row.get("gpu_recovery_action", "")) != "0"

    def _burst_line(self, uuid: str, record: dict) -> bool:
        """An `info` XID line that names the process of the application fault it ends.

        The catalog's `burst_line` XIDs (43, 45: no fault alone) naming a pid, inside the
        burst of the last application fault counted on this GPU (APP_BURST_S, the
        kernel's clock), are that fault's later lines (`application_fault`: it may blame
        the process, and that process's pod is evicted if it outlives the wait). Not a
        line naming another MIG GPU instance than the burst's first line, where both name
        one: another tenant's program there is not this fault's.
        """
        entry = self.catalog["xids"].get(record["xid"]) or {}
        start = self.bursts.get(uuid)
        if not entry.get("burst_line") or record.get("pid") is None or start is None:
            return False
        ours, theirs = self.burst_instances.get(uuid, ""), record.get("gpu_instance") or ""
        if ours and theirs and ours != theirs:  # another MIG instance's program: not its line
            return False
        return abs(record["clock"] - start) <= APP_BURST_S

    def application_fault(self, gpu: dict, record: dict, meaning: str, at: float) -> None:
        """Count an application XID toward the escalation; quarantine, or restart the job.

        The fault is attributed to namespaces (`_attribute`). The escalation quarantines
        unless it would drain a node other teams share for one team's program
        (`_escalate`): then only that job restarts, and an event and a counter say so,
        once per fault. A fault whose first line names no process is decided
        `--burst-wait` later (APP_BURST_S), once the burst's later lines (the XID 43 that
        names it) are read. A later line of a fault decided is decided again only when it
        names whom to blame better (`AppFault.merge`), and then only to quarantine.
        """
        uuid, pid, clock = gpu["uuid"], record.get("pid"), record["clock"]
        seen = self.app_xids[uuid]
        while seen and clock - seen[0].at > self.window:  # by the kernel's stamps
            seen.popleft()
        uid = self._pod_uid_of_pid(pid) if pid else None
        same = self._same_fault(uuid, record)
        if same:
            print(
                f"GPU {gpu['index']}: XID {record['xid']} belongs to a fault counted", flush=True
            )
        last = seen[-1] if same == "burst" and seen else None
        refined = False
        if not same:
            seen.append(self._attribute(uuid, record, uid, clock))
        elif last is not None and last.by != BY_PROCESS and (uid or last.by in ("", BY_GPU)):
            refined = last.merge(self._attribute(uuid, record, uid, clock))  # decided anew
        if not same and pid is None and len(seen) >= self.count:
            self.pending[uuid] = (at + self.args.burst_wait, gpu, meaning)
        if uuid in self.pending or (same and not refined) or len(seen) < self.count:
            self.restart_job(gpu, pid, uid, at)
            return
        if not self._escalate(gpu, meaning, at, again=refined):
            self.restart_job(gpu, pid, uid, at)

    def decide_bursts(self, at: float) -> None:
        """Decide the faults whose first line named no process, `--burst-wait` after it."""
        for uuid, (due, gpu, meaning) in list(self.pending.items()):
            if due > at:
                continue
            del self.pending[uuid]
            if len(self.app_xids.get(uuid) or ()) >= self.count:
                self._escalate(gpu, meaning, at, again=False)

    def _escalate(self, gpu: dict, meaning: str, at: float, again: bool) -> bool:
        """The escalation's verdict on the window's faults: whether it quarantined the GPU.

        Held back (`_suspects`): the event `XidRepeatedOneTeam` and its counter, unless
        `again` (a later line of a fault held back already).
        """
        seen = self.app_xids[gpu["uuid"]]
        blamed = set().union(*(f.namespaces for f in seen)) - {UNATTRIBUTED}
        counted = f"{len(seen)} application faults within {self.args.escalation}"
        holders = self._holders()
        suspects = self._suspects(list(seen), holders)
        if not suspects:
            plural = "s" if len(blamed) > 1 else ""
            whose = f"from pods of namespace{plural} {', '.join(sorted(blamed))}"
            whose = whose if blamed else f"from no known pod ({UNATTRIBUTED})"
            self.quarantine(gpu, "XidRepeated", f"{counted} {whose} ({meaning})", "reset-gpu", at)
            return True
        if again:
            return False
        team = ",".join(sorted(suspects))
        if len(suspects) == 1:
            whose = f"all from pods of namespace {team}"
        else:  # pods of each share the GPU and no fault named a process still running
            whose = (
                f"each from a pod of namespace {' or '.join(sorted(suspects))} sharing the "
                "GPU (no process named: either may be the cause)"
            )
        others = ", ".join(sorted(holders - suspects)) or ", ".join(sorted(holders))
        said = (
            f"{counted}, {whose}, while pods of {others} hold GPUs on this node: only the "
            f"job restarts, the GPU stays in service ({meaning})"
        )
        self._count("xid_repeated_one_team", gpu["uuid"], team)
        self._event(at, gpu, "XidRepeatedOneTeam", said, "application", namespace=team)
        return False

    def _attribute(self, uuid: str, record: dict, uid: str | None, at: float) -> AppFault:
        """This fault, attributed to the namespaces of the pods it may come from.

        The fault's namespace is its process's pod's (`uid`, from the process's cgroup)
        when the line names a process in a pod of this node; else, for a line the driver
        attributes to a MIG instance (`GPU-I`, `GPU-CI`), those of the pods holding that
        instance's MIG device (`mig_instances`); else those of the pods the kubelet's
        checkpoint shows holding this GPU, a MIG device of it or a share (several with
        time-slicing or MIG, in any phase: the pod that faulted may have failed already);
        none: UNATTRIBUTED. Without the API the fault is UNATTRIBUTED (the escalation
        quarantines, as it did before the teams were told apart).
        """
        pods = self._pods_by_uid()
        if pods is None:
            return AppFault(at, {UNATTRIBUTED}, "")
        if uid in pods:
            return AppFault(at, {pods[uid]["metadata"]["namespace"]}, BY_PROCESS)
        held = self._holdings()
        devices = self._instance_devices(uuid, record)
        if devices:
            on = {
                pods[u]["metadata"]["namespace"]
                for u, ids in held.items()
                if u in pods and ids & devices
            }
            return AppFault(at, on, BY_INSTANCE) if on else AppFault(at, {UNATTRIBUTED}, "")
        on_gpu = {
            pods[u]["metadata"]["namespace"]
            for u, ids in held.items()
            if u in pods and any(self._device_gpu(d) == uuid for d in ids)
        }
        if on_gpu:
            return AppFault(at, on_gpu, BY_GPU)
        return AppFault(at, {UNATTRIBUTED}, "")

    def _instance_devices(self, uuid: str, record: dict) -> set[str]:
        """The MIG devices of GPU `uuid` that the line's `GPU-I`/`GPU-CI` name (none known: {})."""
        gi, ci = record.get("gpu_instance"), record.get("compute_instance")
        if gi is None:
            return set()
        return {
            mig
            for mig, (g, c) in self.mig_ids.items()
            if self.mig_parent.get(mig) == uuid and g == gi and ci in (None, c)
        }

    def _holders(self) -> set[str]:
        """The namespaces of the running pods that hold any GPU of this node (API down: none)."""
        pods = self._pods_by_uid()
        if pods is None:
            return set()
        return {
            pods[u]["metadata"]["namespace"]
            for u in self._allocations()
            if u in pods and (pods[u].get("status") or {}).get("phase") not in TERMINAL_PHASES
        }

    @staticmethod
    def _suspects(faults: list[AppFault], holders: set[str]) -> set[str]:
        """The namespaces to hold the escalation back for, or none: quarantine.

        One namespace whose pods may have caused every fault of the window (each fault's
        namespaces: several where it names no process and several teams share the GPU,
        by time-slicing or MIG) is the suspect; faults that no one namespace explains
        came from two teams or more (the GPU fails whatever runs on it): none. Several
        that each may have (a shared GPU, no process named) are all suspects. None too
        when a quarantine would evict no running GPU pod of a namespace that may be
        innocent (other namespaces' DaemonSets such as the device plugin and the DCGM
        exporter run on every node, so only GPU holders count). None as well when any
        fault of the window is unattributed: no pod held the GPU or its instance, which
        is evidence against the GPU (rereview32 finding 2).
        """
        if not faults or any(UNATTRIBUTED in f.namespaces or not f.namespaces for f in faults):
            return set()
        suspects = set.intersection(*(f.namespaces for f in faults))
        innocent = holders - suspects if len(suspects) == 1 else holders
        return suspects if suspects and innocent else set()

    def _same_fault(self, uuid: str, record: dict) -> str:
        """Whether this application XID belongs to a fault counted already (APP_BURST_S).

        `burst`: the same GPU within APP_BURST_S of the burst's first line, the last fault
        counted; `process`: a process counted on this GPU within the escalation window;
        "": a new fault. Both by the kernel's stamps (`clock`).
        """
        pids, clock = self.app_pids[uuid], record["clock"]
        for pid, when in list(pids.items()):
            if clock - when > self.window:
                del pids[pid]
        start, pid = self.bursts.get(uuid), record.get("pid")
        same = "burst" if start is not None and abs(clock - start) <= APP_BURST_S else ""
        same = same or ("process" if pid is not None and pid in pids else "")
        if not same:
            self.bursts[uuid] = clock
            self.burst_instances[uuid] = record.get("gpu_instance") or ""
        if pid is not None:
            pids.setdefault(pid, clock)
        return same

    def handle_finding(self, pci: str, finding: str, at: float) -> None:
        """A health finding from nvidia-smi: quarantine (once per GPU)."""
        entry = self.catalog["health"][finding]
        gpu = self.gpus.get(pci, {"index": "?", "uuid": f"PCI:{pci}"})
        held = self.state["quarantined"].get(gpu["uuid"])
        if held is not None:  # its gate tests its memory (`quarantine`)
            if entry["reason"] in self.memory_reasons and not held.get("memory"):
                held["memory"] = True
                self._save()
            return
        meaning, action = entry["description"], entry["action"]
        if finding == "recovery":  # the action the driver asks for
            action, asked = smi_recovery_action(self.catalog, gpu.get("gpu_recovery_action", ""))
            meaning += f": {asked}"
            if action not in QUARANTINE:
                return
        if entry["as_xid"]:
            meaning += f" (as XID {entry['as_xid']})"
        self._count("faults", gpu["uuid"], "", entry["reason"], action)
        self._event(at, gpu, entry["reason"], meaning, action)
        self.quarantine(gpu, entry["reason"], meaning, action, at)

    def _count(self, counter: str, *key: str) -> None:
        name = "|".join(key)
        self.state[counter][name] = self.state[counter].get(name, 0) + 1

    def _event(
        self, at: float, gpu: dict, reason: str, meaning: str, action: str, **more: str
    ) -> None:
        event = {"at": now_iso(at), "gpu": gpu["index"], "uuid": gpu["uuid"], "reason": reason}
        event |= {"meaning": meaning, "action": action, **more}
        print(json.dumps(event), flush=True)
        self.state["events"] = (self.state["events"] + [event])[-50:]

    # -- actions, as the node

    def quarantine(self, gpu: dict, reason: str, meaning: str, action: str, at: float) -> None:
        """Condition, cordon, evict; recorded at once, the API steps retried each pass.

        A memory fault (the catalog's `memory`) marks the record `memory`, however strong
        the record is: its gate must pass DCGM's memory test (gpu_health.memory_faulted).
        A GPU quarantined already keeps its record unless this fault asks for a stronger
        repair (XID 154 naming a reboot after an XID 48 asked for a reset): then the
        record takes this fault's reason and repair, and the condition says so; its
        `raised_at` says when, since readmission clears only what a gate that started
        after it proved (gpu_health.readmit).
        """
        # the repair and its gate start the application faults' count again
        self.app_xids.pop(gpu["uuid"], None)
        held = self.state["quarantined"].get(gpu["uuid"])
        if held and QUARANTINE.index(action) <= QUARANTINE.index(held["action"]):
            if reason in self.memory_reasons:  # a weaker memory fault: its gate tests memory
                held["memory"] = True
            self._save()
            self.apply()
            return
        message = f"GPU {gpu['index']} ({gpu['uuid']}): {meaning}; repair: {action}"
        record = {"index": gpu["index"], "uuid": gpu["uuid"], "reason": reason}
        record |= {"message": message, "action": action, "applied": False}
        if reason in self.memory_reasons or (held and held.get("memory")):
            record["memory"] = True  # its gate requires DCGM's memory test (gpu_gate.py)
        if held:  # raised: its first fault's times stay, and when it was raised is kept
            kept = ("at", "since", "fault_at", "quarantined_at")
            record |= {k: held[k] for k in kept if k in held} | {"raised_at": at}
        else:
            record |= {"at": now_iso(at), "since": at, "fault_at": self.fault_at or at}
            self._count("quarantines", gpu["uuid"], reason)
        self.state["quarantined"][gpu["uuid"]] = record
        self._save()
        if self.hook is not None:  # the taint: the hook reads the record just saved
            self.hook.ask()
        self.apply()

    def apply(self) -> None:
        """Bring the Node in line with the quarantine record (idempotent)."""
        pending = [q for q in self.state["quarantined"].values() if not q["applied"]]
        if not pending:
            return
        try:
            self._set_condition()
            self._cordon()
            for q in pending:
                self._evict(self._pods_on_gpu(q["uuid"]), broken=q["uuid"])
                self._applied(q, time.time())
        except (ApiError, OSError) as e:
            print(f"quarantine not applied yet (retried): {e}", file=sys.stderr, flush=True)
        self._save()

    def _applied(self, q: dict, now: float) -> None:
        """The Node says it: record when, and the time from the fault (once per fault)."""
        first = not q.get("quarantined_at")
        q["applied"], q["applied_at"] = True, now_iso(now)
        if first:
            q["quarantined_at"] = now
            fault = q.get("fault_at", q["since"])
            self.state["timings"][q["uuid"]] = {
                "index": q["index"],
                "fault_at": fault,
                "quarantined": now,
                "fault_to_quarantine": max(0.0, now - fault),
            }

    def keep_cordoned(self) -> None:
        """While a GPU is quarantined, put back a cordon someone lifted (and say so)."""
        held = list(self.state["quarantined"].values())
        if not held or not all(q["applied"] for q in held):
            return
        try:
            node = self.api.request("GET", f"/api/v1/nodes/{self.node}")
            if (node.get("spec") or {}).get("unschedulable"):
                return
            self._cordon()
        except (ApiError, OSError) as e:
            print(f"could not cordon node {self.node} again (retried): {e}", file=sys.stderr)
            return
        gpus = ", ".join(f"GPU {q['index']} ({q['uuid']})" for q in held)
        print(
            f"node {self.node} was uncordoned while {gpus} is quarantined: cordoned again "
            "(only readmission ends the quarantine: docs/how-to/gpu-day-2.md)",
            flush=True,
        )

    def _cordon(self) -> None:
        """Cordon as the charm's drain does: marked ours, unless someone else cordoned it.

        The mark (`gpu-k8s/cordoned`, lib drain.py CORDON_ANNOTATION) lets readmission lift
        this cordon with the charm's `drain.uncordon`; a cordon an operator set stays.
        """
        node = self.api.request("GET", f"/api/v1/nodes/{self.node}")
        if (node.get("spec") or {}).get("unschedulable"):
            return  # cordoned already: by a turn's drain (marked) or by someone else
        self.api.request(
            "PATCH",
            f"/api/v1/nodes/{self.node}",
            {"metadata": {"annotations": {CORDONED: "true"}}, "spec": {"unschedulable": True}},
            "application/merge-patch+json",
        )

    def _set_condition(self) -> None:
        worst = sorted(self.state["quarantined"].values(), key=lambda q: q["since"])
        message = "; ".join(q["message"] for q in worst)
        for _ in range(5):
            node = self.api.request("GET", f"/api/v1/nodes/{self.node}")
            conditions = [
                c
                for c in (node.get("status") or {}).get("conditions") or []
                if c["type"] != CONDITION
            ]
            stamp = now_iso(time.time())
            conditions.append(
                {
                    "type": CONDITION,
                    "status": "False",
                    "reason": worst[0]["reason"],
                    "message": message[:1000],
                    "lastTransitionTime": worst[0]["at"],
                    "lastHeartbeatTime": stamp,
                }
            )
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "status": {"conditions": conditions},
            }
            try:
                self.api.request(
                    "PATCH",
                    f"/api/v1/nodes/{self.node}/status",
                    patch,
                    "application/merge-patch+json",
                )
                return
            except ApiError as e:
                if e.status != 409:  # kubelet wrote the status in between: read it again
                    raise
        raise ApiError(409, "the Node's status kept changing")

    def _pods(self) -> list[dict]:
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={self.node}"})
        return self.api.request("GET", f"/api/v1/pods?{query}").get("items", [])

    def _pods_by_uid(self) -> dict[str, dict] | None:
        """This node's pods by UID; None (said on stderr) when the API does not answer."""
        try:
            return {p["metadata"].get("uid"): p for p in self._pods()}
        except (ApiError, OSError) as e:
            print(f"cannot read this node's pods: {e}", file=sys.stderr)
            return None

    def _pods_on_gpu(self, uuid: str) -> list[dict]:
        """Pods the kubelet allocated this GPU, a MIG device of it or a share of either to."""
        held = self._allocations()
        return [p for p in self._pods() if uuid in held.get(p["metadata"].get("uid"), ())]

    def _allocations(self) -> dict[str, set[str]]:
        """The GPU UUIDs allocated to each pod (by UID): its GPUs, MIG devices, shares."""
        held = {}
        for uid, devices in self._holdings().items():
            gpus = {gpu for d in devices if (gpu := self._device_gpu(d))}
            if gpus:
                held[uid] = gpus
        return held

    def _holdings(self) -> dict[str, set[str]]:
        """The devices allocated to each pod (by UID): GPU or MIG device UUIDs, no `::<n>`.

        The kubelet's device-manager checkpoint names the device IDs of each allocation.
        """
        try:
            with open(self.args.checkpoint) as f:
                entries = json.load(f)["Data"]["PodDeviceEntries"] or []
        except (OSError, ValueError, KeyError, TypeError):
            entries = []
        if any(
            self._device_gpu(d) is None for e in entries for d in _device_ids(e) if "MIG-" in d
        ):
            self.read_mig_devices()  # a MIG device made since the last poll
        held: dict[str, set[str]] = collections.defaultdict(set)
        for e in entries:
            held[e["PodUID"]] |= {d.split("::", 1)[0] for d in _device_ids(e)}
        return held

    def _device_gpu(self, device: str) -> str | None:
        """The GPU UUID of a device plugin device ID (`GPU-...`, `MIG-...`, `...::<n>`)."""
        device = device.split("::", 1)[0]
        if device.startswith("MIG-"):
            return self.mig_parent.get(device)
        return device

    def read_mig_devices(self) -> None:
        """Which GPU each MIG device belongs to, from `nvidia-smi -L` (kept across polls).

        And, where there are MIG devices, the GPU and compute instance of each
        (`nvidia-smi -q -x`: `mig_instances`), to blame an XID the driver attributes to an
        instance on the pod holding that device.
        """
        self.mig_read = time.monotonic()
        done = self._run_smi("-L")
        if done is None:
            return
        parent, indexes = None, {}
        for line in done.stdout.splitlines():
            gpu, mig = SMI_GPU.match(line), SMI_MIG.match(line)
            if gpu:
                parent = gpu["uuid"]
            elif mig and parent:
                self.mig_parent[mig["uuid"]] = parent
                if mig["index"] is not None:
                    indexes[(parent, mig["index"])] = mig["uuid"]
        if indexes:
            query = self._run_smi("-q", "-x")
            if query is not None and query.returncode == 0:
                self.mig_ids.update(mig_instances(query.stdout, indexes))

    def _run_smi(self, *argv: str) -> subprocess.CompletedProcess | None:
        try:
            return run_smi([self.args.nvidia_smi, *argv], self.args.smi_timeout)
        except OSError as e:
            print(f"nvidia-smi {' '.join(argv)} failed: {e}", file=sys.stderr)
            return None

    def _pod_uid_of_pid(self, pid: int) -> str | None:
        """The UID of the pod whose container runs `pid` (its cgroup path names it).

        None when the process has ended or runs in no pod.
        """
        try:
            with open(os.path.join(self.args.proc, str(pid), "cgroup")) as f:
                found = POD_CGROUP.search(f.read())
        except OSError:
            return None
        return found[1].replace("_", "-") if found else None

    def _evict(self, pods: list[dict], broken: str | None = None) -> None:
        """Evict `pods`; on a quarantined GPU (`broken`: its UUID) past any budget.

        The Eviction API honours the pods' PodDisruptionBudgets: one with no disruption
        left answers 429 ("Cannot evict pod as it would violate the pod's disruption
        budget": kube-apiserver pkg/registry/core/pod/storage/eviction.go
        checkAndDecrement). An application XID's pod waits for its budget (the GPU works;
        retried at each pass). A pod on a quarantined GPU does not: it makes no progress
        there, and the quarantine's NoExecute taint would delete it past any budget
        anyway, later (the taint manager's addConditionAndDeletePod: a DisruptionTarget
        condition, then a plain DELETE; kubernetes pkg/controller/tainteviction/
        taint_eviction.go), after the training launcher's fault window (actions/
        tf_launcher.py FAULT_WINDOW): its program's crash would then count toward the
        job's max-restarts. So the watcher does the same at once (`_delete`).
        """
        for pod in pods:
            meta = pod["metadata"]
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction"
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            }
            try:
                self.api.request("POST", path, body)
                print(f"evicted {meta['namespace']}/{meta['name']}", flush=True)
            except ApiError as e:
                if e.status == 404:  # gone already
                    continue
                if e.status != 429 or broken is None:
                    raise
                self._delete(pod, broken, str(e))

    def _delete(self, pod: dict, uuid: str, refused: str) -> None:
        """Delete a pod on quarantined GPU `uuid` as this node, as the taint manager would.

        As the node: the Node authorizer allows a node `create`/`delete` on pods ("Needed
        for the node to create/delete mirror pods", leaving the limits to NodeRestriction)
        and `update`/`patch` on pods/status (kubernetes plugin/pkg/auth/authorizer/node/
        node_authorizer.go authorizePod), and NodeRestriction admits both only for a pod
        bound to this node (plugin/pkg/admission/noderestriction/admission.go admitPod:
        "only allow a node to delete a pod bound to itself"; admitPodStatus). First the
        DisruptionTarget condition, as the taint manager and the Eviction API set it, then
        the DELETE (the pod's own grace period, its UID as a precondition so that a pod
        made again under the name is left alone). Kubelet stops the container with
        SIGTERM: the training launcher exits 143, which the job's podFailurePolicy ignores
        with DisruptionTarget (rule 0) or, should the condition not be read first, fails
        the Job with (rule 1) for JobSet's `stoppedNotCounted` to restart uncounted
        (tensorflow charm manifests.py).
        """
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": DISRUPTION_REASON,
            "message": f"GPU health watcher: deleting the pod: GPU {uuid} is quarantined",
            "lastTransitionTime": now_iso(time.time()),
        }
        try:
            self.api.request(
                "PATCH",
                f"{path}/status",
                {"status": {"conditions": [condition]}},
                "application/strategic-merge-patch+json",
            )
            self.api.request("DELETE", path, {"preconditions": {"uid": meta.get("uid")}})
        except ApiError as e:
            if e.status != 404:  # gone already
                raise
        print(
            f"deleted {meta['namespace']}/{meta['name']} on quarantined GPU {uuid}: its "
            f"eviction was refused ({refused})",
            flush=True,
        )

    def restart_job(self, gpu: dict, pid: int | None, uid: str | None, at: float) -> None:
        """An application XID: its program restarts, by itself or by an eviction later.

        The process it names is looked at again `--app-xid-wait` seconds later
        (`check_programs`): its pod is evicted only if it still runs then. An XID naming
        no process, or one whose process ended already or runs in no pod (`uid`: its pod's
        UID when the XID was read), evicts nobody (the module's docstring says why).
        """
        where = f"GPU {gpu['index']} ({gpu['uuid']})"
        if pid is None or uid is None:
            whose = f"pid {pid} has ended or runs in no pod" if pid else "it names no process"
            print(f"application XID on {where}: {whose}; no pod evicted", flush=True)
            return
        if any(c[2] == pid and c[3] == uid for c in self.checks):
            return
        self.checks.append((at + self.args.app_xid_wait, gpu, pid, uid))
        print(
            f"application XID on {where}: pod {uid} evicted if pid {pid} still runs "
            f"in {self.args.app_xid_wait:g}s",
            flush=True,
        )

    def check_programs(self, at: float) -> None:
        """Evict the pods whose program still runs `--app-xid-wait` after its XID."""
        due = [c for c in self.checks if c[0] <= at]
        self.checks = [c for c in self.checks if c[0] > at]
        for check in due:
            _, gpu, pid, uid = check
            if self._pod_uid_of_pid(pid) != uid:
                print(
                    f"pid {pid} ended on its own after its XID on GPU {gpu['index']}: its pod "
                    "fails with its program's exit code",
                    flush=True,
                )
                continue
            try:
                self._evict([p for p in self._pods() if p["metadata"].get("uid") == uid])
            except (ApiError, OSError) as e:
                print(f"could not evict pod {uid} (retried): {e}", file=sys.stderr, flush=True)
                self.checks.append((at + self.args.tick, *check[1:]))

    # -- the loop

    def paused(self, at: float) -> bool:
        """Whether the charm has the GPU clients paused now (PAUSE_FILE).

        Honoured `--pause-max` after it was written, or as long as it says
        (`pause_seconds`). The log says what for, as the file does (`paused_for`): a GPU
        reset or the gate's DCGM diagnostic.
        """
        try:
            since = os.stat(self.args.pause).st_mtime
            with open(self.args.pause, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            since, text = None, ""
        longest = pause_seconds(text, self.args.pause_max)
        paused = since is not None and abs(at - since) < longest
        reason = paused_for(text) if paused else None
        if reason != self.was_paused:
            said = f"paused for {reason}" if reason else "resumed"
            print(f"nvidia-smi polls {said} ({self.args.pause})", flush=True)
            self.was_paused = reason
        return paused

    def step(self, at: float) -> None:
        """Read the kernel log, act on its XIDs, retry what is not applied yet.

        nvidia-smi runs on its own thread (`poll_forever`), never in here: on a GPU that
        fell off the bus (XID 79) it may block for its whole bound (`run_smi`, 20 s),
        and the training process that crashed on the fault holds its exit only for its
        fault window (tf_launcher.py FAULT_WINDOW, 10 s) for the eviction to reach it.
        """
        with self.lock:
            if time.monotonic() - self.calibrated >= CALIBRATE_S:
                self.calibrate()
            if self.backlog is not None:  # a first start in this boot: what it found there
                for text, usec in self.backlog:
                    self._kernel_record(text, usec, before=True)
                self.backlog = None
                self.state["kmsg_seq"] = max(self.state["kmsg_seq"], self.backlog_seq)
            for text, usec in self.read_kernel():
                self._kernel_record(text, usec)
            self.decide_bursts(at)
            self.check_programs(at)
            self.apply()
            self._save()

    def _kernel_record(self, text: str, usec: int, before: bool = False) -> None:
        """Act on one kernel record, if it is an XID (`before`: logged before the first start)."""
        record = parse_xid(text)
        if record is None:
            return
        # stamped when read, not when the step began: the step may have waited for the
        # lock (the poller's pass) while the line was written, and a fault stamped before a
        # gate that started meanwhile would be cleared by its readmission
        # (gpu_health.readmit) though the gate never proved it
        now, kernel = time.time(), self.kernel_now()
        self.fault_at = kernel_time(usec, now, kernel)
        # the kernel's clock for bursts and the window
        record["clock"] = usec / 1e6 if usec >= 0 else kernel
        # a record read long after the kernel logged it was not read live (`handle_xid`)
        before = before or (usec >= 0 and kernel - usec / 1e6 > KERNEL_CLOCK_SKEW)
        logged = kernel_wall(usec, now, kernel) if before else None
        self.handle_xid(record, now, (-1.0 if logged is None else logged) if before else None)
        self.fault_at = None

    def poll(self, at: float) -> None:
        """One nvidia-smi health poll (not under the lock while nvidia-smi runs).

        Skipped while a GPU reset or the gate's diagnostic paused the polls (`paused`).
        """
        if self.paused(at):  # a pause is no blind spell, and no hung one
            self.blind_since, self.blind_told, self.hung_since = None, False, None
            return
        self.last_poll = at
        done = self._query_smi()
        if done is not None and done.returncode == 0 and time.monotonic() - self.mig_read >= 60:
            _, lost = parse_smi(done.stdout + done.stderr, self.smi_fields)
            if not lost:
                self.read_mig_devices()
        with self.lock:
            for pci, finding in self.hold_for_mig(self.poll_smi(done), at):
                self.handle_finding(pci, finding, at)
            self.keep_cordoned()
            self.apply()
            self._save()

    def poll_forever(self) -> None:
        """Poll every `--interval` (the poller thread's loop; the first poll ran before)."""
        due = time.time() + self.args.interval
        while True:
            time.sleep(max(0.0, due - time.time()))
            due = time.time() + self.args.interval
            self.poll(time.time())

    def metrics(self) -> list[Gauge]:
        """What COS scrapes from this node (the module's docstring says what each means)."""
        with self.lock:
            state, node = self.state, self.node
            known = {row["uuid"]: row["index"] for row in self.gpus.values()}
            for q in state["quarantined"].values():
                known.setdefault(q["uuid"], q["index"])

            def labels(uuid: str, **more: str) -> dict:
                return {"node": node, "gpu": known.get(uuid, "?"), "uuid": uuid, **more}

            samples: list[Gauge] = [
                Gauge(
                    "gpu_k8s_gpu_quarantined",
                    "1 while the GPU is quarantined by the GPU health watcher.",
                    int(uuid in state["quarantined"]),
                    labels(uuid),
                )
                for uuid in sorted(known)
            ]
            samples += self._counters(labels, known)
            samples += self._timings(labels)
            if self.hung_since is not None:
                samples.append(
                    Gauge(
                        "gpu_k8s_gpu_smi_hung_since_timestamp_seconds",
                        "When nvidia-smi's polls began to go unanswered (Unix time), outside "
                        "a pause, while they do.",
                        round(self.hung_since, 3),
                        {"node": node},
                    )
                )
            if self.blind_since is not None:
                samples.append(
                    Gauge(
                        "gpu_k8s_gpu_driver_unavailable_since_timestamp_seconds",
                        "When nvidia-smi last became unable to reach the NVIDIA driver (Unix "
                        "time), outside a pause for the driver's update, while it lasts.",
                        round(self.blind_since, 3),
                        {"node": node},
                    )
                )
        return samples

    def _counters(self, labels: Callable[..., dict], known: dict[str, str]) -> list[Gauge]:
        state = self.state
        samples: list[Gauge] = []
        for key, count in sorted(state["faults"].items()):
            uuid, xid, reason, cls = key.split("|")
            samples.append(
                Counter(
                    "gpu_k8s_gpu_faults_total",
                    "Faults the GPU health watcher saw: each XID the driver reported and each "
                    "nvidia-smi finding (xid empty), with the catalog's class.",
                    count,
                    labels(uuid, xid=xid, reason=reason, **{"class": cls}),
                )
            )
        for key, count in sorted(state["quarantines"].items()):
            uuid, reason = key.split("|")
            samples.append(
                Counter(
                    "gpu_k8s_gpu_quarantines_total",
                    "Times the GPU health watcher quarantined the GPU.",
                    count,
                    labels(uuid, reason=reason),
                )
            )
        for key, count in sorted(state["xid_repeated_one_team"].items()):
            uuid, namespace = key.split("|")
            samples.append(
                Counter(
                    "gpu_k8s_gpu_xid_repeated_one_team_total",
                    "Times repeated application faults on the GPU, all from one namespace's "
                    "pods while other namespaces' pods held GPUs on the node, restarted only "
                    "that job instead of quarantining the GPU.",
                    count,
                    labels(uuid, namespace=namespace),
                )
            )
        repairs = dict.fromkeys(
            (f"{u}|{m}|{r}" for u in known for m in REPAIR_METHODS for r in REPAIR_RESULTS), 0
        )
        repairs |= state["repairs_counted"]
        for key, count in sorted(repairs.items()):
            uuid, method, result = key.split("|")
            samples.append(
                Counter(
                    "gpu_k8s_gpu_repairs_total",
                    "Repairs of the GPU the charm recorded (gpu-auto-repair, repair-gpu), by "
                    "method and result.",
                    count,
                    labels(uuid, method=method, result=result),
                )
            )
        return samples

    def _timings(self, labels: Callable[..., dict]) -> list[Gauge]:
        samples: list[Gauge] = [
            Gauge(
                "gpu_k8s_gpu_quarantined_since_timestamp_seconds",
                "When the GPU's quarantine began (Unix time), while it lasts.",
                q["since"],
                labels(q["uuid"]),
            )
            for q in self.state["quarantined"].values()
        ]
        for uuid, timing in sorted(self.state["timings"].items()):
            samples.append(
                Gauge(
                    "gpu_k8s_gpu_fault_to_quarantine_seconds",
                    "Seconds from the GPU's last quarantining fault to its quarantine "
                    "(condition, cordon, eviction written).",
                    round(timing["fault_to_quarantine"], 3),
                    labels(uuid),
                )
            )
            if "fault_to_readmission" in timing:
                samples.append(
                    Gauge(
                        "gpu_k8s_gpu_fault_to_readmission_seconds",
                        "Seconds from the GPU's last quarantining fault to its readmission.",
                        round(timing["fault_to_readmission"], 3),
                        labels(uuid),
                    )
                )
        return samples


def _device_ids(entry: dict) -> list[str]:
    """The device IDs of one checkpoint entry of an NVIDIA resource (all NUMA nodes)."""
    if not str(entry.get("ResourceName", "")).startswith(NVIDIA_RESOURCES):
        return []
    return [d for ids in (entry.get("DeviceIDs") or {}).values() for d in ids or []]


def render(samples: list[Gauge]) -> str:
    """Prometheus text format 0.0.4: each family's HELP and TYPE once, before its samples."""
    lines, seen = [], set()
    for sample in sorted(samples, key=lambda s: s[0]):  # stable: one family's lines together
        name, help_text, value, labels = sample
        if name not in seen:
            seen.add(name)
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {sample.kind}"]
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{text}}} {value}")
    return "\n".join(lines) + "\n"


def serve(watcher: Watcher, port: int) -> http.server.HTTPServer:
    """The gauges on 127.0.0.1:<port>/metrics, in a daemon thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = render(watcher.metrics()).encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # noqa: A002 (the base class's name)
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def arguments(argv: list[str]) -> argparse.Namespace:
    """The command line (every path injectable, for the tests)."""
    p = argparse.ArgumentParser(description="Quarantine a failing GPU of this node.")
    p.add_argument("--node", required=True)
    p.add_argument("--api", default="/etc/gpu-k8s/gpu-watcher-api.json")
    p.add_argument("--catalog", default="/usr/local/lib/gpu-k8s/xid_catalog.json")
    p.add_argument("--kmsg", default="/dev/kmsg")
    p.add_argument("--nvidia-smi", default="/usr/bin/nvidia-smi")
    p.add_argument(
        "--checkpoint", default="/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    )
    p.add_argument("--proc", default="/proc")
    p.add_argument("--boot-id", default="/proc/sys/kernel/random/boot_id")
    p.add_argument("--state", default="/var/lib/gpu-k8s/gpu-health.json")
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--pause", default=PAUSE_FILE)
    p.add_argument("--pause-max", type=float, default=PAUSE_MAX_S)
    p.add_argument("--tick", type=float, default=0.5)
    p.add_argument("--escalation", default="3/10m")
    p.add_argument("--app-xid-wait", type=float, default=APP_WAIT_S)
    p.add_argument("--burst-wait", type=float, default=APP_BURST_S)
    p.add_argument("--mig-hold", type=float, default=MIG_HOLD_S)
    p.add_argument("--driver-blind", type=float, default=DRIVER_BLIND_S)
    p.add_argument("--smi-timeout", type=float, default=SMI_TIMEOUT_S)
    p.add_argument("--smi-hung", type=float, default=SMI_HUNG_S)
    p.add_argument("--metrics-port", type=int, default=0)
    p.add_argument("--unit", default="", help="the Juju unit to wake with juju-exec")
    p.add_argument("--juju-exec", default="juju-exec")  # /usr/bin/juju-exec on Juju 3 machines
    p.add_argument("--hook-retry", type=float, default=5.0)
    p.add_argument("--hook-timeout", type=float, default=300.0)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    """Run until stopped."""
    args = arguments(argv)
    parse_escalation(args.escalation)
    with open(args.api) as f:
        api = Api(json.load(f))
    with open(args.catalog) as f:
        catalog = json.load(f)
    watcher = Watcher(args, api, catalog)
    # the GPUs' indexes and UUIDs, before the first XID is read and the first scrape
    watcher.poll(time.time())
    if args.metrics_port:
        serve(watcher, args.metrics_port)
    print(f"watching node {args.node}: {args.kmsg}, nvidia-smi every {args.interval}s", flush=True)
    threading.Thread(target=watcher.poll_forever, name="nvidia-smi", daemon=True).start()
    while True:
        watcher.step(time.time())
        time.sleep(args.tick)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
