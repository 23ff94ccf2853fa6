"""The kube-api interface library: requests, policy, grants and refusals."""

from __future__ import annotations

import json

import ops
import pydantic
import pytest
from kube_api_escalations import LARGEST, OVERSIZED
from ops import testing

from charms.gpu_k8s.v0.databag import explain
from charms.gpu_k8s.v0.kube_api import (
    MAX_ITEMS,
    MAX_JSON,
    MAX_RULES,
    MAX_STORAGE_JSON,
    MAX_WORD,
    KubeApiProvider,
    KubeApiRequirer,
    RequirerAppData,
    check_policy,
)

NODES = {"api-groups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}
PVS = {"api-groups": [""], "resources": ["persistentvolumes"], "verbs": ["create", "delete"]}


class Consumer(ops.CharmBase):
    def __init__(self, framework):
        super().__init__(framework)
        self.kube = KubeApiRequirer(
            self,
            "kube-api",
            namespace="storage",
            rules=[
                {
                    "api-groups": [""],
                    "resources": ["persistentvolumeclaims"],
                    "verbs": ["create", "get"],
                }
            ],
            cluster_rules=[NODES, PVS],
        )


class Provider(ops.CharmBase):
    def __init__(self, framework):
        super().__init__(framework)
        self.kube = KubeApiProvider(self, "kube-api")


CONSUMER = {"name": "efs", "requires": {"kube-api": {"interface": "kube-api"}}}
PROVIDER = {"name": "cp", "provides": {"kube-api": {"interface": "kube-api"}}}


def test_requirer_publishes_request_as_leader_only():
    ctx = testing.Context(Consumer, meta=CONSUMER)
    rel = testing.Relation("kube-api")
    out = ctx.run(ctx.on.relation_created(rel), testing.State(leader=True, relations=[rel]))
    bag = out.get_relation(rel.id).local_app_data
    assert bag["namespace"] == "storage"
    assert json.loads(bag["cluster-rules"])[1] == {
        "api-groups": [""],
        "resources": ["persistentvolumes"],
        "verbs": ["create", "delete"],
    }
    out = ctx.run(ctx.on.relation_created(rel), testing.State(leader=False, relations=[rel]))
    assert out.get_relation(rel.id).local_app_data == {}


@pytest.mark.parametrize(
    ("remote", "problem"),
    [
        ({}, "waiting for the control plane to grant Kubernetes access"),
        (
            {"error": "cluster-rules: verb bind is not allowed"},
            "control plane refused access: cluster-rules: verb bind is not allowed",
        ),
        (
            {"endpoint": "https://x:6443", "kubeconfig-secret-id": "secret:cv0s5u7mp25c7ad9k7bg"},
            "waiting for access to the kubeconfig secret",
        ),
    ],
)
def test_requirer_problem(remote, problem):
    ctx = testing.Context(Consumer, meta=CONSUMER)
    rel = testing.Relation("kube-api", remote_app_data=remote)
    with ctx(ctx.on.update_status(), testing.State(relations=[rel])) as mgr:
        assert mgr.charm.kube.problem() == problem
        assert mgr.charm.kube.kubeconfig() is None


def test_requirer_reads_granted_kubeconfig():
    ctx = testing.Context(Consumer, meta=CONSUMER)
    sec = testing.Secret({"kubeconfig": "apiVersion: v1\n"})
    rel = testing.Relation(
        "kube-api",
        remote_app_data={
            "endpoint": "https://x:6443",
            "namespace": "storage",
            "service-account": "efs",
            "kubeconfig-secret-id": sec.id,
        },
    )
    with ctx(ctx.on.update_status(), testing.State(relations=[rel], secrets=[sec])) as mgr:
        assert mgr.charm.kube.problem() is None
        assert mgr.charm.kube.kubeconfig() == "apiVersion: v1\n"
        assert mgr.charm.kube.namespace() == "storage"


def test_requirer_not_related():
    ctx = testing.Context(Consumer, meta=CONSUMER)
    with ctx(ctx.on.update_status(), testing.State()) as mgr:
        assert mgr.charm.kube.problem().startswith("not related to kube-api")


def rule(groups: list[str], resources: list[str], verbs: list[str], **extra) -> dict:
    return {"api-groups": groups, "resources": resources, "verbs": verbs, **extra}


def queue(names: list[str]) -> dict:
    return rule(
        ["kueue.x-k8s.io"],
        ["clusterqueues"],
        ["get", "create", "patch"],
        **{"resource-names": names},
    )


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        ({"namespace": "kube-system"}, "namespace kube-system is reserved"),
        (
            {
                "namespace": "a",
                "rules": [{"api-groups": [""], "resources": ["pods"], "verbs": ["*"]}],
            },
            "rules: wildcard '*' in verbs is not allowed",
        ),
        (
            {
                "namespace": "a",
                "cluster-rules": [
                    {"api-groups": [""], "resources": ["secrets"], "verbs": ["list"]}
                ],
            },
            "secrets cannot be granted",
        ),
        (
            {
                "namespace": "a",
                "rules": [{"api-groups": [""], "resources": ["pods"], "verbs": ["escalate"]}],
            },
            "verb escalate is not allowed",
        ),
        # issue 29: PersistentVolume writes are the path to a hostPath volume
        ({"namespace": "a", "cluster-rules": [NODES, PVS]}, "persistentvolume creation"),
        ({"namespace": "a", "cluster-rules": [NODES]}, None),
        # a team's ClusterQueue is the control plane's (issue 29 item 6): no consumer writes
        # one, not even its own team-<namespace> (granted before LIBPATCH 17; stricter now)
        ({"namespace": "a", "cluster-rules": [queue(["team-a"])]}, "clusterqueues writes"),
        ({"namespace": "a", "cluster-rules": [queue(["team-b"])]}, "clusterqueues writes"),
        (
            {"namespace": "a", "rules": [rule(["kueue.x-k8s.io"], ["clusterqueues"], ["create"])]},
            "clusterqueues writes",
        ),
        (
            {
                "namespace": "a",
                "cluster-rules": [rule(["kueue.x-k8s.io"], ["clusterqueues"], ["get", "list"])],
            },
            None,
        ),
        # the quota a team wants travels in the request; malformed numbers are refused
        ({"namespace": "a", "gpu-quota": "2", "cpu-quota": "500m", "memory-quota": "64Gi"}, None),
        # Endpoints writes send a Service's traffic anywhere (CVE-2021-25740); reads are fine
        ({"namespace": "a", "rules": [rule([""], ["endpoints"], ["create"])]}, "CVE-2021-25740"),
        (
            {
                "namespace": "a",
                "rules": [rule(["discovery.k8s.io"], ["endpointslices"], ["patch"])],
            },
            "CVE-2021-25740",
        ),
        ({"namespace": "a", "rules": [rule([""], ["endpoints"], ["get", "list"])]}, None),
    ],
)
def test_policy(request_, error):
    got = check_policy(RequirerAppData.model_validate(request_))
    assert (got is None) if error is None else error in got


