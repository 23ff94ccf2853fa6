# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Real multi-process TensorFlow training through the launcher the pods run.

Every task is a separate process started as `python actions/tf_launcher.py -- <flags>`
with the environment a pod would get, the stable hostnames replaced by 127.0.0.1 ports
(`GPU_K8S_HOSTS`). The interpreter is the running one, or GPU_K8S_TF_PYTHON when set
(a venv with tensorflow-cpu); without TensorFlow the module is skipped.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import has_tensorflow

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "actions" / "tf_launcher.py"
TRAINER = ROOT / "actions" / "tf_trainer.py"
sys.path.insert(0, str(ROOT / "actions"))
import readme_examples  # noqa: E402
import tf_zygote  # noqa: E402
from signed_s3 import signed_s3  # noqa: E402
from tf_demo import free_ports, write_digits  # noqa: E402  (stdlib; sklearn when called)

from fakes.kubelet import TENSORFLOW_IMAGE  # noqa: E402


def image_pythonpath() -> str:
    """PYTHONPATH for a process standing for a container: the image has no scikit-learn."""
    return os.pathsep.join(filter(None, [str(TENSORFLOW_IMAGE), os.environ.get("PYTHONPATH")]))


PYTHON = os.environ.get("GPU_K8S_TF_PYTHON") or sys.executable


pytestmark = pytest.mark.skipif(
    not has_tensorflow(PYTHON),
    reason=f"tensorflow is not importable by {PYTHON}: run `tox -e functional` or set "
    "GPU_K8S_TF_PYTHON to an interpreter with tensorflow-cpu installed",
)

FAST = ["--threads=1", "--batch-size=32"]


