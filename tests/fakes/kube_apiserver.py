"""A fake Kubernetes API server over real HTTP on 127.0.0.1, for the real `kubernetes` client.

`FakeKubeApiServer` stores objects generically by resource path (`/api/v1/namespaces/ns/pods/x`,
`/apis/apps/v1/namespaces/ns/deployments/y`, `/api/v1/nodes/n`) and answers like the real API
server does: JSON objects, `<Kind>List` lists whose items carry no apiVersion/kind, and `Status`
bodies for errors (404 NotFound, 409 AlreadyExists/Conflict, 422 Invalid, 429 TooManyRequests).

Usage::

    with FakeKubeApiServer() as api:
        kube = Kube.from_kubeconfig(api.kubeconfig(token="admin-token"))
        api.put_object("/api/v1/nodes/n1", {...})      # seeded (validated), status included
        api.inject(status=500, times=1)                # the next request fails once
        assert ("GET", "/api/v1/nodes") in api.requests  # each also has .query; api.tokens

Differences from a real API server (on purpose, to stay small and deterministic):
- deletion is immediate (no grace period), except that an object with `metadata.finalizers`
  stays, with a `deletionTimestamp`, until a patch removes them; deleting a namespace deletes
  everything in it at once; deleting an owner deletes its dependents (by ownerReferences uid)
  at once unless it orphans them (`_orphans`, as k8s.io/apiserver registry/generic/registry/
  store.go shouldOrphanDependents decides: the DeleteOptions' orphanDependents, else its
  propagationPolicy, else the object's `orphan` or `foregroundDeletion` finalizer, else the
  kind's default, which for a batch/v1 Job is to orphan: kubernetes pkg/registry/batch/job/
  strategy.go DefaultGarbageCollectionPolicy); orphaned dependents lose their references to
  it at once, as the garbage collector's attemptToOrphan patches them (the `orphan`
  finalizer's round trip is not modelled);
- pods likewise, unless `graceful_pods` (opt-in: tests/unit/tensorflow/test_kueue_jobs.py's
  probes of the terminating-pods policy and the last tests of tests/functional/
  test_fake_eviction.py turn it on). Then a pod's DELETE (one, or each of a collection), an
  eviction's and a fake controller's (`delete_pod`) are graceful as k8s.io/apiserver
  registry/rest/delete.go BeforeDelete and registry/generic/registry/store.go Delete make
  them (`_pod_deletion`): deletionTimestamp = now by `clock` + the grace period
  (pkg/registry/core/pod/strategy.go CheckGracefulDelete: the request's, else the pod's;
  0, gone at once, for a pod not bound or ended) and deletionGracePeriodSeconds; a later
  delete may only shorten it (anything else is answered as it is, without admission); the
  pod stays, listed, until kubelet's part ends it: `pod_exited` (its containers ended:
  its terminal status, then kubelet's DELETE with grace 0, status_manager.go syncPod) or
  `kill_expired_pods` (SIGKILL, exit 137, once `clock` passed its deadline). No kubelet
  runs here: fakes/batch.py plays it for the pods of its controllers' namespaces. A pod
  deleted with its owner or namespace still goes at once (the garbage collector's own
  graceful DELETE is not modelled);
- server-side apply deep-merges maps and replaces lists; it never reports field-manager
  conflicts and does not remove fields a manager stopped applying; strategic merge patch
  merges the lists of kube_smp.py by their patch tags (others are replaced, as a list
  without tags is); JSON patch answers 415;
- field selectors work on any dotted field path; a list with `limit` answers that many
  items and a `continue` token for the rest (a bad token: 400), with no resourceVersion
  snapshot (a page shows the store as it is when asked); mutating admission: the
  Priority plugin (kube_priority.py: a pod's priority
  from its PriorityClass, the two system classes stored at start) and `mutators`
  (functions a test or an emulated controller adds, each changing a new object before it
  is stored, as a mutating webhook does on create; `update_mutators` on update, which may
  also refuse it); decoding, validation and validating admission (PodSecurity;
  DenyServiceExternalIPs unless `deny_service_external_ips` is False;
  ValidatingAdmissionPolicies on writes and deletes) as kube_admission.py says, for what
  comes over HTTP, and last the ResourceQuota plugin's object counts (kube_quota.py: each
  quota's status kept at every write of its namespace; what the tests' controllers store
  with `put_object` is counted, and refused only where they ask first: the pods of the
  fake Job and Deployment controllers and JobSet's Jobs, `admit_controller_create`);
  `put_object`'s seeds are decoded and validated as a strict create (`_check_seed`: no
  authorization or admission plugin); `warnings` records the `Warning` headers answered
  and `admission.audit` PodSecurity's audit annotations;
- for kinds with a status subresource, writes to the main resource keep the stored status
  (like the real server); use `put_object` or the `/status` subresource to set it;
- an eviction (`pods/eviction`) is answered as eviction.go answers it (`_evict`: the
  Eviction admitted, DisruptionTarget, preconditions, one budget checked and decremented),
  then the pod goes like a deleted one: at once, or, with `graceful_pods`, for the
  Eviction's deleteOptions' gracePeriodSeconds (else its own); with
  `disruption_controller` (the default) a budget's status is computed at each eviction as
  the disruption controller would, its expected count being the selected pods that have
  not finished (not their controllers' scale);
- a Binding (`pods/binding`, or the legacy `bindings`) binds an unbound, ungated pod that is
  not being deleted as BindingREST does (`_bind`); `pods/ephemeralcontainers` and
  `pods/resize` (get, update, patch) keep only their part of the spec (`_pod_spec_update`);
- ServiceAccount token Secrets are filled synchronously on create;
- sizes: a write whose body is over 3 MiB is 413, one that would store an object over
  1.5 MiB is etcd's 500 (MAX_REQUEST_BODY_BYTES, MAX_STORED_BYTES cite the sources).

`available_deployments = True` stands in for the Deployment controller and kubelet of a
healthy cluster: every Deployment written is at once fully available for its generation
(`status.availableReplicas` = `spec.replicas`, `observedGeneration` = generation).

Custom resources are served as the real server serves them: only once a
CustomResourceDefinition (apiextensions.k8s.io/v1) names them, for each version it marks
`served`, cluster-scoped or namespaced as its `scope` says; until then (and after the CRD
is deleted) their URLs answer 404 like any unknown resource. Their objects are pruned and
validated against the CRD's schema (kube_admission.py), and it is Established at once
(`status.conditions`).

What the real kubectl needs besides resources lives in modules of its own, each naming its
upstream sources: `/version`, discovery (legacy and aggregated) and media types
(`fakes/kube_discovery.py`), OpenAPI v3 (`fakes/kube_openapi.py`), Tables
(`fakes/kube_tables.py`), Protocol Buffers request bodies (`fakes/kube_protobuf.py`), the
options of writes and `dryRun` (`fakes/kube_options.py`), watches (`?watch=true`,
`fakes/kube_watch.py`) and `pods/exec` and `pods/portforward` over WebSocket
(`fakes/kube_stream.py`: `set_pod_files` gives a container's files for kubectl cp's tar,
`set_pod_port` where a pod's port answers).

`FakeKubeApiServer(tls=True)` serves HTTPS with a certificate for 127.0.0.1 signed by a
fresh CA (its kubeconfig carries the CA), as kube-apiserver does. Like the real one, it
answers `/readyz`, `/livez` and `/healthz` with `ok` to anyone, token or not (the
system:public-info-viewer ClusterRole binds them to system:unauthenticated), which is what
load balancers in front of API servers health-check.

Every request is authenticated and authorized first, as kube-apiserver with kubeadm's
`--authorization-mode=Node,RBAC` does (`fakes.kube_auth`, which cites the rules): bearer
tokens name the kubeadm admin (`admin_token`, in `kubeadm:cluster-admins`), a
ServiceAccount (its token Secret's token, or one from `POST .../serviceaccounts/<n>/token`,
expiring by `clock`), a node (`node_token`) or whoever `add_token` says; an unknown token is
401, no token is `system:anonymous`. RBAC reads the Roles and bindings stored here (the
default ClusterRoles and bindings are there from the start, with kubeadm's admin binding);
a refusal is RBAC's 403, and writing a role or binding that grants more than its author
holds is refused as the escalation check does. A node's writes (`system:node:<n>`) then
pass the NodeRestriction admission plugin kubeadm enables (`fakes.kube_noderestriction`,
which cites the rules): its own Node only, with no taint, ownerReference or non-kubelet
label changed; mirror pods, deletes, evictions, status and token requests only for pods
bound to it; its own Lease. `put_object` and the other test helpers write directly, like
etcd, without any of these.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import http.server
import json
import random
import re
import secrets
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from fakes import (
    crds,
    kube_discovery,
    kube_options,
    kube_protobuf,
    kube_quota,
    kube_services,
    kube_smp,
    kube_stream,
    kube_tables,
    kube_watch,
    serving,
)
from fakes.kube_admission import (
    Admission,
    FieldError,
    Request,
    deny_service_external_ips,
    invalid,
    warning_headers,
)
from fakes.kube_auth import (
    API_AUDIENCE,
    KUBEADM_ADMIN,
    REVIEW_KINDS,
    Attributes,
    AuthError,
    ClusterAuth,
    UserInfo,
    bootstrap_policy,
    forbidden,
    node_user,
    refusal,
    request_attributes,
)
from fakes.kube_enums import seed_status_error
from fakes.kube_noderestriction import NodeRestriction
from fakes.kube_priority import PRIORITY_CLASSES, SCHEDULING_GV, admit_pod, system_priority_classes
from fakes.tls import ServerCert, make_server_cert

# (group/version, plural) -> (kind, namespaced). Core group is "v1".
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "namespaces"): ("Namespace", False),
    ("v1", "nodes"): ("Node", False),
    ("v1", "persistentvolumes"): ("PersistentVolume", False),
    ("v1", "pods"): ("Pod", True),
    ("v1", "services"): ("Service", True),
    ("v1", "serviceaccounts"): ("ServiceAccount", True),
    ("v1", "secrets"): ("Secret", True),
    ("v1", "configmaps"): ("ConfigMap", True),
    ("v1", "persistentvolumeclaims"): ("PersistentVolumeClaim", True),
    ("v1", "events"): ("Event", True),
    # the same storage as core/v1 events (see `event_twin`)
    ("events.k8s.io/v1", "events"): ("Event", True),
    ("v1", "endpoints"): ("Endpoints", True),
    ("v1", "resourcequotas"): ("ResourceQuota", True),  # listed by `kubectl describe ns`
    ("v1", "limitranges"): ("LimitRange", True),
    # create only, never stored: binds a pod (`_bind`; kubernetes' LegacyBindingREST)
    ("v1", "bindings"): ("Binding", True),
    ("apps/v1", "deployments"): ("Deployment", True),
    ("apps/v1", "daemonsets"): ("DaemonSet", True),
    ("apps/v1", "statefulsets"): ("StatefulSet", True),
    ("apps/v1", "replicasets"): ("ReplicaSet", True),
    ("batch/v1", "jobs"): ("Job", True),
    ("batch/v1", "cronjobs"): ("CronJob", True),
    ("policy/v1", "poddisruptionbudgets"): ("PodDisruptionBudget", True),
    ("rbac.authorization.k8s.io/v1", "roles"): ("Role", True),
    ("rbac.authorization.k8s.io/v1", "rolebindings"): ("RoleBinding", True),
    ("rbac.authorization.k8s.io/v1", "clusterroles"): ("ClusterRole", False),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"): ("ClusterRoleBinding", False),
    ("node.k8s.io/v1", "runtimeclasses"): ("RuntimeClass", False),
    ("storage.k8s.io/v1", "storageclasses"): ("StorageClass", False),
    ("storage.k8s.io/v1", "csidrivers"): ("CSIDriver", False),
    ("scheduling.k8s.io/v1", "priorityclasses"): ("PriorityClass", False),
    ("coordination.k8s.io/v1", "leases"): ("Lease", True),
    ("networking.k8s.io/v1", "networkpolicies"): ("NetworkPolicy", True),
    ("apiextensions.k8s.io/v1", "customresourcedefinitions"): ("CustomResourceDefinition", False),
    ("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"): (
        "MutatingWebhookConfiguration",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"): (
        "ValidatingWebhookConfiguration",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "validatingadmissionpolicies"): (
        "ValidatingAdmissionPolicy",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings"): (
        "ValidatingAdmissionPolicyBinding",
        False,
    ),
    ("apiregistration.k8s.io/v1", "apiservices"): ("APIService", False),
    # create-only reviews, never stored (fakes.kube_auth)
    ("authorization.k8s.io/v1", "selfsubjectaccessreviews"): ("SelfSubjectAccessReview", False),
    ("authorization.k8s.io/v1", "subjectaccessreviews"): ("SubjectAccessReview", False),
    ("authentication.k8s.io/v1", "selfsubjectreviews"): ("SelfSubjectReview", False),
}
CRD_GV, CRD_PLURAL = "apiextensions.k8s.io/v1", "customresourcedefinitions"
# Kinds with a `status` subresource: client writes to the main resource keep the stored status,
# and only these (and custom resources whose CRD declares `subresources.status`) answer
# `/status`. kube-apiserver 1.36 registers "<plural>/status" storage for each (pkg/registry/
# */rest/storage_*.go, e.g. apiextensions-apiserver's customresourcedefinitions/status,
# admissionregistration's validatingadmissionpolicies/status, kube-aggregator's
# apiservices/status); the kinds here without one (ConfigMap, Secret, ...) have no route.
STATUS_KINDS = set(
    "Namespace Node PersistentVolume Pod Service PersistentVolumeClaim Deployment DaemonSet "
    "StatefulSet ReplicaSet Job CronJob PodDisruptionBudget ResourceQuota "
    "CustomResourceDefinition ValidatingAdmissionPolicy APIService".split()
)
DEFAULT_STATUS = {
    "Namespace": {"phase": "Active"},
    "Pod": {"phase": "Pending"},
    "PersistentVolumeClaim": {"phase": "Pending"},
    "PersistentVolume": {"phase": "Available"},
}
BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# kubernetes pkg/apis/authentication/validation ValidateTokenRequest: expirationSeconds
# at least 10 minutes and at most 2^32 (kube_auth token_request answers the 422).
_MIN_TOKEN_SECONDS, _MAX_TOKEN_SECONDS = 600, 1 << 32
TOKEN_REQUEST_GV = "authentication.k8s.io/v1"
ADMIN_TOKEN = "admin-token"  # stands in for admin.conf's client certificate
FAKE_CA = "-----BEGIN CERTIFICATE-----\nRkFLRS1DQQ==\n-----END CERTIFICATE-----\n"
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
APPLY_PATCH_TYPE = "application/apply-patch+yaml"
MERGE_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
# kube-apiserver reads at most 3 MiB of a write's body, twice etcd's 1.5 MiB since JSON
# shrinks to protobuf in etcd (k8s.io/apiserver pkg/server/config.go NewConfig
# MaxRequestBodyBytes), and answers more with 413 "Request entity too large: limit is
# 3145728" (pkg/endpoints/handlers/rest.go limitedReadBody, after the 415 of an unsupported
# media type; apimachinery pkg/api/errors NewRequestEntityTooLargeError;
# kubernetes/kubernetes#105863).
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024
# etcd refuses a request over its --max-request-bytes, 1.5 MiB unless set (etcd
# server/embed/config.go DefaultMaxRequestBytes; kubeadm's etcd sets none), with
# "etcdserver: request is too large" (api/v3rpc/rpctypes/error.go ErrGRPCRequestTooLarge);
# kube-apiserver passes it on as a 500 with etcd's text and no reason (pkg/endpoints/
# handlers/responsewriters/status.go ErrorToAPIStatus, convertStorageErrorOrNot's
# StatusReasonUnknown; kubernetes/kubernetes#112152, open, and #74600). The fake measures
# the object as compact JSON, etcd its protobuf encoding and key: a little stricter.
MAX_STORED_BYTES = 1536 * 1024
ETCD_TOO_LARGE = "etcdserver: request is too large"


def _yaml_or_json(body: bytes) -> object:
    """A YAML body, read as JSON when it is JSON (the same object either way)."""
    if body[:1] == b"{":
        try:
            return json.loads(body)
        except ValueError:
            pass  # YAML flow mapping, not JSON: the YAML parser says what is wrong
    return yaml.load(body, Loader=_YAML_LOADER)


class ApiError(AuthError):
    """An error answered as a `Status` body (the same shape as kube_auth's refusals)."""


def _not_found(plural: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{plural} "{name}" not found', {"name": name, "kind": plural}
    )


class Recorded(tuple):
    """One request received: compares equal to `(method, path)`; `.query` holds the query."""

    query: dict[str, str]

    def __new__(cls, method: str, path: str, query: dict[str, str]):  # noqa: D102
        self = super().__new__(cls, (method, path))
        self.query = query
        return self

    @property
    def method(self) -> str:
        """HTTP method."""
        return self[0]

    @property
    def path(self) -> str:
        """URL path without the query."""
        return self[1]


class Target:
    """A parsed resource URL."""

    def __init__(
        self,
        gv: str,
        plural: str,
        namespace: str | None,
        name: str | None,
        sub: str,
        resources: dict[tuple[str, str], tuple[str, bool]] | None = None,
    ):
        self.gv, self.plural, self.namespace, self.name, self.sub = (
            gv,
            plural,
            namespace,
            name,
            sub,
        )
        self.kind, self.namespaced = (resources or RESOURCES)[(gv, plural)]

    @property
    def prefix(self) -> str:
        """`/api/v1` or `/apis/<group>/<version>`."""
        return "/api/v1" if self.gv == "v1" else f"/apis/{self.gv}"

    def key(self, name: str | None = None, namespace: str | None = None) -> str:
        """Storage path of the object `name` (default: the URL's name and namespace)."""
        ns = f"/namespaces/{namespace or self.namespace}" if self.namespaced else ""
        return f"{self.prefix}{ns}/{self.plural}/{name or self.name}"


# Generated names end as Kubernetes' do: 5 characters of apimachinery's util/rand alphabet
# (no vowels, no 0, 1 or 3). Tests whose output the README shows call `seed_names` so
# that the names, and the examples, come out the same every run.
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_names: random.Random = random.SystemRandom()


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# libyaml's emitter for the kubeconfigs handed out: the document yaml.safe_dump writes
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _fits_in_etcd(obj: dict) -> None:
    """Raise etcd's refusal (as kube-apiserver answers it) for an object over MAX_STORED_BYTES."""
    if len(json.dumps(obj, separators=(",", ":"))) > MAX_STORED_BYTES:
        raise ApiError(500, "", ETCD_TOO_LARGE)


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data, what the server stores (4x faster than deepcopy)."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value  # str, int, float, bool, None


def generated_suffix(length: int = 5) -> str:
    """A suffix like the API server's for generateName (and controllers' pod names)."""
    return "".join(_names.choice(NAME_ALPHABET) for _ in range(length))


def seed_names(seed: int | None) -> None:
    """Make generated names repeatable (None: random again)."""
    global _names
    _names = random.SystemRandom() if seed is None else random.Random(seed)


def parse_path(
    path: str, resources: dict[tuple[str, str], tuple[str, bool]] | None = None
) -> Target:
    """Split a resource URL; unknown resources raise the real server's 404.

    `resources` is what the server serves (built-in kinds plus its CRDs' kinds).
    """
    known = resources or RESOURCES
    # Go's net/http hands the server the decoded path: `system%3Anodes` is `system:nodes`
    parts = [unquote(p) for p in path.split("/") if p]
    unknown = ApiError(404, "NotFound", "the server could not find the requested resource")
    if len(parts) >= 2 and parts[0] == "api":
        gv, rest = parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise unknown
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and known.get((gv, rest[2]), ("", 0))[1]:
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3 or (gv, rest[0]) not in known:
        raise unknown
    target = Target(gv, rest[0], namespace, rest[1] if len(rest) > 1 else None, "", known)
    if len(rest) == 3:
        target.sub = rest[2]
    if target.namespaced and namespace is None and target.name is not None:
        raise unknown
    return target


# ---------------------------------------------------------------- selectors and merging


def _split_terms(text: str) -> list[str]:
    """Split a selector on commas outside parentheses."""
    terms, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    return [t.strip() for t in [*terms, cur] if t.strip()]


_SET_TERM = re.compile(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)")  # codespell:ignore notin
_EQ_TERM = re.compile(r"([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)")
_KEY = re.compile(r"(!?)([\w./-]+)")


def _label_term(term: str) -> Callable[[dict], bool]:
    if m := _SET_TERM.fullmatch(term):
        key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ_TERM.fullmatch(term):
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _KEY.fullmatch(term):
        negate, key = m.group(1) == "!", m.group(2)
        return lambda labels: (key in labels) != negate
    raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")


def label_matcher(selector: str | None) -> Callable[[dict], bool]:
    """Compile a label selector string (=, ==, !=, in, not-in, exists, !exists)."""
    tests = [_label_term(t) for t in _split_terms(selector or "")]
    return lambda obj: all(t(obj.get("metadata", {}).get("labels") or {}) for t in tests)


def _field_value(obj: dict, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)


def field_matcher(selector: str | None) -> Callable[[dict], bool]:
    """Compile a field selector (`a.b=v`, `a.b==v`, `a.b!=v`, comma-joined)."""
    tests = []
    for term in _split_terms(selector or ""):
        m = re.fullmatch(r"([\w.]+)\s*(==|=|!=)\s*(.*)", term)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector: {term!r}")
        path, op, value = m.groups()
        tests.append((path, op == "!=", value))
    return lambda obj: all((_field_value(obj, p) == v) != neg for p, neg, v in tests)


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """Whether a LabelSelector object (matchLabels + matchExpressions) selects `labels`."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": lambda: labels.get(key) in values,
            "NotIn": lambda: labels.get(key) not in values,  # codespell:ignore notin
            "Exists": lambda: key in labels,
            "DoesNotExist": lambda: key not in labels,
        }[op]()
        if not ok:
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge recursively, None deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# The volume source fields of a PersistentVolumeSpec (an inline union in core/v1).
_VOLUME_SOURCES = ("nfs", "csi", "hostPath", "local", "awsElasticBlockStore", "iscsi")


def _check_volume_source(old: dict, new: dict) -> None:
    """A PersistentVolume's source is immutable, as ValidatePersistentVolumeUpdate says.

    kubernetes/kubernetes pkg/apis/core/validation: "spec.persistentvolumesource: Forbidden:
    spec.persistentvolumesource is immutable after creation" (terminating ones included).
    """
    before = {k: (old.get("spec") or {}).get(k) for k in _VOLUME_SOURCES}
    after = {k: (new.get("spec") or {}).get(k) for k in _VOLUME_SOURCES}
    if before != after:
        name = old["metadata"]["name"]
        message = (
            f'PersistentVolume "{name}" is invalid: spec.persistentvolumesource: Forbidden: '
            "spec.persistentvolumesource is immutable after creation"
        )
        raise ApiError(422, "Invalid", message, {"name": name, "kind": "PersistentVolume"})


DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"


def _label_namespace(obj: dict) -> None:
    """A Namespace always carries `kubernetes.io/metadata.name: <its name>`.

    kubernetes pkg/registry/core/namespace/strategy.go sets it in PrepareForCreate and
    PrepareForUpdate (GA in 1.22), whatever the client sent; Pod Security and
    NetworkPolicy namespaceSelectors rely on it.
    """
    if obj.get("kind") == "Namespace":
        meta = obj["metadata"]
        meta["labels"] = {
            **(meta.get("labels") or {}),
            "kubernetes.io/metadata.name": meta["name"],
        }


def _check_secret(obj: dict, name: str) -> None:
    """What ValidateSecret checks of the Secrets the charms write.

    Source: kubernetes/kubernetes pkg/apis/core/validation/validation.go.

    `data` values are []byte, base64 on the wire (a bad one fails decoding: 400); a
    `kubernetes.io/dockerconfigjson` Secret needs the key `.dockerconfigjson` holding JSON
    ("data[.dockerconfigjson]: Required value" / "Invalid value: ...").
    """
    decoded: dict[str, bytes] = {}
    for key, value in (obj.get("data") or {}).items():
        try:
            decoded[key] = base64.b64decode(str(value), validate=True)
        except ValueError:
            raise ApiError(
                400, "BadRequest", f"error decoding request body: illegal base64 data in {key}"
            ) from None
    if obj.get("type") != DOCKER_CONFIG_JSON:
        return
    key = ".dockerconfigjson"
    prefix = f'Secret "{name}" is invalid: data[{key}]: '
    if key not in decoded:
        raise ApiError(422, "Invalid", prefix + "Required value", {"name": name, "kind": "Secret"})
    try:
        json.loads(decoded[key])
    except ValueError as e:
        message = prefix + f'Invalid value: "<secret contents redacted>": {e}'
        raise ApiError(422, "Invalid", message, {"name": name, "kind": "Secret"}) from None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# core/v1 Event field <-> events.k8s.io/v1 Event field, where the names differ:
# kubernetes/kubernetes pkg/apis/events/v1/conversion.go Convert_v1_Event_To_core_Event (and
# back): regarding/involvedObject, note/message, deprecatedSource/source,
# deprecated{First,Last}Timestamp, deprecatedCount; reportingController is the internal
# type's field that core/v1 calls reportingComponent (k8s.io/api core/v1 types.go).
_EVENT_FIELDS = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
)
_CORE_EVENTS, _NEW_EVENTS = "/api/v1/namespaces/", "/apis/events.k8s.io/v1/namespaces/"


def _namespaced_key(key: str) -> tuple[str, str, str] | None:
    """(namespace, group, resource) of a namespaced object's storage key, else None."""
    parts = key.split("/")
    # /api/v1/namespaces/<ns>/<resource>/<name>, /apis/<g>/<v>/namespaces/<ns>/<resource>/<name>
    if len(parts) == 7 and parts[1] == "api" and parts[3] == "namespaces":
        return parts[4], "", parts[5]
    if len(parts) == 8 and parts[1] == "apis" and parts[4] == "namespaces":
        return parts[5], parts[2], parts[6]
    return None


def _check_modelled_quota(quota: dict) -> None:
    """A ResourceQuota naming what kube_quota.py does not model is answered 500."""
    what = kube_quota.unmodelled(quota)
    if what is not None:
        raise ApiError(
            500,
            "InternalError",
            "the fake API server models only object counts (and Services' node ports and"
            f" load balancers) in a ResourceQuota, not {what}",
        )


def event_twin(path: str, obj: dict) -> tuple[str, dict] | None:
    """The same Event as the other group serves it, or None for any other object.

    kube-apiserver keeps one storage for both: pkg/registry/events/rest/storage_events.go
    serves events.k8s.io/v1 `events` with the core events' eventstore.NewREST, so an Event
    written through either API is read through both, converted (the fields above; the
    metadata, eventTime, series, action, reason, type, related, reportingInstance alike).
    """
    if obj.get("kind") != "Event":
        return None
    if path.startswith(_CORE_EVENTS) and obj.get("apiVersion") == "v1":
        renames, other, gv = (
            dict(_EVENT_FIELDS),
            _NEW_EVENTS + path[len(_CORE_EVENTS) :],
            "events.k8s.io/v1",
        )
    elif path.startswith(_NEW_EVENTS) and obj.get("apiVersion") == "events.k8s.io/v1":
        renames = {new: old for old, new in _EVENT_FIELDS}
        other, gv = _CORE_EVENTS + path[len(_NEW_EVENTS) :], "v1"
    else:
        return None
    twin = {renames.get(k, k): v for k, v in obj.items()}
    twin["apiVersion"] = gv
    return other, twin


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# ---------------------------------------------------------------- the server


def _status_update(kind: str, old: dict, new: dict) -> dict:
    """What a /status write keeps of `new`: its status (and, for a Pod, its metadata).

    podStatusStrategy.PrepareForUpdate (kubernetes pkg/registry/core/pod/strategy.go)
    resets only spec, deletionTimestamp and ownerReferences: labels and annotations written
    through pods/status are kept (Calico's CNI plugin writes its podIP annotations so:
    libcalico-go resources/workloadendpoint.go patchPodAnnotations).
    """
    if kind != "Pod":
        return {**json_copy(old), "status": new.get("status", old.get("status"))}
    new["spec"] = json_copy(old.get("spec", {}))
    meta = new.setdefault("metadata", {})
    meta.pop("ownerReferences", None)
    if "ownerReferences" in old["metadata"]:
        meta["ownerReferences"] = json_copy(old["metadata"]["ownerReferences"])
    return new


# The pod subresources that write part of the spec, and what each keeps of the object sent:
# kubernetes pkg/registry/core/pod/strategy.go (a stored commit near 1.36, read 2026-11-28)
# dropNonEphemeralContainerUpdates (spec.ephemeralContainers) and dropNonResizeUpdates (each
# container's and init container's resources and resizePolicy); the rest of the spec, the
# status and the metadata but labels, annotations and a few others
# (ResetObjectMetaForStatus) stay the stored pod's.
POD_SPEC_SUBRESOURCES = ("ephemeralcontainers", "resize")
_POD_SUBRESOURCES = ("log", "eviction", "binding", *POD_SPEC_SUBRESOURCES)


def _pod_spec_update(sub: str, old: dict, new: dict) -> dict:
    """What a pods/ephemeralcontainers or pods/resize write keeps of `new` (422 if refused).

    ValidatePodEphemeralContainersUpdate (kubernetes pkg/apis/core/validation): existing
    ephemeral containers may not be removed or changed; a new one may not take the name of
    another container. A resize that adds, removes, reorders or renames containers is
    refused as ValidatePodResize refuses it (the fake does not check the rest of it: the
    QoS class, which resources change).
    """
    kept = json_copy(old)
    spec, new_spec = kept.setdefault("spec", {}), new.get("spec") or {}
    meta = new.get("metadata") or {}
    for key in ("labels", "annotations"):
        kept["metadata"].pop(key, None)
        if key in meta:
            kept["metadata"][key] = json_copy(meta[key])
    update = _ephemeral_update if sub == "ephemeralcontainers" else _resize_update
    errors = update(spec, new_spec)
    if errors:
        raise invalid("v1", "Pod", old["metadata"]["name"], errors)
    return kept


def _ephemeral_update(spec: dict, new_spec: dict) -> list[FieldError]:
    """spec.ephemeralContainers of `new_spec` into `spec`; what validation refuses of it."""
    sent = new_spec.get("ephemeralContainers") or []
    added = {c.get("name"): c for c in sent}
    errors = []
    for existing in spec.get("ephemeralContainers") or []:
        name = existing.get("name")
        what = f'existing ephemeral containers "{name}" may not be'
        if name not in added:
            errors.append(
                FieldError("Forbidden", "spec.ephemeralContainers", "", f"{what} removed")
            )
        elif added[name] != existing:
            path = f"spec.ephemeralContainers[{name}]"
            errors.append(FieldError("Forbidden", path, "", f"{what} changed"))
    names = {c.get("name") for k in ("containers", "initContainers") for c in spec.get(k) or []}
    errors += [
        FieldError("Duplicate value", f"spec.ephemeralContainers[{i}].name", c.get("name"))
        for i, c in enumerate(sent)
        if c.get("name") in names
    ]
    spec.pop("ephemeralContainers", None)
    if sent:
        spec["ephemeralContainers"] = json_copy(sent)
    return errors


def _resize_update(spec: dict, new_spec: dict) -> list[FieldError]:
    """Each container's resources and resizePolicy of `new_spec` into `spec` (same names)."""
    errors = []
    for key in ("containers", "initContainers"):
        before, after = spec.get(key) or [], new_spec.get(key) or []
        if [c.get("name") for c in before] != [c.get("name") for c in after]:
            text = "containers may not be added, removed or renamed"
            errors.append(FieldError("Forbidden", f"spec.{key}", "", text))
            continue
        for stored, sent in zip(before, after):
            for field in ("resources", "resizePolicy"):
                stored.pop(field, None)
                if field in sent:
                    stored[field] = json_copy(sent[field])
    return errors


def _same_namespace(target: Target, meta: dict) -> None:
    """create.go EnsureObjectNamespaceMatchesRequestNamespace: filled in, or the URL's (400)."""
    if meta.setdefault("namespace", target.namespace) != target.namespace:
        raise ApiError(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the "
            "request",
        )


def _precondition(target: Target, old: dict, new: dict) -> None:
    """409 when `new` names a resourceVersion other than the stored object's."""
    rv = (new.get("metadata") or {}).get("resourceVersion")
    if rv and rv != old["metadata"]["resourceVersion"]:
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {target.plural} "{target.name}": the object '
            "has been modified; please apply your changes to the latest version and try again",
            {"name": target.name, "kind": target.plural},
        )


