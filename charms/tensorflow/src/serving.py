# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""`serve job=<n>`: TensorFlow Serving over a job's exported SavedModels (no ops).

A Deployment and a Service `<job>-serving`, labelled `gpu-k8s.io/serving: <job>` and not
`gpu-k8s.io/job`, so that `stop` and JobSet's TTL leave them alone; `unserve` removes them.
The container runs `tensorflow_model_server` (the `serving-image`, tensorflow/serving, its
`-gpu` variant when gpus > 0) with the job's export directory as the model base path; it
serves the highest numbered version there and picks up new ones (TensorFlow Serving's file
system source). Ports: gRPC 8500, REST 8501 (tensorflow_serving/tools/docker/Dockerfile).

The charm reaches the server through the API server's service proxy
(`/api/v1/namespaces/<ns>/services/<svc>:8501/proxy/...`, RBAC `services/proxy`), so it
needs no route into the cluster: it waits for the model status API to say AVAILABLE,
reads the serving signature's input width from the metadata API, and sends one request
of zeros to `:predict` (tensorflow_serving/g3doc/api_rest.md, TF Serving 2.20.0).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import network_policies
import oneshot
from job_state import server_state
from literals import DATA_MOUNT, GPU_RUNTIME_CLASS, LABEL_MANAGED_BY, LABEL_PRIORITY, LABEL_QUEUE
from params import JobParams

from charms.gpu_k8s.v0.config import between
from charms.gpu_k8s.v0.kube_objects import GPU_RESOURCE

LABEL_SERVING = "gpu-k8s.io/serving"
GRPC_PORT = 8500
REST_PORT = 8501
# `kubectl port-forward` stays in the foreground until stopped, so a command after it on
# the same line (`; curl ...`) never runs (review 2026-11-26, F9): the request goes in
# another terminal.
FOREGROUND = " (leave it running), then in another terminal: "
POLL_SECONDS = 5.0
# The served model's Kueue priority (a WorkloadPriorityClass of the control plane). Every
# pod of the team's namespace is admitted by Kueue within the team's quota (the control
# plane's kueue.configure: pod and deployment integrations), each model server pod one
# Workload. `high`: within the team's ClusterQueue Kueue preempts only lower priorities
# (withinClusterQueue LowerPriority, the control plane's kueue.py), so no training job of
# the team preempts a served model, not even a `train priority=high` one (equal priority
# does not preempt), while a model server that finds the team's quota full preempts the
# team's normal and low jobs to start (they checkpoint and are requeued). Other teams
# never preempt it within the team's guarantee (gpu-quota); what it borrows from the
# cohort's pool another team may reclaim (reclaimWithinCohort, fair sharing).
PRIORITY = "high"


class ServingError(Exception):
    """The model cannot be served as asked (the message says why)."""


class ServeParams(JobParams):
    """The `serve` action's parameters."""

    replicas: between(1, 20) = 1  # type: ignore[valid-type]
    # one GPU serves an ordinary SavedModel: TF Serving runs the graph as placed, on the
    # first visible GPU (tensorflow/serving#311, #2111); more throughput is more replicas
    gpus: between(0, 1) = 0  # type: ignore[valid-type]
    timeout: between(10, 3600, "seconds") = 300  # type: ignore[valid-type]


def name_of(job: str) -> str:
    """The Deployment and Service serving a job's model."""
    return f"{job}-serving"


def labels(app: str, job: str) -> dict[str, str]:
    """The labels of a job's serving objects (no gpu-k8s.io/job: `stop` leaves them)."""
    return {LABEL_MANAGED_BY: app, LABEL_SERVING: job}


def gpu_variant(image: str) -> str:
    """tensorflow/serving:2.20.0 -> tensorflow/serving:2.20.0-gpu (other images as they are)."""
    repo, _, tag = image.rpartition(":")
    if repo.endswith("tensorflow/serving") and tag and not tag.endswith("-gpu"):
        return f"{image}-gpu"
    return image


