"""The layering CONTRIBUTING describes, checked on the source: who may import whom.

charm.py (ops) -> workload modules and ops components -> lib/ (relations and shared host
code). A module under charms/<name>/src other than charm.py never imports its charm (not
even for types) nor reaches into a charm object's private attributes; modules of one
charm, and the libraries, import each other without a circle, counting imports inside
functions too (an import moved into a function to dodge a circle is still a circle).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CHARMS = sorted(p for p in (ROOT / "charms").iterdir() if (p / "src" / "charm.py").exists())
LIB = ROOT / "lib" / "charms" / "gpu_k8s" / "v0"
LIB_PACKAGE = "charms.gpu_k8s.v0"
# `self.charm._kube_client()`, `charm._notes`: a component reaching into the charm
PRIVATE_REACH = re.compile(r"\b_?charm\._[a-z]")
# The ops side of each charm besides charm.py: components of its reconcile that touch
# relations or secrets, or stop the reconcile with a status (CONTRIBUTING, Layering), and
# the config model (ops.Secret options). Every other module is a workload module: no ops.
OPS_SIDE = {"charm", "charm_config"}
OPS_COMPONENTS = {
    "kubernetes-control-plane": {
        "access",
        "addons",
        "backups",
        "context",
        "fleet",
        "membership",
        "operator_actions",
        "renewal",
        "runtime_turns",
        "upgrades",
    },
    "efs-storage": {"aws_access", "confinement", "operator_actions"},
    "kubernetes-worker": {"drain_turns", "gpu_repairs", "operator_actions", "reboot_turns"},
}
OPS_MODULES = ("ops", f"{LIB_PACKAGE}.status")


def _imported(tree: ast.AST) -> Iterator[str]:
    """Every module name an import statement in `tree` names, wherever it stands."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _graph(modules: dict[str, Path], prefix: str = "") -> dict[str, set[str]]:
    """Module -> the modules of the same set it imports."""
    graph = {}
    for name, path in modules.items():
        names = set(_imported(ast.parse(path.read_text())))
        graph[name] = {m for m in modules if f"{prefix}{m}" in names and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in `graph`, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def _modules(charm: Path) -> dict[str, Path]:
    return {p.stem: p for p in sorted((charm / "src").glob("*.py"))}


def _reaching_in(charm: Path) -> list[str]:
    """Where a module of `charm` other than charm.py imports the charm or reaches into it."""
    found = []
    for name, path in _modules(charm).items():
        if name == "charm":
            continue
        text = path.read_text()
        where = f"{charm.name}/src/{path.name}"
        if "charm" in set(_imported(ast.parse(text))):
            found.append(f"{where} imports charm")
        found += [
            f"{where}:{text.count(chr(10), 0, m.start()) + 1} {m.group(0)}..."
            for m in PRIVATE_REACH.finditer(text)
        ]
    return found


@pytest.mark.parametrize("charm", CHARMS, ids=lambda p: p.name)
def test_no_module_but_charm_py_imports_the_charm_or_reaches_into_it(charm: Path):
    found = _reaching_in(charm)
    assert not found, "modules take collaborators, not the charm:\n" + "\n".join(found)


def _ops_in_workload(charm: Path) -> list[str]:
    """Workload modules of `charm` that import ops or the status idiom."""
    allowed = OPS_SIDE | OPS_COMPONENTS.get(charm.name, set())
    return [
        f"{charm.name}/src/{path.name} imports {name}"
        for module, path in _modules(charm).items()
        if module not in allowed
        for name in sorted(set(_imported(ast.parse(path.read_text()))) & set(OPS_MODULES))
    ]


@pytest.mark.parametrize("charm", CHARMS, ids=lambda p: p.name)
def test_workload_modules_import_no_ops(charm: Path):
    found = _ops_in_workload(charm)
    assert not found, "workload modules raise their own errors; charm.py maps them:\n" + (
        "\n".join(found)
    )


@pytest.mark.parametrize("charm", CHARMS, ids=lambda p: p.name)
def test_the_modules_of_a_charm_import_each_other_without_a_circle(charm: Path):
    cycle = _cycle(_graph(_modules(charm)))
    assert cycle is None, f"import circle in {charm.name}: {' -> '.join(cycle or [])}"


def test_the_libraries_import_each_other_without_a_circle():
    modules = {p.stem: p for p in sorted(LIB.glob("*.py"))}
    cycle = _cycle(_graph(modules, prefix=f"{LIB_PACKAGE}."))
    assert cycle is None, f"import circle in lib/: {' -> '.join(cycle or [])}"


def test_the_check_finds_a_circle_and_a_charm_import(tmp_path: Path):
    """The checks above can fail: a circle through a function-level import is found."""
    src = tmp_path / "demo" / "src"
    src.mkdir(parents=True)
    (src / "charm.py").write_text("import storage\n")
    (src / "storage.py").write_text("import claims\n")
    (src / "claims.py").write_text("def name():\n    from storage import fit\n")
    (src / "fleet.py").write_text("from charm import DemoCharm\nx = charm._notes\n")
    (src / "access.py").write_text("import ops\nx = self._charm._kube\n")

    assert _cycle(_graph(_modules(src.parent))) == ["storage", "claims", "storage"]
    assert _reaching_in(src.parent) == [
        "demo/src/access.py:2 _charm._k...",
        "demo/src/fleet.py imports charm",
        "demo/src/fleet.py:2 charm._n...",
    ]
    assert _ops_in_workload(src.parent) == ["demo/src/access.py imports ops"]
