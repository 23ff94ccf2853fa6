"""The EFS CSI driver's node plugin, from its pinned upstream files (issue 29 item 5).

The files are the real ones of kubernetes-sigs/aws-efs-csi-driver v3.4.1
(tests/fixtures/efs-csi-driver), served from 127.0.0.1 by `fakes.addons.ManifestServer`
(the conftest points the pinned raw.githubusercontent.com URLs at it). What the leader
applies is checked against what upstream's install (`kubectl kustomize
deploy/kubernetes/overlays/stable`, recorded with the real kubectl) makes of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging

import efs_csi
import kubernetes_validate
import pytest
import yaml
from ops import testing

from charms.gpu_k8s.v0 import kubeadm
from fakes.addons import EFS_CSI_DIR, EFS_CSI_FILES, EFS_CSI_PATH, efs_csi_file
from fakes.control_plane import peer, peers

NS = "/api/v1/namespaces/gpu-k8s-efs-csi"
DAEMONSET = "/apis/apps/v1/namespaces/gpu-k8s-efs-csi/daemonsets/efs-csi-node"
CSIDRIVER = "/apis/storage.k8s.io/v1/csidrivers/efs.csi.aws.com"
BINDING = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/efs-csi-node-binding"


MINORS = sorted({kubeadm.DEFAULT_MINOR, *(m for m in kubeadm.RELEASES if m >= "1.35")})


def _install(ctx, config: dict | None = None) -> testing.State:
    return ctx.run(
        ctx.on.install(), testing.State(leader=True, relations=[peers()], config=config or {})
    )


def _efs_requests(releases) -> list[str]:
    return [p for p in releases.requests if p.startswith(EFS_CSI_PATH)]


def test_the_pins_are_the_fixtures_the_real_upstream_files():
    assert [f for f, _ in efs_csi.FILES] == list(EFS_CSI_FILES)
    for file, pinned in efs_csi.FILES:
        assert hashlib.sha256(efs_csi_file(file)).hexdigest() == pinned


@pytest.mark.parametrize("minor", MINORS)
def test_every_object_is_valid_for_every_deployable_minor(minor):
    files = {f: efs_csi_file(f) for f in EFS_CSI_FILES}
    for obj in efs_csi.manifests(files, "registry.example.com:5000/mirror"):
        kubernetes_validate.validate(obj, f"{minor}.0", strict=True)


def test_what_is_applied_is_what_kustomize_makes_of_the_node_files_in_our_namespace():
    """Upstream's kustomize output, less the controller, with our namespace for kube-system."""
    text = (EFS_CSI_DIR / "kustomize-overlays-stable.yaml").read_text()
    kustomized = [d for d in yaml.safe_load_all(text) if d]
    controller = {"efs-csi-controller", "efs-csi-controller-sa"}
    controller_rbac = {
        "efs-csi-external-provisioner-role",
        "efs-csi-external-provisioner-role-describe-secrets",
        "efs-csi-provisioner-binding",
        "efs-csi-provisioner-binding-describe-secrets",
    }
    upstream = [d for d in kustomized if d["metadata"]["name"] not in controller | controller_rbac]
    assert {d["kind"] for d in kustomized} - {d["kind"] for d in upstream} == {
        "Deployment",
        "RoleBinding",
    }
    ours = efs_csi.manifests({f: efs_csi_file(f) for f in EFS_CSI_FILES})
    assert ours[0]["kind"] == "Namespace"
    text = json.dumps(upstream).replace('"kube-system"', '"gpu-k8s-efs-csi"')

    def key(obj: dict) -> tuple[str, str]:
        return obj["kind"], obj["metadata"]["name"]

    assert sorted(ours[1:], key=key) == sorted(json.loads(text), key=key)
    assert not [o for o in ours if o["kind"] == "Deployment" or "controller" in key(o)[1]]


def test_the_driver_serves_no_inline_ephemeral_volumes():
    """Issue 29 (fourth review, G9): a team's pod cannot mount EFS inline, past its claim.

    Pod Security `restricted` admits `csi` volumes, and such a volume names its handle
    itself: kubelet refuses it only because the CSIDriver lists no `Ephemeral` lifecycle
    mode (efs_csi.py DRIVER's comment). A CSIDriver that listed it would let a team's pod
    name any access point or the file system's root.
    """
    objects = efs_csi.manifests({f: efs_csi_file(f) for f in EFS_CSI_FILES})
    (driver,) = [o for o in objects if o["kind"] == "CSIDriver"]
    assert driver["metadata"]["name"] == efs_csi.DRIVER
    assert "Ephemeral" not in driver["spec"].get("volumeLifecycleModes", ["Persistent"])


