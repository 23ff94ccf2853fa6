"""Strategic merge patch, as kube-apiserver 1.36 applies it to built-in kinds.

`PATCH` with `application/strategic-merge-patch+json` (what kubectl sends for `cordon`,
`taint`, `label`, `patch` on built-in kinds) merges maps as a JSON merge patch does, but a
list is merged or replaced as its Go field's struct tags say (k8s.io/api core/v1
types.go): `patchStrategy:"merge" patchMergeKey:"<key>"` merges the items by that key,
`patchStrategy:"merge"` alone merges a list of primitives as a set, and a list without
tags is replaced whole (k8s.io/apimachinery pkg/util/strategicpatch/patch.go
`mergeMap`, `mergeSlice`, `mergeSliceWithoutSpecialElements`). The lists here are those
of the kinds the charms and kubectl patch:

- every object's `metadata.finalizers` (merge, primitives) and `metadata.ownerReferences`
  (merge key `uid`), ObjectMeta in apimachinery pkg/apis/meta/v1 types.go;
- Node: `status.conditions` and `status.addresses` (merge key `type`), `spec.podCIDRs`
  (merge, primitives); `spec.taints` has no patch tags (`json:"taints,omitempty"
  protobuf:"bytes,5,opt,name=taints"`), so a taint patch replaces every taint;
- Pod (and the pod template of Deployment, DaemonSet, StatefulSet, ReplicaSet, Job,
  CronJob): `containers`, `initContainers`, `ephemeralContainers`, `volumes`,
  `imagePullSecrets` (merge key `name`), a container's `env` (`name`), `ports`
  (`containerPort`), `volumeMounts` (`mountPath`), `volumeDevices` (`devicePath`);
  `tolerations` has no patch tags; Pod `status.conditions` (`type`).

Directives (strategicpatch/patch.go): `$patch: replace` in a map or list item replaces it,
`$patch: delete` in a list item removes the item with that key (in a map, the map),
`$deleteFromPrimitiveList/<field>` removes values from a merged primitive list,
`$retainKeys` keeps only the keys it names, `$setElementOrder/<field>` orders the merged
list (here: the items it names in its order, then the others in their order). An item of
a keyed list without its key fails the patch as the server does (`mergepatch` error
"map: ... does not contain declared merge key: <key>", which the patch handler answers
500, not being one of the errors `interpretStrategicMergePatchError` maps).

Custom resources take no strategic merge patch: the CRD handler accepts only
`application/json-patch+json`, `application/merge-patch+json` and
`application/apply-patch+yaml` (apiextensions-apiserver customresource_handler.go), and
the answer is 415 UnsupportedMediaType (endpoints/handlers/negotiation errors.go).
"""

from __future__ import annotations

from typing import Any

# A list's strategy: a merge key, PRIMITIVES (merge a list of primitives as a set), or
# absent (replace).
PRIMITIVES = ""

_META = {
    ("metadata", "finalizers"): PRIMITIVES,
    ("metadata", "ownerReferences"): "uid",
}
_CONTAINER = {
    ("env",): "name",
    ("ports",): "containerPort",
    ("volumeMounts",): "mountPath",
    ("volumeDevices",): "devicePath",
}
_POD_SPEC: dict[tuple[str, ...], str] = {
    ("volumes",): "name",
    ("imagePullSecrets",): "name",
}
for _field in ("containers", "initContainers", "ephemeralContainers"):
    _POD_SPEC[(_field,)] = "name"
    _POD_SPEC.update({(_field, "*", *path): key for path, key in _CONTAINER.items()})


def _under(prefix: tuple[str, ...], lists: dict[tuple[str, ...], str]) -> dict:
    return {(*prefix, *path): key for path, key in lists.items()}


