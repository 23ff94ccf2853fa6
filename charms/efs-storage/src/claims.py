# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What a consumer's claim is, in the words `storage.py` and `directories.py` share.

The owner of the objects (an application of one model, found by its labels), the spec of
the PersistentVolume + claim pair serving one consumer, the path a volume exports, the
owner a consumer's directory is given, and where making that directory stands. Plain data
and names only: this module imports nothing of the charm but its constants
(`literals.py`), so that both the PV/PVC side (`storage.py`) and the directory Jobs
(`directories.py`) can use it without importing each other.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath

from literals import FIELD_MANAGER

# Labels on the PersistentVolumes, PersistentVolumeClaims and Jobs this charm creates.
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_APP = "gpu-k8s.io/efs-app"
LABEL_MODEL = "gpu-k8s.io/efs-model"
LABEL_CONSUMER = "gpu-k8s.io/consumer"
ANNOTATION_FS = "gpu-k8s.io/efs-file-system-id"
# The `uid:gid` a volume's directory was given (directories.py): a volume that records the
# owner asked for needs no Job.
ANNOTATION_OWNER = "gpu-k8s.io/efs-directory-owner"
# The path an access point's volume serves (its CSI source names only the access point).
ANNOTATION_PATH = "gpu-k8s.io/efs-path"

_MAX_NAME = 63


def fit_name(name: str, limit: int = _MAX_NAME) -> str:
    """`name` if it fits a DNS label, else a truncated form ending in a digest of it."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-')}-{digest}"


def efs_path(root: str, directory: str | None) -> str:
    """The path on the file system that a volume exports: `root`, or `directory` below it."""
    if not directory:
        return root
    return posixpath.normpath(posixpath.join(root, directory))


def owner_text(owner: tuple[int, int]) -> str:
    """`uid:gid` as chown takes it and the volume records it."""
    return f"{owner[0]}:{owner[1]}"


@dataclasses.dataclass(frozen=True)
class Owner:
    """The application that owns the objects (selects them by label)."""

    app: str
    model_uuid: str

    @property
    def labels(self) -> dict[str, str]:
        """Labels on every object this application creates."""
        return {LABEL_MANAGED_BY: FIELD_MANAGER, LABEL_APP: self.app, LABEL_MODEL: self.model_uuid}

    @property
    def selector(self) -> str:
        """Label selector of this application's objects."""
        return f"{LABEL_APP}={self.app},{LABEL_MODEL}={self.model_uuid}"

    def owns(self, obj: dict) -> bool:
        """Whether `obj` carries this application's labels."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in self.labels.items())


@dataclasses.dataclass(frozen=True)
class ClaimSpec:
    """The PV/PVC pair serving one consumer."""

    consumer: str
    namespace: str
    claim_name: str
    volume_name: str
    capacity: str
    server: str
    path: str
    file_system_id: str
    directory: str | None = None
    directory_owner: tuple[int, int] = (0, 0)
    # The consumer's EFS access point: the volume mounts through it with TLS (EFS CSI
    # driver); None: a plain NFS volume (the driver is not on every node yet).
    access_point: str | None = None

    @property
    def key(self) -> str:
        """`namespace/claim` as shown to the operator."""
        return f"{self.namespace}/{self.claim_name}"


@dataclasses.dataclass(frozen=True)
class Preparation:
    """Where making one directory stands: done, still running, or failed with why."""

    done: bool
    problem: str | None = None
    failed: bool = False
