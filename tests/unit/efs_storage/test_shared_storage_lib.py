"""The shared-storage library, both sides, with small charms that use it."""

from __future__ import annotations

import ops
import pytest
from ops import testing

from charms.gpu_k8s.v0.shared_storage import (
    ClaimInfo,
    SharedStorageProvider,
    SharedStorageRequirer,
)

FS = "fs-0123456789abcdef0"
READY = {
    "claim-name": "efs-storage-consumer",
    "capacity": "1Ti",
    "file-system-id": FS,
    "namespace": "training",
    "ready": "true",
}


class Consumer(ops.CharmBase):
    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        self.storage = SharedStorageRequirer(self, "shared-storage", namespace="training")
        framework.observe(self.on.collect_unit_status, self._status)

    def _status(self, event: ops.CollectStatusEvent) -> None:
        problem = self.storage.problem()
        claim = self.storage.claim()
        if problem:
            event.add_status(ops.WaitingStatus(problem))
        elif claim is not None:
            event.add_status(ops.ActiveStatus(f"{claim.claim_name} {claim.capacity}"))


class Storage(ops.CharmBase):
    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        self.storage = SharedStorageProvider(self, "shared-storage")
        framework.observe(self.on["shared-storage"].relation_changed, self._answer)

    def _answer(self, _: ops.EventBase) -> None:
        for request in self.storage.requests():
            if request.error:
                self.storage.refuse(request.relation, request.error)
            else:
                self.storage.answer(
                    request.relation,
                    claim_name=f"efs-{request.app_name}",
                    capacity="1Ti",
                    file_system_id=FS,
                    namespace=request.namespace,
                    ready=False,
                    request=request,
                )


CONSUMER_META = {
    "name": "consumer",
    "requires": {"shared-storage": {"interface": "shared-storage"}},
}
STORAGE_META = {"name": "efs", "provides": {"shared-storage": {"interface": "shared-storage"}}}


def _rel(app: str, data: dict[str, str]) -> testing.Relation:
    return testing.Relation("shared-storage", remote_app_name=app, remote_app_data=data)


@pytest.fixture
def consumer() -> testing.Context:
    return testing.Context(Consumer, meta=CONSUMER_META)


@pytest.fixture
def provider() -> testing.Context:
    return testing.Context(Storage, meta=STORAGE_META)


def test_requirer_publishes_its_namespace_as_leader_only(consumer):
    rel = testing.Relation("shared-storage", remote_app_name="efs")
    out = consumer.run(
        consumer.on.relation_created(rel), testing.State(leader=True, relations=[rel])
    )
    assert dict(out.get_relation(rel.id).local_app_data) == {"namespace": "training"}
    out = consumer.run(
        consumer.on.relation_created(rel), testing.State(leader=False, relations=[rel])
    )
    assert dict(out.get_relation(rel.id).local_app_data) == {}


@pytest.mark.parametrize(
    "remote,problem",
    [
        (None, "not related to shared-storage: integrate with efs-storage"),
        ({}, "waiting for the storage charm to create the claim"),
        ({"error": "namespace kube-system is reserved"}, "storage charm refused: namespace"),
        ({**READY, "ready": "maybe"}, "shared-storage databag: ready is invalid"),
        ({**READY, "file-system-id": "abc"}, "file-system-id is invalid"),
        ({**READY, "capacity": "big"}, "capacity is invalid"),
        ({"claim-name": "x"}, "capacity, file-system-id, ready missing"),
        ({**READY, "namespace": "other"}, "waiting for the storage charm to move the claim"),
        ({**READY, "ready": "false"}, f"waiting for claim efs-storage-consumer on EFS {FS}"),
    ],
)
def test_requirer_problem_says_what_is_missing(consumer, remote, problem):
    relations = []
    if remote is not None:
        relations = [_rel("efs", remote)]
    out = consumer.run(
        consumer.on.update_status(), testing.State(leader=True, relations=relations)
    )
    assert out.unit_status.name == "waiting"
    assert problem in out.unit_status.message


def test_requirer_claim_when_ready(consumer):
    rel = testing.Relation("shared-storage", remote_app_name="efs", remote_app_data=READY)
    with consumer(consumer.on.update_status(), testing.State(relations=[rel])) as mgr:
        assert mgr.charm.storage.claim() == ClaimInfo("efs-storage-consumer", "1Ti", FS, True)
        assert mgr.charm.storage.problem() is None
        out = mgr.run()
    assert out.unit_status == testing.ActiveStatus("efs-storage-consumer 1Ti")


def test_requirer_claim_not_ready_is_still_returned(consumer):
    rel = testing.Relation(
        "shared-storage", remote_app_name="efs", remote_app_data={**READY, "ready": "false"}
    )
    with consumer(consumer.on.update_status(), testing.State(relations=[rel])) as mgr:
        claim = mgr.charm.storage.claim()
        assert claim is not None and claim.ready is False


