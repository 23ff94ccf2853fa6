# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""A small, retrying Kubernetes client shared by the gpu-k8s charms.

`Kube` talks to the API server through the official `kubernetes` Python client, using raw
resource paths for generic CRUD (so one code path serves every kind in `KINDS`), and adds
what charms need on top: server-side apply, Table and log reads, and errors as
`KubeError(status, reason, message)` carrying the server's `Status` message. Cordon and
drain are in `drain.py`, the kubeconfig checks in `kubeconfig.py`.

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

Several API servers (`kubeconfig.servers`: one context per API server, same user, same
CA): client-go and the `kubernetes` client use one server and never try another
(kubeconfig.py says where that is written), so `Kube` fails over itself. A connection
that cannot be opened is not retried on the same server: the next server is tried at
once, and the client stays with the one that answered. After every server failed, the
round starts again after the backoff, `retries` times, as a single server's connection
errors are retried. An answer (any HTTP status) never fails over: every API server of a
cluster answers the same. A request that reached a server and got no answer (a read
error, after its own retries there) fails over too: our requests are idempotent (above).

`Kube.requests` counts every HTTP request actually sent on the wire, retries included: it is
incremented by the urllib3 connection pool each time it sends a request.

Example::

    kube = Kube.from_kubeconfig(kubeconfig_text)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tf"}},
               field_manager="tensorflow")
    pods = kube.list("v1", "Pod", "tf", label_selector="job=mnist")
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from charms.gpu_k8s.v0.kubeconfig import load_kubeconfig
from charms.gpu_k8s.v0.kubeconfig import servers as kubeconfig_servers

if TYPE_CHECKING:  # pragma: no cover
    from kubernetes.client import ApiClient

LIBID = "1c1c281a9eb64d9594fd86aa76205351"
LIBAPI = 0
LIBPATCH = 14

logger = logging.getLogger(__name__)

# What `kubectl get` sends to have the API server print objects as a Table.
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io, application/json"

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
    ("v1", "ResourceQuota"): ("resourcequotas", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("apps/v1", "DaemonSet"): ("daemonsets", True),
    ("apps/v1", "StatefulSet"): ("statefulsets", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("rbac.authorization.k8s.io/v1", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("rolebindings", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("networkpolicies", True),
    ("node.k8s.io/v1", "RuntimeClass"): ("runtimeclasses", False),
    ("policy/v1", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("storage.k8s.io/v1", "StorageClass"): ("storageclasses", False),
    ("storage.k8s.io/v1", "CSIDriver"): ("csidrivers", False),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("priorityclasses", False),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): (
        "mutatingwebhookconfigurations",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (
        "validatingadmissionpolicies",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "validatingadmissionpolicybindings",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): (
        "validatingwebhookconfigurations",
        False,
    ),
    ("apiregistration.k8s.io/v1", "APIService"): ("apiservices", False),
    # JobSet v0.12 and Kueue v0.19 (their CRDs' group, version, plural and scope)
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): ("jobsets", True),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): ("resourceflavors", False),
    ("kueue.x-k8s.io/v1beta2", "Cohort"): ("cohorts", False),
    ("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass"): ("workloadpriorityclasses", False),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): ("clusterqueues", False),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): ("localqueues", True),
    ("kueue.x-k8s.io/v1beta2", "Workload"): ("workloads", True),
}

RETRY_STATUSES = (429, 500, 502, 503, 504)


class KubeError(Exception):
    """An API error after retries: HTTP status (0 = no answer), `Status` reason and message."""

    def __init__(self, status: int, reason: str, message: str):
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}")


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


def _retry(retries: int, backoff: float, *, connect: int | None = None) -> Any:
    """urllib3 `Retry` for every verb; evictions refused with 429 are left to `Kube.drain`.

    `connect`: retries of a connection that could not be opened (default `retries`; 0
    when another API server is there to try instead).
    """
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
        connect=retries if connect is None else connect,
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


def _credentials_expire(config_dict: dict) -> bool:
    """Whether the current context's user has credentials the loader must refresh."""
    contexts = {c.get("name"): c.get("context") or {} for c in config_dict.get("contexts") or []}
    user_name = contexts.get(config_dict.get("current-context"), {}).get("user")
    for entry in config_dict.get("users") or []:
        if entry.get("name") == user_name:
            user = entry.get("user") or {}
            return "auth-provider" in user or "exec" in user
    return True  # no such user: leave the loader's behaviour as it is


