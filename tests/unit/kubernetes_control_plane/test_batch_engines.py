"""JobSet and Kueue from their release manifests, and Kueue's cluster-wide objects.

The release assets come from `fakes.addons.ManifestServer` on 127.0.0.1 (the conftest
points the pinned upstream URLs at it); the fake API server serves the custom resources
once the manifests' CRDs are applied, as a real one does.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import re
from collections.abc import Callable

import addons
import batch_engines
import gang_release
import kueue
import literals
import pytest
import yaml
from literals import CONSUMER_LABEL
from ops import testing

import charm
from charms.gpu_k8s.v0 import kube_api, kube_objects, kubeclient
from charms.gpu_k8s.v0.kubeclient import Kube
from fakes.addons import EFS_CSI_PATH, JOBSET_VERSION, KUEUE_VERSION, release_manifest
from fakes.control_plane import (
    deployed_charm,
    join_workers,
    kube_api_relation,
    node,
    peer,
    peers,
    worker_bag,
    workers_relation,
)
from fakes.web import FileServer

JOBSET_DEPLOY = "/apis/apps/v1/namespaces/jobset-system/deployments/jobset-controller-manager"
KUEUE_DEPLOY = "/apis/apps/v1/namespaces/kueue-system/deployments/kueue-controller-manager"
DIGEST = batch_engines.CONFIG_DIGEST_ANNOTATION
CALICO_DEPLOY = "/apis/apps/v1/namespaces/kube-system/deployments/calico-kube-controllers"
KUEUE_CONFIG = "/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config"
JOBSET_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"
FLAVORS = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/"
READY = "Ready: v1.36, 1 control-plane, 0 workers"


def _sha(name: str) -> str:
    version = JOBSET_VERSION if name == "jobset" else KUEUE_VERSION
    return hashlib.sha256(release_manifest(name, version)).hexdigest()


def _install(ctx, config: dict | None = None) -> testing.State:
    return ctx.run(
        ctx.on.install(), testing.State(leader=True, relations=[peers()], config=config or {})
    )


def test_the_leader_applies_both_releases_made_this_clusters(ctx, machine, api, releases, caplog):
    caplog.set_level(logging.INFO)
    out = _install(ctx)
    assert out.unit_status == testing.ActiveStatus(READY)
    assert api.get_object(JOBSET_CRD) is not None
    jobset = api.get_object(JOBSET_DEPLOY)["spec"]["template"]["spec"]
    assert jobset["containers"][0]["image"] == "registry.k8s.io/jobset/jobset:v0.12.0"
    control_plane = {
        "key": "node-role.kubernetes.io/control-plane",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    assert control_plane in jobset["tolerations"]
    config = yaml.safe_load(api.get_object(KUEUE_CONFIG)["data"]["controller_manager_config.yaml"])
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["waitForPodsReady"]["timeout"] == "10m"
    # a running job whose gang is not ready again (a pod failed, a GPU quarantined) keeps
    # its quota 3 minutes, not pods-ready-timeout's 10 (issue 32's review, gap 7)
    assert config["waitForPodsReady"]["recoveryTimeout"] == "3m"
    assert config["waitForPodsReady"]["requeuingStrategy"] == {
        "timestamp": "Eviction",
        # a job requeued again and again (its count is kept as long as it exists) waits
        # 1, 2, 4, 8, then at most 10 minutes before Kueue queues it again, not an hour
        "backoffBaseSeconds": 60,
        "backoffMaxSeconds": 600,
    }
    assert "backoffLimitCount" not in config["waitForPodsReady"]["requeuingStrategy"]
    # Job, JobSet, and every pod of a team's namespace (issue 29 item 6: pod and
    # deployment; the tensorflow charm's Deployments name the team's queue)
    assert config["integrations"]["frameworks"] == [
        "batch/job",
        "jobset.x-k8s.io/jobset",
        "pod",
        "deployment",
    ]
    # every Job of a team's namespace is Kueue's (issue 29 leftover 3), in the teams'
    # namespaces only: the selector matches neither kube-system nor gpu-k8s-* (Kueue
    # refuses a configuration whose selector matches kube-system, config/validation.go)
    assert config["manageJobsWithoutQueueName"] is True
    managed = {"matchLabels": {"gpu-k8s.io/kueue": "managed"}}
    assert config["managedJobsNamespaceSelector"] == managed
    # fair sharing on, with one of the strategy lists Kueue's validation accepts
    assert config["fairSharing"] == {
        "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    }
    hooks = api.get_object(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
        "kueue-mutating-webhook-configuration"
    )["webhooks"]
    # the pod webhook no longer covers every namespace; Kueue's own objects' is untouched
    assert [h.get("namespaceSelector") for h in hooks] == [None, managed]
    template = api.get_object(KUEUE_DEPLOY)["spec"]["template"]
    digest = template["metadata"]["annotations"]["gpu-k8s.io/config-sha256"]
    assert digest == hashlib.sha256(yaml.safe_dump(config, sort_keys=False).encode()).hexdigest()
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert f"applied jobset v0.12.0 from {releases.url}" in logged
    assert _sha("jobset") in logged and _sha("kueue") in logged
    # Kueue's cluster-wide objects once it is ready: cohort, priorities, the CPU flavor.
    cohort = api.get_object("/apis/kueue.x-k8s.io/v1beta2/cohorts/gpu-k8s")
    assert cohort is not None
    assert [f["metadata"]["name"] for f in api.objects(FLAVORS)] == ["cpu"]
    priorities = api.objects("/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses/")
    assert {p["metadata"]["name"]: p["value"] for p in priorities} == kueue.PRIORITIES


def test_nothing_is_downloaded_or_sent_again_while_nothing_changed(ctx, machine, api, releases):
    out = _install(ctx)
    asked = list(releases.requests)
    writes = [r for r in api.requests if r.method != "GET"]
    requests = len(api.requests)
    out = ctx.run(ctx.on.update_status(), out)
    assert releases.requests == asked
    assert [r for r in api.requests if r.method != "GET"] == writes
    batch = [r.path for r in api.requests[requests:] if "jobset" in r.path or "kueue" in r.path]
    # the teams' guarantees are their kube-api requests', never read back from their
    # ClusterQueues (issue 29 item 6; update-status once listed them): nothing of Kueue's
    assert batch == []
    assert out.unit_status == testing.ActiveStatus(READY)


def test_an_unreachable_release_blocks_naming_it_and_applies_nothing_of_it(
    ctx, machine, api, releases
):
    releases.missing("kueue")
    try:
        out = _install(ctx)
    finally:
        releases.files[releases.path("kueue")] = release_manifest("kueue", KUEUE_VERSION)
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("kueue: cannot download https://127.0.0.1:")
    assert "HTTP 404" in out.unit_status.message
    assert api.get_object(KUEUE_DEPLOY) is None and api.get_object(KUEUE_CONFIG) is None
    assert api.get_object(JOBSET_DEPLOY) is not None  # the other one is served
    assert peer(out).local_app_data["cluster-version"] == "1.36"  # the cluster still is
    out = ctx.run(ctx.on.update_status(), out)  # back: applied on the next event
    assert api.get_object(KUEUE_DEPLOY) is not None
    assert out.unit_status == testing.ActiveStatus(READY)


def test_a_manifest_that_is_not_the_pinned_sha256_is_refused(ctx, machine, api, releases):
    releases.tamper("jobset")
    try:
        out = _install(ctx, {"jobset-sha256": _sha("jobset")})
    finally:
        releases.files[releases.path("jobset")] = release_manifest("jobset", JOBSET_VERSION)
    assert out.unit_status.name == "blocked"
    assert f"not the jobset-sha256 {_sha('jobset')}; nothing applied" in out.unit_status.message
    assert api.get_object(JOBSET_CRD) is None
    assert api.get_object("/api/v1/namespaces/default/configmaps/x") is None
    out = ctx.run(ctx.on.update_status(), out)  # the real asset again: applied
    assert api.get_object(JOBSET_CRD) is not None
    assert out.unit_status == testing.ActiveStatus(READY)


def test_a_release_whose_sha256_the_charm_pins_refuses_any_other_even_at_first_use(
    ctx, machine, api, releases
):
    """Review44a G7: a digest known when pinning (Calico's) is checked, not trusted first."""
    assert re.fullmatch(r"[0-9a-f]{64}", literals.CALICO_RELEASE.sha256)
    served = releases.local(addons.CALICO_RELEASE)  # the file served in upstream's place
    digest = hashlib.sha256(releases.files[releases.path("calico")]).hexdigest()
    assert served.sha256 == digest
    other = "0" * 64
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(addons, "CALICO_RELEASE", dataclasses.replace(served, sha256=other))
        out = _install(ctx)
        assert out.unit_status.name == "blocked"
        assert out.unit_status.message == (
            f"calico: calico v3.32.1 manifest has sha256 {digest}, not the {other} of "
            "the pinned release; nothing applied (set calico-sha256 to accept another)"
        )
        assert api.get_object(CALICO_DEPLOY) is None
        # the operator's calico-sha256 wins over the charm's pin
        out = ctx.run(
            ctx.on.config_changed(),
            dataclasses.replace(out, config={"calico-sha256": digest}),
        )
    assert api.get_object(CALICO_DEPLOY) is not None
    assert out.unit_status == testing.ActiveStatus(READY)


def test_a_changed_asset_at_the_same_url_is_refused_after_first_use(ctx, machine, api, releases):
    """Issue 29 item 7: with no sha256 configured, the first one applied is the one kept."""
    out = _install(ctx)
    recorded = peer(out).local_app_data["addon-kueue-sha256"]
    assert list(yaml.safe_load(recorded).values()) == [_sha("kueue")]
    config = api.get_object(KUEUE_CONFIG)["data"]
    releases.tamper("kueue")
    try:
        # a setting that makes the leader download the release again
        out = ctx.run(
            ctx.on.config_changed(), dataclasses.replace(out, config={"pods-ready-timeout": 30})
        )
        assert out.unit_status.name == "blocked"
        assert out.unit_status.message.startswith("kueue: kueue v0.19.2 manifest has sha256 ")
        assert out.unit_status.message.endswith(
            f"not the {_sha('kueue')} it had when first applied from the same URL; nothing "
            "applied (set kueue-sha256 to accept the new one)"
        )
        assert api.get_object(KUEUE_CONFIG)["data"] == config  # nothing of it applied
        assert api.get_object("/api/v1/namespaces/default/configmaps/x") is None
        # the operator accepts the new artifact by its sha256: configured checksums win
        tampered = hashlib.sha256(releases.files[releases.path("kueue")]).hexdigest()
        out = ctx.run(
            ctx.on.config_changed(),
            dataclasses.replace(out, config={"pods-ready-timeout": 30, "kueue-sha256": tampered}),
        )
    finally:
        releases.files[releases.path("kueue")] = release_manifest("kueue", KUEUE_VERSION)
    assert out.unit_status == testing.ActiveStatus(READY)
    assert api.get_object("/api/v1/namespaces/default/configmaps/x") is not None


def test_the_mirror_and_the_image_registry_are_used(ctx, machine, api, releases):
    config = {
        "addons-mirror": f"{releases.url}/",
        "image-registry": "registry.example.com:5000/mirror",
    }
    _install(ctx, config)
    assert f"/jobset/{JOBSET_VERSION}/manifests.yaml" in releases.requests
    assert f"/kueue/{KUEUE_VERSION}/manifests.yaml" in releases.requests
    kueue_pod = api.get_object(KUEUE_DEPLOY)["spec"]["template"]["spec"]
    assert (
        kueue_pod["containers"][0]["image"]
        == "registry.example.com:5000/mirror/kueue/kueue:v0.19.2"
    )


def test_a_controller_not_available_yet_is_named_and_kueue_objects_wait_for_it(
    ctx, machine, api, releases
):
    api.available_deployments = False
    out = _install(ctx)
    assert out.unit_status.name == "active"
    assert out.unit_status.message == (
        f"{READY}; waiting for calico (0/1 controller pods available); "
        "waiting for jobset (0/1 controller pods available), "
        "kueue (0/1 controller pods available)"
    )
    assert api.objects(FLAVORS) == []  # its webhook would refuse them meanwhile
    for path in (JOBSET_DEPLOY, KUEUE_DEPLOY, CALICO_DEPLOY):
        deployment = api.get_object(path)
        deployment["status"] = {"availableReplicas": 1, "observedGeneration": 1}
        api.put_object(path, deployment)
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus(READY)
    assert [f["metadata"]["name"] for f in api.objects(FLAVORS)] == ["cpu"]
    requests = len(api.requests)
    ctx.run(ctx.on.update_status(), out)  # ready is remembered: no more reads
    assert not [r for r in api.requests[requests:] if "controller-manager" in r.path]


def test_a_flavor_per_gpu_model_the_workers_report(ctx, machine, api, releases):
    out = _install(ctx)
    gpus = [{"model": "NVIDIA A10G", "count": 1}]
    rel = workers_relation(
        {
            0: worker_bag("gpu-0", gpus),
            1: worker_bag("gpu-1", [{"model": "NVIDIA H100 80GB HBM3", "count": 8}]),
        }
    )
    join_workers(ctx, out, rel, api)
    flavors = {f["metadata"]["name"]: f["spec"] for f in api.objects(FLAVORS)}
    assert set(flavors) == {"cpu", "gpu-nvidia-a10g", "gpu-nvidia-h100-80gb-hbm3"}
    assert flavors["gpu-nvidia-a10g"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-A10G"}
    assert flavors["gpu-nvidia-h100-80gb-hbm3"]["nodeLabels"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }
    assert flavors["gpu-nvidia-a10g"]["nodeTaints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]


def test_time_slicing_names_the_shared_product_label(ctx, machine, api, releases):
    out = _install(ctx, {"gpu-time-slicing-replicas": 4})
    rel = workers_relation({0: worker_bag("gpu-0", [{"model": "NVIDIA A10G", "count": 1}])})
    join_workers(ctx, out, rel, api)
    flavor = api.get_object(f"{FLAVORS}gpu-nvidia-a10g")
    assert flavor["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-A10G-SHARED"}


@pytest.mark.parametrize(("minutes", "recovery"), [(30, "3m"), (2, "2m")])
def test_a_new_pods_ready_timeout_rolls_kueue(ctx, machine, api, releases, minutes, recovery):
    out = _install(ctx)
    before = api.get_object(KUEUE_DEPLOY)["spec"]["template"]["metadata"]["annotations"]
    state = dataclasses.replace(out, config={"pods-ready-timeout": minutes})
    ctx.run(ctx.on.config_changed(), state)
    config = yaml.safe_load(api.get_object(KUEUE_CONFIG)["data"]["controller_manager_config.yaml"])
    assert config["waitForPodsReady"]["timeout"] == f"{minutes}m"
    # a recovery never waits longer than a first start may
    assert config["waitForPodsReady"]["recoveryTimeout"] == recovery
    after = api.get_object(KUEUE_DEPLOY)["spec"]["template"]["metadata"]["annotations"]
    assert after != before  # Kueue reads its configuration only when it starts


def test_batch_engines_off_downloads_nothing(ctx, machine, api, releases):
    out = _install(ctx, {"batch-engines": False})
    # the CNI only (the EFS CSI driver's files are its own option's)
    assert [r for r in releases.requests if not r.startswith(EFS_CSI_PATH)] == [
        releases.path("calico")
    ]
    assert api.get_object(JOBSET_CRD) is None
    assert out.unit_status == testing.ActiveStatus(READY)


@pytest.mark.parametrize(
    "config,fragment",
    [
        ({"jobset-sha256": "abc"}, "jobset-sha256"),
        ({"addons-mirror": "ftp://x"}, "addons-mirror"),
        ({"addons-mirror": "http://mirror.example.com/addons"}, "https URL prefix"),
        ({"pods-ready-timeout": 0}, "pods-ready-timeout"),
    ],
)
def test_bad_batch_engine_config_blocks(ctx, machine, api, releases, config, fragment):
    out = _install(ctx, config)
    assert out.unit_status.name == "blocked"
    assert fragment in out.unit_status.message
    assert releases.requests == []


def test_a_manifest_is_never_downloaded_over_plain_http():
    from literals import JOBSET

    release = dataclasses.replace(JOBSET, upstream_url="http://github.com/x/manifests.yaml")

    def opener(*_args, **_kwargs):
        raise AssertionError("nothing may be asked for over http")

    with pytest.raises(batch_engines.AddonError) as refused:
        batch_engines.download(release.url(""), opener=opener)
    assert str(refused.value) == (
        "refusing http://github.com/x/manifests.yaml: add-on manifests are applied with "
        "cluster-admin rights and are downloaded over https only"
    )


@pytest.fixture
def plain_http():
    """A plain-http server holding Kueue's manifest (where a hostile redirect points)."""
    with FileServer() as web:
        web.files["/kueue.yaml"] = release_manifest("kueue", KUEUE_VERSION)
        yield web


def test_a_redirect_to_plain_http_is_not_followed(ctx, machine, api, releases, plain_http):
    releases.redirect("kueue", f"{plain_http.url}/kueue.yaml")
    out = _install(ctx)
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("kueue: cannot download https://127.0.0.1:")
    assert f"HTTP 302 redirected to {plain_http.url}/kueue.yaml, not https" in (
        out.unit_status.message
    )
    assert plain_http.gets == 0  # never asked for in clear
    assert api.get_object(KUEUE_DEPLOY) is None and api.get_object(KUEUE_CONFIG) is None
    assert api.get_object(JOBSET_DEPLOY) is not None  # the other one is served


def test_an_opener_that_follows_a_redirect_to_http_still_gets_nothing_applied(
    releases, plain_http
):
    releases.redirect("kueue", f"{plain_http.url}/kueue.yaml")
    url = f"{releases.url}{releases.path('kueue')}"
    with pytest.raises(batch_engines.AddonError) as refused:
        batch_engines.download(url, opener=releases.opener())  # urllib's own: follows it
    assert plain_http.gets == 1
    assert str(refused.value) == (
        f"refusing {url}: it was redirected to {plain_http.url}/kueue.yaml, and add-on "
        "manifests are downloaded over https only"
    )


def test_a_redirect_to_another_https_url_is_followed(ctx, machine, api, releases):
    releases.files["/moved/kueue.yaml"] = releases.files[releases.path("kueue")]
    releases.redirect("kueue", f"{releases.url}/moved/kueue.yaml")
    out = _install(ctx)
    assert out.unit_status == testing.ActiveStatus(READY)
    assert api.get_object(KUEUE_DEPLOY) is not None
    assert "/moved/kueue.yaml" in releases.requests


@pytest.mark.parametrize(
    "data,error",
    [
        (b"a: [unclosed", "kueue manifest is not YAML"),
        (b"- just\n- a list\n", "not a Kubernetes object"),
        (b"apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n", "without a name"),
        (b"apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n", "no Deployment"),
    ],
)
def test_what_is_not_a_release_manifest_is_refused(data, error):
    from literals import KUEUE

    with pytest.raises(batch_engines.AddonError, match=error):
        batch_engines.parse(KUEUE, data)


def test_a_kueue_manifest_without_its_configuration_is_refused():
    from literals import KUEUE

    objects = [
        o
        for o in yaml.safe_load_all(release_manifest("kueue", KUEUE_VERSION))
        if o["kind"] != "ConfigMap"
    ]
    with pytest.raises(batch_engines.AddonError, match="no ConfigMap kueue-manager-config"):
        batch_engines.customise(KUEUE, objects, batch_engines.Settings(), kueue.configure)


def test_images_lists_what_a_mirror_must_hold():
    from literals import JOBSET

    objects = batch_engines.parse(JOBSET, release_manifest("jobset", JOBSET_VERSION))
    assert batch_engines.images(objects) == ["registry.k8s.io/jobset/jobset:v0.12.0"]


# -- quotas add up (issue 29 item 6) ------------------------------------------------------

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"


QUEUE_RULES = [
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get", "create"]}
]


def _team(team: str, gpus: int | None = None, cpu: str | None = None) -> testing.Relation:
    """A tensorflow application's kube-api request (a Kueue team: it asks for LocalQueues)."""
    quota = {"gpu-quota": str(gpus) if gpus is not None else None, "cpu-quota": cpu}
    return kube_api_relation(
        team, team, QUEUE_RULES, **{k: v for k, v in quota.items() if v is not None}
    )


def _with_teams(out: testing.State, *teams: testing.Relation) -> testing.State:
    """`out` with these kube-api relations, replacing those of the same application."""
    names = {t.remote_app_name for t in teams}
    kept = [
        r for r in out.relations if not (r.endpoint == "kube-api" and r.remote_app_name in names)
    ]
    return dataclasses.replace(out, relations=[*kept, *teams])


def _team_cq(api, team: str) -> dict:
    return api.get_object(f"{KUEUE_API}/clusterqueues/team-{team}")


def _cohort_quota(api) -> dict[tuple[str, str], str]:
    cohort = api.get_object(f"{KUEUE_API}/cohorts/gpu-k8s")
    return {
        (f["name"], r["name"]): r["nominalQuota"]
        for g in cohort["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
    }


OWNER_API = {"Job": "batch/v1", "ReplicaSet": "apps/v1"}


def _gpu_pod(
    api,
    name: str,
    node: str,
    gpus: int,
    owner: str,
    namespace: str = "team",
    labels: dict | None = None,
) -> None:
    api.put_object(
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        {
            "metadata": {
                "labels": labels or {},
                "ownerReferences": [
                    {"apiVersion": OWNER_API[owner], "kind": owner, "name": "x", "uid": name}
                ],
            },
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
            "status": {"phase": "Running"},
        },
    )


def _two_gpu_workers(ctx, api) -> testing.State:
    out = _install(ctx)
    gpus = [{"model": "NVIDIA A10G", "count": 4}]
    rel = workers_relation({0: worker_bag("gpu-0", gpus), 1: worker_bag("gpu-1", gpus)})
    return join_workers(ctx, out, rel, api)


def test_the_cohort_holds_the_cluster_less_the_teams_guarantees(ctx, machine, api, releases):
    """The cohort's quota is a pool on top of its members' (cohort_types.go).

    The members' guarantees and the pool sum to what the nodes have, never past it.
    """
    out = _two_gpu_workers(ctx, api)
    assert _cohort_quota(api) == {
        # three untainted nodes of 4 CPUs (the fake's control-plane node has no taint), no
        # memory reported by the fake's nodes
        ("cpu", "cpu"): "12",
        ("cpu", "memory"): "0",
        ("gpu-nvidia-a10g", "nvidia.com/gpu"): "8",
    }
    # defaults (b): no guarantee, borrows from the cohort
    out = _with_teams(out, _team("a", gpus=2, cpu="3"), _team("b"))
    _gpu_pod(api, "server", "gpu-1", 1, "ReplicaSet")  # a model server: outside Kueue
    # admitted by Kueue in team-a's namespace (Kueue's): counted by Kueue
    _gpu_pod(api, "worker-0", "gpu-0", 1, "Job", namespace="a")
    # a model server of team-a that Kueue's pod integration gated and admitted (its
    # webhook's label): Kueue's; one that ran before the integration was on: not Kueue's
    kueues = {"kueue.x-k8s.io/managed": "true"}
    _gpu_pod(api, "served", "gpu-1", 1, "ReplicaSet", namespace="a", labels=kueues)
    _gpu_pod(api, "older", "gpu-0", 1, "ReplicaSet", namespace="a")
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active", out.unit_status.message
    assert _cohort_quota(api) == {
        ("cpu", "cpu"): "9",
        ("cpu", "memory"): "0",
        # 8 - 1 served in an unmanaged namespace - 1 older - 2 team-a's
        ("gpu-nvidia-a10g", "nvidia.com/gpu"): "4",
    }
    writes = len([r for r in api.requests if r.method != "GET"])
    out = ctx.run(ctx.on.update_status(), out)
    assert len([r for r in api.requests if r.method != "GET"]) == writes


def test_a_jobs_gpus_outside_kueues_namespaces_leave_the_cohort(ctx, machine, api, releases):
    """Issue 29 review item 1: a Job's pod was taken for Kueue's wherever it ran.

    A GPU Job's pod in a namespace Kueue does not manage (a storage provisioner's, or any
    namespace without the label) holds its GPUs outside every quota: they come off the
    cohort as a model server's do; a Job's pod in a team's namespace is Kueue's to count.
    """
    out = _two_gpu_workers(ctx, api)
    out = ctx.run(ctx.on.update_status(), _with_teams(out, _team("a")))
    _gpu_pod(api, "outside-0", "gpu-1", 3, "Job", namespace="storage")  # not Kueue's
    _gpu_pod(api, "worker-0", "gpu-0", 2, "Job", namespace="a")  # admitted by Kueue
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active", out.unit_status.message
    assert _cohort_quota(api)[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "5"  # 8 - 3


def test_kueues_namespaces_are_listed_only_for_a_gpu_pod_kueue_would_hold(
    ctx, machine, api, releases
):
    """Issue 29's cost rule: which namespaces Kueue manages decides only for such a pod.

    A pod outside Kueue (no Job owner, no Kueue label) holds its GPUs outside every quota
    wherever it runs; a pod without GPUs holds none: update-status sizes the cohort without
    listing Namespaces. A Job's GPU pod is Kueue's only in a managed namespace: then it
    lists them, once.
    """
    out = ctx.run(ctx.on.update_status(), _with_teams(_two_gpu_workers(ctx, api), _team("a")))
    _gpu_pod(api, "server", "gpu-1", 1, "ReplicaSet", namespace="a")  # outside Kueue
    _gpu_pod(api, "no-gpus", "gpu-0", 0, "Job", namespace="a")
    api.requests.clear()
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active", out.unit_status.message
    assert not [r for r in api.requests if r[1] == "/api/v1/namespaces"], api.requests
    assert _cohort_quota(api)[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "7"
    _gpu_pod(api, "worker-0", "gpu-0", 2, "Job", namespace="a")  # admitted by Kueue
    _gpu_pod(api, "outside-0", "gpu-1", 3, "Job", namespace="storage")  # not Kueue's
    api.requests.clear()
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active", out.unit_status.message
    listed = [r for r in api.requests if r[1] == "/api/v1/namespaces"]
    assert [r.query.get("labelSelector") for r in listed] == ["gpu-k8s.io/kueue=managed"]
    assert _cohort_quota(api)[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "4"  # 8 - 1 - 3


def _configure(out: testing.State, **config: str | int) -> testing.State:
    return dataclasses.replace(out, config={**out.config, **config})


def test_a_team_related_first_asking_for_everything_gets_its_allowance_only(
    ctx, machine, api, releases
):
    """Issue 29 item 6: a guarantee is the operator's to give, not the team's to declare.

    A hostile team related first asks for every GPU and CPU. Unconfigured, its allowance is
    a fair share (the cluster split between the related teams): alone it may hold the
    cluster, but once team b is related it holds half, and b gets its ask up to the other
    half; `reclaimWithinCohort: Any` can reclaim only that. Nothing blocks the control plane
    (a team's ask is no operator error); the log says who asked past its allowance.
    """
    out = _two_gpu_workers(ctx, api)
    gpu, cpu = ("gpu-nvidia-a10g", "nvidia.com/gpu"), ("cpu", "cpu")
    hostile = _team("h", gpus=100, cpu="1000")
    out = ctx.run(ctx.on.update_status(), _with_teams(out, hostile))
    assert out.unit_status.name == "active", out.unit_status.message
    assert (_quota_of(_team_cq(api, "h"))[gpu], _quota_of(_team_cq(api, "h"))[cpu]) == ("8", "12")
    out = ctx.run(ctx.on.update_status(), _with_teams(out, _team("b", gpus=4, cpu="6")))
    assert out.unit_status.name == "active", out.unit_status.message
    assert (_quota_of(_team_cq(api, "h"))[gpu], _quota_of(_team_cq(api, "h"))[cpu]) == ("4", "6")
    assert (_quota_of(_team_cq(api, "b"))[gpu], _quota_of(_team_cq(api, "b"))[cpu]) == ("4", "6")
    assert _cohort_quota(api)[gpu] == "0" and _cohort_quota(api)[cpu] == "0"
    # three teams: 8 GPUs split 2 each (whole GPUs), 12 CPUs 4 each
    out = ctx.run(ctx.on.update_status(), _with_teams(out, _team("c")))
    assert _quota_of(_team_cq(api, "h"))[gpu] == "2"
    assert _quota_of(_team_cq(api, "b"))[gpu] == "2"
    assert _cohort_quota(api)[gpu] == "4"  # c asked nothing: its share stays lendable


def _capped(out: testing.State, team: str) -> list[dict[str, str]] | None:
    """What the control plane told team `team` on kube-api capped its ask (None: nothing)."""
    rel = next(r for r in out.relations if r.endpoint == "kube-api" and r.remote_app_name == team)
    text = rel.local_app_data.get("quota-capped")
    return json.loads(text) if text is not None else None


def _asks(out: testing.State, team: str, **quota: str) -> testing.Relation:
    """Team `team`'s kube-api relation in `out`, asking for `quota` instead."""
    rel = next(r for r in out.relations if r.endpoint == "kube-api" and r.remote_app_name == team)
    return dataclasses.replace(rel, remote_app_data={**rel.remote_app_data, **quota})


def test_the_operators_team_quotas_cap_a_teams_ask_and_the_rest_is_shared(
    ctx, machine, api, releases
):
    """Issue 29 item 6: `team-quotas` names an allowance; others split what it leaves.

    Each team hears what capped its ask on its kube-api relation (its own status says so,
    not only the control plane's log): what it asked, what its ClusterQueue got and what
    capped it (its team-quotas allowance, its fair share, or the cluster when named
    allowances overcommit it); once an ask fits again, the cap is taken back.
    """
    out = _two_gpu_workers(ctx, api)
    gpu, cpu = ("gpu-nvidia-a10g", "nvidia.com/gpu"), ("cpu", "cpu")
    teams = (_team("h", gpus=100, cpu="1000"), _team("b", gpus=8, cpu="2"), _team("c", gpus=8))
    out = _configure(_with_teams(out, *teams), **{"team-quotas": "h=gpu:1 b=cpu:500m"})
    out = ctx.run(ctx.on.config_changed(), out)
    assert out.unit_status.name == "active", out.unit_status.message
    # h: 1 GPU (named), CPUs a share of 12 less b's 0.5 between h and c: 5.75
    assert (_quota_of(_team_cq(api, "h"))[gpu], _quota_of(_team_cq(api, "h"))[cpu]) == (
        "1",
        "5750m",
    )
    # b, c: a share of the 7 GPUs h's allowance leaves: 3 each (whole GPUs)
    assert (_quota_of(_team_cq(api, "b"))[gpu], _quota_of(_team_cq(api, "b"))[cpu]) == (
        "3",
        "500m",
    )
    assert _quota_of(_team_cq(api, "c"))[gpu] == "3"
    assert _cohort_quota(api)[gpu] == "1"
    a10g = gpu[0]
    h_cpu = {"field": "cpu-quota", "flavor": "cpu", "asked": "1000", "given": "5.75"}
    h_cpu["by"] = "fair-share"
    assert _capped(out, "h") == [
        h_cpu,
        {"field": "gpu-quota", "flavor": a10g, "asked": "100", "given": "1", "by": "team-quotas"},
    ]
    assert _capped(out, "b") == [
        {"field": "cpu-quota", "flavor": "cpu", "asked": "2", "given": "0.5", "by": "team-quotas"},
        {"field": "gpu-quota", "flavor": a10g, "asked": "8", "given": "3", "by": "fair-share"},
    ]
    c_gpu = {"field": "gpu-quota", "flavor": a10g, "asked": "8", "given": "3", "by": "fair-share"}
    assert _capped(out, "c") == [c_gpu]
    # h lowers its GPU ask within its allowance: that cap is taken back, its CPU one stays
    lowered = _asks(out, "h", **{"gpu-quota": "1"})
    out = ctx.run(ctx.on.relation_changed(lowered), _with_teams(out, lowered))
    assert _capped(out, "h") == [h_cpu]
    # named allowances past the cluster: b, related after h, gets what is left (Blocked)
    out = _configure(out, **{"team-quotas": "h=gpu:6 b=gpu:8"})
    fits = _asks(out, "h", **{"gpu-quota": "6", "cpu-quota": "1"})
    out = ctx.run(ctx.on.relation_changed(fits), _with_teams(out, fits))
    assert out.unit_status.name == "blocked"
    assert _capped(out, "h") is None  # every ask fits: nothing said
    assert _capped(out, "b") == [  # its CPUs fit its fair share of 4 now
        {"field": "gpu-quota", "flavor": a10g, "asked": "8", "given": "2", "by": "cluster"}
    ]
    assert _capped(out, "c") == [{**c_gpu, "given": "0"}]  # the named leave none to share
    out = ctx.run(ctx.on.config_changed(), _configure(out, **{"team-quotas": "h=gpu:x"}))
    assert out.unit_status == testing.BlockedStatus(
        "Invalid config: team-quotas: 'h=gpu:x' is not "
        "<namespace>=gpu:<n>,cpu:<quantity>,memory:<quantity> (each resource optional, at "
        "least one, each team once)"
    )


def test_a_team_is_told_its_caps_again_only_when_they_or_its_databag_changed(
    ctx, machine, api, releases, monkeypatch
):
    """No team databag is read for its caps while nothing changed (issue 29's cost rule).

    A grant writes a databag whole (a new token at secret-rotate: the fixture's clock
    stands still, so the grants' record is the same): its cap is written back.
    """
    out = _two_gpu_workers(ctx, api)
    h = _team("h", gpus=100)
    out = _configure(_with_teams(out, h), **{"team-quotas": "h=gpu:1"})
    out = ctx.run(ctx.on.config_changed(), out)
    capped = _capped(out, "h")
    assert capped and capped[0]["given"] == "1"
    told: list[int] = []
    real = kube_api.KubeApiProvider.announce_quota

    def announce_quota(provider, relation, caps):
        told.append(relation.id)
        return real(provider, relation, caps)

    monkeypatch.setattr(kube_api.KubeApiProvider, "announce_quota", announce_quota)
    out = ctx.run(ctx.on.relation_changed(out.get_relation(h.id)), out)
    out = ctx.run(ctx.on.update_status(), out)
    assert told == []

    secret = next(s for s in out.secrets if s.label == f"kube-api-{h.id}")
    out = ctx.run(ctx.on.secret_rotate(secret), out)
    assert told == [h.id]
    assert _capped(out, "h") == capped
    out = ctx.run(ctx.on.config_changed(), _configure(out, **{"team-quotas": "h=gpu:2"}))
    assert _capped(out, "h") == [{**capped[0], "given": "2"}]


def test_guarantees_past_the_cluster_block_with_the_numbers(ctx, machine, api, releases):
    """Issue 29 leftover 4: the queue of the team past the cluster gets what is left of it.

    Updated (stricter): team-b's ClusterQueue held its whole ask of 4 while the control
    plane was Blocked; it now holds the 2 GPUs the cluster has left after team-a (related
    first), and the status says what it asked and was given. Updated for issue 29 item 6:
    only the operator's allowances (`team-quotas`) can overcommit the cluster (a team's
    own ask is capped by a fair share), so they are configured here, and the message
    names that option.
    """
    out = _two_gpu_workers(ctx, api)
    out = _configure(out, **{"team-quotas": "a=gpu:6 b=gpu:4"})
    out = ctx.run(ctx.on.update_status(), _with_teams(out, _team("a", gpus=6), _team("b", gpus=4)))
    assert out.unit_status == testing.BlockedStatus(
        "team-quotas overcommit the cluster: 10 nvidia.com/gpu of flavor gpu-nvidia-a10g "
        "guaranteed (team-a 6, team-b 4) but the cluster has 8 (team-b given 2 of 4): lower "
        "team-quotas of kubernetes-control-plane, or add nodes"
    )
    assert _cohort_quota(api)[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "0"
    assert _quota_of(_team_cq(api, "a"))[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "6"
    assert _quota_of(_team_cq(api, "b"))[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "2"
    out = ctx.run(ctx.on.config_changed(), out)  # other hooks keep saying so
    assert out.unit_status.name == "blocked"
    b = next(r for r in out.relations if r.endpoint == "kube-api" and r.remote_app_name == "b")
    lowered = dataclasses.replace(b, remote_app_data={**b.remote_app_data, "gpu-quota": "2"})
    out = ctx.run(ctx.on.relation_changed(lowered), _with_teams(out, lowered))
    assert out.unit_status.name == "active", out.unit_status.message
    assert _cohort_quota(api)[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "0"
    assert _quota_of(_team_cq(api, "b"))[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "2"


def test_the_controllers_with_cluster_wide_rights_run_on_control_plane_nodes_only(
    ctx, machine, api, releases
):
    """Issue 29 item 2: root on a worker never hosts a near-cluster-admin controller.

    Kueue's, JobSet's and Calico's controllers hold cluster-wide write rights (their
    ClusterRoles: pods, secrets, webhooks, nodes...). Tolerating the control-plane taint
    only allows them there ("Taints and Tolerations": a toleration allows scheduling, it
    does not require it); the node selector on kubeadm's control-plane label keeps them
    off workers, whose root could read their ServiceAccount tokens from the kubelet.
    The upstream selectors stay (Calico's kubernetes.io/os).
    """
    _install(ctx)
    for path in (JOBSET_DEPLOY, KUEUE_DEPLOY, CALICO_DEPLOY):
        pod = api.get_object(path)["spec"]["template"]["spec"]
        assert pod["nodeSelector"]["node-role.kubernetes.io/control-plane"] == "", path
    calico = api.get_object(CALICO_DEPLOY)["spec"]["template"]["spec"]
    assert calico["nodeSelector"]["kubernetes.io/os"] == "linux"


def test_a_running_cluster_gets_the_node_selector_after_the_charm_upgrade(
    ctx, machine, api, releases
):
    """What an earlier revision applied (its key had no customisation number) is re-applied."""
    out = _install(ctx)
    bag = dict(peer(out).local_app_data)
    for name in ("jobset", "kueue", "calico"):
        version, url, sha256, settings, _ = json.loads(bag[f"addon-{name}"])
        bag[f"addon-{name}"] = json.dumps([version, url, sha256, settings], sort_keys=True)
    for path in (JOBSET_DEPLOY, KUEUE_DEPLOY, CALICO_DEPLOY):
        obj = api.get_object(path)
        obj["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/os": "linux"}
        api.put_object(path, obj)
    state = dataclasses.replace(
        out, relations=[dataclasses.replace(peer(out), local_app_data=bag)]
    )

    ctx.run(ctx.on.upgrade_charm(), state)

    for path in (JOBSET_DEPLOY, KUEUE_DEPLOY, CALICO_DEPLOY):
        pod = api.get_object(path)["spec"]["template"]["spec"]
        assert pod["nodeSelector"]["node-role.kubernetes.io/control-plane"] == "", path


@pytest.mark.parametrize(
    ("applied", "block", "field", "old", "new"),
    [
        (2, (), "recoveryTimeout", None, "3m"),  # customisation 3
        (3, ("requeuingStrategy",), "backoffMaxSeconds", 3600, 600),  # customisation 4
    ],
)
def test_a_running_cluster_gets_kueues_configuration_after_the_charm_upgrade(
    ctx, machine, api, releases, applied, block, field, old, new
):
    """What a previous revision applied (customisation `applied`: `old`) is redone.

    That revision rolled Kueue by its text's digest; the new text rolls it again, since
    Kueue reads its configuration only when it starts.
    """
    out = _install(ctx)
    bag = dict(peer(out).local_app_data)
    version, url, sha256, settings, _ = json.loads(bag["addon-kueue"])
    bag["addon-kueue"] = json.dumps([version, url, sha256, settings, applied], sort_keys=True)
    cm = api.get_object(KUEUE_CONFIG)
    config = yaml.safe_load(cm["data"]["controller_manager_config.yaml"])
    written = functools.reduce(dict.__getitem__, block, config["waitForPodsReady"])
    written.pop(field)
    if old is not None:
        written[field] = old
    cm["data"]["controller_manager_config.yaml"] = yaml.safe_dump(config)
    api.put_object(KUEUE_CONFIG, cm)
    deploy = api.get_object(KUEUE_DEPLOY)
    rolled_by = hashlib.sha256(yaml.safe_dump(config).encode()).hexdigest()
    deploy["spec"]["template"]["metadata"]["annotations"][DIGEST] = rolled_by
    api.put_object(KUEUE_DEPLOY, deploy)
    state = dataclasses.replace(
        out, relations=[dataclasses.replace(peer(out), local_app_data=bag)]
    )

    ctx.run(ctx.on.upgrade_charm(), state)

    text = api.get_object(KUEUE_CONFIG)["data"]["controller_manager_config.yaml"]
    config = yaml.safe_load(text)
    assert functools.reduce(dict.__getitem__, block, config["waitForPodsReady"])[field] == new
    rolled = api.get_object(KUEUE_DEPLOY)["spec"]["template"]["metadata"]["annotations"]
    assert rolled[DIGEST] == hashlib.sha256(text.encode()).hexdigest() != rolled_by


def _quota_of(cq: dict) -> dict[tuple[str, str], str]:
    return {
        (f["name"], r["name"]): r["nominalQuota"]
        for g in cq["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
    }


def test_the_control_plane_writes_each_teams_queue_from_its_request(ctx, machine, api, releases):
    """Issue 29 item 6: the quota a team asks for on kube-api is its queue's nominal quota.

    Fair-sharing weight 1 and the preemption policy are the control plane's; a consumer
    that asks for no LocalQueue (efs-storage) is no team.
    """
    out = _two_gpu_workers(ctx, api)
    storage = kube_api_relation("efs-storage", "storage")
    out = ctx.run(
        ctx.on.update_status(), _with_teams(out, _team("a", gpus=2, cpu="500m"), storage)
    )
    assert out.unit_status.name == "active", out.unit_status.message
    cq = _team_cq(api, "a")
    assert cq["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kubernetes-control-plane"}
    assert cq["metadata"]["managedFields"][0]["manager"] == "kubernetes-control-plane"
    assert cq["spec"]["fairSharing"] == {"weight": "1"}
    assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "a"}}
    assert cq["spec"]["preemption"] == {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority"},
        "withinClusterQueue": "LowerPriority",
    }
    assert _quota_of(cq) == {
        ("cpu", "cpu"): "500m",
        ("cpu", "memory"): "0",
        ("gpu-nvidia-a10g", "nvidia.com/gpu"): "2",
    }
    assert _team_cq(api, "storage") is None
    assert _cohort_quota(api)[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "6"
    writes = len([r for r in api.requests if r.method != "GET"])
    out = ctx.run(ctx.on.update_status(), out)  # nothing changed: nothing sent
    assert len([r for r in api.requests if r.method != "GET"]) == writes


def test_a_queue_a_team_wrote_itself_is_taken_over_and_its_claims_ignored(
    ctx, machine, api, releases
):
    """The upgrade path: a team's own ClusterQueue, written before the control plane's.

    A hostile team had claimed the whole cluster as its guarantee, weight 1000 in fair
    sharing, a lendingLimit of 0 and no preemption: none of it counts (the guarantees are
    its request's) and the control plane's forced apply plus a merge patch leave its spec
    the control plane's alone.
    """
    out = _two_gpu_workers(ctx, api)
    hostile = {
        "metadata": {
            "labels": {"app.kubernetes.io/managed-by": "a"},
            "managedFields": [{"manager": "a", "operation": "Apply"}],
        },
        "spec": {
            "cohortName": "gpu-k8s",
            "namespaceSelector": {},  # every namespace's workloads
            "fairSharing": {"weight": "1000"},
            "admissionChecksStrategy": {"admissionChecks": []},
            "preemption": {
                "reclaimWithinCohort": "Never",
                "borrowWithinCohort": {"policy": "Never", "maxPriorityThreshold": 5},
                "withinClusterQueue": "Never",
            },
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "gpu-nvidia-a10g",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": "1000",
                                 "lendingLimit": "0"}
                            ],
                        }
                    ],
                }
            ],
        },
    }  # fmt: skip
    api.put_object(f"{KUEUE_API}/clusterqueues/team-a", hostile)
    out = ctx.run(ctx.on.update_status(), _with_teams(out, _team("a"), _team("b", gpus=1)))
    assert out.unit_status.name == "active", out.unit_status.message  # 1000 GPUs: not counted
    cq = _team_cq(api, "a")
    want = kueue.team_queue(kueue.Team("a"), ["gpu-nvidia-a10g"])
    assert cq["spec"] == want["spec"]
    assert cq["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kubernetes-control-plane"}
    assert _cohort_quota(api)[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "7"  # 8 less b's 1


def test_a_team_asking_later_or_more_never_shrinks_an_earlier_teams_queue(
    ctx, machine, api, releases
):
    """Issue 29 leftover 4: first come, first served (kueue.clamp); nothing past the cluster.

    A hostile team related after team-a asks for 100 GPUs and 1000 CPUs: team-a keeps its
    guarantee, the hostile queue holds what the cluster had left, and no queue nor the
    cohort holds a GPU or CPU the nodes do not have. Updated for issue 29 item 6: a
    team's own ask is capped by a fair share, so the operator's `team-quotas` gives both
    teams their asks as allowances here, past the cluster (first come still decides).
    """
    out = _two_gpu_workers(ctx, api)
    out = _configure(out, **{"team-quotas": "a=gpu:2,cpu:4 z=gpu:100,cpu:1000"})
    out = ctx.run(ctx.on.update_status(), _with_teams(out, _team("a", gpus=2, cpu="4")))
    assert out.unit_status.name == "active", out.unit_status.message
    out = ctx.run(ctx.on.update_status(), _with_teams(out, _team("z", gpus=100, cpu="1000")))
    assert out.unit_status.name == "blocked"
    assert "(team-z given 6 of 100)" in out.unit_status.message
    assert "(team-z given 8 of 1000)" in out.unit_status.message
    gpu, cpu = ("gpu-nvidia-a10g", "nvidia.com/gpu"), ("cpu", "cpu")
    assert _quota_of(_team_cq(api, "a"))[gpu] == "2"
    assert _quota_of(_team_cq(api, "a"))[cpu] == "4"
    assert _quota_of(_team_cq(api, "z"))[gpu] == "6"
    assert _quota_of(_team_cq(api, "z"))[cpu] == "8"
    assert _cohort_quota(api)[gpu] == "0" and _cohort_quota(api)[cpu] == "0"


def test_gpus_held_outside_kueue_never_shrink_an_earlier_teams_guarantee(
    ctx, machine, api, releases
):
    """Issue 29 review item 2: a later team's GPU Deployment shrank team-a's guarantee.

    The clamp worked on the cluster less the GPUs held outside Kueue, so team-b's model
    server (its `serve gpus=4`) took 4 of team-a's 6 at the next update-status. They come
    off the cohort's pool now; team-a keeps its 6, and nothing blocks. Updated for issue
    29 item 6: team-a's 6 is past its fair share (4 of 8), so the operator allows it.
    """
    out = _two_gpu_workers(ctx, api)
    out = _configure(out, **{"team-quotas": "a=gpu:6"})
    a, b = _team("a", gpus=6), _team("b")
    out = ctx.run(ctx.on.update_status(), _with_teams(out, a, b))
    gpu = ("gpu-nvidia-a10g", "nvidia.com/gpu")
    assert (_quota_of(_team_cq(api, "a"))[gpu], _cohort_quota(api)[gpu]) == ("6", "2")
    _gpu_pod(api, "serve-0", "gpu-1", 1, "ReplicaSet", namespace="b")  # fits in the pool
    out = ctx.run(ctx.on.update_status(), out)
    assert (_quota_of(_team_cq(api, "a"))[gpu], _cohort_quota(api)[gpu]) == ("6", "1")
    _gpu_pod(api, "serve-1", "gpu-1", 3, "ReplicaSet", namespace="b")  # past the pool
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active", out.unit_status.message
    assert (_quota_of(_team_cq(api, "a"))[gpu], _cohort_quota(api)[gpu]) == ("6", "0")
    assert _quota_of(_team_cq(api, "b"))[gpu] == "0"


def test_a_departed_teams_queue_is_deleted_and_its_quota_returns_to_the_cohort(
    ctx, machine, api, releases
):
    """Issue 29 leftover 4: relation broken, its ClusterQueue goes; the other's stays.

    Kueue's finalizer then holds the queue while its admitted workloads run (kueue.py).
    """
    out = _two_gpu_workers(ctx, api)
    a, b = _team("a", gpus=2), _team("b", gpus=1)
    out = ctx.run(ctx.on.update_status(), _with_teams(out, a, b))
    assert _team_cq(api, "a") is not None
    assert _cohort_quota(api)[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "5"
    out = ctx.run(ctx.on.relation_broken(out.get_relation(a.id)), out)
    out = ctx.run(ctx.on.update_status(), dataclasses.replace(
        out, relations=[r for r in out.relations if r.id != a.id]
    ))  # fmt: skip
    assert out.unit_status.name == "active", out.unit_status.message
    assert _team_cq(api, "a") is None
    assert _team_cq(api, "b") is not None
    assert _cohort_quota(api)[("gpu-nvidia-a10g", "nvidia.com/gpu")] == "7"


BAD_GPU = "GPU-7f3e9a2c-5d41-4b8e-9c0a-1e2f3a4b5c6d"


def _worker_says(ctx, out: testing.State, unit: int, **bag: str) -> testing.State:
    """Worker `unit` changes its databag (`bag` on top of what it had): relation-changed."""
    rel = next(r for r in out.relations if r.endpoint == "workers")
    bags = dict(rel.remote_units_data)
    bags[unit] = {**bags[unit], **bag}
    rel = dataclasses.replace(rel, remote_units_data=bags)
    out = dataclasses.replace(out, relations=[r for r in out.relations if r.id != rel.id] + [rel])
    return ctx.run(ctx.on.relation_changed(rel, remote_unit=unit), out)


def test_a_quarantine_takes_its_node_out_of_the_cohort_in_the_same_hook(
    ctx, machine, api, releases
):
    """Issue 32 item 2: Kueue's quota of a quarantined node is free at once.

    The hook that sets the NoExecute taint (the worker's `gpu-quarantine`, fleet.py) also
    resizes the cohort: the node's GPUs and CPUs leave it then, not at the next
    update-status (up to 5 minutes later, while Kueue could admit new work onto them);
    the readmission's hook gives them back.
    """
    out = _two_gpu_workers(ctx, api)
    gpu, cpu = ("gpu-nvidia-a10g", "nvidia.com/gpu"), ("cpu", "cpu")
    assert (_cohort_quota(api)[gpu], _cohort_quota(api)[cpu]) == ("8", "12")

    out = _worker_says(ctx, out, 0, **{"gpu-quarantine": json.dumps([BAD_GPU])})

    assert out.unit_status.name == "active", out.unit_status.message
    assert {"key": "gpu-k8s.io/gpu-unhealthy", "effect": "NoExecute"} in api.get_object(
        "/api/v1/nodes/gpu-0"
    )["spec"]["taints"]
    assert (_cohort_quota(api)[gpu], _cohort_quota(api)[cpu]) == ("4", "8")  # gpu-1's left
    writes = len([r for r in api.requests if r.method != "GET"])
    out = ctx.run(ctx.on.update_status(), out)  # the periodic resize agrees: nothing sent
    assert len([r for r in api.requests if r.method != "GET"]) == writes

    out = _worker_says(ctx, out, 0, **{"gpu-quarantine": "[]"})  # readmitted

    assert (_cohort_quota(api)[gpu], _cohort_quota(api)[cpu]) == ("8", "12")


WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{}/workloads/{}"


def _admitted_gang(api, ns: str, name: str, node: str, gpus: int, *, team: bool = True) -> str:
    """A batch Job's pod on `node` and its Workload, admitted holding `gpus` GPUs."""
    labels = {"gpu-k8s.io/kueue": "managed"} if team else {}
    api.put_object(f"/api/v1/namespaces/{ns}", {"metadata": {"name": ns, "labels": labels}})
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": f"uid-{ns}-{name}"}
    container = {"name": "main", "image": "tf"}
    pod = {
        "metadata": {"name": f"{name}-0", "namespace": ns, "ownerReferences": [owner]},
        "spec": {"nodeName": node, "containers": [container]},
        "status": {"phase": "Running"},
    }
    api.put_object(f"/api/v1/namespaces/{ns}/pods/{name}-0", pod)
    stamp = "2026-11-28T00:00:00Z"
    reserved = {"status": "True", "reason": "QuotaReserved", "message": "Quota reserved"}
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"job-{name}", "namespace": ns, "ownerReferences": [owner]},
        "spec": {
            "queueName": "training",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": pod["spec"]}}],
        },
        "status": {
            "conditions": [
                {"type": t, "lastTransitionTime": stamp, **reserved}
                for t in ("QuotaReserved", "Admitted")
            ],
            "admission": {
                "clusterQueue": f"team-{ns}",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": 1,
                        "flavors": {"nvidia.com/gpu": "gpu-nvidia-a10g"},
                        "resourceUsage": {"nvidia.com/gpu": str(gpus)},
                    }
                ],
            },
        },
    }
    path = WORKLOADS.format(ns, f"job-{name}")
    api.put_object(path, workload)
    return path


def test_a_quarantine_deactivates_a_team_gang_that_no_longer_fits_then_reactivates_it(
    ctx, machine, api, releases
):
    """Issue 32 item 2 (review43b G3): its quota is free at once, not after recoveryTimeout.

    8 GPUs, two admitted gangs of 4: gpu-0's quarantine leaves 4 for 8 held. The gang
    with a pod on gpu-0 is deactivated in the hook that sets the taint (gang_release);
    the one on gpu-1 (whatever another team's pod claims), and a Workload of a namespace
    that is no team's (its pod on gpu-0 too), are left. Once Kueue evicted it, the next
    hook activates it again and forgets it.
    """
    out = _two_gpu_workers(ctx, api)
    lost = _admitted_gang(api, "a", "lost", "gpu-0", 4)
    kept = _admitted_gang(api, "b", "kept", "gpu-1", 4)
    other = _admitted_gang(api, "system", "tool", "gpu-0", 1, team=False)
    # a hostile team's pod on gpu-0 naming team b's Job as its owner: no owner of b's
    # Workload (another namespace), so b's gang is not taken for one on the node
    _admitted_gang(api, "c", "claim", "gpu-1", 0)
    claim = api.get_object("/api/v1/namespaces/c/pods/claim-0")
    claim["metadata"]["name"] = "claim-1"
    claim["spec"]["nodeName"] = "gpu-0"
    claim["metadata"]["ownerReferences"][0].update(name="kept", uid="uid-b-kept")
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        claim["metadata"].pop(key, None)
    api.put_object("/api/v1/namespaces/c/pods/claim-1", claim)

    out = _worker_says(ctx, out, 0, **{"gpu-quarantine": json.dumps([BAD_GPU])})

    assert out.unit_status.name == "active", out.unit_status.message
    assert api.get_object(lost)["spec"]["active"] is False
    assert api.get_object(kept)["spec"].get("active", True) is True
    assert api.get_object(other)["spec"].get("active", True) is True
    out = ctx.run(ctx.on.update_status(), out)  # Kueue has not evicted it yet: kept off
    assert api.get_object(lost)["spec"]["active"] is False

    evicted = api.get_object(lost)  # Kueue's part (fakes/batch.py K16)
    evicted["status"]["conditions"].append(
        {
            "type": "Evicted",
            "status": "True",
            "reason": "Deactivated",
            "message": "The workload is deactivated",
            "lastTransitionTime": "2026-11-28T00:01:00Z",
        }
    )
    api.put_object(lost, evicted)
    out = ctx.run(ctx.on.update_status(), out)

    assert api.get_object(lost)["spec"]["active"] is True
    assert "kueue-deactivated" not in peer(out).local_app_data


def test_a_quarantine_leaves_every_gang_that_still_fits(ctx, machine, api, releases):
    """4 GPUs left for 3 held: nothing is deactivated, nothing recorded."""
    out = _two_gpu_workers(ctx, api)
    lost = _admitted_gang(api, "a", "moved", "gpu-0", 2)
    kept = _admitted_gang(api, "b", "kept", "gpu-1", 1)

    out = _worker_says(ctx, out, 0, **{"gpu-quarantine": json.dumps([BAD_GPU])})

    assert out.unit_status.name == "active", out.unit_status.message
    assert api.get_object(lost)["spec"].get("active", True) is True
    assert api.get_object(kept)["spec"].get("active", True) is True
    assert "kueue-deactivated" not in peer(out).local_app_data


JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{}/jobsets/{}"
BEFORE = "2026-11-28T05:00:00Z"  # the gangs' pods were made then, before the fault
# the worker's GPU health watcher's condition (kubernetes-worker gpu_watcher.py)
XID79 = {
    "type": "GpuHealthy",
    "status": "False",
    "reason": "Xid79",
    "message": f"GPU 0 ({BAD_GPU}): GPU has fallen off the bus; repair: reboot",
    "lastTransitionTime": "2026-11-28T06:00:00Z",
}


def _jobset_gang(api, ns: str, name: str, nodes: list[str], gpus: int) -> str:
    """A team's JobSet of one Job whose pods run on `nodes`, and its admitted Workload.

    Shaped as JobSet v0.12.0 makes them: the Job owned by the JobSet, each pod labelled
    with the JobSet's name and restart attempt; Kueue's Workload owned by the JobSet.
    Returns the JobSet's path.
    """
    workload = api.get_object(_admitted_gang(api, ns, name, nodes[0], gpus))
    api.put_object(
        f"/api/v1/namespaces/{ns}",
        {"metadata": {"name": ns, "labels": {"gpu-k8s.io/kueue": "managed", CONSUMER_LABEL: ns}}},
    )
    js_ref = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "name": name,
        "uid": f"js-{ns}-{name}",
        "controller": True,
    }
    pod_spec = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "tf"}]}
    job_spec = {
        "parallelism": len(nodes),
        "completions": len(nodes),
        "template": {"spec": pod_spec},
    }
    api.put_object(
        JOBSETS.format(ns, name),
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns, "uid": js_ref["uid"]},
            "spec": {
                "replicatedJobs": [
                    {"name": "worker", "replicas": 1, "template": {"spec": job_spec}}
                ]
            },
            "status": {"restarts": 0},
        },
    )
    api.put_object(
        f"/apis/batch/v1/namespaces/{ns}/jobs/{name}",
        {
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"uid-{ns}-{name}",
                "ownerReferences": [js_ref],
            },
            "spec": {**job_spec, "template": {"spec": pod_spec}},
        },
    )
    first = api.get_object(f"/api/v1/namespaces/{ns}/pods/{name}-0")
    labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/restart-attempt": "0"}
    for i, where in enumerate(nodes):
        pod = {**first, "spec": {**first["spec"], "nodeName": where}}
        pod["metadata"] = {
            "name": f"{name}-{i}",
            "namespace": ns,
            "labels": labels,
            "ownerReferences": first["metadata"]["ownerReferences"],
            "creationTimestamp": BEFORE,
        }
        api.put_object(f"/api/v1/namespaces/{ns}/pods/{name}-{i}", pod)
    workload["metadata"]["ownerReferences"] = [js_ref]
    api.put_object(WORKLOADS.format(ns, f"job-{name}"), workload)
    return JOBSETS.format(ns, name)


