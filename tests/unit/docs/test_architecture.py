"""The architecture picture is drawn from the bundle, and the docs' diagrams agree with it.

docs/architecture.svg is what tools/architecture.py draws from bundles/gpu-k8s.yaml and
the charms' endpoints; a change to either without redrawing fails here.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import architecture
import docs_pages

ROOT = Path(__file__).resolve().parents[3]
SVG = ROOT / "docs" / "architecture.svg"
README = docs_pages.README.read_text()


def test_the_committed_picture_is_what_the_bundle_draws():
    assert SVG.read_text() == architecture.render(), (
        "docs/architecture.svg is out of date: run `python tools/architecture.py`"
    )
    assert architecture.main(["--check"]) == 0


def test_every_relation_of_the_bundle_is_drawn_with_its_endpoints():
    texts = {t.text for t in ET.parse(SVG).getroot().iter("{http://www.w3.org/2000/svg}text")}
    relations = architecture.relations()
    assert len(relations) == 5
    for provider, p_end, requirer, r_end, interface in relations:
        assert architecture.relation_label(p_end, r_end, interface) in texts
        assert provider in texts and requirer in texts
    assert "workers → cluster (kubernetes-cluster)" in texts


def test_the_readme_shows_the_picture_and_its_ascii_labels_are_real_endpoints():
    assert "](docs/architecture.svg)" in README
    blocks = re.findall(r"```\n(.*?)```", docs_pages.text(), re.S)
    (deployed,) = [b for b in blocks if "─── machine 0 ───" in b]
    pairs = set(re.findall(r"([a-z-]+) ─ ([a-z-]+)", deployed))
    assert pairs, "the ASCII diagram labels no relation"
    drawn = {(p_end, r_end) for _, p_end, _, r_end, _ in architecture.relations()}
    assert pairs <= drawn, pairs - drawn
