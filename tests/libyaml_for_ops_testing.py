"""A pytest plugin: ops.testing reads and writes its YAML with libyaml instead of pure Python.

ops.testing (Scenario, ops 3.9.0) parses `charmcraft.yaml` for every `Context` and writes
`metadata.yaml`, `config.yaml` and `actions.yaml` into a new directory for every `run`,
with PyYAML's pure-Python `safe_load`/`safe_dump` (scenario/state.py `_load_metadata`,
scenario/_runtime.py `_virtual_charm_root`; upstream's issue canonical/operator#1498).
Profiled on 2026-11-27, that was 56 s of the tensorflow suite's 130 s and 18 s of the
control plane's: more than the charms' own code. ops itself reads those files back with
libyaml (`ops._main`, canonical/operator#325).

This plugin gives those two modules PyYAML's C parser and emitter (libyaml, in PyYAML's
wheels): the same documents, the same data read back; nothing else changes. Without
ops.testing (the integration environment) or without libyaml it does nothing. pyproject
loads it for every pytest run (`-p libyaml_for_ops_testing`).
"""

from __future__ import annotations

import importlib
from typing import Any

try:
    import yaml
except ImportError:  # an environment without PyYAML has no ops.testing either
    yaml = None  # type: ignore[assignment]


class _LibYaml:
    """The `yaml` module as ops.testing uses it, with libyaml's loader and dumper."""

    def __getattr__(self, name: str) -> Any:
        return getattr(yaml, name)

    @staticmethod
    def safe_load(stream: Any) -> Any:
        """`yaml.safe_load` on libyaml's parser."""
        return yaml.load(stream, Loader=yaml.CSafeLoader)

    @staticmethod
    def safe_dump(data: Any, stream: Any = None, **kwargs: Any) -> Any:
        """`yaml.safe_dump` on libyaml's emitter."""
        return yaml.dump(data, stream, Dumper=yaml.CSafeDumper, **kwargs)


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
    return True


def pytest_configure(config: Any) -> None:
    """Point ops.testing's modules at libyaml, where both are installed."""
    use_libyaml()
