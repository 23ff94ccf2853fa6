#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""API requests the tensorflow charm sends for `train` and `job-status` at 2, 16, 64 workers.

The launch code (`training.launch`, what the `train` action runs) talks through the real
`kubernetes` client to the fake API server on loopback, with JobSet and Kueue installed as
the control plane leaves them and the team's queue made as the charm makes it; the batch
controllers' stand-ins (tests/fakes/batch.py) admit the job and create every pod on the
first polls, so waiting costs the same for every size. Requests are counted at the server
(and by the client's own counter, which must agree).

Target (DESIGN.md, issue 14): constant, whatever the number of workers.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [
    str(ROOT / "charms" / "tensorflow" / "src"),
    str(ROOT / "lib"),
    str(ROOT / "tests"),
]

import manifests  # noqa: E402
import params  # noqa: E402
import queues  # noqa: E402
import training  # noqa: E402

from charms.gpu_k8s.v0.kubeclient import Kube  # noqa: E402
from fakes.addons import install_kueue, size_cohort  # noqa: E402
from fakes.batch import BatchControllers  # noqa: E402
from fakes.kube_apiserver import FakeKubeApiServer  # noqa: E402

NS = "tensorflow"
CTX = manifests.Context(
    namespace=NS,
    app="tensorflow",
    claim="claim",
    default_image="tensorflow/tensorflow:2.21.0",
    tensorboard_image="tensorflow/tensorflow:2.21.0",
)


def measure(workers: int, strategy: str) -> tuple[int, int, int]:
    """(train requests at the server, at the client, job-status requests) for one job."""
    with FakeKubeApiServer() as api:
        api.put_object(f"/api/v1/namespaces/{NS}", {"metadata": {"name": NS}})
        api.put_object(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/claim", {})
        install_kueue(api, {"gpu-nvidia-a10g": "NVIDIA-A10G"})
        for n in range(workers // 8 + 1):
            api.put_object(
                f"/api/v1/nodes/gpu-{n}",
                {
                    "metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-A10G"}},
                    "spec": {},
                    "status": {
                        "allocatable": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                },
            )
        request = params.TrainRequest(
            job="bench",
            workers=workers,
            gpus_per_worker=1,
            strategy=strategy,
            ps=2 if strategy == "ps" else 0,
        )
        code = training.read_code()
        controllers = BatchControllers(api, NS)
        kube = Kube.from_kubeconfig(api.kubeconfig())
        with kube:
            flavors = kube.list(queues.API, "ResourceFlavor")
            for obj in queues.team_objects("tensorflow", NS, flavors, queues.Quotas()):
                kube.apply(obj, field_manager="bench")
            size_cohort(api)  # the control plane's update-status after the nodes joined
            before = len(api.requests)
            counted = kube.requests
            training.launch(
                kube,
                CTX,
                request,
                code,
                log=lambda _: None,
                sleep=lambda _: controllers.tick(),
                clock=lambda: 0.0,
            )
            train = len(api.requests) - before, kube.requests - counted
            before = len(api.requests)
            training.status(kube, CTX, "bench")
            return train[0], train[1], len(api.requests) - before


def main() -> None:
    """Print the table."""
    print(f"{'strategy':<9}{'roles':>6}{'workers':>9}{'train':>7}{'client':>8}{'status':>8}")
    for strategy, roles in (("mwms", 1), ("ps", 3)):
        counts = []
        for workers in (2, 16, 64):
            server, client, status = measure(workers, strategy)
            counts.append((server, status))
            print(f"{strategy:<9}{roles:>6}{workers:>9}{server:>7}{client:>8}{status:>8}")
        verdict = "constant" if len(set(counts)) == 1 else "GROWS with workers"
        print(f"{strategy}: {verdict} (train {counts[0][0]}, job-status {counts[0][1]} requests)")


if __name__ == "__main__":
    main()
