"""Pod logs reach Loki labelled at ingest: the COS overlay's collector processor.

The overlay (bundles/overlays/cos.yaml) sets the collector's `processors` option, "A
global opentelemetry-collector "processors" config in YAML format, without the
"processors:" top-level key" (canonical/opentelemetry-collector-operator track/2 9f17dec,
the branch `2/stable` is released from: charmcraft.yaml). The charm loads it with
yaml.safe_load and adds each processor, named `<key>/<unit>/_custom`, to the unit's
metrics, logs and traces pipelines (src/config_manager.py add_custom_processors), after
add_log_forwarding (src/charm.py) has put `resource/send-loki-logs` and
`attributes/send-loki-logs` in the logs pipeline; processors run in pipeline order and
config_builder.py appends (_add_to_pipeline), so ours sees the charm's
`loki.attribute.labels` hint and may extend it.

What a pod's log line is when it reaches the processors (src/charm.py
_filelog_receiver_config, receiver `filelog/var-log`): the receiver's attributes (job,
juju_application, juju_charm, juju_model, juju_model_uuid, instance), `log.file.name` and
`log.file.path` (include_file_name, include_file_path), `filename` a copy of the path and
`path` its directory (the receiver's operators); no severity (no parser).

The Loki exporter (opentelemetry-collector-contrib pkg/translator/loki, v0.130.0 in the
snap: canonical/opentelemetry-collector-rock 0.130.0/manifest.yaml) makes a label of each
attribute the hint names (convert.go convertAttributesToLabels: the hint split on ",",
each name trimmed, a name the record lacks skipped), adds `level` only for a record with
a severity (addLogLevelAttributeAndHint) and, with the charm's default_labels_enabled,
no `exporter` label. Loki then adds `service_name` from the first label present of its
discover_service_name list and refuses a stream of more than
max_label_names_per_series labels (grafana/loki pkg/validation/limits.go 012354e:
default 15; canonical/loki-k8s-operator 8bcecbf src/config_builder.py _limits_config
changes neither).

No collector runs here. `ottl` below applies the statements as the transform processor
does (processor/transformprocessor README, docs for 0.120.0 and later; pkg/ottl/ottlfuncs
README and func_extract_patterns.go), for the functions the overlay uses only: anything
else is refused, so a statement outside what these tests model fails them. Its regexes
use only syntax in which RE2 and Python's re agree (checked below).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from test_pod_logs import (
    LINE,
    MNIST,
    collector_reads,
    interpolate,
    kubelet_files,
    panel_query,
    query,
)

ROOT = Path(__file__).resolve().parents[3]
OVERLAY = ROOT / "bundles/overlays/cos.yaml"
# the processors of the 0.130 snap's build (canonical/opentelemetry-collector-rock
# 0.130.0/manifest.yaml, which canonical/opentelemetry-collector-snap 0.130 builds)
SNAP_PROCESSORS = {
    "redaction",
    "tail_sampling",
    "transform",
    "batch",
    "memory_limiter",
    "attributes",
    "resource",
    "span",
    "probabilistic_sampler",
    "filter",
}
# src/config_manager.py add_log_forwarding (track/2 9f17dec), `attributes/send-loki-logs`
CHARM_HINT = (
    "container, job, filename, juju_application, juju_charm, juju_model, "
    "juju_model_uuid, juju_unit, snap_name, path, instance"
)
# grafana/loki pkg/validation/limits.go (012354e): DiscoverServiceName, in order
DISCOVER_SERVICE_NAME = (
    "service",
    "app",
    "application",
    "name",
    "app_kubernetes_io_name",
    "container",
    "container_name",
    "k8s_container_name",
    "component",
    "workload",
    "job",
    "k8s_job_name",
)
MAX_LABEL_NAMES_PER_SERIES = 15


class StatementError(Exception):
    """What OTTL returns as a statement's error (error_mode decides what follows)."""


# -- OTTL, for the functions the overlay uses ---------------------------------------------

TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>==|!=|[()\[\],])|(?P<word>[A-Za-z_][\w.]*))'
)


def tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        m = TOKEN.match(text, pos)
        assert m, f"cannot parse {text[pos:]!r}"
        kind = m.lastgroup
        assert kind
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class Parser:
    """OTTL's grammar (pkg/ottl LANGUAGE.md), the part the overlay uses.

    editor(args) [where condition], with converters, string literals, nil, lists,
    `log.attributes` paths, ==, != and `and`.
    """

    def __init__(self, text: str):
        self.toks = tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        assert tok and (value is None or tok[1] == value), f"expected {value}, got {tok}"
        self.i += 1
        return tok

    def statement(self) -> tuple[tuple, tuple | None]:
        call = self.value()
        assert call[0] == "call" and call[1][0].islower(), "a statement is an editor call"
        cond = None
        if self.peek() == ("word", "where"):
            self.take()
            cond = self.condition()
        assert self.peek() is None, f"trailing {self.toks[self.i :]}"
        return call, cond

    def condition(self) -> tuple:
        left = self.comparison()
        while self.peek() == ("word", "and"):
            self.take()
            left = ("and", left, self.comparison())
        assert self.peek() not in (("word", "or"), ("word", "not")), "not modelled"
        return left

    def comparison(self) -> tuple:
        left = self.value()
        tok = self.peek()
        if tok and tok[1] in ("==", "!="):
            self.take()
            return (tok[1], left, self.value())
        assert left[0] == "call", "a condition is a comparison or a converter"
        return left

    def items(self, close: str) -> list[tuple]:
        """Values separated by commas up to `close` (a list's or a call's arguments)."""
        out = []
        while self.peek() != ("op", close):
            out.append(self.value())
            if self.peek() == ("op", ","):
                self.take()
        self.take(close)
        return out

    def value(self) -> tuple:
        kind, text = self.take()
        if kind == "str":
            # OTTL string escapes (\" and \\); the overlay's statements have none
            assert "\\" not in text, text
            return ("lit", text[1:-1])
        if text == "[":
            return ("list", self.items("]"))
        assert kind == "word", text
        if text == "nil":
            return ("lit", None)
        if self.peek() == ("op", "("):
            self.take()
            return ("call", text, self.items(")"))
        assert text == "log.attributes", f"path {text} not modelled"
        if self.peek() == ("op", "["):
            self.take()
            key = self.value()
            self.take("]")
            assert key[0] == "lit"
            return ("attr", key[1])
        return ("attrs",)


RE2_ONLY = re.compile(r"\\[1-9]|\(\?[=!<][^P]|\(\?<[=!]|\(\?[imsU]")


def compile_re2(pattern: str) -> re.Pattern:
    """A pattern both RE2 and Python's re read alike.

    No lookaround, backreference or flag group (RE2 refuses the first two; the flags differ).
    """
    assert not RE2_ONLY.search(pattern), pattern
    return re.compile(pattern)


def evaluate(node: tuple, attrs: dict):
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "list":
        return [evaluate(n, attrs) for n in node[1]]
    if kind == "attr":
        return attrs.get(node[1])
    if kind == "attrs":
        return attrs
    if kind in ("==", "!="):
        equal = evaluate(node[1], attrs) == evaluate(node[2], attrs)
        return equal if kind == "==" else not equal
    if kind == "and":
        return evaluate(node[1], attrs) and evaluate(node[2], attrs)
    return call(node, attrs)


def call(node: tuple, attrs: dict):
    """A function call: the converters and editors the overlay uses."""
    name, args = node[1], [evaluate(a, attrs) for a in node[2]]
    if name == "IsMatch":  # nil -> false; regexp.MatchString (unanchored)
        target, pattern = args
        return target is not None and bool(compile_re2(pattern).search(str(target)))
    if name == "ExtractPatterns":
        return extract_patterns(*args)
    if name == "Concat":
        values, delimiter = args
        if any(not isinstance(v, str) for v in values):
            raise StatementError("Concat of a value these tests do not model")
        return delimiter.join(values)
    if name == "merge_maps":
        target, source, strategy = args
        assert strategy == "upsert", strategy
        target.update(source)
        return None
    if name == "set":
        target, value = node[2][0], args[1]
        assert target[0] == "attr"
        if value is not None:  # "If value resolves to nil ... there will be no action"
            attrs[target[1]] = value
        return None
    raise AssertionError(f"function {name} not modelled")