def manifests(
    params: ServeParams, ctx: Any, image: str, api_servers: list[str] | None = None
) -> list[dict[str, Any]]:
    """The Deployment, Service and NetworkPolicy (`ctx`: manifests.Context).

    `image`: the serving image; `api_servers`: the addresses the control-plane nodes reach
    pods from (network_policies.api_server_addresses), allowed to the REST port.
    """
    lbls = labels(ctx.app, params.job)
    name = name_of(params.job)
    container: dict[str, Any] = {
        "name": "serving",
        "image": ctx.pulled(gpu_variant(image) if params.gpus else image),
        "command": [
            "tensorflow_model_server",
            f"--port={GRPC_PORT}",
            f"--rest_api_port={REST_PORT}",
            f"--model_name={params.job}",
            f"--model_base_path={DATA_MOUNT}/jobs/{params.job}/export",
        ],
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT},
            {"name": "http", "containerPort": REST_PORT},
        ],
        "readinessProbe": {
            "httpGet": {"path": f"/v1/models/{params.job}", "port": REST_PORT},
            "periodSeconds": 5,
        },
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
        "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT, "readOnly": True}],
    }
    pod: dict[str, Any] = {
        **ctx.pod_basics(),
        "containers": [ctx.restricted(container)],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": ctx.claim, "readOnly": True}}
        ],
    }
    if params.gpus:
        container["resources"]["limits"] = {GPU_RESOURCE: str(params.gpus)}
        pod["runtimeClassName"] = GPU_RUNTIME_CLASS
        pod["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists"}]
    meta = {"name": name, "namespace": ctx.namespace, "labels": lbls}
    queued = oneshot.queued(lbls, ctx.queue, PRIORITY)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**meta, "labels": queued},
        "spec": {
            "replicas": params.replicas,
            "selector": {"matchLabels": lbls},
            "strategy": rollout(params.gpus),
            "template": {"metadata": {"labels": queued}, "spec": pod},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": dict(meta),
        "spec": {
            "selector": lbls,
            "ports": [
                {"name": "grpc", "port": GRPC_PORT, "targetPort": GRPC_PORT},
                {"name": "http", "port": REST_PORT, "targetPort": REST_PORT},
            ],
        },
    }
    policy = network_policies.serving(
        name, ctx.namespace, lbls, (GRPC_PORT, REST_PORT), api_servers or []
    )
    return [deployment, service, policy]


def rollout(gpus: int) -> dict[str, Any]:
    """How a changed Deployment replaces its pods.

    The default RollingUpdate surges 25% rounded up (kubernetes.io/docs/concepts/workloads/
    controllers/deployment, "Max Surge"): one extra pod that needs a GPU of its own, which a
    full cluster does not have, so the old pod keeps answering and the change never lands.
    A GPU server replaces one pod at a time instead (with one replica: a short gap).
    """
    if not gpus:
        return {"type": "RollingUpdate"}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def proxy_path(namespace: str, job: str, path: str) -> str:
    """A path of the model server's REST API through the API server's service proxy."""
    return f"/api/v1/namespaces/{namespace}/services/{name_of(job)}:{REST_PORT}/proxy{path}"


def available_version(status: Mapping[str, Any]) -> str | None:
    """The highest version the model status API reports AVAILABLE, or None."""
    versions = [
        v.get("version", "")
        for v in status.get("model_version_status") or []
        if v.get("state") == "AVAILABLE"
    ]
    return max(versions, key=lambda v: int(v) if str(v).isdigit() else -1, default=None)


def input_width(metadata: Mapping[str, Any], signature: str = "serving_default") -> int:
    """The width of the serving signature's one input, from the metadata API's answer.

    Raises:
        ServingError: the model has no such signature or not one 2-D input of known width.
    """
    try:
        defs = metadata["metadata"]["signature_def"]["signature_def"]
        inputs = defs[signature]["inputs"]
    except (KeyError, TypeError):
        raise ServingError(f"the model has no {signature} signature") from None
    if len(inputs) != 1:
        raise ServingError(f"the {signature} signature takes {len(inputs)} inputs, not one")
    (spec,) = inputs.values()
    dims = (spec.get("tensor_shape") or {}).get("dim") or []
    if len(dims) != 2 or int(dims[1].get("size", -1)) < 1:
        raise ServingError(f"the {signature} input is not [batch, width]: {json.dumps(spec)}")
    return int(dims[1]["size"])


def _proxied(kube: Any, namespace: str, job: str, path: str, body: Any = None) -> Any:
    """A REST call to the model server; None while it cannot answer (no endpoints, 404)."""
    from charms.gpu_k8s.v0.kubeclient import KubeError

    try:
        return kube.request(
            "POST" if body is not None else "GET", proxy_path(namespace, job, path), body=body
        )
    except KubeError as e:
        if e.status in (404, 502, 503):
            return None
        raise


def serve(
    kube: Any,
    ctx: Any,
    params: ServeParams,
    image: str,
    *,
    log: Any,
    sleep: Any,
    clock: Any,
) -> dict[str, str]:
    """Serve the job's export, wait until the model is available, send one request.

    Raises:
        ServingError: the model did not become available in time (its pods' state is said);
            a first serve of the job then removes what it created.
    """
    found = kube.get("apps/v1", "Deployment", name_of(params.job), ctx.namespace)
    api_servers = network_policies.api_server_addresses(kube.list("v1", "Node"))
    for manifest in manifests(params, ctx, image, api_servers):
        if found is not None and manifest["kind"] == "Deployment":
            manifest = _as_kueue_allows(manifest, found)
        kube.apply(manifest, field_manager=ctx.app)
    log(f"serving {params.job} from {DATA_MOUNT}/jobs/{params.job}/export")
    try:
        return _wait_and_try(kube, ctx, params, sleep=sleep, clock=clock)
    except ServingError:
        if found is None:  # a first serve that failed leaves nothing behind
            unserve(kube, ctx, params.job)
        raise


