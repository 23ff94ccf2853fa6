#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Run tests/unit/ with one pytest process per directory, as many at once as there are CPUs.

Every charm's entry module is `src/charm.py`, so two charms cannot share a process.
`tests/unit/<name>/` runs with `charms/<name with dashes>/src` on the path when such a
charm exists; every directory gets `lib/`, `tests/`, `actions/` and `tools/`.

The suites are independent, so they run side by side (`--jobs`, default: the CPUs this
process may use), the longest first; each one's output is printed whole when it ends,
then a line per suite and the 20 slowest tests of all of them.

    python tools/unit.py                 # every directory
    python tools/unit.py kubernetes_worker -k drain   # one directory, extra pytest args
    python tools/unit.py --jobs 1        # one suite at a time
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "tests" / "unit"
# Started in this order, longest first, so that the two jobs end together (seconds in
# pytest, 2 jobs on a 2-core machine, fresh-clone CI 2026-11-27: kubernetes_control_plane
# 130, efs_storage 60, tensorflow 47, kubernetes_worker 29, actions 16, docs 15; every
# other suite under 10). The control plane first: started third, behind tensorflow, it
# ended the unit phase ~20 s after every other suite.
LONGEST_FIRST = (
    "kubernetes_control_plane",
    "efs_storage",
    "tensorflow",
    "kubernetes_worker",
    "actions",
    "docs",
)
SLOWEST = 20


@dataclasses.dataclass
class Outcome:
    """What one suite's pytest process did."""

    suite: str
    code: int
    seconds: float
    output: str
    tests: list[tuple[float, str]]  # (seconds, test id) from its JUnit report


def python_path(suite: Path) -> str:
    """The sys.path a unit-test directory runs with."""
    paths = [ROOT / "lib", ROOT / "tests", ROOT / "actions", ROOT / "tools"]
    charm_src = ROOT / "charms" / suite.name.replace("_", "-") / "src"
    if charm_src.is_dir():
        paths.insert(0, charm_src)
    return os.pathsep.join(str(p) for p in paths)


def order(suites: list[Path]) -> list[Path]:
    """The suites in the order they start: the known long ones first, then by name."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    return sorted(suites, key=lambda p: (rank.get(p.name, len(rank)), p.name))


def run_suite(suite: Path, extra: list[str], reports: Path) -> Outcome:
    """One suite in its own pytest process, its output kept for printing whole."""
    env = {**os.environ, "PYTHONPATH": python_path(suite)}
    report = reports / f"{suite.name}.xml"
    command = [sys.executable, "-m", "pytest", str(suite), f"--junitxml={report}", *extra]
    started = time.monotonic()
    done = subprocess.run(
        command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    return Outcome(
        suite.name,
        done.returncode,
        time.monotonic() - started,
        done.stdout.decode(errors="replace"),
        test_times(report),
    )


def test_times(report: Path) -> list[tuple[float, str]]:
    """(seconds, id) of every test in a JUnit report: setup, call and teardown together."""
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError):
        return []
    return [
        (float(case.get("time") or 0), f"{case.get('classname')}::{case.get('name')}")
        for case in root.iter("testcase")
    ]


def default_jobs() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def parse_args(argv: list[str], names: set[str]) -> tuple[list[str], list[str], int]:
    """(selected suites, extra pytest arguments, jobs) from the command line."""
    jobs = default_jobs()
    rest = []
    args = iter(argv)
    for arg in args:
        if arg == "--jobs":
            jobs = max(1, int(next(args)))
        elif arg.startswith("--jobs="):
            jobs = max(1, int(arg.split("=", 1)[1]))
        else:
            rest.append(arg)
    selected = [a for a in rest if a in names]
    extra = [a for a in rest if a not in names]
    return selected, extra, jobs


def main(argv: list[str]) -> int:
    """Run the selected suites side by side; return non-zero if any failed."""
    suites = sorted(p for p in UNIT.iterdir() if p.is_dir() and any(p.rglob("test_*.py")))
    selected, extra, jobs = parse_args(argv, {p.name for p in suites})
    chosen = order([s for s in suites if not selected or s.name in selected])
    printing = threading.Lock()
    started = time.monotonic()

    def run(suite: Path) -> Outcome:
        outcome = run_suite(suite, extra, reports)
        with printing:
            print(f"==> tests/unit/{suite.name} ({outcome.seconds:.1f} s)", flush=True)
            print(outcome.output, end="", flush=True)
        return outcome

    with tempfile.TemporaryDirectory(prefix="gpu-k8s-unit-") as tmp:
        reports = Path(tmp)
        with ThreadPoolExecutor(max_workers=min(jobs, len(chosen) or 1)) as pool:
            outcomes = list(pool.map(run, chosen))
    elapsed = time.monotonic() - started
    print(f"\n{len(outcomes)} unit suites, {jobs} at a time, in {elapsed:.1f} s:")
    for o in sorted(outcomes, key=lambda o: -o.seconds):
        print(f"  {o.suite:<28} {'passed' if o.code == 0 else 'FAILED':<7} {o.seconds:6.1f} s")
    slowest = sorted((t for o in outcomes for t in o.tests), reverse=True)[:SLOWEST]
    if slowest:
        print(f"the {len(slowest)} slowest tests (setup, call and teardown):")
        for seconds, name in slowest:
            print(f"  {seconds:6.2f} s  {name}")
    failed = [o.suite for o in outcomes if o.code != 0]
    if failed:
        print(f"unit suites failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
