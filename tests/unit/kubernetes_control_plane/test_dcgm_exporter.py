"""NVIDIA's DCGM exporter follows the GPU inventory workers publish, like the device plugin."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import dcgm_exporter
import kubernetes_validate
import pytest
import yaml
from charm_modules import load
from ops import testing
from prometheus_client.parser import text_string_to_metric_families

from fakes import dcgm_exporter as fake_exporter
from fakes.control_plane import join_workers, peer, peers, worker_bag, workers_relation
from fakes.kube_admission import KUBERNETES_VERSION

DS = "/apis/apps/v1/namespaces/gpu-k8s-gpu/daemonsets/dcgm-exporter"
CM = "/api/v1/namespaces/gpu-k8s-gpu/configmaps/dcgm-exporter-counters"
GPUS = [{"model": "NVIDIA A10G", "count": 4}]
# Every field name NVIDIA's exporter documents in its collectors files (recorded from
# NVIDIA/dcgm-exporter, see the fixture's header).
DOCUMENTED = Path(__file__).parents[2] / "fixtures" / "dcgm" / "documented-fields.txt"


def documented_fields() -> set[str]:
    return {
        line.strip()
        for line in DOCUMENTED.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }


@pytest.fixture
def bootstrapped(ctx, machine):
    return ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))


def test_not_deployed_without_gpus(ctx, bootstrapped, api):
    out = join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("cpu-0")}), api)
    assert api.get_object(DS) is None
    assert "dcgm-exporter" not in peer(out).local_app_data


def test_runs_on_gpu_nodes_on_the_nodes_network(ctx, bootstrapped, api):
    rel = workers_relation({0: worker_bag("cpu-0"), 1: worker_bag("gpu-0", GPUS)})
    out = join_workers(ctx, bootstrapped, rel, api)

    ds = api.get_object(DS)
    spec = ds["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["image"] == "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.1-4.8.4-distroless"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert spec["runtimeClassName"] == "nvidia"  # NVML and the GPUs come from the runtime
    # on the node's network: the worker's COS agent scrapes localhost:9400, the
    # tensorflow charm reads <node InternalIP>:9400
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert spec["hostNetwork"] is True
    assert env["DCGM_EXPORTER_LISTEN"] == ":9400"
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 9400}
    # GPUs mapped to the pods that hold them
    assert env["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources"}.items() <= (
        container["volumeMounts"][0].items()
    )
    assert container["securityContext"]["capabilities"] == {
        "add": ["SYS_ADMIN"],
        "drop": ["ALL"],
    }
    assert peer(out).local_app_data["dcgm-exporter"].startswith("4.6.1-4.8.4 ")


def test_steps_aside_while_the_mig_manager_changes_a_node(ctx, bootstrapped, api):
    join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)

    template = api.get_object(DS)["spec"]["template"]
    # reconfigure.go sets nvidia.com/gpu.deploy.dcgm-exporter to paused-for-mig-change,
    # then waits until no pod labelled app=nvidia-dcgm-exporter is left in gpu-k8s-gpu (its
    # DEFAULT_GPU_CLIENTS_NAMESPACE)
    assert template["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"
    # and it steps aside while the worker resets a GPU (it holds NVML on every GPU): the
    # worker labels its Node gpu-k8s.io/gpu-clients=paused, then waits until no pod
    # labelled gpu-k8s.io/gpu-client=true is left on it (issue 32)
    assert template["metadata"]["labels"]["gpu-k8s.io/gpu-client"] == "true"
    terms = template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {
                    "key": "nvidia.com/gpu.deploy.dcgm-exporter",
                    "operator": "NotIn",
                    "values": ["false", "paused-for-mig-change"],
                },
                # nor while its worker resets a GPU (the pods hold NVML handles on
                # every GPU; nvidia-smi -r wants none: issue 32)
                {"key": "gpu-k8s.io/gpu-clients", "operator": "NotIn", "values": ["paused"]},
            ]
        }
    ]


def test_the_counters_are_documented_dcgm_fields_and_cover_the_alert_rules(ctx, bootstrapped, api):
    join_workers(ctx, bootstrapped, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)
    text = api.get_object(CM)["data"]["counters.csv"]
    env = api.get_object(DS)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/gpu-k8s/counters.csv"} in env

    rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].startswith("#")]
    # a `label` row is no series: it labels the others (DCGM_FI_DRIVER_VERSION)
    assert all(len(r) == 3 and r[1].strip() in ("gauge", "counter", "label") for r in rows)
    fields = {r[0].strip() for r in rows}
    assert fields <= documented_fields()
    # what the worker's alert rules and dashboards ask for is collected
    for needed in (
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_POWER_VIOLATION",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
    ):
        assert needed in fields


def test_manifests_are_valid_kubernetes_objects():
    for obj in dcgm_exporter.manifests("registry.example.com/mirror"):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    (namespace, _, ds) = dcgm_exporter.manifests("registry.example.com/mirror")
    assert namespace["metadata"]["name"] == "gpu-k8s-gpu"
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.com/mirror/nvidia/k8s/dcgm-exporter:4.6.1-4.8.4-distroless"


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
    assert "dcgm-exporter" not in peer(out).local_app_data


UPSTREAM_TYPES = Path(__file__).parents[2] / "fixtures" / "dcgm" / "default-counters-types.txt"


def _rows(text: str) -> dict[str, str]:
    rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].startswith("#")]
    return {r[0].strip(): r[1].strip() for r in rows}


def test_each_counter_has_the_type_upstream_gives_it():
    lines = UPSTREAM_TYPES.read_text().splitlines()
    upstream = dict(line.split(", ") for line in lines if line and not line.startswith("#"))
    ours = _rows(dcgm_exporter.counters_text())
    assert {name: upstream[name] for name in ours} == ours


def test_upstreams_defaults_for_energy_tensor_activity_and_nvlink_are_collected():
    """Active in upstream's default-counters.csv (7ad5832) and read by the dashboards."""
    assert {
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DRIVER_VERSION",  # a label on every series, as the recorded page has it
    } <= set(_rows(dcgm_exporter.counters_text()))


