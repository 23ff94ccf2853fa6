"""What kube-apiserver answers besides resources: version, discovery, media types.

`serve(api, path, raw_query, headers)` answers the non-resource GETs kubectl makes before it
touches a resource, as kube-apiserver 1.36 answers them (`FakeKubeApiServer.handle` calls it):

- `/version`: the server's `version.Info` (k8s.io/apimachinery pkg/version/types.go), with the
  emulation and minimum compatibility versions a 1.36 binary reports by default (its own minor
  and the one before: k8s.io/component-base compatibility/version.go `Info`).
- `/api`, `/apis`: legacy discovery (`APIVersions`, `APIGroupList`; k8s.io/apiserver
  pkg/endpoints/discovery/legacy.go, root.go), or aggregated discovery
  (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`) when the Accept header asks for it as
  client-go's discovery client does (`application/json;g=apidiscovery.k8s.io;v=v2;
  as=APIGroupDiscoveryList`, k8s.io/client-go discovery/discovery_client.go). Only v2 is
  served: `AggregatedDiscoveryRemoveBetaType` is locked on since 1.35 (k8s.io/apiserver
  pkg/features/kube_features.go), so an Accept naming only v2beta1 gets the legacy document
  (pkg/endpoints/discovery/aggregated/wrapper.go, negotiation.go). The aggregated document
  carries an `ETag` (hex SHA-512 of its JSON), `Vary: Accept` and `Cache-Control: public`, and
  a request whose `If-None-Match` names that ETag is answered 304 (aggregated/etag.go).
- `/api/v1`, `/apis/<group>`, `/apis/<group>/<version>`: `APIResourceList` and `APIGroup`.

Groups are listed as the aggregator orders them: by the APIService group priority
(kubernetes/kubernetes cmd/kube-apiserver/app/aggregator.go and pkg/controlplane/apiserver
`DefaultGenericAPIServicePriorities`), ties by name; a CRD's group has priority 1000
(apiextensions-apiserver pkg/controller/... crdregistration), so it comes after the built-in
ones. Versions inside a group are in Kubernetes' version order (GA > beta > alpha, then by
number: apimachinery pkg/version/helpers.go `CompareKubeAwareVersionStrings`), the first one
preferred.

What a resource is called (singular, short names, categories, verbs) is what
kubernetes/kubernetes api/discovery/aggregated_v2.json records for the resources this fake
serves; those of a custom resource come from its CRD as apiextensions-apiserver
pkg/apiserver/customresource_discovery_controller.go builds them (verbs in its order, the
response kind naming the group and version, `status`/`scale` subresources). Discovery names
only the subresources this fake answers (`status` of the kinds that have one, `pods/log`,
`pods/eviction` as `policy/v1 Eviction`, `pods/binding` as `v1 Binding`, `pods/ephemeralcontainers`
and `pods/resize`, `services/proxy`), not the ones a real server also has (exec, attach,
portforward, scale of the built-in workloads, token, finalize). `bindings` (create only) is
the legacy way to bind a pod.

Media types (k8s.io/apiserver pkg/endpoints/handlers/negotiation/negotiate.go): an Accept
header's clauses are tried by quality, then specificity. The fake writes JSON and YAML only:
where the real server would pick Protocol Buffers (client-go's generated clients send
`application/vnd.kubernetes.protobuf,application/json`) it answers with the next acceptable
clause, JSON, which those clients decode just as well (they read the response's Content-Type);
an Accept that admits nothing it writes is 406 `NotAcceptable`, "only the following media types
are accepted: ...". `as=Table;g=meta.k8s.io;v=v1` (or v1beta1) is allowed only on resource GETs,
in JSON or YAML (pkg/endpoints/handlers/rest.go `AllowsMediaTypeTransform`). Request bodies
may be JSON, YAML or (built-in kinds only) Protocol Buffers (`fakes/kube_protobuf.py`);
anything else is 415 `UnsupportedMediaType` listing those (`NegotiateInputSerializer`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

if TYPE_CHECKING:  # pragma: no cover
    from fakes.kube_apiserver import FakeKubeApiServer

# kube-apiserver v1.36.3: the release commit and build of the kubectl v1.36.3 the tests run
# (`kubectl version --client -o json`), a 1.36 server being built from the same tag.
KUBE_VERSION = {
    "major": "1",
    "minor": "36",
    "emulationMajor": "1",
    "emulationMinor": "36",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "35",
    "gitVersion": "v1.36.3",
    "gitCommit": "0f29094e5b73085e3802ecc1298ecae13866bfe6",
    "gitTreeState": "clean",
    "buildDate": "2026-07-22T18:10:35Z",
    "goVersion": "go1.26.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}

JSON, YAML, PROTOBUF = (
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
)
# What kube-apiserver's serializers offer for built-in resources, in its order (the 406 and
# 415 messages list them); CBOR only with the alpha CBORServingAndStorage gate.
SERVER_MEDIA_TYPES = (JSON, YAML, PROTOBUF)
SPOKEN = (JSON, YAML)
AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
# Custom resources list their verbs in this order (customresource_discovery_controller.go).
CR_VERBS = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")


class Facts(NamedTuple):
    """How discovery names one built-in resource."""

    singular: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS


_ALL = ("all",)
_EXT = ("api-extensions",)
# kubernetes/kubernetes api/discovery/aggregated_v2.json (and api__v1.json), for the
# resources the fake serves.
FACTS: dict[tuple[str, str], Facts] = {
    ("v1", "bindings"): Facts("binding", verbs=("create",)),
    ("v1", "configmaps"): Facts("configmap", ("cm",)),
    ("v1", "endpoints"): Facts("endpoints", ("ep",)),
    ("v1", "events"): Facts("event", ("ev",)),
    ("v1", "limitranges"): Facts("limitrange", ("limits",)),
    ("v1", "resourcequotas"): Facts("resourcequota", ("quota",)),
    ("v1", "namespaces"): Facts(
        "namespace", ("ns",), (), ("create", "delete", "get", "list", "patch", "update", "watch")
    ),
    ("v1", "nodes"): Facts("node", ("no",)),
    ("v1", "persistentvolumeclaims"): Facts("persistentvolumeclaim", ("pvc",)),
    ("v1", "persistentvolumes"): Facts("persistentvolume", ("pv",)),
    ("v1", "pods"): Facts("pod", ("po",), _ALL),
    ("v1", "secrets"): Facts("secret"),
    ("v1", "serviceaccounts"): Facts("serviceaccount", ("sa",)),
    ("v1", "services"): Facts("service", ("svc",), _ALL),
    ("apps/v1", "daemonsets"): Facts("daemonset", ("ds",), _ALL),
    ("apps/v1", "deployments"): Facts("deployment", ("deploy",), _ALL),
    ("apps/v1", "replicasets"): Facts("replicaset", ("rs",), _ALL),
    ("apps/v1", "statefulsets"): Facts("statefulset", ("sts",), _ALL),
    ("batch/v1", "cronjobs"): Facts("cronjob", ("cj",), _ALL),
    ("batch/v1", "jobs"): Facts("job", (), _ALL),
    ("policy/v1", "poddisruptionbudgets"): Facts("poddisruptionbudget", ("pdb",)),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"): Facts("clusterrolebinding"),
    ("rbac.authorization.k8s.io/v1", "clusterroles"): Facts("clusterrole"),
    ("rbac.authorization.k8s.io/v1", "rolebindings"): Facts("rolebinding"),
    ("rbac.authorization.k8s.io/v1", "roles"): Facts("role"),
    ("node.k8s.io/v1", "runtimeclasses"): Facts("runtimeclass"),
    ("storage.k8s.io/v1", "storageclasses"): Facts("storageclass", ("sc",)),
    ("storage.k8s.io/v1", "csidrivers"): Facts("csidriver"),
    ("scheduling.k8s.io/v1", "priorityclasses"): Facts("priorityclass", ("pc",)),
    ("coordination.k8s.io/v1", "leases"): Facts("lease"),
    ("events.k8s.io/v1", "events"): Facts("event", ("ev",)),
    ("networking.k8s.io/v1", "networkpolicies"): Facts("networkpolicy", ("netpol",)),
    ("apiextensions.k8s.io/v1", "customresourcedefinitions"): Facts(
        "customresourcedefinition", ("crd", "crds"), _EXT
    ),
    ("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"): Facts(
        "mutatingwebhookconfiguration", (), _EXT
    ),
    ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"): Facts(
        "validatingwebhookconfiguration", (), _EXT
    ),
    ("apiregistration.k8s.io/v1", "apiservices"): Facts("apiservice", (), _EXT),
    # the review APIs: create only (served once the fake answers them)
    ("authentication.k8s.io/v1", "tokenreviews"): Facts("tokenreview", verbs=("create",)),
    ("authentication.k8s.io/v1", "selfsubjectreviews"): Facts(
        "selfsubjectreview", verbs=("create",)
    ),
    ("authorization.k8s.io/v1", "selfsubjectaccessreviews"): Facts(
        "selfsubjectaccessreview", verbs=("create",)
    ),
    ("authorization.k8s.io/v1", "selfsubjectrulesreviews"): Facts(
        "selfsubjectrulesreview", verbs=("create",)
    ),
    ("authorization.k8s.io/v1", "subjectaccessreviews"): Facts(
        "subjectaccessreview", verbs=("create",)
    ),
    ("authorization.k8s.io/v1", "localsubjectaccessreviews"): Facts(
        "localsubjectaccessreview", verbs=("create",)
    ),
}

# APIService group priorities of kube-apiserver (see the module docstring); 1000 for CRDs.
GROUP_PRIORITY = {
    "apiregistration.k8s.io": 18100,  # the aggregator's own group, listed first
    "apps": 17800,
    "events.k8s.io": 17750,
    "authentication.k8s.io": 17700,
    "authorization.k8s.io": 17600,
    "autoscaling": 17500,
    "batch": 17400,
    "certificates.k8s.io": 17300,
    "networking.k8s.io": 17200,
    "policy": 17100,
    "rbac.authorization.k8s.io": 17000,
    "storage.k8s.io": 16800,
    "admissionregistration.k8s.io": 16700,
    "apiextensions.k8s.io": 16700,
    "scheduling.k8s.io": 16600,
    "coordination.k8s.io": 16500,
    "node.k8s.io": 16300,
    "discovery.k8s.io": 16200,
    "flowcontrol.apiserver.k8s.io": 16100,
}
CRD_GROUP_PRIORITY = 1000


class RefusedError(Exception):
    """A request the server refuses, answered as a `Status` (raised by the kube_* modules)."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


