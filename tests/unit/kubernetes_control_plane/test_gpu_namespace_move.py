"""A running cluster's NVIDIA components move from kube-system to gpu-k8s-gpu (issue 29 item 3).

Before, the device plugin, DCGM exporter and MIG manager ran in kube-system. After a refresh
the leader deletes the charm's kube-system copies first and applies the new ones only once
no pod of the old DaemonSets is left: on one node two device plugins of `nvidia.com/gpu`
would leave it without GPUs (device_plugin.retire_legacy says why), two DCGM exporters
cannot share port 9400, two MIG managers would both act on one change.
"""

from __future__ import annotations

import copy

import dcgm_exporter
import device_plugin
import mig_manager
import pytest
from ops import testing
from test_mig_manager import H100

from fakes.control_plane import join_workers, peer, peers, worker_bag, workers_relation

OLD = "kube-system"
NEW = "gpu-k8s-gpu"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
NAMES = ("nvidia-device-plugin", "dcgm-exporter", "nvidia-mig-manager")
GPU = (("NVIDIA H100 80GB HBM3", "2330", H100["mig-profiles"]),)


def _path(obj: dict) -> str:
    group = obj["apiVersion"]
    base = "/api/v1" if group == "v1" else f"/apis/{group}"
    plural = {
        "DaemonSet": "daemonsets",
        "ConfigMap": "configmaps",
        "ServiceAccount": "serviceaccounts",
        "Role": "roles",
        "RoleBinding": "rolebindings",
    }[obj["kind"]]
    return f"{base}/namespaces/{obj['metadata']['namespace']}/{plural}/{obj['metadata']['name']}"


def _seed_kube_system(api) -> None:
    """What the charm applied before: the same objects in kube-system, each DaemonSet's pod."""
    objects = [
        *device_plugin.manifests("none", 1),
        *dcgm_exporter.manifests(),
        *mig_manager.manifests([mig_manager.MigGpu(*g) for g in GPU]),
    ]
    for obj in objects:
        if obj["metadata"].get("namespace") != NEW:
            continue
        old = copy.deepcopy(obj)
        old["metadata"]["namespace"] = OLD
        for subject in old.get("subjects", ()):
            subject["namespace"] = OLD
        api.put_object(_path(old), old)
        if old["kind"] == "DaemonSet":
            name = old["metadata"]["name"]
            labels = old["spec"]["template"]["metadata"]["labels"]
            pod = {"metadata": {"name": f"{name}-old", "labels": labels}}
            api.put_object(f"/api/v1/namespaces/{OLD}/pods/{name}-old", pod)


@pytest.fixture
def bootstrapped(ctx, machine):
    return ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))


def test_the_old_go_first_and_the_new_come_once_their_pods_are_gone(ctx, bootstrapped, api):
    _seed_kube_system(api)
    rel = workers_relation({0: worker_bag("h100-0", [H100])})

    out = join_workers(ctx, bootstrapped, rel, api)

    # the old DaemonSets and what they read are deleted; their pods still stop
    for name in NAMES:
        assert api.get_object(f"/apis/apps/v1/namespaces/{OLD}/daemonsets/{name}") is None
        assert api.get_object(f"/api/v1/namespaces/{OLD}/pods/{name}-old") is not None
        assert api.get_object(f"/apis/apps/v1/namespaces/{NEW}/daemonsets/{name}") is None
    left = {c["metadata"]["name"] for c in api.objects(f"/api/v1/namespaces/{OLD}/configmaps/")}
    assert not {n for n in left if n.startswith(NAMES)}, left  # kube-state-metrics' stay
    assert api.get_object(f"/api/v1/namespaces/{OLD}/serviceaccounts/nvidia-mig-manager") is None
    assert api.get_object(f"{RBAC}/namespaces/{OLD}/roles/nvidia-mig-manager") is None
    bag = peer(out).local_app_data
    assert not {"device-plugin", "dcgm-exporter", "mig-manager"} & set(bag)

    # kubelet has stopped them: the next hook applies the new ones
    for name in NAMES:
        api.delete_object(f"/api/v1/namespaces/{OLD}/pods/{name}-old")
    out = ctx.run(ctx.on.update_status(), out)

    namespace = api.get_object(f"/api/v1/namespaces/{NEW}")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for name in NAMES:
        assert api.get_object(f"/apis/apps/v1/namespaces/{NEW}/daemonsets/{name}")
    binding = api.get_object(f"{RBAC}/clusterrolebindings/nvidia-mig-manager")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "nvidia-mig-manager", "namespace": NEW}
    ]
    assert {"device-plugin", "dcgm-exporter", "mig-manager"} <= set(peer(out).local_app_data)


def test_kube_system_objects_the_charm_did_not_make_are_left_alone(ctx, bootstrapped, api):
    labels = {"name": "nvidia-device-plugin-ds"}  # another installer's, no labels of ours
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c"}]}}
    template["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    spec = {"selector": {"matchLabels": labels}, "template": template}
    theirs = {"metadata": {"name": "nvidia-device-plugin", "labels": {}}, "spec": spec}
    api.put_object(f"/apis/apps/v1/namespaces/{OLD}/daemonsets/nvidia-device-plugin", theirs)
    rel = workers_relation({0: worker_bag("gpu-0", [{"model": "NVIDIA A10G", "count": 4}])})

    join_workers(ctx, bootstrapped, rel, api)

    assert api.get_object(f"/apis/apps/v1/namespaces/{OLD}/daemonsets/nvidia-device-plugin")
    assert api.get_object(f"/apis/apps/v1/namespaces/{NEW}/daemonsets/nvidia-device-plugin")
