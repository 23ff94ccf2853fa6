"""Import a charm's workload module by charm name, for tests outside that charm's suite.

Every charm keeps its modules in its own `src/` (`literals`, `charm`, ...), so two
charms' modules cannot share plain names in one process. `load("efs-storage", "efs")`
imports `charms/efs-storage/src/efs.py` with that `src/` on the path for the import
only, then forgets the plain names it brought in, keeping the module itself.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
_LOADED: dict[tuple[str, str], ModuleType] = {}


def load(charm: str, name: str) -> ModuleType:
    """Return module `name` from `charms/<charm>/src`, imported once per process."""
    if (charm, name) in _LOADED:
        return _LOADED[(charm, name)]
    src = ROOT / "charms" / charm / "src"
    if not (src / f"{name}.py").is_file():
        raise ModuleNotFoundError(f"charms/{charm}/src has no module {name}")
    before = set(sys.modules)
    shadowed = {n: sys.modules.pop(n) for n in list(sys.modules) if _is_plain(n, src)}
    sys.path.insert(0, str(src))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(src))
        for loaded in set(sys.modules) - before:
            path = getattr(sys.modules[loaded], "__file__", None) or ""
            if path and Path(path).is_relative_to(src):
                del sys.modules[loaded]
        sys.modules.update(shadowed)
    _LOADED[(charm, name)] = module
    return module


def _is_plain(module_name: str, src: Path) -> bool:
    """True when a loaded module would shadow a module of the same name in `src`."""
    return "." not in module_name and (src / f"{module_name}.py").is_file()