def _moves(api, path: str) -> dict | None:
    text = (api.get_object(path)["metadata"].get("annotations") or {}).get("gpu-k8s.io/moves")
    return json.loads(text) if text else None


def _fault(api, node: str, condition: dict) -> None:
    """The worker's watcher sets its condition before its hook asks for the taint."""
    found = api.get_object(f"/api/v1/nodes/{node}")
    found["status"]["conditions"].append(condition)
    api.put_object(f"/api/v1/nodes/{node}", found)


def test_a_quarantine_records_the_move_on_each_team_jobset_with_pods_on_the_node(
    ctx, machine, api, releases
):
    """Issue 32 item 2 (rereview43b finding 3): job-status's `moves` outlives the pods.

    In the hook that sets the taint the leader records, on the JobSet of each team gang
    with a pod on the node, the node, the fault and when it began: counted when the whole
    gang was there (no JobSet restart will count it), not when it ran elsewhere too (its
    JobSet restarts it, uncounted, and counts that, as it did for a gang whose pods there
    are of an earlier restart attempt). A gang elsewhere, and a namespace no
    team's, get nothing. The hook run again from the same state (Juju runs a failed hook
    again with its databag changes discarded) records nothing twice; the consumer
    admission policies let the leader write a consumer's running JobSet.
    """
    out = _two_gpu_workers(ctx, api)
    # 4 GPUs held, 4 left after the quarantine: every gang still fits, none is deactivated
    whole = _jobset_gang(api, "a", "whole", ["gpu-0", "gpu-0"], 1)
    split = _jobset_gang(api, "b", "split", ["gpu-0", "gpu-1"], 1)
    away = _jobset_gang(api, "c", "away", ["gpu-1"], 1)
    raced = _jobset_gang(api, "d", "raced", ["gpu-0"], 1)
    restarted = api.get_object(raced)  # JobSet restarted it before this hook: counted there
    restarted["status"]["restarts"] = 1
    api.put_object(raced, restarted)
    other = _jobset_gang(api, "system", "tool", ["gpu-0"], 0)
    other_ns = api.get_object("/api/v1/namespaces/system")
    other_ns["metadata"]["labels"] = {}
    api.put_object("/api/v1/namespaces/system", other_ns)
    _fault(api, "gpu-0", XID79)
    assert api.objects("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/")
    before = out

    out = _worker_says(ctx, before, 0, **{"gpu-quarantine": json.dumps([BAD_GPU])})

    assert out.unit_status.name == "active", out.unit_status.message
    entry = {"node": "gpu-0", "reason": XID79["message"], "at": XID79["lastTransitionTime"]}
    assert _moves(api, whole) == {"count": 1, "last": [{**entry, "restarted": False}]}
    assert _moves(api, split) == {"count": 0, "last": [{**entry, "restarted": True}]}
    assert _moves(api, raced) == {"count": 0, "last": [{**entry, "restarted": True}]}
    assert _moves(api, away) is None
    assert _moves(api, other) is None
    assert "kueue-deactivated" not in peer(out).local_app_data
    written = api.get_object(whole)["metadata"]["resourceVersion"]

    out = _worker_says(ctx, before, 0, **{"gpu-quarantine": json.dumps([BAD_GPU])})

    assert out.unit_status.name == "active", out.unit_status.message
    assert _moves(api, whole) == {"count": 1, "last": [{**entry, "restarted": False}]}
    assert api.get_object(whole)["metadata"]["resourceVersion"] == written  # nothing sent


