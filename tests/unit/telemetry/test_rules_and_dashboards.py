"""Every charm's alert rules and Grafana dashboards: valid, and about metrics that exist.

A query can name a metric nobody exports and still be valid PromQL, so each metric name
in a rule or a dashboard must be one the exporters document: DCGM's fields as NVIDIA's
dcgm-exporter lists them, etcd's as etcd defines them (tests/fixtures/*/, each with its
source). promtool (Debian's `prometheus`) checks the rules as Prometheus loads them and
runs the etcd rules' unit tests here; the GPU rules' are in tests/unit/kubernetes_worker.
"""

from __future__ import annotations

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
    "or", "unless", "on", "ignoring", "bool", "offset",
}  # fmt: skip


def _documented() -> set[str]:
    names = set()
    for path in (
        FIXTURES / "dcgm" / "documented-fields.txt",
        FIXTURES / "etcd" / "documented-metrics.txt",
    ):
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                names.add(line.strip())
    # a histogram exposes its series under these suffixes
    return names | {f"{n}{s}" for n in names for s in ("_bucket", "_sum", "_count")}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", bare)
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", bare)
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
        # COS's Grafana swaps in its Prometheus for this variable
        assert panel["datasource"] == {"type": "prometheus", "uid": "${prometheusds}"}
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        for target in panel["targets"]:
            unknown = metric_names(target["expr"]) - documented
            assert not unknown, f"{path.name} {panel['title']}: undocumented {unknown}"


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
