"""The enum checks kube-apiserver 1.36 makes on Jobs and pod specs, for the fake API server.

kubernetes-validate's 1.36 schemas carry no enums, so a Job with `completionMode: Indexd`
passed the schema; kube-apiserver's validation (the registry strategy's Validate) refuses
it with field.NotSupported: `spec.x: Unsupported value: "y": supported values: "a", "b"`
(apimachinery pkg/util/validation/field/errors.go NotSupported: each supported value
strconv-quoted, joined by ", ", in the order the caller gives; `sets.List` gives them
sorted). Sources, kubernetes/kubernetes (stored at 000f260 for core, 3989b18 for batch):

- pkg/apis/batch/validation/validation.go validateJobSpec, validatePodFailurePolicyRule,
  validatePodFailurePolicyRuleOnExitCodes/OnPodConditions, validatePodReplacementPolicy
  (`supportedPodFailurePolicyActions` and the others, listed with sets.List).
- pkg/apis/core/validation/validation.go ValidatePodSpec, validateContainerCommon
  (terminationMessagePolicy), validateContainerPorts (`supportedPortProtocols`),
  validatePullPolicy (`supportedPullPolicies`), validateRestartPolicy, validateDNSPolicy,
  validateFSGroupChangePolicy, validateSeccompProfileType, ValidateAppArmorProfileField,
  ValidateTolerations, validateTaintEffect, validateHTTPGetAction (`supportedHTTPSchemes`),
  validateHostPathType (`supportedHostPathTypes`, "" among them), validateMountPropagation
  (`supportedMountPropagations`; Bidirectional Forbidden outside a privileged container),
  ValidatePreemptionPolicy (a literal list: "PreemptLowerPriority", "Never"; the pod spec's
  and PriorityClass's, pkg/apis/scheduling/validation ValidatePriorityClass at path
  `preemptionPolicy`); ValidateService: validateServicePort (protocol),
  `supportedSessionAffinityType`, ValidateServiceClusterIPsRelatedFields
  (`supportedServiceIPFamily`, `supportedServiceIPFamilyPolicy`), `supportedServiceType`,
  validateServiceExternalTrafficPolicy (`validExternalTrafficPolicies` on an externally
  accessible Service, else Invalid "may only be set for externally-accessible services":
  pkg/api/service ExternallyAccessible), validateServiceInternalTrafficFieldsValue
  (`supportedServiceInternalTrafficPolicy`); ValidatePersistentVolumeSpec and
  ValidatePersistentVolumeClaimSpec (`supportedAccessModes`, each bad mode at
  `spec.accessModes` with no index; `supportedReclaimPolicy`; `supportedVolumeModes`; a
  claim's access modes and `spec.resources[storage]` Required, as the only required
  fields checked here);
  ValidateNodeSelectorRequirement (an operator outside In, NotIn, Exists, DoesNotExist, Gt,
  Lt is Invalid "not a valid selector operator", not NotSupported; and the values each
  operator takes).
- pkg/apis/apps/validation/validation.go ValidateDaemonSetUpdateStrategy and
  ValidateDeploymentStrategy: NotSupported at `spec.updateStrategy` / `spec.strategy` with
  the whole strategy as the bad value (the internal struct, no json tags: encoding/json
  prints `{"Type":"X","RollingUpdate":null}`), values in the literal order.
- pkg/apis/networking/validation/validation.go ValidateNetworkPolicySpec: each ingress
  and egress rule's ports (ValidateNetworkPolicyPort: protocol, the literal "TCP", "UDP",
  "SCTP") and peers (ValidateNetworkPolicyPeer, ValidateIPBlock at 019c5dc), then
  policyTypes (more than two: Invalid "may not specify more than two policyTypes"; each
  not Ingress or Egress: NotSupported, the literal order).

Only values the object carries are checked: the server defaults an absent or empty
restartPolicy, dnsPolicy, imagePullPolicy, terminationMessagePolicy, protocol or scheme,
a Service's type, sessionAffinity, internalTrafficPolicy, ipFamilyPolicy and (externally
accessible) externalTrafficPolicy, a DaemonSet's or Deployment's strategy type before
validating (pkg/apis/core/v1/defaults.go, pkg/apis/apps/v1/defaults.go, the Service
REST storage's IP family defaulting), and the fake does not default. The one
exception is a Job template's restartPolicy: defaulted to Always, which validateJobSpec
refuses (Required, "valid values: "OnFailure", "Never""). Each check is a dict lookup.

`seed_status_error` is no API server check: a Pod's status.phase that a seed or a fake
controller writes is one of core/v1 PodPhase's (what a kubelet writes), see its docstring.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from fakes import kube_services
from fakes.kube_admission import FieldError, GoText, go_quote


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(go_quote(v) for v in values)


def _unsupported(path: str, value: str, supported: tuple[str, ...]) -> FieldError:
    return FieldError("Unsupported value", path, value, "supported values: " + _quoted(supported))


# Each tuple in the order kube-apiserver prints it (sets.List sorts).
RESTART_POLICY = ("Always", "OnFailure", "Never")  # validateRestartPolicy's literal list
DNS_POLICY = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
PULL_POLICY = ("Always", "IfNotPresent", "Never")  # sets.List(supportedPullPolicies)
PROTOCOL = ("SCTP", "TCP", "UDP")  # sets.List(supportedPortProtocols)
TERMINATION_MESSAGE_POLICY = ("File", "FallbackToLogsOnError")
HTTP_SCHEME = ("HTTP", "HTTPS")  # sets.List(supportedHTTPSchemes)
PROFILE_TYPE = ("Localhost", "RuntimeDefault", "Unconfined")  # seccomp and AppArmor alike
FS_GROUP_CHANGE_POLICY = ("Always", "OnRootMismatch")  # sets.List(validFSGroupChangePolicies)
TOLERATION_OPERATOR = ("Equal", "Exists")
TAINT_EFFECT = ("NoSchedule", "PreferNoSchedule", "NoExecute")
COMPLETION_MODE = ("NonIndexed", "Indexed")
POD_FAILURE_ACTION = ("Count", "FailIndex", "FailJob", "Ignore")
EXIT_CODES_OPERATOR = ("In", "NotIn")
CONDITION_STATUS = ("False", "True", "Unknown")
POD_REPLACEMENT_POLICY = ("Failed", "TerminatingOrFailed")
JOB_RESTART_POLICY = ("OnFailure", "Never")  # validateJobSpec: a Job's pods never Always
# sets.List(supportedHostPathTypes): HostPathUnset ("") sorts first
HOST_PATH_TYPE = (
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
)
MOUNT_PROPAGATION = ("Bidirectional", "HostToContainer", "None")
PREEMPTION_POLICY = ("PreemptLowerPriority", "Never")  # ValidatePreemptionPolicy's literal list
SERVICE_TYPE = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
SESSION_AFFINITY = ("ClientIP", "None")
TRAFFIC_POLICY = ("Cluster", "Local")  # external and internal alike, sets.List
IP_FAMILY = ("IPv4", "IPv6")
IP_FAMILY_POLICY = ("PreferDualStack", "RequireDualStack", "SingleStack")
VOLUME_MODE = ("Block", "Filesystem")
ACCESS_MODE = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
RECLAIM_POLICY = ("Delete", "Recycle", "Retain")  # core's set (storage's has no Recycle)
NODE_SELECTOR_OPERATOR = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
POLICY_PORT_PROTOCOL = ("TCP", "UDP", "SCTP")  # ValidateNetworkPolicyPort's literal list
DAEMONSET_STRATEGY = ("RollingUpdate", "OnDelete")  # ValidateDaemonSetUpdateStrategy's literal
DEPLOYMENT_STRATEGY = ("Recreate", "RollingUpdate")  # ValidateDeploymentStrategy's literal
POLICY_TYPE = ("Ingress", "Egress")  # ValidateNetworkPolicySpec's literal list
# k8s.io/api core/v1 types.go PodPhase's constants, in their order ("Unknown": "It isn't
# being set since 2015"): the only phases a kubelet writes (pkg/kubelet/kubelet_pods.go
# getPhase). Not an API server check: see `seed_status_error`.
POD_PHASE = ("Pending", "Running", "Succeeded", "Failed", "Unknown")

_SETS = {
    t: frozenset(t)
    for t in (
        RESTART_POLICY,
        DNS_POLICY,
        PULL_POLICY,
        PROTOCOL,
        TERMINATION_MESSAGE_POLICY,
        HTTP_SCHEME,
        PROFILE_TYPE,
        FS_GROUP_CHANGE_POLICY,
        TOLERATION_OPERATOR,
        TAINT_EFFECT,
        COMPLETION_MODE,
        POD_FAILURE_ACTION,
        EXIT_CODES_OPERATOR,
        CONDITION_STATUS,
        POD_REPLACEMENT_POLICY,
        JOB_RESTART_POLICY,
        HOST_PATH_TYPE,
        MOUNT_PROPAGATION,
        PREEMPTION_POLICY,
        SERVICE_TYPE,
        SESSION_AFFINITY,
        TRAFFIC_POLICY,
        IP_FAMILY,
        IP_FAMILY_POLICY,
        VOLUME_MODE,
        ACCESS_MODE,
        RECLAIM_POLICY,
        NODE_SELECTOR_OPERATOR,
        POLICY_PORT_PROTOCOL,
        DAEMONSET_STRATEGY,
        DEPLOYMENT_STRATEGY,
        POLICY_TYPE,
        POD_PHASE,
    )
}


def _check(errors: list[FieldError], obj: Any, key: str, path: str, supported: tuple) -> None:
    """A present, non-empty string value outside `supported` (other types: the decoder's)."""
    if not isinstance(obj, dict):
        return
    value = obj.get(key)
    if isinstance(value, str) and value and value not in _SETS[supported]:
        errors.append(_unsupported(f"{path}.{key}", value, supported))


def _dicts(value: Any) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _profiles(errors: list[FieldError], sc: Any, path: str) -> None:
    if not isinstance(sc, dict):
        return
    _check(errors, sc.get("seccompProfile"), "type", f"{path}.seccompProfile", PROFILE_TYPE)
    _check(errors, sc.get("appArmorProfile"), "type", f"{path}.appArmorProfile", PROFILE_TYPE)


def _mount_propagation(errors: list[FieldError], c: dict, path: str) -> None:
    """The check of validateMountPropagation on each of the container's volumeMounts."""
    sc = c.get("securityContext")
    privileged = isinstance(sc, dict) and sc.get("privileged") is True
    for j, mount in enumerate(_dicts(c.get("volumeMounts"))):
        where = f"{path}.volumeMounts[{j}]"
        _check(errors, mount, "mountPropagation", where, MOUNT_PROPAGATION)
        if mount.get("mountPropagation") == "Bidirectional" and not privileged:
            detail = "Bidirectional mount propagation is available only to privileged containers"
            errors.append(FieldError("Forbidden", f"{where}.mountPropagation", "", detail))


def _container(errors: list[FieldError], c: dict, path: str) -> None:
    """ValidateContainerCommon's order, then the probes (validateContainers)."""
    _check(errors, c, "terminationMessagePolicy", path, TERMINATION_MESSAGE_POLICY)
    for j, port in enumerate(_dicts(c.get("ports"))):
        _check(errors, port, "protocol", f"{path}.ports[{j}]", PROTOCOL)
    _mount_propagation(errors, c, path)
    _check(errors, c, "imagePullPolicy", path, PULL_POLICY)
    _profiles(errors, c.get("securityContext"), f"{path}.securityContext")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        handler = c.get(probe)
        if isinstance(handler, dict):
            where = f"{path}.{probe}.httpGet"
            _check(errors, handler.get("httpGet"), "scheme", where, HTTP_SCHEME)


def _requirement_error(rq: dict, path: str) -> FieldError | None:
    """ValidateNodeSelectorRequirement's switch on the operator (and its values' count)."""
    op, values = rq.get("operator"), rq.get("values") or []
    if op in ("In", "NotIn") and not values:
        detail = "must be specified when `operator` is 'In' or 'NotIn'"
        return FieldError("Required value", f"{path}.values", "", detail)
    if op in ("Exists", "DoesNotExist") and values:
        detail = "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
        return FieldError("Forbidden", f"{path}.values", "", detail)
    if op in ("Gt", "Lt") and len(values) != 1:
        detail = "must be specified single value when `operator` is 'Lt' or 'Gt'"
        return FieldError("Required value", f"{path}.values", "", detail)
    if isinstance(op, str) and op not in _SETS[NODE_SELECTOR_OPERATOR]:
        return FieldError("Invalid value", f"{path}.operator", op, "not a valid selector operator")
    return None


def _selector_terms(errors: list[FieldError], terms: list[tuple[Any, str]]) -> None:
    """ValidateNodeSelectorRequirement on each term's matchExpressions."""
    for term, path in terms:
        if not isinstance(term, dict):
            continue
        for j, rq in enumerate(_dicts(term.get("matchExpressions"))):
            error = _requirement_error(rq, f"{path}.matchExpressions[{j}]")
            if error is not None:
                errors.append(error)


def _node_affinity(errors: list[FieldError], affinity: Any, path: str) -> None:
    """ValidateNodeSelector (required) and ValidatePreferredSchedulingTerms (validateAffinity)."""
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    if not isinstance(node, dict):
        return
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, dict):
        where = f"{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        terms = required.get("nodeSelectorTerms")
        _selector_terms(errors, [(t, f"{where}[{i}]") for i, t in enumerate(_dicts(terms))])
    where = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    preferred = _dicts(node.get("preferredDuringSchedulingIgnoredDuringExecution"))
    _selector_terms(
        errors,
        [(t.get("preference"), f"{where}[{i}].preference") for i, t in enumerate(preferred)],
    )


