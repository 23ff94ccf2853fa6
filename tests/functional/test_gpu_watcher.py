"""A failing GPU is quarantined by the node's own watcher within seconds (issue 32 items 1, 2).

The watcher (charms/kubernetes-worker/src/gpu_watcher.py) runs as a real process, as
systemd runs it, with its inputs at the Host boundary: a file standing for /dev/kmsg that
the test appends kernel records to (the driver's XID lines from
tests/fixtures/gpu/xid/lines.txt), a fake nvidia-smi (a shell script printing what the test
writes), the kubelet's device-manager checkpoint and a /proc with the processes' cgroups.
It talks to the fake API server over TLS as the node's kubelet (its client certificate),
so the Node authorizer and NodeRestriction decide what it may do, as kube-apiserver would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakes.kube_apiserver import FakeKubeApiServer

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "charms" / "kubernetes-worker" / "src"
LINES = (ROOT / "tests/fixtures/gpu/xid/lines.txt").read_text().splitlines()
OWN, OTHER = "gpu-node-1", "gpu-node-2"
GPUS = [  # index, UUID, nvidia-smi's pci.bus_id
    ("0", "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae", "00000000:2B:00.0"),
    ("1", "GPU-7f3e9a2c-5d41-4b8e-9c0a-1e2f3a4b5c6d", "00000000:3B:00.0"),
]
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}


def smi_rows(dbe: int = 0, lost: int | None = None) -> str:
    """What `nvidia-smi --query-gpu=... --format=csv,noheader` prints for the two GPUs."""
    out = []
    for index, uuid, bus in GPUS:
        if lost is not None and int(index) == lost:
            out.append(
                f"Unable to determine the device handle for GPU{index}: {bus[4:]}: "
                "GPU is lost. Reboot the system to recover this GPU"
            )
            continue
        errors = dbe if index == "0" else 0
        out.append(f"{index}, {uuid}, {bus}, {errors}, No, N/A, N/A")
    return "\n".join(out) + "\n"


def xid_line(xid_fixture: str, gpu: int, pid: int | None = None) -> str:
    """A fixture line with the fake machine's PCI address of `gpu` (and a pid, if asked)."""
    line = next(
        entry
        for entry in LINES
        if f"): {xid_fixture}," in entry or entry.endswith(f"): {xid_fixture}")
    )
    bus = GPUS[gpu][2]
    line = line.split("(PCI:", 1)[0] + f"(PCI:0000:{bus[9:11].lower()}:00)" + line.split(")", 1)[1]
    if pid is not None:
        line = line.replace("pid='<unknown>'", f"pid={pid}")
    return line


