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
  (kept in the state file with the boot id). The NVIDIA driver's XID line
  `NVRM: Xid (PCI:<domain>:<bus>:<device>): <xid>, pid=<pid>, name=<comm>, <text>` (pid
  `'<unknown>'` when no process is involved; some lines carry only the XID): examples in
  NVIDIA/NVSentinel health-monitors/syslog-health-monitor/pkg/xid/parser/csv_test.go and
  NVIDIA's catalog page, recorded in tests/fixtures/gpu/xid/kmsg.txt;
- `nvidia-smi --query-gpu=index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total,
  remapped_rows.failure,fabric.state,fabric.status --format=csv,noheader` every
  `--interval` seconds (field names: `nvidia-smi --help-query-gpu`; fabric as nvidia.py
  reads it). A GPU it cannot reach (`... GPU is lost ...`, or a GPU seen before that is
  missing) is lost;
- the classification, xid_catalog.json (NVIDIA's XID catalog, its source and date inside).

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
   ResourceName and DeviceIDs per NUMA node) maps each `nvidia.com/gpu` device to the pod
   it was allocated to; the NVIDIA device plugin's device IDs are GPU UUIDs by default
   (k8s-device-plugin `--device-id-strategy`, default `uuid`).

The NoExecute taint is the control plane's to set (a node may not change its taints):
the pods that matter are already gone by then.

An application-class XID (the catalog's RESTART_APP, and 43/45) never quarantines: the
pod of the process named by `pid=` (its cgroup names the pod's UID, /proc/<pid>/cgroup)
is evicted, or, without a pid, the pods holding that GPU. `--escalation N/<window>` such
XIDs on one GPU within the window quarantine it (reason `XidRepeated`).

It writes what it found to `--state` (JSON, read by the charm for the unit's status) and
serves its gauges on 127.0.0.1:`--metrics-port` for the unit's COS agent.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import http.client
import http.server
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

# the driver's line; the PCI part is domain:bus:device (NVSentinel csv_test.go, the catalog)
XID_LINE = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F]+)(?:\.\d)?\): "
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
)
# nvidia-smi on a GPU it cannot reach, as users quote it: "Unable to determine the device
# handle for GPU0: 0000:01:00.0: GPU is lost. Reboot the system to recover this GPU" (also
# "for gpu 0000:01:00.0:" and "for GPU:0000:01:00.0:"): the PCI address is the one to find
LOST = re.compile(r"(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d)\b.*GPU is lost")
POD_CGROUP = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
QUARANTINE = ("reset-gpu", "reboot", "support")
CONDITION = "GpuHealthy"
CORDONED = "gpu-k8s/cordoned"  # lib drain.py CORDON_ANNOTATION: a cordon the charm lifts
GPU_RESOURCE = "nvidia.com/gpu"
WINDOW_UNITS = {"s": 1, "m": 60, "h": 3600}


class Gauge(tuple):
    """One sample: (name, help, value, labels)."""

    def __new__(cls, name: str, help: str, value: float, labels: dict | None = None):  # noqa: D102
        return super().__new__(cls, (name, help, value, labels or {}))


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
    return {
        "pci": pci_key(match["pci"]),
        "xid": match["xid"],
        "pid": int(pid) if pid.isdigit() else None,
        "text": (match["text"] or "").strip(),
    }


def parse_smi(out: str) -> tuple[dict[str, dict], set[str]]:
    """(GPUs by PCI key, PCI keys nvidia-smi reported lost) from the query's output."""
    gpus, lost = {}, set()
    for line in out.splitlines():
        found = LOST.search(line)
        if found:
            lost.add(pci_key(found["pci"]))
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        cells += ["N/A"] * (len(SMI_FIELDS) - len(cells))
        row = dict(zip(SMI_FIELDS, cells))
        gpus[pci_key(row["pci.bus_id"])] = row
    return gpus, lost


def smi_findings(row: dict) -> list[str]:
    """Health findings of one GPU row: ecc-dbe, row-remap-failure, fabric."""
    found = []
    dbe = row["ecc.errors.uncorrected.volatile.total"]
    if dbe.isdigit() and int(dbe) > 0:
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


