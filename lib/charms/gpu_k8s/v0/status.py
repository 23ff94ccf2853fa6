# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""One way for every gpu-k8s charm to turn what went wrong into the status an operator sees.

A step of a reconcile that cannot go on raises `StatusError` with that status:
- Blocked: the operator must change something, and the message ends with what
  ("...; set config region", "...; run juju trust efs-storage");
- Waiting: it clears by itself (a peer, the API server, AWS), and the message says what
  the unit waits for;
- Maintenance: the unit is doing something that ends by itself (a reboot, a removal).
Anything else that is raised is unexpected and fails the hook: Juju retries it, and the
traceback is in `juju debug-log` (ops' "Handle errors": retry, Blocked, or raise).

`Statuses` keeps what one hook found and hands it to collect-unit-status, where ops keeps
the one of highest priority (error, blocked, maintenance, waiting, active; ops.StatusBase
`_priorities`). `Statuses.step()` catches a `StatusError` into it, and a Kubernetes API
error as `kube_status` reads it: refused credentials are Blocked (the grant must change),
an API that did not answer, or asked to slow down, is Waiting; any other API error is
unexpected and raises.

Workload modules (no ops) raise their own errors; `status_of` maps those that say
whether the operator must act (a `.blocked` attribute) and `on_error` any other, with
the message the operator reads.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

import ops

from charms.gpu_k8s.v0.kubeclient import KubeError

LIBID = "3b9dce50ecda4d0ea9d31b215418e1f9"
LIBAPI = 0
LIBPATCH = 2

logger = logging.getLogger(__name__)

# What an operator does about refused Kubernetes credentials, unless the charm says better.
KUBE_REFUSED_FIX = "check the kube-api grant on the control plane"
_RBAC_REFUSAL = re.compile(r'User "[^"]*" cannot ')
_TERMINATING = "because it is being terminated"


class StatusError(Exception):
    """Stops a reconcile with the status the operator should see (see the module docstring)."""

    def __init__(self, status: ops.StatusBase):
        super().__init__(status.message)
        self.status = status

    @classmethod
    def blocked(cls, message: str) -> StatusError:
        """The operator must act; `message` ends with what to do."""
        return cls(ops.BlockedStatus(message))

    @classmethod
    def waiting(cls, message: str) -> StatusError:
        """It clears by itself; `message` says what the unit waits for."""
        return cls(ops.WaitingStatus(message))

    @classmethod
    def maintenance(cls, message: str) -> StatusError:
        """The unit is busy with something that ends by itself."""
        return cls(ops.MaintenanceStatus(message))


def kube_status(error: KubeError, refused_fix: str = KUBE_REFUSED_FIX) -> ops.StatusBase | None:
    """The status a Kubernetes API error means, or None when it is unexpected (raise it).

    Refused: 401 (the credentials are not accepted) and a 403 that is RBAC's refusal
    (`User "..." cannot <verb> ...`, k8s.io/apiserver pkg/endpoints/handlers/
    responsewriters/errors.go `forbiddenMessage`) are Blocked with `refused_fix`. A 403
    for a namespace being deleted (the NamespaceLifecycle admission plugin's "unable to
    create new content in namespace X because it is being terminated") clears by itself:
    Waiting. No answer (0), 429 and 5xx (after the client's retries): Waiting. Anything
    else, another 403 (an admission webhook's denial, an exceeded quota) included, is a
    request the charm should not have made.
    """
    if error.status == 401 or (error.status == 403 and _RBAC_REFUSAL.search(error.message)):
        return ops.BlockedStatus(
            f"Kubernetes refused a request ({error.status} {error.reason}); {refused_fix}"
        )
    if error.status == 403 and _TERMINATING in error.message:
        return ops.WaitingStatus(f"Kubernetes API: {error.message}; retrying on the next event")
    if error.status == 0 or error.status == 429 or error.status >= 500:
        return ops.WaitingStatus(
            f"Kubernetes API unavailable ({error.status} {error.reason}); "
            "retrying on the next event"
        )
    return None


class Statuses:
    """What one hook found, for collect-unit-status (ops reports the highest priority)."""

    def __init__(self, kube_refused_fix: str = KUBE_REFUSED_FIX):
        self.found: list[ops.StatusBase] = []
        self._kube_refused_fix = kube_refused_fix

    def add(self, status: ops.StatusBase) -> None:
        """Report `status` (too) at the end of this hook."""
        self.found.append(status)

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Run a step: a `StatusError` or an expected `KubeError` becomes a status here.

        The step stops at the error; an unexpected error raises (the hook fails).
        """
        try:
            yield
        except StatusError as e:
            self.add(e.status)
        except KubeError as e:
            status = kube_status(e, self._kube_refused_fix)
            if status is None:
                raise
            logger.warning("Kubernetes API request failed: %s", e)
            self.add(status)

    def report(self, event: ops.CollectStatusEvent) -> None:
        """Hand every status found to collect-unit-status."""
        for status in self.found:
            event.add_status(status)


@contextlib.contextmanager
def status_of(*errors: type[Exception]) -> Iterator[None]:
    """Turn a workload module's error into Blocked (its `.blocked` is true) or Waiting.

    Its text is the status message, so it must read as one (and, when blocked, say what
    to do).
    """
    try:
        yield
    except errors as e:
        status = ops.BlockedStatus if getattr(e, "blocked", False) else ops.WaitingStatus
        raise StatusError(status(str(e))) from None


@contextlib.contextmanager
def on_error(
    status: type[ops.StatusBase], *errors: type[Exception], message: str = "{error}"
) -> Iterator[None]:
    """Turn `errors` into `status`, with `message` formatted with the error as `error`.

    For example `on_error(ops.WaitingStatus, CommandError, message="starting HAProxy:
    {error.last_line}; retrying on the next event")`.
    """
    try:
        yield
    except errors as e:
        raise StatusError(status(message.format(error=e))) from None
