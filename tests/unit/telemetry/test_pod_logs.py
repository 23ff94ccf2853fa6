"""A training job's pod logs in Grafana: the Loki panel of `gpu-k8s / training progress`.

The `cos_agent` interface cannot give pod logs labels of their own. Its unit databag holds
`metrics_scrape_jobs`, `metrics_alert_rules`, `log_alert_rules`, `dashboards`,
`log_slots` and `tracing_protocols`, and nothing else (canonical/grafana-agent-operator
lib/charms/grafana_agent/v0/cos_agent.py LIBPATCH 26, CosAgentProviderUnitData);
`log_slots` names snap content slots the collector mounts and reads, not host paths or
relabelling. The collector (canonical/opentelemetry-collector-operator track/2 9f17dec,
the branch `2/stable` is built from: its .github/workflows/release.yaml releases with
default-track 2, main's with default-track dev) reads pod logs anyway, with its own
receiver `filelog/var-log`: include `/var/log/**/*log`, every record's attribute `filename` a
copy of `log.file.path` and `path` its directory (src/charm.py _filelog_receiver_config),
and its Loki exporter makes `container, job, filename, juju_application, juju_charm,
juju_model, juju_model_uuid, juju_unit, snap_name, path, instance` labels
(src/config_manager.py add_log_forwarding, `loki.attribute.labels`). (Its main branch has
an `external-config` relation that merges another charm's receiver configuration; `2/stable`
has not.)

The file's path names the pod (kubelet, pkg/kubelet/kuberuntime/helpers.go
BuildPodLogsDirectory and BuildContainerLogsDirectory; legacy.go logSymlink):
`/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restarts>.log`, and the kubelet links
`/var/log/containers/<pod>_<namespace>_<container>-<container id>.log` to it. Both match
the collector's glob. It reads one file once: the finder sorts the paths it globbed
(opentelemetry-collector-contrib pkg/stanza/fileconsumer/matcher/internal/finder
FindFiles, slices.Sort), and a path whose first bytes equal those of one already taken in
the same poll is skipped (fileconsumer/file.go makeReaders, "Exclude duplicate paths with
the same content"), so the link, sorted first, is usually the `filename` Loki gets. The
panel's query selects a job's files by either form and makes namespace, pod, container
and training_job labels from the path at query time (LogQL label_format with Loki's
regexReplaceAll, Go's regexp.ReplaceAllString: `$n` is the n-th group, a group that did
not take part is empty), then strips the CRI log prefix (`<time> <stream> <P|F> `,
kubelet pkg/kubelet/kuberuntime/logs parseCRILog) with the pattern parser.

The COS overlay gives pod lines the same labels at ingest, through the collector's
`processors` option (test_pod_log_labels.py); the panel's query works with or without.

No Loki runs here: these tests apply the query as Loki and Grafana would. A label
matcher's regex is anchored at both ends (Loki's =~, as Prometheus' labels.Matcher);
Grafana replaces `$var` with the variable's value, `(a|b)` for several and the
variable's `allValue` for All, and leaves `$1` (no such variable) as it is. The regexes
use only syntax in which RE2 and Python's re agree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BOARD = ROOT / "charms/tensorflow/src/grafana_dashboards/training-progress.json"
LOKI = {"type": "loki", "uid": "${lokids}"}
# the collector's var-log receiver (see the module docstring)
COLLECTOR_GLOB = "/var/log/**/*log"
CONTAINER_ID = "3f4e" * 16  # containerd's ids are 64 hex digits


def kubelet_files(namespace: str, pod: str, container: str, restarts: int = 0) -> list[str]:
    """A container's log file and the kubelet's link to it."""
    uid = "0c5a1b2e-8d3f-4f7a-9b6c-1d2e3f4a5b6c"
    return [
        f"/var/log/pods/{namespace}_{pod}_{uid}/{container}/{restarts}.log",
        f"/var/log/containers/{pod}_{namespace}_{container}-{CONTAINER_ID}.log",
    ]


def collector_reads(path: str) -> bool:
    """Whether the collector's include glob matches (bmatcuk/doublestar v4).

    `**/` is any number of directories, `*` any part of one name (its README, "Patterns").
    """
    rx = re.escape(COLLECTOR_GLOB).replace(r"\*\*/", "(?:[^/]+/)*").replace(r"\*", "[^/]*")
    return re.fullmatch(rx, path) is not None


def loki_panel() -> dict:
    board = json.loads(BOARD.read_text())
    (panel,) = [p for p in board["panels"] if p["datasource"] == LOKI]
    assert "lokids" in {v["name"] for v in board["templating"]["list"]}
    return panel


def panel_query() -> str:
    return loki_panel()["targets"][0]["expr"]


def interpolate(expr: str, variables: dict[str, list[str] | None]) -> str:
    """Grafana's substitution: one value as is, several as (a|b), None (All) as `.*`."""

    def value(m: re.Match) -> str:
        if m.group(1) not in variables:
            return m.group(0)
        values = variables[m.group(1)]
        if values is None:
            return ".*"  # the variables' allValue
        return values[0] if len(values) == 1 else "(" + "|".join(values) + ")"

    return re.sub(r"\$([A-Za-z_]\w*)", value, expr)


def stream_matchers(expr: str) -> dict[str, str]:
    """The `label=~"regex"` matchers of the query's stream selector."""
    selector = re.match(r"\{([^}]*)\}", expr)
    assert selector, expr
    matchers = re.findall(r'(\w+)=~"((?:[^"\\]|\\.)*)"', selector.group(1))
    assert all("\\" not in rx for _, rx in matchers), "no escapes: LogQL and Python agree"
    return dict(matchers)