@dataclass
class Machine:
    """The watcher's world: its files, its process, the API server."""

    api: FakeKubeApiServer
    root: Path
    process: subprocess.Popen | None = None
    seq: int = 100

    def kernel(self, text: str) -> None:
        """Append one /dev/kmsg record (Documentation/ABI/testing/dev-kmsg)."""
        self.seq += 1
        with (self.root / "kmsg").open("a") as f:
            f.write(f"3,{self.seq},{self.seq * 1000},-;{text}\n")
            f.write(" SUBSYSTEM=pci\n")  # a continuation line, skipped

    def smi(self, text: str, code: int = 0) -> None:
        (self.root / "smi.out").write_text(text)
        (self.root / "smi.rc").write_text(str(code))

    def node(self, name: str = OWN) -> dict:
        node = self.api.get_object(f"/api/v1/nodes/{name}")
        assert node is not None
        return node

    def pods(self) -> set[str]:
        return {
            f"{node}/{name}"
            for node in (OWN, OTHER)
            for name in ("gpu0-job", "gpu1-job", "cpu-job", "other-job")
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


def until(check: Callable[[], object], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the watcher did not act in time"
        time.sleep(0.05)


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Machine]:
    """Two GPU nodes with three pods each (one per GPU, one without); the watcher on the first."""
    with FakeKubeApiServer(tls=True) as api:
        assert api.tls is not None
        api.put_object("/api/v1/namespaces/team-a", {"metadata": {"name": "team-a"}})
        entries = []
        for node in (OWN, OTHER):
            labels = {"kubernetes.io/hostname": node}
            api.put_object(
                f"/api/v1/nodes/{node}",
                {"metadata": {"labels": labels}, "status": {"conditions": [READY]}},
            )
            for name, gpu in (("gpu0-job", 0), ("gpu1-job", 1), ("cpu-job", None)):
                spec = {
                    "nodeName": node,
                    "containers": [{"name": "main", "image": "busybox:1.37"}],
                }
                pod = api.put_object(
                    f"/api/v1/namespaces/team-a/pods/{name}-{node}", {"spec": spec}
                )
                if gpu is not None and node == OWN:
                    ids = {"0": [GPUS[gpu][1]]}  # DeviceIDs per NUMA node
                    entries.append(
                        {
                            "PodUID": pod["metadata"]["uid"],
                            "ContainerName": "main",
                            "ResourceName": "nvidia.com/gpu",
                            "DeviceIDs": ids,
                            "AllocResp": "",
                        }
                    )
        checkpoint = {
            "Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}},
            "Checksum": 1,
        }
        (tmp_path / "checkpoint").write_text(json.dumps(checkpoint))
        (tmp_path / "kmsg").write_text("")
        (tmp_path / "boot_id").write_text("b0b0\n")
        (tmp_path / "proc").mkdir()
        client = tmp_path / "kubelet-client-current.pem"
        client.write_text(api.node_certificate(OWN))
        (tmp_path / "api.json").write_text(
            json.dumps({"server": api.url, "ca": api.tls.ca_pem, "client": str(client)})
        )
        smi = tmp_path / "nvidia-smi"
        smi.write_text(f'#!/bin/sh\ncat {tmp_path}/smi.out\nexit "$(cat {tmp_path}/smi.rc)"\n')
        smi.chmod(0o755)
        box = Machine(api, tmp_path)
        box.smi(smi_rows())
        yield box
        if box.process is not None:
            box.process.terminate()
            box.process.wait(timeout=10)


def start(box: Machine, escalation: str = "3/10m") -> None:
    r = box.root
    argv = [sys.executable, str(SRC / "gpu_watcher.py"), "--node", OWN]
    argv += ["--api", str(r / "api.json"), "--catalog", str(SRC / "xid_catalog.json")]
    argv += ["--kmsg", str(r / "kmsg"), "--nvidia-smi", str(r / "nvidia-smi")]
    argv += ["--checkpoint", str(r / "checkpoint"), "--proc", str(r / "proc")]
    argv += ["--boot-id", str(r / "boot_id"), "--state", str(r / "state.json")]
    argv += ["--interval", "0.2", "--tick", "0.05", "--escalation", escalation]
    with (r / "watcher.log").open("a") as log:  # the child keeps its own descriptor
        box.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    until(lambda: (r / "state.json").exists())  # first pass done: GPUs known


ALL = {f"{n}/{p}" for n in (OWN, OTHER) for p in ("gpu0-job", "gpu1-job", "cpu-job")}


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
    state = json.loads((machine.root / "state.json").read_text())
    assert state["quarantined"][GPUS[1][1]]["action"] == "reboot"


def test_application_xids_restart_the_job_and_escalate_on_the_third(machine):
    start(machine, escalation="3/10m")
    uid = machine.api.get_object(f"/api/v1/namespaces/team-a/pods/gpu0-job-{OWN}")
    assert uid is not None
    pid_dir = machine.root / "proc" / "4242"
    pid_dir.mkdir()
    pod_uid = uid["metadata"]["uid"].replace("-", "_")
    (pid_dir / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{pod_uid}.slice/"
        "cri-containerd-0123.scope\n"
    )
    machine.kernel(xid_line("13", gpu=0, pid=4242))
    until(lambda: f"{OWN}/gpu0-job" not in machine.pods())
    assert machine.pods() == ALL - {f"{OWN}/gpu0-job"}
    assert machine.condition() is None
    assert not machine.node().get("spec", {}).get("unschedulable")
    machine.kernel(xid_line("13", gpu=0))
    time.sleep(0.5)  # several passes of the loop: still no quarantine after two
    assert machine.condition() is None
    machine.kernel(xid_line("13", gpu=0))
    until(machine.quarantined)
    condition = machine.condition()
    assert condition is not None and condition["reason"] == "XidRepeated"
    assert "3 application XIDs within 3/10m" in condition["message"]
    assert machine.node()["spec"]["unschedulable"] is True
    assert machine.pods() == ALL - {f"{OWN}/gpu0-job"}  # GPU 1's job runs on


@pytest.mark.parametrize(
    ("smi", "code", "gpu", "reason"),
    [
        (smi_rows(dbe=2), 0, 0, "EccDoubleBit"),
        (smi_rows(lost=1), 15, 1, "GpuLost"),
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


def test_a_restarted_watcher_does_not_act_twice_on_old_records(machine):
    path = f"/api/v1/namespaces/team-a/pods/gpu1-job-{OWN}"
    pod = machine.api.get_object(path)
    assert pod is not None
    start(machine)
    machine.kernel(xid_line("13", gpu=1))
    until(lambda: f"{OWN}/gpu1-job" not in machine.pods())
    assert machine.process is not None
    machine.process.terminate()
    machine.process.wait(timeout=10)
    machine.api.put_object(
        path, {"metadata": {"uid": pod["metadata"]["uid"]}, "spec": pod["spec"]}
    )
    start(machine)
    time.sleep(0.5)
    assert machine.pods() == ALL  # the XID 13 before the restart is not handled again