def test_a_moves_record_a_team_forged_or_refused_neither_grows_nor_stops_the_quarantine(
    ctx, machine, api, releases
):
    """A team may write its JobSet's annotations: the leader reads them as untrusted.

    A forged record (huge fields, a count that is no number) is read bounded and written
    back small; a refused write (a team's annotations at kube-apiserver's 256 KiB) is
    logged, and the rest of the hook (the taint, the gang that no longer fits) goes on.
    """
    out = _two_gpu_workers(ctx, api)
    forged = _jobset_gang(api, "a", "forged", ["gpu-0"], 4)
    refused = _jobset_gang(api, "b", "refused", ["gpu-0"], 4)
    _jobset_gang(api, "c", "fills", ["gpu-1"], 4)  # 4 GPUs left for 12 held
    js = api.get_object(forged)
    bogus = {"count": "many", "last": [{"node": "x" * 5000, "reason": "r", "at": "t"}] * 20}
    js["metadata"]["annotations"] = {"gpu-k8s.io/moves": json.dumps(bogus)}
    api.put_object(forged, js)
    _fault(api, "gpu-0", XID79)
    api.inject(status=422, method="PATCH", path_prefix=refused, message="annotations too long")

    out = _worker_says(ctx, out, 0, **{"gpu-quarantine": json.dumps([BAD_GPU])})

    assert out.unit_status.name == "active", out.unit_status.message
    record = api.get_object(forged)["metadata"]["annotations"]["gpu-k8s.io/moves"]
    assert json.loads(record)["count"] == 1 and len(record) < 1000
    assert _moves(api, refused) is None
    assert {"key": "gpu-k8s.io/gpu-unhealthy", "effect": "NoExecute"} in api.get_object(
        "/api/v1/nodes/gpu-0"
    )["spec"]["taints"]
    assert api.get_object(WORKLOADS.format("b", "job-refused"))["spec"]["active"] is False


