"""Fixtures for the tensorflow charm: the fake API server, a fake Job controller, relations.

The fake API server stores objects but runs no controllers, so `JobController` plays the
Job controller and the scheduler: on every `sleep` of the charm it creates the pods that
Indexed Jobs ask for (`per_tick` at a time, owner references set, bound to a node with
enough free GPUs) and marks them Running and Ready. Time is fake: `sleep` advances a
monotonic clock instead of waiting.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import secrets
from collections.abc import Callable

import jobs
import pytest
from ops import testing

import charm
from fakes.addons import install_kueue
from fakes.kube_apiserver import FakeKubeApiServer

NS = "tensorflow"
CLAIM = "efs-storage-tensorflow"
NOW = datetime.datetime(2026, 11, 21, 9, 0, tzinfo=datetime.timezone.utc)
PREFIX = f"/apis/batch/v1/namespaces/{NS}/jobs/"
JOB_OBJECT_PREFIXES = (
    f"/apis/batch/v1/namespaces/{NS}/jobs",
    f"/apis/apps/v1/namespaces/{NS}/deployments",
    f"/api/v1/namespaces/{NS}/services",
    f"/api/v1/namespaces/{NS}/configmaps",
    f"/api/v1/namespaces/{NS}/pods",
)


def node(
    name: str,
    gpus: int = 0,
    *,
    ready: bool = True,
    unschedulable: bool = False,
    taints: list[dict] | None = None,
    product: str = "NVIDIA-A10G",
) -> dict:
    status: dict = {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "allocatable": {"cpu": "8", "memory": "64Gi"},
    }
    labels = {"kubernetes.io/hostname": name}
    if gpus:
        status["allocatable"]["nvidia.com/gpu"] = str(gpus)
        labels["nvidia.com/gpu.product"] = product
    spec: dict = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": status,
    }


def gpu_pod(name: str, node_name: str, gpus: int, phase: str = "Running") -> dict:
    """Some other workload's pod holding GPUs."""
    return {
        "metadata": {"name": name, "namespace": "other"},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {"phase": phase},
    }


@dataclasses.dataclass
class FakeTime:
    now: float = 1000.0
    sleeps: int = 0

    def monotonic(self) -> float:
        return self.now


class JobController:
    """Creates and runs the pods of the namespace's Jobs, a few per tick."""

    def __init__(self, api: FakeKubeApiServer):
        self.api = api
        self.per_tick = 1000
        self.enabled = True
        self.logs: Callable[[dict], str] | None = None
        self.waiting_reason: str | None = None

    def _free(self) -> dict[str, int]:
        nodes = list(self.api.objects("/api/v1/nodes/"))
        pods = [o for o in self.api.objects("/api/v1/") if o["kind"] == "Pod"]
        return jobs.free_gpus(nodes, pods)

    def tick(self) -> int:
        """Create up to `per_tick` missing pods; returns how many."""
        if not self.enabled:
            return 0
        created = 0
        for job in self.api.objects(PREFIX):
            if job["spec"].get("completionMode") != "Indexed" or jobs.job_finished(job):
                continue
            pods = [
                p
                for p in self.api.objects(f"/api/v1/namespaces/{NS}/pods/")
                if any(
                    r["uid"] == job["metadata"]["uid"]
                    for r in p["metadata"].get("ownerReferences", [])
                )
            ]
            have = {jobs.pod_index(p) for p in pods}
            for index in range(job["spec"]["completions"]):
                if index in have or created >= self.per_tick:
                    continue
                self._create_pod(job, index)
                created += 1
        return created

    def _create_pod(self, job: dict, index: int) -> None:
        template = copy.deepcopy(job["spec"]["template"])
        name = f"{job['metadata']['name']}-{index}-{secrets.token_hex(3)[:5]}"
        labels = dict(template["metadata"]["labels"])
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
        labels["job-name"] = job["metadata"]["name"]
        spec = template["spec"]
        spec["hostname"] = f"{job['metadata']['name']}-{index}"
        gpus = jobs.pod_gpus({"spec": spec})
        free = self._free()
        spec["nodeName"] = next((n for n, g in free.items() if g >= gpus), "cpu-node")
        status: dict = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        if self.waiting_reason:
            status = {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "tensorflow",
                        "state": {
                            "waiting": {"reason": self.waiting_reason, "message": "pull failed"}
                        },
                    }
                ],
            }
        pod = {
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job["metadata"]["name"],
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": spec,
            "status": status,
        }
        stored = self.api.put_object(f"/api/v1/namespaces/{NS}/pods/{name}", pod)
        if self.logs is not None:
            self.api.set_pod_log(NS, name, self.logs(stored))


