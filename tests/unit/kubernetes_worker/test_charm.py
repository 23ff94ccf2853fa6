"""State-transition tests of the kubernetes-worker charm against a fake machine and API."""

import dataclasses
import datetime
import json
import logging

import pytest
from ops import testing

import charm
from charms.gpu_k8s.v0 import api_proxy, apt, containerd, kubeadm
from fakes.machine import deb
from fakes.worker_scenario import (
    API_SERVERS,
    CA_HASH,
    NO_CNI,
    NODE,
    SA_TOKEN,
    TOKEN,
    cluster_relation,
    join_secret,
    joined_state,
    node,
    not_ready_condition,
    register_node,
)

READY = "Ready (no GPU)"  # these machines have no NVIDIA GPU (see test_gpu_charm.py)


def mutations(machine, since=0):
    """Commands that changed the machine (queries such as dpkg-query left out)."""
    return machine.mutations()[since:]


# -- install and config ---------------------------------------------------------------


def test_install_without_relation_sets_up_containerd_and_waits_for_the_version(ctx, machine):
    out = ctx.run(ctx.on.install(), testing.State())

    assert out.unit_status == testing.WaitingStatus(
        "not related to a control plane: integrate with kubernetes-control-plane"
    )
    assert apt.matches(machine.dpkg["containerd"], containerd.CONTAINERD_SERIES)
    assert "containerd" in machine.held
    assert machine.sysctl["net.ipv4.ip_forward"] == "1"
    assert machine.read(containerd.CONFIG_PATH) == containerd.render_config()
    # kubeadm and kubelet wait for the control plane to say which version it runs
    assert not {"kubeadm", "kubelet", "kubectl"} & set(machine.dpkg)
    assert not kubeadm.is_joined(machine.host())


def test_join_material_brings_kubeadm_and_kubelet_at_the_control_planes_version(ctx, machine, api):
    register_node(api)
    state = joined_state(api)

    ctx.run(ctx.on.relation_changed(next(iter(state.relations))), state)

    assert (
        machine.dpkg["kubeadm"]
        == machine.dpkg["kubelet"]
        == deb(kubeadm.RELEASES["1.35"].kubernetes)
    )
    assert "kubectl" not in machine.dpkg
    assert {"containerd", "kubeadm", "kubelet"} <= machine.held
    assert len(machine.joins) == 1


@pytest.mark.parametrize(
    "event",
    ["install", "start", "config_changed", "upgrade_charm", "update_status"],
)
def test_each_lifecycle_event_twice_mutates_nothing_the_second_time(ctx, machine, event):
    state = testing.State()
    out = ctx.run(getattr(ctx.on, event)(), state)
    before = len(machine.mutations())

    again = ctx.run(getattr(ctx.on, event)(), out)

    assert mutations(machine, before) == []
    assert again.unit_status == out.unit_status


@pytest.mark.parametrize("published", ["1.36", "1.36.5"])
def test_the_control_planes_minor_is_installed(ctx, machine, api, published):
    register_node(api)

    out = ctx.run(ctx.on.config_changed(), joined_state(api, **{"kubernetes-version": published}))

    assert (
        machine.dpkg["kubelet"]
        == machine.dpkg["kubeadm"]
        == deb(kubeadm.RELEASES["1.36"].kubernetes)
    )
    assert out.unit_status == testing.ActiveStatus(READY)
    # a node that has not joined installs the control plane's minor and joins with it
    assert len(machine.joins) == 1
    assert machine.upgrades == []
    assert next(iter(out.relations)).local_unit_data["kubernetes-version"] == "1.36"


