"""`image-registry`: every image the control plane deploys comes from the mirror."""

from __future__ import annotations

import dataclasses
import tomllib

import batch_engines
import dcgm_exporter
import device_plugin
import efs_csi
import flannel
import image_registry
import kube_state_metrics
import mig_manager
import pytest
import yaml
from literals import CALICO_RELEASE, JOBSET, KUEUE
from ops import testing

from fakes.addons import release_manifest
from fakes.control_plane import join_workers, peer, peers, worker_bag, workers_relation

MIRROR = "registry.example.com:5000/mirror"
OTHER = "mirror.internal/k8s"
DS = "/apis/apps/v1/namespaces/gpu-k8s-gpu/daemonsets/nvidia-device-plugin"
CALICO_DS = "/apis/apps/v1/namespaces/kube-system/daemonsets/calico-node"  # a new cluster's CNI
KUBEADM_CONFIG = "/api/v1/namespaces/kube-system/configmaps/kubeadm-config"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
GPUS = [{"model": "NVIDIA A10G", "count": 1}]


def deployed(ctx, api, registry: str = "") -> testing.State:
    """A bootstrapped leader with one GPU worker, `image-registry` set from the start."""
    config = {"image-registry": registry} if registry else {}
    state = testing.State(leader=True, relations=[peers()], config=config)
    out = ctx.run(ctx.on.install(), state)
    return join_workers(ctx, out, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)


def images(obj: dict) -> set[str]:
    spec = obj["spec"]["template"]["spec"]
    return {c["image"] for c in spec.get("initContainers", []) + spec["containers"]}


def sandbox(machine) -> str:
    config = tomllib.loads(machine.read(CONTAINERD_CONFIG))
    return config["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"]


def cluster_configuration(api) -> dict:
    return yaml.safe_load(api.get_object(KUBEADM_CONFIG)["data"]["ClusterConfiguration"])


def test_without_a_registry_everything_comes_from_upstream(ctx, machine, api):
    deployed(ctx, api)

    init = next(d for d in machine.inits[0] if d["kind"] == "ClusterConfiguration")
    assert "imageRepository" not in init and "dns" not in init  # kubeadm's default
    assert sandbox(machine) == "registry.k8s.io/pause:3.10.1"
    assert images(api.get_object(CALICO_DS)) == {
        "quay.io/calico/cni:v3.32.1",
        "quay.io/calico/node:v3.32.1",
    }
    assert images(api.get_object(DS)) == {"nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}


def test_kubeadm_init_pulls_every_image_from_the_mirror(ctx, machine, api):
    deployed(ctx, api, MIRROR)

    init = next(d for d in machine.inits[0] if d["kind"] == "ClusterConfiguration")
    # control-plane images, kube-proxy, etcd and pause: <imageRepository>/<name>:<tag>;
    # CoreDNS keeps its upstream path coredns/coredns below the mirror
    assert init["imageRepository"] == MIRROR
    assert init["dns"] == {"imageRepository": f"{MIRROR}/coredns"}
    # what joins and upgrades read later
    assert cluster_configuration(api)["imageRepository"] == MIRROR


def test_containerd_on_the_control_plane_pulls_its_sandbox_from_the_mirror(ctx, machine, api):
    deployed(ctx, api, MIRROR)

    assert sandbox(machine) == f"{MIRROR}/pause:3.10.1"


def test_add_ons_pull_from_the_mirror(ctx, machine, api):
    deployed(ctx, api, MIRROR)

    assert images(api.get_object(CALICO_DS)) == {
        f"{MIRROR}/calico/cni:v3.32.1",
        f"{MIRROR}/calico/node:v3.32.1",
    }
    assert images(api.get_object(DS)) == {f"{MIRROR}/nvidia/k8s-device-plugin:v0.20.0"}


def test_workers_are_told_the_registry(ctx, machine, api):
    out = deployed(ctx, api, MIRROR)

    workers = next(r for r in out.relations if r.endpoint == "workers")
    assert workers.local_app_data["image-registry"] == MIRROR


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "https://registry.example.com",
            "image-registry: 'https://registry.example.com' is a URL",
        ),
        ("Registry Example", "image-registry: 'Registry Example' is not a registry host"),
        ("registry.example.com/Mirror", "image-registry: 'registry.example.com/Mirror' is not"),
    ],
)
def test_a_malformed_registry_blocks_before_anything_is_done(ctx, machine, api, value, message):
    before = len(api.requests)
    state = testing.State(leader=True, relations=[peers()], config={"image-registry": value})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(f"Invalid config: {message}")
    assert machine.calls == []
    assert api.requests[before:] == []


