#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Run every tests/bench/bench_*.py in its own process and print what each measures.

Benchmarks print numbers, never pass or fail on them: timed assertions are flaky on
shared machines. Quote the ratios they print, not the seconds. A run fails only when a
benchmark crashes or says that a request count which must stay constant GROWS
(bench_tensorflow_launch's verdicts: counts are no timing).

    python tests/bench/run.py            # all benchmarks
    python tests/bench/run.py imports    # those whose name contains "imports"
    python tests/bench/run.py --smoke    # each one's code paths once, at its smallest size

`--smoke` is passed on to every benchmark (`options` gives each its argument parser);
`tox` runs it for each benchmark (tests/functional/test_bench_smoke.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SMOKE = "--smoke"
# What a benchmark prints for a count that must not grow with the size (and does)
GROWS = "GROWS"


def verdict(counts: list[int]) -> str:
    """Whether a count per size, smallest size first, stays CONSTANT or GROWS.

    CONSTANT: no size costs more than the largest, and every size but the smallest costs
    the same (the smallest may cost less: a job with fewer replicas than
    training.LOG_REPLICAS reads fewer logs). So a count needs three sizes or more to show
    growth: with two, one that grows from the first to the second would pass.
    """
    if len(counts) < 3:
        raise ValueError(f"a verdict needs three sizes or more, got {counts}")
    tail = counts[1:]
    return "CONSTANT" if len(set(tail)) == 1 and max(counts) == tail[0] else GROWS


def options(description: str | None) -> argparse.ArgumentParser:
    """A benchmark's argument parser, with the `--smoke` every benchmark takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        SMOKE,
        action="store_true",
        help="run each code path once at the smallest size (numbers only, not to quote)",
    )
    return parser


def run(script: Path, smoke: bool) -> str | None:
    """Run one benchmark, its output printed as it comes; why it failed, or None."""
    argv = [sys.executable, str(script), *([SMOKE] if smoke else [])]
    grown = []
    with subprocess.Popen(argv, env=os.environ, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            if GROWS in line:
                grown.append(line.strip())
    if proc.returncode != 0:
        return f"exited {proc.returncode}"
    return f"a request count grows: {'; '.join(grown)}" if grown else None


def main(argv: list[str], here: Path = HERE) -> int:
    """Run the selected benchmarks; non-zero if one of them crashed or a count grew."""
    smoke = SMOKE in argv
    words = [word for word in argv if word != SMOKE]
    failed = []
    for script in sorted(here.glob("bench_*.py")):
        if words and not any(word in script.stem for word in words):
            continue
        print(f"\n=== {script.stem}{' (smoke)' if smoke else ''}", flush=True)
        why = run(script, smoke)
        if why is not None:
            failed.append(f"{script.stem} ({why})")
    if failed:
        print(f"\nbenchmarks that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