def _error(code: int, reason: str, message: str) -> tuple:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    body.update(message=message, reason=reason, code=code)
    return code, JSON, json.dumps(body).encode(), {}


# ---------------------------------------------------------------- media types


class MediaType(NamedTuple):
    """The outcome of negotiating an Accept header: what to send, and as what."""

    media_type: str  # application/json or application/yaml
    convert: tuple[str, str, str] | None  # (group, version, kind) of `as=...;g=...;v=...`
    stream: str  # "watch" for `stream=watch`


_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def _accept_clauses(header: str) -> list[tuple[str, str, dict[str, str]]]:
    """An Accept header's clauses, ordered as goautoneg orders them (quality, then specificity)."""
    clauses = []
    for index, part in enumerate(header.split(",")):
        fields = [f.strip() for f in part.split(";")]
        if not fields[0]:
            continue
        mtype, _, subtype = fields[0].partition("/")
        params, quality = {}, 1.0
        for field in fields[1:]:
            key, _, value = field.partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
            elif key.strip():
                params[key.strip()] = value.strip()
        order = (-quality, mtype == "*", subtype == "*", index)
        clauses.append((order, mtype.strip(), subtype.strip() or "*", params))
    clauses.sort(key=lambda c: c[0])
    return [(t, s, p) for order, t, s, p in clauses if order[0] < 0]  # q=0: not acceptable


