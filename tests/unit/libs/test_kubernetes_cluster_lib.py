"""The kubernetes-cluster interface library, both sides, through ops.testing."""

from __future__ import annotations

import dataclasses
import json

import ops
import pytest
from ops import testing

from charms.gpu_k8s.v0.kubernetes_cluster import (
    LEGACY_SECRET_LABEL,
    RECORD_LABEL,
    SECRET_LABEL,
    UNIT_SECRET_PREFIX,
    ClusterProvider,
    ClusterRequirer,
    GpuInfo,
)

TOKEN = "abcdef.0123456789abcdef"
HASH = "sha256:" + "0" * 64
SERVERS = ["10.0.0.5:6443", "10.0.0.6:6443"]
GPU = {
    "model": "NVIDIA A10G",
    "count": 4,
    "memory-mib": 23028,
    "driver": "580.65",
    "cuda": "13.0",
    "mig-capable": False,
}


class Worker(ops.CharmBase):
    def __init__(self, framework):
        super().__init__(framework)
        self.cluster = ClusterRequirer(self, "cluster")


class ControlPlane(ops.CharmBase):
    def __init__(self, framework):
        super().__init__(framework)
        self.workers = ClusterProvider(self, "workers")


WORKER_META = {"name": "worker", "requires": {"cluster": {"interface": "kubernetes-cluster"}}}
CP_META = {"name": "cp", "provides": {"workers": {"interface": "kubernetes-cluster"}}}


def worker_ctx():
    return testing.Context(Worker, meta=WORKER_META)


def provider_bag(secret_id: str, **overrides) -> dict:
    bag = {
        "endpoint": "https://127.0.0.1:6444",
        "api-servers": json.dumps(SERVERS),
        "ca-cert-hash": HASH,
        "join-secret-id": secret_id,
        "kubernetes-version": "1.33",
    }
    bag.update(overrides)
    return bag


def requirer_view(state: testing.State):
    ctx = worker_ctx()
    with ctx(ctx.on.update_status(), state) as mgr:
        return mgr.charm.cluster.join_material(), mgr.charm.cluster.problem()


def test_requirer_without_relation_says_to_integrate():
    material, problem = requirer_view(testing.State())
    assert material is None
    assert problem == "not related to a control plane: integrate with kubernetes-control-plane"


def test_requirer_waits_for_empty_databag():
    rel = testing.Relation("cluster")
    assert requirer_view(testing.State(relations=[rel]))[1] == (
        "waiting for the control plane to publish join material"
    )


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"ca-cert-hash": "md5:abc"}, "control plane databag: ca-cert-hash is invalid"),
        ({"endpoint": "http://10.0.0.5:6443"}, "control plane databag: endpoint is invalid"),
        ({"api-servers": "10.0.0.5:6443"}, "control plane databag: api-servers is invalid"),
        ({"api-servers": "[]"}, "control plane databag: api-servers is invalid"),
        ({"api-servers": '["10.0.0.5"]'}, "control plane databag: api-servers is invalid"),
        ({"kubernetes-version": "latest"}, "control plane databag: kubernetes-version is invalid"),
    ],
)
def test_requirer_names_the_malformed_field(overrides, problem):
    sec = testing.Secret({"token": TOKEN, "kubeconfig": "k"})
    rel = testing.Relation("cluster", remote_app_data=provider_bag(sec.id, **overrides))
    material, got = requirer_view(testing.State(relations=[rel], secrets=[sec]))
    assert material is None
    assert got.startswith(problem)


def test_requirer_with_missing_field():
    rel = testing.Relation("cluster", remote_app_data={"endpoint": "https://127.0.0.1:6444"})
    assert requirer_view(testing.State(relations=[rel]))[1] == (
        "control plane databag: api-servers is missing"
    )


def test_requirer_waits_for_secret_access():
    rel = testing.Relation("cluster", remote_app_data=provider_bag("secret:cv0s5u7mp25c7ad9k7bg"))
    assert requirer_view(testing.State(relations=[rel]))[1] == (
        "waiting for access to the control plane's join secret"
    )


