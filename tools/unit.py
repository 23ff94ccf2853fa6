#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Run tests/unit/ with one pytest process per directory.

Every charm's entry module is `src/charm.py`, so two charms cannot share a process.
`tests/unit/<name>/` runs with `charms/<name with dashes>/src` on the path when such a
charm exists; every directory gets `lib/`, `tests/`, `actions/` and `tools/`.

    python tools/unit.py                 # every directory
    python tools/unit.py kubernetes_worker -k drain   # one directory, extra pytest args
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "tests" / "unit"


def python_path(suite: Path) -> str:
    """The sys.path a unit-test directory runs with."""
    paths = [ROOT / "lib", ROOT / "tests", ROOT / "actions", ROOT / "tools"]
    charm_src = ROOT / "charms" / suite.name.replace("_", "-") / "src"
    if charm_src.is_dir():
        paths.insert(0, charm_src)
    return os.pathsep.join(str(p) for p in paths)


def main(argv: list[str]) -> int:
    """Run each selected suite in its own pytest process; return non-zero if any failed."""
    suites = sorted(p for p in UNIT.iterdir() if p.is_dir() and any(p.rglob("test_*.py")))
    names = {p.name for p in suites}
    selected = [a for a in argv if a in names]
    extra = [a for a in argv if a not in names]
    failed = []
    for suite in suites:
        if selected and suite.name not in selected:
            continue
        env = {**os.environ, "PYTHONPATH": python_path(suite)}
        command = [sys.executable, "-m", "pytest", str(suite), *extra]
        print(f"==> {suite.relative_to(ROOT)}", flush=True)
        if subprocess.run(command, env=env, cwd=ROOT).returncode != 0:
            failed.append(suite.name)
    if failed:
        print(f"unit suites failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
