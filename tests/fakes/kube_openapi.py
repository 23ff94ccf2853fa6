"""OpenAPI v3 as kube-apiserver publishes it, as far as kubectl reads it.

kubectl 1.36 decides whether the server validates fields itself by reading the OpenAPI v3
document of the object's group-version: if its PATCH operation for that kind takes a
`fieldValidation` query parameter, kubectl sends `fieldValidation=Strict` and skips its own
validation (kubernetes/kubectl pkg/cmd/util/factory_client_access.go `Validator`;
k8s.io/cli-runtime pkg/resource/query_param_verifier_v3.go); it falls back to OpenAPI v2 only
when v3 is missing. So the fake serves (k8s.io/kube-openapi pkg/handler3/handler.go):

- `GET /openapi/v3`: `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=
  <ETAG>"}, "apis/<group>/<version>": ...}}`, one entry per group-version served, custom
  resources' included;
- `GET /openapi/v3/<gv>`: that group-version's document, `ETag` the hex SHA-512 of its JSON; a
  `hash` that is not the current ETag is redirected (301) to the current URL, a matching one is
  answered with `Cache-Control: public, immutable`. A group-version not served is 404.

Each document has the operations kube-apiserver's installer (k8s.io/apiserver
pkg/endpoints/installer.go) publishes for the resources: list, create and deletecollection on
the collection, get, replace, patch and delete on an object, the status subresource where there
is one, each with `x-kubernetes-action` and `x-kubernetes-group-version-kind`, and the query
parameters create, replace and patch take (`dryRun`, `fieldManager`, `fieldValidation`, and
`force` for patch). It carries no component schemas: `kubectl explain` and client-side
validation, which need them, are not served (nor is OpenAPI v2).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from fakes import kube_discovery

if TYPE_CHECKING:  # pragma: no cover
    from fakes.kube_apiserver import FakeKubeApiServer


def _param(name: str, description: str, kind: str = "string") -> dict:
    return {"name": name, "in": "query", "description": description, "schema": {"type": kind}}


DRY_RUN = _param("dryRun", "When present, indicates that modifications should not be persisted.")
FIELD_MANAGER = _param("fieldManager", "fieldManager is a name associated with the actor.")
FIELD_VALIDATION = _param(
    "fieldValidation",
    "fieldValidation instructs the server on how to handle objects in the request containing "
    "unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
)
FORCE = _param("force", 'Force is going to "force" Apply requests.', "boolean")
PRETTY = _param("pretty", "If 'true', then the output is pretty printed.")


def _op(action: str, gvk: dict, params: list[dict] | None = None) -> dict:
    op: dict[str, Any] = {
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
    }
    if params:
        op["parameters"] = params
    return op


_WRITE = [DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION]


def _object_ops(gvk: dict, verbs: set[str] | tuple[str, ...]) -> dict[str, Any]:
    """The operations on one object (or its status) that `verbs` allow."""
    ops: dict[str, Any] = {}
    if "get" in verbs:
        ops["get"] = _op("get", gvk)
    if "update" in verbs:
        ops["put"] = _op("put", gvk, _WRITE)
    if "patch" in verbs:
        ops["patch"] = _op("patch", gvk, [*_WRITE, FORCE])
    if "delete" in verbs:
        ops["delete"] = _op("delete", gvk, [DRY_RUN])
    return ops


def _paths(resource: Any) -> dict[str, dict]:
    """The operations of one resource (a kube_discovery `_Resource`)."""
    gvk = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    scope = "/namespaces/{namespace}" if resource.namespaced else ""
    collection = f"{prefix}{scope}/{resource.plural}"
    verbs = set(resource.facts.verbs)
    ops: dict[str, Any] = {}
    if "list" in verbs:
        ops["get"] = _op("list", gvk)
    if "create" in verbs:
        ops["post"] = _op("post", gvk, _WRITE)
    if "deletecollection" in verbs:
        ops["delete"] = _op("deletecollection", gvk, [DRY_RUN])
    paths = {collection: ops} if ops else {}
    if "get" in verbs:
        paths[f"{collection}/{{name}}"] = _object_ops(gvk, verbs)
    for name, _kind, sub_verbs in resource.subresources:
        if name == "status":
            paths[f"{collection}/{{name}}/status"] = _object_ops(gvk, sub_verbs)
    if resource.namespaced and "list" in verbs:
        paths[f"{prefix}/{resource.plural}"] = {"get": _op("list", gvk)}
    return {path: {**ops, "parameters": [PRETTY]} for path, ops in paths.items()}


def documents(api: FakeKubeApiServer) -> dict[str, bytes]:
    """{"api/v1" or "apis/<group>/<version>": the JSON of its document}."""
    by_gv: dict[str, dict[str, dict]] = {}
    for resource in kube_discovery.served_resources(api):
        key = f"apis/{resource.group}/{resource.version}" if resource.group else "api/v1"
        by_gv.setdefault(key, {}).update(_paths(resource))
    info = {"title": "Kubernetes", "version": kube_discovery.KUBE_VERSION["gitVersion"]}
    return {
        gv: json.dumps(
            {
                "openapi": "3.0.0",
                "info": info,
                "paths": dict(sorted(paths.items())),
                "components": {},
            }
        ).encode()
        for gv, paths in by_gv.items()
    }


def _etag(data: bytes) -> str:
    return hashlib.sha512(data).hexdigest().upper()


def serve(api: FakeKubeApiServer, path: str, raw_query: str, headers: Any) -> tuple | None:
    """Answer GET /openapi/v3 and /openapi/v3/<gv>; None for any other path."""
    if path.rstrip("/") != "/openapi/v3" and not path.startswith("/openapi/v3/"):
        return None
    docs = documents(api)
    if path.rstrip("/") == "/openapi/v3":
        listing = {
            "paths": {
                gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={_etag(data)}"}
                for gv, data in sorted(docs.items())
            }
        }
        body = json.dumps(listing).encode()
        return 200, "application/json", body, {"Etag": f'"{_etag(body)}"'}
    gv = path[len("/openapi/v3/") :].strip("/")
    data = docs.get(gv)
    if data is None:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        body.update(message="the server could not find the requested resource")
        body.update(reason="NotFound", code=404)
        return 404, "application/json", json.dumps(body).encode(), {}
    accept = headers.get("Accept") or "*/*"
    if not any(
        clause.split(";")[0].strip() in ("application/json", "application/*", "*/*")
        for clause in accept.split(",")
    ):
        return 406, "text/plain", b"", {"Vary": "Accept"}  # protobuf only: not written here
    etag = _etag(data)
    extra = {"Etag": f'"{etag}"', "Vary": "Accept"}
    wanted = parse_qs(raw_query).get("hash", [""])[-1]
    if wanted:
        if wanted != etag:
            extra["Location"] = f"/openapi/v3/{gv}?hash={etag}"
            return 301, "text/html", b"", extra
        extra["Cache-Control"] = "public, immutable"
    return 200, "application/json", data, extra
