#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Draw docs/architecture.svg from the bundle: charms, their relations, what each creates.

The applications, their machines and every relation (with both endpoints and the
interface) come from bundles/gpu-k8s.yaml and the charms' charmcraft.yaml, so the
picture cannot disagree with what `juju deploy` does; where each box goes and what each
charm creates in AWS and Kubernetes are below. `tests/unit/docs/test_architecture.py`
fails when the committed picture is not what this program draws now.

    python tools/architecture.py           # write docs/architecture.svg
    python tools/architecture.py --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from xml.sax.saxutils import escape

import yaml

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "bundles" / "gpu-k8s.yaml"
OUTPUT = ROOT / "docs" / "architecture.svg"

WIDTH, HEIGHT = 1110, 680
BOX_W, BOX_H = 290, 46
# Where each application's box goes (x, y of its top left corner): the relations from
# the control plane pass between efs-storage and tensorflow to the workers.
PLACES = {
    "kubernetes-control-plane": (225, 110),
    "tensorflow": (30, 260),
    "efs-storage": (440, 260),
    "kubernetes-worker": (100, 600),
    "kubernetes-worker-gpu": (420, 600),
}
# Side panels: (x, y, height).
AWS_PANEL = (780, 330, 130)
KUBERNETES_PANEL = (780, 80, 190)
# What each charm makes outside Juju, drawn under its box or in the side panels.
CREATES = {
    "kubernetes-control-plane": "kubeadm, HAProxy on :6444, Calico",
    "efs-storage": "EFS, mount targets, NFS SG, PV+PVC",
    "tensorflow": "JobSets, TensorBoard, TF Serving",
    "kubernetes-worker": "CPU node: containerd, kubelet",
    "kubernetes-worker-gpu": "GPU driver, toolkit, CDI, taint",
}
AWS = (
    "EC2 instances (Juju machines)",
    "EFS file system (tag gpu-k8s:model)",
    "one mount target per subnet",
    "security group: NFS from the nodes",
)
KUBERNETES = (
    "kube-system: Calico, NVIDIA device plugin,",
    "  DCGM exporter, MIG manager (GPU nodes),",
    "  kube-state-metrics (leader's machine)",
    "jobset-system, kueue-system: JobSet, Kueue",
    "ClusterQueue team-<app>, cohort gpu-k8s",
    "namespace <app>: ServiceAccount + RBAC,",
    "  PVC on EFS, JobSets, LocalQueue training,",
    "  TensorBoard, TF Serving, import/export Jobs",
)
FONT = "font-family='DejaVu Sans, Arial, sans-serif'"


def relations() -> list[tuple[str, str, str, str, str]]:
    """(provider app, provider endpoint, requirer app, requirer endpoint, interface)."""
    bundle = yaml.safe_load(BUNDLE.read_text())
    apps = bundle["applications"]
    out = []
    for left, right in bundle["relations"]:
        ends = []
        for end in (left, right):
            app, endpoint = end.split(":")
            charm = Path(apps[app]["charm"]).name.removesuffix(".charm")
            meta = yaml.safe_load((ROOT / "charms" / charm / "charmcraft.yaml").read_text())
            kind = "provides" if endpoint in (meta.get("provides") or {}) else "requires"
            ends.append((kind, app, endpoint, meta[kind][endpoint]["interface"]))
        ends.sort()  # provides before requires
        (_, p_app, p_end, interface), (_, r_app, r_end, _) = ends
        out.append((p_app, p_end, r_app, r_end, interface))
    return out


def relation_label(provider_end: str, requirer_end: str, interface: str) -> str:
    """`workers → cluster (kubernetes-cluster)`; just `kube-api` when all three agree."""
    if provider_end == requirer_end == interface:
        return interface
    return f"{provider_end} → {requirer_end} ({interface})"


def _box(x: int, y: int, title: str, note: str, fill: str) -> list[str]:
    return [
        f"<rect x='{x}' y='{y}' width='{BOX_W}' height='{BOX_H}' rx='6' "
        f"fill='{fill}' stroke='#333'/>",
        f"<text x='{x + 10}' y='{y + 19}' {FONT} font-size='14' font-weight='bold'>"
        f"{escape(title)}</text>",
        f"<text x='{x + 10}' y='{y + 37}' {FONT} font-size='11'>{escape(note)}</text>",
    ]


def _anchor(app: str, toward: tuple[int, int]) -> tuple[int, int]:
    """The middle of the side of `app`'s box that faces `toward`."""
    x, y = PLACES[app]
    cx, cy = x + BOX_W // 2, y + BOX_H // 2
    tx, ty = toward
    if abs(tx - cx) > abs(ty - cy) * 2:
        return (x + BOX_W if tx > cx else x, cy)
    return (cx, y + BOX_H if ty > cy else y)


