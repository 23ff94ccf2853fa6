#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Run every tests/bench/bench_*.py in its own process and print what each measures.

Benchmarks print numbers, never pass or fail: timed assertions are flaky on shared
machines. Quote the ratios they print, not the seconds.

    python tests/bench/run.py            # all benchmarks
    python tests/bench/run.py imports    # those whose name contains "imports"
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    """Run the selected benchmarks; return non-zero if one of them crashed."""
    crashed = []
    for script in sorted(HERE.glob("bench_*.py")):
        if argv and not any(word in script.stem for word in argv):
            continue
        print(f"\n=== {script.stem}", flush=True)
        if subprocess.run([sys.executable, str(script)], env=os.environ).returncode != 0:
            crashed.append(script.stem)
    if crashed:
        print(f"\nbenchmarks that crashed: {', '.join(crashed)}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