def test_a_record_that_cannot_be_read_or_written_never_stops_the_quota_release(
    ctx, machine, api, releases, monkeypatch
):
    """rereview44b F7: the JobSet GET and the pod LIST fail too (5xx, a timeout).

    The quota is released first; each gang's record is its own: one JobSet unreadable,
    another's pods unlistable, a third still gets its entry, and the hook ends active
    with the taint set and the gangs that no longer fit deactivated.
    """
    out = _two_gpu_workers(ctx, api)
    unread = _jobset_gang(api, "a", "unread", ["gpu-0"], 4)
    unlisted = _jobset_gang(api, "b", "unlisted", ["gpu-0", "gpu-1"], 4)
    fine = _jobset_gang(api, "c", "fine", ["gpu-0"], 2)
    _fault(api, "gpu-0", XID79)
    real = kubeclient._retry  # the client's retries, without their backoff's waits
    monkeypatch.setattr(
        kubeclient, "_retry", lambda retries, backoff, **kw: real(retries, 0.0, **kw)
    )
    api.inject(status=503, times=100, method="GET", path_prefix=unread)
    api.inject(status=503, times=100, method="GET", path_prefix="/api/v1/namespaces/b/pods")

    out = _worker_says(ctx, out, 0, **{"gpu-quarantine": json.dumps([BAD_GPU])})

    assert out.unit_status.name == "active", out.unit_status.message
    assert {"key": "gpu-k8s.io/gpu-unhealthy", "effect": "NoExecute"} in api.get_object(
        "/api/v1/nodes/gpu-0"
    )["spec"]["taints"]
    deactivated = json.loads(peer(out).local_app_data["kueue-deactivated"])
    assert len(deactivated) == 2  # 10 GPUs held, 4 left: two gangs of 4 give theirs back
    assert _moves(api, unread) is None and _moves(api, unlisted) is None
    assert _moves(api, fine)["last"][0]["node"] == "gpu-0"


