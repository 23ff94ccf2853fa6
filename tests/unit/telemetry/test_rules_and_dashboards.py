"""Every charm's alert rules and Grafana dashboards: valid, and about metrics that exist.

A query can name a metric nobody exports and still be valid PromQL, so each metric name
in a rule or a dashboard must be one the exporters document: DCGM's fields as NVIDIA's
dcgm-exporter lists them, etcd's as etcd defines them, kube-state-metrics' node, pod,
job and daemonset metrics as it documents them (tests/fixtures/*/, each with its source),
the JobSet and Workload metrics our kube-state-metrics configuration names, the charms'
own gauges and the training launchers' metrics (actions/tf_launcher.py); and each of
those last two feeds a rule or a panel. promtool (Debian's
`prometheus`) checks the rules and every dashboard query as Prometheus parses them and
runs the etcd and cluster rules' unit tests here; the GPU rules' are in
tests/unit/kubernetes_worker.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
RULE_FILES = sorted(ROOT.glob("charms/*/src/prometheus_alert_rules/*.rules"))
DASHBOARDS = sorted(ROOT.glob("charms/*/src/grafana_dashboards/*.json"))
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"),
    reason="promtool is not installed: `sudo apt-get install prometheus` (.ci/run does)",
)
# PromQL's functions, aggregations and keywords (prometheus.io/docs/prometheus/latest/
# querying/functions/, operators/): whatever else is left outside braces, brackets and
# strings names a metric.
PROMQL = {
    "rate", "increase", "irate", "avg_over_time", "max_over_time", "min_over_time",
    "histogram_quantile", "avg", "sum", "count", "max", "min", "by", "without", "and",
    "or", "unless", "on", "ignoring", "bool", "offset", "changes", "time", "vector",
    "sum_over_time", "group_left", "group_right",
}  # fmt: skip
# COS's Grafana swaps in its Loki for this variable (canonical/grafana-k8s-operator
# lib/charms/grafana_k8s/v0/grafana_dashboard.py, the `lokids` datasource dropdown)
LOKI = {"type": "loki", "uid": "${lokids}"}
# kube-state-metrics' metrics about JobSets and Workloads are named by our configuration
KSM_RESOURCES = ROOT / "charms/kubernetes-control-plane/src/kube-state-metrics-resources.yaml"


def _documented_lines(path: Path) -> set[str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("#")}


def _custom_resource_metrics() -> set[str]:
    """kube-state-metrics' metrics about JobSets and Workloads, as our configuration names them."""
    return {
        f"{resource['metricNamePrefix']}_{m['name']}"
        for resource in yaml.safe_load(KSM_RESOURCES.read_text())["spec"]["resources"]
        for m in resource["metrics"]
    }


def _documented() -> set[str]:
    names = {"up"}  # Prometheus' own, one per scrape target
    for path in (
        FIXTURES / "dcgm" / "documented-fields.txt",
        FIXTURES / "etcd" / "documented-metrics.txt",
        FIXTURES / "kube-state-metrics" / "documented-metrics.txt",
        FIXTURES / "kubernetes" / "documented-metrics.txt",
    ):
        names |= _documented_lines(path)
    names |= _custom_resource_metrics()
    names |= _charm_gauges() | _launcher_metrics()
    # a histogram exposes its series under these suffixes
    return names | {f"{n}{s}" for n in names for s in ("_bucket", "_sum", "_count")}


def _charm_gauges() -> set[str]:
    """The charms' own metrics (unit_state, the GPU watcher): each named where it is made."""
    sources = [*ROOT.glob("charms/*/src/*.py"), ROOT / "lib/charms/gpu_k8s/v0/unit_state.py"]
    found = set()
    for path in sources:
        found |= set(re.findall(r'(?:Gauge|Counter)\(\s*"(gpu_k8s_\w+)"', path.read_text()))
    return found


def _launcher_metrics() -> set[str]:
    """What every training pod's launcher serves (actions/tf_launcher.py, "Metrics")."""
    text = (ROOT / "actions" / "tf_launcher.py").read_text()
    return set(re.findall(r'"(gpu_k8s_training_\w+)"', text))


def test_the_launchers_metrics_are_found_where_they_are_served():
    assert _launcher_metrics() == {
        "gpu_k8s_training_step",
        "gpu_k8s_training_steps_target",
        "gpu_k8s_training_steps_per_second",
        "gpu_k8s_training_examples_per_second",
        "gpu_k8s_training_loss",
        "gpu_k8s_training_last_step_timestamp_seconds",
        "gpu_k8s_training_last_checkpoint_timestamp_seconds",
    }


def test_the_charms_own_metrics_are_found_where_they_are_made():
    assert {
        "gpu_k8s_unit_status",
        "gpu_k8s_unit_state_updated_timestamp_seconds",
        "gpu_k8s_cluster_nodes_missing",
        "gpu_k8s_node_reboot_required",
        "gpu_k8s_efs_size_bytes",
        "gpu_k8s_training_jobs",
        "gpu_k8s_gpu_faults_total",  # gpu_watcher.py's Counter
        "gpu_k8s_gpu_repairs_total",
    } <= _charm_gauges()


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", bare)
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", bare)
    bare = re.sub(r"\boffset\s+-?\d+(ms|[smhdwy])\b", " ", bare)  # `x offset 5m`
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare))
    return {w for w in words if w not in PROMQL and not re.fullmatch(r"\d+[smhdwy]?|e\d+", w)}


def test_the_metric_name_reader_reads_what_promql_means():
    assert metric_names(
        'histogram_quantile(0.99, sum by (instance, le) (rate(etcd_x_bucket{a="b"}[5m])))'
    ) == {"etcd_x_bucket"}
    assert metric_names('100 * A_USED / (A_USED + A_FREE) and on (pod) B{pod!=""} > 5') == {
        "A_USED",
        "A_FREE",
        "B",
    }
    assert metric_names("x_total unless x_total offset 5m") == {"x_total"}


def test_every_charm_ships_rules_and_dashboards_where_its_metrics_are():
    charms = {p.parts[-4] for p in RULE_FILES} | {p.parts[-4] for p in DASHBOARDS}
    assert {"kubernetes-worker", "kubernetes-control-plane"} <= charms


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: f"{p.parts[-4]}/{p.name}")
def test_rules_read_documented_metrics_and_say_what_to_do(path):
    groups = yaml.safe_load(path.read_text())["groups"]
    documented = _documented()
    for group in groups:
        for rule in group["rules"]:
            unknown = metric_names(rule["expr"]) - documented
            assert not unknown, f"{rule['alert']} reads undocumented metrics {unknown}"
            assert rule["labels"]["severity"] in ("critical", "warning")
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]


