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

`job-status` also reads the DCGM exporter of every node the job runs on (one page each,
gpu_metrics.py): each node has an InternalIP where fakes.dcgm_exporter.Exporters serves
its page on loopback (127.0.0.<n>), so the bench counts those reads (`dcgm`, one per
node: they grow with the nodes, not the API requests) and job-status's time (`ms`).
Target: the time stays near constant (the pages are read WORKERS at a time), and an
exporter that hangs costs one gpu_metrics.DEADLINE however many nodes (the last line;
one at a time with a 3 s timeout each, it cost 3 s per hung node). Everything is local:
the bench needs no network.

`--smoke`: 2, 9 and 16 workers (two sizes of LOG_REPLICAS or more, so that a count that
grows shows as GROWS, which fails tests/bench/run.py), gpu_metrics.DEADLINE cut to
SMOKE_DEADLINE for the hung exporter (each code path once; the numbers are not to quote).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [
    str(ROOT / "charms" / "tensorflow" / "src"),
    str(ROOT / "lib"),
    str(ROOT / "tests"),
]

import gpu_metrics  # noqa: E402
import manifests  # noqa: E402
import params  # noqa: E402
import queues  # noqa: E402
import training  # noqa: E402
from run import options, verdict  # noqa: E402

from charms.gpu_k8s.v0.kubeclient import Kube  # noqa: E402
from fakes.addons import install_kueue, join_team  # noqa: E402
from fakes.batch import BatchControllers  # noqa: E402
from fakes.dcgm_exporter import Exporters, Gpu, SharingPod, page  # noqa: E402
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
SMOKE_SIZES = (2, 9, 16)
SMOKE_DEADLINE = 0.5


GPUS_PER_NODE = 8
# what the fake exporters report for every GPU a pod holds
FIELDS = {"DCGM_FI_DEV_GPU_UTIL": 93, "DCGM_FI_DEV_FB_USED": 15565, "DCGM_FI_DEV_FB_FREE": 7003}
EXPORTER_SPEC = {"containers": [{"name": "exporter"}]}  # neither hostPID nor virtual GPUs
FETCHING: list[float] = []  # seconds each gpu_metrics.fetch_all took


def _timed_fetch_all(urls: dict, get=gpu_metrics.fetch, *, real=gpu_metrics.fetch_all) -> dict:
    """gpu_metrics.fetch_all, its time kept in FETCHING (a stopwatch, nothing replaced)."""
    started = time.monotonic()
    try:
        return real(urls, get)
    finally:
        FETCHING.append(time.monotonic() - started)


gpu_metrics.fetch_all = _timed_fetch_all


def _serve_pages(api: FakeKubeApiServer, exporters: Exporters) -> int:
    """Each node's page with the job's pods running there, one GPU each; the pods placed."""
    on: dict[str, list[str]] = {}
    for pod in api.objects(f"/api/v1/namespaces/{NS}/pods/"):
        spec = pod.get("spec") or {}
        gpus = any("nvidia.com/gpu" in str(c.get("resources")) for c in spec["containers"])
        node = spec.get("nodeName")
        if gpus and node and (pod.get("status") or {}).get("phase") == "Running":
            on.setdefault(node, []).append(pod["metadata"]["name"])
    for n, address in enumerate(exporters.addresses):
        gpus = [Gpu(i, f"GPU-{n:04d}-{i}") for i in range(GPUS_PER_NODE)]
        names = on.get(f"gpu-{n}", [])
        pods = [SharingPod(name, NS, f"uid-{name}", (gpu.uuid,)) for name, gpu in zip(names, gpus)]
        fields = {f: {gpu.uuid: v for gpu in gpus} for f, v in FIELDS.items()}
        exporters.pages[address] = page(EXPORTER_SPEC, f"gpu-{n}", gpus, pods, [], fields)
    return sum(map(len, on.values()))


