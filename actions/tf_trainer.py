#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The built-in example trainer: an MNIST-size classifier trained with tf.distribute.

It runs under whatever `TF_CONFIG` the launcher (`tf_launcher.py`) exported:

- workers only: MultiWorkerMirroredStrategy, a custom loop around `strategy.run`;
  worker 0 is the chief. Every worker takes part in each save (TensorFlow requires it);
  only the chief's copy lands in the checkpoint directory, the others write to a
  temporary directory and delete it.
- `chief` + `ps` + `worker`: ParameterServerStrategy. The chief is the coordinator: it
  schedules steps on the workers with a `ClusterCoordinator`, checkpoints and decides when
  training is finished. `ps` and `worker` tasks only serve (`tf.distribute.Server`). They
  do not block forever: they poll the job's progress file and exit 0 once the chief has
  written `state: finished` for at least the `--steps` they were started with (a stale
  file of an earlier, shorter run does not stop them). The charm may also just stop them.
- no `TF_CONFIG`: the default (single process) strategy.

Data: the .npz of the dataset named by `train dataset=<name>` (GPU_K8S_DATASET_DIR:
`mnist.npz` or its only `.npz`), else `<data>/datasets/mnist.npz` (Keras layout: x_train,
y_train) when present, otherwise
synthetic MNIST-size data (28x28 inputs, 10 classes) generated from `--seed`: each class
has its own mean image plus Gaussian noise, so the loss really falls.

Outputs (directories from the launcher's environment, or flags):
- checkpoints every `--checkpoint-every` steps and at the end (`tf.train.CheckpointManager`
  in GPU_K8S_CHECKPOINT_DIR); a restarted job resumes from the latest one;
- TensorBoard summaries (loss, examples/s) in GPU_K8S_LOG_DIR;
- a JSON progress file GPU_K8S_PROGRESS_FILE, written atomically by the chief, and the
  same JSON printed to the chief's stdout as one line `GPU_K8S_PROGRESS {json}` (the charm
  reads pod logs):
  {"step", "steps", "loss", "examples_per_sec", "time", "resumed_from", "state",
   "loss_history", ...}, state being "running", "finished" or "stopped" (SIGTERM).