@needs_promtool
@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: f"{p.parts[-4]}/{p.name}")
def test_prometheus_loads_the_rules(path):
    assert PROMTOOL, "promtool is missing (CI installs Debian's prometheus package)"
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: f"{p.parts[-4]}/{p.name}")
def test_dashboards_are_grafana_json_over_documented_metrics(path):
    board = json.loads(path.read_text())
    assert board["title"].startswith("gpu-k8s / ") and board["uid"]
    assert board["panels"]
    documented = _documented()
    for panel in board["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        if panel["datasource"] == LOKI:  # pod logs: their queries are test_pod_logs.py's
            assert "lokids" in {v["name"] for v in board["templating"]["list"]}
            continue
        # COS's Grafana swaps in its Prometheus for this variable
        assert panel["datasource"] == {"type": "prometheus", "uid": "${prometheusds}"}
        for target in panel["targets"]:
            unknown = metric_names(target["expr"]) - documented
            assert not unknown, f"{path.name} {panel['title']}: undocumented {unknown}"


@needs_promtool
def test_prometheus_parses_every_dashboard_query(tmp_path):
    """Each panel's query as a recording rule: promtool refuses what PromQL cannot parse."""
    rules = [
        {
            "record": f"dashboard:{path.stem.replace('-', '_')}:{panel['id']}",
            "expr": target["expr"],
        }
        for path in DASHBOARDS
        for panel in json.loads(path.read_text())["panels"]
        if panel["datasource"] != LOKI
        for target in panel["targets"]
    ]
    path = tmp_path / "dashboards.rules"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    assert PROMTOOL, "promtool is missing (CI installs Debian's prometheus package)"
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboard_uids_are_unique():
    uids = [json.loads(p.read_text())["uid"] for p in DASHBOARDS]
    assert len(uids) == len(set(uids))


@needs_promtool
def test_the_etcd_alerts_fire_when_they_should(tmp_path):
    rules = ROOT / "charms/kubernetes-control-plane/src/prometheus_alert_rules/etcd.rules"
    member = 'instance="localhost:2381",job="etcd"'
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"etcd_server_has_leader{{{member}}}", "values": "1 1 0 0 0 0"},
                    {
                        "series": f"etcd_server_leader_changes_seen_total{{{member}}}",
                        "values": "0 1 2 3 4 5",
                    },
                    {
                        "series": f"etcd_mvcc_db_total_size_in_bytes{{{member}}}",
                        "values": "1000x20",
                    },
                    {
                        "series": f"etcd_server_quota_backend_bytes{{{member}}}",
                        "values": "2000x20",
                    },
                ],
                "alert_rule_test": [
                    {"eval_time": "2m", "alertname": "EtcdNoLeader", "exp_alerts": []},
                    {
                        "eval_time": "4m",
                        "alertname": "EtcdNoLeader",
                        "exp_alerts": [
                            {
                                "exp_labels": {**_labels(member), "severity": "critical"},
                                "exp_annotations": _annotations(rules, "EtcdNoLeader"),
                            }
                        ],
                    },
                    {
                        "eval_time": "2m",
                        "alertname": "EtcdFrequentLeaderChanges",
                        "exp_alerts": [],
                    },
                    {"eval_time": "15m", "alertname": "EtcdDatabaseNearQuota", "exp_alerts": []},
                ],
            }
        ],
    }
    path = tmp_path / "etcd_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    assert PROMTOOL, "promtool is missing (CI installs Debian's prometheus package)"
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _labels(series_labels: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', series_labels))


def _annotations(rules: Path, alert: str) -> dict[str, str]:
    """The rule's annotations with its one template filled in (this test's instance)."""
    for group in yaml.safe_load(rules.read_text())["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                return {
                    k: v.replace("{{ $labels.instance }}", "localhost:2381")
                    for k, v in rule["annotations"].items()
                }
    raise AssertionError(alert)


def _render(rules: Path, alert: str, labels: dict[str, str], value: str) -> dict[str, str]:
    """The rule's annotations as Prometheus fills them in for `labels` and `value`."""
    (rule,) = [
        r
        for g in yaml.safe_load(rules.read_text())["groups"]
        for r in g["rules"]
        if r["alert"] == alert
    ]
    out = {}
    for key, text in rule["annotations"].items():
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        # `value` as Prometheus prints it (humanizeDuration: "36m 0s")
        out[key] = text.replace("{{ $value }}", value).replace(
            "{{ $value | humanizeDuration }}", value
        )
    return out


def _promtool_test(tmp_path: Path, rules: Path, tests: list[dict]) -> None:
    path = tmp_path / "rules_test.yml"
    body = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    assert PROMTOOL, "promtool is missing (CI installs Debian's prometheus package)"
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_the_cluster_alerts_fire_when_they_should(tmp_path):
    """Series as kube-state-metrics serves them, the leader's scrape labels added."""
    rules = ROOT / "charms/kubernetes-control-plane/src/prometheus_alert_rules/cluster.rules"
    scrape = 'instance="cp-0",job="kube-state-metrics"'
    ready = 'kube_node_status_condition{%s,node="%s",condition="Ready",status="true"}'
    gpus = 'kube_node_status_capacity{%s,node="%s",resource="nvidia_com_gpu",unit="integer"}'
    jobset = 'jobset_status_restarts{%s,namespace="tensorflow",jobset="%s"}'
    created = 'kueue_workload_created_timestamp_seconds{%s,namespace="tensorflow",workload="%s",local_queue="training"}'  # noqa: E501
    condition = 'kueue_workload_condition{%s,namespace="tensorflow",workload="%s",local_queue="training",condition="%s",reason="%s"}'  # noqa: E501
    gpu_down = {**_labels(scrape), "node": "gpu-0", "condition": "Ready", "status": "true"}
    flapping = {**_labels(scrape), "namespace": "tensorflow", "jobset": "flaky"}
    waiting = {**_labels(scrape), "namespace": "tensorflow", "workload": "jobset-big-1a2b3"}
    waiting["local_queue"] = "training"
    tests = [
        {
            "interval": "1m",
            "input_series": [
                # gpu-0 goes NotReady at minute 2; cpu-0 (no GPUs) is down all along
                {"series": ready % (scrape, "gpu-0"), "values": "1 1 0x20"},
                {"series": gpus % (scrape, "gpu-0"), "values": "4x22"},
                {"series": ready % (scrape, "cpu-0"), "values": "0x22"},
                # mig-0: MIG under mig-strategy=mixed offers nvidia.com/mig-* only
                {"series": ready % (scrape, "mig-0"), "values": "1 1 0x20"},
                {
                    "series": 'kube_node_status_capacity{%s,node="mig-0",resource="nvidia_com_mig_1g_10gb",unit="integer"}'  # noqa: E501
                    % scrape,
                    "values": "7x22",
                },
                # flaky restarts twice within minutes; steady once; reused was stopped
                # after 3 restarts and trained again under its name (its count starts over)
                {"series": jobset % (scrape, "flaky"), "values": "0 0 1 1 2 2 2"},
                {"series": jobset % (scrape, "steady"), "values": "0 1 1 1 1 1 1"},
                {"series": jobset % (scrape, "reused"), "values": "3 3 0 0 0 0 0"},
                # big waits from minute 0; small was admitted at once; done finished
                {"series": created % (scrape, "jobset-big-1a2b3"), "values": "0x70"},
                {"series": created % (scrape, "jobset-small-4c5d6"), "values": "0x70"},
                {
                    "series": condition
                    % (scrape, "jobset-small-4c5d6", "QuotaReserved", "QuotaReserved"),
                    "values": "1x70",
                },
                {
                    "series": condition % (scrape, "jobset-big-1a2b3", "QuotaReserved", "Pending"),
                    "values": "0x70",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "6m", "alertname": "GpuNodeNotReady", "exp_alerts": []},
                {
                    "eval_time": "8m",
                    "alertname": "GpuNodeNotReady",
                    "exp_alerts": [
                        {
                            "exp_labels": {**down, "severity": "critical"},
                            "exp_annotations": _render(rules, "GpuNodeNotReady", down, ""),
                        }
                        for down in (gpu_down, {**gpu_down, "node": "mig-0"})
                    ],
                },
                {
                    "eval_time": "3m",
                    "alertname": "TrainingJobRestartingRepeatedly",
                    "exp_alerts": [],
                },
                {
                    "eval_time": "5m",
                    "alertname": "TrainingJobRestartingRepeatedly",
                    "exp_alerts": [
                        {
                            "exp_labels": {**flapping, "severity": "warning"},
                            "exp_annotations": _render(
                                rules, "TrainingJobRestartingRepeatedly", flapping, "2"
                            ),
                        }
                    ],
                },
                {"eval_time": "59m", "alertname": "TrainingJobQueuedTooLong", "exp_alerts": []},
                {
                    "eval_time": "61m",
                    "alertname": "TrainingJobQueuedTooLong",
                    "exp_alerts": [
                        {
                            "exp_labels": {**waiting, "severity": "warning"},
                            "exp_annotations": _render(
                                rules, "TrainingJobQueuedTooLong", waiting, "3660"
                            ),
                        }
                    ],
                },
            ],
        }
    ]
    _promtool_test(tmp_path, rules, tests)


@needs_promtool
def test_a_job_waits_from_when_it_last_lacked_quota_and_a_deactivated_one_never(tmp_path):
    """TrainingJobQueuedTooLong over a day, its series as kube-state-metrics serves them.

    Kueue v0.19.2 (pkg/workload/workload.go, pkg/controller/jobframework/reconciler.go,
    pkg/controller/core/workload_controller.go): a preempted Workload's QuotaReserved
    turns False and Requeued True, both with that moment as lastTransitionTime; a
    deactivated one has spec.active false until reactivated, when Requeued turns True
    (reason Reactivated). A condition whose labels change (reason, status) is a new series
    in kube-state-metrics: the old one ends (stale). Minute 1440 is 86400 s.
    """
    rules = ROOT / "charms/kubernetes-control-plane/src/prometheus_alert_rules/cluster.rules"
    scrape = 'instance="cp-0",job="kube-state-metrics"'
    workload = 'namespace="tensorflow",workload="%s",local_queue="training"'

    def series(name: str, wl: str, values: str, **labels: str) -> dict[str, str]:
        extra = "".join(f',{k}="{v}"' for k, v in labels.items())
        return {"series": f"{name}{{{scrape},{workload % wl}{extra}}}", "values": values}

    def created(wl: str) -> dict[str, str]:
        return series("kueue_workload_created_timestamp_seconds", wl, "0x1510")

    def cond(wl: str, values: str, condition: str, reason: str) -> dict[str, str]:
        return series("kueue_workload_condition", wl, values, condition=condition, reason=reason)

    def since(wl: str, values: str, condition: str, status: str) -> dict[str, str]:
        name = "kueue_workload_condition_last_transition_timestamp_seconds"
        return series(name, wl, values, condition=condition, status=status)

    def active(wl: str, values: str) -> dict[str, str]:
        return series("kueue_workload_spec_active", wl, values)

    def alerts(*workloads: str) -> list[dict]:
        out = []
        for wl in workloads:
            labels = {**_labels(scrape), **_labels(workload % wl)}
            out.append(
                {
                    "exp_labels": {**labels, "severity": "warning"},
                    "exp_annotations": _render(rules, "TrainingJobQueuedTooLong", labels, ""),
                }
            )
        return out

    def waited(*samples: tuple[str, float]) -> list[dict]:
        return [{"labels": f"{{{scrape},{workload % wl}}}", "value": v} for wl, v in samples]

    (expr,) = [
        r["expr"]
        for g in yaml.safe_load(rules.read_text())["groups"]
        for r in g["rules"]
        if r["alert"] == "TrainingJobQueuedTooLong"
    ]
    preempted, reactivated, inactive = "preempted-1", "reactivated-2", "inactive-3"
    pending, behind = "pending-4", "behind-5"
    tests = [
        {
            "interval": "1m",
            "input_series": [
                # ran for a day, preempted at minute 1440
                created(preempted),
                active(preempted, "1x1510"),
                cond(preempted, "1x1439 stale", "QuotaReserved", "QuotaReserved"),
                since(preempted, "0x1439 stale", "QuotaReserved", "True"),
                cond(preempted, "_x1440 0x70", "QuotaReserved", "PendingEvaluation"),
                since(preempted, "_x1440 86400x70", "QuotaReserved", "False"),
                cond(preempted, "_x1440 1x70", "Evicted", "Preempted"),
                cond(preempted, "_x1440 1x70", "Requeued", "Preempted"),
                since(preempted, "_x1440 86400x70", "Requeued", "True"),
                # ran an hour, deactivated by its owner at minute 60, reactivated at 1440
                created(reactivated),
                active(reactivated, "1x59 0x1379 1x70"),
                cond(reactivated, "1x59 stale", "QuotaReserved", "QuotaReserved"),
                since(reactivated, "0x59 stale", "QuotaReserved", "True"),
                cond(reactivated, "_x60 0x1450", "QuotaReserved", "PendingEvaluation"),
                since(reactivated, "_x60 3600x1450", "QuotaReserved", "False"),
                cond(reactivated, "_x60 0x1379 stale", "Requeued", "Deactivated"),
                since(reactivated, "_x60 3600x1379 stale", "Requeued", "False"),
                cond(reactivated, "_x1440 1x70", "Requeued", "Reactivated"),
                since(reactivated, "_x1440 86400x70", "Requeued", "True"),
                # deactivated before it was ever admitted (requeuing limit): never waits
                created(inactive),
                active(inactive, "0x1510"),
                cond(inactive, "0x1510", "QuotaReserved", "Pending"),
                since(inactive, "0x1510", "QuotaReserved", "False"),
                cond(inactive, "1x1510", "Evicted", "Deactivated"),
                # never admitted, found inadmissible 30 s after its creation
                created(pending),
                active(pending, "1x1510"),
                cond(pending, "0x1510", "QuotaReserved", "Pending"),
                since(pending, "30x1510", "QuotaReserved", "False"),
                # behind the head of a StrictFIFO queue: no conditions yet; and no
                # spec.active series, which counts as active (Kueue's default)
                created(behind),
            ],
            "alert_rule_test": [
                {"eval_time": "60m", "alertname": "TrainingJobQueuedTooLong", "exp_alerts": []},
                {
                    "eval_time": "61m",
                    "alertname": "TrainingJobQueuedTooLong",
                    "exp_alerts": alerts(pending, behind),
                },
                # preempted and reactivated have waited 30 minutes, not a day
                {
                    "eval_time": "1470m",
                    "alertname": "TrainingJobQueuedTooLong",
                    "exp_alerts": alerts(pending, behind),
                },
                {
                    "eval_time": "1501m",
                    "alertname": "TrainingJobQueuedTooLong",
                    "exp_alerts": alerts(preempted, reactivated, pending, behind),
                },
            ],
            # the alert's value: the seconds it has waited since it last lacked quota
            "promql_expr_test": [
                {
                    "expr": expr,
                    "eval_time": "61m",
                    "exp_samples": waited((pending, 3630), (behind, 3660)),
                },
                {
                    "expr": expr,
                    "eval_time": "1501m",
                    "exp_samples": waited(
                        (preempted, 3660), (reactivated, 3660), (pending, 90030), (behind, 90060)
                    ),
                },
            ],
        }
    ]
    _promtool_test(tmp_path, rules, tests)


@needs_promtool
def test_a_target_that_stops_answering_is_an_alert_after_15_minutes(tmp_path):
    """The rule cos_agent adds for every charm (`up` is Prometheus' own, per target)."""
    from charms.gpu_k8s.v0.cos_agent import TARGETS_RULES

    rules = tmp_path / "targets.rules"
    rules.write_text(yaml.safe_dump(TARGETS_RULES))
    target = 'instance="gpu-0",job="kubernetes-worker-gpu_dcgm-exporter",juju_unit="w/0"'
    labels = {**_labels(target), "severity": "warning"}
    job = "kubernetes-worker-gpu_dcgm-exporter"
    fired = {
        "exp_labels": labels,
        "exp_annotations": {
            "summary": f"{job} on gpu-0 has not answered for 15 minutes",
            "description": TARGETS_RULES["groups"][0]["rules"][0]["annotations"]["description"]
            .replace("{{ $labels.juju_unit }}", "w/0")
            .replace("{{ $labels.job }}", job),
        },
    }
    tests = [
        {
            "interval": "1m",
            # down from minute 2 (a MIG change pauses the exporter for a while)
            "input_series": [{"series": f"up{{{target}}}", "values": "1 1 0x30"}],
            "alert_rule_test": [
                {"eval_time": "12m", "alertname": "ScrapeTargetDown", "exp_alerts": []},
                {"eval_time": "18m", "alertname": "ScrapeTargetDown", "exp_alerts": [fired]},
            ],
        }
    ]
    _promtool_test(tmp_path, rules, tests)


@needs_promtool
def test_an_application_none_of_whose_targets_is_scraped_is_an_alert(tmp_path):
    """HostMetricsMissing, with the Juju topology COS's Prometheus adds to its expression.

    prometheus_k8s v1 prometheus_remote_write _inject_alert_expr_labels gives each rule
    matchers for the juju_model, juju_model_uuid and juju_application of its labels
    (cosl.AlertRules put them there: test_cos_agent_lib); absent() returns the labels of
    those equality matchers.
    """
    from charms.gpu_k8s.v0.cos_agent import TARGETS_RULES

    topology = {"juju_model": "gpu", "juju_model_uuid": "9b1e3c5a", "juju_application": "efs"}
    matchers = ",".join(f'{k}="{v}"' for k, v in topology.items())
    groups = copy.deepcopy(TARGETS_RULES)
    (rule,) = [r for r in groups["groups"][0]["rules"] if r["alert"] == "HostMetricsMissing"]
    assert rule["expr"] == "absent(up)"
    rule["expr"] = f"absent(up{{{matchers}}})"
    rules = tmp_path / "targets.rules"
    rules.write_text(yaml.safe_dump(groups))
    unit = f'{matchers},juju_unit="efs/0",instance="m-1"'
    other = 'juju_model="gpu",juju_model_uuid="9b1e3c5a",juju_application="tensorflow"'
    tests = [
        {
            "interval": "1m",
            "input_series": [
                # efs's two jobs are scraped until minute 10, then no more (its relation
                # data lost); tensorflow's all along
                {"series": f'up{{{unit},job="efs_unit-state"}}', "values": "1x10"},
                {"series": f'up{{{unit},job="efs_exporter"}}', "values": "0x10"},
                {"series": f'up{{{other},job="tensorflow_unit-state"}}', "values": "1x60"},
            ],
            # a series is seen for 5 minutes after its last sample (the lookback delta):
            # absent from minute 16, pending 5 minutes
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "HostMetricsMissing", "exp_alerts": []},
                *_quiet_then_fires(
                    rules,
                    "HostMetricsMissing",
                    "10m",
                    "22m",
                    {**topology, "severity": "critical"},
                    topology,
                    "1",
                ),
            ],
        }
    ]
    _promtool_test(tmp_path, rules, tests)


