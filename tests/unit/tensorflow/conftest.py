"""Fixtures for the tensorflow charm: the fake API server, the batch controllers, relations.

The fake API server stores objects but runs no controllers, so `fakes.batch.BatchControllers`
plays Kueue, JobSet, the Job controller and kubelet (each rule cited there): on every
`sleep` of the charm it admits, starts, restarts or ends jobs one step. JobSet and Kueue
are installed as the control plane leaves them (`fakes.addons.install_kueue`). Time is
fake: `sleep` advances a monotonic clock instead of waiting.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import urllib.error
import urllib.request

import manifests
import pytest
from literals import NAMESPACED_RULES, cluster_rules
from ops import testing

import charm
from fakes.addons import install_kueue, join_team, size_cohort
from fakes.batch import BatchControllers
from fakes.kube_apiserver import ADMIN_TOKEN, FakeKubeApiServer
from fakes.kube_grants import consumer_grant, store_grant
from fakes.machine import FakeMachine

NS = "tensorflow"
CLAIM = "efs-storage-tensorflow"
# The charm's manifests' context in NS, for tests that build its objects directly
CTX = manifests.Context(
    namespace=NS,
    app="tensorflow",
    claim=CLAIM,
    default_image="tensorflow/tensorflow:2.21.0",
    tensorboard_image="tensorflow/tensorflow:2.21.0",
)
JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/"
JOB_OBJECT_PREFIXES = (
    f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets",
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
    if taints is None and gpus:  # what kubernetes-worker puts on a GPU node (gpu_labels.py)
        taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
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

    def time(self) -> float:
        """The wall clock, moving with `now` (2027-01-15T08:00:00Z at 0)."""
        return 1_800_000_000.0 + self.now


TOKEN = "tf-sa-token"


def tf_grant():
    """The kube-api grant the control plane makes for what this charm asks (literals)."""
    return consumer_grant("tensorflow", NS, NAMESPACED_RULES, cluster_rules(NS))


def unknown_fields(api: FakeKubeApiServer) -> list[tuple[str, str, str]]:
    """The writes whose fields the server dropped as undeclared (its Warning headers)."""
    return [w for w in api.warnings if "unknown field" in w[2]]


def send(api: FakeKubeApiServer, method: str, path: str, obj: dict) -> tuple[int, dict]:
    """One write over HTTP as the cluster's admin: (status code, the object or Status)."""
    request = urllib.request.Request(
        f"{api.url}{path}",
        data=json.dumps(obj).encode(),
        method=method,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


@pytest.fixture
def api():
    """The cluster; the charm's kubeconfig holds the token of the grant it asked for.

    Every object written over HTTP is decoded and validated as kube-apiserver 1.36 does
    (fakes/kube_admission.py: built-in kinds against kubernetes-validate's 1.36 schemas,
    JobSet and Kueue objects against their real CRDs, `fakes.crds`): a wrong type, enum
    or missing field is refused there. The charm's client sends no fieldValidation, so an
    undeclared field is dropped with a warning, as on a cluster; afterwards no write of the
    test may have lost one (a test that writes one on purpose clears `api.warnings`).
    """
    with FakeKubeApiServer() as server:
        server.put_object(f"/api/v1/namespaces/{NS}", {"metadata": {"name": NS}})
        # A team's namespace enforces Pod Security restricted, as the grant labels it (issue
        # 29 item 3): every pod the charm's objects make must pass it, or the fake refuses it
        store_grant(server, tf_grant(), TOKEN)
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
        # the control plane granted this team: it writes its ClusterQueue (no quota asked);
        # the cohort is sized once nodes join (add_nodes)
        join_team(server, NS, sized=False)
        yield server
        assert unknown_fields(server) == []


@pytest.fixture
def controller(api):
    """The batch controllers; afterwards, no pod of the test broke Pod Security restricted.

    The namespace enforces restricted: a pod the charm's objects make that breaks it is
    refused on create (fakes/batch.py B8), and a Job or Deployment whose template breaks
    it gets PodSecurity's warning. A test that shows such a refusal sets
    `expect_refusals`.
    """
    controllers = BatchControllers(api, NS)
    yield controllers
    if not controllers.expect_refusals:
        assert controllers.refused == []
        assert [w for w in api.warnings if "PodSecurity" in w[2]] == []


@pytest.fixture
def fake_time(monkeypatch, controller):
    t = FakeTime()

    def sleep(seconds: float) -> None:
        assert 0 <= seconds <= 60, seconds
        t.now += seconds
        t.sleeps += 1
        settle = getattr(controller.kubelet, "settle", None)
        if settle is not None:  # real processes: a tick lets them run a moment
            settle(min(seconds, 1.0))
        controller.tick()

    monkeypatch.setattr(charm.TensorflowCharm, "sleep", staticmethod(sleep))
    monkeypatch.setattr(charm.TensorflowCharm, "monotonic", staticmethod(t.monotonic))
    monkeypatch.setattr(charm.TensorflowCharm, "wall_clock", staticmethod(t.time))
    # Kueue's times (conditions, a job's deadline, a requeue's requeueAt) are wall-clock
    # times, read by the charm against its own wall clock (job-status: K15's backoff)
    controller.clock = t.time
    return t


@pytest.fixture
def ctx(fake_time):
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
    return testing.Secret(tracked_content={"kubeconfig": api.kubeconfig(TOKEN)})


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
    """Nodes join; the control plane's next update-status sizes the cohort to them."""
    for n in nodes:
        api.put_object(f"/api/v1/nodes/{n['metadata']['name']}", n)
    size_cohort(api)


def control_plane_reads(api: FakeKubeApiServer, state: testing.State) -> dict:
    """The control plane reads the charm's kube-api request and writes the team's queue.

    Returns what `fakes.addons.size_cohort` returns (its Blocked message, the Cohort).
    """
    rel = next(r for r in state.relations if r.endpoint == "kube-api")
    return join_team(api, NS, dict(rel.local_app_data))


def job_objects(api: FakeKubeApiServer) -> list[dict]:
    """Every object in the namespace that a job can own (Jobs, pods, Services, ...)."""
    out = []
    for prefix in JOB_OBJECT_PREFIXES:
        out.extend(api.objects(prefix + "/"))
    return out


def run_action(ctx: testing.Context, state: testing.State, action: str, /, **params):
    """Run an action on a unit that has reconciled (its team's queues exist); (results, logs).

    As on a deployed unit, update-status ran before the operator's action: it made the
    application's ClusterQueue and LocalQueue from the nodes present then.
    """
    reconciled = ctx.run(ctx.on.update_status(), state)
    ctx.run(ctx.on.action(action, params=params), reconciled)
    # a copy: the context clears its results for the next run
    return copy.deepcopy(ctx.action_results), list(ctx.action_logs)


def training_pods(api: FakeKubeApiServer) -> list[dict]:
    """The namespace's training pods (not TensorBoard's)."""
    return [
        p
        for p in api.objects(f"/api/v1/namespaces/{NS}/pods/")
        if p["metadata"]["labels"].get("gpu-k8s.io/component") == "training"
    ]


def jobset(api: FakeKubeApiServer, name: str) -> dict:
    """The stored JobSet `name` (asserting it exists)."""
    found = api.get_object(f"{JOBSETS}{name}")
    assert found is not None, f"no JobSet {name}"
    return found


def condition(obj: dict, kind: str) -> dict:
    """The object's condition of type `kind` (asserting it has one)."""
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    assert found, f"no condition {kind}"
    return found[0]


def role_spec(js: dict, role: str) -> dict:
    """The batch Job spec of one role of a JobSet."""
    return next(r for r in js["spec"]["replicatedJobs"] if r["name"] == role)["template"]["spec"]


@pytest.fixture(autouse=True)
def unit_machine(tmp_path, monkeypatch) -> FakeMachine:
    """The unit's machine: where its state is served to a related COS agent (unit_state)."""
    machine = FakeMachine(tmp_path / "machine")
    monkeypatch.setattr(charm.TensorflowCharm, "host_factory", staticmethod(machine.host))
    return machine