def pod_spec_errors(spec: Any, path: str) -> list[FieldError]:
    """ValidatePodSpec's enum checks on `spec` at `path` (`spec`, `spec.template.spec`)."""
    errors: list[FieldError] = []
    if not isinstance(spec, dict):
        return errors
    for i, volume in enumerate(_dicts(spec.get("volumes"))):  # ValidateVolumes comes first
        where = f"{path}.volumes[{i}].hostPath"
        _check(errors, volume.get("hostPath"), "type", where, HOST_PATH_TYPE)
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for i, c in enumerate(_dicts(spec.get(kind))):
            _container(errors, c, f"{path}.{kind}[{i}]")
    _check(errors, spec, "restartPolicy", path, RESTART_POLICY)
    _check(errors, spec, "dnsPolicy", path, DNS_POLICY)
    sc = spec.get("securityContext")
    if isinstance(sc, dict):
        where = f"{path}.securityContext"
        _check(errors, sc, "fsGroupChangePolicy", where, FS_GROUP_CHANGE_POLICY)
        _profiles(errors, sc, where)
    for i, t in enumerate(_dicts(spec.get("tolerations"))):
        where = f"{path}.tolerations[{i}]"
        _check(errors, t, "operator", where, TOLERATION_OPERATOR)
        _check(errors, t, "effect", where, TAINT_EFFECT)
    _node_affinity(errors, spec.get("affinity"), f"{path}.affinity.nodeAffinity")
    _check(errors, spec, "preemptionPolicy", path, PREEMPTION_POLICY)
    return errors


