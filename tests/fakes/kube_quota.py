"""ResourceQuota object counts, as kube-apiserver admits them and the quota controller keeps them.

Only object counts are modelled: a ResourceQuota's `spec.hard` may name `count/<resource>`
(a core resource) or `count/<resource>.<group>` of any resource, and the older names
`configmaps`, `secrets`, `replicationcontrollers`, `resourcequotas`, `services`,
`persistentvolumeclaims` and `pods`. Compute and storage resources (`requests.cpu`,
`limits.memory`, `requests.storage`, ...), `scopes` and `scopeSelector` are not: a quota
naming one is answered 500 (`unmodelled`), so
no test relies on a check this fake does not make. Read in kubernetes (k8s.io/apiserver at
24a394e5, July 2026, and kubernetes/kubernetes stored commits near 1.36):

- what an object counts as (`counted_as`): `count/<resource>[.<group>]` for every resource
  (k8s.io/apiserver pkg/quota/v1/generic evaluator.go ObjectCountQuotaResourceNameFor), and
  the older names: configmaps, secrets, replicationcontrollers and resourcequotas
  (kubernetes pkg/quota/v1/evaluator/core/registry.go legacyObjectCountAliases), services
  (services.go) and persistentvolumeclaims (persistent_volume_claims.go); `pods` counts the
  pods not in a terminal phase, `count/pods` every pod stored (pods.go PodUsageFunc: "where
  'pods' tracks all pods that have not reached a terminal state, count/pods tracks all pods
  independent of state"). Events are never counted (pkg/quota/v1/install/registry.go
  ignoredResources: "events haven't been quota-ed before", both groups), nor the reviews and
  bindings listed there, nor anything cluster-scoped (pkg/admission/plugin/resourcequota/
  admission.go Validate ignores requests without a namespace).
- a Service's `services.loadbalancers` and `services.nodeports` (kubernetes
  pkg/quota/v1/evaluator/core/services.go Usage, stored commit 04791b49): a LoadBalancer
  uses one load balancer; a NodePort or LoadBalancer Service one node port per port (a
  LoadBalancer with `allocateLoadBalancerNodePorts: false` only its ports that name a
  nodePort); every other type none. The Service evaluator also handles an UPDATE ("a
  service type can change"): it is checked for what the update adds (controller.go
  CheckRequest: the new usage less the old).
- when (`admit`): at a CREATE of the main resource (generic objectCountEvaluator.Handles:
  no subresource, admission.Create; server-side apply that creates is a CREATE), after
  the other validating plugins (ValidatingAdmissionPolicy runs before it). Every quota of
  the namespace is checked (controller.go CheckRequest): when used + 1 passes hard for a
  name it tracks, the create is refused with admission.NewForbidden: 403 Forbidden
  `<plural>[.<group>] "<name>" is forbidden: exceeded quota: <quota>, requested:
  <name>=1, used: <name>=<used>, limited: <name>=<hard>` (names sorted, prettyPrint).
  Whoever asks: the cluster's admin and the controllers as much as a team.
- `status` (`status`): `hard` is `spec.hard`, `used` what is stored now, as kube-controller-
  manager's resource quota controller writes it (resource_quota_controller.go
  syncResourceQuota; a delete is seen at once by its monitors' replenishment, here the
  store itself), so deleting an object frees its count at once. The real controller takes
  a moment for a new quota: until then admission refuses the counted kinds ("status
  unknown for quota"); here the status is computed when the quota is stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fakes.kube_admission import go_quote

# kubernetes pkg/quota/v1/evaluator/core registry.go legacyObjectCountAliases, services.go,
# persistent_volume_claims.go: a core resource also counted under its plain name
LEGACY_NAMES = {
    "configmaps",
    "secrets",
    "replicationcontrollers",
    "resourcequotas",
    "services",
    "persistentvolumeclaims",
}
# pkg/quota/v1/install/registry.go ignoredResources: (group, resource) never counted
IGNORED = {
    ("", "events"),
    ("events.k8s.io", "events"),
    ("", "bindings"),
    ("", "componentstatuses"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
}
_TERMINAL = ("Succeeded", "Failed")
SERVICE_NAMES = {"services.loadbalancers", "services.nodeports"}


def count_name(group: str, resource: str) -> str:
    """`count/<resource>` (core), `count/<resource>.<group>` (ObjectCountQuotaResourceNameFor)."""
    return f"count/{resource}.{group}" if group else f"count/{resource}"


def usage(group: str, resource: str, obj: dict) -> dict[str, int]:
    """What one stored object of (group, resource) uses, by quota name."""
    if (group, resource) in IGNORED:
        return {}
    used = {count_name(group, resource): 1}
    if not group and resource in LEGACY_NAMES:
        used[resource] = 1
    if (group, resource) == ("", "pods") and (obj.get("status") or {}).get(
        "phase"
    ) not in _TERMINAL:
        used["pods"] = 1
    if (group, resource) == ("", "services"):
        used.update(_service_usage(obj.get("spec") or {}))
    return used


def _service_usage(spec: dict) -> dict[str, int]:
    """services.go Usage: load balancers and node ports of a Service's spec."""
    ports = spec.get("ports") or []
    kind = spec.get("type")
    if kind == "NodePort":
        return {"services.nodeports": len(ports)}
    if kind == "LoadBalancer":
        if spec.get("allocateLoadBalancerNodePorts") is False:
            nodeports = sum(1 for p in ports if p.get("nodePort"))
        else:
            nodeports = len(ports)
        return {"services.nodeports": nodeports, "services.loadbalancers": 1}
    return {}