def test_package_mirror_is_used_for_kubernetes_packages(ctx, machine, api):
    machine.add_repository("https://mirror.internal/k8s")

    ctx.run(
        ctx.on.config_changed(),
        joined_state(api, config={"package-mirror": "https://mirror.internal/k8s"}),
    )

    assert "URIs: https://mirror.internal/k8s/core:/stable:/v1.35/deb/" in machine.read(
        "/etc/apt/sources.list.d/kubernetes.sources"
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"nvidia-driver": "abc"},
            "Invalid config: nvidia-driver: must be auto, none, or a branch such as 580, "
            "580-server or 580-server-open, not 'abc'",
        ),
        (
            {"nvidia-driver": "580-open"},
            "Invalid config: nvidia-driver: must be auto, none, or a branch such as 580, "
            "580-server or 580-server-open, not '580-open'",
        ),
        (
            {"nvidia-apt-source": "mirror.internal/nvidia"},
            "Invalid config: nvidia-apt-source: must be '<uri> [<suite> [<component>...]]"
            " [key=<url>]', such as 'http://mirror.example/nvidia/deb/$(ARCH) /'",
        ),
        (
            {"gpu-validation-image": "not an image"},
            "Invalid config: gpu-validation-image: must be a container image reference such as"
            " nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04",
        ),
        (
            {"package-mirror": "mirror.internal"},
            "Invalid config: package-mirror: must be empty (use pkgs.k8s.io) or an http(s) URL"
            " serving the pkgs.k8s.io layout, such as https://mirror.example/k8s",
        ),
        (
            {"node-labels": "pool"},
            "Invalid config: node-labels: 'pool' is not key=value; separate labels with spaces",
        ),
        (
            {"node-labels": "node-role.kubernetes.io/worker="},
            "Invalid config: node-labels: kubelets may not set 'node-role.kubernetes.io/worker'"
            " (kubernetes.io and k8s.io are reserved); use your own prefix such as"
            " example.com/worker",
        ),
        (
            {"node-labels": "a=1 a=2"},
            "Invalid config: node-labels: label 'a' is given twice; keep one",
        ),
        (
            {"node-labels": "pool=bad/value"},
            "Invalid config: node-labels: label value 'bad/value' of pool must be empty or 1-63"
            " letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
        ),
        (
            {"drain-timeout": -1},
            "Invalid config: drain-timeout: must be a number of seconds from 0 to 3600",
        ),
    ],
)
def test_bad_config_blocks_with_the_fix_and_changes_nothing(ctx, machine, config, message):
    out = ctx.run(ctx.on.config_changed(), testing.State(config=config))

    assert out.unit_status == testing.BlockedStatus(message)
    assert machine.calls == []


def test_a_config_blocked_unit_tells_a_related_cos_agent_it_is_blocked(ctx, machine):
    """A unit blocked by its config serves `blocked` (review observability.md F-3).

    ops' errors="blocked" aborts the hook before commit, so the unit-state file kept its
    last status and GpuK8sUnitBlocked could never fire.
    """
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    state = testing.State(relations={agent}, config={"drain-timeout": -1})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status == testing.BlockedStatus(
        "Invalid config: drain-timeout: must be a number of seconds from 0 to 3600"
    )
    served = machine.host().read("/var/lib/gpu-k8s/unit-state/kubernetes-worker-0.prom")
    assert served is not None
    assert 'gpu_k8s_unit_status{status="blocked"} 1' in served.splitlines()


def test_valid_labels_are_accepted(ctx, machine):
    config = {"node-labels": "example.com/pool=gpu tier=batch node.kubernetes.io/exclude= x=y_z.1"}

    out = ctx.run(ctx.on.config_changed(), testing.State(config=config))

    assert out.unit_status.name == "waiting"


def test_unreachable_package_source_blocks_with_what_to_check(ctx, machine, api):
    out = ctx.run(
        ctx.on.config_changed(),
        joined_state(api, config={"package-mirror": "https://down.example/k8s"}),
    )

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(
        "cannot use package source kubernetes: curl: (22) The requested URL returned error: 404"
    )
    assert "kubeadm" not in machine.dpkg
    assert machine.joins == []


def test_missing_package_version_blocks_naming_the_package(ctx, machine, api):
    for versions in machine.remote.values():
        versions["kubelet"] = {"0.0.1-1.1"}

    out = ctx.run(ctx.on.install(), joined_state(api))

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("cannot install kubelet: E: Version ")
    assert "kubelet exists at the requested version" in out.unit_status.message


