"""Everything the charm applies is valid (strict schema) on every minor it can deploy."""

from __future__ import annotations

import calico
import device_plugin
import flannel
import kubernetes_validate
import mig_manager
import pytest
import rbac
import yaml
from literals import FLANNEL_CNI_PLUGIN_VERSION, FLANNEL_VERSION

from charms.gpu_k8s.v0 import kubeadm
from charms.gpu_k8s.v0.kube_api import Rule
from fakes.addons import calico_objects

# The minors kubeadm.RELEASES can deploy that are still supported upstream, and the default.
MINORS = sorted({kubeadm.DEFAULT_MINOR, *(m for m in kubeadm.RELEASES if m >= "1.35")})


def flannel_objects(pod_cidr: str = "10.244.0.0/16", registry: str = "") -> list[dict]:
    return flannel.manifests(pod_cidr, registry)


def calico_changed() -> list[dict]:
    """Calico's objects the charm changes (upstream's own, tests/fixtures/calico/)."""
    objects = calico.transform("10.244.0.0/16")(calico_objects())
    return [o for o in objects if o["kind"] in ("ConfigMap", "DaemonSet", "Deployment")]


def consumer_objects() -> list[dict]:
    rule = Rule.model_validate({"api-groups": ["batch"], "resources": ["jobs"], "verbs": ["get"]})
    return rbac.manifests(rbac.consumer_grant("tensorflow", "training", [rule], [rule]))


@pytest.mark.parametrize("minor", MINORS)
@pytest.mark.parametrize(
    "obj",
    flannel_objects()
    + calico_changed()
    + rbac.manifests(rbac.worker_grant())
    + consumer_objects()
    + flannel_objects(registry="registry.example.com:5000/mirror")
    + device_plugin.manifests("mixed", 4)
    + device_plugin.manifests("none", 1, "registry.example.com:5000/mirror")
    + mig_manager.manifests(
        [mig_manager.MigGpu("NVIDIA H100 80GB HBM3", "2330", {"1g.10gb": 7})],
        "registry.example.com:5000/mirror",
    ),
    ids=lambda o: f"{o['kind']}/{o['metadata']['name']}",
)
def test_manifest_is_valid_for_every_deployable_minor(obj, minor):
    kubernetes_validate.validate(obj, f"{minor}.0", strict=True)


def test_flannel_is_pinned_and_gets_the_pod_cidr():
    objs = flannel_objects("172.20.0.0/16")
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    images = [c["image"] for c in spec["initContainers"] + spec["containers"]]
    assert set(images) == {
        f"ghcr.io/flannel-io/flannel:{FLANNEL_VERSION}",
        f"ghcr.io/flannel-io/flannel-cni-plugin:{FLANNEL_CNI_PLUGIN_VERSION}",
    }
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    assert '"Network": "172.20.0.0/16"' in cm["data"]["net-conf.json"]
    assert "__POD_CIDR__" not in yaml.safe_dump_all(objs)


def containers(obj: dict) -> list[dict]:
    spec = obj["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def test_flannel_images_move_to_the_mirror_keeping_their_paths():
    objs = flannel_objects(registry="registry.example.com:5000/mirror")
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    assert {c["image"] for c in containers(ds)} == {
        f"registry.example.com:5000/mirror/flannel-io/flannel:{FLANNEL_VERSION}",
        "registry.example.com:5000/mirror/flannel-io/flannel-cni-plugin:"
        f"{FLANNEL_CNI_PLUGIN_VERSION}",
    }
    # only what is applied changes, never the upstream file; and only the images
    assert "registry.example.com" not in flannel.MANIFEST.read_text()
    upstream = flannel_objects()
    for daemon_set in (ds, next(o for o in upstream if o["kind"] == "DaemonSet")):
        for container in containers(daemon_set):
            del container["image"]
    assert objs == upstream
