"""The tutorial starts from an empty AWS account and its outputs agree with each other.

The 2026-11-27 review of issue 33 (briefs/reports/review33b_report.md) found the tutorial
assumed a controller it later destroyed, the Juju client unpinned while Juju 4 is out,
no command for the Standard vCPU quota, and example outputs of different runs side by side.
"""

from __future__ import annotations

import re

import docs_pages
import readme_examples
import yaml

TUTORIAL = (docs_pages.DOCS / "tutorial.md").read_text()
README = docs_pages.README.read_text()
BUNDLE = yaml.safe_load((docs_pages.ROOT / "bundles" / "gpu-k8s.yaml").read_text())
# Juju's snap publishes one track per minor (Juju docs, "How to manage the juju CLI
# client": `sudo snap install juju --channel=<track/risk>`, e.g. 3.4/stable); the charms
# are built and tested for Juju 3.6 (the 3.6 bootstrap's controller charm channel is
# 3.6/stable, Juju 3.6 CLI reference, juju bootstrap)
JUJU_SNAP = re.compile(r"sudo snap install juju\b([^`\n]*)")


def _at(needle: str, after: int = 0) -> int:
    where = TUTORIAL.find(needle, after)
    assert where >= 0, f"the tutorial has no {needle!r} (after character {after})"
    return where


def test_the_tutorial_makes_the_controller_before_the_model_in_the_quotas_region():
    key = _at("aws iam create-access-key --user-name juju")
    credential = _at("juju add-credential aws", key)
    bootstrap = _at("juju bootstrap aws/", credential)
    wait = _at("**Wait**", bootstrap)
    add_model = _at("juju add-model training", bootstrap)
    assert wait < add_model
    bootstrapped = re.search(r"juju bootstrap aws/([a-z0-9-]+) (\S+)", TUTORIAL)
    assert bootstrapped
    quota_regions = set(re.findall(r"--quota-code L-[0-9A-F]+ --region (\S+)", TUTORIAL))
    assert quota_regions == {bootstrapped.group(1)}, (quota_regions, bootstrapped.group(1))
    # and the controller it made is the one it destroys
    assert f"juju destroy-controller {bootstrapped.group(2)} " in TUTORIAL


def test_the_juju_client_is_the_36_track_wherever_it_is_installed():
    installs = JUJU_SNAP.findall(TUTORIAL) + JUJU_SNAP.findall(README)
    assert len(installs) == 2
    for options in installs:
        assert re.match(r"\s+--channel[= ]3\.6/stable\b", options), options


def test_the_standard_quota_is_read_and_asked_for_what_the_bundle_and_controller_need():
    commands = " ".join(
        c.replace("\\\n", " ") for c in re.findall(r"^\$ ((?:.*\\\n)*.*)$", TUTORIAL, re.M)
    )
    assert "get-service-quota --service-code ec2 --quota-code L-1216C47A" in commands
    asked = re.search(r"--quota-code L-1216C47A\s+--desired-value (\d+)", commands)
    assert asked
    # the README's cost table: machine 0 and the CPU worker are 4-vCPU m8i.xlarge, the
    # controller a 2-vCPU m8i.large (AWS, "Amazon EC2 M8i instances")
    assert "m8i.xlarge" in README and "m8i.large" in README
    assert int(asked.group(1)) >= 4 + 4 + 2


def test_import_dataset_and_list_datasets_come_from_one_run():
    imported = readme_examples.block("import-dataset")
    listed = readme_examples.block("list-datasets")
    source = re.search(r"^source: (\S+)$", imported, re.M)
    when = re.search(r'^imported: "(\S+)"$', imported, re.M)
    assert source and when
    assert f"from {source.group(1)}, imported {when.group(1)}" in listed


def test_the_teardown_listing_shows_an_instance_per_machine_of_the_default_bundle():
    listing = readme_examples.block("leftovers-kept")
    instances = re.findall(r"instance/i-[0-9a-f]+", listing)
    # the declared machines, plus a machine of its own for each unit placed nowhere
    unplaced = sum(a.get("num_units", 0) for a in BUNDLE["applications"].values() if "to" not in a)
    assert len(instances) == len(BUNDLE["machines"]) + unplaced == 3


# Where a page may say `pip install ...`: inside an image or a virtual environment the
# reader builds, never on their machine's own Python
_IN_AN_ENVIRONMENT = ("image", "virtual environment", "venv")


def test_no_page_or_hint_pip_installs_into_the_machine_s_python():
    """Ubuntu 24.04's Python refuses `pip install` outside a virtual environment.

    PEP 668 (externally managed environments; Ubuntu 24.04 marks its python3 so): the
    README's `python3 -m pip install tox` and the demo's `pip install tensorboard` hint
    failed there as written (review of issue 33, 2026-11-27).
    """
    found = []
    for path, text in docs_pages.texts():
        for paragraph in text.split("\n\n"):
            for command in re.findall(r"`([^`]*\bpip3? install [^`]*)`", paragraph):
                if not any(word in paragraph for word in _IN_AN_ENVIRONMENT):
                    found.append(f"{docs_pages.name(path)}: {command}")
    demo = (docs_pages.ROOT / "actions" / "tf_demo.py").read_text()
    found += [f"tf_demo.py: {line.strip()}" for line in demo.splitlines() if "pip install" in line]
    assert found == []
    # the README's way, which works there (uv's and tox-uv's documented commands)
    assert "uv tool install tox --with tox-uv" in README
