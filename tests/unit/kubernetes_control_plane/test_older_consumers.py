"""Consumers of an earlier revision after the control plane is refreshed (docs/how-to/upgrade.md).

The page refreshes every team before the control plane and efs-storage right after it.
These show why, with what those older charms ask (tests/older_charms.py): a team whose
charm still asks to write its ClusterQueue is refused its whole request and loses its
grant; an efs-storage that publishes no consumers keeps its grant, but the policy
gpu-k8s-efs-within-consumers names none of its consumers, so its new claims are refused
(tests/functional/test_admission_policies.py shows the refusal).
"""

from __future__ import annotations

import ast
import dataclasses
import json

import pytest
from charm_modules import load
from older_charms import old_efs_cluster_rules, old_tensorflow_cluster_rules
from ops import testing

from fakes.control_plane import kube_api_relation, peer, peers

RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture
def bootstrapped(ctx, machine):
    return ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))


def _refreshed(out: testing.State, rel: testing.Relation, remote: dict) -> testing.State:
    """`out` with the consumer's databag replaced by `remote`."""
    changed = dataclasses.replace(out.get_relation(rel.id), remote_app_data=remote)
    return dataclasses.replace(
        out, relations=[*[r for r in out.relations if r.id != rel.id], changed]
    )


def test_a_team_charm_that_still_asks_to_write_its_cluster_queue_loses_its_grant(
    ctx, bootstrapped, api
):
    tensorflow = load("tensorflow", "literals")
    rules = tensorflow.NAMESPACED_RULES
    rel = kube_api_relation("team-b", "team-b", rules, tensorflow.cluster_rules("team-b"))
    state = dataclasses.replace(bootstrapped, relations=[*bootstrapped.relations, rel])
    out = ctx.run(ctx.on.relation_changed(rel), state)
    assert "kubeconfig-secret-id" in out.get_relation(rel.id).local_app_data
    assert api.get_object("/api/v1/namespaces/team-b/serviceaccounts/team-b") is not None

    older = kube_api_relation("team-b", "team-b", rules, old_tensorflow_cluster_rules("team-b"))
    out = ctx.run(ctx.on.upgrade_charm(), _refreshed(out, rel, older.remote_app_data))

    answer = out.get_relation(rel.id).local_app_data
    assert set(answer) == {"error"}
    assert "clusterqueues refused: clusterqueues writes" in answer["error"]
    assert api.get_object("/api/v1/namespaces/team-b/serviceaccounts/team-b") is None
    assert api.get_object(f"{RBAC}/namespaces/team-b/roles/gpu-k8s-team-b") is None
    assert api.get_object(f"{RBAC}/clusterroles/gpu-k8s-team-b") is None
    assert not [s for s in out.secrets if s.label == f"kube-api-{rel.id}"]
    assert out.unit_status.message.endswith("; refused kube-api request of team-b")
    # the namespace and what is in it stay (rbac.remove)
    assert api.get_object("/api/v1/namespaces/team-b") is not None


def test_an_efs_storage_that_publishes_no_consumers_keeps_its_grant_and_serves_none(
    ctx, bootstrapped, api
):
    efs = load("efs-storage", "literals")
    # no storage-consumers: that revision published none (and read pods cluster-wide)
    older = old_efs_cluster_rules(efs.CLUSTER_RULES)
    rel = kube_api_relation("efs-storage", "efs-storage", efs.NAMESPACED_RULES, older)
    team = kube_api_relation("tensorflow", "tensorflow")
    state = dataclasses.replace(bootstrapped, relations=[*bootstrapped.relations, team, rel])

    out = ctx.run(ctx.on.upgrade_charm(), state)

    answer = out.get_relation(rel.id).local_app_data
    assert "kubeconfig-secret-id" in answer and "error" not in answer
    assert json.loads(peer(out).local_app_data["kube-api"])  # its grant is recorded
    policy = api.get_object(
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
        "gpu-k8s-efs-within-consumers"
    )
    (served, *_) = policy["spec"]["variables"]
    assert ast.literal_eval(served["expression"]) == {}


