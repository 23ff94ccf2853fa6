# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Rolling upgrades: which nodes still run an older minor, and whose turn it is.

No ops imports. Nodes upgrade one at a time (control-plane units for etcd's quorum,
workers so that drained pods have somewhere to go); the turn stays with a unit until it
reports the new minor or leaves, then passes to the next unit in unit-number order. A
worker unit's minor is its own word, so its turn also ends at a deadline (fleet.py
`_worker_turn`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence

from charms.gpu_k8s.v0.kubeadm import minor_key


def _unit_key(name: str) -> tuple[str, int]:
    app, _, number = name.rpartition("/")
    return app, int(number) if number.isdigit() else -1


def pending(versions: Mapping[str, str | None], target: str) -> list[str]:
    """Units whose minor is not `target` yet, in unit-number order.

    A unit whose minor is unknown (None: a worker that has not joined yet) is left out:
    it installs `target` when it joins.
    """
    behind = [unit for unit, minor in versions.items() if minor is not None and minor != target]
    return sorted(behind, key=_unit_key)


def wanting(flags: Mapping[str, bool]) -> list[str]:
    """Units that want a turn (their flag set), in unit-number order."""
    return sorted((unit for unit, wants in flags.items() if wants), key=_unit_key)


def turn(waiting: Sequence[str], current: str | None) -> str | None:
    """Who may upgrade now: the holder while it still waits, else the first waiting unit."""
    if current in waiting:
        return current
    return waiting[0] if waiting else None


def held(bag: Mapping[str, str], keys: Iterable[str], but: str = "") -> tuple[str, str] | None:
    """(key, holder) of the first turn of `keys` other than `but` that is out, or None."""
    return next(((k, bag[k]) for k in keys if k != but and bag.get(k)), None)


def pass_turn(
    bag: MutableMapping[str, str],
    key: str,
    waiting: Sequence[str],
    *,
    exclusive: Iterable[str] = (),
) -> str | None:
    """Record under `key` who may upgrade now (see `turn`); remove the key when nobody.

    While another turn of `exclusive` is out, nobody new gets this one: its holder keeps
    it while it still waits, and gives it back once done (so two turns out at once, as
    an earlier revision could leave them, drain to one instead of waiting on each other).
    """
    current = bag.get(key)
    if held(bag, exclusive, but=key) is not None:
        holder = current if current in waiting else None
    else:
        holder = turn(waiting, current)
    if holder is None:
        bag.pop(key, None)
    elif bag.get(key) != holder:
        bag[key] = holder
    return holder


def lowest(versions: Mapping[str, str | None], fallback: str) -> str:
    """The lowest known minor among `versions` ("1.36" below "1.37"), or `fallback`.

    What workers may install while control-plane units run different minors: kubelet
    must not be newer than any kube-apiserver it may reach (Kubernetes version skew
    policy), and a worker's API proxy reaches all of them.
    """
    known = [v for v in versions.values() if v]
    return min(known, key=minor_key) if known else fallback
