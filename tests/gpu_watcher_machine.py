"""A GPU node for the real GPU health watcher process (functional tests and the bench).

The watcher (charms/kubernetes-worker/src/gpu_watcher.py) runs as a real process, as
systemd runs it, with its inputs at the Host boundary: a file standing for /dev/kmsg that
the test appends kernel records to (the driver's XID lines from
tests/fixtures/gpu/xid/lines.txt), a fake nvidia-smi (a shell script printing what the test
writes: the health query, and `-L` with the GPUs and their MIG devices), the kubelet's
device-manager checkpoint and a /proc with the processes' cgroups. It talks to the fake API
server over TLS as the node's kubelet (its client certificate), so the Node authorizer and
NodeRestriction decide what it may do, as kube-apiserver would.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import charm_modules
from tf_demo import free_ports

from charms.gpu_k8s.v0.kubeclient import Kube
from fakes.host import FakeRunner
from fakes.kube_apiserver import FakeKubeApiServer

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "charms" / "kubernetes-worker" / "src"
gpu_watcher = charm_modules.load("kubernetes-worker", "gpu_watcher")
LINES = (ROOT / "tests/fixtures/gpu/xid/lines.txt").read_text().splitlines()
OWN, OTHER = "gpu-node-1", "gpu-node-2"
GPUS = [  # index, UUID, nvidia-smi's pci.bus_id
    ("0", "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae", "00000000:2B:00.0"),
    ("1", "GPU-7f3e9a2c-5d41-4b8e-9c0a-1e2f3a4b5c6d", "00000000:3B:00.0"),
]
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}
# nvidia-smi's answers when it cannot reach the NVIDIA driver at all, not one GPU: its exit
# status (nvidia-smi(1) RETURN VALUE, docs.nvidia.com/deploy/nvidia-smi: 9 "NVIDIA driver is
# not loaded", 12 "NVML Shared Library couldn't be found or loaded"; 18 is NVML's
# NVML_ERROR_LIB_RM_VERSION_MISMATCH, nvml.h nvmlReturn_t, which the man page does not list)
# and its words, no GPU row:
# - `mismatch`: the userspace of a new driver over the old kernel module, between the
#   charm's driver update and its reboot (drain_turns.py); the project's recording
#   (tests/unit/kubernetes_worker/gpu/test_gpu.py MISMATCH; greshake/i3status-rust#771);
# - `not-loaded`: no kernel module (pastebin records of `nvidia-smi` exit 9; test_gpu.py);
# - `no-library`: no libnvidia-ml.so (NVIDIA/nvidia-docker#1163, projectbluefin/dakota#373).
SMI_DRIVER_DOWN = {
    "mismatch": (
        18,
        "Failed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 580.95\n",
    ),
    "not-loaded": (
        9,
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n",
    ),
    "no-library": (
        12,
        "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure "
        "that the NVIDIA Display Driver is properly installed and present in your system.\n"
        "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n",
    ),
}
ALL = {f"{n}/{p}" for n in (OWN, OTHER) for p in ("gpu0-job", "gpu1-job", "cpu-job")}


def smi_rows(
    dbe: int | dict[int, int] = 0,
    lost: int | None = None,
    remap_failed: int | None = None,
    fabric: tuple[int, str, str] | None = None,
    fields: tuple[str, ...] = gpu_watcher.SMI_FIELDS,
    recovery: str | dict[int, str] = "None",
    fabric_health: dict[int, str] | None = None,
    unreachable: int | None = None,
) -> str:
    """What `nvidia-smi --query-gpu=<fields> --format=csv,noheader` prints for the two GPUs.

    The fields, in gpu_watcher.SMI_FIELDS' order, as nvidia-smi prints them:
    - `remapped_rows.failure`: `No`, or `Yes` on the GPU `remap_failed` (the row
      remapper's "Row remapping failure Boolean", NVIDIA's A100 GPU memory error management
      guide, "User Visible Statistics"; printed `No`/`Yes` as in
      tests/fixtures/gpu/h100-sxm5-vm/nvidia-smi-q.xml `<remapped_row_failure>`, a query
      field of `--query-gpu` as nvidia_gpu_exporter's AUTO field list shows,
      utkuozdemir/nvidia_gpu_exporter#384);
    - `fabric.state`, `fabric.status`: `N/A` on a machine without NVSwitch
      (tests/fixtures/gpu/h100-sxm5-vm/nvidia-smi-fabric.csv, captured by this project);
      `fabric` = (GPU, state, status) on an NVSwitch machine: NVML's
      NVML_GPU_FABRIC_STATE_* names (Not Supported, Not Started, In Progress, Completed) and
      the status an nvmlReturn_t's text (`Success`, or an error such as `Unknown Error`),
      meaningful only once the state is Completed (NVML nvmlGpuFabricInfo_t: "Must be
      checked only if state returns 'complete'"; tests/fixtures/gpu/fabric/);
    - `ecc.errors.uncorrected.volatile.total`: `dbe` on GPU 0 (an int) or per GPU (a dict);
    - `gpu_recovery_action`: `recovery` on every GPU (a str) or per GPU (a dict): `None`
      on a GPU with error containment and nothing to do (the H200 recording,
      tests/fixtures/gpu/h200-sxm-vm/nvidia-smi-q.xml), the names of NVIDIA's GPU Memory
      Error Management guide ("Error Recovery and Response Flags": None, Reset, Reboot,
      Drain P2P, Drain and Reset), or `N/A` where the GPU does not report it ("'N/A'
      indicates that the field is not supported on the current device":
      h200-sxm-vm/health/help-query-gpu.txt; a V100 or T4, without error containment);
    - `fabric.health.summary`: `N/A` (the H200 recording, no NVSwitch), or per GPU what
      `fabric_health` says (NVML's NVML_GPU_FABRIC_HEALTH_SUMMARY_* are 0-3; the words
      nvidia-smi prints for them were found nowhere, so a test's words are its own).

    `unreachable`: that GPU's row is nvidia-smi's words for a GPU it cannot open that do not
    say "lost", as users quote them for a GPU that fell off the bus
    (NVIDIA/open-gpu-kernel-modules#387, NVIDIA/dcgm-exporter#604): "Unable to determine
    the device handle for GPU 0000:0B:00.0: Unknown Error".
    """
    out = []
    for index, uuid, bus in GPUS:
        if lost is not None and int(index) == lost:
            out.append(
                f"Unable to determine the device handle for GPU{index}: {bus[4:]}: "
                "GPU is lost. Reboot the system to recover this GPU"
            )
            continue
        if unreachable is not None and int(index) == unreachable:
            out.append(f"Unable to determine the device handle for GPU {bus[4:]}: Unknown Error")
            continue
        errors = dbe.get(int(index), 0) if isinstance(dbe, dict) else dbe if index == "0" else 0
        action = recovery.get(int(index), "None") if isinstance(recovery, dict) else recovery
        failed = "Yes" if remap_failed is not None and int(index) == remap_failed else "No"
        state, status = "N/A", "N/A"
        if fabric is not None:
            state, status = ("Completed", "Success")
            if int(index) == fabric[0]:
                state, status = fabric[1], fabric[2]
        summary = (fabric_health or {}).get(int(index), "N/A")
        values = (index, uuid, bus, errors, failed, state, status, action, summary)
        row = dict(zip(gpu_watcher.SMI_FIELDS, values, strict=True))
        out.append(", ".join(str(row[f]) for f in fields))
    return "\n".join(out) + "\n"


def smi_list(mig: dict[int, list[str]] | None = None) -> str:
    """`nvidia-smi -L`: each GPU, then its MIG devices as the MIG user guide shows them."""
    out = []
    for index, uuid, _ in GPUS:
        out.append(f"GPU {index}: NVIDIA A100-SXM4-40GB (UUID: {uuid})")
        for n, device in enumerate((mig or {}).get(int(index), [])):
            out.append(f"  MIG 1g.5gb      Device  {n}: (UUID: {device})")
    return "\n".join(out) + "\n"


def smi_query(mig: dict[int, list[str]] | None = None) -> str:
    """`nvidia-smi -q -x`, cut to what the watcher reads: each GPU's MIG devices' IDs.

    MIG device <n> of a GPU (`smi_list`'s `Device <n>`) is GPU instance 2 + n, compute
    instance 0: the fixture's MIG XID lines name `GPU-I:02` and `GPU-CI:00`, so device 0.
    The form as gpustack's and ceems' parsers quote it (gpu_watcher.mig_instances).
    """
    out = ['<?xml version="1.0" ?>', "<nvidia_smi_log>"]
    for index, uuid, bus in GPUS:
        devices = (mig or {}).get(int(index), [])
        out.append(f'<gpu id="{bus}"><mig_devices>')
        out += [
            f"<mig_device><index>{n}</index><gpu_instance_id>{2 + n}</gpu_instance_id>"
            "<compute_instance_id>0</compute_instance_id></mig_device>"
            for n in range(len(devices))
        ]
        out.append("None" if not devices else "")
        out.append(f"</mig_devices><uuid>{uuid}</uuid></gpu>")
    return "\n".join(out + ["</nvidia_smi_log>"]) + "\n"


def xid_line(xid_fixture: str, gpu: int, pid: int | None = None, *, mig: bool = False) -> str:
    """A fixture line with the fake machine's PCI address of `gpu` (and a pid, if asked).

    `mig`: the fixture's line of that XID attributed to a MIG instance (`GPU-I:`, kept).
    """
    line = next(
        entry
        for entry in LINES
        if (f"): {xid_fixture}," in entry or entry.endswith(f"): {xid_fixture}"))
        and ("GPU-I:" in entry) == mig
    )
    bus = GPUS[gpu][2]
    where, attribution = line.split("(PCI:", 1)[1].split(")", 1)[0], ""
    if " " in where:  # `<pci> GPU-I:<gi>[ GPU-CI:<ci>]`
        attribution = " " + where.split(" ", 1)[1]
    line = (
        line.split("(PCI:", 1)[0]
        + f"(PCI:0000:{bus[9:11].lower()}:00{attribution})"
        + line.split(")", 1)[1]
    )
    if pid is not None:
        line = re.sub(r"pid=('<unknown>'|\d+)", f"pid={pid}", line, count=1)
    return line


def until(check: Callable[[], object], timeout: float = 15.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the watcher did not act in time"
        time.sleep(step)


@dataclass
class Machine:
    """The watcher's world: its files, its process, the API server."""

    api: FakeKubeApiServer
    root: Path
    state_path: Path
    process: subprocess.Popen | None = None
    seq: int = 100
    metrics_port: int = 0
    started_with: dict | None = None  # start()'s options, for a restart
    # the fake driver's uncorrectable ECC counts and recovery actions per GPU (`memory_error`)
    ecc: dict[int, int] = field(default_factory=dict)
    recovery: dict[int, str] = field(default_factory=dict)
    # CLOCK_MONOTONIC when the machine was made: /dev/kmsg stamps records with the kernel's
    # local clock, which NTP does not slew, CLOCK_MONOTONIC being slewed
    # (gpu_watcher.calibrate): the kernel's clock is `drift` seconds ahead of it
    made: float = field(default_factory=time.monotonic)
    drift: float = 0.0
    # the kernel's side of writes to /dev/kmsg (`_stamp_writes`): how far its file is read
    lock: threading.Lock = field(default_factory=threading.Lock)
    written: int = 0
    writes: threading.Thread | None = None
    stopped: threading.Event = field(default_factory=threading.Event)
    devkmsg: str = "ratelimit"  # kernel.printk_devkmsg: "off" ignores every write

    def at(self, seconds: float) -> int:
        """The kernel's stamp (microseconds) `seconds` after the machine was made.

        A test's faults minutes apart by the kernel's clock: a stamp a few minutes ahead of
        now is read as now (gpu_watcher.kernel_wall), never as an old record.
        """
        return int((self.made + self.drift + seconds) * 1e6)

    def clock(self, ago: float = 0.0) -> int:
        """The kernel's stamp (microseconds since boot) `ago` seconds before now."""
        return int((time.monotonic() + self.drift - ago) * 1e6)

    def kernel(self, text: str, usec: int | None = None) -> None:
        """Append one /dev/kmsg record (Documentation/ABI/testing/dev-kmsg).

        `usec`: the kernel's timestamp (microseconds since boot: `at`, or a time.monotonic()
        reading); now, as the kernel stamps a record it logs, otherwise.
        An uncorrectable memory error's XID moves nvidia-smi's readings as the driver does
        (`memory_error`).
        """
        self.memory_error(text)
        self._log(3, text, usec, " SUBSYSTEM=pci\n")  # a continuation line, skipped

    def _log(self, prio: int, text: str, usec: int | None, more: str = "") -> None:
        with self.lock:
            self.seq += 1
            stamp = self.clock() if usec is None else usec
            with (self.root / "kmsg").open("a") as f:
                f.write(f"{prio},{self.seq},{stamp},-;{text}\n{more}")

    def _stamp_writes(self) -> None:
        """The kernel's side of a write to /dev/kmsg, while the watcher runs.

        Each write() logs one record, stamped then, its `<N>` prefix the record's
        priority (facility << 3 | level), LOG_USER (8) when it names no facility
        (Documentation/ABI/testing/dev-kmsg "Injecting messages"; kernel/printk/printk.c
        devkmsg_write). The watcher writes to this file, so its lines without a record's
        prefix are the writes: each is logged as a record a few ms later (the kernel
        stores it within the write(): gpu_watcher.CALIBRATE_WAIT allows for the delay).
        """
        path = self.root / "kmsg"
        while not self.stopped.wait(0.005):
            with path.open("rb") as f:
                f.seek(self.written)
                data = f.read()
            done = data.rfind(b"\n") + 1
            self.written += done
            for raw in data[:done].decode(errors="replace").splitlines():
                if re.match(r"\d+,\d+,|\s", raw):
                    continue  # a record, or its continuation
                wrote = re.match(r"<(\d+)>", raw)
                prio = int(wrote[1]) if wrote else 12
                if wrote and prio < 8:
                    prio += 8  # no facility given: LOG_USER
                if self.devkmsg != "off":  # off: write() succeeds, nothing is logged
                    self._log(prio, raw[wrote.end() if wrote else 0 :], None)

    def memory_error(self, text: str) -> None:
        """What the driver's counters say after an XID 94 line on one of the GPUs.

        A contained error is an uncorrectable ECC error, which the volatile uncorrectable
        counter counts whether contained or not (NVIDIA's GPU Memory Error Management guide, "User
        Visible Statistics": XID 48 on any uncorrectable error, 94 contained, 95 not). A
        contained one (94) leaves the recovery action `None`: "Unaffected applications
        will continue to run and additional workloads can be launched on this GPU without
        requiring a GPU reset" (the guide, "Response to Uncorrectable Contained ECC
        Errors").
        """
        record = gpu_watcher.parse_xid(text)
        if record is None or record["xid"] != "94":
            return
        gpu = next(
            (int(i) for i, _, bus in GPUS if gpu_watcher.pci_key(bus) == record["pci"]), None
        )
        if gpu is None:
            return
        self.ecc[gpu] = self.ecc.get(gpu, 0) + 1
        self.smi(smi_rows(dbe=self.ecc, recovery=self.recovery))

    @property
    def pause_path(self) -> Path:
        """The file the charm writes while it resets a GPU (gpu_watcher.PAUSE_FILE)."""
        return self.root / "gpu-watcher-pause"

    def smi(self, text: str, code: int = 0) -> None:
        (self.root / "smi.out").write_text(text)
        (self.root / "smi.rc").write_text(str(code))

    def smi_driver_down(self, kind: str | None) -> None:
        """Every nvidia-smi run answers SMI_DRIVER_DOWN[kind] from now on (None: driver back).

        Whatever it is asked (`--query-gpu`, `-L`, `-q`): NVML cannot start, so no query
        reaches a GPU.
        """
        path = self.root / "smi.down"
        if kind is None:
            path.unlink(missing_ok=True)
            return
        code, text = SMI_DRIVER_DOWN[kind]
        (self.root / "smi.down.out").write_text(text)
        path.write_text(f"{code}\n")

    def mig_state(self, state: str | None) -> None:
        """mig-manager's `nvidia.com/mig.config.state` label on this node (None: removed)."""
        node = self.node()
        labels = node["metadata"].setdefault("labels", {})
        if state is None:
            labels.pop("nvidia.com/mig.config.state", None)
        else:
            labels["nvidia.com/mig.config.state"] = state
        self.api.put_object(f"/api/v1/nodes/{OWN}", node)

    def smi_hang(self, seconds: float | None) -> None:
        """Each `--query-gpu` of the fake nvidia-smi takes `seconds` from now on (None: no more).

        nvidia-smi can block for long on a GPU that fell off the bus (XID 79) or on a hung
        driver: the watcher bounds each call (gpu_watcher.py `run_smi`, `--smi-timeout`).
        The wait is a child of the fake's shell (`smi_sleepers`), as nvidia-smi's own
        threads and helpers are its children: killing the shell alone leaves it running,
        killing its process group ends it. A process in state D, which SIGKILL does not
        end until the driver returns, cannot be faked in user space.
        """
        path = self.root / "smi.hang"
        if seconds is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(f"{seconds}\n")

    def smi_sleepers(self) -> list[int]:
        """The pids of the fake nvidia-smi's waits (`smi_hang`) still running, not zombies."""
        path = self.root / "smi.sleepers"
        alive = []
        for pid in path.read_text().split() if path.exists() else []:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            if stat.rpartition(")")[2].split()[0] != "Z":
                alive.append(int(pid))
        return alive

    def smi_calls(self) -> int:
        """How many times nvidia-smi ran."""
        path = self.root / "smi.calls"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def smi_unknown(self, *fields: str) -> None:
        """Fields the fake nvidia-smi does not know.

        It refuses a query naming one, as nvidia-smi does (`Field "cuda_version" is not a
        valid field to query.`, exit non-zero).
        """
        (self.root / "smi-unknown").write_text("\n".join(fields) + "\n")

    def smi_list(self, text: str) -> None:
        (self.root / "smi-L.out").write_text(text)

    def smi_query(self, xml: str) -> None:
        """What `nvidia-smi -q -x` prints (`smi_query`)."""
        (self.root / "smi-q.out").write_text(xml)

    def mig(self, devices: dict[int, list[str]]) -> None:
        """A MIG layout: `nvidia-smi -L` and `-q -x` list `devices` (per GPU index)."""
        self.smi_list(smi_list(devices))
        self.smi_query(smi_query(devices))

    def node(self, name: str = OWN) -> dict:
        node = self.api.get_object(f"/api/v1/nodes/{name}")
        assert node is not None
        return node

    def pods(self) -> set[str]:
        return {
            f"{node}/{name}"
            for node in (OWN, OTHER)
            for name in ("gpu0-job", "gpu1-job", "cpu-job", "other-job", "mig-job")
            if self.api.get_object(f"/api/v1/namespaces/team-a/pods/{name}-{node}") is not None
        }

    def quarantined(self) -> bool:
        """Condition set and node cordoned (the watcher's two writes to the Node)."""
        return self.condition() is not None and bool(
            self.node().get("spec", {}).get("unschedulable")
        )

    def condition(self) -> dict | None:
        conditions = self.node().get("status", {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "GpuHealthy"), None)

    def state(self) -> dict:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}

    def handled(self) -> bool:
        """The watcher saved its state past the last kernel record appended."""
        return self.state().get("kmsg_seq") == self.seq

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            return answer.read().decode()

    def checkpoint(self, entry: dict) -> None:
        """Add a PodDeviceEntries entry to the kubelet's device-manager checkpoint."""
        path = self.root / "checkpoint"
        data = json.loads(path.read_text())
        data["Data"]["PodDeviceEntries"].append(entry)
        path.write_text(json.dumps(data))

    def pod(self, name: str, node: str = OWN, namespace: str = "team-a") -> dict:
        """A running pod on `node` (`<name>-<node>` in `namespace`: team-a or team-b)."""
        spec = {"nodeName": node, "containers": [{"name": "main", "image": "busybox:1.37"}]}
        path = f"/api/v1/namespaces/{namespace}/pods/{name}-{node}"
        return self.api.put_object(path, {"spec": spec})

    def release(self, pod: dict) -> None:
        """Drop `pod`'s entries from the kubelet's device-manager checkpoint.

        The kubelet frees a terminated pod's devices at its next allocation (kubernetes
        pkg/kubelet/cm/devicemanager/manager.go UpdateAllocatedDevices, "frees any Devices
        that are bound to terminated pods", run from allocateContainerResources): until
        then its entry stays.
        """
        path = self.root / "checkpoint"
        data = json.loads(path.read_text())
        entries = data["Data"]["PodDeviceEntries"]
        uid = pod["metadata"]["uid"]
        data["Data"]["PodDeviceEntries"] = [e for e in entries if e["PodUID"] != uid]
        path.write_text(json.dumps(data))

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None
        if self.writes is not None:
            self.stopped.set()
            self.writes.join()
            self.writes = None


def allocation(pod: dict, resource: str, *devices: str) -> dict:
    """A checkpoint entry (kubernetes pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go)."""
    return {
        "PodUID": pod["metadata"]["uid"],
        "ContainerName": "main",
        "ResourceName": resource,
        "DeviceIDs": {"0": list(devices)},  # per NUMA node
        "AllocResp": "",
    }


def program(machine: Machine, pid: int, pod: str, namespace: str = "team-a") -> Path:
    """A process of `pod` (`<pod>-gpu-node-1` in `namespace`): its /proc/<pid>/cgroup names it.

    The cgroup path systemd's cgroup driver gives a container (kubepods-<qos>-pod<uid>.slice,
    the UID's dashes as underscores), as gpu_watcher.POD_CGROUP reads it.
    """
    found = machine.api.get_object(f"/api/v1/namespaces/{namespace}/pods/{pod}-{OWN}")
    assert found is not None
    pid_dir = machine.root / "proc" / str(pid)
    pid_dir.mkdir()
    pod_uid = found["metadata"]["uid"].replace("-", "_")
    (pid_dir / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{pod_uid}.slice/"
        "cri-containerd-0123.scope\n"
    )
    return pid_dir


@contextlib.contextmanager
def gpu_machine(root: Path) -> Iterator[Machine]:
    """Two GPU nodes with three pods each (one per GPU, one without); the watcher's files.

    The state file is where the charm reads it (gpu_health.STATE) on the machine's file
    system `root/host`, so the charm's own code (`readmit`) works on it.
    """
    with FakeKubeApiServer(tls=True) as api:
        assert api.tls is not None
        for team in ("team-a", "team-b"):  # two tenants (team-b's pods: the tests' own)
            api.put_object(f"/api/v1/namespaces/{team}", {"metadata": {"name": team}})
        gpu_health = charm_modules.load("kubernetes-worker", "gpu_health")
        state = root / "host" / gpu_health.STATE.lstrip("/")
        state.parent.mkdir(parents=True)
        box = Machine(api, root, state)
        entries = []
        for node in (OWN, OTHER):
            labels = {"kubernetes.io/hostname": node}
            api.put_object(
                f"/api/v1/nodes/{node}",
                {"metadata": {"labels": labels}, "status": {"conditions": [READY]}},
            )
            for name, gpu in (("gpu0-job", 0), ("gpu1-job", 1), ("cpu-job", None)):
                pod = box.pod(name, node)
                if gpu is not None and node == OWN:
                    entries.append(allocation(pod, "nvidia.com/gpu", GPUS[gpu][1]))
        checkpoint = {
            "Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}},
            "Checksum": 1,
        }
        (root / "checkpoint").write_text(json.dumps(checkpoint))
        (root / "kmsg").write_text("")
        # a kernel's ring buffer is never empty: the boot's own records come first
        box.kernel("Linux version 6.8.0-88-generic #89-Ubuntu SMP PREEMPT_DYNAMIC", 0)
        (root / "boot_id").write_text("b0b0\n")
        (root / "proc").mkdir()
        client = root / "kubelet-client-current.pem"
        client.write_text(api.node_certificate(OWN))
        (root / "api.json").write_text(
            json.dumps({"server": api.url, "ca": api.tls.ca_pem, "client": str(client)})
        )
        smi = root / "nvidia-smi"
        smi.write_text(
            "#!/bin/sh\n"
            f"echo x >> {root}/smi.calls\n"  # each run, for the pause test
            # the driver cannot be reached at all (`smi_driver_down`): every run says so
            f"if [ -f {root}/smi.down ]; then cat {root}/smi.down.out;"
            f' exit "$(cat {root}/smi.down)"; fi\n'
            f'if [ "$1" = "-L" ]; then cat {root}/smi-L.out; exit 0; fi\n'
            f'if [ "$1" = "-q" ]; then cat {root}/smi-q.out; exit 0; fi\n'
            # a field this driver's nvidia-smi does not know fails the whole query
            'q="${1#--query-gpu=}"\n'
            # a GPU that fell off the bus can make each query hang (`smi_hang`)
            f'if [ -f {root}/smi.hang ] && [ "$q" != "$1" ]; then\n'
            f'  sleep "$(cat {root}/smi.hang)" & echo $! >> {root}/smi.sleepers; wait $!\n'
            "fi\n"
            f"for f in $(cat {root}/smi-unknown 2>/dev/null); do\n"
            '  case ",$q," in *",$f,"*)\n'
            '    echo "Field \\"$f\\" is not a valid field to query."; exit 2;;\n'
            "  esac\n"
            "done\n"
            f'cat {root}/smi.out\nexit "$(cat {root}/smi.rc)"\n'
        )
        smi.chmod(0o755)
        box.smi(smi_rows())
        box.smi_list(smi_list())
        box.smi_query(smi_query())
        try:
            yield box
        finally:
            box.stop()
            for pid in box.smi_sleepers():  # a hang the watcher left behind (main's did)
                os.kill(pid, signal.SIGKILL)


UNIT = "kubernetes-worker/0"


def fake_juju_exec(box: Machine, code: int = 0) -> None:
    """A `juju-exec` on the watcher's PATH (gpu_health.unit_text: systemd's PATH finds it).

    It records its call (`juju_exec_program`), then exits with `code` (juju-exec passes on
    the exit code of the commands it ran; 0: the hook ran).
    """
    juju_exec_program(box, f"sys.exit({code})\n")


def juju_exec_program(box: Machine, then: str) -> None:
    """Write `<root>/bin/juju-exec`: it records its call, then runs the Python lines `then`.

    Each call: the time (wall clock and CLOCK_MONOTONIC, which time.monotonic() reads in
    every process), its argv and the GPUs quarantined in the state file at that moment
    (what the hook it asks for would read), appended to `<root>/juju-exec.calls`.
    """
    bin_dir = box.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / "juju-exec"
    program.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        "try:\n"
        f"    held = sorted(json.load(open({str(box.state_path)!r}))['quarantined'])\n"
        "except (OSError, ValueError, KeyError):\n"
        "    held = None\n"
        "call = {'at': time.time(), 'monotonic': time.monotonic(), 'argv': sys.argv[1:]}\n"
        f"with open({str(box.root / 'juju-exec.calls')!r}, 'a') as f:\n"
        "    f.write(json.dumps({**call, 'quarantined': held}) + '\\n')\n" + then
    )
    program.chmod(0o755)


def juju_exec_calls(box: Machine) -> list[dict]:
    """What the fake juju-exec recorded, oldest first."""
    path = box.root / "juju-exec.calls"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def start(
    box: Machine,
    escalation: str = "3/10m",
    *,
    interval: float = 0.2,
    tick: float = 0.05,
    metrics: bool = False,
    unit: str | None = None,
    hook_retry: float = 0.05,
    app_wait: float = 0.3,
    burst_wait: float = 0.3,
    mig_hold: float | None = None,
    driver_blind: float | None = None,
    smi_timeout: float | None = None,
    smi_hung: float | None = None,
) -> None:
    """Start the watcher as systemd does (gpu_health.unit_text), every path injected.

    `unit`: the Juju unit it wakes with juju-exec (`fake_juju_exec` on its PATH);
    `app_wait`: `--app-xid-wait`, shortened from its 15 s; `burst_wait`: `--burst-wait`,
    from its 5 s (the test's lines of a burst are appended within milliseconds);
    `mig_hold`: `--mig-hold`, its default unless given; `driver_blind`: `--driver-blind`,
    `smi_timeout`: `--smi-timeout`, `smi_hung`: `--smi-hung`, likewise.
    """
    box.started_with = {"escalation": escalation, "interval": interval, "tick": tick}
    box.started_with |= {"metrics": metrics, "unit": unit, "hook_retry": hook_retry}
    box.started_with |= {"app_wait": app_wait, "burst_wait": burst_wait, "mig_hold": mig_hold}
    box.started_with |= {"driver_blind": driver_blind, "smi_timeout": smi_timeout}
    box.started_with |= {"smi_hung": smi_hung}
    r = box.root
    argv = [sys.executable, str(SRC / "gpu_watcher.py")]
    argv += watcher_args(box, escalation, interval, tick, app_wait, burst_wait)
    if mig_hold is not None:
        argv += ["--mig-hold", str(mig_hold)]
    if driver_blind is not None:
        argv += ["--driver-blind", str(driver_blind)]
    if smi_timeout is not None:
        argv += ["--smi-timeout", str(smi_timeout)]
    if smi_hung is not None:
        argv += ["--smi-hung", str(smi_hung)]
    if metrics:
        box.metrics_port = box.metrics_port or free_ports(1)[0]
        argv += ["--metrics-port", str(box.metrics_port)]
    if unit is not None:
        argv += ["--unit", unit, "--hook-retry", str(hook_retry)]
    env = {**os.environ, "PATH": f"{r / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    if box.writes is None:
        box.stopped.clear()
        box.writes = threading.Thread(target=box._stamp_writes, daemon=True)
        box.writes.start()
    with (r / "watcher.log").open("a") as log:  # the child keeps its own descriptor
        box.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    until(lambda: box.state_path.exists(), step=0.01)  # first pass done: GPUs known
    if metrics:
        until(_serving(box), step=0.01)


def watcher_args(
    box: Machine,
    escalation: str = "3/10m",
    interval: float = 0.2,
    tick: float = 0.05,
    app_wait: float = 0.3,
    burst_wait: float = 0.3,
) -> list[str]:
    """The watcher's arguments on `box` (gpu_watcher.arguments), every path injected."""
    r = box.root
    argv = ["--node", OWN]
    argv += ["--api", str(r / "api.json"), "--catalog", str(SRC / "xid_catalog.json")]
    argv += ["--kmsg", str(r / "kmsg"), "--nvidia-smi", str(r / "nvidia-smi")]
    argv += ["--checkpoint", str(r / "checkpoint"), "--proc", str(r / "proc")]
    argv += ["--boot-id", str(r / "boot_id"), "--state", str(box.state_path)]
    argv += ["--interval", str(interval), "--tick", str(tick), "--escalation", escalation]
    argv += ["--pause", str(box.pause_path), "--app-xid-wait", str(app_wait)]
    return [*argv, "--burst-wait", str(burst_wait)]


def _serving(box: Machine) -> Callable[[], bool]:
    def check() -> bool:
        try:
            box.metrics()
        except OSError:
            return False
        return True

    return check


def readmit(
    box: Machine,
    now: str,
    proof: str = "CUDA check passed on 2 GPUs",
    gate_started: float | None = None,
) -> tuple[list[dict], str | None]:
    """The charm's readmission (gpu_health.readmit, as `readmit-gpu` runs it after its gate).

    On the machine's file system, with `systemctl stop/start` of the watcher stopping and
    starting this process, and the API as the node (its kubelet's certificate).
    """
    gpu_health = charm_modules.load("kubernetes-worker", "gpu_health")
    runner = FakeRunner(box.root / "host")

    def systemctl(argv: list[str], _input: str | None) -> str:
        assert argv[2] == f"{gpu_health.SERVICE}.service", argv
        if argv[1] == "stop":
            box.stop()
        elif argv[1] == "start":
            start(box, **(box.started_with or {}))
        return ""

    runner.on("systemctl", systemctl)
    config = box.api.certificate_kubeconfig(box.api.node_certificate(OWN))
    with Kube.from_kubeconfig(config) as kube:
        return gpu_health.readmit(
            runner.host(), kube, OWN, now=now, proof=proof, gate_started=gate_started
        )
