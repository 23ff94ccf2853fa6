"""The cluster's CNI: Calico for new clusters, flannel kept where it runs (issue 29 item 4).

Calico's release manifest comes from `fakes.addons.ManifestServer` on 127.0.0.1 (the
conftest points the pinned upstream URL at it), with upstream's own ConfigMap, calico-node
DaemonSet and kube-controllers Deployment (tests/fixtures/calico/).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import calico
import pytest
from literals import CALICO_RELEASE
from ops import testing

from charms.gpu_k8s.v0.kube_api import SYSTEM_NAMESPACES, RequirerAppData, check_policy
from fakes.addons import CALICO_VERSION, calico_objects, release_manifest
from fakes.control_plane import kube_api_relation, node, peer, peers, worker_bag, workers_relation

CALICO_NODE = "/apis/apps/v1/namespaces/kube-system/daemonsets/calico-node"
CALICO_CONFIG = "/api/v1/namespaces/kube-system/configmaps/calico-config"
CALICO_CONTROLLERS = "/apis/apps/v1/namespaces/kube-system/deployments/calico-kube-controllers"
IPPOOL_CRD = (
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/ippools.crd.projectcalico.org"
)
FLANNEL_DS = "/apis/apps/v1/namespaces/kube-flannel/daemonsets/kube-flannel-ds"
READY = "Ready: v1.36, 1 control-plane, 0 workers"
NOT_ISOLATED = "teams not isolated on the network: flannel enforces no NetworkPolicy"
KEPT = "flannel kept: cni calico applies to new clusters, the charm does not migrate"
TEAM = [{"api-groups": [""], "resources": ["configmaps"], "verbs": ["get", "create"]}]
SHA = hashlib.sha256(release_manifest("calico", CALICO_VERSION)).hexdigest()


def _install(ctx, config: dict | None = None) -> testing.State:
    state = testing.State(leader=True, relations=[peers()], config=config or {})
    return ctx.run(ctx.on.install(), state)


def _env(daemonset: dict) -> tuple[dict, dict]:
    containers = daemonset["spec"]["template"]["spec"]["containers"]
    node = next(c for c in containers if c["name"] == "calico-node")
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in node["env"]}, node


def _consumer(ctx, state: testing.State) -> testing.State:
    rel = kube_api_relation("tensorflow", "team-a", TEAM)
    state = dataclasses.replace(state, relations=[*state.relations, rel])
    return ctx.run(ctx.on.relation_changed(state.get_relation(rel.id)), state)


def test_a_new_cluster_runs_calico_with_vxlan_on_its_pod_cidr(ctx, machine, api, releases):
    out = _install(ctx, {"pod-cidr": "10.200.0.0/16"})
    assert out.unit_status == testing.ActiveStatus(READY)
    assert releases.requests.count(releases.path("calico")) == 1
    assert api.get_object(IPPOOL_CRD) is not None
    assert api.get_object(FLANNEL_DS) is None
    env, node = _env(api.get_object(CALICO_NODE))
    # VXLAN for every packet between nodes, IP-in-IP off, the pool on the cluster's pod CIDR
    assert env["CALICO_IPV4POOL_VXLAN"] == "Always"
    assert env["CALICO_IPV4POOL_IPIP"] == "Never"
    assert env["CALICO_IPV6POOL_VXLAN"] == "Never"
    assert env["CALICO_IPV4POOL_CIDR"] == "10.200.0.0/16"
    data = api.get_object(CALICO_CONFIG)["data"]
    assert data["calico_backend"] == "vxlan"  # no BGP: BIRD neither runs nor is checked
    assert data["veth_mtu"] == "0"  # detected: the interface's MTU less VXLAN's 50 bytes
    assert node["livenessProbe"]["exec"]["command"] == ["/bin/calico-node", "-felix-live"]
    assert node["readinessProbe"]["exec"]["command"] == ["/bin/calico-node", "-felix-ready"]
    assert node["image"] == f"quay.io/calico/node:{CALICO_VERSION}"
    app = peer(out).local_app_data
    assert app["cni"] == f"calico {CALICO_VERSION} 10.200.0.0/16"
    served = f"{releases.url}{releases.path('calico')}"
    assert json.loads(app["addon-calico-sha256"]) == {served: SHA}


def test_calico_comes_from_its_tag_over_https_or_the_mirror_under_its_own_name():
    assert CALICO_RELEASE.url("") == (
        "https://raw.githubusercontent.com/projectcalico/calico/v3.32.1/manifests/calico.yaml"
    )
    mirrored = CALICO_RELEASE.url("https://mirror.example.com/addons/")
    assert mirrored == "https://mirror.example.com/addons/calico/v3.32.1/calico.yaml"


def test_upstreams_calico_yaml_is_what_the_transform_changes():
    """The fixture is upstream's text; only the named settings change, nothing else."""
    objects = calico_objects()
    before = json.loads(json.dumps(objects))
    after = calico.transform("10.244.0.0/16")(objects)
    changed = [
        (o["kind"], o["metadata"]["name"]) for o, b in zip(after, before, strict=True) if o != b
    ]
    assert changed == [("ConfigMap", "calico-config"), ("DaemonSet", "calico-node")]
    upstream_env, _ = _env(next(b for b in before if b["kind"] == "DaemonSet"))
    assert upstream_env["CALICO_IPV4POOL_IPIP"] == "Always"  # upstream's default: IP-in-IP
    assert "CALICO_IPV4POOL_CIDR" not in upstream_env  # commented out upstream