def negotiate(
    header: str | None, *, transforms: bool = False, watch: bool = False
) -> MediaType | None:
    """The media type kube-apiserver picks for `header`, or None (406) when none is acceptable.

    `transforms`: the endpoint can print a Table or PartialObjectMetadata (resource GETs);
    `watch`: `stream=watch` is allowed.
    """
    if not header:
        return MediaType(JSON, None, "")
    for mtype, subtype, params in _accept_clauses(header):
        for offered in SERVER_MEDIA_TYPES:
            otype, osub = offered.split("/")
            if not (
                (mtype == otype and subtype in (osub, "*")) or (mtype == "*" and subtype == "*")
            ):
                continue
            convert = None
            if {"as", "g", "v"} & params.keys():
                convert = (params.get("g", ""), params.get("v", ""), params.get("as", ""))
            stream = params.get("stream", "")
            if stream and (stream != "watch" or not watch):
                continue
            if convert is not None and not _allows_transform(offered, convert, transforms):
                continue
            if offered not in SPOKEN:
                continue  # the real server would answer in Protocol Buffers; the fake cannot
            return MediaType(offered, convert, stream)
    return None


def _allows_transform(offered: str, convert: tuple[str, str, str], transforms: bool) -> bool:
    group, version, kind = convert
    if not transforms or group != "meta.k8s.io" or version not in ("v1", "v1beta1"):
        return False
    if kind == "Table":
        return offered in SPOKEN
    return kind in ("PartialObjectMetadata", "PartialObjectMetadataList")