def _same_uid(target: Target, old: dict, new: dict) -> None:
    """422 when a patch gave the object another uid: an immutable field, no precondition.

    A PATCH has no UID precondition (k8s.io/apiserver endpoints/handlers/patch.go
    patchResource: DefaultUpdatedObjectInfo(nil, ...), whose Preconditions reads none,
    registry/rest/update.go); store.go Update checks the resourceVersion (`_precondition`,
    409) and then BeforeUpdate's ValidateObjectMetaUpdate refuses the uid
    (apimachinery pkg/api/validation/objectmeta.go ValidateImmutableField), as NewInvalid
    words it on the object's GroupKind.
    """
    uid = (new.get("metadata") or {}).get("uid")
    if uid and uid != old["metadata"].get("uid"):
        group = target.gv.rpartition("/")[0]
        kind = f"{target.kind}.{group}" if group else target.kind
        raise ApiError(
            422,
            "Invalid",
            f'{kind} "{target.name}" is invalid: metadata.uid: Invalid value: "{uid}": '
            "field is immutable",
            {"name": target.name, "kind": target.kind, "group": group},
        )


def _with_query(query: dict, options: dict) -> dict:
    """A DELETE's options: the body's DeleteOptions, the query's gracePeriodSeconds."""
    options = dict(options)
    if "gracePeriodSeconds" in query and "gracePeriodSeconds" not in options:
        options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
    return options


