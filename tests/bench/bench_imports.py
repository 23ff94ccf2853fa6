#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Import time and peak memory of each charm, as ratios to a bare `import ops`.

Each sample is a fresh interpreter that imports either `ops` alone or the assembled
charm's `charm` module (which imports ops too), in interleaved rounds; the ratio of
medians is printed.
Target (the project's design document, "Performance and reliability targets"): at most
1.1x the floor below, which means `kubernetes`, `boto3` and `cosl` are imported only
where they are used.

The "vs floor" columns compare with `ops` plus one trivial pydantic model, the floor
that the design itself sets: every hook loads config through a pydantic model and reads
relation databags through the libraries' pydantic models (issue 2, item 15), and the
first model class pydantic builds pulls in `pydantic.fields`, `pydantic.types` and its
plugin loader, together about as much as `import ops` again. Those columns are what the
charms' own code adds.

`--smoke`: one sample of `ops`, the floor and the first charm (each code path once; the
numbers are not to quote; that every assembled charm imports, and without kubernetes, boto3
or cosl, tests/functional/test_charm_projects.py checks).
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
from run import options  # noqa: E402

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


def probe(code: str, paths: list[str]) -> tuple[float, float]:
    """Seconds that `code` takes and peak RSS (KiB) in one fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(paths=paths, code=code.strip())],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), float(out[1])


def medians(
    probes: dict[str, tuple[str, list[str]]], rounds: int = SAMPLES
) -> dict[str, tuple[float, float]]:
    """Median seconds and peak RSS of each probe, run in interleaved rounds.

    Every round runs each probe once, so a change in the machine's load during the run
    falls on all of them alike instead of on whichever ran last.
    """
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in probes}
    for _ in range(rounds):
        for name, (code, paths) in probes.items():
            samples[name].append(probe(code, paths))
    return {
        name: (statistics.median(t for t, _ in got), statistics.median(p for _, p in got))
        for name, got in samples.items()
    }


def main() -> None:
    """Print one line per charm: import time and peak memory relative to ops."""
    args = options(__doc__).parse_args()
    with tempfile.TemporaryDirectory() as build:
        probes = {"ops": ("import ops", []), "floor": (FLOOR, [])}
        for charm in pack.charm_names()[: 1 if args.smoke else None]:
            directory = pack.assemble(charm, Path(build))
            probes[charm] = ("import charm", [str(directory / "src"), str(directory / "lib")])
        result = medians(probes, 1 if args.smoke else SAMPLES)
    base_time, base_peak = result.pop("ops")
    floor_time, floor_peak = result.pop("floor")
    print(f"baseline `import ops`: {base_time * 1000:.1f} ms, peak RSS {base_peak / 1024:.1f} MiB")
    print(
        f"floor `import ops` + one pydantic model: {floor_time / base_time:.2f}x time, "
        f"{floor_peak / base_peak:.2f}x memory"
    )
    print(
        f"{'charm':28} {'time ratio':>10} {'memory ratio':>12} {'time vs floor':>14}"
        f" {'memory vs floor':>16}  (target: time vs floor <= 1.1x)"
    )
    for charm, (t, peak) in result.items():
        print(
            f"{charm:28} {t / base_time:>9.2f}x {peak / base_peak:>11.2f}x"
            f" {t / floor_time:>13.2f}x {peak / floor_peak:>15.2f}x"
        )


if __name__ == "__main__":
    main()