@pytest.mark.parametrize("replicas,virtual", [(1, None), (4, "true")])
def test_time_sliced_gpus_are_attributed_to_every_pod_sharing_them(
    ctx, bootstrapped, api, replicas, virtual
):
    """Under time-slicing each GPU's series is given once per pod sharing it.

    KUBERNETES_VIRTUAL_GPUS (pkg/cmd/app.go, --kubernetes-virtual-gpus): one series per
    sharing pod (transformation/kubernetes.go toDeviceToSharingPods), not one pod picked.
    The host's PIDs only then: without it the exporter maps whole GPUs through kubelet's
    pod-resources socket and reads no process (PodMapper.Process at 7ad58324).
    """
    state = dataclasses.replace(bootstrapped, config={"gpu-time-slicing-replicas": replicas})
    join_workers(ctx, state, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)
    spec = api.get_object(DS)["spec"]["template"]["spec"]
    env = spec["containers"][0]["env"]
    assert {e["name"]: e.get("value") for e in env}.get("KUBERNETES_VIRTUAL_GPUS") == virtual
    # the host's PIDs, to map each process on a shared GPU to its pod (pidmapper.go)
    assert spec.get("hostPID") is (True if virtual else None)


# The worker's GPU alert rules (GpuAllocatedButIdle reads the exporter's per-pod series)
GPU_RULES = (
    Path(__file__).parents[3]
    / "charms"
    / "kubernetes-worker"
    / "src"
    / "prometheus_alert_rules"
    / "gpu.rules"
)
UUID0 = "GPU-0d1a3b5c-0000-4000-8000-00000000a10a"
UUID1 = "GPU-0d1a3b5c-0000-4000-8000-00000000a10b"


