# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""How a step of the reconcile stops it with a status."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import ops


class StatusError(Exception):
    """Stops the reconcile with a status: Blocked (operator must act) or Waiting."""

    def __init__(self, status: ops.StatusBase):
        super().__init__(status.message)
        self.status = status


@contextlib.contextmanager
def status_of(*errors: type[Exception]) -> Iterator[None]:
    """Turn a workload module's error (with `.blocked`) into Blocked or Waiting."""
    try:
        yield
    except errors as e:
        status = ops.BlockedStatus if getattr(e, "blocked", False) else ops.WaitingStatus
        raise StatusError(status(str(e))) from None
