"""The NVIDIA device plugin follows the GPU inventory workers publish."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import device_plugin
import kubernetes_validate
import pytest
import yaml
from ops import testing

from fakes.control_plane import join_workers, peer, peers, worker_bag, workers_relation
from fakes.kube_admission import KUBERNETES_VERSION

DS = "/apis/apps/v1/namespaces/gpu-k8s-gpu/daemonsets/nvidia-device-plugin"
CM = "/api/v1/namespaces/gpu-k8s-gpu/configmaps/nvidia-device-plugin-config"
GPUS = [{"model": "NVIDIA A10G", "count": 4}]
NAME = "nvidia-device-plugin"


@pytest.fixture
def bootstrapped(ctx, machine):
    return ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))


def test_not_deployed_without_gpus(ctx, bootstrapped, api):
    out = join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("cpu-0")}), api)
    assert api.get_object(DS) is None
    assert "device-plugin" not in peer(out).local_app_data


def test_deployed_on_gpu_nodes_only_once_a_worker_has_gpus(ctx, bootstrapped, api):
    rel = workers_relation({0: worker_bag("cpu-0"), 1: worker_bag("gpu-0", GPUS)})
    out = join_workers(ctx, bootstrapped, rel, api)

    ds = api.get_object(DS)
    spec = ds["spec"]["template"]["spec"]
    # the image upstream's v0.20.0 static manifest names
    assert spec["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert spec["runtimeClassName"] == "nvidia"
    config = yaml.safe_load(api.get_object(CM)["data"]["config.yaml"])
    assert config["flags"]["migStrategy"] == "none"
    assert "sharing" not in config
    assert out.unit_status.message == (
        "Ready: v1.36, 1 control-plane, 2 workers (1 with 4 GPUs: 4x NVIDIA A10G)"
    )


def test_steps_aside_while_the_mig_manager_changes_a_node(ctx, bootstrapped, api):
    join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)

    ds = api.get_object(DS)
    # reconfigure.go sets this label to paused-for-mig-change, then waits until no pod
    # labelled app=nvidia-device-plugin-daemonset is left on the node in gpu-k8s-gpu
    terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    # NotIn: runs where the label is "true" or absent (a worker not refreshed yet), not
    # where the manager paused it
    assert terms == [
        {
            "matchExpressions": [
                {
                    "key": "nvidia.com/gpu.deploy.device-plugin",
                    "operator": "NotIn",
                    "values": ["false", "paused-for-mig-change"],
                },
                # nor while its worker resets a GPU (the pods hold NVML handles on
                # every GPU; nvidia-smi -r wants none: issue 32)
                {"key": "gpu-k8s.io/gpu-clients", "operator": "NotIn", "values": ["paused"]},
            ]
        }
    ]
    assert ds["spec"]["template"]["metadata"]["labels"] == {
        "app.kubernetes.io/name": "nvidia-device-plugin",
        "app": "nvidia-device-plugin-daemonset",
        # the worker waits for the pods so labelled to leave before a GPU reset (issue 32)
        "gpu-k8s.io/gpu-client": "true",
    }
    # a DaemonSet's selector is immutable: running clusters keep theirs
    assert ds["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": NAME}}


def test_time_slicing_and_mig_config_roll_the_pods(ctx, bootstrapped, api):
    out = join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)
    before = api.get_object(DS)["spec"]["template"]["metadata"]["annotations"]

    config = {"gpu-time-slicing-replicas": 4, "mig-strategy": "single"}
    ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config=config))

    data = yaml.safe_load(api.get_object(CM)["data"]["config.yaml"])
    assert data["flags"]["migStrategy"] == "single"
    assert data["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}
    ]
    # a pod asking for two replicas (maybe two slices of one GPU) fails at kubelet's
    # admission instead of seeing one GPU counted as two (issue 31 leftover)
    assert data["sharing"]["timeSlicing"]["failRequestsGreaterThanOne"] is True
    after = api.get_object(DS)["spec"]["template"]["metadata"]["annotations"]
    assert after != before


def test_workers_are_told_the_sharing_and_mig_strategy_their_gpu_labels_describe(
    ctx, bootstrapped, api
):
    def told(state):
        bag = next(r for r in state.relations if r.endpoint == "workers").local_app_data
        return bag.get("mig-strategy"), bag.get("gpu-time-slicing-replicas")

    out = join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)
    assert told(out) == (None, None)  # the defaults (none, 1) go unsaid

    config = {"gpu-time-slicing-replicas": 4, "mig-strategy": "mixed"}
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config=config))
    assert told(out) == ("mixed", "4")

    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={}))
    assert told(out) == (None, None)


def test_pods_get_gpus_through_cdi_without_the_nvidia_runtime_class(ctx, bootstrapped, api):
    join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)

    flags = yaml.safe_load(api.get_object(CM)["data"]["config.yaml"])["flags"]
    # api/config/v1/flags.go keys; the plugin lists the host's driver (nvidiaDriverRoot /,
    # seen at /driver-root) in a CDI spec whose hooks run the host's nvidia-cdi-hook
    assert flags["plugin"] == {
        "deviceListStrategy": "cdi-cri",
        "deviceIDStrategy": "uuid",
        "containerDriverRoot": "/driver-root",
        "nvidiaCTKPath": "/usr/bin/nvidia-cdi-hook",
    }
    assert flags["nvidiaDriverRoot"] == "/"
    spec = api.get_object(DS)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    # the spec lands in the host's /var/run/cdi, where containerd reads CDI specs
    assert volumes["cdi-root"]["hostPath"] == {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}
    assert mounts["cdi-root"]["mountPath"] == "/var/run/cdi"
    assert not mounts["cdi-root"].get("readOnly")
    assert volumes["driver-root"]["hostPath"] == {"path": "/", "type": "Directory"}
    assert mounts["driver-root"] == {
        "name": "driver-root",
        "mountPath": "/driver-root",
        "readOnly": True,
    }
    # the plugin itself still runs through the nvidia class, which stays in the cluster
    assert spec["runtimeClassName"] == "nvidia"
    assert api.get_object(RC)["handler"] == "nvidia"


def toolkit_gives_it_the_gpus(container: dict) -> bool:
    """Whether the nvidia runtime honours the plugin image's NVIDIA_VISIBLE_DEVICES=all.

    GPU workers set accept-nvidia-visible-devices-envvar-when-unprivileged=false, and the
    toolkit counts a container as privileged only when it is, or when CAP_SYS_ADMIN is in
    its bounding set (nvidia-container-toolkit v1.20.0 internal/config/image/
    privileged.go). containerd's default capabilities leave SYS_ADMIN out, and
    Kubernetes applies `capabilities.add` after `drop`.
    """
    context = container.get("securityContext") or {}
    caps = context.get("capabilities") or {}
    return bool(context.get("privileged")) or "SYS_ADMIN" in caps.get("add", [])


def test_without_mig_the_plugin_keeps_only_sys_admin_so_the_toolkit_gives_it_the_gpus(
    ctx, bootstrapped, api
):
    join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)

    container = api.get_object(DS)["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]},
    }
    assert toolkit_gives_it_the_gpus(container)
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in {e["name"] for e in container.get("env", [])}


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_with_mig_the_plugin_gets_sys_admin_and_monitors_mig_devices(
    ctx, bootstrapped, api, strategy
):
    out = join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)

    out = ctx.run(
        ctx.on.config_changed(), dataclasses.replace(out, config={"mig-strategy": strategy})
    )

    container = api.get_object(DS)["spec"]["template"]["spec"]["containers"][0]
    # _helpers.tpl requiresCapSysAdmin and daemonset-device-plugin.yml addMigMonitorDevices
    assert container["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}
    assert {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in container["env"]

    assert toolkit_gives_it_the_gpus(container)

    ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={"mig-strategy": "none"}))
    container = api.get_object(DS)["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in {e["name"] for e in container["env"]}


def test_a_new_pin_is_applied_to_a_running_cluster(ctx, bootstrapped, api):
    out = join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)
    # what a charm revision pinning v0.18.2 recorded
    relation = dataclasses.replace(
        peer(out), local_app_data={**peer(out).local_app_data, "device-plugin": "v0.18.2 none 1"}
    )
    api.delete_object(DS)

    out = ctx.run(
        ctx.on.upgrade_charm(),
        dataclasses.replace(
            out, relations=[relation, *(r for r in out.relations if r.endpoint != "peers")]
        ),
    )

    container = api.get_object(DS)["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    # and with it the XIDs it leaves to the watcher (issue 32's review, gap 2)
    assert "DP_DISABLE_HEALTHCHECKS" in {e["name"] for e in container["env"]}
    assert peer(out).local_app_data["device-plugin"].startswith("v0.20.0 ")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"mig-strategy": "all"}, "mig-strategy: must be none, single or mixed"),
        ({"gpu-time-slicing-replicas": 0}, "gpu-time-slicing-replicas: must be between 1"),
    ],
)
def test_invalid_gpu_config_blocks(ctx, machine, config, message):
    out = ctx.run(ctx.on.config_changed(), testing.State(relations=[peers()], config=config))
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(f"Invalid config: {message}")
    assert machine.calls == []


@pytest.mark.parametrize("mig", ["none", "mixed"])
@pytest.mark.parametrize("replicas", [1, 8])
def test_manifests_are_valid_kubernetes_objects(replicas, mig):
    for obj in device_plugin.manifests(mig, replicas, "registry.example.com/mirror"):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


RC = "/apis/node.k8s.io/v1/runtimeclasses/nvidia"


def test_runtime_class_comes_with_the_device_plugin(ctx, bootstrapped, api):
    join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)
    runtime_class = api.get_object(RC)
    assert runtime_class["handler"] == "nvidia"
    assert runtime_class["scheduling"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_removed_when_the_last_gpu_worker_is_gone(ctx, bootstrapped, api):
    out = join_workers(
        ctx,
        bootstrapped,
        workers_relation({0: worker_bag("cpu-0"), 1: worker_bag("gpu-0", GPUS)}),
        api,
    )
    assert api.get_object(DS) is not None
    relation = next(r for r in out.relations if r.endpoint == "workers")
    departed = dataclasses.replace(relation, remote_units_data={0: relation.remote_units_data[0]})
    state = dataclasses.replace(
        out, relations=[*(r for r in out.relations if r is not relation), departed]
    )
    out = ctx.run(ctx.on.relation_departed(departed, remote_unit=1, departing_unit=1), state)

    assert api.get_object(DS) is None
    assert api.get_object(CM) is None
    assert api.get_object(RC) is None
    assert "device-plugin" not in peer(out).local_app_data
    assert out.unit_status.message.startswith("Ready: v1.36, 1 control-plane, 1 workers")


CATALOG = json.loads(
    (
        Path(__file__).parents[3] / "charms" / "kubernetes-worker" / "src" / "xid_catalog.json"
    ).read_text()
)["xids"]


def skipped_by_the_plugin(env: list[dict]) -> set[int] | None:
    """The XIDs k8s-device-plugin v0.20.0 ignores with this env; None: it watches nothing.

    internal/rm/health.go getDisabledHealthCheckXids: DP_DISABLE_HEALTHCHECKS split on
    commas, lowercased, each entry trimmed; `all` or `xids` anywhere disables every XID
    (checkHealth then returns before it registers any event); an entry that is not an
    unsigned integer is logged and dropped; 13, 31, 43, 45, 68 and 109 are always skipped;
    DP_ENABLE_HEALTHCHECKS (unset here) would take entries back out.
    """
    values = {e["name"]: e["value"] for e in env}
    assert "DP_ENABLE_HEALTHCHECKS" not in values
    skipped = {13, 31, 43, 45, 68, 109}
    for entry in values.get("DP_DISABLE_HEALTHCHECKS", "").lower().split(","):
        entry = entry.strip()
        if entry in ("all", "xids"):
            return None
        if entry.isdigit():
            skipped.add(int(entry))
    return skipped


@pytest.mark.parametrize("mig", ["none", "mixed"])
def test_the_plugin_leaves_every_xid_that_keeps_a_gpu_in_service_to_the_watcher(
    ctx, bootstrapped, api, mig
):
    out = join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)
    ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config={"mig-strategy": mig}))

    env = api.get_object(DS)["spec"]["template"]["spec"]["containers"][0]["env"]
    skipped = skipped_by_the_plugin(env)
    assert skipped is not None  # it still watches the GPUs
    # every entry is one the plugin parses (a malformed one it would drop in silence)
    entries = next(e["value"] for e in env if e["name"] == "DP_DISABLE_HEALTHCHECKS")
    assert all(entry.isdigit() for entry in entries.split(","))
    # the application XIDs the issue names, and the info ones, no longer make a GPU
    # Unhealthy for good behind the watcher's back (k8s-device-plugin#1974: XID 94)
    assert {13, 31, 43, 45, 94, 63, 92, 121, 160} <= skipped
    # a GPU that fell off the bus, an uncontained memory error, a double-bit ECC error
    # and an XID newer than the catalog still take the GPU out of kubelet's allocatable
    # (the watcher quarantines them all)
    assert not {79, 95, 48, 119, 173} & skipped


def test_the_plugins_xid_list_is_the_worker_catalogs():
    """device_plugin.IN_SERVICE_XIDS is a copy: the catalog file is the truth.

    The catalog's `application` and `info` XIDs never take a GPU out; XID 154's action is
    in its kernel line, which NVML's event does not carry, so the watcher decides it.
    """
    in_service = {"application", "info", "by-recovery-action"}
    from_catalog = sorted(int(xid) for xid, e in CATALOG.items() if e["action"] in in_service)
    assert list(device_plugin.IN_SERVICE_XIDS) == from_catalog
    # the six the plugin always skips are in the list but 109, a GPU reset's (the
    # watcher quarantines it, the plugin leaves the GPU allocatable until the taint)
    assert {13, 31, 43, 45, 68} <= set(from_catalog)
    assert CATALOG["109"]["action"] == "reset-gpu"
