"""Every kube-api consumer's namespace holds a bounded number of objects (review43 G4).

The control plane writes the ResourceQuota gpu-k8s-object-counts (team_quota.py) into each
namespace it grants; the fake API server enforces its object counts as kube-apiserver's
ResourceQuota plugin does (fakes/kube_quota.py). The probe with a team's token, N + 1
ConfigMaps, is tests/functional/test_kube_api_escalation.py's.
"""

from __future__ import annotations

import dataclasses
import json
import re

import docs_pages
import pytest
from charm_modules import load

from charms.gpu_k8s.v0.kube_api import RequirerAppData, check_policy
from fakes import crds
from fakes.control_plane import granted, kube_api_relation, peer
from fakes.kube_apiserver import RESOURCES

team_quota = load("kubernetes-control-plane", "team_quota")
QUOTA = f"resourcequotas/{team_quota.NAME}"
LOCALQUEUES = [
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get", "create"]}
]


def hard(api, namespace: str) -> dict[str, str]:
    quota = api.get_object(f"/api/v1/namespaces/{namespace}/{QUOTA}")
    assert quota is not None, f"no object-count quota in {namespace}"
    return quota["spec"]["hard"]


def quota_writes(api) -> list[str]:
    return [r.path for r in api.requests if "resourcequotas" in r.path and r.method != "GET"]


def test_every_consumer_namespace_gets_the_object_counts(ctx, bootstrapped, api):
    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    storage = kube_api_relation("efs-storage", "storage")
    granted(ctx, bootstrapped, a, storage)
    for namespace in ("team-a", "storage"):  # a provisioner's namespace too
        assert hard(api, namespace) == {k: str(v) for k, v in team_quota.COUNTS.items()}
    assert api.get_object(f"/api/v1/namespaces/kube-system/{QUOTA}") is None


def test_applied_once_and_again_in_every_namespace_when_a_count_changes(ctx, bootstrapped, api):
    a = kube_api_relation("tensorflow", "team-a", LOCALQUEUES)
    state = granted(ctx, bootstrapped, a)
    api.requests.clear()
    state = ctx.run(ctx.on.update_status(), state)
    assert quota_writes(api) == []
    state = granted(ctx, state, kube_api_relation("tensorflow-b", "team-b", LOCALQUEUES))
    assert quota_writes(api) == [f"/api/v1/namespaces/team-b/{QUOTA}"]  # team-a's stands
    assert set(json.loads(peer(state).local_app_data["team-object-counts"])) == {
        "team-a",
        "team-b",
    }
    api.requests.clear()
    changed = dataclasses.replace(
        state, config={"team-object-counts": "configmaps=600 count/pods=6000"}
    )
    state = ctx.run(ctx.on.config_changed(), changed)
    assert state.unit_status.name == "active", state.unit_status
    for namespace in ("team-a", "team-b"):
        counts = hard(api, namespace)
        assert (counts["configmaps"], counts["count/pods"]) == ("600", "6000")
        assert counts["secrets"] == str(team_quota.COUNTS["secrets"])
    assert len(quota_writes(api)) == 2


def test_a_namespace_granted_before_this_revision_gets_it_on_the_next_hook(ctx, bootstrapped, api):
    """An upgraded control plane: its record names no quota applied, so the hook applies it."""
    state = granted(ctx, bootstrapped, kube_api_relation("tensorflow", "team-a", LOCALQUEUES))
    bag = {k: v for k, v in peer(state).local_app_data.items() if k != "team-object-counts"}
    earlier = dataclasses.replace(peer(state), local_app_data=bag)
    state = dataclasses.replace(
        state, relations=[r for r in state.relations if r.id != earlier.id] + [earlier]
    )
    assert api.delete_object(f"/api/v1/namespaces/team-a/{QUOTA}")
    ctx.run(ctx.on.upgrade_charm(), state)
    assert hard(api, "team-a")["configmaps"] == str(team_quota.COUNTS["configmaps"])