def test_a_split_gang_deactivated_in_the_quarantine_hook_counts_its_move(
    ctx, machine, api, releases
):
    """rereview44b F8: Kueue suspends it; JobSet restarts no suspended gang, so no count.

    Its pods elsewhere are deleted by the suspension, not failed: the record's count is
    the move's only one (`restarted` false), whereas a split gang that still fits is
    restarted by JobSet (the test above).
    """
    out = _two_gpu_workers(ctx, api)
    split = _jobset_gang(api, "a", "split", ["gpu-0", "gpu-1"], 4)
    _jobset_gang(api, "b", "fills", ["gpu-1"], 4)  # 8 held, 4 left
    _fault(api, "gpu-0", XID79)

    out = _worker_says(ctx, out, 0, **{"gpu-quarantine": json.dumps([BAD_GPU])})

    assert out.unit_status.name == "active", out.unit_status.message
    assert api.get_object(WORKLOADS.format("a", "job-split"))["spec"]["active"] is False
    entry = {"node": "gpu-0", "reason": XID79["message"], "at": XID79["lastTransitionTime"]}
    assert _moves(api, split) == {"count": 1, "last": [{**entry, "restarted": False}]}


def _failed(api, ns: str, pod: str, *, disrupted: bool) -> None:
    """The pod's container exited 143; evicted (DisruptionTarget) or on its own."""
    path = f"/api/v1/namespaces/{ns}/pods/{pod}"
    found = api.get_object(path)
    stamp = "2026-11-28T06:00:01Z"
    conditions = [{"type": "Ready", "status": "False", "lastTransitionTime": stamp}]
    if disrupted:
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "EvictionByEvictionAPI",
                "lastTransitionTime": stamp,
            }
        )
    found["status"] = {"phase": "Failed", "conditions": conditions}
    api.put_object(path, found)


