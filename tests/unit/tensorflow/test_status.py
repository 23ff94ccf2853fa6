"""Unit status from the two relations, the access the charm asks for, and its config."""

from __future__ import annotations

import json

import pytest
from conftest import NS, kube_api_relation, kubeconfig_secret, storage_relation
from ops import testing

from charms.gpu_k8s.v0.kube_api import RequirerAppData, check_policy


def test_blocked_without_any_relation_names_both(ctx):
    out = ctx.run(ctx.on.update_status(), testing.State(leader=True))
    assert out.unit_status == testing.BlockedStatus(
        "missing relation kube-api and shared-storage: integrate with "
        "kubernetes-control-plane and efs-storage"
    )


def test_blocked_names_the_missing_shared_storage(ctx, api):
    secret = kubeconfig_secret(api)
    state = testing.State(
        leader=True, relations=[kube_api_relation(api, secret)], secrets=[secret]
    )
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status == testing.BlockedStatus(
        "missing relation shared-storage: integrate with efs-storage"
    )


def test_blocked_names_the_missing_kube_api(ctx):
    out = ctx.run(
        ctx.on.update_status(), testing.State(leader=True, relations=[storage_relation()])
    )
    assert out.unit_status == testing.BlockedStatus(
        "missing relation kube-api: integrate with kubernetes-control-plane"
    )


def test_waiting_until_control_plane_grants_access(ctx, api):
    state = testing.State(
        leader=True, relations=[kube_api_relation(api, None), storage_relation()]
    )
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status == testing.WaitingStatus(
        "kube-api: waiting for the control plane to grant Kubernetes access"
    )


def test_waiting_until_claim_is_ready(ctx, api):
    secret = kubeconfig_secret(api)
    state = testing.State(
        leader=True,
        secrets=[secret],
        relations=[kube_api_relation(api, secret), storage_relation(False)],
    )
    out = ctx.run(ctx.on.update_status(), state)
    assert isinstance(out.unit_status, testing.WaitingStatus)
    assert out.unit_status.message.startswith("shared-storage: waiting for claim")


def test_active_when_both_ready(ctx, state):
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status == testing.ActiveStatus(
        f"Ready: namespace {NS}, claim efs-storage-tensorflow, image tensorflow/tensorflow:2.21.0"
    )


def test_the_status_says_what_capped_the_teams_quota_ask(ctx, state):
    """Issue 29: the control plane's `quota-capped` answer shows in this team's status.

    A control plane before it publishes nothing (`test_active_when_both_ready`); once the
    ask fits (the field is gone), the status says nothing of it again.
    """
    import dataclasses

    rel = next(r for r in state.relations if r.endpoint == "kube-api")
    capped = [
        {"field": "gpu-quota", "flavor": "gpu-nvidia-a10g", "asked": "8", "given": "3"}
        | {"by": "fair-share"},
        {"field": "memory-quota", "flavor": "cpu", "asked": "64Gi", "given": "32Gi"}
        | {"by": "team-quotas"},
    ]
    told = dataclasses.replace(
        rel, remote_app_data={**rel.remote_app_data, "quota-capped": json.dumps(capped)}
    )
    out = ctx.run(
        ctx.on.relation_changed(told),
        dataclasses.replace(
            state, relations=[told, *[r for r in state.relations if r is not rel]]
        ),
    )
    assert out.unit_status == testing.ActiveStatus(
        f"Ready: namespace {NS}, claim efs-storage-tensorflow, image tensorflow/tensorflow:2.21.0"
        "; quota capped: gpu-quota 8 given 3 on gpu-nvidia-a10g (a fair share: team-quotas of "
        "the control plane names none for it); memory-quota 64Gi given 32Gi (its allowance "
        "in team-quotas of the control plane)"
    )
    fits = dataclasses.replace(told, remote_app_data=rel.remote_app_data)
    out = ctx.run(
        ctx.on.relation_changed(fits),
        dataclasses.replace(
            out, relations=[fits, *[r for r in out.relations if r.endpoint != "kube-api"]]
        ),
    )
    assert out.unit_status.message.endswith("image tensorflow/tensorflow:2.21.0")


def test_invalid_config_blocks_with_the_fix(ctx, state):
    import dataclasses

    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config={"job-ttl": 0}))
    assert out.unit_status == testing.BlockedStatus(
        "job-ttl: must be at least 1 (hours a finished job is kept)"
    )


