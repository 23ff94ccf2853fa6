# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""A small, retrying Kubernetes client shared by the gpu-k8s charms.

`Kube` talks to the API server through the official `kubernetes` Python client, using raw
resource paths for generic CRUD (so one code path serves every kind in `KINDS`), and adds
what charms need on top: server-side apply, cordon/drain through the Eviction API, and
errors as `KubeError(status, reason, message)` carrying the server's `Status` message.

The `kubernetes` package is heavy, so it is imported only when a client is built: importing
this module costs almost nothing (hooks that do not touch the cluster do not pay for it).

Retries: every request goes through urllib3's `Retry`, configured on the client's
`Configuration.retries`: up to `retries` attempts more on 429/500/502/503/504 responses and on
connection errors, connection resets and read errors, with exponential backoff (`backoff`
seconds times 2**n) and honouring `Retry-After`. All verbs are retried, POST included: our
creates are idempotent because every object has a fixed name and a repeated create answers
409, which callers treat as "already exists" (do not retry-create objects with `generateName`).
When retries are exhausted the last response becomes a `KubeError`; a connection that never
answered becomes `KubeError(status=0, reason="ConnectionError")`.

`Kube.requests` counts every HTTP request actually sent on the wire, retries included: it is
incremented by the urllib3 connection pool each time it sends a request.

Example::

    kube = Kube.from_kubeconfig(kubeconfig_text)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tf"}},
               field_manager="tensorflow")
    pods = kube.list("v1", "Pod", "tf", label_selector="job=mnist")
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

if TYPE_CHECKING:  # pragma: no cover
    from kubernetes.client import ApiClient

LIBID = "1c1c281a9eb64d9594fd86aa76205351"
LIBAPI = 0
LIBPATCH = 7

logger = logging.getLogger(__name__)

# What `kubectl get` sends to have the API server print objects as a Table.
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io, application/json"

T = TypeVar("T")

