# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The provider side of the `cos_agent` interface: telemetry for the COS agent on the machine.

The Canonical Observability Stack reaches machine charms through a subordinate agent
(opentelemetry-collector, formerly grafana-agent) related on an endpoint of interface
`cos_agent`. The principal tells it, in one key of its **unit** databag (a subordinate
relation carries only unit data), what to collect on that machine and what to forward to
COS. The key is `config`, its value one JSON object (canonical/charm-relation-interfaces
interfaces/cos_agent/v0/schema.py; the reference provider, charms.grafana_agent.v0.cos_agent
LIBPATCH 26, CosAgentProviderUnitData):

    metrics_scrape_jobs   Prometheus scrape_configs the agent runs against this machine
                          (targets `localhost:<port>`); each job_name is made
                          `<app>_<name>`: the `job` label of a target must not change
                          when other jobs come or go (the reference adds a hash of the
                          config instead), or rules' windows and `for:` timers restart
    metrics_alert_rules   {"groups": [...]}: Prometheus rule groups, Juju topology labels
                          added to each rule (cosl.AlertRules), forwarded to Prometheus
    log_alert_rules       the same for Loki ({} here)
    dashboards            Grafana dashboards, each JSON LZMA-compressed and base64-encoded
                          (cosl.LZMABase64), forwarded to Grafana; each gets the uid the
                          reference gives it (cosl.DashboardPath40UID of the charm's name
                          and the file's path) and a `charm: <name>` tag. The collector
                          keeps only such uids and makes others from its own file path,
                          which names the application and relation: two applications of
                          one charm would show each dashboard twice, under uids that
                          change with the relation
    log_slots             snap slots whose logs the agent reads ([] here: no snaps)

Rules and dashboards are files the charm ships (`src/prometheus_alert_rules/*.rules`,
`src/grafana_dashboards/*.json`); scrape jobs are given at each update, since what runs
on a machine (a GPU exporter or not) is known only at run time. Nothing secret may go in:
the databag is plain relation data, so kube-apiserver and kubelet, which serve metrics
only to an authorised client, are scraped through the node's HAProxy, which forwards
GET /metrics with the kubelet's own client certificate (api_proxy.MetricsAccess;
`node_jobs`).

The charm observes the endpoint's events into its own reconcile and calls `update` there:

    self.cos = CosAgentProvider(self, host=lambda: self.host)
    ...  # in the reconcile
    self.cos.update([scrape_job("dcgm", 9400, instance=node_name)], gauges=[...])

With `host`, the unit's own state (its status, when its last hook ended, and the gauges
the charm gives) is served on the machine and scraped too (unit_state).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import ops

from charms.gpu_k8s.v0 import api_proxy, unit_state
from charms.gpu_k8s.v0.system import CommandError, Host

LIBID = "1cb866710020485e9918fd12ba134c6b"
LIBAPI = 0
LIBPATCH = 7

logger = logging.getLogger(__name__)

RELATION = "cos-agent"
KEY = "config"
# NVIDIA's DCGM exporter, which the control plane runs on every GPU node with the host's
# network (dcgm_exporter.py there), serves on this port of the node (dcgm-exporter's
# default --address ":9400"): the worker's agent scrapes it as localhost, the tensorflow
# charm reads it at the node's address.
DCGM_EXPORTER_PORT = 9400
RULES_DIR = "src/prometheus_alert_rules"
# Every charm's scrape targets: an exporter that stopped answering silences the alerts
# that read it. The reference provider adds cosl's generic HostHealth group (cosl
# rules.py _GenericAlertGroups.application_rules): HostDown (`up < 1` for 5 minutes,
# critical); 15 minutes here, since the DCGM exporter is down on purpose while NVIDIA's
# MIG manager repartitions a node. And HostMetricsMissing (`absent(up)` for 5 minutes,
# critical), kept as it is: COS's Prometheus adds the rule's Juju topology to the
# expression (prometheus_k8s v1 prometheus_remote_write _inject_alert_expr_labels), so it
# fires when no target of this application is scraped at all (the collector lost its
# jobs, or its remote write stopped), which `up < 1` cannot see.
TARGETS_RULES: dict[str, Any] = {
    "groups": [
        {
            "name": "targets",
            "rules": [
                {
                    "alert": "ScrapeTargetDown",
                    "expr": "up < 1",
                    "for": "15m",
                    "labels": {"severity": "warning"},
                    "annotations": {
                        "summary": (
                            "{{ $labels.job }} on {{ $labels.instance }} has not answered "
                            "for 15 minutes"
                        ),
                        "description": (
                            "The COS agent of {{ $labels.juju_unit }} cannot scrape "
                            "{{ $labels.job }}: its metrics are missing, and the alerts "
                            "that read them cannot fire. Check that it runs on the machine "
                            "(kubectl -n kube-system get pods -o wide, or the unit's status)."
                        ),
                    },
                },
                {
                    "alert": "HostMetricsMissing",
                    "expr": "absent(up)",
                    "for": "5m",
                    "labels": {"severity": "critical"},
                    "annotations": {
                        "summary": (
                            "No metrics of {{ $labels.juju_application }} have reached "
                            "Prometheus for 5 minutes"
                        ),
                        "description": (
                            "Prometheus has no scrape target of {{ $labels.juju_application }} "
                            "in model {{ $labels.juju_model }}: none of its alerts can fire. "
                            "Check the COS agent on its machines (the otelcol subordinate "
                            "of bundles/overlays/cos.yaml) and their cos-agent relation."
                        ),
                    },
                },
            ],
        }
    ]
}
DASHBOARDS_DIR = "src/grafana_dashboards"


