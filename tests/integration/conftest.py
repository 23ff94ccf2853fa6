"""Integration tests need a real Juju controller; without one they are skipped, saying why."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def _no_controller_reason() -> str | None:
    """Why the integration tests cannot run here, or None when a controller is reachable."""
    juju = shutil.which("juju")
    if juju is None:
        return "no `juju` CLI on PATH: install Juju and bootstrap an AWS controller first"
    done = subprocess.run(
        [
            juju,
            "show-controller",
            *([os.environ["JUJU_CONTROLLER"]] if os.environ.get("JUJU_CONTROLLER") else []),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        detail = done.stderr.strip() or "juju show-controller failed"
        return f"no Juju controller configured ({detail})"
    return None


def pytest_collection_modifyitems(config, items):
    """Skip every integration test with one clear reason when no controller is configured."""
    reason = _no_controller_reason()
    if reason:
        marker = pytest.mark.skip(reason=reason)
        for item in items:
            item.add_marker(marker)
