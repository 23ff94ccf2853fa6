# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The operator's actions on a worker: gpu-info, validate-gpu, gpu-health, readmit-gpu.

An ops component (action events, the `cluster` relation): the charm builds it with what
the actions need of the hook, never the charm, and observes the actions with its
handlers. What they run is in `nvidia.py`, `validation.py` and `gpu_health.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import gpu_health
import gpu_node
import gpu_repair
import node_identity
import nvidia
import ops
import validation
from charm_config import WorkerConfig
from gpu_watcher import PAUSE_GATE

from charms.gpu_k8s.v0 import kubeadm
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.kubernetes_cluster import ClusterRequirer
from charms.gpu_k8s.v0.system import Host


class OperatorActions(ops.Object):
    """The action handlers, observed by the charm.

    `host`: this machine (made when asked); `cluster`: the `cluster` relation's requirer;
    `config`: the charm's config (ValueError: invalid); `clock`: monotonic time for the
    checks' timeouts; `sleep`: the wait for the GPU clients to leave; `wall_clock`: the
    time readmissions are stamped with; `mig_cordoned`: this unit cordoned the node for a
    MIG change still under way (a readmission leaves that cordon to it).
    """

    def __init__(
        self,
        parent: ops.Object,
        *,
        host: Callable[[], Host],
        cluster: ClusterRequirer,
        config: Callable[[], WorkerConfig],
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        wall_clock: Callable[[], float],
        mig_cordoned: Callable[[], bool],
    ):
        super().__init__(parent, "operator-actions")
        self._mig_cordoned = mig_cordoned
        self._host = host
        self._cluster = cluster
        self._config = config
        self._clock = clock
        self._sleep = sleep
        self._wall_clock = wall_clock

    def on_gpu_info(self, event: ops.ActionEvent) -> None:
        """nvidia-smi's summary of this machine's GPUs."""
        try:
            results = nvidia.read_gpu_info(self._host())
        except ValueError as e:
            event.fail(str(e))
            return
        event.set_results(results)

    def on_validate_gpu(self, event: ops.ActionEvent) -> None:
        """The CUDA check on each GPU of this machine through containerd (validation.py)."""
        params = event.load_params(validation.ValidateGpuParams, errors="fail")
        host = self._host()
        inventory = gpu_node.detect(host)
        if not inventory.count:
            event.fail("this machine has no NVIDIA GPU: run validate-gpu on a GPU worker")
            return
        info = self._cluster.join_material()
        if info is None or not kubeadm.is_joined(host):
            event.fail(f"not joined to a cluster yet: {self._cluster.problem() or 'not joined'}")
            return
        try:
            image = params.image or self._config().validation_image
        except ValueError as e:
            event.fail(f"invalid config: {e}")
            return
        # on this machine through containerd: no Kubernetes credential involved; one run
        # per GPU (the sample uses the first GPU it sees), `timeout` each
        outcome: validation.ValidationOutcome | None = None
        for index in range(inventory.count):
            try:
                outcome = validation.validate(
                    host,
                    image,
                    timeout=params.timeout,
                    clock=self._clock,
                    progress=event.log,
                    devices=str(index),
                )
            except validation.ValidationError as e:
                event.fail(str(e))
                return
            if not outcome.passed:
                event.set_results(outcome.results())
                event.fail(f"GPU {index}: {outcome.summary}")
                return
        if outcome is None:  # pragma: no cover (count > 0 above)
            return
        results = outcome.results()
        every = f"CUDA check passed on each of {inventory.count} GPUs"
        results["summary"] = outcome.summary.replace("CUDA check passed", every, 1)
        event.set_results(results)

    def on_gpu_health(self, event: ops.ActionEvent) -> None:
        """The watcher's view: the quarantine and its events (gpu_health.history)."""
        event.set_results(gpu_health.history(self._host()))

    def on_readmit_gpu(self, event: ops.ActionEvent) -> None:
        """The repair gate on every GPU (gpu_gate.py); passed: the quarantine clears."""
        params = event.load_params(validation.ReadmitGpuParams, errors="fail")
        host = self._host()
        held = gpu_health.quarantined(host)
        if not held:
            event.fail("no GPU of this machine is quarantined: nothing to readmit")
            return
        inventory = gpu_node.detect(host)
        if not inventory.count or not kubeadm.is_joined(host):
            event.fail("this machine has no working NVIDIA GPU or has not joined a cluster")
            return
        node = kubeadm.node_name(host)
        gate_started = self._wall_clock()  # what it proves: the quarantines held by then
        try:  # the repair gate on every GPU (gpu_gate.py): CUDA, DCGM, NCCL
            config = self._config()
            with Kube.from_kubeconfig(node_identity.kubeconfig(host)) as kube:
                result = gpu_repair.gate(
                    host,
                    kube,
                    node,
                    inventory,
                    config.gate_images,
                    timeout=params.timeout,
                    clock=self._clock,
                    sleep=self._sleep,
                    progress=event.log,
                )
        except (ValueError, validation.ValidationError, node_identity.NodeIdentityError) as e:
            event.fail(f"{e}; it stays quarantined")
            return
        except KubeError as e:
            event.fail(f"{gpu_repair.cannot_pause(node, PAUSE_GATE)}: {e}; it stays quarantined")
            return
        if not result.passed:
            failed = next(c for c in result.checks if not c.passed)
            event.set_results({"gate": result.summary()})
            event.fail(f"{failed.detail}; it stays quarantined")
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._wall_clock()))
        proof = f"gate passed: {result.summary()}"
        try:
            with Kube.from_kubeconfig(node_identity.kubeconfig(host)) as kube:
                cleared, cordoned = gpu_health.readmit(
                    host,
                    kube,
                    node,
                    now=now,
                    proof=proof,
                    mig_change=self._mig_cordoned(),
                    gate_started=gate_started,
                )
        except (node_identity.NodeIdentityError, ValueError, KubeError) as e:
            event.fail(f"the checks passed but node {node} could not be readmitted: {e}")
            return
        # the leader lifts the NoExecute taint, unless a fault came during the gate
        self._cluster.publish_quarantine(gpu_health.quarantine_request(host, None) or [])
        event.set_results(
            {
                "readmitted": ", ".join(f"GPU {q['index']} ({q['uuid']})" for q in cleared),
                "proof": proof,
                "node": f"{node}: GpuHealthy=True, "
                + (f"stays cordoned: {cordoned}" if cordoned else "uncordoned")
                + "; NoExecute taint removal asked",
            }
        )
