"""The fake kubelet's time (tests/fakes/kubelet.py): a charm's sleep is real time for pods.

The tensorflow charm waits with `time.sleep` between polls and gives up after
timeout/poll polls (charms.gpu_k8s.v0.system.poll_until). A test's sleep that passed less
real time than asked would hand a pod's real process a fraction of the action's timeout:
`export` timed out after "240 s" of 50 polls of 0.2 s while TensorFlow was still exporting
on a loaded machine. `run_for` takes the time asked, and only ends early once a container
exited (the charm sees it at its next poll) or when none runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fakes.kubelet import ProcessKubelet


def _pod(name: str, seconds: float) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "command": ["sleep", str(seconds)]}]},
    }


@pytest.fixture
def kubelet(tmp_path):
    kubelet = ProcessKubelet(None, "ns", {}, tmp_path)
    yield kubelet
    kubelet.stop_all()


def _took(kubelet: ProcessKubelet, seconds: float) -> float:
    start = time.monotonic()
    kubelet.run_for(seconds)
    return time.monotonic() - start


def test_a_sleep_gives_running_containers_the_whole_time_asked(kubelet):
    kubelet.start(_pod("long", 30))
    assert 0.4 <= _took(kubelet, 0.4) < 5


def test_a_sleep_ends_once_a_container_exits_or_at_once_when_none_runs(kubelet):
    assert _took(kubelet, 30) < 1  # nothing runs: only the controllers' tick changes things
    kubelet.start(_pod("long", 30))
    kubelet.start(_pod("short", 0.2))
    assert _took(kubelet, 30) < 10
    assert kubelet.procs["short"].poll() == 0 and kubelet.procs["long"].poll() is None


def test_a_container_has_a_tmp_of_its_own_new_at_each_start(kubelet, tmp_path):
    """A killed TensorFlow leaves autograph's generated files in its TMPDIR, not the host's."""
    pod = _pod("writer", 0)
    pod["spec"]["containers"][0]["command"] = [
        "sh",
        "-c",
        'test ! -e "$TMPDIR/left" && touch "$TMPDIR/left" && echo "$TMPDIR"',
    ]
    for _ in range(2):  # the second start finds no file the first one left
        kubelet.start(pod)
        assert kubelet.procs["writer"].wait(timeout=10) == 0
    scratch = kubelet.outputs["writer"].read_text().strip()
    assert scratch.startswith(str(tmp_path)) and Path(scratch, "left").exists()
