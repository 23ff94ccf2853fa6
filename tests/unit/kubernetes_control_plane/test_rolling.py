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


# -- one node turn at a time (peers.NODE_TURNS) ------------------------------------------

UPGRADE, RENEWAL, RUNTIME = "upgrade-turn", "certificate-renewal-turn", "runtime-turn"
TURNS = (UPGRADE, RENEWAL, RUNTIME)


def test_the_node_turns_are_the_peer_keys_each_module_writes():
    import peers

    assert dict.fromkeys(peers.NODE_TURNS) == dict.fromkeys(TURNS)
    assert (peers.UPGRADE_TURN, peers.RENEWAL_TURN, peers.RUNTIME_TURN) == TURNS


def test_no_turn_is_handed_out_while_another_is_out():
    for out in TURNS:
        for key in TURNS:
            if key == out:
                continue
            bag = {out: "cp/1"}
            assert rolling.pass_turn(bag, key, ["cp/0", "cp/2"], exclusive=TURNS) is None
            assert bag == {out: "cp/1"}, (out, key)


def test_the_turns_follow_each_other_one_at_a_time():
    bag: dict[str, str] = {}
    assert rolling.pass_turn(bag, UPGRADE, ["cp/1"], exclusive=TURNS) == "cp/1"
    assert rolling.pass_turn(bag, RENEWAL, ["cp/0"], exclusive=TURNS) is None
    assert rolling.pass_turn(bag, RUNTIME, ["cp/2"], exclusive=TURNS) is None
    assert rolling.pass_turn(bag, UPGRADE, ["cp/1"], exclusive=TURNS) == "cp/1"  # still at it
    assert rolling.pass_turn(bag, UPGRADE, [], exclusive=TURNS) is None  # done: given back
    assert rolling.pass_turn(bag, RENEWAL, ["cp/0"], exclusive=TURNS) == "cp/0"
    assert rolling.pass_turn(bag, RUNTIME, ["cp/2"], exclusive=TURNS) is None
    assert rolling.pass_turn(bag, RENEWAL, [], exclusive=TURNS) is None
    assert rolling.pass_turn(bag, RUNTIME, ["cp/2"], exclusive=TURNS) == "cp/2"
    assert bag == {RUNTIME: "cp/2"}


def test_two_turns_out_at_once_drain_to_one_instead_of_waiting_on_each_other():
    # what an earlier revision could leave (renew-certificates on the leader during a
    # containerd turn): each holder keeps its turn while at it and gives it back when done
    bag = {RENEWAL: "cp/0", RUNTIME: "cp/2"}
    assert rolling.pass_turn(bag, RENEWAL, ["cp/0"], exclusive=TURNS) == "cp/0"
    assert rolling.pass_turn(bag, RUNTIME, [], exclusive=TURNS) is None
    assert rolling.pass_turn(bag, RENEWAL, ["cp/0", "cp/1"], exclusive=TURNS) == "cp/0"
    assert rolling.pass_turn(bag, RENEWAL, ["cp/1"], exclusive=TURNS) == "cp/1"
    assert bag == {RENEWAL: "cp/1"}


def test_held_names_the_other_turn_that_is_out():
    bag = {UPGRADE: "cp/1", RUNTIME: ""}
    assert rolling.held(bag, TURNS) == (UPGRADE, "cp/1")
    assert rolling.held(bag, TURNS, but=UPGRADE) is None
