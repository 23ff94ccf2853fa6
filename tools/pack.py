#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Assemble each charm into build/<charm>/ and pack it with charmcraft.

A charm in this repository is `charms/<name>/` plus the pieces it shares with others:
the charm libraries under `lib/` it imports (found by following imports, so nothing has
to be listed twice) and the `actions/` programs named in its pyproject.toml under
`[tool.gpu-k8s] actions = [...]`. The charmcraft `uv` plugin ships only `src/` and
`lib/` (other files need a part of their own, such as a `dump` part), so those
programs are copied to `src/actions/` of the assembled charm.

    python tools/pack.py                  # assemble and pack every charm
    python tools/pack.py --assemble-only  # assemble only (no LXD needed)
    python tools/pack.py tensorflow       # just one charm
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHARMS = ROOT / "charms"
LIB = ROOT / "lib"
ACTIONS = ROOT / "actions"
BUILD = ROOT / "build"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.charm", ".venv", "build")


def charm_names() -> list[str]:
    """Every charm in the repository (a directory under charms/ with a charmcraft.yaml)."""
    return sorted(p.parent.name for p in CHARMS.glob("*/charmcraft.yaml"))


def _imported_modules(source: Path) -> set[str]:
    """Dotted names of the `charms.*` modules a Python file imports."""
    tree = ast.parse(source.read_text(), filename=str(source))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("charms."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("charms."):
                found.add(node.module)
                # `from charms.x.v0 import lib` imports the module `lib`.
                found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def libraries_used(charm: str) -> list[Path]:
    """Library files under lib/ that a charm's src/ imports, directly or through others."""
    pending = list((CHARMS / charm / "src").rglob("*.py"))
    seen: set[Path] = set()
    while pending:
        for module in _imported_modules(pending.pop()):
            path = LIB.joinpath(*module.split(".")).with_suffix(".py")
            if path.is_file() and path not in seen:
                seen.add(path)
                pending.append(path)
    return sorted(seen)


def actions_used(charm: str) -> list[Path]:
    """The actions/ programs a charm ships, from `[tool.gpu-k8s] actions` in its pyproject."""
    pyproject = tomllib.loads((CHARMS / charm / "pyproject.toml").read_text())
    names = pyproject.get("tool", {}).get("gpu-k8s", {}).get("actions", [])
    paths = [ACTIONS / name for name in names]
    missing = [str(p.relative_to(ROOT)) for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"{charm}: pyproject.toml names missing actions: {', '.join(missing)}")
    return paths


def assemble(charm: str, build: Path = BUILD) -> Path:
    """Lay out build/<charm>/ exactly as charmcraft should see it; return that directory."""
    source = CHARMS / charm
    target = build / charm
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=IGNORED)
    if not (target / "LICENSE").exists():
        shutil.copy2(ROOT / "LICENSE", target / "LICENSE")
    for lib in libraries_used(charm):
        dest = target / lib.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, dest)
    for program in actions_used(charm):
        dest = target / "src" / "actions" / program.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(program, dest)
    return target


def pack(charm: str, directory: Path) -> Path:
    """Run `charmcraft pack` in an assembled charm; return build/<charm>.charm."""
    charmcraft = shutil.which("charmcraft")
    if charmcraft is None:
        raise SystemExit(
            "charmcraft not found: install it with `sudo snap install charmcraft "
            "--classic` (packing needs LXD), or use --assemble-only"
        )
    subprocess.run([charmcraft, "pack", "--verbose"], cwd=directory, check=True)
    built = sorted(directory.glob(f"{charm}_*.charm"))
    if not built:
        raise SystemExit(f"charmcraft pack wrote no {charm}_*.charm in {directory}")
    final = directory.parent / f"{charm}.charm"
    shutil.copy2(built[-1], final)
    return final


def main(argv: list[str] | None = None) -> int:
    """Assemble (and unless --assemble-only, pack) the charms named, or all of them."""
    parser = argparse.ArgumentParser(description="Assemble and pack the charms.")
    parser.add_argument("charms", nargs="*", help="charms to build (default: all)")
    parser.add_argument("--assemble-only", action="store_true", help="do not run charmcraft")
    parser.add_argument("--build-dir", type=Path, default=BUILD)
    args = parser.parse_args(argv)
    names = args.charms or charm_names()
    unknown = sorted(set(names) - set(charm_names()))
    if unknown:
        parser.error(f"unknown charm(s): {', '.join(unknown)}; known: {', '.join(charm_names())}")
    for name in names:
        directory = assemble(name, args.build_dir)
        libs = ", ".join(p.stem for p in libraries_used(name)) or "none"
        print(f"assembled {directory} (libraries: {libs})")
        if not args.assemble_only:
            print(f"packed {pack(name, directory)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
