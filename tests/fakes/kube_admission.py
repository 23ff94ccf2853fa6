r"""What kube-apiserver 1.36 refuses on write, for the fake API server (`kube_apiserver.py`).

The fake calls `Admission` on every create, update, patch and server-side apply that comes
over HTTP (never for `put_object`, which stands for what the cluster's own components
store), in the real server's order: decoding the body, then the object's validation, then
the validating admission plugins: PodSecurity, DenyServiceExternalIPs (which our kubeadm
configuration enables; `deny_service_external_ips`) and ValidatingAdmissionPolicy
(`ValidatingAdmissionPolicies`, its CEL evaluated by cel-python as cel-go would).
NodeRestriction is kube_noderestriction.py; ExtendedResourceToleration (a mutating plugin
our kubeadm configuration enables) and DefaultTolerationSeconds are not run by default:
taint_eviction.py has each as a mutation a test may add to the server's `mutators`.

Decoding (k8s.io/apiserver pkg/endpoints/handlers create.go, update.go, patch.go, rest.go;
apimachinery pkg/apis/meta/v1/validation ValidateFieldValidation):
- `fieldValidation` is `Strict`, `Warn` (the default when absent) or `Ignore`; anything else
  is 422 `CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value`.
  kubectl sends `Strict` (its `--validate=true` default); the Python client sends nothing.
- A built-in kind's body is decoded into its Go type: a value of the wrong JSON type is 400
  `<Kind> in version "<v>" cannot be handled as a <Kind>: json: cannot unmarshal string into
  Go struct field DeploymentSpec.spec.replicas of type int32` (the first one, in document
  order: sigs.k8s.io/json). Unknown fields are dropped; `Strict` refuses them with 400
  `... strict decoding error: unknown field "spec.x", unknown field "..."`, `Warn` answers
  a `Warning: 299 - "unknown field \\"spec.x\\""` header per field (apiserver
  pkg/endpoints/filters/warning.go, apimachinery pkg/util/net/http.go NewWarningHeader).
- A merge patch is applied first, then the result decoded; its errors are 422 with an empty
  kind, ` "" is invalid: patch: Invalid value: "<patched object>": <decode error>`
  (patch.go jsonPatcher; the fake treats strategic merge patch as merge patch).
- Server-side apply types the patch with structured-merge-diff whatever `fieldValidation`
  says: an unknown field or a wrong scalar type is a 500 with no reason, `failed to create
  typed patch object (<ns>/<name>; apps/v1, Kind=Deployment): .spec.x: field not declared
  in schema` (apimachinery pkg/util/managedfields/internal/structuredmerge.go,
  structured-merge-diff v6 typed/validate.go; apiserver responsewriters/status.go
  ErrorToAPIStatus; kubernetes/kubernetes#105916: "Apply Patch requests already require
  strict schemas and will error on unknown fields").

Validation of built-in kinds uses the OpenAPI schemas `kubernetes-validate` ships for the
bundle's Kubernetes (`KUBERNETES_VERSION`, 1.36 is there), strict variant, validators cached
per kind (~0.7 ms a write): type errors and unknown fields as above; a missing required
field is 422 `Deployment.apps "x" is invalid: spec.selector: Required value`, several in
brackets, each a `details.causes` entry (apimachinery pkg/api/errors NewInvalid,
pkg/util/validation/field errors.go). The semantic checks of pkg/apis/*/validation
(name formats, label syntax, selector matching) are not made, apart from the Secret and
PersistentVolume rules the server module has and the enums of Jobs, CronJobs, Pods, pod
templates, DaemonSet and Deployment strategies, Services, PriorityClasses, volumes, claims
and NetworkPolicies, which the schemas lack (kube_enums.py: 422 `spec.completionMode:
Unsupported value: "Indexd": supported values: "NonIndexed", "Indexed"`).

Custom resources are checked against the `openAPIV3Schema` of the version written, as
apiextensions-apiserver does (pkg/apiserver/schema/pruning/algorithm.go,
pkg/apiserver/validation/validation.go kubeOpenAPIResultToFieldErrors, kube-openapi
pkg/validation/errors/schema.go): fields the schema does not declare are pruned unless
`x-kubernetes-preserve-unknown-fields` (reported as unknown fields under `Strict`/`Warn`
like a built-in kind's), nulls of non-nullable fields are dropped, then `type`, `required`,
`enum`, `pattern`, `minimum`/`maximum` (and exclusive), `minLength`/`maxLength`,
`minItems`/`maxItems`, `x-kubernetes-int-or-string` and `nullable` give 422 `Widget.example.io
"w" is invalid: spec.size: Invalid value: "string": spec.size in body must be of type
integer: "string"`. A CustomResourceDefinition's schemas must be structural
(pkg/apiserver/schema/validation.go validateStructuralInvariants; pkg/apis/apiextensions/
validation/validation.go): a type at every specified node unless int-or-string or
preserve-unknown, `object` at the root, `items` for arrays, no `additionalProperties` at
the root or beside `properties`, only `name`/`generateName` under root `metadata`, a schema
for each served version and exactly one storage version. Then the schema's
`x-kubernetes-validations` (CEL, `rule_errors`; pkg/apiserver/schema/cel/validation.go):
each rule with `self` the value at its node of the object defaulted from the schema's
`default`s, `oldSelf` on updates only (a rule naming it skips a node without an old
value), a false rule 422 `spec.resourceGroups[0]: Invalid value: "object": <message>`
(`<nil>` at the root), none when a type/enum/required/size error blocks them
(strategy.go hasBlockingErr), an unchanged value's failures ratcheted; a rule whose CEL
the fake does not model refuses the write saying so (tests/fixtures/crds/README.md lists
the pinned CRDs' rules). The stored object keeps no defaults; conversion is not emulated.

PodSecurity (k8s.io/pod-security-admission v0.36: api/helpers.go PolicyToEvaluate,
admission/admission.go, policy/check_*.go, policy/registry.go; kubernetes/kubernetes
plugin/pkg/admission/security/podsecurity/admission.go) with the configuration our kubeadm
setup gives (no `--admission-control-config-file`: every mode `privileged:latest`, no
exemptions; admission/api/v1/defaults.go). The namespace labels
`pod-security.kubernetes.io/{enforce,audit,warn}[-version]` pick the level and version per
mode; a warn level defaults to a stricter enforce level. Pods are checked on create and on
updates that change an image or the number of containers (never on `status`, `eviction`,
`log`...); an enforce violation is 403 `pods "x" is forbidden: violates PodSecurity
"restricted:latest": allowPrivilegeEscalation != false (container "c" must set
securityContext.allowPrivilegeEscalation=false), ...`. Deployments, DaemonSets,
StatefulSets, ReplicaSets, Jobs and CronJobs get only the warn (a `Warning` header `would
violate PodSecurity "...": ...`) and audit (recorded in `Admission.audit`, the audit log's
annotations) of their pod template. Namespaces with invalid labels are 422; raising a
namespace's enforce level warns about its existing pods. The checks are those of the Pod
Security Standards page at 1.36, each versioned as upstream (see `CHECKS`).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import importlib.resources
import json
import logging
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# The bundle's Kubernetes (bundles/gpu-k8s.yaml kubernetes-version, kubeadm's
# ClusterConfiguration), 2026-11-27: the one version every test validates built-in kinds at
# (the server here, and the tests' own `kubernetes_validate.validate(..., KUBERNETES_VERSION)`).
# kubernetes-validate 1.37.0, in the unit and functional tox envs, ships 1.36's schemas.
KUBERNETES_VERSION = "1.36"

FIELD_VALIDATIONS = ("", "Ignore", "Strict", "Warn")


def _api_error(code: int, reason: str, message: str, details: dict | None = None) -> Exception:
    from fakes.kube_apiserver import ApiError  # the server module imports this one

    return ApiError(code, reason, message, details)


# ---------------------------------------------------------------- Go formatting


def go_quote(text: str) -> str:
    """Go's %q of a string (strconv.Quote) for the characters our objects hold."""
    out = json.dumps(text, ensure_ascii=False)
    return out.replace("\\u007f", "\\x7f")


def go_json(value: Any) -> str:
    """encoding/json's compact output: sorted map keys, <, > and & escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_value(value: Any) -> str:
    """Go's %v of a decoded JSON scalar (int64, float64, bool, string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def json_kind(value: Any) -> str:
    """The JSON value kind encoding/json names in an UnmarshalTypeError."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# ---------------------------------------------------------------- field errors


@dataclasses.dataclass(frozen=True)
class GoText:
    """A bad value ErrorBody prints as is: a fmt.Stringer's String(), or a struct's %#v."""

    text: str


@dataclasses.dataclass
class FieldError:
    """apimachinery's field.Error: its type, path, bad value and detail."""

    type: str  # "Required value", "Invalid value", "Unsupported value", ...
    field: str
    value: Any = ""
    detail: str = ""
    omit_value: bool = False

    CAUSES = {
        "Required value": "FieldValueRequired",
        "Invalid value": "FieldValueInvalid",
        "Unsupported value": "FieldValueNotSupported",
        "Forbidden": "FieldValueForbidden",
        "Too long": "FieldValueTooLong",
        "Too many": "FieldValueTooMany",
        "Type invalid": "FieldValueTypeInvalid",
        "Duplicate value": "FieldValueDuplicate",
    }

    def body(self) -> str:
        """ErrorBody(): the type, the value for the kinds that show it, the detail."""
        shown = "Invalid value" if self.type == "Type invalid" else self.type
        if self.type in ("Required value", "Forbidden", "Too long") or self.omit_value:
            text = shown
        elif isinstance(self.value, GoText):
            text = f"{shown}: {self.value.text}"
        elif isinstance(self.value, str):
            text = f"{shown}: {go_quote(self.value)}"
        elif isinstance(self.value, (bool, int, float)):
            text = f"{shown}: {go_value(self.value)}"
        else:
            text = f"{shown}: {go_json(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> dict:
        """The metav1.StatusCause of this error."""
        return {"reason": self.CAUSES[self.type], "message": self.body(), "field": self.field}


def aggregate(errors: list[FieldError]) -> str:
    """utilerrors.NewAggregate(...).Error(): one message, or several in brackets (deduplicated)."""
    seen: list[str] = []
    for e in errors:
        if str(e) not in seen:
            seen.append(str(e))
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


def group_kind(api_version: str, kind: str) -> str:
    """schema.GroupKind.String(): `Deployment.apps`, `Pod`."""
    group = api_version.rpartition("/")[0]
    return f"{kind}.{group}" if group else kind


def invalid(api_version: str, kind: str, name: str, errors: list[FieldError]) -> Exception:
    """apierrors.NewInvalid: 422 Invalid with a cause per field error."""
    group = api_version.rpartition("/")[0]
    qualified = group_kind(api_version, kind) if kind else ""
    details: dict[str, Any] = {"name": name, "group": group, "kind": kind}
    details = {k: v for k, v in details.items() if v}
    details["causes"] = [e.cause() for e in errors]
    message = f"{qualified} {go_quote(name)} is invalid: {aggregate(errors)}"
    return _api_error(422, "Invalid", message, details)


def warning_header(text: str) -> str:
    """The `Warning` header value kube-apiserver sends for one warning (code 299, agent -)."""
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def warning_headers(texts: Iterable[str]) -> list[str]:
    """The `Warning` headers of a response (apiserver filters/warning.go recorder).

    Each text once; past 4096 characters in all, each is cut to 256 and, once that
    budget is spent too, the rest are dropped.
    """
    total_limit, item_limit = 4 * 1024, 256
    ordered: list[str] = []
    kept: list[str] = []
    written, truncating = 0, False
    for text in texts:
        if written >= total_limit and truncating:
            break
        if text in ordered:
            continue
        ordered.append(text)
        if truncating and len(text) > item_limit:
            text = text[:item_limit]
        if written + len(text) <= total_limit or truncating:
            written += len(text)
            kept.append(text)
            continue
        truncating, written, kept = True, 0, []
        for earlier in ordered:
            earlier = earlier[:item_limit]
            written += len(earlier)
            kept.append(earlier)
    return [warning_header(t) for t in kept]


# ---------------------------------------------------------------- PodSecurity

LEVELS = ("privileged", "baseline", "restricted")
LABEL_PREFIX = "pod-security.kubernetes.io/"
MODES = ("enforce", "audit", "warn")
LATEST = (1, 10**9)  # "latest": newer than any version (api/helpers.go Version.Older)
_VERSION = re.compile(r"^v1\.(0|[1-9][0-9]*)$")


def parse_version(text: str) -> tuple[int, int] | None:
    """ParseVersion: `latest` or `v1.x`; None when invalid."""
    if text == "latest":
        return LATEST
    m = _VERSION.match(text)
    return (1, int(m.group(1))) if m else None


def version_str(version: tuple[int, int]) -> str:
    """Version.String(): `latest` or `v1.N`."""
    return "latest" if version == LATEST else f"v{version[0]}.{version[1]}"


@dataclasses.dataclass(frozen=True)
class LevelVersion:
    """A level at a policy version, e.g. `restricted:latest`."""

    level: str = "privileged"
    version: tuple[int, int] = LATEST

    def __str__(self) -> str:
        return f"{self.level}:{version_str(self.version)}"


@dataclasses.dataclass
class PodSecurityConfig:
    """A PodSecurityConfiguration (pod-security.admission.config.k8s.io/v1).

    The defaults are those of admission/api/v1/defaults.go, what kube-apiserver runs with
    when no configuration file is given (our kubeadm setup): privileged everywhere, no
    exemptions.
    """

    enforce: str = "privileged"
    enforce_version: str = "latest"
    audit: str = "privileged"
    audit_version: str = "latest"
    warn: str = "privileged"
    warn_version: str = "latest"
    exempt_usernames: tuple[str, ...] = ()
    exempt_namespaces: tuple[str, ...] = ()
    exempt_runtime_classes: tuple[str, ...] = ()

    def defaults(self) -> dict[str, LevelVersion]:
        """The policy of a namespace without labels."""
        return {
            mode: LevelVersion(
                getattr(self, mode), parse_version(getattr(self, f"{mode}_version")) or LATEST
            )
            for mode in MODES
        }


def policy_to_evaluate(
    labels: dict[str, str], defaults: dict[str, LevelVersion]
) -> tuple[dict[str, LevelVersion], list[FieldError]]:
    """api/helpers.go PolicyToEvaluate: the namespace's policy per mode, and label errors.

    An invalid enforce level reads as restricted, an invalid audit or warn level as
    privileged (fail open), an invalid version as latest; a warn level not given follows
    a stricter enforce level (and its version, unless warn's is given).
    """
    policy = dict(defaults)
    errors: list[FieldError] = []
    if not labels:
        return policy, errors
    has = {}
    for mode in MODES:
        level_key, version_key = LABEL_PREFIX + mode, LABEL_PREFIX + mode + "-version"
        level, version = policy[mode].level, policy[mode].version
        has[mode] = False
        if level_key in labels:
            level = labels[level_key]
            if level not in LEVELS:
                errors.append(
                    FieldError(
                        "Invalid value",
                        f"metadata.labels[{level_key}]",
                        level,
                        "must be one of " + ", ".join(LEVELS),
                    )
                )
                level = "restricted" if mode == "enforce" else "privileged"
            else:
                has[mode] = True
            if mode == "warn":
                has[mode] = True
        has[mode + "-version"] = version_key in labels
        if version_key in labels:
            parsed = parse_version(labels[version_key])
            if parsed is None:
                errors.append(
                    FieldError(
                        "Invalid value",
                        f"metadata.labels[{version_key}]",
                        labels[version_key],
                        'must be "latest" or "v1.x"',
                    )
                )
                parsed = LATEST
            version = parsed
        policy[mode] = LevelVersion(level, version)
    enforce, warn = policy["enforce"], policy["warn"]
    if (
        not has["warn"]
        and has["enforce"]
        and LEVELS.index(enforce.level) > LEVELS.index(warn.level)
    ):
        policy["warn"] = LevelVersion(
            enforce.level, warn.version if has["warn-version"] else enforce.version
        )
    return policy, errors


# -- the checks (k8s.io/pod-security-admission policy/check_*.go, v0.36)

CheckFn = Callable[[dict, dict], "tuple[str, str] | None"]


def _containers(spec: dict) -> Iterator[dict]:
    """policy/visitor.go visitContainers: init containers, containers, ephemeral ones."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(container: dict) -> dict:
    return container.get("securityContext") or {}


def _join_quote(items: Iterable[str]) -> str:
    items = list(items)
    return '"' + '", "'.join(items) + '"' if items else ""


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _containers_phrase(names: list[str]) -> str:
    return f"{_plural('container', 'containers', len(names))} {_join_quote(names)}"


def _windows(spec: dict) -> bool:
    return ((spec.get("os") or {}).get("name")) == "windows"


def _user_namespace(spec: dict) -> bool:
    """helpers.go relaxPolicyForUserNamespacePod: hostUsers is false."""
    return spec.get("hostUsers") is False


def check_allow_privilege_escalation(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_allowPrivilegeEscalation.go (1.8): allowPrivilegeEscalation must be false."""
    bad = [
        c.get("name", "")
        for c in _containers(spec)
        if _sc(c).get("allowPrivilegeEscalation") is not False
    ]
    if bad:
        return (
            "allowPrivilegeEscalation != false",
            f"{_containers_phrase(bad)} must set securityContext.allowPrivilegeEscalation=false",
        )
    return None


