#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Entrypoint of every distributed TensorFlow pod: build `TF_CONFIG`, then exec the trainer.

The tensorflow charm runs a job as one JobSet with a replicated Job per role (`worker`, and
for parameter-server training `chief` and `ps`), each a single Indexed Job, under a
subdomain (JobSet's headless Service), so replica `i` of role `r` of job `j` has the
stable name `<j>-<r>-0-<i>.<service>` (JobSet v0.12.0 names the Job
`<jobset>-<replicatedJob>-<jobIndex>`; the Job controller its Indexed pods
`<job>-<index>`). This launcher turns the pod's role and
completion index into `TF_CONFIG`, prepares the job's directories on the shared volume and
then runs the trainer as its only child: it copies the trainer's output (stdout and
stderr, merged) both to the container's stdout and to the replica's file on the shared
volume, `<data>/jobs/<job>/pod-logs/<role>-<index>.log`, so a replica's log outlives its
pod (the Job controller and JobSet delete pods, and with them their logs, when a gang
restarts or the job's TTL passes). The launcher is the container's PID 1: it forwards
SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the trainer, owns the SIGTERM protocol (below),
exits with a code from the table below, and a trainer whose launcher dies is killed
(PR_SET_PDEATHSIG), as a container's processes are when its PID 1 ends. Each start
appends a header line to the file; a file past LOG_FILE_LIMIT bytes is moved to
`<name>.1` at the next start, and copying to the file stops (with a note) when the
current start alone writes that much; the pod's own log keeps everything. When the file
cannot be opened the launcher execs the trainer directly, as before.

SIGTERM (a drained, preempted, scaled or stopped pod; kubelet sends it, then SIGKILL after
the pod's terminationGracePeriodSeconds, GPU_K8S_GRACE_SECONDS here) is the launcher's,
whatever the program: the built-in trainer, a program written as TensorFlow's tutorials
write them, or one that ignores SIGTERM. The launcher

1. marks this task `stopping` in `<data>/jobs/<job>/gang/<role>-<index>.json`; every task
   of the gang polls its peers' marks, so a peer's stop reaches every task (under
   MultiWorkerMirroredStrategy a task whose peer left cannot go on: its collectives fail);
2. forwards SIGTERM to its program: at once for the chief (worker 0 under MWMS, `chief`
   under ParameterServerStrategy) and for MWMS workers (their save is collective); a
   `ps` or a `worker` of ParameterServerStrategy holds it until the chief's task has
   exited, since the chief's save reads the variables they serve;
3. kills the program if it is still running shortly before the grace period ends, and
4. exits EXIT_STOPPED (143): the pod's failure fails its Job by podFailurePolicy
   (FailJob on exit 143) and JobSet's first failurePolicy rule restarts the gang with
   RestartJobSetAndIgnoreMaxRestarts, i.e. without counting toward max-restarts; the
   new gang resumes from the chief's last checkpoint.

A program that exits 0 on SIGTERM (a user's handler that saves, then `sys.exit(0)`)
stopped too: once SIGTERM was forwarded to the program (or it was killed), the launcher
exits EXIT_STOPPED whatever the program's code. Exit 0 would make the pod Succeeded, and
the chief's success ends the job: the worker Job's successPolicy (succeededIndexes "0":
"Once any of the rules are met, the SucceededCriteriaMet condition is added, and the
lingering pods are removed", batch/v1 SuccessPolicy) and the JobSet's successPolicy,
operator Any on the chief's role ("Any of the selected jobs should succeed to consider
the JobSet successful", jobset v0.12.0 jobset_types.go), so a drain or a preemption
would complete the job mid-training instead of resuming it. The launcher cannot tell
that from a program that finished its last step just as SIGTERM came: that one is
restarted, uncounted, and ends again from its last checkpoint. For the built-in trainer
that is harmless: it finds every step done, writes the final SavedModel version if the
stop came between the final checkpoint and the export's rename (tf_trainer.py
finished_before), reports finished and exits 0. A user's program pays what it
pays for any stop near its end: Keras' BackupAndRestore deletes its backup once fit()
returns (tf_keras callbacks.py on_train_end, delete_checkpoint), so a program stopped
between fit() and its exit trains again from the start. A rare window, and a cost, not a
wrong result; the other way a drained job would end half-trained as Completed. A
program that exits 0 before SIGTERM reached it (a `ps` or `strategy=ps` worker still held
for the chief's save) finished, and exits 0.

A task whose program fails while a peer is stopping (a peer left mid-step) also exits
EXIT_STOPPED: it stopped at its last checkpoint, it did not fail. A peer that failed
for its own reasons (no `stopping` mark) is a failure, and counts.

A GPU fault (issue 32 item 2: a node's fault is not one of the job's max-restarts). An
application XID (the XID catalog's RESTART_APP: 13, 31, 43, ...) is the program's own
fault and is not such a stop: the watcher evicts no pod whose program crashed on it,
only one whose process still runs after this window and a margin (gpu_watcher.py
APP_WAIT_S), so a crashed program's code counts toward max-restarts. A
fatal XID (79, the GPU fell off the bus; 48, a double-bit ECC error) makes CUDA fail in
the program at once, before the GPU health watcher (kubernetes-worker gpu_watcher.py)
has evicted the pod: 0.65 s later on the bench (tests/bench/bench_gpu_watcher.py). Had
the launcher exited then, kubelet would report the pod Failed (exit 1, no
DisruptionTarget) and the Job controller would count it at once: under a
podFailurePolicy it acts on a pod as soon as its phase is Failed ("When using
podFailurePolicy, Failed is the only allowed value" of podReplacementPolicy, batch/v1
JobSpec), and the eviction that lands later deletes a finished pod that no one reads
again (kube-apiserver pkg/registry/core/pod/storage/eviction.go: a terminal pod is
deleted without a PDB check). So a program that fails (not 0, not during a stop) does
not end the container at once: the launcher holds its exit for the fault window
(FAULT_WINDOW, GPU_K8S_FAULT_WINDOW_SECONDS), the pod staying Running, and exits
EXIT_STOPPED if a stop comes within it: its own SIGTERM (the eviction: kube-apiserver
sets DisruptionTarget, reason EvictionByEvictionAPI, then deletes the pod, whose
container kubelet stops; eviction.go addConditionAndDeletePod), marked `stopping` for
the peers, or a peer's mark. Otherwise it exits with the program's code, and the
failure counts, as before. A peer whose collectives failed because this task's program
died waits the same window, so the evicted task's mark reaches it and it stops too.
Whichever the Job controller reads first, the evicted pod's failure is not counted
(podFailurePolicy rules in order, the first match wins: Kubernetes docs "Handling
retriable and non-retriable pod failures with Pod failure policy"): the condition and
exit 143 together match rule 0 (Ignore: the pod is replaced, the Job goes on), exit 143
alone (a pod stopped on a peer's mark, before or without its own eviction) rule 1
(FailJob), which the JobSet's rule `stoppedNotCounted` restarts without counting.

Why the launcher and not a rule: a podFailurePolicy rule on DisruptionTarget exists
already (rule 0) and never sees the crashed pod, whose condition comes after the Job
controller counted it; JobSet's failurePolicy reads only a failed Job's reason and
message (onJobFailureReasons, onJobFailureMessagePatterns), not a Node's condition;
the worker charm or its watcher writing a condition on the pod (pods/status) would
race the very kubelet report it must beat (its tick, then its requests). Only the
container staying alive until the eviction closes that race, whoever evicts. The cost:
a program that truly failed is restarted FAULT_WINDOW later. A task with no GPU
(GPU_K8S_GPUS 0) and no peer skips the window: no GPU fault can reach it.

Exit codes (the container's, read by the Job's podFailurePolicy and JobSet's
failurePolicy the charm writes; docs/explanation/training-jobs.md "Stops and exit codes"):

    0    the program finished (exited 0 before    the pod Succeeded
         any SIGTERM reached it)
    143  stopped on SIGTERM (its own or a peer's,  gang restarted, not counted
         whatever the program then exits with, 0
         included, or within the fault window
         after the program failed)
    82   the launcher cannot start the task: a bad  the job Fails, no restart
         environment or argument, no shared volume,
         the program cannot be run
    83   the task asked for GPUs, TensorFlow sees   the job Fails, no restart
         none
    1    the program exited 82, 83 or 143 (codes    gang restarted, counted
         reserved here) without a stop
    any other code of the program (1, 2, 3, ...)   gang restarted, counted
    137  the launcher itself was killed (OOM, no    counted, unless the pod was
         time left)                                 evicted (DisruptionTarget)

It is standard-library only: the charm imports `build_tf_config` for its own checks and the
local demo runs it without TensorFlow installed in the launching interpreter.

Environment (set by the pod spec; the same names are used by `tf_demo.py`):

    GPU_K8S_JOB           job name (required), a DNS label such as `mnist`
    GPU_K8S_SERVICE       headless Service name (default: the job name)
    GPU_K8S_STRATEGY      `mwms` (default) or `ps`
    GPU_K8S_ROLE          `worker` (default), `chief` or `ps`
    GPU_K8S_WORKERS       number of worker replicas (required)
    GPU_K8S_PS            number of parameter servers (default 0; at least 1 for `ps`)
    GPU_K8S_PORT          gRPC port of every task (default 2222)
    JOB_COMPLETION_INDEX  replica index, set by Kubernetes for Indexed Jobs
    GPU_K8S_INDEX         replica index for runs outside Kubernetes (wins over the above)
    GPU_K8S_HOSTS         optional JSON `{"worker": ["127.0.0.1:40001", ...], ...}` that
                          replaces the stable hostnames (local runs on one machine)
    GPU_K8S_DATA_DIR      mount point of the shared volume (default /data); must exist
    GPU_K8S_GPUS          GPUs this task asked for (default 0); when > 0 the launcher
                          checks that TensorFlow sees a GPU and fails fast (exit 83)
                          when it sees none, rather than train on CPU while holding GPUs
    GPU_K8S_GRACE_SECONDS the pod's terminationGracePeriodSeconds (default 30, the
                          Kubernetes default): the time a stop may take
    GPU_K8S_FAULT_WINDOW_SECONDS  how long a task whose program failed holds its exit
                          for a stop (its own SIGTERM, a peer's mark) before it counts
                          the failure as its own (default FAULT_WINDOW, 10; "A GPU
                          fault" below; the charm leaves it unset; tests shorten it)
    GPU_K8S_METRICS_PORT  serve the task's training progress in Prometheus' text format
                          on this port (GET /metrics; unset: not served, as in local runs;
                          see "Metrics" below)

Exported to the trainer:

    TF_CONFIG                the cluster spec and this task
    GPU_K8S_CHECKPOINT_DIR   <data>/jobs/<job>/checkpoints (created)
    GPU_K8S_LOG_DIR          <data>/jobs/<job>/logs (created; TensorBoard reads it)
    GPU_K8S_PROGRESS_FILE    <data>/jobs/<job>/progress.json (the chief writes it)
    GPU_K8S_EXPORT_DIR       <data>/jobs/<job>/export: SavedModel versions (<dir>/<n>/)
    GPU_K8S_POD_LOG          <data>/jobs/<job>/pod-logs/<role>-<index>.log (this replica's
                             output, copied there by the launcher)
    GPU_K8S_DATA_DIR         as given (datasets are looked up under <data>/datasets)

Everything else in the environment (GPU_K8S_STEPS, the user's own variables) passes
through to the trainer unchanged.

Metrics (GPU_K8S_METRICS_PORT; the tensorflow charm's COS scrape job reads them per pod):

    gpu_k8s_training_step                              the last step the program reported
    gpu_k8s_training_steps_target                      the steps it was asked for
    gpu_k8s_training_steps_per_second                  examples/s over the global batch
    gpu_k8s_training_examples_per_second               as the program reported it
    gpu_k8s_training_loss                              the last loss (none before a step)
    gpu_k8s_training_last_step_timestamp_seconds       when the step last moved (Unix time)
    gpu_k8s_training_last_checkpoint_timestamp_seconds the newest checkpoint file's
                                                       mtime in GPU_K8S_CHECKPOINT_DIR
                                                       or a subdirectory (TensorFlow's
                                                       or Keras', whoever saves there)

The progress ones come from the program's `GPU_K8S_PROGRESS {json}` lines (tf_trainer.py
prints one from the chief at every report; a user's program may print the same line with
`step`, `steps`, `loss`, `examples_per_sec`, `global_batch_size`), read from the output
the launcher copies anyway, so a task that prints none serves only the checkpoint age.
The Prometheus labels (namespace, pod, node, training_job, role) are the scrape
target's, not these (`job` is Prometheus' own: the scrape job's name).

Usage:

    tf_launcher.py                          # run the built-in trainer (tf_trainer.py)
    tf_launcher.py -- --steps 500           # built-in trainer with these flags
    tf_launcher.py -- python3 my_train.py   # a user's own program
    tf_launcher.py --print-tf-config        # print TF_CONFIG as JSON and exit
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

STRATEGIES: dict[str, tuple[str, ...]] = {
    "mwms": ("worker",),
    "ps": ("chief", "ps", "worker"),
}
DEFAULT_PORT = 2222
DEFAULT_DATA_DIR = "/data"
TRAINER = Path(__file__).resolve().parent / "tf_trainer.py"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

Hosts = Mapping[tuple[str, int], str]


def _check_name(what: str, value: str) -> None:
    if not isinstance(value, str) or not _DNS_LABEL.match(value) or len(value) > 63:
        raise ValueError(
            f"{what} {value!r} is not a valid DNS label: use 1-63 lowercase letters, "
            "digits and '-', starting and ending with a letter or digit"
        )


def _check_count(what: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")


def cluster_sizes(strategy: str, workers: int, ps: int) -> dict[str, int]:
    """Return the number of tasks of every role of a job, validating the combination.

    Raises:
        ValueError: the strategy is unknown or the counts do not fit it.
    """
    if strategy not in STRATEGIES:
        raise ValueError(
            f"unknown strategy {strategy!r}: use 'mwms' (MultiWorkerMirroredStrategy) "
            "or 'ps' (ParameterServerStrategy)"
        )
    _check_count("workers", workers, 1)
    _check_count("ps", ps, 0)
    if strategy == "mwms":
        if ps:
            raise ValueError(
                f"strategy 'mwms' has no parameter servers, got ps={ps}: "
                "set ps=0 or use strategy 'ps'"
            )
        return {"worker": workers}
    if ps < 1:
        raise ValueError("strategy 'ps' needs at least one parameter server: set ps >= 1")
    return {"chief": 1, "ps": ps, "worker": workers}


def build_tf_config(
    job: str,
    service: str,
    strategy: str,
    role: str,
    index: int,
    workers: int,
    ps: int,
    port: int = DEFAULT_PORT,
    hosts: Hosts | None = None,
) -> dict:
    """Build the `TF_CONFIG` of one task of a job.

    Args:
        job: job name; the Job of role `r` is `<job>-<r>-0` and its pods `<job>-<r>-0-<i>`.
        service: the headless Service that gives the pods their DNS names.
        strategy: `mwms` (workers only, worker 0 is the chief) or `ps` (one `chief`
            coordinator, `ps` and `worker` tasks; no evaluator in the cluster spec).
        role: this task's type.
        index: this task's index within its role.
        workers: number of workers.
        ps: number of parameter servers (0 for `mwms`).
        port: gRPC port every task listens on.
        hosts: optional `(role, index) -> "host:port"` addresses replacing the stable
            hostnames, for local runs; it must name every task of the cluster.

    Returns:
        `{"cluster": {role: [address, ...]}, "task": {"type": role, "index": index}}`.

    Raises:
        ValueError: any argument is invalid, with a message that says what to change.
    """
    sizes = cluster_sizes(strategy, workers, ps)
    _check_name("job", job)
    _check_name("service", service)
    _check_count("port", port, 1)
    if port > 65535:
        raise ValueError(f"port must be at most 65535, got {port}")
    if role not in sizes:
        raise ValueError(
            f"role {role!r} is not part of a {strategy!r} job: use one of {', '.join(sizes)}"
        )
    _check_count("index", index, 0)
    if index >= sizes[role]:
        raise ValueError(
            f"index {index} is out of range for role {role!r}: the job has {sizes[role]} "
            f"{role} task(s), so the index must be 0..{sizes[role] - 1}"
        )
    cluster: dict[str, list[str]] = {}
    for name, count in sizes.items():
        if hosts is None:
            cluster[name] = [f"{job}-{name}-0-{i}.{service}:{port}" for i in range(count)]
            continue
        missing = [f"{name}[{i}]" for i in range(count) if (name, i) not in hosts]
        if missing:
            raise ValueError(f"hosts override has no address for {', '.join(missing)}")
        cluster[name] = [hosts[(name, i)] for i in range(count)]
    return {"cluster": cluster, "task": {"type": role, "index": index}}


def parse_hosts(text: str) -> dict[tuple[str, int], str]:
    """Parse the `GPU_K8S_HOSTS` JSON (`{"worker": ["host:port", ...]}`) into a hosts map.

    Raises:
        ValueError: the text is not a JSON object of lists of "host:port" strings.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"GPU_K8S_HOSTS is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError('GPU_K8S_HOSTS must be a JSON object such as {"worker": ["h:2222"]}')
    hosts: dict[tuple[str, int], str] = {}
    for role, addresses in data.items():
        if not isinstance(addresses, list):
            raise ValueError(f"GPU_K8S_HOSTS[{role!r}] must be a list of 'host:port' strings")
        for i, address in enumerate(addresses):
            if not isinstance(address, str) or not re.match(r"^[^\s:]+:\d{1,5}$", address):
                raise ValueError(
                    f"GPU_K8S_HOSTS[{role!r}][{i}] must be 'host:port', got {address!r}"
                )
            hosts[(role, i)] = address
    return hosts


def _env_int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        if default is None:
            raise ValueError(f"{name} is not set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


def _index(env: Mapping[str, str]) -> int:
    for name in ("GPU_K8S_INDEX", "JOB_COMPLETION_INDEX"):
        if env.get(name, "").strip():
            return _env_int(env, name)
    raise ValueError(
        "JOB_COMPLETION_INDEX is not set: run the launcher in an Indexed Job pod, "
        "or set GPU_K8S_INDEX when running it by hand"
    )


def config_from_env(env: Mapping[str, str]) -> tuple[dict, dict[str, str]]:
    """Read the pod's environment; return `(TF_CONFIG, variables to export)`.

    Nothing is created here, so a bad environment leaves nothing behind.

    Raises:
        ValueError: a variable is missing or invalid.
    """
    job = env.get("GPU_K8S_JOB", "").strip()
    if not job:
        raise ValueError("GPU_K8S_JOB is not set: it names the training job")
    hosts_text = env.get("GPU_K8S_HOSTS", "").strip()
    tf_config = build_tf_config(
        job=job,
        service=env.get("GPU_K8S_SERVICE", "").strip() or job,
        strategy=env.get("GPU_K8S_STRATEGY", "").strip() or "mwms",
        role=env.get("GPU_K8S_ROLE", "").strip() or "worker",
        index=_index(env),
        workers=_env_int(env, "GPU_K8S_WORKERS"),
        ps=_env_int(env, "GPU_K8S_PS", 0),
        port=_env_int(env, "GPU_K8S_PORT", DEFAULT_PORT),
        hosts=parse_hosts(hosts_text) if hosts_text else None,
    )
    data = Path(env.get("GPU_K8S_DATA_DIR", "").strip() or DEFAULT_DATA_DIR)
    if not data.is_dir():
        raise ValueError(
            f"GPU_K8S_DATA_DIR {str(data)!r} is not a directory: mount the shared volume "
            "there (or point GPU_K8S_DATA_DIR at an existing directory)"
        )
    job_dir = data.resolve() / "jobs" / job
    exports = {
        "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")),
        "GPU_K8S_DATA_DIR": str(data.resolve()),
        "GPU_K8S_CHECKPOINT_DIR": str(job_dir / "checkpoints"),
        "GPU_K8S_LOG_DIR": str(job_dir / "logs"),
        "GPU_K8S_PROGRESS_FILE": str(job_dir / "progress.json"),
        "GPU_K8S_EXPORT_DIR": str(job_dir / "export"),
        "GPU_K8S_POD_LOG": str(
            job_dir / "pod-logs" / f"{tf_config['task']['type']}-{tf_config['task']['index']}.log"
        ),
    }
    return tf_config, exports


def trainer_command(args: Sequence[str], python: str = sys.executable) -> list[str]:
    """Return the command to exec: the built-in trainer unless `args` names a program.

    Args:
        args: what follows `--` on the launcher's command line. Empty, or starting with an
            option (`--steps 100`), means the built-in trainer with those flags.
        python: the interpreter for the built-in trainer.
    """
    if not args or args[0].startswith("-"):
        return [python, str(TRAINER), *args]
    return list(args)


# Prints how many GPUs TensorFlow sees, in the interpreter that will train.
_COUNT_GPUS = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"

# The exit-code table (module docstring; the charm's manifests.py turns it into the Job's
# podFailurePolicy and the JobSet's failurePolicy rules, from literals.py's copies).
EXIT_STOPPED = 143  # 128 + SIGTERM: stopped on a SIGTERM, at the last checkpoint
EXIT_SETUP = 82  # the launcher cannot start the task: a restart cannot help
EXIT_NO_GPU = 83  # the task asked for GPUs and TensorFlow sees none
EXIT_FAILED = 1  # the program exited with a reserved code without a stop
RESERVED = (EXIT_STOPPED, EXIT_SETUP, EXIT_NO_GPU)
NO_GPU_EXIT = EXIT_NO_GPU  # the old name
DEFAULT_GRACE = 30.0  # terminationGracePeriodSeconds' default (Pod spec, core/v1)


def visible_gpus(python: str = sys.executable, timeout: float = 600) -> int | None:
    """How many GPUs TensorFlow sees; None when TensorFlow cannot be imported to tell."""
    import subprocess

    try:
        done = subprocess.run(
            [python, "-c", _COUNT_GPUS],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    last = (done.stdout.strip().splitlines() or [""])[-1]
    return int(last) if done.returncode == 0 and last.isdigit() else None


def check_gpus(env: Mapping[str, str], python: str = sys.executable) -> str | None:
    """Why this task must not start: it asked for GPUs and TensorFlow sees none."""
    wanted = _env_int(env, "GPU_K8S_GPUS", 0)
    if wanted <= 0:
        return None
    seen = visible_gpus(python)
    if seen is None:
        print(
            "tf_launcher: cannot import tensorflow to check the GPUs; starting anyway",
            file=sys.stderr,
        )
        return None
    if seen:
        return None
    return (
        f"this task asked for {wanted} GPU(s) but TensorFlow sees none: the image's "
        "CUDA/cuDNN may not match it (use a tensorflow/tensorflow:<version>-gpu image), or "
        "the pod did not get the GPU (runtime class nvidia; run the worker's validate-gpu)"
    )


def main(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """Set up the task, run its program and own its SIGTERM; return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if environ is None else environ
    command_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, command_args = argv[:split], argv[split + 1 :]
    print_only = argv == ["--print-tf-config"]
    if argv and not print_only:
        print(
            f"tf_launcher: unknown arguments {argv}; usage: tf_launcher.py "
            "[--print-tf-config] [-- trainer flags | -- program args...]",
            file=sys.stderr,
        )
        return EXIT_SETUP
    try:
        tf_config, exports = config_from_env(env)
        grace = _grace(env)
        fault_window = _fault_window(env)
        metrics_port = _env_int(env, "GPU_K8S_METRICS_PORT", 0)
    except ValueError as e:
        print(f"tf_launcher: {e}", file=sys.stderr)
        return EXIT_SETUP
    if print_only:
        print(json.dumps(tf_config, indent=2))
        return 0
    try:
        gpus = _env_int(env, "GPU_K8S_GPUS", 0)
        problem = check_gpus(env)
    except ValueError as e:
        print(f"tf_launcher: {e}", file=sys.stderr)
        return EXIT_SETUP
    if problem:
        print(f"tf_launcher: {problem}", file=sys.stderr, flush=True)
        return EXIT_NO_GPU
    for key in ("GPU_K8S_CHECKPOINT_DIR", "GPU_K8S_LOG_DIR"):
        Path(exports[key]).mkdir(parents=True, exist_ok=True)
    env.update(exports)
    command = trainer_command(command_args)
    task = tf_config["task"]
    print(
        f"tf_launcher: {task['type']} {task['index']} of job {env['GPU_K8S_JOB']}; "
        f"cluster {json.dumps(tf_config['cluster'])}; run {' '.join(command)}",
        file=sys.stderr,
        flush=True,
    )
    pod_log = Path(exports["GPU_K8S_POD_LOG"])
    log_file = open_pod_log(pod_log, env.get("HOSTNAME", ""))
    gang = Gang.join(pod_log.parent.parent / "gang", tf_config, env.get("HOSTNAME", ""))
    metrics = TrainingMetrics(Path(exports["GPU_K8S_CHECKPOINT_DIR"]))
    if metrics_port:
        serve_metrics(metrics, metrics_port, env.get("GPU_K8S_METRICS_ADDRESS", ""))
    try:
        return run_copying_output(
            command,
            env,
            log_file,
            gang=gang,
            grace=grace,
            fault_window=fault_window,
            gpus=gpus,
            metrics=metrics,
        )
    finally:
        if log_file is not None:
            log_file.close()


def _grace(env: Mapping[str, str]) -> float:
    raw = env.get("GPU_K8S_GRACE_SECONDS", "").strip()
    if not raw:
        return DEFAULT_GRACE
    try:
        grace = float(raw)
    except ValueError:
        grace = -1.0
    if not grace > 0:
        raise ValueError(f"GPU_K8S_GRACE_SECONDS must be a positive number, got {raw!r}")
    return grace


def _fault_window(env: Mapping[str, str]) -> float:
    raw = env.get("GPU_K8S_FAULT_WINDOW_SECONDS", "").strip()
    if not raw:
        return FAULT_WINDOW
    try:
        wait = float(raw)
    except ValueError:
        wait = -1.0
    if not wait >= 0:
        raise ValueError(f"GPU_K8S_FAULT_WINDOW_SECONDS must be a number >= 0, got {raw!r}")
    return wait


def _task(role: str, index: int) -> str:
    return f"{role}-{index}"


class Gang:
    """This task's mark on the shared volume and its peers': how a stop reaches the gang.

    Each task owns `<dir>/<role>-<index>.json` ({"state", "token", "code"}): `running`
    when it starts, `stopping` on SIGTERM, `exited` (with the code) when it ends. A mark is
    rewritten in place, not renamed, so a reader on NFS sees it at its next open
    (close-to-open consistency). The marks a task finds when it starts are an earlier
    gang's: only a mark that changed since then is news.
    """

    def __init__(self, directory: Path, me: str, peers: list[str], chief: str, pod: str):
        self.dir, self.me, self.peers, self.chief = directory, me, peers, chief
        self.token = f"{pod or me}:{os.getpid()}:{os.urandom(4).hex()}"
        self.seen = {peer: self._read(peer) for peer in peers}
        self.broken = False

    @classmethod
    def join(cls, directory: Path, tf_config: dict, pod: str) -> Gang | None:
        """Mark this task running; None (with a note) when the shared volume refuses."""
        task = tf_config["task"]
        me = _task(task["type"], task["index"])
        cluster = tf_config["cluster"]
        tasks = [_task(r, i) for r, hosts in cluster.items() for i in range(len(hosts))]
        chief = _task("chief", 0) if "chief" in cluster else _task("worker", 0)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            print(f"tf_launcher: no stop marks ({e}): a stop stays this task's", file=sys.stderr)
            return None
        gang = cls(directory, me, [t for t in tasks if t != me], chief, pod)
        gang.mark("running")
        return gang

    def _read(self, task: str) -> dict | None:
        try:
            data = json.loads((self.dir / f"{task}.json").read_text())
        except (OSError, ValueError):
            return None  # absent, or caught half-written: read again next time
        return data if isinstance(data, dict) else None

    def mark(self, state: str, **extra: object) -> None:
        """Write this task's mark (in place)."""
        data = {"state": state, "token": self.token, **extra}
        try:
            with (self.dir / f"{self.me}.json").open("w") as f:
                f.write(json.dumps(data))
        except OSError as e:
            if not self.broken:
                print(f"tf_launcher: cannot write the stop mark: {e}", file=sys.stderr)
            self.broken = True

    def _news(self, task: str) -> dict | None:
        now = self._read(task)
        old = self.seen.get(task) or {}
        if now is None or (now.get("token"), now.get("state")) == (
            old.get("token"),
            old.get("state"),
        ):
            return None
        return now

    def stopping_peer(self) -> str | None:
        """A peer told to stop since this task started (SIGTERM, or a stop it relayed)."""
        for peer in self.peers:
            news = self._news(peer)
            if news and (
                news.get("state") == "stopping"
                or (news.get("state") == "exited" and news.get("code") == EXIT_STOPPED)
            ):
                return peer
        return None

    def chief_exited(self) -> bool:
        """Whether the chief's task (of this gang) has ended."""
        news = self._news(self.chief) if self.chief != self.me else None
        return bool(news and news.get("state") == "exited")

    def waits_for_chief(self) -> bool:
        """A ps or worker of ParameterServerStrategy: the chief's save needs it serving."""
        return self.chief.startswith("chief-") and self.me != self.chief


# A replica's file on the shared volume: what one start may copy there, and the size past
# which the file is moved aside (to `<name>.1`, replacing an older one) at the next start.
LOG_FILE_LIMIT = 64 * 1024 * 1024
FORWARDED_SIGNALS = (  # passed on as they come; SIGTERM is the stop protocol's
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def open_pod_log(path: Path, pod: str, limit: int | None = None):
    """Open the replica's log file for appending, after a header line; None if it cannot be.

    A file already past `limit` bytes is first moved to `<name>.1`.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size > (limit or LOG_FILE_LIMIT):
            path.replace(path.with_name(path.name + ".1"))
        out = path.open("ab", buffering=0)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        out.write(f"===== {stamp} start of {pod or 'a task'} =====\n".encode())
        return out
    except OSError as e:
        print(
            f"tf_launcher: cannot write the replica's log to {path} ({e}); "
            "the pod's log is the only copy",
            file=sys.stderr,
            flush=True,
        )
        return None


def _die_with_parent(parent: int) -> None:
    """In the child: get SIGKILL when the launcher dies (a container's PID 1 semantics)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(1)


class _LogCopy:
    """Copies output to the replica's file until `limit` bytes or a write error."""

    def __init__(self, log_file, limit: int):
        self.file, self.limit, self.copied = log_file, limit, 0
        self.on = log_file is not None

    def write(self, data: bytes) -> None:
        if not self.on:
            return
        try:
            if self.copied + len(data) > self.limit:
                note = (
                    f"\n===== {self.limit} bytes copied; the rest is only in the pod's log =====\n"
                )
                self.file.write(note.encode())
                self.on = False
                return
            self.file.write(data)
            self.copied += len(data)
        except OSError as e:
            print(
                f"tf_launcher: stopped copying the log to the shared volume: {e}",
                file=sys.stderr,
                flush=True,
            )
            self.on = False


def _start_child(command: list[str], env: Mapping[str, str], write_end: int) -> int | None:
    """Fork and exec the program; None when it cannot be run (the reason is on stderr)."""
    parent = os.getpid()
    # Closed on exec: the child writes to it only when exec failed.
    failed_read, failed_write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(failed_write)
        failed = os.read(failed_read, 4096)
        os.close(failed_read)
        if failed:
            os.waitpid(pid, 0)
            os.write(write_end, failed)  # copied with the program's output
            return None
        return pid
    try:  # the child: output into the pipe, default signals, then the trainer
        os.close(failed_read)
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        for number in (signal.SIGTERM, *FORWARDED_SIGNALS):
            signal.signal(number, signal.SIG_DFL)
        _die_with_parent(parent)
        os.execvpe(command[0], command, env)
    except OSError as e:
        os.write(failed_write, f"tf_launcher: cannot run {command[0]!r}: {e}\n".encode())
    os._exit(EXIT_SETUP)


# The stop protocol's timing: marks are polled this often; the launcher leaves this much
# of the grace period (at most STOP_MARGIN) for itself to exit before kubelet's SIGKILL.
POLL_SECONDS = 0.2
STOP_MARGIN = 2.0
# The fault window (GPU_K8S_FAULT_WINDOW_SECONDS; module docstring, "A GPU fault"): how
# long a task whose program failed holds its exit for a stop, its own SIGTERM or a peer's
# mark, before it counts the failure as its own. It must cover the GPU health watcher's
# way from the fault to this launcher's SIGTERM: the kernel's XID record read at its next
# tick (gpu_watcher.py `--tick`, 0.5 s), its requests to kube-apiserver (node condition,
# cordon, the pods on the node, the eviction: 0.65 s in all from the XID on the fake API
# server, tests/bench/bench_gpu_watcher.py), kubelet seeing the pod's deletion and
# stopping the container (SIGTERM), and a holding peer reading the stopping mark (every
# POLL_SECONDS, over NFS): about 1.5 s expected on an idle node (an estimate from those
# parts, not measured on a real cluster). 10 s leaves room for a loaded API server and
# node. Not covered: a watcher whose nvidia-smi poll hangs on the lost GPU (its step
# polls nvidia-smi before reading the kernel log, each call bounded at 20 s): then the
# crash counts, as before. The cost: a program that truly failed is restarted 10 s
# later, against the minute or more a gang restart takes anyway (every pod deleted, then
# scheduled again, TensorFlow imported and the checkpoint restored).
FAULT_WINDOW = 10.0


class _Stop:
    """The SIGTERM protocol of one run (see the module docstring)."""

    def __init__(
        self,
        pid: int,
        gang: Gang | None,
        grace: float,
        fault_window: float = FAULT_WINDOW,
        gpus: int = 0,
    ):
        self.pid, self.gang, self.grace = pid, gang, grace
        # A task with no GPU and no peer cannot have failed for a GPU fault: no wait.
        peers = gang is not None and bool(gang.peers)
        self.fault_window = fault_window if gpus > 0 or peers else 0.0
        self.signalled = False  # SIGTERM reached the launcher
        self.since: float | None = None  # when the stop began
        self.forwarded = False
        self.killed = False

    def _say(self, text: str) -> None:
        print(f"tf_launcher: {text}", file=sys.stderr, flush=True)

    def _signal(self, number: int) -> None:
        try:
            os.kill(self.pid, number)
        except ProcessLookupError:
            pass

    @property
    def deadline(self) -> float:
        assert self.since is not None
        return self.since + self.grace - min(STOP_MARGIN, self.grace / 4)

    def poll(self) -> None:
        """One round: start the stop, forward SIGTERM when due, kill when time is up."""
        now = time.monotonic()
        if self.since is None:
            peer = None if self.signalled or self.gang is None else self.gang.stopping_peer()
            if not self.signalled and peer is None:
                return
            self.since = now
            why = "SIGTERM" if self.signalled else f"{peer} is stopping"
            if self.gang is not None:
                self.gang.mark("stopping")
            waits = self.gang is not None and self.gang.waits_for_chief()
            self._say(
                f"{why}: stopping; the job resumes from its last checkpoint"
                + (" (serving until the chief has saved)" if waits else "")
            )
        if not self.forwarded:
            waits = self.gang is not None and self.gang.waits_for_chief()
            exited = waits and self.gang.chief_exited()  # type: ignore[union-attr]
            hold = waits and not exited
            if not hold or now >= self.deadline - min(1.0, self.grace / 8):
                if waits:
                    self._say(
                        "the chief's task exited: SIGTERM forwarded"
                        if exited
                        else "the chief's task still runs as the grace period ends: "
                        "SIGTERM forwarded"
                    )
                self._signal(signal.SIGTERM)
                self.forwarded = True
        if not self.killed and now >= self.deadline:
            self._say("the program did not stop within the grace period: killed")
            self._signal(signal.SIGKILL)
            self.killed = True

    def _hold(self, code: int) -> None:
        """The fault window: a stop that comes now makes the failure a stop (`since`)."""
        self._say(
            f"the program exited {code}; holding the exit up to {self.fault_window:g} s for "
            "an eviction (a GPU fault) or a peer's stop before counting it"
        )
        until = time.monotonic() + self.fault_window
        while True:
            if self.signalled:
                self._say(f"SIGTERM after exit {code}: stopped at the last checkpoint")
                if self.gang is not None:
                    self.gang.mark("stopping")
                break
            peer = self.gang.stopping_peer() if self.gang is not None else None
            if peer is not None:
                self._say(f"exit {code} after {peer} left: stopped at the last checkpoint")
                break
            left = until - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(POLL_SECONDS, left))
        self.since = time.monotonic()

    def outcome(self, code: int) -> int:
        """The launcher's exit code for the program's `code` (the table above)."""
        if self.forwarded or self.killed:
            return EXIT_STOPPED  # its 0 included ("A program that exits 0 on SIGTERM")
        if code == 0:
            return 0
        if self.since is None and self.fault_window > 0:
            self._hold(code)
        if self.since is not None:
            return EXIT_STOPPED
        if code in RESERVED:
            self._say(
                f"the program exited {code}, a code the launcher reserves "
                f"(tf_launcher.py exit codes): reported as {EXIT_FAILED}"
            )
            return EXIT_FAILED
        return code


def run_copying_output(
    command: list[str],
    env: Mapping[str, str],
    log_file,
    limit: int | None = None,
    *,
    gang: Gang | None = None,
    grace: float = DEFAULT_GRACE,
    fault_window: float = FAULT_WINDOW,
    gpus: int = 0,
    metrics: TrainingMetrics | None = None,
) -> int:
    """Run `command` as a child, copy its output to stdout and `log_file`; return the code.

    Signals in FORWARDED_SIGNALS that reach the launcher are passed to the child; SIGTERM
    runs the stop protocol (`_Stop`), as does a peer's stop mark in `gang`. The copy to
    the file (None: no file) stops, with a note in it, after `limit` bytes, or when
    writing it fails (the shared volume went away); the child is never slowed or stopped
    by it.
    """
    read_end, write_end = os.pipe()
    pid = _start_child(command, env, write_end)
    os.close(write_end)
    if pid is None:
        message = os.read(read_end, 65536)
        os.close(read_end)
        _write_all(2, message)
        _LogCopy(log_file, limit or LOG_FILE_LIMIT).write(message)
        if gang is not None:
            gang.mark("exited", code=EXIT_SETUP)
        return EXIT_SETUP
    stop = _Stop(pid, gang, grace, fault_window, gpus)

    def forward(number: int, _frame: object) -> None:
        if number == signal.SIGTERM:
            stop.signalled = True  # acted on in the loop: no I/O in a signal handler
            return
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            pass

    for number in (signal.SIGTERM, *FORWARDED_SIGNALS):
        signal.signal(number, forward)
    copy = _LogCopy(log_file, limit or LOG_FILE_LIMIT)
    status = _pump(read_end, pid, copy, stop, metrics)
    code = os.waitstatus_to_exitcode(status)
    final = stop.outcome(code if code >= 0 else 128 - code)
    if gang is not None:
        gang.mark("exited", code=final)
    return final


def _pump(
    read_end: int, pid: int, copy: _LogCopy, stop: _Stop, metrics: TrainingMetrics | None
) -> int:
    """Copy the child's output until it exited and the pipe closed; return its wait status."""
    status: int | None = None
    give_up = float("inf")
    polled = 0.0
    while time.monotonic() < give_up:
        readable, _, _ = select.select([read_end], [], [], POLL_SECONDS)
        data = os.read(read_end, 65536) if readable else b""
        if readable and not data:
            break  # every writer closed the pipe
        if metrics is not None:  # first: what the log shows, /metrics already counts
            metrics.feed(data)
        _write_all(1, data)
        copy.write(data)
        if status is None:
            if stop.signalled or time.monotonic() - polled >= 0.5:
                stop.poll()
                polled = time.monotonic()
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                # A program the trainer started may still hold the pipe: read on a moment.
                status, give_up = raw, time.monotonic() + 1.0
    os.close(read_end)
    if status is None:
        _, status = os.waitpid(pid, 0)
    return status


# ------------------------------------------------------------------ training progress metrics

# The marker tf_trainer.py prints before each progress report (its PROGRESS_MARKER).
PROGRESS_MARKER = b"GPU_K8S_PROGRESS "
# A progress line longer than this is not one (the trainer's is about 1 KiB with its loss
# history): the partial line kept between reads never grows past it.
MAX_LINE = 64 * 1024
# Prometheus' text exposition format 0.0.4 (prometheus/docs content/docs/instrumenting/
# exposition_formats.md): `# HELP`, `# TYPE`, then `name value` lines.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_GAUGES = (  # name, help, the progress field it comes from (None: computed)
    ("gpu_k8s_training_step", "The last training step the program reported.", "step"),
    ("gpu_k8s_training_steps_target", "The steps the program was asked to train.", "steps"),
    (
        "gpu_k8s_training_steps_per_second",
        "Training steps per second (examples per second over the global batch size).",
        None,
    ),
    (
        "gpu_k8s_training_examples_per_second",
        "Training examples per second, as the program reported them.",
        "examples_per_sec",
    ),
    ("gpu_k8s_training_loss", "The training loss at the last reported step.", "loss"),
    (
        "gpu_k8s_training_last_step_timestamp_seconds",
        "When the reported step last moved (Unix time).",
        None,
    ),
)
CHECKPOINT_GAUGE = "gpu_k8s_training_last_checkpoint_timestamp_seconds"
# tf_keras/src/distribute/distributed_file_utils.py _get_base_dirpath: "workertemp_<task id>"
TEMP_SAVE_PREFIX = "workertemp_"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _is_checkpoint(entry: os.DirEntry) -> bool:
    """A file TensorFlow or Keras writes with each save (not the trainer's model.json).

    tf.train.Checkpoint writes `<prefix>.index` beside its data files, and
    CheckpointManager rewrites the `checkpoint` state file after each save
    (tensorflow/python/checkpoint/checkpoint_management.py); Keras' ModelCheckpoint
    writes `.keras` or `.weights.h5` files.
    """
    name = entry.name
    return entry.is_file() and (name == "checkpoint" or name.endswith((".index", ".keras", ".h5")))


def _is_save_directory(entry: os.DirEntry) -> bool:
    """A subdirectory a program may save its checkpoints in (not a worker's temp copy)."""
    return entry.is_dir() and not entry.name.startswith(TEMP_SAVE_PREFIX)


class TrainingMetrics:
    """The task's progress, read from its program's output, as Prometheus gauges.

    `feed` is called by the launcher's copy loop with each read of the output; `render`
    by the metrics server's thread, hence the lock.
    """

    def __init__(self, checkpoint_dir: Path, clock=time.time):
        self.checkpoint_dir, self.clock = checkpoint_dir, clock
        self.values: dict[str, float] = {}
        self.partial = b""
        self.lock = threading.Lock()

    def feed(self, data: bytes) -> None:
        """Take the complete progress lines out of the output read so far."""
        if not data:
            return
        *lines, self.partial = (self.partial + data).split(b"\n")
        if len(self.partial) > MAX_LINE:
            self.partial = b""  # not a progress line; the rest of it is dropped too
        for line in lines:
            if line.startswith(PROGRESS_MARKER):
                self._report(line[len(PROGRESS_MARKER) :])

    def _report(self, raw: bytes) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            return
        if not isinstance(data, dict) or _number(data.get("step")) is None:
            return
        new = {name: _number(data.get(field)) for name, _, field in _GAUGES if field}
        speed, batch = (
            new["gpu_k8s_training_examples_per_second"],
            _number(data.get("global_batch_size")),
        )
        new["gpu_k8s_training_steps_per_second"] = speed / batch if speed and batch else None
        if speed == 0:
            new["gpu_k8s_training_steps_per_second"] = 0.0
        with self.lock:
            moved = self.values.get("gpu_k8s_training_step") != new["gpu_k8s_training_step"]
            stamp = self.clock() if moved else self.values.get(_GAUGES[-1][0])
            new[_GAUGES[-1][0]] = stamp
            self.values = {k: v for k, v in new.items() if v is not None}

    def last_checkpoint(self) -> float | None:
        """The newest mtime among the checkpoint files (None: none yet).

        Those of the directory and of its subdirectories one level down: Keras 2's
        BackupAndRestore (tf_keras 2.21.0, which multi-worker Keras needs) saves in
        <backup_dir>/chief (tf_keras/src/distribute/worker_training_state.py). Not those of
        `workertemp_<task>`: a worker that must not save writes a throw-away copy there,
        removed after each save (distributed_file_utils.write_dirpath; TensorFlow's
        custom-loop tutorial names its temp directories the same way).
        """
        times: list[float] = []
        directories = [self.checkpoint_dir]
        for depth, directory in enumerate(directories):
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if _is_checkpoint(entry):
                            times.append(entry.stat().st_mtime)
                        elif depth == 0 and _is_save_directory(entry):
                            directories.append(Path(entry.path))
            except OSError:
                continue
        return max(times, default=None)

    def render(self) -> str:
        """The gauges in Prometheus' text format; a gauge with no value has no sample."""
        with self.lock:
            values = dict(self.values)
        checkpoint = self.last_checkpoint()
        if checkpoint is not None:
            values[CHECKPOINT_GAUGE] = checkpoint
        out = []
        helps = [(name, text) for name, text, _ in _GAUGES]
        helps.append((CHECKPOINT_GAUGE, "When the newest checkpoint file was written."))
        for name, text in helps:
            out += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
            if name in values:
                out.append(f"{name} {values[name]!r}")
        return "\n".join(out) + "\n"


def serve_metrics(metrics: TrainingMetrics, port: int, address: str = "") -> object | None:
    """Serve `metrics` on GET /metrics from a daemon thread; None (with a note) if it cannot."""
    import http.server  # only pods serve: the charm imports this module too

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server API)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (scrapes stay out of the log)
            pass

    try:
        server = http.server.ThreadingHTTPServer((address, port), Handler)
    except OSError as e:
        print(f"tf_launcher: no metrics on port {port}: {e}", file=sys.stderr, flush=True)
        return None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BrokenPipeError:
            return


if __name__ == "__main__":
    sys.exit(main())
