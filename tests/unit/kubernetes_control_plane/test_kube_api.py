"""The `kube-api` endpoint: namespace, ServiceAccount and least-privilege RBAC per consumer."""

from __future__ import annotations

import ast
import dataclasses
import json

import pytest
import yaml
from kube_api_escalations import ESCALATIONS, HOSTILE
from ops import testing

from fakes.control_plane import (
    JOIN_LABEL,
    earlier_revision_cluster,
    kube_api_relation,
    node,
    peer,
    peers,
    secret,
    worker_bag,
    workers_relation,
)

RBAC = "/apis/rbac.authorization.k8s.io/v1"
JOBS = [{"api-groups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "delete"]}]
NODES = [{"api-groups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
ETCD_TOO_LARGE = "etcdserver: request is too large"


@pytest.fixture
def bootstrapped(ctx, machine):
    return ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))


def with_relation(state, rel):
    return dataclasses.replace(state, relations=[*state.relations, rel])


def granted_token(state, rel) -> str:
    """The token of the kubeconfig the relation's secret holds (its latest revision)."""
    sec = next(s for s in state.secrets if s.label == f"kube-api-{rel.id}")
    return yaml.safe_load(sec.latest_content["kubeconfig"])["users"][0]["user"]["token"]


TENSORFLOW_SA = "system:serviceaccount:training:tensorflow"


def test_grant_creates_scoped_rbac_and_hands_kubeconfig_in_relation_secret(
    ctx, bootstrapped, api, whoami
):
    rel = kube_api_relation("tensorflow", "training", JOBS, NODES)
    other = kube_api_relation("efs-storage", "storage")
    state = with_relation(with_relation(bootstrapped, rel), other)
    out = ctx.run(ctx.on.relation_changed(rel), state)

    ns = api.get_object("/api/v1/namespaces/training")
    assert ns["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubernetes-control-plane"
    assert ns["metadata"]["labels"]["gpu-k8s.io/consumer"] == "tensorflow"
    assert api.get_object("/api/v1/namespaces/training/serviceaccounts/tensorflow") is not None
    role = api.get_object(f"{RBAC}/namespaces/training/roles/gpu-k8s-tensorflow")
    assert role["rules"] == [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "delete"]}
    ]
    binding = api.get_object(f"{RBAC}/namespaces/training/rolebindings/gpu-k8s-tensorflow")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "tensorflow", "namespace": "training"}
    ]
    assert binding["roleRef"]["kind"] == "Role"
    crole = api.get_object(f"{RBAC}/clusterroles/gpu-k8s-tensorflow")
    assert crole["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}
    ]
    assert api.get_object(f"{RBAC}/clusterrolebindings/gpu-k8s-tensorflow") is not None

    bag = out.get_relation(rel.id).local_app_data
    label = f"kube-api-{rel.id}"
    sec = next(s for s in out.secrets if s.label == label)
    assert bag == {
        "endpoint": "https://192.0.2.0:6443",
        "namespace": "training",
        "service-account": "tensorflow",
        "kubeconfig-secret-id": sec.id,
        "node-set": bag["node-set"],  # the digest of no worker node yet
    }
    assert sec.remote_grants == {rel.id: {"tensorflow"}}
    config = yaml.safe_load(sec.latest_content["kubeconfig"])
    assert whoami(config["users"][0]["user"]["token"]) == TENSORFLOW_SA
    assert config["contexts"][0]["context"]["namespace"] == "training"
    # the other consumer (no rules) got its own secret, not this one, and no Role
    other_sec = next(s for s in out.secrets if s.label == f"kube-api-{other.id}")
    assert other_sec.remote_grants == {other.id: {"efs-storage"}}
    assert api.get_object(f"{RBAC}/namespaces/storage/roles/gpu-k8s-efs-storage") is None
    assert json.loads(peer(out).local_app_data["kube-api"])[str(rel.id)]["namespace"] == "training"


@pytest.mark.parametrize(
    ("rules", "cluster_rules", "reason"),
    [
        ([{"api-groups": [""], "resources": ["pods"], "verbs": ["*"]}], [], "wildcard"),
        ([], [{"api-groups": ["*"], "resources": ["nodes"], "verbs": ["get"]}], "wildcard"),
        (
            [{"api-groups": [""], "resources": ["pods"], "verbs": ["impersonate"]}],
            [],
            "impersonate",
        ),
        (
            [
                {
                    "api-groups": ["rbac.authorization.k8s.io"],
                    "resources": ["roles"],
                    "verbs": ["create"],
                }
            ],
            [],
            "rbac.authorization.k8s.io",
        ),
        ([], [{"api-groups": [""], "resources": ["secrets"], "verbs": ["get"]}], "secrets"),
    ],
)
def test_refuses_requests_breaking_least_privilege(
    ctx, bootstrapped, api, rules, cluster_rules, reason
):
    rel = kube_api_relation("greedy", "greedy", rules, cluster_rules)
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))

    bag = out.get_relation(rel.id).local_app_data
    assert set(bag) == {"error"}
    assert reason in bag["error"]
    assert api.get_object("/api/v1/namespaces/greedy") is None
    assert api.objects(f"{RBAC}/clusterroles/gpu-k8s-greedy") == []
    assert not [s for s in out.secrets if s.label == f"kube-api-{rel.id}"]
    assert out.unit_status.message.endswith("; refused kube-api request of greedy")


