"""A pytest plugin: ops.testing reads and writes its YAML with libyaml instead of pure Python.

ops.testing (Scenario, ops 3.9.0) parses `charmcraft.yaml` for every `Context` and writes
`metadata.yaml`, `config.yaml` and `actions.yaml` into a new directory for every `run`,
with PyYAML's pure-Python `safe_load`/`safe_dump` (scenario/state.py `_load_metadata`,
scenario/_runtime.py `_virtual_charm_root`; upstream's issue canonical/operator#1498).
Profiled on 2026-11-27, that was 56 s of the tensorflow suite's 130 s and 18 s of the
control plane's: more than the charms' own code. ops itself reads those files back with
libyaml (`ops._main`, canonical/operator#325).

Every `run` parses and writes the same three documents again (`ops.charm.CharmMeta.from_yaml`
through `ops._private.yaml.safe_load`, scenario's `safe_dump`): so the text each document
was read from and the data each was written from are kept per process, and the kept result
is handed back as a fresh copy (pickle's, of plain YAML data), as if parsed or written again
(the control plane's suite: ~2,700 parses of ~10 distinct texts, measured 2026-11-27).

This plugin gives those two modules PyYAML's C parser and emitter (libyaml, in PyYAML's
wheels): the same documents, the same data read back; nothing else changes. Without
ops.testing (the integration environment) or without libyaml it does nothing. pyproject
loads it for every pytest run (`-p libyaml_for_ops_testing`).
"""

from __future__ import annotations

import importlib
import pickle
from typing import Any

try:
    import yaml
except ImportError:  # an environment without PyYAML has no ops.testing either
    yaml = None  # type: ignore[assignment]


_KEPT = 256  # documents kept per process, each way
_parsed: dict[str, bytes] = {}  # text -> the data read from it, pickled
_written: dict[bytes, str] = {}  # the data, pickled -> the text written from it


def _kept_load(text: str, load: Any) -> Any:
    """`load(text)`, or a fresh copy of what it gave for the same text before."""
    kept = _parsed.get(text)
    if kept is None:
        data = load(text)
        kept = pickle.dumps(data)
        if len(_parsed) < _KEPT:
            _parsed[text] = kept
        return data
    return pickle.loads(kept)


class _LibYaml:
    """The `yaml` module as ops.testing uses it, with libyaml's loader and dumper."""

    def __getattr__(self, name: str) -> Any:
        return getattr(yaml, name)

    @staticmethod
    def safe_load(stream: Any) -> Any:
        """`yaml.safe_load` on libyaml's parser."""
        if isinstance(stream, str):
            return _kept_load(stream, lambda t: yaml.load(t, Loader=yaml.CSafeLoader))
        return yaml.load(stream, Loader=yaml.CSafeLoader)

    @staticmethod
    def safe_dump(data: Any, stream: Any = None, **kwargs: Any) -> Any:
        """`yaml.safe_dump` on libyaml's emitter."""
        if stream is not None or kwargs:
            return yaml.dump(data, stream, Dumper=yaml.CSafeDumper, **kwargs)
        key = pickle.dumps(data)
        text = _written.get(key)
        if text is None:
            text = yaml.dump(data, Dumper=yaml.CSafeDumper)
            if len(_written) < _KEPT:
                _written[key] = text
        return text


def use_libyaml() -> bool:
    """Point ops.testing's modules at libyaml, where both are installed; True if done.

    For programs outside pytest that run ops.testing as the tests do (tests/bench).
    """
    if yaml is None or not getattr(yaml, "__with_libyaml__", False):
        return False
    for name in ("scenario.state", "scenario._runtime"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            return False
        if getattr(module, "yaml", None) is yaml:
            module.yaml = _LibYaml()  # type: ignore[attr-defined]
    ops_yaml = importlib.import_module("ops._private.yaml")
    parse = ops_yaml.safe_load
    if not getattr(parse, "kept", False):

        def safe_load(stream: Any) -> Any:
            if isinstance(stream, str):
                return _kept_load(stream, parse)
            return parse(stream)

        safe_load.kept = True  # type: ignore[attr-defined]
        ops_yaml.safe_load = safe_load
    return True


def pytest_configure(config: Any) -> None:
    """Point ops.testing's modules at libyaml, where both are installed."""
    use_libyaml()