@pytest.fixture
def api():
    with FakeKubeApiServer() as server:
        server.put_object(f"/api/v1/namespaces/{NS}", {"metadata": {"name": NS}})
        server.put_object(
            f"/api/v1/namespaces/{NS}/persistentvolumeclaims/{CLAIM}",
            {
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "volumeName": "pv-tf",
                    "resources": {"requests": {"storage": "1Ti"}},
                },
                "status": {"phase": "Bound"},
            },
        )
        install_kueue(server, {"gpu-nvidia-a10g": "NVIDIA-A10G"})
        yield server


@pytest.fixture
def controller(api):
    return JobController(api)


@pytest.fixture
def fake_time(monkeypatch, controller):
    t = FakeTime()

    def sleep(seconds: float) -> None:
        assert 0 <= seconds <= 60, seconds
        t.now += seconds
        t.sleeps += 1
        controller.tick()

    monkeypatch.setattr(charm.TensorflowCharm, "sleep", staticmethod(sleep))
    monkeypatch.setattr(charm.TensorflowCharm, "monotonic", staticmethod(t.monotonic))
    return t


@dataclasses.dataclass
class Clock:
    now: datetime.datetime = NOW

    def __call__(self) -> datetime.datetime:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(charm.TensorflowCharm, "clock", staticmethod(c))
    return c


@pytest.fixture
def ctx(fake_time, clock):
    return testing.Context(charm.TensorflowCharm)


def kube_api_relation(api: FakeKubeApiServer, secret: testing.Secret | None) -> testing.Relation:
    data = {}
    if secret is not None:
        data = {
            "endpoint": api.url,
            "namespace": NS,
            "service-account": "tensorflow",
            "kubeconfig-secret-id": secret.id,
        }
    return testing.Relation(
        "kube-api", remote_app_name="kubernetes-control-plane", remote_app_data=data
    )


def storage_relation(ready: bool = True) -> testing.Relation:
    data = {
        "claim-name": CLAIM,
        "capacity": "1Ti",
        "file-system-id": "fs-0123456789abcdef0",
        "namespace": NS,
        "ready": "true" if ready else "false",
        # The answer to the charm's request for its own directory (run-as default 1000:1000).
        "directory": "tensorflow",
        "uid": "1000",
        "gid": "1000",
    }
    return testing.Relation("shared-storage", remote_app_name="efs-storage", remote_app_data=data)


def kubeconfig_secret(api: FakeKubeApiServer) -> testing.Secret:
    return testing.Secret(tracked_content={"kubeconfig": api.kubeconfig("tf-sa-token")})


@pytest.fixture
def state(api) -> testing.State:
    """Both relations ready: the charm can reach the fake API server."""
    secret = kubeconfig_secret(api)
    return testing.State(
        leader=True,
        relations=[kube_api_relation(api, secret), storage_relation()],
        secrets=[secret],
    )


def add_nodes(api: FakeKubeApiServer, *nodes: dict) -> None:
    for n in nodes:
        api.put_object(f"/api/v1/nodes/{n['metadata']['name']}", n)


def job_objects(api: FakeKubeApiServer) -> list[dict]:
    """Every object in the namespace that a job can own (Jobs, pods, Services, ...)."""
    out = []
    for prefix in JOB_OBJECT_PREFIXES:
        out.extend(api.objects(prefix + "/"))
    return out


def run_action(ctx: testing.Context, state: testing.State, name: str, **params):
    """Run an action; returns (results, logs)."""
    ctx.run(ctx.on.action(name, params=params), state)
    return ctx.action_results, list(ctx.action_logs)