def test_leader_asks_for_least_privilege_access_in_its_namespace(ctx, api):
    relation = kube_api_relation(api, None)
    out = ctx.run(
        ctx.on.relation_created(relation), testing.State(leader=True, relations=[relation])
    )
    bag = out.get_relation(relation.id).local_app_data
    assert bag["namespace"] == NS
    rules = json.loads(bag["rules"])
    granted = {
        (g, r): set(rule["verbs"])
        for rule in rules
        for g in rule["api-groups"]
        for r in rule["resources"]
    }
    assert granted[("batch", "jobs")] == {"get", "list", "create", "patch", "delete"}
    assert granted[("", "pods/log")] == {"get"}
    assert granted[("", "persistentvolumeclaims")] == {"get"}
    # only the image pull Secret, in its own namespace: no list or watch of others' secrets
    assert granted[("", "secrets")] == {"get", "create", "patch", "delete"}
    cluster = json.loads(bag["cluster-rules"])
    # issue 29: no cluster-wide pods list (other teams' pod specs), and no ClusterQueue
    # write, not even its own: the control plane writes it from the quota asked for (item 6;
    # it once asked for get/create/patch/delete on team-<namespace>, stricter now)
    assert {
        (r["resources"][0], tuple(r["verbs"]), tuple(r.get("resource-names", ()))) for r in cluster
    } == {
        ("nodes", ("get", "list"), ()),
        ("resourceflavors", ("get", "list"), ()),
        # issue 31 item 2 (N4): the cohort's whole quota, to refuse jobs it can never give
        ("cohorts", ("get",), ("gpu-k8s",)),
        ("clusterqueues", ("get", "list"), ()),
    }
    assert not any("*" in v for rule in rules + cluster for v in rule["verbs"])
    request = RequirerAppData.model_validate(
        {"namespace": NS, "rules": rules, "cluster-rules": cluster}
    )
    assert check_policy(request) is None


def test_storage_request_names_the_namespace_and_its_own_directory_and_user(ctx):
    relation = testing.Relation("shared-storage", remote_app_name="efs-storage")
    out = ctx.run(
        ctx.on.relation_created(relation), testing.State(leader=True, relations=[relation])
    )
    assert out.get_relation(relation.id).local_app_data == {
        "namespace": NS,
        "directory": "tensorflow",
        "uid": "1000",
        "gid": "1000",
    }
    state = testing.State(leader=True, relations=[relation], config={"run-as": "2000:3000"})
    out = ctx.run(ctx.on.config_changed(), state)
    assert out.get_relation(relation.id).local_app_data["uid"] == "2000"
    assert out.get_relation(relation.id).local_app_data["gid"] == "3000"


def test_run_as_root_blocks_and_asks_for_the_default_meanwhile(ctx):
    """Pod Security restricted refuses pods that run as uid 0: so does `run-as`."""
    relation = testing.Relation("shared-storage", remote_app_name="efs-storage")
    state = testing.State(leader=True, relations=[relation], config={"run-as": "0:0"})
    out = ctx.run(ctx.on.config_changed(), state)
    assert out.unit_status == testing.BlockedStatus(
        "run-as: uid 0 (root) is refused: the namespace enforces Pod Security restricted; "
        "use a non-root uid:gid such as 1000:1000"
    )
    assert out.get_relation(relation.id).local_app_data["uid"] == "1000"


@pytest.mark.parametrize("run_as", ["1000", "a:b", "-1:0", "1000:", f"{2**32}:0"])
def test_a_malformed_run_as_blocks_and_asks_for_the_default_meanwhile(ctx, run_as):
    relation = testing.Relation("shared-storage", remote_app_name="efs-storage")
    state = testing.State(leader=True, relations=[relation], config={"run-as": run_as})
    out = ctx.run(ctx.on.config_changed(), state)
    assert out.unit_status.name == "blocked"
    assert "run-as" in out.unit_status.message
    assert out.get_relation(relation.id).local_app_data["uid"] == "1000"


@pytest.mark.parametrize("event", ["update_status", "config_changed", "upgrade_charm"])
def test_hooks_twice_leave_the_same_state(ctx, state, api, event):
    first = ctx.run(getattr(ctx.on, event)(), state)
    objects = api.objects("/")
    writes = [(r.method, r.path) for r in api.requests if r.method != "GET"]
    # the first hook makes the team's LocalQueue, and nothing else (its ClusterQueue is the
    # control plane's)
    assert {p.rsplit("/", 2)[-2] for _, p in writes} <= {"localqueues"}
    second = ctx.run(getattr(ctx.on, event)(), first)
    assert api.objects("/") == objects
    assert second.unit_status == first.unit_status
    assert [(r.method, r.path) for r in api.requests if r.method != "GET"] == writes


def test_the_cluster_stays_reachable_when_the_first_api_server_is_lost(ctx, api):
    """The first API server's machine is lost: the charm goes on through the next.

    Review deploy.md N20: the kubeconfig names every API server (the control plane's
    rbac.kubeconfig: one context each, same user, namespace and CA).
    """
    import yaml
    from conftest import TOKEN

    first, second = api.serve_also(), api.serve_also()
    try:
        clusters = [
            {"name": f"c{i}", "cluster": {"server": u.url}} for i, u in enumerate([first, second])
        ]
        contexts = [
            {
                "name": f"x{i}",
                "context": {"cluster": f"c{i}", "user": "tensorflow", "namespace": NS},
            }
            for i in range(2)
        ]
        text = yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": clusters,
                "users": [{"name": "tensorflow", "user": {"token": TOKEN}}],
                "contexts": contexts,
                "current-context": "x0",
            }
        )
        secret = testing.Secret(tracked_content={"kubeconfig": text})
        state = testing.State(
            leader=True,
            relations=[kube_api_relation(api, secret), storage_relation()],
            secrets=[secret],
        )
        first.stop()
        sent = len(api.requests)
        out = ctx.run(ctx.on.update_status(), state)
        image = "tensorflow/tensorflow:2.21.0"
        assert out.unit_status == testing.ActiveStatus(
            f"Ready: namespace {NS}, claim efs-storage-tensorflow, image {image}"
        )
        assert len(api.requests) > sent  # answered by the second address
    finally:
        first.stop()
        second.stop()
