#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Record what the GPU health watcher and the repair read on a real GPU machine, as fixtures.

    python3 tools/capture_gpu_health.py OUT_DIR [--inject-kmsg]

Runs the worker charm's own code (charms/kubernetes-worker/src/gpu_watcher.py: standard
library only) against this machine's nvidia-smi and /dev/kmsg and writes, into OUT_DIR:

- `help-query-gpu.txt`, `help-query-compute-apps.txt`: every field this driver's
  nvidia-smi accepts (`nvidia-smi --help-query-gpu`), so the tests can check each field
  the charms query against a real driver's list;
- `watcher-smi.csv` (+ `.rc`): the watcher's health query exactly as `Watcher._query_smi`
  runs it, and `watcher.json`: the fields it kept, what `poll_smi` found, `nvidia-smi -L`'s
  MIG map, and the /dev/kmsg records it read (count, the NVIDIA driver's lines);
- `compute-apps.csv`: gpu_repair's `--query-compute-apps` while a CUDA process of this
  script's own (PyTorch, where installed) holds the first GPU, and the pid it should show;
- with `--inject-kmsg`: one XID line written to /dev/kmsg (as root; it goes into the
  kernel log with the user facility) and what the watcher's reader and parser make of it,
  with the lag between the record's stamp and `time.monotonic()` (gpu_watcher.calibrate
  learns this lag the same way, at start and hourly).

Nothing here changes the GPUs (no reset, no MIG or clock change). Each step that fails
records its error and the script goes on.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "charms/kubernetes-worker/src"))

# the worker's module, from the checkout (standard library only, as the watcher runs)
gpu_watcher = importlib.import_module("gpu_watcher")

SMI = "nvidia-smi"
COMPUTE_APPS = ("--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader")  # gpu_repair's
HOLDER = (
    "import sys, time, torch\n"
    "x = torch.ones(1024, device='cuda')\n"
    "torch.cuda.synchronize()\n"
    "print('holding', flush=True)\n"
    "time.sleep(float(sys.argv[1]))\n"
)


def run(out: Path, name: str, *argv: str) -> str:
    """Run argv; its stdout+stderr to OUT/name and the exit status to OUT/name.rc."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        text, rc = done.stdout + done.stderr, done.returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        text, rc = f"{type(e).__name__}: {e}\n", 127
    (out / name).write_text(text)
    (out / f"{name}.rc").write_text(f"{rc}\n")
    return text


def watcher(out: Path, inject: bool) -> dict:
    """The watcher's own reads: the health query, nvidia-smi -L, /dev/kmsg."""
    state = tempfile.mkdtemp()
    args = gpu_watcher.arguments(
        ["--node", "capture", "--state", f"{state}/state.json", "--nvidia-smi", SMI]
    )
    catalog = json.loads((HERE / "charms/kubernetes-worker/src/xid_catalog.json").read_text())
    w = gpu_watcher.Watcher(args, None, catalog)  # type: ignore[arg-type]  (no API: reads only)
    report: dict = {}
    done = w._query_smi()
    if done is not None:
        (out / "watcher-smi.csv").write_text(done.stdout + done.stderr)
        (out / "watcher-smi.csv.rc").write_text(f"{done.returncode}\n")
    report["fields_kept"] = list(w.smi_fields)
    report["findings"] = w.poll_smi(done)
    report["gpus"] = w.gpus
    w.read_mig_devices()
    report["mig_parent"] = w.mig_parent
    # a first start (a fresh state file) read the ring buffer's records as it started
    records = (w.backlog or []) + w.read_kernel()
    report["kmsg_records"] = len(records)
    report["kmsg_nvidia"] = [t for t, _ in records if "NVRM" in t or "nvidia" in t.lower()][:50]
    if inject and w.gpus:
        pci = next(iter(w.gpus.values()))["pci.bus_id"]  # 00000000:XX:00.0
        domain, bus, rest = pci.split(":")
        line = f"NVRM: Xid (PCI:{domain[-4:]}:{bus}:{rest.split('.')[0]}): 13, pid={os.getpid()}, "
        line += "name=capture_gpu_health, Graphics SM Warp Exception (capture, not a fault)"
        with open("/dev/kmsg", "w") as kmsg:
            kmsg.write(f"<4>{line}\n")
        written = time.monotonic()
        time.sleep(0.2)
        got = w.read_kernel()
        mine = [(t, usec) for t, usec in got if "capture_gpu_health" in t]
        report["injected"] = line
        report["read_back"] = [
            {
                "text": t,
                "usec": usec,
                "lag_s": round(written - usec / 1e6, 6),
                "parsed": gpu_watcher.parse_xid(t),
                "class": gpu_watcher.classify(catalog, "13", t),
            }
            for t, usec in mine
        ]
    return report


def compute_apps(out: Path) -> dict:
    """gpu_repair's compute-apps query while a CUDA process holds the first GPU."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, "60"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    report: dict = {"pid": holder.pid}
    try:
        first = holder.stdout.readline().decode() if holder.stdout else ""
        report["holder_said"] = first.strip()
        text = run(out, "compute-apps.csv", SMI, *COMPUTE_APPS)
        rows = [line.split(",") for line in text.splitlines()]
        report["pids_seen"] = [r[0].strip() for r in rows if r[0].strip().isdigit()]
        with open(f"/proc/{holder.pid}/cgroup") as f:
            report["holder_cgroup"] = f.read()
    except OSError as e:
        report["error"] = str(e)
    finally:
        holder.kill()
        holder.wait()
    return report


def main(argv: list[str]) -> int:
    """Capture into OUT_DIR."""
    p = argparse.ArgumentParser(description="Record what the GPU health watcher reads here.")
    p.add_argument("out")
    p.add_argument("--inject-kmsg", action="store_true")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    run(out, "help-query-gpu.txt", SMI, "--help-query-gpu")
    run(out, "help-query-compute-apps.txt", SMI, "--help-query-compute-apps")
    run(out, "nvidia-smi-q-health.txt", SMI, "-q", "-d", "ECC,ROW_REMAPPER,PAGE_RETIREMENT")
    run(out, "nvidia-smi-mig-lgipp.txt", SMI, "mig", "-lgipp")
    summary: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name, step in (
        ("watcher", lambda: watcher(out, a.inject_kmsg)),
        ("compute_apps", lambda: compute_apps(out)),
    ):
        try:
            summary[name] = step()
        except Exception as e:  # noqa: BLE001 (a capture records what failed and goes on)
            summary[name] = {"error": f"{type(e).__name__}: {e}"}
    (out / "capture.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    print(json.dumps(summary, indent=1, sort_keys=True)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