# -- joining --------------------------------------------------------------------------


def test_relation_changed_joins_labels_and_publishes_the_node(ctx, machine, api):
    register_node(api)
    state = joined_state(api, config={"node-labels": "example.com/pool=cpu"})

    out = ctx.run(ctx.on.relation_changed(next(iter(state.relations))), state)

    assert out.unit_status == testing.ActiveStatus(READY)
    [config] = machine.joins
    # kubeadm discovers the cluster through this node's API proxy, set up before the join
    # with every control-plane API server, in an order of this node's own.
    assert config["discovery"]["bootstrapToken"] == {
        "apiServerEndpoint": "127.0.0.1:6444",
        "token": TOKEN,
        "caCertHashes": [CA_HASH],
    }
    assert config["nodeRegistration"]["name"] == NODE
    assert config["nodeRegistration"]["kubeletExtraArgs"] == [
        {"name": "node-labels", "value": "example.com/pool=cpu"}
    ]
    assert "controlPlane" not in config
    assert machine.proxy_servers() == sorted(API_SERVERS)
    assert machine.services[api_proxy.SERVICE].active
    relation = out.get_relation(next(iter(state.relations)).id)
    assert relation.local_unit_data["node-name"] == NODE
    labels = node(api)["metadata"]["labels"]
    assert labels["example.com/pool"] == "cpu"
    assert labels["kubernetes.io/hostname"] == NODE


def test_a_changed_control_plane_reaches_the_running_proxy_without_a_restart(ctx, machine, api):
    register_node(api)
    state = joined_state(api)
    out = ctx.run(ctx.on.relation_changed(next(iter(state.relations))), state)
    relation = out.get_relation(next(iter(state.relations)).id)
    smaller = dict(relation.remote_app_data, **{"api-servers": json.dumps(API_SERVERS[:2])})
    relation = dataclasses.replace(relation, remote_app_data=smaller)

    out = ctx.run(
        ctx.on.relation_changed(relation), dataclasses.replace(out, relations={relation})
    )

    assert machine.proxy_servers() == sorted(API_SERVERS[:2])
    service = machine.services[api_proxy.SERVICE]
    # a reload keeps open connections: one when the join added the kubelet's metrics
    # frontend, one for the new list
    assert (service.restarts, service.reloads) == (1, 2)
    assert len(machine.joins) == 1
    assert out.unit_status == testing.ActiveStatus(READY)


@pytest.mark.parametrize("turn", [None, "kubernetes-worker/0"])
@pytest.mark.parametrize(
    "event_name",
    [
        "relation_created",
        "relation_joined",
        "relation_changed",
        "update_status",
        "config_changed",
        "secret_changed",
        "upgrade_charm",
        "start",
    ],
)
def test_each_event_on_a_joined_unit_twice_mutates_nothing(ctx, machine, api, event_name, turn):
    register_node(api)
    state = joined_state(
        api, config={"node-labels": "example.com/pool=cpu"}, **{"upgrade-turn": turn}
    )

    def event(current):
        relation = next(iter(current.relations))
        secret = next(iter(current.secrets))
        if event_name.startswith("relation_"):
            if event_name == "relation_joined":
                return ctx.on.relation_joined(relation, remote_unit=0)
            return getattr(ctx.on, event_name)(relation)
        if event_name == "secret_changed":
            return ctx.on.secret_changed(secret)
        return getattr(ctx.on, event_name)()

    out = ctx.run(event(state), state)
    assert out.unit_status == testing.ActiveStatus(READY)
    before_machine = len(machine.mutations())
    before_api = [r for r in api.requests if r[0] != "GET"]

    again = ctx.run(event(out), out)

    assert again.unit_status == out.unit_status
    assert mutations(machine, before_machine) == []
    assert [r for r in api.requests if r[0] != "GET"] == before_api
    assert len(machine.joins) == 1


