"""The charms' own state: the file each unit writes, the machine's server, and the provider.

The text is checked by the real `promtool check metrics` (Debian's `prometheus`), the
server is run as the program systemd runs (a separate python3 on a free port), and the
provider by ops.testing with a fake machine (tests/fakes/machine.py: systemd loads unit
files on daemon-reload, `systemctl` fails on a unit it does not know).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import ops
import pytest
from ops import testing

from charms.gpu_k8s.v0 import unit_state
from charms.gpu_k8s.v0.cos_agent import CosAgentProvider
from charms.gpu_k8s.v0.system import CommandError
from charms.gpu_k8s.v0.unit_state import Gauge
from fakes.machine import FakeMachine

PROMTOOL = shutil.which("promtool")
JOBS = [
    Gauge("gpu_k8s_training_jobs", "Jobs by phase.", n, {"phase": p})
    for p, n in (("running", 2), ("queued", 1))
]


def _promtool_check(text: str) -> subprocess.CompletedProcess:
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    return subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, text=True, capture_output=True, check=False
    )


def test_the_file_is_valid_prometheus_text_with_one_status_set():
    text = unit_state.render("blocked", 1764000000.5, JOBS)

    checked = _promtool_check(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = text.splitlines()
    assert 'gpu_k8s_unit_status{status="blocked"} 1' in lines
    assert 'gpu_k8s_unit_status{status="active"} 0' in lines
    assert "gpu_k8s_unit_state_updated_timestamp_seconds 1764000000.5" in lines
    # one HELP and TYPE per name, samples of one name together
    assert lines.count("# TYPE gpu_k8s_training_jobs gauge") == 1
    assert 'gpu_k8s_training_jobs{phase="queued"} 1' in lines


def test_a_status_juju_never_set_is_no_status_at_all():
    text = unit_state.render("unknown", 0)
    assert all(line.endswith(" 0") for line in text.splitlines() if "unit_status{" in line)


def test_label_values_are_escaped_and_bad_names_refused():
    text = unit_state.render("active", 1, [Gauge("x", 'a "quoted"\nhelp', 1, {"l": 'a"b\\c'})])
    assert 'x{l="a\\"b\\\\c"} 1' in text.splitlines()
    assert _promtool_check(text).returncode == 0
    with pytest.raises(ValueError, match="not a Prometheus metric"):
        Gauge("gpu-k8s", "dashes are not allowed", 1)
    with pytest.raises(ValueError, match="not a Prometheus metric"):
        Gauge("ok", "", 1, {"a-b": "x"})
    with pytest.raises(TypeError, match="must be a number"):
        Gauge("ok", "", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a number"):
        Gauge("ok", "", 1, {"n": 3})  # type: ignore[dict-item]


@pytest.fixture
def server(tmp_path):
    """The program systemd runs, on a free port of 127.0.0.1."""
    proc = subprocess.Popen(
        [sys.executable, unit_state.__file__, "--directory", str(tmp_path), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    stdout = proc.stdout
    assert stdout is not None
    try:
        line = stdout.readline()  # "serving <dir> on 127.0.0.1:<port>"
        assert line.startswith("serving"), line
        yield tmp_path, f"http://{line.rsplit(' ', 1)[1].strip()}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        stdout.close()


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_the_server_answers_each_unit_with_its_own_file(server):
    directory, base = server
    (directory / "tensorflow-0.prom").write_text(unit_state.render("active", 5, JOBS))
    (directory / "efs-storage-0.prom").write_text(unit_state.render("waiting", 5))

    code, kind, body = _get(f"{base}/metrics/tensorflow-0")
    assert (code, kind) == (200, unit_state.CONTENT_TYPE)
    assert 'gpu_k8s_training_jobs{phase="running"} 2' in body
    code, _, body = _get(f"{base}/metrics/efs-storage-0")
    assert code == 200 and 'gpu_k8s_unit_status{status="waiting"} 1' in body
    # a new hook's file is served at once (no restart)
    (directory / "tensorflow-0.prom").write_text(unit_state.render("blocked", 6))
    assert 'status="blocked"} 1' in _get(f"{base}/metrics/tensorflow-0")[2]


@pytest.mark.parametrize(
    "path", ["/metrics/tensorflow-1", "/metrics", "/", "/metrics/..%2f..%2fetc", "/metrics/x/../y"]
)
def test_the_server_refuses_what_is_not_a_unit_file(server, path):
    directory, base = server
    (directory / "tensorflow-0.prom").write_text("x 1\n")
    code, _, _ = _get(base + path)
    assert code == 404


# -- on the machine: install, share, retire -----------------------------------------------


@pytest.fixture
def machine(tmp_path) -> FakeMachine:
    return FakeMachine(tmp_path / "root")


def _restarts(machine: FakeMachine) -> list[str]:
    return [line for line in machine.runner.lines("systemctl") if " restart " in line]


def test_the_first_unit_installs_the_server_and_the_last_removes_it(machine):
    host = machine.host()
    unit_state.publish(host, "kubernetes-control-plane/0", "a 1\n")
    service = machine.services[unit_state.SERVICE]
    assert service.enabled and service.active
    assert host.read(unit_state.PROGRAM) == Path(unit_state.__file__).read_text()
    assert f"--port {unit_state.PORT}" in host.read(unit_state.SERVICE_FILE)

    before = len(_restarts(machine))
    unit_state.publish(host, "tensorflow/0", "b 1\n")  # same machine, same server
    unit_state.publish(host, "tensorflow/0", "b 2\n")
    assert len(_restarts(machine)) == before  # nothing to restart
    assert host.read(f"{unit_state.DIRECTORY}/tensorflow-0.prom") == "b 2\n"

    assert unit_state.retire(host, "tensorflow/0")
    assert unit_state.SERVICE in machine.services  # control-plane/0 still publishes
    assert not unit_state.retire(host, "tensorflow/0")  # nothing left to do
    assert unit_state.retire(host, "kubernetes-control-plane/0")
    assert unit_state.SERVICE not in machine.services
    assert host.read(unit_state.PROGRAM) is None
    assert host.read(unit_state.SERVICE_FILE) is None


def test_the_newest_library_serves_whoever_installed_it(machine):
    host = machine.host()
    newer = (
        Path(unit_state.__file__)
        .read_text()
        .replace(f"LIBPATCH = {unit_state.LIBPATCH}\n", f"LIBPATCH = {unit_state.LIBPATCH + 1}\n")
    )
    host.write(unit_state.PROGRAM, newer)
    newer_unit = unit_state.UNIT_TEXT.replace("RestartSec=5", "RestartSec=7")
    host.write(unit_state.SERVICE_FILE, newer_unit)
    unit_state.publish(host, "tensorflow/0", "a 1\n")
    # an older charm downgrades neither, so the two never take turns restarting it
    assert host.read(unit_state.PROGRAM) == newer
    assert host.read(unit_state.SERVICE_FILE) == newer_unit
    restarts = machine.services[unit_state.SERVICE].restarts
    unit_state.publish(host, "tensorflow/0", "a 2\n")
    assert machine.services[unit_state.SERVICE].restarts == restarts

    older = newer.replace(f"LIBPATCH = {unit_state.LIBPATCH + 1}\n", "LIBPATCH = 0\n")
    host.write(unit_state.PROGRAM, older)
    unit_state.publish(host, "tensorflow/0", "a 1\n")
    assert host.read(unit_state.PROGRAM) == Path(unit_state.__file__).read_text()
    assert machine.services[unit_state.SERVICE].restarts >= 1


def test_two_copies_with_the_same_libpatch_do_not_take_turns(machine):
    """Charms built from two commits of one LIBPATCH: the installed copy stays.

    Each charm embeds its own copy of the library; only LIBPATCH orders them (charmcraft
    publish-lib refuses a changed library without a new LIBPATCH).
    """
    host = machine.host()
    same_patch = Path(unit_state.__file__).read_text() + "# built from another commit\n"
    other_unit = unit_state.UNIT_TEXT.replace("RestartSec=5", "RestartSec=6")
    unit_state.publish(host, "kubernetes-control-plane/0", "a 1\n")
    host.write(unit_state.PROGRAM, same_patch)
    host.write(unit_state.SERVICE_FILE, other_unit)
    restarts = machine.services[unit_state.SERVICE].restarts

    unit_state.publish(host, "tensorflow/0", "b 1\n")

    assert host.read(unit_state.PROGRAM) == same_patch
    assert host.read(unit_state.SERVICE_FILE) == other_unit
    assert machine.services[unit_state.SERVICE].restarts == restarts


def test_a_missing_unit_file_is_written_back_by_a_copy_of_the_same_libpatch(machine):
    host = machine.host()
    unit_state.publish(host, "tensorflow/0", "a 1\n")
    host.path(unit_state.SERVICE_FILE).unlink()  # a hook failed between the two writes

    unit_state.publish(host, "tensorflow/0", "a 2\n")

    assert host.read(unit_state.SERVICE_FILE) == unit_state.UNIT_TEXT


# -- the provider, through ops.testing ----------------------------------------------------


def test_the_last_unit_keeps_its_file_until_the_server_is_gone(machine):
    host = machine.host()
    unit_state.publish(host, "tensorflow/0", "a 1\n")
    machine.fail(f"{unit_state.SYSTEMCTL} disable", stderr="Failed to connect to bus")
    with pytest.raises(CommandError):
        unit_state.retire(host, "tensorflow/0")
    assert machine.services[unit_state.SERVICE].active  # still there: try again later
    assert unit_state.retire(host, "tensorflow/0")
    assert unit_state.SERVICE not in machine.services
    assert not any(host.path(unit_state.DIRECTORY).iterdir())


class StatefulCharm(ops.CharmBase):
    machine: FakeMachine
    gauges: list[Gauge] | None = None

    def __init__(self, framework):
        super().__init__(framework)
        self.cos = CosAgentProvider(self, "cos-agent", host=lambda: type(self).machine.host())
        framework.observe(self.on.config_changed, self._reconcile)
        framework.observe(self.on["cos-agent"].relation_joined, self._reconcile)
        framework.observe(self.on.collect_unit_status, self._status)
        framework.observe(self.on.show_action, self._show)

    def _reconcile(self, _):
        self.cos.update([], gauges=type(self).gauges)

    def _show(self, event):
        event.set_results({"a": "b"})

    def _status(self, event):
        event.add_status(ops.BlockedStatus("set credentials"))


META = {"name": "stateful", "provides": {"cos-agent": {"interface": "cos_agent"}}}
ACTIONS = {"show": {}}


@pytest.fixture
def charm_root(tmp_path) -> Path:
    root = tmp_path / "charm"
    (root / "src" / "prometheus_alert_rules").mkdir(parents=True)
    (root / "src" / "grafana_dashboards").mkdir()
    return root


def _context(machine, charm_root, gauges=None) -> testing.Context:
    StatefulCharm.machine = machine
    StatefulCharm.gauges = gauges
    return testing.Context(StatefulCharm, meta=META, actions=ACTIONS, charm_root=charm_root)


def test_a_related_unit_serves_its_status_and_gauges_after_each_hook(machine, charm_root):
    ctx = _context(machine, charm_root, JOBS)
    rel = testing.Relation("cos-agent", remote_app_name="otelcol")
    CosAgentProvider.clock = staticmethod(lambda: 1764000000.0)
    try:
        state = ctx.run(ctx.on.relation_joined(rel), testing.State(relations=[rel]))
    finally:
        CosAgentProvider.clock = staticmethod(__import__("time").time)

    text = machine.host().read(f"{unit_state.DIRECTORY}/stateful-0.prom")
    assert 'gpu_k8s_unit_status{status="blocked"} 1' in text  # the status the hook ended with
    assert "gpu_k8s_unit_state_updated_timestamp_seconds 1764000000" in text
    assert 'gpu_k8s_training_jobs{phase="running"} 2' in text
    config = json.loads(state.get_relation(rel.id).local_unit_data["config"])
    job = next(j for j in config["metrics_scrape_jobs"] if j["job_name"] == "stateful_unit-state")
    assert job["metrics_path"] == "/metrics/stateful-0"
    assert job["static_configs"] == [
        {"targets": [f"localhost:{unit_state.PORT}"], "labels": {"instance": "ip-10-0-1-17"}}
    ]
    alerts = [r["alert"] for g in config["metrics_alert_rules"]["groups"] for r in g["rules"]]
    assert {"GpuK8sUnitBlocked", "GpuK8sUnitStateStale", "ScrapeTargetDown"} <= set(alerts)

    # an action computes no gauges: the last ones stay, with the status it ended with
    StatefulCharm.gauges = None
    ctx.run(ctx.on.action("show"), state)
    text = machine.host().read(f"{unit_state.DIRECTORY}/stateful-0.prom")
    assert 'gpu_k8s_training_jobs{phase="queued"} 1' in text
    assert 'gpu_k8s_unit_status{status="blocked"} 1' in text


def test_without_a_cos_agent_nothing_runs_and_a_broken_relation_stops_it(machine, charm_root):
    ctx = _context(machine, charm_root, [])
    ctx.run(ctx.on.config_changed(), testing.State())
    assert unit_state.SERVICE not in machine.services
    assert machine.host().read(f"{unit_state.DIRECTORY}/stateful-0.prom") is None

    rel = testing.Relation("cos-agent", remote_app_name="otelcol")
    state = ctx.run(ctx.on.relation_joined(rel), testing.State(relations=[rel]))
    assert machine.services[unit_state.SERVICE].active
    ctx.run(ctx.on.relation_broken(state.get_relation(rel.id)), state)
    assert unit_state.SERVICE not in machine.services
    assert machine.host().read(f"{unit_state.DIRECTORY}/stateful-0.prom") is None


def test_a_server_that_cannot_stop_is_retried_and_the_hook_succeeds(machine, charm_root):
    ctx = _context(machine, charm_root, [])
    rel = testing.Relation("cos-agent", remote_app_name="otelcol")
    state = ctx.run(ctx.on.relation_joined(rel), testing.State(relations=[rel]))
    machine.fail(f"{unit_state.SYSTEMCTL} disable", stderr="Failed to connect to bus")
    out = ctx.run(ctx.on.relation_broken(state.get_relation(rel.id)), state)
    assert machine.services[unit_state.SERVICE].active
    ctx.run(ctx.on.update_status(), dataclasses.replace(out, relations=[]))
    assert unit_state.SERVICE not in machine.services


def test_a_failing_systemctl_leaves_the_hook_and_its_status_alone(machine, charm_root):
    ctx = _context(machine, charm_root, [])
    machine.fail(f"{unit_state.SYSTEMCTL} daemon-reload", stderr="Failed to connect to bus")
    rel = testing.Relation("cos-agent", remote_app_name="otelcol")
    out = ctx.run(ctx.on.relation_joined(rel), testing.State(relations=[rel]))
    assert out.unit_status == testing.BlockedStatus("set credentials")
    # the next hook installs it
    ctx.run(ctx.on.config_changed(), out)
    assert machine.services[unit_state.SERVICE].active
