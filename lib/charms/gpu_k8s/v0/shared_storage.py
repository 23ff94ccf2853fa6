# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The `shared-storage` interface: a ReadWriteMany PersistentVolumeClaim on shared storage.

A consumer (`SharedStorageRequirer`, e.g. tensorflow) asks in its application databag for
the Kubernetes namespace its pods run in:

    namespace: training

The storage charm (`SharedStorageProvider`, efs-storage) creates a PersistentVolume for
that consumer and the PersistentVolumeClaim bound to it **in the requested namespace**, then
answers in its application databag:

    claim-name: efs-storage-tensorflow
    capacity: 1Ti
    file-system-id: fs-0123456789abcdef0
    namespace: training
    ready: "true"

or, when it cannot serve the request, only `error: <reason>`. `ready` is "true" once the
file system and all its mount targets are available and the claim is Bound; until then the
other fields are already set (with `ready: "false"`) so that the consumer can show progress.
`namespace` echoes the namespace the answer is for: an answer for another namespace (the
consumer changed its request) counts as not answered yet.

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

LIBID = "f8e5b0b58e814d808649f0389b84f615"
LIBAPI = 0
LIBPATCH = 4

logger = logging.getLogger(__name__)

RESERVED_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease", "default"})
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_FS_ID = re.compile(r"^fs-[0-9a-f]{8,40}$")
# A Kubernetes resource quantity with a binary or decimal suffix (e.g. 1Ti, 500Gi, 100G).
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def check_namespace(value: str) -> str:
    """Return `value` when it is a DNS-1123 label; raise ValueError saying why not."""
    if not _LABEL.match(value):
        raise ValueError("must be a DNS-1123 label (lowercase letters, digits, dashes, <= 63)")
    return value


class RequirerAppData(Databag):
    """What a consumer asks for: the namespace its pods run in."""

    namespace: str

    @pydantic.field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return check_namespace(value)


class ProviderAppData(Databag):
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
    """

    relation: ops.Relation
    app_name: str
    namespace: str | None
    error: str | None


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
            if request.namespace in RESERVED_NAMESPACES:
                error = f"namespace {request.namespace} is reserved; ask for your own namespace"
                out.append(StorageRequest(relation, relation.app.name, None, error))
                continue
            out.append(StorageRequest(relation, relation.app.name, request.namespace, None))
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
    ) -> None:
        """Publish the claim made for one relation (leader only; writes only what changed).

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


class SharedStorageRequirer(Endpoint):
    """The consumer side: asks for a claim in its namespace and reads the answer."""

    def __init__(
        self, charm: ops.CharmBase, relation_name: str = "shared-storage", *, namespace: str
    ):
        super().__init__(charm, relation_name)
        self.request = RequirerAppData(namespace=namespace)
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