def test_a_gang_whose_peer_already_stopped_on_its_own_is_counted_by_its_jobset_restart(
    ctx, machine, api, releases
):
    """rereview44b F9: a peer's launcher exits 143 without DisruptionTarget (FailJob).

    The JobSet's failure policy restarts the gang (stoppedNotCounted) and its status
    counts the move: the entry says `restarted`, whatever the leader sees of the JobSet's
    status yet. A peer evicted (DisruptionTarget: its Job replaces it) is no restart.
    """
    out = _two_gpu_workers(ctx, api)
    stopped = _jobset_gang(api, "a", "stopped", ["gpu-0", "gpu-0"], 1)
    _failed(api, "a", "stopped-1", disrupted=False)
    evicted = _jobset_gang(api, "b", "evicted", ["gpu-0", "gpu-0"], 1)
    _failed(api, "b", "evicted-1", disrupted=True)
    _fault(api, "gpu-0", XID79)

    out = _worker_says(ctx, out, 0, **{"gpu-quarantine": json.dumps([BAD_GPU])})

    assert out.unit_status.name == "active", out.unit_status.message
    entry = {"node": "gpu-0", "reason": XID79["message"], "at": XID79["lastTransitionTime"]}
    assert _moves(api, stopped) == {"count": 0, "last": [{**entry, "restarted": True}]}
    assert _moves(api, evicted) == {"count": 1, "last": [{**entry, "restarted": False}]}


