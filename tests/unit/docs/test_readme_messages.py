"""Every status or error message the docs quote is one the code can produce.

The docs are README.md and every hand-written page under docs/ (tests/docs_pages.py). A
message there is an inline code span that reads like one: three words or more,
not a command, not YAML or PromQL (or a `juju status` line, whose message part is
taken). `...` and `<placeholder>` in a quote stand for text left out.

The code's messages are its string literals (docstrings left out) and f-strings, whose
`{...}` fields stand for any text. Messages are composed from several literals (a
status joins a prefix, a reason and a hint), so a quote is explained when literals that
each match a part of it, with at least MIN_FIXED of their own fixed characters there,
cover nearly all of its letters; a field of a literal covers the values it stands for
(`6.8.0-1016-aws` in `kernel {upcoming} waits for a reboot`). A few quotes are other
programs' words: Kueue's scheduling message, Arena's command, dashboard titles (read
from the dashboards). Case is ignored, and so are words with a digit (values).

It is a net, not a proof: a quote whose every phrase some literal has passes, so a
changed common word ("ready" for "available") can slip through; a reworded or invented
message, or one the code stopped saying, does not.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import docs_pages
import pytest
import reference

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [
    *ROOT.glob("charms/*/src/**/*.py"),
    *ROOT.glob("lib/charms/gpu_k8s/**/*.py"),
    *ROOT.glob("actions/*.py"),
]
STAR = "\0"  # any text: a field of an f-string, a `...` or `<...>` of a quote
MIN_FIXED = 4  # a literal explains part of a quote only with this many of its own letters
COMMANDS = (
    "juju", "kubectl", "tox", "pip", "python3", "sudo", "aws", "curl", "git", "skopeo",
    "kubeadm", "journalctl", "echo", "etcdctl", "ubuntu-drivers", "apt-get", "uv",
)  # fmt: skip
# Messages of other programs that ours pass on, with where they come from.
UPSTREAM = (
    # Kueue's reason in a pending Workload's QuotaReserved condition, which `train` and
    # `job-status` show after the queue position (kubernetes-sigs/kueue v0.19.2
    # pkg/scheduler/flavorassigner/flavorassigner.go; tests/fakes/batch.py plays it)
    f"couldn't assign flavors to pod set {STAR}: insufficient unused quota for {STAR} in "
    f"flavor {STAR}, {STAR} more needed",
    # kubectl get with nothing to list (kubernetes staging/src/k8s.io/kubectl/pkg/cmd/get/
    # get.go, "No resources found in %s namespace."; tests/functional/test_readme_kubectl.py
    # runs the real kubectl 1.36.3 and checks it)
    f"No resources found in {STAR} namespace.",
)
# Quoted words that are no message.
NOT_MESSAGES = {
    "arena top node",  # kubeflow/arena's command, which cluster-info stands in for
    "FB_USED / (FB_USED + FB_FREE)",  # PromQL of a dashboard panel
    "avg by (namespace, pod)",
}
STATUS_LINE = re.compile(r"^[a-z0-9-]+/\d+ (active|waiting|blocked|maintenance) ")


def _pattern(node: ast.AST) -> str | None:
    """A string literal as text with STAR for each f-string field; None for non-strings.

    tools/reference.py lists the status messages with the same reading (and parse cache).
    """
    return reference.literal_text(node, lambda _: STAR)


@functools.cache
def code_messages() -> tuple[str, ...]:
    """Every string literal of the charms, their libraries and the action programs."""
    found = set()
    for path in SOURCES:
        tree = reference.parse(path).tree
        docstrings = {
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, (ast.Constant, ast.JoinedStr))
        }
        for node in ast.walk(tree):
            text = _pattern(node)
            if text and id(node) not in docstrings and len(text.replace(STAR, "")) >= MIN_FIXED:
                # a message's commands are in backticks; a quote in a code span cannot be
                found.add(" ".join(text.replace("`", "").split()).lower())
    for path in ROOT.glob("charms/*/src/grafana_dashboards/*.json"):
        found.add(json.loads(path.read_text())["title"].lower())
    return tuple(sorted(found | {m.lower() for m in UPSTREAM}))


def readme_quotes(text: str) -> list[str]:
    """The inline code spans of `text` that read like messages (see the module docstring)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    quotes = []
    for span in re.findall(r"`([^`]+)`", prose):
        span = STATUS_LINE.sub("", " ".join(span.split()))
        first = span.split(" ", 1)[0]
        if (
            len(span.split()) < 3
            or first in COMMANDS
            or span[0] in "-/[{"
            or "=" in span
            or "{" in span
            or span in NOT_MESSAGES
        ):
            continue
        quotes.append(span)
    return quotes