# metav1.FinalizerOrphanDependents, FinalizerDeleteDependents
ORPHAN_FINALIZER, FOREGROUND_FINALIZER = "orphan", "foregroundDeletion"
_PROPAGATION_FIELDS = ("propagationPolicy", "orphanDependents")


def _propagation(query: dict, options: dict, body: bytes) -> dict:
    """A DELETE's propagation options as kube-apiserver decodes them.

    k8s.io/apiserver pkg/endpoints/handlers/delete.go: the body's DeleteOptions when there
    is a body, else the query's parameters (DecodeParameters); `orphanDependents` is a bool.
    """
    if body:
        return {k: options[k] for k in _PROPAGATION_FIELDS if k in options}
    given: dict = {k: query[k] for k in _PROPAGATION_FIELDS if k in query}
    if "orphanDependents" in given:
        given["orphanDependents"] = str(given["orphanDependents"]).lower() in ("1", "t", "true")
    return given


def _orphans(target: Target, obj: dict, given: dict) -> bool:
    """Whether deleting `obj` with `given` (`_propagation`) orphans its dependents.

    k8s.io/apiserver pkg/registry/generic/registry/store.go shouldOrphanDependents (v0.36.3):
    an explicit orphanDependents wins, then propagationPolicy (Orphan; Background and
    Foreground do not), then the object's own `orphan` / `foregroundDeletion` finalizer,
    then the kind's DefaultGarbageCollectionPolicy: OrphanDependents for a batch/v1 Job
    "for backwards compatibility" (kubernetes pkg/registry/batch/job/strategy.go, read at
    36f36813); custom resources have none (apiextensions-apiserver registry), so delete.
    """
    if "orphanDependents" in given:
        return bool(given["orphanDependents"])
    if "propagationPolicy" in given:
        return given["propagationPolicy"] == "Orphan"
    for finalizer in obj["metadata"].get("finalizers") or []:
        if finalizer in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER):
            return finalizer == ORPHAN_FINALIZER
    return (target.gv, target.kind) == ("batch/v1", "Job")


def _delete_options(target: Target, obj: dict, query: dict, options: dict) -> dict:
    """The DeleteOptions admission sees: the body's, the query's gracePeriodSeconds.

    A pod's grace period is then set as the store's BeforeDelete sets it before admission
    (k8s.io/apiserver pkg/registry/generic/registry/store.go Delete: BeforeDelete, then
    deleteValidation with the same options): `_grace_period`.
    """
    options = _with_query(query, options)
    if target.kind == "Pod" and not (target.sub or ""):
        options["gracePeriodSeconds"] = _grace_period(obj, options.get("gracePeriodSeconds"))
    return options


def _grace_period(pod: dict, asked: int | None) -> int:
    """The grace period a delete gives `pod` (kubernetes pkg/registry/core/pod/strategy.go).

    CheckGracefulDelete: the request's, else the pod's terminationGracePeriodSeconds
    (defaulted to 30 on create); 0 for a pod not bound or finished; 1 for a negative one.
    """
    period = pod["spec"].get("terminationGracePeriodSeconds", 30) if asked is None else asked
    if not pod["spec"].get("nodeName"):
        period = 0
    if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        period = 0
    return 1 if period < 0 else period


# What a delete does to a pod under `graceful_pods` (`_pod_deletion`): remove it now, give
# it a deadline, bring its deadline nearer, or nothing (already terminating).
_NOW, _GRACEFUL, _SHORTEN, _PENDING = "now", "graceful", "shorten", "pending"


def _pod_deletion(pod: dict, options: dict) -> tuple[str, dict]:
    """k8s.io/apiserver pkg/registry/rest/delete.go BeforeDelete for a pod: what, and the options.

    A negative gracePeriodSeconds is 1. A pod not yet terminating gets `_grace_period`
    (CheckGracefulDelete): _GRACEFUL, its deletionTimestamp that far from now. One already
    terminating with no (or a zero) deletionGracePeriodSeconds goes now (_NOW); with one,
    only a shorter period asked changes it (_SHORTEN: the deadline moves that much
    nearer), anything else is _PENDING: nothing changes, and the options are the pod's
    period. The options returned are those admission sees (store.go Delete runs no
    deleteValidation for a pending deletion: it answers the pod as it is).
    """
    options = dict(options)
    asked = options.get("gracePeriodSeconds")
    if asked is not None and asked < 0:
        options["gracePeriodSeconds"] = asked = 1
    meta = pod["metadata"]
    if meta.get("deletionTimestamp"):
        current = meta.get("deletionGracePeriodSeconds")
        if not current:
            return _NOW, options
        if asked is not None and asked < current:
            return _SHORTEN, options
        return _PENDING, {**options, "gracePeriodSeconds": current}
    return _GRACEFUL, {**options, "gracePeriodSeconds": _grace_period(pod, asked)}