def _modelled(name: str) -> bool:
    return name.startswith("count/") or name in {*LEGACY_NAMES, *SERVICE_NAMES, "pods"}


def unmodelled(quota: dict) -> str | None:
    """What of `quota` the fake does not model (then answered 500), or None."""
    spec = quota.get("spec") or {}
    if spec.get("scopes") or spec.get("scopeSelector"):
        return "scopes"
    for name, value in (spec.get("hard") or {}).items():
        if not _modelled(name):
            return name
        if not str(value).isdigit():
            return f"{name}={value} (only whole counts)"
    return None


def status(quota: dict, stored: Iterable[tuple[str, str, dict]]) -> dict[str, Any]:
    """`status` of `quota` from the objects `stored` in its namespace: (group, resource, obj)."""
    hard = {
        name: str(value) for name, value in ((quota.get("spec") or {}).get("hard") or {}).items()
    }
    used = dict.fromkeys(hard, 0)
    for group, resource, obj in stored:
        for name, n in usage(group, resource, obj).items():
            if name in used:
                used[name] += n
    return {"hard": hard, "used": {name: str(n) for name, n in used.items()}}


def admit(
    quotas: Iterable[dict],
    group: str,
    resource: str,
    name: str,
    obj: dict,
    old: dict | None = None,
) -> None:
    """Refuse the CREATE of `obj` (or an UPDATE from `old`) that would pass any quota's hard.

    `quotas`: the namespace's ResourceQuotas, with the status `status` computed. An update
    is checked for what it adds (the new usage less the old, where that is more). Raises
    the 403 of controller.go CheckRequest for the first quota (by name) it exceeds.
    """
    asked = usage(group, resource, obj)
    if old is not None:
        before = usage(group, resource, old)
        asked = {n: v - before.get(n, 0) for n, v in asked.items() if v > before.get(n, 0)}
    for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        state = quota.get("status") or {}
        hard, used = state.get("hard") or {}, state.get("used") or {}
        over = sorted(
            n for n in asked.keys() & hard.keys() if int(used.get(n, 0)) + asked[n] > int(hard[n])
        )
        if not over:
            continue
        from fakes.kube_apiserver import ApiError  # the server module imports this one

        def listed(values: dict) -> str:
            return ",".join(f"{n}={values[n]}" for n in over)

        requested = listed(asked)
        message = (
            f"exceeded quota: {quota['metadata']['name']}, requested: {requested},"
            f" used: {listed(used)}, limited: {listed(hard)}"
        )
        details = {"name": name, **({"group": group} if group else {}), "kind": resource}
        # apimachinery errors.go NewForbidden: the resource qualified by its group
        # (GroupResource.String: `jobs.batch`, `pods`)
        qualified = f"{resource}.{group}" if group else resource
        raise ApiError(
            403, "Forbidden", f"{qualified} {go_quote(name)} is forbidden: {message}", details
        )
