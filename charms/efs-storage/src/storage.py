# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The Kubernetes side of efs-storage: one PersistentVolume + claim per consumer.

No ops code here: the charm passes a `Kube` client (lib/charms/gpu_k8s/v0/kubeclient.py)
and plain data, and gets plain data back.

Who creates the PersistentVolumeClaim, and why it is this charm
----------------------------------------------------------------
Each `shared-storage` consumer asks for the namespace its pods run in. The product asks
for the claim to appear there, created by the storage charm. `kube-api` grants namespaced
rules only in the requester's own namespace, so two designs were possible:

1. efs-storage creates only the cluster-scoped PersistentVolume (pre-bound with
   `claimRef`), and every consumer creates the claim in its own namespace;
2. efs-storage asks `kube-api` for cluster-wide rights on PersistentVolumeClaims and
   creates both objects itself.

We chose 2. The extra privilege is limited to PersistentVolumeClaims (get, list, create,
patch, delete), plus listing pods in each namespace of a consumer it serves (a Role the
control plane writes there: lib kube_api PROVISIONER_RULES), which the removal path needs
anyway to refuse deleting a claim that pods still mount. Where it may not list them (a
consumer not admitted yet, or one whose grant is gone: 403), a claim is kept: one not
proved unused is never deleted (`pods_using`). In exchange the contract stays as the
product describes it: consumers need no storage rights at all, the PV/PVC pair is made and
removed by one owner (so it never ends half-created across two charms), and the claim is
pre-bound both ways (`PV.spec.claimRef` and `PVC.spec.volumeName`) so no other claim can
take the volume. Every object carries this application's labels; the charm only ever
deletes objects with those labels.

A consumer's own directory (`directory`, `uid`, `gid` on the relation) is made by a Job
first (directories.py); the volume then exports that directory instead of `path`. `Storage`
asks for it through a `Preparer` (what `directories.Directories` is) and never imports
that module: the two share only the words in claims.py.

Names: the claim is `<efs-app>-<consumer-app>` (unique in a namespace for a pair of
applications); the volume, cluster-scoped, adds the namespace and a digest of the model
UUID so that two models sharing a cluster never collide.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from claims import (
    ANNOTATION_FS,
    ANNOTATION_OWNER,
    ANNOTATION_PATH,
    LABEL_CONSUMER,
    ClaimSpec,
    Owner,
    Preparation,
    efs_path,
    fit_name,
    owner_text,
)
from literals import CSI_DRIVER, CSI_MOUNT_OPTIONS, FIELD_MANAGER, MOUNT_OPTIONS

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

logger = logging.getLogger(__name__)

_FINISHED_PHASES = ("Succeeded", "Failed")
# How kube-apiserver words a ValidatingAdmissionPolicy's denial, before the policy's message
# (k8s.io/apiserver pkg/admission/plugin/policy/validating/dispatcher.go: "ValidatingAdmission
# Policy '%s' with binding '%s' denied request: %s").
ADMISSION_DENIAL = "denied request: "
# The label the control plane puts on the namespace it grants a kube-api consumer: the
# consumer's application name (kubernetes-control-plane literals.CONSUMER_LABEL).
LABEL_NAMESPACE_CONSUMER = "gpu-k8s.io/consumer"
# Why a namespace's pods cannot be read (`pods_using`): the control plane lets this
# application list them only where it serves a consumer it admitted (lib kube_api
# PROVISIONER_RULES).
PODS_UNREADABLE = (
    "the control plane lets efs-storage list pods only in the namespaces of the consumers it"
    " serves"
)


# How the status of a removal held up by claims still used begins (charm.py _teardown)
CLAIMS_IN_USE = "removing: claim "


