"""The XID catalog (xid_catalog.json) and how the watcher classifies an XID (gpu_watcher.py).

The catalog is NVIDIA's "Xids" table (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
its source and date inside): each XID's immediate action, turned into ours by one rule per
bucket; an XID it lacks (a newer driver's) quarantines with no automatic repair.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import gpu_repair
import gpu_watcher
import pytest

CATALOG = json.loads((Path(gpu_watcher.__file__).parent / "xid_catalog.json").read_text())
TODAY = datetime.date(2026, 11, 27)  # the day the worker's tests pin (charm.py's `today`)
# NVIDIA's immediate action -> ours (the catalog's `about`); an entry with `why` is decided apart
ACTIONS = {
    "RESTART_APP": "application",
    "IGNORE": "info",
    "RESET_GPU": "reset-gpu",
    "WORKFLOW_XID_48": "reset-gpu",
    "WORKFLOW_NVLINK_ERR": "reset-gpu",
    "WORKFLOW_NVLINK5_ERR": "reset-gpu",
    "CHECK_UVM": "reset-gpu",
    "RESTART_BM": "reboot",
    "RESTART_VM": "reboot",
    "CONTACT_SUPPORT": "support",
    "CHECK_MECHANICALS": "support",
    "UPDATE_SWFW": "support",
    "WORKFLOW_XID_45": "info",  # a program stopped; with another XID, that one acts (`why`)
}


def test_the_catalog_holds_every_xid_nvidias_table_lists_with_a_known_action():
    assert sorted(map(int, CATALOG["xids"])) == list(range(1, 173))
    for xid, entry in CATALOG["xids"].items():
        assert entry["mnemonic"] and entry["description"], xid
        assert entry["bucket"] in CATALOG["buckets"], xid
        if "why" in entry or xid == "154":  # decided apart, the reason written
            continue
        assert entry["action"] == ACTIONS[entry["bucket"]], xid


@pytest.mark.parametrize(
    ("xids", "action"),
    [
        (("110", "136", "143", "155", "156", "158"), "reset-gpu"),  # RESET_GPU
        (("144", "145", "146", "147", "148", "149", "150"), "reset-gpu"),  # NVLink5
        (("79",), "reboot"),
        (("57", "58", "90", "61", "142"), "support"),  # CONTACT_SUPPORT
        (("13", "31", "94"), "application"),  # issue 32 item 2's list, as the catalog says
        # the issue listed 43 and 45 too; the catalog: IGNORE and WORKFLOW_XID_45 (review44b G2)
        (("43", "45"), "info"),
        # 160 (IGNORE) and 162 (no action): NVSentinel's table says reboot / reset, the catalog not
        (("63", "92", "108", "160", "162"), "info"),
    ],
)
def test_nvidias_actions_for_the_xids_the_review_named(xids, action):
    assert {xid: gpu_watcher.classify(CATALOG, xid, "")[0] for xid in xids} == dict.fromkeys(
        xids, action
    )


def test_only_the_lines_that_end_a_program_join_an_application_faults_burst():
    """43 and 45 name the process a fault ended; no other XID is read as a burst's line."""
    joined = {xid for xid, entry in CATALOG["xids"].items() if entry.get("burst_line")}
    assert joined == {"43", "45"}
    assert {CATALOG["xids"][xid]["action"] for xid in joined} == {"info"}


def test_an_xid_the_catalog_lacks_quarantines_with_no_automatic_repair():
    action, meaning = gpu_watcher.classify(CATALOG, "173", "some text")
    assert action == "support" and action in gpu_watcher.QUARANTINE
    assert meaning == (
        "XID 173: not in NVIDIA's catalog as read on 2026-11-27 (a newer driver's XID: no "
        "automatic repair is known)"
    )
    held = [{"index": "1", "uuid": "GPU-1", "action": action, "at": "2026-11-27T10:00:00Z"}]
    assert gpu_repair.choose(held, "reboot", [], 0.0) is None  # left to the operator


