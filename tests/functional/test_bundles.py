"""The bundle and every overlay agree with the charms in this repository.

Each application maps to a charm under charms/ (or to a Charmhub charm whose endpoints
are recorded under tests/fixtures/charmhub/, with their source), each option exists in
that charm's config with a value of the right type, and each relation joins a `provides`
endpoint to a `requires` endpoint of the same interface; a relation to a `saas:` entry
(a cross-model offer) uses the offer's endpoint as recorded. Overlays are merged the way
Juju merges them: an application listed with no body is removed, relations are added.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "gpu-k8s.yaml"
CHARMHUB = ROOT / "tests" / "fixtures" / "charmhub"
OFFERS = yaml.safe_load((CHARMHUB / "cos-lite-offers.yaml").read_text())
OVERLAYS = sorted((ROOT / "bundles" / "overlays").glob("*.yaml"))
PYTHON_TYPES = {"string": (str,), "int": (int,), "float": (int, float), "boolean": (bool,)}


def charm_metadata(name: str) -> dict:
    if name.startswith("charmhub:"):
        return yaml.safe_load((CHARMHUB / f"{name.removeprefix('charmhub:')}.yaml").read_text())
    return yaml.safe_load((ROOT / "charms" / name / "charmcraft.yaml").read_text())


def merge(base: dict, overlay: dict) -> dict:
    """Apply a Juju overlay: deep-merge mappings, drop applications given no body."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if key == "applications":
            apps = merged.setdefault("applications", {})
            for app, body in value.items():
                if body is None:
                    apps.pop(app, None)
                    merged["relations"] = [
                        r
                        for r in merged.get("relations", [])
                        if all(not e.startswith(f"{app}:") for e in r)
                    ]
                else:
                    apps[app] = _deep_merge(apps.get(app, {}), body)
        elif key == "relations":  # added to the bundle's
            merged[key] = merged.get(key, []) + [r for r in value if r not in merged.get(key, [])]
        elif isinstance(value, dict):
            merged[key] = _deep_merge(merged.get(key, {}), value)
        else:
            merged[key] = value
    return merged


def _deep_merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def variants() -> list[tuple[str, dict]]:
    base = yaml.safe_load(BUNDLE.read_text())
    out = [("gpu-k8s", base)]
    out += [(o.stem, merge(base, yaml.safe_load(o.read_text()))) for o in OVERLAYS]
    return out


def charm_of(app: dict) -> str:
    if not app["charm"].startswith(("./", "../", "/")):  # from Charmhub, on a channel
        assert app.get("channel"), f"{app['charm']}: a Charmhub charm needs a channel"
        recorded = CHARMHUB / f"{app['charm']}.yaml"
        assert recorded.is_file(), f"{app['charm']}: record its endpoints in {recorded}"
        return f"charmhub:{app['charm']}"
    path = (BUNDLE.parent / app["charm"]).resolve()
    assert path.parent == ROOT / "build", (
        f"{app['charm']} is not a charm that `tox -e pack` writes"
    )
    return path.name.removesuffix(".charm")


def offered_endpoint(bundle: dict, name: str) -> tuple[str, str]:
    """(kind, interface) of a `saas:` entry's offered endpoint."""
    url = (bundle.get("saas") or {}).get(name, {}).get("url", "")
    assert url, f"{name} is neither an application nor a saas entry with a url"
    offer = url.rsplit(".", 1)[-1]
    assert offer in OFFERS, f"{name}: {url} is not a recorded COS offer"
    return OFFERS[offer]["kind"], OFFERS[offer]["interface"]


def endpoint(charm: str, name: str) -> tuple[str, str]:
    meta = charm_metadata(charm)
    for kind in ("provides", "requires"):
        if name in (meta.get(kind) or {}):
            return kind, meta[kind][name]["interface"]
    raise AssertionError(f"{charm} has no endpoint {name}")


@pytest.mark.parametrize(("variant", "bundle"), variants(), ids=[v for v, _ in variants()])
def test_every_application_is_a_charm_of_this_repository(variant, bundle):
    for app, body in bundle["applications"].items():
        charm = charm_of(body)
        if not charm.startswith("charmhub:"):
            assert (ROOT / "charms" / charm / "charmcraft.yaml").is_file(), f"{variant}: {app}"


@pytest.mark.parametrize(("variant", "bundle"), variants(), ids=[v for v, _ in variants()])
def test_every_option_exists_with_the_right_type(variant, bundle):
    for app, body in bundle["applications"].items():
        options = (charm_metadata(charm_of(body)).get("config") or {}).get("options") or {}
        for name, value in (body.get("options") or {}).items():
            assert name in options, f"{variant}: {app} has no option {name}"
            expected = PYTHON_TYPES.get(options[name]["type"], (str,))
            ok = isinstance(value, expected) and not (
                isinstance(value, bool) and bool not in expected
            )
            assert ok, f"{variant}: {app} option {name}={value!r} is not {options[name]['type']}"


