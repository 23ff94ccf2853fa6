# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The `kubernetes-cluster` interface: how workers join a control plane.

The control plane (`ClusterProvider`, endpoint `workers`) publishes in its application
databag the cluster's control-plane endpoint, the API servers behind it, the hash of its
CA certificate, the Kubernetes version and the ID of a Juju secret. The endpoint is the
node-local API proxy (`api_proxy.ENDPOINT`): a worker points its own proxy at
`api-servers` before it joins, so it keeps reaching the cluster when any one
control-plane machine is gone.

The bootstrap `token` for `kubeadm join` travels in a secret of its own for each worker
unit that has not registered its node (`join-tokens` maps those units to their secrets'
IDs), granted to that unit alone (Juju hook command `secret-grant --unit`: "Optionally
specify a unit name to limit access to just that unit") and removed with all its
revisions once the unit registered: while a unit joins, only that unit's agent can read
the token, and a joined worker needs none (root on it finds none; see
`ClusterProvider.publish`). The join secret (`join-secret-id`, owned by the control-plane
application and granted to every `workers` relation) holds no token (its content is
`{"joining": "none"}`) and, on a cluster an earlier control-plane revision made and only
while a related worker unit has not said `node-identity`, a `kubeconfig` for the
`gpu-k8s-worker` ServiceAccount that workers of earlier revisions use to label, drain and
validate their node. Once every worker unit acts as its kubelet the control plane deletes
that ServiceAccount and its grant and never makes them again (nor on a cluster it made:
no worker without `node-identity` can join one, it reads its token from the join
secret); a unit that stops saying `node-identity` gets no kubeconfig. A worker reads the
kubeconfig if there is one and needs none. Control planes of earlier revisions
kept the token in the join secret itself, which every worker unit could read: a worker
still reads it there, and a control plane of this revision removes that secret (all its
revisions) and publishes a new one without the token, under another label.

Each worker unit (`ClusterRequirer`, endpoint `cluster`) publishes its node name, the
Kubernetes minor it runs and, when it has NVIDIA GPUs, their inventory.

A worker acts at the API as its kubelet (`system:node:<name>`, issue 29 item 2), which
NodeRestriction forbids to change its own Node's taints (kubernetes
plugin/pkg/admission/noderestriction/admission.go admitNode: "node ... is not allowed to
modify taints"). It registers with the GPU taint (kubeadm's `nodeRegistration.taints`);
when it wants the GPU taint (`GPU_TAINT`, and that taint only) set or removed after
joining it publishes `gpu-taint` ("true"/"false") until its Node carries what it asked,
and the control-plane leader applies it to the node that unit registered first, never
another and never a control-plane node. A node name is a claim: one another unit
registered first, or a control-plane node's, is refused (the leader's status names the
unit), and a unit that registered its node and then publishes none gets no join token.
In the same way a worker whose GPU health watcher quarantined a GPU publishes
`gpu-quarantine` (the GPUs' UUIDs) and the leader sets `QUARANTINE_TAINT`
(`gpu-k8s.io/gpu-unhealthy:NoExecute`) on that unit's node; once the GPUs are readmitted the
worker publishes an empty list until its Node no longer carries the taint, and the leader
removes it only then.

Upgrades: `kubernetes-version` is the minor the control plane runs. A joined worker on
an older minor upgrades (drain, `kubeadm upgrade node`, kubelet, uncordon) only while
`upgrade-turn` names its unit, so that workers upgrade one at a time; a worker that has
not joined yet simply installs `kubernetes-version`.

Provider databag (application):

    endpoint: https://127.0.0.1:6444
    api-servers: '["10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"]'
    ca-cert-hash: sha256:<64 hex>
    join-secret-id: secret://<model>/<id>
    join-tokens: '{"kubernetes-worker/4": "secret://<model>/<id>"}'   # only while units join
    kubernetes-version: "1.36"
    upgrade-turn: kubernetes-worker/3     # only while workers upgrade, one at a time
    image-registry: registry.example.com:5000/mirror   # only when the operator set one
    mig-strategy: single                  # only when not none
    gpu-time-slicing-replicas: "4"        # only when GPUs are shared (above 1)

`image-registry` is the control plane's `image-registry` option: the mirror every image
of the cluster is pulled from (see `images.py`). A worker moves its own images there,
such as containerd's sandbox image: `join_material().image_registry` ("" = upstream).

`mig-strategy` and `gpu-time-slicing-replicas` are how the control plane runs the NVIDIA
device plugin (its options of the same names). A worker describes them in the GPU labels
of its node, as GPU Feature Discovery does (`nvidia.com/mig.strategy`, `gpu.replicas`,
`gpu.sharing-strategy`): `join_material().mig_strategy` ("none" when absent) and
`.gpu_time_slicing_replicas` (1 when absent).

Requirer databag (unit):

    node-name: ip-10-0-0-7
    kubernetes-version: "1.36"            # the minor this node's kubelet runs
    gpu-inventory: '[{"model": "NVIDIA A10G", "count": 4, "memory-mib": 23028,
                      "driver": "580.65", "cuda": "13.0", "mig-capable": false}]'
    node-identity: "true"                 # this unit acts as its kubelet at the API
    gpu-taint: "true"                     # only while its Node's GPU taint is not as wanted
    gpu-quarantine: '["GPU-7f3e9a2c-..."]'  # while its watcher holds GPUs quarantined;
                                          # '[]' once readmitted, until the taint is gone

