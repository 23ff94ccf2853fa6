"""The leader fences the DaemonSets' and provisioners' cluster-wide writes (issue 29, left 1-2).

What the policies refuse is proven against the fake API server with the real identities in
tests/functional/test_admission_policies.py; here: the leader applies them, before any
DaemonSet they fence, once, and builds them again only for another charm (Juju's charm URL,
fakes.control_plane.deployed_charm).
"""

from __future__ import annotations

import dataclasses

import admission_policies
from ops import testing

import charm
from fakes.control_plane import deployed_charm, peer, peers

VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


def _writes(api) -> list[str]:
    return [r[1] for r in api.requests if r[0] in ("PATCH", "POST", "PUT")]


def test_the_leader_applies_the_policies_before_the_daemonsets_they_fence(api, ctx):
    ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))

    names = sorted(o["metadata"]["name"] for o in api.objects(VAP + "/"))
    assert names == [
        "gpu-k8s-calico-cni-plugin",
        "gpu-k8s-calico-node-settings",
        "gpu-k8s-consumer-controllers-by-kube-system",
        "gpu-k8s-consumer-egress-by-the-control-plane",
        "gpu-k8s-consumer-jobs-started-by-kueue",
        "gpu-k8s-consumer-pods-off-the-control-plane",
        "gpu-k8s-consumer-services-no-external-ips",
        "gpu-k8s-consumer-short-lived-tokens",
        "gpu-k8s-consumer-terminating-pods-bounded",
        "gpu-k8s-efs-own-volumes",
        "gpu-k8s-efs-volumes-only",
        "gpu-k8s-jobset-children-only-by-jobset",
        "gpu-k8s-node-bound-calico-node",
        "gpu-k8s-node-bound-efs-csi-node",
        "gpu-k8s-node-bound-mig-manager",
    ]
    for name in names:  # each bound with Deny, and failing closed
        binding = api.get_object(f"{BINDINGS}/{name}")
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
        assert api.get_object(f"{VAP}/{name}")["spec"]["failurePolicy"] == "Fail"
    writes = _writes(api)
    first_policy = min(i for i, p in enumerate(writes) if p.startswith(VAP))
    daemonsets = [i for i, p in enumerate(writes) if "/daemonsets/" in p]
    assert daemonsets and first_policy < min(daemonsets), writes


def test_the_policies_are_applied_once(api, ctx):
    state = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    api.requests.clear()
    ctx.run(ctx.on.update_status(), state)
    assert not [p for p in _writes(api) if "admissionregistration" in p]


def _changed_policies(monkeypatch) -> str:
    """The policies of another charm revision: one policy's message reworded; its path."""
    manifests = admission_policies.manifests

    def changed():
        objects = manifests()
        policy = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicy")
        policy["spec"]["validations"][0]["message"] = "reworded by another revision"
        return objects

    monkeypatch.setattr(admission_policies, "manifests", changed)
    return f"{VAP}/{changed()[0]['metadata']['name']}"


def test_a_refreshed_charm_applies_its_changed_policies(api, ctx, tmp_path, monkeypatch):
    """The policies are built again when Juju deployed another charm, and only then."""
    state = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    path = _changed_policies(monkeypatch)
    api.requests.clear()
    state = ctx.run(ctx.on.update_status(), state)  # the same charm: nothing built
    assert not [p for p in _writes(api) if "admissionregistration" in p]
    assert api.get_object(path)["spec"]["validations"][0]["message"] != (
        "reworded by another revision"
    )

    deployed_charm(tmp_path / "charm", "ch:amd64/kubernetes-control-plane-2")
    state = ctx.run(ctx.on.upgrade_charm(), state)
    assert api.get_object(path)["spec"]["validations"][0]["message"] == (
        "reworded by another revision"
    )
    api.requests.clear()
    ctx.run(ctx.on.update_status(), state)
    assert not [p for p in _writes(api) if "admissionregistration" in p]


def test_without_a_charm_url_the_policies_are_built_each_hook(api, machine, monkeypatch):
    """Where Juju wrote no charm URL, a change of the policies is applied at the next hook."""
    bare = testing.Context(charm.KubernetesControlPlaneCharm)  # no .juju-charm
    state = bare.run(bare.on.install(), testing.State(leader=True, relations=[peers()]))
    path = _changed_policies(monkeypatch)
    bare.run(bare.on.update_status(), state)
    assert api.get_object(path)["spec"]["validations"][0]["message"] == (
        "reworded by another revision"
    )


def test_a_charm_refreshed_back_and_forth_applies_its_own_policies_again(
    api, ctx, machine, monkeypatch
):
    """A revision before the record applied its own policies in between: ours come back."""
    ours = admission_policies.manifests
    state = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    record = peer(state).local_app_data["admission-policies-charm"]
    path = _changed_policies(monkeypatch)
    older = testing.Context(charm.KubernetesControlPlaneCharm)
    state = older.run(older.on.upgrade_charm(), state)
    assert api.get_object(path)["spec"]["validations"][0]["message"] == (
        "reworded by another revision"
    )
    # an older revision knows no record: it leaves ours, next to its own fingerprint
    bag = {**peer(state).local_app_data, "admission-policies-charm": record}
    state = dataclasses.replace(
        state, relations=[dataclasses.replace(peer(state), local_app_data=bag)]
    )
    monkeypatch.setattr(admission_policies, "manifests", ours)
    ctx.run(ctx.on.upgrade_charm(), state)  # back to the first charm URL
    assert api.get_object(path)["spec"]["validations"][0]["message"] != (
        "reworded by another revision"
    )


def test_the_policies_precede_the_consumers_grants(api, ctx):
    """No consumer's namespace exists unfenced: the leader applies them first."""
    from fakes.control_plane import kube_api_relation

    rel = kube_api_relation("tensorflow", "training")
    ctx.run(ctx.on.relation_changed(rel), testing.State(leader=True, relations=[peers(), rel]))
    writes = _writes(api)
    namespace = writes.index("/api/v1/namespaces/training")
    assert all(
        writes.index(f"{VAP}/{n}") < namespace
        for n in (
            admission_policies.CONSUMER_PODS,
            admission_policies.CONSUMER_TOKENS,
            admission_policies.CONSUMER_EGRESS,
        )
    ), writes


def test_each_node_bound_account_is_matched_by_its_exact_username():
    for (namespace, name), (short, _) in admission_policies.NODE_BOUND.items():
        policy = admission_policies.node_bound_policy((namespace, name))
        (condition,) = policy["spec"]["matchConditions"]
        assert condition["expression"] == (
            f"request.userInfo.username == 'system:serviceaccount:{namespace}:{name}'"
        )
        assert policy["metadata"]["name"] == f"gpu-k8s-node-bound-{short}"