@pytest.mark.parametrize(("variant", "bundle"), variants(), ids=[v for v, _ in variants()])
def test_every_relation_joins_provider_and_requirer_of_one_interface(variant, bundle):
    apps = bundle["applications"]
    for left, right in bundle["relations"]:
        sides = []
        for end in (left, right):
            if ":" not in end:  # a cross-model offer: its one endpoint
                sides.append(offered_endpoint(bundle, end))
                continue
            app, name = end.split(":")
            assert app in apps, f"{variant}: relation names unknown application {app}"
            sides.append(endpoint(charm_of(apps[app]), name))
        kinds = {sides[0][0], sides[1][0]}
        assert kinds == {"provides", "requires"}, f"{variant}: {left} <-> {right}"
        assert sides[0][1] == sides[1][1], f"{variant}: {left} <-> {right} interfaces differ"


@pytest.mark.parametrize(("variant", "bundle"), variants(), ids=[v for v, _ in variants()])
def test_required_endpoints_are_all_related(variant, bundle):
    apps = bundle["applications"]
    related = {end for relation in bundle["relations"] for end in relation}
    for app, body in apps.items():
        meta = charm_metadata(charm_of(body))
        for name, spec in (meta.get("requires") or {}).items():
            if spec.get("optional") is False:
                assert f"{app}:{name}" in related, f"{variant}: {app}:{name} is not related"


# Juju puts `lxd:` containers on the fan overlay on AWS (it sets the model's
# container-networking-method to fan there), and fan does not work on Ubuntu 24.04 hosts
# (juju/juju#20344, LP#2063298: the fan kernel patches were dropped in noble), so a
# container on a noble machine is never provisioned. Every placement names a machine.
LXD_REFUSED = (
    "is placed in an LXD container ({target}): on AWS, Juju gives containers fan "
    "networking, which Ubuntu 24.04 hosts do not support (juju/juju#20344), so the unit "
    'would never start; place it on a machine (`to: ["0"]`) instead'
)


def placement_problems(bundle: dict) -> list[str]:
    """What is wrong with the bundle's `to:` placements, one sentence per application."""
    machines = set((bundle.get("machines") or {}).keys())
    problems = []
    for app, body in bundle["applications"].items():
        for target in body.get("to") or []:
            if ":" in str(target):
                problems.append(f"{app} " + LXD_REFUSED.format(target=target))
            elif str(target) not in machines:
                problems.append(f"{app} is placed on unknown machine {target}")
    return problems


@pytest.mark.parametrize(("variant", "bundle"), variants(), ids=[v for v, _ in variants()])
def test_placements_name_declared_machines_never_containers(variant, bundle):
    assert placement_problems(bundle) == [], variant


def test_a_container_placement_is_refused_with_the_reason():
    bundle = yaml.safe_load(BUNDLE.read_text())
    bundle["applications"]["tensorflow"]["to"] = ["lxd:0"]
    bundle["applications"]["efs-storage"]["to"] = ["7"]
    assert placement_problems(bundle) == [
        "efs-storage is placed on unknown machine 7",
        "tensorflow " + LXD_REFUSED.format(target="lxd:0"),
    ]


def test_efs_storage_is_trusted_and_shares_the_control_plane_machine():
    bundle = yaml.safe_load(BUNDLE.read_text())
    apps = bundle["applications"]
    assert apps["efs-storage"].get("trust") is True
    control_plane_machine = apps["kubernetes-control-plane"]["to"][0]
    for app in ("efs-storage", "tensorflow"):
        assert apps[app]["to"] == [control_plane_machine]


def test_the_cpu_only_overlay_rents_no_gpu_instance():
    cpu_only = dict(variants())["cpu-only"]
    assert "kubernetes-worker-gpu" not in cpu_only["applications"]
    for body in cpu_only["applications"].values():
        assert "instance-type=g" not in (body.get("constraints") or "")


def test_the_cos_overlay_relates_every_application_and_every_cos_endpoint():
    cos = dict(variants())["cos"]
    agent = [r for r in cos["relations"] if "otelcol:cos-agent" in r]
    principals = sorted(end.split(":")[0] for r in agent for end in r if "otelcol" not in end)
    # each names its own state (unit_state); the collector units machine 0 then has share
    # one snap (canonical/opentelemetry-collector-operator src/singleton_snap.py)
    assert principals == sorted(app for app in cos["applications"] if app != "otelcol")
    assert len(principals) == 5
    sent = {end for r in cos["relations"] for end in r if ":" not in end}
    assert sent == set(cos["saas"]) == set(OFFERS)
    # the collector blocks unless something takes what it collects
    assert charm_of(cos["applications"]["otelcol"]) == "charmhub:opentelemetry-collector"