def test_a_malformed_registry_on_a_running_cluster_changes_nothing(ctx, machine, api):
    out = deployed(ctx, api, MIRROR)
    calls, requests = len(machine.calls), len(api.requests)

    out = ctx.run(
        ctx.on.config_changed(), dataclasses.replace(out, config={"image-registry": "http://x"})
    )

    assert out.unit_status.message.startswith("Invalid config: image-registry: 'http://x'")
    assert machine.calls[calls:] == []
    assert api.requests[requests:] == []
    assert images(api.get_object(DS)) == {f"{MIRROR}/nvidia/k8s-device-plugin:v0.20.0"}


def test_a_new_registry_reaches_the_running_cluster(ctx, machine, api):
    out = deployed(ctx, api)
    restarts = machine.services["containerd"].restarts

    out = ctx.run(
        ctx.on.config_changed(), dataclasses.replace(out, config={"image-registry": OTHER})
    )

    assert images(api.get_object(CALICO_DS)) == {
        f"{OTHER}/calico/cni:v3.32.1",
        f"{OTHER}/calico/node:v3.32.1",
    }
    assert images(api.get_object(DS)) == {f"{OTHER}/nvidia/k8s-device-plugin:v0.20.0"}
    cluster = cluster_configuration(api)
    assert cluster["imageRepository"] == OTHER
    assert cluster["dns"] == {"imageRepository": f"{OTHER}/coredns"}
    assert cluster["apiServer"]["certSANs"]  # the rest of the configuration is kept
    assert sandbox(machine) == f"{OTHER}/pause:3.10.1"
    assert machine.services["containerd"].restarts == restarts + 1
    workers = next(r for r in out.relations if r.endpoint == "workers")
    assert workers.local_app_data["image-registry"] == OTHER
    assert out.unit_status.name == "active"

    # nothing new: no request that changes anything, no restart
    requests = len(api.requests)
    ctx.run(ctx.on.config_changed(), out)
    assert [r for r in api.requests[requests:] if r.method != "GET"] == []
    assert machine.services["containerd"].restarts == restarts + 1


def test_an_emptied_registry_goes_back_to_upstream(ctx, machine, api):
    out = deployed(ctx, api, MIRROR)

    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={}))

    assert images(api.get_object(DS)) == {"nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}
    assert "quay.io/calico/node:v3.32.1" in images(api.get_object(CALICO_DS))
    cluster = cluster_configuration(api)
    assert cluster["imageRepository"] == "registry.k8s.io"  # kubeadm's default
    assert cluster["dns"] == {}
    assert sandbox(machine) == "registry.k8s.io/pause:3.10.1"
    workers = next(r for r in out.relations if r.endpoint == "workers")
    assert "image-registry" not in workers.local_app_data


def test_an_upgrade_pulls_from_the_registry_set_with_it(ctx, machine, api):
    out = deployed(ctx, api)
    seen: list[dict] = []
    upgrade = machine._kubeadm["upgrade"]

    def upgrade_reading_kubeadm_config(argv, input):
        seen.append(cluster_configuration(api))  # what `kubeadm upgrade apply` reads
        return upgrade(argv, input)

    machine.on_kubeadm("upgrade", upgrade_reading_kubeadm_config)
    config = {"image-registry": MIRROR, "kubernetes-version": "1.37"}

    ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config=config))

    assert machine.upgrades == [("apply", "1.37.1")]
    assert seen[0]["imageRepository"] == MIRROR


def test_a_charm_upgrade_without_a_registry_changes_nothing(ctx, machine, api):
    out = deployed(ctx, api)
    # what a charm revision without the option left in the peer data
    bag = {k: v for k, v in peer(out).local_app_data.items() if k != "image-registry"}
    relation = dataclasses.replace(peer(out), local_app_data=bag)
    state = dataclasses.replace(
        out, relations=[relation, *(r for r in out.relations if r.endpoint != "peers")]
    )
    requests = len(api.requests)

    ctx.run(ctx.on.upgrade_charm(), state)

    assert [r.path for r in api.requests[requests:] if r.method != "GET"] == []


def test_upstream_images_is_every_image_the_manifests_run():
    """The list the help text and the air-gapped page are checked against (test_images)."""
    objects = [
        *device_plugin.manifests("none", 1),
        *dcgm_exporter.manifests(),
        *mig_manager.manifests([]),
        *kube_state_metrics.manifests("node-0"),
        *flannel.manifests("10.244.0.0/16"),
    ]
    for release in (CALICO_RELEASE, JOBSET, KUEUE):
        objects += batch_engines.parse(release, release_manifest(release.name, release.version))
    found = {*batch_engines.images(objects), *efs_csi.image_list()}
    found.add(image_registry.sandbox_image(""))  # containerd's, not a manifest's
    assert found == set(image_registry.upstream_images())
