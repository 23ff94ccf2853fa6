# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""How a reconcile serves consumers: through EFS access points (confining) or plain NFS.

Once the EFS CSI driver runs on every node, each consumer gets an access point
(`access_points.py`) and volumes mount through it; access points no volume uses are
deleted, and once no plain NFS volume is left the file system policy goes on (TLS only,
root only through the charm's root access points). The charm builds one `Access` a pass.

An ops component: an AWS error stops the reconcile with a status (`aws_access.aws_call`).
"""

from __future__ import annotations

import dataclasses
import json

import aws
from access_points import AccessPoint, Wanted
from aws_access import aws_call
from charm_config import Config
from claims import efs_path
from efs import Efs
from efs_model import Desired, Observed
from literals import CSI_DRIVER, CSI_NODE_ANNOTATION
from storage import ClaimState, Storage

from charms.gpu_k8s.v0.shared_storage import StorageRequest


@dataclasses.dataclass(frozen=True)
class RootServed:
    """A consumer served the file system's root through an access point (issue 29 item 5).

    `path` and `uid`: the access point's, as EFS describes it (its root directory, the
    configured `path`; its POSIX user: 0 acts as root on every consumer's directory, and a
    consumer that asks for no directory names no uid: shared_storage). `why`:
    `root-consumers` names it, or it held the root before access points (its data is
    there).
    """

    consumer: str
    path: str
    why: str
    uid: int

    @classmethod
    def of(cls, consumer: str, config: Config, point: AccessPoint) -> RootServed:
        """`consumer`, served the root through `point`, and why (as charm.py chose the root)."""
        if consumer in config.root_consumer_names:
            why = "root-consumers"
        else:
            why = "held it before access points"
        return cls(consumer, point.path, why, point.uid)


ROOT_SHOWN = 3  # consumers the status names; the others are counted


def root_note(served: list[RootServed]) -> str:
    """The status suffix naming who is served the root, and as which uid; "" for nobody."""
    if not served:
        return ""
    shown = ", ".join(f"{r.consumer} ({r.why}) as uid {r.uid}" for r in served[:ROOT_SHOWN])
    if len(served) > ROOT_SHOWN:
        shown += f" and {len(served) - ROOT_SHOWN} more"
    return f"; the file system's root {served[0].path} is served to {shown}"


@dataclasses.dataclass
class Access:
    """How this pass serves consumers: through access points (confining) or plain NFS."""

    manager: Efs
    desired: Desired
    observed: Observed
    driver_ready: bool
    confining: bool = False
    nfs_left: list[str] = dataclasses.field(default_factory=list)
    policy: bool = False
    root: list[RootServed] = dataclasses.field(default_factory=list)

    def note(self, states: list[ClaimState]) -> str:
        """What the Active status adds about confinement (empty once all is confined)."""
        if not states:
            return ""  # no consumer: nobody to confine
        if not self.confining:
            return (
                f"; consumers are not confined (NFS as root, no TLS): the EFS CSI driver "
                f"{CSI_DRIVER} is not on every node"
            )
        return self._unconfined(states) + root_note(self.root)

    def _unconfined(self, states: list[ClaimState]) -> str:
        moving = [s.note for s in states if s.note]
        if moving:
            return f"; not confined yet: {'; '.join(moving)}"
        if self.nfs_left:
            return f"; not confined yet: NFS volumes {', '.join(self.nfs_left[:5])} remain"
        if not self.policy and self.observed.owned:
            return "; waiting to put the file system policy"
        return ""


def csi_driver_on_every_node(nodes: list[dict]) -> bool:
    """Whether kubelet registered the EFS CSI driver's node plugin on every Node."""
    if not nodes:
        return False
    for node in nodes:
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        try:
            drivers = json.loads(annotations.get(CSI_NODE_ANNOTATION) or "{}")
        except json.JSONDecodeError:
            return False
        if not isinstance(drivers, dict) or CSI_DRIVER not in drivers:
            return False
    return True


def access_points(
    access: Access, config: Config, accepted: list[tuple[StorageRequest, str | None]]
) -> dict[str, AccessPoint | aws.AwsApiError]:
    """Each accepted consumer's access point, once the file system is available."""
    if not access.confining or access.observed.state != "available":
        return {}
    wanted = [
        Wanted(request.app_name, efs_path(config.path, directory), *request.owner)
        for request, directory in accepted
    ]
    fs_id = access.observed.file_system_id or ""
    return aws_call(lambda: access.manager.access_points(access.desired, fs_id, wanted))


def confine(
    access: Access,
    storage: Storage,
    keep: set[str],
    points: dict[str, AccessPoint | aws.AwsApiError],
) -> None:
    """Delete access points no volume uses; then put the file system policy.

    The policy (TLS only, root only through the charm's root access points) goes on
    once no plain NFS volume of this application is left.
    """
    fs_id = access.observed.file_system_id or ""
    keep |= {p.access_point_id for p in points.values() if isinstance(p, AccessPoint)}
    aws_call(lambda: access.manager.delete_access_points(access.desired, fs_id, keep))
    left = [m.key for m in storage.managed() if m.nfs]
    if left:
        access.nfs_left = left
        return
    if not access.observed.owned:
        return  # an adopted file system's policy is its owner's (docs/how-to/efs-backup.md)
    roots = [p.arn for p in points.values() if isinstance(p, AccessPoint) and p.uid == 0]
    aws_call(lambda: access.manager.confine(access.observed, roots))
    access.policy = True
