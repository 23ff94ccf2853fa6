# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The GPU health watcher on this machine: installed, kept running, and what it found.

The watcher (gpu_watcher.py, run by the machine's python3 with the standard library only)
follows the kernel log and nvidia-smi and quarantines a failing GPU as this node within
seconds: it cannot wait for a hook (update-status runs every 5 minutes). This module,
called from each hook on a joined GPU node, installs its program and the XID catalog
under /usr/local/lib/gpu-k8s (0644, as the unit-state server's), writes the API access it
uses (the API server, the cluster CA and the path of the kubelet's rotating client
certificate: never the key itself), a systemd unit (0644), restarts it when any of them
changed and starts it again when `systemctl is-active` says it is not running. It reads
the watcher's state file for the unit's status.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import mig
import yaml

from charms.gpu_k8s.v0 import drain
from charms.gpu_k8s.v0.kube_objects import GPU_HEALTHY
from charms.gpu_k8s.v0.kubeadm import KUBELET_CONF
from charms.gpu_k8s.v0.kubeclient import KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import quarantine_taint_patch
from charms.gpu_k8s.v0.system import SYSTEMCTL, CommandError, Host

if TYPE_CHECKING:  # pragma: no cover
    from charms.gpu_k8s.v0.kubeclient import Kube


SERVICE = "gpu-k8s-gpu-watcher"
SERVICE_FILE = f"/etc/systemd/system/{SERVICE}.service"
PROGRAM = "/usr/local/lib/gpu-k8s/gpu_watcher.py"
CATALOG = "/usr/local/lib/gpu-k8s/xid_catalog.json"
API_CONFIG = "/etc/gpu-k8s/gpu-watcher-api.json"
STATE = "/var/lib/gpu-k8s/gpu-health.json"
PYTHON = "/usr/bin/python3"
METRICS_PORT = 6448  # next to the unit-state server's 6447
# The watcher's scrape job names no interval: the COS agent, Canonical's
# opentelemetry-collector, runs each cos_agent job as a scrape_config of its prometheus
# receiver and overwrites every job's scrape_interval and scrape_timeout with its own
# global_scrape_interval and global_scrape_timeout options, 1m and 10s by default
# (canonical/opentelemetry-collector-operator 9f17dec on track/2, which 2/stable is
# released from: src/config_builder.py _set_prometheus_receiver_global_timeout_and_interval,
# since 3ef5788 "Global scrape configs"; charmcraft.yaml declares both options). So how
# soon GpuQuarantined can fire is the collector's option, set in bundles/overlays/cos.yaml
# (tests/unit/kubernetes_worker/test_alert_rules.py computes the worst case from it).
KUBELET_CLIENT = "/var/lib/kubelet/pki/kubelet-client-current.pem"  # node_identity.py
_SRC = Path(__file__).parent

logger = logging.getLogger(__name__)


class GpuHealthError(Exception):
    """The watcher cannot be set up (no kubelet identity yet)."""


def unit_text(node: str, escalation: str, unit: str) -> str:
    """The systemd unit: runs as root (it reads /dev/kmsg and the kubelet's key).

    `unit`: the Juju unit the watcher wakes with `juju-exec` after a quarantine (its
    `gpu-quarantined` hook asks the control plane for the NoExecute taint): the watcher
    runs as root, as juju-exec must, and finds it on the PATH systemd gives a service
    (systemd.exec(5) "$PATH": /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin), in
    /usr/bin on Juju 3 machines (canonical/jhack, `/usr/bin/juju-exec` from Juju 3.0).
    """
    argv = [PYTHON, PROGRAM, "--node", node, "--api", API_CONFIG, "--catalog", CATALOG]
    argv += ["--state", STATE, "--escalation", escalation, "--metrics-port", str(METRICS_PORT)]
    argv += ["--unit", unit]
    return (
        "# Written by the kubernetes-worker charm (gpu_health.py).\n"
        "[Unit]\n"
        "Description=gpu-k8s GPU health watcher (quarantines a failing GPU)\n"
        "After=network.target kubelet.service\n\n"
        "[Service]\n"
        f"ExecStart={shlex.join(argv)}\n"
        "Restart=always\n"
        "RestartSec=2\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def api_config(host: Host) -> str:
    """The API server, its CA and the kubelet's certificate path, from kubelet.conf."""
    text = host.read(KUBELET_CONF)
    if not text:
        raise GpuHealthError(f"no {KUBELET_CONF}: this machine has not joined")
    config = yaml.safe_load(text)
    cluster = config["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data")
    ca_pem = base64.b64decode(ca).decode() if ca else host.read(cluster["certificate-authority"])
    if not ca_pem:
        raise GpuHealthError(f"{KUBELET_CONF} names no cluster CA")
    return json.dumps({"server": cluster["server"], "ca": ca_pem, "client": KUBELET_CLIENT})


def ensure(host: Host, node: str, escalation: str, unit: str) -> bool:
    """Install or update the watcher and keep it running; True when it was (re)started."""
    changed = host.write(API_CONFIG, api_config(host), mode=0o600)
    changed = host.write(CATALOG, (_SRC / "xid_catalog.json").read_text()) or changed
    changed = host.write(PROGRAM, (_SRC / "gpu_watcher.py").read_text()) or changed
    changed = host.write(SERVICE_FILE, unit_text(node, escalation, unit)) or changed
    if not changed and active(host):
        return False
    host.run(SYSTEMCTL, "daemon-reload")
    host.run(SYSTEMCTL, "enable", f"{SERVICE}.service")
    host.run(SYSTEMCTL, "restart", f"{SERVICE}.service")
    return True


def active(host: Host) -> bool:
    """`systemctl is-active` (exit 3: inactive; 4: no such unit)."""
    try:
        host.run(SYSTEMCTL, "is-active", "--quiet", f"{SERVICE}.service")
    except CommandError:
        return False
    return True


def quarantined(host: Host) -> list[dict]:
    """The GPUs the watcher quarantined (its state file), oldest first."""
    text = host.read(STATE)
    if not text:
        return []
    try:
        found = json.loads(text).get("quarantined") or {}
    except ValueError:
        return []
    return sorted(found.values(), key=lambda q: q.get("since", 0))


def memory_faulted(host: Host) -> frozenset[int]:
    """The indexes of the GPUs quarantined for a memory fault (the watcher's `memory`).

    Their gate must pass DCGM's memory test (gpu_gate.parse_dcgm).
    """
    held = (str(q.get("index")) for q in quarantined(host) if q.get("memory"))
    return frozenset(int(i) for i in held if i.isdigit())  # nvidia-smi's index, DCGM's id


def uncordon(host: Host, kube: Kube, node: str) -> bool:
    """End a turn's cordon (`drain.uncordon`) unless a GPU of this machine is quarantined.

    Every path that brings the node back after a turn (reboot, Kubernetes upgrade,
    containerd/runc update, MIG change) goes through here: a GPU the watcher quarantined
    while the node was drained (or before) keeps it cordoned until it is readmitted
    (`readmit`). False when the node stays cordoned.
    """
    held = quarantined(host)
    if held:
        logger.info(
            "node %s stays cordoned: GPU %s (%s) is quarantined (%s)",
            node,
            held[0].get("index"),
            held[0].get("uuid"),
            held[0].get("reason"),
        )
        return False
    return drain.uncordon(kube, node)


def quarantine_request(host: Host, node_obj: dict | None) -> list[str] | None:
    """What to publish as `gpu-quarantine` (lib kubernetes_cluster.py).

    The quarantined GPUs' UUIDs (the leader taints the Node NoExecute); [] when none is
    but the Node still carries that taint (the leader lifts it); None when in line. A
    node may not change its own taints (NodeRestriction), so it asks.
    """
    uuids = [q["uuid"] for q in quarantined(host) if q.get("uuid")]
    if uuids:
        return uuids
    if node_obj is not None and quarantine_taint_patch(node_obj, False) is not None:
        return []
    return None


NEXT = {
    "reset-gpu": "a GPU reset",
    "reboot": "a reboot of the machine",
    "support": "NVIDIA support (no automatic repair is known)",
}


def status_message(node: str, unit: str, entries: list[dict]) -> str | None:
    """The unit's Blocked message while a GPU is quarantined (None: none is)."""
    if not entries:
        return None
    first = entries[0]
    others = f" (+{len(entries) - 1} more GPUs)" if len(entries) > 1 else ""
    need = NEXT.get(first.get("action", ""), "a repair")
    return (
        f"GPU {first['index']} ({first['uuid']}) quarantined at {first['at']}: "
        f"{first['reason']}{others}; node {node} cordoned with condition {GPU_HEALTHY}=False "
        f"and its pods evicted; NVIDIA's catalog asks for {need}; it stays out of service "
        f"until repaired and readmitted (readmit-gpu on {unit}: docs/how-to/gpu-day-2.md)"
    )


def repair_pending_message(node: str, entries: list[dict], method: str) -> str:
    """The unit's Waiting message between a quarantine and its automatic repair."""
    first = entries[0]
    others = f" (+{len(entries) - 1} more GPUs)" if len(entries) > 1 else ""
    return (
        f"GPU {first['index']} ({first['uuid']}) quarantined at {first['at']}: "
        f"{first['reason']}{others}; node {node} cordoned with condition {GPU_HEALTHY}=False "
        f"and its pods evicted; NoExecute taint asked of the control plane; "
        f"gpu-auto-repair: a {method} in this unit's turn from its next update-status"
    )


def history(host: Host) -> dict[str, str]:
    """The `gpu-health` action's results: the quarantine, events, repairs and gates.

    The watcher keeps its last 50 events (time, GPU, reason, meaning, the action the
    catalog asks for) and the readmissions the charm recorded, in its state file; the
    charm keeps the last 50 repairs there, and older failed ones of the last day (time,
    GPU, method, result, the gate's checks).
    """
    held = quarantined(host)
    try:
        events = json.loads(host.read(STATE) or "{}").get("events") or []
    except ValueError:
        events = []
    lines = [
        f"{q['at']} GPU {q['index']} ({q['uuid']}): {q['reason']}; repair: "
        f"{NEXT.get(q.get('action', ''), 'a repair')}"
        for q in held
    ]
    shown = [
        f"{e.get('at')} GPU {e.get('gpu')} ({e.get('uuid')}) {e.get('reason')}: "
        f"{e.get('meaning')} -> {e.get('action')}"
        for e in events
    ]
    done = [
        f"{r.get('time')} GPU {r.get('gpu')} ({r.get('gpu_uuid')}) {r.get('method')}: "
        f"{r.get('result')} ({r.get('detail')})"
        for r in repairs(host)
    ]
    gates = [
        f"{r.get('time')} GPU {r.get('gpu')}: "
        + "; ".join(f"{k} {v}" for k, v in sorted((r.get("gate") or {}).items()) if k != "passed")
        for r in repairs(host)
        if r.get("gate")
    ]
    return {
        "state": "quarantined" if held else "healthy",
        "quarantined": "\n".join(lines) or "none",
        "events": "\n".join(shown) or "none",
        "repairs": "\n".join(done) or "none",
        "gates": "\n".join(gates) or "none",
        "watcher": "running" if active(host) else "not running",
    }


# The repair history the charm keeps in the watcher's state file (issue 32 items 3-6),
# next to the watcher's own keys, which the watcher keeps as it finds them:
#   "repairs": the last 50 repair attempts, and older failed ones of the last 24 hours
#     (FAILED_KEPT_S: escalation reads them; refusals must not push them out), oldest
#     first, one record per GPU:
#     {"time": ISO 8601 UTC, "gpu": index, "gpu_uuid": UUID, "method": "reset"|"reboot",
#      "result": "ok"|"failed"|"refused" (a reset nvidia-smi refused: something held the GPU)
#      |"unproven" (the gate had no MIG device to run on: `all-enabled`, gpu_gate),
#      "detail": one line, "quarantined_at": ISO 8601 UTC (the
#      quarantine's `at`), "gate": {"passed": bool, "cuda"|"dcgm"|"nccl": "passed: ...",
#      "failed: ..." or "skipped: ..." (NCCL under MIG, gpu_gate)} ({} when the repair
#      failed before the gate)}
#   "repair_counts": {"<gpu uuid>|<gpu index>|<method>|<result>": attempts}, every
#     attempt since the state file was created (never truncated: a counter for COS)
#   "readmitted_at": ISO 8601 UTC of the last readmission (absent before the first).
REPAIRS_KEPT = 50
FAILED_KEPT_S = 24 * 3600  # gpu_repair.ESCALATE_WINDOW_S: two failures this close escalate


def epoch(stamp: object) -> float | None:
    """The epoch of an ISO 8601 UTC stamp as the watcher writes them, None for anything else."""
    if not isinstance(stamp, str):
        return None
    try:
        when = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return when.replace(tzinfo=datetime.timezone.utc).timestamp()


def _stamp(record: dict) -> float | None:
    return epoch(record.get("time"))


def _append_repairs(state: dict, records: list[dict]) -> None:
    every = [r for r in list(state.get("repairs") or []) + records if isinstance(r, dict)]
    newest = max((t for t in map(_stamp, every) if t is not None), default=0.0)
    older = [
        r
        for r in every[:-REPAIRS_KEPT]
        if r.get("result") == "failed" and newest - (_stamp(r) or 0.0) < FAILED_KEPT_S
    ]
    state["repairs"] = older + every[-REPAIRS_KEPT:]
    counts = dict(state.get("repair_counts") or {})
    for r in records:
        key = f"{r['gpu_uuid']}|{r['gpu']}|{r['method']}|{r['result']}"
        counts[key] = counts.get(key, 0) + 1
    state["repair_counts"] = counts


def _load(host: Host) -> dict:
    try:
        found = json.loads(host.read(STATE) or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _mark_healthy(kube: Kube, node: str, message: str, now: str) -> dict:
    """Condition GpuHealthy=True on the Node (a 409 read again); its labels (none if gone)."""
    labels: dict = {}
    for attempt in range(5):
        current = kube.get("v1", "Node", node)
        if current is None:
            break
        labels = current["metadata"].get("labels") or {}
        patch = {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "status": {"conditions": _conditions_with_healthy(current, message, now)},
        }
        try:
            kube.patch("v1", "Node", node, patch, subresource="status")
            break
        except KubeError as e:
            if e.status != 409 or attempt == 4:  # the kubelet wrote in between: again
                raise
    return labels


def _since(q: dict) -> float:
    """When the watcher recorded a quarantine (Unix time; 0 if unreadable)."""
    try:
        return float(q.get("since", 0))
    except (TypeError, ValueError):
        return 0.0


def _raised(q: dict) -> float:
    """When the watcher last raised a quarantine: recorded, or a stronger fault (`raised_at`).

    A gate proves only what was raised before it started.
    """
    try:
        return max(_since(q), float(q.get("raised_at", 0)))
    except (TypeError, ValueError):
        return _since(q)


def _edit(host: Host, change: Callable[[dict], None]) -> dict:
    """Change the state file with the watcher stopped, then start it again.

    The watcher writes its in-memory state each pass: a change made while it runs would
    be lost. So: stop, then read (the watcher's last write is in the file once `systemctl
    stop` returns: systemd waits for the process to exit), change, write, start. Read
    before the stop, a fault the watcher recorded in between would be overwritten. It
    reads the file again when it starts (its kernel log position kept).
    """
    host.run(SYSTEMCTL, "stop", f"{SERVICE}.service")
    try:
        state = _load(host)
        change(state)
        host.write(STATE, json.dumps(state, indent=1, sort_keys=True))
    finally:
        host.run(SYSTEMCTL, "start", f"{SERVICE}.service")
    return state


def repairs(host: Host) -> list[dict]:
    """The repair attempts recorded, oldest first."""
    found = _load(host).get("repairs") or []
    return [r for r in found if isinstance(r, dict)]


def repair_records(
    entries: list[dict], *, now: str, method: str, result: str, detail: str, gate: dict
) -> list[dict]:
    """One repair record per quarantined GPU (the format above)."""
    return [
        {
            "time": now,
            "gpu": q.get("index"),
            "gpu_uuid": q.get("uuid"),
            "method": method,
            "result": result,
            "detail": detail,
            "quarantined_at": q.get("at"),
            "gate": gate,
        }
        for q in entries
    ]


def record_repairs(host: Host, records: list[dict]) -> None:
    """Append failed (or any) repair records; the quarantine stays as it is."""
    _edit(host, lambda state: _append_repairs(state, records))


def repair_note(host: Host, now: float) -> str:
    """The Ready status's note for a repair readmitted within the last 24 hours."""
    state = _load(host)
    last = (state.get("repairs") or [None])[-1]
    if not isinstance(last, dict) or last.get("result") != "ok":
        return ""
    if last.get("time") != state.get("readmitted_at"):
        return ""
    when = epoch(last.get("time"))
    if when is None or now - when >= 24 * 3600:
        return ""
    return (
        f"; GPU {last.get('gpu')} repaired by {last.get('method')} at {last['time']} (gate passed)"
    )


def _conditions_with_healthy(node_obj: dict, message: str, stamp: str) -> list[dict]:
    conditions = [
        c
        for c in (node_obj.get("status") or {}).get("conditions") or []
        if c.get("type") != GPU_HEALTHY
    ]
    conditions.append(
        {
            "type": GPU_HEALTHY,
            "status": "True",
            "reason": "Readmitted",
            "message": message,
            "lastTransitionTime": stamp,
            "lastHeartbeatTime": stamp,
        }
    )
    return conditions


def readmit(
    host: Host,
    kube: Kube,
    node: str,
    *,
    now: str,
    proof: str,
    action: str = "readmit-gpu",
    records: list[dict] | None = None,
    mig_change: bool = False,
    gate_started: float | None = None,
) -> tuple[list[dict], str | None]:
    """Clear the quarantine after a passed gate; (the GPUs cleared, why it stays cordoned).

    Only what the gate proved is cleared: the GPUs quarantined before it started
    (`gate_started`, Unix time; None: every one). A fault the watcher recorded during or
    after the gate (an XID on another GPU during the NCCL run, or a stronger one on a GPU
    held before it: `raised_at`) stays quarantined, its
    record marked unapplied so that the restarted watcher writes its condition and cordon
    again; the node then stays cordoned and the reason is returned. Its kernel record is
    handled already: cleared here, it would never be seen again.

    The watcher holds its state in memory and writes it each pass, so it is stopped while
    the state file changes, and started again after: with its kernel log position kept
    (nothing old is handled twice) and a fresh health poll (a GPU still failing is
    quarantined again at once). Then, as the node: condition GpuHealthy=True (nodes/status,
    the whole conditions list with the resourceVersion, as the watcher writes it; a 409 is
    read again), and the cordon lifted (`drain.uncordon`: the watcher's and the turns' mark,
    never an operator's cordon), except while this unit's MIG change (`mig_change`: it
    cordoned the node for one) is still in flight: mig-manager, stopped mid-apply by a
    repair, applies the layout again when it starts again, and the MIG step uncordons when
    the GPUs show it (mig.py, mig_layout.py); the reason is returned then (None: uncordoned).
    The NoExecute taint is the control plane's to lift: the charm asks for it over the
    relation (`quarantine_request`).

    Raises:
        KubeError: the API refused (the watcher is running again by then; the quarantine is
            cleared on the machine, and the action says what is left).
    """
    cleared: list[dict] = []
    kept: list[dict] = []

    def change(state: dict) -> None:  # read with the watcher stopped (`_edit`)
        for q in sorted((state.get("quarantined") or {}).values(), key=_since):
            proved = gate_started is None or _raised(q) < gate_started
            (cleared if proved else kept).append(q)
        state["quarantined"] = {q["uuid"]: q | {"applied": False} for q in kept}
        events = list(state.get("events") or [])
        for q in cleared:
            events.append(
                {
                    "at": now,
                    "gpu": q.get("index"),
                    "uuid": q.get("uuid"),
                    "reason": "Readmitted",
                    "meaning": proof,
                    "action": action,
                }
            )
        state["events"] = events[-50:]
        if records:
            _append_repairs(state, records)
        state["readmitted_at"] = now

    _edit(host, change)
    if kept:  # the watcher, started again, holds the node for them
        held = "; ".join(
            f"GPU {q.get('index')} ({q.get('uuid')}) quarantined at {q.get('at')} "
            f"({q.get('reason')}), after the gate started"
            for q in kept
        )
        logger.info("node %s: %s stays quarantined", node, held)
        return cleared, f"{held}: not proven by this gate, it stays quarantined"
    labels = _mark_healthy(kube, node, f"readmitted at {now}: {proof}", now)
    layout = mig.in_flight_layout(labels) if mig_change else None
    if layout is not None:
        held = f"MIG layout {layout} is not applied yet ({mig.waiting_message(layout, labels)})"
        logger.info("node %s readmitted, stays cordoned: %s", node, held)
        return cleared, held
    drain.uncordon(kube, node)
    return cleared, None