def test_malformed_request_is_refused_with_field_named(ctx, bootstrapped, api):
    rel = kube_api_relation("bad", "Not_A_Label")
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))
    assert out.get_relation(rel.id).local_app_data["error"].startswith("namespace is invalid")


def test_relation_broken_removes_access_but_keeps_namespace(ctx, bootstrapped, api):
    rel = kube_api_relation("tensorflow", "training", JOBS, NODES)
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))
    api.put_object("/api/v1/namespaces/training/configmaps/results", {"data": {"k": "v"}})

    out = ctx.run(ctx.on.relation_broken(out.get_relation(rel.id)), out)

    assert api.get_object("/api/v1/namespaces/training") is not None
    assert api.get_object("/api/v1/namespaces/training/configmaps/results") is not None
    for path in (
        "/api/v1/namespaces/training/serviceaccounts/tensorflow",
        "/api/v1/namespaces/training/secrets/tensorflow-token",
        f"{RBAC}/namespaces/training/roles/gpu-k8s-tensorflow",
        f"{RBAC}/namespaces/training/rolebindings/gpu-k8s-tensorflow",
        f"{RBAC}/clusterroles/gpu-k8s-tensorflow",
        f"{RBAC}/clusterrolebindings/gpu-k8s-tensorflow",
    ):
        assert api.get_object(path) is None, path
    assert not [s for s in out.secrets if s.label == f"kube-api-{rel.id}"]
    assert json.loads(peer(out).local_app_data["kube-api"]) == {}
    assert any("namespace training is kept" in line.message for line in ctx.juju_log)


def test_changed_request_updates_rules_and_drops_unasked_cluster_role(ctx, bootstrapped, api):
    rel = kube_api_relation("tensorflow", "training", JOBS, NODES)
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))
    sec_id = out.get_relation(rel.id).local_app_data["kubeconfig-secret-id"]

    pods = [{"api-groups": [""], "resources": ["pods"], "verbs": ["get"]}]
    changed = dataclasses.replace(
        out.get_relation(rel.id),
        remote_app_data={"namespace": "training", "rules": json.dumps(pods)},
    )
    out = ctx.run(
        ctx.on.relation_changed(changed), dataclasses.replace(out, relations=[peer(out), changed])
    )

    role = api.get_object(f"{RBAC}/namespaces/training/roles/gpu-k8s-tensorflow")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert api.get_object(f"{RBAC}/clusterroles/gpu-k8s-tensorflow") is None
    assert api.get_object(f"{RBAC}/clusterrolebindings/gpu-k8s-tensorflow") is None
    assert out.get_relation(rel.id).local_app_data["kubeconfig-secret-id"] == sec_id


def test_granted_consumer_turning_greedy_loses_access(ctx, bootstrapped, api):
    rel = kube_api_relation("tensorflow", "training", JOBS)
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))
    greedy = dataclasses.replace(
        out.get_relation(rel.id),
        remote_app_data={
            "namespace": "training",
            "rules": json.dumps([{"api-groups": [""], "resources": ["*"], "verbs": ["get"]}]),
        },
    )
    out = ctx.run(
        ctx.on.relation_changed(greedy), dataclasses.replace(out, relations=[peer(out), greedy])
    )

    assert "error" in out.get_relation(rel.id).local_app_data
    assert api.get_object("/api/v1/namespaces/training/serviceaccounts/tensorflow") is None
    assert not [s for s in out.secrets if s.label == f"kube-api-{rel.id}"]


def test_consumer_without_request_yet_is_left_alone(ctx, bootstrapped, api):
    rel = testing.Relation("kube-api", remote_app_name="tensorflow")
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))
    assert out.get_relation(rel.id).local_app_data == {}


def test_consumers_follow_the_api_server_of_a_new_leader(ctx, bootstrapped, api, whoami):
    rel = kube_api_relation("tensorflow", "training", JOBS)
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))
    label = f"kube-api-{rel.id}"
    first = next(s for s in out.secrets if s.label == label).latest_content["kubeconfig"]
    assert yaml.safe_load(first)["clusters"][0]["cluster"]["server"] == "https://192.0.2.0:6443"

    # Leadership moved to a unit on another machine (same peer data, another address).
    moved = testing.Network("peers", ingress_addresses=["10.0.0.9"])
    out = ctx.run(ctx.on.leader_elected(), dataclasses.replace(out, networks={moved}))

    assert out.get_relation(rel.id).local_app_data["endpoint"] == "https://10.0.0.9:6443"
    sec = next(s for s in out.secrets if s.label == label)
    config = yaml.safe_load(sec.latest_content["kubeconfig"])
    assert config["clusters"][0]["cluster"]["server"] == "https://10.0.0.9:6443"
    assert whoami(config["users"][0]["user"]["token"]) == TENSORFLOW_SA