def _quiet_then_fires(
    rules: Path, alert: str, quiet_at: str, fires_at: str, labels: dict, shown: dict, value=""
) -> list[dict]:
    """Two promtool cases: `alert` silent at `quiet_at`, then firing once at `fires_at`.

    It fires with `labels`, its annotations filled in with `shown` and `value`.
    """
    fired = {"exp_labels": labels, "exp_annotations": _render(rules, alert, shown, value)}
    return [
        {"eval_time": quiet_at, "alertname": alert, "exp_alerts": []},
        {"eval_time": fires_at, "alertname": alert, "exp_alerts": [fired]},
    ]


@needs_promtool
def test_a_unit_blocked_or_silent_is_an_alert(tmp_path):
    """The rules cos_agent adds with each unit's own state (unit_state.RULES)."""
    from charms.gpu_k8s.v0.unit_state import RULES

    rules = tmp_path / "unit-state.rules"
    rules.write_text(yaml.safe_dump(RULES))
    unit = 'instance="ip-10-0-1-17",juju_application="efs-storage",juju_unit="efs-storage/0"'
    scrape = f'{unit},job="efs-storage_unit-state"'
    labels = {**_labels(scrape), "severity": "warning"}
    tests = [
        {
            "interval": "1m",
            "input_series": [
                # blocked from minute 2; a hook ended every 5 minutes until minute 20
                {
                    "series": f'gpu_k8s_unit_status{{{scrape},status="blocked"}}',
                    "values": "0 0 1x40",
                },
                {
                    "series": f'gpu_k8s_unit_status{{{scrape},status="active"}}',
                    "values": "1 1 0x40",
                },
                {
                    "series": f"gpu_k8s_unit_state_updated_timestamp_seconds{{{scrape}}}",
                    "values": " ".join(str(60 * 5 * (m // 5)) for m in range(21)) + " 1200x80",
                },
            ],
            "alert_rule_test": [
                *_quiet_then_fires(
                    rules,
                    "GpuK8sUnitBlocked",
                    "16m",
                    "18m",
                    {**labels, "status": "blocked"},
                    _labels(unit),
                ),
                *_quiet_then_fires(
                    rules, "GpuK8sUnitStateStale", "79m", "81m", labels, _labels(unit)
                ),
            ],
        }
    ]
    _promtool_test(tmp_path, rules, tests)


@needs_promtool
def test_a_missing_node_or_a_stalled_upgrade_is_an_alert(tmp_path):
    """From the control-plane leader's unit-state job (charm.py _gauges)."""
    rules = ROOT / "charms/kubernetes-control-plane/src/prometheus_alert_rules/charm-state.rules"
    unit = 'juju_application="kubernetes-control-plane",juju_unit="kubernetes-control-plane/0"'
    scrape = f'{unit},instance="cp-0",job="kubernetes-control-plane_unit-state"'
    labels = {**_labels(scrape), "severity": "warning"}
    tests = [
        {
            "interval": "1m",
            "input_series": [
                # a node goes missing at minute 5; the upgrade never finishes one node
                {"series": f"gpu_k8s_cluster_nodes_missing{{{scrape}}}", "values": "0x4 1x60"},
                {"series": f"gpu_k8s_cluster_nodes_behind{{{scrape}}}", "values": "2x30 1x100"},
            ],
            "alert_rule_test": [
                *_quiet_then_fires(
                    rules, "GpuK8sNodeMissing", "33m", "36m", labels, _labels(unit), "1"
                ),
                *_quiet_then_fires(
                    rules, "GpuK8sUpgradeStalled", "119m", "121m", labels, _labels(unit), "1"
                ),
            ],
        }
    ]
    _promtool_test(tmp_path, rules, tests)


@needs_promtool
def test_a_certificate_near_its_expiry_is_an_alert_and_a_renewed_one_is_not(tmp_path):
    """From the control-plane leader's unit-state job (renewal.gauges: seconds since epoch).

    Unit 1's certificate expires on day 31 and is never renewed: a warning once under 30
    days for 6 h. Unit 0's renews on day 1, 3 hours in: no alert. Unit 0's CA expires on
    day 366: a warning once under a year for 1 h. Unit 2's certificate expires on day 8:
    critical once under 7 days.
    """
    rules = ROOT / "charms/kubernetes-control-plane/src/prometheus_alert_rules/charm-state.rules"
    leader = 'juju_application="kubernetes-control-plane",juju_unit="kubernetes-control-plane/0"'
    scrape = f'{leader},instance="cp-0",job="kubernetes-control-plane_unit-state"'
    day = 86400
    stale = f'{scrape},unit="kubernetes-control-plane/1",certificate="admin.conf"'
    renewed = f'{scrape},unit="kubernetes-control-plane/0",certificate="admin.conf"'
    ca = f'{scrape},unit="kubernetes-control-plane/0",authority="ca"'
    late = f'{scrape},unit="kubernetes-control-plane/2",certificate="apiserver"'
    name = "gpu_k8s_certificate_expiry_timestamp_seconds"
    tests = [
        {
            "interval": "5m",  # the scrape keeps each series fresh (the 5 m lookback)
            "input_series": [
                {"series": f"{name}{{{stale}}}", "values": f"{31 * day}x400"},
                {
                    "series": f"{name}{{{renewed}}}",
                    "values": f"{31 * day}x324 {396 * day}x100",  # renewed at hour 27
                },
                {
                    "series": f"gpu_k8s_certificate_authority_expiry_timestamp_seconds{{{ca}}}",
                    "values": f"{366 * day}x400",
                },
            ],
            "alert_rule_test": [
                *_quiet_then_fires(
                    rules,
                    "GpuK8sCertificateExpiring",
                    "29h",  # unit 1 under 30 days for 5 h; unit 0 renewed at 27 h
                    "31h",
                    {**_labels(stale), "severity": "warning"},
                    _labels(stale),
                    "29d 17h 0m 0s",
                ),
                *_quiet_then_fires(
                    rules,
                    "GpuK8sCertificateAuthorityExpiring",
                    "24h",
                    "26h",
                    {**_labels(ca), "severity": "warning"},
                    _labels(ca),
                    "364d 22h 0m 0s",
                ),
            ],
        },
        {
            "interval": "5m",
            "input_series": [{"series": f"{name}{{{late}}}", "values": f"{8 * day}x400"}],
            "alert_rule_test": _quiet_then_fires(
                rules,
                "GpuK8sCertificateExpiresSoon",
                "23h",
                "25h",
                {**_labels(late), "severity": "critical"},
                _labels(late),
                "6d 23h 0m 0s",
            ),
        },
    ]
    _promtool_test(tmp_path, rules, tests)


@needs_promtool
def test_the_workload_alerts_fire_when_they_should(tmp_path):
    """Series as kube-state-metrics v2.20.0 serves them (docs/metrics/workload/), scraped."""
    rules = ROOT / "charms/kubernetes-control-plane/src/prometheus_alert_rules/workloads.rules"
    scrape = 'instance="cp-0",job="kubernetes-control-plane_kube-state-metrics"'
    waiting = 'kube_pod_container_status_waiting_reason{%s,namespace="gpu-k8s-gpu",pod="%s",container="%s",reason="%s",uid="u"}'  # noqa: E501
    ds = 'kube_daemonset_status_%s{%s,namespace="gpu-k8s-gpu",daemonset="%s"}'
    failed = 'kube_job_failed{%s,namespace="team",job_name="%s",condition="%s"}'
    owner = 'kube_job_owner{%s,namespace="team",job_name="%s",owner_kind="%s",owner_name="x",owner_is_controller="true"}'  # noqa: E501
    looping = {
        **_labels(scrape),
        "namespace": "gpu-k8s-gpu",
        "pod": "dcgm-exporter-abcde",
        "container": "exporter",
        "reason": "CrashLoopBackOff",
        "uid": "u",
    }
    plugin = {**_labels(scrape), "namespace": "gpu-k8s-gpu", "daemonset": "device-plugin"}
    import_job = {**_labels(scrape), "namespace": "team", "job_name": "import-mnist"}
    import_job["condition"] = "true"

    def daemonset(name: str, desired: str, current: str, available: str) -> list[dict]:
        return [
            {"series": ds % ("desired_number_scheduled", scrape, name), "values": desired},
            {"series": ds % ("current_number_scheduled", scrape, name), "values": current},
            {"series": ds % ("updated_number_scheduled", scrape, name), "values": current},
            {"series": ds % ("number_available", scrape, name), "values": available},
            {"series": ds % ("number_misscheduled", scrape, name), "values": "0x40"},
        ]

    tests = [
        {
            "interval": "1m",
            "input_series": [
                # the exporter crash-loops from minute 1; the plugin's pod waits for its
                # image once (ContainerCreating is no crash loop)
                {
                    "series": waiting
                    % (scrape, "dcgm-exporter-abcde", "exporter", "CrashLoopBackOff"),
                    "values": "_ 1x40",
                },
                {
                    "series": waiting
                    % (scrape, "device-plugin-fghij", "plugin", "ContainerCreating"),
                    "values": "1 1 1 _x38",
                },
                # 3 GPU nodes want the device plugin, one pod never gets scheduled; the
                # exporter's DaemonSet rolls out in two minutes
                *daemonset("device-plugin", "3x40", "2x40", "2x40"),
                *daemonset("dcgm-exporter", "3x40", "1 2 3x38", "1 2 3x38"),
                # an import failed; a training gang restart failed a JobSet's Job
                {"series": failed % (scrape, "import-mnist", "true"), "values": "1x40"},
                {"series": failed % (scrape, "mnist-worker-0", "true"), "values": "1x40"},
                {"series": owner % (scrape, "mnist-worker-0", "JobSet"), "values": "1x40"},
            ],
            "alert_rule_test": [
                {"eval_time": "14m", "alertname": "KubePodCrashLooping", "exp_alerts": []},
                {
                    "eval_time": "17m",
                    "alertname": "KubePodCrashLooping",
                    "exp_alerts": [
                        {
                            "exp_labels": {**looping, "severity": "warning"},
                            "exp_annotations": _render(rules, "KubePodCrashLooping", looping, "1"),
                        }
                    ],
                },
                {"eval_time": "9m", "alertname": "KubeDaemonSetNotScheduled", "exp_alerts": []},
                {
                    "eval_time": "11m",
                    "alertname": "KubeDaemonSetNotScheduled",
                    "exp_alerts": [
                        {
                            "exp_labels": {**plugin, "severity": "warning"},
                            "exp_annotations": _render(
                                rules, "KubeDaemonSetNotScheduled", plugin, "1"
                            ),
                        }
                    ],
                },
                {"eval_time": "14m", "alertname": "KubeDaemonSetRolloutStuck", "exp_alerts": []},
                {
                    "eval_time": "25m",
                    "alertname": "KubeDaemonSetRolloutStuck",
                    "exp_alerts": [
                        {
                            "exp_labels": {**plugin, "severity": "warning"},
                            "exp_annotations": _render(
                                rules, "KubeDaemonSetRolloutStuck", plugin, "1"
                            ),
                        }
                    ],
                },
                {"eval_time": "14m", "alertname": "KubeJobFailed", "exp_alerts": []},
                {
                    "eval_time": "16m",
                    "alertname": "KubeJobFailed",
                    "exp_alerts": [
                        {
                            "exp_labels": {**import_job, "severity": "warning"},
                            "exp_annotations": _render(rules, "KubeJobFailed", import_job, "1"),
                        }
                    ],
                },
            ],
        }
    ]
    _promtool_test(tmp_path, rules, tests)


TRAINING_RULES = ROOT / "charms/tensorflow/src/prometheus_alert_rules/training.rules"
TRAINING_TARGET = 'job="tensorflow_training",namespace="team",training_job="%s",pod="%s-worker-0-%d-x",role="worker",node="gpu-0",instance="%s-worker-0-%d-x"'  # noqa: E501


def _training_gauge(name: str, job: str, i: int, values: str) -> dict[str, str]:
    """A launcher's gauge on pod `i` of `job`, with the tensorflow leader's target labels."""
    labels = TRAINING_TARGET % (job, job, i, job, i)
    return {"series": f"gpu_k8s_training_{name}{{{labels}}}", "values": values}


@needs_promtool
def test_the_training_alerts_fire_when_they_should(tmp_path):
    """Series as the launchers serve them, with the tensorflow leader's target labels."""
    rules = TRAINING_RULES
    gauge = _training_gauge
    # minute m is m*60 s. `stuck` stepped until minute 10, then hangs in a collective;
    # `busy` steps all along and saved its last checkpoint at minute 0; `done` reached
    # its 500 steps at minute 10 and exports its model; `fresh` saved at minute 100.
    series = [
        gauge("last_step_timestamp_seconds", "stuck", 0, "0+60x10 600x200"),
        gauge("step", "stuck", 0, "0+10x10 100x200"),
        gauge("steps_target", "stuck", 0, "500x210"),
        gauge("last_checkpoint_timestamp_seconds", "stuck", 0, "0x210"),
        gauge("last_checkpoint_timestamp_seconds", "stuck", 1, "0x210"),  # its other pod
        gauge("last_step_timestamp_seconds", "busy", 0, "0+60x210"),
        gauge("step", "busy", 0, "0+10x210"),
        gauge("steps_target", "busy", 0, "100000x210"),
        gauge("last_checkpoint_timestamp_seconds", "busy", 0, "0x210"),
        gauge("last_step_timestamp_seconds", "done", 0, "0+60x10 600x200"),
        gauge("step", "done", 0, "0+50x10 500x200"),
        gauge("steps_target", "done", 0, "500x210"),
        gauge("last_step_timestamp_seconds", "fresh", 0, "0+60x210"),
        gauge("last_checkpoint_timestamp_seconds", "fresh", 0, "0x100 6000x110"),
    ]

    def fired(alert: str, job: str, value: str) -> dict:
        labels = {"namespace": "team", "training_job": job}
        return {
            "exp_labels": {**labels, "severity": "warning"},
            "exp_annotations": _render(rules, alert, labels, value),
        }

    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                # 30 minutes without a step from minute 10, then 5 minutes pending
                {"eval_time": "44m", "alertname": "TrainingJobNoProgress", "exp_alerts": []},
                {
                    "eval_time": "46m",
                    "alertname": "TrainingJobNoProgress",
                    "exp_alerts": [fired("TrainingJobNoProgress", "stuck", "36m 0s")],
                },
                # 2 hours without a checkpoint while stepping: busy, not stuck (stalled),
                # not fresh (saved at minute 100)
                {"eval_time": "124m", "alertname": "TrainingCheckpointStale", "exp_alerts": []},
                {
                    "eval_time": "126m",
                    "alertname": "TrainingCheckpointStale",
                    "exp_alerts": [fired("TrainingCheckpointStale", "busy", "2h 6m 0s")],
                },
            ],
        }
    ]
    _promtool_test(tmp_path, rules, tests)


