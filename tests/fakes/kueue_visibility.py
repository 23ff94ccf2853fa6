"""Kueue's on-demand visibility API, computed from the fake Kueue's own queue state.

kubernetes-sigs/kueue v0.19.2 serves `visibility.kueue.x-k8s.io` from
kueue-controller-manager as an aggregated API (config/components/visibility/
apiservice_v1beta1.yaml and apiservice_v1beta2.yaml: APIServices for both versions, backed
by the Service `visibility-server` in kueue-system); the feature gate VisibilityOnDemand is
Beta and on by default since 0.9 (pkg/features/kube_features.go), so a default install
serves it. The docs page "Pending Workloads on-demand" (site/content/en/docs/tasks/manage/
monitor_pending_workloads/pending_workloads_on_demand.md) shows the requests:

- V1 `GET /apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/<ns>/localqueues/<lq>/
  pendingworkloads` (pkg/visibility/storage/pending_workloads_lq.go): the LocalQueue's
  ClusterQueue's pending workloads in queue order, only those of that namespace and
  LocalQueue, `positionInLocalQueue` counting from 0 among them and
  `positionInClusterQueue` their index in the whole ClusterQueue; an unknown LocalQueue
  answers 404 NotFound `localqueue "<lq>" not found`. `offset` (default 0) and `limit`
  (default 1000, at most 4000: pkg/constants DefaultPendingWorkloadsLimit,
  MaxPendingWorkloadsLimit; storage/utils.go boundedLimitOffset) page it.
- V2 `GET .../v1beta2/clusterqueues/<cq>/pendingworkloads` (pending_workloads_cq.go): the
  same over the whole ClusterQueue.
- V3 Each item (apis/visibility/v1beta2/types.go PendingWorkload; storage/utils.go
  newPendingWorkload): metadata {name, namespace, creationTimestamp, ownerReferences},
  priority, localQueueName, positionInClusterQueue, positionInLocalQueue; the answer is a
  `PendingWorkloadsSummary` with `items`.
- V4 Pending means in the queue manager: every Workload without a quota reservation that
  is active, of a LocalQueue pointing at the ClusterQueue (the heap, the inadmissible ones
  and the one in flight: pkg/cache/queue/cluster_queue.go totalElements), except one
  waiting out its requeue backoff: evicted by PodsReadyTimeout, it leaves the queue
  manager with a future `status.requeueState.requeueAt` (core/workload_controller.go:
  1442-1483, no immediate requeue), and the workload controller puts it back only once
  the backoff ended, after clearing requeueAt (:604-633); so a Workload whose requeueAt
  is still set is not pending, whatever the clock (fakes/batch.py K15 clears it then).
  Snapshot orders them as the queue does (cluster_queue.go baseCompareFunc): higher
  priority first, then the queue-order timestamp (the creation time, or the eviction's
  time for one evicted by PodsReadyTimeout with `requeuingStrategy.timestamp: Eviction`,
  the control plane's configuration: pkg/workload/workload.go GetQueueOrderTimestamp),
  then UID.
- V5 RBAC guards it as any resource: `get` on `localqueues/pendingworkloads` in the
  namespace (Kueue's own pending-workloads-lq-viewer-role, config/components/rbac/
  pending_workloads_lq_viewer_role.yaml, aggregated to the `view` role), `get` on
  `clusterqueues/pendingworkloads` cluster-wide (pending_workloads_cq_viewer_role.yaml, a
  batch-admin role); the API server authorizes before the aggregator proxies.

`serve(api)` registers it on a FakeKubeApiServer (`api.aggregated`).
"""

from __future__ import annotations

from typing import Any

from fakes.kube_apiserver import ApiError

GROUP = "visibility.kueue.x-k8s.io"
VERSION = "v1beta2"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
DEFAULT_LIMIT = 1000  # kueue pkg/constants DefaultPendingWorkloadsLimit
MAX_LIMIT = 4000  # MaxPendingWorkloadsLimit


