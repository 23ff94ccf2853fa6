# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""A training job's progress, as its chief reports it, read and put in words (no ops, no I/O).

How progress is read: the charm runs on a machine, not in a pod, so it cannot open the
progress file on the shared volume. The chief (worker 0 for `mwms`, `chief` for `ps`) also
prints every progress report to its log as one line `GPU_K8S_PROGRESS {json}` (same
fields as the file: step, steps, loss, examples_per_sec, global_batch_size, time,
resumed_from, state, loss_history); `parse_progress` reads the last such line of the
chief's log tail (`training.py` fetches it). The rest turns a report into what
`job-status`, `list-jobs` and the status line show: ETA, loss sparkline, held-out
evaluation.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from literals import PROGRESS_MARKER

SPARK = "▁▂▃▄▅▆▇█"


def parse_progress(log: str) -> dict | None:
    """The last `GPU_K8S_PROGRESS {json}` report in a log, or None."""
    for line in reversed(log.splitlines()):
        at = line.find(PROGRESS_MARKER)
        if at < 0:
            continue
        try:
            data = json.loads(line[at + len(PROGRESS_MARKER) :])
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


_RESUMED = re.compile(r"resumed from checkpoint at step (\d+)")
_FRESH = re.compile(r"starting from step 0\b")


def resumed_step(log: str) -> int | None:
    """The step the trainer (re)started from, from its log, or None when not known yet."""
    progress = parse_progress(log)
    if progress is not None and isinstance(progress.get("resumed_from"), int):
        return progress["resumed_from"]
    for line in reversed(log.splitlines()):
        if m := _RESUMED.search(line):
            return int(m.group(1))
        if _FRESH.search(line):
            return 0
    return None


def sparkline(values: Iterable[Any], width: int = 20) -> str:
    """A text sparkline of the last `width` finite values (high = large)."""
    finite = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    if not finite:
        return ""
    if len(finite) > width:
        step = len(finite) / width
        finite = [finite[int(i * step)] for i in range(width - 1)] + [finite[-1]]
    low, high = min(finite), max(finite)
    span = high - low
    if span <= 0:
        return SPARK[0] * len(finite)
    return "".join(SPARK[min(7, int((v - low) / span * 8))] for v in finite)


def eta_seconds(progress: Mapping[str, Any]) -> float | None:
    """Seconds left at the current throughput, or None when it cannot be estimated."""
    try:
        left = int(progress["steps"]) - int(progress["step"])
        rate = float(progress["examples_per_sec"]) / float(progress["global_batch_size"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if progress.get("state") == "finished" or left <= 0:
        return 0.0
    if rate <= 0 or not math.isfinite(rate):
        return None
    return left / rate


def format_duration(seconds: float | None) -> str:
    """`1h 02m`, `3m 05s`, `12s` or `unknown`."""
    if seconds is None:
        return "unknown"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def evaluation_phrase(progress: Mapping[str, Any]) -> str:
    """`loss 0.3120, accuracy 91.4% (held out, step 500)`, or "" before the first one."""
    loss, accuracy = progress.get("eval_loss"), progress.get("eval_accuracy")
    if not isinstance(loss, int | float) or not isinstance(accuracy, int | float):
        return ""
    return (
        f"loss {loss:.4f}, accuracy {100 * accuracy:.1f}% "
        f"(held out, step {progress.get('eval_step', '?')})"
    )


def progress_phrase(job: str, progress: Mapping[str, Any] | None) -> str:
    """`mnist 45% ETA 12m 03s` (or the name alone before the first progress report)."""
    if not progress:
        return job
    try:
        percent = int(100 * int(progress["step"]) / max(1, int(progress["steps"])))
    except (KeyError, TypeError, ValueError):
        return job
    return f"{job} {percent}% ETA {format_duration(eta_seconds(progress))}"