class Watcher:
    """The loop's state and its actions; `step()` is one pass."""

    def __init__(self, args: argparse.Namespace, api: Api, catalog: dict):
        self.args, self.api, self.catalog = args, api, catalog
        self.node = args.node
        self.count, self.window = parse_escalation(args.escalation)
        self.gpus: dict[str, dict] = {}  # by PCI key, from the last good poll
        self.state = self._load_state()
        self.app_xids: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self.kmsg = os.open(args.kmsg, os.O_RDONLY | os.O_NONBLOCK)
        self.partial = b""
        self.last_poll = 0.0
        self.lock = threading.Lock()

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
        state.setdefault("quarantined", {})
        state.setdefault("events", [])
        state.setdefault("counts", {})
        return state

    def _boot_id(self) -> str:
        try:
            with open(self.args.boot_id) as f:
                return f.read().strip()
        except OSError:
            return ""

    def _save(self) -> None:
        tmp = f"{self.args.state}.tmp"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "w") as f:
            json.dump(self.state, f, indent=1, sort_keys=True)
        os.replace(tmp, self.args.state)

    # -- inputs

    def read_kernel(self) -> list[str]:
        """New kernel log texts (one read per /dev/kmsg record, lines for a file)."""
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

    def _record(self, line: str) -> str | None:
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
        return text

    def poll_smi(self) -> list[tuple[str, str]]:
        """(PCI key, finding) for each unhealthy GPU nvidia-smi shows."""
        argv = [
            self.args.nvidia_smi,
            f"--query-gpu={','.join(SMI_FIELDS)}",
            "--format=csv,noheader",
        ]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
            out = done.stdout + done.stderr
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"nvidia-smi failed: {e}", file=sys.stderr)
            return []
        gpus, lost = parse_smi(out)
        findings = [(pci, "lost") for pci in lost]
        for pci, known in self.gpus.items():
            if pci not in gpus and pci not in lost and done.returncode != 0:
                findings.append((pci, "lost"))
                gpus[pci] = known
        for pci, row in gpus.items():
            findings += [(pci, f) for f in smi_findings(row)]
        self.gpus.update(gpus)
        return findings

    # -- decisions

    def handle_xid(self, record: dict, at: float) -> None:
        """Classify one XID; quarantine, or restart the job (escalating on repeats)."""
        xid = record["xid"]
        entry = self.catalog["xids"].get(xid) or {
            "mnemonic": f"XID {xid}",
            "description": "not in NVIDIA's catalog as recorded",
            "bucket": "",
            "action": "application",
        }
        gpu = self.gpus.get(record["pci"], {"index": "?", "uuid": f"PCI:{record['pci']}"})
        key = (gpu["uuid"], xid)
        self.state["counts"][f"{key[0]}|{xid}"] = (
            self.state["counts"].get(f"{key[0]}|{xid}", 0) + 1
        )
        meaning = f"XID {xid} {entry['mnemonic']}: {entry['description']}"
        self._event(at, gpu, f"Xid{xid}", meaning, entry["action"])
        if entry["action"] in QUARANTINE:
            self.quarantine(gpu, f"Xid{xid}", meaning, entry["action"], at)
        elif entry["action"] == "application":
            seen = self.app_xids[gpu["uuid"]]
            seen.append(at)
            while seen and at - seen[0] > self.window:
                seen.popleft()
            if len(seen) >= self.count:
                repeated = (
                    f"{len(seen)} application XIDs within {self.args.escalation} ({meaning})"
                )
                self.quarantine(gpu, "XidRepeated", repeated, "reset-gpu", at)
            else:
                self.restart_job(gpu, record.get("pid"))

    def handle_finding(self, pci: str, finding: str, at: float) -> None:
        """A health finding from nvidia-smi: quarantine (once per GPU)."""
        entry = self.catalog["health"][finding]
        gpu = self.gpus.get(pci, {"index": "?", "uuid": f"PCI:{pci}"})
        if gpu["uuid"] in self.state["quarantined"]:
            return
        meaning = entry["description"]
        if entry["as_xid"]:
            meaning += f" (as XID {entry['as_xid']})"
        self._event(at, gpu, entry["reason"], meaning, entry["action"])
        self.quarantine(gpu, entry["reason"], meaning, entry["action"], at)

    def _event(self, at: float, gpu: dict, reason: str, meaning: str, action: str) -> None:
        event = {"at": now_iso(at), "gpu": gpu["index"], "uuid": gpu["uuid"], "reason": reason}
        event |= {"meaning": meaning, "action": action}
        print(json.dumps(event), flush=True)
        self.state["events"] = (self.state["events"] + [event])[-50:]

    # -- actions, as the node

    def quarantine(self, gpu: dict, reason: str, meaning: str, action: str, at: float) -> None:
        """Condition, cordon, evict; recorded at once, the API steps retried each pass."""
        if gpu["uuid"] not in self.state["quarantined"]:
            message = f"GPU {gpu['index']} ({gpu['uuid']}): {meaning}; repair: {action}"
            self.state["quarantined"][gpu["uuid"]] = {
                "index": gpu["index"],
                "uuid": gpu["uuid"],
                "reason": reason,
                "message": message,
                "action": action,
                "at": now_iso(at),
                "since": at,
                "applied": False,
            }
        self._save()
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
                self._evict(self._pods_on_gpu(q["uuid"]))
                q["applied"] = True
                q["applied_at"] = now_iso(time.time())
        except (ApiError, OSError) as e:
            print(f"quarantine not applied yet (retried): {e}", file=sys.stderr, flush=True)
        self._save()

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

    def _pods_on_gpu(self, uuid: str) -> list[dict]:
        """Pods the kubelet allocated this GPU to (its device-manager checkpoint)."""
        try:
            with open(self.args.checkpoint) as f:
                entries = json.load(f)["Data"]["PodDeviceEntries"] or []
        except (OSError, ValueError, KeyError, TypeError):
            entries = []
        uids = {
            e["PodUID"]
            for e in entries
            if e.get("ResourceName") == GPU_RESOURCE
            and any(uuid in ids for ids in (e.get("DeviceIDs") or {}).values())
        }
        return [p for p in self._pods() if p["metadata"].get("uid") in uids]

    def _pod_of_pid(self, pid: int) -> list[dict]:
        """The pod whose container runs `pid` (its cgroup path names the pod's UID)."""
        try:
            with open(os.path.join(self.args.proc, str(pid), "cgroup")) as f:
                found = POD_CGROUP.search(f.read())
        except OSError:
            return []
        if not found:
            return []
        uid = found[1].replace("_", "-")
        return [p for p in self._pods() if p["metadata"].get("uid") == uid]

    def _evict(self, pods: list[dict]) -> None:
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
                if e.status != 404:  # gone already
                    raise

    def restart_job(self, gpu: dict, pid: int | None) -> None:
        """An application XID: the pod of that process (or that GPU) restarts."""
        try:
            pods = self._pod_of_pid(pid) if pid else []
            self._evict(pods or self._pods_on_gpu(gpu["uuid"]))
        except (ApiError, OSError) as e:
            print(f"could not restart the job on GPU {gpu['index']}: {e}", file=sys.stderr)
        self._save()

    # -- the loop

    def step(self, at: float) -> None:
        """Read the kernel log; poll nvidia-smi when due; retry what is not applied yet."""
        with self.lock:
            if at - self.last_poll >= self.args.interval or not self.gpus:
                self.last_poll = at
                for pci, finding in self.poll_smi():
                    self.handle_finding(pci, finding, at)
            for text in self.read_kernel():
                record = parse_xid(text)
                if record is not None:
                    self.handle_xid(record, at)
            self.apply()
            self._save()

    def gauges(self) -> list[Gauge]:
        """What COS scrapes from this node."""
        with self.lock:
            quarantined = self.state["quarantined"]
            samples = [
                Gauge(
                    "gpu_k8s_gpu_quarantined",
                    "1 while the GPU is quarantined by the GPU health watcher.",
                    int(row["uuid"] in quarantined),
                    {"gpu": row["index"], "uuid": row["uuid"], "node": self.node},
                )
                for row in self.gpus.values()
            ]
            for key, count in sorted(self.state["counts"].items()):
                uuid, xid = key.split("|")
                samples.append(
                    Gauge(
                        "gpu_k8s_gpu_xid_events",
                        "XIDs the driver reported for the GPU since this boot.",
                        count,
                        {"uuid": uuid, "xid": xid, "node": self.node},
                    )
                )
        return samples


def render(samples: list[Gauge]) -> str:
    """Prometheus text format 0.0.4."""
    lines, seen = [], set()
    for name, help_text, value, labels in samples:
        if name not in seen:
            seen.add(name)
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{text}}} {value}")
    return "\n".join(lines) + "\n"


def serve(watcher: Watcher, port: int) -> http.server.HTTPServer:
    """The gauges on 127.0.0.1:<port>/metrics, in a daemon thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = render(watcher.gauges()).encode()
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
    p.add_argument("--tick", type=float, default=0.5)
    p.add_argument("--escalation", default="3/10m")
    p.add_argument("--metrics-port", type=int, default=0)
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
    if args.metrics_port:
        serve(watcher, args.metrics_port)
    print(f"watching node {args.node}: {args.kmsg}, nvidia-smi every {args.interval}s", flush=True)
    while True:
        watcher.step(time.time())
        time.sleep(args.tick)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