def extract_patterns(target, pattern: str) -> dict[str, str]:
    """func_extract_patterns.go: FindStringSubmatch (leftmost, unanchored), named groups."""
    rx = compile_re2(pattern)
    assert rx.groupindex, "ExtractPatterns needs a named group (an error at startup)"
    if not isinstance(target, str):
        raise StatementError("ExtractPatterns: target is not a string or is nil")
    m = rx.search(target)
    return {} if m is None else {k: v or "" for k, v in m.groupdict().items()}


def transform(config: dict, attrs: dict) -> list[str]:
    """Run a transform processor's log statements on one record; return the errors."""
    assert set(config) <= {"error_mode", "log_statements"}, set(config)
    # ignore: "logs the error, and continues on to the next statement"
    assert config.get("error_mode") == "ignore"
    errors = []
    for group in config["log_statements"]:
        assert set(group) <= {"context", "conditions", "statements"}, set(group)
        assert group.get("context") == "log"
        conditions = [Parser(c).condition() for c in group.get("conditions") or []]
        # "The conditions are ORed together"
        if conditions and not any(evaluate(c, attrs) for c in conditions):
            continue
        for text in group["statements"]:
            call, cond = Parser(text).statement()
            try:
                if cond is None or evaluate(cond, attrs):
                    evaluate(call, attrs)
            except StatementError as e:
                errors.append(str(e))
    return errors


# -- the collector and Loki, as the module docstring says ---------------------------------


def overlay_processors() -> dict:
    options = yaml.safe_load(OVERLAY.read_text())["applications"]["otelcol"]["options"]
    return yaml.safe_load(options["processors"])


def filelog_record(path: str) -> dict:
    """filelog/var-log's attributes for a line of `path`, its operators applied."""
    return {
        "job": "opentelemetry-collector-var-log",
        "juju_application": "otelcol",
        "juju_charm": "opentelemetry-collector",
        "juju_model": "gpu-k8s",
        "juju_model_uuid": "9a1f2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d",
        "instance": "ip-10-0-1-17",
        "log.file.name": path.rsplit("/", 1)[1],
        "log.file.path": path,
        "filename": path,
        "path": path.rsplit("/", 1)[0],
    }


def loki_labels(path: str, processors: dict | None = None) -> dict[str, str]:
    """The labels Loki stores a line of `path` under, with these custom processors."""
    attrs = filelog_record(path)
    attrs["loki.attribute.labels"] = CHARM_HINT  # upsert by attributes/send-loki-logs
    for config in (processors or {}).values():
        assert not transform(config, attrs), path
    names = [n.strip() for n in attrs["loki.attribute.labels"].split(",")]
    labels = {n: str(attrs[n]) for n in names if n in attrs}
    service = next((labels[n] for n in DISCOVER_SERVICE_NAME if n in labels), None)
    labels["service_name"] = service or "unknown_service"
    return labels


POD_LABELS = ("namespace", "pod", "container", "training_job")


# -- tests ---------------------------------------------------------------------------------


def test_the_overlay_adds_one_transform_processor_of_the_snap_with_log_statements_only():
    processors = overlay_processors()
    assert list(processors) == ["transform/pod-labels"]
    for key, config in processors.items():
        assert key.split("/")[0] in SNAP_PROCESSORS
        # the charm puts it in the metrics and traces pipelines too: with no statements
        # for them it leaves them as they are (transformprocessor config.go validates and
        # builds each signal's statements only when there are some)
        assert set(config) == {"error_mode", "log_statements"}
        # propagate would drop the whole payload on an error; ignore logs it, goes on
        assert config["error_mode"] == "ignore"
    # "when using OTTL within the collector's configuration file, `$` must be escaped to
    # `$$`" (pkg/ottl/ottlfuncs README): the statements carry none
    assert (
        "$"
        not in yaml.safe_load(OVERLAY.read_text())["applications"]["otelcol"]["options"][
            "processors"
        ]
    )