def _exporter_page(spec: dict, extra: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """gpu-0's exporter page while three training pods share its GPUs by time-slicing.

    `trainer` trains on replica 0 of GPU 0 (its process keeps 85% of the SMs busy), `waiter`
    holds replica 1 of the same GPU and does nothing (no process), `other` trains on GPU 1.
    """
    gpus = [fake_exporter.Gpu(0, UUID0), fake_exporter.Gpu(1, UUID1)]
    uid = "4f6c2a9e-1b7d-4c3a-9e21-{:012x}".format
    pods = [
        fake_exporter.SharingPod("trainer-0", "tensorflow", uid(1), (f"{UUID0}::0",)),
        fake_exporter.SharingPod("waiter-0", "tensorflow", uid(2), (f"{UUID0}::1",)),
        fake_exporter.SharingPod("other-0", "tensorflow", uid(3), (f"{UUID1}::0",)),
    ]
    processes = [
        fake_exporter.Process(41230, UUID0, uid(1), sm_util=85, memory=9 * 1024**3),
        fake_exporter.Process(51877, UUID1, uid(3), sm_util=70, memory=6 * 1024**3),
    ]
    fields = {
        "DCGM_FI_DEV_GPU_UTIL": {UUID0: 85, UUID1: 70},
        "DCGM_FI_DEV_FB_USED": {UUID0: 9216, UUID1: 6144},
        "DCGM_FI_DEV_FB_FREE": {UUID0: 13352, UUID1: 16424},
        **(extra or {}),
    }
    return fake_exporter.page(spec, "gpu-0", gpus, pods, processes, fields)


def _idle_alerts(page: str, tmp_path: Path) -> list[str]:
    """The pods GpuAllocatedButIdle fires for after 31 minutes of `page` (promtool).

    promtool test rules lists the alerts that fired when they differ from the expected
    (none), so the pods are read from its report.
    """
    series = [
        {
            "series": f"{s.name}{{{fake_exporter.series_labels(s.labels)}}}",
            "values": f"{s.value:g}x40",
        }
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == "DCGM_FI_DEV_GPU_UTIL"
    ]
    case = {"eval_time": "31m", "alertname": "GpuAllocatedButIdle", "exp_alerts": []}
    tests = {
        "rule_files": [str(GPU_RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [case]}],
    }
    path = tmp_path / "idle_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing (CI installs Debian's prometheus package)"
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    if done.returncode == 0:
        return []
    report = done.stdout + done.stderr
    assert "GpuAllocatedButIdle" in report, report
    return sorted(p for p in ("trainer-0", "waiter-0", "other-0") if f'pod="{p}"' in report)


@pytest.mark.skipif(
    shutil.which("promtool") is None and not os.environ.get("CI"),
    reason="promtool is not installed: `sudo apt-get install prometheus` (.ci/run does)",
)
def test_a_time_sliced_gpu_is_attributed_to_the_pod_that_uses_it(ctx, bootstrapped, api, tmp_path):
    """Each sharing pod's GPU use is its own processes', so a working pod is not idle.

    The exporter maps NVML's per-process figures to pods through /proc/<pid>/cgroup
    (fakes/dcgm_exporter.py), which it can read only in the host's PID namespace: without
    it every sharing pod reads 0, job-status says 0% busy and GpuAllocatedButIdle fires
    for pods that train.
    """
    state = dataclasses.replace(bootstrapped, config={"gpu-time-slicing-replicas": 4})
    join_workers(ctx, state, workers_relation({0: worker_bag("gpu-0", GPUS)}), api)
    spec = api.get_object(DS)["spec"]["template"]["spec"]
    page = _exporter_page(spec)

    gpu_metrics = load("tensorflow", "gpu_metrics")
    rows = gpu_metrics.per_pod(page, "tensorflow", ["trainer-0", "waiter-0", "other-0"])
    assert {pod: row["util"] for pod, row in rows.items()} == {
        "trainer-0": 85.0,
        "waiter-0": 0.0,
        "other-0": 70.0,
    }
    assert {pod: row["used"] for pod, row in rows.items()} == {
        "trainer-0": 9216.0,
        "waiter-0": 0.0,
        "other-0": 6144.0,
    }
    # only the pod that holds a slice and does nothing with it is idle
    assert _idle_alerts(page, tmp_path) == ["waiter-0"]
    # the exporter in its own PID namespace maps no process: every sharing pod reads 0
    own_pids = {key: value for key, value in spec.items() if key != "hostPID"}
    assert _idle_alerts(_exporter_page(own_pids), tmp_path) == ["other-0", "trainer-0", "waiter-0"]


def _shared_spec() -> dict:
    """The exporter's pod spec the control plane writes when GPUs are time-sliced.

    (test_time_sliced_gpus_are_attributed_to_every_pod_sharing_them shows the charm
    writes it with `gpu-time-slicing-replicas` > 1.)
    """
    (daemonset,) = [
        m for m in dcgm_exporter.manifests(shared_gpus=True) if m["kind"] == "DaemonSet"
    ]
    return daemonset["spec"]["template"]["spec"]


def test_job_status_gives_a_sharing_pod_the_whole_gpus_memory():
    """`X of Y GiB`: Y is what the pod may use, the GPU's used and free, shared or not.

    A sharing pod's FB_USED is its own processes' and FB_FREE the GPU's (the exporter's
    per-process series, fakes/dcgm_exporter.py): own + free shrank Y by what the other
    pods use (waiter-0 was told 13.0 GiB of a 22.0 GiB GPU the trainer fills with 9).
    """
    gpu_metrics = load("tensorflow", "gpu_metrics")
    page = _exporter_page(_shared_spec())
    rows = gpu_metrics.per_pod(page, "tensorflow", ["trainer-0", "waiter-0", "other-0"])
    assert {pod: (row["used"], row["total"]) for pod, row in rows.items()} == {
        "trainer-0": (9216.0, 22568.0),
        "waiter-0": (0.0, 22568.0),
        "other-0": (6144.0, 22568.0),
    }
    assert gpu_metrics.describe(rows["waiter-0"]) == "1 GPU, 0% busy, 0.0 of 22.0 GiB"


DASHBOARDS = Path(__file__).parents[3] / "charms"
GPU_NODES = DASHBOARDS / "kubernetes-worker" / "src" / "grafana_dashboards" / "gpu-nodes.json"
PROGRESS = DASHBOARDS / "tensorflow" / "src" / "grafana_dashboards" / "training-progress.json"
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None and not os.environ.get("CI"),
    reason="promtool is not installed: `sudo apt-get install prometheus` (.ci/run does)",
)