def _failure_rules(errors: list[FieldError], spec: dict, path: str) -> None:
    policy = spec.get("podFailurePolicy")
    if not isinstance(policy, dict):
        return
    for i, rule in enumerate(_dicts(policy.get("rules"))):
        where = f"{path}.podFailurePolicy.rules[{i}]"
        if rule.get("action") == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            detail = "requires the backoffLimitPerIndex to be set"
            errors.append(FieldError("Invalid value", f"{where}.action", "FailIndex", detail))
        else:
            _check(errors, rule, "action", where, POD_FAILURE_ACTION)
        _check(
            errors,
            rule.get("onExitCodes"),
            "operator",
            f"{where}.onExitCodes",
            EXIT_CODES_OPERATOR,
        )
        for j, pattern in enumerate(_dicts(rule.get("onPodConditions"))):
            _check(errors, pattern, "status", f"{where}.onPodConditions[{j}]", CONDITION_STATUS)


def job_spec_errors(spec: Any, path: str = "spec") -> list[FieldError]:
    """ValidateJobSpec's enum checks, its pod template's included, in its order."""
    errors: list[FieldError] = []
    if not isinstance(spec, dict):
        return errors
    _check(errors, spec, "completionMode", path, COMPLETION_MODE)
    _failure_rules(errors, spec, path)
    replacement = spec.get("podReplacementPolicy")
    if isinstance(replacement, str) and spec.get("podFailurePolicy") is not None:
        if replacement != "Failed":
            errors.append(_unsupported(f"{path}.podReplacementPolicy", replacement, ("Failed",)))
    else:
        _check(errors, spec, "podReplacementPolicy", path, POD_REPLACEMENT_POLICY)
    template = spec.get("template")
    pod = template.get("spec") if isinstance(template, dict) else None
    errors += pod_spec_errors(pod, f"{path}.template.spec")
    restart = pod.get("restartPolicy", "") if isinstance(pod, dict) else ""
    where = f"{path}.template.spec.restartPolicy"
    if restart in ("Always", ""):
        errors.append(
            FieldError("Required value", where, "", "valid values: " + _quoted(JOB_RESTART_POLICY))
        )
    elif isinstance(restart, str) and restart not in _SETS[JOB_RESTART_POLICY]:
        errors.append(_unsupported(where, restart, JOB_RESTART_POLICY))
    elif spec.get("podFailurePolicy") is not None and restart != "Never":
        detail = 'only "Never" is supported when podFailurePolicy is specified'
        errors.append(FieldError("Invalid value", where, restart, detail))
    return errors


