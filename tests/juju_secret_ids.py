"""A pytest plugin: ops.testing makes secret ids of the form Juju makes them.

Juju names a new secret `secret:<xid>` (juju core/secrets/secret.go `NewURI`:
`xid.New().String()`) and parses one back with `xid.FromString` (`ParseURI`), which
refuses any other id. An xid is 12 bytes written in base32hex, lowercase, without
padding: 20 characters of `0-9a-v` (rs/xid id.go: `encoding =
"0123456789abcdefghijklmnopqrstuv"`; "expect a 20 chars long, all lowercase sequence of
`a` to `v` letters and `0` to `9` numbers"), whose last character carries a single bit
(`0` or `g`).

ops.testing (ops 3.9.0, scenario/state.py `_generate_secret_id`) draws 20 characters of
`a-z0-9` instead, so a charm's test could show an id Juju never prints (`...y...`) and
that `juju show-secret` would refuse. This plugin replaces that generator with one that
makes xids from `random` (as upstream's, so `readme_examples.repeatable` and a seeded
run stay repeatable). Without ops.testing it does nothing. pyproject loads it for every
pytest run (`-p juju_secret_ids`).
"""

from __future__ import annotations

import base64
import importlib
import random
import re
from typing import Any

# What Juju's ParseURI accepts of a secret id: an xid's text (rs/xid UnmarshalText/decode).
XID = re.compile(r"[0-9a-v]{19}[0g]")


def juju_secret_id() -> str:
    """A new secret's id as Juju makes it: `secret:` and an xid of 12 random bytes."""
    raw = random.getrandbits(96).to_bytes(12, "big")  # noqa: S311 (a test's names)
    return "secret:" + base64.b32hexencode(raw).decode().lower().rstrip("=")


def pytest_configure(config: Any) -> None:
    """Point ops.testing's secret id generator at `juju_secret_id`."""
    try:
        state = importlib.import_module("scenario.state")
    except ImportError:
        return
    if hasattr(state, "_generate_secret_id"):
        state._generate_secret_id = juju_secret_id  # type: ignore[attr-defined]
