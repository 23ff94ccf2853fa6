# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Turns to reboot: at most `max-parallel-reboots` units of an application at once.

A unit that needs to drain and reboot its node (a driver that needs a reboot, the driver
moving with a new kernel) asks on the `reboots` peer relation: its unit databag holds
`reboot-request` (when it asked, and why). The leader grants turns in the application
databag (`reboot-turns`, the units allowed), oldest request first, never more than the
limit; a unit keeps its turn until it clears its request, which it does once it is back
on a new boot with a working driver and its node uncordoned. A kernel update reaches
every node the same day, so without turns the whole GPU pool could drain at once.

Why not charmlibs-rollingops (PyPI, looked at 1.1.5): it grants one lock holder only,
where `max-parallel-reboots` asks for N; its operation runs as one callback in a hook a
background worker dispatches and the lock follows that callback, where here the turn must
outlive the reboot (Juju reboots after the hook) until the node is uncordoned on the next
boot; and it brings a worker process and TLS/etcd dependencies a worker node does not
need. The grant rule is a pure function (`grant`), tested on its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence

import ops

REQUEST_KEY = "reboot-request"
TURNS_KEY = "reboot-turns"


def grant(requests: Mapping[str, float], current: Sequence[str], limit: int) -> list[str]:
    """The units allowed to reboot now.

    Args:
        requests: {unit name: when it asked} of every unit that wants a turn.
        current: the units that hold a turn now (kept while they still ask).
        limit: at most this many turns at once (at least one).
    """
    kept = [unit for unit in current if unit in requests]
    waiting = sorted(
        (unit for unit in requests if unit not in kept),
        key=lambda unit: (requests[unit], _unit_number(unit)),
    )
    return kept + waiting[: max(0, max(1, limit) - len(kept))]


def _unit_number(unit: str) -> int:
    number = unit.rpartition("/")[2]
    return int(number) if number.isdigit() else 0


class RebootTurns(ops.Object):
    """This unit's side of the `reboots` peer relation, and the leader's grants.

    An ops.Object (as relation libraries are) that reads the model only: the relation,
    this unit and its leadership.
    """

    def __init__(self, parent: ops.Object, relation_name: str):
        super().__init__(parent, relation_name)
        self._name = relation_name

    @property
    def _relation(self) -> ops.Relation | None:
        return self.model.get_relation(self._name)

    def turns(self) -> list[str]:
        """The units that hold a turn now."""
        relation = self._relation
        if relation is None:
            return []
        try:
            turns = json.loads(relation.data[relation.app].get(TURNS_KEY) or "[]")
        except json.JSONDecodeError:
            return []
        return [t for t in turns if isinstance(t, str)]

    def requests(self) -> dict[str, float]:
        """{unit: when it asked} for every unit of the application that asks."""
        relation = self._relation
        if relation is None:
            return {}
        found = {}
        for unit in (self.model.unit, *relation.units):
            raw = relation.data[unit].get(REQUEST_KEY)
            if not raw:
                continue
            try:
                found[unit.name] = float(json.loads(raw)["since"])
            except (ValueError, KeyError, TypeError):
                found[unit.name] = 0.0
        return found

    def update_grants(self, limit: int) -> None:
        """On the leader: grant turns to the oldest requests, up to `limit` at once."""
        relation = self._relation
        if relation is None or not self.model.unit.is_leader():
            return
        turns = grant(self.requests(), self.turns(), limit)
        value = json.dumps(turns)
        if relation.data[relation.app].get(TURNS_KEY, "[]") != value:
            relation.data[relation.app][TURNS_KEY] = value

    def request(self, reason: str, limit: int) -> bool:
        """Ask for a turn (kept while asking); True when this unit holds one now.

        Without the peer relation (a unit alone, before Juju created it) there is
        nobody to wait for.
        """
        relation = self._relation
        if relation is None:
            return True
        mine = relation.data[self.model.unit]
        if not mine.get(REQUEST_KEY):
            mine[REQUEST_KEY] = json.dumps({"since": time.time(), "reason": reason})
        self.update_grants(limit)
        return self.model.unit.name in self.turns()

    def asked_for(self) -> str | None:
        """Why this unit asks for a turn (the reason it filed), or None when it does not."""
        relation = self._relation
        raw = relation.data[self.model.unit].get(REQUEST_KEY) if relation else None
        if not raw:
            return None
        try:
            reason = json.loads(raw).get("reason")
        except (ValueError, AttributeError):
            return ""
        return reason if isinstance(reason, str) else ""

    def done(self, limit: int) -> None:
        """This unit is back and uncordoned: give its turn back."""
        relation = self._relation
        if relation is None:
            return
        relation.data[self.model.unit].pop(REQUEST_KEY, None)
        self.update_grants(limit)

    def waiting_message(self, reason: str, limit: int) -> str:
        """Status while waiting for a turn: why, and who reboots now."""
        others = [t for t in self.turns() if t != self.model.unit.name]
        now = f"; rebooting now: {', '.join(others)}" if others else ""
        plural = "node" if limit == 1 else "nodes"
        return (
            f"reboot needed ({reason}); waiting for a turn (max-parallel-reboots: "
            f"{limit} {plural} at once){now}"
        )