def _unless_windows(check: CheckFn) -> CheckFn:
    """The 1.25 variants: pods with spec.os.name=windows are exempt."""

    def versioned(meta: dict, spec: dict) -> tuple[str, str] | None:
        return None if _windows(spec) else check(meta, spec)

    return versioned


def _unless_user_namespace(check: CheckFn) -> CheckFn:
    """The 1.35 variants: pods with hostUsers=false are exempt."""

    def versioned(meta: dict, spec: dict) -> tuple[str, str] | None:
        return None if _user_namespace(spec) else check(meta, spec)

    return versioned


APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def check_app_armor_profile(meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_appArmorProfile.go (1.0): only RuntimeDefault/Localhost profiles (or none)."""
    setters: list[str] = []
    values: set[str] = set()
    pod_profile = (spec.get("securityContext") or {}).get("appArmorProfile")
    if pod_profile is not None and pod_profile.get("type") not in ("RuntimeDefault", "Localhost"):
        setters.append("pod")
        values.add(pod_profile.get("type") or "")
    bad = []
    for c in _containers(spec):
        profile = _sc(c).get("appArmorProfile")
        if profile is not None and profile.get("type") not in ("RuntimeDefault", "Localhost"):
            bad.append(c.get("name", ""))
            values.add(profile.get("type") or "")
    if bad:
        setters.append(_containers_phrase(bad))
    annotations = sorted(
        f"{k}={go_quote(v)}"
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(APPARMOR_ANNOTATION_PREFIX)
        and not (not v or v == "runtime/default" or v.startswith("localhost/"))
    )
    listed = sorted(values) + annotations
    if annotations:
        setters.append(_plural("annotation", "annotations", len(annotations)))
    if setters:
        return (
            _plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(listed)),
            f"{' and '.join(setters)} must not set AppArmor profile type to {_join_quote(listed)}",
        )
    return None


DEFAULT_CAPABILITIES = frozenset(
    "AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE SETFCAP SETGID "
    "SETPCAP SETUID SYS_CHROOT".split()
)


def check_capabilities_baseline(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_capabilities_baseline.go (1.0): only the default capabilities may be added."""
    bad, caps = [], set()
    for c in _containers(spec):
        added = (_sc(c).get("capabilities") or {}).get("add") or []
        extra = [cap for cap in added if cap not in DEFAULT_CAPABILITIES]
        if extra:
            bad.append(c.get("name", ""))
            caps.update(extra)
    if bad:
        return (
            "non-default capabilities",
            f"{_containers_phrase(bad)} must not include {_join_quote(sorted(caps))} in "
            "securityContext.capabilities.add",
        )
    return None


def check_capabilities_restricted(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_capabilities_restricted.go (1.22): drop ALL, add at most NET_BIND_SERVICE."""
    missing_drop, adding, caps = [], [], set()
    for c in _containers(spec):
        capabilities = _sc(c).get("capabilities")
        if capabilities is None:
            missing_drop.append(c.get("name", ""))
            continue
        if "ALL" not in (capabilities.get("drop") or []):
            missing_drop.append(c.get("name", ""))
        extra = [cap for cap in capabilities.get("add") or [] if cap != "NET_BIND_SERVICE"]
        if extra:
            adding.append(c.get("name", ""))
            caps.update(extra)
    details = []
    if missing_drop:
        details.append(
            f"{_containers_phrase(missing_drop)} must set "
            'securityContext.capabilities.drop=["ALL"]'
        )
    if adding:
        details.append(
            f"{_containers_phrase(adding)} must not include {_join_quote(sorted(caps))} in "
            "securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def check_host_namespaces(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_hostNamespaces.go (1.0): no hostNetwork, hostPID, hostIPC."""
    used = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return ("host namespaces", ", ".join(used)) if used else None


def check_host_path_volumes(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_hostPathVolumes.go (1.0): no hostPath volumes."""
    bad = [v.get("name", "") for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    if bad:
        return "hostPath volumes", f"{_plural('volume', 'volumes', len(bad))} {_join_quote(bad)}"
    return None


def check_host_ports(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_hostPorts.go (1.0): no hostPort (other than 0)."""
    bad, ports = [], set()
    for c in _containers(spec):
        used = [str(p.get("hostPort")) for p in c.get("ports") or [] if p.get("hostPort")]
        if used:
            bad.append(c.get("name", ""))
            ports.update(used)
    if bad:
        return (
            "hostPort",
            f"{_containers_phrase(bad)} {_plural('uses', 'use', len(bad))} "
            f"{_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}",
        )
    return None


def check_host_probes_and_lifecycle(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_hostProbesAndhostLifecycle.go (1.34): no `host` in probes and lifecycle hooks."""
    bad, hosts = set(), set()
    for c in _containers(spec):
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(h) for h in ("postStart", "preStop")]
        for handler in handlers:
            for action in ("httpGet", "tcpSocket"):
                host = ((handler or {}).get(action) or {}).get("host")
                if host:
                    bad.add(c.get("name", ""))
                    hosts.add(host)
    if bad:
        return (
            "probe or lifecycle host",
            f"{_containers_phrase(sorted(bad))} {_plural('uses', 'use', len(bad))} "
            f"{_plural('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} "
            f"{_join_quote(sorted(hosts))}",
        )
    return None


def check_privileged(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_privileged.go (1.0): privileged must not be true."""
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("privileged") is True]
    if bad:
        return (
            "privileged",
            f"{_containers_phrase(bad)} must not set securityContext.privileged=true",
        )
    return None


def check_proc_mount(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_procMount_baseline.go procMount_1_0: procMount unset or Default."""
    bad, types = [], set()
    for c in _containers(spec):
        mount = _sc(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(c.get("name", ""))
            types.add(mount)
    if bad:
        return (
            "procMount",
            f"{_containers_phrase(bad)} must not set securityContext.procMount to "
            f"{_join_quote(sorted(types))}",
        )
    return None


RESTRICTED_VOLUME_FIELDS = (  # check_restrictedVolumes.go, in its switch's order
    "hostPath gcePersistentDisk awsElasticBlockStore gitRepo nfs iscsi glusterfs rbd "
    "flexVolume cinder cephfs flocker fc azureFile vsphereVolume quobyte azureDisk "
    "photonPersistentDisk portworxVolume scaleIO storageos".split()
)
ALLOWED_VOLUME_FIELDS = (
    "configMap csi downwardAPI emptyDir ephemeral image persistentVolumeClaim projected "
    "secret".split()
)


def check_restricted_volumes(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_restrictedVolumes.go (1.0): only configMap, csi, downwardAPI, emptyDir, ...."""
    bad, types = [], set()
    for volume in spec.get("volumes") or []:
        if any(volume.get(k) is not None for k in ALLOWED_VOLUME_FIELDS):
            continue
        bad.append(volume.get("name", ""))
        kind = next((k for k in RESTRICTED_VOLUME_FIELDS if volume.get(k) is not None), "unknown")
        types.add(kind)
    if bad:
        return (
            "restricted volume types",
            f"{_plural('volume', 'volumes', len(bad))} {_join_quote(bad)} "
            f"{_plural('uses', 'use', len(bad))} "
            f"{_plural('restricted volume type', 'restricted volume types', len(types))} "
            f"{_join_quote(sorted(types))}",
        )
    return None


def check_run_as_non_root(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_runAsNonRoot.go runAsNonRoot1_0: runAsNonRoot true on the pod or each container."""
    setters: list[str] = []
    pod_value = (spec.get("securityContext") or {}).get("runAsNonRoot")
    if pod_value is False:
        setters.append("pod")
    explicit, implicit = [], []
    for c in _containers(spec):
        value = _sc(c).get("runAsNonRoot")
        if value is not None:
            if value is False:
                explicit.append(c.get("name", ""))
        elif pod_value is not True:
            implicit.append(c.get("name", ""))
    if explicit:
        setters.append(_containers_phrase(explicit))
    if setters:
        return (
            "runAsNonRoot != true",
            f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false",
        )
    if implicit:
        return (
            "runAsNonRoot != true",
            f"pod or {_containers_phrase(implicit)} must set securityContext.runAsNonRoot=true",
        )
    return None


def check_run_as_user(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_runAsUser.go runAsUser1_23: runAsUser must not be 0."""
    setters = ["pod"] if (spec.get("securityContext") or {}).get("runAsUser") == 0 else []
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(_containers_phrase(bad))
    if setters:
        return "runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0"
    return None


def _selinux_problems(options: dict, allowed_types: frozenset[str]) -> tuple[set[str], set[str]]:
    """The forbidden type (if any) and the fields (user, role) one seLinuxOptions sets."""
    kind = options.get("type") or ""
    types = set() if kind in allowed_types else {kind}
    return types, {key for key in ("user", "role") if options.get(key)}


def _setters(pod_bad: bool, containers: list[str]) -> list[str]:
    """`pod`, `containers "a", "b"`: who set a forbidden value."""
    return (["pod"] if pod_bad else []) + ([_containers_phrase(containers)] if containers else [])


def _selinux(allowed_types: frozenset[str]) -> CheckFn:
    def check_se_linux_options(_meta: dict, spec: dict) -> tuple[str, str] | None:
        """check_seLinuxOptions.go: allowed types only, no user, no role."""
        bad_types: set[str] = set()
        flags: set[str] = set()

        def forbidden(options: dict | None) -> bool:
            if options is None:
                return False
            types, fields = _selinux_problems(options, allowed_types)
            bad_types.update(types)
            flags.update(fields)
            return bool(types or fields)

        pod_bad = forbidden((spec.get("securityContext") or {}).get("seLinuxOptions"))
        bad = [
            c.get("name", "") for c in _containers(spec) if forbidden(_sc(c).get("seLinuxOptions"))
        ]
        setters = _setters(pod_bad, bad)
        if not setters:
            return None
        data = []
        if bad_types:
            data.append(
                f"{_plural('type', 'types', len(bad_types))} {_join_quote(sorted(bad_types))}"
            )
        data += [f"{key} may not be set" for key in ("user", "role") if key in flags]
        return (
            "seLinuxOptions",
            f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: "
            f"{'; '.join(data)}",
        )

    return check_se_linux_options


SELINUX_TYPES_1_0 = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
SELINUX_TYPES_1_31 = SELINUX_TYPES_1_0 | {"container_engine_t"}
SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION_PREFIX = "container.seccomp.security.alpha.kubernetes.io/"


def check_seccomp_baseline_1_0(meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_seccompProfile_baseline.go seccompProfileBaseline_1_0: the alpha annotations."""
    annotations = meta.get("annotations") or {}

    def ok(value: str) -> bool:
        return value in ("runtime/default", "docker/default") or value.startswith("localhost/")

    forbidden = set()
    if SECCOMP_POD_ANNOTATION in annotations and not ok(annotations[SECCOMP_POD_ANNOTATION]):
        forbidden.add(f"{SECCOMP_POD_ANNOTATION}={go_quote(annotations[SECCOMP_POD_ANNOTATION])}")
    for c in _containers(spec):
        key = SECCOMP_CONTAINER_ANNOTATION_PREFIX + c.get("name", "")
        if key in annotations and not ok(annotations[key]):
            forbidden.add(f"{key}={go_quote(annotations[key])}")
    if forbidden:
        return (
            "seccompProfile",
            f"forbidden {_plural('annotation', 'annotations', len(forbidden))} "
            f"{', '.join(sorted(forbidden))}",
        )
    return None


def _valid_seccomp(profile: dict, bad_values: set[str]) -> bool:
    """Whether a seccompProfile's type is RuntimeDefault or Localhost (noting it if not)."""
    if profile.get("type") in ("RuntimeDefault", "Localhost"):
        return True
    bad_values.add(profile.get("type") or "")
    return False


def _seccomp(restricted: bool) -> CheckFn:
    def check_seccomp_profile(_meta: dict, spec: dict) -> tuple[str, str] | None:
        """check_seccompProfile_{baseline,restricted}.go (1.19): RuntimeDefault or Localhost."""
        values: set[str] = set()
        profile = (spec.get("securityContext") or {}).get("seccompProfile")
        pod_bad = profile is not None and not _valid_seccomp(profile, values)
        pod_set = profile is not None and not pod_bad
        explicit, implicit = [], []
        for c in _containers(spec):
            profile = _sc(c).get("seccompProfile")
            if profile is not None and not _valid_seccomp(profile, values):
                explicit.append(c.get("name", ""))
            elif profile is None and restricted and not pod_set:
                implicit.append(c.get("name", ""))
        setters = _setters(pod_bad, explicit)
        if setters:
            return (
                "seccompProfile",
                f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to "
                f"{_join_quote(sorted(values))}",
            )
        if implicit:
            return (
                "seccompProfile",
                f"pod or {_containers_phrase(implicit)} must set "
                'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"',
            )
        return None

    return check_seccomp_profile


SYSCTLS_1_0 = frozenset(
    "kernel.shm_rmid_forced net.ipv4.ip_local_port_range net.ipv4.tcp_syncookies "
    "net.ipv4.ping_group_range net.ipv4.ip_unprivileged_port_start".split()
)
SYSCTLS_1_27 = SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
SYSCTLS_1_29 = SYSCTLS_1_27 | {
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SYSCTLS_1_32 = SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}


def _sysctls(allowed: frozenset[str]) -> CheckFn:
    def check_sysctls(_meta: dict, spec: dict) -> tuple[str, str] | None:
        """check_sysctls.go: only the safe sysctls of the version."""
        names = [
            s.get("name", "")
            for s in (spec.get("securityContext") or {}).get("sysctls") or []
            if s.get("name", "") not in allowed
        ]
        return ("forbidden sysctls", ", ".join(names)) if names else None

    return check_sysctls


def check_windows_host_process(_meta: dict, spec: dict) -> tuple[str, str] | None:
    """check_windowsHostProcess.go (1.0): windowsOptions.hostProcess must not be true."""
    setters = []
    pod_options = (spec.get("securityContext") or {}).get("windowsOptions") or {}
    if pod_options.get("hostProcess") is True:
        setters.append("pod")
    bad = [
        c.get("name", "")
        for c in _containers(spec)
        if (_sc(c).get("windowsOptions") or {}).get("hostProcess") is True
    ]
    if bad:
        setters.append(_containers_phrase(bad))
    if setters:
        return (
            "hostProcess",
            f"{' and '.join(setters)} must not set "
            "securityContext.windowsOptions.hostProcess=true",
        )
    return None


@dataclasses.dataclass(frozen=True)
class Check:
    """One PodSecurity check: its ID, level and versions (minimum minor, function, overrides)."""

    id: str
    level: str
    versions: tuple[tuple[int, CheckFn, tuple[str, ...]], ...]


CHECKS = (
    Check(
        "allowPrivilegeEscalation",
        "restricted",
        (
            (8, check_allow_privilege_escalation, ()),
            (25, _unless_windows(check_allow_privilege_escalation), ()),
        ),
    ),
    Check("appArmorProfile", "baseline", ((0, check_app_armor_profile, ()),)),
    Check("capabilities_baseline", "baseline", ((0, check_capabilities_baseline, ()),)),
    Check(
        "capabilities_restricted",
        "restricted",
        (
            (22, check_capabilities_restricted, ("capabilities_baseline",)),
            (25, _unless_windows(check_capabilities_restricted), ("capabilities_baseline",)),
        ),
    ),
    Check("hostNamespaces", "baseline", ((0, check_host_namespaces, ()),)),
    Check("hostPathVolumes", "baseline", ((0, check_host_path_volumes, ()),)),
    Check("hostPorts", "baseline", ((0, check_host_ports, ()),)),
    Check("hostProbesAndHostLifecycle", "baseline", ((34, check_host_probes_and_lifecycle, ()),)),
    Check("privileged", "baseline", ((0, check_privileged, ()),)),
    Check(
        "procMount",
        "baseline",
        ((0, check_proc_mount, ()), (35, _unless_user_namespace(check_proc_mount), ())),
    ),
    Check("procMount_restricted", "restricted", ((35, check_proc_mount, ("procMount",)),)),
    Check(
        "restrictedVolumes",
        "restricted",
        ((0, check_restricted_volumes, ("hostPathVolumes",)),),
    ),
    Check(
        "runAsNonRoot",
        "restricted",
        ((0, check_run_as_non_root, ()), (35, _unless_user_namespace(check_run_as_non_root), ())),
    ),
    Check(
        "runAsUser",
        "restricted",
        ((23, check_run_as_user, ()), (35, _unless_user_namespace(check_run_as_user), ())),
    ),
    Check(
        "seLinuxOptions",
        "baseline",
        ((0, _selinux(SELINUX_TYPES_1_0), ()), (31, _selinux(SELINUX_TYPES_1_31), ())),
    ),
    Check(
        "seccompProfile_baseline",
        "baseline",
        ((0, check_seccomp_baseline_1_0, ()), (19, _seccomp(restricted=False), ())),
    ),
    Check(
        "seccompProfile_restricted",
        "restricted",
        (
            (19, _seccomp(restricted=True), ("seccompProfile_baseline",)),
            (25, _unless_windows(_seccomp(restricted=True)), ("seccompProfile_baseline",)),
        ),
    ),
    Check(
        "sysctls",
        "baseline",
        (
            (0, _sysctls(SYSCTLS_1_0), ()),
            (27, _sysctls(SYSCTLS_1_27), ()),
            (29, _sysctls(SYSCTLS_1_29), ()),
            (32, _sysctls(SYSCTLS_1_32), ()),
        ),
    ),
    Check("windowsHostProcess", "baseline", ((0, check_windows_host_process, ()),)),
)
# registry.go: versions past the newest check's minimum evaluate as that one ("latest" too)
MAX_MINOR = max(v[0] for c in CHECKS for v in c.versions)


@functools.cache
def checks_for(level: str, minor: int) -> tuple[CheckFn, ...]:
    """registry.go populate: the checks of a level at a version, baseline IDs first, sorted."""
    chosen: dict[str, tuple[str, CheckFn, tuple[str, ...]]] = {}
    for check in CHECKS:
        applicable = [v for v in check.versions if v[0] <= minor]
        if applicable:
            _, fn, overrides = applicable[-1]
            chosen[check.id] = (check.level, fn, overrides)
    if level == "baseline":
        ids = sorted(i for i, c in chosen.items() if c[0] == "baseline")
    else:
        overridden = {o for c in chosen.values() if c[0] == "restricted" for o in c[2]}
        ids = sorted(i for i, c in chosen.items() if c[0] == "baseline" and i not in overridden)
        ids += sorted(i for i, c in chosen.items() if c[0] == "restricted")
    return tuple(chosen[i][1] for i in ids)


def evaluate_pod(policy: LevelVersion, meta: dict, spec: dict) -> list[tuple[str, str]]:
    """EvaluatePod + AggregateCheckResults: the (reason, detail) of each failed check."""
    if policy.level == "privileged":
        return []
    minor = min(policy.version[1] if policy.version != LATEST else MAX_MINOR, MAX_MINOR)
    failures = []
    for check in checks_for(policy.level, minor):
        result = check(meta, spec)
        if result is not None:
            failures.append(result)
    return failures


def forbidden_detail(failures: list[tuple[str, str]]) -> str:
    """AggregateCheckResult.ForbiddenDetail: `reason (detail), reason (detail)`."""
    return ", ".join(f"{r} ({d})" if d else r for r, d in failures)


# Resources whose pod template PodSecurity checks (admission.go defaultPodSpecResources).
POD_CONTROLLERS = {
    ("apps", "Deployment"): ("spec", "template"),
    ("apps", "DaemonSet"): ("spec", "template"),
    ("apps", "StatefulSet"): ("spec", "template"),
    ("apps", "ReplicaSet"): ("spec", "template"),
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
    ("", "ReplicationController"): ("spec", "template"),
    ("", "PodTemplate"): ("template",),
}
# admission.go ignoredPodSubresources
IGNORED_POD_SUBRESOURCES = frozenset(
    "exec attach binding eviction log portforward proxy status".split()
)


def _pod_template(group: str, kind: str, obj: dict) -> tuple[dict, dict] | None:
    node: Any = obj
    for key in POD_CONTROLLERS[(group, kind)]:
        node = (node or {}).get(key)
    if node is None:
        return None
    return node.get("metadata") or {}, node.get("spec") or {}


def _significant_pod_update(new: dict, old: dict) -> bool:
    """admission.go isSignificantPodUpdate: containers added/removed or an image changed."""
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    for key in ("containers", "initContainers"):
        a, b = new_spec.get(key) or [], old_spec.get(key) or []
        if len(a) != len(b) or any(x.get("image") != y.get("image") for x, y in zip(a, b)):
            return True
    old_ephemeral = {c.get("name"): c for c in old_spec.get("ephemeralContainers") or []}
    for c in new_spec.get("ephemeralContainers") or []:
        before = old_ephemeral.get(c.get("name"))
        if before is None or before.get("image") != c.get("image"):
            return True
    return False


class PodSecurity:
    """The PodSecurity admission plugin of kube-apiserver, with its configuration."""

    def __init__(self, config: PodSecurityConfig | None = None) -> None:
        self.config = config or PodSecurityConfig()
        self.audit: list[dict[str, str]] = []  # audit annotations of each evaluated request

    def policy(self, namespace: dict | None) -> tuple[dict[str, LevelVersion], list[FieldError]]:
        """The namespace's policy per mode (and its label errors)."""
        labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
        return policy_to_evaluate(labels, self.config.defaults())

    def validate(
        self,
        *,
        group: str,
        kind: str,
        plural: str,
        subresource: str,
        operation: str,
        obj: dict,
        old: dict | None,
        namespace: dict | None,
        pods: Callable[[], list[dict]],
        username: str | None = None,
    ) -> list[str]:
        """Admit one request (admission.go Validate); returns warnings, raises a refusal."""
        if (group, kind) == ("", "Namespace"):
            return self._namespace(obj, old, subresource, operation, pods)
        if self._skipped(group, kind, subresource, obj, username):
            return []
        policy, errors = self.policy(namespace)
        subject = self._subject(group, kind, operation, obj, old, policy, errors)
        if subject is None:
            return []
        name = (obj.get("metadata") or {}).get("name", "")
        is_pod = (group, kind) == ("", "Pod")
        return self._evaluate(policy, errors, *subject, plural, group, name, enforce=is_pod)

    def _skipped(
        self, group: str, kind: str, subresource: str, obj: dict, username: str | None
    ) -> bool:
        """Whether PodSecurity lets the request through unevaluated.

        ValidatePod and ValidatePodController: other kinds, subresources, exempt namespaces
        and users.
        """
        is_pod = (group, kind) == ("", "Pod")
        if not is_pod and (group, kind) not in POD_CONTROLLERS:
            return True
        if (is_pod and subresource in IGNORED_POD_SUBRESOURCES) or (not is_pod and subresource):
            return True
        namespace = (obj.get("metadata") or {}).get("namespace", "")
        exemption = None
        if namespace in self.config.exempt_namespaces:
            exemption = "namespace"
        elif username and username in self.config.exempt_usernames:
            exemption = "user"
        if exemption:
            self.audit.append({LABEL_PREFIX + "exempt": exemption})
        return exemption is not None

    def _subject(
        self,
        group: str,
        kind: str,
        operation: str,
        obj: dict,
        old: dict | None,
        policy: dict[str, LevelVersion],
        errors: list[FieldError],
    ) -> tuple[dict, dict] | None:
        """The pod metadata and spec to evaluate (None: nothing to evaluate)."""
        if (group, kind) == ("", "Pod"):
            if not errors and all(p.level == "privileged" for p in policy.values()):
                self.audit.append({LABEL_PREFIX + "enforce-policy": "privileged:latest"})
                return None
            if operation == "UPDATE" and old is not None and not _significant_pod_update(obj, old):
                return None
            return obj.get("metadata") or {}, obj.get("spec") or {}
        if not errors and policy["warn"].level == policy["audit"].level == "privileged":
            return None
        return _pod_template(group, kind, obj)

    def _evaluate(
        self,
        policy: dict[str, LevelVersion],
        errors: list[FieldError],
        meta: dict,
        spec: dict,
        plural: str,
        group: str,
        name: str,
        *,
        enforce: bool,
    ) -> list[str]:
        """admission.go EvaluatePod: enforce (pods only), then audit, then warn."""
        if spec.get("runtimeClassName") and (
            spec["runtimeClassName"] in self.config.exempt_runtime_classes
        ):
            self.audit.append({LABEL_PREFIX + "exempt": "runtimeClass"})
            return []
        audit: dict[str, str] = {}
        if errors:
            audit[LABEL_PREFIX + "error"] = f"Failed to parse policy: {aggregate(errors)}"
        refusal = None
        if enforce:
            audit[LABEL_PREFIX + "enforce-policy"] = str(policy["enforce"])
            failures = evaluate_pod(policy["enforce"], meta, spec)
            if failures:
                resource = f"{plural}.{group}" if group else plural
                target = f"{resource} {go_quote(name)}" if name else resource
                message = (
                    f"{target} is forbidden: violates PodSecurity "
                    f'"{policy["enforce"]}": {forbidden_detail(failures)}'
                )
                details = {"name": name, "group": group, "kind": plural}
                refusal = _api_error(
                    403, "Forbidden", message, {k: v for k, v in details.items() if v}
                )
        failures = evaluate_pod(policy["audit"], meta, spec)
        if failures:
            audit[LABEL_PREFIX + "audit-violations"] = (
                f'would violate PodSecurity "{policy["audit"]}": {forbidden_detail(failures)}'
            )
        self.audit.append(audit)
        if refusal is not None:
            raise refusal
        failures = evaluate_pod(policy["warn"], meta, spec)
        if failures:
            return [f'would violate PodSecurity "{policy["warn"]}": {forbidden_detail(failures)}']
        return []

    def _namespace(
        self,
        obj: dict,
        old: dict | None,
        subresource: str,
        operation: str,
        pods: Callable[[], list[dict]],
    ) -> list[str]:
        """admission.go ValidateNamespace: valid labels; a stricter enforce checks the pods."""
        if subresource:
            return []
        name = (obj.get("metadata") or {}).get("name", "")
        new_policy, new_errors = self.policy(obj)
        if operation == "CREATE" or old is None:
            if new_errors:
                raise invalid("v1", "Namespace", name, new_errors)
            return self._exempt_namespace_warning(name, new_policy, obj)
        old_policy, old_errors = self.policy(old)
        if new_errors and (
            not old_errors or [str(e) for e in new_errors] != [str(e) for e in old_errors]
        ):
            raise invalid("v1", "Namespace", name, new_errors)
        new_enforce, old_enforce = new_policy["enforce"], old_policy["enforce"]
        if new_enforce == old_enforce or new_enforce.level == "privileged":
            return []
        if new_enforce.version == old_enforce.version and LEVELS.index(
            new_enforce.level
        ) <= LEVELS.index(old_enforce.level):
            return []
        if name in self.config.exempt_namespaces:
            return self._exempt_namespace_warning(name, new_policy, obj)
        return self._existing_pods(name, new_enforce, pods())

    def _exempt_namespace_warning(
        self, name: str, policy: dict[str, LevelVersion], obj: dict
    ) -> list[str]:
        """admission.go exemptNamespaceWarning."""
        if name not in self.config.exempt_namespaces:
            return []
        defaults = self.config.defaults()

        def equivalent(a: LevelVersion, b: LevelVersion) -> bool:
            return (a.level == b.level == "privileged") or a == b

        if all(p.level == "privileged" for p in policy.values()) or all(
            equivalent(policy[m], defaults[m]) for m in MODES
        ):
            return []
        labels = (obj.get("metadata") or {}).get("labels") or {}
        parts = [
            f"{mode}={policy[mode]}"
            for mode in MODES
            if policy[mode].level != "privileged"
            and (LABEL_PREFIX + mode in labels or LABEL_PREFIX + mode + "-version" in labels)
        ]
        return [
            f"namespace {go_quote(name)} is exempt from Pod Security, and the policy "
            f"({', '.join(parts)}) will be ignored"
        ]

    def _prioritized(self, pods: list[dict]) -> list[dict]:
        """admission.go prioritizePods: one pod per controller first, the others after."""
        controllers: set[str] = set()
        first, duplicates = [], []
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):  # the lister's order
            runtime_class = (pod.get("spec") or {}).get("runtimeClassName")
            if runtime_class and runtime_class in self.config.exempt_runtime_classes:
                continue
            owners = pod["metadata"].get("ownerReferences") or []
            owner = next((r.get("uid") for r in owners if r.get("controller")), None)
            if owner is not None and owner in controllers:
                duplicates.append(pod)
                continue
            first.append(pod)
            if owner is not None:
                controllers.add(owner)
        return first + duplicates

    def _existing_pods(self, namespace: str, enforce: LevelVersion, pods: list[dict]) -> list[str]:
        """admission.go EvaluatePodsInNamespace (no 3000-pod limit, no timeout here)."""
        counts: dict[str, list] = {}  # warning -> [first pod name, pods]
        for pod in self._prioritized(pods):
            failures = evaluate_pod(enforce, pod["metadata"], pod.get("spec") or {})
            if not failures:
                continue
            warning, name = ", ".join(r for r, _ in failures), pod["metadata"]["name"]
            count = counts.setdefault(warning, [name, 0])
            count[0], count[1] = min(count[0], name), count[1] + 1
        if not counts:
            return []
        decorated = []
        for warning, (name, count) in counts.items():  # decoratePodWarnings
            others = {1: "", 2: " (and 1 other pod)"}.get(count, f" (and {count - 1} other pods)")
            decorated.append(f"{name}{others}: {warning}")
        head = (
            f"existing pods in namespace {go_quote(namespace)} violate the new PodSecurity "
            f"enforce level {go_quote(str(enforce))}"
        )
        return [head, *sorted(decorated)]


# ---------------------------------------------------------------- paths


def field_path(path: Iterable[str | int]) -> str:
    """field.Path.String(): `spec.containers[0].name`, map keys as `[key]`."""
    out = ""
    for step in path:
        if isinstance(step, int):
            out += f"[{step}]"
        else:
            out += f".{step}" if out else step
    return out


def _document_order(obj: Any, path: Iterable[str | int]) -> tuple[int, ...]:
    """A sort key putting paths in the order their values appear in the body."""
    key = []
    node = obj
    for step in path:
        if isinstance(node, dict) and isinstance(step, str):
            key.append(list(node).index(step) if step in node else len(node))
            node = node.get(step)
        elif isinstance(node, list) and isinstance(step, int):
            key.append(step)
            node = node[step] if step < len(node) else None
        else:
            key.append(0)
            node = None
    return tuple(key)


def _remove(obj: Any, path: Iterable[str | int], key: str) -> None:
    node = obj
    for step in path:
        node = node[step]
    node.pop(key, None)


# ---------------------------------------------------------------- built-in kinds' schemas


@functools.cache
def schema_version() -> str:
    """The newest schema `kubernetes-validate` has that is not newer than KUBERNETES_VERSION."""
    from kubernetes_validate.utils import all_versions, major_minor

    wanted = tuple(int(x) for x in KUBERNETES_VERSION.split("."))
    usable = [
        v for v in all_versions() if tuple(int(x) for x in major_minor(v).split(".")) <= wanted
    ]
    return usable[-1]


def _schema_dir() -> Any:
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    return root / f"v{schema_version()}-local-strict"


@functools.cache
def _definitions_document() -> dict:
    return json.loads((_schema_dir() / "_definitions.json").read_text())


def _defs() -> dict[str, dict]:
    return _definitions_document()["$defs"]


@functools.cache
def _registry() -> Any:
    from referencing import Registry, Resource

    return Resource.from_contents(_definitions_document()) @ Registry()


def _schema_file(api_version: str, kind: str) -> str:
    """kubernetes_validate's file name: `deployment-apps-v1.json`, `role-rbac-v1.json`."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}.json"


@functools.cache
def builtin_schema(api_version: str, kind: str) -> dict | None:
    """The strict schema of a built-in kind, or None when kubernetes-validate has none."""
    path = _schema_dir() / _schema_file(api_version, kind)
    if not path.is_file():
        return None
    return json.loads(path.read_text())


@functools.cache
def builtin_validator(api_version: str, kind: str) -> Any:
    """A jsonschema validator for the kind, built once per process.

    (kubernetes_validate.validate builds it anew on every call: ~13 ms.)
    """
    import jsonschema
    from referencing import Resource

    schema = builtin_schema(api_version, kind)
    if schema is None:
        return None
    registry = Resource.from_contents(schema) @ _registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _deref(raw: dict) -> tuple[dict, str | None]:
    """Follow `$ref`s to the definition: (schema, definition name)."""
    name = None
    while "$ref" in raw:
        name = raw["$ref"].rsplit("/", 1)[-1]
        raw = _defs()[name]
    return raw, name


def _types(raw: dict) -> set[str]:
    kinds = raw.get("type") or []
    return {kinds} if isinstance(kinds, str) else set(kinds) - {"null"}


def _go_type(raw: dict) -> str:
    """The Go type a schema node decodes into, as reflect prints it (`[]v1.Container`)."""
    node, name = _deref(raw)
    if name:
        *_, package, short = name.split(".")
        return f"{package}.{short}"
    kinds = _types(node)
    if "integer" in kinds:
        return {"int32": "int32", "int64": "int64"}.get(node.get("format", ""), "int")
    if "number" in kinds:
        return "float64"
    if "boolean" in kinds:
        return "bool"
    if "string" in kinds:
        return "[]uint8" if node.get("format") == "byte" else "string"
    if "array" in kinds:
        return "[]" + _go_type(node.get("items") or {})
    if isinstance(node.get("additionalProperties"), dict):
        return "map[string]" + _go_type(node["additionalProperties"])
    return "map[string]interface {}"


QUANTITY_FORMAT_ERROR = (  # apimachinery pkg/api/resource/quantity.go ErrFormatWrong
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def _go_decode_error(kind: str, schema: dict, path: list[str | int], value: Any) -> str:
    """encoding/json's error for `value` at `path` (sigs.k8s.io/json addErrorContext)."""
    struct, fields, node = kind, [], schema
    for step in path:
        node, name = _deref(node)
        if isinstance(step, int):
            node = node.get("items") or {}
        elif step in (node.get("properties") or {}):
            struct = (name or kind).rsplit(".", 1)[-1]
            fields.append(step)
            node = node["properties"][step]
        else:
            node = node.get("additionalProperties") or {}
    target, name = _deref(node)
    if name and name.endswith(".IntOrString"):
        return f"json: cannot unmarshal {json_kind(value)} into Go value of type int32"
    if name and name.endswith(".Quantity"):
        return QUANTITY_FORMAT_ERROR
    found = json_kind(value)
    if found == "number" and "integer" in _types(target) and not float(value).is_integer():
        found = f"number {go_value(value)}"
    return (
        f"json: cannot unmarshal {found} into Go struct field {struct}."
        f"{'.'.join(fields)} of type {_go_type(node)}"
    )


@dataclasses.dataclass
class SchemaFindings:
    """What a body's check against its kind's schema found."""

    type_errors: list[tuple[list[str | int], Any]] = dataclasses.field(default_factory=list)
    unknown: list[tuple[list[str | int], str]] = dataclasses.field(default_factory=list)
    invalid: list[tuple[list[str | int], FieldError]] = dataclasses.field(default_factory=list)

    @property
    def required(self) -> list[FieldError]:
        """The validation errors: missing required fields, unsupported values.

        A parent's fields come before its children's, siblings by name, much as the
        validation code walks them.
        """

        def key(item: tuple[list[str | int], FieldError]) -> list[tuple[int, str]]:
            return [(0, f"{s:09d}") if isinstance(s, int) else (1, s) for s in item[0]]

        return [error for _, error in sorted(self.invalid, key=key)]

    def unknown_fields(self, obj: dict) -> list[str]:
        """`unknown field "spec.x"` texts, in the body's order."""
        ordered = sorted(self.unknown, key=lambda u: _document_order(obj, [*u[0], u[1]]))
        return [f"unknown field {go_quote(field_path([*p, k]))}" for p, k in ordered]

    def add(self, error: Any) -> None:
        """Sort one jsonschema error into what the server does with it."""
        path = list(error.absolute_path)
        if error.validator == "additionalProperties":
            declared = set(error.schema.get("properties") or {})
            self.unknown += [(path, key) for key in error.instance if key not in declared]
        elif error.validator in ("type", "oneOf"):
            if error.instance is not None:  # null is every type's zero value
                self.type_errors.append((path, error.instance))
        elif error.validator == "required" and path[:1] != ["status"]:
            # a required scalar left out decodes to its zero value; the status a client
            # writes is not validated for presence (the server resets it on create)
            self.invalid += [
                ([*path, key], FieldError("Required value", field_path([*path, key])))
                for key in error.validator_value
                if key not in error.instance
            ]
        elif error.validator == "enum" and path not in (["apiVersion"], ["kind"]):
            values = ", ".join(go_quote(str(v)) for v in error.validator_value)
            detail = f"supported values: {values}"
            error = FieldError("Unsupported value", field_path(path), error.instance, detail)
            self.invalid.append((path, error))


_FINDINGS: dict[tuple[str, str, str], SchemaFindings] = {}
_KEPT = 16384  # bodies whose findings a process keeps
# What the server writes into every stored object's metadata: different in every object,
# so checked apart from the rest, whose findings are kept.
_SERVER_SET = ("uid", "creationTimestamp", "resourceVersion", "generation", "managedFields")


# Server-set metadata found clean, by its skeleton: in the 1.36 schemas uid, resourceVersion,
# the times (meta.v1.Time: a string whose format no check reads) and every
# ManagedFieldsEntry field are constrained by their JSON type only, generation by its type,
# fieldsV1 (meta.v1.FieldsV1) is any object: values of the same types are clean alike.
_CLEAN: set[tuple[str, str, str]] = set()


def _skeleton(value: Any) -> Any:
    """`value` with each scalar replaced by its type's zero and each fieldsV1 emptied."""
    if isinstance(value, dict):
        return {
            k: {} if k == "fieldsV1" and isinstance(v, dict) else _skeleton(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_skeleton(v) for v in value]
    if isinstance(value, (bool, type(None))):
        return value
    return type(value)()


def check_builtin(api_version: str, kind: str, obj: dict) -> SchemaFindings | None:
    """Check `obj` against the kind's strict schema (None: no schema for the kind).

    The findings are kept per process, by the body's exact JSON text less the server-set
    metadata above: the same objects (a CustomResourceDefinition: ~10 ms a check) are
    stored on many hooks of many tests (the control plane's suite: ~3,000 checks, ~120
    distinct bodies, measured 2026-11-27). The server-set fields are checked on their own,
    in an object of the same kind that holds only them (the kinds' schemas have no rule
    across fields, so the findings are those of the whole body), once for each shape of
    their values (`_CLEAN`). Callers read the findings and never change them.
    """
    validator = builtin_validator(api_version, kind)
    if validator is None:
        return None
    meta = obj.get("metadata")
    server_set = {k: meta[k] for k in _SERVER_SET if k in meta} if isinstance(meta, dict) else {}
    rest = obj
    if server_set:
        rest = {**obj, "metadata": {k: v for k, v in meta.items() if k not in server_set}}
    key = (api_version, kind, json.dumps(rest))
    found = _FINDINGS.get(key)
    if found is None:
        found = SchemaFindings()
        for error in validator.iter_errors(rest):
            found.add(error)
        if len(_FINDINGS) < _KEPT:
            _FINDINGS[key] = found
    if not server_set:
        return found
    own = _server_set_findings(validator, api_version, kind, server_set)
    if own is None:
        return found
    return SchemaFindings(
        found.type_errors + own.type_errors,
        found.unknown + own.unknown,
        found.invalid + own.invalid,
    )


def _server_set_findings(
    validator: Any, api_version: str, kind: str, server_set: dict
) -> SchemaFindings | None:
    """What the kind's schema finds in the server-set metadata alone (None: nothing)."""
    clean = (api_version, kind, json.dumps(_skeleton(server_set)))
    if clean in _CLEAN:
        return None
    own = SchemaFindings()
    alone = {"apiVersion": api_version, "kind": kind, "metadata": server_set}
    for error in validator.iter_errors(alone):
        if list(error.absolute_path)[:1] == ["metadata"]:
            own.add(error)
    if own.type_errors or own.unknown or own.invalid:
        return own
    _CLEAN.add(clean)
    return None


# ---------------------------------------------------------------- structured-merge-diff


@dataclasses.dataclass
class Node:
    """A schema node, from a built-in kind's schema or a CRD's openAPIV3Schema."""

    types: set[str]
    properties: dict[str, dict]
    additional: dict | None
    items: dict | None
    preserve: bool = False
    int_or_string: bool = False
    nullable: bool = False
    list_type: str = ""
    map_keys: tuple[str, ...] = ()
    raw: dict = dataclasses.field(default_factory=dict)


# The Nodes made of built-in schema dicts, by the dict's id(). Those dicts are read once per
# process and never changed (`builtin_schema` and `_definitions_document` are cached), so a
# dict always gives the same Node; each is kept beside its Node, so its id is never reused.
# A control plane bootstrap's applies visit ~3,000 schema nodes, most of them the CRDs'.
_builtin_nodes: dict[int, tuple[dict, Node]] = {}


def builtin_node(raw: dict) -> Node:
    """A node of a built-in kind's schema ($refs followed; IntOrString/Quantity untyped)."""
    kept = _builtin_nodes.get(id(raw))
    if kept is not None and kept[0] is raw:
        return kept[1]
    node = _builtin_node(raw)
    if raw:  # an empty dict is a temporary (`items or {}`): nothing to keep
        _builtin_nodes[id(raw)] = (raw, node)
    return node


def _builtin_node(raw: dict) -> Node:
    node, _ = _deref(raw)
    additional = node.get("additionalProperties")
    return Node(
        types=_types(node),
        properties=node.get("properties") or {},
        additional=additional if isinstance(additional, dict) else None,
        items=node.get("items"),
        int_or_string="oneOf" in node,
        list_type=raw.get("x-kubernetes-list-type", node.get("x-kubernetes-list-type", "")),
        map_keys=tuple(raw.get("x-kubernetes-list-map-keys") or ()),
        raw=node,
    )


def crd_node(raw: dict) -> Node:
    """A node of a CRD's structural schema."""
    additional = raw.get("additionalProperties")
    return Node(
        types={raw["type"]} if raw.get("type") else set(),
        properties=raw.get("properties") or {},
        additional=additional if isinstance(additional, dict) else None,
        items=raw.get("items"),
        preserve=bool(raw.get("x-kubernetes-preserve-unknown-fields")),
        int_or_string=bool(raw.get("x-kubernetes-int-or-string")),
        nullable=bool(raw.get("nullable")),
        list_type=raw.get("x-kubernetes-list-type", ""),
        map_keys=tuple(raw.get("x-kubernetes-list-map-keys") or ()),
        raw=raw,
    )


def _smd_scalar(value: Any) -> str:
    """value.ToString: strings quoted (%q), numbers and booleans as %v."""
    return go_quote(value) if isinstance(value, str) else go_value(value)


def typed_patch_errors(
    raw: dict, value: Any, node_of: Callable[[dict], Node], root: bool = True
) -> list[tuple[str, str]]:
    """structured-merge-diff's validation of an applied object (typed/validate.go).

    Unknown fields ("field not declared in schema"; only the first of a map, as its
    iteration stops there), values of the wrong type; (path, message) with paths as
    fieldpath prints them (`.spec.x`, `[name="c"]` in keyed lists, `[=v]` in sets, `[0]`).
    """
    node = node_of(raw)
    if value is None or (node.preserve and not node.properties and node.additional is None):
        return []
    if not (node.types or node.properties or node.int_or_string) and (
        node.additional is None and node.items is None
    ):
        # a schema with no type is kube-openapi's `__untyped_deduced_` (pkg/schemaconv): any
        # scalar, list or map, e.g. a CRD's JSONSchemaPropsOrBool `additionalProperties`
        return []
    if isinstance(value, dict):
        return _typed_map(node, value, node_of, root)
    if isinstance(value, list):
        return _typed_list(node, value, node_of)
    return _typed_scalar(node, value)


def _typed_map(
    node: Node, value: dict, node_of: Callable[[dict], Node], root: bool
) -> list[tuple[str, str]]:
    if node.types and "object" not in node.types:
        return [("", f"expected {_wanted(node)}, got {_go_unstructured(value)}")]
    errors: list[tuple[str, str]] = []
    for key, child in value.items():
        if root and key in ("apiVersion", "kind"):
            continue
        sub = node.properties.get(key, node.additional)
        if sub is None and node.preserve:
            continue
        if sub is None:
            errors.append((f".{key}", "field not declared in schema"))
            break
        errors += [(f".{key}{p}", m) for p, m in typed_patch_errors(sub, child, node_of, False)]
    return errors


def _typed_list(node: Node, value: list, node_of: Callable[[dict], Node]) -> list[tuple[str, str]]:
    if node.types and "array" not in node.types:
        return [("", f"expected {_wanted(node)}, got {_go_unstructured(value)}")]
    errors: list[tuple[str, str]] = []
    for i, child in enumerate(value):
        if node.list_type == "map" and node.map_keys and isinstance(child, dict):
            keys = sorted(k for k in node.map_keys if k in child)
            element = "[" + ",".join(f"{k}={_smd_scalar(child[k])}" for k in keys) + "]"
        elif node.list_type == "set":
            element = f"[={_smd_scalar(child)}]"
        else:
            element = f"[{i}]"
        nested = typed_patch_errors(node.items or {}, child, node_of, False)
        errors += [(element + p, m) for p, m in nested]
    return errors


def _typed_scalar(node: Node, value: Any) -> list[tuple[str, str]]:
    if node.int_or_string or not node.types:
        return []
    if node.types & {"integer", "number"}:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return [("", f"expected numeric (int or float), got {_go_type_name(value)}")]
    elif "string" in node.types:
        if not isinstance(value, str):
            unstructured = f"&value.valueUnstructured{{Value:{go_value(value)}}}"
            return [("", f"expected string, got {unstructured}")]
    elif "boolean" in node.types:
        if not isinstance(value, bool):
            return [("", f"expected boolean, got &{{{go_value(value)}}}")]
    elif node.types & {"object", "array"}:
        return [("", f"expected {_wanted(node)}, got {_go_unstructured(value)}")]
    return []


def _wanted(node: Node) -> str:
    return "map" if "object" in node.types else "list" if "array" in node.types else "scalar"


def _go_unstructured(value: Any) -> str:
    return f"&{{{go_json(value) if isinstance(value, (dict, list)) else go_value(value)}}}"


def _go_type_name(value: Any) -> str:
    """%T of a decoded JSON value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    if isinstance(value, dict):
        return "map[string]interface {}"
    return "int64" if isinstance(value, int) else "float64"


def smd_message(errors: list[tuple[str, str]]) -> str:
    """ValidationErrors.Error(): one error, or `errors:` then each on its own line."""
    texts = [f"{p}: {m}" if p else m for p, m in errors]
    return texts[0] if len(texts) == 1 else "\n".join(["errors:", *("  " + t for t in texts)])


# ---------------------------------------------------------------- custom resources


def crd_version_schema(crd: dict, version: str) -> dict | None:
    """The openAPIV3Schema of one version of a CRD (None: none given)."""
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == version:
            return (v.get("schema") or {}).get("openAPIV3Schema")
    return None


def _object_meta_fields() -> set[str]:
    return set(_defs()["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"])


def prune(schema: dict | None, obj: dict) -> list[list[str | int]]:
    """pruning/algorithm.go PruneWithOptions(isResourceRoot=true): drop undeclared fields.

    apiVersion, kind and metadata stay at the root (metadata keeps ObjectMeta's fields, as
    its decoding does); nulls where the schema is not nullable are dropped as well
    (structuraldefaulting PruneNonNullableNullsWithoutDefaults). Returns the paths of the
    unknown fields, which strict field validation reports.
    """
    unknown: list[list[str | int]] = []
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        known = _object_meta_fields()
        for key in [k for k in meta if k not in known]:
            unknown.append(["metadata", key])
            del meta[key]
    _prune(schema or {}, obj, [], unknown, root=True)
    return unknown


def _prune(raw: dict, value: Any, path: list, unknown: list, root: bool = False) -> None:
    node = crd_node(raw)
    if isinstance(value, dict):
        for key in list(value):
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            child = value[key]
            if key in node.properties:
                sub = crd_node(node.properties[key])
            elif node.additional is not None:
                sub = crd_node(node.additional)
            elif node.preserve:
                continue
            else:
                unknown.append([*path, key])
                del value[key]
                continue
            if child is None and not sub.nullable:
                del value[key]
                continue
            _prune(sub.raw, child, [*path, key], unknown)
    elif isinstance(value, list) and node.items is not None:
        for i, child in enumerate(value):
            _prune(node.items, child, [*path, i], unknown)


def _schema_type(value: Any) -> str:
    """kube-openapi's JSON type name of a decoded value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def validate_custom(raw: dict, value: Any, path: list[str | int]) -> list[FieldError]:
    """kube-openapi's validation of a custom resource, as field errors (validation.go)."""
    node = crd_node(raw)
    name = field_path(path)
    type_error = _custom_type(node, value, name)
    if type_error is not None:
        return [type_error]
    if value is None:
        return []
    errors: list[FieldError] = []
    if "enum" in raw and value not in raw["enum"]:
        values = [v if isinstance(v, str) else go_json(v) for v in raw["enum"]]
        supported = "supported values: " + ", ".join(go_quote(v) for v in values)
        errors.append(FieldError("Unsupported value", name, value, supported))
    if isinstance(value, str):
        errors += _custom_string(raw, value, name)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        errors += _custom_number(raw, value, name)
    elif isinstance(value, list):
        errors += _custom_list(raw, node, value, path)
    elif isinstance(value, dict):
        errors += _custom_object(raw, node, value, path)
    return errors


def _custom_type(node: Node, value: Any, name: str) -> FieldError | None:
    """kube-openapi typeValidator: the value's JSON type against `type`.

    An integer is a number too; int-or-string is `type: [integer, string]` (apiextensions
    validation.go ConvertJSONSchemaPropsWithPostProcess).
    """
    kind = _schema_type(value)
    if value is None:
        wanted = ",".join(sorted(node.types)) if node.types and not node.nullable else ""
    elif node.int_or_string:
        wanted = "" if kind in ("integer", "string") else "integer,string"
    elif node.types:
        wanted = next(iter(node.types))
        if kind == wanted or (wanted == "number" and kind == "integer"):
            wanted = ""
    else:
        wanted = ""
    if not wanted:
        return None
    return FieldError(
        "Type invalid", name, kind, f'{name} in body must be of type {wanted}: "{kind}"'
    )


def _custom_string(raw: dict, value: str, name: str) -> list[FieldError]:
    errors = []
    if "maxLength" in raw and len(value) > raw["maxLength"]:
        unit = _plural("byte", "bytes", raw["maxLength"])
        detail = f"may not be more than {raw['maxLength']} {unit}"
        errors.append(FieldError("Too long", name, detail=detail))
    if "minLength" in raw and len(value) < raw["minLength"]:
        detail = f"{name} in body should be at least {raw['minLength']} chars long"
        errors.append(FieldError("Invalid value", name, value, detail))
    if "pattern" in raw and not re.search(raw["pattern"], value):
        detail = f"{name} in body should match '{raw['pattern']}'"
        errors.append(FieldError("Invalid value", name, value, detail))
    return errors


def _custom_number(raw: dict, value: float, name: str) -> list[FieldError]:
    errors = []
    for bound, over, words in (
        ("maximum", value > raw.get("maximum", math.inf), "less than"),
        ("minimum", value < raw.get("minimum", -math.inf), "greater than"),
    ):
        if bound not in raw:
            continue
        exclusive = bool(raw.get("exclusive" + bound.capitalize()))
        if over or (exclusive and value == raw[bound]):
            relation = words if exclusive else f"{words} or equal to"
            detail = f"{name} in body should be {relation} {go_value(raw[bound])}"
            errors.append(FieldError("Invalid value", name, value, detail))
    return errors


def _custom_list(raw: dict, node: Node, value: list, path: list[str | int]) -> list[FieldError]:
    name = field_path(path)
    errors = []
    if "maxItems" in raw and len(value) > raw["maxItems"]:
        detail = f"must have at most {raw['maxItems']} {_plural('item', 'items', raw['maxItems'])}"
        errors.append(FieldError("Too many", name, len(value), detail))
    if "minItems" in raw and len(value) < raw["minItems"]:
        detail = f"{name} in body should have at least {raw['minItems']} items"
        errors.append(FieldError("Invalid value", name, len(value), detail))
    if node.items is not None:
        for i, child in enumerate(value):
            errors += validate_custom(node.items, child, [*path, i])
    return errors


def _custom_object(raw: dict, node: Node, value: dict, path: list[str | int]) -> list[FieldError]:
    errors = [
        FieldError("Required value", field_path([*path, key]))
        for key in raw.get("required") or []
        if key not in value
    ]
    for key, child in value.items():
        if not path and key in ("apiVersion", "kind", "metadata"):
            continue
        sub = node.properties.get(key, node.additional)
        if sub is not None:
            errors += validate_custom(sub, child, [*path, key])
    return errors


# -- CustomResourceDefinition schemas: structural (apiextensions-apiserver schema/validation.go)


def structural_errors(raw: dict, base: str) -> list[FieldError]:
    """ValidateStructuralInvariants and the checks of validation.go our CRDs meet, sorted."""
    errors: list[FieldError] = []
    _structural(raw, base, "root", errors)
    return sorted(errors, key=str)


def _structural(raw: dict, path: str, level: str, errors: list[FieldError]) -> None:
    kind = raw.get("type", "")
    if kind == "array" and "items" not in raw:
        errors.append(FieldError("Required value", f"{path}.items", detail="must be specified"))
    if isinstance(raw.get("items"), dict):
        _structural(raw["items"], f"{path}.items", "item", errors)
    for key, sub in (raw.get("properties") or {}).items():
        _structural(sub, f"{path}.properties[{key}]", "field", errors)
    if "additionalProperties" in raw:
        _additional_properties(raw, path, level, errors)
    untyped = raw.get("x-kubernetes-int-or-string") or raw.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if not kind and not untyped:
        where = {
            "root": "at the root",
            "item": "for specified array items",
            "field": "for specified object fields",
        }[level]
        detail = f"must not be empty {where}"
        errors.append(FieldError("Required value", f"{path}.type", detail=detail))
    if level == "root" and kind and kind != "object":
        errors.append(
            FieldError("Invalid value", f"{path}.type", kind, "must be object at the root")
        )
    if "metadata" in (raw.get("properties") or {}):
        _metadata_schema(
            raw["properties"]["metadata"], f"{path}.properties[metadata]", level, errors
        )


def _additional_properties(raw: dict, path: str, level: str, errors: list[FieldError]) -> None:
    where = f"{path}.additionalProperties"
    if level == "root":
        errors.append(FieldError("Forbidden", where, detail="must not be used at the root"))
    if raw.get("properties"):
        detail = "additionalProperties and properties are mutual exclusive"
        errors.append(FieldError("Forbidden", where, detail=detail))
    if isinstance(raw["additionalProperties"], dict):
        _structural(raw["additionalProperties"], where, "field", errors)


def _metadata_schema(raw: dict, path: str, level: str, errors: list[FieldError]) -> None:
    """validateStructuralMetadataInvariants: the root's metadata names name/generateName only.

    A `metadata` property deeper down (a JobSet's Job and pod templates) is any other field;
    "must not be specified in a nested context" is validateNestedValueValidation's, for
    `metadata` under allOf/anyOf/oneOf/not, which this fake does not read.
    """
    if level != "root":
        return
    if raw.get("type", "object") != "object":
        errors.append(FieldError("Invalid value", f"{path}.type", raw["type"], "must be object"))
    rest = {k: v for k, v in raw.items() if k not in ("type", "properties")}
    extra = set(raw.get("properties") or {}) - {"name", "generateName"}
    if rest or extra:
        detail = (
            "must not specify anything other than name and generateName, but metadata is "
            "implicitly specified"
        )
        errors.append(FieldError("Forbidden", path, detail=detail))


def crd_errors(crd: dict) -> list[FieldError]:
    """The checks of apiextensions validation.go on a CRD's schemas.

    Each version has one, exactly one version is the storage version, each is structural.
    """
    spec = crd.get("spec") or {}
    versions = spec.get("versions") or []
    errors: list[FieldError] = []
    if versions and sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(
            FieldError(
                "Invalid value",
                "spec.versions",
                versions,
                "must have exactly one version marked as storage version",
            )
        )
    for i, version in enumerate(versions):
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        base = f"spec.versions[{i}].schema.openAPIV3Schema"
        if schema is None:
            errors.append(FieldError("Required value", base))
            continue
        errors += structural_errors(schema, base)
    return errors


# -- x-kubernetes-validations (apiextensions-apiserver pkg/apiserver/schema/cel/validation.go)

# pkg/registry/customresource/strategy.go hasBlockingErr: a schema error of these types means
# the object lacks the shape the rules were written for, so they are not evaluated.
_BLOCKING = frozenset(
    {"Unsupported value", "Required value", "Too long", "Too many", "Type invalid"}
)
_NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; correct the "
    "existing errors to complete validation"
)
_NIL_PATH = "<nil>"  # field.Path.String() of a nil path: a rule at the resource's root


@dataclasses.dataclass
class RuleNode:
    """The schema nodes on the way to x-kubernetes-validations (validation.go's Validator)."""

    raw: dict
    rules: list[dict]
    properties: dict[str, RuleNode]
    items: RuleNode | None = None
    additional: RuleNode | None = None


def _rule_node(raw: dict) -> RuleNode | None:
    """The node for `raw`, or None when no rule is at or below it (hasXValidations)."""
    properties = {}
    for key, sub in (raw.get("properties") or {}).items():
        node = _rule_node(sub)
        if node is not None:
            properties[key] = node
    items = _rule_node(raw["items"]) if isinstance(raw.get("items"), dict) else None
    extra = raw.get("additionalProperties")
    additional = _rule_node(extra) if isinstance(extra, dict) else None
    rules = list(raw.get("x-kubernetes-validations") or [])
    if not (rules or properties or items or additional):
        return None
    return RuleNode(raw, rules, properties, items, additional)


# The rule tree of each schema, built once: keyed by the schema's id, the schema held with it
# so that the id stays its own (a fake server's CRDs live as long as the server).
_RULE_TREES: dict[int, tuple[dict, RuleNode | None]] = {}


def rule_tree(schema: dict) -> RuleNode | None:
    """The x-kubernetes-validations of one version's openAPIV3Schema, as a tree (cached)."""
    held = _RULE_TREES.get(id(schema))
    if held is None or held[0] is not schema:
        if len(_RULE_TREES) >= 64:
            _RULE_TREES.pop(next(iter(_RULE_TREES)))
        held = _RULE_TREES[id(schema)] = (schema, _rule_node(schema))
    return held[1]


def default_custom(raw: dict, value: Any) -> None:
    """structuraldefaulting.Default: each absent property with a `default` gets a copy of it.

    apiextensions-apiserver pkg/apiserver/schema/defaulting/algorithm.go: objects get their
    properties' (and additionalProperties') defaults, then each value is defaulted in turn,
    array items too. The server defaults on decoding, before validation, so the rules see
    the defaults (the fake's store does not keep them: the rules' copy has them).
    """
    if isinstance(value, dict):
        properties = raw.get("properties") or {}
        for key, sub in properties.items():
            if "default" in sub and key not in value:
                value[key] = json.loads(json.dumps(sub["default"]))
        extra = raw.get("additionalProperties")
        for key, child in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                default_custom(sub, child)
    elif isinstance(value, list) and isinstance(raw.get("items"), dict):
        for child in value:
            default_custom(raw["items"], child)


def _uses(expression: str, name: str) -> bool:
    """Whether the parsed rule reads the variable `name` (compile.go UsesOldSelf)."""
    import lark

    tree = _cel_runtime()[0].compile(expression)
    return any(
        isinstance(token, lark.Token) and token.type == "IDENT" and token.value == name
        for token in tree.scan_values(lambda t: isinstance(t, lark.Token))
    )


@functools.cache
def _compiled_rule(expression: str) -> tuple[str, bool]:
    """('', uses oldSelf) for a rule the fake evaluates, (why not, False) for one it cannot.

    Each rule is compiled once per process (`_cel_program` caches it by its text).
    """
    try:
        _cel_program(expression)
    except NotImplementedError as e:
        return str(e), False
    return "", _uses(expression, "oldSelf")


def rule_refusal(rule: dict) -> str:
    """Why the fake cannot evaluate a CRD's validation rule as kube-apiserver does; ''."""
    if rule.get("optionalOldSelf"):
        return "optionalOldSelf (oldSelf as a CEL optional)"
    if "[" in (rule.get("fieldPath") or ""):
        return f"the fieldPath {rule['fieldPath']!r} (only dotted field names are modelled)"
    why, _ = _compiled_rule(rule.get("rule", ""))
    if not why and rule.get("messageExpression"):
        why, _ = _compiled_rule(rule["messageExpression"])
    return why


def _rule_message(rule: dict, activation: dict[str, Any]) -> str:
    """evalMessageExpression, else ruleMessageOrDefault (validation.go)."""
    expression = rule.get("messageExpression")
    if expression:
        value, error = _cel(expression, activation)
        text = value.strip() if isinstance(value, str) and not error else ""
        if text and "\n" not in text and len(text) <= 5 * 1024:  # MaxEvaluated...SizeBytes
            return text
    message = (rule.get("message") or "").strip()
    return message or f"failed rule: {rule.get('rule', '').strip()}"


def _rule_error(rule: dict, path: str, kind: str, detail: str) -> FieldError:
    """fieldErrorForReason: Invalid by default, the rule's `reason` otherwise."""
    reason = rule.get("reason")
    if reason == "FieldValueForbidden":
        return FieldError("Forbidden", path, detail=detail)
    if reason == "FieldValueRequired":
        return FieldError("Required value", path, detail=detail)
    if reason == "FieldValueDuplicate":
        return FieldError("Duplicate value", path, kind)
    return FieldError("Invalid value", path, kind, detail)


def _evaluation_error(rule: dict, error: str) -> str:
    """The detail validateExpressions gives a rule that could not be evaluated."""
    # kube-apiserver's words for a missing field (k8s.io/apiserver pkg/cel/common
    # values.go, an object's Get: "no such key: %v"); cel-python's are "no such
    # member in mapping: 'f'". Other evaluation errors keep cel-python's words.
    missing = re.search(r"no such member in mapping: '([^']*)'", error)
    error = f"no such key: {missing.group(1)}" if missing else error
    message = (rule.get("message") or "").strip() or rule.get("rule", "").strip()
    if error.startswith("no such overload"):
        return (
            f"'{error}': call arguments did not match a supported operator, function or "
            f"macro signature for rule: {message}"
        )
    return f"{error} evaluating rule: {message}"


_ABSENT = object()


def _deep_equal(new: Any, old: Any) -> bool:
    return old is not _ABSENT and new == old and json_kind(new) == json_kind(old)


def _to_cel(value: Any) -> Any:
    """celpy.json_to_cel of a decoded JSON value, without its per-value checks (~3x faster)."""
    from celpy import celtypes

    string, cel_map, cel_list = celtypes.StringType, celtypes.MapType, celtypes.ListType
    scalars = {bool: celtypes.BoolType, int: celtypes.IntType, float: celtypes.DoubleType}

    def convert(value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return string(value)
        if kind is dict:
            converted = cel_map()
            dict.update(converted, {string(k): convert(v) for k, v in value.items()})
            return converted
        if kind is list:
            return cel_list([convert(v) for v in value])
        return None if value is None else scalars[kind](value)

    return convert(value)


@dataclasses.dataclass
class _At:
    """One node's value as JSON and as CEL (None until a rule reads it), its old value."""

    value: Any
    cel: Any
    old: Any
    path: str
    ratchet: bool


def _evaluate_rules(node: RuleNode, at: _At, errors: list[FieldError]) -> None:
    """The rules of one node (validateExpressions): `self` the value, `oldSelf` the old one."""
    import celpy

    kind = node.raw.get("type", "")
    if at.cel is None:
        at.cel = _to_cel(at.value)
    activation: dict[str, Any] = {"self": at.cel}
    for rule in node.rules:
        expression = rule.get("rule", "")
        where = at.path or _NIL_PATH
        why = rule_refusal(rule)
        if why:
            detail = f"the fake API server cannot evaluate the rule {expression!r}: {why}"
            errors.append(FieldError("Invalid value", where, kind, detail))
            continue
        _, uses_old = _compiled_rule(expression)
        if uses_old and at.old is _ABSENT:
            continue  # a transition rule: only where there is an old value to compare
        if at.old is not _ABSENT and "oldSelf" not in activation:
            activation["oldSelf"] = _to_cel(at.old)
        result, error = _cel(expression, activation)
        if error:
            detail = _evaluation_error(rule, error)
            errors.append(FieldError("Invalid value", where, kind, detail))
            continue
        if isinstance(result, celpy.celtypes.BoolType) and result:
            continue
        if not uses_old and at.ratchet:
            continue  # CRDValidationRatcheting: an unchanged value keeps its old errors
        field_ = rule.get("fieldPath", "").lstrip(".")
        if field_:
            where = f"{at.path}.{field_}" if at.path else field_
        errors.append(_rule_error(rule, where, kind, _rule_message(rule, activation)))


def _map_key(item: Any, keys: tuple[str, ...]) -> Any:
    return tuple(json.dumps(item.get(k)) for k in keys) if isinstance(item, dict) else None


def _child(at: _At, value: Any, cel: Any, old: Any, path: str) -> _At:
    same = _deep_equal(value, old) if old is not _ABSENT else at.ratchet
    return _At(value, cel, old, path, same)


def _validate_rules(node: RuleNode, at: _At, errors: list[FieldError]) -> None:
    """Validator.validate: the node's rules, then its properties', items' and map values'.

    Old values follow the new by field name (an object or a granular/atomic map: validation.go
    MapIsCorrelatable) and, in a list, only by the keys of an `x-kubernetes-list-type: map`
    (makeMapList); a node without an old value is ratcheted as its nearest correlated
    ancestor (ratchetingOptions.shouldRatchetError).
    """
    value = at.value
    if value is None:
        return
    if node.rules:
        _evaluate_rules(node, at, errors)
    if isinstance(value, dict):
        old_map = at.old if isinstance(at.old, dict) else {}
        for key, child in value.items():
            sub = node.properties.get(key)
            where = f"{at.path}.{key}" if at.path else key
            if sub is None and node.additional is not None:
                sub, where = node.additional, f"{at.path}[{key}]"
            if sub is not None:
                cel = None if at.cel is None else dict.__getitem__(at.cel, key)
                _validate_rules(
                    sub, _child(at, child, cel, old_map.get(key, _ABSENT), where), errors
                )
    elif isinstance(value, list) and node.items is not None:
        keys = tuple(node.raw.get("x-kubernetes-list-map-keys") or ())
        olds: dict[Any, Any] = {}
        if node.raw.get("x-kubernetes-list-type") == "map" and isinstance(at.old, list):
            olds = {_map_key(item, keys): item for item in at.old}
        for i, child in enumerate(value):
            old = olds.get(_map_key(child, keys), _ABSENT) if olds else _ABSENT
            cel = None if at.cel is None else at.cel[i]
            _validate_rules(node.items, _child(at, child, cel, old, f"{at.path}[{i}]"), errors)


def rule_errors(schema: dict, obj: dict, old: dict | None) -> list[FieldError]:
    """The x-kubernetes-validations errors of a custom resource (its defaulted copy).

    Each value is converted to CEL once, at the first node whose rules read it (a node
    below shares its parent's); an old value only where a transition rule reads it.
    """
    tree = rule_tree(schema)
    if tree is None:
        return []
    new = json.loads(json.dumps(obj))
    default_custom(schema, new)
    previous: Any = _ABSENT
    if old is not None:
        previous = json.loads(json.dumps(old))
        default_custom(schema, previous)
    errors: list[FieldError] = []
    root = _At(new, None, previous, "", _deep_equal(new, previous))
    _validate_rules(tree, root, errors)
    return errors


# ---------------------------------------------------------------- the request flow


@dataclasses.dataclass
class Request:
    """What admission needs to know of one write request."""

    operation: str  # "CREATE" or "UPDATE"
    body: str  # "object" (POST, PUT), "merge" (merge patch result) or "apply"
    field_validation: str = ""
    subresource: str = ""
    username: str | None = None


def deny_service_external_ips(plural: str, sub: str, obj: dict, old: dict | None) -> None:
    """DenyServiceExternalIPs, which the control plane's kubeadm config enables.

    kubernetes plugin/pkg/admission/network/denyserviceexternalips/admission.go: on create
    and update of a Service (not a subresource), externalIPs that are not all in the old
    object are refused with admission.NewForbidden (CVE-2020-8554: a Service's external IP
    takes over traffic to that address cluster-wide).
    """
    if plural != "services" or sub:
        return
    new_ips = (obj.get("spec") or {}).get("externalIPs") or []
    old_ips = set(((old or {}).get("spec") or {}).get("externalIPs") or [])
    if all(ip in old_ips for ip in new_ips):
        return
    name = obj["metadata"].get("name", "")
    raise _api_error(
        403,
        "Forbidden",
        f"services {go_quote(name)} is forbidden: Use of external IPs is denied by admission "
        "control",
        {"name": name, "kind": "services"},
    )


# ---------------------------------------------------------------- Job status (batch/v1)
#
# kube-apiserver checks a write of jobs/status beyond the schema: jobStatusStrategy.
# ValidateUpdate (pkg/registry/batch/job/strategy.go) calls ValidateJobUpdateStatus
# (pkg/apis/batch/validation/validation.go: validateJobStatus, then ValidateJobStatusUpdate)
# with the options getStatusValidationOptions gives. Read in kubernetes/kubernetes (the
# stored validation.go with all 23 JobStatusValidationOptions; strategy.go's JobManagedBy
# branch): JobManagedBy is GA and locked on since 1.35 (pkg/features/kube_features.go
# "remove in 1.38"), so 1.36 takes that branch: each rule is checked only when a field it
# reads changed, so a status already wrong does not block unrelated writes. The rules about
# SuccessCriteriaMet's scope (NonIndexed, no successPolicy) are off there
# (AllowForSuccessCriteriaMetInExtendedScope). Two later fixes in the options: a finished
# Job that is suspended with zero completions needs no startTime (kubernetes#132144), and
# resuming (Suspended True -> False) may set a new startTime (kubernetes#134769, 1.35 and
# backports). Messages are upstream's; each error is one FieldError, in upstream's order.

_JOB_TERMINAL = ("Failed", "Complete", "FailureTarget")  # RejectDisablingTerminalCondition
_NEGATIVE = "must be greater than or equal to 0"  # apimachinery validation isNegativeErrorMsg


def _job_true(job: dict, kind: str) -> bool:
    """IsConditionTrue(job.Status.Conditions, kind)."""
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _job_condition(job: dict, kind: str, status: str) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == status for c in conditions)


def _job_time(value: Any) -> float | None:
    """A *metav1.Time as seconds (None when unset); JSON holds RFC 3339, whole seconds."""
    if not isinstance(value, str):
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _go_time(value: str) -> GoText:
    """metav1.Time's String() (time.Time's), as the server, on UTC, prints it."""
    when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return GoText(when.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC"))


def _go_uids(uids: Any) -> str:
    """%#v of a []types.UID decoded from JSON: nil when absent."""
    if uids is None:
        return "[]types.UID(nil)"
    return "[]types.UID{" + ", ".join(go_quote(u) for u in uids) + "}"


def _index_interval(text: str, completions: int) -> tuple[int, int]:
    """parseIndexInterval: "x" or "x-y", each below `completions`, x < y; ValueError else."""
    limits = text.split("-")
    if len(limits) > 2:
        raise ValueError(
            f"the fragment {go_quote(text)} violates the requirement that an index interval "
            "can have at most two parts separated by '-'"
        )
    bounds = []
    for limit in limits:
        if not re.fullmatch(r"[+-]?[0-9]+", limit):  # strconv.Atoi
            raise ValueError(f"cannot convert string to integer for index: {go_quote(limit)}")
        if int(limit) >= completions:
            raise ValueError(f"too large index: {go_quote(limit)}")
        bounds.append(int(limit))
    if len(bounds) == 2 and bounds[0] >= bounds[1]:
        raise ValueError(f"non-increasing order, previous: {bounds[0]}, current: {bounds[1]}")
    return bounds[0], bounds[-1]


def _indexes(text: str, completions: int) -> list[tuple[int, int]]:
    """Intervals of validateIndexesFormat, in increasing order; ValueError else."""
    intervals: list[tuple[int, int]] = []
    for part in text.split(",") if text else []:
        x, y = _index_interval(part, completions)
        if intervals and intervals[-1][1] >= x:
            raise ValueError(f"non-increasing order, previous: {intervals[-1][1]}, current: {x}")
        intervals.append((x, y))
    return intervals


def _overlap(completed: str, failed: str, completions: int) -> str | None:
    """validateFailedIndexesNotOverlapCompleted: the first index in both (unparsable skipped)."""

    def parsed(text: str) -> list[tuple[int, int]]:
        out = []
        for part in text.split(",") if text else []:
            try:
                out.append(_index_interval(part, completions))
            except ValueError:
                continue
        return out

    done, lost = parsed(completed), parsed(failed)
    i = j = 0
    while i < len(done) and j < len(lost):
        (cx, cy), (fx, fy) = done[i], lost[j]
        if cx <= fy and fx <= cy:
            return f"failedIndexes and completedIndexes overlap at index: {max(cx, fx)}"
        if cx <= fx:
            i += 1
        else:
            j += 1
    return None


def _uncounted(status: dict) -> Any:
    """UncountedTerminatedPods as apiequality.Semantic compares it (nil slice == empty)."""
    pods = status.get("uncountedTerminatedPods")
    if pods is None:
        return None
    return (pods.get("succeeded") or [], pods.get("failed") or [])


def job_status_options(new: dict, old: dict) -> dict[str, bool]:
    """Which rules this write is checked for (getStatusValidationOptions, JobManagedBy)."""
    ns, os_ = new.get("status") or {}, old.get("status") or {}
    spec = new.get("spec") or {}

    def changed(kind: str) -> bool:
        return _job_true(old, kind) != _job_true(new, kind)

    def moved(key: str, default: Any = None) -> bool:
        return ns.get(key, default) != os_.get(key, default)

    def time_moved(key: str) -> bool:
        return _job_time(ns.get(key)) != _job_time(os_.get(key))

    finished = _job_true(new, "Complete") or _job_true(new, "Failed")
    was_finished = _job_true(old, "Complete") or _job_true(old, "Failed")
    finished_changed = finished != was_finished
    completed, failed_indexes = moved("completedIndexes", ""), moved("failedIndexes")
    start, completion = time_moved("startTime"), time_moved("completionTime")
    zero_suspended = spec.get("suspend") is True and spec.get("completions") == 0
    resuming = _job_condition(old, "Suspended", "True") and _job_condition(
        new, "Suspended", "False"
    )
    indexed = spec.get("completionMode") == "Indexed"
    return {
        "decreasing_succeeded": not indexed or spec.get("completions") != spec.get("parallelism"),
        "decreasing_failed": True,
        "disabling_terminal": True,
        "invalid_completed_indexes": completed,
        "invalid_failed_indexes": failed_indexes,
        "completed_indexes_non_indexed": completed,
        "failed_indexes_no_limit": failed_indexes,
        "failed_overlapping_completed": failed_indexes or completed,
        "failed_without_failure_target": changed("Failed") or failed_indexes,
        "complete_without_success_criteria": changed("Complete") or changed("SuccessCriteriaMet"),
        "finished_with_active": finished_changed or moved("active", 0),
        "finished_without_start": (finished_changed or start) and not zero_suspended,
        "finished_with_uncounted": finished_changed or _uncounted(ns) != _uncounted(os_),
        "start_time_update_unsuspended": start and not resuming,
        "completion_before_start": start or completion,
        "mutating_completion": True,
        "not_complete_with_completion": changed("Complete") or completion,
        "complete_without_completion": changed("Complete") or completion,
        "complete_with_failed": changed("Complete") or changed("Failed"),
        "complete_with_failure_target": changed("Complete") or changed("FailureTarget"),
        "more_ready_than_active": moved("ready") or moved("active", 0),
        "finished_with_terminating": finished_changed or moved("terminating"),
    }


@dataclasses.dataclass
class _JobView:
    """What validateJobStatus reads of one Job (a JSON object as the Go types decode it)."""

    job: dict

    def __post_init__(self) -> None:
        self.status: dict = self.job.get("status") or {}
        self.spec: dict = self.job.get("spec") or {}
        self.complete, self.failed = _job_true(self.job, "Complete"), _job_true(self.job, "Failed")
        self.target = _job_true(self.job, "FailureTarget")
        self.met = _job_true(self.job, "SuccessCriteriaMet")
        self.finished = self.complete or self.failed
        self.start, self.completion = (
            self.status.get("startTime"),
            self.status.get("completionTime"),
        )
        self.active: int = self.status.get("active") or 0
        self.completions: int | None = self.spec.get("completions")
        self.completed: str = self.status.get("completedIndexes") or ""
        self.failed_indexes: str | None = self.status.get("failedIndexes")
        self.limited = self.spec.get("backoffLimitPerIndex") is not None
        self.pods = self.status.get("uncountedTerminatedPods")


def _conditions(detail: str) -> FieldError:
    return FieldError("Invalid value", "status.conditions", "", detail, True)


def _invalid(key: str, value: Any, detail: str) -> FieldError:
    return FieldError("Invalid value", f"status.{key}", value, detail)


def _required(key: str, detail: str) -> FieldError:
    return FieldError("Required value", f"status.{key}", detail=detail)


def _format_error(key: str, indexes: str, completions: int) -> FieldError | None:
    """The error of validateIndexesFormat as validateJobStatus reports it."""
    try:
        _indexes(indexes, completions)
    except ValueError as e:
        return _invalid(key, indexes, f"error parsing {key}: {e}")
    return None


def _uncounted_error(v: _JobView) -> FieldError | None:
    pods = v.pods if isinstance(v.pods, dict) else {}
    if not (v.finished and (pods.get("succeeded") or pods.get("failed"))):
        return None
    shown = GoText(
        f"batch.UncountedTerminatedPods{{Succeeded:{_go_uids(pods.get('succeeded'))}, "
        f"Failed:{_go_uids(pods.get('failed'))}}}"
    )
    return _invalid(
        "uncountedTerminatedPods",
        shown,
        "uncountedTerminatedPods needs to be empty for finished job",
    )


def _completion_error(v: _JobView, detail: str) -> FieldError:
    """An Invalid status.completionTime, its value shown as Go prints a metav1.Time."""
    return _invalid("completionTime", _go_time(v.completion or ""), detail)


def _before_start(v: _JobView) -> bool:
    if v.start is None or v.completion is None:
        return False
    return (_job_time(v.completion) or 0.0) < (_job_time(v.start) or 0.0)


# validateJobStatus's option-gated rules, in its order: (option, the error or None).
_JOB_STATUS_RULES: tuple[tuple[str, Callable[[_JobView], FieldError | None]], ...] = (
    (
        "complete_with_failed",
        lambda v: (
            _conditions("cannot set Complete=True and Failed=true conditions")
            if v.complete and v.failed
            else None
        ),
    ),
    (
        "complete_with_failure_target",
        lambda v: (
            _conditions("cannot set Complete=True and FailureTarget=true conditions")
            if v.complete and v.target
            else None
        ),
    ),
    (
        "not_complete_with_completion",
        lambda v: (
            _completion_error(
                v, "cannot set completionTime when there is no Complete=True condition"
            )
            if v.completion is not None and not v.complete
            else None
        ),
    ),
    (
        "complete_without_completion",
        lambda v: (
            _required("completionTime", "completionTime is required for Complete jobs")
            if v.completion is None and v.complete
            else None
        ),
    ),
    (
        "completion_before_start",
        lambda v: (
            _completion_error(v, "completionTime cannot be set before startTime")
            if _before_start(v)
            else None
        ),
    ),
    (
        "failed_without_failure_target",
        lambda v: (
            _conditions(
                "cannot set Failed=True condition without the FailureTarget=true condition"
            )
            if v.failed and not v.target
            else None
        ),
    ),
    (
        "complete_without_success_criteria",
        lambda v: (
            _conditions(
                "cannot set Complete=True condition without the SuccessCriteriaMet=true condition"
            )
            if v.complete and not v.met
            else None
        ),
    ),
    (
        "finished_with_active",
        lambda v: (
            _invalid("active", v.active, "active>0 is invalid for finished job")
            if v.active > 0 and v.finished
            else None
        ),
    ),
    (
        "finished_without_start",
        lambda v: (
            _required("startTime", "startTime is required for finished job")
            if v.start is None and v.finished
            else None
        ),
    ),
    ("finished_with_uncounted", _uncounted_error),
    (
        "invalid_completed_indexes",
        lambda v: (
            _format_error("completedIndexes", v.completed, v.completions)
            if v.completions is not None
            else None
        ),
    ),
    (
        "invalid_failed_indexes",
        lambda v: (
            _format_error("failedIndexes", v.failed_indexes, v.completions)
            if v.completions is not None and v.limited and v.failed_indexes is not None
            else None
        ),
    ),
    (
        "completed_indexes_non_indexed",
        lambda v: (
            _invalid(
                "completedIndexes",
                v.completed,
                "cannot set non-empty completedIndexes when non-indexed completion mode",
            )
            if v.completed and v.spec.get("completionMode") != "Indexed"
            else None
        ),
    ),
    (
        "failed_indexes_no_limit",
        lambda v: (
            _invalid(
                "failedIndexes",
                v.failed_indexes,
                "cannot set non-null failedIndexes when backoffLimitPerIndex is null",
            )
            if not v.limited and v.failed_indexes is not None
            else None
        ),
    ),
    (
        "failed_overlapping_completed",
        lambda v: (
            _invalid("failedIndexes", v.failed_indexes, overlap)
            if v.completions is not None
            and v.failed_indexes is not None
            and (overlap := _overlap(v.completed, v.failed_indexes, v.completions))
            else None
        ),
    ),
    (
        "finished_with_terminating",
        lambda v: (
            _invalid(
                "terminating", v.status["terminating"], "terminating>0 is invalid for finished job"
            )
            if (v.status.get("terminating") or 0) > 0 and v.finished
            else None
        ),
    ),
    (
        "more_ready_than_active",
        lambda v: (
            _invalid("ready", v.status["ready"], "cannot set more ready pods than active")
            if v.status.get("ready") is not None and v.status["ready"] > v.active
            else None
        ),
    ),
)
# The rules no option turns off (with AllowForSuccessCriteriaMetInExtendedScope).
_JOB_STATUS_ALWAYS: tuple[Callable[[_JobView], FieldError | None], ...] = (
    lambda v: (
        _conditions("cannot set SuccessCriteriaMet=True and Failed=true conditions")
        if v.met and v.failed
        else None
    ),
    lambda v: (
        _conditions("cannot set SuccessCriteriaMet=True and FailureTarget=true conditions")
        if v.met and v.target
        else None
    ),
    lambda v: (
        _conditions(
            "cannot set Complete=True for Job with SuccessPolicy unless SuccessCriteriaMet=True"
        )
        if v.spec.get("successPolicy") is not None and not v.met and v.complete
        else None
    ),
)


def _job_fields(v: _JobView) -> list[FieldError]:
    """ValidateNonnegativeField of the counters; uncountedTerminatedPods' UIDs."""
    errors = [
        _invalid(key, v.status[key], _NEGATIVE)
        for key in ("active", "succeeded", "failed", "ready", "terminating")
        if isinstance(v.status.get(key), int) and v.status[key] < 0
    ]
    pods = v.pods if isinstance(v.pods, dict) else {}
    seen: set[str] = set()
    for key in ("succeeded", "failed"):
        for i, uid in enumerate(pods.get(key) or []):
            where = f"uncountedTerminatedPods.{key}[{i}]"
            if uid == "":
                errors.append(_invalid(where, uid, "must not be empty"))
            elif uid in seen:
                errors.append(FieldError("Duplicate value", f"status.{where}", uid))
            seen.add(uid)
    return errors


def _job_changes(new: dict, old: dict, opts: dict[str, bool]) -> list[FieldError]:
    """ValidateJobStatusUpdate's rules that compare the write with the stored Job."""
    ns, os_ = new.get("status") or {}, old.get("status") or {}
    errors = [
        _conditions(f"cannot disable the terminal {kind}=True condition")
        for kind in _JOB_TERMINAL
        if _job_true(old, kind) and not _job_true(new, kind)
    ]
    errors += [
        _invalid(key, ns.get(key) or 0, f"cannot decrease the {key} counter")
        for key in ("failed", "succeeded")
        if opts[f"decreasing_{key}"] and (ns.get(key) or 0) < (os_.get(key) or 0)
    ]
    completion, was = ns.get("completionTime"), os_.get("completionTime")
    if completion is not None and was is not None and _job_time(completion) != _job_time(was):
        errors.append(
            _invalid("completionTime", _go_time(completion), "completionTime cannot be mutated")
        )
    started = os_.get("startTime")
    moved = _job_time(ns.get("startTime")) != _job_time(started)
    suspended = (new.get("spec") or {}).get("suspend") is True
    if opts["start_time_update_unsuspended"] and started is not None and moved and not suspended:
        errors.append(_required("startTime", "startTime cannot be removed for unsuspended job"))
    if _job_true(old, "SuccessCriteriaMet") and not _job_true(new, "SuccessCriteriaMet"):
        errors.append(_conditions("cannot disable the SuccessCriteriaMet=True condition"))
    if (
        _job_true(old, "Complete")
        and not _job_true(old, "SuccessCriteriaMet")
        and _job_true(new, "SuccessCriteriaMet")
    ):
        errors.append(
            _conditions(
                "cannot set SuccessCriteriaMet=True for Job already has Complete=true conditions"
            )
        )
    return errors


def job_status_update_errors(new: dict, old: dict) -> list[FieldError]:
    """ValidateJobStatusUpdate of a jobs/status write, in upstream's order.

    validateJobStatus (counters, UIDs, the option-gated rules, the ungated ones), then the
    rules that compare the write with the stored Job.
    """
    opts = job_status_options(new, old)
    view = _JobView(new)
    found = [rule(view) for key, rule in _JOB_STATUS_RULES if opts[key]]
    found += [rule(view) for rule in _JOB_STATUS_ALWAYS]
    errors = _job_fields(view) + [e for e in found if e is not None]
    return errors + _job_changes(new, old, opts)


class Admission:
    """Decoding, validation and validating admission for one fake API server."""

    def __init__(self) -> None:
        self.pod_security = PodSecurity()
        self.policies = ValidatingAdmissionPolicies()

    @property
    def audit(self) -> list[dict[str, str]]:
        """The PodSecurity audit annotations of each evaluated request."""
        return self.pod_security.audit

    @staticmethod
    def check_options(request: Request, verb: str) -> None:
        """ValidateCreateOptions/UpdateOptions/PatchOptions: fieldValidation's value."""
        if request.field_validation not in FIELD_VALIDATIONS:
            error = FieldError(
                "Unsupported value",
                "fieldValidation",
                request.field_validation,
                "supported values: " + ", ".join(go_quote(v) for v in FIELD_VALIDATIONS),
            )
            raise invalid("meta.k8s.io/v1", f"{verb}Options", "", [error])

    def decode(
        self, api_version: str, kind: str, obj: dict, request: Request, crd: dict | None
    ) -> list[str]:
        """Decode the body as the handler does; returns the warnings.

        Type errors are refused; unknown fields dropped (`obj` loses them), warned about or
        refused, as fieldValidation says.
        """
        if request.body == "apply":
            self._typed_patch(api_version, kind, obj, crd)
            return []
        if crd is not None:
            schema = crd_version_schema(crd, api_version.rpartition("/")[2])
            unknown = [f"unknown field {go_quote(field_path(p))}" for p in prune(schema, obj)]
            return self._strict(api_version, kind, obj, request, unknown, None)
        found = check_builtin(api_version, kind, obj)
        if found is None:
            return []
        if found.type_errors:
            path, value = min(found.type_errors, key=lambda t: _document_order(obj, t[0]))
            schema = builtin_schema(api_version, kind) or {}
            error = _go_decode_error(kind, schema, path, value)
            self._refuse_decoding(api_version, kind, obj, request, error)
        unknown = found.unknown_fields(obj)
        for path, key in found.unknown:
            _remove(obj, path, key)
        return self._strict(api_version, kind, obj, request, unknown, found)

    def _strict(
        self,
        api_version: str,
        kind: str,
        obj: dict,
        request: Request,
        unknown: list[str],
        _found: SchemaFindings | None,
    ) -> list[str]:
        if not unknown or request.field_validation == "Ignore":
            return []
        if request.field_validation == "Strict":
            self._refuse_decoding(
                api_version, kind, obj, request, "strict decoding error: " + ", ".join(unknown)
            )
        return unknown

    @staticmethod
    def _refuse_decoding(
        api_version: str, kind: str, obj: dict, request: Request, error: str
    ) -> None:
        if request.body == "merge":  # patch.go jsonPatcher: 422 with an empty kind
            raise invalid("", "", "", [FieldError("Invalid value", "patch", go_json(obj), error)])
        version = api_version.rpartition("/")[2]
        message = f"{kind} in version {go_quote(version)} cannot be handled as a {kind}: {error}"
        raise _api_error(400, "BadRequest", message)

    @staticmethod
    def _typed_patch(api_version: str, kind: str, obj: dict, crd: dict | None) -> None:
        if crd is not None:
            schema = crd_version_schema(crd, api_version.rpartition("/")[2]) or {}
            body = {k: v for k, v in obj.items() if k != "metadata"}
            errors = []
            meta = obj.get("metadata")
            if isinstance(meta, dict):
                undeclared = [k for k in meta if k not in _object_meta_fields()]
                errors = [
                    (f".metadata.{k}", "field not declared in schema") for k in undeclared[:1]
                ]
                errors += typed_patch_errors(schema, body, crd_node)
        else:
            schema = builtin_schema(api_version, kind)
            if schema is None:
                return
            errors = typed_patch_errors(schema, obj, builtin_node)
        if errors:
            meta = obj.get("metadata") or {}
            group, _, version = api_version.rpartition("/")
            where = f"{meta.get('namespace', '')}/{meta.get('name', '')}; "
            where += f"{group}/{version}, Kind={kind}"
            message = f"failed to create typed patch object ({where}): {smd_message(errors)}"
            raise _api_error(500, "", message)

    @staticmethod
    def validate(
        api_version: str,
        kind: str,
        obj: dict,
        name: str,
        crd: dict | None,
        old: dict | None = None,
        subresource: str = "",
    ) -> None:
        """The object's validation (the registry strategy's Validate/ValidateUpdate): 422.

        A custom resource's x-kubernetes-validations run after its schema's checks unless
        one of those blocks them (strategy.go hasBlockingErr), with `old` the stored object
        on an update (None on create).
        """
        if crd is not None:
            schema = crd_version_schema(crd, api_version.rpartition("/")[2]) or {}
            errors = validate_custom(schema, obj, [])
            if rule_tree(schema) is not None:
                if any(e.type in _BLOCKING for e in errors):
                    errors.append(FieldError("Invalid value", _NIL_PATH, "null", _NOT_CHECKED))
                else:
                    errors += rule_errors(schema, obj, old)
        else:
            from fakes.kube_enums import enum_errors  # it imports this module

            found = check_builtin(api_version, kind, obj)
            errors = found.required if found is not None else []
            if not subresource:  # the enums kubernetes-validate's schemas lack
                errors = errors + enum_errors(api_version, kind, obj)
            if kind == "CustomResourceDefinition" and api_version == "apiextensions.k8s.io/v1":
                errors = errors + crd_errors(obj)
            if (api_version, kind, subresource) == ("batch/v1", "Job", "status") and old:
                errors = errors + job_status_update_errors(obj, old)
            if (api_version, kind, subresource) == ("v1", "Pod", ""):
                from fakes.kube_pod_annotations import mirror_errors  # it imports this module

                errors = errors + mirror_errors(obj, old)
        if errors:
            raise invalid(api_version, kind, name, errors)


# ---------------------------------------------------------------- ValidatingAdmissionPolicy

VAP_GV = "admissionregistration.k8s.io/v1"
VAP_PLURAL, VAP_BINDING_PLURAL = "validatingadmissionpolicies", "validatingadmissionpolicybindings"
_VAP_FIELDS = {"failurePolicy", "matchConstraints", "matchConditions", "variables", "validations"}
_RULE_FIELDS = {"apiGroups", "apiVersions", "operations", "resources", "scope"}


def _rule_matches(rule: dict, group: str, version: str, operation: str, resource: str) -> bool:
    """A RuleWithOperations (k8s.io/apiserver pkg/admission/plugin/webhook/predicates/rules)."""
    unknown = set(rule) - _RULE_FIELDS
    if unknown or rule.get("resourceNames"):
        raise NotImplementedError(f"the fake does not evaluate rule fields {sorted(unknown)}")

    def has(values: list, value: str) -> bool:
        return "*" in values or value in values

    main, _, sub = resource.partition("/")
    resources = rule.get("resources") or []
    return (
        has(rule.get("operations") or [], operation)
        and has(rule.get("apiGroups") or [], group)
        and has(rule.get("apiVersions") or [], version)
        and (
            resource in resources
            or "*/*" in resources
            or (not sub and "*" in resources)
            or (bool(sub) and f"*/{sub}" in resources)
            or (bool(sub) and f"{main}/*" in resources)
        )
    )


def _matches(constraints: dict, group: str, version: str, operation: str, resource: str) -> bool:
    """The policy's matchConstraints or a binding's matchResources (rules less excluded).

    Selectors are not evaluated: a non-empty namespaceSelector or objectSelector is refused
    (NotImplementedError), so a policy never silently applies wider than it says.
    """
    for field in ("namespaceSelector", "objectSelector"):
        if constraints.get(field):
            raise NotImplementedError(f"the fake does not evaluate {field}")
    rules = constraints.get("resourceRules") or []
    excluded = constraints.get("excludeResourceRules") or []
    return any(_rule_matches(r, group, version, operation, resource) for r in rules) and not any(
        _rule_matches(r, group, version, operation, resource) for r in excluded
    )


# CEL as kube-apiserver 1.36 evaluates a policy (cel-go with the Kubernetes base environment,
# k8s.io/apiserver pkg/cel/environment/base.go), on cel-python 0.5.0. Where cel-python
# answers otherwise the fake answers as cel-go (each rule below cites its source; probes in
# tests/functional/test_fake_cel.py), and what it cannot model is refused (_cel_refusal).
# What the policies use (charms/kubernetes-control-plane/src/admission_policies.py): `has`,
# `size`, `string`, `in`, `==`/`!=`, `all`, `exists`, `startsWith`, `endsWith`, `matches`
# (RE2 in both: cel-python calls google-re2), `+`, `!`, `&&`/`||` (both absorb an error on
# the side the other decides, langdef "Logical Operators"), the ternary and indexing.
_CEL_FUNCTIONS = frozenset({"has", "size", "string"})
_CEL_METHODS = frozenset(
    {"all", "exists", "exists_one", "filter", "map", "size"}
    | {"contains", "startsWith", "endsWith", "matches"}
)


def _cel_refusal(tree: Any) -> str:
    """Why the fake will not evaluate the parsed expression `tree`; '' when it may.

    A function cel-python lacks (Kubernetes' libraries: lists, regex `find`, url, quantity,
    authz, ip/cidr, format, semver, ext.Strings' `split`, `lowerAscii`...; cel-go's
    optional types) fails there with an evaluation error that failurePolicy Ignore would
    swallow; a function it has but that was not checked against cel-go here may answer
    otherwise. Either way a policy would pass this fake and not kube-apiserver.
    """
    for node in tree.iter_subtrees():
        if node.data in ("dot_ident_arg", "dot_ident", "member_object"):
            return f"{node.data} (a leading '.' name or a message literal)"
        if node.data == "ident_arg":
            name = node.children[0].value
            if name not in _CEL_FUNCTIONS:
                return f"the function {name}()"
            if name == "has" and _has_select(node) is None:
                # cel-go parser/macro.go MakeHas: "invalid argument to has() macro"
                return "has() of anything but a field selection"
        if node.data == "member_dot_arg":
            name = node.children[1].value
            args = node.children[2].children if len(node.children) > 2 and node.children[2] else []
            if name not in _CEL_METHODS or (name == "map" and len(args) != 2):
                return f"the method .{name}() with {len(args)} arguments"
    return ""


def _has_select(ident_arg: Any) -> Any:
    """The `e.f` (member_dot) node of `has(e.f)`, or None when the argument is not one."""
    exprlist = ident_arg.children[1] if len(ident_arg.children) == 2 else None
    if exprlist is None or len(exprlist.children) != 1:
        return None
    node = exprlist.children[0]
    while node.data != "member_dot" and len(node.children) == 1:
        node = node.children[0]
        if not hasattr(node, "data"):
            return None
    return node if node.data == "member_dot" else None


def _cel_kind(value: Any) -> str:
    """The CEL type of a cel-python value, numbers as one kind (`num`)."""
    from celpy import celtypes

    if isinstance(value, celtypes.BoolType):  # an int in Python: before the numbers
        return "bool"
    if isinstance(value, (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)):
        return "num"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
    if value is None or isinstance(value, celtypes.NullType):
        return "null_type"
    if isinstance(value, celtypes.ListType):
        return "list"
    if isinstance(value, celtypes.MapType):
        return "map"
    return type(value).__name__


def _cel_equal(left: Any, right: Any) -> bool:
    """CEL's runtime equality: heterogeneous, numbers on one number line.

    cel-spec langdef.md "Equality": values of different types are unequal (not an error),
    int, uint and double compare as numbers ("Numbers"), lists and maps element by element.
    cel-python 0.5.0 errs ("no matching overload") on `'a' == 1`, `1 == 1.0` and on lists or
    maps whose elements differ in type.
    """
    kind = _cel_kind(left)
    if kind != _cel_kind(right):
        return False
    if kind == "list":
        return len(left) == len(right) and all(map(_cel_equal, left, right))
    if kind == "map":
        if len(left) != len(right):
            return False
        for key, value in left.items():
            other = [k for k in right if _cel_equal(key, k)]
            if not other or not _cel_equal(value, right[other[0]]):
                return False
        return True
    return bool(left == right) if kind != "num" else _number(left) == _number(right)


def _number(value: Any) -> int | float:
    """A CEL int, uint or double as Python compares them exactly (float == int is exact)."""
    return float(value) if isinstance(value, float) else int(value)


def _cel_in(item: Any, container: Any) -> Any:
    """`item in container`: a list's element or a map's key, by CEL equality.

    langdef.md "Lists and Maps": `in` on a list is equality with an element; cel-go's map
    lookup of a number finds its key of any numeric type. cel-python errs on `1 in ['a']`.
    """
    from celpy import celtypes

    if isinstance(container, celtypes.ListType):
        return celtypes.BoolType(any(_cel_equal(item, e) for e in container))
    if isinstance(container, celtypes.MapType):
        if isinstance(item, str):  # JSON maps: string keys, found by hash
            return celtypes.BoolType(item in container)
        return celtypes.BoolType(any(_cel_equal(item, k) for k in container))
    raise TypeError(f"no such overload: {_cel_kind(item)} in {_cel_kind(container)}")


def _cel_strict(function: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """An operator whose error operand is its answer.

    cel-go interpreter/interpretable.go evalEq, evalNe and evalBinary; cel-python's own
    operators do the same (evaluation.py `boolean`), the fake's equality and `in` did not.
    """
    from celpy.evaluation import CELEvalError

    def applied(left: Any, right: Any) -> Any:
        for operand in (left, right):
            if isinstance(operand, CELEvalError):
                return operand
        return function(left, right)

    return applied


def _cel_logical(decides: bool) -> Callable[[Any, Any], Any]:
    """`&&` (`decides` False) or `||` (True) as cel-go's.

    interpreter/interpretable.go evalAnd, evalOr: the deciding value on either side is the
    answer; an error only when no side decides, the left one first. cel-python answers two
    errors with its own `no matching overload` error, or fails formatting it (its repr of
    some trees raises IndexError).
    """
    from celpy import celtypes
    from celpy.evaluation import CELEvalError

    def applied(left: Any, right: Any) -> Any:
        sides = (left, right)
        if any(isinstance(v, celtypes.BoolType) and bool(v) == decides for v in sides):
            return celtypes.BoolType(decides)
        if all(isinstance(v, celtypes.BoolType) for v in sides):
            return celtypes.BoolType(not decides)
        errors = [v for v in sides if isinstance(v, CELEvalError)]
        return errors[0] if errors else CELEvalError("no such overload")

    return applied


def _cel_order(base: Callable[[Any, Any], Any], op: Callable[[Any, Any], bool]) -> Callable:
    """An ordering that compares an int, uint and double across their types.

    cel-go with CrossTypeNumericComparisons (Kubernetes' base environment since 1.28,
    base.go; langdef.md "Ordering"); cel-python errs on `1 < 1.5`. Anything else is
    cel-python's.
    """
    from celpy import celtypes

    def order(left: Any, right: Any) -> Any:
        if _cel_kind(left) == _cel_kind(right) == "num" and type(left) is not type(right):
            return celtypes.BoolType(op(_number(left), _number(right)))
        return base(left, right)

    return order


def _cel_string(value: Any) -> Any:
    """`string(value)` per cel-spec langdef.md "string" and cel-go common/types.

    bool is "true"/"false" (bool.go strconv.FormatBool; cel-python: 'True'); a double is
    Go's %g (double.go; conformance conversions.textproto string/double: "123.456",
    "-0.0045"); bytes must be UTF-8; a map, list or null has no conversion: "type conversion
    error" (cel-python: its Python repr, 'None' for null).
    """
    from celpy import celtypes
    from celpy.evaluation import CELEvalError

    kind = _cel_kind(value)
    if kind == "string":
        return value
    if kind == "bool":
        return celtypes.StringType("true" if value else "false")
    if isinstance(value, celtypes.DoubleType):
        return celtypes.StringType(_go_g(float(value)))
    if kind == "num":
        return celtypes.StringType(str(int(value)))
    if kind == "bytes":
        try:
            return celtypes.StringType(bytes(value).decode("utf-8"))
        except UnicodeDecodeError:
            return CELEvalError("invalid UTF-8", ValueError, None)
    return CELEvalError(f"type conversion error from '{kind}' to 'string'", TypeError, None)


def _go_g(number: float) -> str:
    """Go's fmt %g of a float64 (strconv/ftoa.go).

    The shortest digits that read back, in exponent form when the exponent is below -4 or
    at least the precision (6, or the digit count when that is smaller and the number has
    no fraction).
    """
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "-0" if math.copysign(1, number) < 0 else "0"
    sign = "-" if number < 0 else ""
    # Python's repr, like Go's precision -1, is the shortest string that reads back.
    _, digits, exponent = decimal.Decimal(repr(abs(number))).normalize().as_tuple()
    figures = "".join(map(str, digits))
    point = len(figures) + int(exponent)  # the digits before the decimal point
    precision = len(figures) if len(figures) < 6 and len(figures) >= point else 6
    if not -4 <= point - 1 < precision:
        fraction = f".{figures[1:]}" if len(figures) > 1 else ""
        return f"{sign}{figures[0]}{fraction}e{point - 1:+03d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{figures}"
    if point >= len(figures):
        return f"{sign}{figures}{'0' * (point - len(figures))}"
    return f"{sign}{figures[:point]}.{figures[point:]}"


@functools.cache
def _cel_runtime() -> tuple[Any, dict[str, Any]]:
    """The cel-python Environment whose `has()` is cel-go's, and the functions that differ."""
    import celpy
    import lark
    from celpy import celtypes, evaluation

    class Evaluator(evaluation.Evaluator):
        def macro_has_eval(self, exprlist: Any) -> Any:
            """`has(e.f)` as cel-go (interpreter/attributes.go refQualify, presence test).

            An error in `e` is the answer (cel-python: false, for `has(a.missing.f)` too),
            a map answers whether `f` is a key, a list is an error, anything else (null, a
            string) false: Kubernetes does not set EnableErrorOnBadPresenceTest.
            """
            select = _has_select(lark.Tree("ident_arg", ["has", exprlist]))
            operand = self.visit(select.children[0])
            if isinstance(operand, evaluation.CELEvalError):
                return operand
            if isinstance(operand, celtypes.MapType):
                return celtypes.BoolType(select.children[1].value in operand)
            if isinstance(operand, celtypes.ListType):
                return evaluation.CELEvalError("unsupported index type 'string' in list")
            return celtypes.BoolType(False)

    class Runner(celpy.InterpretedRunner):
        def evaluate(self, context: Any) -> Any:
            return Evaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)

    base = evaluation.base_functions
    functions = {
        "string": _cel_string,
        "_&&_": _cel_logical(False),
        "_||_": _cel_logical(True),
        "_==_": _cel_strict(lambda a, b: celtypes.BoolType(_cel_equal(a, b))),
        "_!=_": _cel_strict(lambda a, b: celtypes.BoolType(not _cel_equal(a, b))),
        "_in_": _cel_strict(_cel_in),
        **{
            name: _cel_order(base[name], op)
            for name, op in (
                ("_<_", operator.lt),
                ("_<=_", operator.le),
                ("_>_", operator.gt),
                ("_>=_", operator.ge),
            )
        },
    }
    return celpy.Environment(runner_class=Runner), functions


@functools.cache
def _cel_program(expression: str) -> Any:
    import celpy  # cel-python: imported only once a policy is evaluated

    # cel-python logs each step at DEBUG, and formatting a step whose value is an error
    # (`{}['app']` on the side of `||` or `&&` that CEL discards) raises IndexError in its
    # tree_dump (cel-python 0.5.0 celparser.py): a test's DEBUG handler (pytest's, craft_cli's)
    # made the server drop the request. Its records say nothing kube-apiserver would.
    logging.getLogger("celpy").setLevel(logging.WARNING)
    env, functions = _cel_runtime()
    try:
        tree = env.compile(expression)
    except celpy.CELParseError as e:
        # cel-go parses more (optional `.?`, `[?`): the fake cannot tell a policy
        # kube-apiserver refuses to create from one it evaluates.
        raise NotImplementedError(f"cel-python cannot parse {expression!r}: {e}") from e
    refusal = _cel_refusal(tree)
    if refusal:
        raise NotImplementedError(
            f"the fake's CEL does not model {refusal} in {expression!r} (cel-python 0.5.0 "
            "lacks it or was not checked against cel-go for it: model it in "
            "tests/fakes/kube_admission.py first)"
        )
    return env.program(tree, functions=functions)


def _cel(expression: str, activation: dict[str, Any]) -> tuple[Any, str]:
    """The value of `expression`, or (None, the evaluation error)."""
    import celpy

    program = _cel_program(expression)
    try:
        value = program.evaluate(activation)
    except celpy.CELEvalError as e:
        return None, str(e)
    if isinstance(value, celpy.CELEvalError):
        return None, str(value)
    return value, ""


class ValidatingAdmissionPolicies:
    """The ValidatingAdmissionPolicy plugin (admission chain, after PodSecurity), as 1.36.

    k8s.io/apiserver pkg/admission/plugin/policy/validating (plugin.go, dispatcher.go,
    validator.go) and pkg/admission/plugin/cel (activation, CreateAdmissionRequest):
    - every ValidatingAdmissionPolicy with a binding naming it (`spec.policyName`) is
      checked on each create, update, patch, apply and delete (CONNECT is not emulated);
      a DELETE sees `object` null and `oldObject` the stored object (pkg/registry/rest/
      delete.go AdmissionToValidateObjectDeleteFunc, after the store read it: a missing
      object is 404 first), each item of a deletecollection the same with the request's
      empty name (endpoints/handlers/delete.go DeleteCollection; a denial names it
      "Unknown", admission/errors.go extractResourceName); the request must match the
      policy's `matchConstraints` (resourceRules: operations, apiGroups, apiVersions,
      resources with `*`, `*/<sub>` and `<res>/*`; minus excludeResourceRules) and the
      binding's `matchResources` when set;
    - then `matchConditions` (all must be true, else the policy does not apply), then
      each of `validations`, which read `variables.<name>` (`_variables`: each evaluated
      at its first read, once a request; one that fails fails the validation reading it);
    - a validation that is not true denies with its `message` (else `failed expression:
      <expr>`) and its `reason` (default Invalid; the code follows: 403 Forbidden, 422
      Invalid, ...); an evaluation error is a denial under failurePolicy Fail (the default)
      and is ignored under Ignore;
    - the binding's validationActions: Deny refuses (the first denial, policies in name
      order), Warn adds a `Warning` header `Validation failed for ValidatingAdmissionPolicy
      '<p>' with binding '<b>': <message>`, Audit is not recorded;
    - the refusal is admission.NewForbidden's Status with the policy's reason and code:
      `<resource>[.<group>] "<name>" is forbidden: ValidatingAdmissionPolicy '<p>' with
      binding '<b>' denied request: <message>`, details name, group, kind (the resource)
      and one cause with the message after the colon.
    CEL is cel-python 0.5.0 made to answer as cel-go where they differ (`string()`,
    equality, `in`, cross-type ordering, `has()`: `_cel_runtime`); a function or syntax the
    fake does not model (Kubernetes' CEL libraries: `authorizer`, `quantity`, `url`,
    `isSorted`, `split`..., optional `?.`) is refused (NotImplementedError, `_cel_refusal`)
    rather than left to fail or pass by failurePolicy.
    `request.userInfo.extra` is always a map (empty when the user has none), as the typed
    request upstream; `namespaceObject` is the request's Namespace as CreateNamespaceObject
    makes it (`_namespace_object`), null for a cluster-scoped resource and for a Namespace
    itself; `params` and `authorizer` are null (a policy with paramKind or a binding with
    paramRef is refused: NotImplementedError).
    """

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def admit(
        self,
        objects: Callable[[str], list[dict]],
        user: Any,
        operation: str,
        target: Any,
        obj: dict | None,
        old: dict | None,
        name: str | None = None,
        namespace_of: Callable[[str], dict | None] | None = None,
        kind: tuple[str, str] | None = None,
        options: dict | None = None,
    ) -> list[str]:
        """Refuse the write as the first policy that denies it; the warnings of Warn.

        `target` is the server's parsed path (its gv, plural, kind and sub, namespace); `name`
        the request's when it is not the object's (a deletecollection's: empty);
        `namespace_of`: the stored Namespace of a name, or None (for `namespaceObject`);
        `kind`: (group/version, kind) of the object when it is not the resource's (a
        subresource's own kind: pods/eviction takes a policy/v1 Eviction, whose kind
        `request.kind` names: EvictionREST's GroupVersionKind, eviction.go); `options`: a
        DELETE's DeleteOptions, `request.options` (k8s.io/apiserver pkg/admission/plugin/
        cel/condition.go CreateAdmissionRequest: the operation's options; a write's
        Create/UpdateOptions are left out here, which no policy reads).
        """
        bindings = objects(f"/apis/{VAP_GV}/{VAP_BINDING_PLURAL}/")
        if not bindings:
            return []
        policies = {p["metadata"]["name"]: p for p in objects(f"/apis/{VAP_GV}/{VAP_PLURAL}/")}
        gv, plural, sub = target.gv, target.plural, target.sub
        group, _, version = gv.rpartition("/")
        kind_gv, kind_name = kind or (gv, target.kind)
        kind_group, _, kind_version = kind_gv.rpartition("/")
        resource = f"{plural}/{sub}" if sub else plural
        meta = (obj or old or {}).get("metadata") or {}
        request = {
            "kind": {"group": kind_group, "version": kind_version, "kind": kind_name},
            "resource": {"group": group, "version": version, "resource": plural},
            "subResource": sub,
            "name": meta.get("name", "") if name is None else name,
            "namespace": meta.get("namespace", ""),
            "operation": operation,
            "userInfo": {
                "username": user.name,
                "uid": user.uid,
                "groups": list(user.groups),
                "extra": {k: list(v) for k, v in user.extra.items()},
            },
            "dryRun": False,
            **({} if options is None else {"options": options}),
        }
        warnings: list[str] = []
        for binding in sorted(
            bindings, key=lambda b: (b["spec"]["policyName"], b["metadata"]["name"])
        ):
            policy = policies.get(binding["spec"]["policyName"])
            if policy is None:
                continue
            spec = policy["spec"]
            if set(spec) - _VAP_FIELDS or binding["spec"].get("paramRef") or spec.get("paramKind"):
                raise NotImplementedError(
                    f"the fake does not evaluate {sorted(set(spec) - _VAP_FIELDS)}"
                )
            if not _matches(
                spec.get("matchConstraints") or {}, group, version, operation, resource
            ):
                continue
            scope = binding["spec"].get("matchResources")
            if scope and not _matches(scope, group, version, operation, resource):
                continue
            namespace = functools.partial(_namespace_object, target, namespace_of)
            denial = self._evaluate(spec, _Inputs(request, obj, old, namespace))
            if denial is None:
                continue
            message, reason = denial
            names = f"'{policy['metadata']['name']}' with binding '{binding['metadata']['name']}'"
            actions = binding["spec"].get("validationActions") or []
            if "Warn" in actions:
                warnings.append(
                    f"Validation failed for ValidatingAdmissionPolicy {names}: {message}"
                )
            if "Deny" in actions:
                cause = f"ValidatingAdmissionPolicy {names} denied request: {message}"
                qualified = f"{plural}.{group}" if group else plural
                name = request["name"] or ("Unknown" if obj is None else "")
                subject = f"{qualified} {go_quote(name)}" if name else qualified
                code = {"Forbidden": 403, "Unauthorized": 401, "NotFound": 404, "Conflict": 409}
                raise _api_error(
                    code.get(reason, 422),
                    reason,
                    f"{subject} is forbidden: {cause}",
                    {
                        **{k: v for k, v in (("name", name), ("group", group)) if v},
                        "kind": plural,
                        "causes": [{"message": cause}],
                    },
                )
        return warnings

    @staticmethod
    def _evaluate(spec: dict, inputs: _Inputs) -> tuple[str, str] | None:
        """(message, reason) of the policy's denial of this request, or None."""
        import celpy

        true = celpy.celtypes.BoolType(True)
        fail = spec.get("failurePolicy", "Fail") == "Fail"
        try:
            for condition in spec.get("matchConditions") or []:
                if inputs.checked(condition["expression"]) != true:
                    return None
        except _EvalError as e:
            return (str(e), "Invalid") if fail else None
        inputs.declare({v["name"]: v["expression"] for v in spec.get("variables") or []})
        for validation in spec.get("validations") or []:
            expression = validation["expression"]
            try:
                if inputs.checked(expression) == true:
                    continue
            except _EvalError as e:
                if fail:
                    return str(e), "Invalid"
                continue
            message = (validation.get("message") or "").strip()
            reason = validation.get("reason") or "Invalid"
            return message or f"failed expression: {expression.strip()}", reason
        return None


# k8s.io/apiserver pkg/admission/plugin/cel CreateNamespaceObject: the metadata fields a
# policy sees of the request's Namespace (with its spec and status).
_NAMESPACE_META = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "finalizers",
)


def _namespace_object(
    target: Any, namespace_of: Callable[[str], dict | None] | None
) -> dict | None:
    """`namespaceObject` of a request, as kube-apiserver makes it.

    k8s.io/apiserver pkg/admission/plugin/policy/validating dispatcher.go: none for a
    cluster-scoped resource or a Namespace itself ("the namespace object has the namespace
    of itself"); else the request's Namespace, whose absence fails the request (the
    matcher's GetNamespace error, a NotFound from its lister).
    """
    name = target.namespace if target.namespaced else ""
    if not name or (target.gv, target.kind) == ("v1", "Namespace"):
        return None
    if namespace_of is None:
        raise NotImplementedError("the fake needs the stored Namespaces for namespaceObject")
    stored = namespace_of(name)
    if stored is None:
        raise _api_error(404, "NotFound", f'namespaces "{name}" not found')
    meta = stored.get("metadata") or {}
    return {
        "metadata": {k: meta[k] for k in _NAMESPACE_META if k in meta},
        **{k: stored[k] for k in ("spec", "status") if k in stored},
    }


class _EvalError(Exception):
    """An expression that could not be evaluated (the CEL filter's error)."""


@functools.cache
def _variables() -> type:
    """The type of a request's `variables`: each evaluated when an expression first reads it.

    k8s.io/apiserver v0.36.3 pkg/admission/plugin/cel: composition.go
    compositionContext.Variables makes `variables` a lazy map (pkg/cel/lazy/lazy.go
    MapValue), one a request (activation.go newActivation), whose resolveField runs a
    variable's expression at its first read and keeps the value, an error included;
    variableAccessor.Callback words a failure `composited variable "<name>" fails to
    evaluate: <error>`, the value the reading expression meets (its validation then fails,
    activation.go Evaluate). cel-python evaluates both sides of `||` and `&&` (cel-go stops
    at the side that decides): a variable only such an untaken side reads is evaluated
    here, with the same answer.
    """
    from celpy import celtypes
    from celpy.evaluation import CELEvalError

    class Variables(celtypes.MapType):
        def __init__(
            self, expressions: dict[str, str], value: Callable[[str], tuple[Any, str]]
        ) -> None:
            super().__init__()
            self._expressions = expressions
            self._value = value

        def __contains__(self, name: object) -> bool:
            return name in self._expressions

        def __missing__(self, name: str) -> Any:
            if name not in self._expressions:
                raise KeyError(name)
            value, error = self._value(self._expressions[name])
            if error:
                value = CELEvalError(
                    f"composited variable {go_quote(name)} fails to evaluate: {error}"
                )
            self[celtypes.StringType(name)] = value
            return value

    return Variables


# The names a policy's expression may read (pkg/admission/plugin/cel activation), and those
# that make it depend on more than the request's user.
_ROOTS = re.compile(r"\b(request|object|oldObject|params|namespaceObject|variables)\b")
_NOT_USER_ONLY = re.compile(
    r"\brequest\.(?!userInfo\b)|\b(object|oldObject|params|namespaceObject|variables|authorizer)\b"
)
_BY_USER: dict[tuple[str, str], tuple[Any, str]] = {}


class _Inputs:
    """One request's CEL inputs, each converted when an expression first reads it.

    An expression that reads nothing but `request.userInfo` has one value per user: it is
    remembered per (expression, user), since every write evaluates the matchConditions of
    every policy that matches its resource.
    """

    def __init__(
        self,
        request: dict,
        obj: dict | None,
        old: dict | None,
        namespace: Callable[[], dict | None] = lambda: None,
    ) -> None:
        self.raw: dict[str, Any] = {
            "request": request,
            "object": obj,
            "oldObject": old,
            "params": None,
        }
        self._namespace = namespace  # read only by an expression that names it
        self.converted: dict[str, Any] = {}
        self.variables: dict[Any, Any] = _variables()({}, self.value)
        self.user = json.dumps(request["userInfo"], sort_keys=True)

    def declare(self, expressions: dict[str, str]) -> None:
        """The policy's `variables` (name: expression), evaluated as expressions read them."""
        self.variables = _variables()(expressions, self.value)

    def value(self, expression: str) -> tuple[Any, str]:
        import celpy

        key = (expression, self.user)
        if key in _BY_USER:
            return _BY_USER[key]
        activation: dict[str, Any] = {}
        for name in set(_ROOTS.findall(expression)):
            if name == "variables":
                activation[name] = self.variables
                continue
            if name not in self.converted:
                if name == "namespaceObject":
                    self.raw[name] = self._namespace()
                self.converted[name] = celpy.json_to_cel(self.raw[name])
            activation[name] = self.converted[name]
        answer = _cel(expression, activation)
        if not _NOT_USER_ONLY.search(expression):
            _BY_USER[key] = answer
        return answer

    def checked(self, expression: str) -> Any:
        """The value of `expression`; _EvalError as the CEL filter words it when it fails."""
        value, error = self.value(expression)
        if error:
            raise _EvalError(f"expression '{expression}' resulted in error: {error}")
        return value