def kept_line(key: str, pods: list[str] | None, *, removing: bool = False) -> str:
    """The status line of claim `key`, no longer wanted, that stays (`Storage.release`).

    `pods`: those that use it, or None when they cannot be read; `removing`: the
    application is being removed.
    """
    if removing and pods is None:
        return f"{CLAIMS_IN_USE}{key} may be in use ({PODS_UNREADABLE}): kept"
    if removing:
        return (
            f"{CLAIMS_IN_USE}{key} is used by pods {', '.join((pods or [])[:5])}; "
            "delete them to finish removal"
        )
    if pods is None:
        return f"claim {key} is no longer wanted but may be in use ({PODS_UNREADABLE}): kept"
    return (
        f"claim {key} is no longer wanted but pods {', '.join(pods[:5])} use it; "
        "delete them to release it"
    )


class ClaimConflictError(Exception):
    """An object with our name exists but was not made by this application (operator fixes)."""


class Preparer(Protocol):
    """What `Storage` needs to give a consumer its own directory (`directories.Directories`)."""

    def prepare(self, spec: ClaimSpec) -> Preparation:
        """Make `spec.directory` with its owner, or say where that stands."""
        ...

    def forget(self, spec: ClaimSpec) -> None:
        """Drop what was kept to make `spec.directory` (once its volume is applied)."""
        ...


def claim_spec(
    owner: Owner,
    *,
    consumer: str,
    namespace: str,
    capacity: str,
    server: str,
    path: str,
    file_system_id: str,
    directory: str | None = None,
    directory_owner: tuple[int, int] = (0, 0),
    access_point: str | None = None,
) -> ClaimSpec:
    """The names and contents of the pair serving `consumer` in `namespace`.

    `path` is the configured root; with a `directory` the volume exports that directory
    below it, owned by `directory_owner` (uid, gid).
    """
    model_digest = hashlib.sha256(owner.model_uuid.encode()).hexdigest()[:6]
    return ClaimSpec(
        consumer=consumer,
        namespace=namespace,
        claim_name=fit_name(f"{owner.app}-{consumer}"),
        volume_name=fit_name(f"{owner.app}-{namespace}-{consumer}-{model_digest}"),
        capacity=capacity,
        server=server,
        path=efs_path(path, directory),
        file_system_id=file_system_id,
        directory=directory,
        directory_owner=directory_owner,
        access_point=access_point,
    )


def namespace_problem(kube: Kube, consumer: str, namespace: str) -> str | None:
    """Why `consumer`'s claim may not go into `namespace`, or None (review N3).

    A claim goes only into the namespace the control plane granted that consumer on
    kube-api: it labels that Namespace `gpu-k8s.io/consumer: <application>` (the control
    plane's rbac.manifests and literals.CONSUMER_LABEL) and grants no consumer any write on
    namespaces (kube_api `_NAMESPACES`), so the label is its word. A namespace not there yet
    is made when the consumer is granted it; its claim waits for it (`ensure`).
    """
    live = kube.get("v1", "Namespace", namespace)
    if live is None:
        return None
    holder = ((live.get("metadata") or {}).get("labels") or {}).get(LABEL_NAMESPACE_CONSUMER)
    if holder == consumer:
        return None
    if holder:
        return (
            f"namespace {namespace} is granted to {holder} on kube-api, not to {consumer}; "
            "ask for the namespace the control plane granted you"
        )
    return (
        f"namespace {namespace} was not granted to {consumer} on kube-api; ask for the "
        "namespace the control plane granted you"
    )


def _annotations(spec: ClaimSpec) -> dict[str, str]:
    annotations = {ANNOTATION_FS: spec.file_system_id}
    if spec.directory or spec.access_point:
        annotations[ANNOTATION_OWNER] = owner_text(spec.directory_owner)
    if spec.access_point:
        annotations[ANNOTATION_PATH] = spec.path
    return annotations


def volume_source(spec: ClaimSpec) -> dict[str, Any]:
    """The volume's source: the consumer's access point over TLS, or plain NFS v4.1."""
    if spec.access_point:
        handle = f"{spec.file_system_id}::{spec.access_point}"
        return {"csi": {"driver": CSI_DRIVER, "volumeHandle": handle}}
    return {"nfs": {"server": spec.server, "path": spec.path}}


def _live_source(volume: dict) -> dict[str, Any]:
    lspec = volume.get("spec") or {}
    if lspec.get("csi"):
        csi = lspec["csi"]
        return {"csi": {"driver": csi.get("driver"), "volumeHandle": csi.get("volumeHandle")}}
    return {"nfs": lspec.get("nfs")}


