"""Objects printed as `meta.k8s.io/v1` Tables, the way kube-apiserver 1.36 prints them for kubectl.

`kubectl get` asks for `application/json;as=Table;v=v1;g=meta.k8s.io` (kubernetes/kubectl
pkg/cmd/get/get.go); the server prints each kind with its own columns and cells
(kubernetes/kubernetes pkg/printers/internalversion/printers.go, always with the wide columns:
kubectl drops those of priority 1 unless `-o wide`), a custom resource with its CRD's
`additionalPrinterColumns` or, without them, `Age` (apiextensions-apiserver
pkg/apis/apiextensions/helpers.go `serveDefaultColumnsIfEmpty`, pkg/registry/customresource/
tableconvertor). Ages are apimachinery's `duration.HumanDuration` of the time since
`creationTimestamp`. Each row carries the object as the request's `includeObject` says:
`Metadata` (the default: a `PartialObjectMetadata`), `Object` or `None` (k8s.io/apiserver
pkg/endpoints/handlers/response.go `asTable`).

Printed here: the kinds of printers.go the fake serves (Pod, Node, Namespace, Event,
ConfigMap, Secret, ServiceAccount, Service, PersistentVolume(Claim), Deployment, DaemonSet,
StatefulSet, ReplicaSet, Job, CronJob, PodDisruptionBudget, (Cluster)RoleBinding,
StorageClass, RuntimeClass, PriorityClass, NetworkPolicy, Lease, the webhook
configurations), the kinds printers.go has no handler for with the default table converter,
name and "Created At" (k8s.io/apiserver pkg/registry/rest/table.go: Role, ClusterRole,
CustomResourceDefinition), and custom resources. Endpoints and APIService are answered 406
naming the kind, rather than printed with columns the real server would not print.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Callable, NamedTuple

from fakes.kube_discovery import RefusedError

NAME_DESC = "Name must be unique within a namespace."  # ObjectMeta.name, abridged
AGE_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created."
)


def human_duration(seconds: float) -> str:
    """The `HumanDuration` of apimachinery pkg/util/duration."""
    if int(seconds) < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    return _hours(s // 3600, minutes % 60)


def _hours(hours: int, minutes: int) -> str:
    if hours < 8:
        return f"{hours}h" if minutes == 0 else f"{hours}h{minutes}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def since(value: str | None) -> str:
    """printers.go `translateTimestampSince`: `<unknown>` for a zero time."""
    when = _parse_time(value)
    if when is None:
        return "<unknown>"
    return human_duration((datetime.now(timezone.utc) - when).total_seconds())


def _col(name: str, type_: str = "string", priority: int = 0, fmt: str = "") -> dict:
    column: dict[str, Any] = {"name": name, "type": type_, "format": fmt, "description": ""}
    if priority:
        column["priority"] = priority
    return column


NAME = _col("Name", fmt="name")
AGE = _col("Age")


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _spec(obj: dict) -> dict:
    return obj.get("spec") or {}


def _status(obj: dict) -> dict:
    return obj.get("status") or {}


def _containers(spec: dict) -> tuple[str, str]:
    """printers.go `layoutContainerCells`."""
    containers = spec.get("containers") or []
    return (
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
    )


def format_labels(labels: dict | None) -> str:
    """The `labels.FormatLabels` of apimachinery: sorted k=v, `<none>` when empty."""
    if not labels:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def format_selector(selector: dict | None) -> str:
    """metav1.FormatLabelSelector: `<none>` for none, `<none>` for an empty one too."""
    if selector is None:
        return "<none>"
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In":
            terms.append(f"{key} in ({','.join(sorted(values))})")
        elif op == "NotIn":
            terms.append(f"{key} notin ({','.join(sorted(values))})")  # codespell:ignore notin
        elif op == "Exists":
            terms.append(key)
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
    return ",".join(terms) or "<none>"


def _restartable(container: dict | None) -> bool:
    return bool(container) and container.get("restartPolicy") == "Always"


def _finished_at(status: dict) -> str:
    return ((status.get("lastState") or {}).get("terminated") or {}).get("finishedAt") or ""


def _init_reason(status: dict, index: int, count: int) -> str:
    """The Init:... status of the first init container that has not finished well."""
    state = status.get("state") or {}
    terminated, waiting = state.get("terminated"), state.get("waiting")
    if terminated is not None:
        if terminated.get("reason"):
            return "Init:" + terminated["reason"]
        if terminated.get("signal"):
            return f"Init:Signal:{terminated['signal']}"
        return f"Init:ExitCode:{terminated.get('exitCode', 0)}"
    if waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
        return "Init:" + waiting["reason"]
    return f"Init:{index}/{count}"


class _PodState:
    """What printPod adds up over a pod's containers: ready, restarts, the reason shown."""

    def __init__(self, pod: dict) -> None:
        spec, status = _spec(pod), _status(pod)
        self.conditions = {c.get("type"): c for c in status.get("conditions") or []}
        self.ready = self.restarts = 0
        self.last_restart = ""
        self.reason = status.get("reason") or status.get("phase", "")
        scheduled = self.conditions.get("PodScheduled") or {}
        if scheduled.get("reason") == "SchedulingGated":
            self.reason = "SchedulingGated"
        inits = {c.get("name"): c for c in spec.get("initContainers") or []}
        self.total = len(spec.get("containers") or []) + sum(map(_restartable, inits.values()))
        initializing, sidecar_restarts, sidecar_last = self._inits(status, inits)
        initialized = (self.conditions.get("Initialized") or {}).get("status") == "True"
        if not initializing or initialized:
            self.restarts, self.last_restart = sidecar_restarts, sidecar_last
            self._containers(status.get("containerStatuses") or [])

    def _inits(self, status: dict, specs: dict) -> tuple[bool, int, str]:
        sidecar_restarts, sidecar_last = 0, ""
        statuses = status.get("initContainerStatuses") or []
        for i, c in enumerate(statuses):
            self.restarts += int(c.get("restartCount") or 0)
            self.last_restart = max(self.last_restart, _finished_at(c))
            sidecar = _restartable(specs.get(c.get("name")))
            if sidecar:
                sidecar_restarts += int(c.get("restartCount") or 0)
                sidecar_last = max(sidecar_last, _finished_at(c))
            terminated = (c.get("state") or {}).get("terminated")
            if terminated is not None and terminated.get("exitCode", 0) == 0:
                continue
            if sidecar and c.get("started"):
                self.ready += bool(c.get("ready"))
                continue
            self.reason = _init_reason(c, i, len(specs))
            return True, sidecar_restarts, sidecar_last
        return False, sidecar_restarts, sidecar_last

    def _containers(self, statuses: list[dict]) -> None:
        running = False
        for c in reversed(statuses):
            self.restarts += int(c.get("restartCount") or 0)
            self.last_restart = max(self.last_restart, _finished_at(c))
            state = c.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                self.reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                self.reason = terminated["reason"]
            elif terminated is not None:
                signal = terminated.get("signal")
                exit_code = terminated.get("exitCode", 0)
                self.reason = f"Signal:{signal}" if signal else f"ExitCode:{exit_code}"
            elif c.get("ready") and state.get("running") is not None:
                running = True
                self.ready += 1
        if self.reason == "Completed" and running:
            pod_ready = (self.conditions.get("Ready") or {}).get("status") == "True"
            self.reason = "Running" if pod_ready else "NotReady"