def test_node_labels_change_after_join_is_applied_through_the_api(ctx, machine, api):
    register_node(api, labels={"team": "someone-else"})
    state = joined_state(api, config={"node-labels": "example.com/pool=cpu old=1"})
    out = ctx.run(ctx.on.config_changed(), state)

    out = ctx.run(
        ctx.on.config_changed(),
        testing.State(
            config={"node-labels": "example.com/pool=gpu"},
            relations=out.relations,
            secrets=out.secrets,
            stored_states=out.stored_states,
        ),
    )

    labels = node(api)["metadata"]["labels"]
    assert labels["example.com/pool"] == "gpu"
    assert "old" not in labels
    assert labels["team"] == "someone-else"
    assert len(machine.joins) == 1


def test_a_node_that_is_not_ready_waits_with_kubelets_reason(ctx, machine, api):
    register_node(api, ready=not_ready_condition())
    state = joined_state(api, config={"node-labels": "example.com/pool=cpu"})

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status == testing.WaitingStatus(f"node {NODE} is not Ready: {NO_CNI}")
    # labelled and published all the same: the control plane counts it as not Ready
    assert node(api)["metadata"]["labels"]["example.com/pool"] == "cpu"
    [relation] = out.relations
    assert relation.local_unit_data["node-name"] == NODE
    register_node(api)  # the network plugin runs
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus(READY)


def test_a_node_kubelet_stopped_posting_for_waits(ctx, machine, api):
    # the node lifecycle controller marks a silent kubelet's conditions Unknown
    # (pkg/controller/nodelifecycle: "Kubelet stopped posting node status.")
    stale = {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
    }
    register_node(api, ready=stale)

    out = ctx.run(ctx.on.update_status(), joined_state(api))

    assert out.unit_status == testing.WaitingStatus(
        f"node {NODE} is not Ready: Kubelet stopped posting node status."
    )


def test_a_node_without_a_ready_condition_yet_waits(ctx, machine, api):
    register_node(api, ready=None)  # registered; kubelet has not posted its status yet

    out = ctx.run(ctx.on.update_status(), joined_state(api))

    assert out.unit_status == testing.WaitingStatus(
        f"node {NODE} is not Ready: kubelet has not reported its status yet"
    )


def test_unregistered_node_waits(ctx, machine, api):
    out = ctx.run(ctx.on.update_status(), joined_state(api))

    assert out.unit_status == testing.WaitingStatus(f"waiting for node {NODE} to register")
    assert kubeadm.is_joined(machine.host())


def test_control_plane_version_this_charm_cannot_install_blocks_before_installing(
    ctx, machine, api
):
    state = joined_state(api, **{"kubernetes-version": "1.99"})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status == testing.BlockedStatus(
        "the control plane runs Kubernetes 1.99, which this charm cannot install (it has "
        "1.35, 1.36, 1.37): refresh kubernetes-worker to a revision that "
        "supports it"
    )
    assert machine.calls == []


@pytest.mark.parametrize(
    ("overrides", "secret_content", "message"),
    [
        ({"endpoint": None}, None, "control plane databag: endpoint is missing"),
        (
            {"ca-cert-hash": "md5:1234"},
            None,
            "control plane databag: ca-cert-hash is invalid (must be sha256: followed by 64 "
            "lowercase hex digits)",
        ),
        (
            {"endpoint": "http://10.0.0.10:6443"},
            None,
            "control plane databag: endpoint is invalid (must be an https URL such as "
            "https://10.0.0.1:6443)",
        ),
        ({}, {"token": "nope"}, "control plane join secret is incomplete (token)"),
        # no unit was joining when the control plane last wrote it: it mints a token for
        # this one (issue 29 item 2)
        ({}, {"joining": "none"}, "waiting for the control plane's bootstrap token"),
        ({}, "no-secret", "waiting for access to the control plane's join secret"),
    ],
)
def test_missing_or_malformed_join_material_waits(
    ctx, machine, api, overrides, secret_content, message
):
    secret = join_secret(api)
    if isinstance(secret_content, dict):
        secret = testing.Secret(secret_content)
    relation = cluster_relation(secret, **overrides)
    secrets = set() if secret_content == "no-secret" else {secret}

    out = ctx.run(
        ctx.on.relation_changed(relation), testing.State(relations={relation}, secrets=secrets)
    )

    assert out.unit_status == testing.WaitingStatus(message)
    assert machine.joins == []