def _panel(board: Path, title: str, **variables: str) -> str:
    """A panel's one query with Grafana's variables given (`.*`, their All, by default)."""
    (panel,) = [p for p in json.loads(board.read_text())["panels"] if p["title"] == title]
    (target,) = panel["targets"]
    expr = target["expr"]
    for name in ("namespace", "job", "node"):
        expr = expr.replace(f"${name}", variables.get(name, ".*"))
    return expr


def _scraped(page: str, node: str = "gpu-0") -> list[tuple[str, str]]:
    """(series, value) of each sample of a page as Prometheus stores it, with `instance`.

    (cos_agent.scrape_job gives every target on a node its node's name.)
    """
    out = []
    for line in page.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out.append((f'{series[:-1]},instance="{node}",job="dcgm"}}', value))
    return out


def _promql(tmp_path: Path, series: list[dict], exprs: list[tuple[str, str, list[dict]]]) -> str:
    """What promtool reports of `exprs` (expr, eval time, samples) on `series`: '' if met."""
    case = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {"expr": expr, "eval_time": at, "exp_samples": samples} for expr, at, samples in exprs
        ],
    }
    path = tmp_path / "panels_test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [], "tests": [case]}, sort_keys=False))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing (CI installs Debian's prometheus package)"
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    return "" if done.returncode == 0 else done.stdout + done.stderr