def not_acceptable() -> tuple:
    """kube-apiserver's 406 (negotiation/errors.go `NewNotAcceptableError`)."""
    return _error(
        406,
        "NotAcceptable",
        "only the following media types are accepted: " + ", ".join(SERVER_MEDIA_TYPES),
    )


def input_media_types(builtin: bool) -> tuple[str, ...]:
    """What a create, update or delete body may be in: custom resources have no protobuf."""
    return SERVER_MEDIA_TYPES if builtin else SPOKEN


def unsupported(accepted: tuple[str, ...]) -> str:
    """kube-apiserver's 415 message for a body it cannot read (`NewUnsupportedMediaTypeError`)."""
    return (
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted)
    )


def encode(obj: Any, media_type: str) -> bytes:
    """`obj` in the negotiated media type."""
    if media_type == YAML:
        # sigs.k8s.io/yaml JSONToYAML, as the YAML serializer writes: go-yaml sorts map keys
        return yaml.safe_dump(obj, sort_keys=True).encode()
    return json.dumps(obj).encode()


# ---------------------------------------------------------------- discovery documents


def _version_key(version: str) -> tuple:
    """Kubernetes' version order, highest first (CompareKubeAwareVersionStrings)."""
    m = _VERSION.match(version)
    if not m:
        return (3, version)  # not kube-like: after the others, by name
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor)


def storage_version_hash(group: str, version: str, kind: str) -> str:
    """The hash of apiserver pkg/endpoints/discovery/storageversionhash.go."""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


class _Resource(NamedTuple):
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    facts: Facts
    subresources: list[tuple[str, tuple[str, str, str] | None, tuple[str, ...]]]
    crd: bool


def _crd_resources(api: FakeKubeApiServer) -> dict[tuple[str, str], _Resource]:
    found: dict[tuple[str, str], _Resource] = {}
    for crd in api.objects("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"):
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
        if not (group and plural and kind):
            continue
        facts = Facts(
            names.get("singular") or kind.lower(),
            tuple(names.get("shortNames") or ()),
            tuple(names.get("categories") or ()),
            CR_VERBS,
        )
        for version in spec.get("versions") or []:
            if not version.get("served", True) or not version.get("name"):
                continue
            gv = (group, version["name"])
            subs: list = []
            declared = version.get("subresources") or {}
            if "status" in declared:
                subs.append(("status", (group, version["name"], kind), STATUS_VERBS))
            if "scale" in declared:
                subs.append(("scale", ("autoscaling", "v1", "Scale"), STATUS_VERBS))
            found[(f"{gv[0]}/{gv[1]}", plural)] = _Resource(
                group,
                version["name"],
                plural,
                kind,
                spec.get("scope") == "Namespaced",
                facts,
                subs,
                True,
            )
    return found


