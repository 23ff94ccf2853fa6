"""NVIDIA's MIG manager follows the MIG-capable GPU models workers publish."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from ops import testing

from fakes.control_plane import join_workers, peer, peers, worker_bag, workers_relation

NS = "/api/v1/namespaces/gpu-k8s-gpu"
DS = "/apis/apps/v1/namespaces/gpu-k8s-gpu/daemonsets/nvidia-mig-manager"
CONFIG = f"{NS}/configmaps/nvidia-mig-manager-config"
CLIENTS = f"{NS}/configmaps/nvidia-mig-manager-gpu-clients"
SA = f"{NS}/serviceaccounts/nvidia-mig-manager"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
CLUSTER_ROLE = f"{RBAC}/clusterroles/nvidia-mig-manager"
CLUSTER_ROLE_BINDING = f"{RBAC}/clusterrolebindings/nvidia-mig-manager"
ROLE = f"{RBAC}/namespaces/gpu-k8s-gpu/roles/nvidia-mig-manager"
ROLE_BINDING = f"{RBAC}/namespaces/gpu-k8s-gpu/rolebindings/nvidia-mig-manager"
ALL = (DS, CONFIG, CLIENTS, SA, CLUSTER_ROLE, CLUSTER_ROLE_BINDING, ROLE, ROLE_BINDING)

# What `nvidia-smi mig -lgip` lists as "Instances Total" per GPU-instance profile
# (NVIDIA's MIG user guide tables; mig-parted's config-default.yaml has the same counts).
H100 = {
    "model": "NVIDIA H100 80GB HBM3",
    "count": 8,
    "mig-capable": True,
    "pci-device-id": "2330",
    "mig-profiles": {
        "1g.10gb": 7,
        "1g.10gb+me": 1,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    },
}
A100_40GB = {
    "model": "NVIDIA A100-SXM4-40GB",
    "count": 8,
    "mig-capable": True,
    "pci-device-id": "20b0",
    "mig-profiles": {
        "1g.5gb": 7,
        "1g.5gb+me": 1,
        "1g.10gb": 4,
        "2g.10gb": 3,
        "3g.20gb": 2,
        "4g.20gb": 1,
        "7g.40gb": 1,
    },
}
A10G = {"model": "NVIDIA A10G", "count": 1, "mig-capable": False}


@pytest.fixture
def bootstrapped(ctx, machine):
    return ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))


def mig_configs(api) -> dict:
    """The mig-parted config the MIG manager reads, as YAML 1.1 (go-yaml) reads it."""
    return yaml.safe_load(api.get_object(CONFIG)["data"]["config.yaml"])["mig-configs"]


def pod_spec(api) -> dict:
    return api.get_object(DS)["spec"]["template"]["spec"]


def test_applied_only_once_a_mig_capable_worker_joins(ctx, bootstrapped, api):
    rel = workers_relation({0: worker_bag("cpu-0"), 1: worker_bag("gpu-0", [A10G])})
    out = join_workers(ctx, bootstrapped, rel, api)
    assert api.get_object("/apis/apps/v1/namespaces/gpu-k8s-gpu/daemonsets/nvidia-device-plugin")
    assert all(api.get_object(path) is None for path in ALL)
    assert "mig-manager" not in peer(out).local_app_data

    relation = out.get_relation(rel.id)
    grown = dataclasses.replace(
        relation,
        remote_units_data={**relation.remote_units_data, 2: worker_bag("h100-0", [H100])},
    )
    state = dataclasses.replace(
        out, relations=[*(r for r in out.relations if r is not relation), grown]
    )
    out = ctx.run(ctx.on.relation_changed(grown, remote_unit=2), state)

    assert all(api.get_object(path) is not None for path in ALL)
    assert peer(out).local_app_data["mig-manager"].startswith("v0.15.0 ")
    # upstream's pod label too, so `kubectl logs -l app=nvidia-mig-manager` finds them
    labels = api.get_object(DS)["spec"]["template"]["metadata"]["labels"]
    assert labels["app"] == "nvidia-mig-manager"


def test_config_is_generated_from_the_models_workers_report(ctx, bootstrapped, api):
    rel = workers_relation({0: worker_bag("h100-0", [H100]), 1: worker_bag("a100-0", [A100_40GB])})
    join_workers(ctx, bootstrapped, rel, api)

    configs = mig_configs(api)
    # config-default.yaml's two generic configs
    assert configs["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert configs["all-enabled"] == [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    # one profile both models offer, with different counts: one entry each, by PCI id
    assert configs["all-1g.10gb"] == [
        {
            "device-filter": ["0x20B010DE"],
            "devices": "all",
            "mig-enabled": True,
            "mig-devices": {"1g.10gb": 4},
        },
        {
            "device-filter": ["0x233010DE"],
            "devices": "all",
            "mig-enabled": True,
            "mig-devices": {"1g.10gb": 7},
        },
    ]
    assert configs["all-1g.5gb"] == [
        {
            "device-filter": ["0x20B010DE"],
            "devices": "all",
            "mig-enabled": True,
            "mig-devices": {"1g.5gb": 7},
        }
    ]
    assert configs["all-7g.80gb"][0]["device-filter"] == ["0x233010DE"]
    # `+` is no label value: upstream names the config with a dot, the profile stays
    assert configs["all-1g.10gb.me"][0]["mig-devices"] == {"1g.10gb+me": 1}
    assert set(configs) == {
        "all-disabled",
        "all-enabled",
        *(f"all-{p.replace('+', '.')}" for p in H100["mig-profiles"]),
        *(f"all-{p.replace('+', '.')}" for p in A100_40GB["mig-profiles"]),
    }
    for entries in configs.values():
        for entry in entries:
            # api/spec/v1/spec.go's fields only; filters strings (YAML reads 0x... as an int)
            assert set(entry) <= {"device-filter", "devices", "mig-enabled", "mig-devices"}
            assert all(isinstance(f, str) for f in entry.get("device-filter", []))


def test_profiles_mig_parted_cannot_use_are_left_out(ctx, bootstrapped, api):
    odd = {
        **H100,
        "mig-profiles": {
            "1g.10gb": 7,
            "1c.3g.40gb": 3,  # a compute-instance profile: skipped as upstream's builder does
            "MIG 1g.10gb": 7,  # not a profile name
            "2g.20gb": 0,  # an empty config would fail mig-parted's validation
            "1g.10gb+me,gfx": 1,  # a comma cannot be in a label value
        },
    }
    join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("h100-0", [odd])}), api)

    assert set(mig_configs(api)) == {"all-disabled", "all-enabled", "all-1g.10gb"}


def test_a_worker_that_reports_no_profiles_still_gets_the_manager(ctx, bootstrapped, api):
    older = {k: v for k, v in H100.items() if k not in ("pci-device-id", "mig-profiles")}
    out = join_workers(
        ctx, bootstrapped, workers_relation({0: worker_bag("h100-0", [older])}), api
    )

    assert api.get_object(DS) is not None
    assert set(mig_configs(api)) == {"all-disabled", "all-enabled"}
    assert peer(out).local_app_data["mig-manager"].startswith("v0.15.0 ")


def test_daemon_set_runs_upstream_image_on_mig_manager_nodes(ctx, bootstrapped, api):
    join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("h100-0", [H100])}), api)

    spec = pod_spec(api)
    container = spec["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.mig-manager": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    # it stays on a quarantined node, to make the MIG layout again after a repair's reboot
    quarantine = {"key": "gpu-k8s.io/gpu-unhealthy", "operator": "Exists", "effect": "NoExecute"}
    assert quarantine in spec["tolerations"]
    assert spec["serviceAccountName"] == "nvidia-mig-manager"
    assert (spec["hostPID"], spec["hostIPC"], spec["runtimeClassName"]) == (True, True, "nvidia")
    assert container["securityContext"] == {"privileged": True}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {
        "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        "CONFIG_FILE": "/mig-parted-config/config.yaml",
        "GPU_CLIENTS_FILE": "/gpu-clients/clients.yaml",
        "HOST_ROOT_MOUNT": "/host",
        "DEFAULT_GPU_CLIENTS_NAMESPACE": "gpu-k8s-gpu",
        "WITH_REBOOT": "false",
        "WITH_SHUTDOWN_HOST_GPU_CLIENTS": "false",
        "CDI_ENABLED": "true",
        "NVIDIA_DRIVER_ROOT": "/",
        "DRIVER_ROOT_CTR_PATH": "/host",
        "NVIDIA_DEV_ROOT": "/",
        "DEV_ROOT_CTR_PATH": "/host",
        "NVIDIA_CDI_HOOK_PATH": "/usr/bin/nvidia-cdi-hook",
    }
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/host"]]["hostPath"] == {"path": "/", "type": "Directory"}
    assert volumes[mounts["/sys"]]["hostPath"] == {"path": "/sys", "type": "Directory"}
    assert volumes[mounts["/var/run/cdi"]]["hostPath"]["path"] == "/var/run/cdi"
    assert volumes[mounts["/mig-parted-config"]]["configMap"]["name"] == (
        "nvidia-mig-manager-config"
    )
    clients = volumes[mounts["/gpu-clients"]]["configMap"]["name"]
    assert clients == "nvidia-mig-manager-gpu-clients"
    assert yaml.safe_load(api.get_object(CLIENTS)["data"]["clients.yaml"]) == {
        "version": "v1",
        "systemd-services": [],
    }


def test_rbac_is_what_the_mig_manager_calls_and_no_more(ctx, bootstrapped, api):
    join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("h100-0", [H100])}), api)

    assert api.get_object(SA) is not None
    assert api.get_object(CLUSTER_ROLE)["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    assert api.get_object(ROLE)["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}
    ]
    subject = [
        {"kind": "ServiceAccount", "name": "nvidia-mig-manager", "namespace": "gpu-k8s-gpu"}
    ]
    for path, kind in ((CLUSTER_ROLE_BINDING, "ClusterRole"), (ROLE_BINDING, "Role")):
        binding = api.get_object(path)
        assert binding["subjects"] == subject
        assert binding["roleRef"]["kind"] == kind
        assert binding["roleRef"]["name"] == "nvidia-mig-manager"


def test_image_moves_to_the_image_registry(ctx, bootstrapped, api):
    state = dataclasses.replace(
        bootstrapped, config={"image-registry": "registry.example.com:5000/mirror"}
    )
    join_workers(ctx, state, workers_relation({0: worker_bag("h100-0", [H100])}), api)

    assert pod_spec(api)["containers"][0]["image"] == (
        "registry.example.com:5000/mirror/nvidia/cloud-native/k8s-mig-manager:v0.15.0"
    )


def test_a_new_model_applies_the_config_again_and_replaces_the_pods(ctx, bootstrapped, api):
    out = join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("h100-0", [H100])}), api)
    assert "all-1g.5gb" not in mig_configs(api)
    before = api.get_object(DS)["spec"]["template"]["metadata"]["annotations"]
    applied = peer(out).local_app_data["mig-manager"]

    # nothing new: no request for the MIG manager
    requests = len(api.requests)
    out = ctx.run(ctx.on.update_status(), out)
    assert not [r for r in api.requests[requests:] if "mig-manager" in r.path]

    relation = next(r for r in out.relations if r.endpoint == "workers")
    grown = dataclasses.replace(
        relation,
        remote_units_data={**relation.remote_units_data, 1: worker_bag("a100-0", [A100_40GB])},
    )
    state = dataclasses.replace(
        out, relations=[*(r for r in out.relations if r is not relation), grown]
    )
    out = ctx.run(ctx.on.relation_changed(grown, remote_unit=1), state)

    assert mig_configs(api)["all-1g.5gb"][0]["device-filter"] == ["0x20B010DE"]
    assert api.get_object(DS)["spec"]["template"]["metadata"]["annotations"] != before
    assert peer(out).local_app_data["mig-manager"] != applied


def test_a_new_pin_is_applied_to_a_running_cluster(ctx, bootstrapped, api):
    out = join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("h100-0", [H100])}), api)
    relation = dataclasses.replace(
        peer(out),
        local_app_data={**peer(out).local_app_data, "mig-manager": "v0.14.5 0123456789abcdef"},
    )
    api.delete_object(DS)

    out = ctx.run(
        ctx.on.upgrade_charm(),
        dataclasses.replace(
            out, relations=[relation, *(r for r in out.relations if r.endpoint != "peers")]
        ),
    )

    assert api.get_object(DS) is not None
    assert peer(out).local_app_data["mig-manager"].startswith("v0.15.0 ")


def test_kept_when_the_last_mig_worker_leaves(ctx, bootstrapped, api):
    rel = workers_relation({0: worker_bag("gpu-0", [A10G]), 1: worker_bag("h100-0", [H100])})
    out = join_workers(ctx, bootstrapped, rel, api)
    applied = peer(out).local_app_data["mig-manager"]
    relation = next(r for r in out.relations if r.endpoint == "workers")
    departed = dataclasses.replace(relation, remote_units_data={0: relation.remote_units_data[0]})
    state = dataclasses.replace(
        out, relations=[*(r for r in out.relations if r is not relation), departed]
    )

    out = ctx.run(ctx.on.relation_departed(departed, remote_unit=1, departing_unit=1), state)

    assert all(api.get_object(path) is not None for path in ALL)
    assert "all-7g.80gb" in mig_configs(api)
    assert peer(out).local_app_data["mig-manager"] == applied


def test_registry_entries_of_older_charms_still_read(ctx, bootstrapped, api):
    out = join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("h100-0", [H100])}), api)
    stored = json.loads(peer(out).local_app_data["workers"])
    entry = stored["kubernetes-worker/0"]
    assert entry[5] == {"NVIDIA H100 80GB HBM3": ["2330", H100["mig-profiles"]]}

    # an entry as the charm stored it before MIG profiles: five fields, no MIG manager
    stored["kubernetes-worker/0"] = entry[:5]
    bag = {**peer(out).local_app_data, "workers": json.dumps(stored)}
    del bag["mig-manager"]
    relation = dataclasses.replace(peer(out), local_app_data=bag)
    for path in ALL:
        api.delete_object(path)
    state = dataclasses.replace(
        out, relations=[relation, *(r for r in out.relations if r.endpoint != "peers")]
    )
    out = ctx.run(ctx.on.update_status(), state)
    assert api.get_object(DS) is None

    # the charm upgrade rebuilds the registry from the workers' databags
    out = ctx.run(ctx.on.upgrade_charm(), out)
    assert api.get_object(DS) is not None