@pytest.mark.parametrize(
    "value",
    ["configmap=10", "configmaps=ten", "configmaps=10 configmaps=20", "secrets=-1", "pod=1"],
)
def test_a_count_that_is_not_one_of_the_quota_blocks_naming_the_option(
    ctx, bootstrapped, value: str
):
    out = ctx.run(
        ctx.on.config_changed(),
        dataclasses.replace(bootstrapped, config={"team-object-counts": value}),
    )
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("Invalid config: team-object-counts: '")
    assert "is not <resource>=<count> with a resource of the team quota" in out.unit_status.message


def test_the_counts_hold_what_the_tensorflow_charm_makes():
    """The numbers follow tensorflow's own limits (its literals.py and serving.py)."""
    literals = load("tensorflow", "literals")
    serving = load("tensorflow", "serving")
    assert team_quota.MAX_WORKERS == literals.MAX_WORKERS
    most = team_quota.SERVING_REPLICAS
    serving.ServeParams.model_validate({"job": "j", "replicas": most})
    with pytest.raises(ValueError, match=f"between 1 and {most}"):
        serving.ServeParams.model_validate({"job": "j", "replicas": most + 1})
    # its largest job, twice, fits the pods (its chief and ps besides the workers)
    assert team_quota.COUNTS["pods"] >= 2 * (literals.MAX_WORKERS + 2)
    # and the pods of ten such jobs finished, kept until JobSet deletes them job-ttl after
    assert team_quota.COUNTS["count/pods"] >= team_quota.COUNTS["pods"] + 10 * (
        literals.MAX_WORKERS + 2
    )
    # each resource name is one kube-apiserver validates (ValidateResourceQuotaResourceName:
    # `count/` and a qualified name of at most 63 characters, or a standard name), each
    # count whole
    standard = {
        "pods",
        "configmaps",
        "secrets",
        "services",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
    for name, count in team_quota.COUNTS.items():
        assert isinstance(count, int) and count >= 0
        assert name.startswith("count/") or name in {*standard, "replicationcontrollers"}
        rest = name.removeprefix("count/")
        assert len(rest) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", rest), name


def _refused(group: str, resource: str) -> str | None:
    """Why kube_api refuses a consumer's writes of it in its own namespace, or None."""
    ask = {"api-groups": [group], "resources": [resource], "verbs": ["create"]}
    return check_policy(RequirerAppData.model_validate({"namespace": "team", "rules": [ask]}))


def test_every_namespaced_kind_a_consumer_may_create_is_counted():
    """Each namespaced kind served (built-in, JobSet's and Kueue's CRDs) is in the quota.

    Unless kube_api refuses a consumer's writes of it in its own namespace: then only the
    cluster's components write it there (Events, Endpoints, the grant's Role).
    """
    served = {(gv.rpartition("/")[0], plural) for (gv, plural), (_, ns) in RESOURCES.items() if ns}
    for name in (crds.JOBSET, *crds.KUEUE):
        spec = crds.crd(name)["spec"]
        if spec["scope"] == "Namespaced":
            served.add((spec["group"], spec["names"]["plural"]))
    assert ("kueue.x-k8s.io", "workloads") in served
    for group, resource in sorted(served):
        count = f"count/{resource}.{group}" if group else f"count/{resource}"
        counted = {count, resource if not group else count} & team_quota.COUNTS.keys()
        assert counted or _refused(group, resource), (group, resource)


def test_the_how_to_lists_every_count_as_the_control_plane_writes_it():
    """docs/how-to/share-between-teams.md's table is team_quota.COUNTS, row by row."""
    page = (docs_pages.DOCS / "how-to" / "share-between-teams.md").read_text()
    section = page.split("## How many objects a team may hold", 1)[1].split("\n## ", 1)[0]
    listed = {}
    for row in re.findall(r"^\| (`.+?) \| (\d+)(?: each)? \|", section, re.M):
        for name in re.findall(r"`([^`]+)`", row[0]):
            listed[name] = int(row[1])
    assert listed == team_quota.COUNTS
