"""What may reach a team's training, TensorBoard and serving pods (issue 29 item 4, review S3).

The pods are built from the manifests the charm applies (their labels and named ports),
the policies are the charm's and the control plane's default-deny, and tests/fakes/netpol.py
answers who may reach whom as the Kubernetes NetworkPolicy docs define it.
"""

from __future__ import annotations

import kubernetes_validate
import manifests
import network_policies
import pytest
import serving
from charm_modules import load
from params import TrainRequest

from fakes.netpol import Cluster, Node, Pod, pod_from_manifest

CODE = {"tf_launcher.py": "# launcher\n", "tf_trainer.py": "# trainer\n"}
CP_NODE = {
    "metadata": {
        "name": "cp-0",
        "labels": {"node-role.kubernetes.io/control-plane": ""},
        "annotations": {"projectcalico.org/IPv4VXLANTunnelAddr": "10.244.0.1"},
    },
    "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.10"}]},
}
GPU_NODE = {
    "metadata": {"name": "gpu-0", "labels": {}, "annotations": {}},
    "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.20"}]},
}
NODES = (Node("cp-0", "10.0.0.10"), Node("gpu-0", "10.0.0.20"), Node("gpu-1", "10.0.0.21"))
# the control plane's overlay address, as the API server's proxied request arrives from it
CP_TUNNEL = Node("cp-0-vxlan", "10.244.0.1")


def ctx(namespace: str, app: str) -> manifests.Context:
    return manifests.Context(
        namespace=namespace,
        app=app,
        claim="claim",
        default_image="tensorflow/tensorflow:2.21.0",
        tensorboard_image="tensorflow/tensorflow:2.20.0",
    )


def job_pods(c: manifests.Context, job: str, first_ip: int) -> tuple[list[Pod], list[dict]]:
    """The pods of a ps job (chief, worker, ps) and its TensorBoard, and its objects."""
    request = TrainRequest(job=job, strategy="ps", ps=1, workers=2)
    objects = manifests.manifests(request, c, CODE)
    pods = []
    ip = first_ip
    for role in request.replicas():
        template = manifests.replicated_job(request, c, role)["template"]["spec"]["template"]
        template = {**template, "metadata": {**template["metadata"], "namespace": c.namespace}}
        pods.append(pod_from_manifest(template, f"10.244.1.{ip}", "gpu-0", f"{job}-{role}-0"))
        ip += 1
    board = next(o for o in objects if o["kind"] == "Deployment")
    template = board["spec"]["template"]
    template = {**template, "metadata": {**template["metadata"], "namespace": c.namespace}}
    pods.append(pod_from_manifest(template, f"10.244.1.{ip}", "gpu-1", f"{job}-tensorboard"))
    return pods, [o for o in objects if o["kind"] == "NetworkPolicy"]


def serving_pod(c: manifests.Context, job: str, ip: str) -> tuple[Pod, list[dict]]:
    api_servers = network_policies.api_server_addresses([CP_NODE, GPU_NODE])
    objects = serving.manifests(
        serving.ServeParams(job=job), c, "tensorflow/serving:2.20.0", api_servers
    )
    template = objects[0]["spec"]["template"]
    template = {**template, "metadata": {**template["metadata"], "namespace": c.namespace}}
    pod = pod_from_manifest(template, ip, "gpu-1", f"{job}-serving")
    return pod, [o for o in objects if o["kind"] == "NetworkPolicy"]


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    a, b = ctx("team-a", "tensorflow"), ctx("team-b", "tensorflow-b")
    a_mnist, a_mnist_policies = job_pods(a, "mnist", 10)
    a_other, a_other_policies = job_pods(a, "other", 20)
    b_pods, b_policies = job_pods(b, "mnist", 30)
    a_serving, a_serving_policies = serving_pod(a, "mnist", "10.244.1.40")
    oneshot = Pod("import-x", "team-a", {"gpu-k8s.io/component": "import"}, "10.244.1.41")
    default_deny = load("kubernetes-control-plane", "network_policies").manifests
    pods = [*a_mnist, *a_other, *b_pods, a_serving, oneshot]
    pods.append(Pod("coredns", "kube-system", {"k8s-app": "kube-dns"}, "10.244.0.2", "cp-0"))
    policies = [
        *default_deny(["team-a", "team-b"]),
        *a_mnist_policies,
        *a_other_policies,
        *b_policies,
        *a_serving_policies,
        # team A's leader runs on cp-0, whose COS agent scrapes the training pods
        network_policies.metrics(
            "tensorflow",
            "team-a",
            "training",
            network_policies.own_node_addresses([CP_NODE, GPU_NODE], ["10.0.0.10", "::1"]),
        ),
    ]
    return Cluster(
        {"team-a": {}, "team-b": {}, "kube-system": {}}, pods, policies, [*NODES, CP_TUNNEL]
    )


def test_a_jobs_pods_reach_each_other_on_the_tensorflow_port_only(cluster):
    chief, worker, ps = (cluster.pod("team-a", f"mnist-{r}-0") for r in ("chief", "worker", "ps"))
    for src in (chief, worker, ps):
        for dst in (chief, worker, ps):
            assert cluster.allowed(src, dst, 2222), (src.name, dst.name)
    assert not cluster.allowed(chief, worker, 2223)
    assert not cluster.allowed(chief, worker, 2222, "UDP")