def test_requirer_reads_join_material_from_secret():
    sec = testing.Secret({"token": TOKEN, "kubeconfig": "apiVersion: v1\n"})
    rel = testing.Relation("cluster", remote_app_data=provider_bag(sec.id))
    material, problem = requirer_view(testing.State(relations=[rel], secrets=[sec]))
    assert problem is None
    assert material.token == TOKEN and material.endpoint == "https://127.0.0.1:6444"
    assert material.api_servers == tuple(SERVERS)
    assert TOKEN not in repr(material)


def test_requirer_needs_no_kubeconfig_once_the_shared_worker_grant_is_gone():
    """The secret holds the token alone once every worker acts as its kubelet."""
    sec = testing.Secret({"token": TOKEN})
    rel = testing.Relation("cluster", remote_app_data=provider_bag(sec.id))
    material, problem = requirer_view(testing.State(relations=[rel], secrets=[sec]))
    assert problem is None
    assert material.token == TOKEN and material.kubeconfig == ""


def test_provider_drops_the_kubeconfig_from_the_secret_when_given_none():
    rel = testing.Relation("workers", remote_app_name="w")
    ctx = testing.Context(ControlPlane, meta=CP_META)
    args = ("https://127.0.0.1:6444", SERVERS, HASH, "1.36", TOKEN)
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations=[rel])) as mgr:
        mgr.charm.workers.publish(*args, "kubeconfig-text")
        out = mgr.run()
    with ctx(ctx.on.update_status(), out) as mgr:
        mgr.charm.workers.publish(*args)
        out = mgr.run()
    sec = next(s for s in out.secrets if s.label == SECRET_LABEL)
    # no unit joins, so the token goes nowhere (issue 29 item 2: never in the join secret)
    assert sec.latest_content == {"joining": "none"}


def test_requirer_publishes_node_and_inventory_only_when_changed():
    rel = testing.Relation("cluster")
    ctx = worker_ctx()
    with ctx(ctx.on.update_status(), testing.State(relations=[rel])) as mgr:
        mgr.charm.cluster.publish_node("ip-10-0-0-7", [GpuInfo.model_validate(GPU)])
        out = mgr.run()
    data = out.get_relation(rel.id).local_unit_data
    assert data["node-name"] == "ip-10-0-0-7"
    assert json.loads(data["gpu-inventory"]) == [GPU]
    with ctx(ctx.on.update_status(), out) as mgr:
        mgr.charm.cluster.publish_node("ip-10-0-0-7")
        out = mgr.run()
    assert "gpu-inventory" not in out.get_relation(rel.id).local_unit_data
    with ctx(ctx.on.update_status(), out) as mgr:
        with pytest.raises(ValueError, match="node-name is invalid"):
            mgr.charm.cluster.publish_node("Not A Name")


def test_provider_publishes_and_grants_and_skips_bad_workers():
    rel = testing.Relation(
        "workers",
        remote_app_name="w",
        remote_units_data={
            0: {"node-name": "n0", "gpu-inventory": json.dumps([GPU])},
            1: {"node-name": "n1", "gpu-inventory": "[{}]"},
            2: {},
        },
    )
    ctx = testing.Context(ControlPlane, meta=CP_META)
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations=[rel])) as mgr:
        p = mgr.charm.workers
        with pytest.raises(ValueError, match="not a kubeadm bootstrap token"):
            p.publish("https://127.0.0.1:6444", SERVERS, HASH, "1.33", "nope", "k")
        with pytest.raises(ValueError, match="api-servers is invalid"):
            p.publish("https://127.0.0.1:6444", [], HASH, "1.33", TOKEN, "k")
        p.publish("https://127.0.0.1:6444", SERVERS, HASH, "1.33", TOKEN, "kubeconfig-text")
        workers = p.workers()
        assert [(w.unit, w.node_name, w.gpu_count) for w in workers] == [("w/0", "n0", 4)]
        assert p.problems() == ["w/1: gpu-inventory.0.model is missing"]
        out = mgr.run()
    sec = next(s for s in out.secrets if s.label == SECRET_LABEL)
    assert sec.remote_grants == {rel.id: {"w"}}
    assert len([s for s in out.secrets if s.label == SECRET_LABEL]) == 1  # none from the refusals
    # the token: w/2 has not registered a node, and only w/2 may read it
    assert "token" not in sec.latest_content
    (token,) = [s for s in out.secrets if s.label.startswith(UNIT_SECRET_PREFIX)]
    assert token.latest_content == {"token": TOKEN}
    assert token.remote_grants == {rel.id: {"w/2"}}