@needs_promtool
def test_a_program_that_prints_no_progress_still_gets_the_checkpoint_alert(tmp_path):
    """Without `GPU_K8S_PROGRESS` lines a job has only the checkpoint alert (issue 31 item 5).

    Its launchers serve the checkpoint time only (actions/tf_launcher.py, "Metrics"), so
    TrainingCheckpointStale alone can say its work is at risk; TrainingJobNoProgress
    cannot fire without a step.

    Minute m is m*60 s. `silent` saved at minute 0 and runs on (two pods); `ended` saved
    at minute 0 and its pods were gone at minute 100 (finished, stopped, deleted: their
    series go stale); `resumed` ran again from minute 100 from a checkpoint of minute 0
    (an earlier run's, in the same directory) and saved none since. With progress lines:
    `talks` steps and saved at minute 0; `unsaved` steps and has saved nothing yet (no
    checkpoint series); `again` resumed as `resumed` did.
    """
    rules = TRAINING_RULES
    gauge = _training_gauge
    series = [
        gauge("last_checkpoint_timestamp_seconds", "silent", 0, "0x240"),
        gauge("last_checkpoint_timestamp_seconds", "silent", 1, "0x240"),
        gauge("last_checkpoint_timestamp_seconds", "ended", 0, "0x100"),
        gauge("last_checkpoint_timestamp_seconds", "resumed", 0, "_x100 0x140"),
        gauge("last_step_timestamp_seconds", "talks", 0, "0+60x240"),
        gauge("step", "talks", 0, "0+10x240"),
        gauge("steps_target", "talks", 0, "100000x240"),
        gauge("last_checkpoint_timestamp_seconds", "talks", 0, "0x240"),
        gauge("last_step_timestamp_seconds", "unsaved", 0, "0+60x240"),
        gauge("step", "unsaved", 0, "0+10x240"),
        gauge("steps_target", "unsaved", 0, "100000x240"),
        gauge("last_step_timestamp_seconds", "again", 0, "_x100 6000+60x140"),
        gauge("step", "again", 0, "_x100 0+10x140"),
        gauge("steps_target", "again", 0, "_x100 100000x140"),
        gauge("last_checkpoint_timestamp_seconds", "again", 0, "_x100 0x140"),
    ]
    stale = "TrainingCheckpointStale"

    def fired(minute: int, *jobs: str) -> list[dict]:
        """The alert of each job whose newest checkpoint is of minute 0, at `minute`."""
        age = f"{minute // 60}h {minute % 60}m 0s"  # humanizeDuration
        return [
            {
                "exp_labels": {"namespace": "team", "training_job": job, "severity": "warning"},
                "exp_annotations": _render(
                    rules, stale, {"namespace": "team", "training_job": job}, age
                ),
            }
            for job in jobs
        ]

    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": "124m", "alertname": stale, "exp_alerts": []},
                # with progress lines or without: 2 hours, then 5 minutes pending
                {
                    "eval_time": "126m",
                    "alertname": stale,
                    "exp_alerts": fired(126, "silent", "talks"),
                },
                # no step series: never a progress alert
                {"eval_time": "200m", "alertname": "TrainingJobNoProgress", "exp_alerts": []},
                # the resumed runs: 2 hours of their own without a save, then 5 minutes
                {
                    "eval_time": "224m",
                    "alertname": stale,
                    "exp_alerts": fired(224, "silent", "talks"),
                },
                {
                    "eval_time": "226m",
                    "alertname": stale,
                    "exp_alerts": fired(226, "silent", "talks", "resumed", "again"),
                },
            ],
        }
    ]
    _promtool_test(tmp_path, rules, tests)