def test_consumers_get_every_api_server_to_fail_over_to(ctx, bootstrapped, api, whoami):
    """Review deploy.md N20: the leader's machine lost, a consumer still has a way in.

    The kubeconfig's current context is the leader's API server; each other joined unit's
    has a context of its own with the same user, namespace and CA, which is what the
    consumers' client fails over along (lib kubeclient.py, tested against two addresses
    of one fake API server in tests/functional/test_kubeclient.py).
    """
    from charms.gpu_k8s.v0.kubeconfig import load_kubeconfig, servers
    from fakes.control_plane import member

    rel = kube_api_relation("tensorflow", "training", JOBS)
    three = dataclasses.replace(
        peer(bootstrapped), peers_data={1: member(api, 1), 2: member(api, 2)}
    )
    state = dataclasses.replace(bootstrapped, relations=[three, rel])
    out = ctx.run(ctx.on.relation_changed(rel), state)
    label = f"kube-api-{rel.id}"
    text = next(s for s in out.secrets if s.label == label).latest_content["kubeconfig"]
    config = load_kubeconfig(text)
    assert servers(config) == [
        "https://192.0.2.0:6443",
        "https://10.0.0.6:6443",
        "https://10.0.0.7:6443",
    ]
    assert whoami(config["users"][0]["user"]["token"]) == TENSORFLOW_SA
    assert out.get_relation(rel.id).local_app_data["endpoint"] == "https://192.0.2.0:6443"
    again = ctx.run(ctx.on.update_status(), out)
    assert next(s for s in again.secrets if s.label == label).latest_content["kubeconfig"] == text

    # a unit leaves: the kubeconfig no longer names its API server
    two = dataclasses.replace(peer(again), peers_data={1: member(api, 1)})
    out = ctx.run(
        ctx.on.relation_departed(two, remote_unit=2),
        dataclasses.replace(again, relations=[two, rel]),
    )
    text = next(s for s in out.secrets if s.label == label).latest_content["kubeconfig"]
    assert servers(load_kubeconfig(text)) == ["https://192.0.2.0:6443", "https://10.0.0.6:6443"]


def test_consumers_hear_at_once_when_a_worker_node_joins_or_leaves(ctx, bootstrapped, api):
    from fakes.control_plane import join_workers, worker_bag, workers_relation

    rel = kube_api_relation("efs-storage", "storage", cluster_rules=NODES)
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))
    empty = out.get_relation(rel.id).local_app_data["node-set"]

    workers = workers_relation({0: worker_bag("juju-1a2b3c-3")})
    out = join_workers(ctx, out, workers, api)
    one = out.get_relation(rel.id).local_app_data["node-set"]
    assert one != empty  # a relation-changed for efs-storage: a node in a new zone

    again = ctx.run(ctx.on.update_status(), out)
    assert again.get_relation(rel.id).local_app_data["node-set"] == one  # nothing new

    bigger = dataclasses.replace(
        workers, remote_units_data={0: worker_bag("juju-1a2b3c-3"), 1: worker_bag("juju-1a2b3c-4")}
    )
    out = join_workers(
        ctx,
        dataclasses.replace(again, relations=[r for r in again.relations if r.id != workers.id]),
        bigger,
        api,
    )
    assert out.get_relation(rel.id).local_app_data["node-set"] not in (empty, one)


def test_every_consumers_namespace_but_a_provisioners_is_managed_by_kueue(ctx, bootstrapped, api):
    """Issue 29 review item 1: a consumer asking for no LocalQueues is Kueue's too.

    Only those asking for LocalQueues were; the others' Jobs ran outside every quota.
    Updated (stricter).
    """
    queues = [{"api-groups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get"]}]
    team = kube_api_relation("tensorflow", "training", queues, NODES)
    miner = kube_api_relation("miner", "miner", JOBS)
    plain = kube_api_relation("efs-storage", "storage", JOBS)  # kube-api-storage-provisioners
    state = with_relation(with_relation(with_relation(bootstrapped, team), miner), plain)
    for rel in (team, miner, plain):
        ctx.run(ctx.on.relation_changed(rel), state)
    for namespace in ("training", "miner"):
        labels = api.get_object(f"/api/v1/namespaces/{namespace}")["metadata"]["labels"]
        assert labels["gpu-k8s.io/kueue"] == "managed"  # Kueue's job and pod webhooks act here
    # the provisioner's directory Jobs run unqueued: its GPUs, if any, leave the cohort
    assert (
        "gpu-k8s.io/kueue"
        not in api.get_object("/api/v1/namespaces/storage")["metadata"]["labels"]
    )


