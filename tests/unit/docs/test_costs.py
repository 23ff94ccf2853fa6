"""The hourly costs the pages give are the sums of what the bundle and its overlays rent.

The prices are the README's own table (per instance, on-demand us-east-1, with its
source) and its gp3 price per GB-month; a month is 730 hours (AWS's pricing calculator
counts 730 hours a month). Machines: the controller (default constraints, a 32 GB root
disk), machine 0, and each worker unit on a machine of its own with its application's
constraints; `cores=4 mem=16G` is the m8i.xlarge the README's table names. An overlay
removes an application it sets to nothing and replaces the keys it gives (num_units,
constraints); tests/functional/test_bundles.py merges them as Juju does.
"""

from __future__ import annotations

import re

import docs_pages
import pytest
import yaml

ROOT = docs_pages.ROOT
README = docs_pages.README.read_text()
BUNDLE = yaml.safe_load((ROOT / "bundles" / "gpu-k8s.yaml").read_text())
OVERLAYS = ROOT / "bundles" / "overlays"
HOURS_PER_MONTH = 730
CONTROLLER_DISK_GB = 32  # Juju's default root disk on AWS, the README's "32+64+64+128"


def _price_table() -> dict[str, float]:
    """Each instance's $/hour from the README's cost table, and the overlays page's g6.12xlarge."""
    rows = re.findall(
        r"^\| [^|]+ \| [^|]+ \| ([a-z0-9]+\.[a-z0-9]+) \| ([\d.]+) \|$", README, re.M
    )
    prices = {instance: float(price) for instance, price in rows}
    overlays = (docs_pages.DOCS / "how-to" / "overlays.md").read_text()
    (g6,) = re.findall(r"two g6\.12xlarge \(([\d.]+) each", overlays)
    return {**prices, "g6.12xlarge": float(g6)}


PRICES = _price_table()
(GP3,) = [float(p) for p in re.findall(r"gp3, \$([\d.]+)/GB-month", README)]


def _instance(constraints: str) -> tuple[str, int]:
    """(instance type, root disk in GB) of a machine with these constraints."""
    words = dict(w.split("=", 1) for w in constraints.split())
    disk = int(words["root-disk"].removesuffix("G"))
    if "instance-type" in words:
        return words["instance-type"], disk
    assert (words["cores"], words["mem"]) == ("4", "16G"), words
    return "m8i.xlarge", disk


def hourly(overlay: str | None = None, extra_gpu_units: int = 0) -> float:
    apps = {name: dict(body) for name, body in BUNDLE["applications"].items()}
    machines = BUNDLE["machines"]
    if overlay:
        data = yaml.safe_load((OVERLAYS / overlay).read_text())
        machines = data.get("machines", machines)
        for name, body in (data.get("applications") or {}).items():
            if body is None:
                apps.pop(name, None)
            else:
                apps.setdefault(name, {}).update(body)
    rented = [("m8i.large", CONTROLLER_DISK_GB)]
    rented += [_instance(m["constraints"]) for m in machines.values()]
    for name, body in apps.items():
        if "to" in body or "num_units" not in body:
            continue  # on the declared machines above, or a subordinate (otelcol)
        units = body["num_units"] + (extra_gpu_units if name == "kubernetes-worker-gpu" else 0)
        rented += [_instance(body["constraints"])] * units
    return sum(PRICES[i] for i, _ in rented) + sum(d for _, d in rented) * GP3 / HOURS_PER_MONTH


def test_the_readme_table_sums_to_its_total():
    assert PRICES["g5.xlarge"] == 1.006 and GP3 == 0.08
    assert "**about 1.57**" in README
    assert round(hourly(), 2) == 1.57


@pytest.mark.parametrize(
    ("overlay", "row"),
    [
        ("ha-control-plane.yaml", "`ha-control-plane.yaml`"),
        ("cpu-only.yaml", "`cpu-only.yaml`"),
        ("bigger-gpu-nodes.yaml", "`bigger-gpu-nodes.yaml`"),
        ("existing-efs.yaml", "`existing-efs.yaml`, `cos.yaml`"),
        ("cos.yaml", "`existing-efs.yaml`, `cos.yaml`"),
    ],
)
def test_each_overlays_cost_is_what_it_rents(overlay, row):
    page = (docs_pages.DOCS / "how-to" / "overlays.md").read_text()
    (given,) = re.findall(rf"^\| {re.escape(row)} \| [^|]+ \| ([\d.]+) \|$", page, re.M)
    assert f"{hourly(overlay):.2f}" == given, (overlay, hourly(overlay), given)


def test_the_ha_page_and_the_tutorial_give_the_same_sums():
    ha = " ".join((docs_pages.DOCS / "how-to" / "ha-control-plane.md").read_text().split())
    assert f"about {hourly('ha-control-plane.yaml'):.2f} $/hour in all" in ha
    tutorial = " ".join((docs_pages.DOCS / "tutorial.md").read_text().split())
    # step 9 adds two GPU units to the bundle (test_literal_failures F3 counts them)
    assert f"at its largest (step 9): about {hourly(extra_gpu_units=2):.1f} $/hour" in tutorial
    more = hourly(extra_gpu_units=2) - hourly()
    assert (
        f"Two more g5.xlarge nodes need 12 vCPUs of G-instance quota in all and add about "
        f"{more:.2f} $/hour" in tutorial
    )


def test_a_bundle_change_that_the_costs_miss_is_caught():
    bigger = dict(BUNDLE["applications"]["kubernetes-worker-gpu"])
    BUNDLE["applications"]["kubernetes-worker-gpu"]["num_units"] = 2
    try:
        assert round(hourly(), 2) != 1.57
    finally:
        BUNDLE["applications"]["kubernetes-worker-gpu"] = bigger
