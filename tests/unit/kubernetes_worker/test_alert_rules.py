"""The worker's GPU alert rules, checked and unit-tested by the real promtool.

`promtool check rules` validates the file as Prometheus loads it; `promtool test rules`
feeds series shaped like the DCGM exporter's (its metric names and labels, 4.8.x:
`gpu`, `UUID`, `modelName`, `hostname`, and `pod`/`namespace` on an allocated GPU) and
asserts which alerts fire when (prometheus.io/docs/prometheus/latest/configuration/
unit_testing_rules/). promtool comes from Debian's `prometheus` package (.ci/run
installs it).
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

RULES = (
    Path(__file__).resolve().parents[3]
    / "charms"
    / "kubernetes-worker"
    / "src"
    / "prometheus_alert_rules"
    / "gpu.rules"
)
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"),
    reason="promtool is not installed: `sudo apt-get install prometheus` (.ci/run does)",
)

GPU = 'gpu="0",UUID="GPU-5f1b",modelName="NVIDIA A10G",hostname="gpu-0"'
GPU1 = 'gpu="1",UUID="GPU-77aa",modelName="NVIDIA A10G",hostname="gpu-0"'
# a MIG instance: the exporter adds GPU_I_PROFILE and GPU_I_ID (render_metrics.go)
MIG = 'gpu="3",UUID="GPU-a100",modelName="NVIDIA A100-SXM4-40GB",hostname="gpu-0",GPU_I_PROFILE="1g.5gb"'  # noqa: E501


def _promtool(*args: str) -> subprocess.CompletedProcess:
    assert PROMTOOL, "promtool is missing (CI installs Debian's prometheus package)"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


def _test_rules(path: Path, tests: dict) -> subprocess.CompletedProcess:
    """`promtool test rules` on `tests`, written to `path` (a rule test file)."""
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    return _promtool("test", "rules", str(path))


def _annotations() -> dict[str, dict[str, str]]:
    """Each alert name -> its annotations, as written in the rules (promtool compares them all)."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r["annotations"] for g in groups for r in g["rules"]}


def _alert(name: str, at: str, labels: dict | None = None, summary: str = "") -> dict:
    """One alert_rule_test case: `labels` and `summary` of the firing alert, or none fires.

    The description is DESCRIPTIONS[name], as the operator reads it.
    """
    case: dict = {"eval_time": at, "alertname": name, "exp_alerts": []}
    if labels is not None:
        case["exp_alerts"] = [
            {
                "exp_labels": labels,
                "exp_annotations": {"summary": summary, "description": DESCRIPTIONS[name]},
            }
        ]
    return case


DESCRIPTIONS = {
    "GpuPowerBrakeSlowdown": _annotations()["GpuPowerBrakeSlowdown"]["description"],
    "GpuUncorrectableEccErrors": (
        "Uncorrectable (double-bit) ECC errors on GPU 0 in the last 10 minutes: a job on it "
        "may have computed with corrupt memory."
    ),
    "GpuTemperatureHigh": _annotations()["GpuTemperatureHigh"]["description"],
    "GpuThermalThrottling": _annotations()["GpuThermalThrottling"]["description"],
    "GpuAllocatedButIdle": (
        "GPU 0 on gpu-0 is allocated to tensorflow/stuck-worker-0 but has been used less "
        "than 5% for 30 minutes (3.0% lately): a finished or stuck job may be holding it."
    ),
}


STUCK = {"pod": "stuck-worker-0", "namespace": "tensorflow", "container": "tensorflow"}
MIG_LABELS = {
    "gpu": "3",
    "UUID": "GPU-a100",
    "modelName": "NVIDIA A100-SXM4-40GB",
    "GPU_I_PROFILE": "1g.5gb",
    "GPU_I_ID": "1",
    "namespace": "tensorflow",
    "container": "tensorflow",
}


def _gpu1_labels(severity: str, **extra: str) -> dict:
    return {**_gpu_labels(severity, **extra), "gpu": "1", "UUID": "GPU-77aa"}


def _gpu_labels(severity: str, **extra: str) -> dict:
    return {
        "gpu": "0",
        "UUID": "GPU-5f1b",
        "modelName": "NVIDIA A10G",
        "hostname": "gpu-0",
        "severity": severity,
        **extra,
    }


