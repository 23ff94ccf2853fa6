# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The operator's action on efs-storage: show-filesystem.

An ops component: the charm builds it with what the action needs of the hook (the
config, the desired file system, the AWS side, the Kubernetes client), never the charm,
and observes the action with its handler.
"""

from __future__ import annotations

from collections.abc import Callable

import ops
from aws_access import aws_call
from charm_config import Config
from claims import Owner
from efs import Efs
from efs_model import Desired
from storage import Storage

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.status import StatusError, kube_status


class OperatorActions(ops.Object):
    """The action handler, observed by the charm.

    `config`: the charm's config (ValueError: invalid); `desired`: the file system that
    config asks for (StatusError: invalid); `efs`: the AWS side for a config; `kube`: the
    cluster's client, None without kube-api access.
    """

    def __init__(
        self,
        parent: ops.Object,
        *,
        config: Callable[[], Config],
        desired: Callable[[Config], Desired],
        efs: Callable[[Config], Efs],
        kube: Callable[[], Kube | None],
    ):
        super().__init__(parent, "operator-actions")
        self._config = config
        self._desired = desired
        self._efs = efs
        self._kube_or_none = kube
        self.app = self.model.app

    def on_show_filesystem(self, event: ops.ActionEvent) -> None:
        """The file system as AWS describes it, and the claims made on it."""
        try:
            config = self._config()
        except ValueError as e:
            event.fail(f"invalid config: {e}")
            return
        try:
            desired = self._desired(config)
            manager = self._efs(config)
            observed = aws_call(lambda: manager.describe(desired))
        except StatusError as e:
            event.fail(e.status.message)
            return
        result = observed.action_result()
        if not result.get("mount-targets"):
            result["mount-targets"] = "none"
        result["claims"] = self._claims_result()
        event.set_results(result)

    def _claims_result(self) -> dict[str, str] | str:
        kube = self._kube_or_none()
        if kube is None:
            return "unknown (no kube-api access)"
        try:
            managed = Storage(kube, Owner(self.app.name, self.model.uuid)).managed()
        except KubeError as e:
            if kube_status(e) is None:
                raise
            return f"unknown (Kubernetes API: {e.status} {e.reason})"  # an action: no retry
        if not managed:
            return "none"
        result: dict[str, str] = {}
        for item in managed:
            name = item.consumer or "unlabelled"
            key, n = name, 1
            while key in result:
                n += 1
                key = f"{name}-{n}"
            result[key] = f"{item.key} {item.phase}"
        return result