# -- issue 29 item 1: the allow-list, through the provider, with nothing applied -----------


@pytest.mark.parametrize("path", ESCALATIONS, ids=lambda e: e.id)
def test_every_escalation_path_is_refused_naming_it_and_nothing_is_granted(
    ctx, bootstrapped, api, path
):
    rel = kube_api_relation(HOSTILE, HOSTILE, path.rules, path.cluster_rules)
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))

    bag = out.get_relation(rel.id).local_app_data
    assert set(bag) == {"error"}
    assert path.names.lower() in bag["error"].lower()
    assert api.get_object(f"/api/v1/namespaces/{HOSTILE}") is None
    assert api.objects(f"{RBAC}/clusterroles/gpu-k8s-{HOSTILE}") == []
    assert api.objects(f"{RBAC}/namespaces/{HOSTILE}") == []
    assert not [s for s in out.secrets if s.label == f"kube-api-{rel.id}"]


def test_a_second_consumer_naming_a_held_namespace_is_refused_and_the_first_keeps_it(
    ctx, bootstrapped, api
):
    first = kube_api_relation("tensorflow", "training", JOBS, NODES)
    out = ctx.run(ctx.on.relation_changed(first), with_relation(bootstrapped, first))
    intruder = kube_api_relation("intruder", "training", JOBS)
    out = ctx.run(ctx.on.relation_changed(intruder), with_relation(out, intruder))

    error = out.get_relation(intruder.id).local_app_data
    assert error == {
        "error": "namespace training is held by tensorflow; ask for another namespace"
    }
    assert "kubeconfig-secret-id" in out.get_relation(first.id).local_app_data
    ns = api.get_object("/api/v1/namespaces/training")
    assert ns["metadata"]["labels"]["gpu-k8s.io/consumer"] == "tensorflow"
    assert api.get_object("/api/v1/namespaces/training/serviceaccounts/intruder") is None
    assert api.get_object(f"{RBAC}/namespaces/training/roles/gpu-k8s-intruder") is None
    assert out.unit_status == testing.BlockedStatus(
        "kube-api: intruder asks for namespace training, which tensorflow holds: "
        "relate intruder with another namespace"
    )
    again = ctx.run(ctx.on.update_status(), out)  # the first keeps it, hook after hook
    assert "kubeconfig-secret-id" in again.get_relation(first.id).local_app_data
    assert set(again.get_relation(intruder.id).local_app_data) == {"error"}


def test_a_namespace_an_operator_made_is_not_taken(ctx, bootstrapped, api):
    api.put_object("/api/v1/namespaces/payroll", {"metadata": {"labels": {"team": "finance"}}})
    rel = kube_api_relation("intruder", "payroll", JOBS)
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))

    assert out.get_relation(rel.id).local_app_data == {
        "error": "namespace payroll is not made for a kube-api consumer; "
        "relate intruder with another namespace"
    }
    labels = api.get_object("/api/v1/namespaces/payroll")["metadata"]["labels"]
    assert labels == {"team": "finance", "kubernetes.io/metadata.name": "payroll"}
    assert out.unit_status.name == "blocked"
    assert "payroll" in out.unit_status.message


@pytest.mark.parametrize("namespace", ["gpu-k8s-system", "kueue-system", "kube-flannel"])
def test_system_namespaces_are_refused(ctx, bootstrapped, api, namespace):
    rel = kube_api_relation("intruder", namespace, JOBS)
    out = ctx.run(ctx.on.relation_changed(rel), with_relation(bootstrapped, rel))
    assert out.get_relation(rel.id).local_app_data == {
        "error": f"namespace {namespace} is reserved; ask for a namespace of your own"
    }