def test_nothing_but_the_jobs_own_pods_reaches_its_tensorflow_port(cluster):
    worker = cluster.pod("team-a", "mnist-worker-0")
    others = [
        cluster.pod("team-b", "mnist-worker-0"),  # another team's job of the same name
        cluster.pod("team-b", "mnist-chief-0"),
        cluster.pod("team-a", "other-worker-0"),  # another job of the same team
        cluster.pod("team-a", "mnist-tensorboard"),  # its own TensorBoard
        cluster.pod("team-a", "mnist-serving"),
        cluster.pod("team-a", "import-x"),
        cluster.pod("kube-system", "coredns"),
        NODES[2],  # a node it does not run on
        CP_TUNNEL,
    ]
    for src in others:
        assert not cluster.allowed(src, worker, 2222), src.name


def test_tensorboard_and_serving_are_the_teams_own(cluster):
    board = cluster.pod("team-a", "mnist-tensorboard")
    server = cluster.pod("team-a", "mnist-serving")
    mine = cluster.pod("team-a", "import-x")
    theirs = cluster.pod("team-b", "mnist-worker-0")
    assert cluster.allowed(mine, board, 6006)
    assert cluster.allowed(cluster.pod("team-a", "other-chief-0"), board, 6006)
    assert cluster.allowed(mine, server, 8500) and cluster.allowed(mine, server, 8501)
    assert not cluster.allowed(theirs, board, 6006)
    assert not cluster.allowed(theirs, server, 8500)
    assert not cluster.allowed(theirs, server, 8501)
    assert not cluster.allowed(mine, board, 22)
    # team B's TensorBoard is just as closed to team A
    assert not cluster.allowed(mine, cluster.pod("team-b", "mnist-tensorboard"), 6006)


def test_operators_and_the_api_servers_proxy_reach_what_the_readme_says(cluster):
    """Operators' port-forward and the API server's service proxy (serve) reach their ports.

    `kubectl port-forward` is served by kubelet on the pod's node; `serve` goes through the
    API server's service proxy, from a control-plane node (its address or its tunnel).
    """
    board = cluster.pod("team-a", "mnist-tensorboard")
    server = cluster.pod("team-a", "mnist-serving")
    gpu1 = next(n for n in NODES if n.name == board.node)
    assert cluster.allowed(gpu1, board, 6006) and cluster.allowed(gpu1, server, 8501)
    for cp in (NODES[0], CP_TUNNEL):
        assert cluster.allowed(cp, server, 8501)
        assert not cluster.allowed(cp, server, 8500)
        assert not cluster.allowed(cp, board, 6006)


def test_the_metrics_port_opens_to_the_scraping_node_only(cluster):
    """The launcher's metrics (9464) reach the agent on the leader's node (cp-0) alone."""
    pods = [cluster.pod("team-a", f"mnist-{r}-0") for r in ("chief", "worker", "ps")]
    for pod in pods:
        for cp in (NODES[0], CP_TUNNEL):  # its address, and its tunnel's (Calico VXLAN)
            assert cluster.allowed(cp, pod, 9464), (cp.name, pod.name)
            assert not cluster.allowed(cp, pod, 2222)
    others = [
        NODES[2],  # another node
        cluster.pod("team-a", "mnist-tensorboard"),
        cluster.pod("team-a", "other-worker-0"),
        cluster.pod("team-b", "mnist-worker-0"),
        cluster.pod("kube-system", "coredns"),
    ]
    for src in others:
        assert not cluster.allowed(src, pods[1], 9464), src.name
    # team B's leader is on no node here: its pods' port stays closed, even to cp-0
    assert not cluster.allowed(NODES[0], cluster.pod("team-b", "mnist-worker-0"), 9464)
    # the TensorBoard pod of the job is no training pod
    assert not cluster.allowed(NODES[0], cluster.pod("team-a", "mnist-tensorboard"), 9464)


def test_the_scraping_node_is_the_one_with_the_units_address():
    assert network_policies.own_node_addresses([CP_NODE, GPU_NODE], ["10.0.0.20"]) == ["10.0.0.20"]
    assert network_policies.own_node_addresses([CP_NODE, GPU_NODE], ["192.0.2.9"]) == []
    closed = network_policies.metrics("tensorflow", "team-a", "training", [])
    assert closed["spec"]["ingress"] == []  # an empty `from` would open it to all


def test_team_pods_still_reach_dns(cluster):
    coredns = cluster.pod("kube-system", "coredns")
    for pod in (cluster.pod("team-a", "mnist-worker-0"), cluster.pod("team-a", "import-x")):
        assert cluster.allowed(pod, coredns, 53, "UDP")
        assert cluster.allowed(pod, coredns, 53, "TCP")


def test_api_server_addresses_are_the_control_plane_nodes_and_their_tunnels():
    no_tunnel = {**CP_NODE, "metadata": {**CP_NODE["metadata"], "annotations": {}}}
    assert network_policies.api_server_addresses([CP_NODE, GPU_NODE]) == [
        "10.0.0.10",
        "10.244.0.1",
    ]
    assert network_policies.api_server_addresses([no_tunnel]) == ["10.0.0.10"]
    assert network_policies.api_server_addresses([GPU_NODE]) == []


@pytest.mark.parametrize("version", ["1.33", "1.36"])
def test_every_policy_is_a_valid_networkpolicy(cluster, version):
    for policy in cluster.policies:
        kubernetes_validate.validate(policy, version, strict=True)