def render() -> str:
    """The SVG text (deterministic: the same bundle gives the same bytes)."""
    bundle = yaml.safe_load(BUNDLE.read_text())
    apps = bundle["applications"]
    unplaced = sorted(set(apps) - set(PLACES))
    if unplaced:
        raise SystemExit(f"tools/architecture.py has no place for {', '.join(unplaced)}")
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' "
        f"viewBox='0 0 {WIDTH} {HEIGHT}'>",
        f"<rect width='{WIDTH}' height='{HEIGHT}' fill='white'/>",
        f"<text x='30' y='36' {FONT} font-size='20' font-weight='bold'>gpu-k8s: "
        "juju deploy ./bundles/gpu-k8s.yaml --trust</text>",
        f"<text x='30' y='58' {FONT} font-size='12'>boxes: applications (charm); arrows: "
        "relations, provider endpoint → requirer endpoint (interface)</text>",
        # machine 0
        "<rect x='15' y='80' width='740' height='250' rx='10' fill='none' "
        "stroke='#777' stroke-dasharray='6 4'/>",
        f"<text x='25' y='98' {FONT} font-size='12' fill='#555'>machine 0 "
        "(efs-storage and tensorflow only call the AWS and Kubernetes APIs)</text>",
    ]
    for app in sorted(apps):
        x, y = PLACES[app]
        charm = Path(apps[app]["charm"]).name.removesuffix(".charm")
        note = CREATES[app] if charm == app else f"({charm}) {CREATES[app]}"
        fill = "#e8f1fb" if "worker" in app else "#fdf3e1"
        parts += _box(x, y, app, note, fill)
    parts.append(
        "<defs><marker id='arrow' markerWidth='10' markerHeight='8' refX='9' refY='4' "
        "orient='auto'><path d='M0,0 L10,4 L0,8 z' fill='#333'/></marker></defs>"
    )
    for p_app, p_end, r_app, r_end, interface in relations():
        px, py = PLACES[p_app]
        rx, ry = PLACES[r_app]
        start = _anchor(p_app, (rx + BOX_W // 2, ry + BOX_H // 2))
        end = _anchor(r_app, (px + BOX_W // 2, py + BOX_H // 2))
        parts.append(
            f"<line x1='{start[0]}' y1='{start[1]}' x2='{end[0]}' y2='{end[1]}' "
            "stroke='#333' stroke-width='1.5' marker-end='url(#arrow)'/>"
        )
        label = relation_label(p_end, r_end, interface)
        mx, my = (start[0] + end[0]) // 2, (start[1] + end[1]) // 2
        if start[1] == end[1]:  # across: above the line
            where = f"x='{mx}' y='{my - 8}' text-anchor='middle'"
        elif end[0] < start[0]:  # down to the left: the label on the left of the line
            where = f"x='{mx - 8}' y='{my}' text-anchor='end'"
        else:
            where = f"x='{mx + 8}' y='{my}' text-anchor='start'"
        parts.append(f"<text {where} {FONT} font-size='11' fill='#1a4d8f'>{escape(label)}</text>")
    # what the charms create outside Juju
    cx, cy = PLACES["kubernetes-control-plane"]
    kx, _, _ = KUBERNETES_PANEL
    ex, ey = PLACES["efs-storage"]
    ax, ay, ah = AWS_PANEL
    for (x1, y1), (x2, y2), text in (
        ((cx + BOX_W, cy + BOX_H // 2), (kx, cy + BOX_H // 2), "applies, as cluster admin"),
        ((ex + BOX_W, ey + BOX_H // 2), (ax, ay + ah // 2), "creates"),
    ):
        parts.append(
            f"<line x1='{x1}' y1='{y1}' x2='{x2}' y2='{y2}' stroke='#777' "
            "stroke-dasharray='5 3' marker-end='url(#arrow)'/>"
        )
        parts.append(
            f"<text x='{(x1 + x2) // 2}' y='{min(y1, y2) - 6}' text-anchor='middle' {FONT} "
            f"font-size='10' fill='#555'>{escape(text)}</text>"
        )
    for title, lines, (x, y, h) in (
        ("AWS", AWS, AWS_PANEL),
        ("Kubernetes (what the charms apply)", KUBERNETES, KUBERNETES_PANEL),
    ):
        parts.append(
            f"<rect x='{x}' y='{y}' width='310' height='{h}' rx='8' fill='#f4f4f4' stroke='#999'/>"
        )
        parts.append(
            f"<text x='{x + 10}' y='{y + 20}' {FONT} font-size='13' font-weight='bold'>"
            f"{escape(title)}</text>"
        )
        for i, line in enumerate(lines):
            parts.append(
                f"<text x='{x + 12}' y='{y + 42 + 20 * i}' {FONT} font-size='11'>"
                f"{escape(line)}</text>"
            )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the picture, or with --check say whether it is up to date."""
    parser = argparse.ArgumentParser(description="Draw docs/architecture.svg from the bundle.")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run python tools/architecture.py")
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