_TEMPLATE = _under(("spec", "template", "spec"), _POD_SPEC)
LISTS: dict[str, dict[tuple[str, ...], str]] = {
    "Node": {
        ("status", "conditions"): "type",
        ("status", "addresses"): "type",
        ("spec", "podCIDRs"): PRIMITIVES,
    },
    "Pod": {**_under(("spec",), _POD_SPEC), ("status", "conditions"): "type"},
    "Deployment": _TEMPLATE,
    "DaemonSet": _TEMPLATE,
    "StatefulSet": _TEMPLATE,
    "ReplicaSet": _TEMPLATE,
    "Job": _TEMPLATE,
    "CronJob": _under(("spec", "jobTemplate", "spec", "template", "spec"), _POD_SPEC),
}

BUILTIN_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)  # endpoints/installer.go registerResourceHandlers, PATCH (CBOR apply: feature gate off)
CUSTOM_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)  # apiextensions-apiserver customresource_handler.go serveResource, "patch"


class PatchError(Exception):
    """The patch cannot be applied: `status` and `reason` as the server answers."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def unsupported(accepted: tuple[str, ...]) -> PatchError:
    """negotiation.NewUnsupportedMediaTypeError: 415 with the accepted types."""
    return PatchError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def strategic_merge(kind: str, original: dict, patch: dict) -> dict:
    """`original` with `patch` applied as a strategic merge patch of a `kind` object."""
    lists = {**_META, **LISTS.get(kind, {})}
    merged = _merge_map(original, patch, (), lists)
    return merged if merged is not None else {}


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items() if not str(k).startswith("$")}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _merge_map(original: Any, patch: dict, path: tuple[str, ...], lists: dict) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return _copy(patch)
    if directive == "delete":
        return None
    if directive is not None and directive != "merge":  # patch.go errBadPatchTypeFmt
        raise PatchError(
            500,
            "InternalError",
            f"Internal error occurred: unknown patch type: {directive} in map: {_go_map(patch)}",
        )
    result = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _merge_map(result.get(key), value, (*path, key), lists)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and (*path, key) in lists:
            result[key] = _merge_list(result.get(key), value, (*path, key), lists)
        else:
            result[key] = _copy(value)
    return _list_directives(result, patch, path, lists)


def _list_directives(result: dict, patch: dict, path: tuple[str, ...], lists: dict) -> dict:
    """`$deleteFromPrimitiveList/<f>`, `$setElementOrder/<f>` and `$retainKeys` of a map."""
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
        elif key.startswith("$setElementOrder/"):
            field = key.split("/", 1)[1]
            result[field] = _ordered(result.get(field) or [], value, lists.get((*path, field)))
    if "$retainKeys" in patch:
        result = {k: v for k, v in result.items() if k in patch["$retainKeys"]}
    return result


def _merge_list(original: Any, patch: list, path: tuple[str, ...], lists: dict) -> list:
    key = lists[path]
    items = list(original) if isinstance(original, list) else []
    if key == PRIMITIVES:
        return items + [v for v in patch if v not in items]
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [_copy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    item_path = (*path, "*")
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(
                500,
                "InternalError",
                f"Internal error occurred: map: {_go_map(item)} does not contain declared "
                f"merge key: {key}",
            )
        at = next((i for i, old in enumerate(items) if old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                del items[at]
        elif at is None:
            items.append(_merge_map(None, item, item_path, lists))
        else:
            items[at] = _merge_map(items[at], item, item_path, lists)
    return items


def _ordered(items: list, order: list, key: str | None) -> list:
    """The items named by `$setElementOrder` in its order, then the others in theirs."""

    def ident(item: Any) -> Any:
        return item.get(key) if key and isinstance(item, dict) else item

    wanted = [ident(o) for o in order]
    named = sorted((i for i in items if ident(i) in wanted), key=lambda i: wanted.index(ident(i)))
    return named + [i for i in items if ident(i) not in wanted]


def _go_map(value: Any) -> str:
    """A value as Go's fmt %v prints a decoded JSON value (maps with sorted keys)."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_map(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_map(v) for v in value) + "]"
    return str(value)