_POD_TEMPLATE_KINDS = frozenset(
    {
        ("apps/v1", "Deployment"),
        ("apps/v1", "DaemonSet"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "ReplicaSet"),
        ("v1", "ReplicationController"),
    }
)

_EXTERNALLY_ACCESSIBLE = frozenset({"LoadBalancer", "NodePort"})


def service_errors(spec: dict, annotations: Any = None) -> list[FieldError]:
    """ValidateService's enum checks, in its order (the defaulted fields only when given).

    `annotations`: the Service's, for the source-ranges annotation (kube_services).
    """
    errors: list[FieldError] = []
    for i, port in enumerate(_dicts(spec.get("ports"))):  # validateServicePort
        _check(errors, port, "protocol", f"spec.ports[{i}]", PROTOCOL)
    _check(errors, spec, "sessionAffinity", "spec", SESSION_AFFINITY)
    families = spec.get("ipFamilies")
    for i, family in enumerate(families if isinstance(families, list) else []):
        if isinstance(family, str) and family not in _SETS[IP_FAMILY]:
            errors.append(_unsupported(f"spec.ipFamilies[{i}]", family, IP_FAMILY))
    _check(errors, spec, "ipFamilyPolicy", "spec", IP_FAMILY_POLICY)
    _check(errors, spec, "type", "spec", SERVICE_TYPE)
    # pkg/api/service ExternallyAccessible: LoadBalancer, NodePort, or ClusterIP with externalIPs
    kind = spec.get("type") or "ClusterIP"
    accessible = kind in _EXTERNALLY_ACCESSIBLE or (
        kind == "ClusterIP" and bool(spec.get("externalIPs"))
    )
    external = spec.get("externalTrafficPolicy")
    if isinstance(external, str) and external and not accessible:
        detail = "may only be set for externally-accessible services"
        errors.append(FieldError("Invalid value", "spec.externalTrafficPolicy", external, detail))
    else:
        _check(errors, spec, "externalTrafficPolicy", "spec", TRAFFIC_POLICY)
    _check(errors, spec, "internalTrafficPolicy", "spec", TRAFFIC_POLICY)
    return errors + kube_services.type_errors(spec, annotations)