PV_WRITES = [
    {"api-groups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "create", "delete"]}
]


def test_only_the_storage_provisioners_the_operator_names_may_write_volumes(
    ctx, bootstrapped, api
):
    efs = kube_api_relation("efs-storage", "efs-storage", JOBS, PV_WRITES)
    other = kube_api_relation("other-storage", "other-storage", JOBS, PV_WRITES)
    state = with_relation(with_relation(bootstrapped, efs), other)
    out = ctx.run(ctx.on.relation_changed(efs), state)

    assert "kubeconfig-secret-id" in out.get_relation(efs.id).local_app_data
    assert "persistentvolume creation" in out.get_relation(other.id).local_app_data["error"]
    # the claims policy names the provisioners granted, and follows them (admission_policies)
    assert _claims_fenced(api) == "['system:serviceaccount:efs-storage:efs-storage']"

    out = ctx.run(
        ctx.on.config_changed(),
        dataclasses.replace(out, config={"kube-api-storage-provisioners": "other-storage"}),
    )
    assert "persistentvolume creation" in out.get_relation(efs.id).local_app_data["error"]
    assert api.get_object(f"{RBAC}/clusterroles/gpu-k8s-efs-storage") is None
    assert "kubeconfig-secret-id" in out.get_relation(other.id).local_app_data
    assert _claims_fenced(api) == "['system:serviceaccount:other-storage:other-storage']"
    out = ctx.run(ctx.on.relation_broken(out.get_relation(other.id)), out)
    assert _claims_fenced(api) == "[]"


def test_a_provisioner_is_fenced_to_the_consumers_it_publishes_and_told_once_applied(
    ctx, bootstrapped, api
):
    """Issue 29: the control plane does not see shared-storage; efs-storage says whom it serves.

    The policy gpu-k8s-efs-within-consumers names each consumer's granted namespace and
    access point; the answer (storage-consumers) is written once it is applied. A consumer
    not granted a namespace, or an access point published twice, is admitted to none.
    """
    team = kube_api_relation("tensorflow", "training", JOBS, NODES)
    serving = kube_api_relation("tf-serving", "serving", JOBS, NODES)
    consumers = {
        "tensorflow": "fsap-0123456789abcdef0",
        "tf-serving": "",
        "not-granted": "fsap-0aaaaaaaaaaaaaaaa",
    }
    efs = kube_api_relation(
        "efs-storage",
        "efs-storage",
        JOBS,
        PV_WRITES,
        **{"storage-consumers": json.dumps(consumers)},
    )
    state = with_relation(with_relation(with_relation(bootstrapped, team), serving), efs)
    out = ctx.run(ctx.on.relation_changed(efs), state)

    expected = {"tensorflow": "fsap-0123456789abcdef0", "tf-serving": ""}
    answer = out.get_relation(efs.id).local_app_data
    assert json.loads(answer["storage-consumers"]) == expected
    assert "kubeconfig-secret-id" in answer
    assert _served(api) == {
        "system:serviceaccount:efs-storage:efs-storage/training": "fsap-0123456789abcdef0",
        "system:serviceaccount:efs-storage:efs-storage/serving": "",
    }
    assert "storage-consumers" not in out.get_relation(team.id).local_app_data
    # a consumer added later is admitted in the hook that reads it; the grant is not redone
    requests = len(api.requests)
    consumers["tf-serving"] = "fsap-0123456789abcdef0"  # the same access point twice
    changed = dataclasses.replace(
        out.get_relation(efs.id),
        remote_app_data={
            **out.get_relation(efs.id).remote_app_data,
            "storage-consumers": json.dumps(consumers),
        },
    )
    out = ctx.run(
        ctx.on.relation_changed(changed),
        dataclasses.replace(
            out, relations=[*[r for r in out.relations if r.id != efs.id], changed]
        ),
    )
    assert json.loads(out.get_relation(efs.id).local_app_data["storage-consumers"]) == {}
    assert _served(api) == {}
    writes = [r for r in api.requests[requests:] if r.method != "GET"]
    reads = "gpu-k8s%3Aprovisioner-pods%3Aefs-storage"  # its pod reads where it served
    assert not [r for r in writes if ("rbac" in r.path and reads not in r.path)], writes
    assert not [r for r in writes if "/token" in r.path], writes
    for ns in ("training", "serving"):
        roles = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/"
        assert api.get_object(f"{roles}gpu-k8s:provisioner-pods:efs-storage") is None


def _served(api) -> dict:
    policy = api.get_object(
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
        "gpu-k8s-efs-within-consumers"
    )
    (served, *_) = policy["spec"]["variables"]
    return ast.literal_eval(served["expression"])


def _claims_fenced(api) -> str:
    """The usernames gpu-k8s-efs-own-claims matches (its one matchCondition's list)."""
    policy = api.get_object(
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpu-k8s-efs-own-claims"
    )
    (condition,) = policy["spec"]["matchConditions"]
    return condition["expression"].removeprefix("request.userInfo.username in ")


def _pod_security(api, namespace):
    labels = api.get_object(f"/api/v1/namespaces/{namespace}")["metadata"]["labels"]
    return {k: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/")}


def _levels(level):
    return {
        **{f"pod-security.kubernetes.io/{mode}": level for mode in ("enforce", "warn", "audit")},
        **{
            f"pod-security.kubernetes.io/{m}-version": "v1.36"
            for m in ("enforce", "warn", "audit")
        },
    }


def test_a_teams_namespace_enforces_restricted_and_a_provisioners_baseline(ctx, bootstrapped, api):
    """Issue 29 item 3: the grant labels the namespace; the fake's PodSecurity then bites."""
    pods = [{"api-groups": [""], "resources": ["pods"], "verbs": ["create"]}]
    team = kube_api_relation("tensorflow", "training", pods, NODES)
    efs = kube_api_relation("efs-storage", "efs-storage", JOBS, PV_WRITES)
    state = with_relation(with_relation(bootstrapped, team), efs)
    out = ctx.run(ctx.on.relation_changed(team), state)

    assert _pod_security(api, "training") == _levels("restricted")
    assert _pod_security(api, "efs-storage") == _levels("baseline")
    import rbac  # the workers' grant, applied when the first worker joins

    (validation,) = [
        m["metadata"]
        for m in rbac.manifests(rbac.worker_grant())
        if m["kind"] == "Namespace" and m["metadata"]["name"] == "gpu-k8s-system"
    ]
    assert {k: v for k, v in validation["labels"].items() if "pod-security" in k} == _levels(
        "baseline"
    )

    # with the team's own token, a root pod is refused in its namespace, as by kube-apiserver
    bag = out.get_relation(team.id).local_app_data
    assert "kubeconfig-secret-id" in bag
    from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "root", "namespace": "training"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]},
    }
    token = granted_token(out, team)
    with Kube.from_kubeconfig(api.kubeconfig(token), backoff=0.01) as kube:
        with pytest.raises(KubeError) as refused:
            kube.request("POST", "/api/v1/namespaces/training/pods", body=pod)
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:v1.36"' in str(refused.value)