def test_empty_control_plane_databag_waits(ctx, machine):
    relation = testing.Relation("cluster", remote_app_name="kubernetes-control-plane")

    out = ctx.run(ctx.on.relation_created(relation), testing.State(relations={relation}))

    assert out.unit_status == testing.WaitingStatus(
        "waiting for the control plane to publish join material"
    )


def test_failed_join_waits_and_retries_later(ctx, machine, api):
    register_node(api)
    machine.join_error = "couldn't validate the identity of the API Server"
    state = joined_state(api)

    out = ctx.run(ctx.on.relation_changed(next(iter(state.relations))), state)

    assert out.unit_status == testing.WaitingStatus(
        "kubeadm join failed: error execution phase preflight: couldn't validate the identity "
        "of the API Server; retrying on the next update-status"
    )
    assert not machine.path(kubeadm.JOIN_CONFIG).exists()

    machine.join_error = None
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus(READY)


def test_api_errors_while_labelling_wait(ctx, machine, api):
    register_node(api)
    api.inject(status=403, times=1, method="GET", path_prefix="/api/v1/nodes")

    out = ctx.run(ctx.on.update_status(), joined_state(api))

    assert out.unit_status.name == "waiting"
    assert out.unit_status.message.startswith(f"cannot label node {NODE}: 403 ")


def test_unusable_kubelet_conf_waits(ctx, machine, api):
    """The worker labels its node as its kubelet (issue 29 item 2), not with the CP's kubeconfig.

    Updated: an unusable control-plane kubeconfig waited here before; the node's own
    kubelet.conf is what the worker needs now.
    """
    register_node(api)
    secret = join_secret(api, kubeconfig="clusters: nope")
    state = testing.State(relations={cluster_relation(secret)}, secrets={secret})
    out = ctx.run(ctx.on.update_status(), state)
    assert out.unit_status.name == "active"  # the CP kubeconfig is not used for the node
    machine.write("/etc/kubernetes/kubelet.conf", "clusters: nope\n", 0o600)

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "waiting"
    assert out.unit_status.message.startswith(
        f"cannot label node {NODE}: /etc/kubernetes/kubelet.conf is unusable"
    )


def test_relation_broken_waits_without_touching_the_node(ctx, machine, api):
    register_node(api)
    state = joined_state(api)
    relation = next(iter(state.relations))
    out = ctx.run(ctx.on.relation_changed(relation), state)
    before = len(machine.mutations())

    out = ctx.run(ctx.on.relation_broken(out.get_relation(relation.id)), out)

    assert out.unit_status.name == "waiting"
    assert mutations(machine, before) == []
    assert kubeadm.is_joined(machine.host())


def test_other_unit_departing_does_not_drain_this_node(ctx, machine, api, clock):
    register_node(api)
    state = joined_state(api)
    relation = next(iter(state.relations))
    out = ctx.run(ctx.on.relation_changed(relation), state)
    relation = out.get_relation(relation.id)

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), out)

    assert kubeadm.is_joined(machine.host())
    assert not node(api).get("spec", {}).get("unschedulable")
    assert out.unit_status == testing.ActiveStatus(READY)


# -- leaving --------------------------------------------------------------------------


def add_pod(api, name, labels=None, namespace="default", owner=None):
    metadata = {"labels": labels or {}}
    if owner:
        metadata["ownerReferences"] = [
            {"kind": owner, "name": "x", "uid": "1", "apiVersion": "apps/v1", "controller": True}
        ]
    api.put_object(
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        {
            "metadata": metadata,
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"},
        },
    )