@needs_promtool
def test_the_training_dashboard_filters_list_jobs_that_print_no_progress(tmp_path):
    """Team, Job and Node list every scraped training pod, progress lines or not (review31).

    A program that prints no `GPU_K8S_PROGRESS` line has no `gpu_k8s_training_step`, but
    every target has `up`, with the target's labels. The scrape runs in the COS overlay's
    collector (opentelemetry-collector-contrib v0.130.0, the snap's build, job_metrics.py):
    its prometheus receiver embeds Prometheus' scrape loop, whose report samples (`up`
    among them) get every target label (prometheus/prometheus scrape/scrape.go
    mutateReportSampleLabels, alike in every 2.x and 3.x version read). The receiver keeps
    them (receiver/prometheusreceiver/internal/transaction.go Append: `up` is appended as
    any sample, its job and instance making the resource; metricfamily.go
    populateAttributes: every other label becomes an attribute; metadata.go
    internalMetricMetadata: `up` is a gauge).
    Each variable's selector, the variables before it set to one value or to All
    (allValue), is evaluated against a quiet job's `up`, a job with progress, another
    team's job and a target of another charm.
    """
    board = json.loads(
        (ROOT / "charms/tensorflow/src/grafana_dashboards/training-progress.json").read_text()
    )
    queries = {v["name"]: v["query"] for v in board["templating"]["list"] if v["type"] == "query"}
    quiet, loud = (TRAINING_TARGET % (j, j, 0, j, 0) for j in ("quiet", "loud"))
    elsewhere = (
        (TRAINING_TARGET % ("far", "far", 0, "far", 0))
        .replace('namespace="team"', 'namespace="other"')
        .replace('node="gpu-0"', 'node="gpu-1"')
    )
    series = [
        {"series": f"up{{{quiet}}}", "values": "1x5"},
        {"series": f"up{{{loud}}}", "values": "1x5"},
        {"series": f"gpu_k8s_training_step{{{loud}}}", "values": "0+10x5"},
        {"series": f"up{{{elsewhere}}}", "values": "1x5"},
        {"series": 'up{job="w_node-exporter",instance="gpu-2",namespace="x"}', "values": "1x5"},
    ]
    cases = [  # (variable, what the variables before it are set to, the values it lists)
        ("namespace", {}, ["other", "team"]),
        ("job", {"namespace": ".*"}, ["far", "loud", "quiet"]),
        ("job", {"namespace": "team"}, ["loud", "quiet"]),
        ("node", {"namespace": ".*", "job": ".*"}, ["gpu-0", "gpu-1"]),
        ("node", {"namespace": "team", "job": "quiet"}, ["gpu-0"]),
        ("node", {"namespace": "team", "job": "far"}, []),
    ]
    tests = []
    for name, chosen, listed in cases:
        selector, label = re.fullmatch(r"label_values\((.+), (\w+)\)", queries[name]).groups()
        for variable, value in chosen.items():
            selector = selector.replace(f"${variable}", value)
        assert "$" not in selector, selector
        tests.append(
            {
                "expr": f"group by ({label}) ({selector})",
                "eval_time": "3m",
                "exp_samples": [{"labels": f'{{{label}="{v}"}}', "value": 1} for v in listed],
            }
        )
    rules = tmp_path / "none.rules"
    rules.write_text(yaml.safe_dump({"groups": []}))
    _promtool_test(
        tmp_path, rules, [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]
    )