def test_provider_without_a_joining_unit_publishes_no_token():
    """Issue 29 item 2: "" is no token: the secret holds none, `published_token` says so."""
    rel = testing.Relation("workers", remote_app_name="w", remote_units_data={0: {}})
    ctx = testing.Context(ControlPlane, meta=CP_META)
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations=[rel])) as mgr:
        p = mgr.charm.workers
        p.publish("https://127.0.0.1:6444", SERVERS, HASH, "1.33", TOKEN)
        assert p.published_token() == TOKEN
        p.publish("https://127.0.0.1:6444", SERVERS, HASH, "1.33", "")
        assert p.published_token() == ""
        out = mgr.run()
    sec = next(s for s in out.secrets if s.label == SECRET_LABEL)
    assert sec.latest_content == {"joining": "none"}
    bag = out.get_relation(rel.id).local_app_data
    assert bag["join-secret-id"] == sec.id
    assert json.loads(bag["api-servers"]) == SERVERS
    assert TOKEN not in json.dumps(bag) and "kubeconfig-text" not in json.dumps(bag)


def test_provider_publishes_the_image_registry_only_when_one_is_set():
    rel = testing.Relation("workers", remote_app_name="w")
    ctx = testing.Context(ControlPlane, meta=CP_META)
    args = ("https://127.0.0.1:6444", SERVERS, HASH, "1.36", TOKEN, "k")
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations=[rel])) as mgr:
        mgr.charm.workers.publish(*args, image_registry="registry.example.com:5000/mirror/")
        out = mgr.run()
    bag = out.get_relation(rel.id).local_app_data
    assert bag["image-registry"] == "registry.example.com:5000/mirror"
    with ctx(ctx.on.update_status(), out) as mgr:
        mgr.charm.workers.publish(*args)
        out = mgr.run()
    assert "image-registry" not in out.get_relation(rel.id).local_app_data


def test_provider_refuses_a_malformed_image_registry():
    rel = testing.Relation("workers", remote_app_name="w")
    ctx = testing.Context(ControlPlane, meta=CP_META)
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations=[rel])) as mgr:
        with pytest.raises(ValueError, match="image-registry is invalid .* is a URL"):
            mgr.charm.workers.publish(
                "https://127.0.0.1:6444",
                SERVERS,
                HASH,
                "1.36",
                TOKEN,
                "k",
                image_registry="https://registry.example.com",
            )
        out = mgr.run()
    assert out.get_relation(rel.id).local_app_data == {}


@pytest.mark.parametrize(
    ("bag", "registry"),
    [
        ({}, ""),
        (
            {"image-registry": "registry.example.com:5000/mirror"},
            "registry.example.com:5000/mirror",
        ),
    ],
)
def test_requirer_reads_the_image_registry(bag, registry):
    sec = testing.Secret({"token": TOKEN, "kubeconfig": "k"})
    rel = testing.Relation("cluster", remote_app_data=provider_bag(sec.id, **bag))
    material, problem = requirer_view(testing.State(relations=[rel], secrets=[sec]))
    assert problem is None
    assert material.image_registry == registry


def test_requirer_names_a_malformed_image_registry():
    sec = testing.Secret({"token": TOKEN, "kubeconfig": "k"})
    bag = provider_bag(sec.id, **{"image-registry": "Registry Example"})
    rel = testing.Relation("cluster", remote_app_data=bag)
    material, problem = requirer_view(testing.State(relations=[rel], secrets=[sec]))
    assert material is None
    assert problem.startswith("control plane databag: image-registry is invalid")


def test_provider_publishes_the_device_plugin_sharing_only_when_not_the_default():
    rel = testing.Relation("workers", remote_app_name="w")
    ctx = testing.Context(ControlPlane, meta=CP_META)
    args = ("https://127.0.0.1:6444", SERVERS, HASH, "1.36", TOKEN, "k")
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations=[rel])) as mgr:
        mgr.charm.workers.publish(*args, mig_strategy="single", gpu_time_slicing_replicas=4)
        out = mgr.run()
    bag = out.get_relation(rel.id).local_app_data
    assert (bag["mig-strategy"], bag["gpu-time-slicing-replicas"]) == ("single", "4")
    with ctx(ctx.on.update_status(), out) as mgr:
        mgr.charm.workers.publish(*args, mig_strategy="none", gpu_time_slicing_replicas=1)
        out = mgr.run()
    bag = out.get_relation(rel.id).local_app_data
    assert "mig-strategy" not in bag and "gpu-time-slicing-replicas" not in bag