def _int_or_string(value: Any) -> str:
    """intstr.IntOrString's MarshalJSON; the zero value (absent) is the int 0."""
    return go_quote(value) if isinstance(value, str) else str(value if value is not None else 0)


def _strategy_errors(spec: dict, key: str, supported: tuple) -> list[FieldError]:
    """Validate{DaemonSetUpdate,Deployment}Strategy: the whole internal struct is the bad value.

    The internal apps types carry no json tags: encoding/json writes the Go field names in
    declaration order (Type, RollingUpdate; MaxUnavailable, MaxSurge).
    """
    strategy = spec.get(key)
    if not isinstance(strategy, dict):
        return []
    kind = strategy.get("type")
    if not isinstance(kind, str) or not kind or kind in _SETS[supported]:
        return []
    rolling = strategy.get("rollingUpdate")
    if isinstance(rolling, dict):
        unavailable = _int_or_string(rolling.get("maxUnavailable"))
        surge = _int_or_string(rolling.get("maxSurge"))
        inner = f'{{"MaxUnavailable":{unavailable},"MaxSurge":{surge}}}'
    else:
        inner = "null"
    value = GoText(f'{{"Type":{go_quote(kind)},"RollingUpdate":{inner}}}')
    return [
        FieldError(
            "Unsupported value", f"spec.{key}", value, "supported values: " + _quoted(supported)
        )
    ]


