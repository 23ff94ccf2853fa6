"""Every kubectl command the docs show, run by the real kubectl 1.36.3 against the fake.

The `kubectl ...` commands of README.md and every hand-written page under docs/ (code
blocks, inline code and the outputs the charms print) are collected from their text; each
one is in `RUN` (run here, its output checked, and shown as an example where a page shows
one), and a new command on any page fails `test_every_kubectl_command_of_the_readme_is_run`
until it is added there. `kubectl cp` and `kubectl port-forward` stream over WebSocket
(fakes/kube_stream.py): the copies come out of a seeded export directory, the forwards
reach stand-in HTTP servers. The commands the charms print in a status (the worker's
reboot and MIG messages) run here too, built by the charm's own functions.

The cluster is seeded as the tutorial's steps leave it: a control-plane node and two GPU
workers of a fresh deploy, the tensorflow namespace after `fetch-model` (its pod and Job).
kubectl runs as get-kubeconfig's identity (kubeadm's admin, `kubernetes-admin` in
`kubeadm:cluster-admins`), with a token standing in for admin.conf's client certificate
(the fake authenticates bearer tokens only), over TLS (kubectl sends credentials only
over TLS: tests/kubectl_runner.py).
"""

from __future__ import annotations

import datetime
import http.server
import re
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import docs_pages
import pytest
import readme_examples
from charm_modules import load
from kubectl_runner import Kubectl

from fakes.addons import calico_objects
from fakes.kube_apiserver import FakeKubeApiServer

CONTROL_PLANE, GPU_0, GPU_1 = "ip-172-31-20-13", "ip-172-31-24-101", "ip-172-31-27-58"

