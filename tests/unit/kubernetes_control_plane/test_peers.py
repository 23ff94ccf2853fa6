"""The peer relation's read model: what the other control-plane units say."""

import datetime

import peers


def _peers(**others: dict) -> peers.Peers:
    names = {f"kubernetes-control-plane/{k.removeprefix('u')}": v for k, v in others.items()}
    return peers.Peers({}, "kubernetes-control-plane/0", {}, names)


def test_only_joined_units_serve_and_count_this_ones_values_once_given():
    view = _peers(
        u1={"joined": "true", "api-server": "10.0.0.6:6443", "node-name": "cp-1"},
        u2={"joined": "false", "api-server": "10.0.0.7:6443", "node-name": "cp-2"},
        u3={"joined": "true"},  # joined, but said nothing else yet
    )
    assert view.api_servers(None) == ["10.0.0.6:6443"]
    assert view.api_servers("10.0.0.5:6443") == ["10.0.0.5:6443", "10.0.0.6:6443"]
    assert view.control_plane_nodes(None) == {"cp-1"}
    assert view.control_plane_nodes("cp-0") == {"cp-0", "cp-1"}
    assert [m.name for m in view.waiting()] == ["kubernetes-control-plane/2"]


def test_member_versions_count_a_silent_member_as_unknown():
    view = _peers(u1={"joined": "true", "kubernetes-version": "1.35"}, u2={"joined": "true"})
    assert view.member_versions("1.36", "") == {
        "kubernetes-control-plane/0": "1.36",
        "kubernetes-control-plane/1": "1.35",
        "kubernetes-control-plane/2": "",
    }


def test_the_newest_time_names_where_it_was_found():
    early = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)
    late = early + datetime.timedelta(hours=1)
    view = _peers(u1={"token-expires": late.isoformat()}, u2={"token-expires": "garbage"})
    view.app["token-expires"] = early.isoformat()
    assert view.newest("token-expires") == (late, "kubernetes-control-plane/1")
    view.app["token-expires"] = late.isoformat()  # a tie: the leader's wins
    assert view.newest("token-expires") == (late, None)
    assert view.newest("certs-uploaded-at") is None


def test_this_unit_says_it_joined_and_asks_for_certificates_again():
    view = _peers()
    view.mark_member("cp-0", "10.0.0.5:6443", None)
    assert view.mine == {"joined": "true", "node-name": "cp-0", "api-server": "10.0.0.5:6443"}
    view.mark_member("cp-0", "10.0.0.5:6443", "1.36")
    assert view.mine["kubernetes-version"] == "1.36"
    view.ask_for_certificates()
    assert view.mine["joined"] == "false"
