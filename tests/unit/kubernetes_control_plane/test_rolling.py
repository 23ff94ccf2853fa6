"""Whose turn it is to upgrade."""

import rolling


def test_pending_lists_units_behind_in_unit_number_order_and_skips_unknown():
    versions = {"w/10": "1.36", "w/2": "1.36", "w/3": "1.37", "w/4": None, "w/5": ""}
    assert rolling.pending(versions, "1.37") == ["w/2", "w/5", "w/10"]


def test_the_turn_stays_with_its_holder_until_it_is_done_or_gone():
    assert rolling.turn(["w/2", "w/10"], None) == "w/2"
    assert rolling.turn(["w/2", "w/10"], "w/10") == "w/10"
    assert rolling.turn(["w/10"], "w/2") == "w/10"
    assert rolling.turn([], "w/2") is None


def test_workers_get_the_lowest_control_plane_minor_while_they_differ():
    assert rolling.lowest({"cp/0": "1.37", "cp/1": "1.36", "cp/2": None}, "1.37") == "1.36"
    assert rolling.lowest({"cp/0": "1.10", "cp/1": "1.9"}, "1.10") == "1.9"
    assert rolling.lowest({"cp/0": None}, "1.37") == "1.37"


def test_the_units_wanting_a_turn_in_unit_number_order():
    flags = {"cp/10": True, "cp/2": True, "cp/3": False, "cp/0": True}
    assert rolling.wanting(flags) == ["cp/0", "cp/2", "cp/10"]
    assert rolling.wanting({"cp/1": False}) == []
