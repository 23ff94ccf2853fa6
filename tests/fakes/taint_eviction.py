"""kube-controller-manager's taint eviction controller, opt-in, over the fake API server.

The fake API server runs no controller, so a NoExecute taint on a Node changes nothing by
itself. `TaintEvictionController(api).tick()` does, over every Node and Pod stored, what
the taint eviction controller does (the "taint manager"; kubernetes.io/docs/concepts/
scheduling-eviction/taint-and-toleration "Taint based Evictions"). Tests that want it make
one and tick it beside the fake batch controllers (fakes/batch.py), on the same fake clock;
no other test sees it.

Source: kubernetes/kubernetes pkg/controller/tainteviction/taint_eviction.go, read at
stored commits 5ce22905 (the 1.33+ shape: the condition's observedGeneration) and 003e8629,
and a later stored revision (its `CalculatePodConditionObservedGeneration`, the
PodObservedGenerationTracking gate GA in 1.35, KEP-5067); timed_workers.go at 008b3652
(a tree whose CHANGELOG-1.36.md has v1.36.0). The v1.36.0 tag itself could not be read
(`fetch` refuses the 1.9 GB repository); every rule below is the same in all of them. A
newer master revision (not modelled) also skips a pod already terminating and deletes
with the pod's UID as a precondition. Toleration matching: k8s.io/api core/v1
toleration.go ToleratesTaint (staging, stored commit 19c6083b) and pkg/apis/core/v1/helper
GetMatchingTolerations. The rules, our code:
- T1 Only a Node's NoExecute taints count (getNoExecuteTaints). A Node is looked at when
  first seen and whenever its list of NoExecute taints changes (NodeUpdated); a Pod when
  first seen, when gone, and when its nodeName or tolerations change (PodUpdated): a
  change of anything else of it (its status, a deletionTimestamp) is not looked at.
  Node changes are handled before pod changes (worker: the node channel first).
- T2 A pod bound to a Node with NoExecute taints: each taint is matched by the first of
  the pod's tolerations that tolerates it (`tolerates`); a taint none tolerates and the
  pod is deleted at once. A finished pod is not spared (nothing checks the phase).
- T3 Every taint tolerated: the pod is deleted after the least `tolerationSeconds` of the
  tolerations matched (getMinTolerationTime; 0 or less: at once); when none of them has
  one, it stays for ever and a deletion scheduled for it is cancelled.
- T4 The scheduled deletion counts from when it was scheduled (the timed worker's
  CreatedAt): a later change of the taints or tolerations that leaves a finite time does
  not move it (processPodOnNode keeps work created before now).
- T5 A Node whose last NoExecute taint goes: every deletion scheduled for its pods is
  cancelled (handleNodeUpdate); a pod gone: its own (handlePodUpdate). A deletion that
  has fired is out of the queue: the same pod is deleted again only after a new change.
- T6 The deletion (deletePodHandler, addConditionAndDeletePod) reads the pod by name,
  sets the condition DisruptionTarget True, reason DeletionByTaintManager, message
  "Taint manager: deleting due to NoExecute taint", observedGeneration the pod's
  generation (pkg/api/v1/pod UpdatePodCondition: written only when it changed, its
  lastTransitionTime kept while the status stays True) through pods/status, the pod's
  UID as the patch's precondition (pkg/util/pod PatchPodStatus), then DELETEs it with
  empty DeleteOptions: the pod's own grace period. Both go through the fake API server's
  handler as any client's request would (validation, ValidatingAdmissionPolicies on the
  DELETE, `graceful_pods`: the pod then terminates and the fake kubelet of fakes/batch.py
  stops it), as the admin the emulated controllers write as (fakes/batch.py; the
  controller's own ServiceAccount, taint-eviction-controller, is not modelled). A pod
  already gone is left (upstream's GET fails and it gives up); a write the server
  refuses is recorded in `refused` and the pod left.
Not modelled: the Events (TaintManagerEviction "Marking for deletion Pod <ns>/<name>",
"Cancelling deletion of Pod <ns>/<name>"), metrics, retries, the node lifecycle
controller's own taints (node.kubernetes.io/not-ready, /unreachable).

kube-apiserver's DefaultTolerationSeconds admission plugin (on by default, not among
kube-apiserver's DefaultOffAdmissionPlugins) gives every pod created a toleration of
`node.kubernetes.io/not-ready:NoExecute` and of `/unreachable:NoExecute` for 300 s unless
it tolerates each already (plugin/pkg/admission/defaulttolerationseconds/admission.go,
stored commit aed80471). The fake API server does not: `default_tolerations` is that
mutation, for a test to add to `api.mutators` (pods created over HTTP); so is
`extended_resource_tolerations`, kube-apiserver's ExtendedResourceToleration plugin (the
control plane turns it on: a toleration of each extended resource a pod asks for,
plugin/pkg/admission/extendedresourcetoleration/admission.go, stored commit 143ac994).
Neither changes what the quarantine taint does: a pod that does not tolerate that taint
is deleted at once whatever else it tolerates (T2).

Time is `clock` (seconds; the API server's `clock` unless a test sets it), read once per
tick: a deletion whose time has come runs at the end of the tick that finds it due.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from fakes.kube_apiserver import stamp

NO_EXECUTE = "NoExecute"
DISRUPTION_TARGET = "DisruptionTarget"
REASON = "DeletionByTaintManager"
MESSAGE = "Taint manager: deleting due to NoExecute taint"
# DefaultTolerationSeconds: the taint keys (core/v1 well_known_taints.go TaintNodeNotReady,
# TaintNodeUnreachable) and the plugin's flags' defaults
NOT_READY, UNREACHABLE = "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300
# UpdatePodCondition: a condition is written again only when one of these changed
_COMPARED = (
    "status",
    "reason",
    "message",
    "lastProbeTime",
    "lastTransitionTime",
    "observedGeneration",
)
_INT64 = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, 64)'s syntax


def tolerates(toleration: dict, taint: dict) -> bool:
    """k8s.io/api core/v1 Toleration.ToleratesTaint.

    An empty effect matches every effect, an empty key every key; `Equal` (or no
    operator) compares the values, `Exists` matches any value, `Lt`/`Gt` compare them as
    integers (the taint's below, above the toleration's; either not an integer: no match),
    any other operator matches nothing.
    """
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    mine, theirs = toleration.get("value") or "", taint.get("value") or ""
    if operator == "Equal":
        return mine == theirs
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt") and _INT64.fullmatch(mine) and _INT64.fullmatch(theirs):
        return int(theirs) < int(mine) if operator == "Lt" else int(theirs) > int(mine)
    return False


def tolerated(tolerations: list[dict], taint: dict) -> bool:
    """Whether any of `tolerations` tolerates `taint` (the scheduler's, kubelet's check)."""
    return any(tolerates(t, taint) for t in tolerations)


def matching_tolerations(taints: list[dict], tolerations: list[dict]) -> list[dict] | None:
    """GetMatchingTolerations: each taint's first toleration that tolerates it, or None."""
    used = []
    for taint in taints:
        first = next((t for t in tolerations if tolerates(t, taint)), None)
        if first is None:
            return None
        used.append(first)
    return used