def scrape_job(
    name: str, port: int, *, instance: str, path: str = "/metrics", **extra: Any
) -> dict[str, Any]:
    """One scrape config for a port of this machine (`extra`: scheme, ...).

    `instance` names the machine (its node name): every target is `localhost:<port>`, so
    without it the `instance` label of every machine's series would be the same. The
    agent keeps the labels of a static config and adds the Juju topology to them
    (opentelemetry-collector track/2, cos_agent requirer).
    """
    job: dict[str, Any] = {
        "job_name": name,
        "metrics_path": path,
        "static_configs": [{"targets": [f"localhost:{port}"], "labels": {"instance": instance}}],
    }
    job.update(extra)
    return job


# What the node jobs keep of what they scrape: the families a rule or a dashboard reads
# (tests/unit/telemetry checks it both ways). cAdvisor and kube-apiserver are the largest
# producers of series on a node, all stored in COS's one Prometheus. Prometheus applies
# metric_relabel_configs to the scraped samples before they are stored, and not to `up`,
# which it makes itself (Prometheus docs, configuration, <metric_relabel_configs>), so
# ScrapeTargetDown still sees a kubelet or an API server that stops answering. The
# collector's prometheus receiver takes the job as a Prometheus scrape_config, and the
# cos_agent requirer passes every key of a job on (grafana_agent v0 cos_agent LIBPATCH 26
# metrics_jobs: it only adds labels).
NODE_METRICS: dict[str, tuple[str, ...]] = {
    # per-pod CPU and memory of the training pods (the training-progress dashboard)
    "kubelet-cadvisor": (
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
    ),
    # requests answered 5xx or 429 (the cluster dashboard)
    "kube-apiserver": ("apiserver_request_total",),
}


def keep(names: tuple[str, ...]) -> list[dict[str, Any]]:
    """metric_relabel_configs that store only these families (a relabel regex is anchored)."""
    return [{"source_labels": ["__name__"], "regex": "|".join(names), "action": "keep"}]


def node_jobs(instance: str, *, api_server: bool = False) -> list[dict[str, Any]]:
    """Scrape jobs for this node's kubelet (its cAdvisor) and (control plane) API server.

    They go to HAProxy's metrics frontends of this node (api_proxy.MetricsAccess). The
    kubelet's own /metrics is not scraped: nothing reads it, and the cAdvisor job's `up`
    says whether the kubelet answers.
    """
    jobs = [
        scrape_job(
            "kubelet-cadvisor",
            api_proxy.KUBELET_METRICS_PORT,
            instance=instance,
            path="/metrics/cadvisor",
            metric_relabel_configs=keep(NODE_METRICS["kubelet-cadvisor"]),
        )
    ]
    if api_server:
        jobs.append(
            scrape_job(
                "kube-apiserver",
                api_proxy.API_SERVER_METRICS_PORT,
                instance=instance,
                metric_relabel_configs=keep(NODE_METRICS["kube-apiserver"]),
            )
        )
    return jobs


def dashboards(directory: Path, charm_name: str) -> list[str]:
    """The directory's dashboards (*.json, in name order), compressed for the databag.

    Each gets the uid and tag the reference provider gives it (see the module docstring).

    Raises:
        ValueError: a file is not a JSON object (a broken dashboard is a packaging bug).
    """
    from cosl import DashboardPath40UID, LZMABase64  # (only with a relation: see `data`)

    out = []
    for path in sorted(directory.glob("*.json")):
        board = json.loads(path.read_text())
        if not isinstance(board, dict):
            raise ValueError(f"{path.name} is not a Grafana dashboard (a JSON object)")
        board["uid"] = DashboardPath40UID.generate(charm_name, f"{DASHBOARDS_DIR}/{path.name}")
        board["tags"] = [*board.get("tags", []), f"charm: {charm_name}"]
        out.append(LZMABase64.compress(json.dumps(board)))
    return out


