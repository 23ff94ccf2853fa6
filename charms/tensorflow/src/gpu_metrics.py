# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""GPU use per training pod, from the DCGM exporters of the nodes it runs on (no ops).

The control plane runs NVIDIA's DCGM exporter on every GPU node with the node's network
(its dcgm_exporter.py), so the exporter answers at `http://<node InternalIP>:9400/metrics`
from any machine of the model. With kubelet's pod-resources API it labels each GPU's
series with the `pod` and `namespace` the GPU is allocated to (NVIDIA/dcgm-exporter
internal/pkg/transformation/kubernetes.go; a GPU nobody holds has no pod label).
`job-status` reads one page per node that runs a pod of the job (at most WORKERS at once,
all within one DEADLINE: see there): GPUs, utilisation
(DCGM_FI_DEV_GPU_UTIL, %) and framebuffer memory (DCGM_FI_DEV_FB_USED and _FREE, MiB)
per pod. A MIG instance (series with GPU_I_PROFILE and GPU_I_ID, render_metrics.go)
counts as one GPU, busy as its graphics engine (DCGM_FI_PROF_GR_ENGINE_ACTIVE, a ratio):
DCGM reports no GPU_UTIL for MIG instances (dcgm-exporter issue #216). Where no
exporter answers (no GPU pods yet, a CPU-only job, the exporter not running) it says so
rather than guessing.
"""

from __future__ import annotations

import http.client
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from charms.gpu_k8s.v0.cos_agent import DCGM_EXPORTER_PORT

UTIL = "DCGM_FI_DEV_GPU_UTIL"
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
# job-status reads every node's page within DEADLINE seconds of its first request, all
# nodes together: an exporter that hangs (a node gone, its host network down) costs the
# action this once, however many nodes the job runs on (issue 31 item 4; it was a 3 s
# timeout per node, one node after another). COS gives a scrape 10 s: its collector
# scrapes every job with its global_scrape_timeout, "10s" by default, whatever the job
# asks (canonical/opentelemetry-collector-operator 9f17dec on track/2, charmcraft.yaml and
# config_builder.py; bundles/overlays/cos.yaml keeps it); an operator waits on
# job-status, so half that: the nodes not read by then are named as such.
DEADLINE = 5.0
# Pages read at once: a job on more nodes than this is read in rounds, each page taking
# milliseconds; a hung exporter holds its reader until DEADLINE, so more than WORKERS hung
# exporters can leave the rest unread at DEADLINE (named so), never a longer wait.
WORKERS = 16
CHUNK = 65536
# What a node that does not answer properly raises (anything else is a bug, raised).
UNREACHABLE = (urllib.error.URLError, OSError, ValueError, http.client.HTTPException)


class UnreachableError(Exception):
    """A node's exporter did not answer with its page: the reason."""


def no_answer() -> UnreachableError:
    """A node whose page was not read by the deadline, however its reader ended."""
    return UnreachableError(f"no answer within {DEADLINE:g} s")


def fetch(url: str, end: float) -> str:
    """One exporter page (the text exposition format), read by `end` (time.monotonic()).

    The socket's timeout bounds each wait for bytes; `end` bounds the whole read, so an
    exporter that trickles its page cannot hold the reader past it.
    """
    left = end - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    with urllib.request.urlopen(url, timeout=left) as response:
        chunks = []
        while chunk := response.read1(CHUNK):
            chunks.append(chunk)
            if time.monotonic() > end:
                raise TimeoutError("timed out")
        return b"".join(chunks).decode()


Page = str | BaseException  # the page, UnreachableError, or a bug's exception


def _read(todo: queue.SimpleQueue, done: queue.SimpleQueue, get: Callable, end: float) -> None:
    """A reader thread: (node, url) from `todo` until it is empty, (node, Page) to `done`."""
    while True:
        try:
            node, url = todo.get_nowait()
        except queue.Empty:
            return
        try:
            result: Page = get(url, end)
        except UNREACHABLE as e:
            if isinstance(e, urllib.error.HTTPError):
                e.close()  # its response's socket
            result = UnreachableError(str(getattr(e, "reason", e)))
            if time.monotonic() >= end:
                # its socket's timeout (or fetch's own) ran out with the deadline: said as
                # for a reader still waiting, whichever the caller sees first
                result = no_answer()
        except Exception as e:  # noqa: BLE001 (a bug: the caller raises it)
            result = e.with_traceback(None)
        done.put((node, result))


def fetch_all(urls: dict[str, str], get: Callable[[str, float], str] = fetch) -> dict[str, Page]:
    """Node -> its Page, for the nodes read within DEADLINE (the others are left out).

    WORKERS daemon threads take the URLs in turn. The threads of hung exporters are left
    behind (daemons: the action's process exits without them), each ending by `end`.
    """
    end = time.monotonic() + DEADLINE
    todo: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
    for item in urls.items():
        todo.put(item)
    done: queue.SimpleQueue[tuple[str, Page]] = queue.SimpleQueue()
    for _ in range(min(WORKERS, len(urls))):
        args = (todo, done, get, end)
        threading.Thread(target=_read, args=args, name="dcgm-page", daemon=True).start()
    out: dict[str, Page] = {}
    while len(out) < len(urls):
        try:
            node, result = done.get(timeout=max(end - time.monotonic(), 0))
        except queue.Empty:
            break
        out[node] = result
    return out


def node_ip(node: dict) -> str | None:
    """A Node's InternalIP (the address the exporter listens on, with the node's network)."""
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return address.get("address")
    return None


def per_pod(text: str, namespace: str, pods: Iterable[str]) -> dict[str, dict[str, float]]:
    """Pod -> {"gpus", "util" (mean %), "used", "total" (MiB)} for the named pods.

    "total" is what the pod's programs may allocate on its GPUs: the whole GPU's used and
    free memory (NVML's total less what the driver reserves: DCGM reads
    nvmlDeviceGetMemoryInfo_v2, whose `used` leaves `reserved` out, and divides FB_USED
    by total - reserved for its own FB_USED_RATIO; NVIDIA/DCGM 4.6.0
    dcgmlib/src/DcgmCacheManager.cpp). Under time-slicing (KUBERNETES_VIRTUAL_GPUS) a
    sharing pod's FB_USED is its own processes' and FB_FREE the whole GPU's, so their
    sum is too small: the GPU's own FB_USED is the series left without pod labels
    (dcgm-exporter 4.6.0-4.8.3, 7ad58324, kubernetes.go PodMapper.Process keeps it
    beside the per-pod ones; tests/fakes/dcgm_exporter.py). A pod that holds two slices
    of one GPU has a series per slice (`vgpu`), each with the pod's whole figure: one GPU.
    """
    wanted = set(pods)
    # (pod, GPU uuid, MIG instance) -> its samples
    gpus: dict[tuple[str, str, str], dict[str, float]] = {}
    # (GPU uuid, MIG instance) -> the GPU's own FB_USED, where the GPU is shared
    shared_used: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in (UTIL, ENGINE, FB_USED, FB_FREE):
                continue
            labels = sample.labels
            uuid = labels.get("UUID", labels.get("gpu", ""))
            instance = labels.get("GPU_I_ID", "")
            if sample.name == FB_USED and "pod" not in labels:
                shared_used[(uuid, instance)] = float(sample.value)
            if labels.get("namespace") != namespace or labels.get("pod") not in wanted:
                continue
            gpu = gpus.setdefault((labels["pod"], uuid, instance), {})
            gpu[sample.name] = float(sample.value)
    out: dict[str, dict[str, float]] = {}
    for (pod, uuid, instance), sample in gpus.items():
        row = out.setdefault(pod, {"gpus": 0, "util": 0.0, "used": 0.0, "total": 0.0})
        row["gpus"] += 1
        row["util"] += 100 * sample.get(ENGINE, 0.0) if instance else sample.get(UTIL, 0.0)
        used = sample.get(FB_USED, 0.0)
        row["used"] += used
        row["total"] += shared_used.get((uuid, instance), used) + sample.get(FB_FREE, 0.0)
    for row in out.values():
        row["util"] /= row["gpus"]
    return out


def describe(row: dict[str, float]) -> str:
    """`2 GPUs, 93% busy, 15.2 of 45.0 GiB`."""
    count = int(row["gpus"])
    return (
        f"{count} GPU{'s' if count != 1 else ''}, {row['util']:.0f}% busy, "
        f"{row['used'] / 1024:.1f} of {row['total'] / 1024:.1f} GiB"
    )


def _placed(pods: list[dict]) -> tuple[int, dict[str, list[str]]]:
    """(how many pods ask for GPUs, node -> the running ones there)."""
    placed: dict[str, list[str]] = {}
    asking = 0
    for pod in pods:
        spec = pod.get("spec") or {}
        asks = any(
            "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
            for c in spec.get("containers") or []
        )
        asking += asks
        if asks and spec.get("nodeName") and (pod.get("status") or {}).get("phase") == "Running":
            placed.setdefault(spec["nodeName"], []).append(pod["metadata"]["name"])
    return asking, placed


def _urls(kube: Any, placed: dict[str, list[str]]) -> dict[str, str | None]:
    """Node -> its exporter's URL (None: the Node has no InternalIP), in name order."""
    # one list of every Node, not a read per node the job runs on: job-status costs the
    # same API requests whatever the job's size (issue 31 item 4)
    nodes = {n["metadata"]["name"]: n for n in kube.list("v1", "Node")}
    urls: dict[str, str | None] = {}
    for name in sorted(placed):
        ip = node_ip(nodes[name]) if name in nodes else None
        urls[name] = None if ip is None else f"http://{ip}:{DCGM_EXPORTER_PORT}/metrics"
    return urls


def _lines(where: str, page: Page, namespace: str, names: list[str]) -> dict[str, str] | str:
    """The lines of a node's pods from its page, or why there are none."""
    if isinstance(page, UnreachableError):
        return f"{where}: {page}"
    if isinstance(page, BaseException):
        raise page
    try:
        rows = per_pod(page, namespace, names)
    except ValueError as e:  # not the text format
        return f"{where}: {e}"
    return {n: describe(rows[n]) if n in rows else "not in its node's metrics yet" for n in names}


def gpu_use(
    kube: Any, namespace: str, pods: list[dict], get: Callable[[str, float], str] = fetch
) -> dict[str, str] | str | None:
    """`job-status`'s GPU use: pod -> its line, or one sentence saying why there is none.

    `pods`: the job's pods; those that asked for GPUs and run on a node are looked up.
    None when no pod of the job asks for a GPU. The nodes whose exporter did not answer
    (within DEADLINE, all nodes together) are named in "unavailable"; their pods have no
    line.
    """
    asking, placed = _placed(pods)
    if not asking:
        return None
    if not placed:
        return "no pod of this job runs on its GPUs yet"
    out: dict[str, str] = {}
    unreachable = []
    urls = _urls(kube, placed)
    pages = fetch_all({n: u for n, u in urls.items() if u is not None}, get)
    for node_name, url in urls.items():
        if url is None:
            unreachable.append(f"{node_name}: no InternalIP")
            continue
        page = pages[node_name] if node_name in pages else no_answer()
        where = f"{node_name} ({url.split('/')[2]})"
        lines = _lines(where, page, namespace, placed[node_name])
        if isinstance(lines, str):
            unreachable.append(lines)
        else:
            out.update(lines)
    if unreachable and not out:
        return "no DCGM metrics: the exporter did not answer on " + "; ".join(unreachable)
    if unreachable:
        out["unavailable"] = "; ".join(unreachable)
    return out