def joined(ctx, api, config=None):
    register_node(api)
    state = joined_state(api, config=config)
    relation = next(iter(state.relations))
    out = ctx.run(ctx.on.relation_changed(relation), state)
    return out.get_relation(relation.id), out


def test_a_joined_worker_needs_no_token(ctx, machine, api):
    """Issue 29 item 2: the control plane deletes the token once every unit registered.

    The join secret then holds no token; a joined worker goes on as before.
    """
    relation, state = joined(ctx, api)
    idle = testing.Secret({"joining": "none"}, id=next(iter(state.secrets)).id)
    out = ctx.run(ctx.on.update_status(), dataclasses.replace(state, secrets={idle}))

    assert out.unit_status.name == "active", out.unit_status
    assert out.get_relation(relation.id).local_unit_data["node-name"] == NODE


def test_own_departure_drains_then_resets(ctx, machine, api, clock, own_departure, caplog):
    relation, state = joined(ctx, api)
    add_pod(api, "web-1")
    add_pod(api, "fluentd", owner="DaemonSet")

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)

    assert node(api)["spec"]["unschedulable"] is True
    assert api.get_object("/api/v1/namespaces/default/pods/web-1") is None
    assert api.get_object("/api/v1/namespaces/default/pods/fluentd") is not None
    assert not kubeadm.is_joined(machine.host())
    assert not machine.services[api_proxy.SERVICE].active  # stopped after the reset
    assert machine.read(api_proxy.CONFIG) is None
    assert out.unit_status == testing.MaintenanceStatus(f"drained node {NODE} (1 pods evicted)")
    methods = [(m, p) for m, p in api.requests if m == "POST"]
    assert methods == [("POST", "/api/v1/namespaces/default/pods/web-1/eviction")]
    reset = [i for i, c in enumerate(machine.lines("kubeadm")) if " reset " in c]
    assert len(reset) == 1


def test_drain_timeout_names_the_pods_left_and_still_resets(
    ctx, machine, api, clock, own_departure, caplog
):
    relation, state = joined(ctx, api, config={"drain-timeout": 30})
    add_pod(api, "db-0", labels={"app": "db"})
    api.put_object(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/db",
        {"spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}},
    )

    with caplog.at_level(logging.WARNING):
        out = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)

    assert out.unit_status == testing.MaintenanceStatus(
        f"drain of node {NODE} timed out after 30s; 1 pods were still running: default/db-0; "
        "see juju debug-log"
    )
    assert 29 <= clock.slept <= 31
    assert "default/db-0" in caplog.text
    assert api.get_object("/api/v1/namespaces/default/pods/db-0") is not None
    assert not kubeadm.is_joined(machine.host())


def test_stop_after_departure_does_nothing_more(ctx, machine, api, clock, own_departure):
    relation, state = joined(ctx, api)
    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)
    before_machine, before_api = len(machine.mutations()), len(api.requests)

    out = ctx.run(ctx.on.stop(), out)
    out = ctx.run(ctx.on.update_status(), out)

    assert mutations(machine, before_machine) == []
    assert len(api.requests) == before_api
    assert out.unit_status == testing.MaintenanceStatus(
        "left the cluster; this unit is being removed"
    )


def test_stop_alone_drains_and_resets(ctx, machine, api, clock):
    _, state = joined(ctx, api)
    add_pod(api, "web-1")

    out = ctx.run(ctx.on.stop(), state)

    assert api.get_object("/api/v1/namespaces/default/pods/web-1") is None
    assert not kubeadm.is_joined(machine.host())
    assert out.unit_status.name == "maintenance"


def test_stop_without_api_access_resets_and_says_so(ctx, machine, api, clock, caplog):
    _, state = joined(ctx, api)
    bare = testing.State(stored_states=state.stored_states)
    # the worker drains as its kubelet: without its certificate it has no access
    machine.path("/var/lib/kubelet/pki/kubelet-client-current.pem").unlink()

    with caplog.at_level(logging.WARNING):
        out = ctx.run(ctx.on.stop(), bare)

    assert out.unit_status == testing.MaintenanceStatus(
        f"reset node {NODE} without draining it: no access to the Kubernetes API"
    )
    assert "cannot drain node" in caplog.text
    assert not kubeadm.is_joined(machine.host())