A databag that does not validate is never a traceback: `ClusterRequirer.problem()` and
`ClusterProvider.problems()` say what is wrong with which field so that the charm can
report it in its status.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import re
from collections.abc import Callable, Collection
from typing import Any, Literal, TypeVar

import ops
import pydantic

from charms.gpu_k8s.v0 import api_proxy, images
from charms.gpu_k8s.v0.databag import Databag, Endpoint, explain, write
from charms.gpu_k8s.v0.kubeclient import KubeError

LIBID = "5f724584087c4f3caa6d95ea68f42ceb"
LIBAPI = 0
LIBPATCH = 18

logger = logging.getLogger(__name__)

SECRET_LABEL = "kubernetes-cluster-join-shared"
# The join secret of earlier revisions, which held the token (`ClusterProvider._join_secret`)
LEGACY_SECRET_LABEL = "kubernetes-cluster-join"
# The label of a joining unit's token secret: this prefix and its unit name with "-" for
# "/" (Juju application names have a letter in every dash-separated part, unit numbers
# none, so no two units share a label: juju/names application.go applicationSnippet).
UNIT_SECRET_PREFIX = "kubernetes-cluster-join-token-"
# The control plane's own record of the token and of each unit's token secret (no grant)
RECORD_LABEL = "kubernetes-cluster-workers-token"
# The join secret's content while no worker unit is joining: no token (Juju secret content
# may not be empty: ops Secret._validate_content).
IDLE_CONTENT = {"joining": "none"}
TOKEN_PATTERN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
_CA_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
# nvidia-smi's `uuid` (GPU-<8-4-4-4-12 hex>) or, for a GPU it could not name, `PCI:<bus id>`
_GPU_ID = re.compile(r"^(GPU-[0-9a-fA-F-]{36}|MIG-[0-9a-fA-F-]{36}|PCI:[0-9a-fA-F:.]{7,16})$")
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The taint a GPU worker keeps on its Node so that only pods that tolerate it land there
# (NVIDIA's GPU Operator documents the key; the worker's `gpu-taint` option). The one
# definition: the worker's labels and join, the leader's patch and Kueue's flavor use it.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


# The taint the leader sets on the Node of a worker whose GPU health watcher quarantined a
# GPU (`gpu-quarantine`), removed when the worker readmits it. NoExecute: the scheduler
# places no pod that does not tolerate it, and the taint manager evicts the running pods
# that do not (kubernetes pkg/controller/tainteviction/taint_eviction.go: a pod without a
# matching toleration is deleted at once, one with tolerationSeconds after that long;
# docs concepts/scheduling-eviction/taint-and-toleration "NoExecute").
QUARANTINE_TAINT = {"key": "gpu-k8s.io/gpu-unhealthy", "effect": "NoExecute"}


def _same_taint(a: dict, b: dict) -> bool:
    """Key, value and effect alike (an empty value is omitted in JSON; timeAdded aside)."""
    fields = ("key", "value", "effect")
    return all((a.get(f) or "") == (b.get(f) or "") for f in fields)