def _as_kueue_allows(deployment: dict[str, Any], found: Mapping[str, Any]) -> dict[str, Any]:
    """`deployment` without the queue and priority labels `found` (stored) lacks, if it runs.

    Kueue refuses them added to a running Deployment (oneshot.queue_labels_addable), so a
    model server an earlier revision made keeps its own labels while it runs; its pod
    template names the queue (training.queue_older_deployments).
    """
    if oneshot.queue_labels_addable(found):
        return deployment
    own = found["metadata"].get("labels") or {}
    lbls = {
        k: v
        for k, v in deployment["metadata"]["labels"].items()
        if k not in (LABEL_QUEUE, LABEL_PRIORITY) or k in own
    }
    return {**deployment, "metadata": {**deployment["metadata"], "labels": lbls}}


def _wait_and_try(kube: Any, ctx: Any, params: ServeParams, *, sleep: Any, clock: Any) -> dict:
    """Wait for the model to be AVAILABLE, then send one request of zeros."""
    from charms.gpu_k8s.v0.system import poll_until

    def ready() -> str | None:
        status = _proxied(kube, ctx.namespace, params.job, f"/v1/models/{params.job}")
        return available_version(status) if isinstance(status, dict) else None

    version = poll_until(ready, params.timeout, poll=POLL_SECONDS, clock=clock, sleep=sleep)
    if version is None:
        raise ServingError(
            f"{params.job} was not available within {params.timeout}s: "
            f"{_pods_state(kube, ctx, params.job)}; is there an export under "
            f"/data/jobs/{params.job}/export (export job={params.job})?"
        )
    host = f"{name_of(params.job)}.{ctx.namespace}.svc"
    results = {
        "job": params.job,
        "version": str(version),
        "rest-url": f"http://{host}:{REST_PORT}/v1/models/{params.job}:predict",
        "grpc-url": f"{host}:{GRPC_PORT}",
    }
    metadata = poll_until(
        lambda: _proxied(kube, ctx.namespace, params.job, f"/v1/models/{params.job}/metadata"),
        params.timeout,
        poll=POLL_SECONDS,
        clock=clock,
        sleep=sleep,
    )
    if metadata is None:  # e.g. its one pod being replaced (rollout): no endpoint a while
        raise ServingError(
            f"{params.job} answered its status but not its metadata within {params.timeout}s: "
            f"{_pods_state(kube, ctx, params.job)}"
        )
    try:
        width = input_width(metadata)
    except ServingError as e:  # served all the same: TF Serving takes any signature
        return {
            **results,
            "sample-request": f"none: {e}",
            "from-your-machine": (
                f"kubectl -n {ctx.namespace} port-forward svc/{name_of(params.job)} {REST_PORT}"
                f"{FOREGROUND}curl http://localhost:{REST_PORT}/v1/models/{params.job}/metadata"
            ),
        }
    sample = {"instances": [[0.0] * width]}
    answer = _proxied(kube, ctx.namespace, params.job, f"/v1/models/{params.job}:predict", sample)
    if not isinstance(answer, dict) or "predictions" not in answer:
        raise ServingError(f"the sample request to {params.job} got no predictions: {answer}")
    return {
        **results,
        "sample-request": f"{width} zeros",
        "sample-answer": json.dumps(answer["predictions"][0], sort_keys=True)[:500],
        "from-your-machine": (
            f"kubectl -n {ctx.namespace} port-forward svc/{name_of(params.job)} {REST_PORT}"
            f"{FOREGROUND}curl -d '{{\"instances\": [[...{width} numbers...]]}}' "
            f"http://localhost:{REST_PORT}/v1/models/{params.job}:predict"
        ),
    }


def _pods_state(kube: Any, ctx: Any, job: str) -> str:
    selector = ",".join(f"{k}={v}" for k, v in labels(ctx.app, job).items())
    pods = kube.list("v1", "Pod", ctx.namespace, label_selector=selector)
    if not pods:
        return "no serving pod yet"
    return "serving pod " + server_state(pods, "serving-image", "tensorflow_model_server")


def unserve(kube: Any, ctx: Any, job: str) -> dict[str, str]:
    """Delete the job's serving Deployment, Service and NetworkPolicy (the export stays)."""
    deleted = 0
    for api_version, kind in (("apps/v1", "Deployment"), ("v1", "Service")):
        if kube.delete(api_version, kind, name_of(job), ctx.namespace):
            deleted += 1
    kube.delete(network_policies.API_VERSION, "NetworkPolicy", name_of(job), ctx.namespace)
    if not deleted:
        raise ServingError(f"{job} is not being served")
    return {"job": job, "deleted": f"Deployment and Service {name_of(job)}"}
