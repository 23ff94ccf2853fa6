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
                      its PCI device id (or null) and MIG profiles (instances per GPU):
                      {"NVIDIA H100 80GB HBM3": ["2330", {"1g.10gb": 7, "7g.80gb": 1}]}
    worker-problems:  {"kubernetes-worker/3": "kubernetes-worker/3: node-name is invalid"}
    pending-removal:  ["ip-10-0-1-9"]   Nodes of departed workers not yet deleted
    worker-shared-grant: ["kubernetes-worker/2"]   registered units that did not say
                      `node-identity` (an earlier revision: it still uses the shared
                      ServiceAccount); absent when there are none
    gpu-quarantined:  ["ip-10-0-1-7"]   Nodes the leader holds the quarantine taint on
                      (their worker's `gpu-quarantine` lists GPUs, fleet.py); Kueue's
                      cohort is sized for this set (addons.py); absent when there are none
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from charms.gpu_k8s.v0.kubernetes_cluster import WorkerInfo

WORKERS_KEY = "workers"
PROBLEMS_KEY = "worker-problems"
PENDING_KEY = "pending-removal"
SHARED_GRANT_KEY = "worker-shared-grant"
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
            g.model: [g.pci_device_id, dict(g.mig_profiles or {})]
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
        shared = json.dumps(sorted(self.shared_grant)) if self.shared_grant else None
        if bag.get(SHARED_GRANT_KEY) != shared:
            if shared is None:
                del bag[SHARED_GRANT_KEY]
            else:
                bag[SHARED_GRANT_KEY] = shared

    @classmethod
    def rebuild(
        cls,
        workers: Iterable[WorkerInfo],
        problems: Iterable[str],
        relation_of: Callable[[str], int],
    ) -> Registry:
        """A registry from every worker unit's databag (`problems` as `unit: why`)."""
        workers = list(workers)
        return cls(
            {w.unit: Worker.from_info(w, relation_of(w.unit)) for w in workers},
            {problem.split(":", 1)[0]: problem for problem in problems},
            {w.unit for w in workers if not w.node_identity},
        )

    def record(self, unit: str, info: WorkerInfo | None, problem: str | None, rel: int) -> None:
        """Take in what one worker unit published on relation `rel` (see `read_worker`)."""
        if info is not None:
            self.workers[unit] = Worker.from_info(info, rel)
            if not info.node_identity:
                self.shared_grant.add(unit)
        if problem is not None:
            self.problems[unit] = problem

    def forget(self, units: Iterable[str]) -> None:
        """Drop departed units."""
        for unit in units:
            self.workers.pop(unit, None)
            self.problems.pop(unit, None)
            self.shared_grant.discard(unit)

    def owner_of(self, node: str) -> str | None:
        """The unit that registered `node` (the first, in unit order, if several claim it)."""
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

    def versions(self) -> dict[str, str | None]:
        """The minor each registered worker published (None when it did not say)."""
        return {unit: w.version for unit, w in self.workers.items()}


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
