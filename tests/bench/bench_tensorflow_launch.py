#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""API requests of `train`, `job-status`, `list-jobs` and `logs` at 2, 16, 64, 256 workers.

The launch code (`training.launch`, what the `train` action runs) talks through the real
`kubernetes` client to the fake API server on loopback, with JobSet and Kueue installed as
the control plane leaves them and the team's queue made as the charm makes it; the batch
controllers' stand-ins (tests/fakes/batch.py) admit the job and create every pod on the
first polls, so waiting costs the same for every size. Requests are counted at the server
(and by the client's own counter, which must agree).

Target (DESIGN.md, issue 14, issue 31 item 4): constant, whatever the number of workers.
`logs` reads at most `training.LOG_REPLICAS` replicas' logs (one request each), so a job
with fewer replicas than that reads fewer: CONSTANT means no size reads more than the
largest job does, and the 16/64/256-worker jobs read the same.
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
from fakes.addons import install_kueue, join_team  # noqa: E402
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


SIZES = (2, 16, 64, 256)


def measure(workers: int, strategy: str) -> tuple[int, int, int, int, int]:
    """Requests of train (at the server, at the client), job-status, list-jobs, logs."""
    with FakeKubeApiServer() as api:
        # Kueue's, as the control plane labels a consumer's namespace (rbac.consumer_grant)
        labels = {"gpu-k8s.io/kueue": "managed"}
        api.put_object(f"/api/v1/namespaces/{NS}", {"metadata": {"name": NS, "labels": labels}})
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
            for obj in queues.team_objects("tensorflow", NS):
                kube.apply(obj, field_manager="bench")
            join_team(api, NS)  # the control plane writes the team's queue, sizes the cohort
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
            reads = []
            for read in (
                lambda: training.status(kube, CTX, "bench"),
                lambda: training.list_jobs(kube, CTX),
                lambda: training.logs(kube, CTX, "bench", 20),
            ):
                before = len(api.requests)
                read()
                reads.append(len(api.requests) - before)
            return (train[0], train[1], *reads)


def _verdict(counts: list[int]) -> str:
    """CONSTANT when no size costs more than the largest and 16/64/256 cost the same."""
    tail = counts[1:]
    return "CONSTANT" if len(set(tail)) == 1 and max(counts) == tail[0] else "GROWS"


def main() -> None:
    """Print the table."""
    names = ("train", "client", "job-status", "list-jobs", "logs")
    print(f"{'strategy':<9}{'roles':>6}{'workers':>9}" + "".join(f"{n:>12}" for n in names))
    for strategy, roles in (("mwms", 1), ("ps", 3)):
        rows = []
        for workers in SIZES:
            row = measure(workers, strategy)
            rows.append(row)
            print(f"{strategy:<9}{roles:>6}{workers:>9}" + "".join(f"{n:>12}" for n in row))
        verdicts = [
            f"{name} {_verdict([r[i] for r in rows])} ({rows[-1][i]})"
            for i, name in enumerate(names)
            if name != "client"
        ]
        sizes = "/".join(map(str, SIZES))
        print(f"{strategy}: requests at {sizes} workers: " + ", ".join(verdicts))


if __name__ == "__main__":
    main()