def test_drain_api_error_fails_the_hook_without_resetting(ctx, machine, api, clock, own_departure):
    relation, state = joined(ctx, api)
    api.inject(status=403, times=1, method="PATCH")

    with pytest.raises(testing.errors.UncaughtCharmError):
        ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)

    assert kubeadm.is_joined(machine.host())


@pytest.fixture
def quick_client(monkeypatch):
    """The Kubernetes client's backoff between retries at 0 s (its real sleeps, not ours)."""
    monkeypatch.setattr(charm.KubernetesWorkerCharm, "kube_backoff", 0)


def test_api_gone_while_the_model_is_destroyed_resets_without_waiting(
    ctx, machine, api, clock, quick_client, caplog
):
    """`juju destroy-model`: the control plane skipped its reset and its machine is gone.

    Every worker is dying (planned units 0); the drain finds no API server. The stop
    hook succeeds and resets the node instead of failing for ever (the model would
    never go away without --force).
    """
    _, state = joined(ctx, api)
    add_pod(api, "web-1")
    api.stop()  # the control plane's machine released: nothing answers any more

    with caplog.at_level(logging.WARNING):
        out = ctx.run(ctx.on.stop(), dataclasses.replace(state, planned_units=0))

    assert out.unit_status == testing.MaintenanceStatus(
        f"reset node {NODE} without draining it: the Kubernetes API is unreachable"
    )
    assert not kubeadm.is_joined(machine.host())
    assert machine.read(api_proxy.CONFIG) is None
    assert clock.slept == 0  # nothing to wait for
    assert "the application is being removed" in caplog.text


def test_api_up_while_the_application_is_removed_still_drains(ctx, machine, api, clock):
    _, state = joined(ctx, api)
    add_pod(api, "web-1")

    out = ctx.run(ctx.on.stop(), dataclasses.replace(state, planned_units=0))

    assert api.get_object("/api/v1/namespaces/default/pods/web-1") is None
    assert node(api)["spec"]["unschedulable"] is True
    assert not kubeadm.is_joined(machine.host())
    assert out.unit_status == testing.MaintenanceStatus(f"drained node {NODE} (1 pods evicted)")


def test_api_briefly_down_during_remove_unit_drains_once_it_answers(
    ctx, machine, api, clock, own_departure, quick_client, caplog
):
    """`juju remove-unit` with the cluster staying: the API restarts under the drain.

    Every connection of the first request is reset (the client's six tries), so the
    drain fails with no answer; it is asked again 10 s later and drains as usual.
    """
    relation, state = joined(ctx, api)
    add_pod(api, "web-1")
    api.inject(status="reset", times=6)

    with caplog.at_level(logging.WARNING):
        out = ctx.run(
            ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0),
            dataclasses.replace(state, planned_units=1),  # another worker stays
        )

    assert clock.slept == 10
    assert f"cannot drain node {NODE} yet" in caplog.text
    assert api.get_object("/api/v1/namespaces/default/pods/web-1") is None
    assert not kubeadm.is_joined(machine.host())
    assert out.unit_status == testing.MaintenanceStatus(f"drained node {NODE} (1 pods evicted)")


def test_api_down_for_a_minute_during_remove_unit_resets_and_says_so(
    ctx, machine, api, clock, own_departure, quick_client, caplog
):
    relation, state = joined(ctx, api)
    add_pod(api, "web-1")
    api.stop()

    with caplog.at_level(logging.WARNING):
        out = ctx.run(
            ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0),
            dataclasses.replace(state, planned_units=1),
        )

    assert clock.slept == 60  # asked again every 10 s for a minute, then gave up
    assert out.unit_status == testing.MaintenanceStatus(
        f"reset node {NODE} without draining it: the Kubernetes API is unreachable"
    )
    assert "it did not answer for 60s" in caplog.text
    assert "rescheduled once Kubernetes marks the node lost" in caplog.text
    assert not kubeadm.is_joined(machine.host())