def test_a_namespace_granted_before_pod_security_is_labelled_once(ctx, bootstrapped, api):
    """Consumers granted by an earlier revision: the new level changes the grant's digest."""
    team = kube_api_relation("tensorflow", "training", JOBS, NODES)
    out = ctx.run(ctx.on.relation_changed(team), with_relation(bootstrapped, team))
    namespace = api.get_object("/api/v1/namespaces/training")
    for key in _levels("restricted"):
        del namespace["metadata"]["labels"][key]
    api.put_object("/api/v1/namespaces/training", namespace)  # what an earlier revision left
    peer_bag = peer(out).local_app_data
    granted = json.loads(peer_bag["kube-api"])
    # the digest the earlier revision recorded: the request and the endpoint, no level
    from charms.gpu_k8s.v0 import kube_objects
    from charms.gpu_k8s.v0.kube_api import RequirerAppData

    ask = RequirerAppData.model_validate(dict(team.remote_app_data))
    endpoint = out.get_relation(team.id).local_app_data["endpoint"]
    granted[str(team.id)]["fingerprint"] = kube_objects.fingerprint(ask.dump(), endpoint)
    earlier = {**peer_bag, "kube-api": json.dumps(granted)}
    out = dataclasses.replace(
        out,
        relations=[
            dataclasses.replace(peer(out), local_app_data=earlier),
            *[r for r in out.relations if r.id != peer(out).id],
        ],
    )
    ctx.run(ctx.on.update_status(), out)
    assert _pod_security(api, "training") == _levels("restricted")


def test_a_grant_the_api_server_refuses_refuses_that_consumer_alone(ctx, bootstrapped, api):
    """One consumer's Role the API server will not take never holds up the others."""
    bad = kube_api_relation("odd", "odd", JOBS)
    good = kube_api_relation("tensorflow", "training", JOBS, NODES)
    state = with_relation(with_relation(bootstrapped, bad), good)
    api.inject(
        status=422,
        times=1,
        method="PATCH",
        path_prefix=f"{RBAC}/namespaces/odd/roles/",
        message='Role.rbac.authorization.k8s.io "gpu-k8s-odd" is invalid: rules[0]: Invalid',
    )
    out = ctx.run(ctx.on.relation_changed(bad), state)

    error = out.get_relation(bad.id).local_app_data["error"]
    assert error == (
        "the API server refused the grant of odd: Role.rbac.authorization.k8s.io "
        '"gpu-k8s-odd" is invalid: rules[0]: Invalid'
    )
    assert "kubeconfig-secret-id" in out.get_relation(good.id).local_app_data
    assert out.unit_status.name == "blocked"
    assert "kube-api: the API server refused the grant of odd" in out.unit_status.message
    # an unwell API server is no refusal: everyone waits and nothing is refused
    api.inject(status=503, times=1, method="PATCH", path_prefix=f"{RBAC}/namespaces/odd/roles/")
    again = ctx.run(ctx.on.relation_changed(bad), state)
    assert "error" not in again.get_relation(bad.id).local_app_data


# review44a G1: one hostile consumer's request must not stop the others' grants and renewals


