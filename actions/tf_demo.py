#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Train locally with the same launcher the cluster pods run (`tox -e demo`).

Writes scikit-learn's bundled digits (1797 real 8x8 scans of handwritten digits; 20% held
out, stratified) as a dataset under `build/demo/datasets/digits/`, the layout
`import-dataset` gives, then starts two worker processes on 127.0.0.1 through
`tf_launcher.py` with `GPU_K8S_DATASET_DIR` pointing there, as `train dataset=digits`
would (MultiWorkerMirroredStrategy; the launcher's `GPU_K8S_HOSTS` override replaces the
pods' stable hostnames with free local ports). It shows the chief's progress (percent and
time left) while they train, then the held-out accuracy and where the SavedModel, the
checkpoints and the TensorBoard logs are (under `build/demo/jobs/demo/`). `--data
synthetic` trains on generated MNIST-size data instead. Each run starts over unless
`--resume` is given: then training continues from the last checkpoint up to `--steps`
(e.g. `tox -e demo -- --resume --steps 800`). Exits non-zero when a worker fails; Ctrl-C
stops every worker.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LAUNCHER = HERE / "tf_launcher.py"
JOB = "demo"


# Where `free_ports` picks: outside the kernel's ephemeral ports, none below LOWEST_PORT.
LOWEST_PORT = 10000
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Without that file (not Linux): Linux's default start and nothing above it (macOS hands
# out 49152-65535)
OTHER_SYSTEMS = (32768, 65535)


def ephemeral_range() -> tuple[int, int]:
    """The first and last port the kernel hands to bind(0) and outgoing connections.

    net.ipv4.ip_local_port_range (kernel Documentation/networking/ip-sysctl: "the local
    port range that is used by TCP and UDP to choose the local port", default 32768
    60999); bind() to port 0 and connect() pick from it (torvalds/linux
    net/ipv4/inet_connection_sock.c inet_csk_find_open_port, inet_hashtables.c
    __inet_hash_connect).
    """
    try:
        low, high = map(int, EPHEMERAL.read_text().split())
    except (OSError, ValueError):
        return OTHER_SYSTEMS
    return low, high


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free now on every address, none the kernel hands out.

    For servers started next (the demo's workers, a test's pods, the launcher bench). In a
    cluster each pod has its own network namespace, so its servers' ports (2222, the
    metrics port) are always free; local processes share the machine's. A port picked by
    binding port 0 and released is an ephemeral one (`ephemeral_range`), which any
    process's next outgoing connection (an API client, a peer's gRPC channel, another
    run) may get before the server binds it, the more often the busier the machine: then
    TensorFlow says "Could not start gRPC server" (it binds 0.0.0.0:<port>) and the worker
    exits 1 (once in five runs of test_tf_gang.py at load 8-11, 2026-11-28). Ports outside
    that range go to nobody unasked; they are picked at random, so that runs side by side
    seldom try the same ones, and only ports that bind now on all addresses are kept.
    """
    low, high = ephemeral_range()
    outside = [*range(LOWEST_PORT, low), *range(high + 1, 65536)]
    ports: list[int] = []
    for port in random.sample(outside, min(len(outside), 50 * count)):
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError(
        f"no {count} free TCP ports outside the kernel's ephemeral ports {low}-{high}"
    )


def write_digits(path: Path) -> int:
    """scikit-learn's digits as a .npz in Keras' layout (x_test/y_test held out); the count."""
    import numpy as np

    # scikit-learn is in the demo's environment (requirements/tensorflow.txt), not lint's
    from sklearn.datasets import load_digits  # pyright: ignore[reportMissingImports]
    from sklearn.model_selection import train_test_split  # pyright: ignore[reportMissingImports]

    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.images, digits.target, test_size=0.2, random_state=0, stratify=digits.target
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return len(digits.images)


def task_env(
    data_dir: Path, workers: int, ports: list[int], index: int, dataset: Path | None = None
) -> dict[str, str]:
    """The environment a worker pod would get, with local addresses."""
    env = dict(os.environ)
    env.update(
        {
            "GPU_K8S_JOB": JOB,
            "GPU_K8S_STRATEGY": "mwms",
            "GPU_K8S_ROLE": "worker",
            "GPU_K8S_WORKERS": str(workers),
            "GPU_K8S_INDEX": str(index),
            "GPU_K8S_HOSTS": json.dumps({"worker": [f"127.0.0.1:{p}" for p in ports]}),
            "GPU_K8S_DATA_DIR": str(data_dir),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if dataset is not None:
        env["GPU_K8S_DATASET_DIR"] = str(dataset)
    return env


def read_progress(path: Path) -> dict | None:
    """The progress file's contents, or None before the chief has written it."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _loss(progress: dict) -> str:
    loss = progress.get("loss")
    return "n/a" if loss is None else f"{loss:.4f}"