def served_resources(api: FakeKubeApiServer) -> list[_Resource]:
    """Every resource the fake serves now, built-in and custom."""
    crds = _crd_resources(api)
    out = []
    for (gv, plural), (kind, namespaced) in sorted(api.resources.items()):
        if (gv, plural) in crds:
            out.append(crds[(gv, plural)])
            continue
        group, _, version = gv.rpartition("/")
        facts = FACTS.get((gv, plural)) or Facts(kind.lower())
        subs: list = []
        if (gv, plural) == ("v1", "pods"):
            subs.append(("binding", ("", "v1", "Binding"), ("create",)))
            subs.append(("eviction", ("policy", "v1", "Eviction"), ("create",)))
            subs.append(("log", None, ("get",)))
            for sub in ("ephemeralcontainers", "resize"):
                subs.append((sub, None, ("get", "patch", "update")))
        if (gv, plural) == ("v1", "services"):
            subs.append(("proxy", ("", "v1", "ServiceProxyOptions"), _PROXY_VERBS))
        if kind in api.status_kinds:
            subs.append(("status", None, STATUS_VERBS))
        subs.sort(key=lambda s: s[0])
        out.append(_Resource(group, version, plural, kind, namespaced, facts, subs, False))
    return out


_PROXY_VERBS = ("create", "delete", "get", "patch", "update")


def _group_versions(resources: list[_Resource]) -> list[tuple[str, list[str]]]:
    """[(group, [versions, preferred first])], in the aggregator's order; core excluded."""
    groups: dict[str, set[str]] = {}
    crd_groups = set()
    for r in resources:
        if r.group:
            groups.setdefault(r.group, set()).add(r.version)
            if r.crd:
                crd_groups.add(r.group)

    def priority(group: str) -> int:
        if group in crd_groups and group not in GROUP_PRIORITY:
            return CRD_GROUP_PRIORITY
        return GROUP_PRIORITY.get(group, 0)

    ordered = sorted(groups, key=lambda g: (-priority(g), g))
    return [(g, sorted(groups[g], key=_version_key)) for g in ordered]


def _legacy_resource(r: _Resource) -> list[dict]:
    entry: dict[str, Any] = {
        "name": r.plural,
        "singularName": r.facts.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": list(r.facts.verbs),
    }
    if r.facts.short_names:
        entry["shortNames"] = list(r.facts.short_names)
    if r.facts.categories:
        entry["categories"] = list(r.facts.categories)
    if "create" in r.facts.verbs and "list" in r.facts.verbs:
        entry["storageVersionHash"] = storage_version_hash(r.group, r.version, r.kind)
    entries = [entry]
    for name, gvk, verbs in r.subresources:
        sub: dict[str, Any] = {
            "name": f"{r.plural}/{name}",
            "singularName": "",
            "namespaced": r.namespaced,
            "kind": gvk[2] if gvk else r.kind,
            "verbs": list(verbs),
        }
        if gvk and (gvk[0], gvk[1]) != (r.group, r.version):
            sub["group"], sub["version"] = gvk[0], gvk[1]
        entries.append(sub)
    return entries


def _aggregated_resource(r: _Resource) -> dict:
    kind = {"group": r.group, "version": r.version, "kind": r.kind}
    if not r.crd:  # built-ins name only the kind (installer.go leaves group/version empty)
        kind = {"group": "", "version": "", "kind": r.kind}
    entry: dict[str, Any] = {
        "resource": r.plural,
        "responseKind": kind,
        "scope": "Namespaced" if r.namespaced else "Cluster",
        "singularResource": r.facts.singular,
        "verbs": list(r.facts.verbs),
    }
    if r.facts.short_names:
        entry["shortNames"] = list(r.facts.short_names)
    if r.facts.categories:
        entry["categories"] = list(r.facts.categories)
    subs = []
    for name, gvk, verbs in r.subresources:
        if gvk is None or (not r.crd and (gvk[0], gvk[1]) == (r.group, r.version)):
            sub_kind = {"group": "", "version": "", "kind": gvk[2] if gvk else r.kind}
        else:
            sub_kind = {"group": gvk[0], "version": gvk[1], "kind": gvk[2]}
        subs.append({"subresource": name, "responseKind": sub_kind, "verbs": list(verbs)})
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated_document(api: FakeKubeApiServer, core: bool) -> dict:
    """The `APIGroupDiscoveryList` of /api (core) or /apis."""
    resources = served_resources(api)
    items = []
    if core:
        core_resources = [_aggregated_resource(r) for r in resources if not r.group]
        versions = [{"version": "v1", "resources": core_resources, "freshness": "Current"}]
        items.append({"metadata": {"creationTimestamp": None}, "versions": versions})
    else:
        for group, versions in _group_versions(resources):
            entries = []
            for version in versions:
                listed = [
                    _aggregated_resource(r)
                    for r in resources
                    if (r.group, r.version) == (group, version)
                ]
                listed.sort(key=lambda e: e["resource"])
                entries.append({"version": version, "resources": listed, "freshness": "Current"})
            items.append(
                {"metadata": {"name": group, "creationTimestamp": None}, "versions": entries}
            )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }


def _group_entry(group: str, versions: list[str]) -> dict:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def _resource_list(api: FakeKubeApiServer, group: str, version: str) -> dict | None:
    resources = [r for r in served_resources(api) if (r.group, r.version) == (group, version)]
    if not resources:
        return None
    entries = [e for r in sorted(resources, key=lambda r: r.plural) for e in _legacy_resource(r)]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def _etagged(document: dict, headers: Any) -> tuple:
    """The aggregated document with its ETag, or 304 when the client has it (etag.go)."""
    body = json.dumps(document).encode()
    etag = '"' + hashlib.sha512(body).hexdigest().upper() + '"'
    extra = {"ETag": etag, "Vary": "Accept", "Cache-Control": "public"}
    if headers.get("If-None-Match") == etag:
        return 304, AGGREGATED_V2, b"", extra
    return 200, AGGREGATED_V2, body, extra


def _wants_aggregated(accept: str) -> bool:
    """Whether negotiation picks aggregated discovery v2 (aggregated/wrapper.go)."""
    for mtype, subtype, params in _accept_clauses(accept):
        if (mtype, subtype) not in (("application", "json"), ("application", "*"), ("*", "*")):
            if (mtype, subtype) in (
                ("application", "yaml"),
                ("application", "vnd.kubernetes.protobuf"),
            ):
                if {"as", "g", "v"} & params.keys():
                    continue
                return False
            continue
        convert = (params.get("g"), params.get("v"), params.get("as"))
        if convert == ("apidiscovery.k8s.io", "v2", "APIGroupDiscoveryList"):
            return True
        if {"as", "g", "v"} & params.keys():
            continue  # v2beta1 (removed) or another conversion: not for this endpoint
        return False
    return False


NON_RESOURCE = re.compile(r"^/(version|api|apis)(/[^/]+)?(/[^/]+)?/?$")


def is_discovery_path(path: str) -> bool:
    """Whether `path` is one `serve` answers (the version and the discovery documents)."""
    m = NON_RESOURCE.match(path)
    if not m:
        return False
    root, first, second = m.group(1), m.group(2), m.group(3)
    if root == "version":
        return first is None
    if root == "api":
        return second is None
    return True


def _document(api: FakeKubeApiServer, path: str) -> dict | None:
    """The legacy discovery document at `path` (/api, /apis, a group or group-version)."""
    parts = path.strip("/").split("/")
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": api.address}
            ],
        }
    if parts[0] == "api":
        return _resource_list(api, "", parts[1])
    if len(parts) == 3:
        return _resource_list(api, parts[1], parts[2])
    groups = dict(_group_versions(served_resources(api)))
    if path == "/apis":
        listed = [_group_entry(g, v) for g, v in groups.items()]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed}
    if parts[1] in groups:
        return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(parts[1], groups[parts[1]])}
    return None


def serve(api: FakeKubeApiServer, path: str, raw_query: str, headers: Any) -> tuple | None:
    """Answer a GET of /version, a discovery or OpenAPI document; None for any other path."""
    if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
        from fakes import kube_openapi  # it builds on this module's view of the resources

        return kube_openapi.serve(api, path, raw_query, headers)
    if not is_discovery_path(path):
        return None
    path = path.rstrip("/") or "/"
    accept = headers.get("Accept") or ""
    if path in ("/api", "/apis") and _wants_aggregated(accept):
        return _etagged(aggregated_document(api, core=path == "/api"), headers)
    media = negotiate(accept)
    if media is None:
        return not_acceptable()
    document = KUBE_VERSION if path == "/version" else _document(api, path)
    if document is None:
        return _error(404, "NotFound", "the server could not find the requested resource")
    return 200, media.media_type, encode(document, media.media_type), {}