@pytest.mark.parametrize(
    ("sharing", "error"),
    [
        ({"mig_strategy": "double"}, "mig-strategy is invalid"),
        ({"gpu_time_slicing_replicas": 0}, "gpu-time-slicing-replicas is invalid"),
    ],
)
def test_provider_refuses_a_malformed_device_plugin_sharing(sharing, error):
    rel = testing.Relation("workers", remote_app_name="w")
    ctx = testing.Context(ControlPlane, meta=CP_META)
    args = ("https://127.0.0.1:6444", SERVERS, HASH, "1.36", TOKEN, "k")
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations=[rel])) as mgr:
        with pytest.raises(ValueError, match=error):
            mgr.charm.workers.publish(*args, **sharing)
        out = mgr.run()
    assert out.get_relation(rel.id).local_app_data == {}


@pytest.mark.parametrize(
    ("bag", "strategy", "replicas"),
    [
        ({}, "none", 1),
        ({"mig-strategy": "mixed", "gpu-time-slicing-replicas": "4"}, "mixed", 4),
    ],
)
def test_requirer_reads_the_device_plugin_sharing(bag, strategy, replicas):
    sec = testing.Secret({"token": TOKEN, "kubeconfig": "k"})
    rel = testing.Relation("cluster", remote_app_data=provider_bag(sec.id, **bag))
    material, problem = requirer_view(testing.State(relations=[rel], secrets=[sec]))
    assert problem is None
    assert (material.mig_strategy, material.gpu_time_slicing_replicas) == (strategy, replicas)


@pytest.mark.parametrize(
    ("bag", "field"),
    [
        ({"mig-strategy": "auto"}, "mig-strategy"),
        ({"gpu-time-slicing-replicas": "many"}, "gpu-time-slicing-replicas"),
    ],
)
def test_requirer_names_a_malformed_device_plugin_sharing(bag, field):
    sec = testing.Secret({"token": TOKEN, "kubeconfig": "k"})
    rel = testing.Relation("cluster", remote_app_data=provider_bag(sec.id, **bag))
    material, problem = requirer_view(testing.State(relations=[rel], secrets=[sec]))
    assert material is None
    assert problem.startswith(f"control plane databag: {field} is invalid")


def test_gpu_inventory_carries_the_pci_device_and_mig_capacities_for_mig_parted():
    h100 = {
        "model": "NVIDIA H100 80GB HBM3",
        "count": 8,
        "mig-capable": True,
        "pci-device-id": "2330",
        "mig-profiles": {"1g.10gb": 7, "2g.20gb": 3, "7g.80gb": 1},
    }

    rel = testing.Relation("cluster")
    ctx = worker_ctx()
    with ctx(ctx.on.update_status(), testing.State(relations=[rel])) as mgr:
        mgr.charm.cluster.publish_node("ip-10-0-0-7", [GpuInfo.model_validate(h100)])
        out = mgr.run()

    published = json.loads(out.get_relation(rel.id).local_unit_data["gpu-inventory"])
    assert published == [h100]
    info = GpuInfo.model_validate(published[0])
    assert (info.pci_device_id, info.mig_profiles) == ("2330", h100["mig-profiles"])
    with pytest.raises(ValueError):
        GpuInfo.model_validate({**h100, "pci-device-id": "0x2330"})


# -- the token reaches the joining unit alone (issue 29 item 2) ------------------------


def juju_readable(secrets, relation_id: int, unit: str) -> list[testing.Secret]:
    """The secrets of `secrets` (the control plane's) that Juju lets worker `unit` read.

    A unit reads a secret granted to it or to its application (juju apiserver/facades/
    agent/secretsmanager SecretsManagerAPI.canRead: the unit's access, then its
    application's); ops.testing records a grant as the unit's or the application's name
    in `remote_grants` (scenario mocking.py secret_grant).
    """
    app = unit.split("/")[0]
    return [
        testing.Secret(s.latest_content, id=s.id)
        for s in secrets
        if s.remote_grants.get(relation_id, set()) & {unit, app}
    ]