def stamp(seconds: float) -> str:
    """A metav1.Time as sent: RFC 3339 in UTC, whole seconds, of seconds since the epoch."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp_seconds(text: str) -> float:
    """Seconds since the epoch of a metav1.Time written as `stamp` writes it."""
    parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def _delete_preconditions(target: Target, obj: dict, preconditions: dict) -> None:
    """DeleteOptions.preconditions, checked before admission and storage (409 Conflict).

    k8s.io/apiserver pkg/registry/rest/delete.go BeforeDelete, which store.go Delete calls
    once it read the object: the conflict names the Kind (schema.GroupResource{Group,
    Resource: gvk.Kind}), with the group after a dot.
    """
    group = target.gv.rpartition("/")[0]
    resource = f"{target.kind}.{group}" if group else target.kind
    _check_preconditions(resource, obj["metadata"], preconditions)


def _check_preconditions(resource: str, meta: dict, preconditions: dict) -> None:
    """409 Conflict when a precondition (uid, resourceVersion) names another object.

    The words of rest/delete.go BeforeDelete, which the eviction's getLatestPod repeats
    (eviction.go) on the GroupResource `Pod`.
    """
    name = meta["name"]
    for field, ending in (
        ("uid", "The object might have been deleted and then recreated"),
        ("resourceVersion", "The object might have been modified"),
    ):
        wanted, stored = preconditions.get(field), meta.get(field)
        if wanted and wanted != stored:
            what = "UID" if field == "uid" else "ResourceVersion"
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource} "{name}": the {what} in the '
                f"precondition ({wanted}) does not match the {what} in record ({stored}). "
                f"{ending}",
                {"name": name, "kind": resource.partition(".")[0]},
            )


# Seeds found valid, kept per process by a digest of their exact JSON text: the same objects
# are seeded in many tests (install_kueue's ResourceFlavors, each grant's admission
# policies), and a custom resource's rules cost ~2-4 ms a seed in cel-python (the
# tensorflow suite: ~16,000 seeds, 2026-11-27). A custom resource only under the pinned
# CRDs every server shares (`crds.shared`: the same `spec` object for the whole process),
# so the same text always meets the same schema; a built-in kind's schemas are fixed.
_VALID_SEEDS: set[tuple[str, str, bytes]] = set()
_SEEDS_KEPT = 65536


def _seed_key(target: Target, obj: dict, crd: dict | None) -> tuple[str, str, bytes] | None:
    """The key `_VALID_SEEDS` keeps a valid seed by, or None where it keeps none."""
    if crd is not None:
        shared = crds.crd_of(target.gv, target.kind)
        if shared is None or crd.get("spec") is not shared["spec"]:
            return None
    digest = hashlib.blake2b(json.dumps(obj).encode(), digest_size=16).digest()
    return (target.gv, target.kind, digest)


class FakeKubeApiServer:
    """The fake API server: start with `with FakeKubeApiServer() as api:` (or start/stop)."""

    HEALTH_PATHS = ("/readyz", "/livez", "/healthz")

    def __init__(
        self,
        *,
        tls: bool | ServerCert = False,
        admin_token: str | None = ADMIN_TOKEN,
        graceful_pods: bool = False,
    ) -> None:
        """`tls`: True for a fresh certificate, or one to share (API servers of one cluster).

        `admin_token`: the bearer token of kubeadm's admin.conf user (None: no admin).
        `graceful_pods`: a deleted or evicted pod terminates for its grace period (see the
        module's docstring) instead of going at once; also settable afterwards.
        """
        self.graceful_pods = graceful_pods
        self.tls: ServerCert | None = None
        if isinstance(tls, ServerCert):
            self.tls = tls
        elif tls:
            self.tls = make_server_cert()
        self._lock = threading.RLock()
        # every write is recorded for watches (fakes/kube_watch.py)
        self._store: dict[str, dict] = kube_watch.WatchedStore(self._lock, self._next_rv)
        self._logs: dict[tuple[str, str, str], str] = {}
        self._previous_logs: dict[tuple[str, str, str], str] = {}
        # exec and port-forward (fakes/kube_stream.py): a container's "/" and a pod's ports
        self._pod_files: dict[tuple[str, str, str], Path] = {}
        self._pod_ports: dict[tuple[str, str], dict[int, str]] = {}
        self._faults: list[dict] = []
        self._rv = 0
        self.clock: Callable[[], float] = time.time  # seconds since the epoch (token expiry)
        # The serving certificate's notAfter (seconds since the epoch) of the API server
        # that answers, or None when unknown. Past it, every client refuses the handshake
        # (Go's crypto/tls and Python's ssl verify the server certificate's validity
        # against the current time: "x509: certificate has expired or is not yet valid"),
        # so the request never arrives: the connection is reset, nothing is recorded.
        self.serving_expiry: Callable[[], float | None] = lambda: None
        self.auth = ClusterAuth(
            self._store, lambda: self.clock(), lambda: (len(self._store), self._rv)
        )
        self._attrs: Attributes | None = None  # the request being answered (under _lock)
        self._connections: set[socket.socket] = set()
        self.requests: list[Recorded] = []
        self.tokens: list[str] = []
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.resources: dict[tuple[str, str], tuple[str, bool]] = dict(RESOURCES)
        self.status_kinds: set[str] = set(STATUS_KINDS)
        self.available_deployments = False
        # Stands in for the disruption controller: an eviction reads each budget's status as
        # it would compute it from the pods stored (`_budget_status`); False: as written.
        self.disruption_controller = True
        self.mutators: list[Callable[[dict], None]] = []
        # The same on an update of the main resource (not status): each gets the new object
        # and the stored one, may change the new one or refuse it (ApiError), as a mutating
        # and validating webhook registered for UPDATE does (fakes.batch: Kueue's
        # deployment webhook)
        self.update_mutators: list[Callable[[dict, dict], None]] = []
        # Another client's doing between two of the tested client's requests: each is
        # called with (method, path) once a recorded request is answered, outside the
        # lock, and may write (`put_object`): a taint an operator adds between the
        # charm's GET and PATCH of a Node, say
        self.meanwhile: list[Callable[[str, str], None]] = []
        # Aggregated APIs (an APIService's backend, kube-aggregator): "/apis/<group>/
        # <version>" -> handler(method, path, query) -> (code, JSON object). The request is
        # authenticated and authorized here first, as kube-apiserver does before proxying
        # (fakes/kueue_visibility.py).
        self.aggregated: dict[str, Callable[[str, str, dict], tuple[int, Any]]] = {}
        # Decoding, validation and the validating admission plugins (kube_admission.py);
        # `warnings` records each (method, path, text) the server answered a Warning for.
        self.admission = Admission()
        # DenyServiceExternalIPs (kube_admission.deny_service_external_ips): on, as the
        # control plane's kubeadm config of this revision enables it; False stands for a
        # cluster bootstrapped before it was in that config (literals.ADMISSION_PLUGINS)
        self.deny_service_external_ips = True
        # namespaces holding a ResourceQuota, whose status `_count_quotas` keeps
        self._quota_namespaces: set[str] = set()
        # NodeRestriction, which kubeadm enables (kube_noderestriction.py)
        self.node_restriction = NodeRestriction(self._store, self.auth.authorize)
        self.warnings: list[tuple[str, str, str]] = []
        self._warnings: list[str] = []
        # Service proxy backends: (namespace, "service:port") -> base URL of a ready
        # endpoint (what the Endpoints controller would find). See _proxy.
        self.service_backends: dict[tuple[str, str], str] = {}
        for ns in BUILTIN_NAMESPACES:
            self.put_object(f"/api/v1/namespaces/{ns}", {"metadata": {"name": ns}})
        for path, obj in [*bootstrap_policy(), *system_priority_classes()]:
            self.put_object(path, obj)
        if admin_token:
            self.auth.add_token(admin_token, KUBEADM_ADMIN)
        if self.tls is not None:  # kubeadm: --client-ca-file is the cluster CA
            self.auth.client_ca_pem = self.tls.ca_pem

    # -- lifecycle

    def start(self) -> FakeKubeApiServer:
        """Listen on 127.0.0.1:<free port> in a daemon thread."""
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        if self.tls is not None:
            self._httpd.socket = self.tls.requesting_server_context().wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._httpd.daemon_threads = True
        self._httpd.api = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def serve_also(self) -> Listener:
        """Answer on one more port as well: the same cluster (one store) at another address.

        What a second kube-apiserver of an HA control plane is to a client: its own
        address and TLS listener in front of the same etcd. `Listener.stop` takes that
        address away (the machine lost) and ends the connections it accepted.
        """
        return Listener(self).start()

    def stop(self) -> None:
        """Stop serving and close every open client connection."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        with self._lock:
            for conn in list(self._connections):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> FakeKubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:41234 (https:// with TLS)."""
        assert self._httpd is not None, "server not started"
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def address(self) -> str:
        """host:port, as a proxy's server list names it."""
        return self.url.split("://", 1)[1]

    def kubeconfig(self, token: str = "admin-token", namespace: str | None = None) -> str:
        """A kubeconfig (YAML text) for this server authenticating with a bearer token."""
        context: dict[str, str] = {"cluster": "fake", "user": "fake-user"}
        if namespace:
            context["namespace"] = namespace
        return yaml.dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": self._cluster()}],
                "users": [{"name": "fake-user", "user": {"token": token}}],
                "contexts": [{"name": "fake", "context": context}],
                "current-context": "fake",
            },
            Dumper=_YAML_DUMPER,
        )

    def certificate_kubeconfig(self, client_pem: str) -> str:
        """A kubeconfig (YAML text) for this TLS server authenticating with a client certificate.

        `client_pem`: certificate and key in one PEM, as kubelet-client-current.pem holds them.
        """
        assert self.tls is not None, "client certificates need FakeKubeApiServer(tls=True)"
        user = {"client-certificate-data": _b64(client_pem), "client-key-data": _b64(client_pem)}
        context = {"cluster": "fake", "user": "fake-user"}
        return yaml.dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": self._cluster()}],
                "users": [{"name": "fake-user", "user": user}],
                "contexts": [{"name": "fake", "context": context}],
                "current-context": "fake",
            },
            Dumper=_YAML_DUMPER,
        )

    def node_certificate(self, node: str) -> str:
        """A kubelet client certificate and key (PEM) of `node`, signed by this server's CA."""
        assert self.tls is not None, "client certificates need FakeKubeApiServer(tls=True)"
        return self.tls.client_pem(f"system:node:{node}", "system:nodes")

    def _cluster(self) -> dict[str, str]:
        cluster = {"server": self.url}
        if self.tls is not None:
            cluster["certificate-authority-data"] = _b64(self.tls.ca_pem)
        return cluster

    # -- test helpers

    def add_token(
        self, token: str, name: str, groups: tuple[str, ...] = (), uid: str = ""
    ) -> None:
        """Accept `token` as user `name` in `groups` (a client certificate's CN and O)."""
        self.auth.add_token(token, UserInfo(name, tuple(groups), uid))

    def node_token(self, node: str) -> str:
        """A token of kubelet's identity on `node` (`system:node:<node>` in system:nodes)."""
        token = f"node-{node}-{secrets.token_hex(8)}"
        self.auth.add_token(token, node_user(node))
        return token

    def inject(
        self,
        status: int | str = 500,
        times: int = 1,
        method: str | None = None,
        path_prefix: str | None = None,
        message: str | None = None,
    ) -> None:
        """Fail the next `times` matching requests with `status`, or "reset" the connection.

        A 401 or 403 reads as kube-apiserver's: `Unauthorized`, and RBAC's refusal of the
        requesting user naming the verb and the resource (k8s.io/apiserver pkg/endpoints/
        handlers/responsewriters/errors.go `forbiddenMessage`), unless `message` says
        otherwise (the namespace lifecycle's "unable to create new content in namespace X
        because it is being terminated", an admission webhook's denial).
        """
        with self._lock:
            self._faults.append(
                {
                    "status": status,
                    "times": times,
                    "method": method,
                    "prefix": path_prefix,
                    "message": message,
                }
            )

    def objects(self, path_prefix: str = "/", kind: str | None = None) -> list[dict]:
        """Copies of stored objects whose storage path starts with `path_prefix`, by path.

        `kind`: only objects of that kind (of any namespace, when the prefix names none).
        """
        with self._lock:
            paths = sorted(k for k in self._store if k.startswith(path_prefix))
            return [
                json_copy(self._store[k])
                for k in paths
                if kind is None or self._store[k].get("kind") == kind
            ]

    def get_object(self, path: str) -> dict | None:
        """A copy of the object stored at `path`, or None."""
        with self._lock:
            obj = self._store.get(path)
            return json_copy(obj) if obj is not None else None

    def put_object(self, path: str, obj: dict, admit: Callable[[], None] | None = None) -> dict:
        """Store `obj` at `path` (status included), filling apiVersion/kind/metadata.

        The object is first decoded and validated as kube-apiserver's create handler does
        a body sent with fieldValidation=Strict (`_check_seed`): a seed holds what the real
        cluster could hold, or the test fails at the line that seeds it with the ApiError
        the write path answers. No authentication, RBAC or admission plugin sees it: a
        seed is the test setting the world up, not a client's request. An emulated
        controller's create passes `admit` (`admit_controller_create`), run after the
        validation and before the store, as the validating admission plugins run.
        """
        return json_copy(self._put(path, json_copy(obj), seed=True, admit=admit))

    def put_shared(self, path: str, obj: dict) -> None:
        """`put_object` for read-only data shared between servers (`fakes.crds.shared`).

        Only its metadata and status are copied (one 0.8 MB copy of the real CRDs per test
        was ~24 ms), the rest is stored as given, so neither the caller nor the server may
        change it. The server never changes a stored object in place: a write stores a new
        version (`merge_patch` shares the old one's untouched parts the same way).
        """
        mine = {**obj, "metadata": json_copy(obj.get("metadata") or {})}
        if "status" in obj:
            mine["status"] = json_copy(obj["status"])
        self._put(path, mine)

    def _put(
        self, path: str, obj: dict, seed: bool = False, admit: Callable[[], None] | None = None
    ) -> dict:
        target = parse_path(path, self.resources)
        with self._lock:
            obj.setdefault("apiVersion", target.gv)
            obj.setdefault("kind", target.kind)
            meta = obj.setdefault("metadata", {})
            meta["name"] = target.name
            if target.namespaced:
                meta["namespace"] = target.namespace
            if seed:
                self._check_seed(target, obj)
            if admit is not None:
                admit()
            old = self._store.get(path)
            meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta.setdefault("generation", 1)
            meta["resourceVersion"] = self._next_rv()
            if target.kind in DEFAULT_STATUS:
                obj.setdefault("status", dict(DEFAULT_STATUS[target.kind]))
            _label_namespace(obj)
            self._keep(path, obj)
            if target.kind == "CustomResourceDefinition":
                self._crds_changed()
            return obj

    def _keep(self, key: str, obj: dict) -> None:
        """Store `obj` at `key`; an Event in both groups' views (`event_twin`)."""
        # what can change a quota's status: a new object, a pod's phase, a Service's type,
        # a quota itself
        counts = key not in self._store or obj.get("kind") in ("Pod", "ResourceQuota", "Service")
        self._store[key] = obj
        twin = event_twin(key, obj)
        if twin is not None:
            self._store[twin[0]] = twin[1]
        if counts:
            self._count_quotas(key, obj)

    def _forget(self, key: str) -> dict | None:
        """Remove the object at `key` (an Event from both views); None if absent."""
        gone = self._store.pop(key, None)
        twin = event_twin(key, gone) if gone is not None else None
        if twin is not None:
            self._store.pop(twin[0], None)
        if gone is not None:
            self._count_quotas(key, gone)
        return gone

    def _count_quotas(self, key: str, obj: dict) -> None:
        """The resource quota controller: the status of the quotas of `key`'s namespace.

        Each ResourceQuota's `status` (kube_quota.status) is written again when an object
        of its namespace is stored or removed, a quota included (a new version when it
        changed); namespaces without one cost nothing.
        """
        namespace = (obj.get("metadata") or {}).get("namespace")
        if not namespace or (
            namespace not in self._quota_namespaces and obj.get("kind") != "ResourceQuota"
        ):
            return
        prefix = f"/api/v1/namespaces/{namespace}/resourcequotas/"
        quotas = [(k, q) for k, q in self._store.items() if k.startswith(prefix)]
        if not quotas:
            self._quota_namespaces.discard(namespace)
            return
        self._quota_namespaces.add(namespace)
        stored = [
            (group, resource, o)
            for k, o in self._store.items()
            if (parts := _namespaced_key(k)) is not None and parts[0] == namespace
            for group, resource in [parts[1:]]
        ]
        for k, quota in quotas:
            state = kube_quota.status(quota, stored)
            if quota.get("status") != state:
                meta = {**quota["metadata"], "resourceVersion": self._next_rv()}
                self._store[k] = {**quota, "metadata": meta, "status": state}

    def _check_seed(self, target: Target, obj: dict) -> None:
        """Decode and validate a seeded object as a create of it with fieldValidation=Strict.

        The same checks as `_create`: the body's apiVersion and kind against the path's
        (its name and namespace are the path's, as `put_object` says); decoding, a wrong
        type or an undeclared field refused; then the registry strategy's validation
        (required fields, enums, a custom resource's schema and x-kubernetes-validations).
        Not NodeRestriction, RBAC or the validating admission plugins. Status is checked
        with the rest where the schema declares it: the built-in kinds' 1.36 schemas and
        the CRDs' status schemas (types, enums, undeclared fields, rules). The `required`
        lists within a built-in kind's status are not what its status strategy validates
        (kube_admission.SchemaFindings.add), so they are not checked. A seed is a create
        (no `old`): transition rules do not run on it.
        """
        crd = self._crd_for(target)
        key = _seed_key(target, obj, crd)
        if key in _VALID_SEEDS:
            return
        request = Request("CREATE", "object", "Strict")
        self._validate(target, obj, target.name, request)
        self.admission.validate(target.gv, target.kind, obj, target.name or "", crd)
        if target.kind == "ResourceQuota":
            _check_modelled_quota(obj)
        unreal = seed_status_error(target.gv, target.kind, obj)
        if unreal is not None:
            raise ValueError(unreal)
        # kept only when the checks left it as it was (decoding prunes a custom resource's
        # nulls where its schema is not nullable)
        if (
            key is not None
            and len(_VALID_SEEDS) < _SEEDS_KEPT
            and _seed_key(target, obj, crd) == key
        ):
            _VALID_SEEDS.add(key)

    def delete_object(self, path: str) -> bool:
        """Remove the object at `path` directly (no cascade); False if absent."""
        with self._lock:
            gone = self._forget(path)
            if gone is not None and gone.get("kind") == "CustomResourceDefinition":
                self._crds_changed()
            return gone is not None

    def set_pod_log(
        self, namespace: str, name: str, text: str, container: str = "", *, previous: bool = False
    ) -> None:
        """The text `pods/<name>/log` answers (for one container, or any when empty).

        `previous`: the log of the container's previous instance (`?previous=true`), which
        exists once the container restarted; asked for when there is none, the server
        answers 400 `previous terminated container "<c>" in pod "<p>" not found`
        (kubelet's GetContainerLogs).
        """
        with self._lock:
            (self._previous_logs if previous else self._logs)[(namespace, name, container)] = text

    def set_pod_files(self, namespace: str, pod: str, container: str, root: Path) -> None:
        """The directory standing for the `/` of a pod's container, for `pods/exec`.

        kubectl cp's `tar cf - <path>` is answered from it (fakes/kube_stream.py); any other
        command is an error naming the fake's limit.
        """
        with self._lock:
            self._pod_files[(namespace, pod, container)] = root

    def set_pod_port(self, namespace: str, pod: str, port: int, backend: str) -> None:
        """Where a pod's port answers (`host:port`), for `pods/portforward`."""
        with self._lock:
            self._pod_ports.setdefault((namespace, pod), {})[port] = backend

    def _roll_out(self, obj: dict) -> None:
        """With `available_deployments`, a Deployment is available at once (see above)."""
        if not self.available_deployments or obj.get("kind") != "Deployment":
            return
        replicas = (obj.get("spec") or {}).get("replicas", 1)
        obj["status"] = {
            "observedGeneration": obj["metadata"].get("generation", 1),
            "replicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "updatedReplicas": replicas,
        }

    def _served_by(self, crd: dict) -> dict[tuple[str, str], tuple[str, bool]]:
        """What one CustomResourceDefinition makes the server serve."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
        if not (group and plural and kind):
            return {}
        namespaced = spec.get("scope") == "Namespaced"
        return {
            (f"{group}/{v['name']}", plural): (kind, namespaced)
            for v in spec.get("versions") or []
            if v.get("served", True) and v.get("name")
        }

    def _crds_changed(self) -> None:
        """Serve exactly the kinds the stored CRDs define (called after a CRD write)."""
        served = dict(RESOURCES)
        status_kinds = set(STATUS_KINDS)
        for key, obj in self._store.items():
            if key.startswith(f"/apis/{CRD_GV}/{CRD_PLURAL}/"):
                served.update(self._served_by(obj))
                versions = (obj.get("spec") or {}).get("versions") or []
                if any("status" in (v.get("subresources") or {}) for v in versions):
                    status_kinds.add(((obj.get("spec") or {}).get("names") or {}).get("kind", ""))
                obj.setdefault("status", {})["conditions"] = [
                    {"type": "NamesAccepted", "status": "True"},
                    {"type": "Established", "status": "True"},
                ]
        self.resources = served
        self.status_kinds = status_kinds

    # -- request entry point (called by the handler thread)

    def handle(
        self,
        method: str,
        raw_path: str,
        headers: Any,
        body: bytes,
        peer_certificate: bytes | None = None,
        *,
        controller: bool = False,
    ) -> tuple:
        """Answer one request: (status, content_type, payload bytes, extra headers) or "reset".

        `peer_certificate`: the client certificate (DER) the TLS handshake received, if any.
        `controller`: the request of a controller the tests emulate (fakes/batch.py:
        Kueue, JobSet, the Job controller, kubelet), answered as any other but neither
        recorded in `requests` nor hit by a fault a test injected for its client.

        As kube-apiserver's filters do: authentication (401), then faults a test injected
        (what happens behind it), then authorization (403), then the handler. Then, for a
        recorded request, what `meanwhile` does.
        """
        answer = self._handle(method, raw_path, headers, body, peer_certificate, controller)
        if not controller:
            for act in list(self.meanwhile):
                act(method, urlsplit(raw_path).path)
        return answer

    def _handle(
        self,
        method: str,
        raw_path: str,
        headers: Any,
        body: bytes,
        peer_certificate: bytes | None,
        controller: bool,
    ) -> tuple:
        url = urlsplit(raw_path)
        proxied = _PROXY.match(url.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        auth = headers.get("Authorization") or ""
        expiry = self.serving_expiry()
        if expiry is not None and self.clock() > expiry:
            return ("reset",)  # the client refused the expired serving certificate
        with self._lock:
            if not controller:
                self.requests.append(Recorded(method, url.path, {} if proxied else query))
                if auth.startswith("Bearer "):
                    self.tokens.append(auth[len("Bearer ") :])
            fault = None if proxied or controller else self._take_fault(method, url.path)
            if fault is not None and fault["status"] == "reset":
                return ("reset",)
            try:
                user = self.auth.authenticate(auth, peer_certificate)
                attrs = request_attributes(user, method, unquote(url.path), query)
                if fault is not None:
                    raise self._fault_error(fault, attrs)
                self.auth.require(attrs)
            except (ApiError, AuthError) as e:
                return self._error(e)
            if not proxied:
                return self._answer(method, attrs, url, query, headers, body)
        return self._proxy(method, proxied, url.query, headers, body)

    @staticmethod
    def _error(e: ApiError | AuthError) -> tuple:
        extra = {"Retry-After": "0"} if e.code == 429 else {}
        return e.code, "application/json", json.dumps(e.status()).encode(), extra

    def _answer(
        self, method: str, attrs: Attributes, url: Any, query: dict, headers: Any, body: bytes
    ) -> tuple:
        """The answer to an authorized request (called under `_lock`)."""
        if attrs.verb == "get" and url.path in self.HEALTH_PATHS:
            return 200, "text/plain", b"ok", {}
        self._attrs = attrs
        self._warnings = []
        try:
            backend = next((h for p, h in self.aggregated.items() if url.path.startswith(p)), None)
            if backend is not None:
                code, payload = backend(method, url.path, query)
                return code, "application/json", json.dumps(payload).encode(), {}
            if (
                attrs.resource == "pods"
                and attrs.api_group == ""
                and attrs.subresource
                in (
                    "exec",
                    "portforward",
                    "attach",
                )
            ):
                return self._connect(method, attrs, url, headers)
            return self._respond(method, url, query, headers, body)
        except (ApiError, AuthError) as e:
            extra = self._warning_headers(method, url.path, e.code)
            return e.code, "application/json", json.dumps(e.status()).encode(), extra
        finally:
            self._attrs = None

    def _respond(self, method: str, url: Any, query: dict, headers: Any, body: bytes) -> tuple:
        """The answer in the media type the Accept header asks for (fakes/kube_discovery.py).

        The version, discovery and OpenAPI documents; a resource's answer, as JSON or YAML, a
        Table or PartialObjectMetadata; or a watch, which the handler streams unlocked.
        """
        if method == "GET" and (
            answer := kube_discovery.serve(self, url.path, url.query, headers)
        ):
            return answer
        watching = query.get("watch") in ("true", "1")
        media = kube_discovery.negotiate(
            headers.get("Accept"), transforms=method == "GET", watch=watching
        )
        if media is None:
            return kube_discovery.not_acceptable()
        try:
            if media.convert is not None and not watching:
                code, payload = self._converted(url.path, query, media.convert)
            else:
                code, payload = self._dispatch(method, url.path, query, headers, body)
            if isinstance(payload, kube_watch.Watch):
                if media.convert is not None:
                    target = parse_path(url.path, self.resources)
                    printer = kube_tables.printer(self, target.gv, target.plural, target.kind)
                    payload.transform = kube_tables.watch_transform(printer, query, media.convert)
                return code, media.media_type, payload, self._warning_headers(method, url.path)
        except kube_discovery.RefusedError as e:
            raise ApiError(e.code, e.reason, e.message, e.details) from None
        extra = self._warning_headers(method, url.path)
        if isinstance(payload, str):
            return code, "text/plain", payload.encode(), extra
        return code, media.media_type, kube_discovery.encode(payload, media.media_type), extra

    def _connect(self, method: str, attrs: Attributes, url: Any, headers: Any) -> tuple:
        """`pods/exec` and `pods/portforward`: the checks, then the WebSocket upgrade.

        As kube-apiserver's ExecREST/PortForwardREST Connect and pod strategy's locations
        do, cited in fakes/kube_stream.py: `create` on the subresource (the registry's check
        of a WebSocket `GET`), the pod (404), its container (400) and node (400); then the
        101 with the subprotocol, or 400 for what the fake does not serve (SPDY, attach).
        """
        if method not in ("GET", "POST"):
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {url.path}")
        if attrs.verb != "create":  # authorize.go ensureAuthorizedForVerb (kube_stream.py)
            allowed, reason = self.auth.authorize(dataclasses.replace(attrs, verb="create"))
            if not allowed:
                raise forbidden(attrs.api_group, attrs.resource, attrs.name, reason)
        pod = self._existing(parse_path(url.path.rsplit("/", 1)[0], self.resources))
        name = attrs.name
        raw_query = parse_qs(url.query, keep_blank_values=True)
        try:
            container = kube_stream.container_of(pod, attrs.subresource, raw_query)
            chosen = kube_stream.subprotocol(method, attrs.subresource, headers)
        except kube_stream.RefusedError as e:
            raise ApiError(400, "BadRequest", str(e)) from None
        key = headers.get("Sec-WebSocket-Key") or ""
        namespace = attrs.namespace
        if attrs.subresource == "portforward":
            ports = dict(self._pod_ports.get((namespace, name), {}))
            uid = (pod.get("metadata") or {}).get("uid", "")
            session = kube_stream.portforward_session(ports, f"{name}_{namespace}", uid)
        else:
            command = raw_query.get("command") or []
            root = self._pod_files.get((namespace, name, container))
            where = f'container "{container}" of pod {namespace}/{name}'
            out, err, status = kube_stream.run_command(root, command, where)
            flags = {
                k: (raw_query.get(k) or [""])[-1] in ("true", "1") for k in ("stdout", "stderr")
            }
            session = kube_stream.exec_session(out, err, status, flags["stdout"], flags["stderr"])
        return 101, "", kube_stream.Upgrade(key, chosen, session), {}

    def _warning_headers(self, method: str, path: str, code: int = 200) -> dict[str, Any]:
        """The extra headers of this request's answer.

        Its Warnings (recorded in `warnings` too) and, on a 429, `Retry-After`.
        """
        self.warnings += [(method, path, text) for text in self._warnings]
        headers: dict[str, Any] = {"Retry-After": "0"} if code == 429 else {}
        if self._warnings:
            headers["Warning"] = warning_headers(self._warnings)
        self._warnings = []
        return headers

    def _ready_pod_for(self, namespace: str, service: dict) -> bool:
        selector = (service.get("spec") or {}).get("selector")
        if not selector:  # endpoints kept by hand: service_backends says
            return True
        for path, obj in self._store.items():
            if not path.startswith(f"/api/v1/namespaces/{namespace}/pods/"):
                continue
            labels = (obj.get("metadata") or {}).get("labels") or {}
            status = obj.get("status") or {}
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            if ready and status.get("phase") == "Running" and selector.items() <= labels.items():
                return True
        return False

    def _proxy(self, method: str, match: re.Match, query: str, headers: Any, body: bytes) -> tuple:
        """The service proxy subresource: the request goes to one of the service's endpoints.

        kube-apiserver (pkg/registry/core/service/proxy.go, rest.go ResourceLocation):
        `services/<name>[:<port>]/proxy/<path>`; an unknown service answers 404 NotFound;
        one with no ready endpoint 503 ServiceUnavailable `no endpoints available for
        service "<name>"`; otherwise the endpoint's answer passes through, status, body and
        content type as they are. A Service with a selector has a ready endpoint only while
        a Running, Ready pod of its namespace matches it (the EndpointSlice controller
        lists ready pods only); `service_backends` says where that endpoint answers.
        """
        namespace, name, port, path = (
            match.group(1),
            match.group(2),
            match.group(3),
            match.group(4),
        )
        if f"/api/v1/namespaces/{namespace}/services/{name}" not in self._store:
            error = _not_found("services", name)
            return error.code, "application/json", json.dumps(error.status()).encode(), {}
        backend = self.service_backends.get((namespace, f"{name}:{port or ''}"))
        service = self._store[f"/api/v1/namespaces/{namespace}/services/{name}"]
        if backend is None or not self._ready_pod_for(namespace, service):
            error = ApiError(
                503, "ServiceUnavailable", f'no endpoints available for service "{name}"'
            )
            return error.code, "application/json", json.dumps(error.status()).encode(), {}
        url = backend + (path or "/") + (f"?{query}" if query else "")
        request = urllib.request.Request(url, data=body or None, method=method)
        request.add_header("Content-Type", headers.get("Content-Type") or "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                ctype = response.headers.get("Content-Type") or "application/octet-stream"
                return response.status, ctype, response.read(), {}
        except urllib.error.HTTPError as e:
            ctype = e.headers.get("Content-Type") or "application/octet-stream"
            return e.code, ctype, e.read(), {}
        except OSError as e:
            error = ApiError(503, "ServiceUnavailable", f"error trying to reach service: {e}")
            return error.code, "application/json", json.dumps(error.status()).encode(), {}

    def _converted(self, path: str, query: dict, convert: tuple) -> tuple:
        """A GET answered as a Table or PartialObjectMetadata (fakes/kube_tables.py)."""
        target = parse_path(path, self.resources)
        if target.name is not None:
            objects = [json_copy(self._existing(target))]
            rv = objects[0]["metadata"].get("resourceVersion", "")
        else:
            _, listed = self._list(target, query, "application/json", b"")
            objects = [
                {"apiVersion": target.gv, "kind": target.kind, **o} for o in listed["items"]
            ]
            rv = listed["metadata"]["resourceVersion"]
        printer = kube_tables.printer(self, target.gv, target.plural, target.kind)
        one = target.name is not None
        return 200, kube_tables.converted(
            printer, objects, rv, query, convert, one=one, sub=target.sub
        )

    def _take_fault(self, method: str, path: str) -> dict | None:
        for fault in self._faults:
            if fault["times"] <= 0:
                continue
            if fault["method"] and fault["method"].upper() != method:
                continue
            if fault["prefix"] and not path.startswith(fault["prefix"]):
                continue
            fault["times"] -= 1
            return fault
        return None

    @staticmethod
    def _fault_error(fault: dict, attrs: Attributes) -> ApiError | AuthError:
        """The injected fault; a 403 without a message is RBAC's refusal of this request."""
        code = int(fault["status"])
        reasons = {
            401: "Unauthorized",
            403: "Forbidden",
            429: "TooManyRequests",
            503: "ServiceUnavailable",
            504: "Timeout",
        }
        reason = reasons.get(code, "InternalError")
        message = fault["message"] or f"injected fault: {reason}"
        if code == 401 and not fault["message"]:
            message = "Unauthorized"
        elif code == 403 and not fault["message"]:
            return refusal(attrs, "")
        return ApiError(code, reason, message, {"retryAfterSeconds": 0})

    def _dispatch(self, method: str, path: str, query: dict, headers: Any, body: bytes) -> tuple:
        target = parse_path(path, self.resources)
        if query.get("watch") in ("true", "1") and method == "GET" and not target.sub:
            return self._watch(target, query)
        content_type = (headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if (target.gv, target.plural) in REVIEW_KINDS:
            return self._review(method, target, content_type, body)
        if target.sub == "status" and target.kind not in self.status_kinds:
            raise self._no_status(target)
        handler = self._handler(method, target, path)
        if method in ("POST", "PUT") or (method == "DELETE" and body):
            accepted = kube_discovery.input_media_types((target.gv, target.plural) in RESOURCES)
            if content_type not in accepted:
                raise ApiError(415, "UnsupportedMediaType", kube_discovery.unsupported(accepted))
        if method != "GET" and len(body) > MAX_REQUEST_BODY_BYTES:
            raise ApiError(
                413,
                "RequestEntityTooLarge",
                f"Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}",
            )
        if method != "GET":
            options = dict(query)
            if method == "DELETE" or target.sub == "eviction":  # options in the body too
                options.update(kube_options.in_body(method, self._decode(body, content_type)))
            kube_options.check(method, content_type, options)
            if "dryRun" in options:
                return self._dry_run(handler, target, query, content_type, body)
        return handler(target, query, content_type, body)

    def _handler(self, method: str, target: Target, path: str) -> Callable:
        """The verb's handler for `target`, or the 405 of a method it does not serve."""
        if target.plural == "bindings":  # create only (LegacyBindingREST)
            key = (method, target.name is not None, "binding")
        else:
            key = (method, target.name is not None, target.sub)
        handler = {
            ("GET", False, ""): self._list,
            ("GET", True, ""): self._get,
            ("GET", True, "status"): self._get,
            ("GET", True, "log"): self._log,
            ("POST", False, ""): self._create,
            ("POST", True, "eviction"): self._evict,
            ("POST", True, "token"): self._token_request,
            ("POST", True, "binding"): self._bind,
            ("POST", False, "binding"): self._bind,
            **{("GET", True, sub): self._get for sub in POD_SPEC_SUBRESOURCES},
            **{("PUT", True, sub): self._update for sub in POD_SPEC_SUBRESOURCES},
            **{("PATCH", True, sub): self._patch for sub in POD_SPEC_SUBRESOURCES},
            ("PUT", True, ""): self._update,
            ("PUT", True, "status"): self._update,
            ("PATCH", True, ""): self._patch,
            ("PATCH", True, "status"): self._patch,
            ("DELETE", True, ""): self._delete,
            ("DELETE", False, ""): self._delete_collection,
        }.get(key)
        owner = {"token": "ServiceAccount", **dict.fromkeys(_POD_SUBRESOURCES, "Pod")}
        if handler is None or owner.get(target.sub, target.kind) != target.kind:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}")
        return handler

    def _no_status(self, target: Target) -> ApiError:
        """The 404 of `/status` on a kind without that subresource, whatever the method.

        A custom resource's CRD without `subresources.status`: crdHandler.ServeHTTP's default
        case, NewNotFound(<resource>.<group>, name) (apiextensions-apiserver
        pkg/apiserver/customresource_handler.go). A built-in kind: no go-restful route, so
        the container's ServiceErrorHandler answers NewGenericServerResponse(404), "the
        server could not find the requested resource" (apiserver pkg/server/handler.go).
        """
        if self._crd_for(target) is None:
            return ApiError(404, "NotFound", "the server could not find the requested resource")
        group = target.gv.rpartition("/")[0]
        name = target.name or ""
        details = {"name": name, "group": group, "kind": target.plural}
        return ApiError(404, "NotFound", f'{target.plural}.{group} "{name}" not found', details)

    def _dry_run(self, handler: Callable, target: Target, query: dict, ct: str, body: bytes):
        """`dryRun=All`: the answer, with nothing kept (fakes/kube_options.py)."""
        kept = (self._rv, self.resources, self.status_kinds)
        store: Any = self._store
        with store.dry_run():
            try:
                return handler(target, query, ct, body)
            finally:
                self._rv, self.resources, self.status_kinds = kept

    def _review(self, method: str, target: Target, content_type: str, body: bytes) -> tuple:
        """SelfSubjectAccessReview, SubjectAccessReview, SelfSubjectReview: create only."""
        if method != "POST" or target.name is not None or self._attrs is None:
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        kind = REVIEW_KINDS[(target.gv, target.plural)]
        return 201, self.auth.review(self._attrs.user, kind, self._decode(body, content_type))

    def _token_request(self, target: Target, _q: dict, content_type: str, body: bytes) -> tuple:
        """TokenRequest: a token for the ServiceAccount (fakes.kube_auth), admitted first.

        kubernetes pkg/registry/core/serviceaccount/storage/token.go TokenREST.Create: the
        ServiceAccount is looked up (404), the request takes its defaults (expirationSeconds
        3600, SetDefaults_TokenRequestSpec; audiences the API server's; name, namespace and
        uid the account's) and is validated (422), then createValidation runs the validating
        admission plugins on it (a ValidatingAdmissionPolicy matching `serviceaccounts/token`
        CREATE sees the TokenRequest as `object`, its kind authentication.k8s.io/v1
        TokenRequest), before the bound object is read and the token issued. The 404 and
        422 are kube_auth's token_request, which runs after admission here: admission is
        skipped where either would answer first.
        """
        request = self._decode(body, content_type) if body else {}
        self._restrict_node("CREATE", target, request, None)
        namespace, name = target.namespace or "", target.name or ""
        account = self._store.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
        spec = {"expirationSeconds": 3600, **(request.get("spec") or {})}
        seconds = spec["expirationSeconds"]
        valid = isinstance(seconds, int) and _MIN_TOKEN_SECONDS <= seconds <= _MAX_TOKEN_SECONDS
        if self._attrs is not None and account is not None and valid:
            spec.setdefault("audiences", [API_AUDIENCE])
            meta = {**(request.get("metadata") or {}), "name": name, "namespace": namespace}
            meta.setdefault("uid", account["metadata"].get("uid", ""))
            admitted = {**request, "metadata": meta, "spec": spec}
            admitted.update(apiVersion=TOKEN_REQUEST_GV, kind="TokenRequest")
            self._admit_created(target, admitted, (TOKEN_REQUEST_GV, "TokenRequest"))
        return 201, self.auth.token_request(namespace, name, request)

    def _check_rbac_write(self, target: Target, obj: dict, old: dict | None) -> None:
        """RBAC's escalation check on a role or binding a request writes (fakes.kube_auth)."""
        if self._attrs is not None and target.gv == "rbac.authorization.k8s.io/v1":
            self.auth.check_rbac_write(self._attrs, target.kind, obj, old)

    # -- storage primitives

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _existing(self, target: Target) -> dict:
        obj = self._store.get(target.key())
        if obj is None:
            raise _not_found(target.plural, target.name or "")
        return obj

    def _check_namespace(self, target: Target) -> None:
        if target.namespaced and f"/api/v1/namespaces/{target.namespace}" not in self._store:
            raise _not_found("namespaces", target.namespace or "")

    @staticmethod
    def _decode(body: bytes, content_type: str) -> dict:
        if content_type == kube_protobuf.CONTENT_TYPE:
            try:
                return kube_protobuf.decode(body)
            except kube_protobuf.UndecodableError as e:
                if e.kind:  # the real server would decode it: say the fake cannot
                    raise ApiError(415, "UnsupportedMediaType", str(e)) from None
                raise ApiError(400, "BadRequest", str(e)) from None
        try:
            # kube-apiserver reads an apply body as YAML, and JSON is YAML: a body that is
            # JSON (what every client here sends) is read as JSON, ~5x faster than even
            # libyaml's parser, which PyYAML follows with its own Python constructor
            obj = _yaml_or_json(body) if "yaml" in content_type else json.loads(body or b"{}")
        except (ValueError, yaml.YAMLError) as e:
            raise ApiError(400, "BadRequest", f"error decoding request body: {e}") from None
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "request body must be an object")
        return obj

    def _validate(
        self, target: Target, obj: dict, name: str | None, request: Request | None = None
    ) -> None:
        if obj.get("kind", target.kind) != target.kind or obj.get("apiVersion", target.gv) != (
            target.gv
        ):
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({obj.get('apiVersion')}) and kind "
                f"({obj.get('kind')}) do not match {target.gv} {target.kind}",
            )
        meta = obj.get("metadata") or {}
        if not name:
            cause = {
                "reason": "FieldValueRequired",
                "message": "Required value: name or generateName is required",
                "field": "metadata.name",
            }
            raise ApiError(
                422,
                "Invalid",
                f'{target.kind} "" is invalid: metadata.name: Required value: '
                "name or generateName is required",
                {"kind": target.kind, "causes": [cause]},
            )
        if target.namespaced and meta.get("namespace", target.namespace) != target.namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the "
                "namespace sent on the request",
            )
        if target.kind == "Secret":
            _check_secret(obj, name)
        if request is not None:
            self._decode_body(target, obj, request)

    def _request(self, operation: str, body: str, query: dict, target: Target) -> Request:
        """What admission needs of this write (fieldValidation checked as the handlers do)."""
        request = Request(
            operation,
            body,
            query.get("fieldValidation", ""),
            subresource=target.sub,
            username=self._attrs.user.name if self._attrs is not None else None,
        )
        verb = {"object": "Create" if operation == "CREATE" else "Update"}.get(body, "Patch")
        self.admission.check_options(request, verb)
        return request

    def _crd_for(self, target: Target) -> dict | None:
        """The CustomResourceDefinition serving `target`'s kind (None for built-in kinds)."""
        if (target.gv, target.plural) in RESOURCES:
            return None
        group = target.gv.rpartition("/")[0]
        return self._store.get(f"/apis/{CRD_GV}/{CRD_PLURAL}/{target.plural}.{group}")

    def _decode_body(self, target: Target, obj: dict, request: Request) -> None:
        """Decode `obj` as the handler does (kube_admission.py): refuse, warn or prune."""
        crd = self._crd_for(target)
        self._warnings += self.admission.decode(target.gv, target.kind, obj, request, crd)

    def _restrict_node(
        self, operation: str, target: Target, obj: dict | None, old: dict | None, name: str = ""
    ) -> None:
        """NodeRestriction (kube_noderestriction.py), first of the admission plugins."""
        if self._attrs is None:
            return
        self.node_restriction.admit(
            self._attrs.user,
            operation,
            group=target.gv.rpartition("/")[0],
            resource=target.plural,
            subresource=target.sub,
            namespace=target.namespace or "",
            name=name or target.name or ((obj or {}).get("metadata") or {}).get("name", ""),
            obj=obj,
            old=old,
        )

    def _restrict_node_update(
        self, target: Target, new: dict, old: dict, request: Request | None
    ) -> None:
        """NodeRestriction sees the object as sent, before the status strategy resets it."""
        if request is not None:
            self._restrict_node(request.operation, target, new, old)

    def _admit(self, target: Target, obj: dict, old: dict | None, request: Request) -> None:
        """The stored object's validation, then the validating admission plugins."""
        name = obj["metadata"].get("name", "")
        crd = self._crd_for(target)
        self.admission.validate(target.gv, target.kind, obj, name, crd, old, target.sub)
        if target.kind == "ResourceQuota":
            _check_modelled_quota(obj)
        if self.deny_service_external_ips:
            deny_service_external_ips(target.plural, target.sub, obj, old)
        namespace = obj["metadata"].get("namespace")
        self._warnings += self.admission.pod_security.validate(
            group=target.gv.rpartition("/")[0],
            kind=target.kind,
            plural=target.plural,
            subresource=target.sub,
            operation=request.operation,
            obj=obj,
            old=old,
            namespace=self._store.get(f"/api/v1/namespaces/{namespace}") if namespace else None,
            pods=lambda: self.objects(f"/api/v1/namespaces/{obj['metadata']['name']}/", "Pod"),
            username=request.username,
        )
        if self._attrs is not None:  # ValidatingAdmissionPolicy, last of the plugins
            user, operation = self._attrs.user, request.operation
            policies = self.admission.policies
            self._warnings += policies.admit(
                self._stored, user, operation, target, obj, old, namespace_of=self._namespace
            )
        if namespace and not target.sub:
            if request.operation == "CREATE":
                self._admit_quota(target, obj, namespace)
            elif request.operation == "UPDATE" and target.kind == "Service":
                self._admit_quota(target, obj, namespace, old)  # its type can change

    def _admit_quota(
        self, target: Target, obj: dict, namespace: str, old: dict | None = None
    ) -> None:
        """The ResourceQuota plugin, after the others (kube_quota.py): object counts."""
        if namespace not in self._quota_namespaces:
            return
        prefix = f"/api/v1/namespaces/{namespace}/resourcequotas/"
        quotas = self._stored(prefix)
        group = target.gv.rpartition("/")[0]
        kube_quota.admit(quotas, group, target.plural, obj["metadata"]["name"], obj, old)

    def _prioritize(self, operation: str, target: Target, obj: dict, old: dict | None) -> None:
        """The Priority admission plugin (kube_priority.py) on a pod, not a subresource."""
        if (target.gv, target.plural, target.sub) == ("v1", "pods", ""):
            self.admit_priority(operation, obj, old)

    def admit_controller_create(
        self, account: tuple[str, str], gv: str, plural: str, obj: dict
    ) -> None:
        """The last validating plugins on an emulated controller's CREATE (batch.py).

        As kube-apiserver admits it from the controller's ServiceAccount `account`
        (namespace, name): kube-controller-manager's controllers each their own in
        kube-system (kubeadm's --use-service-account-credentials), JobSet's its manager's.
        The ValidatingAdmissionPolicies, then the ResourceQuota plugin (`_admit_quota`, as
        for any create: whoever asks), each a 403 ApiError when it refuses. The object is
        counted as created (its status is the server's: a new pod is never terminal, so it
        asks for `pods` and `count/pods`). A pod's name is the generated one: validating
        admission sees the name generateName gave (k8s.io/apiserver v0.36.3 pkg/registry/
        rest/create.go AdmissionToValidateObjectFunc, "in case the generated name is
        populated"), which the quota's message names.
        """
        user = UserInfo(
            f"system:serviceaccount:{account[0]}:{account[1]}",
            ("system:serviceaccounts", f"system:serviceaccounts:{account[0]}"),
        ).authenticated()
        meta = obj["metadata"]
        target = Target(gv, plural, meta["namespace"], meta["name"], "", self.resources)
        created = {k: v for k, v in obj.items() if k != "status"}
        with self._lock:
            self.admission.policies.admit(
                self._stored, user, "CREATE", target, obj, None, namespace_of=self._namespace
            )
            self._admit_quota(target, created, meta["namespace"])

    def admit_priority(self, operation: str, pod: dict, old: dict | None = None) -> None:
        """The Priority admission plugin on `pod` (changed in place), as a write admits it.

        For an emulated controller's pod too (batch.py), which kube-apiserver admits alike.
        """
        prefix = f"/apis/{SCHEDULING_GV}/{PRIORITY_CLASSES}/"
        with self._lock:
            admit_pod(
                operation,
                pod,
                old,
                lambda name: self._store.get(prefix + name),
                lambda: self._stored(prefix),
            )

    def _namespace(self, name: str) -> dict | None:
        """The stored Namespace `name` (for reading only)."""
        return self._store.get(f"/api/v1/namespaces/{name}")

    def _stored(self, prefix: str) -> list[dict]:
        """The stored objects under `prefix`, not copied (for reading only)."""
        return [v for k, v in self._store.items() if k.startswith(prefix)]

    def _store_new(
        self, target: Target, obj: dict, name: str, request: Request | None = None
    ) -> dict:
        self._check_rbac_write(
            target, {**obj, "metadata": {**obj["metadata"], "name": name}}, None
        )
        obj = json_copy(obj)
        obj["apiVersion"], obj["kind"] = target.gv, target.kind
        meta = obj.setdefault("metadata", {})
        meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        if target.namespaced:
            meta["namespace"] = target.namespace
        meta["resourceVersion"] = self._next_rv()
        if target.kind in self.status_kinds:
            obj["status"] = dict(DEFAULT_STATUS.get(target.kind, {}))
        if request is not None:  # the built-in mutating plugins run before webhooks
            self._restrict_node(request.operation, target, obj, None)
            self._prioritize(request.operation, target, obj, None)
        for mutate in self.mutators:
            mutate(obj)
        _label_namespace(obj)
        if request is not None:
            self._admit(target, obj, None, request)
        # Only storage finds the name taken: validation (422) and the validating admission
        # plugins (403) answer first (apiserver registry/generic/registry/store.go Create:
        # BeforeCreate's strategy.Validate, then createValidation, then Storage.Create,
        # whose AlreadyExists of a terminating object reads "object is being deleted: ").
        _fits_in_etcd(obj)
        if (taken := self._store.get(target.key(name))) is not None:
            being_deleted = taken["metadata"].get("deletionTimestamp")
            raise ApiError(
                409,
                "AlreadyExists",
                ("object is being deleted: " if being_deleted else "")
                + f'{target.plural} "{name}" already exists',
                {"name": name, "kind": target.plural},
            )
        if target.kind == "Secret" and obj.get("type") == SA_TOKEN_TYPE:
            data = obj.setdefault("data", {})
            data["token"] = _b64(secrets.token_urlsafe(32))
            data["ca.crt"] = _b64(FAKE_CA)
            data["namespace"] = _b64(target.namespace or "")
        self._keep(target.key(name), obj)
        if target.kind == "CustomResourceDefinition":
            self._crds_changed()
        self._roll_out(obj)
        return obj

    def _store_update(
        self, target: Target, old: dict, new: dict, request: Request | None = None
    ) -> dict:
        """Replace `old` by `new`, keeping identity and (per subresource) status or the rest."""
        self._check_rbac_write(target, new, old)
        self._restrict_node_update(target, new, old, request)
        new = json_copy(new)
        if target.kind == "PersistentVolume" and target.sub != "status":
            _check_volume_source(old, new)
        new = self._kept(target, old, new)
        new["apiVersion"], new["kind"] = target.gv, target.kind
        meta = new.setdefault("metadata", {})
        for key in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        self._update_webhooks(target, new, old)
        _label_namespace(new)
        if request is not None:
            self._prioritize(request.operation, target, new, old)
            self._admit(target, new, old, request)
        if new == old:
            return old
        spec_changed = {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
            k: v for k, v in old.items() if k not in ("metadata", "status")
        }
        meta["generation"] = old["metadata"].get("generation", 1) + int(spec_changed)
        meta["resourceVersion"] = self._next_rv()
        _fits_in_etcd(new)
        self._keep(target.key(), new)
        if target.kind == "CustomResourceDefinition":
            self._crds_changed()
        self._roll_out(new)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):  # the last finalizer went: deletion completes (store.go ShouldDeleteDuringUpdate:
            # not while a grace period runs, whose end the kubelet's own delete marks)
            self._remove(target.key())
        return new

    def _kept(self, target: Target, old: dict, new: dict) -> dict:
        """What the update strategy of `target`'s (sub)resource keeps of `new`."""
        if target.sub == "status":
            return _status_update(target.kind, old, new)
        if target.sub in POD_SPEC_SUBRESOURCES:
            return _pod_spec_update(target.sub, old, new)
        if target.kind in self.status_kinds:
            new["status"] = json_copy(old.get("status", {}))
        if target.kind == "Service":  # its registry strategy's PrepareForUpdate
            kube_services.drop_type_dependent_fields(new, old)
        return new

    def _update_webhooks(self, target: Target, new: dict, old: dict) -> None:
        """`update_mutators` on an update of the main resource (a subresource's: none)."""
        if not target.sub:
            for mutate in self.update_mutators:
                mutate(new, old)

    def _remove(self, key: str, orphan: bool = False) -> dict:
        obj = self._store[key]
        if obj["metadata"].get("finalizers"):  # kept, terminating, until they are removed
            if not obj["metadata"].get("deletionTimestamp"):
                obj = json_copy(obj)  # a new version (watches keep the old one)
                obj["metadata"]["deletionTimestamp"] = _now()
                obj["metadata"]["resourceVersion"] = self._next_rv()
                self._store[key] = obj
            return obj
        self._forget(key)
        uid = obj["metadata"]["uid"]
        if obj["kind"] == "CustomResourceDefinition":  # its custom resources go with it
            kinds = {(gv, kind) for (gv, _), (kind, _) in self._served_by(obj).items()}
            for k in [k for k, o in self._store.items() if (o["apiVersion"], o["kind"]) in kinds]:
                self._store.pop(k, None)
            self._crds_changed()
        if obj["kind"] == "Namespace":
            name = obj["metadata"]["name"]
            for k in [k for k, o in self._store.items() if o["metadata"].get("namespace") == name]:
                self._store.pop(k, None)
        dependents = [
            k
            for k, o in self._store.items()
            if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])
        ]
        for k in dependents:
            if k in self._store and orphan:
                self._orphan(k, uid)
            elif k in self._store:
                self._remove(k)
        return obj

    def _orphan(self, key: str, uid: str) -> None:
        """The dependent at `key` loses its reference to owner `uid` (a new version).

        kubernetes pkg/controller/garbagecollector/garbagecollector.go orphanDependents,
        run by attemptToOrphan for an owner deleted with the `orphan` finalizer.
        """
        dependent = json_copy(self._store[key])
        meta = dependent["metadata"]
        meta["ownerReferences"] = [r for r in meta["ownerReferences"] if r.get("uid") != uid]
        if not meta["ownerReferences"]:
            del meta["ownerReferences"]
        meta["resourceVersion"] = self._next_rv()
        self._keep(key, dependent)

    # -- verbs

    def _list(self, target: Target, query: dict, _ct: str, _body: bytes) -> tuple:
        labels = label_matcher(query.get("labelSelector"))
        fields = field_matcher(query.get("fieldSelector"))
        items = []
        for obj in sorted(self._store.values(), key=lambda o: o["metadata"]["name"]):
            if obj["apiVersion"] != target.gv or obj["kind"] != target.kind:
                continue
            if target.namespace and obj["metadata"].get("namespace") != target.namespace:
                continue
            if labels(obj) and fields(obj):
                item = json_copy(obj)
                del item["apiVersion"], item["kind"]
                items.append(item)
        meta: dict[str, Any] = {"resourceVersion": str(self._rv)}
        items = _page(items, query, meta)
        return 200, {
            "kind": f"{target.kind}List",
            "apiVersion": target.gv,
            "metadata": meta,
            "items": items,
        }

    def _watch(self, target: Target, query: dict) -> tuple:
        """`?watch=true` on a list or one object: a stream of events (fakes/kube_watch.py)."""
        opts = kube_watch.options(query)
        labels = label_matcher(query.get("labelSelector"))
        fields = field_matcher(kube_watch.field_selector(target.name, query))

        def selects(obj: dict) -> bool:
            if obj.get("apiVersion") != target.gv or obj.get("kind") != target.kind:
                return False
            if target.namespace and obj["metadata"].get("namespace") != target.namespace:
                return False
            return labels(obj) and fields(obj)

        store: Any = self._store
        bookmark = {"kind": target.kind, "apiVersion": target.gv}
        running = lambda: self._httpd is not None  # noqa: E731
        return 200, kube_watch.Watch(store, lambda: self._rv, selects, opts, bookmark, running)

    def _get(self, target: Target, _q: dict, _ct: str, _body: bytes) -> tuple:
        return 200, json_copy(self._existing(target))

    def _log(self, target: Target, query: dict, _ct: str, _body: bytes) -> tuple:
        pod = self._existing(target)
        container = query.get("container", "")
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if not container and len(names) > 1:
            raise ApiError(
                400,
                "BadRequest",
                f"a container name must be specified for pod {target.name}, "
                f"choose one of: [{' '.join(names)}]",
            )
        logs = self._previous_logs if query.get("previous") in ("true", "1") else self._logs
        text = logs.get((target.namespace or "", target.name or "", container))
        if text is None:
            text = logs.get((target.namespace or "", target.name or "", ""))
        if text is None and logs is self._previous_logs:
            name = container or (names[0] if names else "")
            raise ApiError(
                400,
                "BadRequest",
                f'previous terminated container "{name}" in pod "{target.name}" not found',
            )
        text = text or ""
        if "tailLines" in query:
            lines = text.splitlines(keepends=True)
            tail = int(query["tailLines"])
            text = "".join(lines[-tail:] if tail > 0 else [])
        return 200, text

    def _create(self, target: Target, query: dict, content_type: str, body: bytes) -> tuple:
        request = self._request("CREATE", "object", query, target)
        obj = self._decode(body, content_type)
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = meta["generateName"] + generated_suffix()
        self._validate(target, obj, name, request)
        self._check_namespace(target)
        return 201, json_copy(self._store_new(target, obj, name, request))

    def _update(self, target: Target, query: dict, content_type: str, body: bytes) -> tuple:
        request = self._request("UPDATE", "object", query, target)
        old = self._existing(target)
        obj = self._decode(body, content_type)
        self._validate(target, obj, (obj.get("metadata") or {}).get("name"), request)
        if (obj.get("metadata") or {}).get("name") != target.name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
        _precondition(target, old, obj)
        return 200, json_copy(self._store_update(target, old, obj, request))

    def _patch(self, target: Target, query: dict, content_type: str, body: bytes) -> tuple:
        if content_type == APPLY_PATCH_TYPE:
            return self._apply(target, query, body)
        custom = self._crd_for(target) is not None
        accepted = kube_smp.CUSTOM_PATCH_TYPES if custom else kube_smp.BUILTIN_PATCH_TYPES
        # JSON patch is accepted by kube-apiserver; the fake does not implement it (415)
        if content_type not in MERGE_PATCH_TYPES or content_type not in accepted:
            raise ApiError(415, "UnsupportedMediaType", kube_discovery.unsupported(accepted))
        request = self._request("UPDATE", "merge", query, target)
        old = self._existing(target)
        patch = self._decode(body, content_type)
        if content_type == "application/strategic-merge-patch+json":
            try:
                patched = kube_smp.strategic_merge(target.kind, old, patch)
            except kube_smp.PatchError as e:
                raise ApiError(e.status, e.reason, e.message) from None
        else:
            patched = merge_patch(old, patch)
        # A patch that sets metadata.resourceVersion leaves it on the patched object,
        # which the store then updates conditionally, as a PUT (k8s.io/apiserver v0.36.3
        # pkg/registry/generic/registry/store.go Update :743: a non-zero resourceVersion unequal
        # to the stored one is a Conflict): the optimistic lock of a patch
        # (controller-runtime's MergeFromWithOptimisticLock relies on it).
        _precondition(target, old, patched)
        _same_uid(target, old, patched)
        self._decode_body(target, patched, request)
        return 200, json_copy(self._store_update(target, old, patched, request))

    def _apply(self, target: Target, query: dict, body: bytes) -> tuple:
        manager = query.get("fieldManager")
        if not manager:
            raise ApiError(
                400, "BadRequest", "PATCH, application/apply-patch+yaml requires fieldManager"
            )
        obj = self._decode(body, APPLY_PATCH_TYPE)
        if "apiVersion" not in obj or "kind" not in obj:
            raise ApiError(400, "BadRequest", "apply patches must set apiVersion and kind")
        old = self._store.get(target.key())
        request = self._request("UPDATE" if old else "CREATE", "apply", query, target)
        self._validate(target, obj, (obj.get("metadata") or {}).get("name"), request)
        if obj["metadata"]["name"] != target.name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
        entry = {"manager": manager, "operation": "Apply", "apiVersion": target.gv}
        if old is None:
            if self._attrs is not None:  # apply that creates needs `create` too
                self.auth.require_create_on_apply(self._attrs)
            self._check_namespace(target)
            obj["metadata"]["managedFields"] = [{**entry, "time": _now()}]
            if target.sub == "status":
                raise _not_found(target.plural, target.name or "")
            return 201, json_copy(self._store_new(target, obj, target.name or "", request))
        merged = merge_patch(old, obj)
        managed = [
            m for m in old["metadata"].get("managedFields") or [] if m.get("manager") != manager
        ]
        previous = [
            m for m in old["metadata"].get("managedFields") or [] if m.get("manager") == manager
        ]
        merged["metadata"]["managedFields"] = managed + (previous or [{**entry, "time": _now()}])
        return 200, json_copy(self._store_update(target, old, merged, request))

    def _delete(self, target: Target, query: dict, content_type: str, body: bytes) -> tuple:
        self._restrict_node("DELETE", target, None, None)  # before the lookup, as delete.go
        obj = self._existing(target)
        options = self._decode(body, content_type) if body else {}
        _delete_preconditions(target, obj, options.get("preconditions") or {})
        given = _propagation(query, options, body)
        orphan = _orphans(target, obj, given)
        if self._graceful(target):
            left = self._delete_pod(target, obj, _with_query(query, options), orphan=orphan)
            return 200, json_copy(left)
        asked = _delete_options(target, obj, query, {**options, **given})
        self._admit_delete(target, obj, options=asked)
        removed = self._remove(target.key(), orphan=orphan)
        # one its finalizers keep (terminating) is answered as it is now, not a Status
        # (k8s.io/apiserver pkg/registry/generic/registry/store.go Delete: `if
        # !deleteImmediately || err != nil { return out, false, err }`)
        if target.kind == "Pod" or target.key() in self._store:
            return 200, json_copy(removed)
        details = {"name": target.name, "kind": target.plural, "uid": obj["metadata"]["uid"]}
        return 200, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    def _delete_collection(self, target: Target, query: dict, ct: str, body: bytes) -> tuple:
        _code, listing = self._list(target, query, ct, body)
        refused: ApiError | None = None
        given: dict | None = None  # the DeleteOptions sent, decoded once when first needed
        for item in listing["items"]:
            key = target.key(item["metadata"]["name"], item["metadata"].get("namespace"))
            if key in self._store:  # not already gone with an owner
                stored = self._store[key]
                if given is None:
                    given = self._decode(body, ct) if body else {}
                    given = {**given, **_propagation(query, given, body)}
                orphan = _orphans(target, stored, given)
                try:
                    if self._graceful(target):
                        self._delete_pod(
                            target, stored, _with_query(query, given), orphan=orphan, name=""
                        )
                        continue
                    options = _delete_options(target, stored, query, given)
                    self._admit_delete(target, stored, name="", options=options)
                except ApiError as e:  # the others still go (store.go DeleteCollection)
                    refused = refused or e
                    continue
                self._remove(key, orphan=orphan)
        if refused is not None:
            raise refused
        return 200, listing

    # -- graceful deletion of pods (`graceful_pods`) and the kubelet's part of it

    def _graceful(self, target: Target) -> bool:
        """A delete or eviction of a pod, which `graceful_pods` makes graceful."""
        return self.graceful_pods and target.kind == "Pod" and target.sub in ("", None, "eviction")

    def _delete_pod(
        self,
        target: Target,
        pod: dict,
        options: dict,
        *,
        orphan: bool = False,
        admit: bool = True,
        name: str | None = None,
    ) -> dict:
        """store.go Delete of a pod with BeforeDelete (`_pod_deletion`): the pod as answered.

        A pending deletion is answered as it is, admission unasked; otherwise admission
        sees the options with the period set (`admit`; `name` as `_admit_delete` takes it),
        then `_terminate` writes it.
        """
        step, options = _pod_deletion(pod, options)
        if step == _PENDING:
            return pod
        if admit:
            self._admit_delete(target, pod, name, options=options)
        key = target.key(pod["metadata"]["name"], pod["metadata"].get("namespace"))
        return self._terminate(key, step, options.get("gracePeriodSeconds"), orphan)

    def _terminate(self, key: str, step: str, period: int | None, orphan: bool = False) -> dict:
        """The store's write for a pod's delete (store.go updateForGracefulDeletionAndFinalizers).

        _NOW removes it (`_remove`: finalizers keep it). Otherwise a new version with its
        deletionTimestamp (now by `clock` plus the period, or, shortened, the old deadline
        less the old period plus the new) and deletionGracePeriodSeconds; a first graceful
        delete also bumps its generation (BeforeDelete). A period of 0 then removes it at
        once unless finalizers hold it (lastGraceful 0: deleteImmediately).
        """
        if step == _NOW or period is None:
            return self._remove(key, orphan=orphan)
        pod = json_copy(self._store[key])
        meta = pod["metadata"]
        if step == _SHORTEN:
            deadline = (
                stamp_seconds(meta["deletionTimestamp"]) - meta["deletionGracePeriodSeconds"]
            )
        else:
            deadline = self.clock()
            if meta.get("generation", 0) > 0:
                meta["generation"] += 1
        meta["deletionTimestamp"] = stamp(deadline + period)
        meta["deletionGracePeriodSeconds"] = period
        meta["resourceVersion"] = self._next_rv()
        self._keep(key, pod)
        if period == 0 and not meta.get("finalizers"):
            return self._remove(key, orphan=orphan)
        return pod

    def delete_pod(
        self, namespace: str, name: str, *, graceful: bool | None = None
    ) -> dict | None:
        """A pod's DELETE as its controller sends it (default options), past RBAC and admission.

        As `delete_object` writes directly, for the tests' controllers (fakes/batch.py).
        Graceful under `graceful_pods` (or `graceful=True`): the pod terminates for its own
        grace period, as over HTTP; else it is removed at once, as `delete_object` removes
        it. Returns the pod while it terminates, None once it is gone.
        """
        key = f"/api/v1/namespaces/{namespace}/pods/{name}"
        with self._lock:
            pod = self._store.get(key)
            if pod is None:
                return None
            if not (self.graceful_pods if graceful is None else graceful):
                self._forget(key)
                return None
            step, options = _pod_deletion(pod, {})
            if step != _PENDING:
                self._terminate(key, step, options.get("gracePeriodSeconds"))
            left = self._store.get(key)
            return json_copy(left) if left is not None else None

    def pod_exited(self, namespace: str, name: str, exit_code: int) -> bool:
        """Kubelet: a terminating pod's containers ended with `exit_code`; it reports, deletes.

        kubernetes pkg/kubelet/status/status_manager.go syncPod: the last status
        (mergePodStatus: Succeeded for 0, else Failed, the containers terminated with the
        code, Ready and ContainersReady False where they were True); then, the phase
        terminal and a deletionTimestamp set (canBeDeleted), the DELETE with
        gracePeriodSeconds 0 and the pod's uid as precondition: removed, unless finalizers
        hold it (it goes once they are removed). False when no such pod is terminating.
        """
        key = f"/api/v1/namespaces/{namespace}/pods/{name}"
        with self._lock:
            pod = self._store.get(key)
            if pod is None or not pod["metadata"].get("deletionTimestamp"):
                return False
            pod = json_copy(pod)
            status = pod.setdefault("status", {})
            if status.get("phase") not in ("Succeeded", "Failed"):
                status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
                status["containerStatuses"] = [
                    {"name": c["name"], "ready": False, "restartCount": 0}
                    | {"state": {"terminated": {"exitCode": exit_code}}}
                    for c in pod["spec"]["containers"]
                ]
                for condition in status.get("conditions") or []:
                    if condition.get("type") in ("Ready", "ContainersReady"):
                        condition["status"] = "False"
                pod["metadata"]["resourceVersion"] = self._next_rv()
                self._keep(key, pod)
            step, options = _pod_deletion(pod, {"gracePeriodSeconds": 0})
            if step != _PENDING:
                self._terminate(key, step, options.get("gracePeriodSeconds"))
            return True

    def kill_expired_pods(self, namespace: str | None = None) -> list[str]:
        """Kubelet's SIGKILL once a terminating pod's grace period is over by `clock`.

        Each pod (of `namespace`, or all) whose deadline a graceful delete set
        (deletionGracePeriodSeconds) has passed and that has not ended exits 137 (128 +
        SIGKILL, as container runtimes report it) and goes (`pod_exited`). Returns their
        names.
        """
        prefix = f"/api/v1/namespaces/{namespace}/" if namespace else "/api/v1/namespaces/"
        with self._lock:
            now = self.clock()
            expired = [
                p["metadata"]
                for p in self._stored(prefix)
                if p.get("kind") == "Pod"
                and p["metadata"].get("deletionGracePeriodSeconds") is not None
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                and stamp_seconds(p["metadata"]["deletionTimestamp"]) <= now
            ]
            for meta in expired:
                self.pod_exited(meta["namespace"], meta["name"], 137)
        return [meta["name"] for meta in expired]

    def _admit_delete(
        self, target: Target, old: dict, name: str | None = None, options: dict | None = None
    ) -> None:
        """ValidatingAdmissionPolicy on DELETE: `object` null, `oldObject` the stored one.

        k8s.io/apiserver pkg/registry/rest/delete.go AdmissionToValidateObjectDeleteFunc,
        called by the store once it read the object (a deletecollection's items with the
        request's empty name, endpoints/handlers/delete.go); `options`, the DeleteOptions
        as the store passes them (_delete_options), are `request.options`.
        """
        if self._attrs is not None:
            policies = self.admission.policies
            user = self._attrs.user
            self._warnings += policies.admit(
                self._stored,
                user,
                "DELETE",
                target,
                None,
                old,
                name,
                self._namespace,
                options={"kind": "DeleteOptions", "apiVersion": "meta/v1", **(options or {})},
            )

    # -- binding a pod to a node: kubernetes pkg/registry/core/pod/storage/storage.go (a
    # stored commit near 1.36, read 2026-11-28), BindingREST.Create (pods/binding) and
    # LegacyBindingREST (POST .../namespaces/<ns>/bindings, the name from the body)

    def _bind(self, target: Target, _q: dict, content_type: str, body: bytes) -> tuple:
        """A Binding sets an unbound pod's node: what kube-scheduler does, past the scheduler.

        As BindingREST.Create: the namespace filled or checked (create.go), the name in the
        URL must be the Binding's (400); the Binding validated (BindingStrategy: target.name
        required, target.kind `Node` or empty: 422) and admitted (createValidation: the
        Binding is the object of a `pods/binding` CREATE); then setPodHostAndAnnotations
        on the stored pod, each refusal a 409 Conflict on `pods/binding`: a pod being
        deleted, one already bound (spec.nodeName set), one with scheduling gates; the
        Binding's uid and resourceVersion are preconditions on the pod. The pod gets the
        node, the Binding's annotations and labels, the PodScheduled condition True and no
        status.nominatedNodeName (ClearingNominatedNodeNameAfterBinding, on by default).
        No kubelet starts it here: the fake's kubelet is fakes/batch.py's.
        """
        binding = self._decode(body, content_type)
        name = self._check_binding(target, binding)
        pods = Target("v1", "pods", target.namespace, name, "binding", self.resources)
        self._admit_created(pods, binding, ("v1", "Binding"))
        pod = self._existing(pods)
        _check_preconditions("pods", pod["metadata"], binding["metadata"])
        self._keep(pods.key(), self._bound(pod, binding))
        return 201, json_copy(_CREATED)

    @staticmethod
    def _check_binding(target: Target, binding: dict) -> str:
        """The pod a Binding names; 400 or 422 for a Binding BindingREST.Create refuses."""
        if binding.get("kind", "Binding") != "Binding" or binding.get("apiVersion", "v1") != "v1":
            raise ApiError(400, "BadRequest", f"not a Binding object: {binding.get('kind')}")
        meta = binding.setdefault("metadata", {})
        _same_namespace(target, meta)
        name = target.name if target.plural == "pods" else meta.get("name")
        if not name:
            raise ApiError(400, "BadRequest", "name parameter required")
        if meta.get("name") != name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Binding object")
        goal = binding.get("target") or {}
        errors = []
        if goal.get("kind") not in (None, "", "Node"):
            supported = 'supported values: "Node", "<empty>"'
            errors.append(FieldError("Unsupported value", "target.kind", goal["kind"], supported))
        if not goal.get("name"):
            errors.append(FieldError("Required value", "target.name"))
        if errors:
            raise invalid("v1", "Binding", name, errors)
        return name

    def _bound(self, pod: dict, binding: dict) -> dict:
        """setPodHostAndAnnotations: the pod bound as `binding` says, or its 409 Conflict."""
        name, spec = pod["metadata"]["name"], pod.get("spec") or {}
        refusal = (
            f"pod {name} is being deleted, cannot be assigned to a host"
            if pod["metadata"].get("deletionTimestamp")
            else f'pod {name} is already assigned to node "{spec["nodeName"]}"'
            if spec.get("nodeName")
            else f"pod {name} has non-empty .spec.schedulingGates"
            if spec.get("schedulingGates")
            else None
        )
        if refusal:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": {refusal}',
                {"name": name, "kind": "pods/binding"},
            )
        bound = json_copy(pod)
        bound["spec"]["nodeName"] = binding["target"]["name"]
        for key in ("annotations", "labels"):
            if binding["metadata"].get(key):
                bound["metadata"].setdefault(key, {}).update(binding["metadata"][key])
        status = bound.setdefault("status", {})
        status.pop("nominatedNodeName", None)
        conditions = status.setdefault("conditions", [])  # podutil.UpdatePodCondition
        at = next((i for i, c in enumerate(conditions) if c.get("type") == "PodScheduled"), None)
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}
        if at is None:
            conditions.append(scheduled)
        elif conditions[at].get("status") != "True":
            conditions[at] = scheduled
        bound["metadata"]["resourceVersion"] = self._next_rv()
        return bound

    # -- the Eviction API: kubernetes pkg/registry/core/pod/storage/eviction.go (1.36),
    # EvictionREST.Create behind k8s.io/apiserver pkg/endpoints/handlers/create.go

    def _evict(self, target: Target, _q: dict, content_type: str, body: bytes) -> tuple:
        eviction = self._decode(body, content_type)
        meta = eviction.setdefault("metadata", {})
        _same_namespace(target, meta)
        self._restrict_node("CREATE", target, eviction, None)  # before the lookup, as create.go
        if meta.get("name") != target.name:  # Create's first check
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        # createValidation: the Eviction is the object admitted
        self._admit_created(target, eviction, ("policy/v1", "Eviction"))
        pod = self._existing(target)
        if not _can_ignore_budget(pod):
            self._check_and_decrement(pod)
        self._disrupt_and_delete(target, pod, eviction.get("deleteOptions") or {})
        return 201, json_copy(_CREATED)

    def _admit_created(self, target: Target, obj: dict, kind: tuple[str, str]) -> None:
        """A subresource create admitted with `obj` (of `kind`) as its object: createValidation."""
        if self._attrs is not None:
            self._warnings += self.admission.policies.admit(
                self._stored,
                self._attrs.user,
                "CREATE",
                target,
                obj,
                None,
                namespace_of=self._namespace,
                kind=kind,
            )

    def _disrupt_and_delete(self, target: Target, pod: dict, options: dict) -> None:
        """addConditionAndDeletePod: preconditions, DisruptionTarget (a new version), delete.

        Its getLatestPod refuses a precondition the stored pod does not meet (a Conflict on
        the GroupResource `Pod`); conditionAppender sets the condition (podutil
        UpdatePodCondition: lastTransitionTime moves only when its status changes). The
        delete is graceful with `graceful_pods` (the Eviction's deleteOptions' period, else
        the pod's), else immediate (see the module's differences).
        """
        _check_preconditions("Pod", pod["metadata"], options.get("preconditions") or {})
        updated = json_copy(pod)
        conditions = updated.setdefault("status", {}).setdefault("conditions", [])
        at = next((i for i, c in enumerate(conditions) if c.get("type") == _DISRUPTED), None)
        previous = conditions[at] if at is not None else {}
        condition = {
            "type": _DISRUPTED,
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
            "lastTransitionTime": (
                previous["lastTransitionTime"]
                if previous.get("status") == "True" and previous.get("lastTransitionTime")
                else _now()
            ),
        }
        if at is None:  # UpdatePodCondition: appended, or changed where it stands
            conditions.append(condition)
        else:
            conditions[at] = {**previous, **condition}
        if updated != pod:
            updated["metadata"]["resourceVersion"] = self._next_rv()
            self._store[target.key()] = updated
        orphan = options.get("propagationPolicy") == "Orphan"
        if self._graceful(target):
            # eviction.go deletes with rest.ValidateAllObjectFunc: no admission of the delete
            self._delete_pod(target, updated, options, orphan=orphan, admit=False)
        else:
            self._remove(target.key(), orphan=orphan)

    def _check_and_decrement(self, pod: dict) -> None:
        """The pod's PodDisruptionBudget allows its eviction, which it then counts.

        Create's budget step: more than one budget is a 500; an unready pod (podutil
        IsPodReady) goes without a decrement under unhealthyPodEvictionPolicy AlwaysAllow,
        or under IfHealthyBudget (the default) while currentHealthy >= desiredHealthy > 0;
        then checkAndDecrement: a budget its controller has not observed (429, retry after
        10 s), a negative count or a disruptedPods map over MaxDisruptedPodSize (403), none
        allowed (429 naming the healthy counts); else disruptionsAllowed - 1, the
        DisruptionAllowed condition when it reaches 0, and the pod in disruptedPods,
        written to the budget's status.
        """
        budget = self._budget_of(pod)
        if budget is None:
            return
        name = budget["metadata"]["name"]
        status = self._budget_status(budget)
        if not _pod_ready(pod):
            if (budget.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
                return
            if status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) > 0:
                return
        disallowed = "Cannot evict pod as it would violate the pod's disruption budget."
        if status.get("observedGeneration", 0) < budget["metadata"].get("generation", 1):
            cause = f"The disruption budget {name} is still being processed by the server."
            raise ApiError(
                429,
                "TooManyRequests",
                disallowed,
                {
                    "causes": [{"reason": "DisruptionBudget", "message": cause}],
                    "retryAfterSeconds": 10,
                },
            )
        allowed = status.get("disruptionsAllowed", 0)
        disrupted = dict(status.get("disruptedPods") or {})
        for refused, why in (
            (allowed < 0, "pdb disruptions allowed is negative"),
            (
                len(disrupted) > MAX_DISRUPTED_PODS,
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            ),
        ):
            if refused:
                raise ApiError(
                    403,
                    "Forbidden",
                    f'poddisruptionbudget.policy "{name}" is forbidden: {why}',
                    {"name": name, "group": "policy", "kind": "poddisruptionbudget"},
                )
        if allowed == 0:
            cause = (
                f"The disruption budget {name} needs {status.get('desiredHealthy', 0)} healthy "
                f"pods and has {status.get('currentHealthy', 0)} currently"
            )
            raise ApiError(
                429,
                "TooManyRequests",
                disallowed,
                {"causes": [{"reason": "DisruptionBudget", "message": cause}]},
            )
        disrupted[pod["metadata"]["name"]] = _now()
        status = {**status, "disruptionsAllowed": allowed - 1, "disruptedPods": disrupted}
        if allowed - 1 == 0:
            _disruption_allowed_condition(status)
        updated = {**json_copy(budget), "status": status}
        updated["metadata"]["resourceVersion"] = self._next_rv()
        namespace = budget["metadata"]["namespace"]
        self._store[f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"] = (
            updated
        )

    def _budget_of(self, pod: dict) -> dict | None:
        """The PodDisruptionBudget of `pod` (getPodDisruptionBudgets); more than one is a 500."""
        namespace, labels = pod["metadata"]["namespace"], pod["metadata"].get("labels") or {}
        prefix = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/"
        budgets = [
            b
            for b in self._stored(prefix)
            # a nil or empty selector matches nothing
            if (b.get("spec") or {}).get("selector")
            and selector_matches(b["spec"]["selector"], labels)
        ]
        if len(budgets) > 1:
            raise ApiError(
                500,
                "",
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
            )
        return budgets[0] if budgets else None

    def _budget_status(self, budget: dict) -> dict:
        """The budget's status as the disruption controller keeps it (`disruption_controller`).

        kubernetes pkg/controller/disruption/disruption.go: currentHealthy counts the
        selected pods that are Ready, not terminating and not in disruptedPods
        (countHealthyPods); desiredHealthy is minAvailable, or a percentage of, or the
        expected count less maxUnavailable (getExpectedPodCount, rounding up); here the
        expected count is the selected pods that have not finished (the controller reads
        their controllers' scale); disruptionsAllowed = currentHealthy - desiredHealthy, at
        least 0. Without the stand-in the stored status is read as written.
        """
        status = json_copy(budget.get("status") or {})
        if not self.disruption_controller:
            return status
        spec, namespace = budget.get("spec") or {}, budget["metadata"]["namespace"]
        pods = [
            p
            for p in self._stored(f"/api/v1/namespaces/{namespace}/pods/")
            if selector_matches(spec.get("selector"), p["metadata"].get("labels") or {})
        ]
        disrupted = {
            k: v
            for k, v in (status.get("disruptedPods") or {}).items()
            if any(
                p["metadata"]["name"] == k and not p["metadata"].get("deletionTimestamp")
                for p in pods
            )
        }
        healthy = sum(
            1
            for p in pods
            if _pod_ready(p)
            and not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["name"] not in disrupted
        )
        expected = sum(
            1 for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
        if "minAvailable" in spec:
            desired = _scaled(spec["minAvailable"], expected)
        else:
            desired = max(expected - _scaled(spec.get("maxUnavailable", 1), expected), 0)
        status.update(
            observedGeneration=budget["metadata"].get("generation", 1),
            currentHealthy=healthy,
            desiredHealthy=desired,
            expectedPods=expected,
            disruptionsAllowed=max(healthy - desired, 0),
        )
        if disrupted:
            status["disruptedPods"] = disrupted
        else:
            status.pop("disruptedPods", None)
        return status


# The pod condition an eviction sets (kubernetes api core/v1 types.go DisruptionTarget).
_DISRUPTED = "DisruptionTarget"
# What a subresource's create answers (a Binding's, an Eviction's): metav1.Status Success
_CREATED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
# eviction.go MaxDisruptedPodSize
MAX_DISRUPTED_PODS = 2000


def _can_ignore_budget(pod: dict) -> bool:
    """eviction.go canIgnorePDB: a finished or Pending pod, or one already terminating."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(
        pod["metadata"].get("deletionTimestamp")
    )


def _pod_ready(pod: dict) -> bool:
    """Ready as kubernetes pkg/api/v1/pod IsPodReady says: its Ready condition is True."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _scaled(value: int | str, total: int) -> int:
    """An int-or-percent of `total`, rounded up (intstr.GetScaledValueFromIntOrPercent)."""
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * total // 100)
    return int(value)


def _disruption_allowed_condition(status: dict) -> None:
    """pdbhelper.UpdateDisruptionAllowedCondition once none is allowed (meta SetStatusCondition).

    k8s.io/component-helpers apps/poddisruptionbudget helpers.go: DisruptionAllowed False,
    reason InsufficientPods, the status's observedGeneration; its lastTransitionTime moves
    only when its status changes.
    """
    conditions = [
        c for c in status.get("conditions") or [] if c.get("type") != "DisruptionAllowed"
    ]
    previous = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), {}
    )
    since = previous.get("lastTransitionTime") if previous.get("status") == "False" else None
    conditions.append(
        {
            "type": "DisruptionAllowed",
            "status": "False",
            "reason": "InsufficientPods",
            "message": "",
            "observedGeneration": status.get("observedGeneration", 0),
            "lastTransitionTime": since or _now(),
        }
    )
    status["conditions"] = conditions