def test_a_training_replicas_lines_are_labelled_with_namespace_pod_container_and_job():
    processors = overlay_processors()
    for pod in MNIST:
        for restarts in (0, 3):
            for path in kubelet_files("team-a", pod, "tensorflow", restarts):
                assert collector_reads(path)
                labels = loki_labels(path, processors)
                assert {k: labels.get(k) for k in POD_LABELS} == {
                    "namespace": "team-a",
                    "pod": pod,
                    "container": "tensorflow",
                    "training_job": "mnist",
                }, path
                # the collector's own labels stay
                assert labels["job"] == "opentelemetry-collector-var-log"
                assert labels["filename"] == path


def test_without_the_processor_loki_has_only_the_path():
    """The probe: with the charm's hint alone no line has a namespace or pod label."""
    for path in kubelet_files("team-a", MNIST[0], "tensorflow"):
        labels = loki_labels(path)
        assert not {"namespace", "pod", "training_job"} & set(labels), labels


def test_other_pods_get_namespace_pod_and_container_but_no_training_job():
    processors = overlay_processors()
    cases = [
        ("team-a", "mnist-serving-5d8f7c9b4-h2j3k", "serving"),
        ("gpu-k8s-gpu", "dcgm-exporter-z4x5c", "exporter"),
        # a Deployment named like a role: its pod-template hash is not two indexes
        ("team-a", "mnist-worker-5d8f7c9b4-h2j3k", "tensorflow"),
        # a replica-shaped name from another container of the pod
        ("team-a", "mnist-worker-0-0-x7k2p", "sidecar"),
        ("kube-system", "kube-proxy-8x7tq", "kube-proxy"),
    ]
    for namespace, pod, container in cases:
        for path in kubelet_files(namespace, pod, container):
            labels = loki_labels(path, processors)
            assert (labels["namespace"], labels["pod"], labels["container"]) == (
                namespace,
                pod,
                container,
            ), path
            assert "training_job" not in labels, path


def test_a_job_named_like_a_role_keeps_its_whole_name():
    processors = overlay_processors()
    # the longest name the charm takes (charms/tensorflow/src/literals.py JOB_NAME_MAX 40)
    # with the last of MAX_WORKERS 1000: the Job controller's generateName prefix stays
    # within the 58 characters names.SimpleNameGenerator keeps (k8s.io/apiserver
    # pkg/storage/names/generate.go, MaxGeneratedNameLength = 63 - 5), so it is not cut
    longest = "j" * 40
    for job, pod in [
        *((job, f"{job}-worker-0-3-b4c5d") for job in ("ps-worker", "chief-2", "resnet-ps")),
        (longest, f"{longest}-worker-0-999-b4c5d"),
    ]:
        assert len(pod.rsplit("-", 1)[0]) + 1 <= 58
        for path in kubelet_files("team-b", pod, "tensorflow"):
            assert loki_labels(path, processors)["training_job"] == job, path


def test_a_link_name_the_kubelet_cut_keeps_only_the_collectors_labels():
    """A link whose name the kubelet cut gets no pod labels (none wrong either).

    The kubelet cuts the link's name to 251 characters and `.log` (pkg/kubelet/kuberuntime
    legacy.go logSymlink, ext4MaxFileNameLen 255): a pod, namespace and container over 184
    characters together. The id is then short, and no label is read from a name that may
    be cut. The collector usually reads the file under the link's name (test_pod_logs), so
    such a pod's lines keep the path only; a training replica's names are far shorter.
    """
    processors = overlay_processors()
    namespace, pod, container = "n" * 63, "p" * 63, "c" * 63
    whole, link = kubelet_files(namespace, pod, container)
    name = link.removeprefix("/var/log/containers/").removesuffix(".log")[:251]
    cut = f"/var/log/containers/{name}.log"
    assert len(name) == 251 and cut != link and collector_reads(cut)
    assert loki_labels(cut, processors) == loki_labels(cut)
    assert loki_labels(whole, processors)["pod"] == pod


