#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Import time and peak memory of each charm, as ratios to a bare `import ops`.

Each sample is a fresh interpreter that imports either `ops` alone or the assembled
charm's `charm` module (which imports ops too); the ratio of medians is printed.
Target (DESIGN.md): at most 1.3x for both, which means `kubernetes` and `boto3` are
imported only where they are used.

The "vs floor" columns compare with `ops` plus one trivial pydantic model, the floor
that the design itself sets: every hook loads config through a pydantic model and reads
relation databags through the libraries' pydantic models (issue 2, item 15), and the
first model class pydantic builds pulls in `pydantic.fields`, `pydantic.types` and its
plugin loader, together about as much as `import ops` again. Those columns are what the
charms' own code adds.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import pack  # noqa: E402

SAMPLES = 9
PROBE = """
import resource, sys, time
sys.path[:0] = {paths!r}
start = time.perf_counter()
{code}
elapsed = time.perf_counter() - start
print(elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
FLOOR = """
import ops, pydantic
class Floor(pydantic.BaseModel):
    value: int = 0
"""


def sample(code: str, paths: list[str]) -> tuple[float, float]:
    """Median seconds that `code` takes and median peak RSS (KiB) over fresh interpreters."""
    times, peaks = [], []
    for _ in range(SAMPLES):
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(paths=paths, code=code.strip())],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        times.append(float(out[0]))
        peaks.append(float(out[1]))
    return statistics.median(times), statistics.median(peaks)


def main() -> None:
    """Print one line per charm: import time and peak memory relative to ops."""
    base_time, base_peak = sample("import ops", [])
    floor_time, floor_peak = sample(FLOOR, [])
    print(f"baseline `import ops`: {base_time * 1000:.1f} ms, peak RSS {base_peak / 1024:.1f} MiB")
    print(
        f"floor `import ops` + one pydantic model: {floor_time / base_time:.2f}x time, "
        f"{floor_peak / base_peak:.2f}x memory"
    )
    print(
        f"{'charm':28} {'time ratio':>10} {'memory ratio':>12} {'time vs floor':>14}"
        f" {'memory vs floor':>16}  (target <= 1.3x)"
    )
    with tempfile.TemporaryDirectory() as build:
        for charm in pack.charm_names():
            directory = pack.assemble(charm, Path(build))
            paths = [str(directory / "src"), str(directory / "lib")]
            t, peak = sample("import charm", paths)
            print(
                f"{charm:28} {t / base_time:>9.2f}x {peak / base_peak:>11.2f}x"
                f" {t / floor_time:>13.2f}x {peak / floor_peak:>15.2f}x"
            )


if __name__ == "__main__":
    main()
