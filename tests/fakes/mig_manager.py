"""NVIDIA's MIG manager on one node, as its API requests and its effect on the GPUs go.

What `nvidia-mig-manager` (NVIDIA/mig-parted v0.15.0, commit e2d5ad1f) does when its pod
starts or its node's `nvidia.com/mig.config` label changes, with the identity it has: the
token kubelet mounts into its DaemonSet's pod (a TokenRequest bound to that pod, which dies
with it), under the ClusterRole the control plane grants it (mig_manager.CLUSTER_RULES).

- start: the informer's AddFunc hands the label's value to the loop, whatever state the
  node's labels hold (cmd/nvidia-mig-manager/main.go `ContinuouslySyncMigConfigChanges`,
  `start`, `migReconfigure`);
- `start` then runs pkg/mig/reconfigure/reconfigure.go `Run`: GET the Node
  (`getCurrentNodeLabels`: the deploy labels and the state as they are); `assert` whether
  the GPUs hold the layout already (`isConfigAlreadyApplied`: then `setState(success)`,
  which in a new process first writes the deploy labels back through `maybeSetTrue`:
  `NoRestartK8sDaemonsetsOnExit` starts false); else a merge patch `mig.config.state=pending`,
  one setting each GPU client's deploy label to `paused-for-mig-change` (`maybeSetPaused`:
  `false` stays `false`), the apply (here: the fake driver's MIG devices), one patch of the
  deploy labels through `maybeSetTrue` (`restartKubernetesGPUClients`; the
  `nvidia.com/gpu.deploy.client` label among them only when the node has it), then
  `mig.config.state=success` (`setState`). `maybeSetTrue` turns anything but `false` into
  `true`, a `paused-for-mig-change` left by a stopped run included;
- `stopped_mid_apply`: its container stopped (a reboot, the pod deleted by a pause of the
  GPU clients) after the pause and before the apply ends. `Run` writes its state only at
  its end, so `pending` and the paused labels stay. The quarantine's NoExecute taint does
  not stop it: the control plane's DaemonSet tolerates it (csi_node.sync_daemonset keeps
  the pod).

Not modelled: waiting for the GPU clients' pods to leave (`waitForPodsToBeDeleted`), the
validator pods it deletes (none run here), CDI spec generation, host services (the control
plane sets WITH_SHUTDOWN_HOST_GPU_CLIENTS=false) and reboots (WITH_REBOOT=false).
"""

from __future__ import annotations

import copy
from typing import Any

from charm_modules import load

from fakes.kube_apiserver import FakeKubeApiServer

CONTROL_PLANE = "kubernetes-control-plane"
CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
PAUSED = "paused-for-mig-change"
# reconfigure.go's deploy labels, each set by maybeSetPaused / maybeSetTrue
DEPLOY_LABELS = (
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia.com/gpu.deploy.dcgm-exporter",
    "nvidia.com/gpu.deploy.dcgm",
    "nvidia.com/gpu.deploy.nvsm",
)
CLIENT_LABEL = "nvidia.com/gpu.deploy.client"  # written only when the node has it


def _paused(value: str) -> str:
    return "false" if value == "false" else PAUSED


def _true(value: str) -> str:
    return "false" if value == "false" else "true"


class MigManager:
    """The MIG manager's pod on `node` (its DaemonSet as the control plane makes it).

    `layouts`: {config name: {GPU index: [profile, ...]}}, what applying each does to the
    fake driver's `mig_devices` (mig-parted's config, as the control plane writes it).
    """

    def __init__(self, api: FakeKubeApiServer, node: str, driver: Any, layouts: dict):
        self.api, self.node, self.driver, self.layouts = api, node, driver, layouts
        module = load(CONTROL_PLANE, "mig_manager")
        self.module = module
        objects = module.manifests([])
        for obj in objects:
            if obj["kind"] in ("ConfigMap", "DaemonSet"):
                continue
            self.api.put_object(_path(obj), copy.deepcopy(obj))
        (self.daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
        # the name fakes.csi_node.sync_daemonset gives its pod on `node`
        self.pod_path = f"/api/v1/namespaces/{module.NAMESPACE}/pods/{module.NAME}-{node}"

    def running(self) -> bool:
        """Whether its pod is on the node (fakes.csi_node.sync_daemonset keeps it there)."""
        return self.api.get_object(self.pod_path) is not None

    def token(self) -> str:
        """The token kubelet mounts into its pod now (a TokenRequest bound to the pod)."""
        from charms.gpu_k8s.v0.kubeclient import Kube

        namespace, name = self.module.NAMESPACE, self.module.NAME
        pod = self.api.get_object(self.pod_path)
        assert pod is not None, "no MIG manager pod on the node"
        bound = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"]}
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"boundObjectRef": bound},
        }
        with Kube.from_kubeconfig(self.api.kubeconfig(), retries=0) as admin:
            answer = admin.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                body=request,
            )
        return answer["status"]["token"]

    def start(self, token: str, *, stopped_mid_apply: bool = False) -> None:
        """Its pod starts: `Run` for the node's label, as `token` (see the module docstring)."""
        from charms.gpu_k8s.v0.kubeclient import Kube

        with Kube.from_kubeconfig(self.api.kubeconfig(token), retries=0) as kube:
            labels = kube.get("v1", "Node", self.node)["metadata"].get("labels") or {}
            layout = labels.get(CONFIG_LABEL)
            if not layout:
                return  # the loop waits for a non-empty label (SyncableMigConfig.Set)
            read = {key: labels.get(key, "") for key in DEPLOY_LABELS}
            if labels.get(CLIENT_LABEL):
                read[CLIENT_LABEL] = labels[CLIENT_LABEL]
            restore = {key: _true(value) for key, value in read.items()}
            if self.driver.mig_devices == self.layouts[layout]:  # isConfigAlreadyApplied
                self._patch(kube, restore)
                self._patch(kube, {STATE_LABEL: "success"})
                return
            self._patch(kube, {STATE_LABEL: "pending"})
            self._patch(kube, {key: _paused(value) for key, value in read.items()})
            if stopped_mid_apply:
                # half of the GPUs partitioned when the pod went
                half = dict(list(self.layouts[layout].items())[: len(self.layouts[layout]) // 2])
                self.driver.mig_devices = half
                return
            self.driver.mig_devices = copy.deepcopy(self.layouts[layout])
            self._patch(kube, restore)
            self._patch(kube, {STATE_LABEL: "success"})

    def _patch(self, kube: Any, labels: dict[str, str]) -> None:
        """reconfigure.go setNodeLabels: one JSON merge patch of the labels."""
        kube.patch("v1", "Node", self.node, {"metadata": {"labels": labels}})


def _path(obj: dict) -> str:
    api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    namespace = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    plural = {"ServiceAccount": "serviceaccounts"}.get(kind, f"{kind.lower()}s")
    return f"{prefix}{namespace}/{plural}/{meta['name']}"