def _stars(quote: str) -> str:
    return re.sub(r" ?(\.\.\.|<[^<>]*>) ?", STAR, quote)


def _table(literal: str, quote: str) -> list[list[int]]:
    """best[i][j]: most characters matched laying literal[i:] over quote[j:] (-1: cannot).

    Both are patterns over STAR: a STAR of either side takes any text of the other, and
    either may end first.
    """
    n, m = len(literal), len(quote)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            a = literal[i]
            if a == STAR or quote[j] == STAR:
                # a field is empty or takes quote[j]; the quote's STAR ends or takes a[i]
                best[i][j] = max(best[i + 1][j], best[i][j + 1])
            elif quote[j] == a and best[i + 1][j + 1] >= 0:
                best[i][j] = best[i + 1][j + 1] + (a != " ")
            else:
                best[i][j] = -1
    return best


def _align(literal: str, quote: str) -> set[int] | None:
    """Positions of `quote` a match of `literal` somewhere in it explains, or None.

    Of every way to lay `literal` over a stretch of `quote` (it may start inside the
    quote, or the quote inside it), the one that matches the most characters; None when
    that is fewer than MIN_FIXED. The positions are those its characters matched and its
    fields took, a field only when it took one word (more is another literal's text).
    """
    best = _table(literal, quote)
    n, m = len(literal), len(quote)
    starts = [(0, j) for j in range(m)] + [(i, 0) for i in range(n)]
    i, j = max(starts, key=lambda s: best[s[0]][s[1]])
    if best[i][j] < MIN_FIXED:
        return None
    covered: set[int] = set()
    field: list[int] = []  # what the field being walked took
    while i < n and j < m:  # walk the best path again
        if literal[i] == STAR and best[i][j + 1] == best[i][j]:
            field.append(j)
            j += 1
        elif literal[i] == STAR:
            covered.update(field if " " not in "".join(quote[k] for k in field) else ())
            field, i = [], i + 1
        elif quote[j] == STAR:
            i, j = (i, j + 1) if best[i][j + 1] == best[i][j] else (i + 1, j)
        else:
            covered.add(j)
            i, j = i + 1, j + 1
    covered.update(field if " " not in "".join(quote[k] for k in field) else ())
    return covered


def unexplained(quote: str, messages: tuple[str, ...] | None = None) -> str:
    """The letters and digits of `quote` no code literal explains ("" when all are)."""
    pattern = _stars(quote).lower()
    words = set(re.findall(r"[a-z]{3,}", pattern))
    # words with a digit are values (`1x`, `A10G`, `580`, `6.8.0-1016-aws`)
    covered = {k for w in re.finditer(r"[^\s\0]*\d[^\s\0]*", pattern) for k in range(*w.span())}
    for literal in code_messages() if messages is None else messages:
        literal = literal.lower()
        if words.isdisjoint(re.findall(r"[a-z]{3,}", literal)):
            continue  # shares no word with the quote
        covered |= _align(literal, pattern) or set()
    left = "".join(
        quote_char if k in covered or c == STAR or not c.isalnum() else "_"
        for k, (c, quote_char) in enumerate(zip(pattern, _stars(quote), strict=True))
    )
    missing = [c for k, c in enumerate(pattern) if c.isalnum() and k not in covered]
    return left if len(missing) > 0.1 * sum(c.isalnum() for c in pattern) else ""


QUOTES = list(dict.fromkeys(readme_quotes(docs_pages.text())))  # a quote once


def test_the_readme_quotes_messages():
    assert len(QUOTES) > 15
    assert "waiting for a turn" in QUOTES
    assert "Ready: 1x NVIDIA A10G, driver 580, CUDA 13.0" in QUOTES  # from a status line


@pytest.mark.parametrize("quote", QUOTES)
def test_every_quoted_message_is_one_the_code_can_produce(quote):
    left = unexplained(quote)
    assert not left, f"no code says {quote!r} (unexplained: {left!r})"


def test_a_message_the_code_never_says_is_caught():
    code = (
        "kernel \0 is installed but Ubuntu has no \0 modules for it yet (\0); a reboot "
        "would start it without GPUs",
        "waiting for a turn",
    )
    assert not unexplained("kernel ... is installed but Ubuntu has no ... modules", code)
    assert not unexplained("kernel 6.8.0-1016-aws is installed but Ubuntu has no ...", code)
    assert unexplained("kernel ... is installed; Ubuntu will build modules", code)
    assert unexplained("waiting for the operator", code)
    # a field explains values, but not a whole message on its own
    assert unexplained("rebooting the node now", ("reboot: \0",))