def least_toleration_seconds(used: list[dict]) -> float | None:
    """getMinTolerationTime: the least tolerationSeconds (0 for 0 or less); None: for ever."""
    if not used:
        return 0
    seconds = [t["tolerationSeconds"] for t in used if t.get("tolerationSeconds") is not None]
    if not seconds:
        return None
    return max(0, min(seconds))


def no_execute(node: dict) -> list[dict]:
    """The Node's NoExecute taints, in its order (getNoExecuteTaints)."""
    return [
        t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == NO_EXECUTE
    ]


def default_tolerations(obj: dict) -> None:
    """DefaultTolerationSeconds on a pod's CREATE: not-ready and unreachable for 300 s.

    Each is added unless a toleration already covers it: its key that taint's or empty,
    its effect NoExecute or empty (whatever its operator or seconds).
    """
    if obj.get("kind") != "Pod":
        return
    tolerations = obj.setdefault("spec", {}).setdefault("tolerations", [])
    for key in (NOT_READY, UNREACHABLE):
        if not any(
            (t.get("key") or "") in ("", key) and (t.get("effect") or "") in ("", NO_EXECUTE)
            for t in tolerations
        ):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": NO_EXECUTE,
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )


def _extended(resource: str) -> bool:
    """core/v1 helper IsExtendedResourceName: not native (no '/', or kubernetes.io/)."""
    native = "/" not in resource or "kubernetes.io/" in resource
    return not native and not resource.startswith("requests.")


def extended_resource_tolerations(obj: dict) -> None:
    """ExtendedResourceToleration on a pod's CREATE: `<resource>` Exists NoSchedule for each.

    Each extended resource a container or init container requests, in sorted order, added
    unless a toleration with the same key, operator, value and effect is there (helper
    AddOrUpdateTolerationInPod). Requests as the API server has defaulted them: a
    container's limits stand for the requests it leaves out (core/v1 SetDefaults_Pod).
    """
    if obj.get("kind") != "Pod":
        return
    spec = obj.setdefault("spec", {})
    asked = set()
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for name in {**(resources.get("limits") or {}), **(resources.get("requests") or {})}:
            if _extended(name):
                asked.add(name)
    if not asked:
        return
    tolerations = spec.setdefault("tolerations", [])
    for name in sorted(asked):
        added = {"key": name, "operator": "Exists", "effect": "NoSchedule"}
        if not any(
            all(t.get(f) == added.get(f) for f in ("key", "operator", "value", "effect"))
            for t in tolerations
        ):
            tolerations.append(added)


def _key(pod: dict) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