@pytest.mark.parametrize(
    "path",
    [
        "/var/log/syslog",
        "/var/log/juju/unit-tensorflow-0.log",
        "/var/log/pods/not-a-pod-dir/x.log",
        "/var/log/containers/short.log",
        "/var/log/calico/cni/cni.log",
    ],
)
def test_other_files_keep_exactly_the_collectors_labels(path):
    assert collector_reads(path)
    assert loki_labels(path, overlay_processors()) == loki_labels(path)


def test_no_stream_is_added_and_loki_accepts_every_label_set():
    """As many streams as before, none over Loki's label limit.

    Each new label is a function of `filename`, already a label.
    """
    processors = overlay_processors()
    paths = [
        p
        for ns, pod, c in [
            ("team-a", MNIST[0], "tensorflow"),
            ("team-a", MNIST[1], "tensorflow"),
            ("team-b", "mnist-worker-0-0-q9r8s", "tensorflow"),
            ("gpu-k8s-gpu", "dcgm-exporter-z4x5c", "exporter"),
        ]
        for restarts in (0, 1)
        for p in kubelet_files(ns, pod, c, restarts)
    ] + ["/var/log/syslog", "/var/log/juju/unit-tensorflow-0.log"]
    before = {frozenset(loki_labels(p).items()) for p in paths}
    after = {frozenset(loki_labels(p, processors).items()) for p in paths}
    assert len(before) == len(after) == len(set(paths))
    for p in paths:
        assert len(loki_labels(p, processors)) <= MAX_LABEL_NAMES_PER_SERIES, p
    # Loki's service_name for a pod line is now its container (it was the collector's job)
    assert (
        loki_labels(kubelet_files("team-a", MNIST[0], "tensorflow")[0], processors)["service_name"]
        == "tensorflow"
    )


def test_the_dashboard_panel_gives_the_same_lines_and_labels_with_labels_at_ingest():
    """The panel's lines and labels are the same with the processor as without.

    It selects by path and labels at query time, so it works on a collector without it.
    """
    processors = overlay_processors()
    expr = interpolate(panel_query(), {"namespace": ["team-a"], "job": ["mnist"]})
    selected = [
        *kubelet_files("team-a", MNIST[1], "tensorflow"),
        *kubelet_files("team-a", "mnist-big-worker-0-0-b4c5d", "tensorflow"),
        *kubelet_files("team-a", "mnist-serving-5d8f7c9b4-h2j3k", "serving"),
    ]
    shown = (*POD_LABELS, "stream")

    def panel(labels: dict[str, str]) -> tuple[dict[str, str | None], str] | None:
        got = query(expr, labels, LINE)
        return got and ({k: got[0].get(k) for k in shown}, got[1])

    for path in selected:
        assert panel(loki_labels(path, processors)) == panel(loki_labels(path)), path
    assert panel(loki_labels(selected[0], processors))
    assert not panel(loki_labels(selected[-1], processors))  # the serving pod


def one_group(*statements: str) -> dict:
    return {
        "error_mode": "ignore",
        "log_statements": [{"context": "log", "statements": list(statements)}],
    }


def test_the_ottl_model_refuses_what_it_does_not_model():
    with pytest.raises(AssertionError):
        transform(one_group('set(log.attributes["x"], ToUpperCase(log.attributes["p"]))'), {})
    with pytest.raises(AssertionError):
        compile_re2("^(?=a)")
    # a nil target is the statement's error, which error_mode ignore logs and skips
    attrs: dict = {}
    nil = 'merge_maps(log.attributes, ExtractPatterns(log.attributes["p"], "(?P<a>.)"), "upsert")'
    assert transform(one_group(nil), attrs) and attrs == {}
