# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Turns to drain: at most `max-parallel-reboots` units of an application at once.

A unit that needs to drain its node (a driver that needs a reboot, the driver moving with
a new kernel, a MIG change, a Kubernetes patch or minor upgrade, a containerd/runc
security update, a GPU repair) asks on the `reboots` peer relation: its unit databag holds
`reboot-request` (when it asked, why, and for which purposes: `REBOOT`, `UPGRADE`,
`RUNTIME`, `REPAIR`). One
request serves every purpose, so a node drained for an upgrade and for a reboot holds one
turn, and it keeps its place (its first `since`) until its last purpose is done. The
leader grants turns in the application databag (`reboot-turns`, the units allowed),
oldest request first, never more than the limit; a unit keeps its turn until it clears
its request, which it does once it is back on a new boot with a working driver (or
upgraded) and its node uncordoned. A kernel update reaches
every node the same day, so without turns the whole GPU pool could drain at once.

A unit back from its reboot whose GPUs still fail keeps its turn, and says so in its unit
databag (`reboot-failed`: `driver` or `fabric`, next to `gpu`: what GPUs it has). While a
holder says so, the leader grants no new turn to reboot or reset GPUs (`reboot`,
`repair`) to a node that would walk into the same failure, whatever `max-parallel-reboots`
allows: any GPU node after a driver failure, an NVSwitch node after a Fabric Manager
failure (a node without NVSwitch runs no Fabric Manager: NVIDIA's Fabric Manager User
Guide, release 2.3, "Overview": Fabric Manager is for NVSwitch-based HGX and DGX systems).
Other nodes, and drains that leave the GPUs alone (upgrades, runtime updates), go on.

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
from collections.abc import Collection, Mapping, Sequence

import mig_layout
import ops

REQUEST_KEY = "reboot-request"
TURNS_KEY = "reboot-turns"
GPU_KEY = "gpu"  # this unit's GPUs: NVSWITCH, GPU, or absent (none)
FAILED_KEY = "reboot-failed"  # DRIVER or FABRIC: back from its reboot, its GPUs still fail
REBOOT = "reboot"  # a driver reboot or a MIG change (a request without "for" is one)
UPGRADE = "upgrade"  # Kubernetes packages moved on a drained node
RUNTIME = "runtime"  # containerd/runc security updates installed on a drained node
REPAIR = "repair"  # a quarantined GPU reset or rebooted, then gated (gpu_repairs.py)
NVSWITCH = "nvswitch"  # GPUs on an NVSwitch board (p4d, p5): Fabric Manager runs
GPU = "gpu"  # GPUs without NVSwitch
DRIVER = "driver"  # the driver did not work after the reboot
FABRIC = "fabric"  # the driver works, Fabric Manager or the fabric registration failed
# the nodes a holder's failure holds back, and the purposes that reboot or reset GPUs
HOLDS = {DRIVER: frozenset({GPU, NVSWITCH}), FABRIC: frozenset({NVSWITCH})}
GPU_PURPOSES = frozenset({REBOOT, REPAIR})


def grant(
    requests: Mapping[str, float],
    current: Sequence[str],
    limit: int,
    held: Collection[str] = (),
) -> list[str]:
    """The units allowed to reboot now.

    Args:
        requests: {unit name: when it asked} of every unit that wants a turn.
        current: the units that hold a turn now (kept while they still ask).
        limit: at most this many turns at once (at least one).
        held: units that get no new turn now (a holder's failure would be theirs too).
    """
    kept = [unit for unit in current if unit in requests]
    waiting = sorted(
        (unit for unit in requests if unit not in kept and unit not in held),
        key=lambda unit: (requests[unit], _unit_number(unit)),
    )
    return kept + waiting[: max(0, max(1, limit) - len(kept))]