SIGTERM (a deleted, preempted or drained pod, or a peer's stop relayed by the launcher,
which owns the protocol: tf_launcher.py) stops a task within a step with exit status
143, after a checkpoint: the ParameterServerStrategy chief saves alone at the end of its
chunk (the launcher keeps the ps and workers serving until the chief has exited); under
MultiWorkerMirroredStrategy the stop is agreed in the step itself (each worker adds "I was
told to stop" to the step's all-reduce), so every worker sees it after the same step and
they save that step together, as a collective save needs (what TensorFlow's
PreemptionCheckpointHandler does through its coordination service). A job stopped so
(`scale`, `stop`, Kueue preemption, JobSet's gang restart) loses no step.

A worker that dies without SIGTERM (killed, out of memory, its node lost) is noticed by
its peers when TensorFlow's coordination service misses its heartbeats (10 s by default;
GPU_K8S_HEARTBEAT_TIMEOUT_SECONDS sets it, see `configure_heartbeat`): their next
all-reduce fails and they exit non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import deque
from pathlib import Path
from typing import NoReturn

STARTED = time.monotonic()
# Quieter TensorFlow start-up; must be set before the import.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.core.framework import summary_pb2  # noqa: E402

INPUTS = 28 * 28
CLASSES = 10
HIDDEN = 64
HISTORY = 50
EVAL_FRACTION = 0.1  # held out of a .npz without x_test/y_test
EVAL_MAX = 10_000  # evaluation examples at most
EVAL_SYNTHETIC = 2_000
MODEL_SPEC = "model.json"  # next to the checkpoints: inputs, classes, scale
PROGRESS_INTERVAL = 1.0  # seconds between progress-file writes on the chief
PROGRESS_MARKER = "GPU_K8S_PROGRESS "  # prefix of the chief's progress lines in its log


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the trainer's flags (directories default to the launcher's environment)."""
    env = os.environ
    p = argparse.ArgumentParser(description="The built-in example trainer of gpu-k8s.")
    p.add_argument(
        "--steps",
        type=int,
        default=env.get("GPU_K8S_STEPS") or "1000",
        help="train until this global step (default: GPU_K8S_STEPS or 1000)",
    )
    p.add_argument("--batch-size", type=int, default=64, help="global batch size")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps between saves")
    p.add_argument("--learning-rate", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="TF intra/inter op threads (0=auto)")
    p.add_argument("--checkpoint-dir", default=env.get("GPU_K8S_CHECKPOINT_DIR", "checkpoints"))
    p.add_argument("--log-dir", default=env.get("GPU_K8S_LOG_DIR", "logs"))
    p.add_argument("--progress-file", default=env.get("GPU_K8S_PROGRESS_FILE", "progress.json"))
    p.add_argument("--data-dir", default=env.get("GPU_K8S_DATA_DIR", "/data"))
    p.add_argument(
        "--export-dir",
        default=env.get("GPU_K8S_EXPORT_DIR", ""),
        help="where the chief writes the SavedModel at the end (versions by step)",
    )
    p.add_argument(
        "--export-only",
        action="store_true",
        help="export the latest checkpoint of --checkpoint-dir to --export-dir, and stop",
    )
    p.add_argument(
        "--dataset-dir",
        default=env.get("GPU_K8S_DATASET_DIR", ""),
        help="an imported dataset's directory (train dataset=<name>); its .npz is read",
    )
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "checkpoint_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.learning_rate <= 0:
        p.error("--learning-rate must be positive")
    return args


# ---------------------------------------------------------------------------- model + data


class Classifier(tf.Module):
    """An inputs-64-classes perceptron with SGD-with-momentum state, plain tf.Variables."""

    def __init__(self, seed: int, inputs: int = INPUTS, classes: int = CLASSES):
        super().__init__(name="classifier")

        def init(shape, salt):
            scale = (2.0 / shape[0]) ** 0.5
            return tf.random.stateless_normal(shape, seed=(seed, salt), stddev=scale)

        self.w1 = tf.Variable(init([inputs, HIDDEN], 1), name="w1")
        self.b1 = tf.Variable(tf.zeros([HIDDEN]), name="b1")
        self.w2 = tf.Variable(init([HIDDEN, classes], 2), name="w2")
        self.b2 = tf.Variable(tf.zeros([classes]), name="b2")
        self.params = [self.w1, self.b1, self.w2, self.b2]
        self.velocity = [
            tf.Variable(tf.zeros_like(v), trainable=False, name=f"m_{i}")
            for i, v in enumerate(self.params)
        ]

    def __call__(self, x):
        """Return the logits for a batch of flattened, scaled inputs."""
        hidden = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
        return tf.matmul(hidden, self.w2) + self.b2

    def apply(self, grads, learning_rate: float, momentum: float = 0.9):
        """One SGD-with-momentum update."""
        for var, vel, grad in zip(self.params, self.velocity, grads, strict=True):
            vel.assign(momentum * vel + grad)
            var.assign_sub(learning_rate * vel)


class Exported(tf.Module):
    """What `export` saves: the trained weights and one serving function.

    `serve(x)` takes raw inputs (float32 [batch, inputs], pixel values as in the data)
    and returns {"probabilities": [batch, classes], "class": [batch]}; it scales the
    inputs as training did. Saved as the SavedModel's `serving_default` signature, which
    TensorFlow Serving answers at /v1/models/<name>:predict.
    """

    def __init__(self, params, scale: float):
        super().__init__(name="exported")
        self.w1, self.b1, self.w2, self.b2 = (tf.Variable(p, trainable=False) for p in params)
        self.scale = tf.Variable(tf.constant(scale, tf.float32), trainable=False)
        inputs = int(np.shape(params[0])[0])
        spec = tf.TensorSpec([None, inputs], tf.float32, name="x")
        self.serve = tf.function(self._serve, input_signature=[spec])

    def _serve(self, x):
        hidden = tf.nn.relu(tf.matmul(x / self.scale, self.w1) + self.b1)
        logits = tf.matmul(hidden, self.w2) + self.b2
        return {
            "probabilities": tf.nn.softmax(logits),
            "class": tf.argmax(logits, axis=1, output_type=tf.int32),
        }


def _dataset_file(dataset_dir: str) -> Path:
    """The .npz of an imported dataset: mnist.npz, or its only .npz file."""
    directory = Path(dataset_dir)
    preferred = directory / "mnist.npz"
    if preferred.is_file():
        return preferred
    found = sorted(directory.rglob("*.npz"))
    if len(found) != 1:
        raise ValueError(
            f"dataset {directory} has {len(found)} .npz files; the built-in trainer reads "
            "mnist.npz or a single .npz (x_train, y_train): name it so, or read the "
            "directory (GPU_K8S_DATASET_DIR) from your own command"
        )
    return found[0]


class Data:
    """Training and held-out evaluation examples: from a .npz, or synthetic.

    A .npz in Keras' layout: `x_train` (any shape per example, flattened here) and
    `y_train` (class ids), and `x_test`/`y_test` when it has them (Keras' mnist.npz does);
    without them the last EVAL_FRACTION of a seeded shuffle is held out. Inputs are scaled
    by the training set's largest value (255 for 8-bit images, 16 for scikit-learn's
    digits). Synthetic data: MNIST-size, each class its own mean image plus Gaussian
    noise, so the loss really falls; its evaluation set is drawn apart from training's.
    """

    def __init__(self, seed: int, path: Path | None = None):
        self.path = path
        rng = np.random.default_rng(seed)
        if path is None:
            self.inputs, self.classes, self.scale = INPUTS, CLASSES, 1.0
            self.means = rng.normal(0.0, 0.1, (CLASSES, INPUTS)).astype(np.float32)
            held = np.random.default_rng(seed + 7919)
            self.y_eval = held.integers(0, CLASSES, EVAL_SYNTHETIC).astype(np.int32)
            noise = held.normal(0.0, 1.0, (EVAL_SYNTHETIC, INPUTS)).astype(np.float32)
            self.x_eval = self.means[self.y_eval] + noise
            self.x = self.y = None
            return
        with np.load(path) as f:
            x, y = f["x_train"], f["y_train"]
            test = (f["x_test"], f["y_test"]) if "x_test" in f and "y_test" in f else None
        if len(x) != len(y) or len(x) < 10:
            raise ValueError(f"{path}: x_train and y_train must match in length (>= 10)")
        x = x.reshape(len(x), -1)
        if test is None:
            order = rng.permutation(len(x))
            held = max(1, int(len(x) * EVAL_FRACTION))
            test = (x[order[-held:]], y[order[-held:]])
            x, y = x[order[:-held]], y[order[:-held]]
        self.x, self.y = x.astype(np.float32), y.astype(np.int32)
        self.x_eval = test[0].reshape(len(test[0]), -1).astype(np.float32)[:EVAL_MAX]
        self.y_eval = test[1].astype(np.int32)[:EVAL_MAX]
        self.inputs = self.x.shape[1]
        self.classes = int(max(self.y.max(), self.y_eval.max())) + 1
        self.scale = float(max(self.x.max(), 1.0))
        print(
            f"data: {len(self.x)} examples from {path} ({len(self.y_eval)} held out, "
            f"{self.inputs} inputs, {self.classes} classes)",
            flush=True,
        )

    @classmethod
    def load(cls, seed: int, data_dir: str, dataset_dir: str = "") -> Data:
        """The dataset `train dataset=` named, else <data>/datasets/mnist.npz, else synthetic."""
        if dataset_dir:
            return cls(seed, _dataset_file(dataset_dir))
        path = Path(data_dir) / "datasets" / "mnist.npz"
        if path.is_file():
            return cls(seed, path)
        print(f"data: synthetic MNIST-size batches ({path} not found)", flush=True)
        return cls(seed)

    def spec(self) -> dict:
        """What a model for this data is (kept next to the checkpoints, for `export`)."""
        return {"inputs": self.inputs, "classes": self.classes, "scale": self.scale}

    def evaluate(self, model) -> tuple[float, float]:
        """(loss, accuracy) of the model on the held-out examples."""
        logits = model(tf.constant(self.x_eval / self.scale))
        labels = tf.constant(self.y_eval)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        )
        right = tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels)
        return float(loss), float(tf.reduce_mean(tf.cast(right, tf.float32)))

    def dataset_fn(self, seed: int, global_batch: int, start_step: int):
        """A `dataset_fn(input_context)` giving each input pipeline its own batches."""
        means = tf.constant(self.means) if self.x is None else None
        scale, classes, inputs = self.scale, self.classes, self.inputs

        def dataset_fn(ctx: tf.distribute.InputContext | None = None):
            pipelines = ctx.num_input_pipelines if ctx else 1
            pipeline = ctx.input_pipeline_id if ctx else 0
            batch = ctx.get_per_replica_batch_size(global_batch) if ctx else global_batch
            if means is None:
                assert self.x is not None and self.y is not None  # read from a .npz
                ds = tf.data.Dataset.from_tensor_slices((self.x, self.y))
                ds = ds.shard(pipelines, pipeline)
                ds = ds.shuffle(10_000, seed=seed + start_step).repeat().batch(batch)
                ds = ds.map(lambda xb, yb: (xb / scale, yb))
            else:

                def synthetic(i):
                    salt = i * pipelines + pipeline
                    seeds = tf.stack([tf.constant(seed, tf.int64), salt])
                    labels = tf.random.stateless_uniform(
                        [batch], seed=seeds, maxval=classes, dtype=tf.int32
                    )
                    noise = tf.random.stateless_normal([batch, inputs], seed=seeds + [1, 0])
                    return tf.gather(means, labels) + noise, labels

                ds = tf.data.Dataset.range(start_step, 2**62).map(synthetic)
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.OFF
            )
            return ds.with_options(options).prefetch(2)

        return dataset_fn


def export(params, spec: dict, export_dir: str, step: int) -> Path:
    """Write the model as SavedModel version `step` under `export_dir`; return its path.

    Versions are numbered directories, as TensorFlow Serving's file system source expects
    (it serves the highest). A version appears whole: it is written beside and renamed,
    readable by every user (mkdtemp makes it 0700; serving, fetch and upload pods may run
    as another uid after a `run-as` change).
    """
    target = Path(export_dir) / str(step)
    if target.is_dir():
        return target
    values = [p.numpy() for p in params]  # a plain copy: no strategy in the saved graph
    module = Exported(values, spec["scale"])
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{step}.", dir=target.parent))
    try:
        tf.saved_model.save(
            module,
            str(staging),
            signatures={"serving_default": module.serve.get_concrete_function()},
        )
        staging.chmod(0o755)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    print(f"exported SavedModel version {step} to {target}", flush=True)
    return target


# ---------------------------------------------------------------------------- progress


class Progress:
    """Tracks throughput and writes the progress file + TensorBoard summaries (chief only)."""

    def __init__(self, args, global_batch: int, resumed_from: int, enabled: bool):
        self.path = Path(args.progress_file)
        self.steps = args.steps
        self.batch = global_batch
        self.resumed_from = resumed_from
        self.enabled = enabled
        self.history: deque[float] = deque(maxlen=HISTORY)
        self.history_step = -1
        self.sample_every = max(1, args.steps // HISTORY)
        self.first_loss: float | None = None
        self.started = time.time()
        self.last_time = time.monotonic()
        self.last_step = resumed_from
        self.first_time: float | None = None  # after the first (tracing) step
        self.first_step = resumed_from
        self.examples_per_sec = 0.0
        self.evaluation: dict = {}  # the last held-out evaluation: step, loss, accuracy
        self.exported = ""  # the SavedModel written at the end
        self.writer = tf.summary.create_file_writer(args.log_dir) if enabled else None

    def evaluated(self, step: int, loss: float, accuracy: float) -> None:
        """Record an evaluation on the held-out data (progress file and TensorBoard)."""
        self.evaluation = {"eval_step": step, "eval_loss": round(loss, 6)}
        self.evaluation["eval_accuracy"] = round(accuracy, 6)
        print(f"eval at step {step}: loss {loss:.4f} accuracy {accuracy:.4f}", flush=True)
        if self.writer is not None:
            with self.writer.as_default(step=step):
                write_scalar("eval_loss", loss)
                write_scalar("eval_accuracy", accuracy)
            self.writer.flush()

    def due(self) -> bool:
        """Whether enough time has passed for the next report."""
        return time.monotonic() - self.last_time >= PROGRESS_INTERVAL

    def mark_first_step(self, step: int) -> None:
        """Start the average-throughput clock once the step function is traced."""
        if self.first_time is None:
            self.first_time, self.first_step = time.monotonic(), step
            self.last_time, self.last_step = self.first_time, step

    def sample_due(self, step: int) -> bool:
        """Whether the loss at `step` belongs in the loss history."""
        return step % self.sample_every == 0

    def record(self, step: int, loss: float) -> None:
        """Add the loss at `step` to the loss history."""
        if self.first_loss is None:
            self.first_loss = loss
        if step != self.history_step:
            self.history.append(round(loss, 6))
            self.history_step = step

    def report(self, step: int, loss: float, state: str = "running") -> None:
        """Write the progress file, the summaries and a stdout line for `step`."""
        now = time.monotonic()
        if step > self.last_step and now > self.last_time:
            self.examples_per_sec = (step - self.last_step) * self.batch / (now - self.last_time)
        self.last_time, self.last_step = now, step
        if loss == loss:  # not NaN (NaN = nothing trained in this run)
            self.record(step, loss)
        if not self.enabled:
            return
        average = 0.0
        if self.first_time is not None and step > self.first_step and now > self.first_time:
            average = (step - self.first_step) * self.batch / (now - self.first_time)
        data = {
            "step": step,
            "steps": self.steps,
            "loss": loss if math.isfinite(loss) else None,
            "first_loss": self.first_loss,
            "examples_per_sec": round(self.examples_per_sec, 1),
            "avg_examples_per_sec": round(average, 1),
            "time": time.time(),
            "elapsed": round(time.time() - self.started, 3),
            "resumed_from": self.resumed_from,
            "state": state,
            "global_batch_size": self.batch,
            "loss_history": list(self.history),
            **self.evaluation,
        }
        if self.exported:
            data["export"] = self.exported
        write_json_atomic(self.path, data)
        # The charm reads progress from the chief's log (it cannot mount the volume).
        print(PROGRESS_MARKER + json.dumps(data, separators=(",", ":")), flush=True)
        if self.writer is None:
            return
        with self.writer.as_default(step=step):
            write_scalar("loss", loss)
            write_scalar("examples_per_sec", self.examples_per_sec)
        self.writer.flush()
        print(
            f"step {step}/{self.steps} loss {loss:.4f} "
            f"{self.examples_per_sec:.0f} examples/s [{state}]",
            flush=True,
        )


def write_scalar(name: str, value: float) -> None:
    """Write a TensorBoard scalar with core TF only (`tf.summary.scalar` needs tensorboard)."""
    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    metadata.data_class = summary_pb2.DATA_CLASS_SCALAR
    tf.summary.write(name, tf.constant(value, tf.float32), metadata=metadata)


def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON to `path` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_progress(path: Path) -> dict | None:
    """Return the progress file's contents, or None when absent or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------- checkpoints


