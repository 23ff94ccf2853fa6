"""A pytest plugin: urllib3's DEBUG records only where a test reads the log.

pytest captures every record at `log_level` (pyproject: DEBUG) for each test's report,
and ops sets the root logger to DEBUG in every charm run (ops/log.py
`setup_root_logging`), so each API request made two DEBUG records: lib kubeclient's
`kube <METHOD> <path>` and urllib3's connectionpool line for the same request (about
half of the ~250 records a control plane test made, each formatted by pytest's two
capturing handlers and ops' juju-log handler). urllib3's logger is set to INFO for every
test that does not ask for `caplog`: a failing test's captured log still names every
request (kubeclient's line), and an error status is raised as KubeError with the status.
A test that reads the log (`caplog`, or marked `reads_logs` when it reads a charm run's
`ctx.juju_log`: the secret scans among them) sees urllib3's records as before. pyproject
loads it for every pytest run (`-p log_levels`).
"""

from __future__ import annotations

import logging

import pytest

_URLLIB3 = logging.getLogger("urllib3")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker (filterwarnings = error refuses an unknown one)."""
    config.addinivalue_line(
        "markers", "reads_logs: the test reads every log record (urllib3's DEBUG ones too)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """urllib3 at INFO unless the test reads the log, where it inherits (DEBUG) as before."""
    reads_log = "caplog" in getattr(item, "fixturenames", ()) or bool(
        item.get_closest_marker("reads_logs")
    )
    _URLLIB3.setLevel(logging.NOTSET if reads_log else logging.INFO)