def test_the_rules_load_in_prometheus():
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 15 rules found" in done.stdout


def test_each_alert_fires_when_it_should_and_not_otherwise(tmp_path):
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # one double-bit ECC error at minute 3
                    {"series": f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{GPU}}}", "values": "0 0 0 1 1"},
                    {"series": f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{GPU}}}", "values": "0x5"},
                    {"series": f"DCGM_FI_DEV_GPU_TEMP{{{GPU}}}", "values": "90x20"},
                    # throttled for heat half the time (30 s a minute, in ns) all along;
                    # GPU 1 only 3 s a minute: not worth an alert
                    {
                        "series": f"DCGM_FI_DEV_THERMAL_VIOLATION{{{GPU}}}",
                        "values": "0+30000000000x20",
                    },
                    {
                        "series": f"DCGM_FI_DEV_THERMAL_VIOLATION{{{GPU1}}}",
                        "values": "0+3000000000x20",
                    },
                    # GPU 0 at its power cap all along (a busy GPU: no alert); GPU 1's
                    # power brake engaged from minute 1
                    {
                        "series": f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{GPU},clock_event="power_cap"}}',
                        "values": "3x20",
                    },
                    {
                        "series": (
                            f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{GPU1},clock_event="hw_power_brake"}}'
                        ),
                        "values": "_ 2x20",
                    },
                    # a MIG instance held by an idle pod: no GPU_UTIL there (0), the
                    # graphics engine's active ratio says it is idle; another one is busy
                    {
                        "series": (
                            f'DCGM_FI_DEV_GPU_UTIL{{{MIG},GPU_I_ID="1",pod="mig-idle",'
                            'namespace="tensorflow",container="tensorflow"}'
                        ),
                        "values": "0x40",
                    },
                    {
                        "series": (
                            f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{MIG},GPU_I_ID="1",pod="mig-idle",'
                            'namespace="tensorflow",container="tensorflow"}'
                        ),
                        "values": "0.01x40",
                    },
                    {
                        "series": (
                            f'DCGM_FI_DEV_GPU_UTIL{{{MIG},GPU_I_ID="2",pod="mig-busy",'
                            'namespace="tensorflow",container="tensorflow"}'
                        ),
                        "values": "0x40",
                    },
                    {
                        "series": (
                            f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{MIG},GPU_I_ID="2",pod="mig-busy",'
                            'namespace="tensorflow",container="tensorflow"}'
                        ),
                        "values": "0.8x40",
                    },
                    # GPU 0 is held by a pod that does nothing; GPU 1 by one that works;
                    # GPU 2 is free and idle (no pod labels: nobody holds it)
                    {
                        "series": (
                            f'DCGM_FI_DEV_GPU_UTIL{{{GPU},pod="stuck-worker-0",'
                            'namespace="tensorflow",container="tensorflow"}'
                        ),
                        "values": "3x40",
                    },
                    {
                        "series": (
                            'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-77aa",modelName="NVIDIA '
                            'A10G",hostname="gpu-0",pod="busy-worker-0",namespace="tensorflow",'
                            'container="tensorflow"}'
                        ),
                        "values": "95x40",
                    },
                    {
                        "series": (
                            'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-9c3d",modelName="NVIDIA '
                            'A10G",hostname="gpu-0"}'
                        ),
                        "values": "0x40",
                    },
                ],
                "alert_rule_test": [
                    _alert("GpuUncorrectableEccErrors", "2m", None),
                    _alert(
                        "GpuUncorrectableEccErrors",
                        "4m",
                        _gpu_labels("critical"),
                        "GPU 0 on gpu-0 has double-bit ECC errors",
                    ),
                    _alert("GpuRowRemapFailed", "3m", None),
                    _alert("GpuTemperatureHigh", "5m", None),  # not yet 10 minutes
                    _alert(
                        "GpuTemperatureHigh",
                        "12m",
                        _gpu_labels("warning"),
                        "GPU 0 on gpu-0 is at 90 C",
                    ),
                    _alert("GpuThermalThrottling", "5m", None),
                    _alert(
                        "GpuThermalThrottling",
                        "16m",
                        _gpu_labels("warning"),
                        "GPU 0 on gpu-0 is throttled for heat",
                    ),
                    _alert("GpuPowerBrakeSlowdown", "4m", None),  # not yet 5 minutes
                    _alert(
                        "GpuPowerBrakeSlowdown",
                        "7m",
                        _gpu1_labels("warning", clock_event="hw_power_brake"),
                        "GPU 1 on gpu-0 is slowed by its power brake",
                    ),
                    _alert("GpuAllocatedButIdle", "20m", None),  # not yet 30 minutes
                    {
                        "eval_time": "31m",
                        "alertname": "GpuAllocatedButIdle",
                        "exp_alerts": [
                            *_alert(
                                "GpuAllocatedButIdle",
                                "31m",
                                _gpu_labels("warning", **STUCK),
                                "Pod tensorflow/stuck-worker-0 holds an idle GPU",
                            )["exp_alerts"],
                            {
                                "exp_labels": {
                                    **_gpu_labels("warning", pod="mig-idle"),
                                    **MIG_LABELS,
                                },
                                "exp_annotations": {
                                    "summary": "Pod tensorflow/mig-idle holds an idle GPU",
                                    "description": (
                                        "GPU 3 on gpu-0 is allocated to tensorflow/mig-idle "
                                        "but has been used less than 5% for 30 minutes (1.0% "
                                        "lately): a finished or stuck job may be holding it."
                                    ),
                                },
                            },
                        ],
                    },
                ],
            }
        ],
    }
    done = _test_rules(tmp_path / "gpu_test.yml", tests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_wrong_expectation_fails(tmp_path):
    """The harness can fail: an alert that must not fire, asked to."""
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"DCGM_FI_DEV_GPU_TEMP{{{GPU}}}", "values": "40x20"},
                ],
                "alert_rule_test": [
                    _alert("GpuTemperatureHigh", "15m", _gpu_labels("warning"), "hot"),
                ],
            }
        ],
    }
    assert _test_rules(tmp_path / "wrong_test.yml", tests).returncode != 0