def volume_manifest(owner: Owner, spec: ClaimSpec) -> dict[str, Any]:
    """The PersistentVolume: EFS (through the access point or NFS), Retain, pre-bound."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": spec.volume_name,
            "labels": {**owner.labels, LABEL_CONSUMER: spec.consumer},
            "annotations": _annotations(spec),
        },
        "spec": {
            "capacity": {"storage": spec.capacity},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "mountOptions": list(CSI_MOUNT_OPTIONS if spec.access_point else MOUNT_OPTIONS),
            **volume_source(spec),
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": spec.namespace,
                "name": spec.claim_name,
            },
        },
    }


def claim_manifest(owner: Owner, spec: ClaimSpec) -> dict[str, Any]:
    """The ReadWriteMany PersistentVolumeClaim bound to the volume by name."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": spec.claim_name,
            "namespace": spec.namespace,
            "labels": {**owner.labels, LABEL_CONSUMER: spec.consumer},
            "annotations": _annotations(spec),
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "volumeName": spec.volume_name,
            "resources": {"requests": {"storage": spec.capacity}},
        },
    }


@dataclasses.dataclass(frozen=True)
class ClaimState:
    """Where one consumer's claim stands after `Storage.ensure`.

    `problem` is set when the pair could not be made as asked: `waiting` tells whether it
    clears by itself (the namespace is not there yet) or needs the operator.
    """

    spec: ClaimSpec
    phase: str
    problem: str | None = None
    waiting: bool = False
    # Served as it was, with a change still to make (moving onto an access point).
    note: str = ""

    @property
    def bound(self) -> bool:
        """Whether Kubernetes bound the claim to the volume."""
        return self.phase == "Bound" and self.problem is None


@dataclasses.dataclass(frozen=True)
class Managed:
    """A claim (and its volume) made by this application, found in the cluster."""

    consumer: str
    namespace: str
    claim_name: str | None
    volume_name: str | None
    phase: str
    # What its volume exports and when the volume was made (None when the volume is gone).
    path: str | None = None
    created: str = ""
    # The access point its volume mounts through (None: a plain NFS volume, or no volume).
    access_point: str | None = None
    nfs: bool = False

    @property
    def key(self) -> str:
        """`namespace/claim` (or the volume name when the claim is gone)."""
        if self.claim_name:
            return f"{self.namespace}/{self.claim_name}"
        return f"volume {self.volume_name}"


def _volume_matches(live: dict, spec: ClaimSpec, owner: Owner) -> bool:
    want = volume_manifest(owner, spec)
    lspec = live.get("spec") or {}
    claim_ref = lspec.get("claimRef") or {}
    labels = (live.get("metadata") or {}).get("labels") or {}
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    wanted = want["metadata"]["annotations"]
    return (
        annotations.get(ANNOTATION_OWNER) == wanted.get(ANNOTATION_OWNER)
        and annotations.get(ANNOTATION_PATH) == wanted.get(ANNOTATION_PATH)
        and _live_source(live) == volume_source(spec)
        and (lspec.get("capacity") or {}).get("storage") == spec.capacity
        and lspec.get("mountOptions") == want["spec"]["mountOptions"]
        and lspec.get("persistentVolumeReclaimPolicy") == "Retain"
        and claim_ref.get("namespace") == spec.namespace
        and claim_ref.get("name") == spec.claim_name
        and all(labels.get(k) == v for k, v in want["metadata"]["labels"].items())
    )


def _source(volume: dict | None) -> dict[str, Any]:
    """The path a live volume exports and its creation time, for `Managed`."""
    if volume is None:
        return {}
    lspec = volume.get("spec") or {}
    handle = (lspec.get("csi") or {}).get("volumeHandle") or ""
    annotations = volume["metadata"].get("annotations") or {}
    return {
        "path": (lspec.get("nfs") or {}).get("path") or annotations.get(ANNOTATION_PATH),
        "created": volume["metadata"].get("creationTimestamp") or "",
        "access_point": handle.rpartition(":")[2] or None if handle else None,
        "nfs": bool(lspec.get("nfs")),
    }


