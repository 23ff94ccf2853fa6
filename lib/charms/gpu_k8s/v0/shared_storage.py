# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The `shared-storage` interface: a ReadWriteMany PersistentVolumeClaim on shared storage.

A consumer (`SharedStorageRequirer`, e.g. tensorflow) asks in its application databag for
the Kubernetes namespace its pods run in and, optionally, a directory of its own owned by the
user and group its pods run as:

    namespace: training
    directory: tensorflow      # optional: relative to the storage's root, `a/b` allowed
    uid: "1000"                # optional, with gid: the directory's owner (default 0)
    gid: "1000"

Without `directory` the claim serves the storage's root, owned by root: only pods running
as root can write there. With it, the provider creates the directory once (mode 2775:
group-writable, new files keep its group), makes `uid:gid` its owner, and the claim serves
that directory alone. Only the directory itself is chowned, never what is already in it.

The storage charm (`SharedStorageProvider`, efs-storage) creates a PersistentVolume for
that consumer and the PersistentVolumeClaim bound to it **in the requested namespace**, then
answers in its application databag:

    claim-name: efs-storage-tensorflow
    capacity: 1Ti
    file-system-id: fs-0123456789abcdef0
    namespace: training
    directory: tensorflow      # echoes the request, like uid and gid
    uid: "1000"
    gid: "1000"
    ready: "true"

or, when it cannot serve the request, only `error: <reason>`. `ready` is "true" once the
file system and all its mount targets are available and the claim is Bound; until then the
other fields are already set (with `ready: "false"`) so that the consumer can show progress.
`namespace`, `directory`, `uid` and `gid` echo the request the answer is for: an answer for
another request (the consumer changed it) counts as not answered yet.

Who creates the claim: the provider. The consumer only mounts the claim named in the
answer (`persistentVolumeClaim.claimName`); it needs no rights on PersistentVolumes or
PersistentVolumeClaims. The provider removes the claim and the volume when the relation
goes away (refusing while pods still use the claim) and never deletes the data.

A databag that does not validate is never a traceback: `problem()` on the requirer and
`StorageRequest.error` on the provider say which field is wrong.

Consumers observe the endpoint's `relation_changed`/`relation_broken` events themselves and
read `claim()`/`problem()` in their reconcile::

    self.storage = SharedStorageRequirer(self, "shared-storage", namespace="training")
    ...
    claim = self.storage.claim()
    if claim is None or not claim.ready:
        event.add_status(ops.WaitingStatus(self.storage.problem() or "waiting for storage"))