def _read() -> set[str]:
    """Every metric an alert rule or a dashboard panel reads."""
    read: set[str] = set()
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            read |= {n for r in group["rules"] for n in metric_names(r["expr"])}
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            if panel["datasource"] != LOKI:
                read |= {n for t in panel.get("targets", []) for n in metric_names(t["expr"])}
    # the unit-state rules every charm ships from the lib (unit_state.RULES)
    lib = (ROOT / "lib/charms/gpu_k8s/v0/unit_state.py").read_text()
    for expr in re.findall(r'"expr":\s*(\'[^\']*\'|"[^"]*")', lib):
        read |= metric_names(ast.literal_eval(expr)[1:-1])
    return read


def test_every_metric_the_charms_and_launchers_make_feeds_a_rule_or_a_panel():
    """A gauge nobody reads is noise on COS's Prometheus (review F-17): each one is used."""
    assert not (_charm_gauges() | _launcher_metrics()) - _read()


def test_the_node_jobs_store_only_the_families_the_rules_and_dashboards_read():
    """The series of cAdvisor and kube-apiserver, kept as Prometheus keeps them (review F-12).

    A relabel rule's regex is anchored at both ends and `keep` drops every sample whose
    `__name__` it does not match (Prometheus docs, configuration, <relabel_config>).
    """
    from charms.gpu_k8s.v0.cos_agent import node_jobs

    documented = _documented_lines(FIXTURES / "kubernetes" / "documented-metrics.txt")
    exporters = {"kubelet-cadvisor": "container_", "kube-apiserver": "apiserver_"}
    jobs = {j["job_name"]: j for j in node_jobs("cp-0", api_server=True)}
    assert set(jobs) == set(exporters)  # the kubelet's own /metrics: nothing reads it
    read = _read()
    for name, prefix in exporters.items():
        ((rule,),) = [jobs[name]["metric_relabel_configs"]]
        assert (rule["source_labels"], rule["action"]) == (["__name__"], "keep")
        family = {m for m in documented if m.startswith(prefix)}
        stored = {m for m in family if re.fullmatch(rule["regex"], m)}
        assert stored == family & read, name
        assert stored, f"{name} is scraped for nothing"
    assert [j["job_name"] for j in node_jobs("w-0")] == ["kubelet-cadvisor"]


