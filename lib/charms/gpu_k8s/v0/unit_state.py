# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The charms' own state as Prometheus metrics, served on the machine for its COS agent.

Neither Juju nor the COS agent turns a unit's workload status into a metric: the agent
(opentelemetry-collector, formerly grafana-agent) only scrapes HTTP targets named in the
`cos_agent` databag. So every gpu-k8s unit related to an agent writes what its last hook
found into a file in the Prometheus text format (version 0.0.4, the format every
Prometheus and the collector's prometheus receiver read):

    gpu_k8s_unit_status{status="active|blocked|maintenance|waiting"}  1 for the current one
    gpu_k8s_unit_state_updated_timestamp_seconds                      when a hook last ended
    ...                                                               the charm's own gauges

at `/var/lib/gpu-k8s/unit-state/<app>-<n>.prom`, and one small server per machine
(`gpu-k8s-unit-state.service`: this file run as a program by the machine's python3,
standard library only) answers `GET /metrics/<app>-<n>` on 127.0.0.1:6447 with that file.
One server for every unit on the machine (the bundle puts three charms on machine 0):
the first unit that needs it installs it, each unit's scrape job reads only its own
file, and the last unit to leave removes it. Juju runs one hook at a time per machine
(the machine lock: juju/juju worker/uniter/operation/executor.go holds it through each
operation's prepare, execute and commit), so units never write these files
concurrently. A server is kept rather than HAProxy's `http-request return ... file`,
which reads the file once at start and would need a reload per hook, and which
efs-storage and tensorflow do not run.

The file is written when a hook ends (after the status is decided), so a unit whose
hooks fail or whose agent is down leaves a timestamp that stops moving: the
`GpuK8sUnitStateStale` rule (RULES) fires on it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the server runs without the charm's packages
    from charms.gpu_k8s.v0.system import Host

LIBID = "b1f6c0f2a8e94c3e9a4d5c7e2f1b0a93"
LIBAPI = 0
LIBPATCH = 3

PORT = 6447  # next to HAProxy's loopback metrics frontends (api_proxy: 6444-6446)
DIRECTORY = "/var/lib/gpu-k8s/unit-state"
SERVICE = "gpu-k8s-unit-state"
SERVICE_FILE = f"/etc/systemd/system/{SERVICE}.service"
PROGRAM = "/usr/local/lib/gpu-k8s/unit_state.py"
SYSTEMCTL = "/usr/bin/systemctl"
PYTHON = "/usr/bin/python3"  # Ubuntu's cloud images ship it (cloud-init runs on it)
# The text format's media type (prometheus/common expfmt: TextVersion 0.0.4). Prometheus
# 3 refuses a scrape whose Content-Type it cannot tell, unless the job sets
# fallback_scrape_protocol.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATUSES = ("active", "blocked", "maintenance", "waiting")
_STEM = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?-[0-9]+")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

# Hardened with what systemd offers a read-only loopback server: a user made up for it,
# a read-only view of the system (DynamicUser implies ProtectSystem=strict) in which the
# state directory stays readable (its files are 0644).
UNIT_TEXT = f"""\
# Written by the gpu-k8s charms (charms.gpu_k8s.v0.unit_state); removed by the last of them.
[Unit]
Description=gpu-k8s charms' state as Prometheus metrics on 127.0.0.1:{PORT}
After=network.target

[Service]
ExecStart={PYTHON} {PROGRAM} --directory {DIRECTORY} --port {PORT}
DynamicUser=yes
ProtectHome=yes
PrivateTmp=yes
NoNewPrivileges=yes
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
"""
RULES: dict[str, Any] = {
    "groups": [
        {
            "name": "unit-state",
            "rules": [
                {
                    "alert": "GpuK8sUnitBlocked",
                    "expr": 'gpu_k8s_unit_status{status="blocked"} == 1',
                    "for": "15m",
                    "labels": {"severity": "warning"},
                    "annotations": {
                        "summary": "{{ $labels.juju_unit }} has been blocked for 15 minutes",
                        "description": (
                            "The unit waits for the operator: `juju status "
                            "{{ $labels.juju_application }}` shows why and what to do."
                        ),
                    },
                },
                {
                    "alert": "GpuK8sUnitStateStale",
                    "expr": "time() - gpu_k8s_unit_state_updated_timestamp_seconds > 3600",
                    "for": "0m",
                    "labels": {"severity": "warning"},
                    "annotations": {
                        "summary": "{{ $labels.juju_unit }} has ended no hook for an hour",
                        "description": (
                            "Its update-status hook runs every 5 minutes (Juju's default "
                            "update-status-hook-interval), so its agent is down or its "
                            "hooks fail: `juju status {{ $labels.juju_application }}` and "
                            "`juju debug-log --include {{ $labels.juju_unit }}`."
                        ),
                    },
                },
            ],
        }
    ]
}


@dataclasses.dataclass(frozen=True)
class Gauge:
    """One sample of a charm's own gauge: `name{labels} value`."""

    name: str
    help: str
    value: float
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not _NAME.fullmatch(self.name) or not all(map(_LABEL.fullmatch, self.labels)):
            raise ValueError(f"not a Prometheus metric or label name: {self.name} {self.labels}")
        if not isinstance(self.value, (int, float)) or not all(
            isinstance(v, str) for v in self.labels.values()
        ):
            raise TypeError(f"{self.name}: the value must be a number, labels strings")

    def as_dict(self) -> dict[str, Any]:
        """The gauge as JSON (a charm keeps its last gauges for hooks that compute none)."""
        return dataclasses.asdict(self) | {"labels": dict(self.labels)}


def stem(unit_name: str) -> str:
    """`tensorflow/0` -> `tensorflow-0`: the unit's file and path on the server."""
    return unit_name.replace("/", "-")


def metrics_path(unit_name: str) -> str:
    """The path the unit's scrape job reads."""
    return f"/metrics/{stem(unit_name)}"


def _escape(value: str, *, quote: bool = True) -> str:
    """Escape backslash and newline, and `"` in label values only.

    The text format's parser refuses an escaped quote in HELP text.
    """
    value = value.replace("\\", "\\\\").replace("\n", "\\n")
    return value.replace('"', '\\"') if quote else value


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


def render(status: str, updated: float, gauges: Iterable[Gauge] = ()) -> str:
    """The unit's file: its status, when it was decided, and the charm's gauges.

    Samples of one name are grouped under one HELP and TYPE line, as the format asks. A
    status outside STATUSES (`unknown`, before any was set) gives 0 for every name.
    """
    own = [
        Gauge(
            "gpu_k8s_unit_status",
            "The unit's Juju workload status: 1 for the current one.",
            int(name == status),
            {"status": name},
        )
        for name in STATUSES
    ]
    own.append(
        Gauge(
            "gpu_k8s_unit_state_updated_timestamp_seconds",
            "When the unit's last hook ended (unix seconds).",
            updated,
        )
    )
    groups: dict[str, list[Gauge]] = {}
    for gauge in [*own, *gauges]:
        groups.setdefault(gauge.name, []).append(gauge)
    lines = []
    for name, samples in groups.items():
        lines.append(f"# HELP {name} {_escape(samples[0].help, quote=False)}")
        lines.append(f"# TYPE {name} gauge")
        for sample in samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
            series = f"{name}{{{labels}}}" if labels else name
            lines.append(f"{series} {_number(sample.value)}")
    return "\n".join(lines) + "\n"


def publish(host: Host, unit_name: str, text: str) -> None:
    """Write the unit's file and make sure the machine's server runs the newest program.

    A unit of another charm may have installed the server from an older or newer copy
    of this library: a newer LIBPATCH replaces the program and its unit file, an older or
    equal one leaves them (so charms built from two commits of one LIBPATCH never take
    turns; bump LIBPATCH with every change), writing the unit file only if it is missing.
    """
    host.write(f"{DIRECTORY}/{stem(unit_name)}.prom", text)
    installed = host.read(PROGRAM)
    changed = False
    if installed is None or _patch(installed) < LIBPATCH:
        # the unit file first: the program's LIBPATCH marks the install done, so a hook
        # that fails between the two writes leaves the older program, and the next redoes both
        changed = host.write(SERVICE_FILE, UNIT_TEXT) or changed
        changed = host.write(PROGRAM, Path(__file__).read_text()) or changed
    elif host.read(SERVICE_FILE) is None:  # a hook that failed between the two writes
        changed = host.write(SERVICE_FILE, UNIT_TEXT)
    if changed or not _active(host):  # (also after a hook whose systemctl failed)
        host.run(SYSTEMCTL, "daemon-reload")
        host.run(SYSTEMCTL, "enable", f"{SERVICE}.service")
        host.run(SYSTEMCTL, "restart", f"{SERVICE}.service")


def _active(host: Host) -> bool:
    from charms.gpu_k8s.v0.system import CommandError  # (not on the server's path)

    try:
        host.run(SYSTEMCTL, "is-active", "--quiet", f"{SERVICE}.service")
    except CommandError:  # exit 3: inactive; 4: no such unit (systemctl(1), Exit status)
        return False
    return True


def retire(host: Host, unit_name: str) -> bool:
    """Remove the unit's file; the last unit on the machine removes the server first.

    Returns True when the unit had a file (False: nothing to do). The file goes last, so
    a `systemctl` that fails leaves it for the next hook to try again.
    """
    own = host.path(f"{DIRECTORY}/{stem(unit_name)}.prom")
    if not own.exists():
        return False
    others = [p for p in host.path(DIRECTORY).glob("*.prom") if p.name != own.name]
    if not others:
        if host.path(SERVICE_FILE).exists():
            host.run(SYSTEMCTL, "disable", "--now", f"{SERVICE}.service")
            host.path(SERVICE_FILE).unlink()
            host.run(SYSTEMCTL, "daemon-reload")
        host.path(PROGRAM).unlink(missing_ok=True)
    own.unlink()
    return True


def _patch(program: str) -> int:
    found = re.search(r"^LIBPATCH = (\d+)$", program, re.M)
    return int(found.group(1)) if found else -1


# -- the server (runs as `python3 unit_state.py --directory D --port P`) -------------------


def _handler(directory: Path) -> type:
    import http.server  # only the server needs it: a charm's hooks do not pay its import

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the name http.server calls)
            """Answer `/metrics/<stem>` with the unit's file, anything else with 404."""
            name = self.path.split("?", 1)[0].removeprefix("/metrics/")
            if not self.path.startswith("/metrics/") or not _STEM.fullmatch(name):
                self._answer(404, b"unknown path; try /metrics/<app>-<unit number>\n")
                return
            try:
                body = (directory / f"{name}.prom").read_bytes()
            except FileNotFoundError:
                self._answer(404, f"no unit {name} on this machine\n".encode())
                return
            self._answer(200, body, CONTENT_TYPE)

        def _answer(self, code: int, body: bytes, kind: str = "text/plain; charset=utf-8"):
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Log nothing: a scrape every few seconds would fill the journal."""

    return Handler


def serve(directory: Path, port: int, host: str = "127.0.0.1") -> Any:
    """A server (not yet serving) that answers for the unit files in `directory`."""
    import http.server

    return http.server.ThreadingHTTPServer((host, port), _handler(directory))


def main(argv: list[str]) -> None:
    """Serve until stopped (systemd stops it with SIGTERM)."""
    import argparse

    parser = argparse.ArgumentParser(description="Serve gpu-k8s units' state files.")
    parser.add_argument("--directory", type=Path, default=Path(DIRECTORY))
    parser.add_argument("--port", type=int, default=PORT)
    args = parser.parse_args(argv)
    server = serve(args.directory, args.port)
    print(f"serving {args.directory} on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