def label_formats(expr: str) -> list[dict[str, tuple[str, str, str]]]:
    """Each `| label_format` stage: label -> (regex, source label, replacement)."""
    stages = []
    for stage in re.findall(r"\| label_format (.*?)(?= \| |$)", expr):
        templates = re.findall(
            r'(\w+)=`\{\{ regexReplaceAll "([^"]*)" \.(\w+) "([^"]*)" \}\}`', stage
        )
        assert templates, stage
        stages.append({label: (rx, src, repl) for label, rx, src, repl in templates})
    return stages


def query(expr: str, labels: dict[str, str], line: str) -> tuple[dict[str, str], str] | None:
    """The labels and line Loki returns for one log line of a stream, or None."""
    for label, rx in stream_matchers(expr).items():
        if not re.fullmatch(rx, labels.get(label, "")):
            return None
    labels = dict(labels)
    for stage in label_formats(expr):
        made = {}
        for label, (rx, src, repl) in stage.items():
            go = re.sub(r"\$(\d+)", r"\\g<\1>", repl)
            made[label] = re.sub(rx, go, labels.get(src, ""))
        labels.update(made)
    assert ' | pattern "<_> <stream> <_> <message>" | line_format "{{.message}}"' in expr
    _time, labels["stream"], _tag, message = line.split(" ", 3)
    return labels, message


def collector_labels(path: str) -> dict[str, str]:
    """The Loki labels of a line the collector read from `path` (the module docstring)."""
    return {
        "filename": path,
        "path": path.rsplit("/", 1)[0],
        "job": "opentelemetry-collector-var-log",
        "juju_application": "otelcol",
        "instance": "ip-10-0-1-17",
    }


LINE = "2026-11-27T09:00:00.123456789Z stderr F step 200 loss 0.31"
# JobSet names a replicated job's Job <jobset>-<replicatedJob>-<index> and the Job
# controller names an Indexed Job's pods <job>-<completion index>-<5 random characters>
# (pkg/controller/job/indexed_job_utils.go podGenerateNameWithIndex)
MNIST = [f"mnist-{role}-0-{i}-x7k2p" for role, i in (("chief", 0), ("worker", 0), ("worker", 1))]


def test_the_collector_reads_every_container_log_under_either_name():
    for path in kubelet_files("team-a", MNIST[0], "tensorflow", restarts=2):
        assert collector_reads(path)
    assert collector_reads("/var/log/syslog") and not collector_reads("/var/lib/x.log")
    # the one it usually keeps: the link sorts first
    assert sorted(kubelet_files("team-a", MNIST[0], "tensorflow"))[0].startswith(
        "/var/log/containers/"
    )


def test_a_jobs_logs_are_selected_by_namespace_and_job_and_labelled_from_the_path():
    expr = interpolate(panel_query(), {"namespace": ["team-a"], "job": ["mnist"]})
    for pod in MNIST:
        for restarts in (0, 3):
            for path in kubelet_files("team-a", pod, "tensorflow", restarts):
                got = query(expr, collector_labels(path), LINE)
                assert got, path
                labels, message = got
                assert message == "step 200 loss 0.31"
                assert labels["stream"] == "stderr"
                assert {k: labels[k] for k in ("namespace", "pod", "container")} == {
                    "namespace": "team-a",
                    "pod": pod,
                    "container": "tensorflow",
                }, path
                assert labels["training_job"] == "mnist"
                # the collector's own labels stay (Grafana's Juju filters read them)
                assert labels["juju_application"] == "otelcol"


def test_other_jobs_teams_and_pods_are_left_out():
    expr = interpolate(panel_query(), {"namespace": ["team-a"], "job": ["mnist"]})
    others = [
        # a job whose name starts with this one's
        *kubelet_files("team-a", "mnist-big-worker-0-0-b4c5d", "tensorflow"),
        # the same name in another team
        *kubelet_files("team-b", "mnist-worker-0-0-q9r8s", "tensorflow"),
        # the job's serving Deployment and a GPU node's exporter
        *kubelet_files("team-a", "mnist-serving-5d8f7c9b4-h2j3k", "serving"),
        *kubelet_files("gpu-k8s-gpu", "dcgm-exporter-z4x5c", "exporter"),
        "/var/log/juju/unit-tensorflow-0.log",
        "/var/log/syslog",
    ]
    for path in others:
        assert query(expr, collector_labels(path), LINE) is None, path


def test_several_jobs_or_all_of_them():
    panel = panel_query()
    big = kubelet_files("team-a", "mnist-big-worker-0-0-b4c5d", "tensorflow")
    both = interpolate(panel, {"namespace": ["team-a"], "job": ["mnist", "mnist-big"]})
    everything = interpolate(panel, {"namespace": None, "job": None})
    for path in [*kubelet_files("team-a", MNIST[1], "tensorflow"), *big]:
        assert query(both, collector_labels(path), LINE)
    team_b = kubelet_files("team-b", "resnet-worker-0-0-q9r8s", "tensorflow")
    for path in [*big, *team_b]:
        labels, _ = query(everything, collector_labels(path), LINE) or ({}, "")
        assert labels.get("training_job") in ("mnist-big", "resnet"), path
    exporter = kubelet_files("gpu-k8s-gpu", "dcgm-exporter-z4x5c", "exporter")
    assert not any(query(everything, collector_labels(p), LINE) for p in exporter)