def _pod_cells(pod: dict) -> list:
    """The cells of printers.go `printPod` (init containers, sidecars, reasons, wide ones)."""
    spec, status, meta = _spec(pod), _status(pod), _meta(pod)
    state = _PodState(pod)
    reason = state.reason
    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and status.get("phase") not in ("Succeeded", "Failed"):
        reason = "Terminating"
    restarts = str(state.restarts)
    if state.restarts and state.last_restart:
        restarts = f"{state.restarts} ({since(state.last_restart)} ago)"
    ips = status.get("podIPs") or []
    gates = spec.get("readinessGates") or []
    gates_cell = "<none>"
    if gates:
        true = sum(
            1
            for g in gates
            if (state.conditions.get(g.get("conditionType")) or {}).get("status") == "True"
        )
        gates_cell = f"{true}/{len(gates)}"
    return [
        meta.get("name"),
        f"{state.ready}/{state.total}",
        reason,
        restarts,
        since(meta.get("creationTimestamp")),
        (ips[0].get("ip") if ips else "") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_cell,
    ]


def _node_cells(node: dict) -> list:
    """printers.go `printNode` (Ready/NotReady/Unknown, SchedulingDisabled, roles)."""
    meta, status = _meta(node), _status(node)
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    state = (
        ["Unknown"]
        if not ready
        else ["Ready" if ready[-1].get("status") == "True" else "NotReady"]
    )
    if _spec(node).get("unschedulable"):
        state.append("SchedulingDisabled")
    roles = set()
    for key, value in (meta.get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key[len("node-role.kubernetes.io/") :]:
            roles.add(key[len("node-role.kubernetes.io/") :])
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        found = [a.get("address") for a in status.get("addresses") or [] if a.get("type") == kind]
        return found[0] if found else "<none>"

    return [
        meta.get("name"),
        ",".join(state),
        ",".join(sorted(roles)) or "<none>",
        since(meta.get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _service_cells(svc: dict) -> list:
    spec = _spec(svc)
    kind = spec.get("type", "ClusterIP")
    ips = spec.get("clusterIPs") or []
    external = "<unknown>"
    if kind in ("ClusterIP", "NodePort"):
        external = ",".join(spec.get("externalIPs") or []) or "<none>"
    elif kind == "ExternalName":
        external = spec.get("externalName", "")
    elif kind == "LoadBalancer":
        ingress = (_status(svc).get("loadBalancer") or {}).get("ingress") or []
        found = sorted(
            {i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")}
        )
        external = ",".join(found + list(spec.get("externalIPs") or [])) or "<pending>"
    ports = []
    for port in spec.get("ports") or []:
        protocol = port.get("protocol", "TCP")
        if port.get("nodePort"):
            ports.append(f"{port.get('port')}:{port['nodePort']}/{protocol}")
        else:
            ports.append(f"{port.get('port')}/{protocol}")
    return [
        _meta(svc).get("name"),
        kind,
        ips[0] if ips else "<none>",
        external,
        ",".join(ports) or "<none>",
        since(_meta(svc).get("creationTimestamp")),
        format_labels(spec.get("selector")),
    ]


def _deployment_cells(obj: dict) -> list:
    spec, status = _spec(obj), _status(obj)
    names, images = _containers((spec.get("template") or {}).get("spec") or {})
    return [
        _meta(obj).get("name"),
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        since(_meta(obj).get("creationTimestamp")),
        names,
        images,
        format_selector(spec.get("selector")),
    ]


def _daemonset_cells(obj: dict) -> list:
    spec, status = _spec(obj), _status(obj)
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    names, images = _containers(pod_spec)
    return [
        _meta(obj).get("name"),
        status.get("desiredNumberScheduled", 0),
        status.get("currentNumberScheduled", 0),
        status.get("numberReady", 0),
        status.get("updatedNumberScheduled", 0),
        status.get("numberAvailable", 0),
        format_labels(pod_spec.get("nodeSelector")),
        since(_meta(obj).get("creationTimestamp")),
        names,
        images,
        format_selector(spec.get("selector")),
    ]


def _statefulset_cells(obj: dict) -> list:
    spec, status = _spec(obj), _status(obj)
    names, images = _containers((spec.get("template") or {}).get("spec") or {})
    return [
        _meta(obj).get("name"),
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        since(_meta(obj).get("creationTimestamp")),
        names,
        images,
    ]


def _job_cells(obj: dict) -> list:
    spec, status, meta = _spec(obj), _status(obj), _meta(obj)
    succeeded = status.get("succeeded", 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = _parse_time(status.get("startTime")), _parse_time(status.get("completionTime"))
    duration = ""
    if start is not None:
        until = end or datetime.now(timezone.utc)
        duration = human_duration((until - start).total_seconds())
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Complete") == "True":
        state = "Complete"
    elif conditions.get("Failed") == "True":
        state = "Failed"
    elif meta.get("deletionTimestamp"):
        state = "Terminating"
    elif conditions.get("Suspended") == "True":
        state = "Suspended"
    elif conditions.get("FailureTarget") == "True":
        state = "FailureTarget"
    else:
        state = "Running"
    names, images = _containers((spec.get("template") or {}).get("spec") or {})
    return [
        meta.get("name"),
        state,
        completions,
        duration,
        since(meta.get("creationTimestamp")),
        names,
        images,
        format_selector(spec.get("selector")),
    ]


def _pdb_cells(obj: dict) -> list:
    spec = _spec(obj)
    return [
        _meta(obj).get("name"),
        str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
        str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
        _status(obj).get("disruptionsAllowed", 0),
        since(_meta(obj).get("creationTimestamp")),
    ]


def _replicaset_cells(obj: dict) -> list:
    spec, status = _spec(obj), _status(obj)
    names, images = _containers((spec.get("template") or {}).get("spec") or {})
    return [
        _meta(obj).get("name"),
        spec.get("replicas", 1),
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        since(_meta(obj).get("creationTimestamp")),
        names,
        images,
        format_selector(spec.get("selector")),
    ]


def _cronjob_cells(obj: dict) -> list:
    spec, status = _spec(obj), _status(obj)
    job = (spec.get("jobTemplate") or {}).get("spec") or {}
    names, images = _containers((job.get("template") or {}).get("spec") or {})
    suspend = spec.get("suspend")
    return [
        _meta(obj).get("name"),
        spec.get("schedule", ""),
        spec.get("timeZone") or "<none>",
        "<unset>" if suspend is None else ("True" if suspend else "False"),  # printBoolPtr
        len(status.get("active") or []),
        since(status["lastScheduleTime"]) if status.get("lastScheduleTime") else "<none>",
        since(_meta(obj).get("creationTimestamp")),
        names,
        images,
        format_selector(job.get("selector")),
    ]


def _binding_cells(obj: dict) -> list:
    ref = obj.get("roleRef") or {}
    subjects = obj.get("subjects") or []
    users = [s.get("name", "") for s in subjects if s.get("kind") == "User"]
    groups = [s.get("name", "") for s in subjects if s.get("kind") == "Group"]
    accounts = [
        f"{s.get('namespace', '')}/{s.get('name', '')}"
        for s in subjects
        if s.get("kind") == "ServiceAccount"
    ]
    return [
        _meta(obj).get("name"),
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        since(_meta(obj).get("creationTimestamp")),
        ", ".join(users),
        ", ".join(groups),
        ", ".join(accounts),
    ]


def _storageclass_cells(obj: dict) -> list:
    annotations = _meta(obj).get("annotations") or {}
    default = "true" in (
        annotations.get("storageclass.kubernetes.io/is-default-class"),
        annotations.get("storageclass.beta.kubernetes.io/is-default-class"),
    )
    expansion = obj.get("allowVolumeExpansion")
    return [
        _meta(obj).get("name", "") + (" (default)" if default else ""),
        obj.get("provisioner", ""),
        obj.get("reclaimPolicy") or "Delete",
        obj.get("volumeBindingMode") or "Immediate",
        bool(expansion),
        since(_meta(obj).get("creationTimestamp")),
    ]


_ACCESS_MODES = (
    ("ReadWriteOnce", "RWO"),
    ("ReadOnlyMany", "ROX"),
    ("ReadWriteMany", "RWX"),
    ("ReadWriteOncePod", "RWOP"),
)


def _access_modes(modes: list | None) -> str:
    """pkg/apis/core/helper `GetAccessModesAsString`."""
    return ",".join(short for mode, short in _ACCESS_MODES if mode in (modes or []))


def _pv_cells(obj: dict) -> list:
    spec, status, meta = _spec(obj), _status(obj), _meta(obj)
    claim = spec.get("claimRef")
    storage_class = spec.get("storageClassName") or (meta.get("annotations") or {}).get(
        "volume.beta.kubernetes.io/storage-class", ""
    )
    return [
        meta.get("name"),
        (spec.get("capacity") or {}).get("storage", "0"),
        _access_modes(spec.get("accessModes")),
        spec.get("persistentVolumeReclaimPolicy", ""),
        "Terminating" if meta.get("deletionTimestamp") else status.get("phase", ""),
        f"{claim.get('namespace', '')}/{claim.get('name', '')}" if claim else "",
        storage_class,
        spec.get("volumeAttributesClassName") or "<unset>",
        status.get("reason", ""),
        since(meta.get("creationTimestamp")),
        spec.get("volumeMode") or "<unset>",
    ]


def _pvc_cells(obj: dict) -> list:
    spec, status, meta = _spec(obj), _status(obj), _meta(obj)
    capacity = modes = ""
    if spec.get("volumeName"):
        modes = _access_modes(status.get("accessModes"))
        capacity = (status.get("capacity") or {}).get("storage", "0")
    storage_class = spec.get("storageClassName") or (meta.get("annotations") or {}).get(
        "volume.beta.kubernetes.io/storage-class", ""
    )
    return [
        meta.get("name"),
        "Terminating" if meta.get("deletionTimestamp") else status.get("phase", ""),
        spec.get("volumeName", ""),
        capacity,
        modes,
        storage_class,
        spec.get("volumeAttributesClassName") or "<unset>",
        since(meta.get("creationTimestamp")),
        spec.get("volumeMode") or "<unset>",
    ]


def _default_cells(obj: dict) -> list:
    """The default converter (apiserver pkg/registry/rest/table.go): name, creation time."""
    created = _parse_time(_meta(obj).get("creationTimestamp"))
    stamp = (created or datetime(1, 1, 1, tzinfo=timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [_meta(obj).get("name"), stamp]


DEFAULT_TABLE = ([NAME, _col("Created At", "date")], _default_cells)


def _event_cells(obj: dict) -> list:
    """The cells of printers.go `printEvent` (series, singleton counts, the source).

    It prints the internal Event, so an events.k8s.io/v1 one reads the same (the core
    names, `fakes.kube_apiserver.event_twin`).
    """
    if obj.get("apiVersion") == "events.k8s.io/v1":
        from fakes.kube_apiserver import event_twin  # the server imports this module

        obj = (event_twin("/apis/events.k8s.io/v1/namespaces/", obj) or ("", obj))[1]
    first = since(obj.get("firstTimestamp") or obj.get("eventTime"))
    last = since(obj["lastTimestamp"]) if obj.get("lastTimestamp") else first
    count = obj.get("count") or 0
    if obj.get("series"):
        last = since((obj["series"] or {}).get("lastObservedTime"))
        count = (obj["series"] or {}).get("count", 0)
    elif count == 0:
        count = 1  # singleton events have no count in the new API
    involved = obj.get("involvedObject") or {}
    target = involved.get("kind", "").lower()
    if involved.get("name"):
        target = f"{target}/{involved['name']}"
    source = obj.get("source") or {}
    component = source.get("component") or obj.get("reportingController") or ""
    host = source.get("host") or obj.get("reportingInstance") or ""
    return [
        last,
        obj.get("type", ""),
        obj.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{component}, {host}" if host else component,
        (obj.get("message") or "").strip(),
        first,
        count,
        _meta(obj).get("name"),
    ]


def _simple(*cells: Callable[[dict], Any]) -> Callable[[dict], list]:
    def row(obj: dict) -> list:
        return [
            _meta(obj).get("name"),
            *(c(obj) for c in cells),
            since(_meta(obj).get("creationTimestamp")),
        ]

    return row


# kind -> (columns, cells); printers.go `AddHandlers`
PRINTERS: dict[str, tuple[list[dict], Callable[[dict], list]]] = {
    "Pod": (
        [
            NAME,
            _col("Ready"),
            _col("Status"),
            _col("Restarts"),
            AGE,
            _col("IP", priority=1),
            _col("Node", priority=1),
            _col("Nominated Node", priority=1),
            _col("Readiness Gates", priority=1),
        ],
        _pod_cells,
    ),
    "Node": (
        [
            NAME,
            _col("Status"),
            _col("Roles"),
            AGE,
            _col("Version"),
            _col("Internal-IP", priority=1),
            _col("External-IP", priority=1),
            _col("OS-Image", priority=1),
            _col("Kernel-Version", priority=1),
            _col("Container-Runtime", priority=1),
        ],
        _node_cells,
    ),
    "Namespace": ([NAME, _col("Status"), AGE], _simple(lambda o: _status(o).get("phase", ""))),
    "Event": (
        [
            _col("Last Seen"),
            _col("Type"),
            _col("Reason"),
            _col("Object"),
            _col("Subobject", priority=1),
            _col("Source", priority=1),
            _col("Message"),
            _col("First Seen", priority=1),
            _col("Count", priority=1),
            _col("Name", priority=1, fmt="name"),
        ],
        _event_cells,
    ),
    "ConfigMap": (
        [NAME, _col("Data"), AGE],
        _simple(lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})),
    ),
    "Secret": (
        [NAME, _col("Type"), _col("Data"), AGE],
        _simple(lambda o: o.get("type", ""), lambda o: len(o.get("data") or {})),
    ),
    "ServiceAccount": (
        [NAME, _col("Secrets"), AGE],
        _simple(lambda o: len(o.get("secrets") or [])),
    ),
    "Lease": (
        [NAME, _col("Holder"), AGE],
        _simple(lambda o: _spec(o).get("holderIdentity") or ""),
    ),
    "Service": (
        [
            NAME,
            _col("Type"),
            _col("Cluster-IP"),
            _col("External-IP"),
            _col("Port(s)"),
            AGE,
            _col("Selector", priority=1),
        ],
        _service_cells,
    ),
    "Deployment": (
        [
            NAME,
            _col("Ready"),
            _col("Up-to-date"),
            _col("Available"),
            AGE,
            _col("Containers", priority=1),
            _col("Images", priority=1),
            _col("Selector", priority=1),
        ],
        _deployment_cells,
    ),
    "DaemonSet": (
        [
            NAME,
            _col("Desired", "integer"),
            _col("Current", "integer"),
            _col("Ready", "integer"),
            _col("Up-to-date", "integer"),
            _col("Available", "integer"),
            _col("Node Selector"),
            AGE,
            _col("Containers", priority=1),
            _col("Images", priority=1),
            _col("Selector", priority=1),
        ],
        _daemonset_cells,
    ),
    "StatefulSet": (
        [NAME, _col("Ready"), AGE, _col("Containers", priority=1), _col("Images", priority=1)],
        _statefulset_cells,
    ),
    "Job": (
        [
            NAME,
            _col("Status"),
            _col("Completions"),
            _col("Duration"),
            AGE,
            _col("Containers", priority=1),
            _col("Images", priority=1),
            _col("Selector", priority=1),
        ],
        _job_cells,
    ),
    "ReplicaSet": (
        [
            NAME,
            _col("Desired", "integer"),
            _col("Current", "integer"),
            _col("Ready", "integer"),
            AGE,
            _col("Containers", priority=1),
            _col("Images", priority=1),
            _col("Selector", priority=1),
        ],
        _replicaset_cells,
    ),
    "CronJob": (
        [
            NAME,
            _col("Schedule"),
            _col("Timezone"),
            _col("Suspend", "boolean"),
            _col("Active", "integer"),
            _col("Last Schedule"),
            AGE,
            _col("Containers", priority=1),
            _col("Images", priority=1),
            _col("Selector", priority=1),
        ],
        _cronjob_cells,
    ),
    "RoleBinding": (
        [
            NAME,
            _col("Role"),
            AGE,
            _col("Users", priority=1),
            _col("Groups", priority=1),
            _col("ServiceAccounts", priority=1),
        ],
        _binding_cells,
    ),
    "StorageClass": (
        [
            NAME,
            _col("Provisioner"),
            _col("ReclaimPolicy"),
            _col("VolumeBindingMode"),
            _col("AllowVolumeExpansion"),
            AGE,
        ],
        _storageclass_cells,
    ),
    "PersistentVolume": (
        [
            NAME,
            _col("Capacity"),
            _col("Access Modes"),
            _col("Reclaim Policy"),
            _col("Status"),
            _col("Claim"),
            _col("StorageClass"),
            _col("VolumeAttributesClass"),
            _col("Reason"),
            AGE,
            _col("VolumeMode", priority=1),
        ],
        _pv_cells,
    ),
    "PersistentVolumeClaim": (
        [
            NAME,
            _col("Status"),
            _col("Volume"),
            _col("Capacity"),
            _col("Access Modes"),
            _col("StorageClass"),
            _col("VolumeAttributesClass"),
            AGE,
            _col("VolumeMode", priority=1),
        ],
        _pvc_cells,
    ),
    "RuntimeClass": ([NAME, _col("Handler"), AGE], _simple(lambda o: o.get("handler", ""))),
    "PriorityClass": (
        [
            NAME,
            _col("Value", "integer"),
            _col("Global-Default", "boolean"),
            AGE,
            _col("PreemptionPolicy"),
        ],
        lambda o: [
            _meta(o).get("name"),
            o.get("value", 0),
            bool(o.get("globalDefault")),
            since(_meta(o).get("creationTimestamp")),
            o.get("preemptionPolicy", ""),
        ],
    ),
    "NetworkPolicy": (
        [NAME, _col("Pod-Selector"), AGE],
        _simple(lambda o: format_selector(_spec(o).get("podSelector") or {})),
    ),
    "MutatingWebhookConfiguration": (
        [NAME, _col("Webhooks", "integer"), AGE],
        _simple(lambda o: len(o.get("webhooks") or [])),
    ),
    "ValidatingWebhookConfiguration": (
        [NAME, _col("Webhooks", "integer"), AGE],
        _simple(lambda o: len(o.get("webhooks") or [])),
    ),
    # no printers.go handler: the default table converter
    "Role": DEFAULT_TABLE,
    "ClusterRole": DEFAULT_TABLE,
    "CustomResourceDefinition": DEFAULT_TABLE,
    "PodDisruptionBudget": (
        [
            NAME,
            _col("Min Available"),
            _col("Max Unavailable"),
            _col("Allowed Disruptions", "integer"),
            AGE,
        ],
        _pdb_cells,
    ),
}


PRINTERS["ClusterRoleBinding"] = PRINTERS["RoleBinding"]

# ---------------------------------------------------------------- custom resources

_STEP = re.compile(r"\.([\w-]+)|\[(\d+)\]|\[\?\(@\.([\w.-]+)\s*==\s*[\"']([^\"']*)[\"']\)\]")


def json_path(obj: Any, path: str) -> Any:
    """The value a simple JSONPath (`.a.b`, `[0]`, `[?(@.type=="Ready")]`) selects, or None."""
    position, value = 0, obj
    while position < len(path):
        m = _STEP.match(path, position)
        if not m:
            raise ValueError(f"unrecognized column definition {path!r}")
        position = m.end()
        if m.group(1) is not None:
            value = value.get(m.group(1)) if isinstance(value, dict) else None
        elif m.group(2) is not None:
            index = int(m.group(2))
            value = value[index] if isinstance(value, list) and index < len(value) else None
        else:
            key, wanted = m.group(3), m.group(4)
            matches = [v for v in value or [] if json_path(v, "." + key) == wanted]
            value = matches[0] if isinstance(value, list) and matches else None
        if value is None:
            return None
    return value


def _crd_columns(crd: dict, version: str) -> list[dict]:
    spec = crd.get("spec") or {}
    for v in spec.get("versions") or []:
        if v.get("name") == version:
            columns = v.get("additionalPrinterColumns") or spec.get("additionalPrinterColumns")
            return columns or [
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
            ]
    return []


def _cr_cell(column: dict, obj: dict) -> Any:
    """tableconvertor.go `cellForJSONValue` (and string columns printed as jsonpath prints)."""
    value = json_path(obj, column.get("jsonPath", ""))
    if value is None:
        return None
    kind = column.get("type")
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        return since(value) if _parse_time(value) else "<invalid>"
    return None


def _custom_printer(crd: dict, version: str) -> tuple[list[dict], Callable[[dict], list]]:
    columns = _crd_columns(crd, version)
    headers = [NAME] + [
        _col(c.get("name", ""), c.get("type", "string"), c.get("priority", 0), c.get("format", ""))
        for c in columns
    ]

    def cells(obj: dict) -> list:
        return [_meta(obj).get("name")] + [_cr_cell(c, obj) for c in columns]

    return headers, cells


# ---------------------------------------------------------------- the table


class Printer(NamedTuple):
    """How one kind is printed; `columns` None when the fake does not print it."""

    kind: str
    columns: list[dict] | None
    cells: Callable[[dict], list] | None


def printer(api: Any, gv: str, plural: str, kind: str) -> Printer:
    """The printer of a kind the fake serves (its CRD's columns for a custom resource)."""
    if "/" in gv:
        crd_name = f"{plural}.{gv.split('/')[0]}"
        crd = api.get_object(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}")
        if crd is not None:
            return Printer(kind, *_custom_printer(crd, gv.rpartition("/")[2]))
    columns, cells = PRINTERS.get(kind) or (None, None)
    return Printer(kind, columns, cells)


def _not_printed(kind: str) -> RefusedError:
    return RefusedError(
        406, "NotAcceptable", f"the fake API server does not print {kind} as a Table"
    )


def converted(
    printer: Printer,
    objects: list[dict],
    rv: str,
    query: dict,
    convert: tuple,
    *,
    one: bool,
    sub: str,
) -> dict:
    """`objects` as the Table or PartialObjectMetadata(List) `convert` names (response.go)."""
    group_version = f"{convert[0]}/{convert[1]}"
    if convert[2] in ("PartialObjectMetadata", "PartialObjectMetadataList"):
        partial = [_partial(o, group_version) for o in objects]
        if one:
            return partial[0]
        return {
            "kind": "PartialObjectMetadataList",
            "apiVersion": group_version,
            "metadata": {"resourceVersion": rv},
            "items": partial,
        }
    include = query.get("includeObject", "")
    if include not in ("", "Metadata", "Object", "None"):  # response.go optionsForTransform
        raise RefusedError(
            400,
            "BadRequest",
            f'Unable to convert to Table as requested: includeObject: Invalid value: "{include}": '
            "must be 'Metadata', 'Object', 'None', or empty",
        )
    if printer.columns is None or printer.cells is None or sub:
        raise _not_printed(printer.kind)
    return table(
        printer.columns,
        printer.cells,
        objects,
        resource_version=rv,
        include_object=include,
        api_version=group_version,
        no_headers=query.get("noHeaders") == "true",
    )


def _partial(obj: dict, group_version: str) -> dict:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": group_version,
        "metadata": obj.get("metadata") or {},
    }


def watch_transform(printer: Printer, query: dict, convert: tuple) -> Callable[[dict, bool], dict]:
    """What a Table (or PartialObjectMetadata) watch sends for each object."""
    group_version = f"{convert[0]}/{convert[1]}"
    if convert[2] != "Table":
        return lambda obj, _first: _partial(obj, group_version)
    columns, cells = printer.columns, printer.cells
    if columns is None or cells is None:
        raise _not_printed(printer.kind)

    def one_row(obj: dict, first: bool) -> dict:
        rv = (obj.get("metadata") or {}).get("resourceVersion", "")
        include = query.get("includeObject", "")
        return table(
            columns,
            cells,
            [obj],
            resource_version=rv,
            include_object=include,
            api_version=group_version,
            no_headers=not first,
        )

    return one_row


def table(
    columns: list[dict],
    cells: Callable[[dict], list],
    objects: list[dict],
    *,
    resource_version: str,
    include_object: str,
    api_version: str = "meta.k8s.io/v1",
    no_headers: bool = False,
) -> dict:
    """A `Table` of `objects` (full objects, apiVersion and kind set)."""
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": cells(obj)}
        if include_object in ("", "Metadata"):
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": api_version,
                "metadata": obj.get("metadata") or {},
            }
        elif include_object == "Object":
            row["object"] = obj
        rows.append(row)
    result: dict[str, Any] = {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": {"resourceVersion": resource_version},
        "rows": rows,
    }
    if not no_headers:
        result["columnDefinitions"] = columns
    return result
