"""The cos_agent provider: the unit databag the COS agent reads, as the interface documents it.

The schema below is the interface's (canonical/charm-relation-interfaces
interfaces/cos_agent/v0/schema.py, NestedDataModel under the unit key `config`); the
requirer (opentelemetry-collector / grafana-agent) parses exactly these fields.
"""

from __future__ import annotations

import json
from pathlib import Path

import ops
import pydantic
import pytest
from cosl import DashboardPath40UID, LZMABase64
from ops import testing

from charms.gpu_k8s.v0.cos_agent import CosAgentProvider, scrape_job


class ProviderConfig(pydantic.BaseModel):
    """cos_agent v0: what the provider's unit databag holds under `config`."""

    model_config = pydantic.ConfigDict(extra="forbid")
    metrics_alert_rules: dict
    log_alert_rules: dict
    dashboards: list[str]
    metrics_scrape_jobs: list[dict]
    log_slots: list[str]


class Host(ops.CharmBase):
    jobs: list[dict] = []

    def __init__(self, framework):
        super().__init__(framework)
        self.cos = CosAgentProvider(self, "cos-agent")
        for event in (self.on["cos-agent"].relation_joined, self.on.config_changed):
            framework.observe(event, self._update)

    def _update(self, _):
        self.cos.update(type(self).jobs)


META = {"name": "gpu-host", "provides": {"cos-agent": {"interface": "cos_agent", "limit": 1}}}
RULES = """groups:
- name: gpu
  rules:
  - alert: GpuTooHot
    expr: DCGM_FI_DEV_GPU_TEMP > 90
    for: 5m
    labels:
      severity: warning
    annotations:
      summary: GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is above 90 C
"""


@pytest.fixture
def charm_root(tmp_path) -> Path:
    (tmp_path / "src" / "prometheus_alert_rules").mkdir(parents=True)
    (tmp_path / "src" / "prometheus_alert_rules" / "gpu.rules").write_text(RULES)
    (tmp_path / "src" / "grafana_dashboards").mkdir()
    board = {"title": "GPU nodes", "panels": [{"targets": [{"expr": "DCGM_FI_DEV_GPU_UTIL"}]}]}
    (tmp_path / "src" / "grafana_dashboards" / "gpu.json").write_text(json.dumps(board))
    return tmp_path


def _published(charm_root, jobs, event="joined"):
    Host.jobs = jobs
    ctx = testing.Context(Host, meta=META, charm_root=charm_root)
    rel = testing.Relation("cos-agent", remote_app_name="otelcol")
    state = testing.State(
        relations=[rel],
        model=testing.Model(name="gpu", uuid="9b1e3c5a-4f2d-4e8a-b6c7-1d2e3f405162"),
    )
    trigger = ctx.on.relation_joined(rel) if event == "joined" else ctx.on.config_changed()
    out = ctx.run(trigger, state)
    bag = out.get_relation(rel.id).local_unit_data
    return bag


def test_the_unit_databag_holds_the_documented_config(charm_root):
    bag = _published(charm_root, [scrape_job("dcgm-exporter", 9400, instance="gpu-0")])

    assert set(bag) - {"egress-subnets", "ingress-address", "private-address"} == {"config"}
    config = ProviderConfig.model_validate_json(bag["config"])
    assert config.metrics_scrape_jobs == [
        {
            "job_name": "gpu-host_dcgm-exporter",
            "metrics_path": "/metrics",
            # every target is localhost: the machine is told by its instance label
            "static_configs": [{"targets": ["localhost:9400"], "labels": {"instance": "gpu-0"}}],
        }
    ]
    groups = {g["name"]: g for g in config.metrics_alert_rules["groups"]}
    # the charm's file, and the rule every charm gets for targets that stop answering
    assert set(groups) == {
        "gpu_9b1e3c5a_gpu_host_gpu_rules",
        "gpu_9b1e3c5a_gpu_host_targets_rules",
    }
    down, missing = groups["gpu_9b1e3c5a_gpu_host_targets_rules"]["rules"]
    assert (down["alert"], down["for"]) == ("ScrapeTargetDown", "15m")
    assert down["labels"]["juju_application"] == "gpu-host"
    # cosl's HostMetricsMissing: COS's Prometheus makes it this application's, from the
    # topology labels (test_rules_and_dashboards fires it)
    assert (missing["alert"], missing["expr"]) == ("HostMetricsMissing", "absent(up)")
    assert missing["labels"]["juju_application"] == "gpu-host"
    assert missing["labels"]["juju_model_uuid"] == down["labels"]["juju_model_uuid"]
    (rule,) = groups["gpu_9b1e3c5a_gpu_host_gpu_rules"]["rules"]
    assert rule["alert"] == "GpuTooHot" and rule["for"] == "5m"
    # Juju topology, so that COS tells this application's alerts from others'
    assert rule["labels"]["juju_application"] == "gpu-host"
    assert rule["labels"]["juju_model"] == "gpu"
    assert rule["labels"]["severity"] == "warning"
    (board,) = [json.loads(LZMABase64.decompress(d)) for d in config.dashboards]
    assert board["title"] == "GPU nodes"
    # the uid the collector keeps (40 hex characters from the charm's name and the path),
    # the same for every application of the charm, so Grafana shows the dashboard once
    assert board["uid"] == DashboardPath40UID.generate(
        "gpu-host", "src/grafana_dashboards/gpu.json"
    )
    assert DashboardPath40UID.is_valid(board["uid"])
    assert "charm: gpu-host" in board["tags"]
    assert config.log_alert_rules == {} and config.log_slots == []


def test_nothing_without_a_relation_and_no_job_without_an_exporter(charm_root):
    Host.jobs = []
    ctx = testing.Context(Host, meta=META, charm_root=charm_root)
    out = ctx.run(ctx.on.config_changed(), testing.State())
    assert out.relations == frozenset()

    bag = _published(charm_root, [], event="changed")
    assert json.loads(bag["config"])["metrics_scrape_jobs"] == []


def test_a_broken_dashboard_is_refused(charm_root):
    (charm_root / "src" / "grafana_dashboards" / "bad.json").write_text("[1, 2]")
    with pytest.raises(testing.errors.UncaughtCharmError, match="is not a Grafana dashboard"):
        _published(charm_root, [])


def test_a_job_name_stays_when_other_jobs_come_and_two_jobs_cannot_share_one(charm_root):
    alone = _published(charm_root, [scrape_job("dcgm-exporter", 9400, instance="gpu-0")])
    more = _published(
        charm_root,
        [
            scrape_job("kubelet", 6446, instance="gpu-0"),
            scrape_job("dcgm-exporter", 9400, instance="gpu-0"),
        ],
    )
    # the `job` label of the exporter's series is the same before and after
    assert json.loads(alone["config"])["metrics_scrape_jobs"][0]["job_name"] in [
        j["job_name"] for j in json.loads(more["config"])["metrics_scrape_jobs"]
    ]
    twice = [scrape_job("kubelet", 6446, instance="a"), scrape_job("kubelet", 1, instance="a")]
    with pytest.raises(testing.errors.UncaughtCharmError, match="must be unique"):
        _published(charm_root, twice)