def network_policy_errors(spec: dict) -> list[FieldError]:
    """ValidateNetworkPolicySpec: each rule's ports' protocol and its peers, then policyTypes."""
    errors: list[FieldError] = []
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(_dicts(spec.get(direction))):
            for j, port in enumerate(_dicts(rule.get("ports"))):
                where = f"spec.{direction}[{i}].ports[{j}]"
                _check(errors, port, "protocol", where, POLICY_PORT_PROTOCOL)
            for j, peer in enumerate(_dicts(rule.get(peers))):
                errors += _peer_errors(peer, f"spec.{direction}[{i}].{peers}[{j}]")
    types = spec.get("policyTypes")
    if not isinstance(types, list):
        return errors
    if len(types) > len(POLICY_TYPE):
        detail = "may not specify more than two policyTypes"
        return [*errors, FieldError("Invalid value", "spec.policyTypes", types, detail)]
    return errors + [
        _unsupported(f"spec.policyTypes[{i}]", t, POLICY_TYPE)
        for i, t in enumerate(types)
        if isinstance(t, str) and t not in _SETS[POLICY_TYPE]
    ]


def _peer_errors(peer: dict, where: str) -> list[FieldError]:
    """ValidateNetworkPolicyPeer: one peer at least, an ipBlock alone, and ValidateIPBlock.

    ValidateIPBlock: `cidr` required and a CIDR (apivalidation parseCIDR's first check,
    netutils.ParseCIDRSloppy; its strict-form checks are not modelled), each `except` a
    CIDR and a strict subset of `cidr` (inside it, with a longer prefix).
    """
    errors: list[FieldError] = []
    block = peer.get("ipBlock")
    if isinstance(block, dict):
        errors += _ip_block_errors(block, f"{where}.ipBlock")
    named = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if peer.get(k) is not None]
    if not named:
        errors.append(FieldError("Required value", where, "", "must specify a peer"))
    elif len(named) > 1 and "ipBlock" in named:
        detail = "may not specify both ipBlock and another peer"
        errors.append(FieldError("Forbidden", where, "", detail))
    return errors


def _ip_block_errors(block: dict, where: str) -> list[FieldError]:
    cidr = block.get("cidr")
    if not cidr:
        return [FieldError("Required value", f"{where}.cidr", "", "")]
    network = _cidr(cidr)
    if network is None:
        return [FieldError("Invalid value", f"{where}.cidr", cidr, _NOT_A_CIDR)]
    errors = []
    for i, value in enumerate(block.get("except") or []):
        path = f"{where}.except[{i}]"
        inner = _cidr(value)
        if inner is None:
            errors.append(FieldError("Invalid value", path, value, _NOT_A_CIDR))
        elif (
            inner.version != network.version
            or inner.network_address not in network
            or network.prefixlen >= inner.prefixlen
        ):
            detail = "must be a strict subset of `cidr`"
            errors.append(FieldError("Invalid value", path, value, detail))
    return errors


_NOT_A_CIDR = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"