class Checkpoints:
    """Saves and restores model + step; only the chief's saves persist."""

    def __init__(self, checkpoint: tf.train.Checkpoint, directory: str, is_chief: bool):
        self.checkpoint = checkpoint
        self.is_chief = is_chief
        self.directory = directory
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)

    def restore(self) -> int:
        """Restore the latest checkpoint if any; return the step it holds (0 if none)."""
        latest = tf.train.latest_checkpoint(self.directory)
        if latest is None:
            return 0
        self.checkpoint.restore(latest).assert_existing_objects_matched()
        return int(self.checkpoint.step.numpy())

    def restore_step(self) -> int:
        """The step of the latest checkpoint on disk (0 if none), without restoring it."""
        latest = tf.train.latest_checkpoint(self.directory)
        return int(latest.rsplit("-", 1)[1]) if latest else 0

    def save(self, step: int) -> None:
        """Save at `step` (every worker must call this in MultiWorkerMirroredStrategy)."""
        if self.is_chief:
            self.manager.save(checkpoint_number=step)
            return
        scratch = tempfile.mkdtemp(prefix="tf-trainer-ckpt-")
        try:
            self.checkpoint.write(os.path.join(scratch, "ckpt"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------------------- strategies


def _loss_fn(model, x, y, global_batch):
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=model(x))
    return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)