class LocalJob:
    """The tasks of one training job as local processes, each started through the launcher."""

    def __init__(self, data_dir: Path, name: str, strategy: str, workers: int, ps: int = 0):
        self.data_dir, self.name, self.strategy = data_dir, name, strategy
        self.workers, self.ps = workers, ps
        self.procs: dict[tuple[str, int], subprocess.Popen] = {}
        self.logs: dict[tuple[str, int], Path] = {}
        self.launches = 0
        self.program: list[str] = []  # a user's own program instead of the built-in trainer
        self.env: dict[str, str] = {}
        # each task's launcher serves its metrics on its own port, as each pod has its own
        # network namespace (fakes/kubelet.py does the same)
        self.metrics_ports: dict[tuple[str, int], int] = {}

    @property
    def job_dir(self) -> Path:
        return self.data_dir / "jobs" / self.name

    @property
    def tasks(self) -> list[tuple[str, int]]:
        roles = (
            {"worker": self.workers}
            if self.strategy == "mwms"
            else {"chief": 1, "ps": self.ps, "worker": self.workers}
        )
        return [(role, i) for role, count in roles.items() for i in range(count)]

    def start(self, *trainer_args: str) -> None:
        """Launch every task (fresh ports each time, like recreated pods)."""
        self.launches += 1
        tasks = self.tasks
        # the gRPC and metrics ports chosen together: one chosen after the others were
        # released could be one of them again, and the launcher's metrics server would then
        # hold the trainer's gRPC port ("Could not start gRPC server")
        ports = iter(free_ports(2 * len(tasks)))
        hosts: dict[str, list[str]] = {}
        for role, _ in tasks:
            hosts.setdefault(role, []).append(f"127.0.0.1:{next(ports)}")
        for role, i in tasks:
            env = dict(os.environ)
            env.update(
                GPU_K8S_JOB=self.name,
                GPU_K8S_STRATEGY=self.strategy,
                GPU_K8S_ROLE=role,
                GPU_K8S_WORKERS=str(self.workers),
                GPU_K8S_PS=str(self.ps),
                JOB_COMPLETION_INDEX=str(i),
                GPU_K8S_HOSTS=json.dumps(hosts),
                GPU_K8S_DATA_DIR=str(self.data_dir),
                TF_CPP_MIN_LOG_LEVEL="2",
                PYTHONUNBUFFERED="1",
                PYTHONPATH=image_pythonpath(),  # no scikit-learn, as in the image
            )
            env.update(self.env)
            env.pop("GPU_K8S_INDEX", None)
            metrics_port = next(ports)
            self.metrics_ports[(role, i)] = metrics_port
            env.update(GPU_K8S_METRICS_PORT=str(metrics_port), GPU_K8S_METRICS_ADDRESS="127.0.0.1")
            log = self.data_dir / f"{self.name}-{self.launches}-{role}-{i}.log"
            self.logs[(role, i)] = log
            with log.open("wb") as out:
                command = self.program or [*FAST, *trainer_args]
                self.procs[(role, i)] = subprocess.Popen(
                    [PYTHON, str(LAUNCHER), "--", *command],
                    env=tf_zygote.environment(env),  # TensorFlow imported once
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )

    def scrape(self, task: tuple[str, int]) -> dict[str, float]:
        """The task's launcher metrics (GET /metrics), as name -> value ({}: not serving yet)."""
        url = f"http://127.0.0.1:{self.metrics_ports[task]}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                text = answer.read().decode()
        except OSError:
            return {}
        return {
            line.split()[0]: float(line.split()[1])
            for line in text.splitlines()
            if line and not line.startswith("#")
        }

    def progress(self) -> dict | None:
        try:
            return json.loads((self.job_dir / "progress.json").read_text())
        except (OSError, ValueError):
            return None

    def checkpoint_steps(self) -> list[int]:
        ckpts = (self.job_dir / "checkpoints").glob("ckpt-*.index")
        return sorted(int(p.name[len("ckpt-") : -len(".index")]) for p in ckpts)

    def latest_checkpoint(self) -> int:
        """The step of the checkpoint TensorFlow would restore (0 if none)."""
        try:
            state = (self.job_dir / "checkpoints" / "checkpoint").read_text()
        except OSError:
            return 0
        first = state.splitlines()[0]  # model_checkpoint_path: "ckpt-80"
        return int(first.split('"')[1].removeprefix("ckpt-"))

    def output(self) -> str:
        return "\n".join(
            f"--- {role} {i} ---\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            for (role, i), log in self.logs.items()
        )

    def wait(self, timeout: float = 120) -> dict[tuple[str, int], int]:
        """Wait until every task exits; fail with the tasks' output on a timeout."""
        deadline = time.monotonic() + timeout
        codes = {}
        for task, proc in self.procs.items():
            try:
                codes[task] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stop()
                pytest.fail(f"{task} still running after {timeout}s\n{self.output()}")
        return codes

    def wait_ok(self, timeout: float = 120) -> dict:
        codes = self.wait(timeout)
        assert all(c == 0 for c in codes.values()), f"exit codes {codes}\n{self.output()}"
        progress = self.progress()
        assert progress is not None, self.output()
        return progress

    def wait_for(self, predicate, timeout: float = 90, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            dead = {t: p.returncode for t, p in self.procs.items() if p.poll() is not None}
            if dead:
                pytest.fail(f"tasks exited {dead} while waiting for {what}\n{self.output()}")
            time.sleep(0.05)
        pytest.fail(f"no {what} after {timeout}s\n{self.output()}")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait(timeout=30)


@pytest.fixture
def local_job(tmp_path):
    jobs: list[LocalJob] = []

    def make(name: str, strategy: str = "mwms", workers: int = 2, ps: int = 0) -> LocalJob:
        job = LocalJob(tmp_path, name, strategy, workers, ps)
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.stop()


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_mwms_two_workers_train_and_loss_falls(local_job):
    job = local_job("mnist")
    job.start("--steps=240", "--checkpoint-every=80")

    progress = job.wait_ok()

    assert progress["state"] == "finished"
    assert (progress["step"], progress["steps"], progress["resumed_from"]) == (240, 240, 0)
    history = progress["loss_history"]
    assert len(history) >= 20
    assert _mean(history[-5:]) < 0.5 * progress["first_loss"], (progress["first_loss"], history)
    assert _mean(history[-5:]) < _mean(history[:5]), history
    assert progress["examples_per_sec"] > 0
    assert job.checkpoint_steps() == [80, 160, 240]
    assert list((job.job_dir / "logs").glob("events.out.tfevents.*"))
    assert "worker 1 of job mnist" in job.logs[("worker", 1)].read_text()


def test_mwms_killed_worker_relaunch_resumes_from_last_checkpoint(local_job):
    job = local_job("kill")
    args = ("--steps=400", "--checkpoint-every=10")
    # The survivor notices the death when TensorFlow's coordination service misses the dead
    # worker's heartbeats (10 s by default, here 3: tf_trainer.py configure_heartbeat) and
    # its launcher looks for a stop that never comes (its fault window: 10 s by default,
    # here 0.5).
    job.env = {"GPU_K8S_HEARTBEAT_TIMEOUT_SECONDS": "3", "GPU_K8S_FAULT_WINDOW_SECONDS": "0.5"}
    job.start(*args)
    job.wait_for(lambda: job.latest_checkpoint() > 0, what="first checkpoint")

    # the chief's launcher serves the progress its trainer prints, and the checkpoint's time
    job.wait_for(lambda: "gpu_k8s_training_step" in job.scrape(("worker", 0)), what="metrics")
    chief, peer = job.scrape(("worker", 0)), job.scrape(("worker", 1))
    assert chief["gpu_k8s_training_steps_target"] == 400
    assert 0 < chief["gpu_k8s_training_step"] <= 400 and chief["gpu_k8s_training_loss"] > 0
    newest = max(p.stat().st_mtime for p in (job.job_dir / "checkpoints").iterdir())
    assert 0 < chief["gpu_k8s_training_last_checkpoint_timestamp_seconds"] <= newest
    assert "gpu_k8s_training_step" not in peer  # only the chief reports progress
    assert peer["gpu_k8s_training_last_checkpoint_timestamp_seconds"] > 0

    job.procs[("worker", 1)].send_signal(signal.SIGKILL)
    saved = job.latest_checkpoint()
    # The survivor's next all-reduce fails, so it exits non-zero by itself (in Kubernetes
    # the Job then restarts the pod); the test relaunches both, as the charm would.
    codes = job.wait(timeout=60)
    assert codes[("worker", 1)] == -signal.SIGKILL
    assert codes[("worker", 0)] != 0
    killed_at = job.latest_checkpoint()
    assert 0 < saved <= killed_at < 400

    job.env = {}  # the new gang's own end is an ordinary one (TensorFlow's heartbeat)
    job.start(*args)
    progress = job.wait_ok()

    assert progress["resumed_from"] == killed_at
    assert (progress["step"], progress["state"]) == (400, "finished")
    assert job.latest_checkpoint() == 400
    assert f"resumed from checkpoint at step {killed_at}" in job.logs[("worker", 1)].read_text()
    # Both lives of each replica are kept on the shared volume, as the pods' logs are not:
    # the survivor's failed all-reduce, then the resumed run to the end.
    for index in (0, 1):
        kept = (job.job_dir / "pod-logs" / f"worker-{index}.log").read_text()
        assert kept.count("===== ") == 2, kept[-2000:]
        assert f"resumed from checkpoint at step {killed_at}" in kept
    assert "GPU_K8S_PROGRESS" in (job.job_dir / "pod-logs" / "worker-0.log").read_text()


def test_mwms_scale_two_to_three_workers_resumes_from_the_step_it_stopped_at(local_job):
    job = local_job("scale")
    # No periodic checkpoint before the stop: what is kept is the save on SIGTERM.
    job.start("--steps=400", "--checkpoint-every=1000")
    job.wait_for(
        lambda: (job.progress() or {}).get("step", 0) >= 20, what="twenty steps of progress"
    )
    # What `scale`, `stop` and a Kueue preemption do: delete every pod (SIGTERM to each).
    for proc in job.procs.values():
        proc.send_signal(signal.SIGTERM)
    codes = job.wait(timeout=60)
    assert codes == {("worker", 0): 143, ("worker", 1): 143}, job.output()
    stopped = job.progress()
    assert stopped is not None and stopped["state"] == "stopped", stopped
    saved = job.latest_checkpoint()
    assert saved == stopped["step"] >= 20, (saved, stopped)  # no step lost

    job.workers = 3
    job.start("--steps=400", "--checkpoint-every=1000")
    progress = job.wait_ok()

    assert (progress["resumed_from"], progress["step"], progress["state"]) == (
        saved,
        400,
        "finished",
    )
    assert job.latest_checkpoint() == 400
    assert "worker 2 of job scale" in job.logs[("worker", 2)].read_text()


def test_a_lone_worker_stopped_by_sigterm_saves_where_it_was(local_job):
    job = local_job("solo", workers=1)
    job.start("--steps=100000", "--checkpoint-every=100000")
    job.wait_for(lambda: (job.progress() or {}).get("step", 0) >= 5, what="progress")
    job.procs[("worker", 0)].send_signal(signal.SIGTERM)
    assert job.wait(timeout=60) == {("worker", 0): 143}, job.output()
    assert job.latest_checkpoint() == job.progress()["step"] > 0


def test_ps_chief_one_ps_two_workers_runs_to_completion(local_job):
    job = local_job("ps", strategy="ps", workers=2, ps=1)
    job.start("--steps=100", "--checkpoint-every=50")

    progress = job.wait_ok(timeout=150)

    assert (progress["step"], progress["state"], progress["resumed_from"]) == (
        100,
        "finished",
        0,
    )
    assert job.checkpoint_steps()[-1] == 100
    assert progress["loss_history"]
    for task in (("ps", 0), ("worker", 0), ("worker", 1)):
        assert "chief finished at step 100" in job.logs[task].read_text()


MAKE_NPZ = """
import sys
import numpy as np
rng = np.random.default_rng(0)
labels = rng.integers(0, 10, 2000)
means = rng.integers(0, 256, (10, 28, 28))
noise = rng.integers(-40, 41, (2000, 28, 28))
images = np.clip(means[labels] + noise, 0, 255).astype(np.uint8)
np.savez(sys.argv[1], x_train=images, y_train=labels)
"""


def test_single_worker_reads_mnist_npz_from_shared_volume(local_job, tmp_path):
    npz = tmp_path / "datasets" / "mnist.npz"
    npz.parent.mkdir()
    subprocess.run([PYTHON, "-c", MAKE_NPZ, str(npz)], check=True, timeout=120)
    job = local_job("npz", workers=1)
    job.start("--steps=60", "--checkpoint-every=30")

    progress = job.wait_ok()

    assert (progress["step"], progress["state"]) == (60, "finished")
    assert progress["loss"] < 0.5 * progress["first_loss"]
    assert (
        f"data: 1800 examples from {npz} (200 held out, 784 inputs"
        in job.logs[("worker", 0)].read_text()
    )


def test_the_trainer_reads_the_dataset_train_named(local_job, tmp_path):
    """`train dataset=<name>`: the imported directory's only .npz, whatever its name."""
    npz = tmp_path / "datasets" / "scans" / "part" / "train-28x28.npz"
    npz.parent.mkdir(parents=True)
    subprocess.run([PYTHON, "-c", MAKE_NPZ, str(npz)], check=True, timeout=120)
    job = local_job("ds", workers=1)
    job.env["GPU_K8S_DATASET_DIR"] = str(tmp_path / "datasets" / "scans")
    job.start("--steps=30", "--checkpoint-every=30")

    progress = job.wait_ok()

    assert (progress["step"], progress["state"]) == (30, "finished")
    assert (
        f"data: 1800 examples from {npz} (200 held out, 784 inputs"
        in job.logs[("worker", 0)].read_text()
    )


# argv[1]: the dataset; argv[2:]: SavedModels, each loaded on its own, one line of JSON
# each. One process serves them all: importing TensorFlow is ~4.4 s of CPU a process.
SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
with np.load(sys.argv[1]) as f:
    x, y = f["x_test"].reshape(len(f["x_test"]), -1).astype(np.float32), f["y_test"]
for export in sys.argv[2:]:
    serve = tf.saved_model.load(export).signatures["serving_default"]
    out = serve(x=tf.constant(x))
    print(json.dumps({
        "inputs": {k: v.shape.as_list() for k, v in serve.structured_input_signature[1].items()},
        "outputs": sorted(out),
        "accuracy": float(np.mean(out["class"].numpy() == y)),
        "rows": float(np.abs(out["probabilities"].numpy().sum(axis=1) - 1).max()),
    }))
"""


def test_real_digits_are_evaluated_held_out_and_the_export_answers_as_serving_would(
    local_job, tmp_path
):
    """MWMS on scikit-learn's digits: eval at each checkpoint, a SavedModel at the end."""
    npz = tmp_path / "datasets" / "digits" / "digits.npz"
    npz.parent.mkdir(parents=True)
    write_digits(npz)
    job = local_job("digits", workers=2)
    job.env["GPU_K8S_DATASET_DIR"] = str(npz.parent)
    job.start("--steps=300", "--checkpoint-every=100", "--learning-rate=0.05")

    progress = job.wait_ok()

    assert (progress["step"], progress["state"]) == (300, "finished")
    assert progress["eval_step"] == 300
    assert progress["eval_accuracy"] > 0.85, progress  # 360 held-out scans
    assert progress["eval_loss"] < progress["first_loss"]
    chief = job.logs[("worker", 0)].read_text()
    assert "(360 held out, 64 inputs, 10 classes)" in chief
    assert "eval at step 100:" in chief and "eval at step 200:" in chief
    export = job.job_dir / "export" / "300"
    assert progress["export"] == str(export)
    assert (export / "saved_model.pb").is_file()
    assert [p.name for p in export.parent.iterdir()] == ["300"]  # no half-written version
    assert export.stat().st_mode & 0o777 == 0o755  # other uids (serving, fetch) read it
    trained = tmp_path / "trained" / "300"  # served below, with the fetched copy
    shutil.copytree(export, trained)

    # the chief killed between its final checkpoint and the export's rename: no version
    # 300, only the staging directory it was writing. The restarted gang finds every
    # step done and exports before it says finished (it said finished with no SavedModel)
    shutil.rmtree(export)
    staging = export.parent / ".300.k1ll3d"  # as tempfile.mkdtemp(prefix=".300.") names it
    (staging / "variables").mkdir(parents=True)
    (staging / "saved_model.pb").write_bytes(b"\x08\x01")  # half written
    job.start("--steps=300", "--checkpoint-every=100", "--learning-rate=0.05")

    again = job.wait_ok()

    assert (again["step"], again["state"], again.get("export")) == (300, "finished", str(export))
    assert "resumed from checkpoint at step 300" in job.logs[("worker", 0)].read_text()
    assert (export / "saved_model.pb").is_file()
    assert sorted(p.name for p in export.parent.iterdir()) == [".300.k1ll3d", "300"]

    # the export action's path: the latest checkpoint, exported again by itself
    shutil.rmtree(job.job_dir / "export")
    again = subprocess.run(
        [PYTHON, str(TRAINER), "--export-only", f"--checkpoint-dir={job.job_dir / 'checkpoints'}"]
        + [f"--export-dir={job.job_dir / 'export'}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert (job.job_dir / "export" / "300" / "saved_model.pb").is_file()
    assert 'GPU_K8S_EXPORT {"step": 300' in again.stdout

    # fetch-model destination=s3://...: the real SavedModel to S3 (signatures checked) and
    # back, where it answers exactly as before
    fetched = tmp_path / "fetched" / "300"
    with signed_s3() as s3:
        s3.bucket("models")
        up = subprocess.run(
            [PYTHON, str(ROOT / "actions" / "model_upload.py")]
            + [f"--export-dir={job.job_dir / 'export'}", "--destination=s3://models/digits"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, **s3.env},
        )
        assert up.returncode == 0, up.stdout + up.stderr
        for key in s3.keys("models", "digits/300/"):
            target = fetched / key.removeprefix("digits/300/")
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.client.download_file("models", key, str(target))
    served = subprocess.run(
        [PYTHON, "-c", SERVE, str(npz), str(trained), str(fetched)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    answer, again_answer = (json.loads(line) for line in served.stdout.splitlines()[-2:])
    assert answer["inputs"] == {"x": [None, 64]}  # raw pixel values, scaled inside
    assert answer["outputs"] == ["class", "probabilities"]
    assert answer["accuracy"] == pytest.approx(progress["eval_accuracy"], abs=1e-6)
    assert answer["rows"] < 1e-5
    assert again_answer == answer  # the fetched copy answers exactly as the trained one


def test_a_task_that_asked_for_a_gpu_stops_at_once_when_tensorflow_sees_none(tmp_path):
    """Real tensorflow-cpu sees no GPU: the launcher refuses to train on CPU while holding one."""
    env = dict(os.environ)
    env.update(
        GPU_K8S_JOB="gpujob",
        GPU_K8S_WORKERS="1",
        GPU_K8S_GPUS="1",
        JOB_COMPLETION_INDEX="0",
        GPU_K8S_DATA_DIR=str(tmp_path),
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=image_pythonpath(),
    )
    env.pop("GPU_K8S_INDEX", None)
    done = subprocess.run(
        [PYTHON, str(LAUNCHER), "--", "--steps", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 83, done.stderr[-2000:]  # EXIT_NO_GPU: fails the job, no restart
    assert "asked for 1 GPU(s) but TensorFlow sees none" in done.stderr
    assert not (tmp_path / "jobs" / "gpujob" / "progress.json").exists()  # nothing trained


# A program as TensorFlow's multi-worker Keras tutorial writes it: the strategy first, the
# model built and compiled in its scope, then `model.fit` (our own code, same shape).
KERAS_TUTORIAL = """
import json, os
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.random((512, 8)).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512).repeat().batch(64)
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Input((8,)),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(2),
    ])
    model.compile(
        optimizer=tf.keras.optimizers.Adam(0.05),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
history = model.fit(dataset, epochs=3, steps_per_epoch=10, verbose=0)
task = json.loads(os.environ["TF_CONFIG"])["task"]
print("KERAS_RESULT", json.dumps({"task": task["index"], "loss": history.history["loss"]}))
"""


def _has_tf_keras(python: str) -> bool:
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('tf_keras') is None)"
    return subprocess.run([python, "-c", probe], timeout=60).returncode == 0


@pytest.mark.skipif(
    not _has_tf_keras(PYTHON), reason="tf-keras is not installed (tox -e functional has it)"
)
def test_a_keras_tutorial_program_runs_under_mwms_with_legacy_keras(local_job, tmp_path):
    """The README's answer to Keras 3 under MultiWorkerMirroredStrategy: legacy Keras.

    Keras 3's model.fit fails there (keras-team/keras#20585; seen on this machine with
    TF 2.21.0 and Keras 3.15.1: it cannot convert a PerReplica batch to a Tensor). With
    tf-keras in the image and TF_USE_LEGACY_KERAS=1, tf.keras is the Keras 2 that supports
    MWMS: two workers through the launcher train one model and agree on it.
    """
    program = tmp_path / "keras_tutorial.py"
    program.write_text(KERAS_TUTORIAL)
    job = local_job("keras")
    job.program = [PYTHON, str(program)]
    job.env = {"TF_USE_LEGACY_KERAS": "1"}
    job.start()

    codes = job.wait(timeout=300)

    assert codes == {("worker", 0): 0, ("worker", 1): 0}, job.output()
    results = []
    for index in (0, 1):
        line = next(
            line
            for line in job.logs[("worker", index)].read_text().splitlines()
            if line.startswith("KERAS_RESULT ")
        )
        results.append(json.loads(line.removeprefix("KERAS_RESULT ")))
    assert [r["task"] for r in results] == [0, 1]
    assert results[0]["loss"] == results[1]["loss"]  # one model, kept in sync
    assert results[0]["loss"][-1] < results[0]["loss"][0]


def test_the_demo_trains_on_real_digits_reports_accuracy_and_resumes(tmp_path):
    """`tox -e demo`, then `tox -e demo -- --resume --steps 500`, as the README says.

    Run where tox runs it (the checkout: here a temporary one), so that what it prints is
    the README's example of how it ends.
    """
    demo = [PYTHON, str(ROOT / "actions" / "tf_demo.py"), "--dir", "build/demo"]
    run = functools.partial(subprocess.run, capture_output=True, text=True, timeout=600)
    first = run(demo, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    out = first.stdout
    assert "[demo] dataset: 1797 scans of handwritten digits in build/demo/datasets/digits" in out
    assert "] 100%  step 400/400" in out
    accuracy = float(out.split("held-out accuracy ")[1].split("%")[0])
    assert accuracy > 80.0, out
    export = tmp_path / "build" / "demo" / "jobs" / "demo" / "export" / "400"
    assert "[demo] SavedModel: build/demo/jobs/demo/export/400 " in out
    assert (export / "saved_model.pb").is_file()
    assert "tensorboard --logdir build/demo/jobs/demo/logs" in out
    end = "\n".join(out.splitlines()[-4:]) + "\n"
    readme_examples.show("demo-end", end, volatile=[r"loss \d+\.\d+", r"accuracy \d+\.\d+%"])

    again = run([*demo, "--resume", "--steps=500"], cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "[demo] finished: step 500, loss " in again.stdout
    assert "(resumed from step 400)" in again.stdout
    assert (export.parent / "500" / "saved_model.pb").is_file()


def _jobset_action(strategy: str, codes: dict[tuple[str, int], int], drained: set) -> str:
    """What JobSet does with these exit codes, by the charm's own failure policies.

    Each role's Job (the charm's manifest) judges its pods by its podFailurePolicy (a
    drained pod carries DisruptionTarget), then the JobSet's rules pick the action
    (tests/fakes/batch.py B3 and J3, each rule from its upstream source).
    """
    from charm_modules import load

    from fakes.batch import BatchControllers

    manifests = load("tensorflow", "manifests")
    request = load("tensorflow", "params").TrainRequest(
        job="j", strategy=strategy, workers=1 if strategy == "ps" else 2, ps=int(strategy == "ps")
    )
    ctx = manifests.Context(
        namespace="ns", app="tensorflow", claim="c", default_image="i", tensorboard_image="t"
    )
    spec = manifests.jobset(request, ctx)["spec"]
    failed = []
    for rj in spec["replicatedJobs"]:
        job = {
            "metadata": {"labels": {"jobset.sigs.k8s.io/replicatedjob-name": rj["name"]}},
            "spec": rj["template"]["spec"],
            "status": {"conditions": []},
        }
        for (role, index), code in codes.items():
            if role != rj["name"] or code == 0:
                continue
            pod = {
                "metadata": {"name": f"j-{role}-0-{index}", "namespace": "ns"},
                "status": {
                    "conditions": [{"type": "DisruptionTarget", "status": "True"}]
                    if (role, index) in drained
                    else [],
                    "containerStatuses": [
                        {"name": "tensorflow", "state": {"terminated": {"exitCode": code}}}
                    ],
                },
            }
            action, message = BatchControllers._policy_match(job, pod)
            if action != "Ignore":
                reason = "PodFailurePolicy" if action == "FailJob" else "BackoffLimitExceeded"
                job["status"]["conditions"] = [
                    {"type": "Failed", "status": "True", "reason": reason, "message": message}
                ]
        if job["status"]["conditions"]:
            failed.append(job)
    if not failed:
        return "none"
    rules = spec["failurePolicy"].get("rules") or []
    applies = BatchControllers._rule_applies  # the first rule that applies acts
    rule = next((r for r in rules if any(applies(r, j) for j in failed)), None)
    return rule["action"] if rule else "RestartJobSet"


def test_a_drained_ps_waits_for_the_chief_s_save_and_the_restart_does_not_count(local_job):
    """strategy=ps, SIGTERM to the ps only (review N2: the chief exited 1, 160 steps lost)."""
    job = local_job("psdrain", strategy="ps", workers=1, ps=1)
    job.env = {"GPU_K8S_GRACE_SECONDS": "30"}
    job.start("--steps=100000", "--checkpoint-every=100000")
    job.wait_for(lambda: (job.progress() or {}).get("step", 0) >= 20, what="twenty steps")

    job.procs[("ps", 0)].send_signal(signal.SIGTERM)
    codes = job.wait(timeout=60)

    assert codes == {("chief", 0): 143, ("ps", 0): 143, ("worker", 0): 143}, job.output()
    stopped = job.progress()
    assert stopped is not None and stopped["state"] == "stopped", stopped
    assert job.latest_checkpoint() == stopped["step"] >= 20  # the chief saved where it stopped
    assert _jobset_action("ps", codes, drained={("ps", 0)}) == "RestartJobSetAndIgnoreMaxRestarts"
    # ...while a crash counts: a worker's exit 1 is a failure, whoever else stopped
    assert _jobset_action("ps", {**codes, ("worker", 0): 1}, set()) == "RestartJobSet"
    assert _jobset_action("mwms", {("worker", 0): 83}, set()) == "FailJobSet"


# A program as TensorFlow's tutorial "Multi-worker training with Keras" writes it for fault
# tolerance (tensorflow.org/tutorials/distribute/multi_worker_with_keras, "Fault
# tolerance"): model.fit with tf.keras.callbacks.BackupAndRestore, which backs the training
# state up at the end of each epoch (save_freq='epoch', its default) and, when fit starts
# again after an interruption, restores it and goes on at the epoch after the backup
# (tf_keras/src/callbacks.py BackupAndRestore; worker_training_state.py: the chief writes
# <backup_dir>/chief, every worker restores). Our own code, same shape: the backup is on
# the shared volume (GPU_K8S_CHECKPOINT_DIR) where the tutorial's /tmp/backup would not
# outlive the pod. It prints each epoch it begins and ends (flushed, after the backup).
#
# It also ignores SIGTERM, without a line of its own: MultiWorkerMirroredStrategy starts
# TensorFlow's coordination service, whose preemption notifier replaces SIGTERM's default
# action with a handler that only records the time (tsl preemption_notifier.cc,
# SigtermNotifier: std::signal(SIGTERM, ...)). Seen here with TF 2.21.0: SigCgt has
# SIGTERM once the strategy exists, and a drained task trained on to the end.
KERAS_BACKUP = """
import json, os, sys
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.random((512, 8)).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Input((8,)),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(2),
    ])
    model.compile(
        optimizer=tf.keras.optimizers.Adam(0.05),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )

class Say(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        print("EPOCH_BEGIN", epoch, flush=True)
    def on_epoch_end(self, epoch, logs=None):
        print("EPOCH_END", epoch, flush=True)

backup = os.path.join(os.environ["GPU_K8S_CHECKPOINT_DIR"], "backup")
callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir=backup), Say()]
history = model.fit(
    dataset, epochs=int(sys.argv[1]), steps_per_epoch=int(sys.argv[2]),
    callbacks=callbacks, verbose=0,
)
print("KERAS_DONE", json.dumps(history.history["loss"]), flush=True)
"""

EPOCH_STEPS = 20


def _epochs(job: LocalJob, index: int, what: str) -> list[int]:
    text = job.logs[("worker", index)].read_text(errors="replace")
    return [int(line.split()[1]) for line in text.splitlines() if line.startswith(what + " ")]


def _start_keras_backup(job: LocalJob, tmp_path: Path, grace: float) -> tuple[LocalJob, Path]:
    """Start KERAS_BACKUP on every task of `job`, the pods' grace period `grace` seconds."""
    program = tmp_path / "keras_backup.py"
    program.write_text(KERAS_BACKUP)
    # epochs=1000: still training whenever the stop ends (the program trains on through it)
    job.program = [PYTHON, str(program), "1000", str(EPOCH_STEPS)]
    job.env = {"TF_USE_LEGACY_KERAS": "1", "GPU_K8S_GRACE_SECONDS": str(grace)}
    job.start()
    return job, program


@pytest.mark.skipif(
    not _has_tf_keras(PYTHON), reason="tf-keras is not installed (tox -e functional has it)"
)
def test_a_keras_tutorial_program_drained_mid_training_is_stopped_uncounted_and_resumes(
    local_job, tmp_path
):
    """Issue 31 item 1 (a) and (b): the tutorial's BackupAndRestore program, one worker drained.

    The program ignores SIGTERM (above), so it is also (b): the drained worker's launcher
    marks it stopping, forwards SIGTERM, and kills it before the pod's grace period ends
    (kubelet's SIGKILL would reach the launcher too: exit 137, counted); its peer's
    launcher sees the mark and does the same. Every task exits 143 and JobSet restarts the
    gang without counting (before, the peer exited 1: review N2). The new gang's model.fit
    starts at the epoch after the last backup.
    """
    grace = 6.0
    job, program = _start_keras_backup(local_job("kbackup"), tmp_path, grace)
    job.wait_for(lambda: _epochs(job, 0, "EPOCH_END")[-1:] >= [1], what="two epochs backed up")

    drained = time.monotonic()
    job.procs[("worker", 1)].send_signal(signal.SIGTERM)  # its node is drained
    job.procs[("worker", 1)].wait(timeout=60)
    took = time.monotonic() - drained
    codes = job.wait(timeout=60)

    assert codes == {("worker", 0): 143, ("worker", 1): 143}, job.output()
    assert took < grace, (took, job.output())  # the drained pod ended before kubelet's SIGKILL
    for index in (0, 1):
        kept = job.logs[("worker", index)].read_text()
        assert "did not stop within the grace period: killed" in kept, kept[-2000:]
    backed_up = _epochs(job, 0, "EPOCH_END")[-1]  # each end follows its backup
    assert _jobset_action("mwms", codes, drained={("worker", 1)}) == (
        "RestartJobSetAndIgnoreMaxRestarts"
    )

    # JobSet's new gang, here told to end two epochs after the backup
    job.program = [PYTHON, str(program), str(backed_up + 3), str(EPOCH_STEPS)]
    job.start()
    codes = job.wait(timeout=120)

    assert codes == {("worker", 0): 0, ("worker", 1): 0}, job.output()
    for index in (0, 1):  # every worker restored the backup and went on after it
        assert _epochs(job, index, "EPOCH_BEGIN") == [backed_up + 1, backed_up + 2], job.output()
    assert "KERAS_DONE" in job.logs[("worker", 0)].read_text()


@pytest.mark.skipif(
    not _has_tf_keras(PYTHON), reason="tf-keras is not installed (tox -e functional has it)"
)
def test_a_keras_tutorial_program_whose_whole_gang_is_preempted_is_stopped_uncounted_and_resumes(
    local_job, tmp_path
):
    """Issue 31 item 1, preemption: the tutorial's BackupAndRestore program, EVERY task at once.

    Kueue preempting the Workload deletes the gang's pods together, so kubelet sends
    SIGTERM to every task at the same moment. Each launcher marks it stopping, forwards
    SIGTERM (the program ignores it, see KERAS_BACKUP) and kills it before the grace period
    ends: every task exits 143, JobSet restarts the gang without counting, and the new
    gang's model.fit starts at the epoch after the last backup.
    """
    grace = 4.0  # the launchers kill the program at 3 s
    job, program = _start_keras_backup(local_job("kpreempt"), tmp_path, grace)
    job.wait_for(lambda: _epochs(job, 0, "EPOCH_END")[-1:] >= [0], what="a first backup")

    preempted = time.monotonic()
    for proc in job.procs.values():  # the pods are deleted together
        proc.send_signal(signal.SIGTERM)
    codes = job.wait(timeout=60)
    took = time.monotonic() - preempted

    assert codes == {("worker", 0): 143, ("worker", 1): 143}, job.output()
    assert took < grace, (took, job.output())  # every pod ended before kubelet's SIGKILL
    backed_up = _epochs(job, 0, "EPOCH_END")[-1]  # each end follows its backup
    # Deleted pods carry no DisruptionTarget: only an eviction, the scheduler's preemption,
    # the taint manager, PodGC and kubelet set it (kubernetes.io "Disruptions", "Pod
    # disruption conditions"), so each 143 fails its Job by rule 1, uncounted by JobSet
    assert _jobset_action("mwms", codes, drained=set()) == "RestartJobSetAndIgnoreMaxRestarts"
    # had they carried it, each Job would replace its pods itself (rule 0): uncounted too
    assert _jobset_action("mwms", codes, drained={("worker", 0), ("worker", 1)}) == "none"

    # JobSet's new gang, here told to end two epochs after the last backup seen
    job.program = [PYTHON, str(program), str(backed_up + 3), str(EPOCH_STEPS)]
    job.start()
    codes = job.wait(timeout=120)

    assert codes == {("worker", 0): 0, ("worker", 1): 0}, job.output()
    # every worker restored the last backup and went on after it: the one whose end was
    # printed, or the next (BackupAndRestore's on_epoch_end writes it before Say prints,
    # and the kill can fall between the two: seen here, a resume at backed_up + 2)
    resumed = _epochs(job, 0, "EPOCH_BEGIN")[:1]
    assert resumed in ([backed_up + 1], [backed_up + 2]), job.output()
    for index in (0, 1):
        assert _epochs(job, index, "EPOCH_BEGIN") == list(range(resumed[0], backed_up + 3))
    assert "KERAS_DONE" in job.logs[("worker", 0)].read_text()


# A program as TensorFlow's tutorial "Parameter server training with
# ParameterServerStrategy" writes it (tensorflow/docs site/en/tutorials/distribute/
# parameter_server_training.ipynb). One file for every task ("Clusters in the real world",
# "If you use the same binary for all tasks"): a `worker` or `ps` sets GRPC_FAIL_FAST,
# starts a tf.distribute.Server from TFConfigClusterResolver and joins it; the `chief` is
# the coordinator: a ParameterServerStrategy, a ClusterCoordinator scheduling a tf.function
# on the workers over a per-worker dataset, a Keras model and optimizer made in the
# strategy's scope, and ("Handling task failure", "Parameter server or coordinator
# failure", for a custom training loop) a tf.train.CheckpointManager of the model and the
# optimizer, restored before training with assert_existing_objects_matched(), its progress
# read from optimizer.iterations, a save after each `every` steps joined. Our own code,
# same shape: Keras 3's SGD (the tutorial's optimizers.legacy is Keras 2's; seen to run
# here with TF 2.21.0 and Keras 3.15.1), the checkpoints on the shared volume
# (GPU_K8S_CHECKPOINT_DIR), numbered by step. Nothing handles SIGTERM: the launcher's
# protocol stops it.
# Each line is written in one write: under PYTHONUNBUFFERED print() writes its pieces one by
# one, and LocalJob's log file also takes the launcher's notes (its stderr), which could
# land between them (in a pod, stdout and stderr are separate streams).
PS_TUTORIAL = """
import os, sys
import tensorflow as tf

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
os.environ["GRPC_FAIL_FAST"] = "use_caller"
if resolver.task_type in ("worker", "ps"):
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc", start=True,
    )
    server.join()

strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.05)
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
manager = tf.train.CheckpointManager(
    checkpoint, os.environ["GPU_K8S_CHECKPOINT_DIR"], max_to_keep=2
)
if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()

def say(line):
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()

say(f"PS_START {int(optimizer.iterations.numpy())}")

def dataset_fn():
    x = tf.random.stateless_uniform([256, 8], seed=[1, 2])
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)

iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

@tf.function
def step_fn(iterator):
    def replica_fn(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    x, y = next(iterator)
    return strategy.run(replica_fn, args=(x, y))

steps, every = int(sys.argv[1]), int(sys.argv[2])
while int(optimizer.iterations.numpy()) < steps:
    for _ in range(every):
        coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    done = int(optimizer.iterations.numpy())
    manager.save(checkpoint_number=done)
    say(f"PS_SAVED {done}")
say(f"PS_DONE {int(optimizer.iterations.numpy())}")
"""


def _chief_says(job: LocalJob, what: str) -> list[int]:
    text = job.logs[("chief", 0)].read_text(errors="replace")
    return [int(line.split()[1]) for line in text.splitlines() if line.startswith(what + " ")]


def _start_ps_tutorial(
    local_job, tmp_path: Path, name: str, every: int, grace: float
) -> tuple[LocalJob, Path]:
    """PS_TUTORIAL on a chief, a ps and a worker, saving every `every` steps: once it saved."""
    program = tmp_path / "ps_tutorial.py"
    program.write_text(PS_TUTORIAL)
    job = local_job(name, strategy="ps", workers=1, ps=1)
    job.program = [PYTHON, str(program), "100000", str(every)]
    job.env = {"GPU_K8S_GRACE_SECONDS": str(grace)}
    job.start()
    job.wait_for(lambda: _chief_says(job, "PS_SAVED"), what="a checkpoint")
    return job, program


def _ps_tutorial_resumes(job: LocalJob, program: Path, every: int) -> None:
    """The stopped gang's last checkpoint is one it reached; the new gang goes on from it.

    JobSet's new gang is told to end one checkpoint after the last one. JobSet's
    successPolicy then ends the job on the chief's success and deletes the servers, which
    join forever (here: killed).
    """
    saved = job.latest_checkpoint()
    # the last save may be on disk without its line: a stop between the program's save and
    # its print (the program handles no SIGTERM), never a save of a step not reached
    printed = _chief_says(job, "PS_SAVED")
    assert saved in printed + [printed[-1] + every] and saved >= every, job.output()

    job.program = [PYTHON, str(program), str(saved + every), str(every)]
    job.start()
    assert job.procs[("chief", 0)].wait(timeout=60) == 0, job.output()

    assert _chief_says(job, "PS_START") == [saved], job.output()  # resumed where it saved
    assert _chief_says(job, "PS_SAVED") == [saved + every], job.output()
    assert _chief_says(job, "PS_DONE") == [saved + every], job.output()


def test_a_ps_tutorial_program_drained_mid_training_is_stopped_uncounted_and_resumes(
    local_job, tmp_path
):
    """Issue 31 item 1, ParameterServerStrategy written by a user (PS_TUTORIAL), a worker drained.

    The drained worker's launcher marks it stopping and holds its SIGTERM (the chief's save
    reads the variables the ps serves); the chief's launcher sees the mark and stops the
    coordinator; then the ps and the worker are stopped. Every task exits 143 and JobSet
    restarts the gang without counting; the new coordinator restores the chief's last
    checkpoint and trains on to the end.
    """
    every, grace = 10, 6.0
    job, program = _start_ps_tutorial(local_job, tmp_path, "pstutorial", every, grace)

    drained = time.monotonic()
    job.procs[("worker", 0)].send_signal(signal.SIGTERM)  # its node is drained
    codes = job.wait(timeout=60)
    took = time.monotonic() - drained

    assert codes == {("chief", 0): 143, ("ps", 0): 143, ("worker", 0): 143}, job.output()
    assert took < grace, (took, job.output())  # every pod ended before kubelet's SIGKILL
    assert _jobset_action("ps", codes, drained={("worker", 0)}) == (
        "RestartJobSetAndIgnoreMaxRestarts"
    )
    _ps_tutorial_resumes(job, program, every)


def test_a_ps_tutorial_program_whose_whole_gang_is_preempted_is_stopped_uncounted_and_resumes(
    local_job, tmp_path
):
    """Issue 31 item 1, preemption: PS_TUTORIAL's chief, ps and worker stopped at once.

    Kueue preempting the Workload deletes the gang's pods together: kubelet sends SIGTERM
    to every task at the same moment (review31 gap 5). Each launcher marks its task
    stopping; the ps's and the worker's hold their SIGTERM while the chief's stops the
    coordinator (it handles no SIGTERM), then they stop their servers. Every task exits
    143 before the grace period ends, JobSet restarts the gang without counting, and the
    new coordinator restores the chief's last checkpoint.
    """
    every, grace = 10, 6.0
    job, program = _start_ps_tutorial(local_job, tmp_path, "pspreempt", every, grace)

    preempted = time.monotonic()
    for proc in job.procs.values():  # the pods are deleted together
        proc.send_signal(signal.SIGTERM)
    codes = job.wait(timeout=60)
    took = time.monotonic() - preempted

    assert codes == {("chief", 0): 143, ("ps", 0): 143, ("worker", 0): 143}, job.output()
    assert took < grace, (took, job.output())  # every pod ended before kubelet's SIGKILL
    # deleted pods carry no DisruptionTarget (see the Keras preemption test): each 143
    # fails its Job by rule 1, uncounted by JobSet; had they carried it, each Job would
    # replace its pods itself (rule 0), uncounted too
    assert _jobset_action("ps", codes, drained=set()) == "RestartJobSetAndIgnoreMaxRestarts"
    assert _jobset_action("ps", codes, drained=set(codes)) == "none"
    for task in (("ps", 0), ("worker", 0)):  # their own SIGTERM held until the chief exited
        log = job.logs[task].read_text(errors="replace")
        assert "the chief's task exited: SIGTERM forwarded" in log, job.output()
    _ps_tutorial_resumes(job, program, every)