def _progress_line(data: dict) -> str:
    """`[#####.....]  50%  step 200/400  loss 0.4123  ~12s left  (running)`."""
    step, steps = int(data["step"]), max(1, int(data["steps"]))
    done = min(1.0, step / steps)
    bar = "#" * int(done * 20) + "." * (20 - int(done * 20))
    rate = float(data.get("examples_per_sec") or 0) / max(
        1, int(data.get("global_batch_size") or 1)
    )
    left = f"~{(steps - step) / rate:.0f}s left" if rate > 0 and step < steps else ""
    parts = [f"[{bar}] {100 * done:3.0f}%", f"step {step}/{steps}", f"loss {_loss(data)}"]
    return "  ".join(
        [*parts, left, f"({data['state']})"] if left else [*parts, f"({data['state']})"]
    )


def stop(procs: list[subprocess.Popen]) -> None:
    """Terminate the workers, then kill whatever is left after a grace period."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 10
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def watch(procs: list[subprocess.Popen], progress_file: Path, timeout: float) -> int:
    """Print progress until every worker exits; return the first non-zero status or 0."""
    shown = None
    started = time.time()
    deadline = time.monotonic() + timeout
    print("[demo] waiting for the workers to start TensorFlow and meet...", flush=True)
    while time.monotonic() < deadline:
        data = read_progress(progress_file)
        if data and data.get("time", 0) < started:
            data = None  # left over from an earlier run
        if data and (data["step"], data["state"]) != shown:
            shown = (data["step"], data["state"])
            print(f"[demo] {_progress_line(data)}", flush=True)
        codes = [p.poll() for p in procs]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            i, code = failed[0]
            print(f"[demo] worker {i} failed with exit status {code}", file=sys.stderr)
            return code if code > 0 else 128 - code
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.5)
    print(f"[demo] workers still running after {timeout:.0f}s; stopping them", file=sys.stderr)
    return 124


def main(argv: list[str] | None = None) -> int:
    """Run the demo; return the exit status."""
    parser = argparse.ArgumentParser(description="Train locally through the launcher.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="TF threads per worker")
    parser.add_argument("--dir", type=Path, default=ROOT / "build" / "demo")
    parser.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint of a run"
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--data",
        choices=("digits", "synthetic"),
        default="digits",
        help="scikit-learn's real digits (default) or generated MNIST-size data",
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")

    job_dir = args.dir / "jobs" / JOB
    if not args.resume and job_dir.exists():
        shutil.rmtree(job_dir)
    args.dir.mkdir(parents=True, exist_ok=True)
    progress_file = job_dir / "progress.json"
    dataset = None
    if args.data == "digits":
        dataset = args.dir / "datasets" / "digits"
        count = write_digits(dataset / "digits.npz")
        shown = _shown(dataset)
        print(f"[demo] dataset: {count} scans of handwritten digits in {shown}", flush=True)
    ports = free_ports(args.workers)
    trainer_args = [
        f"--steps={args.steps}",
        f"--batch-size={args.batch_size}",
        f"--checkpoint-every={args.checkpoint_every}",
        f"--threads={args.threads}",
    ]
    print(
        f"[demo] {args.workers} workers on ports {ports}; output in {_shown(job_dir)}", flush=True
    )
    job_dir.mkdir(parents=True, exist_ok=True)
    logs = [job_dir / f"worker-{i}.log" for i in range(args.workers)]
    procs = []
    for i, log in enumerate(logs):
        with log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(LAUNCHER), "--", *trainer_args],
                    env=task_env(args.dir, args.workers, ports, i, dataset),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
    print(f"[demo] worker output: {', '.join(_shown(p) for p in logs)}", flush=True)
    try:
        code = watch(procs, progress_file, args.timeout)
    except KeyboardInterrupt:
        print("[demo] interrupted; stopping workers", file=sys.stderr)
        code = 130
    finally:
        stop(procs)
    data = read_progress(progress_file)
    if code != 0:
        for log in logs:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            print(f"[demo] last lines of {_shown(log)}:", *tail, sep="\n  ", file=sys.stderr)
    elif data:
        _report(data, job_dir)
    return code


def _shown(path: Path) -> str:
    """`path` as the user would type it: relative to where they ran the demo, if under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _report(data: dict, job_dir: Path) -> None:
    """What the run gave: accuracy, the SavedModel, checkpoints, how to look at it."""
    print(
        f"[demo] finished: step {data['step']}, loss {_loss(data)} "
        f"(resumed from step {data['resumed_from']})",
        flush=True,
    )
    if isinstance(data.get("eval_accuracy"), int | float):
        print(
            f"[demo] held-out accuracy {100 * data['eval_accuracy']:.1f}% "
            f"(loss {data['eval_loss']:.4f}, at step {data['eval_step']})",
            flush=True,
        )
    if data.get("export"):
        print(
            f"[demo] SavedModel: {_shown(Path(data['export']))} (signature serving_default: "
            "x -> class, probabilities; what `serve` would serve)",
            flush=True,
        )
    print(
        f"[demo] checkpoints in {_shown(job_dir / 'checkpoints')}; TensorBoard: "
        f"`uvx tensorboard --logdir {_shown(job_dir / 'logs')}`",
        flush=True,
    )


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
    sys.exit(main())
