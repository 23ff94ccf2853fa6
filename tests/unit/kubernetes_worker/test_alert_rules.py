"""The worker's GPU alert rules, checked and unit-tested by the real promtool.

`promtool check rules` validates the file as Prometheus loads it; `promtool test rules`
feeds series shaped like the DCGM exporter's (its metric names and labels, 4.8.x:
`gpu`, `UUID`, `modelName`, `hostname`, and `pod`/`namespace` on an allocated GPU) and
asserts which alerts fire when (prometheus.io/docs/prometheus/latest/configuration/
unit_testing_rules/). promtool comes from Debian's `prometheus` package (.ci/run
installs it).
"""

from __future__ import annotations

import os
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


def _promtool(*args: str) -> subprocess.CompletedProcess:
    assert PROMTOOL, "promtool is missing (CI installs Debian's prometheus package)"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


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
    "GpuXidError": (
        "The NVIDIA driver reported XID 79 for GPU 0 (NVIDIA A10G, GPU-5f1b). Look it up in "
        "NVIDIA's XID catalogue; 48, 63, 64, 74, 79, 94 and 95 usually mean the GPU must be "
        "reset or the node drained and rebooted."
    ),
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
    assert "SUCCESS: 7 rules found" in done.stdout


def test_each_alert_fires_when_it_should_and_not_otherwise(tmp_path):
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # XID 79 (fallen off the bus) from minute 2 on
                    {"series": f"DCGM_FI_DEV_XID_ERRORS{{{GPU}}}", "values": "0 0 79 79 79"},
                    # one double-bit ECC error at minute 3
                    {"series": f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{GPU}}}", "values": "0 0 0 1 1"},
                    {"series": f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{GPU}}}", "values": "0x5"},
                    {"series": f"DCGM_FI_DEV_GPU_TEMP{{{GPU}}}", "values": "90x20"},
                    # throttled for heat all along; never for power
                    {"series": f"DCGM_FI_DEV_THERMAL_VIOLATION{{{GPU}}}", "values": "0+5000x20"},
                    {"series": f"DCGM_FI_DEV_POWER_VIOLATION{{{GPU}}}", "values": "7x20"},
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
                    _alert("GpuXidError", "1m", None),
                    _alert(
                        "GpuXidError",
                        "3m",
                        _gpu_labels("critical"),
                        "GPU 0 on gpu-0 reported XID 79",
                    ),
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
                    _alert("GpuPowerThrottling", "16m", None),
                    _alert("GpuAllocatedButIdle", "20m", None),  # not yet 30 minutes
                    _alert(
                        "GpuAllocatedButIdle",
                        "31m",
                        _gpu_labels(
                            "warning",
                            pod="stuck-worker-0",
                            namespace="tensorflow",
                            container="tensorflow",
                        ),
                        "Pod tensorflow/stuck-worker-0 holds an idle GPU",
                    ),
                ],
            }
        ],
    }
    path = tmp_path / "gpu_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    done = _promtool("test", "rules", str(path))
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
    path = tmp_path / "wrong_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    assert _promtool("test", "rules", str(path)).returncode != 0