class TaintEvictionController:
    """The taint eviction controller over every Node and Pod of one fake API server."""

    def __init__(self, api: Any):
        self.api = api
        # seconds; the API server's clock (graceful deadlines, token expiry) unless set
        self.clock: Callable[[], float] = lambda: api.clock()
        self.refused: list[str] = []  # T6: writes the API server refused
        self._nodes: dict[str, list[dict]] = {}  # what each Node's NoExecute taints were
        self._tainted: dict[str, list[dict]] = {}  # taintedNodes: those with some
        self._pods: dict[str, tuple[str, str, list]] = {}  # key -> (uid, node, tolerations)
        self._work: dict[str, tuple[float, float]] = {}  # key -> (created, fires at)

    def scheduled(self) -> dict[str, float]:
        """The deletions waiting, by `<namespace>/<pod>`: when each fires."""
        return {key: fire for key, (_, fire) in self._work.items()}

    def tick(self) -> int:
        """Look at what changed since the last tick (T1), then delete what is due; how many."""
        now = self.clock()
        nodes = {n["metadata"]["name"]: n for n in self.api.objects("/api/v1/nodes/")}
        pods = {_key(p): p for p in self.api.objects("/api/v1/namespaces/", kind="Pod")}
        for name in sorted(self._nodes.keys() - nodes.keys()):  # deleted: forgotten
            del self._nodes[name]
            self._tainted.pop(name, None)
        for name, node in nodes.items():
            taints = no_execute(node)
            if self._nodes.get(name) != taints:  # first seen (None), or changed
                self._nodes[name] = taints
                self._node_changed(name, taints, pods, now)
        for key in sorted(self._pods.keys() - pods.keys()):
            del self._pods[key]
            self._work.pop(key, None)  # T5: a pod gone
        for key, pod in pods.items():
            seen = (
                pod["metadata"].get("uid", ""),
                pod["spec"].get("nodeName") or "",
                pod["spec"].get("tolerations") or [],
            )
            if self._pods.get(key) != seen:
                if key in self._pods and self._pods[key][0] != seen[0]:
                    self._work.pop(key, None)  # T5: deleted, then made again under the name
                self._pods[key] = seen
                taints = self._tainted.get(seen[1])
                if seen[1] and taints:
                    self._pod_on_node(key, seen[2], taints, now)
        due = sorted((fire, key) for key, (_, fire) in self._work.items() if fire <= now)
        for _, key in due:
            del self._work[key]
            self._delete(key)
        return len(due)

    def _node_changed(self, name: str, taints: list[dict], pods: dict, now: float) -> None:
        """handleNodeUpdate: remember the taints, then look at each pod bound to the node."""
        if taints:
            self._tainted[name] = taints
        else:
            self._tainted.pop(name, None)
        for key, pod in pods.items():
            if pod["spec"].get("nodeName") != name:
                continue
            if not taints:  # T5
                self._work.pop(key, None)
            else:
                self._pod_on_node(key, pod["spec"].get("tolerations") or [], taints, now)

    def _pod_on_node(self, key: str, tolerations: list, taints: list[dict], now: float) -> None:
        """processPodOnNode: delete now (T2), never (T3), or after the least tolerationSeconds."""
        used = matching_tolerations(taints, tolerations)
        if used is None:
            self._work[key] = (now, now)  # AddWork(now, now) after cancelling
            return
        seconds = least_toleration_seconds(used)
        if seconds is None:
            self._work.pop(key, None)
            return
        if key in self._work:
            created, _ = self._work[key]
            if created + seconds < now + seconds:
                return  # T4: scheduled before now, kept as it is
        self._work[key] = (now, now + seconds)

    def _request(self, method: str, path: str, body: dict, content_type: str) -> tuple:
        headers = {"Authorization": "Bearer admin-token", "Content-Type": content_type}
        return self.api.handle(method, path, headers, json.dumps(body).encode(), controller=True)

    def _delete(self, key: str) -> None:
        """T6: the DisruptionTarget condition where it changed, then a plain DELETE."""
        namespace, name = key.split("/", 1)
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        pod = self.api.get_object(path)
        if pod is None:
            return
        status = pod.get("status") or {}
        conditions = [dict(c) for c in status.get("conditions") or []]
        condition = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "observedGeneration": pod["metadata"].get("generation", 1),
            "reason": REASON,
            "message": MESSAGE,
            "lastTransitionTime": stamp(self.clock()),
        }
        old = next((c for c in conditions if c.get("type") == DISRUPTION_TARGET), None)
        if old is None:
            conditions.append(condition)
        else:
            if old.get("status") == "True":  # the status stays: so does its time
                condition.pop("lastTransitionTime")
                if old.get("lastTransitionTime"):
                    condition["lastTransitionTime"] = old["lastTransitionTime"]
            conditions[conditions.index(old)] = condition
        if old is None or any(old.get(f) != condition.get(f) for f in _COMPARED):
            patch = {
                "metadata": {"uid": pod["metadata"]["uid"]},
                "status": {"conditions": conditions},
            }
            answer = self._request(
                "PATCH", f"{path}/status", patch, "application/merge-patch+json"
            )
            if answer[0] != 200:
                self.refused.append(f"PATCH {path}/status: {answer[2]!r}")
                return
        answer = self._request("DELETE", path, {}, "application/json")
        if answer[0] != 200:
            self.refused.append(f"DELETE {path}: {answer[2]!r}")
