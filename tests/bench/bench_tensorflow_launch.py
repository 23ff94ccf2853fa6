#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""API requests the tensorflow charm sends to launch jobs of 2, 16 and 64 workers.

The launch code (`training.launch`, what the `train` action runs) talks through the real
`kubernetes` client to the fake API server on loopback; a stand-in Job controller creates
every pod on the first poll, so waiting costs the same for every size. Requests are
counted at the server (and by the client's own counter, which must agree).

Target (DESIGN.md): a constant number of requests per role, not per pod.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [
    str(ROOT / "charms" / "tensorflow" / "src"),
    str(ROOT / "lib"),
    str(ROOT / "tests"),
]

import jobs  # noqa: E402
import training  # noqa: E402

from charms.gpu_k8s.v0.kubeclient import Kube  # noqa: E402
from fakes.kube_apiserver import FakeKubeApiServer  # noqa: E402

NS = "tensorflow"
CTX = jobs.Context(
    namespace=NS,
    app="tensorflow",
    claim="claim",
    default_image="tensorflow/tensorflow:2.21.0",
    tensorboard_image="tensorflow/tensorflow:2.21.0",
)


def _run_pods(api: FakeKubeApiServer) -> None:
    """Create and run every pod of every Job (a whole Job controller tick)."""
    for job in api.objects(f"/apis/batch/v1/namespaces/{NS}/jobs/"):
        template = job["spec"]["template"]
        for index in range(job["spec"]["completions"]):
            name = f"{job['metadata']['name']}-{index}-x"
            labels = {
                **template["metadata"]["labels"],
                "batch.kubernetes.io/job-completion-index": str(index),
            }
            api.put_object(
                f"/api/v1/namespaces/{NS}/pods/{name}",
                {
                    "metadata": {"labels": labels},
                    "spec": copy.deepcopy(template["spec"]),
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                },
            )


def measure(workers: int, strategy: str) -> tuple[int, int]:
    """(requests seen by the server, requests counted by the client) for one launch."""
    with FakeKubeApiServer() as api:
        api.put_object(f"/api/v1/namespaces/{NS}", {"metadata": {"name": NS}})
        api.put_object(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/claim", {})
        for n in range(workers // 8 + 1):
            api.put_object(
                f"/api/v1/nodes/gpu-{n}",
                {
                    "spec": {},
                    "status": {
                        "allocatable": {"nvidia.com/gpu": "8"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                },
            )
        request = jobs.TrainRequest(
            job="bench",
            workers=workers,
            gpus_per_worker=1,
            strategy=strategy,
            ps=2 if strategy == "ps" else 0,
        )
        code = training.read_code()
        kube = Kube.from_kubeconfig(api.kubeconfig())
        with kube:
            before = len(api.requests)
            training.launch(
                kube,
                CTX,
                request,
                code,
                log=lambda _: None,
                sleep=lambda _: _run_pods(api),
                clock=lambda: 0.0,
            )
            return len(api.requests) - before, kube.requests


def main() -> None:
    """Print the table."""
    print(f"{'strategy':<9}{'roles':>6}{'workers':>9}{'requests':>10}{'client':>8}")
    for strategy, roles in (("mwms", 1), ("ps", 3)):
        counts = []
        for workers in (2, 16, 64):
            server, client = measure(workers, strategy)
            counts.append(server)
            print(f"{strategy:<9}{roles:>6}{workers:>9}{server:>10}{client:>8}")
        verdict = "constant" if len(set(counts)) == 1 else "GROWS with workers"
        print(f"{strategy}: {verdict} ({counts[0]} requests, {roles} role(s))")


if __name__ == "__main__":
    main()
