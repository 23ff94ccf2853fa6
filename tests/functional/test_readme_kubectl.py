"""Every kubectl command the README shows, run by the real kubectl 1.36.3 against the fake.

The README's `kubectl ...` commands (code blocks, inline code and the outputs the charms
print) are collected from its text; each one is in `RUN` (run here, its output checked,
and shown in the README where the README shows one) or in `STREAMING` (not run, with the
reason), and a new command in the README fails `test_every_kubectl_command_of_the_readme_is_run`
until it is added to one of them. The commands the charms print in a status (the worker's
reboot and MIG messages) run here too, built by the charm's own functions.

The cluster is seeded as the README's steps leave it: a control-plane node and two GPU
workers of a fresh deploy, the tensorflow namespace after `fetch-model` (its pod and Job).
kubectl runs as get-kubeconfig's identity (kubeadm's admin, `kubernetes-admin` in
`kubeadm:cluster-admins`), with a token standing in for admin.conf's client certificate
(the fake authenticates bearer tokens only), over TLS (kubectl sends credentials only
over TLS: tests/kubectl_runner.py).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import readme_examples
from charm_modules import load
from kubectl_runner import Kubectl

from fakes.kube_apiserver import FakeKubeApiServer

README = Path(__file__).resolve().parents[2] / "README.md"

CONTROL_PLANE, GPU_0, GPU_1 = "ip-172-31-20-13", "ip-172-31-24-101", "ip-172-31-27-58"

# Not run: these stream over WebSocket (kubectl 1.36 uses the v5.channel.k8s.io exec
# protocol for `cp` and WebSocket port-forwarding, both with SPDY fallback), which the fake
# API server does not serve; what they reach (a pod's tar, a Service's port) is what the
# charms' own tests check (tests/unit/tensorflow/test_exports.py, test_serving.py).
STREAMING = {
    "kubectl -n tensorflow cp fetch-mnist-vr8mp:/data/jobs/mnist/export/1000 ./mnist-1000",
    "kubectl -n tensorflow cp fetch-mnist-x7k2p:/data/jobs/mnist/export/2000 ./mnist-2000",
    "kubectl -n tensorflow port-forward svc/mnist-serving 8501",
    "kubectl -n tensorflow port-forward svc/mnist-tensorboard 6006",
}
# Mentions of kubectl in prose and comments, not commands.
NOT_COMMANDS = {
    "kubectl",
    "kubectl cp that copies it to your machine",
    "kubectl port-forward",
    "kubectl drain ...",  # the worker's status, in full below (reboot_blocked_message)
    "kubectl uncordon",  # the same status's last step
}
RUN = {
    "kubectl get nodes",
    "kubectl -n tensorflow delete job fetch-mnist",
}


def readme_commands(text: str) -> set[str]:
    """`kubectl` and its words, up to a quote, backtick, semicolon or parenthesis."""
    found = re.finditer(r"(?<![\w-])kubectl(?: +[^\s`'\";()]+)*", text)
    return {re.sub(r"\s+", " ", m.group(0)) for m in found}


def test_every_kubectl_command_of_the_readme_is_run():
    shown = readme_commands(README.read_text())
    assert shown - STREAMING - NOT_COMMANDS - RUN == set(), "add them to RUN or STREAMING"
    assert RUN <= shown, "RUN names a command the README no longer shows"


def test_a_new_command_in_the_readme_is_caught():
    assert readme_commands("run `kubectl get pods -A`; then") == {"kubectl get pods -A"}


def _ago(**delta: float) -> str:
    moment = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(**delta)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(name: str, role: str | None, gpus: int) -> dict:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    if role:
        labels[f"node-role.kubernetes.io/{role}"] = ""
    capacity = {"cpu": "16", "memory": "65021680Ki", "pods": "110"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"labels": labels, "creationTimestamp": _ago(minutes=42, seconds=5)},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "capacity": capacity,
            "allocatable": capacity,
            "nodeInfo": {
                "kubeletVersion": "v1.36.5",  # kubeadm.py's pin of 1.36
                "osImage": "Ubuntu 24.04.3 LTS",
                "kernelVersion": "6.8.0-1040-aws",
                "containerRuntimeVersion": "containerd://2.1.4",
            },
        },
    }


def _pod(name: str, node: str, labels: dict, owner: dict | None = None) -> dict:
    meta: dict = {"name": name, "labels": labels, "creationTimestamp": _ago(minutes=5)}
    if owner:
        meta["ownerReferences"] = [{**owner, "controller": True, "uid": "0"}]
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "tensorflow/tensorflow:2.21.0"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.fixture
def cluster(kubectl_binary: Path) -> Iterator[tuple[FakeKubeApiServer, Kubectl]]:
    with FakeKubeApiServer(tls=True) as api:
        api.put_object(f"/api/v1/nodes/{CONTROL_PLANE}", _node(CONTROL_PLANE, "control-plane", 0))
        for name in (GPU_0, GPU_1):
            api.put_object(f"/api/v1/nodes/{name}", _node(name, None, 4))
        api.put_object("/api/v1/namespaces/tensorflow", {"metadata": {}})
        api.put_object(
            "/apis/batch/v1/namespaces/tensorflow/jobs/fetch-mnist",
            {"spec": {"template": {"spec": {"containers": [{"name": "m", "image": "x"}]}}}},
        )
        api.put_object(
            "/api/v1/namespaces/tensorflow/pods/fetch-mnist-vr8mp",
            _pod(
                "fetch-mnist-vr8mp",
                GPU_0,
                {"job-name": "fetch-mnist"},
                {"apiVersion": "batch/v1", "kind": "Job", "name": "fetch-mnist"},
            ),
        )
        kubectl = Kubectl(kubectl_binary, api)
        try:
            yield api, kubectl
        finally:
            kubectl.close()


def test_get_nodes_as_the_readme_shows_it(cluster):
    _api, kubectl = cluster
    printed = kubectl.run("get", "nodes").stdout
    readme_examples.show("kubectl-get-nodes", printed)
    assert printed.splitlines()[1:] == [
        f"{CONTROL_PLANE}    Ready    control-plane   42m   v1.36.5",
        f"{GPU_0}   Ready    <none>          42m   v1.36.5",
        f"{GPU_1}    Ready    <none>          42m   v1.36.5",
    ]


def test_fetch_models_job_is_deleted_as_the_readme_says(cluster):
    api, kubectl = cluster
    printed = kubectl.run("-n", "tensorflow", "delete", "job", "fetch-mnist").stdout
    assert printed == 'job.batch "fetch-mnist" deleted from tensorflow namespace\n'
    assert api.get_object("/apis/batch/v1/namespaces/tensorflow/jobs/fetch-mnist") is None


def _backticked_kubectl(message: str) -> list[list[str]]:
    return [code.split()[1:] for code in re.findall(r"`(kubectl [^`]*)`", message)]


def test_the_workers_reboot_status_commands_drain_and_uncordon(cluster):
    """nvidia.reboot_blocked_message: the drain and uncordon it tells the operator to run."""
    api, kubectl = cluster
    nvidia = load("kubernetes-worker", "nvidia")
    message = nvidia.reboot_blocked_message(
        "the driver's modules are for the kernel the machine boots next",
        "kubernetes-worker-gpu/0",
        GPU_0,
    )
    drain, uncordon = _backticked_kubectl(message)
    printed = kubectl.run(*drain).stdout
    assert printed.splitlines() == [
        f"node/{GPU_0} cordoned",
        "evicting pod tensorflow/fetch-mnist-vr8mp",
        "pod/fetch-mnist-vr8mp evicted",
        f"node/{GPU_0} drained",
    ]
    assert api.get_object(f"/api/v1/nodes/{GPU_0}")["spec"]["unschedulable"] is True
    assert kubectl.run(*uncordon).stdout == f"node/{GPU_0} uncordoned\n"
    assert not api.get_object(f"/api/v1/nodes/{GPU_0}")["spec"].get("unschedulable")
    after_reboot = nvidia.reboot_blocked_message("x", "u/0", GPU_1, rebooted=True)
    (uncordon,) = _backticked_kubectl(after_reboot)
    assert kubectl.run(*uncordon).stdout == f"node/{GPU_1} already uncordoned\n"


def test_the_mig_failure_status_command_finds_the_managers_logs(cluster):
    """mig.failed_message: `kubectl logs $(kubectl get pod ... -o name)` for that node."""
    api, kubectl = cluster
    mig = load("kubernetes-worker", "mig")
    manager = _pod(
        "nvidia-mig-manager-7xk2q",
        GPU_1,
        {"app": "nvidia-mig-manager"},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "nvidia-mig-manager"},
    )
    api.put_object("/api/v1/namespaces/kube-system/pods/nvidia-mig-manager-7xk2q", manager)
    api.set_pod_log("kube-system", "nvidia-mig-manager-7xk2q", "Applying MIG config failed\n")
    (command,) = re.findall(r"`(kubectl [^`]*)`", mig.failed_message("all-1g.10gb", GPU_1, "u/1"))
    inner = re.fullmatch(r"kubectl -n kube-system logs \$\((kubectl [^)]*)\)", command)
    assert inner, command
    name = kubectl.run(*inner.group(1).split()[1:]).stdout.strip()
    assert name == "pod/nvidia-mig-manager-7xk2q"
    printed = kubectl.run("-n", "kube-system", "logs", name).stdout
    assert printed == "Applying MIG config failed\n"