def test_xid_154_still_takes_the_action_its_line_names():
    text = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    action, meaning = gpu_watcher.classify(CATALOG, "154", text)
    assert action == "reboot" and meaning.endswith("(Node Reboot Required)")


def test_the_catalog_was_read_on_a_real_day_not_after_today():
    assert datetime.date.fromisoformat(CATALOG["read"]) <= TODAY
    assert "2026-11-27" in CATALOG["also"]


LINES = (Path(__file__).parents[3] / "fixtures/gpu/xid/lines.txt").read_text().splitlines()


def test_every_recorded_xid_line_is_read_with_its_mig_instance_where_it_names_one():
    """Issue 32 review gap 1: an XID attributed to a MIG instance was dropped unread.

    The driver writes `(PCI:<d>:<b>:<d> GPU-I:<gi>)` or `(... GPU-I:<gi> GPU-CI:<ci>)`
    for an XID it attributes to a MIG instance (kernel_rc.c XID_PRINT_WITH_ATTR).
    """
    xids = [line for line in LINES if line.startswith("NVRM: Xid (")]
    records = {line: gpu_watcher.parse_xid(line) for line in xids}
    assert [line for line, record in records.items() if record is None] == []
    gi = records[next(line for line in xids if " GPU-I:05)" in line)]
    assert gi is not None
    assert (gi["pci"], gi["xid"], gi["pid"]) == ("0000:01:00", "94", 7194)
    assert (gi["gpu_instance"], gi["compute_instance"]) == ("5", None)
    assert gi["text"] == "Contained: CE User Channel (0x9). RST: No, D-RST: No"
    ci = records[next(line for line in xids if "GPU-CI:" in line)]
    assert ci is not None
    assert (ci["pci"], ci["xid"], ci["pid"]) == ("0000:b5:00", "13", 4242)
    assert (ci["gpu_instance"], ci["compute_instance"]) == ("2", "0")
    plain = records[xids[0]]
    assert plain is not None and (plain["gpu_instance"], plain["compute_instance"]) == (None, None)


def smi_row(dbe: str = "0", recovery: str = "None", remap: str = "No") -> dict:
    row = dict.fromkeys(gpu_watcher.SMI_FIELDS, "N/A")
    row |= {"ecc.errors.uncorrected.volatile.total": dbe, "gpu_recovery_action": recovery}
    return row | {"remapped_rows.failure": remap}


@pytest.mark.parametrize(
    ("row", "found"),
    [
        # error containment (the GPU reports its recovery action): the action decides
        (smi_row(dbe="3"), []),
        (smi_row(dbe="3", recovery="0"), []),
        (smi_row(recovery="Reset"), ["recovery"]),
        (smi_row(recovery="Drain and Reset"), ["recovery"]),
        (smi_row(recovery="2"), ["recovery"]),
        # a word this watcher cannot read (a driver spelling it otherwise) decides nothing:
        # the ECC count does, so one new spelling does not quarantine every GPU at once
        (smi_row(recovery="Something New"), []),
        (smi_row(dbe="1", recovery="Something New"), ["ecc-dbe"]),
        # no containment (N/A), or the driver could not read it: any DBE, as before
        (smi_row(dbe="1", recovery="N/A"), ["ecc-dbe"]),
        (smi_row(dbe="1", recovery="[Unknown Error]"), ["ecc-dbe"]),
        (smi_row(recovery="N/A"), []),
        (smi_row(remap="Yes"), ["row-remap-failure"]),
    ],
)
def test_the_ecc_poll_follows_the_recovery_action_where_the_gpu_reports_one(row, found):
    assert gpu_watcher.smi_findings(row) == found


@pytest.mark.parametrize(
    ("value", "action"),
    [
        ("None", "info"),
        ("Reset", "reset-gpu"),
        ("Reboot", "reboot"),
        ("Drain P2P", "reset-gpu"),
        ("Drain and Reset", "reset-gpu"),
        ("1", "reset-gpu"),
        ("Something New", "support"),
    ],
)
def test_nvidia_smis_recovery_action_is_read_by_name_or_number(value, action):
    assert gpu_watcher.smi_recovery_action(CATALOG, value)[0] == action