def test_a_quarantined_gpu_alerts_at_once_and_not_for_a_healthy_one(tmp_path):
    """GpuQuarantined reads the watcher's own gauge (gpu_watcher.py), scraped from the node."""
    uuid = "GPU-7f3e9a2c-5d41-4b8e-9c0a-1e2f3a4b5c6d"
    labels = {"gpu": "1", "uuid": uuid, "node": "gpu-0"}
    other = {"gpu": "0", "uuid": "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae", "node": "gpu-0"}

    def series(values: dict) -> str:
        return "gpu_k8s_gpu_quarantined{" + ",".join(f'{k}="{v}"' for k, v in values.items()) + "}"

    annotations = _annotations()["GpuQuarantined"]
    description = (
        annotations["description"]
        .replace("{{ $labels.gpu }}", "1")
        .replace("{{ $labels.uuid }}", uuid)
        .replace("{{ $labels.node }}", "gpu-0")
    )
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": series(labels), "values": "0 0 1 1"},
                    {"series": series(other), "values": "0 0 0 0"},
                ],
                "alert_rule_test": [
                    {"eval_time": "1m", "alertname": "GpuQuarantined", "exp_alerts": []},
                    {
                        "eval_time": "2m",
                        "alertname": "GpuQuarantined",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "critical", **labels},
                                "exp_annotations": {
                                    "summary": "GPU 1 on gpu-0 is quarantined",
                                    "description": description,
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    done = _test_rules(tmp_path / "quarantine_test.yml", tests)
    assert done.returncode == 0, done.stdout + done.stderr


def _watcher_series(name: str, **labels: str) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _rendered(alert: str, labels: dict[str, str], value: str = "") -> dict[str, str]:
    """The alert's annotations as Prometheus fills in these labels (and $value)."""
    out = {}
    for key, text in _annotations()[alert].items():
        for name, label in labels.items():
            text = text.replace(f"{{{{ $labels.{name} }}}}", label)
        out[key] = text.replace("{{ $value | humanizeDuration }}", value)
    return out


def _firing(alert: str, severity: str, labels: dict[str, str], value: str = "") -> dict:
    """One alert promtool is to see firing: its labels and its rendered annotations."""
    return {
        "exp_labels": {"severity": severity, **labels},
        "exp_annotations": _rendered(alert, labels, value),
    }


def test_a_failed_repair_and_a_long_quarantine_alert_and_nothing_else_does(tmp_path):
    """A failed repair fires at once, clears after the hour; only a 6-hour quarantine fires.

    The series are the watcher's (gpu_watcher.py `metrics`).
    """
    sick = {"gpu": "1", "uuid": "GPU-7f3e", "node": "gpu-0"}
    well = {"gpu": "0", "uuid": "GPU-0b11", "node": "gpu-0"}
    repairs = "gpu_k8s_gpu_repairs_total"
    since = "gpu_k8s_gpu_quarantined_since_timestamp_seconds"
    failed = {**sick, "method": "reset", "result": "failed"}
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "10m",
                "input_series": [
                    # zero from the start (the watcher's zero series), the reset fails at
                    # 30m; the reboot after it works; GPU 0 never needs one
                    {"series": _watcher_series(repairs, **failed), "values": "0 0 0 1x40"},
                    {
                        "series": _watcher_series(repairs, **sick, method="reboot", result="ok"),
                        "values": "0 0 0 0 1x40",
                    },
                    {
                        "series": _watcher_series(
                            repairs, **well, method="reset", result="failed"
                        ),
                        "values": "0x40",
                    },
                    # GPU 1 quarantined at t=600 s until 7h; GPU 0 for 2 hours only
                    {"series": _watcher_series(since, **sick), "values": "_ 600x41"},
                    {"series": _watcher_series(since, **well), "values": "_ 600x12 _x30"},
                ],
                "alert_rule_test": [
                    {"eval_time": "20m", "alertname": "GpuRepairFailed", "exp_alerts": []},
                    {
                        "eval_time": "40m",
                        "alertname": "GpuRepairFailed",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "critical", **failed},
                                "exp_annotations": _rendered("GpuRepairFailed", failed),
                            }
                        ],
                    },
                    {"eval_time": "150m", "alertname": "GpuRepairFailed", "exp_alerts": []},
                    {"eval_time": "6h", "alertname": "GpuQuarantinedTooLong", "exp_alerts": []},
                    {
                        "eval_time": "6h20m",
                        "alertname": "GpuQuarantinedTooLong",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", **sick},
                                "exp_annotations": _rendered(
                                    "GpuQuarantinedTooLong", sick, "6h 10m 0s"
                                ),
                            }
                        ],
                    },
                ],
            }
        ],
    }
    done = _test_rules(tmp_path / "repair_test.yml", tests)
    assert done.returncode == 0, done.stdout + done.stderr


