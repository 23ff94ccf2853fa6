"""The `workers` endpoint: join material, token rotation, departed workers."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json

import pytest
import yaml
from ops import testing

from fakes.control_plane import (
    JOIN_LABEL,
    PEER_LABEL,
    earlier_revision_cluster,
    join_workers,
    node,
    peer,
    peers,
    secret,
    token_secret,
    worker_bag,
    workers_relation,
)


@pytest.fixture
def bootstrapped(ctx, machine):
    """State of a leader right after it bootstrapped the cluster."""
    return ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))


def with_relation(state: testing.State, rel) -> testing.State:
    return dataclasses.replace(state, relations=[*state.relations, rel])


def test_workers_get_public_data_in_databag_and_token_in_granted_secret(ctx, bootstrapped, api):
    # w0 is a worker of an earlier revision (it does not say node-identity) on a cluster an
    # earlier revision made: the shared grant and its kubeconfig stand for it
    rel = workers_relation({0: worker_bag("w0", identity=False), 1: {}})
    state = with_relation(earlier_revision_cluster(bootstrapped), rel)
    out = ctx.run(ctx.on.relation_joined(rel, remote_unit=0), state)

    bag = out.get_relation(rel.id).local_app_data
    join = secret(out, JOIN_LABEL)
    unit_token = token_secret(out, "kubernetes-worker/1")
    assert bag == {
        "endpoint": "https://127.0.0.1:6444",
        "api-servers": '["192.0.2.0:6443"]',
        "ca-cert-hash": peer(out).local_app_data["ca-cert-hash"],
        "join-secret-id": join.id,
        "join-tokens": json.dumps({"kubernetes-worker/1": unit_token.id}),
        "kubernetes-version": "1.36",
    }
    content = join.latest_content
    assert join.remote_grants == {rel.id: {"kubernetes-worker"}}
    # unit 1 has not registered a node: the workers' own token (never the control plane's),
    # in a secret granted to unit 1 alone (issue 29 item 2), never in the shared one
    assert "token" not in content
    token = unit_token.latest_content["token"]
    assert token != secret(out, PEER_LABEL).latest_content["token"]
    assert token not in json.dumps(bag)
    assert unit_token.remote_grants == {rel.id: {"kubernetes-worker/1"}}
    # the secret expires an hour before the token does
    token_expires = datetime.datetime.fromisoformat(
        peer(out).local_app_data["worker-token-expires"]
    )
    assert unit_token.expire == token_expires - datetime.timedelta(hours=1)
    # the worker kubeconfig carries the ServiceAccount token the API server issued
    config = yaml.safe_load(content["kubeconfig"])
    sa_secret = api.get_object("/api/v1/namespaces/kube-system/secrets/gpu-k8s-worker-token")
    assert (
        config["users"][0]["user"]["token"]
        == base64.b64decode(sa_secret["data"]["token"]).decode()
    )
    # workers use it on their node, through their own API proxy
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6444"
    role = api.get_object("/apis/rbac.authorization.k8s.io/v1/clusterroles/gpu-k8s-worker")
    as_set = {(r["resources"][0], v) for r in role["rules"] for v in r["verbs"]}
    assert as_set == {
        ("nodes", "get"),
        ("nodes", "list"),
        ("nodes", "patch"),
        ("pods", "get"),
        ("pods", "list"),
        ("pods/eviction", "create"),
        ("pods/log", "get"),
    }
    gpu_role = api.get_object(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/gpu-k8s-system/roles/gpu-k8s-worker"
    )
    assert gpu_role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]}
    ]
    assert "secrets" not in json.dumps(role["rules"])


GRANT_OBJECTS = (
    "/api/v1/namespaces/kube-system/serviceaccounts/gpu-k8s-worker",
    "/api/v1/namespaces/kube-system/secrets/gpu-k8s-worker-token",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles/gpu-k8s-worker",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/gpu-k8s-worker",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/gpu-k8s-system/roles/gpu-k8s-worker",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/gpu-k8s-system/rolebindings/gpu-k8s-worker",
)


def test_the_shared_worker_grant_goes_once_every_worker_acts_as_its_kubelet(
    ctx, bootstrapped, api
):
    """Issue 29 item 2: the ServiceAccount every worker shared is deleted, then stays gone.

    On a cluster an earlier revision made, while a worker of an earlier revision is
    registered the grant and its kubeconfig stand (it still labels and validates with it);
    once every registered unit says node-identity the leader deletes the ServiceAccount,
    its token and bindings, and the join secret holds nothing (no unit joins, so there is
    no workers' token either). The removal is made once: later hooks make no request for it.
    A unit without node-identity afterwards (one refreshed back, or root on it dropping the
    flag) gets no credential: the grant is never made again, and a Blocked line names it.
    """
    from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

    rel = workers_relation({0: worker_bag("w0", identity=False), 1: worker_bag("w1")})
    state = with_relation(earlier_revision_cluster(bootstrapped), rel)
    out = ctx.run(ctx.on.relation_changed(rel, remote_unit=0), state)
    kubeconfig = yaml.safe_load(secret(out, JOIN_LABEL).latest_content["kubeconfig"])
    # the workers reach it through their node's proxy: here straight at the fake
    shared_token = api.kubeconfig(token=kubeconfig["users"][0]["user"]["token"])
    assert all(api.get_object(path) is not None for path in GRANT_OBJECTS)
    with Kube.from_kubeconfig(shared_token, retries=0) as shared:
        shared.get("v1", "Node", "w0")  # the earlier worker's credential works

    refreshed = dataclasses.replace(
        rel, remote_units_data={0: worker_bag("w0"), 1: worker_bag("w1")}
    )
    state = dataclasses.replace(
        out, relations=[r for r in out.relations if r.id != rel.id] + [refreshed]
    )
    out = ctx.run(ctx.on.relation_changed(refreshed, remote_unit=0), state)

    assert [p for p in GRANT_OBJECTS if api.get_object(p) is not None] == []
    # w1 is not in the registry yet (a hook about w0 reads w0's databag): still a token
    assert "kubeconfig" not in secret(out, JOIN_LABEL).latest_content
    # the token the workers shared is refused: its ServiceAccount is gone
    with Kube.from_kubeconfig(shared_token, retries=0) as shared:
        with pytest.raises(KubeError) as refused:
            shared.get("v1", "Node", "w0")
    assert refused.value.status == 401
    requests = len(api.requests)
    refreshed = out.get_relation(rel.id)
    again = ctx.run(ctx.on.relation_changed(refreshed, remote_unit=1), out)
    assert secret(again, JOIN_LABEL).latest_content == {"joining": "none"}  # all registered
    assert [r for r in api.requests[requests:] if "gpu-k8s-worker" in r[1]] == []

    # stricter than before: a unit without node-identity related afterwards brings the
    # grant back no more (root on a worker could drop the flag to get the shared token)
    old = dataclasses.replace(
        refreshed,
        remote_units_data={**refreshed.remote_units_data, 2: worker_bag("w2", identity=False)},
    )
    state = dataclasses.replace(
        again, relations=[r for r in again.relations if r.id != rel.id] + [old]
    )
    out = ctx.run(ctx.on.relation_changed(old, remote_unit=2), state)
    assert [p for p in GRANT_OBJECTS if api.get_object(p) is not None] == []
    assert "kubeconfig" not in secret(out, JOIN_LABEL).latest_content
    assert out.unit_status == testing.BlockedStatus(
        "kubernetes-worker/2 does not act as its kubelet (no node-identity) and gets no "
        "shared worker credential: juju refresh kubernetes-worker"
    )


def test_status_counts_workers_and_gpus(ctx, bootstrapped, api):
    gpus = [
        {
            "model": "NVIDIA A10G",
            "count": 4,
            "memory-mib": 23028,
            "driver": "580.65",
            "cuda": "13.0",
            "mig-capable": False,
        }
    ]
    h100 = [{"model": "NVIDIA H100 80GB HBM3", "count": 8}]
    for name in ("w0", "w1", "w2", "w3"):
        api.put_object(f"/api/v1/nodes/{name}", node(name))
    rel = workers_relation(
        {
            0: worker_bag("w0", gpus),
            1: worker_bag("w1"),
            2: worker_bag("w2", gpus),
            3: worker_bag("w3", h100),
        }
    )
    out = join_workers(ctx, bootstrapped, rel, api)

    assert out.unit_status == testing.ActiveStatus(
        "Ready: v1.36, 1 control-plane, 4 workers "
        "(3 with 16 GPUs: 8x NVIDIA A10G, 8x NVIDIA H100 80GB HBM3)"
    )
    registry = json.loads(peer(out).local_app_data["workers"])
    assert registry == {
        # node, GPUs, relation, GPUs per model, minor (None: the worker did not say)
        "kubernetes-worker/0": ["w0", 4, rel.id, {"NVIDIA A10G": 4}, None],
        "kubernetes-worker/1": ["w1", 0, rel.id, {}, None],
        "kubernetes-worker/2": ["w2", 4, rel.id, {"NVIDIA A10G": 4}, None],
        "kubernetes-worker/3": ["w3", 8, rel.id, {"NVIDIA H100 80GB HBM3": 8}, None],
    }


def test_one_gpu_is_counted_in_the_singular(ctx, bootstrapped, api):
    """The default bundle's status line (README "Deploy on AWS"): one g5.xlarge."""
    a10g = [{"model": "NVIDIA A10G", "count": 1}]
    for name in ("w0", "w1"):
        api.put_object(f"/api/v1/nodes/{name}", node(name))
    rel = workers_relation({0: worker_bag("w0"), 1: worker_bag("w1", a10g)})

    out = join_workers(ctx, bootstrapped, rel, api)

    assert out.unit_status == testing.ActiveStatus(
        "Ready: v1.36, 1 control-plane, 2 workers (1 with 1 GPU: 1x NVIDIA A10G)"
    )


def test_workers_whose_nodes_are_not_ready_or_not_registered_are_not_counted(
    ctx, bootstrapped, api
):
    api.put_object("/api/v1/nodes/w0", node("w0"))
    api.put_object("/api/v1/nodes/w1", node("w1", ready=False))
    rel = workers_relation({0: worker_bag("w0"), 1: worker_bag("w1"), 2: worker_bag("w2")})
    out = join_workers(ctx, bootstrapped, rel)

    assert out.unit_status == testing.ActiveStatus(
        "Ready: v1.36, 1 control-plane, 1 workers; not Ready: w1; not registered: w2"
    )
    # each worker's own relation-changed looked at its Node only: one GET each
    gets = [r for r in api.requests if r[0] == "GET" and r[1].startswith("/api/v1/nodes/w")]
    assert len(gets) == 3
    api.put_object("/api/v1/nodes/w1", node("w1"))
    api.put_object("/api/v1/nodes/w2", node("w2"))
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 3 workers")


def test_malformed_worker_databag_is_reported_not_raised(ctx, bootstrapped, api):
    rel = workers_relation(
        {
            0: worker_bag("w0"),
            1: {"node-name": "Bad_Name!"},
            2: {"node-name": "w2", "gpu-inventory": "not json"},
        }
    )
    out = join_workers(ctx, bootstrapped, rel, api)

    msg = out.unit_status.message
    assert out.unit_status.name == "active"
    assert msg.startswith("Ready: v1.36, 1 control-plane, 1 workers; ignoring 2 worker(s)")
    assert "kubernetes-worker/1: node-name is invalid" in msg


def test_token_rotates_on_secret_expired(ctx, bootstrapped, machine, clock):
    # a unit that has not registered its node (w0 joins): the workers' two-hour token
    rel = workers_relation({0: {}, 1: worker_bag("w1")})
    out = ctx.run(ctx.on.relation_changed(rel, remote_unit=1), with_relation(bootstrapped, rel))
    old = token_secret(out).latest_content["token"]
    shared = secret(out, JOIN_LABEL).latest_content  # no token: the unit's own secret has it
    control_plane = secret(out, PEER_LABEL).latest_content["token"]

    clock.advance(hours=1, minutes=1)
    join = token_secret(out)
    out = ctx.run(ctx.on.secret_expired(join, revision=1), out)

    new = token_secret(out).latest_content["token"]
    assert new != old
    assert secret(out, JOIN_LABEL).latest_content == shared == {"joining": "none"}
    assert secret(out, PEER_LABEL).latest_content["token"] == control_plane  # its own
    assert old not in machine.live_tokens and new in machine.live_tokens
    assert any(
        line.endswith(
            "--ttl 2h --description gpu-k8s join token --kubeconfig /etc/kubernetes/admin.conf"
        )
        for line in machine.lines("kubeadm")
    )
    expires = datetime.datetime.fromisoformat(peer(out).local_app_data["worker-token-expires"])
    assert expires == clock.now + datetime.timedelta(hours=2)
    assert token_secret(out).expire == expires - datetime.timedelta(hours=1)
    tokens = json.loads(out.get_relation(rel.id).local_app_data["join-tokens"])
    assert tokens == {"kubernetes-worker/0": join.id}


def test_token_not_rotated_before_due_and_rotated_on_update_status_when_past(
    ctx, bootstrapped, machine, clock
):
    out = ctx.run(ctx.on.update_status(), bootstrapped)
    assert len(machine.tokens) == 1
    clock.advance(hours=30)  # the secret-expired hook was missed
    out = ctx.run(ctx.on.update_status(), out)
    assert len(machine.tokens) == 2
    assert machine.live_tokens == {machine.tokens[1]}


def test_token_ttl_config_is_used(ctx, machine):
    state = testing.State(leader=True, relations=[peers()], config={"join-token-ttl": 6})
    out = ctx.run(ctx.on.install(), state)
    assert machine.inits[0][0]["bootstrapTokens"][0]["ttl"] == "6h0m0s"
    expires = datetime.datetime.fromisoformat(peer(out).local_app_data["token-expires"])
    assert expires - datetime.timedelta(hours=6) == datetime.datetime.fromisoformat(
        peer(out).local_app_data["certs-uploaded-at"]
    )


def test_departed_worker_node_deleted_only_after_it_drained(ctx, bootstrapped, api):
    api.put_object("/api/v1/nodes/w0", node("w0"))
    api.put_object("/api/v1/nodes/w1", node("w1"))
    api.put_object(
        "/api/v1/namespaces/default/pods/train-0",
        {
            "spec": {"nodeName": "w1", "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"},
        },
    )
    api.put_object(
        "/api/v1/namespaces/kube-flannel/pods/flannel-w1",
        {
            "metadata": {
                "ownerReferences": [
                    {
                        "kind": "DaemonSet",
                        "name": "kube-flannel-ds",
                        "apiVersion": "apps/v1",
                        "uid": "x",
                        "controller": True,
                    }
                ]
            },
            "spec": {"nodeName": "w1", "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"},
        },
    )
    rel = workers_relation({0: worker_bag("w0"), 1: worker_bag("w1")})
    out = join_workers(ctx, bootstrapped, rel, api)

    gone = dataclasses.replace(out.get_relation(rel.id), remote_units_data={0: worker_bag("w0")})
    state = dataclasses.replace(out, relations=[peer(out), gone])
    out = ctx.run(ctx.on.relation_departed(gone, remote_unit=1, departing_unit=1), state)
    assert json.loads(peer(out).local_app_data["pending-removal"]) == ["w1"]
    assert api.get_object("/api/v1/nodes/w1") is not None  # still running pods
    assert out.unit_status.message == (
        "Ready: v1.36, 1 control-plane, 1 workers; 1 departed node(s) pending removal"
    )

    # the worker cordoned itself; a training pod is still there
    api.put_object("/api/v1/nodes/w1", node("w1", unschedulable=True))
    out = ctx.run(ctx.on.update_status(), out)
    assert api.get_object("/api/v1/nodes/w1") is not None

    # drained: only the DaemonSet pod is left
    api.delete_object("/api/v1/namespaces/default/pods/train-0")
    out = ctx.run(ctx.on.update_status(), out)
    assert api.get_object("/api/v1/nodes/w1") is None
    assert api.get_object("/api/v1/nodes/w0") is not None
    assert json.loads(peer(out).local_app_data["pending-removal"]) == []
    assert out.unit_status.message == "Ready: v1.36, 1 control-plane, 1 workers"


def test_departed_worker_that_is_not_ready_is_deleted_at_once(ctx, bootstrapped, api):
    api.put_object("/api/v1/nodes/w1", node("w1", ready=False))
    rel = workers_relation({1: worker_bag("w1")})
    out = ctx.run(ctx.on.relation_changed(rel, remote_unit=1), with_relation(bootstrapped, rel))
    gone = dataclasses.replace(out.get_relation(rel.id), remote_units_data={})
    state = dataclasses.replace(out, relations=[peer(out), gone])
    out = ctx.run(ctx.on.relation_departed(gone, remote_unit=1, departing_unit=1), state)

    assert api.get_object("/api/v1/nodes/w1") is None
    assert json.loads(peer(out).local_app_data.get("pending-removal", "[]")) == []


def test_non_leader_does_not_publish(ctx, machine):
    from fakes.control_plane import leader_member_state

    state = leader_member_state(leader=False)
    rel = workers_relation({0: worker_bag("w0")})
    registry = json.dumps({"kubernetes-worker/0": ["w0", 0, rel.id]})
    members = dataclasses.replace(
        peer(state), local_app_data={**peer(state).local_app_data, "workers": registry}
    )
    state = dataclasses.replace(state, relations=[members, rel])
    out = ctx.run(ctx.on.relation_changed(rel, remote_unit=0), state)

    assert out.get_relation(rel.id).local_app_data == {}
    assert [s for s in out.secrets if s.label == JOIN_LABEL] == []
    assert not any("token create" in line for line in machine.lines("kubeadm"))
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 2 control-plane, 1 workers")


def test_registry_is_rebuilt_from_all_databags_when_leadership_moves(ctx, bootstrapped, api):
    api.put_object("/api/v1/nodes/w0", node("w0"))
    api.put_object("/api/v1/nodes/w1", node("w1"))
    rel = workers_relation({0: worker_bag("w0"), 1: worker_bag("w1")})
    out = ctx.run(ctx.on.update_status(), with_relation(bootstrapped, rel))
    assert out.unit_status.message == "Ready: v1.36, 1 control-plane, 0 workers"  # no event yet
    out = ctx.run(ctx.on.leader_elected(), out)
    assert out.unit_status.message == "Ready: v1.36, 1 control-plane, 2 workers"


def test_worker_fixing_its_databag_is_counted(ctx, bootstrapped, api):
    api.put_object("/api/v1/nodes/w0", node("w0"))
    rel = workers_relation({0: {"node-name": "Bad!"}})
    out = join_workers(ctx, bootstrapped, rel)
    assert "ignoring 1 worker(s)" in out.unit_status.message
    fixed = dataclasses.replace(out.get_relation(rel.id), remote_units_data={0: worker_bag("w0")})
    out = ctx.run(
        ctx.on.relation_changed(fixed, remote_unit=0),
        dataclasses.replace(out, relations=[peer(out), fixed]),
    )
    assert out.unit_status.message == "Ready: v1.36, 1 control-plane, 1 workers"


def test_workers_relation_broken_queues_all_its_nodes(ctx, bootstrapped, api):
    api.put_object("/api/v1/nodes/w0", node("w0"))
    rel = workers_relation({0: worker_bag("w0")})
    out = join_workers(ctx, bootstrapped, rel, api)
    out = ctx.run(ctx.on.relation_broken(out.get_relation(rel.id)), out)
    assert json.loads(peer(out).local_app_data["pending-removal"]) == ["w0"]
    assert json.loads(peer(out).local_app_data["workers"]) == {}


def test_secret_expired_removes_the_revision_it_replaced(ctx, bootstrapped, machine, clock):
    rel = workers_relation({0: {}})  # a unit joining: the workers' token is in the secret
    out = ctx.run(ctx.on.relation_joined(rel, remote_unit=0), with_relation(bootstrapped, rel))
    clock.advance(hours=1, minutes=1)
    out = ctx.run(ctx.on.secret_expired(token_secret(out), revision=1), out)
    # the hook that rotated wrote revision 2; Juju commits it when the hook ends
    assert ctx.removed_secret_revisions == []
    assert token_secret(out).latest_content["token"] in machine.live_tokens
    # Juju fires secret-expired again for revision 1, which is replaced now: it goes
    tokens = len(machine.tokens)
    out = ctx.run(ctx.on.secret_expired(token_secret(out), revision=1), out)
    assert ctx.removed_secret_revisions == [1]
    assert len(machine.tokens) == tokens  # and nothing rotated twice


def test_secret_expired_before_the_token_is_due_keeps_the_revision(ctx, bootstrapped):
    rel = workers_relation({0: {}})  # a unit joining: the workers' token is in the secret
    out = ctx.run(ctx.on.relation_joined(rel, remote_unit=0), with_relation(bootstrapped, rel))
    ctx.run(ctx.on.secret_expired(token_secret(out), revision=1), out)
    # nothing replaced revision 1 (the clock says the token is not due): Juju fires again
    assert ctx.removed_secret_revisions == []


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def test_leader_sets_the_gpu_taint_a_worker_asks_for_on_its_own_node_only(ctx, bootstrapped, api):
    """A worker acts as its kubelet, which may not change its taints (issue 29 item 2).

    The leader applies the GPU taint a unit asks for (`gpu-taint`) to the node that unit
    registered, keeping other taints; a unit claiming another unit's node is refused.
    """
    other = {"key": "team", "value": "a", "effect": "NoSchedule"}
    api.put_object("/api/v1/nodes/w0", {**node("w0"), "spec": {"taints": [other]}})
    api.put_object("/api/v1/nodes/w1", node("w1"))
    rel = workers_relation(
        {
            0: {**worker_bag("w0"), "gpu-taint": "true", "node-identity": "true"},
            1: worker_bag("w1"),
            # root on worker 2 claims worker 0's node and asks to untaint it
            2: {**worker_bag("w0"), "gpu-taint": "false", "node-identity": "true"},
        }
    )

    out = join_workers(ctx, bootstrapped, rel, None)

    assert api.get_object("/api/v1/nodes/w0")["spec"]["taints"] == [other, GPU_TAINT]
    assert not (api.get_object("/api/v1/nodes/w1").get("spec") or {}).get("taints")
    # answered once: the Node is in line, so the same request patches nothing again
    patches = [r for r in api.requests if r[0] == "PATCH"]
    ctx.run(ctx.on.relation_changed(out.get_relation(rel.id), remote_unit=0), out)
    assert [r for r in api.requests if r[0] == "PATCH"] == patches


def _status_with(api, token: str) -> int:
    """The status code the fake API server answers a request with `token` (200 if served)."""
    from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

    with Kube.from_kubeconfig(api.kubeconfig(token=token), retries=0) as kube:
        try:
            kube.get("v1", "Node", "w0")
        except KubeError as e:
            return e.status
    return 200


def _bootstrap_secrets(api) -> list[str]:
    return [
        obj["metadata"]["name"]
        for obj in api.objects("/api/v1/namespaces/kube-system/secrets/")
        if obj["metadata"]["name"].startswith("bootstrap-token-")
    ]


def test_the_workers_token_exists_only_while_a_unit_joins(ctx, bootstrapped, api, machine):
    """Issue 29 item 2: root on a joined worker finds no token that still joins anything.

    The workers get a bootstrap token of their own (never the control plane's), minted when
    a related unit has not registered its node; once every unit registered it is deleted
    (its bootstrap-token Secret with it, so the API server refuses it: 401) and the join
    secret holds no token. A unit related later gets a fresh one.
    """
    rel = workers_relation({0: {}})
    out = ctx.run(ctx.on.relation_joined(rel, remote_unit=0), with_relation(bootstrapped, rel))
    first = token_secret(out).latest_content["token"]
    assert first != secret(out, PEER_LABEL).latest_content["token"]
    assert _status_with(api, first) == 403  # authenticated as system:bootstrap:<id>
    assert "--ttl 2h --description gpu-k8s join token --kubeconfig" in "\n".join(
        machine.lines("kubeadm")
    )

    api.put_object("/api/v1/nodes/w0", node("w0"))
    joined = dataclasses.replace(rel, remote_units_data={0: worker_bag("w0")})
    state = dataclasses.replace(
        out, relations=[r for r in out.relations if r.id != rel.id] + [joined]
    )
    out = ctx.run(ctx.on.relation_changed(joined, remote_unit=0), state)

    assert _status_with(api, first) == 401
    assert _bootstrap_secrets(api) == [
        f"bootstrap-token-{secret(out, PEER_LABEL).latest_content['token'][:6]}"
    ]
    assert "token" not in secret(out, JOIN_LABEL).latest_content
    # its secret is gone with all its revisions (issue 29 item 2)
    assert [s.label for s in out.secrets if s.label.startswith("kubernetes-cluster-join-t")] == []
    assert "worker-token-expires" not in peer(out).local_app_data
    assert out.unit_status.name == "active"

    more = dataclasses.replace(
        out.get_relation(rel.id), remote_units_data={0: worker_bag("w0"), 1: {}}
    )
    state = dataclasses.replace(
        out, relations=[r for r in out.relations if r.id != rel.id] + [more]
    )
    out = ctx.run(ctx.on.relation_joined(more, remote_unit=1), state)
    fresh = token_secret(out, "kubernetes-worker/1").latest_content["token"]
    assert fresh not in (first, secret(out, PEER_LABEL).latest_content["token"])
    assert _status_with(api, fresh) == 403 and _status_with(api, first) == 401


QUARANTINE_TAINT = {"key": "gpu-k8s.io/gpu-unhealthy", "effect": "NoExecute"}
BAD_GPU = "GPU-7f3e9a2c-5d41-4b8e-9c0a-1e2f3a4b5c6d"


def test_leader_taints_a_quarantined_workers_own_node_noexecute_and_lifts_it_on_readmission(
    ctx, bootstrapped, api
):
    """A worker's GPU watcher quarantined a GPU (issue 32): `gpu-quarantine` lists it.

    The leader sets `gpu-k8s.io/gpu-unhealthy:NoExecute` on the node that unit registered,
    keeping other taints; a unit naming another unit's node is refused; the taint goes
    only when the unit's list empties (readmission), not when the field is absent.
    """
    other = {"key": "team", "value": "a", "effect": "NoSchedule"}
    api.put_object("/api/v1/nodes/w0", {**node("w0"), "spec": {"taints": [other]}})
    api.put_object("/api/v1/nodes/w1", node("w1"))
    quarantined = {"gpu-quarantine": json.dumps([BAD_GPU]), "node-identity": "true"}
    rel = workers_relation(
        {
            0: {**worker_bag("w0"), **quarantined},
            1: worker_bag("w1"),
            # root on worker 2 claims worker 1's node: it must not take it out of service
            2: {**worker_bag("w1"), **quarantined},
        }
    )

    out = join_workers(ctx, bootstrapped, rel, None)

    assert api.get_object("/api/v1/nodes/w0")["spec"]["taints"] == [other, QUARANTINE_TAINT]
    assert not (api.get_object("/api/v1/nodes/w1").get("spec") or {}).get("taints")
    patches = [r for r in api.requests if r[0] == "PATCH"]
    ctx.run(ctx.on.relation_changed(out.get_relation(rel.id), remote_unit=0), out)
    assert [r for r in api.requests if r[0] == "PATCH"] == patches  # in line: no patch

    # the field absent (a worker of an earlier revision, a hook that could not read its
    # Node): no request, the taint stays
    rel = out.get_relation(rel.id)
    bags = dict(rel.remote_units_data)
    bags[0] = {k: v for k, v in bags[0].items() if k != "gpu-quarantine"}
    rel = dataclasses.replace(rel, remote_units_data=bags)
    out = ctx.run(
        ctx.on.relation_changed(rel, remote_unit=0),
        dataclasses.replace(out, relations=[peer(out), rel]),
    )
    assert api.get_object("/api/v1/nodes/w0")["spec"]["taints"] == [other, QUARANTINE_TAINT]

    # readmitted: the list empties and the taint goes, the operator's stays
    bags[0] = {**bags[0], "gpu-quarantine": "[]"}
    rel = dataclasses.replace(rel, remote_units_data=bags)
    ctx.run(
        ctx.on.relation_changed(rel, remote_unit=0),
        dataclasses.replace(out, relations=[peer(out), rel]),
    )
    assert api.get_object("/api/v1/nodes/w0")["spec"]["taints"] == [other]


# An operator's taint (`kubectl taint`), added while the leader writes the quarantine's
OPERATOR_TAINT = {"key": "example.com/maintenance", "value": "disk", "effect": "NoSchedule"}


def _operator_taints_after_each_get(api, name: str, times: int) -> list[dict]:
    """After each of the next `times` GETs of Node `name`, an operator adds a taint.

    What it added, in order. The write lands between the leader's read of the Node and
    its patch (`FakeKubeApiServer.meanwhile`), as a `kubectl taint` can.
    """
    added: list[dict] = []
    path = f"/api/v1/nodes/{name}"

    def taint(method: str, at: str) -> None:
        if method != "GET" or at != path or len(added) >= times:
            return
        current = api.get_object(path)
        added.append({**OPERATOR_TAINT, "value": f"disk-{len(added)}"})
        spec = {**current["spec"], "taints": [*current["spec"].get("taints", []), added[-1]]}
        api.put_object(path, {"metadata": {"labels": current["metadata"]["labels"]}, "spec": spec})

    api.meanwhile.append(taint)
    return added


@pytest.mark.parametrize("quarantined", [True, False], ids=["set", "lifted"])
def test_a_taint_added_between_the_leaders_read_and_patch_survives(
    ctx, bootstrapped, api, quarantined
):
    """G5 (review44b): the quarantine taint's patch carries the resourceVersion read.

    `spec.taints` has no patchMergeKey: a merge patch replaces the whole list, so one
    written from a stale read would drop a taint added meanwhile. The server refuses it
    (409 Conflict), the leader reads the Node again and patches from what it holds now.
    """
    other = {"key": "team", "value": "a", "effect": "NoSchedule"}
    before = [other] if quarantined else [other, QUARANTINE_TAINT]
    api.put_object("/api/v1/nodes/w0", {**node("w0"), "spec": {"taints": before}})
    listed = json.dumps([BAD_GPU] if quarantined else [])
    rel = workers_relation(
        {0: {**worker_bag("w0"), "gpu-quarantine": listed, "node-identity": "true"}}
    )
    added = _operator_taints_after_each_get(api, "w0", times=1)

    join_workers(ctx, bootstrapped, rel, None)

    assert added
    mine = [QUARANTINE_TAINT] if quarantined else []
    assert api.get_object("/api/v1/nodes/w0")["spec"].get("taints") == [other, *added, *mine]
    patches = [r for r in api.requests if r[:2] == ("PATCH", "/api/v1/nodes/w0")]
    assert len(patches) == 2  # the one refused (409), the one from the fresh read


def test_a_node_that_keeps_changing_fails_the_hook_after_bounded_tries_and_loses_nothing(
    ctx, bootstrapped, api
):
    """Every patch refused, the Node changed after each read: `TAINT_ATTEMPTS` patches.

    Then the hook fails (Juju runs it again); no taint anyone added is lost.
    """
    from charms.gpu_k8s.v0.kubernetes_cluster import TAINT_ATTEMPTS

    api.put_object("/api/v1/nodes/w0", node("w0"))
    quarantined = {"gpu-quarantine": json.dumps([BAD_GPU]), "node-identity": "true"}
    rel = workers_relation({0: {**worker_bag("w0"), **quarantined}})
    added = _operator_taints_after_each_get(api, "w0", times=1000)

    with pytest.raises(testing.errors.UncaughtCharmError, match="409"):
        join_workers(ctx, bootstrapped, rel, None)

    assert api.get_object("/api/v1/nodes/w0")["spec"]["taints"] == added
    patches = [r for r in api.requests if r[:2] == ("PATCH", "/api/v1/nodes/w0")]
    assert len(patches) == TAINT_ATTEMPTS == 5


def test_a_quarantine_list_that_is_not_gpu_uuids_is_a_worker_problem(ctx, bootstrapped, api):
    api.put_object("/api/v1/nodes/w0", node("w0"))
    rel = workers_relation({0: {**worker_bag("w0"), "gpu-quarantine": '["w1"]'}})
    out = join_workers(ctx, bootstrapped, rel, None)
    assert "gpu-quarantine" in out.unit_status.message
    assert not (api.get_object("/api/v1/nodes/w0").get("spec") or {}).get("taints")


def test_upgrade_replaces_the_token_every_worker_unit_could_read(ctx, bootstrapped, api):
    """Issue 29 item 2: earlier revisions kept the workers' token in the relation-wide secret.

    The first hook of this revision removes that secret (every revision of it), publishes
    a join secret without a token, and replaces the token itself (the old one is deleted:
    401), which the joining unit alone now reads.
    """
    rel = workers_relation({0: worker_bag("w0"), 1: {}})
    out = ctx.run(ctx.on.relation_joined(rel, remote_unit=1), with_relation(bootstrapped, rel))
    old = token_secret(out, "kubernetes-worker/1").latest_content["token"]
    # as an earlier revision left it: the token in the secret granted to the whole relation
    legacy = testing.Secret(
        {"token": old},
        label="kubernetes-cluster-join",
        owner="app",
        remote_grants={rel.id: {"kubernetes-worker"}},
    )
    bag = {**out.get_relation(rel.id).local_app_data, "join-secret-id": legacy.id}
    bag.pop("join-tokens")
    earlier = dataclasses.replace(out.get_relation(rel.id), local_app_data=bag)
    state = dataclasses.replace(
        out,
        relations=[r for r in out.relations if r.id != rel.id] + [earlier],
        secrets=[s for s in out.secrets if s.label.startswith("control-plane")] + [legacy],
    )
    assert _status_with(api, old) == 403

    out = ctx.run(ctx.on.upgrade_charm(), state)

    assert legacy.id not in [s.id for s in out.secrets]
    assert "token" not in secret(out, JOIN_LABEL).latest_content
    new = token_secret(out, "kubernetes-worker/1")
    assert new.remote_grants == {rel.id: {"kubernetes-worker/1"}}
    assert new.latest_content["token"] != old
    assert _status_with(api, old) == 401 and _status_with(api, new.latest_content["token"]) == 403
