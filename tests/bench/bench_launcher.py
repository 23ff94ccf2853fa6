#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Training throughput through the launcher vs. the same trainer started by hand.

Each repetition trains the built-in trainer with 2 MultiWorkerMirroredStrategy workers
(BENCH_WORKERS) on 127.0.0.1 twice: once as the pods do (`tf_launcher.py -- <flags>`,
TF_CONFIG built from the environment, the output copied to the replica's file) and once
by hand (`python tf_trainer.py <flags>` with a hand-written TF_CONFIG and directories).
Like for like: the same interpreter, flags (`--threads` sets both TF thread pools), and
environment but for the variables the launcher reads; every task's output goes to a file.
The order alternates between repetitions. Throughput is the chief's
`avg_examples_per_sec` from the progress file (steady state: the first, tracing step is
excluded). Target: launcher / by hand 0.97-1.03.

    python tests/bench/bench_launcher.py [--reps 5] [--steps 600] [--smoke]

`--smoke`: one repetition of 20 steps (each code path once; the numbers are not to quote).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ROOT / "actions"
sys.path.insert(0, str(ACTIONS))
from run import options  # noqa: E402
from tf_demo import free_ports  # noqa: E402  (stdlib only)

PYTHON = os.environ.get("GPU_K8S_TF_PYTHON") or sys.executable
WORKERS = int(os.environ.get("BENCH_WORKERS", "2"))


def _base_env() -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for key in list(env):
        if key.startswith("GPU_K8S_") or key == "TF_CONFIG":
            env.pop(key)
    return env


def launcher_commands(data: Path, ports: list[int], flags: list[str]):
    """Commands + environments as the pods run them."""
    hosts = json.dumps({"worker": [f"127.0.0.1:{p}" for p in ports]})
    for i in range(WORKERS):
        env = _base_env()
        env.update(
            GPU_K8S_JOB="bench",
            GPU_K8S_WORKERS=str(WORKERS),
            JOB_COMPLETION_INDEX=str(i),
            GPU_K8S_HOSTS=hosts,
            GPU_K8S_DATA_DIR=str(data),
        )
        yield [PYTHON, str(ACTIONS / "tf_launcher.py"), "--", *flags], env


def by_hand_commands(data: Path, ports: list[int], flags: list[str]):
    """The same trainer with a hand-written TF_CONFIG and directories."""
    job = data / "jobs" / "bench"
    (job / "checkpoints").mkdir(parents=True)
    (job / "logs").mkdir()
    for i in range(WORKERS):
        env = _base_env()
        env["TF_CONFIG"] = json.dumps(
            {
                "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                "task": {"type": "worker", "index": i},
            }
        )
        argv = [
            PYTHON,
            str(ACTIONS / "tf_trainer.py"),
            *flags,
            f"--checkpoint-dir={job / 'checkpoints'}",
            f"--log-dir={job / 'logs'}",
            f"--progress-file={job / 'progress.json'}",
            f"--data-dir={data}",
        ]
        yield argv, env


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(kind: str, flags: list[str]) -> tuple[float, float]:
    """Train once; return the chief's steady-state examples/s and the tasks' CPU seconds."""
    cpu_before = _cpu_seconds()
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind}-") as tmp:
        data = Path(tmp)
        ports = free_ports(WORKERS)
        make = launcher_commands if kind == "launcher" else by_hand_commands
        # Each task's output goes to a file of its own, as a pod's goes to its log: a pipe
        # read only after the task ended would block a task that writes more than the
        # pipe holds, and slow its peers in the all-reduce (the old 1.155 "ratio").
        procs, outputs = [], []
        for i, (argv, env) in enumerate(make(data, ports, flags)):
            output = Path(tmp) / f"task-{i}.out"
            with output.open("wb") as out:
                procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))
            outputs.append(output)
        for proc, output in zip(procs, outputs, strict=True):
            if proc.wait(timeout=600) != 0:
                tail = output.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{kind} worker exited {proc.returncode}: {tail}")
        progress = json.loads((data / "jobs" / "bench" / "progress.json").read_text())
        return float(progress["avg_examples_per_sec"]), _cpu_seconds() - cpu_before


def main() -> int:
    """Print per-run throughput and the launcher / by-hand ratio."""
    parser = options("Launcher vs by-hand training throughput.")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.smoke:
        args.reps, args.steps = 1, 20
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('tensorflow') is None)"
    try:
        found = subprocess.run([PYTHON, "-c", probe], timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        found = False
    if not found:
        print(f"launcher throughput: skipped (tensorflow not importable by {PYTHON})")
        return 0
    flags = [
        f"--steps={args.steps}",
        f"--threads={args.threads}",
        f"--checkpoint-every={min(200, args.steps // 2)}",
    ]
    results: dict[str, list[float]] = {"launcher": [], "by-hand": []}
    cpu: dict[str, list[float]] = {"launcher": [], "by-hand": []}
    for rep in range(args.reps):
        order = ["launcher", "by-hand"] if rep % 2 == 0 else ["by-hand", "launcher"]
        for kind in order:
            rate, seconds = run_once(kind, flags)
            results[kind].append(rate)
            cpu[kind].append(seconds)
            print(
                f"rep {rep + 1} {kind:8s} {rate:10.0f} examples/s  {seconds:6.1f} CPU s",
                flush=True,
            )
    ratios = [a / b for a, b in zip(results["launcher"], results["by-hand"], strict=True)]
    paired = statistics.geometric_mean(ratios)
    launcher, by_hand = (statistics.median(results[k]) for k in ("launcher", "by-hand"))
    print(
        f"launcher throughput ratio ({WORKERS} workers, {args.steps} steps, {args.reps} reps): "
        f"{paired:.3f} (geometric mean of back-to-back pairs; per pair "
        f"{', '.join(f'{r:.3f}' for r in ratios)}; ratio of medians {launcher / by_hand:.3f}; "
        "target >= 0.97)"
    )
    # Wall-clock throughput on a shared machine follows the neighbours' load; the CPU time
    # of the whole run (import, start-up, training) shows whether the launcher adds work.
    cpu_ratio = statistics.median(cpu["by-hand"]) / statistics.median(cpu["launcher"])
    print(f"CPU-time ratio (by hand / launcher, whole run, medians): {cpu_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
