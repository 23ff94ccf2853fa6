"""Shared fixtures for functional tests: the fake Kubernetes API server, clients for it."""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tf_zygote
from children_tmp import children_tmpdir  # noqa: F401 (autouse)
from kubectl_runner import UnavailableError, binary

from charms.gpu_k8s.v0.kubeclient import Kube
from fakes.kube_apiserver import FakeKubeApiServer


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApiServer]:
    """A started fake API server on 127.0.0.1 (stopped after the test)."""
    with FakeKubeApiServer() as api:
        yield api


@pytest.fixture
def kube(kube_api: FakeKubeApiServer) -> Iterator[Kube]:
    """A real `Kube` client for `kube_api`, with tiny retry backoff so tests stay fast."""
    with Kube.from_kubeconfig(kube_api.kubeconfig(token="admin-token"), backoff=0.01) as client:
        yield client


@pytest.fixture(autouse=True, scope="module")
def _tf_zygotes() -> Iterator[None]:
    """The TensorFlow zygotes a module started end with it (tests/tf_zygote.py)."""
    yield
    tf_zygote.stop_all()


def has_tensorflow(python: str) -> bool:
    """Whether `python` can import tensorflow (the tests that train skip without it)."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('tensorflow') is None)"
    try:
        return subprocess.run([python, "-c", probe], timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def kubectl_binary() -> Path:
    """The real kubectl v1.36.3, extracted once (tests/kubectl_runner.py).

    Skipped, saying why, where it cannot run (not x86-64 Linux, package missing), except
    under CI, where that fails the test.
    """
    try:
        return binary()
    except UnavailableError as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))


# The tests that train with real TensorFlow take 10-60 s each, the others about a second at
# most. tox runs this suite with pytest-xdist's worksteal scheduler (tox.ini: -n auto
# --dist worksteal), which hands each worker a contiguous share of the collection
# (WorkStealingScheduling.check_schedule: the first idle worker gets len(pending) //
# workers of the front, the next the same of the rest) and lets a worker whose queue ran
# dry steal the back half of the longest queue. In collection order these files come last,
# so all of them fell in one worker's share and the run ended on one of them while the
# other worker idled. Each share now starts with its part of them (dealt in turn) and ends
# with short tests, which are what stealing moves: the workers end within a short test.
LONG_FILES = frozenset({"test_tf_gang.py", "test_tf_training.py"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, put the TensorFlow tests at the front of every worker's share."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers < 2:
        return
    long = [item for item in items if item.path.name in LONG_FILES]
    short = iter([item for item in items if item.path.name not in LONG_FILES])
    shares: list[list[pytest.Item]] = [long[k::workers] for k in range(workers)]
    left = len(items)
    for k, share in enumerate(shares):
        size = left // (workers - k)  # as worksteal cuts the pending list
        left -= size
        share.extend(itertools.islice(short, max(0, size - len(share))))
    shares[-1].extend(short)  # none left unless a share was all long tests
    items[:] = [item for share in shares for item in share]
