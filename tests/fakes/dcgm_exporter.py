"""NVIDIA's DCGM exporter's /metrics page for time-shared GPUs, as its PodMapper writes it.

What a node's exporter (4.8.x, the control plane's pin) prints when pods share its GPUs,
given the exporter's own pod spec, the pods holding GPU replicas and the processes on the
GPUs. Upstream: NVIDIA/dcgm-exporter internal/pkg/transformation at d5e5f51 and at the
4.6.0-4.8.3 release commit 7ad58324 (kubernetes.go, process_metrics.go, pidmapper.go);
the per-process part came with fb5e3dc (PR #594, 2026-03-24), before 4.5.3-4.8.2.

- Only with KUBERNETES_VIRTUAL_GPUS (PodMapper.Process; without it each GPU is labelled
  with one of its pods, toDeviceToPod's last). Kubelet's pod-resources API lists a
  time-sliced replica as `<GPU UUID>::<n>` (NVIDIA's device plugin); toDeviceToSharingPods
  gives the GPU every pod holding a replica of it, `vgpu` the replica (getSharedGPU).
- DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED (isPerProcessMetric) are per process: NVML's
  per-process SM utilisation (%) and memory (bytes, printed in MiB), each PID mapped to a
  pod by the pod UID in `/proc/<pid>/cgroup` (pidToPodMapper.getPodUIDForPID). A pod's
  series is the sum over its mapped PIDs (buildPodValueMap); a pod with none mapped gets
  "0" (buildIdlePodValues). The GPU's own series, with no pod labels, is kept beside them,
  and the per-pod ones carry `pod_uid` and `vgpu` (createPerProcessMetrics).
- Every other field: the GPU's figure once per sharing pod, with its pod labels, and no
  series without them: a shared GPU's power, energy or free memory is on its pods' series
  only, repeated on each (PodMapper.Process, the loop over podInfos); `pod_uid` only on
  the per-process series (KUBERNETES_ENABLE_POD_UID is off by default, pkg/cmd/app.go).
- Labels as rendermetrics/render_metrics.go writes them: `gpu`, `UUID`, `pci_bus_id`,
  `device`, `modelName`, `hostname`, then the label fields (the collectors file's
  DCGM_FI_DRIVER_VERSION) and the pod attributes, each set in key order (Go's template
  ranges over a map sorted); values as the exporter's strings (integers with %d: energy
  in mJ since boot is a 12-digit integer, never rounded); `# HELP`/`# TYPE` from the
  collectors file (`kinds`: field -> (type, help)).
- `/proc/<pid>` of another pod's process exists in the exporter's container only when it
  runs in the host's PID namespace (`hostPID`): otherwise the cgroup file cannot be read,
  buildPIDToPodMap skips the PID, and every sharing pod gets "0", whatever it does. (The
  same if the driver leaves out the processes of other PID namespaces: nothing to map.)

`Exporters` serves such pages over HTTP, one exporter per node, as the DaemonSet's
host-network pods answer at `<node InternalIP>:9400/metrics`.
"""

from __future__ import annotations

import dataclasses
import http.server
import selectors
import threading
import time
from collections.abc import Mapping

PER_PROCESS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    model: str = "NVIDIA A10G"

    @property
    def pci_bus_id(self) -> str:
        """The PCI address, numbered as tests/fixtures/dcgm/metrics-a10g-4.8.txt has them."""
        return f"00000000:00:{0x1B + self.index:02X}.0"


@dataclasses.dataclass(frozen=True)
class SharingPod:
    """A pod's container holding replicas, each `<GPU UUID>::<n>` (pod-resources)."""

    name: str
    namespace: str
    uid: str
    replicas: tuple[str, ...]
    container: str = "tensorflow"


@dataclasses.dataclass(frozen=True)
class Process:
    """A process on a GPU, as NVML reports it (host PID) and the pod its cgroup names."""

    pid: int
    gpu_uuid: str
    pod_uid: str
    sm_util: int  # %
    memory: int  # bytes


