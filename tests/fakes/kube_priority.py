"""The fake Kubernetes API server's Priority admission plugin, as kube-apiserver 1.36's.

It is on in every cluster kubeadm makes: it is not among the plugins kube-apiserver leaves
off by default (kubernetes pkg/kubeapiserver/options/plugins.go DefaultOffAdmissionPlugins).

Source: kubernetes/kubernetes plugin/pkg/admission/priority/admission.go (Admit, admitPod,
getDefaultPriorityClass, getDefaultPriority), pkg/apis/scheduling/types.go and helpers.go
(the system classes), pkg/registry/scheduling/rest/storage_scheduling.go (the post-start
hook that creates them) and pkg/apis/scheduling/v1/defaults.go (a class's preemptionPolicy
defaults to PreemptLowerPriority). The messages are upstream's words; our code.

A mutating plugin: it runs before the object's validation and the validating plugins
(PodSecurity, ValidatingAdmissionPolicy), which therefore see the priority it wrote.
Only pods, never their subresources:
- CREATE: a pod naming no class gets the lowest-valued `globalDefault` class's name,
  value and preemptionPolicy, or, with none, no name, priority 0 and PreemptLowerPriority.
  A pod naming a class gets that class's value and preemptionPolicy; a class that does not
  exist is 403 `pods "x" is forbidden: no PriorityClass with name <name> was found`. A
  pod that sets `spec.priority` itself to another value is 403 `... the integer value of
  priority (<its>) must not be provided in pod spec; priority admission controller
  computed <value> from the given PriorityClass name`, and the same for a
  `spec.preemptionPolicy` other than the class's (`the string value of PreemptionPolicy
  (<its>) ...`).
- UPDATE: a priority or preemptionPolicy the update leaves out is kept from the stored
  pod (API validation forbids changing them).
No namespace is checked: since Kubernetes 1.17 the system classes are no longer kept to
kube-system (kubernetes/kubernetes#60596, "Critical pods should not be limited to
kube-system namespace"; the plugin's priorityClassPermittedInNamespace is gone), so a pod
of any namespace may name `system-node-critical`. Upstream's way to limit who uses a class
is a ResourceQuota scoped to it with the ResourceQuota plugin's `limitedResources`
(kubernetes.io/docs/concepts/policy/resource-quotas, "Limit Priority Class consumption by
default"), a kube-apiserver flag our kubeadm configuration does not set.

The system classes are in every cluster (kube-apiserver creates them at start):
`system-node-critical` 2000001000 and `system-cluster-critical` 2000000000
(SystemCriticalPriority, twice HighestUserDefinablePriority 1000000000), so the fake
server stores them at start (`SYSTEM_PRIORITY_CLASSES`).

Not emulated: the validation of PriorityClasses themselves (the reserved `system-` prefix,
values above HighestUserDefinablePriority, one globalDefault), and the Workload
resource's priority (WorkloadAwarePreemption, alpha).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fakes.kube_auth import forbidden

SCHEDULING_GV = "scheduling.k8s.io/v1"
PRIORITY_CLASSES = "priorityclasses"
PREEMPT_LOWER = "PreemptLowerPriority"  # core/v1 PreemptLowerPriority, the default
HIGHEST_USER_DEFINABLE = 1_000_000_000
SYSTEM_CRITICAL = 2 * HIGHEST_USER_DEFINABLE
# helpers.go systemPriorityClasses: name -> (value, description)
SYSTEM_PRIORITY_CLASSES: dict[str, tuple[int, str]] = {
    "system-node-critical": (
        SYSTEM_CRITICAL + 1000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    "system-cluster-critical": (
        SYSTEM_CRITICAL,
        "Used for system critical pods that must run in the cluster, but can be moved to"
        " another node if necessary.",
    ),
}


def system_priority_classes() -> list[tuple[str, dict]]:
    """(path, object) of each class kube-apiserver creates at start."""
    return [
        (
            f"/apis/{SCHEDULING_GV}/{PRIORITY_CLASSES}/{name}",
            {
                "apiVersion": SCHEDULING_GV,
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": description,
                "preemptionPolicy": PREEMPT_LOWER,
            },
        )
        for name, (value, description) in SYSTEM_PRIORITY_CLASSES.items()
    ]


def _default(classes: Iterable[dict]) -> dict | None:
    """getDefaultPriorityClass: of the globalDefault classes, the one of lowest value."""
    found = [c for c in classes if c.get("globalDefault")]
    return min(found, key=lambda c: c.get("value", 0)) if found else None


def admit_pod(
    operation: str,
    pod: dict,
    old: dict | None,
    lookup: Callable[[str], dict | None],
    classes: Callable[[], Iterable[dict]],
) -> None:
    """The plugin's admitPod on `pod` (changed in place).

    `lookup(name)` is the PriorityClass of that name or None; `classes()` lists them all
    (for the global default).
    """
    spec = pod.setdefault("spec", {})
    if operation == "UPDATE":
        kept = (old or {}).get("spec") or {}
        for key in ("priority", "preemptionPolicy"):
            if spec.get(key) is None and kept.get(key) is not None:
                spec[key] = kept[key]
        return
    if operation != "CREATE":
        return
    name = (pod.get("metadata") or {}).get("name") or ""
    value, policy = _resolve(spec, name, lookup, classes)
    _computed(spec, name, "priority", value, "the integer value of priority")
    _computed(spec, name, "preemptionPolicy", policy, "the string value of PreemptionPolicy")


def _resolve(
    spec: dict,
    name: str,
    lookup: Callable[[str], dict | None],
    classes: Callable[[], Iterable[dict]],
) -> tuple[int, str]:
    """(value, preemptionPolicy) of the pod's class; names the default class in `spec`.

    A class without preemptionPolicy has PreemptLowerPriority (v1 SetDefaults_PriorityClass;
    the fake stores no defaults).
    """
    wanted = spec.get("priorityClassName") or ""
    if not wanted:
        found = _default(classes())
        if found is None:
            return 0, PREEMPT_LOWER
        spec["priorityClassName"] = found["metadata"]["name"]
    else:
        found = lookup(wanted)
        if found is None:
            raise forbidden("", "pods", name, f"no PriorityClass with name {wanted} was found")
    return found.get("value", 0), found.get("preemptionPolicy") or PREEMPT_LOWER


def _computed(spec: dict, name: str, key: str, value: int | str, what: str) -> None:
    """Set spec[key] to `value`, refusing a pod that gave another."""
    given = spec.get(key)
    if given is not None and given != value:
        raise forbidden(
            "",
            "pods",
            name,
            f"{what} ({given}) must not be provided in pod spec; priority admission"
            f" controller computed {value} from the given PriorityClass name",
        )
    spec[key] = value