def _cidr(value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(value, strict=False) if isinstance(value, str) else None
    except ValueError:
        return None


def _priority_class_errors(obj: dict) -> list[FieldError]:
    """ValidatePriorityClass: the top-level preemptionPolicy, at path `preemptionPolicy`."""
    value = obj.get("preemptionPolicy")
    if isinstance(value, str) and value and value not in _SETS[PREEMPTION_POLICY]:
        return [_unsupported("preemptionPolicy", value, PREEMPTION_POLICY)]
    return []


def _access_modes(errors: list[FieldError], spec: dict) -> None:
    """Each unsupported access mode, at `spec.accessModes` (no index, as upstream)."""
    modes = spec.get("accessModes")
    for mode in modes if isinstance(modes, list) else []:
        if isinstance(mode, str) and mode not in _SETS[ACCESS_MODE]:
            errors.append(_unsupported("spec.accessModes", mode, ACCESS_MODE))


def _claim_errors(spec: dict) -> list[FieldError]:
    """ValidatePersistentVolumeClaimSpec's accessModes, storage request and volumeMode.

    In its order: at least one access mode (Required), the unsupported ones, then
    `spec.resources.requests.storage`, required on create and update alike
    (ValidatePersistentVolumeClaimUpdate validates the whole claim again):
    `fldPath.Child("resources").Key("storage")`, so the path reads
    `spec.resources[storage]` (the internal type's, not the JSON's `requests`). Its value's
    own checks (positive, a whole number of bytes) are not made here.
    """
    errors: list[FieldError] = []
    if not spec.get("accessModes"):
        detail = "at least 1 access mode is required"
        errors.append(FieldError("Required value", "spec.accessModes", "", detail))
    _access_modes(errors, spec)
    resources = spec.get("resources")
    requests = resources.get("requests") if isinstance(resources, dict) else None
    if not isinstance(requests, dict) or "storage" not in requests:
        errors.append(FieldError("Required value", "spec.resources[storage]"))
    _check(errors, spec, "volumeMode", "spec", VOLUME_MODE)
    return errors


def _volume_errors(spec: dict) -> list[FieldError]:
    """ValidatePersistentVolumeSpec's accessModes, reclaim policy and volumeMode."""
    errors: list[FieldError] = []
    _access_modes(errors, spec)
    _check(errors, spec, "persistentVolumeReclaimPolicy", "spec", RECLAIM_POLICY)
    _check(errors, spec, "volumeMode", "spec", VOLUME_MODE)
    return errors


def _cron_job_errors(spec: dict) -> list[FieldError]:
    """ValidateCronJobSpec's validateJobTemplateSpec."""
    template = spec.get("jobTemplate")
    inner = template.get("spec") if isinstance(template, dict) else None
    return job_spec_errors(inner, "spec.jobTemplate.spec") if isinstance(inner, dict) else []


def _template_errors(kind: str, spec: dict) -> list[FieldError]:
    """ValidatePodTemplateSpec, with the DaemonSet's or Deployment's strategy in its order."""
    template = spec.get("template")
    pod = template.get("spec") if isinstance(template, dict) else None
    errors = pod_spec_errors(pod, "spec.template.spec")
    # Validate{DaemonSet,Deployment}Spec: the template, then the strategy
    if kind == "DaemonSet":
        errors += _strategy_errors(spec, "updateStrategy", DAEMONSET_STRATEGY)
    elif kind == "Deployment":
        errors += _strategy_errors(spec, "strategy", DEPLOYMENT_STRATEGY)
    return errors


_SPEC_CHECKS = {
    ("v1", "Pod"): lambda spec: pod_spec_errors(spec, "spec"),
    ("batch/v1", "Job"): job_spec_errors,
    ("batch/v1", "CronJob"): _cron_job_errors,
    ("v1", "PersistentVolumeClaim"): _claim_errors,
    ("v1", "PersistentVolume"): _volume_errors,
    ("networking.k8s.io/v1", "NetworkPolicy"): network_policy_errors,
}


def enum_errors(api_version: str, kind: str, obj: dict) -> list[FieldError]:
    """The enum errors of a built-in object as kube-apiserver validates it (create/update)."""
    if (api_version, kind) == ("scheduling.k8s.io/v1", "PriorityClass"):
        return _priority_class_errors(obj)
    spec = obj.get("spec")
    if spec is None and (api_version, kind) == ("v1", "PersistentVolumeClaim"):
        spec = {}  # a struct, not a pointer: its required fields are checked all the same
    if not isinstance(spec, dict):
        return []
    if (api_version, kind) == ("v1", "Service"):
        meta = obj.get("metadata")
        return service_errors(spec, meta.get("annotations") if isinstance(meta, dict) else None)
    check = _SPEC_CHECKS.get((api_version, kind))
    if check is not None:
        return check(spec)
    if (api_version, kind) in _POD_TEMPLATE_KINDS:
        return _template_errors(kind, spec)
    return []


def seed_status_error(api_version: str, kind: str, obj: dict) -> str | None:
    """Why a seeded Pod's status.phase is none a cluster holds, or None.

    kube-apiserver 1.36 stores any phase a client writes: ValidatePodStatusUpdate
    (pkg/apis/core/validation/validation.go, 000f260) checks conditions, IPs and container
    state transitions, not the phase, and a create resets the status to Pending (the pod
    strategy's PrepareForCreate). So a stored phase is the kubelet's, one of POD_PHASE; a
    test's seed or a fake controller (which writes through `put_object`) writing another
    sets up a world no cluster holds. This is the fake's refusal (a ValueError from
    `put_object`), never an answer of the HTTP write path, which stores it as upstream does.
    """
    if (api_version, kind) != ("v1", "Pod"):
        return None
    status = obj.get("status")
    phase = status.get("phase") if isinstance(status, dict) else None
    if not isinstance(phase, str) or not phase or phase in _SETS[POD_PHASE]:
        return None
    name = (obj.get("metadata") or {}).get("name", "")
    return (
        f"Pod {go_quote(name)}: status.phase {go_quote(phase)} is none a kubelet writes"
        f" (core/v1 PodPhase: {_quoted(POD_PHASE)})"
    )