class _Racing(Kube):
    """The leader's client; `race` runs once, after its first GET of a JobSet.

    What another writer does between the leader's read and its write: kube-apiserver
    orders them, the fake at the line `race` runs.
    """

    race: Callable[[], None] | None = None

    def get(self, api_version, kind, *args, **kwargs):
        found = super().get(api_version, kind, *args, **kwargs)
        if kind == "JobSet" and self.race is not None:
            race, self.race = self.race, None
            race()
        return found


def test_a_record_written_since_it_was_read_is_read_again_never_overwritten(
    ctx, machine, api, releases
):
    """rereview44b F10: the PATCH names the JobSet's uid and resourceVersion.

    Another writer (an old leader's hook still running) adds its entry between the
    leader's GET and PATCH: 409, read again, both entries kept. A JobSet deleted and
    made again under the name in between: 409, and the new one (another uid than the
    Workload's owner) gets nothing.
    """
    _two_gpu_workers(ctx, api)
    js = api.get_object(_jobset_gang(api, "a", "raced", ["gpu-0"], 1))
    workload = api.get_object(WORKLOADS.format("a", "job-raced"))
    pods = api.objects("/api/v1/namespaces/a/pods/")
    faults = {"gpu-0": XID79}
    other = {"node": "gpu-1", "reason": "Xid48", "at": "2026-11-27T00:00:00Z"}

    def old_leader():
        now = api.get_object(JOBSETS.format("a", "raced"))
        patch = kube_objects.moves_patch(now, other["node"], other["reason"], other["at"], False)
        now["metadata"]["annotations"] = patch["metadata"]["annotations"]
        api.put_object(JOBSETS.format("a", "raced"), now)

    with _Racing.from_kubeconfig(api.kubeconfig(), retries=0) as kube:
        kube.race = old_leader
        gang_release.mark_moves(kube, workload, pods, faults)
    entry = {"node": "gpu-0", "reason": XID79["message"], "at": XID79["lastTransitionTime"]}
    assert _moves(api, JOBSETS.format("a", "raced")) == {
        "count": 2,
        "last": [{**other, "restarted": False}, {**entry, "restarted": False}],
    }

    def recreated():
        api.delete_object(JOBSETS.format("a", "raced"))
        api.put_object(
            JOBSETS.format("a", "raced"),
            {**js, "metadata": {"name": "raced", "namespace": "a", "uid": "js-a-raced-2"}},
        )

    later = {**XID79, "lastTransitionTime": "2026-11-29T06:00:00Z"}  # a new quarantine
    with _Racing.from_kubeconfig(api.kubeconfig(), retries=0) as kube:
        kube.race = recreated
        gang_release.mark_moves(kube, workload, pods, {"gpu-0": later})
    assert _moves(api, JOBSETS.format("a", "raced")) is None