def restore_or_start(strategy, args, data: Data, global_batch: int, is_chief: bool):
    """Create the model under the strategy and restore the latest checkpoint.

    The chief keeps the model's shape (Data.spec) next to the checkpoints, for `export`.

    Returns:
        (model, step variable, Checkpoints, Progress, step to start from)
    """
    with strategy.scope():
        model = Classifier(args.seed, data.inputs, data.classes)
        step_var = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="step")
    ckpt = tf.train.Checkpoint(model=model, step=step_var)
    checkpoints = Checkpoints(ckpt, args.checkpoint_dir, is_chief)
    if is_chief:
        write_json_atomic(Path(args.checkpoint_dir) / MODEL_SPEC, data.spec())
    start = checkpoints.restore()
    announce(start, args)
    progress = Progress(args, global_batch, start, enabled=is_chief)
    return model, step_var, checkpoints, progress, start


def checkpointed(model, data: Data, progress: Progress, args, step: int, final: bool) -> None:
    """After a save, on the chief: evaluate on the held-out data; at the end, export."""
    if not progress.enabled:
        return
    loss, accuracy = data.evaluate(model)
    progress.evaluated(step, loss, accuracy)
    if final:
        finished_before(model, data, progress, args, step)


def finished_before(model, data: Data, progress: Progress, args, step: int) -> None:
    """On the chief, the final export if it is missing: at the end, or on a finished run.

    `checkpointed` calls it after the last save; a run that finds every step done, first.

    A chief killed between its final checkpoint and the export's rename left no version
    `step` (export writes it beside and renames it, so never half of one), and its
    restart restores that checkpoint: it exports now, or the job would complete with no
    SavedModel. A version already there is kept as it is (export returns it). The killed
    export's staging directory (`.<step>.*`) stays: an `export` action may be writing
    one beside it, and nothing reads a name that is not a number (TensorFlow Serving,
    fetch-model and model_upload.py list numeric versions only).
    """
    if progress.enabled and args.export_dir:
        progress.exported = str(export(model.params, data.spec(), args.export_dir, step))


