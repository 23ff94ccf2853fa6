"""Every change to a library under lib/ comes with a new LIBPATCH.

Charms built from different commits embed their own copies of a library, and only
LIBPATCH orders them: unit_state.publish lets the higher LIBPATCH's server program win on
a shared machine, and charmcraft publish-lib refuses a library whose content changed
without a new LIBPATCH (it hashes the text without its LIBAPI, LIBPATCH and LIBID lines,
charmcraft/utils/charmlibs.py, and wants the patch one above Charmhub's: bump once per
publish there). `libpatches.json` records each library's LIBPATCH and the sha256 of its
text without those lines, as charmcraft hashes it; a change without a bump fails here.
After bumping, record it with `GPU_K8S_UPDATE_LIBPATCHES=1 tox -e unit -- libs -k
libpatch`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LIBS = sorted((ROOT / "lib" / "charms").glob("*/v[0-9]*/*.py"))
RECORD = Path(__file__).with_name("libpatches.json")
UPDATE = os.environ.get("GPU_K8S_UPDATE_LIBPATCHES") == "1"
METADATA = ("LIBAPI", "LIBPATCH", "LIBID")  # not hashed, as charmcraft does


def _current(path: Path) -> dict[str, object]:
    text = path.read_text()
    found = re.search(r"^LIBPATCH = (\d+)$", text, re.M)
    assert found, f"{path.relative_to(ROOT)} has no LIBPATCH"
    content = "".join(
        line for line in text.splitlines(keepends=True) if not line.startswith(METADATA)
    )
    digest = hashlib.sha256(content.encode()).hexdigest()
    return {"libpatch": int(found.group(1)), "sha256": digest}


def _verdict(name: str, current: dict, recorded: dict | None) -> str | None:
    """Why `current` may not stand against `recorded` (None: it may)."""
    if recorded is None or current == recorded:
        return None
    if current["libpatch"] <= recorded["libpatch"]:
        return f"{name} changed without a LIBPATCH above {recorded['libpatch']}"
    return f"{name}: LIBPATCH {current['libpatch']} is not recorded yet"


def test_no_library_changed_without_a_new_libpatch():
    record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    current = {str(p.relative_to(ROOT)): _current(p) for p in LIBS}
    if UPDATE:
        stale = [v for n, c in current.items() if (v := _verdict(n, c, record.get(n)))]
        assert not any("without" in v for v in stale), stale
        RECORD.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
        return
    problems = [v for n, c in current.items() if (v := _verdict(n, c, record.get(n)))]
    problems += [f"{n} is not recorded" for n in current if n not in record]
    assert not problems, (
        "; ".join(problems) + " (bump LIBPATCH, then GPU_K8S_UPDATE_LIBPATCHES=1 tox -e unit"
        " -- libs -k libpatch)"
    )


@pytest.mark.parametrize(
    ("current", "recorded", "expected"),
    [
        ({"libpatch": 2, "sha256": "a"}, {"libpatch": 2, "sha256": "a"}, None),
        ({"libpatch": 2, "sha256": "b"}, {"libpatch": 2, "sha256": "a"}, "without"),
        ({"libpatch": 1, "sha256": "b"}, {"libpatch": 2, "sha256": "a"}, "without"),
        ({"libpatch": 3, "sha256": "b"}, {"libpatch": 2, "sha256": "a"}, "not recorded"),
    ],
)
def test_a_change_is_judged_by_its_libpatch(current, recorded, expected):
    verdict = _verdict("lib.py", current, recorded)
    assert verdict is None if expected is None else expected in verdict
