# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The worker registry: every worker unit's node, GPUs and minor, in one databag key.

No ops imports. The leader keeps the registry in the peer application databag so that a
hook can count workers, GPUs and upgrade progress without reading 1,000 worker databags:
a hook about one worker unit changes that unit's entry only, and the whole registry is
rebuilt from the workers relations when there is none yet, when leadership moved, or
after a charm upgrade.

Databag keys (all JSON):

    workers:          {"kubernetes-worker/0": ["ip-10-0-1-5", 4, 7, {"NVIDIA A10G": 4}, "1.36"]}
                      node name, GPU count, relation id, GPUs per model, minor (or null),
                      and for workers with MIG-capable GPUs a sixth field, per such model
                      its PCI device id (or null) and MIG profiles (instances per GPU, those
                      of mig_manager.NVIDIA_MIG_PROFILES for the model only):
                      {"NVIDIA H100 80GB HBM3": ["2330", {"1g.10gb": 7, "7g.80gb": 1}]}
    worker-problems:  {"kubernetes-worker/3": "kubernetes-worker/3: node-name is invalid"}
                      and the requests refused (`record`): a node name another unit
                      registered first, or a control-plane node's
    worker-refused:   ["kubernetes-worker/4"]   the units of worker-problems whose line
                      is a refused request, as `record` decided (a line's text is partly
                      the worker's: never read for it); absent when there are none
    pending-removal:  ["ip-10-0-1-9"]   Nodes of departed workers not yet deleted
    worker-shared-grant: ["kubernetes-worker/2"]   registered units that did not say
                      `node-identity` (an earlier revision's, which uses the shared
                      ServiceAccount while it stands; once it is gone such a unit gets
                      nothing and a Blocked line: access.py); absent when there are none
    gpu-quarantined:  ["ip-10-0-1-7"]   Nodes the leader holds the quarantine taint on
                      (their worker's `gpu-quarantine` lists GPUs, fleet.py); Kueue's
                      cohort is sized for this set (addons.py); absent when there are none
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from charms.gpu_k8s.v0.kubernetes_cluster import WorkerInfo

# The most GPU models one worker's `gpu-inventory` may name. Each model is a Kueue
# ResourceFlavor in the cohort and in every team's ClusterQueue, whose
# `resourceGroups[].flavors` holds 64 at most (Kueue v0.19.2 CRDs, cohorts and
# clusterqueues: maxItems 64); an AWS GPU instance has one model, a machine rarely more
# than two. A unit naming more is refused: root on one worker could otherwise make every
# queue invalid (the Cohort is refused with 422, and so is every leader hook after it).
MAX_GPU_MODELS_PER_WORKER = 4
# The longest GPU model name a worker may report: nvidia-smi's name is what NVML's
# nvmlDeviceGetName writes into NVML_DEVICE_NAME_V2_BUFFER_SIZE (96) bytes with its NUL
# (nvml.h); names from pci.ids (`NVIDIA A10G`) are shorter. Every hook parses the registry
# and the status line names the models.
MAX_GPU_MODEL_CHARS = 95

WORKERS_KEY = "workers"
PROBLEMS_KEY = "worker-problems"
PENDING_KEY = "pending-removal"
SHARED_GRANT_KEY = "worker-shared-grant"
REFUSED_KEY = "worker-refused"
QUARANTINED_KEY = "gpu-quarantined"


@dataclasses.dataclass(frozen=True)
class Worker:
    """One worker unit's entry."""

    node: str
    gpus: int
    relation_id: int
    models: dict[str, int] = dataclasses.field(default_factory=dict)
    version: str | None = None
    # MIG-capable models: model -> [PCI device id or None, {profile: instances per GPU}]
    mig: dict[str, list] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_info(cls, info: WorkerInfo, relation_id: int) -> Worker:
        """The entry for what a worker unit published on relation `relation_id`."""
        mig = {
            g.model: [g.pci_device_id, _known_profiles(g.pci_device_id, g.mig_profiles)]
            for g in info.gpus
            if g.mig_capable
        }
        return cls(info.node_name, info.gpu_count, relation_id, info.gpu_models, info.version, mig)

    @classmethod
    def from_json(cls, entry: list) -> Worker:
        """Read one stored entry (older charms stored fewer fields)."""
        node, gpus, relation_id, *rest = entry
        models = rest[0] if rest else {}
        version = rest[1] if len(rest) > 1 else None
        mig = rest[2] if len(rest) > 2 else {}
        return cls(node, gpus, relation_id, models or {}, version, mig)

    def to_json(self) -> list:
        """The stored form of this entry (the MIG field only when there is one)."""
        entry = [self.node, self.gpus, self.relation_id, self.models, self.version]
        return [*entry, self.mig] if self.mig else entry


@dataclasses.dataclass
class Registry:
    """The workers of the cluster as the leader knows them."""

    workers: dict[str, Worker] = dataclasses.field(default_factory=dict)
    problems: dict[str, str] = dataclasses.field(default_factory=dict)
    # units that act with the shared ServiceAccount, not as their kubelet
    shared_grant: set[str] = dataclasses.field(default_factory=set)
    # units whose problem line is a refused request (`refuse`), not invalid data
    refusals: set[str] = dataclasses.field(default_factory=set)

    @classmethod
    def load(cls, bag: Mapping[str, str]) -> Registry:
        """The registry stored in `bag` (empty when there is none).

        Several steps of one hook read it; the entries of the text last read are kept
        (they are frozen), so 1,000 workers are parsed once, and each caller gets its own
        dict to change.
        """
        return cls(
            dict(_parse_workers(bag.get(WORKERS_KEY, "{}"))),
            json.loads(bag.get(PROBLEMS_KEY, "{}")),
            set(json.loads(bag.get(SHARED_GRANT_KEY, "[]"))),
            set(json.loads(bag.get(REFUSED_KEY, "[]"))),
        )

    def save(self, bag: MutableMapping[str, str]) -> None:
        """Store the registry in `bag`, writing only keys whose content changed.

        The workers are compared with what `bag` holds as parsed (`load`'s entries, the
        same objects where nothing changed), so a hook that changed no worker encodes
        none of the 1,000 entries again.
        """
        values: dict[str, object] = {PROBLEMS_KEY: self.problems}
        stored = bag.get(WORKERS_KEY)
        if stored is None or self.workers != _parse_workers(stored):
            values[WORKERS_KEY] = {unit: w.to_json() for unit, w in self.workers.items()}
        for key, value in values.items():
            text = json.dumps(value, sort_keys=True)
            if bag.get(key) != text:
                bag[key] = text
        for key, units in ((SHARED_GRANT_KEY, self.shared_grant), (REFUSED_KEY, self.refusals)):
            text = json.dumps(sorted(units)) if units else None
            if bag.get(key) != text:
                if text is None:
                    del bag[key]
                else:
                    bag[key] = text

    @classmethod
    def rebuild(
        cls,
        workers: Iterable[WorkerInfo],
        problems: Iterable[str],
        relation_of: Callable[[str], int],
        *,
        stored: Registry | None = None,
        planes: Collection[str] = (),
    ) -> Registry:
        """A registry from every worker unit's databag (`problems` as `unit: why`).

        `stored`: the registry the peer data held (a former leader's): each node name
        stays with the unit that registered it first there, and a unit of it that still
        is related keeps its entry when what it publishes now is refused (`record`).
        Claims the stored registry does not settle are taken in unit order (the only
        order an earlier revision's registry, which kept several claimants, leaves).
        `planes`: the control-plane nodes, which no worker unit may register.
        """
        stored = stored or cls()
        infos = {w.unit: w for w in workers}
        problem_of = {problem.split(":", 1)[0]: problem for problem in problems}
        units = {*infos, *problem_of, *(u for u in stored.workers if relation_of(u) != -1)}

        def first(unit: str) -> tuple[bool, tuple[str, int]]:
            kept, info = stored.workers.get(unit), infos.get(unit)
            registered = kept is not None and info is not None and kept.node == info.node_name
            return not registered, _unit_order(unit)

        registry = cls()
        owners: dict[str, str] = {}  # node -> unit, as registered so far (1,000 units: O(N))
        models: dict[str, str] = {}  # GPU model -> the unit registered first with it
        for unit in sorted(units, key=first):
            rel = relation_of(unit)
            kept = stored.workers.get(unit)
            kept = dataclasses.replace(kept, relation_id=rel) if kept is not None else None
            registry._take(
                unit,
                infos.get(unit),
                problem_of.get(unit),
                rel,
                planes,
                owners.get,
                kept,
                unit in stored.shared_grant,
                models,
            )
            if unit in registry.workers:
                owners.setdefault(registry.workers[unit].node, unit)
                for model in registry.workers[unit].models:
                    models.setdefault(model, unit)
        return registry

    def record(
        self,
        unit: str,
        info: WorkerInfo | None,
        problem: str | None,
        rel: int,
        planes: Collection[str] = (),
    ) -> None:
        """Take in what one worker unit published on relation `rel` (see `read_worker`).

        Root on a worker machine writes that unit's databag (relation-set), so a node name
        is a claim: it is refused when another unit registered that node first (a node
        name belongs to its first registrant, whatever the unit numbers) or when it is a
        control-plane node (`planes`); a unit that registered a node and then publishes
        none is refused too (it would be joining again and get a bootstrap token, with
        which a kubelet certificate for any node name is approved: literals.py
        WORKER_TOKEN_TTL_HOURS; a joined worker never needs one). A refused unit keeps the
        node it registered before, if any, and the refusal is its problem line; the
        leader acts for a unit only on the node it registered (fleet.py). So is a
        `gpu-inventory` naming more than MAX_GPU_MODELS_PER_WORKER models.
        """
        kept = self.workers.pop(unit, None)
        shared = unit in self.shared_grant
        self.problems.pop(unit, None)
        self.refusals.discard(unit)
        self.shared_grant.discard(unit)
        owners = _model_owners(self.workers.items()) if info and info.gpu_models else {}
        self._take(unit, info, problem, rel, planes, self.owner_of, kept, shared, owners)

    def _take(
        self,
        unit: str,
        info: WorkerInfo | None,
        problem: str | None,
        rel: int,
        planes: Collection[str],
        owner_of: Callable[[str], str | None],
        kept: Worker | None,
        shared: bool,
        model_owners: Mapping[str, str],
    ) -> None:
        """Register `unit` (none of its entries is in the registry), or refuse it.

        `owner_of`: the unit that registered a node already, if one did; `kept`: the
        entry `unit` had (`shared`: it was in `shared_grant`), kept when what it publishes
        now is refused, unless that entry itself would be (an earlier revision's).
        """
        refusal = None
        if info is not None:
            refusal = _refusal(unit, info.node_name, planes, owner_of(info.node_name))
            if refusal is None:
                refusal = _inventory_refusal(unit, info.gpu_models, model_owners)
            if refusal is None:
                self.workers[unit] = Worker.from_info(info, rel)
                if not info.node_identity:
                    self.shared_grant.add(unit)
                return
        elif problem is None and kept is not None:
            refusal = (
                f"{unit}: publishes no node-name after it registered {kept.node} "
                "(refused: a joined node gets no join token)"
            )
        if refusal is not None:
            self.refuse(unit, refusal)
        elif problem is not None:
            self.problems[unit] = problem  # invalid data, not a refusal
        else:
            return  # not joined yet
        if kept is not None and _refusal(unit, kept.node, planes, owner_of(kept.node)) is None:
            self.workers[unit] = kept
            if shared:
                self.shared_grant.add(unit)

    def refuse(self, unit: str, line: str) -> None:
        """Record that a request of `unit` was refused: `line` says which and why."""
        self.problems[unit] = line
        self.refusals.add(unit)

    def forget(self, units: Iterable[str]) -> None:
        """Drop departed units."""
        for unit in units:
            self.workers.pop(unit, None)
            self.problems.pop(unit, None)
            self.refusals.discard(unit)
            self.shared_grant.discard(unit)

    def owner_of(self, node: str) -> str | None:
        """The unit that registered `node` (`record` lets one unit have it).

        Of the claimants an earlier revision's registry kept, the first in unit order.
        """
        claims = [u for u, w in self.workers.items() if w.node == node]
        return min(claims, key=_unit_order) if claims else None

    def units_of_relation(self, relation_id: int) -> list[str]:
        """The units registered through one relation (all of them go when it breaks)."""
        return [u for u, w in self.workers.items() if w.relation_id == relation_id]

    @property
    def nodes(self) -> set[str]:
        """Node names of the registered workers."""
        return {w.node for w in self.workers.values()}

    @property
    def gpu_workers(self) -> list[Worker]:
        """Workers that reported GPUs."""
        return [w for w in self.workers.values() if w.gpus]

    def gpu_models(self) -> list[str]:
        """Every GPU model the workers report, once, sorted."""
        return sorted({m for w in self.workers.values() for m, n in w.models.items() if n})

    def mig_gpus(self) -> list[tuple[str, str | None, dict[str, int]]]:
        """Each MIG-capable model the workers report, as (model, PCI id, profiles), once."""
        distinct: dict[tuple, tuple[str, str | None, dict[str, int]]] = {}
        for worker in self.workers.values():
            for model, (pci_device_id, profiles) in worker.mig.items():
                key = (model, pci_device_id, tuple(sorted(profiles.items())))
                distinct.setdefault(key, (model, pci_device_id, profiles))
        # ordered by their JSON text, as before; encoded once per distinct entry, not worker
        seen: dict[str, tuple[str, str | None, dict[str, int]]] = {}
        for entry in distinct.values():
            seen.setdefault(json.dumps(list(entry), sort_keys=True), entry)
        return [seen[key] for key in sorted(seen)]

    def refused(self) -> tuple[list[str], list[str]]:
        """The refused requests (sorted problem lines): of units with no node, then the rest.

        A unit with no registered node gets no service (no join token, no credential); the
        others keep the node they registered first (`record`).
        """
        lines = sorted((u, p) for u, p in self.problems.items() if u in self.refusals)
        return (
            [p for u, p in lines if u not in self.workers],
            [p for u, p in lines if u in self.workers],
        )

    def invalid(self) -> list[str]:
        """The problem lines of units whose data is invalid (not refusals), sorted."""
        return sorted(p for u, p in self.problems.items() if u not in self.refusals)

    def versions(self) -> dict[str, str | None]:
        """The minor each registered worker published (None when it did not say)."""
        return {unit: w.version for unit, w in self.workers.items()}


def _inventory_refusal(
    unit: str, models: Mapping[str, int], owners: Mapping[str, str]
) -> str | None:
    """Why `unit` may not register the GPU models it reports (`models`); None when it may."""
    if len(models) > MAX_GPU_MODELS_PER_WORKER:
        return (
            f"{unit}: gpu-inventory names {len(models)} GPU models, more than "
            f"{MAX_GPU_MODELS_PER_WORKER} (refused)"
        )
    longest = max((len(m) for m in models), default=0)
    if longest > MAX_GPU_MODEL_CHARS:
        return (
            f"{unit}: gpu-inventory names a GPU model of {longest} characters, more than "
            f"{MAX_GPU_MODEL_CHARS} (refused)"
        )
    return _model_clash(unit, models, owners) if models else None


def _known_profiles(pci_device_id: str | None, profiles: Mapping[str, int] | None) -> dict:
    """Of a report's MIG profiles, those NVIDIA's table has for the model (none else is used).

    mig_manager.NVIDIA_MIG_PROFILES bounds what a unit stores in the registry: the
    configs use nothing else (`mig_manager._profile_counts`).
    """
    import mig_manager  # here: it (and kueue) import the lib that imports ops

    table = mig_manager.nvidia_profiles(pci_device_id) or {}
    return {p: c for p, c in (profiles or {}).items() if p in table}


@functools.lru_cache(maxsize=256)
def _model_keys(model: str) -> tuple[str, str]:
    """What a GPU model becomes in Kueue: its ResourceFlavor and the node label it selects."""
    import kueue  # here: see _known_profiles

    return kueue.flavor_name(model), kueue.product_label(model, False)


def _model_owners(workers: Iterable[tuple[str, Worker]]) -> dict[str, str]:
    """GPU model -> the first of `workers` (unit, entry) that reports it."""
    owners: dict[str, str] = {}
    for unit, worker in workers:
        for model in worker.models:
            owners.setdefault(model, unit)
    return owners


def _model_clash(unit: str, models: Iterable[str], owners: Mapping[str, str]) -> str | None:
    """Why `unit` may not report one of `models`; None when it may.

    Each GPU model is a ResourceFlavor named `kueue.flavor_name(model)` whose nodeLabels
    select `kueue.product_label(model)`, and Kueue puts a flavor's nodeLabels in the
    nodeSelector of the pods it admits (kueue.sigs.k8s.io docs, concepts/resource_flavor,
    "ResourceFlavor labels"). `nvidia a10g` next to another unit's `NVIDIA A10G` would
    repoint the A10G flavor at a label no node has, and every team's A10G jobs would stay
    pending: a model's spelling belongs to the unit that registered it first (`owners`:
    model -> unit), as a node name does.
    """
    for model in models:
        if model in owners:
            continue
        keys = set(_model_keys(model))
        for other, owner in owners.items():
            if owner != unit and keys.intersection(_model_keys(other)):
                return (
                    f"{unit}: gpu-inventory model {model!r} is named like {other} of {owner} "
                    "(refused)"
                )
    return None


def _refusal(unit: str, node: str, planes: Collection[str], owner: str | None) -> str | None:
    """Why `unit` may not register `node` (`owner` registered it first); None when it may."""
    if node in planes:
        return f"{unit}: node-name {node} is a control-plane node (refused)"
    if owner is not None and owner != unit:
        return f"{unit}: node-name {node} is the node of {owner} (refused)"
    return None


def _unit_order(unit: str) -> tuple[str, int]:
    app, _, number = unit.partition("/")
    return app, int(number) if number.isdigit() else -1


@functools.lru_cache(maxsize=1)
def _parse_workers(text: str) -> dict[str, Worker]:
    return {unit: Worker.from_json(entry) for unit, entry in json.loads(text).items()}


def departed_nodes(
    bag: Mapping[str, str], before: Registry | None, after: Registry
) -> tuple[set[str], set[str]]:
    """(pending before, pending now): Nodes of departed workers still to be deleted.

    A node leaves the registry when its unit departs; it stays pending until the caller
    has deleted its Node, and stops being pending if a unit registers it again.
    """
    pending = set(json.loads(bag.get(PENDING_KEY, "[]")))
    known = before.nodes if before is not None else set()
    current = after.nodes
    return pending, (pending | (known - current)) - current


def save_pending(bag: MutableMapping[str, str], before: set[str], now: set[str]) -> None:
    """Store the Nodes still pending removal when that set changed."""
    if now != before:
        bag[PENDING_KEY] = json.dumps(sorted(now))


def pending_count(bag: Mapping[str, str]) -> int:
    """How many departed workers' Nodes are still to be deleted."""
    return len(json.loads(bag.get(PENDING_KEY, "[]")))


def quarantined(bag: Mapping[str, str]) -> list[str]:
    """The Nodes the leader holds the quarantine taint on, sorted."""
    return json.loads(bag.get(QUARANTINED_KEY) or "[]")


def save_quarantined(bag: MutableMapping[str, str], nodes: set[str]) -> None:
    """Store the quarantined Nodes when that set changed (no key when there are none)."""
    text = json.dumps(sorted(nodes)) if nodes else None
    if bag.get(QUARANTINED_KEY) == text:
        return
    if text is None:
        del bag[QUARANTINED_KEY]
    else:
        bag[QUARANTINED_KEY] = text