def mirrored_step_fn(strategy, model, step_var, iterator, global_batch, learning_rate):
    """One synchronous step: per-replica gradients, all-reduce, the same update everywhere.

    `stopping` (1.0 on a worker that got SIGTERM, else 0.0) is all-reduced with the loss:
    the step returns (loss, how many replicas are stopping), the same on every worker.
    """

    @tf.function
    def train_step(stopping):
        def replica_step(x, y, stopping):
            with tf.GradientTape() as tape:
                loss = _loss_fn(model, x, y, global_batch)
            grads = tape.gradient(loss, model.params)
            context = tf.distribute.get_replica_context()
            # computed on the replica (a tensor from outside has no device to reduce from)
            stop = tf.zeros_like(loss) + stopping
            return context.all_reduce("sum", [loss, stop, *grads])

        x, y = next(iterator)
        reduced = strategy.run(replica_step, args=(x, y, stopping))
        local = [strategy.experimental_local_results(t)[0] for t in reduced]
        model.apply(local[2:], learning_rate)
        step_var.assign_add(1)
        return local[0], local[1]

    return train_step


def rounded_batch(batch: int, replicas: int) -> int:
    """Round the global batch up to a multiple of the replicas so any worker count works."""
    rounded = -(-batch // replicas) * replicas
    if rounded != batch:
        print(f"global batch {batch} -> {rounded} for {replicas} replicas", flush=True)
    return rounded


def train_mirrored(strategy, args, is_chief: bool) -> int:
    """Synchronous training (MultiWorkerMirroredStrategy or the default strategy)."""
    global_batch = rounded_batch(args.batch_size, strategy.num_replicas_in_sync)
    data = Data.load(args.seed, args.data_dir, args.dataset_dir)
    model, step_var, checkpoints, progress, start = restore_or_start(
        strategy, args, data, global_batch, is_chief
    )
    if start >= args.steps:
        finished_before(model, data, progress, args, start)
        progress.report(start, float("nan"), "finished")
        return 0
    dataset = strategy.distribute_datasets_from_function(
        data.dataset_fn(args.seed, global_batch, start)
    )
    train_step = mirrored_step_fn(
        strategy, model, step_var, iter(dataset), global_batch, args.learning_rate
    )
    step, loss = start, tf.constant(float("nan"))
    while step < args.steps:
        try:
            loss, stopping = train_step(tf.constant(1.0 if terminated() else 0.0))
        except tf.errors.OpError:
            if terminated():  # a peer went before agreeing to stop: our all-reduce failed
                exit_terminated(progress, step, float(loss))
            exit_failed()  # a peer died: its collectives are gone
        step += 1
        if float(stopping) > 0:  # every worker sees this after the same step: save it
            checkpoints.save(step)
            exit_terminated(progress, step, float(loss))
        if step % args.checkpoint_every == 0 or step == args.steps:
            checkpoints.save(step)
            checkpointed(model, data, progress, args, step, final=step == args.steps)
        if step == start + 1:
            progress.mark_first_step(step)
        if is_chief and (step == start + 1 or progress.sample_due(step)):
            progress.record(step, float(loss))
        if is_chief and step < args.steps and progress.due():
            progress.report(step, float(loss), "running")
    progress.report(step, float(loss), "finished")
    return 0


def train_coordinator(strategy, args) -> int:
    """The chief of ParameterServerStrategy: schedule steps on workers, save, report."""
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    global_batch = args.batch_size
    data = Data.load(args.seed, args.data_dir, args.dataset_dir)
    model, step_var, checkpoints, progress, start = restore_or_start(
        strategy, args, data, global_batch, is_chief=True
    )
    if start >= args.steps:
        finished_before(model, data, progress, args, start)
        progress.report(start, float("nan"), "finished")
        return 0
    dataset_fn = data.dataset_fn(args.seed, global_batch, start)
    per_worker = coordinator.create_per_worker_dataset(lambda: dataset_fn(None))
    per_worker_iter = iter(per_worker)

    @tf.function
    def worker_step(iterator):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = _loss_fn(model, x, y, global_batch)
            model.apply(tape.gradient(loss, model.params), args.learning_rate)
            step_var.assign_add(1)
            return loss

        x, y = next(iterator)
        return strategy.run(replica_step, args=(x, y))

    step, loss = start, float("nan")
    chunk = max(1, min(args.checkpoint_every, 20))
    while step < args.steps:
        count = min(chunk, args.steps - step)
        try:
            results = [
                coordinator.schedule(worker_step, args=(per_worker_iter,)) for _ in range(count)
            ]
            coordinator.join()
            chunk_loss = float(results[-1].fetch())
        except tf.errors.OpError:
            if terminated():  # a ps or worker left before the launcher let it: no save
                exit_terminated(progress, checkpoints.restore_step(), loss)
            raise
        previous, step = step, step + count
        progress.mark_first_step(step)
        loss = chunk_loss
        progress.record(step, loss)
        if step // args.checkpoint_every > previous // args.checkpoint_every or step == args.steps:
            checkpoints.save(step)
            checkpointed(model, data, progress, args, step, final=step == args.steps)
        if terminated():
            checkpoints.save(step)  # the coordinator alone holds the state: keep it
            exit_terminated(progress, step, loss)
        if step < args.steps and progress.due():
            progress.report(step, loss, "running")
    progress.report(step, loss, "finished")
    return 0


# The fewest threads a ps or worker server's compute pool may have. TensorFlow runs each
# Enqueue request of its eager service on that pool and holds the thread until the
# function it asked for is done (tensorflow/core/distributed_runtime/rpc/eager/
# grpc_eager_service_impl.h EnqueueHandler, `env_->compute_pool->Schedule`); the pool has
# inter_op_parallelism_threads threads, 0 meaning TF_NUM_INTEROP_THREADS or else the CPUs
# the process may run on (core/common_runtime/process_util.cc
# NumInterOpThreadsFromSessionOptions). A task that sees one CPU (a cpuset of one, a
# one-vCPU node) then never answers the chief's first step: measured with TF 2.21, a
# worker pinned to one CPU sat 240 s in KernelAndDeviceFunc::Run on the pool's only
# thread, and the same gang finished its test in 18 s with two.
SERVER_MIN_THREADS = 2


def server_config() -> tf.compat.v1.ConfigProto:
    """A ps or worker server's configuration: TensorFlow's default pool, but never one thread."""
    few = len(os.sched_getaffinity(0)) < SERVER_MIN_THREADS
    return tf.compat.v1.ConfigProto(inter_op_parallelism_threads=SERVER_MIN_THREADS if few else 0)


def serve(cluster_resolver, args) -> int:
    """A `ps` or `worker` task of ParameterServerStrategy: serve until the chief is done."""
    task_type, task_id = cluster_resolver.task_type, cluster_resolver.task_id
    server = tf.distribute.Server(
        cluster_resolver.cluster_spec(),
        job_name=task_type,
        task_index=task_id,
        protocol=cluster_resolver.rpc_layer or "grpc",
        config=server_config(),
        start=True,
    )
    print(f"{task_type} {task_id} serving at {server.target}", flush=True)
    path = Path(args.progress_file)
    while True:
        if terminated():
            exit_terminated(None, 0, float("nan"))
        done = read_progress(path)
        if done and done.get("state") == "finished" and done.get("step", 0) >= args.steps:
            print(f"{task_type} {task_id}: chief finished at step {done['step']}", flush=True)
            # The gRPC server cannot be stopped cleanly in TF 2; leave without teardown.
            sys.stdout.flush()
            os._exit(0)
        time.sleep(0.5)


_TERMINATED: list[int] = []


def handle_sigterm() -> None:
    """Turn SIGTERM (pod deletion) into a prompt, clean stop.

    MultiWorkerMirroredStrategy's coordination service installs a SIGTERM handler of its
    own that swallows the signal (it expects `PreemptionCheckpointHandler`), which would
    keep a deleted pod alive until Kubernetes kills it after the grace period. Install
    ours after the strategy exists; the training loops check `terminated()` every step.
    """
    signal.signal(signal.SIGTERM, lambda signum, _frame: _TERMINATED.append(signum))


def terminated() -> bool:
    """Whether SIGTERM has arrived."""
    return bool(_TERMINATED)


def exit_terminated(progress: Progress | None, step: int, loss: float) -> None:
    """Record the stop in the progress file (chief) and leave with status 143."""
    print(f"SIGTERM received at step {step}: stopping", flush=True)
    if progress is not None:
        progress.report(step, loss, "stopped")
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter teardown: it can block on collectives with peers that are gone.
    os._exit(143)


def exit_failed() -> NoReturn:
    """Print the exception being handled and leave with status 1, as an uncaught one would.

    No interpreter teardown, as in `exit_terminated`: after a peer died, TensorFlow's
    teardown (the coordination service's shutdown) waits seconds for a peer that is gone.
    """
    traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


# How long a MultiWorkerMirroredStrategy worker that finished waits for the chief's
# `finished` report (the chief evaluates and exports after the last save) before it leaves
# without it.
CHIEF_WAIT = 120.0


def leave_finished(code: int, progress_file: Path, steps: int, is_chief: bool) -> NoReturn:
    """End a finished distributed task without interpreter teardown.

    Under MultiWorkerMirroredStrategy every collective is over once the loop ends (the
    last save is one); the ParameterServerStrategy chief has joined every step it
    scheduled; what the chief writes is flushed as it is written. TensorFlow's teardown
    would still shut the coordination service down (MWMS) or try to reach the ps and
    workers that already left (PSS), which kept tasks alive for seconds after the job
    finished (measured with TF 2.21: an MWMS chief 5 s, its worker until it noticed the
    chief's service was gone, 9.5 s; a PSS chief 2.3 s). An MWMS worker other than the
    chief first waits for the chief's `finished` report, so its heartbeats keep coming
    while the chief evaluates and exports.
    """
    if not is_chief:
        deadline = time.monotonic() + CHIEF_WAIT
        while time.monotonic() < deadline:
            done = read_progress(progress_file)
            if done and done.get("state") == "finished" and done.get("step", 0) >= steps:
                break
            time.sleep(0.2)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def announce(start: int, args) -> None:
    """Say where training starts."""
    ready = f"ready {time.monotonic() - STARTED:.1f}s after start"
    if start:
        print(
            f"resumed from checkpoint at step {start} (target {args.steps}); {ready}", flush=True
        )
    else:
        print(f"starting from step 0 (target {args.steps}); {ready}", flush=True)


def export_latest(args) -> int:
    """`--export-only`: the latest checkpoint as a SavedModel version (the export action)."""
    try:
        spec = json.loads((Path(args.checkpoint_dir) / MODEL_SPEC).read_text())
    except (OSError, ValueError):
        print(
            f"export failed: no {MODEL_SPEC} in {args.checkpoint_dir}: export works for jobs "
            "of the built-in trainer that saved a checkpoint; your own code writes its "
            "SavedModel to GPU_K8S_EXPORT_DIR",
            flush=True,
        )
        return 1
    latest = tf.train.latest_checkpoint(args.checkpoint_dir)
    if latest is None or not args.export_dir:
        print(f"export failed: no checkpoint in {args.checkpoint_dir}", flush=True)
        return 1
    model = Classifier(args.seed, spec["inputs"], spec["classes"])
    step = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="step")
    tf.train.Checkpoint(model=model, step=step).restore(latest).assert_existing_objects_matched()
    target = export(model.params, spec, args.export_dir, int(step.numpy()))
    print(f"GPU_K8S_EXPORT {json.dumps({'step': int(step.numpy()), 'path': str(target)})}")
    return 0