def test_kube_state_metrics_serves_only_the_families_the_rules_and_dashboards_read():
    """Its --metric-allowlist, applied as kube-state-metrics v2.20.0 applies it.

    pkg/allowdenylist/allowdenylist.go IsIncluded: a family is served when any entry, an
    ECMAScript regex, matches its name anywhere (re.search; the entries use no syntax
    in which the two dialects differ); the Custom Resource State families are filtered
    by their full names too.
    """
    from charm_modules import load

    ksm = load("kubernetes-control-plane", "kube_state_metrics")
    (container,) = ksm.manifests("cp-0")[-1]["spec"]["template"]["spec"]["containers"]
    (flag,) = [a for a in container["args"] if a.startswith("--metric-allowlist=")]
    entries = flag.removeprefix("--metric-allowlist=").split(",")
    documented = _documented_lines(FIXTURES / "kube-state-metrics" / "documented-metrics.txt")
    configured = _custom_resource_metrics()
    served = {n for n in documented | configured if any(re.search(e, n) for e in entries)}
    assert served == (documented | configured) & _read()
    # anchored: unanchored, a name inside another's would serve that one too (an entry
    # kube_pod_container_status_waiting would let in ..._waiting_reason)
    assert all(e.startswith("^") and e.endswith("$") for e in entries)
    # each Custom Resource State metric it is configured with is one of them
    assert configured <= served
    # a crash loop is served, the other ~40 pod families are not (one name a prefix of
    # another: kube_pod_container_status_waiting is left out)
    assert "kube_pod_container_status_waiting_reason" in served
    assert not {"kube_pod_container_status_waiting", "kube_pod_info", "kube_pod_labels"} & served