def test_nothing_is_downloaded_again_while_nothing_changed(ctx, machine, api, releases):
    out = _install(ctx)
    releases.requests.clear()
    api.requests.clear()
    ctx.run(ctx.on.update_status(), out)
    assert releases.path("calico") not in releases.requests
    assert not [r for r in api.requests if "calico" in r[1] and r[0] != "GET"]


def test_a_different_artifact_at_the_same_url_is_refused(ctx, machine, api, releases):
    """Issue 29 item 7: nothing but the pinned release's own file is applied.

    Its sha256 is the charm's, checked before any first-use record (review44a G7).
    """
    first = {f"{releases.url}{releases.path('calico')}": SHA}
    bag = {"addon-calico-sha256": json.dumps(first)}  # what a leader recorded before
    releases.tamper("calico")
    try:
        state = testing.State(leader=True, relations=[peers(app=bag)])
        out = ctx.run(ctx.on.install(), state)
    finally:
        releases.files[releases.path("calico")] = release_manifest("calico", CALICO_VERSION)
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("calico: calico v3.32.1 manifest has sha256 ")
    assert out.unit_status.message.endswith(
        f"not the {SHA} of the pinned release; nothing applied (set calico-sha256 to "
        "accept another)"
    )
    assert api.get_object(CALICO_NODE) is None
    assert api.get_object("/api/v1/namespaces/default/configmaps/x") is None
    assert "cni" not in peer(out).local_app_data


def test_a_manifest_that_is_not_the_configured_sha256_is_refused(ctx, machine, api):
    out = _install(ctx, {"calico-sha256": "0" * 64})
    assert out.unit_status.name == "blocked"
    assert f"has sha256 {SHA}, not the calico-sha256 {'0' * 64}" in out.unit_status.message
    assert api.get_object(CALICO_NODE) is None


def test_a_flannel_cluster_keeps_flannel_after_the_charm_upgrade_and_says_so(
    ctx, machine, api, releases
):
    """A cluster bootstrapped with flannel, as every one before the option, keeps it.

    `cni` calico, the default after the upgrade, changes nothing in the cluster, and the
    line says so.
    """
    out = _install(ctx, {"cni": "flannel"})
    assert out.unit_status == testing.ActiveStatus(READY)
    assert api.get_object(FLANNEL_DS) is not None
    assert peer(out).local_app_data["cni"] == "flannel v0.27.4 10.244.0.0/16"
    releases.requests.clear()
    api.requests.clear()
    out = ctx.run(ctx.on.upgrade_charm(), dataclasses.replace(out, config={}))
    assert out.unit_status == testing.ActiveStatus(f"{READY}; {KEPT}")
    assert releases.path("calico") not in releases.requests
    assert api.get_object(CALICO_NODE) is None
    assert not [r for r in api.requests if "flannel" in r[1] and r[0] != "GET"]
    # a team there is told it is not isolated
    out = _consumer(ctx, out)
    assert out.unit_status == testing.ActiveStatus(f"{READY}; {KEPT}; {NOT_ISOLATED}")
    # the operator who says flannel hears only the truth about isolation
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={"cni": "flannel"}))
    assert out.unit_status == testing.ActiveStatus(f"{READY}; {NOT_ISOLATED}")