# How long MultiWorkerMirroredStrategy's coordination service waits for a task's heartbeat
# before it declares the task dead and aborts every peer's collectives: a worker that died
# without a word (SIGKILL, OOM, a lost node) is noticed only then. Unset, TensorFlow's own
# default stands: 10 s (kDefaultHeartbeatTimeoutMs, checked once a second by
# CheckStaleness; openxla/xla xla/tsl/distributed_runtime/coordination/
# coordination_service.cc, which TF 2.21 builds). The charm never sets it; the functional
# tests shorten it so a killed worker's peers fail in a few seconds instead of 10-15.
HEARTBEAT_TIMEOUT_ENV = "GPU_K8S_HEARTBEAT_TIMEOUT_SECONDS"


def configure_heartbeat(resolver) -> None:
    """Give the coordination service GPU_K8S_HEARTBEAT_TIMEOUT_SECONDS, when it is set.

    MultiWorkerMirroredStrategy configures the service itself only when nothing has
    (collective_all_reduce_strategy.py `_initialize_multi_worker`: "if
    context.context().coordination_service is None"), with the leader and the coordinated
    jobs below; this configures the same service first, with the heartbeat timeout added
    (CoordinationServiceConfig.heartbeat_timeout_in_ms; the agents send heartbeats at
    half of it). Must run before the strategy is created.
    """
    raw = os.environ.get(HEARTBEAT_TIMEOUT_ENV, "").strip()
    if not raw:
        return
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        sys.exit(f"{HEARTBEAT_TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    # TensorFlow's own modules, as collective_all_reduce_strategy.py imports them (not in
    # the public API, nor in the type stubs)
    coordination_config_pb2 = importlib.import_module(
        "tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2"
    )
    multi_worker_util = importlib.import_module("tensorflow.python.distribute.multi_worker_util")
    context = importlib.import_module("tensorflow.python.eager.context")

    spec = resolver.cluster_spec()
    jobs = [
        coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
        for job in ("chief", "worker")
        if job in spec.jobs
    ]
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=jobs,
        heartbeat_timeout_in_ms=int(seconds * 1000),
    )


def main(argv: list[str] | None = None) -> int:
    """Pick the strategy from TF_CONFIG and train."""
    args = parse_args(argv)
    print(f"tensorflow {tf.__version__} imported in {time.monotonic() - STARTED:.1f}s", flush=True)
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    if args.export_only:
        return export_latest(args)
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster = tf_config.get("cluster", {})
    task = tf_config.get("task", {})
    if "ps" in cluster:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        if task.get("type") in ("ps", "worker"):
            handle_sigterm()
            return serve(resolver, args)
        strategy = tf.distribute.ParameterServerStrategy(resolver)
        handle_sigterm()
        code = train_coordinator(strategy, args)
        leave_finished(code, Path(args.progress_file), args.steps, is_chief=True)
    if cluster.get("worker"):
        configure_heartbeat(tf.distribute.cluster_resolver.TFConfigClusterResolver())
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        handle_sigterm()
        is_chief = task.get("type") in ("worker", None) and task.get("index", 0) == 0
        code = train_mirrored(strategy, args, is_chief)
        leave_finished(code, Path(args.progress_file), args.steps, is_chief)
    return train_mirrored(tf.distribute.get_strategy(), args, is_chief=True)


if __name__ == "__main__":
    sys.exit(main())