def test_the_leader_applies_the_node_plugin_once_in_its_privileged_namespace(
    ctx, machine, api, releases, caplog
):
    caplog.set_level(logging.INFO)
    out = _install(ctx)
    assert out.unit_status.name == "active"
    labels = api.get_object(NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "v1.36"
    assert api.get_object(CSIDRIVER)["spec"] == {"attachRequired": False}
    (subject,) = api.get_object(BINDING)["subjects"]
    assert subject == {
        "kind": "ServiceAccount",
        "name": "efs-csi-node-sa",
        "namespace": "gpu-k8s-efs-csi",
    }
    assert api.get_object(f"{NS}/serviceaccounts/efs-csi-node-sa") is not None
    pod = api.get_object(DAEMONSET)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "efs-csi-node-sa"
    assert pod["hostNetwork"] is True
    assert [c["image"] for c in pod["containers"]] == [
        "public.ecr.aws/efs-csi-driver/amazon/aws-efs-csi-driver:v3.4.1",
        "public.ecr.aws/csi-components/csi-node-driver-registrar:v2.17.0-eksbuild.3",
        "public.ecr.aws/csi-components/livenessprobe:v2.19.0-eksbuild.3",
    ]
    # the controller (dynamic provisioning, AWS credentials) is not there, anywhere
    everything = api.objects("/")
    assert not [o for o in everything if "efs-csi-controller" in o["metadata"]["name"]]
    assert not [o for o in everything if "provisioner" in o["metadata"]["name"]]
    # each file's sha256 is recorded per URL and logged
    recorded = json.loads(peer(out).local_app_data["addon-aws-efs-csi-driver-sha256"])
    assert recorded == {efs_csi.url(f): s for f, s in efs_csi.FILES}
    logged = " ".join(r.getMessage() for r in caplog.records)
    for _file, sha in efs_csi.FILES:
        assert sha in logged
    # nothing is downloaded or sent again while nothing changed
    assert len(_efs_requests(releases)) == 3
    writes = [r for r in api.requests if r.method != "GET"]
    out = ctx.run(ctx.on.update_status(), out)
    assert len(_efs_requests(releases)) == 3
    assert [r for r in api.requests if r.method != "GET"] == writes


def test_a_changed_file_is_refused_and_nothing_of_the_driver_is_applied(
    ctx, machine, api, releases
):
    path = f"{EFS_CSI_PATH}/node-daemonset.yaml"
    releases.files[path] = efs_csi_file("node-daemonset.yaml").replace(
        b"--v=2", b"--v=2\n            - --evil", 1
    )
    try:
        out = _install(ctx)
    finally:
        releases.files[path] = efs_csi_file("node-daemonset.yaml")
    pinned = dict(efs_csi.FILES)["node-daemonset.yaml"]
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(
        "aws-efs-csi-driver: aws-efs-csi-driver v3.4.1 node-daemonset.yaml has sha256 "
    )
    assert out.unit_status.message.endswith(f"not the {pinned} pinned for it; nothing applied")
    for gone in (NS, CSIDRIVER, BINDING, DAEMONSET):
        assert api.get_object(gone) is None, gone
    assert peer(out).local_app_data["cluster-version"] == "1.36"  # the cluster still is
    out = ctx.run(ctx.on.update_status(), out)  # the real file again: applied
    assert api.get_object(DAEMONSET) is not None
    assert out.unit_status.name == "active"


def test_an_unreachable_file_blocks_naming_the_driver(ctx, machine, api, releases):
    path = f"{EFS_CSI_PATH}/csidriver.yaml"
    del releases.files[path]
    try:
        out = _install(ctx)
    finally:
        releases.files[path] = efs_csi_file("csidriver.yaml")
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("aws-efs-csi-driver: cannot download https://")
    assert "HTTP 404" in out.unit_status.message
    assert api.get_object(NS) is None


def test_the_mirror_and_the_image_registry_are_used(ctx, machine, api, releases):
    out = _install(ctx)
    config = {
        "addons-mirror": f"{releases.url}/",
        "image-registry": "registry.example.com:5000/mirror",
    }
    releases.requests.clear()
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config=config))
    assert out.unit_status.name == "active"
    assert _efs_requests(releases) == [f"{EFS_CSI_PATH}/{f}" for f in EFS_CSI_FILES]
    pod = api.get_object(DAEMONSET)["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["containers"]] == [
        "registry.example.com:5000/mirror/efs-csi-driver/amazon/aws-efs-csi-driver:v3.4.1",
        "registry.example.com:5000/mirror/csi-components/csi-node-driver-registrar:"
        "v2.17.0-eksbuild.3",
        "registry.example.com:5000/mirror/csi-components/livenessprobe:v2.19.0-eksbuild.3",
    ]
    assert efs_csi.image_list("registry.example.com:5000/mirror") == sorted(
        c["image"] for c in pod["containers"]
    )


def test_off_installs_nothing(ctx, machine, api, releases):
    out = _install(ctx, {"efs-csi-driver": False})
    assert out.unit_status.name == "active"
    assert _efs_requests(releases) == []
    assert api.get_object(NS) is None and api.get_object(CSIDRIVER) is None