def held_back(
    gpus: Mapping[str, str | None],
    failed: Mapping[str, str | None],
    purposes: Mapping[str, Collection[str]],
    current: Sequence[str],
) -> set[str]:
    """The units that get no new turn while a holder in `current` says its GPUs failed.

    Args:
        gpus: {unit: NVSWITCH, GPU or None} as each unit says.
        failed: {unit: DRIVER, FABRIC or None} as each unit says.
        purposes: {unit: what it asks a turn for} of every unit that asks.
        current: the units that hold a turn now.
    """
    kinds: set[str] = set()
    for unit in current:
        kinds |= HOLDS.get(failed.get(unit) or "", frozenset())
    return {
        unit
        for unit, wants in purposes.items()
        if unit not in current and gpus.get(unit) in kinds and GPU_PURPOSES & set(wants)
    }


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
        return {unit: since for unit, (since, _) in self._requests().items()}

    def _requests(self) -> dict[str, tuple[float, list[str]]]:
        """{unit: (when it asked, what for)} for every unit of the application that asks."""
        relation = self._relation
        if relation is None:
            return {}
        found = {}
        for unit in (self.model.unit, *relation.units):
            raw = relation.data[unit].get(REQUEST_KEY)
            if not raw:
                continue
            try:
                request = json.loads(raw)
                since = float(request["since"])
            except (ValueError, KeyError, TypeError):
                found[unit.name] = (0.0, [REBOOT])
                continue
            wants = request.get("for")
            found[unit.name] = (since, wants if isinstance(wants, list) else [REBOOT])
        return found

    def _unit_says(self, key: str) -> dict[str, str | None]:
        """{unit: its unit databag's `key`} for this unit and every peer."""
        relation = self._relation
        if relation is None:
            return {}
        return {u.name: relation.data[u].get(key) for u in (self.model.unit, *relation.units)}

    def update_grants(self, limit: int) -> None:
        """On the leader: grant turns to the oldest requests, up to `limit` at once.

        None to a node a holder's failure holds back (`held_back`).
        """
        relation = self._relation
        if relation is None or not self.model.unit.is_leader():
            return
        requests, current = self._requests(), self.turns()
        held = held_back(
            self._unit_says(GPU_KEY),
            self._unit_says(FAILED_KEY),
            {unit: wants for unit, (_, wants) in requests.items()},
            current,
        )
        since = {unit: when for unit, (when, _) in requests.items()}
        turns = grant(since, current, limit, held)
        value = json.dumps(turns)
        if relation.data[relation.app].get(TURNS_KEY, "[]") != value:
            relation.data[relation.app][TURNS_KEY] = value

    def describe(self, gpus: str | None, failed: str | None) -> None:
        """Say what GPUs this unit has and whether they failed after its reboot.

        `gpus`: NVSWITCH, GPU or None; `failed`: DRIVER, FABRIC or None. Written only when
        it changed, so a peer is woken only by news.
        """
        relation = self._relation
        if relation is None:
            return
        mine = relation.data[self.model.unit]
        for key, value in ((GPU_KEY, gpus), (FAILED_KEY, failed)):
            if mine.get(key) != value:
                if value is None:
                    mine.pop(key, None)
                else:
                    mine[key] = value

    def _own_request(self) -> dict | None:
        relation = self._relation
        raw = relation.data[self.model.unit].get(REQUEST_KEY) if relation else None
        if not raw:
            return None
        try:
            found = json.loads(raw)
        except json.JSONDecodeError:
            return {"since": 0.0, "for": [REBOOT]}
        if not isinstance(found, dict):
            return {"since": 0.0, "for": [REBOOT]}
        if not isinstance(found.get("for"), list):
            found["for"] = [REBOOT]
        return found

    def request(self, reason: str, limit: int, purpose: str = REBOOT) -> bool:
        """Ask for a turn for `purpose` (kept while asking); True when this unit holds one.

        A unit that already asks keeps its place and adds the purpose. Without the peer
        relation (a unit alone, before Juju created it) there is nobody to wait for.
        """
        relation = self._relation
        if relation is None:
            return True
        found = self._own_request()
        if found is None:
            found = {"since": time.time(), "reason": reason, "for": [purpose]}
        elif purpose in found["for"]:
            found = None  # filed already: rewriting it (even an older revision's form,
            # which means a reboot) would wake every peer for nothing
        else:
            found["for"] = [*found["for"], purpose]
        if found is not None:
            relation.data[self.model.unit][REQUEST_KEY] = json.dumps(found)
        self.update_grants(limit)
        return self.model.unit.name in self.turns()

    def asked_for(self) -> str | None:
        """Why this unit asks for a turn (the reason it filed), or None when it does not."""
        found = self._own_request()
        if found is None:
            return None
        reason = found.get("reason")
        return reason if isinstance(reason, str) else ""

    def done(self, limit: int, purpose: str = REBOOT) -> None:
        """This unit no longer drains for `purpose`: the turn goes back after the last one."""
        relation = self._relation
        if relation is None:
            return
        found = self._own_request()
        if found is not None and purpose in found["for"]:
            rest = [p for p in found["for"] if p != purpose]
            mine = relation.data[self.model.unit]
            if rest:
                value = json.dumps({**found, "for": rest})
                if mine.get(REQUEST_KEY) != value:
                    mine[REQUEST_KEY] = value
            else:
                mine.pop(REQUEST_KEY, None)
        self.update_grants(limit)

    def waiting_message(self, reason: str, limit: int, purpose: str = REBOOT) -> str:
        """Status while waiting for a turn: why, who holds one now, and what holds it back.

        Worded by purpose: a driver reboot says "reboot needed" and "rebooting now"; a MIG
        change (filed as a reboot, `mig_layout.is_mig_request`) and every other purpose
        name what needs the drain and the nodes "drained now".
        """
        me = self.model.unit.name
        others = [t for t in self.turns() if t != me]
        if purpose != REBOOT:
            need, doing = reason, "drained"
        elif mig_layout.is_mig_request(reason):
            need, doing = f"{reason} needs a drain", "drained"
        else:
            need, doing = f"reboot needed ({reason})", "rebooting"
        now = f"; {doing} now: {', '.join(others)}" if others else ""
        plural = "node" if limit == 1 else "nodes"
        wants = (self._own_request() or {}).get("for") or [purpose]
        failed, mine = self._unit_says(FAILED_KEY), self._unit_says(GPU_KEY).get(me)
        blockers = [
            t
            for t in others
            if mine in HOLDS.get(failed.get(t) or "", ()) and GPU_PURPOSES & set(wants)
        ]
        held = f"; held back until {', '.join(blockers)} works again" if blockers else ""
        return (
            f"{need}; waiting for a turn (max-parallel-reboots: {limit} {plural} at once)"
            f"{now}{held}"
        )
