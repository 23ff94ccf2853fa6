"""The README's example outputs, produced by the tests that run the code.

An example in the README is a fenced block right after a marker line,

    <!-- example: cluster-info -->
    ```yaml
    ...
    ```

and the test that runs that command calls `show("cluster-info", text)` with what the
code printed. The block must be exactly that text; `GPU_K8S_UPDATE_EXAMPLES=1 tox -e
unit` (or `functional`) writes it instead, so an example changes only by running the
code. tests/unit/docs/test_readme_examples.py checks that every marker in the README has
a test that produces it.

`juju_results` prints an action's results as `juju run` does by default (its `plain`
format: the results of the one unit as YAML, keys sorted; juju
cmd/juju/action/run.go printPlainOutput, with juju/cmd's YAML formatter). Every value is
a string there (ops hands them to `action-set` as key=value), and Go's YAML writer
double-quotes a string that would read as another type (`"2"`).

Generated names (pods, Jobs) are random in Kubernetes and in the fakes; a test that
shows an example runs `with repeatable():` so that they come out the same every time.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from fakes.kube_apiserver import seed_names

README = Path(__file__).resolve().parents[1] / "README.md"
UPDATE = os.environ.get("GPU_K8S_UPDATE_EXAMPLES") == "1"


class _Dumper(yaml.SafeDumper):
    """Block style, and multi-line strings as literal blocks, as Go's YAML writes them."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = None
    if "\n" in text:
        style = "|"
    elif dumper.resolve(yaml.ScalarNode, text, (True, False)) != "tag:yaml.org,2002:str":
        style = '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _string)


def juju_results(results: Mapping[str, Any], keys: Iterable[str] | None = None) -> str:
    """What `juju run <unit> <action>` prints for these results (`keys`: only those)."""
    shown = _strings({k: results[k] for k in keys} if keys is not None else dict(results))
    return yaml.dump(
        shown,
        Dumper=_Dumper,
        sort_keys=True,
        default_flow_style=False,
        width=10_000,
        allow_unicode=True,
    )


def _strings(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _strings(v) for k, v in value.items()}
    return str(value)


@contextlib.contextmanager
def repeatable(seed: int = 17) -> Iterator[None]:
    """Generated names come out the same every run inside this block."""
    seed_names(seed)
    try:
        yield
    finally:
        seed_names(None)


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- example: {re.escape(name)} -->\n```[a-z]*\n)(.*?)(```\n)", re.S)


def show(name: str, text: str, volatile: Iterable[str] = ()) -> None:
    """The README's example `name` is `text` (written there with GPU_K8S_UPDATE_EXAMPLES=1).

    `volatile`: patterns of what differs from run to run (a loss, an accuracy, seconds
    left): the README keeps the values of the run that wrote it, and the rest must match.
    """
    readme = README.read_text()
    match = _block(name).search(readme)
    assert match, f"the README has no block after `<!-- example: {name} -->`"
    patterns = [re.compile(p) for p in volatile]

    def stable(t: str) -> str:
        for pattern in patterns:
            t = pattern.sub("<varies>", t)
        return t

    if UPDATE and match.group(2) != text:  # what this run printed, volatile parts too
        README.write_text(readme[: match.start(2)] + text + readme[match.end(2) :])
        return
    if stable(match.group(2)) == stable(text):
        return
    if UPDATE:
        README.write_text(readme[: match.start(2)] + text + readme[match.end(2) :])
        return
    diff = "\n".join(
        difflib.unified_diff(
            stable(match.group(2)).splitlines(),
            stable(text).splitlines(),
            "README",
            "the code",
            lineterm="",
        )
    )
    raise AssertionError(
        f"the README's example {name!r} is not what the code prints; run the tests with "
        f"GPU_K8S_UPDATE_EXAMPLES=1 to write it:\n{diff}"
    )


def names(readme: str | None = None) -> list[str]:
    """Every example marker in the README."""
    return re.findall(
        r"<!-- example: ([a-z0-9-]+) -->", README.read_text() if readme is None else readme
    )