"""

from __future__ import annotations

import dataclasses
import logging
import re

import ops
import pydantic

from charms.gpu_k8s.v0.databag import Databag, Endpoint, explain, write
from charms.gpu_k8s.v0.kube_api import SYSTEM_NAMESPACES

LIBID = "f8e5b0b58e814d808649f0389b84f615"
LIBAPI = 0
LIBPATCH = 6

logger = logging.getLogger(__name__)

# No consumer's claim goes into a namespace of Kubernetes' or of the control plane's (the
# list kube-api refuses to grant, with its sources) nor any `kube-` one; that a namespace is
# the consumer's own (granted to it on kube-api) is the provider's check against the cluster.
RESERVED_NAMESPACES = SYSTEM_NAMESPACES
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_FS_ID = re.compile(r"^fs-[0-9a-f]{8,40}$")
# One path component: no `.`/`..`, no spaces or shell characters (it becomes an NFS path).
_COMPONENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$")
_DIRECTORY_MAX = 1024
# POSIX ids as Linux and NFSv4 carry them (32-bit; 2**32-1 is reserved as "no id").
_ID_MAX = 2**32 - 2
# A Kubernetes resource quantity with a binary or decimal suffix (e.g. 1Ti, 500Gi, 100G).
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def check_namespace(value: str) -> str:
    """Return `value` when it is a DNS-1123 label; raise ValueError saying why not."""
    if not _LABEL.match(value):
        raise ValueError("must be a DNS-1123 label (lowercase letters, digits, dashes, <= 63)")
    return value


def check_directory(value: str) -> str:
    """Return `value` when it is a relative directory path; raise ValueError saying why not."""
    if not value or len(value) > _DIRECTORY_MAX:
        raise ValueError(f"must be a relative path of 1 to {_DIRECTORY_MAX} characters")
    for part in value.split("/"):
        if not _COMPONENT.match(part) or part in (".", ".."):
            raise ValueError(
                "must be a relative path such as `team/tensorflow`: components of letters, "
                "digits, `.`, `_` and `-`, not starting with `.` or `-`"
            )
    return value


def _check_id(value: int | None) -> int | None:
    if value is not None and not 0 <= value <= _ID_MAX:
        raise ValueError(f"must be a number from 0 to {_ID_MAX}")
    return value


class _Request(Databag):
    """The directory part of a request, shared by both databags (the answer echoes it)."""

    directory: str | None = None
    uid: int | None = None
    gid: int | None = None

    @pydantic.field_validator("directory")
    @classmethod
    def _directory(cls, value: str | None) -> str | None:
        return None if value is None else check_directory(value)

    @pydantic.field_validator("uid", "gid", mode="before")
    @classmethod
    def _id_text(cls, value: object) -> object:
        if isinstance(value, str) and not value.isdigit():
            raise ValueError("must be a number written in decimal digits")
        return value

    @pydantic.field_validator("uid", "gid")
    @classmethod
    def _id(cls, value: int | None) -> int | None:
        return _check_id(value)

    @pydantic.model_validator(mode="after")
    def _owner_needs_directory(self) -> _Request:
        if (self.uid is None) != (self.gid is None):
            raise ValueError("uid and gid go together: give both or neither")
        if self.uid is not None and self.directory is None:
            raise ValueError("uid and gid need a directory: the storage's root stays root's")
        return self


class RequirerAppData(_Request):
    """What a consumer asks for: its namespace and, optionally, its own directory."""

    namespace: str

    @pydantic.field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return check_namespace(value)


class ProviderAppData(_Request):
    """What the storage charm answers: the claim, or `error` alone when it refuses."""

    claim_name: str | None = pydantic.Field(default=None, alias="claim-name")
    capacity: str | None = None
    file_system_id: str | None = pydantic.Field(default=None, alias="file-system-id")
    namespace: str | None = None
    ready: bool | None = None
    error: str | None = None

    @pydantic.field_validator("claim_name")
    @classmethod
    def _claim(cls, value: str | None) -> str | None:
        if value is not None and not _LABEL.match(value):
            raise ValueError("must be a DNS-1123 label")
        return value

    @pydantic.field_validator("namespace")
    @classmethod
    def _ns(cls, value: str | None) -> str | None:
        return None if value is None else check_namespace(value)

    @pydantic.field_validator("capacity")
    @classmethod
    def _capacity(cls, value: str | None) -> str | None:
        if value is not None and not _QUANTITY.match(value):
            raise ValueError("must be a Kubernetes quantity such as 1Ti or 500Gi")
        return value

    @pydantic.field_validator("file_system_id")
    @classmethod
    def _fs_id(cls, value: str | None) -> str | None:
        if value is not None and not _FS_ID.match(value):
            raise ValueError("must be an EFS id such as fs-0123456789abcdef0")
        return value

    @pydantic.field_validator("ready", mode="before")
    @classmethod
    def _ready(cls, value: object) -> object:
        if isinstance(value, str):
            if value not in ("true", "false"):
                raise ValueError('must be "true" or "false"')
            return value == "true"
        return value

    @pydantic.model_validator(mode="after")
    def _complete(self) -> ProviderAppData:
        if self.error:
            return self
        missing = [
            alias
            for alias, value in (
                ("claim-name", self.claim_name),
                ("capacity", self.capacity),
                ("file-system-id", self.file_system_id),
                ("ready", self.ready),
            )
            if value is None
        ]
        if missing:
            raise ValueError(f"{', '.join(missing)} missing (and no error given)")
        return self


@dataclasses.dataclass(frozen=True)
class ClaimInfo:
    """The claim the provider made for this consumer, as the consumer sees it."""

    claim_name: str
    capacity: str
    file_system_id: str
    ready: bool


@dataclasses.dataclass(frozen=True)
class StorageRequest:
    """One consumer's request as the provider sees it.

    Exactly one of `namespace` and `error` is set: `error` says which field is malformed.
    `directory` (relative to the storage's root) is None for the root itself; `uid` and
    `gid` are None when the consumer gave none (see `owner`).
    """

    relation: ops.Relation
    app_name: str
    namespace: str | None
    error: str | None
    directory: str | None = None
    uid: int | None = None
    gid: int | None = None

    @property
    def owner(self) -> tuple[int, int]:
        """`(uid, gid)` that owns the directory: root's when the consumer named none."""
        return (self.uid or 0, self.gid or 0)


class SharedStorageProvider(Endpoint):
    """The storage side: reads the consumers' namespaces and answers with their claims."""

    def __init__(self, charm: ops.CharmBase, relation_name: str = "shared-storage"):
        super().__init__(charm, relation_name)

    def requests(self) -> list[StorageRequest]:
        """Every related application's request; relations with nothing asked yet are left out.

        A reserved namespace (kube-system, default, ...) is an error: shared storage goes
        into the consumer's own namespace.
        """
        out: list[StorageRequest] = []
        for relation in self.relations:
            if relation.app is None:
                continue
            raw = dict(relation.data[relation.app])
            if not raw:
                continue
            try:
                request = RequirerAppData.model_validate(raw)
            except pydantic.ValidationError as e:
                out.append(StorageRequest(relation, relation.app.name, None, explain(e)))
                continue
            if request.namespace in RESERVED_NAMESPACES or request.namespace.startswith("kube-"):
                error = f"namespace {request.namespace} is reserved; ask for your own namespace"
                out.append(StorageRequest(relation, relation.app.name, None, error))
                continue
            out.append(
                StorageRequest(
                    relation,
                    relation.app.name,
                    request.namespace,
                    None,
                    directory=request.directory,
                    uid=request.uid,
                    gid=request.gid,
                )
            )
        return out

    def answer(
        self,
        relation: ops.Relation,
        *,
        claim_name: str,
        capacity: str,
        file_system_id: str,
        ready: bool,
        namespace: str | None = None,
        request: StorageRequest | None = None,
    ) -> None:
        """Publish the claim made for one relation (leader only; writes only what changed).

        `request` (what the claim serves) is echoed so that the consumer can tell an answer
        to its current request from one to an older request.

        Raises:
            ValueError: a field is malformed (a bug in the calling charm).
        """
        try:
            bag = ProviderAppData.model_validate(
                {
                    "claim-name": claim_name,
                    "capacity": capacity,
                    "file-system-id": file_system_id,
                    "namespace": namespace,
                    "ready": ready,
                    **_echo(request),
                }
            )
        except pydantic.ValidationError as e:
            raise ValueError(explain(e)) from None
        data = relation.data[self.charm.app]
        write(data, bag.dump(), remove=list(data))

    def refuse(self, relation: ops.Relation, reason: str) -> None:
        """Answer with `error` only (leader only): the consumer shows `reason`."""
        data = relation.data[self.charm.app]
        write(data, ProviderAppData(error=reason).dump(), remove=list(data))


def _echo(request: StorageRequest | None) -> dict[str, object]:
    if request is None:
        return {}
    echo = {"directory": request.directory, "uid": request.uid, "gid": request.gid}
    return {key: value for key, value in echo.items() if value is not None}


class SharedStorageRequirer(Endpoint):
    """The consumer side: asks for a claim in its namespace and reads the answer.

    `directory` asks for a directory of this consumer's own, owned by `uid`/`gid` (both or
    neither); ValueError when one of them is malformed.
    """

    def __init__(
        self,
        charm: ops.CharmBase,
        relation_name: str = "shared-storage",
        *,
        namespace: str,
        directory: str | None = None,
        uid: int | None = None,
        gid: int | None = None,
    ):
        super().__init__(charm, relation_name)
        try:
            self.request = RequirerAppData(
                namespace=namespace, directory=directory, uid=uid, gid=gid
            )
        except pydantic.ValidationError as e:
            raise ValueError(explain(e)) from None
        events = charm.on[relation_name]
        self.framework.observe(events.relation_created, self._publish)
        self.framework.observe(events.relation_changed, self._publish)
        self.framework.observe(charm.on.leader_elected, self._publish)
        self.framework.observe(charm.on.upgrade_charm, self._publish)

    @property
    def namespace(self) -> str:
        """The namespace asked for."""
        return self.request.namespace

    def _publish(self, _: ops.EventBase) -> None:
        self.publish()

    def publish(self) -> None:
        """Write the request into the application databag (leader only, when changed)."""
        relation = self.relation
        if relation is None or not self.charm.unit.is_leader():
            return
        write(relation.data[self.charm.app], self.request.dump())

    def _answer(self) -> tuple[ProviderAppData | None, str | None]:
        relation = self.relation
        if relation is None:
            return None, f"not related to {self.relation_name}: integrate with efs-storage"
        raw = dict(relation.data[relation.app]) if relation.app else {}
        if not raw:
            return None, "waiting for the storage charm to create the claim"
        try:
            answer = ProviderAppData.model_validate(raw)
        except pydantic.ValidationError as e:
            return None, f"shared-storage databag: {explain(e)}"
        if answer.error:
            return None, f"storage charm refused: {answer.error}"
        if answer.namespace is not None and answer.namespace != self.namespace:
            return None, f"waiting for the storage charm to move the claim to {self.namespace}"
        asked = (self.request.directory, self.request.uid, self.request.gid)
        if (answer.directory, answer.uid, answer.gid) != asked:
            where = self.request.directory or "the storage's root"
            return None, f"waiting for the storage charm to serve {where} on the claim"
        return answer, None

    def claim(self) -> ClaimInfo | None:
        """The claim made for this application (ready or not), or None (see `problem()`)."""
        answer, _ = self._answer()
        if answer is None:
            return None
        return ClaimInfo(
            claim_name=answer.claim_name or "",
            capacity=answer.capacity or "",
            file_system_id=answer.file_system_id or "",
            ready=bool(answer.ready),
        )

    def problem(self) -> str | None:
        """Why the claim cannot be used yet, or None when it exists and is ready."""
        answer, problem = self._answer()
        if problem:
            return problem
        if answer is not None and not answer.ready:
            return (
                f"waiting for claim {answer.claim_name} on EFS {answer.file_system_id} to be ready"
            )
        return None