def test_provider_answers_valid_requests_and_refuses_bad_ones(provider):
    good = _rel("tf", {"namespace": "training"})
    bad = _rel("nb", {"namespace": "No!"})
    reserved = _rel("sys", {"namespace": "default"})
    silent = _rel("quiet", {})
    state = testing.State(leader=True, relations=[good, bad, reserved, silent])
    out = provider.run(provider.on.relation_changed(good), state)
    assert dict(out.get_relation(good.id).local_app_data) == {
        "claim-name": "efs-tf",
        "capacity": "1Ti",
        "file-system-id": FS,
        "namespace": "training",
        "ready": "false",
    }
    assert "namespace is invalid" in out.get_relation(bad.id).local_app_data["error"]
    assert "reserved" in out.get_relation(reserved.id).local_app_data["error"]
    assert dict(out.get_relation(silent.id).local_app_data) == {}


def test_provider_refusal_replaces_an_earlier_answer(provider):
    rel = testing.Relation(
        "shared-storage",
        remote_app_name="tf",
        remote_app_data={"namespace": "kube-system"},
        local_app_data=dict(READY),
    )
    out = provider.run(
        provider.on.relation_changed(rel), testing.State(leader=True, relations=[rel])
    )
    assert set(out.get_relation(rel.id).local_app_data) == {"error"}


def test_provider_answer_rejects_malformed_fields(provider):
    rel = testing.Relation("shared-storage", remote_app_name="tf")
    with provider(provider.on.update_status(), testing.State(leader=True, relations=[rel])) as mgr:
        relation = mgr.charm.model.get_relation("shared-storage")
        with pytest.raises(ValueError, match="file-system-id"):
            mgr.charm.storage.answer(
                relation, claim_name="c", capacity="1Ti", file_system_id="nope", ready=True
            )


class OwnDirectoryConsumer(ops.CharmBase):
    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        self.storage = SharedStorageRequirer(
            self, "shared-storage", namespace="training", directory="teams/tf", uid=1000, gid=100
        )


OWN = {"directory": "teams/tf", "uid": "1000", "gid": "100"}


def test_requirer_asks_for_its_own_directory_and_owner():
    ctx = testing.Context(OwnDirectoryConsumer, meta=CONSUMER_META)
    rel = testing.Relation("shared-storage", remote_app_name="efs")
    out = ctx.run(ctx.on.relation_created(rel), testing.State(leader=True, relations=[rel]))
    assert dict(out.get_relation(rel.id).local_app_data) == {"namespace": "training", **OWN}


@pytest.mark.parametrize(
    "answer,ready",
    [
        ({**READY, **OWN}, True),
        (READY, False),  # an answer to the older request (the root) is not this one's
        ({**READY, **OWN, "uid": "0"}, False),
    ],
)
def test_requirer_accepts_only_an_answer_that_serves_its_directory(answer, ready):
    ctx = testing.Context(OwnDirectoryConsumer, meta=CONSUMER_META)
    rel = _rel("efs", answer)
    with ctx(ctx.on.update_status(), testing.State(relations=[rel])) as mgr:
        assert (mgr.charm.storage.claim() is not None) is ready
        if not ready:
            assert "waiting for the storage charm to serve teams/tf" in mgr.charm.storage.problem()


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"directory": "../etc"}, "directory is invalid"),
        ({"directory": "/abs"}, "directory is invalid"),
        ({"directory": "a b"}, "directory is invalid"),
        ({"directory": "a/./b"}, "directory is invalid"),
        ({"directory": "-rf"}, "directory is invalid"),
        ({"directory": "d", "uid": 1000}, "uid and gid go together"),
        ({"uid": 1000, "gid": 1000}, "need a directory"),
        ({"directory": "d", "uid": -1, "gid": 0}, "uid is invalid"),
        ({"directory": "d", "uid": 0, "gid": 2**32}, "gid is invalid"),
    ],
)
def test_requirer_refuses_a_malformed_directory_request(kwargs, error):
    class Bad(ops.CharmBase):
        def __init__(self, framework: ops.Framework):
            super().__init__(framework)
            SharedStorageRequirer(self, "shared-storage", namespace="training", **kwargs)

    ctx = testing.Context(Bad, meta=CONSUMER_META)
    with pytest.raises(testing.errors.UncaughtCharmError, match=error):
        ctx.run(ctx.on.update_status(), testing.State())


def test_provider_reads_the_directory_and_echoes_it(provider):
    own = _rel("tf", {"namespace": "training", **OWN})
    rootless = _rel("nb", {"namespace": "notebooks", "directory": "nb"})
    bad = _rel("evil", {"namespace": "evil", "directory": "x;rm -rf /", "uid": "1", "gid": "1"})
    text = _rel("txt", {"namespace": "txt", "directory": "d", "uid": "1e3", "gid": "0"})
    state = testing.State(leader=True, relations=[own, rootless, bad, text])
    with provider(provider.on.relation_changed(own), state) as mgr:
        requests = {r.app_name: r for r in mgr.charm.storage.requests()}
        assert requests["tf"].directory == "teams/tf" and requests["tf"].owner == (1000, 100)
        assert requests["nb"].directory == "nb" and requests["nb"].owner == (0, 0)
        assert "directory is invalid" in (requests["evil"].error or "")
        assert "uid is invalid" in (requests["txt"].error or "")
        out = mgr.run()
    assert dict(out.get_relation(own.id).local_app_data) == {
        "claim-name": "efs-tf",
        "capacity": "1Ti",
        "file-system-id": FS,
        "namespace": "training",
        "ready": "false",
        **OWN,
    }
    assert out.get_relation(rootless.id).local_app_data["directory"] == "nb"
    assert "uid" not in out.get_relation(rootless.id).local_app_data