@pytest.mark.parametrize(
    "field,value",
    [("gpu-quota", "-1"), ("gpu-quota", "two"), ("cpu-quota", "lots"), ("memory-quota", "-5Gi")],
)
def test_a_malformed_quota_is_no_request(field, value):
    with pytest.raises(pydantic.ValidationError, match=field):
        RequirerAppData.model_validate({"namespace": "a", field: value})


def test_an_empty_name_is_no_name():
    """A resource name of "" would match any POST create (it carries no name); "" is a group.

    RBAC matches resourceNames exactly, so a rule naming "" would allow creating any
    ClusterQueue by POST. "" stays the core API group.
    """
    with pytest.raises(pydantic.ValidationError, match="must not be empty"):
        RequirerAppData.model_validate({"namespace": "a", "cluster-rules": [queue([""])]})
    with pytest.raises(pydantic.ValidationError, match="must not be empty"):
        RequirerAppData.model_validate({"namespace": "a", "rules": [rule([""], [""], ["get"])]})
    assert RequirerAppData.model_validate({"namespace": "a", "cluster-rules": [NODES]})


def test_policy_grants_volume_writes_to_a_named_provisioner_only():
    request = RequirerAppData.model_validate({"namespace": "a", "cluster-rules": [NODES, PVS]})
    assert check_policy(request, provisioner=True) is None


def test_provider_requests_grant_and_refuse():
    ctx = testing.Context(Provider, meta=PROVIDER)
    good = testing.Relation(
        "kube-api",
        remote_app_name="efs",
        remote_app_data={"namespace": "storage", "cluster-rules": json.dumps([NODES])},
    )
    bad = testing.Relation(
        "kube-api", remote_app_name="bad", remote_app_data={"namespace": "x", "rules": "not json"}
    )
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations=[good, bad])) as mgr:
        reqs = {r.app_name: r for r in mgr.charm.kube.requests()}
        assert reqs["efs"].error is None and reqs["efs"].request.namespace == "storage"
        assert reqs["bad"].error == "rules is invalid (must be a JSON list of rules)"
        mgr.charm.kube.grant(reqs["efs"].relation, "https://x:6443", "storage", "efs", "KCFG")
        mgr.charm.kube.refuse(reqs["bad"].relation, reqs["bad"].error)
        out = mgr.run()
    sec = next(s for s in out.secrets if s.label == f"kube-api-{good.id}")
    assert sec.remote_grants == {good.id: {"efs"}}
    assert "KCFG" not in json.dumps(out.get_relation(good.id).local_app_data)
    assert out.get_relation(bad.id).local_app_data == {
        "error": "rules is invalid (must be a JSON list of rules)"
    }


# review44a G1: a request is bounded (kube_api MAX_RULES, MAX_ITEMS, MAX_WORD, MAX_JSON,
# MAX_QUANTITY), each refusal naming its bound


