"""What every unit suite's pytest process shares (each suite's own conftest adds its fixtures)."""

from __future__ import annotations

import functools
import sys

import pytest


@pytest.fixture(scope="session", autouse=True)
def schemas_read_once():
    """kubernetes-validate's JSON schemas parsed once per process.

    `kubernetes_validate.validate` reads and parses the kind's schema and the version's
    `_definitions.json` (1.5 MB, ~12 ms of json.load) from its package on every call
    (kubernetes_validate/utils.py `validate` -> `schema_contents`, kubernetes-validate
    1.x); the files are the package's own and never change while a process runs, so the
    first parse of each (file, version) is kept and handed out again. jsonschema and
    referencing only read a schema (`Resource.from_contents`, the validator's lookups), so
    one parse serves every call. A file that is missing (an unknown kind or version) is
    never kept: it raises on every call, as before. A suite whose test modules do not
    import kubernetes-validate (collected before this runs) is left as it is.
    """
    utils = sys.modules.get("kubernetes_validate.utils")
    if utils is None:
        yield
        return
    with pytest.MonkeyPatch.context() as m:
        m.setattr(utils, "schema_contents", functools.cache(utils.schema_contents))
        yield