@needs_promtool
def test_the_gpu_nodes_memory_panel_shows_each_gpu_shared_or_not(tmp_path):
    """Per physical GPU, its used share of what programs may allocate, time-sliced or not.

    Under time-slicing FB_USED has the GPU's series (no pod labels) and one per sharing pod
    with `pod_uid` (its own processes'), FB_FREE one per sharing pod without `pod_uid`
    (fakes/dcgm_exporter.py): `FB_USED / (FB_USED + FB_FREE)` matched no pair of them and
    the panel was empty for every shared GPU.
    """
    expr = _panel(GPU_NODES, "GPU memory used")
    gpu = 'gpu="{}",UUID="{}",hostname="gpu-0",instance="gpu-0"'
    expected = [
        {"labels": "{%s}" % gpu.format(0, UUID0), "value": 100 * 9216 / (9216 + 13352)},
        {"labels": "{%s}" % gpu.format(1, UUID1), "value": 100 * 6144 / (6144 + 16424)},
    ]
    (daemonset,) = [m for m in dcgm_exporter.manifests() if m["kind"] == "DaemonSet"]
    for spec in (_shared_spec(), daemonset["spec"]["template"]["spec"]):
        series = [{"series": s, "values": f"{v}x5"} for s, v in _scraped(_exporter_page(spec))]
        report = _promql(tmp_path, series, [(expr, "3m", expected)])
        assert not report, report


def _series(page: str) -> dict[str, dict[str, str]]:
    """Field -> pod ("" for none) -> its series on `page`, as stored (`_scraped`)."""
    out: dict[str, dict[str, str]] = {}
    for series, _ in _scraped(page):
        pod = re.search(r'pod="([^"]*)"', series)
        out.setdefault(series.partition("{")[0], {})[pod.group(1) if pod else ""] = series
    return out


@needs_promtool
def test_a_shared_gpus_energy_and_power_are_split_between_the_pods_sharing_it(tmp_path):
    """Each sharing pod's series carries the whole GPU's energy and power (fakes/dcgm_exporter.py).

    team-a's mnist trains on GPU 0 alone for 12 hours, then team-b's bert shares it; GPU 0
    draws 300 W throughout, GPU 1 (mnist's other worker, alone) 200 W. Summed per pod copy,
    team-b was given 7.2 kWh of GPU 0's day (3.6 kWh is all GPU 0 used while bert was
    there) and team-a 7.2 of it besides: the day's 12 kWh counted as 19.2.
    """
    ns_a, ns_b = "team-a", "team-b"
    mnist0, mnist1, bert = (
        "mnist-worker-0-0-aaaaa",
        "mnist-worker-0-1-ccccc",
        "bert-worker-0-0-bbbbb",
    )
    uid = "7c1e0b2d-4a5f-4e3b-8d10-{:012x}".format
    pods = [
        fake_exporter.SharingPod(mnist0, ns_a, uid(1), (f"{UUID0}::0",)),
        fake_exporter.SharingPod(mnist1, ns_a, uid(2), (f"{UUID1}::0",)),
        fake_exporter.SharingPod(bert, ns_b, uid(3), (f"{UUID0}::1",)),
    ]
    gpus = [fake_exporter.Gpu(0, UUID0), fake_exporter.Gpu(1, UUID1)]
    energy, power = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_POWER_USAGE"
    boot = 5_000_000_000_000  # mJ since boot: 13 digits
    watts = {UUID0: 300, UUID1: 200}
    fields = {energy: {UUID0: boot, UUID1: boot}, power: watts}
    kinds = {field: (kind, text) for field, kind, text in dcgm_exporter.COUNTERS}
    page = fake_exporter.page(_shared_spec(), "gpu-0", gpus, pods, [], fields, kinds=kinds)
    assert f'pod="{bert}"' in page and f" {boot}\n" in page
    named = _series(page)

    day, half = 1440, 720  # minutes, one sample a minute
    per_minute = {uuid: w * 60 * 1000 for uuid, w in watts.items()}  # mJ

    def counter(uuid: str, start: int) -> str:
        first = boot + start * per_minute[uuid]
        return (f"_x{start} " if start else "") + f"{first}+{per_minute[uuid]}x{day - start}"

    series = [
        {"series": named[energy][mnist0], "values": counter(UUID0, 0)},
        {"series": named[energy][mnist1], "values": counter(UUID1, 0)},
        {"series": named[energy][bert], "values": counter(UUID0, half)},
        {"series": named[power][mnist0], "values": f"300x{day}"},
        {"series": named[power][mnist1], "values": f"200x{day}"},
        {"series": named[power][bert], "values": f"_x{half} 300x{day - half}"},
    ]
    kwh = 3.6e9  # mJ
    # GPU 0: 12 h alone for mnist, 12 h halved; GPU 1: mnist's all day
    team_a = (300 * 12 * 3600 * 1000 + 150 * 12 * 3600 * 1000 + 200 * 24 * 3600 * 1000) / kwh
    team_b = 150 * 12 * 3600 * 1000 / kwh
    at = f"{day}m"
    per_pod = 'namespace="{}",pod="{}"'
    exprs = [
        (
            _panel(PROGRESS, "GPU energy per namespace (last 24 hours)"),
            at,
            [
                {"labels": f'{{namespace="{ns_a}"}}', "value": team_a},
                {"labels": f'{{namespace="{ns_b}"}}', "value": team_b},
            ],
        ),
        (
            _panel(PROGRESS, "Power draw"),
            at,
            [
                {"labels": "{%s}" % per_pod.format(ns_a, mnist0), "value": 150},
                {"labels": "{%s}" % per_pod.format(ns_a, mnist1), "value": 200},
                {"labels": "{%s}" % per_pod.format(ns_b, bert), "value": 150},
            ],
        ),
        # one job: its share only
        (
            _panel(PROGRESS, "GPU energy per namespace (last 24 hours)", job="bert"),
            at,
            [{"labels": f'{{namespace="{ns_b}"}}', "value": team_b}],
        ),
    ]
    report = _promql(tmp_path, series, exprs)
    assert not report, report