@pytest.mark.parametrize("oversized", OVERSIZED, ids=lambda o: o.id)
def test_a_request_over_a_bound_is_refused_naming_it(oversized):
    with pytest.raises(pydantic.ValidationError) as refused:
        RequirerAppData.model_validate(oversized.request())
    why = explain(refused.value)
    assert oversized.names in why, why
    assert why.startswith(f"{next(iter(oversized.databag))}") and " is invalid (at most " in why


def test_a_value_over_max_json_is_refused_before_it_is_parsed():
    """The leader reads every consumer's databag in every hook: 6 MB costs it no parse."""
    (reviewers,) = [o for o in OVERSIZED if o.id == "sixty-thousand-rules"]
    text = reviewers.databag["rules"]
    with pytest.raises(pydantic.ValidationError) as refused:
        RequirerAppData.model_validate({"namespace": "team", "rules": text})
    assert explain(refused.value) == (
        f"rules is invalid (at most {MAX_JSON} characters of JSON (MAX_JSON), not {len(text)})"
    )
    (garbage,) = [o for o in OVERSIZED if o.id == "not-even-json"]  # never parsed: no JSON error
    with pytest.raises(pydantic.ValidationError) as refused:
        RequirerAppData.model_validate(garbage.request())
    assert "MAX_JSON" in explain(refused.value)


def test_a_provisioner_may_name_as_many_consumers_as_a_file_system_has_access_points():
    """final44a N1: 64 KiB stopped efs-storage at ~1,400 consumers; EFS allows 10,000."""
    names = [f"team-x{i:05d}-" + "x" * 40 for i in range(10_000)]  # 52-character names
    served = {name: f"fsap-{i:017x}" for i, name in enumerate(names)}
    text = json.dumps(served, sort_keys=True)
    assert MAX_JSON < len(text) <= MAX_STORAGE_JSON
    request = RequirerAppData.model_validate({"namespace": "s", "storage-consumers": text})
    assert request.storage_consumers == served
    over = text[:-1] + ", " + json.dumps("p" * (MAX_STORAGE_JSON - len(text))) + ': ""}'
    with pytest.raises(pydantic.ValidationError) as refused:
        RequirerAppData.model_validate({"namespace": "s", "storage-consumers": over})
    assert f"at most {MAX_STORAGE_JSON} characters of JSON (MAX_STORAGE_JSON)" in explain(
        refused.value
    )


def test_the_largest_request_within_the_bounds_passes_the_policy():
    request = RequirerAppData.model_validate({"namespace": "team", **LARGEST})
    assert (len(request.rules), len(request.cluster_rules)) == (MAX_RULES, MAX_RULES)
    assert check_policy(request) is None
    assert MAX_JSON - 1024 < max(len(LARGEST["rules"]), len(LARGEST["cluster-rules"])) <= MAX_JSON
    one_more = json.loads(LARGEST["rules"])
    one_more[0]["resource-names"].append("x" * 600)  # a little more than MAX_JSON lets
    with pytest.raises(pydantic.ValidationError):
        RequirerAppData.model_validate({"namespace": "team", "rules": json.dumps(one_more)})


def test_a_requirer_never_publishes_what_the_provider_would_refuse_for_its_size():
    rule = {"api-groups": [""], "resources": ["configmaps"], "verbs": ["get"]}

    class Greedy(ops.CharmBase):
        def __init__(self, framework):
            super().__init__(framework)
            KubeApiRequirer(self, "kube-api", namespace="team", rules=[rule] * (MAX_RULES + 1))

    ctx = testing.Context(Greedy, meta=CONSUMER)
    with pytest.raises(testing.errors.UncaughtCharmError) as error:
        ctx.run(ctx.on.start(), testing.State(leader=True))
    assert f"at most {MAX_RULES} rules (MAX_RULES)" in str(error.value)

    # under MAX_RULES, over MAX_JSON: refused too, as the provider would read it
    long = {**rule, "resource-names": ["n" * MAX_WORD] * MAX_ITEMS}

    class Wordy(ops.CharmBase):
        def __init__(self, framework):
            super().__init__(framework)
            KubeApiRequirer(self, "kube-api", namespace="team", rules=[long] * 10)

    ctx = testing.Context(Wordy, meta=CONSUMER)
    with pytest.raises(testing.errors.UncaughtCharmError) as error:
        ctx.run(ctx.on.start(), testing.State(leader=True))
    assert "(MAX_JSON)" in str(error.value)


@pytest.mark.parametrize(
    ("key", "deep"),
    [("rules", "[" * 5000), ("cluster-rules", "[" * 5000), ("storage-consumers", '{"a":' * 5000)],
)
def test_json_nested_past_the_parsers_depth_is_refused_not_raised(key, deep):
    """last44a H1: deep nesting is refused as invalid, not raised.

    json.loads raises RecursionError, which no validator caught: one tenant's 5 KB of
    brackets failed the leader's hook for every consumer.
    """
    with pytest.raises(pydantic.ValidationError) as refused:
        RequirerAppData.model_validate({"namespace": "team", key: deep})
    assert "must be a JSON" in explain(refused.value)