def _held(name: str, usage: dict, priority: int = 0, **status) -> dict:
    """A Workload holding `usage` ({resource: amount}) of flavor gpu-a (cpu for cpu)."""
    flavors = {r: "cpu" if r == "cpu" else "gpu-a" for r in usage}
    return {
        "metadata": {"name": name, "creationTimestamp": f"2026-11-28T00:00:0{len(name)}Z"},
        "spec": {"priority": priority},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admission": {"podSetAssignments": [{"flavors": flavors, "resourceUsage": usage}]},
            **status,
        },
    }


def test_unfitting_takes_the_lowest_priority_candidates_until_what_is_held_fits():
    gpu = ("gpu-a", "nvidia.com/gpu")
    low, high = _held("low", {"nvidia.com/gpu": "2"}), _held("high", {"nvidia.com/gpu": "2"}, 9)
    running = _held("running", {"nvidia.com/gpu": "2"})
    everyone = [low, high, running]
    assert kueue.unfitting(everyone, {gpu: 4.0}, [high, low]) == [low]
    assert kueue.unfitting(everyone, {gpu: 2.0}, [high, low]) == [low, high]
    assert kueue.unfitting(everyone, {gpu: 6.0}, [high, low]) == []  # it all fits
    # a resource this charm does not size is not judged; one the candidate does not hold
    # does not make it go
    cpu = _held("cpu-job", {"cpu": "64"})
    assert kueue.unfitting([*everyone, cpu], {gpu: 6.0}, [cpu]) == []
    assert kueue.unfitting([*everyone, cpu], {gpu: 4.0, ("cpu", "cpu"): 100.0}, [cpu]) == []


def test_unfitting_takes_nothing_when_a_usage_cannot_be_read():
    gpu = ("gpu-a", "nvidia.com/gpu")
    lost = _held("lost", {"nvidia.com/gpu": "4"})
    broken = _held("broken", {"nvidia.com/gpu": "4"})
    broken["status"]["admission"]["podSetAssignments"][0]["flavors"] = {}  # no flavor
    assert kueue.unfitting([lost, broken], {gpu: 0.0}, [lost]) == []
    garbled = _held("garbled", {"nvidia.com/gpu": "four"})
    assert kueue.unfitting([lost, garbled], {gpu: 0.0}, [lost]) == []
    # evicted or finished ones hold nothing Kueue will keep; neither are candidates
    gone = _held("gone", {"nvidia.com/gpu": "4"})
    gone["status"]["conditions"].append({"type": "Evicted", "status": "True"})
    assert kueue.unfitting([lost, gone], {gpu: 4.0}, [lost, gone]) == []


# -- Kueue's objects are built only when what they are built from changed (issue 29) ------

A10G_GPUS = ("gpu-nvidia-a10g", "nvidia.com/gpu")
H100 = "NVIDIA H100 80GB HBM3"


def _builds(monkeypatch) -> list[str]:
    """What builds Kueue's objects from now on: each call of kueue's builders, by name.

    The real builders run; only their calls are counted.
    """
    built: list[str] = []
    for name in ("cluster_objects", "team_queue"):

        def counted(*args, _real=getattr(kueue, name), _name=name, **kwargs):
            built.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(kueue, name, counted)
    return built


def _teams_a_and_b(ctx, api) -> testing.State:
    """Two A10G workers of 4 GPUs, team a asking for 2 GPUs and team b for 1, sized."""
    out = _two_gpu_workers(ctx, api)
    out = ctx.run(ctx.on.update_status(), _with_teams(out, _team("a", gpus=2), _team("b", gpus=1)))
    assert out.unit_status.name == "active", out.unit_status.message
    assert _cohort_quota(api)[A10G_GPUS] == "5"
    return out


def _kueue_writes(api, since: int) -> list[str]:
    return [
        r.path for r in api.requests[since:] if r.method != "GET" and "kueue.x-k8s.io" in r.path
    ]


def test_a_steady_hook_builds_no_kueue_object(ctx, machine, api, releases, monkeypatch):
    """A team's relation-changed, a worker's, config-changed and update-status build none."""
    out = _teams_a_and_b(ctx, api)
    built = _builds(monkeypatch)
    since = len(api.requests)
    a = next(r for r in out.relations if r.endpoint == "kube-api" and r.remote_app_name == "a")
    workers = next(r for r in out.relations if r.endpoint == "workers")
    out = ctx.run(ctx.on.relation_changed(a), out)
    out = ctx.run(ctx.on.relation_changed(workers, remote_unit=1), out)
    out = ctx.run(ctx.on.config_changed(), out)
    out = ctx.run(ctx.on.update_status(), out)  # sizes the cohort again: the same
    assert out.unit_status.name == "active", out.unit_status.message
    assert built == []
    assert _kueue_writes(api, since) == []


def _team_related(ctx, api, out):
    out = ctx.run(ctx.on.relation_changed(c := _team("c", gpus=1)), _with_teams(out, c))
    assert _quota_of(_team_cq(api, "c"))[A10G_GPUS] == "1"
    assert _cohort_quota(api)[A10G_GPUS] == "4"


def _team_asks_more(ctx, api, out):
    ctx.run(
        ctx.on.relation_changed(a := _asks(out, "a", **{"gpu-quota": "3"})), _with_teams(out, a)
    )
    assert _quota_of(_team_cq(api, "a"))[A10G_GPUS] == "3"
    assert _cohort_quota(api)[A10G_GPUS] == "4"


def _worker_reports_another_model(ctx, api, out):
    """No resize (the same Nodes, teams and quarantine): only the models changed."""
    _worker_says(ctx, out, 0, **{"gpu-inventory": json.dumps([{"model": H100, "count": 4}])})
    flavor = api.get_object(f"{FLAVORS}gpu-nvidia-h100-80gb-hbm3")
    assert flavor["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def _node_joins(ctx, api, out):
    """A third A10G worker: the cohort grows by its 4 GPUs (the teams' guarantees stay)."""
    api.put_object("/api/v1/nodes/gpu-2", node("gpu-2", gpus=4))
    rel = next(r for r in out.relations if r.endpoint == "workers")
    gpus = [{"model": "NVIDIA A10G", "count": 4}]
    bags = {**rel.remote_units_data, 2: worker_bag("gpu-2", gpus)}
    rel = dataclasses.replace(rel, remote_units_data=bags)
    out = dataclasses.replace(out, relations=[r for r in out.relations if r.id != rel.id] + [rel])
    ctx.run(ctx.on.relation_changed(rel, remote_unit=2), out)
    assert _cohort_quota(api)[A10G_GPUS] == "9"


def _time_slicing_turned_on(ctx, api, out):
    """No resize either: only `shared` changed, which names the flavors' product label."""
    ctx.run(ctx.on.config_changed(), _configure(out, **{"gpu-time-slicing-replicas": 4}))
    flavor = api.get_object(f"{FLAVORS}gpu-nvidia-a10g")
    assert flavor["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-A10G-SHARED"}


def _team_quotas_set(ctx, api, out):
    ctx.run(ctx.on.config_changed(), _configure(out, **{"team-quotas": "a=gpu:1"}))
    assert _quota_of(_team_cq(api, "a"))[A10G_GPUS] == "1"
    assert _cohort_quota(api)[A10G_GPUS] == "6"


@pytest.mark.parametrize(
    "change",
    [
        _team_related,
        _team_asks_more,
        _worker_reports_another_model,
        _node_joins,
        _time_slicing_turned_on,
        _team_quotas_set,
    ],
)
def test_each_input_of_kueues_objects_builds_and_applies_them_again(
    ctx, machine, api, releases, monkeypatch, change
):
    out = _teams_a_and_b(ctx, api)
    built = _builds(monkeypatch)
    change(ctx, api, out)
    assert "cluster_objects" in built


def _priority(api, name: str) -> int:
    return api.get_object(f"{KUEUE_API}/workloadpriorityclasses/{name}")["value"]


def test_a_refreshed_charm_builds_kueues_objects_again(
    ctx, machine, api, releases, tmp_path, monkeypatch
):
    """Another charm may build other objects from the same inputs: it builds them again."""
    out = _teams_a_and_b(ctx, api)
    monkeypatch.setattr(kueue, "PRIORITIES", {**kueue.PRIORITIES, "high": 20000})  # another's
    out = ctx.run(ctx.on.update_status(), out)  # the same charm: nothing built
    assert _priority(api, "high") == 10000

    deployed_charm(tmp_path / "charm", "ch:amd64/kubernetes-control-plane-2")
    out = ctx.run(ctx.on.upgrade_charm(), out)
    assert _priority(api, "high") == 20000


def test_without_a_charm_url_kueues_objects_are_built_each_hook(
    machine, api, releases, monkeypatch
):
    """Where Juju wrote no charm URL (`.juju-charm`), every hook builds them, as before."""
    bare = testing.Context(charm.KubernetesControlPlaneCharm)
    out = _install(bare)
    built = _builds(monkeypatch)
    bare.run(bare.on.update_status(), out)
    assert "cluster_objects" in built


def test_a_charm_refreshed_back_and_forth_applies_its_own_kueue_objects_again(
    ctx, machine, api, releases, monkeypatch
):
    """A revision before the record applied its own objects in between: ours come back."""
    out = _teams_a_and_b(ctx, api)
    record = peer(out).local_app_data["kueue-objects-charm"]
    ours = kueue.PRIORITIES
    monkeypatch.setattr(kueue, "PRIORITIES", {**ours, "high": 20000})
    older = testing.Context(charm.KubernetesControlPlaneCharm)
    out = older.run(older.on.upgrade_charm(), out)
    assert _priority(api, "high") == 20000
    # an older revision knows no record: it leaves ours, next to its own fingerprint
    bag = {**peer(out).local_app_data, "kueue-objects-charm": record}
    out = dataclasses.replace(
        out,
        relations=[
            dataclasses.replace(r, local_app_data=bag) if r.endpoint == "peers" else r
            for r in out.relations
        ],
    )
    monkeypatch.setattr(kueue, "PRIORITIES", ours)
    ctx.run(ctx.on.upgrade_charm(), out)  # back to the first charm URL
    assert _priority(api, "high") == 10000
