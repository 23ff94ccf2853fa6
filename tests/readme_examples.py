"""The documentation's example outputs, produced by the tests that run the code.

An example is a fenced block right after a marker line, on README.md or any hand-written
page under docs/ (tests/docs_pages.py: `pages()`),

    <!-- example: cluster-info -->
    ```yaml
    ...
    ```

and the test that runs that command calls `show("cluster-info", text)` with what the
code printed. The block must be exactly that text; `GPU_K8S_UPDATE_EXAMPLES=1 tox -e
unit` (or `functional`) writes it instead, into the page that holds the marker, so an
example changes only by running the code. A name is used once across all pages;
tests/unit/docs/test_readme_examples.py checks that, and that every marker has a test that
produces it.

`juju_results` prints an action's results as `juju run` does by default (its `plain`
format: the results of the one unit as YAML; juju cmd/juju/action/common.go
printPlainOutput, gopkg.in/yaml.v2's Marshal). Every value is a string there (ops hands
them to `action-set` as key=value, and dotted keys nest), and Go's YAML writer
double-quotes a string that would read as another type (`"2"`, `"y"`), sorts keys in
its natural order (`gpu-2` before `gpu-10`) and folds long strings at 80 columns; the
comment above `juju_results` says where each rule comes from.

Generated names (pods, Jobs) are random in Kubernetes and in the fakes; a test that
shows an example runs `with repeatable():` so that they come out the same every time.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import functools
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import docs_pages
import yaml

README = docs_pages.README
UPDATE = os.environ.get("GPU_K8S_UPDATE_EXAMPLES") == "1"


# `juju run`'s YAML, from the Go sources it is built from (read, not copied):
#
# - juju 3.6 (its go.mod: github.com/juju/cmd/v3 v3.2.0, gopkg.in/yaml.v2 v2.4.0 and
#   `replace gopkg.in/yaml.v2 => github.com/juju/yaml/v2 v2.0.0`): cmd/juju/action/
#   common.go printPlainOutput yaml.Marshal's the unit's results, a
#   map[string]interface{} of strings and maps (worker/uniter/runner/jujuc/
#   action-set.go: values are strings, dotted keys nest). juju/cmd output.go
#   FormatYaml (v3, v4) is the same gopkg.in/yaml.v2 Marshal; nothing uses yaml.v3.
# - github.com/juju/yaml, branch v2 at 12a32b78de07 (what v2.0.0 is; juju pinned that
#   commit as a pseudo-version before): go-yaml v2.2.1 with a yamlStyleFloat that wants
#   a sign in the exponent ("1e5" stays plain, "1e+5" is quoted). emitterc.go and
#   sorter.go are go-yaml v2.4.0's; v2.4.0 adds only FutureLineWrap (apic.go), which
#   this fork lacks, so best_width is 80 (yaml_emitter_emit_stream_start).
#   * encode.go stringv: a string with "\n" asks for a literal block; one that
#     resolve.go resolve() reads as another type asks for double quotes: YAML 1.1
#     bools (y Y yes on off n N no ...), nulls ("" ~ null), ints (Go's ParseInt with
#     0x/0o/0b and leading-0 octal, underscores dropped), floats, .inf/.nan,
#     timestamps (time.Parse of four layouts), base-60 floats ("1:30"); "<<" and
#     anything starting with a character resolveTable doesn't hint stays plain.
#   * emitterc.go yaml_emitter_analyze_scalar + select_scalar_style: plain that the
#     characters forbid (": ", " #", leading "- ", leading/trailing space...) becomes
#     single-quoted, and that double-quoted; a literal with trailing spaces or
#     unprintable characters becomes double-quoted. yamlprivateh.go is_printable is
#     \n, ASCII and the BMP only: tab, CR, C1, U+FEFF and emoji are escaped.
#   * write_plain_scalar / write_single_quoted_scalar / write_double_quoted_scalar
#     fold a value (never a key) at a single space once the column is past 80 (quoted:
#     not at its first or last character; double-quoted: before a run of spaces too,
#     the next line then starting "\ "), continuing 2 columns in from the key.
#     Literal blocks never fold. Indentation is 2.
#   * sorter.go keyList.Less: "natural" key order: at the first difference a letter
#     sorts after a non-letter and a run of digits compares as a number ("gpu-2" <
#     "gpu-10"). It is not a strict order for some sets with a zero-led number
#     ("a01b" < "a0x" < "a1-" < "a01b"): Go's own output then follows map order.
# Checked against that library itself (built with Go) on thousands of random maps.
# PyYAML differs in all of these (it folds double quotes differently, resolves YAML 1.1
# otherwise, sorts by code point), hence this writer for what `juju run` prints: block
# maps of strings.

_BEST_WIDTH = 80
_BEST_INDENT = 2
_BREAKS = "\r\n\x85\u2028\u2029"

# resolve.go: resolveTable hints and resolveMap (YAML 1.1 bools, nulls, .inf/.nan, merge)
_RESOLVED = frozenset(
    "y Y yes Yes YES true True TRUE on On ON n N no No NO false False FALSE off Off OFF"
    " ~ null Null NULL .nan .NaN .NAN .inf .Inf .INF +.inf +.Inf +.INF -.inf -.Inf -.INF".split()
) | {""}
_HINTED = "+-0123456789yYnNtTfFoO~."
_GO_INT = re.compile(r"([+-]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_DOT_FLOAT = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")  # what strconv.ParseFloat takes
_YAML_STYLE_FLOAT = re.compile(r"[-+]?(0|[1-9][0-9]*)?(\.[0-9]+)?([eE][-+][0-9]+)?")
_BASE60_FLOAT = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")
_TIMESTAMP = re.compile(  # parseTimestamp's time.Parse layouts (1- or 2-digit fields)
    r"(?P<y>\d{4})-(?P<mo>\d{1,2})-(?P<d>\d{1,2})"
    r"(?:(?:[Tt]|(?P<space> ))(?P<h>\d{1,2}):(?P<mi>\d{1,2}):(?P<s>\d{1,2})(?:[.,]\d+)?"
    r"(?P<zone>Z|[+-](?P<zh>\d\d):(?P<zm>\d\d))?)?"
)
_ESCAPES = dict(zip('\0\a\b\t\n\v\f\r\x1b"\\\x85\xa0\u2028\u2029', '0abtnvfre"\\N_LP'))


def _go_int(text: str, base: int = 0) -> bool:
    """strconv.ParseInt(text, base, 64) or ParseUint succeeds (base 0: Go's prefixes)."""
    match = _GO_INT.fullmatch(text) if base == 0 else re.fullmatch(r"([+-]?)([01]+)", text)
    if not match:
        return False
    sign, digits = match.groups()
    if base == 2:
        value = int(digits, 2)
    elif len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
        value = int(digits, 8)
    else:
        value = int(digits, 0)
    limit = {"-": 2**63, "+": 2**63 - 1}.get(sign, 2**64 - 1)
    return value <= limit


def _finite_float(text: str) -> bool:
    try:
        return math.isfinite(float(text))  # Go's ParseFloat fails where this overflows
    except ValueError:
        return False


def _timestamp(text: str) -> bool:
    """Go's time.Parse of one of resolve.go's timestamp layouts succeeds on `text`."""
    match = _TIMESTAMP.fullmatch(text)
    if not match or (match["h"] and bool(match["space"]) == bool(match["zone"])):
        return False  # "T" needs a zone ("Z07:00"), " " has none
    field = {k: int(v or 0) for k, v in match.groupdict().items() if k not in ("space", "zone")}
    year, month = field["y"], field["mo"]
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    return (
        1 <= month <= 12
        and 1 <= field["d"] <= days[month - 1]
        and field["h"] < 24
        and field["mi"] < 60
        and field["s"] < 60
        and field["zh"] <= 24
        and field["zm"] <= 60
    )


def _number(plain: str) -> bool:
    """resolve.go's int / float / 0b cases, on the text with underscores removed."""
    if _go_int(plain) or (_YAML_STYLE_FLOAT.fullmatch(plain) and _finite_float(plain)):
        return True
    if plain.startswith("0b"):
        return _go_int(plain[2:], 2)
    return plain.startswith("-0b") and _go_int("-" + plain[3:], 2)


def _go_quotes(text: str) -> bool:
    """encode.go stringv: would Go's YAML read `text` unquoted as something else."""
    if text[:1] in ("+", "-") or text[:1].isdigit():
        if ":" in text and _BASE60_FLOAT.fullmatch(text):
            return True
    if text[0] not in _HINTED:  # resolveTable: no hint, no lookup ("<<" stays plain)
        return False
    if text in _RESOLVED:
        return True
    if text[0] in "yYnNtTfFoO~":
        return False
    if text[0] == ".":
        return bool(_DOT_FLOAT.fullmatch(text)) and _finite_float(text)
    return _timestamp(text) or _number(text.replace("_", ""))


def _printable(char: str) -> bool:
    """yamlprivateh.go is_printable (on the UTF-8 bytes): no tab, CR, C1, BOM, non-BMP."""
    code = ord(char)
    return (
        char == "\n"
        or 0x20 <= code <= 0x7E
        or 0xA0 <= code <= 0xD7FF
        or (0xE000 <= code <= 0xFFFD and code != 0xFEFF)
    )


def _block_indicators(text: str) -> bool:
    """Emitter analysis: does `text` hold what a plain block scalar can't start or carry."""
    if text[:3] in ("---", "..."):
        return True
    preceded_by_space = True
    for i, char in enumerate(text):
        followed_by_space = i + 1 == len(text) or text[i + 1] in " \t"
        if i == 0 and char in "#,[]{}&*!|>'\"%@`":
            return True
        if char == ":" and followed_by_space:
            return True
        if (i == 0 and char in "?-" and followed_by_space) or (char == "#" and preceded_by_space):
            return True
        preceded_by_space = char in " \t\0" + _BREAKS
    return False


def _style(text: str, key: bool) -> str:
    """The style Go writes `text` in: stringv's wish, then select_scalar_style's say."""
    pairs = list(zip(text, text[1:]))
    special = not all(map(_printable, text))
    space_break = any(a == " " and b in _BREAKS for a, b in pairs)
    break_space = any(a in _BREAKS and b == " " for a, b in pairs)
    single_ok = not (special or space_break or break_space)
    if "\n" in text:
        block_ok = not (special or space_break or text[-1] == " ")
        return "|" if block_ok and not key else '"'
    if text == "" or _go_quotes(text):
        return '"'
    plain_ok = single_ok and not (
        text[0] in " " + _BREAKS
        or text[-1] in " " + _BREAKS
        or any(c in _BREAKS for c in text)
        or _block_indicators(text)
    )
    return "" if plain_ok else ("'" if single_ok else '"')


def _digits(text: str, i: int, number: int) -> tuple[int, int]:
    """sorter.go: the number the digits from `i` make (int64, wrapping), and where they end."""
    while i < len(text) and text[i].isdecimal():
        number = (number * 10 + ord(text[i]) - ord("0") + 2**63) % 2**64 - 2**63
        i += 1
    return number, i


def _nonzero_before(text: str, i: int) -> int:
    """sorter.go: 1 if the digits just before `i` hold a non-zero one (zeros then count)."""
    j = i - 1
    while j >= 0 and text[j].isdecimal():
        if text[j] != "0":
            return 1
        j -= 1
    return 0


def _key_less(a: str, b: str) -> bool:
    """sorter.go keyList.Less for two string keys."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x == y:
            continue
        if x.isalpha() or y.isalpha():
            return x < y if x.isalpha() and y.isalpha() else y.isalpha()
        start = _nonzero_before(a, i) if "0" in (x, y) else 0
        an, ai = _digits(a, i, start)
        bn, bi = _digits(b, i, start)
        if an != bn:
            return an < bn
        return ai < bi if ai != bi else x < y
    return len(a) < len(b)


def _key_order(a: str, b: str) -> int:
    return -1 if _key_less(a, b) else (1 if _key_less(b, a) else 0)


class _GoYaml:
    """go-yaml v2's emitter (emitterc.go) for a block map of strings and maps."""

    def __init__(self, width: int = _BEST_WIDTH) -> None:
        self.width = width  # best_width: 80, or 2**31 - 1 where Go's is set to -1
        self.out: list[str] = []
        self.column = 0
        self.indent = -1
        self.whitespace = True
        self.indented = True  # nothing but indentation on the line yet

    def put(self, text: str) -> None:
        self.out.append(text)
        self.column += len(text)

    def write_break(self, char: str = "\n") -> None:
        self.out.append(char)
        self.column = 0

    def write_indent(self) -> None:
        indent = max(self.indent, 0)
        if (
            not self.indented
            or self.column > indent
            or (self.column == indent and not self.whitespace)
        ):
            self.write_break()
        self.put(" " * (indent - self.column))
        self.whitespace = self.indented = True

    def indicator(self, text: str, need_space: bool, is_space: bool, is_indented: bool) -> None:
        if need_space and not self.whitespace:
            self.put(" ")
        self.put(text)
        self.whitespace = is_space
        self.indented = self.indented and is_indented

    def document(self, mapping: Mapping[str, Any]) -> str:
        self.mapping(mapping)
        self.indent = -1
        self.write_indent()
        return "".join(self.out)

    def mapping(self, mapping: Mapping[str, Any]) -> None:
        if not mapping:  # an empty map is written in flow style
            self.indicator("{", True, True, False)
            self.indicator("}", False, False, False)
            return
        outer = self.indent
        self.indent = 0 if outer < 0 else outer + _BEST_INDENT
        for key in sorted(mapping, key=functools.cmp_to_key(_key_order)):
            if "\n" in key or len(key.encode()) > 128:
                raise ValueError(f"Go writes {key!r} as a complex key; juju keys are not")
            self.write_indent()
            self.scalar(key, key=True)
            self.indicator(":", False, False, False)
            value = mapping[key]
            if isinstance(value, Mapping):
                self.mapping(value)
            else:
                self.scalar(value, key=False)
        self.indent = outer

    def scalar(self, text: str, key: bool) -> None:
        outer = self.indent
        self.indent = _BEST_INDENT if outer < 0 else outer + _BEST_INDENT
        style = _style(text, key)
        if style == "|":
            self.literal(text)
        elif style == '"':
            self.double_quoted(text, fold=not key)
        else:
            self.folding(text, fold=not key, quote=style)
        self.indent = outer

    def fold_here(self, text: str, i: int, spaces: bool, quoted: bool) -> bool:
        """A space where Go breaks the line: a single one, past best_width."""
        if spaces or self.column <= self.width or text[i + 1 : i + 2] == " ":
            return False
        return not quoted or 0 < i < len(text) - 1

    def folding(self, text: str, fold: bool, quote: str) -> None:
        """write_plain_scalar (quote "") and write_single_quoted_scalar (quote "'")."""
        if quote:
            self.indicator(quote, True, False, False)
        elif not self.whitespace:
            self.put(" ")
        spaces = breaks = False
        for i, char in enumerate(text):
            if char == " ":
                if fold and self.fold_here(text, i, spaces, bool(quote)):
                    self.write_indent()
                else:
                    self.put(char)
                spaces = True
            elif char in _BREAKS:
                if not breaks and char == "\n":
                    self.write_break()
                self.write_break(char)
                self.indented = breaks = True
            else:
                if breaks:
                    self.write_indent()
                self.put(char * 2 if char == quote else char)
                self.indented = spaces = breaks = False
        if quote:
            self.indicator(quote, False, False, False)
        self.whitespace = self.indented = False

    def double_quoted(self, text: str, fold: bool) -> None:
        self.indicator('"', True, False, False)
        spaces = False
        bom = text.startswith("\ufeff")  # is_bom looks at the start, whatever the index
        for i, char in enumerate(text):
            if bom or not _printable(char) or char in _BREAKS or char in '"\\':
                self.put("\\" + self._escape(char))
                spaces = False
            elif char == " ":
                if fold and not spaces and self.column > self.width and 0 < i < len(text) - 1:
                    self.write_indent()
                    if text[i + 1] == " ":
                        self.put("\\")
                else:
                    self.put(char)
                spaces = True
            else:
                self.put(char)
                spaces = False
        self.indicator('"', False, False, False)
        self.whitespace = self.indented = False

    @staticmethod
    def _escape(char: str) -> str:
        code = ord(char)
        if char in _ESCAPES:
            return _ESCAPES[char]
        if code <= 0xFF:
            return f"x{code:02X}"
        return f"u{code:04X}" if code <= 0xFFFF else f"U{code:08X}"

    def literal(self, text: str) -> None:
        self.indicator("|", True, False, False)
        if text[0] in " " + _BREAKS:
            self.indicator(str(_BEST_INDENT), False, False, False)
        if text[-1] not in _BREAKS:
            self.indicator("-", False, False, False)
        elif len(text) == 1 or text[-2] in _BREAKS:
            self.indicator("+", False, False, False)
        self.write_break()
        self.indented = self.whitespace = True
        breaks = True
        for char in text:
            if char in _BREAKS:
                self.write_break(char)
                self.indented = breaks = True
            else:
                if breaks:
                    self.write_indent()
                self.put(char)
                self.indented = breaks = False


def juju_results(results: Mapping[str, Any], keys: Iterable[str] | None = None) -> str:
    """What `juju run <unit> <action>` prints for these results (`keys`: only those)."""
    shown = {k: results[k] for k in keys} if keys is not None else dict(results)
    return _GoYaml().document(_action_set(shown))


def _action_set(results: Mapping[str, Any]) -> dict[str, Any]:
    """The map Juju keeps: ops sets `key.sub=str(value)`, action-set nests dotted keys."""
    nested: dict[str, Any] = {}
    for path, value in _flat(results):
        *parents, last = path.split(".")
        node = nested
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = value
    return nested


def _unfolded(text: str) -> str:
    """`text`, if `juju_results` printed it, as it would print it with no line folded."""
    try:
        data = yaml.load(text, Loader=yaml.BaseLoader)  # every scalar a string
    except yaml.YAMLError:
        return text
    if not isinstance(data, dict) or not _strings_and_maps(data):
        return text
    return _GoYaml(width=2**31 - 1).document(data)


def _strings_and_maps(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _strings_and_maps(v) for k, v in value.items())
    return isinstance(value, str)


def _flat(value: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    for key, item in value.items():
        if isinstance(item, Mapping):
            yield from _flat(item, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", str(item)


@contextlib.contextmanager
def repeatable(seed: int = 17) -> Iterator[None]:
    """Generated names come out the same every run inside this block."""
    from fakes.kube_apiserver import seed_names  # (the integration tests read blocks only)

    seed_names(seed)
    try:
        yield
    finally:
        seed_names(None)


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- example: {re.escape(name)} -->\n```[a-z]*\n)(.*?)(```\n)", re.S)


def _find(name: str) -> tuple[Path, str, re.Match[str]]:
    """The page holding example `name`, its text, and the block's match there."""
    pattern = _block(name)
    found = [(path, text, m) for path, text in docs_pages.texts() if (m := pattern.search(text))]
    assert found, f"no page (README.md, docs/) has a block after `<!-- example: {name} -->`"
    assert len(found) == 1, f"example {name!r} is on {[docs_pages.name(p) for p, *_ in found]}"
    return found[0]


def page_of(name: str) -> Path:
    """The page (README.md or docs/...) that holds example `name`."""
    return _find(name)[0]


def block(name: str) -> str:
    """The example block `name`, as it is now on the page that holds it."""
    return _find(name)[2].group(2)


def show(name: str, text: str, volatile: Iterable[str] = ()) -> None:
    """The example `name` is `text` (written there with GPU_K8S_UPDATE_EXAMPLES=1).

    `volatile`: patterns of what differs from run to run (a loss, an accuracy, seconds
    left): the page keeps the values of the run that wrote it, and the rest must match.
    """
    with _writing() if UPDATE else contextlib.nullcontext():
        _show(name, text, volatile)


@contextlib.contextmanager
def _writing() -> Iterator[None]:
    """One writer of the pages at a time: suites and xdist workers run in parallel.

    The lock is on the repository's directory, which stays the same file when `_write`
    replaces a page.
    """
    fd = os.open(docs_pages.ROOT, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write(page: Path, text: str) -> None:
    """Replace the page whole, so that a test reading it meanwhile never sees half."""
    partial = page.with_name(f".{page.name}.{os.getpid()}")
    partial.write_text(text)
    partial.replace(page)


def _show(name: str, text: str, volatile: Iterable[str]) -> None:
    page, content, match = _find(name)
    patterns = [re.compile(p) for p in volatile]

    def stable(t: str) -> str:
        if patterns:  # a value that varies moves where a line folds: compare unfolded
            t = _unfolded(t)
        for pattern in patterns:
            t = pattern.sub("<varies>", t)
        return t

    if UPDATE and match.group(2) != text:  # what this run printed, volatile parts too
        _write(page, content[: match.start(2)] + text + content[match.end(2) :])
        return
    if stable(match.group(2)) == stable(text):
        return
    if UPDATE:
        _write(page, content[: match.start(2)] + text + content[match.end(2) :])
        return
    where = docs_pages.name(page)
    diff = "\n".join(
        difflib.unified_diff(
            stable(match.group(2)).splitlines(),
            stable(text).splitlines(),
            where,
            "the code",
            lineterm="",
        )
    )
    raise AssertionError(
        f"the example {name!r} in {where} is not what the code prints; run the tests with "
        f"GPU_K8S_UPDATE_EXAMPLES=1 to write it:\n{diff}"
    )


def names(text: str | None = None) -> list[str]:
    """Every example marker of `text`, or of every page (a name twice: listed twice)."""
    return re.findall(
        r"<!-- example: ([a-z0-9-]+) -->", docs_pages.text() if text is None else text
    )
