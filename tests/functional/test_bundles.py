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

import docs_pages
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
    """Apply a Juju overlay as Juju does (juju/juju internal/charm/overlay.go applyOverlay).

    - applications and saas: an entry with no body is deleted with every relation naming
      it (removeRelations); a new one is added; an existing one is merged field by field
      (mergeStructs): a field the overlay names replaces the bundle's, except a mapping
      (options, constraints maps...), whose keys are set one by one, an empty mapping
      clearing it and a key with an empty non-scalar value deleting that key;
    - series replaces the bundle's; relations are appended (even ones naming an application
      an earlier overlay removed: "Keep the dud relation in the set, it will be caught by
      the bundle verify code");
    - machines: the overlay's map *replaces* the bundle's ("Override machine definitions").
    """
    merged = copy.deepcopy(base)
    for section in ("applications", "saas"):
        for name, body in (overlay.get(section) or {}).items():
            entries = merged.setdefault(section, {})
            if not body:
                entries.pop(name, None)
                merged["relations"] = _remove_relations(merged.get("relations") or [], name)
            elif name not in entries:
                entries[name] = copy.deepcopy(body)
            else:
                entries[name] = _merge_structs(entries[name], body)
    if overlay.get("series"):
        merged["series"] = overlay["series"]
    merged["relations"] = (merged.get("relations") or []) + copy.deepcopy(
        overlay.get("relations") or []
    )
    if overlay.get("machines") is not None:
        merged["machines"] = copy.deepcopy(overlay["machines"])
    return merged


def _remove_relations(relations: list, app: str) -> list:
    """overlay.go removeRelations: drop each relation with an end `app` or `app:<endpoint>`."""
    return [
        r
        for r in relations
        if len(r) != 2 or not any(end == app or end.startswith(f"{app}:") for end in r)
    ]


def _merge_structs(dst: dict, src: dict) -> dict:
    out = copy.deepcopy(dst)
    for field, value in src.items():
        if isinstance(value, dict):
            if not value:
                out[field] = {}
                continue
            target = out.setdefault(field, {}) or {}
            for key, item in value.items():
                if item in (None, {}, []):  # an empty non-scalar: deleted from the map
                    target.pop(key, None)
                else:
                    target[key] = copy.deepcopy(item)
            out[field] = target
        else:
            out[field] = copy.deepcopy(value)
    return out


def verify(bundle: dict) -> list[str]:
    """What Juju's bundle verifier refuses in the merged bundle, in its words.

    juju/juju internal/charm/bundledata.go: verifyApplications ("empty charm path" for an
    application without `charm:`, e.g. one an overlay adds back after an earlier overlay
    removed it), verifyPlacement ("placement %q refers to a
    machine not defined in this bundle", "too many units specified in unit placement for
    application %q"), the machine reference count ("machine %q is not referred to by a
    placement directive") and verifyRelations ("relation %q refers to application %q not
    defined in this bundle", "relation %q relates an application to itself", "relation
    %q is defined more than once").
    """
    return _application_errors(bundle) + _placement_errors(bundle) + _relation_errors(bundle)


def _application_errors(bundle: dict) -> list[str]:
    """bundledata.go verifyApplications: `if app.Charm == "" { "empty charm path" }`."""
    return [
        "empty charm path"
        for app in (bundle.get("applications") or {}).values()
        if not app.get("charm")
    ]


def _placement_errors(bundle: dict) -> list[str]:
    errors = []
    machines = {str(m): 0 for m in bundle.get("machines") or {}}
    for name, app in (bundle.get("applications") or {}).items():
        to = [str(t) for t in app.get("to") or []]
        if len(to) > app.get("num_units", 0):
            errors.append(f'too many units specified in unit placement for application "{name}"')
        for target in to:
            machine = target.rpartition(":")[2]
            if "/" in machine or machine == "new":
                continue
            if machine not in machines:
                errors.append(
                    f'placement "{target}" refers to a machine not defined in this bundle'
                )
            else:
                machines[machine] += 1
    return errors + [
        f'machine "{m}" is not referred to by a placement directive'
        for m, count in machines.items()
        if count == 0
    ]


def _relation_errors(bundle: dict) -> list[str]:
    errors = []
    apps, saas = bundle.get("applications") or {}, bundle.get("saas") or {}
    seen = set()
    for relation in bundle.get("relations") or []:
        quoted = "[" + " ".join(f'"{end}"' for end in relation) + "]"
        ends = [end.split(":")[0] for end in relation]
        errors += [
            f'relation {quoted} refers to application "{app}" not defined in this bundle'
            for app in ends
            if app not in apps and app not in saas
        ]
        if ends[0] == ends[1]:
            errors.append(f"relation {quoted} relates an application to itself")
        key = tuple(sorted(relation))
        if key in seen:
            errors.append(f"relation {quoted} is defined more than once")
        seen.add(key)
    return errors


def overlays() -> dict[str, dict]:
    return {o.stem: yaml.safe_load(o.read_text()) for o in OVERLAYS}


def variants() -> list[tuple[str, dict]]:
    base = yaml.safe_load(BUNDLE.read_text())
    out = [("gpu-k8s", base)]
    out += [(name, merge(base, overlay)) for name, overlay in overlays().items()]
    return out


# Overlays given together in an order that fails, and why; the docs say which comes
# first. cos.yaml relates kubernetes-worker-gpu, which cpu-only.yaml removes: Juju appends
# a later overlay's relations after an earlier overlay removed the application.
# bigger-gpu-nodes.yaml after cpu-only.yaml adds kubernetes-worker-gpu back as a new
# application with units and constraints but no charm (overlay.go: a removed application
# is gone, the later overlay's body is the whole application).
FAILING_ORDERS = {
    ("cpu-only", "bigger-gpu-nodes"): ["empty charm path"],
    ("cpu-only", "cos"): [
        'relation ["kubernetes-worker-gpu:cos-agent" "otelcol:cos-agent"] refers to '
        'application "kubernetes-worker-gpu" not defined in this bundle'
    ],
}


def pairs() -> list[tuple[str, str]]:
    names = sorted(overlays())
    return [(a, b) for a in names for b in names if a != b]


@pytest.mark.parametrize("variant", [v for v, _ in variants()])
def test_every_variant_is_a_bundle_juju_accepts(variant):
    assert verify(dict(variants())[variant]) == []


@pytest.mark.parametrize(("first", "second"), pairs(), ids=[f"{a}+{b}" for a, b in pairs()])
def test_two_overlays_in_either_order_are_accepted_but_the_documented_order(first, second):
    base = yaml.safe_load(BUNDLE.read_text())
    both = merge(merge(base, overlays()[first]), overlays()[second])
    assert verify(both) == FAILING_ORDERS.get((first, second), [])


def test_the_docs_give_the_overlays_in_an_order_that_works():
    docs = docs_pages.text()
    for first, second in FAILING_ORDERS:
        assert f"`{second}.yaml` before `{first}.yaml`" in docs


def test_an_overlay_with_its_own_machines_replaces_the_bundles():
    """juju/juju overlay.go: "Override machine definitions" (F-1 of the 2026-11-26 review)."""
    base = yaml.safe_load(BUNDLE.read_text())
    overlay = {
        "machines": {"1": {"constraints": "cores=4"}},
        "applications": {"kubernetes-control-plane": {"num_units": 2, "to": ["0", "1"]}},
    }
    assert (
        verify(merge(base, overlay))
        == ['placement "0" refers to a machine not defined in this bundle'] * 3
    )


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