def _value(value: float) -> str:
    """A sample as the exporter prints it: an integer field with %d, a ratio as a float."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def series_labels(labels: dict[str, str]) -> str:
    """`k="v",...` as the text exposition format writes a series' labels."""
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def _own(
    field: str, gpu_uuid: str, pod_uid: str, processes: list[Process], visible: dict
) -> float:
    """A sharing pod's per-process figure: its mapped processes' sum, 0 for none."""
    mine = [p for p in processes if p.gpu_uuid == gpu_uuid and visible.get(p.pid) == pod_uid]
    if field == "DCGM_FI_DEV_GPU_UTIL":
        return sum(p.sm_util for p in mine)
    return sum(p.memory // (1024 * 1024) for p in mine)  # bytes to MiB, per process


def _sharing(pods: list[SharingPod], virtual: bool) -> dict[str, list[tuple[SharingPod, str]]]:
    """GPU UUID -> (pod, replica) of each pod holding it; one pod (the last) unless virtual."""
    sharing: dict[str, list[tuple[SharingPod, str]]] = {}
    for pod in pods:
        for replica in pod.replicas:
            uuid, _, vgpu = replica.partition("::")
            sharing.setdefault(uuid, []).append((pod, vgpu))
    if not virtual:
        sharing = {uuid: holders[-1:] for uuid, holders in sharing.items()}
    return sharing


def page(
    spec: dict,
    hostname: str,
    gpus: list[Gpu],
    pods: list[SharingPod],
    processes: list[Process],
    fields: Mapping[str, Mapping[str, float]],
    kinds: Mapping[str, tuple[str, str]] | None = None,
    driver: str = "580.95.05",
) -> str:
    """The page: `spec` the exporter's pod spec, `fields` field -> GPU UUID -> DCGM's value.

    `kinds`: field -> (Prometheus type, help) from the collectors file (gauge if absent).
    """
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    virtual = env.get("KUBERNETES_VIRTUAL_GPUS") == "true"
    # the PIDs whose /proc/<pid>/cgroup the exporter can read: the host's, or none of them
    visible = {p.pid: p.pod_uid for p in processes} if spec.get("hostPID") else {}
    sharing = _sharing(pods, virtual)

    lines = []
    for field, values in fields.items():
        kind, text = (kinds or {}).get(field, ("gauge", field))
        lines += [f"# HELP {field} {text}", f"# TYPE {field} {kind}"]
        for gpu in gpus:
            base = {
                "gpu": str(gpu.index),
                "UUID": gpu.uuid,
                "pci_bus_id": gpu.pci_bus_id,
                "device": f"nvidia{gpu.index}",
                "modelName": gpu.model,
                "hostname": hostname,
                "DCGM_FI_DRIVER_VERSION": driver,
            }
            holders = sharing.get(gpu.uuid, [])
            per_process = bool(virtual and field in PER_PROCESS and holders)
            if per_process or not holders:
                lines.append(f"{field}{{{series_labels(base)}}} {_value(values[gpu.uuid])}")
            for pod, vgpu in holders:
                labels = {**base, "container": pod.container, "namespace": pod.namespace}
                labels["pod"] = pod.name
                value = values[gpu.uuid]
                if per_process:
                    labels["pod_uid"] = pod.uid
                    value = _own(field, gpu.uuid, pod.uid, processes, visible)
                if virtual and vgpu:
                    labels["vgpu"] = vgpu
                lines.append(f"{field}{{{series_labels(labels)}}} {_value(value)}")
    return "\n".join(lines) + "\n"


class Exporters:
    """`with Exporters(n) as ex:` node i's exporter at `ex.addresses[i]` (127.0.0.<i+1>).

    Every exporter listens on the same port, `ex.port` (9400 on a cluster; here a free
    one, which the caller gives its client as the exporter's port), each at its own
    loopback address standing for its node's InternalIP (Linux routes all of 127/8 to
    lo). `pages`: address -> the page served at /metrics (404 without one); `gets`:
    address -> requests, `asked` -> when the last came (time.monotonic()); `hung`:
    addresses whose exporter accepts the connection and never answers (until the `with`
    ends), as one stuck in a DCGM call. One thread
    accepts on every address; each request is answered on a thread of its own.
    """

    def __init__(self, count: int) -> None:
        if not 0 < count < 255:
            raise ValueError("127.0.0.1 to 127.0.0.254")
        self.addresses = [f"127.0.0.{i + 1}" for i in range(count)]
        self.pages: dict[str, str] = {}
        self.gets = dict.fromkeys(self.addresses, 0)
        self.asked: dict[str, float] = {}
        self.hung: set[str] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        fakes = self

        class Handler(http.server.BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # tests/fakes/__init__.py

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                address = self.server.server_address[0]
                with fakes._lock:
                    fakes.gets[address] += 1
                    fakes.asked[address] = time.monotonic()
                if address in fakes.hung:
                    fakes._stop.wait(timeout=60)
                    self.close_connection = True
                    return
                body = fakes.pages.get(address)
                if self.path != "/metrics" or body is None:
                    self.send_error(404)
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        first = http.server.ThreadingHTTPServer((self.addresses[0], 0), Handler)
        self.port = first.server_address[1]
        self._servers = [first] + [
            http.server.ThreadingHTTPServer((a, self.port), Handler) for a in self.addresses[1:]
        ]
        for server in self._servers:
            server.daemon_threads = True

    def _accept(self) -> None:
        with selectors.DefaultSelector() as selector:
            for server in self._servers:
                selector.register(server, selectors.EVENT_READ, server)
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=0.05):
                    key.data.handle_request()  # readable: accepts without waiting

    def __enter__(self) -> Exporters:
        self._thread = threading.Thread(target=self._accept, name="dcgm-exporters", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for server in self._servers:
            server.server_close()