def test_a_huge_request_is_refused_naming_its_bound_and_the_others_are_granted_and_renewed(
    ctx, clock, bootstrapped, api, whoami
):
    """60,000 one-name rules: a 6 MB databag value and a Role kube-apiserver answers 413."""
    rule = {"api-groups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    huge = kube_api_relation("hoarder", "hoarder", [rule] * 60_000)
    good = kube_api_relation("tensorflow", "training", JOBS, NODES)
    state = with_relation(with_relation(bootstrapped, huge), good)  # the huge one first
    out = ctx.run(ctx.on.relation_changed(good), state)

    error = out.get_relation(huge.id).local_app_data["error"]
    assert error.startswith("rules is invalid (")
    assert "65536 characters" in error  # the bound, named
    assert api.get_object("/api/v1/namespaces/hoarder") is None
    assert out.unit_status.message.endswith("refused kube-api request of hoarder")
    first = granted_token(out, good)
    assert whoami(first) == TENSORFLOW_SA
    # the rest of the reconcile ran: the team's namespace is fenced
    fence = "/apis/networking.k8s.io/v1/namespaces/training/networkpolicies/"
    assert api.get_object(f"{fence}gpu-k8s-default-deny-ingress") is not None

    clock.advance(hours=33)  # under a third of its token's life left: renewed
    out = ctx.run(ctx.on.update_status(), out)
    renewed = granted_token(out, good)
    assert renewed != first and whoami(renewed) == TENSORFLOW_SA
    assert "error" in out.get_relation(huge.id).local_app_data


def _no_backoff(monkeypatch):
    """The client's retries, taken without their backoff's waits (test_bootstrap does too)."""
    from charms.gpu_k8s.v0 import kubeclient

    real = kubeclient._retry
    monkeypatch.setattr(
        kubeclient, "_retry", lambda retries, backoff, **kw: real(retries, 0.0, **kw)
    )


def test_a_role_etcd_finds_too_large_refuses_that_consumer_alone(
    ctx, bootstrapped, api, monkeypatch
):
    """kube-apiserver answers etcd's refusal as a 500 (kubernetes#112152): still its own."""
    _no_backoff(monkeypatch)
    bad = kube_api_relation("odd", "odd", JOBS)
    good = kube_api_relation("tensorflow", "training", JOBS, NODES)
    state = with_relation(with_relation(bootstrapped, bad), good)
    roles = f"{RBAC}/namespaces/odd/roles/"
    # every try of the client's (a first and 5 retries)
    api.inject(500, times=6, method="PATCH", path_prefix=roles, message=ETCD_TOO_LARGE)
    out = ctx.run(ctx.on.relation_changed(bad), state)

    assert out.get_relation(bad.id).local_app_data["error"] == (
        "the API server refused the grant of odd: etcdserver: request is too large"
    )
    assert "kubeconfig-secret-id" in out.get_relation(good.id).local_app_data
    assert out.unit_status.name == "blocked"
    assert "kube-api: the API server refused the grant of odd" in out.unit_status.message


def test_an_api_error_on_one_grant_holds_up_no_other_and_is_reported_once_at_the_end(
    ctx, bootstrapped, api, monkeypatch
):
    """Any other error skips that consumer: the others are granted, the reconcile goes on."""
    _no_backoff(monkeypatch)
    bad = kube_api_relation("odd", "odd", JOBS)
    good = kube_api_relation("tensorflow", "training", JOBS, NODES)
    state = with_relation(bootstrapped, bad)
    state = ctx.run(ctx.on.relation_changed(bad), state)  # granted once
    before = granted_token(state, bad)
    state = with_relation(state, good)
    changed = json.dumps([*JOBS, {**JOBS[0], "resources": ["cronjobs"]}])
    state = dataclasses.replace(
        state,
        relations=[
            dataclasses.replace(r, remote_app_data={**r.remote_app_data, "rules": changed})
            if r.id == bad.id
            else r
            for r in state.relations
        ],
    )
    api.inject(503, times=6, method="PATCH", path_prefix=f"{RBAC}/namespaces/odd/roles/")
    out = ctx.run(ctx.on.relation_changed(good), state)

    assert "kubeconfig-secret-id" in out.get_relation(good.id).local_app_data
    fence = "/apis/networking.k8s.io/v1/namespaces/training/networkpolicies/"
    assert api.get_object(f"{fence}gpu-k8s-default-deny-ingress") is not None
    assert out.unit_status.name == "waiting"
    assert out.unit_status.message == (
        "kube-api grant of odd: Kubernetes API unavailable (503 ServiceUnavailable);"
        " retrying on the next event"
    )
    # the skipped one keeps what it had, is not refused, and is granted once the API answers
    assert "error" not in out.get_relation(bad.id).local_app_data
    assert granted_token(out, bad) == before
    again = ctx.run(ctx.on.update_status(), out)
    role = api.get_object(f"{RBAC}/namespaces/odd/roles/gpu-k8s-odd")
    assert role["rules"][-1]["resources"] == ["cronjobs"]
    assert again.unit_status.name == "active"


# review44a G9: a consumer's objects are named after its application; two names are taken


@pytest.mark.parametrize("app", ["worker", "default"])
def test_a_consumer_with_a_reserved_name_is_refused_naming_it(ctx, bootstrapped, api, app):
    rel = kube_api_relation(app, "team", JOBS, NODES)
    good = kube_api_relation("tensorflow", "training", JOBS, NODES)
    out = ctx.run(
        ctx.on.relation_changed(rel), with_relation(with_relation(bootstrapped, rel), good)
    )

    error = out.get_relation(rel.id).local_app_data["error"]
    assert error.startswith(f"application name {app} is reserved (")
    assert error.endswith(
        ": deploy the consumer under another name, or consume its offer under another"
    )
    assert out.unit_status.name == "blocked"
    assert f"kube-api: application name {app} is reserved" in out.unit_status.message
    assert api.get_object("/api/v1/namespaces/team") is None
    assert api.get_object(f"{RBAC}/clusterroles/gpu-k8s-{app}") is None
    assert "kubeconfig-secret-id" in out.get_relation(good.id).local_app_data


def test_a_consumer_named_worker_granted_before_is_revoked_and_the_workers_grant_made_whole(
    ctx, bootstrapped, api, whoami, monkeypatch
):
    """A consumer `worker` an earlier revision granted goes; the workers' grant is theirs.

    On a cluster an earlier revision made, such a consumer had replaced the workers'
    ClusterRole gpu-k8s-worker and its binding (review44a G9): refused now, its grant goes,
    and the workers' shared grant, which still stands, is made whole again.
    """
    import rbac

    from charms.gpu_k8s.v0.kubeclient import Kube

    api.put_object("/api/v1/nodes/w0", node("w0"))
    workers = workers_relation({0: worker_bag("w0", identity=False)})
    state = with_relation(earlier_revision_cluster(bootstrapped), workers)
    state = ctx.run(ctx.on.relation_changed(workers, remote_unit=0), state)
    shared = yaml.safe_load(secret(state, JOIN_LABEL).latest_content["kubeconfig"])
    shared_token = shared["users"][0]["user"]["token"]
    earlier = monkeypatch.context()
    with earlier as m:  # an earlier revision, which reserved no name
        m.setattr(rbac, "RESERVED_CONSUMERS", {})
        consumer = kube_api_relation("worker", "team", JOBS, NODES)
        state = ctx.run(ctx.on.relation_changed(consumer), with_relation(state, consumer))
    consumer_token = granted_token(state, consumer)
    crole = api.get_object(f"{RBAC}/clusterroles/gpu-k8s-worker")
    assert crole["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}
    ]

    out = ctx.run(ctx.on.update_status(), state)

    assert (
        out.get_relation(consumer.id)
        .local_app_data["error"]
        .startswith("application name worker is reserved (")
    )
    assert whoami(consumer_token) is None  # its ServiceAccount is gone
    assert api.get_object(f"{RBAC}/namespaces/team/roles/gpu-k8s-worker") is None
    crole = api.get_object(f"{RBAC}/clusterroles/gpu-k8s-worker")
    assert crole["rules"] == rbac.WORKER_CLUSTER_RULES
    binding = api.get_object(f"{RBAC}/clusterrolebindings/gpu-k8s-worker")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-k8s-worker", "namespace": "kube-system"}
    ]
    with Kube.from_kubeconfig(api.kubeconfig(token=shared_token), retries=0) as kube:
        kube.patch("v1", "Node", "w0", {"metadata": {"labels": {"checked": "yes"}}})


