"""What a mirror must hold, as the code pulls it.

The `image-registry` help texts and docs/how-to/air-gapped.md name exactly the images of
each charm's `upstream_images()`, moved below the mirror `R`.
"""

from __future__ import annotations

import re
from pathlib import Path

import charm_modules
import docs_pages
import pytest
import yaml

from charms.gpu_k8s.v0 import images

ROOT = Path(__file__).resolve().parents[3]
PAGE = docs_pages.DOCS / "how-to" / "air-gapped.md"
# charm -> the module whose upstream_images() lists its images
LISTS = {
    "kubernetes-control-plane": "image_registry",
    "kubernetes-worker": "charm_config",
    "efs-storage": "directories",
    "tensorflow": "charm_config",
}
# an image with its tag below R (kubeadm's, whose tags vary with the patch, say `<tag>`)
MIRRORED = re.compile(r"\bR/[a-z0-9][a-z0-9./_-]*:[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")


def _wanted(charm: str) -> set[str]:
    module = charm_modules.load(charm, LISTS[charm])
    return {images.mirrored(image, "R") for image in module.upstream_images()}


def _help(charm: str) -> str:
    meta = yaml.safe_load((ROOT / "charms" / charm / "charmcraft.yaml").read_text())
    return " ".join(meta["config"]["options"]["image-registry"]["description"].split())


def _page_item(charm: str) -> str:
    """The air-gapped page's list item for `charm` (up to the next item)."""
    found = re.search(rf"^- \*\*{charm}\*\*:(.*?)(?=^- \*\*|^#|\Z)", PAGE.read_text(), re.M | re.S)
    assert found, f"air-gapped.md has no item for {charm}"
    return " ".join(found.group(1).split())


@pytest.mark.parametrize("charm", LISTS)
@pytest.mark.parametrize("where", ["help", "page"])
def test_the_images_a_mirror_must_hold_are_the_ones_the_code_pulls(charm, where):
    text = _help(charm) if where == "help" else _page_item(charm)
    assert set(MIRRORED.findall(text)) == _wanted(charm)


def test_an_image_left_out_or_stale_is_caught():
    wanted = _wanted("kubernetes-worker")
    text = _help("kubernetes-worker")
    assert set(MIRRORED.findall(text.replace("R/pause:3.10.1", ""))) != wanted
    assert set(MIRRORED.findall(text.replace("26.01-py3", "25.01-py3"))) != wanted
    wanted = _wanted("tensorflow")  # serve's -gpu image, from serving.gpu_variant
    text = _help("tensorflow")
    assert set(MIRRORED.findall(text.replace("R/tensorflow/serving:2.20.0-gpu", ""))) != wanted


TROUBLESHOOTING = docs_pages.DOCS / "how-to" / "troubleshooting.md"


def _docker_hub_images() -> set[str]:
    """Every image the charms pull from Docker Hub by default (no registry host)."""
    found = set()
    for charm, module in LISTS.items():
        for image in charm_modules.load(charm, module).upstream_images():
            if images.split(image)[0] == images.DOCKER_HUB:
                found.add(image)
    return found


def test_the_docker_hub_images_named_are_the_ones_the_code_pulls_from_docker_hub():
    # the troubleshooting item for Docker Hub's pull limit (`toomanyrequests`)
    text = " ".join(TROUBLESHOOTING.read_text().split())
    item = re.search(r"`toomanyrequests`\*\*:(.*?)(?= - \*\*)", text)
    assert item, "troubleshooting.md has no item for `toomanyrequests`"
    named = set(re.findall(r"`((?:[a-z0-9._-]+/)?[a-z0-9._-]+:[A-Za-z0-9._-]+)`", item.group(1)))
    assert named == _docker_hub_images()
    assert "10 pulls per hour" in item.group(1)  # docs.docker.com, "Usage and limits"
    readme = " ".join(docs_pages.README.read_text().split())
    assert "**Docker Hub**" in readme and "10 anonymous pulls an hour" in readme