def worker_view(cp_out: testing.State, rel: testing.Relation, unit: str, own: dict):
    """What worker `unit` reads of the control plane's output (its databag is `own`)."""
    number = int(unit.split("/")[1])
    cluster = testing.Relation(
        "cluster",
        remote_app_name="cp",
        remote_app_data=cp_out.get_relation(rel.id).local_app_data,
        local_unit_data=own,
    )
    secrets = juju_readable(cp_out.secrets, rel.id, unit)
    ctx = testing.Context(Worker, meta=WORKER_META, unit_id=number)
    state = testing.State(relations=[cluster], secrets=secrets)
    with ctx(ctx.on.update_status(), state) as mgr:
        material, problem = mgr.charm.cluster.join_material(), mgr.charm.cluster.problem()
        ids = json.loads(cluster.remote_app_data.get("join-tokens", "{}"))
        others = {}
        for name, secret_id in ids.items():
            try:
                others[name] = mgr.charm.model.get_secret(id=secret_id).get_content()["token"]
            except ops.SecretNotFoundError:
                others[name] = None
    return material, problem, others


def cp_publish(state: testing.State, token: str = TOKEN, **kwargs) -> testing.State:
    ctx = testing.Context(ControlPlane, meta=CP_META)
    with ctx(ctx.on.update_status(), state) as mgr:
        mgr.charm.workers.publish("https://127.0.0.1:6444", SERVERS, HASH, "1.36", token, **kwargs)
        return mgr.run()


def test_only_a_joining_unit_reads_the_token_and_a_joined_one_needs_none():
    """Issue 29 item 2: root on a joined worker cannot read the token another unit joins with.

    worker/0 registered its node, worker/1 and worker/2 join at once: each joining unit
    has the token in a secret granted to it alone (both granted in one hook: a secret
    each), the join secret every unit reads holds none, and worker/0 reads no token, by
    its own secret or anyone's. Once worker/1 registered, its secret is gone with all its
    revisions and it goes on without a token.
    """
    units = {0: {"node-name": "n0"}, 1: {}, 2: {}}
    rel = testing.Relation("workers", remote_app_name="worker", remote_units_data=units)
    out = cp_publish(testing.State(leader=True, relations=[rel]))

    shared = next(s for s in out.secrets if s.label == SECRET_LABEL)
    assert shared.latest_content == {"joining": "none"}
    assert shared.remote_grants == {rel.id: {"worker"}}
    grants = {
        s.label: s.remote_grants for s in out.secrets if s.label.startswith(UNIT_SECRET_PREFIX)
    }
    assert grants == {
        UNIT_SECRET_PREFIX + "worker-1": {rel.id: {"worker/1"}},
        UNIT_SECRET_PREFIX + "worker-2": {rel.id: {"worker/2"}},
    }

    material, problem, others = worker_view(out, rel, "worker/0", {"node-name": "n0"})
    assert problem is None and material.token == ""
    assert others == {"worker/1": None, "worker/2": None}  # SecretNotFoundError: no grant
    material, problem, others = worker_view(out, rel, "worker/1", {})
    assert problem is None and material.token == TOKEN
    assert others == {"worker/1": TOKEN, "worker/2": None}

    registered = dataclasses.replace(
        out.get_relation(rel.id), remote_units_data={**units, 1: {"node-name": "n1"}}
    )
    out = cp_publish(dataclasses.replace(out, relations=[registered]))
    labels = sorted(s.label for s in out.secrets)
    assert labels == [SECRET_LABEL, UNIT_SECRET_PREFIX + "worker-2", RECORD_LABEL]
    # the control plane's own record of the token is granted to no one
    assert next(s for s in out.secrets if s.label == RECORD_LABEL).remote_grants == {}
    assert list(json.loads(out.get_relation(rel.id).local_app_data["join-tokens"])) == ["worker/2"]
    material, problem, others = worker_view(out, rel, "worker/1", {"node-name": "n1"})
    assert problem is None and material.token == ""
    assert others == {"worker/2": None}

    # the last one registered: no token secret at all, and the map goes
    done = dataclasses.replace(
        out.get_relation(rel.id),
        remote_units_data={**units, 1: {"node-name": "n1"}, 2: {"node-name": "n2"}},
    )
    out = cp_publish(dataclasses.replace(out, relations=[done]), token="")
    assert [s.label for s in out.secrets] == [SECRET_LABEL]
    assert "join-tokens" not in out.get_relation(rel.id).local_app_data


