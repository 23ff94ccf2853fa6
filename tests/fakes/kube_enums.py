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
  ValidateTolerations, validateTaintEffect, validateHTTPGetAction (`supportedHTTPSchemes`).

Only values the object carries are checked: the server defaults an absent or empty
restartPolicy, dnsPolicy, imagePullPolicy, terminationMessagePolicy, protocol or scheme
before validating (pkg/apis/core/v1/defaults.go), and the fake does not default. The one
exception is a Job template's restartPolicy: defaulted to Always, which validateJobSpec
refuses (Required, "valid values: "OnFailure", "Never""). Each check is a dict lookup.
"""

from __future__ import annotations

from typing import Any

from fakes.kube_admission import FieldError, go_quote


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


def _container(errors: list[FieldError], c: dict, path: str) -> None:
    """ValidateContainerCommon's order, then the probes (validateContainers)."""
    _check(errors, c, "terminationMessagePolicy", path, TERMINATION_MESSAGE_POLICY)
    for j, port in enumerate(_dicts(c.get("ports"))):
        _check(errors, port, "protocol", f"{path}.ports[{j}]", PROTOCOL)
    _check(errors, c, "imagePullPolicy", path, PULL_POLICY)
    _profiles(errors, c.get("securityContext"), f"{path}.securityContext")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        handler = c.get(probe)
        if isinstance(handler, dict):
            where = f"{path}.{probe}.httpGet"
            _check(errors, handler.get("httpGet"), "scheme", where, HTTP_SCHEME)


def pod_spec_errors(spec: Any, path: str) -> list[FieldError]:
    """ValidatePodSpec's enum checks on `spec` at `path` (`spec`, `spec.template.spec`)."""
    errors: list[FieldError] = []
    if not isinstance(spec, dict):
        return errors
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


def enum_errors(api_version: str, kind: str, obj: dict) -> list[FieldError]:
    """The enum errors of a built-in object as kube-apiserver validates it (create/update)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    if (api_version, kind) == ("v1", "Pod"):
        return pod_spec_errors(spec, "spec")
    if (api_version, kind) == ("batch/v1", "Job"):
        return job_spec_errors(spec)
    if (api_version, kind) == ("batch/v1", "CronJob"):  # validateJobTemplateSpec
        template = spec.get("jobTemplate")
        inner = template.get("spec") if isinstance(template, dict) else None
        return job_spec_errors(inner, "spec.jobTemplate.spec") if isinstance(inner, dict) else []
    if (api_version, kind) in _POD_TEMPLATE_KINDS:  # ValidatePodTemplateSpec
        template = spec.get("template")
        pod = template.get("spec") if isinstance(template, dict) else None
        return pod_spec_errors(pod, "spec.template.spec")
    return []