def test_a_token_not_issued_yet_skips_that_consumer_only(ctx, bootstrapped, api, monkeypatch):
    """A TokenRequest answered without a token waits for that consumer alone (size44 note)."""
    real = api.auth.token_request

    def without_token(namespace: str, name: str, request):
        answer = real(namespace, name, request)
        if name == "odd":  # as rbac.request_token reads an answer with no status.token
            answer["status"] = {}
        return answer

    monkeypatch.setattr(api.auth, "token_request", without_token)
    bad = kube_api_relation("odd", "odd", JOBS)
    good = kube_api_relation("tensorflow", "training", JOBS, NODES)
    out = ctx.run(
        ctx.on.relation_changed(bad), with_relation(with_relation(bootstrapped, bad), good)
    )

    assert "kubeconfig-secret-id" in out.get_relation(good.id).local_app_data
    fence = "/apis/networking.k8s.io/v1/namespaces/training/networkpolicies/"
    assert api.get_object(f"{fence}gpu-k8s-default-deny-ingress") is not None
    assert out.unit_status == testing.WaitingStatus(
        "kube-api grant of odd: waiting for the token of odd"
    )
    assert "error" not in out.get_relation(bad.id).local_app_data
    monkeypatch.setattr(api.auth, "token_request", real)
    again = ctx.run(ctx.on.update_status(), out)
    assert "kubeconfig-secret-id" in again.get_relation(bad.id).local_app_data
    assert again.unit_status.name == "active"