def test_a_registered_unit_without_access_to_its_token_goes_on():
    """The control plane removes a registered unit's secret: no access is no token then.

    A unit that has not registered waits for access instead (the grant comes with the
    databag's next change).
    """
    gone = testing.Secret({"token": TOKEN})  # its ID, in no state: no access
    shared = testing.Secret({"joining": "none"})
    bag = provider_bag(shared.id, **{"join-tokens": json.dumps({"worker/0": gone.id})})
    joined = testing.Relation("cluster", remote_app_data=bag, local_unit_data={"node-name": "n0"})
    material, problem = requirer_view(testing.State(relations=[joined], secrets=[shared]))
    assert problem is None and material.token == ""
    joining = testing.Relation("cluster", remote_app_data=bag)
    material, problem = requirer_view(testing.State(relations=[joining], secrets=[shared]))
    assert material is None and problem == "waiting for access to this unit's join token"
    material, problem = requirer_view(testing.State(relations=[joining], secrets=[shared, gone]))
    assert problem is None and material.token == TOKEN


def test_upgrade_removes_the_join_secret_every_unit_could_read():
    """Earlier revisions kept the token in the join secret granted to the whole relation.

    The first publish removes that secret with all its revisions (no worker unit reads
    the token there any more) and publishes a new one, without a token, under another
    label; `token_readable_by_all` says so until then, for the caller to replace the
    token itself.
    """
    legacy = testing.Secret(
        {"token": TOKEN, "kubeconfig": "kubeconfig-text"},
        label=LEGACY_SECRET_LABEL,
        owner="app",
        remote_grants={1: {"worker"}},
    )
    rel = testing.Relation(
        "workers",
        id=1,
        remote_app_name="worker",
        remote_units_data={0: {"node-name": "n0"}, 1: {}},
        local_app_data=provider_bag(legacy.id, **{"kubernetes-version": "1.36"}),
    )
    state = testing.State(leader=True, relations=[rel], secrets=[legacy])
    ctx = testing.Context(ControlPlane, meta=CP_META)
    with ctx(ctx.on.update_status(), state) as mgr:
        assert mgr.charm.workers.token_readable_by_all()
        assert mgr.charm.workers.published_token() == TOKEN
        new = "ghijkl.0123456789abcdef"
        mgr.charm.workers.publish(
            "https://127.0.0.1:6444", SERVERS, HASH, "1.36", new, "kubeconfig-text"
        )
        assert not mgr.charm.workers.token_readable_by_all()
        assert mgr.charm.workers.published_token() == new
        out = mgr.run()

    assert legacy.id not in [s.id for s in out.secrets]
    shared = next(s for s in out.secrets if s.label == SECRET_LABEL)
    assert shared.latest_content == {"joining": "none", "kubeconfig": "kubeconfig-text"}
    assert out.get_relation(rel.id).local_app_data["join-secret-id"] == shared.id
    assert shared.remote_grants == {rel.id: {"worker"}}
    _, problem, others = worker_view(out, rel, "worker/0", {"node-name": "n0"})
    assert problem is None and others == {"worker/1": None}
    material, _, _ = worker_view(out, rel, "worker/1", {})
    assert material.token == new and material.kubeconfig == "kubeconfig-text"


def test_a_broken_relation_takes_its_units_token_secrets_with_it():
    """Its databag is gone with it: the control plane's own record finds the secrets."""
    rel = testing.Relation("workers", remote_app_name="worker", remote_units_data={0: {}})
    out = cp_publish(testing.State(leader=True, relations=[rel]))
    assert UNIT_SECRET_PREFIX + "worker-0" in [s.label for s in out.secrets]
    out = cp_publish(dataclasses.replace(out, relations=[]), token="")
    assert [s.label for s in out.secrets] == [SECRET_LABEL]


def test_a_worker_value_nested_past_the_parsers_depth_is_invalid_not_raised():
    """last44a H1's kind: a unit databag value of 5,000 brackets is refused as invalid."""
    import pydantic

    from charms.gpu_k8s.v0.kubernetes_cluster import RequirerUnitData

    with pytest.raises(pydantic.ValidationError):
        RequirerUnitData.model_validate({"node-name": "n", "gpu-quarantine": "[" * 5000})