@needs_promtool
@pytest.mark.parametrize(
    "charm,rules,alert,series,fires_at,value",
    [
        (
            # gpu-1 lost a GPU from minute 0; gpu-0 waits 20 minutes for its driver's reboot
            "kubernetes-worker",
            "gpu.rules",
            "GpuK8sNodeGpusUnusable",
            {
                "gpu_k8s_node_gpus{%s}": ("gpu-0", "4x60", "gpu-1", "4x60"),
                "gpu_k8s_node_gpus_usable{%s}": ("gpu-0", "0x20 4x40", "gpu-1", "3x60"),
            },
            "31m",
            "3",
        ),
        (
            # one zone unserved from minute 0 on efs-0; efs-1 had one for 10 minutes only
            "efs-storage",
            "efs.rules",
            "GpuK8sEfsZonesUnserved",
            {"gpu_k8s_efs_zones_unserved{%s}": ("efs-1", "1x10 0x50", "efs-0", "1x60")},
            "16m",
            "1",
        ),
    ],
)
def test_the_charm_state_alerts_fire_when_they_should(
    tmp_path, charm, rules, alert, series, fires_at, value
):
    """The charms' own gauges (unit_state), scraped from each unit's unit-state job.

    Only the last unit of each pair is in trouble for long: it alone fires.
    """
    path = ROOT / "charms" / charm / "src" / "prometheus_alert_rules" / rules
    labels = 'job="x_unit-state",instance="m",juju_unit="%s",file_system_id="fs-1"'
    inputs = [
        {"series": name % (labels % unit), "values": values}
        for name, pairs in series.items()
        for unit, values in zip(pairs[::2], pairs[1::2], strict=True)
    ]
    firing = _labels(labels % list(series.values())[0][2])  # the pair's second unit
    tests = [
        {
            "interval": "1m",
            "input_series": inputs,
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": alert, "exp_alerts": []},
                {
                    "eval_time": fires_at,
                    "alertname": alert,
                    "exp_alerts": [
                        {
                            "exp_labels": {**firing, "severity": "warning"},
                            "exp_annotations": _render(path, alert, firing, value),
                        }
                    ],
                },
            ],
        }
    ]
    _promtool_test(tmp_path, path, tests)


@needs_promtool
def test_the_cluster_dashboard_counts_gpu_nodes_as_the_alert_does(tmp_path):
    """A node under mig-strategy=mixed offers nvidia.com/mig-* only (review F-10).

    GpuNodeNotReady counts it as a GPU node; so do the panels, and the devices panel
    shows each resource it offers.
    """
    board = json.loads(
        (ROOT / "charms/kubernetes-control-plane/src/grafana_dashboards/cluster.json").read_text()
    )
    panels = {p["title"]: p["targets"][0]["expr"] for p in board["panels"]}
    rules = ROOT / "charms/kubernetes-control-plane/src/prometheus_alert_rules/cluster.rules"
    (alert,) = [
        r["expr"]
        for g in yaml.safe_load(rules.read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") == "GpuNodeNotReady"
    ]
    gpu_nodes = re.search(r"kube_node_status_capacity\{[^}]*\}", alert).group(0)
    assert gpu_nodes in panels["GPU nodes Ready"]
    scrape = 'instance="cp-0",job="kubernetes-control-plane_kube-state-metrics"'
    ready = 'kube_node_status_condition{%s,node="%s",condition="Ready",status="true"}'
    resource = 'kube_node_status_%s{%s,node="%s",resource="%s",unit="integer"}'
    series = [
        {"series": ready % (scrape, "gpu-0"), "values": "1x5"},
        {"series": ready % (scrape, "mig-0"), "values": "1x5"},
        {"series": ready % (scrape, "cpu-0"), "values": "1x5"},
        {"series": ready % (scrape, "gpu-1"), "values": "0x5"},  # NotReady
    ]
    for kind in ("capacity", "allocatable"):
        for node, name, n in (
            ("gpu-0", "nvidia_com_gpu", "4"),
            ("gpu-1", "nvidia_com_gpu", "4"),
            ("mig-0", "nvidia_com_mig_1g_10gb", "4"),
            ("mig-0", "nvidia_com_mig_3g_40gb", "1"),
            ("cpu-0", "cpu", "8"),
        ):
            series.append({"series": resource % (kind, scrape, node, name), "values": f"{n}x5"})
    offered = [
        {"labels": resource % ("allocatable", scrape, node, name), "value": n}
        for node, name, n in (
            ("gpu-0", "nvidia_com_gpu", 4),
            ("gpu-1", "nvidia_com_gpu", 4),
            ("mig-0", "nvidia_com_mig_1g_10gb", 4),
            ("mig-0", "nvidia_com_mig_3g_40gb", 1),
        )
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {
                    "expr": panels["GPU nodes Ready"],
                    "eval_time": "3m",
                    "exp_samples": [{"labels": "{}", "value": 2}],
                },
                {
                    "expr": panels["GPU devices each node offers"],
                    "eval_time": "3m",
                    "exp_samples": offered,
                },
            ],
        }
    ]
    _promtool_test(tmp_path, rules, tests)


def test_the_gpu_nodes_dashboard_filters_every_query_by_node():
    """8 GPUs on each of N nodes on one panel are unreadable (review F-14): a Node filter.

    Every target on a GPU node is scraped with its node's name as `instance`
    (cos_agent.scrape_job): DCGM's, the watcher's and the unit's own gauges alike.
    """
    board = json.loads(
        (ROOT / "charms/kubernetes-worker/src/grafana_dashboards/gpu-nodes.json").read_text()
    )
    (node,) = [v for v in board["templating"]["list"] if v["name"] == "node"]
    assert node["query"] == "label_values(DCGM_FI_DEV_GPU_UTIL, instance)"
    assert (node["multi"], node["includeAll"], node["allValue"]) == (True, True, ".*")
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name in metric_names(expr):
                selectors = re.findall(rf"\b{name}(\{{[^}}]*\}})?", expr)
                assert all('instance=~"$node"' in s for s in selectors), (panel["title"], expr)
