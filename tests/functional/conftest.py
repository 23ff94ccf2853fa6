"""Shared fixtures for functional tests: the fake Kubernetes API server, clients for it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
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
