"""Request bodies in Kubernetes' Protocol Buffers encoding, read as kube-apiserver reads them.

client-go 1.36 sends the built-in types of its generated clients as
`application/vnd.kubernetes.protobuf` (k8s.io/client-go rest/request.go `UseProtobufAsDefault`,
rest/client.go: "all generated clients accessing built-in kube resources are forced to
protobuf"), so kubectl's `create namespace`, `drain` (the Eviction, DeleteOptions) and `auth
can-i` (the SelfSubjectAccessReview) arrive so. kube-apiserver decodes them
(k8s.io/apimachinery pkg/runtime/serializer/protobuf/protobuf.go): the 4 bytes `k8s` and NUL,
then a `runtime.Unknown` {typeMeta {apiVersion, kind}, raw, contentEncoding, contentType}
(pkg/runtime/generated.proto) whose `raw` is the object's own message.

`decode(body)` returns the object as the JSON the same request would have carried (timestamps
as RFC 3339, int64 as numbers, `bytes` as base64, map entries as objects). The messages it
knows are written out below from k8s.io/api and k8s.io/apimachinery generated.proto at
v0.36.3 (field numbers and names); a body of another kind raises `UndecodableError`, which the
fake answers 415 naming the kind (the real server would decode it).
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Any

PREFIX = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

# field kinds: "string", "bool", "int", "bytes", "time" (meta/v1 Time), "fieldsv1",
# ("msg", name), ("map", value kind); repeated fields are ("repeated", kind)
_STR, _BOOL, _INT, _BYTES, _TIME = "string", "bool", "int", "bytes", "time"


def _rep(kind: Any) -> tuple:
    return ("repeated", kind)


def _msg(name: str) -> tuple:
    return ("msg", name)


def _map(kind: str) -> tuple:
    return ("map", kind)


# message -> {field number: (json name, kind)}
MESSAGES: dict[str, dict[int, tuple[str, Any]]] = {
    # k8s.io/apimachinery pkg/runtime/generated.proto
    "Unknown": {
        1: ("typeMeta", _msg("TypeMeta")),
        2: ("raw", _BYTES),
        3: ("contentEncoding", _STR),
        4: ("contentType", _STR),
    },
    "TypeMeta": {1: ("apiVersion", _STR), 2: ("kind", _STR)},
    # k8s.io/apimachinery pkg/apis/meta/v1/generated.proto
    "ObjectMeta": {
        1: ("name", _STR),
        2: ("generateName", _STR),
        3: ("namespace", _STR),
        4: ("selfLink", _STR),
        5: ("uid", _STR),
        6: ("resourceVersion", _STR),
        7: ("generation", _INT),
        8: ("creationTimestamp", _TIME),
        9: ("deletionTimestamp", _TIME),
        10: ("deletionGracePeriodSeconds", _INT),
        11: ("labels", _map(_STR)),
        12: ("annotations", _map(_STR)),
        13: ("ownerReferences", _rep(_msg("OwnerReference"))),
        14: ("finalizers", _rep(_STR)),
        17: ("managedFields", _rep(_msg("ManagedFieldsEntry"))),
    },
    "OwnerReference": {
        5: ("apiVersion", _STR),
        1: ("kind", _STR),
        3: ("name", _STR),
        4: ("uid", _STR),
        6: ("controller", _BOOL),
        7: ("blockOwnerDeletion", _BOOL),
    },
    "ManagedFieldsEntry": {
        1: ("manager", _STR),
        2: ("operation", _STR),
        3: ("apiVersion", _STR),
        4: ("time", _TIME),
        6: ("fieldsType", _STR),
        7: ("fieldsV1", "fieldsv1"),
        8: ("subresource", _STR),
    },
    "DeleteOptions": {
        1: ("gracePeriodSeconds", _INT),
        2: ("preconditions", _msg("Preconditions")),
        3: ("orphanDependents", _BOOL),
        4: ("propagationPolicy", _STR),
        5: ("dryRun", _rep(_STR)),
        6: ("ignoreStoreReadErrorWithClusterBreakingPotential", _BOOL),
    },
    "Preconditions": {1: ("uid", _STR), 2: ("resourceVersion", _STR)},
    "SelectorRequirement": {1: ("key", _STR), 2: ("operator", _STR), 3: ("values", _rep(_STR))},
    # k8s.io/api core/v1/generated.proto
    "Namespace": {
        1: ("metadata", _msg("ObjectMeta")),
        2: ("spec", _msg("NamespaceSpec")),
        3: ("status", _msg("NamespaceStatus")),
    },
    "NamespaceSpec": {1: ("finalizers", _rep(_STR))},
    "NamespaceStatus": {1: ("phase", _STR), 2: ("conditions", _rep(_msg("NamespaceCondition")))},
    "NamespaceCondition": {
        1: ("type", _STR),
        2: ("status", _STR),
        4: ("lastTransitionTime", _TIME),
        5: ("reason", _STR),
        6: ("message", _STR),
    },
    "ConfigMap": {
        1: ("metadata", _msg("ObjectMeta")),
        4: ("immutable", _BOOL),
        2: ("data", _map(_STR)),
        3: ("binaryData", _map(_BYTES)),
    },
    "Secret": {
        1: ("metadata", _msg("ObjectMeta")),
        5: ("immutable", _BOOL),
        2: ("data", _map(_BYTES)),
        4: ("stringData", _map(_STR)),
        3: ("type", _STR),
    },
    "ServiceAccount": {
        1: ("metadata", _msg("ObjectMeta")),
        2: ("secrets", _rep(_msg("ObjectReference"))),
        3: ("imagePullSecrets", _rep(_msg("LocalObjectReference"))),
        4: ("automountServiceAccountToken", _BOOL),
    },
    "ObjectReference": {
        1: ("kind", _STR),
        2: ("namespace", _STR),
        3: ("name", _STR),
        4: ("uid", _STR),
        5: ("apiVersion", _STR),
        6: ("resourceVersion", _STR),
        7: ("fieldPath", _STR),
    },
    "LocalObjectReference": {1: ("name", _STR)},
    # k8s.io/api policy/v1/generated.proto
    "Eviction": {1: ("metadata", _msg("ObjectMeta")), 2: ("deleteOptions", _msg("DeleteOptions"))},
    # k8s.io/api authorization/v1/generated.proto
    "SelfSubjectAccessReview": {
        1: ("metadata", _msg("ObjectMeta")),
        2: ("spec", _msg("SelfSubjectAccessReviewSpec")),
        3: ("status", _msg("SubjectAccessReviewStatus")),
    },
    "SelfSubjectAccessReviewSpec": {
        1: ("resourceAttributes", _msg("ResourceAttributes")),
        2: ("nonResourceAttributes", _msg("NonResourceAttributes")),
    },
    "ResourceAttributes": {
        1: ("namespace", _STR),
        2: ("verb", _STR),
        3: ("group", _STR),
        4: ("version", _STR),
        5: ("resource", _STR),
        6: ("subresource", _STR),
        7: ("name", _STR),
        8: ("fieldSelector", _msg("SelectorAttributes")),
        9: ("labelSelector", _msg("SelectorAttributes")),
    },
    "SelectorAttributes": {
        1: ("rawSelector", _STR),
        2: ("requirements", _rep(_msg("SelectorRequirement"))),
    },
    "NonResourceAttributes": {1: ("path", _STR), 2: ("verb", _STR)},
    "SubjectAccessReviewStatus": {
        1: ("allowed", _BOOL),
        4: ("denied", _BOOL),
        2: ("reason", _STR),
        3: ("evaluationError", _STR),
    },
    # k8s.io/api authentication/v1/generated.proto (`kubectl auth whoami` sends one)
    "SelfSubjectReview": {
        1: ("metadata", _msg("ObjectMeta")),
        2: ("status", _msg("SelfSubjectReviewStatus")),
    },
    "SelfSubjectReviewStatus": {1: ("userInfo", _msg("UserInfo"))},
    "UserInfo": {1: ("username", _STR), 2: ("uid", _STR), 3: ("groups", _rep(_STR))},
    "Time": {1: ("seconds", _INT), 2: ("nanos", _INT)},
    "FieldsV1": {1: ("Raw", _BYTES)},
    "MapEntry": {1: ("key", _STR), 2: ("value", _BYTES)},
}

# (apiVersion, kind) of a top-level body -> its message
TOP_LEVEL = {
    ("v1", "Namespace"): "Namespace",
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret",
    ("v1", "ServiceAccount"): "ServiceAccount",
    ("v1", "DeleteOptions"): "DeleteOptions",
    ("meta.k8s.io/v1", "DeleteOptions"): "DeleteOptions",
    ("policy/v1", "Eviction"): "Eviction",
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): "SelfSubjectAccessReview",
    ("authentication.k8s.io/v1", "SelfSubjectReview"): "SelfSubjectReview",
}


class UndecodableError(ValueError):
    """A body this fake cannot read (not protobuf, or a kind it has no message for)."""

    def __init__(self, message: str, kind: str = ""):
        super().__init__(message)
        self.kind = kind


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise UndecodableError("unexpected EOF")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes):
    """(field number, wire type, value) of each field of a message."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise UndecodableError(f"unsupported wire type {wire}")
        yield number, wire, value