class Kube:
    """Generic CRUD, server-side apply and node drain against one cluster."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        timeout: float = 30.0,
        servers: Sequence[str] = (),
        rounds: int = 1,
        backoff: float = 0.5,
    ):
        """Wrap a configured `kubernetes.client.ApiClient` (see `from_kubeconfig`).

        `servers`: the API servers to fail over along, the client's own first (default:
        only its own); `rounds` and `backoff`: how often every one is tried when none
        answers, and the wait before each new round (doubled each time).
        """
        self._api = api_client
        self._timeout = timeout
        self._servers = list(servers) or [api_client.configuration.host]
        # Passed with every request: the kubeconfig loader's refresh_api_key_hook writes
        # the kubeconfig's own server back into the configuration before each request
        # (kubernetes/config/kube_config.py _refresh_api_key -> _set_config).
        self._host = self._servers[0]
        self._rounds = max(rounds, 1)
        self._backoff = backoff
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

        several = kubeconfig_servers(config_dict)
        configuration = client.Configuration()
        # with another API server to try, a refused connection goes there instead
        connect = 0 if len(several) > 1 else None
        configuration.retries = _retry(retries, backoff, connect=connect)
        try:
            api_client = config.new_client_from_config_dict(
                config_dict, client_configuration=configuration, persist_config=False
            )
        except (config.ConfigException, ValueError, TypeError) as e:
            # e.g. certificate data that is not base64; the message names keys, not values
            raise ValueError(f"kubeconfig is not usable: {type(e).__name__}: {e}") from None
        if not _credentials_expire(config_dict):
            # The loader's hook runs before every request and copies the kubeconfig back
            # into the configuration: the token (again), and the server, whose setter reads
            # every proxy variable of os.environ again (kubernetes 37.0.1
            # config/kube_config.py `_refresh_api_key` -> `_set_config`; client/
            # configuration.py `host.setter` -> `getproxies()`): ~0.35 ms of CPU a request.
            # It re-reads credentials only when they carry an expiry, which only an
            # `auth-provider` or `exec` user has (kube_config.py `_load_auth_provider_token`,
            # `_load_from_exec_plugin`); a static token or a client certificate never changes.
            api_client.configuration.refresh_api_key_hook = None
        if len(several) == 1:
            return cls(api_client, timeout=timeout)
        return cls(
            api_client, timeout=timeout, servers=several, rounds=retries + 1, backoff=backoff
        )

    @property
    def server(self) -> str:
        """The API server the next request goes to (the last one that answered)."""
        return self._host

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
        logger.debug("kube %s %s", method, path)
        tried = 0
        while True:
            serialized = self._api.param_serialize(
                method,
                path,
                query_params=params,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _host=self._host,
            )
            if not self._count_on_wire:
                self._counter()
            try:
                response = self._api.call_api(*serialized, _request_timeout=self._timeout)
                data = response.read()
                response.response.release_conn()
                break
            except urllib3.exceptions.HTTPError as e:
                tried += 1
                if tried >= len(self._servers) * self._rounds:
                    raise KubeError(0, "ConnectionError", f"{method} {path}: {e}") from None
                self._fail_over(e, tried)
            except ApiException as e:
                raise KubeError(e.status or 0, "ClientError", str(e.reason)) from None
        text = data.decode("utf-8", errors="replace") if data else ""
        is_json = "json" in (response.headers.get("Content-Type") or "")
        if not 200 <= response.status <= 299:
            raise self._error(response.status, response.reason, text if is_json else "")
        return json.loads(text) if is_json and text else text

    def _fail_over(self, error: Exception, tried: int) -> None:
        """Point the client at the next API server; wait first when a round ended."""
        at = self._servers.index(self._host)
        following = self._servers[(at + 1) % len(self._servers)]
        logger.warning(
            "API server %s did not answer (%s): trying %s",
            self._host,
            type(getattr(error, "reason", None) or error).__name__,
            following,
        )
        self._host = following
        if tried % len(self._servers) == 0:
            time.sleep(
                min(self._backoff * 2 ** (tried // len(self._servers) - 1), 16 * self._backoff)
            )

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