# How often a writer of a Node's `spec.taints` tries before it gives up after 409 Conflicts
# (the hook fails, Juju runs it again): kubernetes pkg/controller/controller_utils.go
# UpdateTaintBackoff (Steps: 5), the bound of AddOrUpdateTaintOnNode's and
# RemoveTaintOffNode's RetryOnConflict around PatchNodeTaints (read 2026-11-28 in stored
# copies of the context-taking file, 1.19 and later; no 1.36 copy of it was at hand).
TAINT_ATTEMPTS = 5


_T = TypeVar("_T")


def retry_on_conflict(write: Callable[[], _T], attempts: int = TAINT_ATTEMPTS) -> _T:
    """`write()`, again while the API server answers 409 Conflict, `attempts` tries in all.

    `write` reads what it changes afresh each time (client-go util/retry RetryOnConflict,
    without its backoff: a hook retries at once, the read is what resolves the conflict).

    Raises:
        KubeError: any other refusal, or the last try's Conflict.
    """
    for attempt in range(1, attempts):
        try:
            return write()
        except KubeError as e:
            if e.status != 409:
                raise
            logger.info("conflict (try %d of %d): read again: %s", attempt, attempts, e)
    return write()


def taints_precondition(node: dict) -> dict:
    """The `metadata` a patch of `node`'s `spec.taints` carries: the resourceVersion read.

    `spec.taints` has no patchMergeKey, so a patch replaces the whole list: one written
    from a stale read drops a taint another client (an operator's `kubectl taint`, the
    node lifecycle controller) added meanwhile. The resourceVersion makes the API server
    refuse such a patch with 409 Conflict (k8s.io/apiserver v0.36.3
    pkg/registry/generic/registry/store.go Update: a resourceVersion unequal to the
    stored one), and the writer reads the Node again (`TAINT_ATTEMPTS`), as kubernetes
    pkg/controller/controller_utils.go PatchNodeTaints does ("set RV to check for
    conflicts over .spec.taints ... because .spec.taints does not specify patchMergeKey").
    """
    version = (node.get("metadata") or {}).get("resourceVersion")
    return {"resourceVersion": version} if version else {}


def _taint_patch(node: dict, taint: dict, wanted: bool) -> dict | None:
    existing = [dict(t) for t in (node.get("spec") or {}).get("taints") or []]
    others = [t for t in existing if t.get("key") != taint["key"]]
    mine = [t for t in existing if t.get("key") == taint["key"]]
    in_line = len(mine) == 1 and _same_taint(mine[0], taint) if wanted else not mine
    if in_line:
        return None
    merged = others + ([dict(taint)] if wanted else [])
    patch: dict[str, Any] = {"spec": {"taints": merged or None}}
    if precondition := taints_precondition(node):
        patch["metadata"] = precondition
    return patch


def gpu_taint_patch(node: dict, wanted: bool) -> dict | None:
    """The merge patch that gives `node` the GPU taint (or removes it); None when in line.

    Only the GPU taint's key is touched: every other taint (the node controller's, an
    operator's) is kept as it is. A merge patch replaces the whole `spec.taints` list, so
    the patch carries the Node's resourceVersion (`taints_precondition`): a 409 Conflict
    means the Node changed since it was read; read it again and ask anew.
    """
    return _taint_patch(node, GPU_TAINT, wanted)


def quarantine_taint_patch(node: dict, wanted: bool) -> dict | None:
    """The merge patch that sets (or removes) `QUARANTINE_TAINT` on `node`; None when in line.

    As `gpu_taint_patch`: only that key is touched, every other taint is kept.
    """
    return _taint_patch(node, QUARANTINE_TAINT, wanted)


class GpuInfo(Databag):
    """One kind of GPU on a worker node."""

    model: str = pydantic.Field(min_length=1)
    count: int = pydantic.Field(ge=1)
    memory_mib: int | None = pydantic.Field(default=None, alias="memory-mib", ge=0)
    driver: str | None = None
    cuda: str | None = None
    mig_capable: bool = pydantic.Field(default=False, alias="mig-capable")
    # The PCI device id (`2330` for an H100 SXM5) and, for MIG-capable GPUs, how many GPU
    # instances of each MIG profile one GPU holds (`nvidia-smi mig -lgip`, "Instances
    # Total"): what the control plane needs to write mig-parted configs per model.
    pci_device_id: str | None = pydantic.Field(
        default=None, alias="pci-device-id", pattern=r"^[0-9a-f]{4}$"
    )
    mig_profiles: dict[str, int] | None = pydantic.Field(default=None, alias="mig-profiles")