COPIES = {
    "kubectl -n tensorflow cp fetch-mnist-vr8mp:/data/jobs/mnist/export/1000 ./mnist-1000",
    "kubectl -n tensorflow cp fetch-mnist-x7k2p:/data/jobs/mnist/export/2000 ./mnist-2000",
}
FORWARDS = {
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
SWEPT = (  # upgrade.md: every kind the sweep changes
    "kubectl -n <team> get daemonsets,services,pods,networkpolicies.crd.projectcalico.org,"
    "networksets.crd.projectcalico.org,stagednetworkpolicies.crd.projectcalico.org,"
    "stagedkubernetesnetworkpolicies.crd.projectcalico.org"
)
RUN = {
    "kubectl get nodes",
    "kubectl -n tensorflow delete job fetch-mnist",
    "kubectl delete node <name>",
    "kubectl -n tensorflow get pods --field-selector=status.phase!=Succeeded,status.phase!=Failed",
    "kubectl -n <team> describe resourcequota gpu-k8s-object-counts",
    SWEPT,
    *COPIES,
    *FORWARDS,
}


def readme_commands(text: str) -> set[str]:
    """`kubectl` and its words, up to a quote, backtick, semicolon or parenthesis."""
    found = re.finditer(r"(?<![\w-])kubectl(?: +[^\s`'\";()]+)*", text)
    return {re.sub(r"\s+", " ", m.group(0)) for m in found}


def test_every_kubectl_command_of_the_readme_is_run():
    shown = readme_commands(docs_pages.text())
    assert shown - NOT_COMMANDS - RUN == set(), "add them to RUN"
    assert RUN <= shown, "RUN names a command the docs no longer show"


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
            {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "m", "image": "x"}],
                        }
                    }
                }
            },
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
        api.put_object(
            "/api/v1/namespaces/tensorflow/pods/fetch-mnist-x7k2p",
            _pod(
                "fetch-mnist-x7k2p",
                GPU_1,
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


def test_a_stale_node_is_deleted_as_the_readme_says(cluster):
    """Docs: Node objects of machines gone stay NotReady until `kubectl delete node <name>`."""
    api, kubectl = cluster
    printed = kubectl.run("delete", "node", GPU_1).stdout
    assert printed == f'node "{GPU_1}" deleted\n'
    assert api.get_object(f"/api/v1/nodes/{GPU_1}") is None


# The tutorial's teardown wait: no pod of the team Running or Pending. Pods list
# `status.phase` among their selectable fields (kubernetes/kubernetes
# pkg/registry/core/pod/strategy.go, ToSelectableFields), and `!=` terms joined by commas
# must all hold, so finished pods (Succeeded, Failed) are left out.
TEARDOWN_WAIT = (
    "kubectl -n tensorflow get pods --field-selector=status.phase!=Succeeded,status.phase!=Failed"
)


def _set_phase(api: FakeKubeApiServer, name: str, phase: str) -> None:
    """What the kubelet writes when a pod's containers end (or before they start)."""
    path = f"/api/v1/namespaces/tensorflow/pods/{name}"
    pod = api.get_object(path)
    pod["status"] = {"phase": phase}
    api.put_object(path, pod)


def test_the_teardown_waits_for_no_pod_running_or_pending(cluster):
    """Tutorial, tear down: the wait ends once the pods end, though Kubernetes keeps them.

    import-dataset's Job keeps its Completed pod job-ttl hours (24 by default) and an
    export Job an hour; they hold no claim for efs-storage (storage.py pods_using skips
    finished pods), so the wait must not wait for them to be deleted.
    """
    api, kubectl = cluster
    owner = {"apiVersion": "batch/v1", "kind": "Job"}
    for name, job, phase in (
        ("import-mnist-4xq7z", "import-mnist", "Succeeded"),
        ("export-mnist-9kd2w", "export-mnist", "Pending"),
    ):
        pod = _pod(name, GPU_0, {"job-name": job}, {**owner, "name": job})
        api.put_object(f"/api/v1/namespaces/tensorflow/pods/{name}", pod)
        _set_phase(api, name, phase)
    wait = TEARDOWN_WAIT.split()[1:]
    listed = kubectl.run(*wait).stdout.splitlines()
    assert listed[0].split()[:2] == ["NAME", "READY"]
    assert {line.split()[0] for line in listed[1:]} == {
        "export-mnist-9kd2w",  # Pending counts
        "fetch-mnist-vr8mp",
        "fetch-mnist-x7k2p",
    }
    # the pods end, nobody deletes them
    _set_phase(api, "export-mnist-9kd2w", "Failed")
    for pod in ("fetch-mnist-vr8mp", "fetch-mnist-x7k2p"):
        _set_phase(api, pod, "Succeeded")
    done = kubectl.run(*wait)
    # what the tutorial tells the operator to wait for (kubectl writes it to stderr)
    assert (done.stdout, done.stderr) == ("", "No resources found in tensorflow namespace.\n")
    kept = kubectl.run("-n", "tensorflow", "get", "pods").stdout.splitlines()[1:]
    assert len(kept) == 4, "the finished pods are still there: a plain `get pods` lists them"
    # the phases the wait leaves out are those efs-storage does not count as users
    storage = load("efs-storage", "storage")
    assert set(storage._FINISHED_PHASES) == set(re.findall(r"status\.phase!=(\w+)", TEARDOWN_WAIT))
    text = docs_pages.text()
    assert f"KUBECONFIG=./kubeconfig {TEARDOWN_WAIT}\n```\n\nprints" in text
    assert "`No resources found in tensorflow namespace.`" in text


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
    api.put_object("/api/v1/namespaces/gpu-k8s-gpu/pods/nvidia-mig-manager-7xk2q", manager)
    api.set_pod_log("gpu-k8s-gpu", "nvidia-mig-manager-7xk2q", "Applying MIG config failed\n")
    (command,) = re.findall(r"`(kubectl [^`]*)`", mig.failed_message("all-1g.10gb", GPU_1, "u/1"))
    inner = re.fullmatch(r"kubectl -n gpu-k8s-gpu logs \$\((kubectl [^)]*)\)", command)
    assert inner, command
    name = kubectl.run(*inner.group(1).split()[1:]).stdout.strip()
    assert name == "pod/nvidia-mig-manager-7xk2q"
    printed = kubectl.run("-n", "gpu-k8s-gpu", "logs", name).stdout
    assert printed == "Applying MIG config failed\n"


def _export(root: Path, version: str) -> dict[str, bytes]:
    """A job's export in the shared volume (what fetch-model's pod mounts at /data)."""
    export = root / "data" / "jobs" / "mnist" / "export" / version
    (export / "variables").mkdir(parents=True)
    files = {
        "saved_model.pb": b"\x08\x01saved model " + version.encode(),
        "variables/variables.index": b"index",
        "variables/variables.data-00000-of-00001": bytes(range(256)) * 64,
    }
    for name, data in files.items():
        (export / name).write_bytes(data)
    return files


@pytest.mark.parametrize("command", sorted(COPIES))
def test_fetch_models_copy_command_copies_the_export(cluster, tmp_path: Path, command: str):
    """fetch-model's `kubectl cp`, run where the user is: the export lands in ./mnist-<v>."""
    api, kubectl = cluster
    pod, version = re.fullmatch(r".* cp (\S+):/data/jobs/mnist/export/(\d+) .*", command).groups()
    volume = tmp_path / "volume"
    files = _export(volume, version)
    api.set_pod_files("tensorflow", pod, "main", volume)
    here = tmp_path / "here"
    here.mkdir()
    done = kubectl.run(*command.split()[1:], cwd=here)
    # the only output: GNU tar's warning on the exec's stderr, which kubectl cp prints
    assert (done.stdout, done.stderr) == ("tar: Removing leading `/' from member names\n", "")
    copied = here / f"mnist-{version}"
    found = {str(p.relative_to(copied)): p.read_bytes() for p in copied.rglob("*") if p.is_file()}
    assert found == files


@pytest.mark.parametrize("command", sorted(FORWARDS))
def test_port_forward_commands_reach_the_service(cluster, command: str):
    """The docs' port-forwards, verbatim (local port = the service's), to stand-ins.

    The Services carry the charm's selectors and ports (serving.labels and its ports,
    manifests.labels for TensorBoard), each selecting one Running pod, which kubectl finds.
    """
    api, kubectl = cluster
    service, port = re.fullmatch(r".* svc/(\S+) (\d+)", command).groups()
    job = "mnist"
    literals, serving = load("tensorflow", "literals"), load("tensorflow", "serving")
    if service == "mnist-serving":
        labels = serving.labels("tensorflow", job)
        ports = [
            {"name": "grpc", "port": serving.GRPC_PORT, "targetPort": serving.GRPC_PORT},
            {"name": "http", "port": serving.REST_PORT, "targetPort": serving.REST_PORT},
        ]
    else:
        labels = load("tensorflow", "manifests").labels("tensorflow", job, "tensorboard")
        board = literals.TENSORBOARD_PORT
        ports = [{"name": "http", "port": board, "targetPort": board}]
    api.put_object(
        f"/api/v1/namespaces/tensorflow/services/{service}",
        {
            "metadata": {"name": service, "labels": labels},
            "spec": {"selector": labels, "ports": ports},
        },
    )
    api.put_object(
        f"/api/v1/namespaces/tensorflow/pods/{service}-0", _pod(f"{service}-0", GPU_1, labels)
    )
    backend = _StandIn(service)
    try:
        api.set_pod_port("tensorflow", f"{service}-0", int(port), backend.address)
        with kubectl.running(*command.split()[1:], until="Forwarding from") as forwarding:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
                assert answer.read() == service.encode()
    finally:
        backend.shutdown()
        backend.server_close()
    # and `Forwarding from [::1]:<port> -> <port>` where localhost resolves to ::1 too
    # (client-go portforward.go listens on each address of localhost)
    ipv6 = f"Forwarding from [::1]:{port} -> {port}"
    assert [line for line in forwarding.stdout.splitlines() if line != ipv6] == [
        f"Forwarding from 127.0.0.1:{port} -> {port}",
        f"Handling connection for {port}",
    ]


class _StandIn(http.server.ThreadingHTTPServer):
    """What listens in the pod: answers every GET with its name."""

    def __init__(self, name: str) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", str(len(name)))
                self.end_headers()
                self.wfile.write(name.encode())

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


def test_a_teams_object_counts_are_described_as_the_how_to_says(cluster):
    """share-between-teams.md: what a team uses against each count of its quota."""
    api, kubectl = cluster
    team_quota = load("kubernetes-control-plane", "team_quota")
    quota = team_quota.manifest("tensorflow", team_quota.COUNTS)
    api.put_object(f"/api/v1/namespaces/tensorflow/resourcequotas/{team_quota.NAME}", quota)
    command = "kubectl -n <team> describe resourcequota gpu-k8s-object-counts".split()
    printed = kubectl.run(*[w.replace("<team>", "tensorflow") for w in command[1:]]).stdout
    rows = {line.split()[0]: line.split()[1:] for line in printed.splitlines()[4:] if line}
    # the seeded namespace holds two pods (the fetch job's) and one Job
    assert rows["count/pods"] == ["2", str(team_quota.COUNTS["count/pods"])]
    assert rows["count/jobs.batch"] == ["1", str(team_quota.COUNTS["count/jobs.batch"])]
    assert rows["services.nodeports"] == ["0", "0"]


def test_what_the_upgrade_sweep_changes_is_listed_as_the_how_to_says(cluster):
    """upgrade.md: a team's DaemonSets, Services, pods and Calico objects, before the refresh."""
    api, kubectl = cluster
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for obj in calico_objects():
        if obj["kind"] == "CustomResourceDefinition":
            api.put_object(f"{crds}/{obj['metadata']['name']}", obj)
    policy = {"metadata": {"name": "allow-all"}, "spec": {"order": 1}}
    api.put_object(
        "/apis/crd.projectcalico.org/v1/namespaces/tensorflow/networkpolicies/allow-all", policy
    )
    port = {"port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30080}
    service = {"spec": {"type": "NodePort", "ports": [port], "externalTrafficPolicy": "Cluster"}}
    api.put_object("/api/v1/namespaces/tensorflow/services/web", service)
    netset = {"metadata": {"name": "anywhere"}, "spec": {"nets": ["0.0.0.0/0"]}}
    api.put_object(
        "/apis/crd.projectcalico.org/v1/namespaces/tensorflow/networksets/anywhere", netset
    )
    pod = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    api.put_object("/api/v1/namespaces/tensorflow/pods/miner", pod)
    command = SWEPT
    words = [w.replace("<team>", "tensorflow") for w in command.split()[1:]]
    printed = kubectl.run(*words).stdout
    assert re.search(r"^networkset.crd.projectcalico.org/anywhere ", printed, re.M), printed
    assert re.search(r"^pod/miner ", printed, re.M), printed
    assert re.search(r"^service/web +NodePort .* 80:30080/TCP", printed, re.M), printed
    assert re.search(r"^networkpolicy.crd.projectcalico.org/allow-all ", printed, re.M), printed