def _time(data: bytes) -> str | None:
    parts = _message(data, "Time")
    if not parts:
        return None  # the zero Time, JSON null
    when = datetime.fromtimestamp(parts.get("seconds", 0), tz=timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _scalar(kind: Any, wire: int, value: Any) -> Any:
    if kind == _STR:
        return bytes(value).decode()
    if kind == _BYTES:
        return base64.b64encode(bytes(value)).decode()
    if kind == _BOOL:
        return bool(value)
    if kind == _INT:
        return value - (1 << 64) if value >= 1 << 63 else value  # int64 two's complement
    if kind == _TIME:
        return _time(value)
    if kind == "fieldsv1":
        raw = _message(value, "FieldsV1").get("Raw", "")
        return json.loads(base64.b64decode(raw) or b"{}")
    if isinstance(kind, tuple) and kind[0] == "msg":
        return _message(value, kind[1])
    raise UndecodableError(f"unknown field kind {kind!r}")


def _message(data: bytes, name: str) -> dict:
    schema = MESSAGES[name]
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        if number not in schema:
            continue  # an unknown field: dropped, as the generated Unmarshal skips it
        field, kind = schema[number]
        if isinstance(kind, tuple) and kind[0] == "repeated":
            out.setdefault(field, []).append(_scalar(kind[1], wire, value))
        elif isinstance(kind, tuple) and kind[0] == "map":
            entry = {n: v for n, _, v in _fields(bytes(value))}  # type: ignore[arg-type]
            key = bytes(entry.get(1, b"")).decode()
            out.setdefault(field, {})[key] = _scalar(kind[1], 2, entry.get(2, b""))
        else:
            decoded = _scalar(kind, wire, value)
            # gogo-protobuf writes zero values; the JSON of the same object omits them
            # (`omitempty`), and a zero Time is null
            if decoded not in ("", 0, False, None) or isinstance(decoded, dict):
                out[field] = decoded
    return out


def decode(body: bytes) -> dict:
    """The object a protobuf request body holds, as JSON-shaped data with apiVersion and kind."""
    if not body.startswith(PREFIX) or len(body) == len(PREFIX):
        raise UndecodableError(
            "provided data does not appear to be a protobuf message, expected prefix "
            + str(list(PREFIX))
        )
    envelope = _message(body[len(PREFIX) :], "Unknown")
    meta = envelope.get("typeMeta") or {}
    api_version, kind = meta.get("apiVersion", ""), meta.get("kind", "")
    name = TOP_LEVEL.get((api_version, kind))
    if name is None:
        raise UndecodableError(f"no protobuf message known for {api_version} {kind}", kind)
    obj = _message(base64.b64decode(envelope.get("raw", "")), name)
    return {"apiVersion": api_version, "kind": kind, **obj}
