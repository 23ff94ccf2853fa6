# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Rolling upgrades: which nodes still run an older minor, and whose turn it is.

No ops imports. Nodes upgrade one at a time (control-plane units for etcd's quorum,
workers so that drained pods have somewhere to go); the turn stays with a unit until it
reports the new minor or leaves, then passes to the next unit in unit-number order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


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


def turn(waiting: Sequence[str], current: str | None) -> str | None:
    """Who may upgrade now: the holder while it still waits, else the first waiting unit."""
    if current in waiting:
        return current
    return waiting[0] if waiting else None