class ProviderAppData(Databag):
    """What the control plane publishes in its application databag."""

    endpoint: str
    api_servers: list[str] = pydantic.Field(alias="api-servers", min_length=1)
    ca_cert_hash: str = pydantic.Field(alias="ca-cert-hash")
    join_secret_id: str = pydantic.Field(alias="join-secret-id", min_length=1)
    # the token secret of each unit of this relation that has not registered its node
    join_tokens: dict[str, str] | None = pydantic.Field(default=None, alias="join-tokens")
    kubernetes_version: str = pydantic.Field(alias="kubernetes-version")
    upgrade_turn: str | None = pydantic.Field(default=None, alias="upgrade-turn")
    image_registry: str | None = pydantic.Field(default=None, alias="image-registry")
    mig_strategy: Literal["none", "single", "mixed"] | None = pydantic.Field(
        default=None, alias="mig-strategy"
    )
    gpu_time_slicing_replicas: int | None = pydantic.Field(
        default=None, alias="gpu-time-slicing-replicas", ge=1
    )

    @pydantic.field_validator("endpoint")
    @classmethod
    def _https(cls, value: str) -> str:
        if not re.match(r"^https://[A-Za-z0-9.\-\[\]:]+(:\d+)?/?$", value):
            raise ValueError("must be an https URL such as https://10.0.0.1:6443")
        return value

    @pydantic.field_validator("api_servers", mode="before")
    @classmethod
    def _servers_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except (json.JSONDecodeError, RecursionError):  # too deep: a ValueError too
                raise ValueError("must be a JSON list of host:port") from None
        return value

    @pydantic.field_validator("join_tokens", mode="before")
    @classmethod
    def _tokens_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except (json.JSONDecodeError, RecursionError):  # too deep: a ValueError too
                raise ValueError("must be a JSON object of unit names to secret IDs") from None
        return value

    @pydantic.field_validator("api_servers")
    @classmethod
    def _servers(cls, value: list[str]) -> list[str]:
        for server in value:
            try:
                api_proxy.parse_server(server)  # what the workers' proxies will be given
            except ValueError:
                raise ValueError(f"{server!r} is not host:port such as 10.0.0.1:6443") from None
        return value

    @pydantic.field_validator("ca_cert_hash")
    @classmethod
    def _hash(cls, value: str) -> str:
        if not _CA_HASH.match(value):
            raise ValueError("must be sha256: followed by 64 lowercase hex digits")
        return value

    @pydantic.field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not _VERSION.match(value):
            raise ValueError("must be a version such as 1.33")
        return value

    @pydantic.field_validator("image_registry")
    @classmethod
    def _registry(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return images.validate_registry(value) or None  # "" is the same as unset


class RequirerUnitData(Databag):
    """What each worker unit publishes in its unit databag."""

    node_name: str = pydantic.Field(alias="node-name", max_length=253)
    kubernetes_version: str | None = pydantic.Field(default=None, alias="kubernetes-version")
    gpu_inventory: list[GpuInfo] | None = pydantic.Field(default=None, alias="gpu-inventory")
    node_identity: bool | None = pydantic.Field(default=None, alias="node-identity")
    gpu_taint: bool | None = pydantic.Field(default=None, alias="gpu-taint")
    gpu_quarantine: list[str] | None = pydantic.Field(default=None, alias="gpu-quarantine")

    @pydantic.field_validator("gpu_quarantine", mode="before")
    @classmethod
    def _uuids(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except (json.JSONDecodeError, RecursionError):  # too deep: a ValueError too
                raise ValueError("must be a JSON list of GPU UUIDs") from None
        if isinstance(value, list) and not all(
            isinstance(v, str) and _GPU_ID.match(v) for v in value
        ):
            raise ValueError("must be a JSON list of GPU UUIDs")
        return value

    @pydantic.field_validator("node_name")
    @classmethod
    def _node(cls, value: str) -> str:
        if not _NODE_NAME.match(value):
            raise ValueError("must be a lowercase DNS-1123 name")
        return value

    @pydantic.field_validator("kubernetes_version")
    @classmethod
    def _minor(cls, value: str | None) -> str | None:
        if value is not None and not _VERSION.match(value):
            raise ValueError("must be a version such as 1.33")
        return value

    @pydantic.field_validator("gpu_inventory", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except (json.JSONDecodeError, RecursionError):  # too deep: a ValueError too
                raise ValueError("must be a JSON list") from None
        return value


@dataclasses.dataclass(frozen=True)
class JoinInfo:
    """Everything a worker needs to join, read from the databag and the secret."""

    endpoint: str
    api_servers: tuple[str, ...]
    ca_cert_hash: str
    kubernetes_version: str
    # "" while no worker unit is joining (the control plane keeps no token then)
    token: str = dataclasses.field(repr=False)
    # the shared worker ServiceAccount's, while the control plane still grants it ("" after)
    kubeconfig: str = dataclasses.field(default="", repr=False)
    upgrade_turn: str | None = None
    image_registry: str = ""
    mig_strategy: str = "none"
    gpu_time_slicing_replicas: int = 1


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """A worker unit as the control plane sees it."""

    unit: str
    node_name: str
    gpus: tuple[GpuInfo, ...] = ()
    version: str | None = None
    # acts as its kubelet (never the shared ServiceAccount); the GPU taint it asks for
    node_identity: bool = False
    gpu_taint: bool | None = None
    # GPUs its watcher quarantined ([]: none any more, lift the taint; None: no request)
    gpu_quarantine: tuple[str, ...] | None = None

    @property
    def gpu_count(self) -> int:
        """Total number of GPUs on this worker."""
        return sum(g.count for g in self.gpus)

    @property
    def gpu_models(self) -> dict[str, int]:
        """GPUs on this worker per model name."""
        models: dict[str, int] = {}
        for g in self.gpus:
            models[g.model] = models.get(g.model, 0) + g.count
        return models


class ClusterProvider(Endpoint):
    """The control-plane side: publishes join material and reads the workers."""

    def __init__(self, charm: ops.CharmBase, relation_name: str = "workers"):
        super().__init__(charm, relation_name)
        self._problems: list[str] = []

    def publish(
        self,
        endpoint: str,
        api_servers: list[str],
        ca_cert_hash: str,
        version: str,
        token: str,
        kubeconfig: str = "",
        *,
        joining: Collection[str] | None = None,
        expire: datetime.datetime | None = None,
        upgrade_turn: str | None = None,
        image_registry: str = "",
        mig_strategy: str = "none",
        gpu_time_slicing_replicas: int = 1,
    ) -> ops.Secret:
        """Publish join material to every related worker application (leader only).

        `token` is "" while no worker unit is joining. `joining` names the related units
        that have not registered their node (None: those whose databag has no node name):
        each gets the token in a secret of its own, granted to that unit alone (Juju hook
        command `secret-grant --unit`), and listed under `join-tokens`; a unit no longer
        joining (registered, departed) loses its secret, all revisions removed, so a
        joined unit's agent reads no token, and a unit reads no other's. One secret per
        unit rather than one secret granted to several units: Juju keeps one pending grant
        per secret and relation in a hook (juju worker/uniter/runner/context/secrets.go
        secretsChangeRecorder.grant), so a second unit's grant in the same hook would
        replace the first's.

        The join secret, granted to the relation (every unit of the remote application),
        holds no token: `IDLE_CONTENT` and the shared worker `kubeconfig` when there is
        one. The join secret of earlier revisions, which held the token, is removed with
        all its revisions (`_join_secret`).

        Secrets are created once; their content (and `expire`, for the token's) changes
        only when it differs; grants are made when the databag does not carry the
        secret's ID yet. Returns the join secret so the caller can remember its ID.

        Raises:
            ValueError: a value does not fit the interface (nothing is published).
        """
        if token and not TOKEN_PATTERN.match(token):
            raise ValueError("token is not a kubeadm bootstrap token")
        fields = {
            "endpoint": endpoint,
            "api-servers": api_servers,
            "ca-cert-hash": ca_cert_hash,
            "join-secret-id": "secret:pending",
            "kubernetes-version": version,
            "upgrade-turn": upgrade_turn,
            "image-registry": image_registry or None,
            "mig-strategy": None if mig_strategy == "none" else mig_strategy,
            "gpu-time-slicing-replicas": (
                None if gpu_time_slicing_replicas == 1 else gpu_time_slicing_replicas
            ),
        }
        try:
            ProviderAppData.model_validate(fields)  # before anything is created
        except pydantic.ValidationError as e:
            raise ValueError(explain(e)) from None
        secret = self._join_secret(
            {**IDLE_CONTENT, **({"kubeconfig": kubeconfig} if kubeconfig else {})}
        )
        secret_id = secret.id or secret.get_info().id
        before = _token_map(self._record().get("secrets"))
        issued: dict[str, str] = {}
        for relation in self.relations:
            data = relation.data[self.charm.app]
            tokens = self._grant_tokens(relation, token, joining, expire)
            issued.update(tokens)
            bag = ProviderAppData.model_validate(
                {**fields, "join-secret-id": secret_id, "join-tokens": tokens or None}
            ).dump()
            if data.get("join-secret-id") != secret_id:
                secret.grant(relation)
            write(data, bag, remove=list(data))
        for name, unit_secret in before.items():
            if issued.get(name) != unit_secret:  # registered, departed, relation gone
                _remove(self.model, unit_secret)
                logger.info("removed the join token secret of %s", name)
        self._keep_record(token, issued)
        return secret

    def _record(self) -> dict[str, str]:
        """The current token and the units' token secrets, as `_keep_record` wrote them."""
        try:
            return self.model.get_secret(label=RECORD_LABEL).peek_content()
        except ops.SecretNotFoundError:
            return {}

    def _keep_record(self, token: str, issued: dict[str, str]) -> None:
        """Remember the token and every unit's token secret, whatever the databags say.

        A secret of this application's own, granted to no one: a relation's databag is
        gone when it breaks, and its units' secrets must still go (and the token be
        known, for the caller to delete it).
        """
        content = {"token": token, "secrets": json.dumps(issued, sort_keys=True)}
        try:
            record = self.model.get_secret(label=RECORD_LABEL)
            if not token:
                record.remove_all_revisions()
            elif record.peek_content() != content:
                record.set_content(content)
        except ops.SecretNotFoundError:
            if token:
                self.charm.app.add_secret(
                    content, label=RECORD_LABEL, description="the workers' token (no grant)"
                )

    def _join_secret(self, content: dict[str, str]) -> ops.Secret:
        """The join secret with `content`; the one of earlier revisions is removed.

        That one (`LEGACY_SECRET_LABEL`) held the token, readable by every worker unit's
        agent: it goes with all its revisions, and a new secret under another label takes
        its place (a new label: Juju creates a hook's secrets before it removes any,
        juju apiserver/facades/agent/uniter CommitHookChanges, and labels are unique per
        owner).
        """
        try:
            self.model.get_secret(label=LEGACY_SECRET_LABEL).remove_all_revisions()
            logger.info("removed the join secret of earlier revisions (it held the token)")
        except ops.SecretNotFoundError:
            pass
        try:
            secret = self.model.get_secret(label=SECRET_LABEL)
            if secret.peek_content() != content:
                secret.set_content(content)
            return secret
        except ops.SecretNotFoundError:
            return self.charm.app.add_secret(
                content,
                label=SECRET_LABEL,
                description="the shared worker kubeconfig of earlier revisions (no token)",
            )

    def _grant_tokens(
        self,
        relation: ops.Relation,
        token: str,
        joining: Collection[str] | None,
        expire: datetime.datetime | None,
    ) -> dict[str, str]:
        """Each joining unit's token secret, granted to it alone; the others' removed.

        Returns the `join-tokens` map of this relation: unit name to secret ID.
        """
        granted = _token_map(relation.data[self.charm.app].get("join-tokens"))
        units = [
            u
            for u in sorted(relation.units, key=lambda u: u.name)
            if (
                u.name in joining if joining is not None else not relation.data[u].get("node-name")
            )
        ]
        tokens: dict[str, str] = {}
        for unit in units if token else []:
            content = {"token": token}
            label = UNIT_SECRET_PREFIX + unit.name.replace("/", "-")
            try:
                secret = self.model.get_secret(label=label)
                if secret.peek_content() != content:
                    secret.set_content(content)
                    if expire is not None:
                        secret.set_info(expire=expire)
            except ops.SecretNotFoundError:
                secret = self.charm.app.add_secret(
                    content,
                    label=label,
                    description=f"kubeadm bootstrap token for {unit.name} while it joins",
                    expire=expire,
                )
            secret_id = secret.id or secret.get_info().id
            if granted.get(unit.name) != secret_id:
                secret.grant(relation, unit=unit)
            tokens[unit.name] = secret_id
        return tokens

    def published_token(self) -> str:
        """The bootstrap token the workers can read now ("" when none).

        The join secret's of earlier revisions while it stands, else the joining units'.
        """
        for label in (LEGACY_SECRET_LABEL, RECORD_LABEL):
            try:
                token = self.model.get_secret(label=label).peek_content().get("token", "")
            except ops.SecretNotFoundError:
                continue
            if TOKEN_PATTERN.match(token):
                return token
        return ""

    def token_readable_by_all(self) -> bool:
        """Whether the join secret of earlier revisions (every worker unit reads it) holds a token.

        The next `publish` removes that secret; the caller should replace the token too,
        since every worker unit's agent could read it.
        """
        try:
            return "token" in self.model.get_secret(label=LEGACY_SECRET_LABEL).peek_content()
        except ops.SecretNotFoundError:
            return False

    def read_worker(
        self, relation: ops.Relation, unit: ops.Unit
    ) -> tuple[WorkerInfo | None, str | None]:
        """One worker unit's data: (info, None), (None, why it is invalid) or (None, None).

        Reads only this unit's databag, so a hook about one worker stays cheap however
        many workers there are.
        """
        raw = relation.data[unit]
        if not raw.get("node-name"):
            return None, None  # not joined yet
        try:
            bag = RequirerUnitData.model_validate(dict(raw))
        except pydantic.ValidationError as e:
            return None, f"{unit.name}: {explain(e)}"
        gpus = tuple(bag.gpu_inventory or ())
        info = WorkerInfo(
            unit.name,
            bag.node_name,
            gpus,
            bag.kubernetes_version,
            node_identity=bool(bag.node_identity),
            gpu_taint=bag.gpu_taint,
            gpu_quarantine=None if bag.gpu_quarantine is None else tuple(bag.gpu_quarantine),
        )
        return info, None

    def workers(self) -> list[WorkerInfo]:
        """Every worker unit that published a valid node name; see `problems()`.

        This reads every unit's databag: prefer `read_worker` in hooks about one unit.
        """
        workers: list[WorkerInfo] = []
        problems: list[str] = []
        for relation in self.relations:
            for unit in sorted(relation.units, key=lambda u: int(u.name.split("/")[1])):
                info, problem = self.read_worker(relation, unit)
                if info is not None:
                    workers.append(info)
                if problem is not None:
                    problems.append(problem)
        self._problems = problems
        return workers

    def problems(self) -> list[str]:
        """Why some worker units were skipped by the last `workers()` call."""
        return list(self._problems)

    def clear(self) -> None:
        """Remove the join secret and the token secrets (the control plane is being removed)."""
        for secret_id in _token_map(self._record().get("secrets")).values():
            _remove(self.model, secret_id)
        for label in (SECRET_LABEL, LEGACY_SECRET_LABEL, RECORD_LABEL):
            try:
                self.model.get_secret(label=label).remove_all_revisions()
            except ops.SecretNotFoundError:
                pass


def _token_map(text: str | None) -> dict[str, str]:
    """The `join-tokens` this side wrote ({} when none or unreadable)."""
    try:
        value = json.loads(text or "{}")
    except (json.JSONDecodeError, RecursionError):
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _remove(model: ops.Model, secret_id: str) -> None:
    """Remove a secret this application owns, with all its revisions (gone already: fine)."""
    try:
        model.get_secret(id=secret_id).remove_all_revisions()
    except ops.SecretNotFoundError:
        pass


class ClusterRequirer(Endpoint):
    """The worker side: reads join material and publishes the node."""

    def __init__(self, charm: ops.CharmBase, relation_name: str = "cluster"):
        super().__init__(charm, relation_name)

    def _read(self) -> tuple[JoinInfo | None, str | None]:
        relation = self.relation
        if relation is None:
            return None, "not related to a control plane: integrate with kubernetes-control-plane"
        if relation.app is None:
            return None, "waiting for the control plane application"
        raw = dict(relation.data[relation.app])
        if not raw:
            return None, "waiting for the control plane to publish join material"
        try:
            bag = ProviderAppData.model_validate(raw)
        except pydantic.ValidationError as e:
            return None, f"control plane databag: {explain(e)}"
        try:
            content = self.model.get_secret(id=bag.join_secret_id).get_content(refresh=True)
        except (ops.SecretNotFoundError, ops.ModelError):
            return None, "waiting for access to the control plane's join secret"
        token = content.get("token", "")  # where control planes of earlier revisions put it
        mine = (bag.join_tokens or {}).get(self.charm.unit.name)
        # a unit that registered its node (it publishes the name once joined) needs no
        # token: the control plane removes its secret, and it does not read it meanwhile
        if not token and mine and not relation.data[self.charm.unit].get("node-name"):
            try:
                token = self.model.get_secret(id=mine).get_content(refresh=True).get("token", "")
            except (ops.SecretNotFoundError, ops.ModelError):
                return None, "waiting for access to this unit's join token"
        if token and not TOKEN_PATTERN.match(token):  # no token: no unit is joining
            return None, "control plane join secret is incomplete (token)"
        return (
            JoinInfo(
                endpoint=bag.endpoint,
                api_servers=tuple(bag.api_servers),
                ca_cert_hash=bag.ca_cert_hash,
                kubernetes_version=bag.kubernetes_version,
                token=token,
                kubeconfig=content.get("kubeconfig", ""),
                upgrade_turn=bag.upgrade_turn,
                image_registry=bag.image_registry or "",
                mig_strategy=bag.mig_strategy or "none",
                gpu_time_slicing_replicas=bag.gpu_time_slicing_replicas or 1,
            ),
            None,
        )

    def join_material(self) -> JoinInfo | None:
        """The join material, or None when it is not available (see `problem()`)."""
        return self._read()[0]

    def problem(self) -> str | None:
        """Why join material is not available, or None when it is."""
        return self._read()[1]

    def publish_node(
        self,
        node_name: str,
        gpu_inventory: list[GpuInfo] | None = None,
        kubernetes_version: str | None = None,
        *,
        node_identity: bool = False,
        gpu_taint: bool | None = None,
        gpu_quarantine: list[str] | None = None,
    ) -> None:
        """Publish this unit's node name, GPU inventory and minor (written only when changed).

        `node_identity`: this unit acts as its kubelet; `gpu_taint`: the GPU taint it asks
        the control plane to set (True) or remove (False), None when its Node is in line;
        `gpu_quarantine`: the GPUs its watcher quarantined (the leader sets
        `QUARANTINE_TAINT`), [] once readmitted while the Node still carries it (the
        leader removes it), None otherwise.

        Raises:
            ValueError: the node name or inventory does not fit the interface.
        """
        relation = self.relation
        if relation is None:
            return
        try:
            bag = RequirerUnitData.model_validate(
                {
                    "node-name": node_name,
                    "gpu-inventory": gpu_inventory,
                    "kubernetes-version": kubernetes_version,
                    "node-identity": node_identity or None,
                    "gpu-taint": gpu_taint,
                    "gpu-quarantine": gpu_quarantine,
                }
            ).dump()
        except pydantic.ValidationError as e:
            raise ValueError(explain(e)) from None
        optional = ["gpu-inventory", "kubernetes-version", "node-identity", "gpu-taint"]
        optional.append("gpu-quarantine")
        write(relation.data[self.charm.unit], bag, remove=optional)

    def publish_quarantine(self, gpus: list[str] | None) -> None:
        """Only `gpu-quarantine` (see `publish_node`): an action's request between hooks.

        Raises:
            ValueError: an entry is not a GPU UUID.
        """
        relation = self.relation
        if relation is None:
            return
        data = relation.data[self.charm.unit]
        if gpus is None:
            data.pop("gpu-quarantine", None)
            return
        if not all(_GPU_ID.match(g) for g in gpus):
            raise ValueError("gpu-quarantine must list GPU UUIDs")
        value = json.dumps(gpus, sort_keys=True)
        if data.get("gpu-quarantine") != value:
            data["gpu-quarantine"] = value