CATALOG = RULES.parents[1] / "xid_catalog.json"


def _group(name: str) -> dict:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return next(g for g in groups if g["name"] == name)


def _seconds(duration: str) -> int:
    """A Prometheus duration of one unit (`15s`, `1m`) in seconds."""
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def test_the_xid_alerts_follow_the_catalog_and_name_no_xid():
    """One classification (xid_catalog.json): the rules read the watcher's `class` label.

    A rule that lists XIDs is a second classification that drifts from NVIDIA's catalog
    (the review of issue 32: 94 is RESTART_APP, 63 and 92 IGNORE, 46/109/110 reset-gpu,
    yet a hard-coded list called them otherwise; NVIDIA/k8s-device-plugin#1974).
    """
    import gpu_watcher  # noqa: PLC0415 - the watcher's own constants, stdlib only

    catalog = json.loads(CATALOG.read_text())
    actions = {entry["action"] for entry in catalog["xids"].values()}
    actions |= {catalog["unknown"]["action"]}
    actions |= {entry["action"] for key, entry in catalog["health"].items() if key != "about"}
    actions |= (
        set(catalog["recovery_actions"].values()) if "recovery_actions" in catalog else set()
    )
    actions -= {"by-recovery-action"}  # XID 154: classified by the action its line names
    rules = {
        r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
    }
    for rule in rules.values():
        assert not re.search(r'xid\s*(=~|!~|=|!=)\s*"\d', rule["expr"]), rule["alert"]
        assert "DCGM_EXP_XID_ERRORS_COUNT" not in rule["expr"], rule["alert"]
        assert "DCGM_FI_DEV_XID_ERRORS" not in rule["expr"], rule["alert"]
    hardware = set(re.findall(r'class=~"([^"]+)"', rules["GpuHardwareFault"]["expr"]))
    assert hardware == {"|".join(gpu_watcher.QUARANTINE)}
    assert set(gpu_watcher.QUARANTINE) == actions - {"application", "info"}
    assert set(re.findall(r'class="([^"]+)"', rules["GpuApplicationXid"]["expr"])) == {
        "application"
    }