def _true(obj: dict, kind: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def _order(w: dict) -> tuple[int, str, str]:
    """V4: baseCompareFunc's key (priority descending, queue-order timestamp, UID)."""
    stamp = w["metadata"].get("creationTimestamp", "")
    evicted = _true(w, "Evicted")
    if evicted and evicted.get("reason") == "PodsReadyTimeout":
        stamp = evicted.get("lastTransitionTime") or stamp
    return (-int(w["spec"].get("priority") or 0), stamp, w["metadata"].get("uid", ""))


def pending(api: Any, cluster_queue: str) -> list[dict]:
    """V4: the ClusterQueue's pending Workloads, in queue order."""
    out = []
    for w in api.objects(f"{KUEUE}/namespaces/", kind="Workload"):
        ns = w["metadata"]["namespace"]
        queue = w["spec"].get("queueName", "")
        local = api.get_object(f"{KUEUE}/namespaces/{ns}/localqueues/{queue}")
        if local is None or local["spec"].get("clusterQueue") != cluster_queue:
            continue
        if _true(w, "QuotaReserved") or _true(w, "Finished") or w["spec"].get("active") is False:
            continue
        if ((w.get("status") or {}).get("requeueState") or {}).get("requeueAt"):
            continue
        out.append(w)
    return sorted(out, key=_order)


def _item(w: dict, in_cq: int, in_lq: int) -> dict:
    meta = w["metadata"]
    refs = [
        {k: r[k] for k in ("apiVersion", "kind", "name", "uid")}
        for r in meta.get("ownerReferences") or []
    ]
    return {
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "creationTimestamp": meta.get("creationTimestamp"),
            "ownerReferences": refs,
        },
        "priority": int(w["spec"].get("priority") or 0),
        "localQueueName": w["spec"].get("queueName", ""),
        "positionInClusterQueue": in_cq,
        "positionInLocalQueue": in_lq,
    }


def _page(query: dict) -> tuple[int, int]:
    limit = int(query.get("limit", DEFAULT_LIMIT))
    return min(max(limit, 0), MAX_LIMIT), max(int(query.get("offset", 0)), 0)


def summary(api: Any, path: str, query: dict) -> dict:
    """V1/V2: the PendingWorkloadsSummary a pendingworkloads path answers."""
    parts = path.strip("/").split("/")[3:]  # after apis/<group>/<version>
    limit, offset = _page(query)
    if len(parts) == 5 and parts[0] == "namespaces" and parts[2] == "localqueues":
        ns, lq = parts[1], parts[3]
        local = api.get_object(f"{KUEUE}/namespaces/{ns}/localqueues/{lq}")
        if local is None or parts[4] != "pendingworkloads":
            raise ApiError(404, "NotFound", f'localqueue "{lq}" not found')
        everyone = pending(api, local["spec"]["clusterQueue"])
        mine = [
            (i, w)
            for i, w in enumerate(everyone)
            if w["metadata"]["namespace"] == ns and w["spec"].get("queueName", "") == lq
        ]
        items = [_item(w, i, n) for n, (i, w) in enumerate(mine)][offset : offset + limit]
    elif len(parts) == 3 and parts[0] == "clusterqueues" and parts[2] == "pendingworkloads":
        if api.get_object(f"{KUEUE}/clusterqueues/{parts[1]}") is None:
            raise ApiError(404, "NotFound", f'clusterqueue "{parts[1]}" not found')
        everyone = pending(api, parts[1])
        counts: dict[tuple[str, str], int] = {}
        items = []
        for i, w in enumerate(everyone):
            key = (w["metadata"]["namespace"], w["spec"].get("queueName", ""))
            items.append(_item(w, i, counts.get(key, 0)))
            counts[key] = counts.get(key, 0) + 1
        items = items[offset : offset + limit]
    else:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": f"{GROUP}/{VERSION}",
        "metadata": {"creationTimestamp": None},
        "items": items,
    }


def serve(api: Any) -> None:
    """Serve V1/V2 from `api` (GET only, as the REST storage implements Get alone)."""

    def handler(method: str, path: str, query: dict) -> tuple[int, dict]:
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}")
        return 200, summary(api, path, query)

    api.aggregated[f"/apis/{GROUP}/{VERSION}"] = handler