class Storage:
    """Creates, inspects and removes this application's PV/PVC pairs."""

    def __init__(self, kube: Kube, owner: Owner, directories: Preparer | None = None):
        self.kube = kube
        self.owner = owner
        self.directories = directories

    # -- ensure ---------------------------------------------------------------------------
    def ensure(self, spec: ClaimSpec) -> ClaimState:
        """Make the pair exist as `spec` says (no request is sent when it already does).

        A volume pointing at another file system or path (NFS source is immutable) is
        replaced, but only when no pod uses its claim. A consumer's own directory is made
        (and given to its owner) before its volume is applied.
        """
        try:
            live_volume = self._owned_or_absent("PersistentVolume", spec.volume_name, None)
            live_claim = self._owned_or_absent(
                "PersistentVolumeClaim", spec.claim_name, spec.namespace
            )
        except ClaimConflictError as e:
            return ClaimState(spec, "", str(e))
        moving = live_volume is not None and _live_source(live_volume) != volume_source(spec)
        if moving:
            users = self.pods_using(spec.namespace, spec.claim_name)
            if users is None:
                return ClaimState(
                    spec,
                    "",
                    f"waiting to read the pods of namespace {spec.namespace} before moving "
                    f"claim {spec.key}: {PODS_UNREADABLE}",
                    waiting=True,
                )
            if users and spec.access_point and _live_source(live_volume or {}).get("nfs"):
                # Onto its access point (the same directory, the same owner): the claim
                # keeps serving over NFS meanwhile, and moves once no pod holds it.
                phase = ((live_claim or {}).get("status") or {}).get("phase") or "Pending"
                return ClaimState(
                    spec,
                    phase,
                    note=(
                        f"{spec.key} moves onto access point {spec.access_point} once pods "
                        f"{', '.join(users[:5])} stop"
                    ),
                )
            if users:
                return ClaimState(
                    spec,
                    "",
                    f"claim {spec.key} still points at the old file system or directory and is "
                    f"used by pods {', '.join(users[:5])}; stop them to move it to "
                    f"{spec.file_system_id}:{spec.path}",
                )
        stale = live_volume is None or not _volume_matches(live_volume, spec, self.owner)
        # an access point makes its directory itself (CreationInfo), on the first mount
        if stale and spec.directory and not spec.access_point:
            preparing = self._prepare(spec)
            if preparing is not None:
                return preparing
        return self._apply_pair(spec, live_volume, live_claim, moving)

    def _apply_pair(
        self, spec: ClaimSpec, live_volume: dict | None, live_claim: dict | None, moving: bool
    ) -> ClaimState:
        """Replace (when `moving`), create or repair the pair, once nothing stands in the way."""
        if moving:
            going = self._replace(spec, live_volume)
            if going is not None:
                return going
            live_volume = live_claim = None
        refused = self._volume(spec, live_volume, live_claim)
        if refused is not None:
            return refused
        if live_claim is None:
            live_claim, refused = self._admitted(spec, lambda: self._create_claim(spec))
            if refused is not None:
                return refused
            if live_claim is None:
                return ClaimState(
                    spec, "", f"namespace {spec.namespace} does not exist yet", waiting=True
                )
        elif (live_claim.get("spec") or {}).get("volumeName") != spec.volume_name:
            return ClaimState(
                spec,
                "",
                f"claim {spec.key} is bound to another volume; delete it so that it can be "
                "recreated",
            )
        phase = (live_claim.get("status") or {}).get("phase") or "Pending"
        return ClaimState(spec, phase)

    def _volume(
        self, spec: ClaimSpec, live_volume: dict | None, live_claim: dict | None
    ) -> ClaimState | None:
        """Apply or repair the volume; the state where admission refused it, else None."""
        if live_volume is None or not _volume_matches(live_volume, spec, self.owner):
            logger.info("applying PersistentVolume %s", spec.volume_name)
            manifest = volume_manifest(self.owner, spec)
            _, refused = self._admitted(
                spec, lambda: self.kube.apply(manifest, field_manager=FIELD_MANAGER)
            )
            directories = self.directories
            if refused is None and spec.directory and not spec.access_point and directories:
                directories.forget(spec)
            return refused
        if (live_volume.get("status") or {}).get("phase") == "Released" and live_claim is None:
            # Its claim was deleted: forget the old claim's uid so a new claim can bind.
            logger.info("making released PersistentVolume %s available", spec.volume_name)
            forget = {"spec": {"claimRef": {"uid": None, "resourceVersion": None}}}
            _, refused = self._admitted(
                spec,
                lambda: self.kube.patch("v1", "PersistentVolume", spec.volume_name, forget),
            )
            return refused
        return None

    def _replace(self, spec: ClaimSpec, live_volume: dict | None) -> ClaimState | None:
        """Delete the pair whose source moves; None once its volume is gone."""
        # A volume's source is immutable and a deleted one lingers (pv-protection) until
        # its claim is gone: the new pair is made on a later event, once it went.
        if not (live_volume or {}).get("metadata", {}).get("deletionTimestamp"):
            logger.info("moving claim %s to %s:%s", spec.key, spec.file_system_id, spec.path)
            self._delete_pair(spec.namespace, spec.claim_name, spec.volume_name)
        if self.kube.get("v1", "PersistentVolume", spec.volume_name) is None:
            return None
        return ClaimState(
            spec,
            "",
            f"moving claim {spec.key} to {spec.file_system_id}:{spec.path}: "
            "waiting for the old volume to go",
            waiting=True,
        )

    def _admitted(
        self, spec: ClaimSpec, write: Callable[[], dict | None]
    ) -> tuple[dict | None, ClaimState | None]:
        """(what `write` returned, None), or (None, the state) where admission refused it."""
        try:
            return write(), None
        except KubeError as e:
            refused = self._not_admitted(spec, e)
            if refused is None:
                raise
            return None, refused

    def _not_admitted(self, spec: ClaimSpec, error: KubeError) -> ClaimState | None:
        """The state of a volume the control plane's admission policy refused; else None.

        The control plane fences this application's writes to the consumers it serves, in
        the namespaces granted to them (its admission policy gpu-k8s-efs-within-consumers),
        from what this application published (lib kube_api storage-consumers): a consumer
        not admitted yet, or one asking for a namespace not granted to it (not made yet),
        waits for it rather than fail the hook.
        """
        if error.status != 403 or ADMISSION_DENIAL not in error.message:
            return None
        if self.kube.get("v1", "Namespace", spec.namespace) is None:
            return ClaimState(
                spec, "", f"namespace {spec.namespace} does not exist yet", waiting=True
            )
        why = error.message.partition(ADMISSION_DENIAL)[2]
        return ClaimState(
            spec,
            "",
            f"waiting for the control plane to admit {spec.consumer}'s claim {spec.key}: {why}",
            waiting=True,
        )

    def _prepare(self, spec: ClaimSpec) -> ClaimState | None:
        """None once `spec`'s directory exists with its owner; else the state to report."""
        if self.directories is None:
            return ClaimState(spec, "", f"cannot prepare {spec.path}: no namespace for Jobs")
        done = self.directories.prepare(spec)
        if done.done:
            return None
        return ClaimState(spec, "", done.problem, waiting=not done.failed)

    def _owned_or_absent(self, kind: str, name: str, namespace: str | None) -> dict | None:
        live = self.kube.get("v1", kind, name, namespace)
        if live is not None and not self.owner.owns(live):
            where = f"{namespace}/{name}" if namespace else name
            raise ClaimConflictError(
                f"{kind} {where} exists but was not created by {self.owner.app}; "
                "remove it or rename one of the applications"
            )
        return live

    def _create_claim(self, spec: ClaimSpec) -> dict | None:
        """Apply the claim; None when its namespace does not exist (yet)."""
        logger.info("applying PersistentVolumeClaim %s", spec.key)
        try:
            return self.kube.apply(claim_manifest(self.owner, spec), field_manager=FIELD_MANAGER)
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    # -- inspect --------------------------------------------------------------------------
    def pods_using(self, namespace: str, claim_name: str) -> list[str] | None:
        """Names of the pods in `namespace` (not finished) that mount `claim_name`.

        None when this application may not list them there (RBAC's 403: the control plane
        grants it in the namespaces of the consumers it admits, PODS_UNREADABLE): nobody
        can say the claim is unused.
        """
        users = []
        try:
            pods = self.kube.list("v1", "Pod", namespace)
        except KubeError as e:
            if e.status != 403:
                raise
            logger.warning("cannot list the pods of namespace %s: %s", namespace, e.message)
            return None
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in _FINISHED_PHASES:
                continue
            for volume in (pod.get("spec") or {}).get("volumes") or []:
                if (volume.get("persistentVolumeClaim") or {}).get("claimName") == claim_name:
                    users.append(pod["metadata"]["name"])
                    break
        return sorted(users)

    def managed(self) -> list[Managed]:
        """Every pair this application made, found by label (claims and orphan volumes)."""
        claims = self.kube.list("v1", "PersistentVolumeClaim", None, self.owner.selector)
        volumes = {
            v["metadata"]["name"]: v
            for v in self.kube.list("v1", "PersistentVolume", None, self.owner.selector)
        }
        out: list[Managed] = []
        claimed: set[str] = set()
        for claim in claims:
            meta = claim["metadata"]
            volume = (claim.get("spec") or {}).get("volumeName")
            claimed.add(volume or "")
            out.append(
                Managed(
                    consumer=(meta.get("labels") or {}).get(LABEL_CONSUMER, ""),
                    namespace=meta.get("namespace", ""),
                    claim_name=meta["name"],
                    volume_name=volume,
                    phase=(claim.get("status") or {}).get("phase") or "Pending",
                    **_source(volumes.get(volume or "")),
                )
            )
        for name, volume in volumes.items():
            meta = volume["metadata"]
            if name in claimed:
                continue
            ref = (volume.get("spec") or {}).get("claimRef") or {}
            out.append(
                Managed(
                    consumer=(meta.get("labels") or {}).get(LABEL_CONSUMER, ""),
                    namespace=ref.get("namespace", ""),
                    claim_name=None,
                    volume_name=name,
                    phase=(volume.get("status") or {}).get("phase") or "Available",
                    **_source(volume),
                )
            )
        return sorted(out, key=lambda m: (m.namespace, m.claim_name or "", m.volume_name or ""))

    # -- remove ---------------------------------------------------------------------------
    def release(self, item: Managed) -> list[str] | None:
        """Delete the claim and its volume unless pods use the claim; returns those pods.

        None, and nothing deleted, when the pods of its namespace cannot be read
        (`pods_using`). The volume's reclaim policy is Retain, so the data on EFS is never
        touched.
        """
        if item.claim_name:
            users = self.pods_using(item.namespace, item.claim_name)
            if users is None or users:
                return users
        self._delete_pair(item.namespace, item.claim_name, item.volume_name)
        return []

    def release_all_except(
        self, keep: set[str], managed: list[Managed] | None = None
    ) -> dict[str, list[str] | None]:
        """Release every managed pair whose claim (`namespace/claim`) or volume is not in `keep`.

        `managed` is what `managed()` returned earlier in this pass (listed again if None).

        Returns:
            `namespace/claim` -> pods still using it, or None where they cannot be read,
            for the pairs that had to stay.
        """
        blocked: dict[str, list[str] | None] = {}
        for item in self.managed() if managed is None else managed:
            if item.key in keep or (item.claim_name is None and item.volume_name in keep):
                continue
            users = self.release(item)
            if users is None or users:
                blocked[item.key] = users
        return blocked

    def _delete_pair(self, namespace: str, claim: str | None, volume: str | None) -> None:
        if claim:
            logger.info("deleting PersistentVolumeClaim %s/%s", namespace, claim)
            self.kube.delete("v1", "PersistentVolumeClaim", claim, namespace)
        if volume:
            logger.info("deleting PersistentVolume %s", volume)
            self.kube.delete("v1", "PersistentVolume", volume)
