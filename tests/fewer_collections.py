"""A pytest plugin: Python's cyclic GC runs less often in every test process.

Each test keeps large, long-lived object graphs alive (the fake API server with its
CRDs, ops' charm metadata, the kubernetes client's models, moto's backends, botocore's
parsed models), so each of the frequent collections at the default thresholds (700, 10,
10) walks much of the heap again: 3.9 s of efs-storage's test_reconcile.py's 24 s of CPU
(1.6 s with these thresholds, session 17, then efs-storage's conftest only), 0.84 s of
tensorflow's test_train.py's 6.6 s (0.49 s), 0.52 s of the control plane's
test_workers.py's 8.8 s (0.34 s; gc.callbacks, thread CPU time, 2026-11-27). With a
larger young generation the same garbage is found in fewer, cheaper passes; nothing a
test checks depends on when a cycle is freed. pyproject loads it for every pytest run
(`-p fewer_collections`).
"""

from __future__ import annotations

import gc

import pytest

THRESHOLDS = (50_000, 20, 10)
_saved: list[tuple[int, int, int]] = []


def pytest_configure(config: pytest.Config) -> None:
    """Set the larger thresholds for the whole session."""
    _saved.append(gc.get_threshold())
    gc.set_threshold(*THRESHOLDS)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore the thresholds the process had."""
    if _saved:
        gc.set_threshold(*_saved.pop())