def test_an_efs_storage_that_still_asks_to_read_pods_keeps_its_grant_without_them(
    ctx, bootstrapped, api
):
    """Review44a G8: its cluster-wide pod reads are left out, the rest of its grant stays.

    It lists pods in the namespace of each consumer it serves (a Role there), until it
    serves that consumer no more.
    """
    efs = load("efs-storage", "literals")
    older = old_efs_cluster_rules(efs.CLUSTER_RULES)
    served = json.dumps({"tensorflow": ""})
    rel = kube_api_relation(
        "efs-storage", "efs-storage", efs.NAMESPACED_RULES, older, **{"storage-consumers": served}
    )
    team = kube_api_relation("tensorflow", "training")
    state = dataclasses.replace(bootstrapped, relations=[*bootstrapped.relations, team, rel])

    out = ctx.run(ctx.on.upgrade_charm(), state)

    answer = out.get_relation(rel.id).local_app_data
    assert "kubeconfig-secret-id" in answer and "error" not in answer
    assert json.loads(answer["storage-consumers"]) == {"tensorflow": ""}
    cluster_role = api.get_object(f"{RBAC}/clusterroles/gpu-k8s-efs-storage")
    assert [r for r in cluster_role["rules"] if "pods" in r["resources"]] == []
    name = "gpu-k8s:provisioner-pods:efs-storage"
    role = api.get_object(f"{RBAC}/namespaces/training/roles/{name}")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    binding = api.get_object(f"{RBAC}/namespaces/training/rolebindings/{name}")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "efs-storage", "namespace": "efs-storage"}
    ]

    none = {**rel.remote_app_data, "storage-consumers": "{}"}
    out = ctx.run(ctx.on.update_status(), _refreshed(out, rel, none))
    assert api.get_object(f"{RBAC}/namespaces/training/roles/{name}") is None
    assert api.get_object(f"{RBAC}/namespaces/training/rolebindings/{name}") is None
    assert "kubeconfig-secret-id" in out.get_relation(rel.id).local_app_data


def test_a_provisioners_pod_reads_go_with_its_consumer_and_with_its_own_grant(
    ctx, bootstrapped, api
):
    efs = load("efs-storage", "literals")
    served = json.dumps({"tensorflow": "", "notebook": ""})
    rel = kube_api_relation(
        "efs-storage",
        "efs-storage",
        efs.NAMESPACED_RULES,
        efs.CLUSTER_RULES,
        **{"storage-consumers": served},
    )
    team = kube_api_relation("tensorflow", "training")
    other = kube_api_relation("notebook", "research")
    relations = [*bootstrapped.relations, team, other, rel]
    out = ctx.run(ctx.on.upgrade_charm(), dataclasses.replace(bootstrapped, relations=relations))
    name = "gpu-k8s:provisioner-pods:efs-storage"
    for ns in ("training", "research"):
        assert api.get_object(f"{RBAC}/namespaces/{ns}/roles/{name}") is not None, ns

    # notebook leaves kube-api: its namespace (kept, with its data) is served no more
    out = ctx.run(ctx.on.relation_broken(out.get_relation(other.id)), out)
    out = dataclasses.replace(out, relations=[r for r in out.relations if r.id != other.id])
    assert api.get_object(f"{RBAC}/namespaces/research/roles/{name}") is None
    assert api.get_object(f"{RBAC}/namespaces/training/roles/{name}") is not None

    # efs-storage leaves: nothing of its reads is left
    out = ctx.run(ctx.on.relation_broken(out.get_relation(rel.id)), out)
    assert api.get_object(f"{RBAC}/namespaces/training/roles/{name}") is None
    assert api.get_object(f"{RBAC}/namespaces/training/rolebindings/{name}") is None