def test_departure_before_joining_just_cleans_up(ctx, machine, api, clock):
    out = ctx.run(ctx.on.stop(), testing.State())

    assert out.unit_status == testing.MaintenanceStatus("left the cluster")
    assert machine.lines("kubeadm") == []


def test_invalid_config_does_not_stop_the_drain(ctx, machine, api, clock):
    relation, state = joined(ctx, api)
    add_pod(api, "web-1")
    bad = testing.State(
        config={"drain-timeout": 99999},
        relations=state.relations,
        secrets=state.secrets,
        stored_states=state.stored_states,
    )

    ctx.run(ctx.on.stop(), bad)

    assert api.get_object("/api/v1/namespaces/default/pods/web-1") is None
    assert not kubeadm.is_joined(machine.host())


# -- secrets --------------------------------------------------------------------------


def test_no_secret_value_in_logs_statuses_databags_or_commands(
    ctx, machine, api, clock, own_departure, caplog
):
    machine.join_error = f"bad token {TOKEN}"
    register_node(api)
    state = joined_state(api, config={"node-labels": "example.com/pool=cpu"})
    relation = next(iter(state.relations))
    seen = []

    with caplog.at_level(logging.DEBUG):
        out = ctx.run(ctx.on.relation_changed(relation), state)
        seen.append(out.unit_status.message)
        machine.join_error = None
        out = ctx.run(ctx.on.update_status(), out)
        seen.append(out.unit_status.message)
        relation = out.get_relation(relation.id)
        out = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), out)
        seen.append(out.unit_status.message)

    for r in out.relations:
        seen.extend(r.local_unit_data.values())
        seen.extend(r.local_app_data.values())
    seen.append(caplog.text)
    seen.extend(str(line) for line in ctx.juju_log)
    seen.extend(c.line + (c.input or "") for c in machine.calls)
    text = "\n".join(seen)
    for secret in (TOKEN, TOKEN.split(".")[1], SA_TOKEN):
        assert secret not in text


# -- kubelet's serving certificate ----------------------------------------------------


def test_kubelets_serving_certificate_is_renewed_30_days_before_it_expires_without_a_restart(
    ctx, machine, api, monkeypatch
):
    """Issue 30 item 1: kubelet's self-signed serving certificate lasts a year.

    Within 30 days of its expiry update-status writes a new pair of kubelet's shape,
    which the running kubelet loads; once, not before day 335, and kubelet is never
    restarted (a restart can fail GPU pods: kubernetes/kubernetes#133382).
    """
    day0 = datetime.datetime(2026, 11, 24, 10, tzinfo=datetime.timezone.utc)
    now = [day0]
    machine.clock = lambda: now[0]
    monkeypatch.setattr(
        charm.KubernetesWorkerCharm, "wall_clock", staticmethod(lambda: now[0].timestamp())
    )
    _, state = joined(ctx, api)
    year = datetime.timedelta(days=365) - datetime.timedelta(hours=1)
    assert kubeadm.kubelet_serving_expiry(machine.host()) == day0 + year
    kubelet = machine.services["kubelet"]
    restarts = kubelet.restarts

    now[0] = day0 + datetime.timedelta(days=334)  # 31 days left
    state = ctx.run(ctx.on.update_status(), state)
    assert kubelet.restarts == restarts
    now[0] = day0 + datetime.timedelta(days=340)
    state = ctx.run(ctx.on.update_status(), state)
    again = ctx.run(ctx.on.update_status(), state)

    assert kubelet.restarts == restarts
    assert kubeadm.kubelet_serving_expiry(machine.host()) == now[0] + year
    assert machine.kubelet_serves() == f"{machine.hostname}@{int(now[0].timestamp())}"
    assert again.unit_status == testing.ActiveStatus(READY)