@needs_promtool
def test_the_gpu_nodes_dashboard_shows_each_gpu_once_shared_or_not(tmp_path):
    """One line per GPU on every DCGM panel of the GPU nodes dashboard, its own figure.

    Under time-slicing every field is repeated on each sharing pod's series, and GPU_UTIL
    has the GPU's series besides each pod's own (fakes/dcgm_exporter.py): the panels drew
    a line per pod copy, all named `gpu-0 GPU 0`, utilisation's at different heights.
    """
    counters = ("DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_POWER_VIOLATION")
    extra = {
        "DCGM_FI_DEV_GPU_TEMP": {UUID0: 61, UUID1: 58},
        "DCGM_FI_DEV_POWER_USAGE": {UUID0: 300, UUID1: 200},
        **{name: {UUID0: 0, UUID1: 0} for name in (*counters, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")},
    }
    gpu = 'gpu="{}",UUID="{}",hostname="gpu-0",instance="gpu-0"'

    def each_gpu(first: float, second: float) -> list[dict]:
        return [
            {"labels": "{%s}" % gpu.format(0, UUID0), "value": first},
            {"labels": "{%s}" % gpu.format(1, UUID1), "value": second},
        ]

    board = json.loads(GPU_NODES.read_text())
    queries = {
        panel["title"]: [t["expr"].replace("$node", ".*") for t in panel["targets"]]
        for panel in board["panels"]
    }
    (throttled_heat, throttled_power) = queries["Time throttled (heat, power cap)"]
    errors = queries["Errors (XIDs in the last 5 minutes, double-bit ECC in the hour)"]
    (ecc,) = [q for q in errors if "ECC" in q]
    exprs = [
        (queries["GPU utilisation"][0], "10m", each_gpu(85, 70)),
        (queries["Temperature"][0], "10m", each_gpu(61, 58)),
        (queries["Power draw"][0], "10m", each_gpu(300, 200)),
        (throttled_heat, "10m", each_gpu(0, 0)),
        (throttled_power, "10m", each_gpu(0, 0)),
        (ecc, "10m", each_gpu(0, 0)),
    ]
    (daemonset,) = [m for m in dcgm_exporter.manifests() if m["kind"] == "DaemonSet"]
    for spec in (_shared_spec(), daemonset["spec"]["template"]["spec"]):
        page = _exporter_page(spec, extra)
        series = [{"series": s, "values": f"{v}x10"} for s, v in _scraped(page)]
        report = _promql(tmp_path, series, exprs)
        assert not report, report
