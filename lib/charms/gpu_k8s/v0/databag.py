# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The databag base every gpu-k8s relation library builds its models on.

Juju databags hold strings only. A `Databag` model reads dashed keys (`ca-cert-hash`)
into Python fields, and `dump()` writes them back as strings: text as it is, anything
else as JSON (`true`, `4`, `["a"]`). `explain()` turns a validation error into the
short phrase a status line can carry, naming the offending field. `write()` updates a
databag touching only the keys that differ, so an unchanged answer fires no
relation-changed event on the other side. `Endpoint` is the base of every provider and
requirer class: the charm, the endpoint's name and its relations.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, MutableMapping

import ops
import pydantic

LIBID = "390b8147c70f43f5802e1c4b60662ba7"
LIBAPI = 0
LIBPATCH = 3


class Databag(pydantic.BaseModel):
    """A frozen model of one application or unit databag; unknown keys are ignored."""

    model_config = pydantic.ConfigDict(
        frozen=True, extra="ignore", populate_by_name=True, defer_build=True
    )

    def dump(self) -> dict[str, str]:
        """Return the databag form: dashed keys, string values, unset fields left out."""
        out: dict[str, str] = {}
        for key, value in self.model_dump(by_alias=True, exclude_none=True).items():
            out[key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return out


class Endpoint(ops.Object):
    """One side of a relation interface, bound to one endpoint of the charm."""

    def __init__(self, charm: ops.CharmBase, relation_name: str):
        super().__init__(charm, relation_name)
        self.charm = charm
        self.relation_name = relation_name

    @property
    def relations(self) -> list[ops.Relation]:
        """The active relations of this endpoint."""
        return list(self.model.relations.get(self.relation_name, ()))

    @property
    def relation(self) -> ops.Relation | None:
        """The first relation of this endpoint (for endpoints with `limit: 1`), if any."""
        relations = self.relations
        return relations[0] if relations else None


def explain(error: pydantic.ValidationError) -> str:
    """The first problem of a databag as `field is missing` or `field is invalid (why)`."""
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "databag"
    if first["type"] == "missing":
        return f"{field} is missing"
    return f"{field} is invalid ({first['msg'].removeprefix('Value error, ')})"


def write(
    data: MutableMapping[str, str], bag: Mapping[str, str], *, remove: Iterable[str] = ()
) -> None:
    """Set the keys of `bag` whose value differs in `data`; delete those in `remove` it lacks.

    Pass `remove=list(data)` to make an application databag this side owns equal `bag`;
    never do that to a unit databag, where Juju keeps keys of its own (ingress-address).
    """
    for key in [k for k in remove if k not in bag and k in data]:
        del data[key]
    for key, value in bag.items():
        if data.get(key) != value:
            data[key] = value