ROOT = RULES.parents[4]
COS_OVERLAY = ROOT / "bundles" / "overlays" / "cos.yaml"
COLLECTOR_DEFAULT = "1m"  # global_scrape_interval's default (opentelemetry-collector.yaml)
# Issue 32 item 1: the COS alert within 60 s of the fault. Of those, fault to quarantine
# (the watcher: `tox -e bench`, fault to taint at most 9.6 s on a busy run, the taint
# coming after the quarantine) and the collector's remote write (its metrics pipeline
# has no batch processor and its prometheusremotewrite exporter no WAL at 9f17dec:
# config_manager.py add_remote_write, prometheus_remotewrite_wal_config) get this much:
FAULT_TO_QUARANTINE_AND_WRITE = 10
TARGET = 60


def _collector_interval() -> str:
    """The overlay's global_scrape_interval: every job's, the watcher's included."""
    overlay = yaml.safe_load(COS_OVERLAY.read_text())
    return overlay["applications"]["otelcol"]["options"]["global_scrape_interval"]


def _worst_case(scrape: int, evaluation: int, hold: int) -> tuple[int, int]:
    """(quarantine, first evaluation that fires) when both come at the worst moment.

    The watcher is scraped at 1 s, 1 + S, 1 + 2S ... and its group evaluated at 0, E, 2E
    (promtool's grid): the quarantine comes just after the scrape at 1 + S and is seen
    by the scrape at 1 + 2S, 1 s after an evaluation when S is a multiple of E. The rule
    is active from the next evaluation and fires `for:` later, at an evaluation.
    """
    quarantine = 1 + scrape
    active = -(-(1 + 2 * scrape) // evaluation) * evaluation
    return quarantine, active + -(-hold // evaluation) * evaluation


def _quarantine_test(
    tmp_path: Path, scrape: int, evaluation: int, cases: list[tuple[int, list]]
) -> subprocess.CompletedProcess:
    """GPU 1 quarantined just after the scrape at 1 + S; `cases`: (eval_time, alerts)."""
    labels = {"gpu": "1", "uuid": "GPU-7f3e", "node": "gpu-0"}
    last = max(at for at, _ in cases)
    values = ["_"] * (last + 1)  # one slot a second, a sample at each scrape
    for at in range(1, last + 1, scrape):
        values[at] = "1" if at > 1 + scrape else "0"
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": f"{evaluation}s",
        "tests": [
            {
                "interval": "1s",
                "input_series": [
                    {
                        "series": _watcher_series("gpu_k8s_gpu_quarantined", **labels),
                        "values": " ".join(values),
                    }
                ],
                "alert_rule_test": [
                    {"eval_time": f"{at}s", "alertname": "GpuQuarantined", "exp_alerts": alerts}
                    for at, alerts in cases
                ],
            }
        ],
    }
    return _test_rules(tmp_path / f"timing_{scrape}_{evaluation}.yml", tests)


def test_gpu_quarantined_fires_within_60_s_at_the_collector_interval_the_overlay_sets(tmp_path):
    """Issue 32 item 1: the COS alert within 60 s of the fault.

    The collector scrapes every job at its global_scrape_interval (S: it overwrites the
    job's own, gpu_health.py), set by bundles/overlays/cos.yaml; the watcher's group is
    evaluated every `interval` (E; promtool evaluates every group at the test's
    evaluation_interval, so the test takes it from the group) and GpuQuarantined holds for
    its `for:` (F). At worst the alert fires S + E + F after the quarantine (promtool shows
    the exact evaluation, and none before), which with the fault to quarantine and the
    remote write must stay within 60 s. At the collector's default (1m) it cannot, and the
    docs say the number the overlay gives.
    """
    group = _group("gpu-watcher")
    evaluation = _seconds(group["interval"])
    quarantined = next(r for r in group["rules"] if r["alert"] == "GpuQuarantined")
    hold = _seconds(quarantined.get("for", "0s"))
    scrape = _seconds(_collector_interval())
    bound = scrape + evaluation + hold
    assert bound + FAULT_TO_QUARANTINE_AND_WRITE <= TARGET, (scrape, evaluation, hold)
    labels = {"gpu": "1", "uuid": "GPU-7f3e", "node": "gpu-0"}
    firing = [
        {
            "exp_labels": {"severity": "critical", **labels},
            "exp_annotations": _rendered("GpuQuarantined", labels),
        }
    ]
    quarantine, fires = _worst_case(scrape, evaluation, hold)
    assert fires - quarantine <= bound
    done = _quarantine_test(
        tmp_path, scrape, evaluation, [(fires - evaluation, []), (fires, firing)]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the collector's default misses the target: not firing yet when it is up
    default = _seconds(COLLECTOR_DEFAULT)
    quarantine, fires = _worst_case(default, evaluation, hold)
    assert fires - quarantine + FAULT_TO_QUARANTINE_AND_WRITE > TARGET
    late = quarantine + TARGET - FAULT_TO_QUARANTINE_AND_WRITE
    missed = _quarantine_test(
        tmp_path, default, evaluation, [(late - late % evaluation, []), (fires, firing)]
    )
    assert missed.returncode == 0, missed.stdout + missed.stderr
    # what the pages tell the operator: the overlay's interval, the by-hand line, the bound
    how_to = ROOT / "docs" / "how-to"
    by_hand = re.findall(r"global_scrape_interval=(\w+)", (how_to / "overlays.md").read_text())
    assert by_hand == [_collector_interval()]
    for name in ("observe.md", "gpu-day-2.md"):
        text = " ".join((how_to / name).read_text().split())
        assert f"`global_scrape_interval` {_collector_interval()}" in text, name
        assert f"within {bound} s of the quarantine" in text, name
    assert f"within {bound} s" in quarantined["annotations"]["description"]


def test_hardware_and_application_faults_alert_from_the_first_one_and_clear(tmp_path):
    """The watcher's fault counter: a new series (its first fault) alerts at once.

    GPU 1: XID 79 (catalog: reboot) at 1m, then again at 9m; GPU 0: XID 13 (application)
    at 2m; XID 63 (info: IGNORE, a row remap recorded) alerts nothing.
    """
    faults = "gpu_k8s_gpu_faults_total"
    fell = {"node": "gpu-0", "gpu": "1", "uuid": "GPU-7f3e", "xid": "79", "reason": "Xid79"}
    app = {"node": "gpu-0", "gpu": "0", "uuid": "GPU-0b11", "xid": "13", "reason": "Xid13"}
    info = {**app, "xid": "63", "reason": "Xid63"}
    fell_labels = {**fell, "class": "reboot"}
    app_labels = {**app, "class": "application"}

    def firing(alert: str, severity: str, labels: dict) -> list:
        return [_firing(alert, severity, labels)]

    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": _watcher_series(faults, **fell_labels), "values": "_ 1x7 2x10"},
                    {"series": _watcher_series(faults, **app_labels), "values": "_ _ 1x15"},
                    {
                        "series": _watcher_series(faults, **info, **{"class": "info"}),
                        "values": "_ 1x15",
                    },
                ],
                "alert_rule_test": [
                    {"eval_time": "30s", "alertname": "GpuHardwareFault", "exp_alerts": []},
                    {
                        "eval_time": "1m",
                        "alertname": "GpuHardwareFault",
                        "exp_alerts": firing("GpuHardwareFault", "critical", fell_labels),
                    },
                    {"eval_time": "7m", "alertname": "GpuHardwareFault", "exp_alerts": []},
                    {
                        "eval_time": "9m",
                        "alertname": "GpuHardwareFault",
                        "exp_alerts": firing("GpuHardwareFault", "critical", fell_labels),
                    },
                    {
                        "eval_time": "2m",
                        "alertname": "GpuApplicationXid",
                        "exp_alerts": firing("GpuApplicationXid", "warning", app_labels),
                    },
                    {"eval_time": "8m", "alertname": "GpuApplicationXid", "exp_alerts": []},
                ],
            }
        ],
    }
    done = _test_rules(tmp_path / "faults_test.yml", tests)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_escalation_held_back_for_one_team_warns_within_the_hour(tmp_path):
    """rereview32 finding 2: `XidRepeatedOneTeam` was an event and a counter nobody read.

    The counter appears at its first count (the watcher has no zero series for a
    namespace it has not seen), so its first hour fires as an increase does; a count
    older than the hour fires nothing, except in the first hour Prometheus sees it.
    """
    held = {"gpu": "0", "uuid": "GPU-0b11", "node": "gpu-0", "namespace": "team-a"}
    old = {**held, "gpu": "1", "uuid": "GPU-7f3e"}
    series = "gpu_k8s_gpu_xid_repeated_one_team_total"

    def fires(at: str, *alerts: dict[str, str]) -> dict:
        expected = [_firing("GpuXidRepeatedOneTeam", "warning", labels) for labels in alerts]
        return {"eval_time": at, "alertname": "GpuXidRepeatedOneTeam", "exp_alerts": expected}

    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "10m",
                "input_series": [
                    # first held back at 30m, again at 2h30m
                    {"series": _watcher_series(series, **held), "values": "_ _ _ 1x11 2x10"},
                    # held back before Prometheus first scraped it, never again
                    {"series": _watcher_series(series, **old), "values": "1x30"},
                ],
                "alert_rule_test": [
                    fires("20m", old),
                    fires("40m", held, old),
                    fires("2h"),
                    fires("2h40m", held),
                    fires("4h"),
                ],
            }
        ],
    }
    done = _test_rules(tmp_path / "one_team_test.yml", tests)
    assert done.returncode == 0, done.stdout + done.stderr


