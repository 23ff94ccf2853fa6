"""Every benchmark's smoke run: `tests/bench/run.py --smoke <bench>` in `tox`.

Nothing in `tox` ran the benchmarks, so `tox -e bench` crashed for a session unseen
(bench_kube_api's workers lacked node-identity, 2026-11-28). Each benchmark here runs its
code paths once at its smallest size, in a process of its own as `tox -e bench` runs it;
the test fails when it crashes or when a request count that must stay constant GROWS
(run.py's `verdict`), and prints the numbers (`pytest -s`, or on a failure), asserting
none of the timings.

Their cost (CPU seconds of each smoke, user+sys, on the 2-core machine at a load of ~2,
2026-11-28): bench_gpu_watcher 5.3, bench_tensorflow_launch 3.0, bench_control_plane 3.1,
bench_kube_api 2.4, bench_api_proxy 1.8: 15.7 s (17.8 s of wall one after another, ~11 s
on two xdist workers). Left to `tox -e bench -- --smoke`, with why: LEFT_OUT. Since then
bench_gpu_watcher's automatic repair (fault to readmission through gpu_repairs.step) adds
2.6 s of CPU, 10 s of wall (4.2 -> 6.8 s, 21 -> 31 s at a load of ~14, 2026-11-28).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from haproxy_runner import MISSING, available

BENCH = Path(__file__).resolve().parents[1] / "bench"
# What each smoke left out of `tox` would cost, and what runs its code there instead
LEFT_OUT = {
    "bench_launcher": "four TensorFlow processes: 31 s of CPU at 20 steps (18 s of wall); the "
    "launcher and trainer run under TensorFlow in test_tf_training.py and test_tf_gang.py",
    "bench_efs": "4.4 s of CPU; its reconcile and teardown run in test_efs.py, on the same "
    "fakes.aws network and moto",
    "bench_imports": "2.1 s of CPU; every assembled charm's import, without kubernetes, "
    "boto3 or cosl, is test_charm_projects.py's",
}
BENCHES = sorted(p.stem for p in BENCH.glob("bench_*.py"))
assert set(LEFT_OUT) <= set(BENCHES), set(LEFT_OUT) - set(BENCHES)


def _run_py():
    """tests/bench/run.py as a module (its directory is no package)."""
    spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("bench", BENCHES)
def test_a_benchmark_runs_at_its_smoke_size(bench):
    if bench in LEFT_OUT:
        pytest.skip(f"left to `tox -e bench -- --smoke {bench}`: {LEFT_OUT[bench]}")
    if bench == "bench_api_proxy" and not available() and not os.environ.get("CI"):
        pytest.skip(MISSING)
    done = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--smoke", bench],
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"=== {bench} (smoke)" in done.stdout
    assert "skipped" not in done.stdout  # bench_api_proxy without HAProxy (CI fails above)
    if bench == "bench_tensorflow_launch":  # its request counts were judged, at three sizes
        for strategy in ("mwms", "ps"):
            line = f"{strategy}: requests at 2/9/16 workers: train CONSTANT"
            assert line in done.stdout, done.stdout
            judged = done.stdout.split(line, 1)[1].splitlines()[0]
            for count in ("job-status CONSTANT", "list-jobs CONSTANT", "logs CONSTANT"):
                assert count in judged, judged


def test_the_smoke_fails_a_benchmark_that_crashes_or_whose_request_count_grows(tmp_path, capsys):
    run = _run_py()
    (tmp_path / "bench_crashes.py").write_text("raise SystemExit(3)\n")
    (tmp_path / "bench_grows.py").write_text(
        "import sys\nprint('mwms: requests at 2/9/16 workers: train GROWS (40)', sys.argv[1:])\n"
    )
    (tmp_path / "bench_fine.py").write_text(
        "import sys\nprint('train CONSTANT (19)', sys.argv[1:])\n"
    )
    assert run.main(["--smoke"], here=tmp_path) == 1
    out = capsys.readouterr().out
    assert "train CONSTANT (19) ['--smoke']" in out  # each one got --smoke, printed its numbers
    failed = out.rsplit("benchmarks that failed: ", 1)[1]
    assert failed.startswith("bench_crashes (exited 3), bench_grows (a request count grows: ")
    assert "bench_fine" not in failed
    assert run.main(["--smoke", "fine"], here=tmp_path) == 0


@pytest.mark.parametrize(
    "counts,judged",
    [
        ([19, 19, 19], "CONSTANT"),
        ([6, 10, 10], "CONSTANT"),  # a job smaller than LOG_REPLICAS reads fewer logs
        ([19, 19, 20], "GROWS"),
        ([19, 20, 21], "GROWS"),  # one request more per size
        ([10, 9, 9], "GROWS"),  # the smallest costs more than the largest
        ([5, 5, 6, 5], "GROWS"),
    ],
)
def test_a_count_is_constant_only_when_every_size_but_the_smallest_costs_the_same(counts, judged):
    assert _run_py().verdict(counts) == judged


def test_two_sizes_are_too_few_to_judge_a_count():
    """With two, a count that grows from the first size to the second would pass."""
    with pytest.raises(ValueError, match="three sizes or more"):
        _run_py().verdict([19, 20])