# (apiVersion, kind) -> (plural resource name, namespaced)
KINDS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Node"): ("nodes", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Service"): ("services", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "PersistentVolume"): ("persistentvolumes", False),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "Event"): ("events", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("apps/v1", "DaemonSet"): ("daemonsets", True),
    ("apps/v1", "StatefulSet"): ("statefulsets", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("rbac.authorization.k8s.io/v1", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("rolebindings", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("node.k8s.io/v1", "RuntimeClass"): ("runtimeclasses", False),
    ("policy/v1", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("storage.k8s.io/v1", "StorageClass"): ("storageclasses", False),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("priorityclasses", False),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): (
        "mutatingwebhookconfigurations",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): (
        "validatingwebhookconfigurations",
        False,
    ),
    ("apiregistration.k8s.io/v1", "APIService"): ("apiservices", False),
}

RETRY_STATUSES = (429, 500, 502, 503, 504)
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


class KubeError(Exception):
    """An API error after retries: HTTP status (0 = no answer), `Status` reason and message."""

    def __init__(self, status: int, reason: str, message: str):
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}")


def poll_until(
    check: Callable[[], T | None],
    timeout: float,
    *,
    poll: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T | None:
    """Call `check` until it returns something other than None, or `timeout` passes.

    Returns that result, or None on timeout. `check` runs at least once; the loop is also
    bounded by the number of polls `timeout` allows, so a clock that stands still (as in
    tests) cannot make it spin forever.
    """
    deadline = clock() + timeout
    for _ in range(int(timeout / max(poll, 1e-3)) + 2):
        result = check()
        if result is not None:
            return result
        left = deadline - clock()
        if left <= 0:
            break
        sleep(min(poll, left))
    return None


# Set on a Node together with `spec.unschedulable` by `Kube.cordon`: the cordon is ours,
# so `Kube.uncordon` may lift it. A cordon without it (an operator's `kubectl cordon`)
# is left alone. Kept on the Node itself, it survives a hook that fails mid-drain.
CORDON_ANNOTATION = "gpu-k8s/cordoned"


def _cordoned_by_us(node: dict) -> bool:
    return CORDON_ANNOTATION in (node.get("metadata", {}).get("annotations") or {})


@dataclasses.dataclass
class DrainResult:
    """What `Kube.drain` did: pods (as "namespace/name") evicted and still remaining."""

    evicted: list[str]
    remaining: list[str]
    timed_out: bool


def _check_named_entries(config: dict, section: str, inner: str) -> dict[str, dict]:
    entries = config.get(section)
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"kubeconfig has no {section}")
    named = {}
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("name"):
            raise ValueError(f"kubeconfig {section} entry without a name")
        if not isinstance(entry.get(inner), dict):
            raise ValueError(f"kubeconfig {section} entry {entry['name']!r} has no {inner}")
        named[entry["name"]] = entry[inner]
    return named


def load_kubeconfig(text: str) -> dict:
    """Parse kubeconfig YAML and check that its current context is usable.

    Raises:
        ValueError: the text is not YAML, or it lacks a cluster server, a user or a context
            that the current context needs. The message never echoes the text (it holds
            credentials).
    """
    import yaml

    try:
        config = yaml.safe_load(text) if text else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"kubeconfig is not valid YAML{where}") from None
    if not isinstance(config, dict):
        raise ValueError("kubeconfig must be a YAML mapping with clusters, users and contexts")
    clusters = _check_named_entries(config, "clusters", "cluster")
    users = _check_named_entries(config, "users", "user")
    contexts = _check_named_entries(config, "contexts", "context")
    current = config.get("current-context")
    if not current and len(contexts) == 1:
        current = config["current-context"] = next(iter(contexts))
    if current not in contexts:
        raise ValueError(f"kubeconfig current-context {current!r} is not among its contexts")
    context = contexts[current]
    cluster = clusters.get(context.get("cluster", ""))
    if cluster is None:
        raise ValueError(f"kubeconfig context {current!r} names an unknown cluster")
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise ValueError(f"kubeconfig cluster {context['cluster']!r} needs an http(s) server URL")
    if context.get("user") not in users:
        raise ValueError(f"kubeconfig context {current!r} names an unknown user")
    return config


class _Counter:
    """A thread-safe request counter."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.value += 1


def _counting_pool_classes(counter: _Counter) -> dict[str, type]:
    """urllib3 connection pools that call `counter` for every request sent on the wire."""
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    def counting(base: type) -> type:
        def _make_request(self: Any, *args: Any, **kwargs: Any) -> Any:
            counter()
            return base._make_request(self, *args, **kwargs)

        return type(f"Counting{base.__name__}", (base,), {"_make_request": _make_request})

    return {"http": counting(HTTPConnectionPool), "https": counting(HTTPSConnectionPool)}


def _retry(retries: int, backoff: float) -> Any:
    """urllib3 `Retry` for every verb; evictions refused with 429 are left to `Kube.drain`."""
    from urllib3.exceptions import MaxRetryError
    from urllib3.util.retry import Retry

    class _KubeRetry(Retry):
        def increment(
            self,
            method: str | None = None,
            url: str | None = None,
            response: Any = None,
            error: Exception | None = None,
            _pool: Any = None,
            _stacktrace: Any = None,
        ) -> Retry:
            """Count one retry; some answers are final (urllib3 then returns them as is).

            A PodDisruptionBudget refusal (429 on an eviction) must reach `Kube.drain`,
            which polls on its own clock, instead of being retried here with the server's
            Retry-After; so must a service proxy's 502/503 (no ready endpoint yet, or the
            backend is down), which its caller polls for.
            """
            if response is not None and response.status == 429 and "/eviction" in (url or ""):
                raise MaxRetryError(_pool, url or "", None)
            if response is not None and response.status in (502, 503) and "/proxy/" in (url or ""):
                raise MaxRetryError(_pool, url or "", None)
            return super().increment(method, url, response, error, _pool, _stacktrace)

    return _KubeRetry(
        total=retries,
        connect=retries,
        read=retries,
        status=retries,
        other=retries,
        redirect=0,
        allowed_methods=None,  # every verb: creates are idempotent (409 on repeat)
        status_forcelist=RETRY_STATUSES,
        backoff_factor=backoff,
        backoff_max=max(backoff * 16, backoff),
        respect_retry_after_header=True,
        raise_on_status=False,
    )


class Kube:
    """Generic CRUD, server-side apply and node drain against one cluster."""

    def __init__(self, api_client: ApiClient, *, timeout: float = 30.0):
        """Wrap a configured `kubernetes.client.ApiClient` (see `from_kubeconfig`)."""
        self._api = api_client
        self._timeout = timeout
        self.kinds = dict(KINDS)
        self._counter = _Counter()
        pool_manager = getattr(api_client.rest_client, "pool_manager", None)
        self._count_on_wire = hasattr(pool_manager, "pool_classes_by_scheme")
        if self._count_on_wire:
            pool_manager.pool_classes_by_scheme = _counting_pool_classes(self._counter)  # type: ignore[union-attr]

    @classmethod
    def from_kubeconfig(
        cls, text: str, *, retries: int = 5, timeout: float = 30.0, backoff: float = 0.5
    ) -> Kube:
        """Build a client from kubeconfig text (raises ValueError when it is malformed).

        Args:
            text: kubeconfig YAML.
            retries: retries per request on 429/5xx answers and connection errors.
            timeout: seconds one HTTP request may take.
            backoff: base of the exponential backoff between retries, in seconds.
        """
        config_dict = load_kubeconfig(text)
        from kubernetes import client, config

        configuration = client.Configuration()
        configuration.retries = _retry(retries, backoff)
        try:
            api_client = config.new_client_from_config_dict(
                config_dict, client_configuration=configuration, persist_config=False
            )
        except (config.ConfigException, ValueError, TypeError) as e:
            # e.g. certificate data that is not base64; the message names keys, not values
            raise ValueError(f"kubeconfig is not usable: {type(e).__name__}: {e}") from None
        return cls(api_client, timeout=timeout)

    @property
    def requests(self) -> int:
        """HTTP requests sent so far, retries included."""
        return self._counter.value

    def close(self) -> None:
        """Close pooled connections."""
        self._api.close()

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- low level

    def path(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The resource path of a kind, collection or object (namespace ignored if cluster-wide).

        Raises:
            ValueError: unknown kind, or a namespaced object named without a namespace.
        """
        try:
            plural, namespaced = self.kinds[(api_version, kind)]
        except KeyError:
            raise ValueError(
                f"unknown kind {kind} in {api_version}: add it to Kube.kinds"
            ) from None
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced and namespace:
            path += f"/namespaces/{quote(namespace, safe='')}"
        elif namespaced and name is not None:
            raise ValueError(f"{kind} {name!r} is namespaced: give its namespace")
        path += f"/{plural}"
        if name is not None:
            if not name:
                raise ValueError(f"{kind} needs a non-empty name")
            path += f"/{quote(name, safe='')}"
        if subresource:
            path += f"/{subresource}"
        return path

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json, */*",
    ) -> Any:
        """Send one API request (with retries); JSON answers are decoded, others returned as text.

        Raises:
            KubeError: the server answered an error status, or never answered.
        """
        import urllib3
        from kubernetes.client.exceptions import ApiException

        params = [
            (k, str(v).lower() if isinstance(v, bool) else v)
            for k, v in (query or {}).items()
            if v is not None
        ]
        headers = {"Content-Type": content_type, "Accept": accept}
        serialized = self._api.param_serialize(
            method,
            path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        if not self._count_on_wire:
            self._counter()
        logger.debug("kube %s %s", method, path)
        try:
            response = self._api.call_api(*serialized, _request_timeout=self._timeout)
            data = response.read()
            response.response.release_conn()
        except urllib3.exceptions.HTTPError as e:
            raise KubeError(0, "ConnectionError", f"{method} {path}: {e}") from None
        except ApiException as e:
            raise KubeError(e.status or 0, "ClientError", str(e.reason)) from None
        text = data.decode("utf-8", errors="replace") if data else ""
        is_json = "json" in (response.headers.get("Content-Type") or "")
        if not 200 <= response.status <= 299:
            raise self._error(response.status, response.reason, text if is_json else "")
        return json.loads(text) if is_json and text else text

    @staticmethod
    def _error(status: int, http_reason: str | None, text: str) -> KubeError:
        try:
            body = json.loads(text) if text else {}
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        reason = body.get("reason") or http_reason or "Unknown"
        return KubeError(status, reason, body.get("message") or http_reason or f"HTTP {status}")

    # -- CRUD

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict | None:
        """The object, or None when it does not exist."""
        try:
            return self.request("GET", self.path(api_version, kind, namespace, name))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    def table(
        self, api_version: str, kind: str, namespace: str | None = None, **query: Any
    ) -> list[dict[str, Any]]:
        """The rows `kubectl get` shows ({column name: cell}) for every object of a kind.

        The API server prints them itself when asked for a `meta.k8s.io/v1` Table, so a
        caller that needs a node's readiness reads a few columns instead of whole
        objects (a Node is several KB of images and conditions).

        Raises:
            KubeError: the request failed, or the server did not answer with a Table.
        """
        answer = self.request(
            "GET",
            self.path(api_version, kind, namespace),
            query={**query, "includeObject": "None"},
            accept=TABLE_ACCEPT,
        )
        if not isinstance(answer, dict) or answer.get("kind") != "Table":
            raise KubeError(0, "NotATable", f"the API server did not print {kind} as a Table")
        columns = [c.get("name", "") for c in answer.get("columnDefinitions") or []]
        return [dict(zip(columns, row.get("cells") or [])) for row in answer.get("rows") or []]

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict]:
        """Objects of a kind (every namespace when `namespace` is None), with apiVersion/kind."""
        query = {"labelSelector": label_selector, "fieldSelector": field_selector}
        answer = self.request("GET", self.path(api_version, kind, namespace), query=query)
        items = answer.get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def _manifest_path(self, manifest: dict, with_name: bool) -> str:
        try:
            api_version, kind = manifest["apiVersion"], manifest["kind"]
            meta = manifest.get("metadata") or {}
        except (KeyError, TypeError):
            raise ValueError("manifest needs apiVersion, kind and metadata") from None
        name = meta.get("name")
        if with_name and not name:
            raise ValueError(f"{kind} manifest needs metadata.name")
        plural, namespaced = self.kinds.get((api_version, kind), ("", False))
        if namespaced and not meta.get("namespace"):
            raise ValueError(f"{kind} {name or ''} manifest needs metadata.namespace")
        return self.path(api_version, kind, meta.get("namespace"), name if with_name else None)

    def apply(self, manifest: dict, *, field_manager: str, force: bool = True) -> dict:
        """Server-side apply: create the object or merge it into the live one; returns it."""
        path = self._manifest_path(manifest, with_name=True)
        query = {"fieldManager": field_manager, "force": force}
        return self.request(
            "PATCH", path, query=query, body=manifest, content_type="application/apply-patch+yaml"
        )

    def create(self, manifest: dict) -> dict:
        """Create the object; an existing one raises `KubeError` with status 409."""
        return self.request("POST", self._manifest_path(manifest, with_name=False), body=manifest)

    def replace(self, manifest: dict) -> dict:
        """PUT the whole object; a stale metadata.resourceVersion raises KubeError 409."""
        return self.request("PUT", self._manifest_path(manifest, with_name=True), body=manifest)

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: dict,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict:
        """JSON merge patch (None values delete keys); returns the patched object."""
        path = self.path(api_version, kind, namespace, name, subresource)
        return self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str = "Background",
    ) -> bool:
        """Delete the object (dependents per `propagation`); False when it was already gone."""
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise ValueError(
                f"propagation must be Background, Foreground or Orphan, not {propagation!r}"
            )
        path = self.path(api_version, kind, namespace, name)
        try:
            self.request("DELETE", path, query={"propagationPolicy": propagation})
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return True

    def delete_collection(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str
    ) -> int:
        """Delete every object matching a (required) label selector; returns how many."""
        if not label_selector or not label_selector.strip():
            raise ValueError(f"refusing to delete every {kind}: give a label selector")
        path = self.path(api_version, kind, namespace)
        query = {"labelSelector": label_selector, "propagationPolicy": "Background"}
        answer = self.request("DELETE", path, query=query)
        return len(answer.get("items") or []) if isinstance(answer, dict) else 0

    def pod_logs(
        self,
        name: str,
        namespace: str,
        *,
        tail_lines: int = 100,
        container: str | None = None,
        previous: bool = False,
    ) -> str:
        """The last `tail_lines` lines of a pod's (container's) log.

        `previous`: of the container's previous instance, the one that exited before its
        restart (400 when it never restarted).
        """
        path = self.path("v1", "Pod", namespace, name, "log")
        query: dict[str, Any] = {"tailLines": tail_lines, "container": container}
        if previous:
            query["previous"] = "true"
        answer = self.request("GET", path, query=query)
        return answer if isinstance(answer, str) else json.dumps(answer)

    # -- nodes

    def cordon(self, node: str) -> None:
        """Mark the node unschedulable, noting on it that the cordon is ours."""
        self.patch(
            "v1",
            "Node",
            node,
            {
                "metadata": {"annotations": {CORDON_ANNOTATION: "true"}},
                "spec": {"unschedulable": True},
            },
        )

    def uncordon(self, node: str) -> bool:
        """Lift a cordon that `cordon` set; True when the node is schedulable again.

        A cordon someone else set (no `CORDON_ANNOTATION`) stays, and so does a node
        that is gone: False.
        """
        current = self.get("v1", "Node", node)
        if current is None:
            return False
        if not _cordoned_by_us(current):
            if current.get("spec", {}).get("unschedulable"):
                logger.info("node %s stays cordoned: it was cordoned by someone else", node)
                return False
            return True
        self.patch(
            "v1",
            "Node",
            node,
            {
                "metadata": {"annotations": {CORDON_ANNOTATION: None}},
                "spec": {"unschedulable": None},
            },
        )
        return True

    def delete_node(self, node: str) -> bool:
        """Delete the Node object; False when it was already gone."""
        return self.delete("v1", "Node", node)

    def _evictable_pods(self, node: str) -> dict[str, str]:
        """Pods on the node that a drain evicts, as {"ns/name": uid}."""
        pods = {}
        for pod in self.list("v1", "Pod", field_selector=f"spec.nodeName={node}"):
            meta = pod["metadata"]
            if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
                continue
            if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
                continue
            pods[f"{meta['namespace']}/{meta['name']}"] = meta.get("uid", "")
        return pods

    def _evict(self, pod: str) -> bool:
        """Ask the Eviction API to evict "ns/name": True if evicted or gone, False if blocked."""
        namespace, name = pod.split("/", 1)
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        try:
            self.request(
                "POST", self.path("v1", "Pod", namespace, name, "eviction"), body=eviction
            )
        except KubeError as e:
            if e.status == 404:
                return True
            if e.status == 429:
                logger.info("eviction of %s blocked: %s", pod, e.message)
                return False
            raise
        return True

    def drain(
        self,
        node: str,
        *,
        timeout: float,
        poll: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> DrainResult | None:
        """Cordon the node and evict its pods (not DaemonSet or mirror pods), waiting for them.

        Returns None when the node is not registered. A node someone else cordoned keeps
        that cordon (no annotation is added), so `uncordon` leaves it cordoned.
        Evictions refused with 429 (a PodDisruptionBudget) are retried every `poll` seconds
        until `timeout`; evicted pods are then awaited until they are gone from the node.
        Bounded by the clock and by the number of polls `timeout` allows.
        """
        current = self.get("v1", "Node", node)
        if current is None:
            return None
        if _cordoned_by_us(current) or not current.get("spec", {}).get("unschedulable"):
            self.cordon(node)
        pending = self._evictable_pods(node)
        evicted: list[str] = []
        terminating: dict[str, str] = {}

        def drained() -> bool | None:
            nonlocal terminating
            for pod in sorted(pending):
                if self._evict(pod):
                    evicted.append(pod)
                    terminating[pod] = pending.pop(pod)
            if terminating:
                present = self._evictable_pods(node)
                terminating = {p: u for p, u in terminating.items() if present.get(p) == u}
            return True if not pending and not terminating else None

        if poll_until(drained, timeout, poll=poll, clock=clock, sleep=sleep):
            return DrainResult(evicted, [], False)
        return DrainResult(evicted, sorted({*pending, *terminating}), True)
