"""Import a charm's workload module by charm name, for tests outside that charm's suite.

Every charm keeps its modules in its own `src/` (`literals`, `charm`, ...), so two
charms' modules cannot share plain names in one process. `load("efs-storage", "efs")`
imports `charms/efs-storage/src/efs.py` with that `src/` on the path for the import
only, then forgets the plain names it brought in, keeping the modules themselves: a
later `load("efs-storage", "aws")` returns the very module `efs` imported (one class per
error, so `pytest.raises` matches), and the modules of one charm loaded earlier take part
in the imports of the next.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
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
    with plain_names(charm):
        module = importlib.import_module(name)
    return _LOADED.setdefault((charm, name), module)


@contextlib.contextmanager
def plain_names(charm: str) -> Iterator[None]:
    """`charm`'s modules under their plain names meanwhile; its `src/` on the path.

    For `load`'s import, and for running that charm's code whose functions import a
    module of theirs when called (registry.py's `import kueue`): the modules it loaded
    so far are those names, any other it imports is loaded then and kept.
    """
    src = ROOT / "charms" / charm / "src"
    shadowed = {n: sys.modules.pop(n) for n in list(sys.modules) if _is_plain(n, src)}
    sys.modules.update({m: module for (c, m), module in _LOADED.items() if c == charm})
    sys.path.insert(0, str(src))
    try:
        yield
    finally:
        sys.path.remove(str(src))
        for loaded in [n for n in sys.modules if _is_plain(n, src)]:
            _LOADED.setdefault((charm, loaded), sys.modules.pop(loaded))
        sys.modules.update(shadowed)


def _is_plain(module_name: str, src: Path) -> bool:
    """True when a loaded module would shadow a module of the same name in `src`."""
    return "." not in module_name and (src / f"{module_name}.py").is_file()