class CosAgentProvider(ops.Object):
    """Writes this unit's telemetry to every `cos-agent` relation (see the module docstring).

    With `host` (the machine's boundary), the unit's own state is served too
    (unit_state): a `unit-state` scrape job is added, and when each hook ends the unit's
    file is written while the endpoint has a relation, and removed once it has none.
    """

    _stored = ops.StoredState()
    clock = staticmethod(time.time)

    def __init__(
        self,
        charm: ops.CharmBase,
        relation_name: str = RELATION,
        charm_dir: Path | None = None,
        *,
        host: Callable[[], Host] | None = None,
    ):
        super().__init__(charm, f"{relation_name}-provider")
        self.charm = charm
        self.relation_name = relation_name
        self._dir = charm_dir or charm.charm_dir
        self._host = host
        self._stored.set_default(gauges="[]")
        if host is not None:
            self.framework.observe(self.framework.on.commit, self._on_commit)

    def data(self, scrape_jobs: list[dict[str, Any]]) -> dict[str, Any]:
        """What this unit publishes, before it is dumped into `config`."""
        # cosl costs a hook about as much as a tenth of `import ops`: only a unit that
        # has a cos-agent relation to write to pays it
        from cosl import AlertRules, JujuTopology

        topology = JujuTopology.from_charm(self.charm)
        rules = AlertRules(query_type="promql", topology=topology)
        rules.add_path(self._dir / RULES_DIR, recursive=False)
        scrape_jobs = list(scrape_jobs)
        if self._host is not None:
            scrape_jobs.append(
                scrape_job(
                    "unit-state",
                    unit_state.PORT,
                    instance=machine_name(self._host()),
                    path=unit_state.metrics_path(self.charm.unit.name),
                )
            )
            rules.add(copy.deepcopy(unit_state.RULES), group_name_prefix=topology.identifier)
        if scrape_jobs:  # (a charm without targets has no `up` of its own)
            rules.add(copy.deepcopy(TARGETS_RULES), group_name_prefix=topology.identifier)
        names = [job["job_name"] for job in scrape_jobs]
        if len(set(names)) != len(names):
            raise ValueError(f"scrape job names must be unique: {names}")
        jobs = []
        for job in scrape_jobs:
            named = dict(job)
            named["job_name"] = f"{self.charm.app.name}_{job['job_name']}"
            jobs.append(named)
        return {
            "metrics_alert_rules": rules.as_dict(),
            "log_alert_rules": {},
            "dashboards": dashboards(self._dir / DASHBOARDS_DIR, self.charm.meta.name),
            "metrics_scrape_jobs": jobs,
            "log_slots": [],
        }

    def update(
        self,
        scrape_jobs: list[dict[str, Any]],
        gauges: Iterable[unit_state.Gauge] | None = None,
    ) -> None:
        """Publish to every relation of the endpoint (nothing without one).

        `gauges`: see `set_gauges` (None keeps the last ones).
        """
        if gauges is not None:
            self.set_gauges(gauges)
        relations = self.charm.model.relations[self.relation_name]
        if not relations:
            return
        text = json.dumps(self.data(scrape_jobs), sort_keys=True)
        for relation in relations:
            if relation.data[self.charm.unit].get(KEY) != text:
                relation.data[self.charm.unit][KEY] = text

    def set_gauges(self, gauges: Iterable[unit_state.Gauge]) -> None:
        """The charm's own state as of this hook, served from now on.

        Kept until the next call: a hook that does not compute them (an action, a
        relation event) does not make them vanish.
        """
        self._stored.gauges = json.dumps([g.as_dict() for g in gauges], sort_keys=True)

    def _on_commit(self, _: ops.EventBase) -> None:
        """The hook has ended and its status is decided: serve it, or stop serving."""
        assert self._host is not None
        if os.environ.get("JUJU_ACTION_NAME"):
            # Juju sets JUJU_ACTION_NAME in an action's environment only (Juju docs, "Hook
            # and action environment variables"). An action is not a hook (the file says
            # when the last hook ended), and a `parallel: true` action runs without the
            # machine lock, beside other charms' hooks: it leaves the machine's shared
            # unit-state server alone.
            return
        host = self._host()
        unit = self.charm.unit.name
        # A failure here must not fail the hook (the commit would be lost with it: ops
        # saves StoredState after this event); the next hook tries again.
        try:
            if not self.charm.model.relations[self.relation_name]:
                if unit_state.retire(host, unit):
                    logger.info("no COS agent related: stopped serving this unit's state")
                return
            gauges = [unit_state.Gauge(**g) for g in json.loads(self._stored.gauges)]
            text = unit_state.render(self.charm.unit.status.name, self.clock(), gauges)
            unit_state.publish(host, unit, text)
        except (CommandError, OSError) as e:
            logger.warning("cannot serve this unit's state on the machine: %s", e)


def machine_name(host: Host) -> str:
    """The machine's hostname (the node name of a Kubernetes node on it)."""
    text = (host.read("/etc/hostname") or "").strip()
    return text.lower() or "localhost"