def _with_workers(ctx, api, state: testing.State, count: int) -> testing.State:
    """`count` workers registered at once (an upgrade rebuilds the registry from them)."""
    names = [f"ip-10-0-{i // 250}-{i % 250 + 1}" for i in range(count)]
    for name in names:
        api.put_object(f"/api/v1/nodes/{name}", node(name))
    rel = workers_relation({i: worker_bag(name) for i, name in enumerate(names)})
    state = dataclasses.replace(state, relations=[*state.relations, rel])
    return ctx.run(ctx.on.upgrade_charm(), state)


def test_a_calico_cluster_past_50_nodes_says_its_manifest_is_for_fewer(ctx, machine, api):
    """calico.yaml is Calico's manifest for 50 nodes or less (Typha above): review44a G4.

    Every node runs calico-node: the control plane's and the workers'. At 50 nothing is
    said; the worker that makes 51 has the leader's line name the count and the limit.
    """
    state = _with_workers(ctx, api, _install(ctx), 49)
    assert state.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 49 workers")
    rel = next(r for r in state.relations if r.endpoint == "workers")
    api.put_object("/api/v1/nodes/ip-10-0-9-9", node("ip-10-0-9-9"))
    rel = dataclasses.replace(
        rel, remote_units_data={**rel.remote_units_data, 49: worker_bag("ip-10-0-9-9")}
    )
    state = dataclasses.replace(
        state, relations=[r for r in state.relations if r.id != rel.id] + [rel]
    )
    state = ctx.run(ctx.on.relation_changed(rel, remote_unit=49), state)
    assert state.unit_status == testing.ActiveStatus(
        "Ready: v1.36, 1 control-plane, 50 workers; "
        "51 nodes: calico.yaml is for 50 or less (no Typha yet)"
    )


def test_a_flannel_cluster_past_50_nodes_says_nothing_of_calico(ctx, machine, api):
    state = _with_workers(ctx, api, _install(ctx, {"cni": "flannel"}), 50)
    assert state.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 50 workers")


def test_asking_a_calico_cluster_for_flannel_is_refused(ctx, machine, api):
    out = _install(ctx)
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={"cni": "flannel"}))
    assert out.unit_status == testing.BlockedStatus(
        "cni flannel: this cluster runs calico and the charm does not migrate a running "
        "cluster's CNI; set cni back to calico"
    )
    assert api.get_object(FLANNEL_DS) is None
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={}))
    assert out.unit_status == testing.ActiveStatus(READY)


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"cni": "cilium"}, "cni: must be one of calico, flannel"),
        ({"calico-sha256": "abc"}, "calico-sha256: must be empty or 64 hexadecimal digits"),
    ],
)
def test_bad_cni_config_blocks(ctx, machine, config, fragment):
    out = _install(ctx, config)
    assert out.unit_status.name == "blocked"
    assert fragment in out.unit_status.message


def test_calicos_namespaces_are_reserved_from_kube_api_consumers():
    """Calico's manifest runs in kube-system; its operator's namespaces are kept too."""
    used = {o["metadata"].get("namespace") for o in calico_objects()} - {None}
    assert used == {"kube-system"}
    for namespace in (*used, "calico-system", "calico-apiserver", "tigera-operator"):
        assert namespace in SYSTEM_NAMESPACES
        problem = check_policy(RequirerAppData.model_validate({"namespace": namespace}))
        assert (problem or "").startswith(f"namespace {namespace} is reserved")