_PROXY = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/:]+)(?::([^/]+))?/proxy(/.*)?$")


class Listener:
    """One more address of a `FakeKubeApiServer` (`serve_also`)."""

    def __init__(self, api: FakeKubeApiServer) -> None:
        self._api = api
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Listener:
        httpd = _Server(("127.0.0.1", 0), _Handler)
        if self._api.tls is not None:
            httpd.socket = self._api.tls.requesting_server_context().wrap_socket(
                httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        httpd.daemon_threads = True
        httpd.api = self._api  # type: ignore[attr-defined]
        httpd.connections = set()  # type: ignore[attr-defined]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        assert self._httpd is not None, "listener not started"
        scheme = "https" if self._api.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        """Stop answering here and reset the connections accepted here (a lost machine)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        with self._api._lock:
            for conn in list(httpd.connections):  # type: ignore[attr-defined]
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)


class _Server(serving.ThreadingHTTPServer):
    """The listener: a client gone before or during its request is not the server's error.

    socketserver prints every exception of a request to stderr (`handle_error`): a TLS
    handshake a client dropped (HAProxy's TCP health check, a client that timed out) is
    not one, and its traceback in the test log looked like a failure. Anything else is
    printed as before.
    """

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # idle keep-alive connections end by themselves

    def setup(self) -> None:
        # Over TLS the handshake runs here, not in accept() (do_handshake_on_connect is
        # off): a client that drops it fails this request, whose socket the server closes,
        # instead of leaving a half-made SSLSocket to the garbage collector (a
        # ResourceWarning in whichever test runs then; as c52317c did for test_api_proxy)
        handshake = getattr(self.request, "do_handshake", None)
        if handshake is not None:
            handshake()
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.api._lock:  # type: ignore[attr-defined]
            self.server.api._connections.add(self.connection)  # type: ignore[attr-defined]
            getattr(self.server, "connections", set()).add(self.connection)

    def finish(self) -> None:
        with self.server.api._lock:  # type: ignore[attr-defined]
            self.server.api._connections.discard(self.connection)  # type: ignore[attr-defined]
            getattr(self.server, "connections", set()).discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Keep test output quiet."""

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        api: FakeKubeApiServer = self.server.api  # type: ignore[attr-defined]
        getpeercert = getattr(self.connection, "getpeercert", None)
        peer = getpeercert(binary_form=True) if getpeercert is not None else None
        answer = api.handle(self.command, self.path, self.headers, body, peer)
        if answer[0] == "reset":
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            self.close_connection = True
            return
        code, content_type, payload, extra = answer
        if isinstance(payload, kube_stream.Upgrade):
            self.close_connection = True
            payload.serve(self.connection, self.wfile)
            return
        if isinstance(payload, kube_watch.Watch):
            self._stream(content_type, payload)
            return
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in extra.items():
            for one in value if isinstance(value, list) else [value]:
                self.send_header(key, one)
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, content_type: str, watch: kube_watch.Watch) -> None:
        """A watch: 200, then each event as an HTTP/1.1 chunk until the watch ends."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            self.wfile.flush()
            for line in watch.stream(self.connection):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client went away
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815


def _page(items: list[dict], query: dict, meta: dict) -> list[dict]:
    """The page of a list asked with `limit` (and `continue`), its token put in `meta`.

    A chunked list answers at most `limit` items and, when more match, ListMeta.continue,
    which the next request sends back with the same query, and remainingItemCount
    (k8s.io/apimachinery pkg/apis/meta/v1 types.go ListOptions Limit/Continue, ListMeta;
    k8s.io/apiserver pkg/storage/etcd3 store.go GetList: a continue key that does not
    decode is a 400 BadRequest). The fake's token is the last name and namespace answered, base64.
    """
    token, limit = query.get("continue"), int(query.get("limit") or 0)
    if not token and limit <= 0:
        return items
    key = lambda i: [i["metadata"]["name"], i["metadata"].get("namespace") or ""]  # noqa: E731
    items = sorted(items, key=key)
    if token:
        try:
            after = json.loads(base64.b64decode(token.encode(), validate=True))
        except ValueError:
            raise ApiError(400, "BadRequest", "continue key is not valid") from None
        items = [i for i in items if key(i) > after]
    if limit <= 0 or len(items) <= limit:
        return items
    meta["continue"] = base64.b64encode(json.dumps(key(items[limit - 1])).encode()).decode()
    meta["remainingItemCount"] = len(items) - limit
    return items[:limit]