# The watcher's node-wide "since" gauges (gpu_watcher.py `metrics`), each set from t=60 s
# and gone at its end: (gauge, alert, its last value's time, no alert at, alert at and
# for how long, no alert again at)
SINCE_ALERTS = {
    # rereview44c R2: nvidia-smi blind outside a driver update (DRIVER_BLIND_S); the
    # driver answers again after 15m
    "blind": (
        "gpu_k8s_gpu_driver_unavailable_since_timestamp_seconds",
        "GpuDriverUnavailable",
        "_ 60x14",
        ("10m", "12m", "11m 0s", "21m"),
    ),
    # final44b N1: nvidia-smi's polls unanswered, a hung driver (SMI_HUNG_S: past the same
    # 3 minutes every GPU is quarantined for a reboot); it answers again after 6m
    "hung": (
        "gpu_k8s_gpu_smi_hung_since_timestamp_seconds",
        "GpuSmiHung",
        "_ 60x5",
        ("4m", "5m", "4m 0s", "12m"),
    ),
}


@pytest.mark.parametrize("kind", sorted(SINCE_ALERTS))
def test_a_watcher_since_gauge_alerts_past_its_bound_until_it_ends(tmp_path, kind):
    """nvidia-smi blind to the driver, or hung, outside a pause is bounded by an alert.

    The watcher's gauge says since when; it ends when nvidia-smi answers again, and so
    does the alert.
    """
    name, alert, values, (quiet, fires, value, ended) = SINCE_ALERTS[kind]
    node = {"node": "gpu-0"}
    series = [{"series": _watcher_series(name, **node), "values": values}]
    firing = _firing(alert, "critical", node, value)
    cases = [
        {"eval_time": at, "alertname": alert, "exp_alerts": alerts}
        for at, alerts in ((quiet, []), (fires, [firing]), (ended, []))
    ]
    tests = {"rule_files": [str(RULES)], "evaluation_interval": "1m"}
    tests["tests"] = [{"interval": "1m", "input_series": series, "alert_rule_test": cases}]
    done = _test_rules(tmp_path / f"{kind}_test.yml", tests)
    assert done.returncode == 0, done.stdout + done.stderr