def measure(workers: int, strategy: str, hang: bool = False) -> tuple[int | float, ...]:
    """Requests of train, job-status, list-jobs, logs; DCGM pages, their ms, job-status ms.

    Train's requests are counted at the server and at the client. `hang`: the first
    node's exporter accepts and never answers.
    """
    nodes = workers // GPUS_PER_NODE + 1
    with FakeKubeApiServer() as api, Exporters(nodes) as exporters:
        gpu_metrics.DCGM_EXPORTER_PORT = exporters.port
        # Kueue's, as the control plane labels a consumer's namespace (rbac.consumer_grant)
        labels = {"gpu-k8s.io/kueue": "managed"}
        api.put_object(f"/api/v1/namespaces/{NS}", {"metadata": {"name": NS, "labels": labels}})
        claim = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Ti"}}}
        api.put_object(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/claim", {"spec": claim})
        install_kueue(api, {"gpu-nvidia-a10g": "NVIDIA-A10G"})
        for n, address in enumerate(exporters.addresses):
            api.put_object(
                f"/api/v1/nodes/gpu-{n}",
                {
                    "metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-A10G"}},
                    "spec": {},
                    "status": {
                        "addresses": [{"type": "InternalIP", "address": address}],
                        "allocatable": {
                            "nvidia.com/gpu": str(GPUS_PER_NODE),
                            "cpu": "32",
                            "memory": "256Gi",
                        },
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
            running = _serve_pages(api, exporters)
            if hang:
                exporters.hung = {exporters.addresses[0]}
            reads: list[int | float] = []
            for read in (
                lambda: training.status(kube, CTX, "bench"),
                lambda: training.list_jobs(kube, CTX),
                lambda: training.logs(kube, CTX, "bench", 20),
            ):
                before = len(api.requests)
                started = time.monotonic()
                result = read()
                took = time.monotonic() - started
                reads.append(len(api.requests) - before)
                if not reads[1:]:  # job-status: every running pod's line from its exporter
                    use = result["gpu-use"]
                    lines = [k for k, v in use.items() if k != "unavailable" and "GPU" in v]
                    if len(lines) != running - hang * min(running, GPUS_PER_NODE):
                        raise SystemExit(f"job-status read {len(lines)} of {running}: {use}")
                    status_ms = took * 1000
            pages = sum(exporters.gets.values())
            return (*train, *reads, pages, FETCHING[-1] * 1000, status_ms)


def main() -> None:
    """Print the table."""
    sizes = SIZES
    if options(__doc__).parse_args().smoke:
        sizes, gpu_metrics.DEADLINE = SMOKE_SIZES, SMOKE_DEADLINE
    names = ("train", "client", "job-status", "list-jobs", "logs", "dcgm", "dcgm ms", "ms")
    print(f"{'strategy':<9}{'roles':>6}{'workers':>9}" + "".join(f"{n:>12}" for n in names))
    for strategy, roles in (("mwms", 1), ("ps", 3)):
        rows = []
        for workers in sizes:
            row = measure(workers, strategy)
            rows.append(row)
            print(
                f"{strategy:<9}{roles:>6}{workers:>9}"
                + "".join(f"{n:>12.0f}" if isinstance(n, float) else f"{n:>12}" for n in row)
            )
        verdicts = [
            f"{name} {verdict([r[i] for r in rows])} ({rows[-1][i]})"
            for i, name in enumerate(names)
            if name not in ("client", "dcgm", "dcgm ms", "ms")
        ]
        shown = "/".join(map(str, sizes))
        print(f"{strategy}: requests at {shown} workers: " + ", ".join(verdicts))
        nodes = "/".join(str(w // GPUS_PER_NODE + 1) for w in sizes)
        reads = "/".join(str(r[-3]) for r in rows)
        ms = "/".join(f"{r[-2]:.0f}" for r in rows)
        print(f"{strategy}: DCGM pages read {reads} (nodes {nodes}) in {ms} ms")
    hung = measure(sizes[-1], "mwms", hang=True)
    print(
        f"one exporter hung at {sizes[-1]} workers: pages read in {hung[-2] / 1000:.1f} s, "
        f"job-status {hung[-1] / 1000:.1f} s (gpu_metrics.DEADLINE {gpu_metrics.DEADLINE:g} s)"
    )


if __name__ == "__main__":
    main()
