"""One error-to-status idiom for every charm: StatusError, Statuses, status_of, on_error."""

from __future__ import annotations

import ops
import pytest
from ops import testing

from charms.gpu_k8s.v0.kubeclient import KubeError
from charms.gpu_k8s.v0.status import (
    StatusError,
    Statuses,
    kube_status,
    on_error,
    status_of,
)
from charms.gpu_k8s.v0.system import CommandError


class _Charm(ops.CharmBase):
    """A charm whose reconcile runs the steps a test gives it."""

    steps: list = []

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        self.statuses = Statuses()
        framework.observe(self.on.config_changed, self._reconcile)
        framework.observe(self.on.collect_unit_status, self._on_collect_status)

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        self.statuses.report(event)

    def _reconcile(self, _: ops.EventBase) -> None:
        for step in type(self).steps:
            with self.statuses.step():
                step(self.statuses)


def _run(*steps) -> ops.StatusBase:
    _Charm.steps = list(steps)
    ctx = testing.Context(_Charm, meta={"name": "probe"})
    return ctx.run(ctx.on.config_changed(), testing.State()).unit_status


def _raise(error: Exception):
    def step(_: Statuses) -> None:
        raise error

    return step


def _add(status: ops.StatusBase):
    return lambda statuses: statuses.add(status)


def test_the_operator_sees_blocked_over_waiting_over_active():
    status = _run(
        _add(ops.ActiveStatus("Ready")),
        _raise(StatusError.waiting("waiting for the API server")),
        _raise(StatusError.blocked("no AWS region: set config region")),
    )
    assert status == testing.BlockedStatus("no AWS region: set config region")


def test_a_step_that_stops_lets_the_next_step_run():
    ran = []
    status = _run(
        _raise(StatusError.maintenance("rebooting: driver update")),
        lambda _: ran.append("next"),
        _add(ops.ActiveStatus("Ready")),
    )
    assert ran == ["next"]
    assert status == testing.MaintenanceStatus("rebooting: driver update")


RBAC_REFUSAL = (
    'nodes "gpu-0" is forbidden: User "system:serviceaccount:gpu-k8s-system:worker" cannot '
    'patch resource "nodes" in API group "" at the cluster scope'
)
TERMINATING = (
    'configmaps "code" is forbidden: unable to create new content in namespace training '
    "because it is being terminated"
)
WEBHOOK_DENIAL = (
    'admission webhook "vclusterqueue.kb.io" denied the request: spec.cohort: Invalid value'
)


@pytest.mark.parametrize(
    ("code", "reason", "message", "expected"),
    [
        (401, "Unauthorized", "Unauthorized", testing.BlockedStatus),
        (403, "Forbidden", RBAC_REFUSAL, testing.BlockedStatus),
        (0, "ConnectionError", "connection refused", testing.WaitingStatus),
        (429, "TooManyRequests", "slow down", testing.WaitingStatus),
        (503, "ServiceUnavailable", "no endpoints", testing.WaitingStatus),
    ],
)
def test_kubernetes_errors_the_operator_can_act_on_or_wait_for(code, reason, message, expected):
    status = _run(_raise(KubeError(code, reason, message)))
    assert isinstance(status, expected)
    assert f"({code} {reason})" in status.message
    if expected is testing.BlockedStatus:
        assert status.message.endswith("check the kube-api grant on the control plane")
    assert kube_status(KubeError(code, reason, message), "relate kube-api") is not None


def test_a_namespace_being_deleted_is_waited_for_naming_it():
    status = _run(_raise(KubeError(403, "Forbidden", TERMINATING)))
    assert status == testing.WaitingStatus(
        f"Kubernetes API: {TERMINATING}; retrying on the next event"
    )


@pytest.mark.parametrize(
    ("code", "message"),
    [(400, "no"), (404, "no"), (409, "no"), (422, "no"), (403, WEBHOOK_DENIAL)],
)
def test_any_other_kubernetes_error_is_unexpected_and_fails_the_hook(code, message):
    assert kube_status(KubeError(code, "Invalid", message)) is None
    with pytest.raises(testing.errors.UncaughtCharmError) as failure:
        _run(_raise(KubeError(code, "Invalid", message)))
    assert isinstance(failure.value.__cause__, KubeError)


def test_an_unexpected_error_fails_the_hook():
    with pytest.raises(testing.errors.UncaughtCharmError) as failure:
        _run(_raise(RuntimeError("a bug")))
    assert isinstance(failure.value.__cause__, RuntimeError)


class _WorkloadError(Exception):
    def __init__(self, message: str, *, blocked: bool):
        super().__init__(message)
        self.blocked = blocked


@pytest.mark.parametrize(
    ("blocked", "expected"), [(True, ops.BlockedStatus), (False, ops.WaitingStatus)]
)
def test_a_workload_error_says_whether_the_operator_must_act(blocked, expected):
    with pytest.raises(StatusError) as stopped, status_of(_WorkloadError):
        raise _WorkloadError("kubeadm init failed; see juju debug-log", blocked=blocked)
    assert stopped.value.status == expected("kubeadm init failed; see juju debug-log")


def test_other_errors_pass_through_status_of_and_on_error():
    with pytest.raises(KeyError), status_of(_WorkloadError), on_error(ops.BlockedStatus, OSError):
        raise KeyError("x")


def test_on_error_formats_the_error_into_the_message():
    with (
        pytest.raises(StatusError) as stopped,
        on_error(
            ops.WaitingStatus,
            CommandError,
            message="starting HAProxy: {error.last_line}; retrying",
        ),
    ):
        raise CommandError(["/usr/bin/systemctl", "restart", "haproxy"], 1, "a\nno such unit")
    assert stopped.value.status == ops.WaitingStatus("starting HAProxy: no such unit; retrying")
