"""The query options of a write (create, update, patch, delete), checked as kube-apiserver does.

k8s.io/apiserver pkg/endpoints/handlers/{create,update,patch,delete}.go validate the request's
`CreateOptions`, `UpdateOptions`, `PatchOptions` or `DeleteOptions` first and answer 422
`<Kind>.meta.k8s.io "" is invalid: ...` (k8s.io/apimachinery pkg/apis/meta/v1/validation/
validation.go, field errors worded by pkg/util/validation/field/errors.go):

- `dryRun` may only be `All` (`dryRun: Unsupported value: ["x"]: supported values: "All"`);
- `fieldValidation` may be empty, `Ignore`, `Strict` or `Warn`;
- `fieldManager` is at most 128 characters, and an apply patch needs one ("fieldManager:
  Required value: is required for apply patch");
- `force` is for apply patches only ("force: Forbidden: may not be specified for non-apply
  patch");
- `propagationPolicy` of a delete is `Foreground`, `Background` or `Orphan`.

A delete carries them in its `DeleteOptions` body as well (kubectl sends them so), an eviction
in the Eviction's `deleteOptions`. `dryRun=All` makes the fake compute the answer without
keeping anything (the store, the resourceVersion and the watch record are as before); unlike
the real server, what it answers carries the resourceVersion it would have had.
`fieldValidation` is checked but not applied: whether an unknown field is dropped, warned about
or refused is the validation's business.
"""

from __future__ import annotations

import json

from fakes.kube_discovery import RefusedError

APPLY_PATCH = "application/apply-patch+yaml"
OPTIONS_KIND = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions"}
FIELD_VALIDATION = ("", "Ignore", "Strict", "Warn")  # sets.NewString(...).List(): sorted
PROPAGATION = ("Foreground", "Background", "Orphan", "nil")
FIELD_MANAGER_MAX = 128


def _unsupported(field: str, value: object, allowed: tuple[str, ...]) -> str:
    shown = json.dumps(value) if not isinstance(value, str) else f'"{value}"'
    supported = ", ".join(f'"{v}"' for v in allowed)
    return f"{field}: Unsupported value: {shown}: supported values: {supported}"


def _errors(method: str, content_type: str, query: dict[str, str]) -> list[str]:
    errors = []
    manager = query.get("fieldManager", "")
    if method == "DELETE":
        policy = query.get("propagationPolicy")
        if policy is not None and policy not in PROPAGATION[:3]:
            errors.append(_unsupported("propagationPolicy", policy, PROPAGATION))
    if method == "PATCH":
        if content_type == APPLY_PATCH and not manager:
            errors.append("fieldManager: Required value: is required for apply patch")
        elif content_type != APPLY_PATCH and "force" in query:
            errors.append("force: Forbidden: may not be specified for non-apply patch")
    if method != "DELETE" and len(manager) > FIELD_MANAGER_MAX:
        errors.append(f"fieldManager: Too long: may not be more than {FIELD_MANAGER_MAX} bytes")
    if "dryRun" in query and query["dryRun"] != "All":
        errors.append(_unsupported("dryRun", [query["dryRun"]], ("All",)))
    validation = query.get("fieldValidation", "")
    if method != "DELETE" and validation not in FIELD_VALIDATION:
        errors.append(_unsupported("fieldValidation", validation, FIELD_VALIDATION))
    return errors


def check(method: str, content_type: str, query: dict[str, str]) -> None:
    """Refuse (422) a write whose options kube-apiserver would refuse."""
    errors = _errors(method, content_type, query)
    if not errors:
        return
    kind = OPTIONS_KIND.get(method, "DeleteOptions")
    text = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    causes = [
        {"reason": _reason(e), "message": e.split(": ", 1)[1], "field": e.split(":")[0]}
        for e in errors
    ]
    details = {"group": "meta.k8s.io", "kind": kind, "causes": causes}
    raise RefusedError(422, "Invalid", f'{kind}.meta.k8s.io "" is invalid: {text}', details)


def _reason(error: str) -> str:
    kind = error.split(": ", 2)[1]
    return {
        "Unsupported value": "FieldValueNotSupported",
        "Required value": "FieldValueRequired",
        "Forbidden": "FieldValueForbidden",
        "Too long": "FieldValueTooLong",
    }[kind]


def in_body(method: str, body: dict) -> dict[str, str]:
    """The options a delete's body (`DeleteOptions`, kind or not) or an Eviction carries."""
    if body.get("kind") == "Eviction":
        body = body.get("deleteOptions") or {}
    elif method != "DELETE":
        return {}
    options = {}
    if body.get("dryRun"):
        options["dryRun"] = body["dryRun"][-1]
    if body.get("propagationPolicy"):
        options["propagationPolicy"] = body["propagationPolicy"]
    return options
