"""Every MIG-capable model the worker knows gets NVIDIA's layouts, with NVIDIA's counts.

The truth both charms' tests read is tests/fixtures/mig/nvidia-mig-models.yaml (recorded
from mig-parted v0.15.0's config-default.yaml, pci.ids and NVIDIA's MIG documentation;
its README names each source): the worker's suite checks that its MIG-capable ids are
the file's, this one that NVIDIA_MIG_PROFILES is, so the two charms agree on which ids
get layouts without either suite importing the other charm.
"""

from __future__ import annotations

from pathlib import Path

import mig_manager
import pytest
import yaml
from ops import testing

from fakes.control_plane import join_workers, peers, worker_bag, workers_relation

MODELS = yaml.safe_load(
    (Path(__file__).parents[2] / "fixtures" / "mig" / "nvidia-mig-models.yaml").read_text()
)["models"]
# Before issue 29/32's leftover (brief mig41) the table held these five only
EARLIER = {"20b0", "20b2", "2330", "2335", "2901"}
NEW = sorted(set(MODELS) - EARLIER)
CONFIG_MAP = "/api/v1/namespaces/gpu-k8s-gpu/configmaps/nvidia-mig-manager-config"


def report(pci: str, profiles: dict[str, int] | None = None) -> dict:
    """A worker's `gpu-inventory` entry for one MIG-capable model (nvidia-smi's name)."""
    return {
        "model": f"NVIDIA {MODELS[pci]['name']}",
        "count": 8,
        "mig-capable": True,
        "pci-device-id": pci,
        "mig-profiles": MODELS[pci]["profiles"] if profiles is None else profiles,
    }


def wrong(pci: str) -> dict[str, int]:
    """NVIDIA's counts for `pci` with the first profile's count one higher."""
    profiles = dict(MODELS[pci]["profiles"])
    first = next(iter(profiles))
    profiles[first] += 1
    return profiles


def gpu(entry: dict) -> mig_manager.MigGpu:
    return mig_manager.MigGpu(entry["model"], entry["pci-device-id"], entry["mig-profiles"])


def test_the_table_is_nvidias_for_every_mig_capable_model():
    assert mig_manager.NVIDIA_MIG_PROFILES == {
        pci: model["profiles"] for pci, model in MODELS.items()
    }


@pytest.mark.parametrize("pci", NEW)
def test_a_new_models_report_with_nvidias_counts_gets_its_layouts(pci):
    entry = gpu(report(pci))

    assert mig_manager.disagreement(entry) is None
    assert not mig_manager.unlisted(entry)
    configs = mig_manager.mig_parted_config([entry])["mig-configs"]
    for profile, count in MODELS[pci]["profiles"].items():
        name = mig_manager.config_name(profile)
        assert name is not None
        assert configs[name] == [
            {
                "device-filter": [f"0x{pci.upper()}10DE"],
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": {profile: count},
            }
        ]


@pytest.mark.parametrize("pci", NEW)
def test_a_new_models_report_with_another_count_is_refused(pci):
    entry = gpu(report(pci, wrong(pci)))
    profile, count = next(iter(MODELS[pci]["profiles"].items()))

    assert mig_manager.disagreement(entry) == (
        f"{count + 1} {profile} per {entry.model}, NVIDIA's table {count}"
    )
    assert set(mig_manager.mig_parted_config([entry])["mig-configs"]) == {
        "all-disabled",
        "all-enabled",
    }


def test_the_leader_offers_the_new_models_layouts_and_refuses_a_wrong_count(ctx, machine, api):
    """Through the charm (registry, addons): two units' reports, one of them lying.

    A unit names 4 models at most, so the H100 PCIe (the H100 SXM5's and A100 PCIe 80GB's
    table) is left to the tests above; the second unit's A30 count is not NVIDIA's.
    """
    bootstrapped = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    first, second = ["20b5", "20b7", "20f1", "2321"], ["233b", "2342", "3182"]
    liar = [*(report(pci) for pci in second), report("20b7", wrong("20b7"))]
    bags = {0: worker_bag("w0", [report(pci) for pci in first]), 1: worker_bag("w1", liar)}
    out = join_workers(ctx, bootstrapped, workers_relation(bags), api)

    configs = yaml.safe_load(api.get_object(CONFIG_MAP)["data"]["config.yaml"])["mig-configs"]
    offered = {
        (name, device, count)
        for name, entries in configs.items()
        for entry in entries
        for device in entry.get("device-filter", [])
        for count in entry["mig-devices"].values()
    }
    for pci in first + second:
        for profile, count in MODELS[pci]["profiles"].items():
            assert (mig_manager.config_name(profile), f"0x{pci.upper()}10DE", count) in offered
    assert ("all-1g.6gb", "0x20B710DE", 5) not in offered
    assert (
        "kubernetes-worker/1: gpu-inventory says 5 1g.6gb per NVIDIA A30 PCIe, "
        "NVIDIA's table 4 (refused)"
    ) in out.unit_status.message
    assert "not in NVIDIA's MIG table" not in out.unit_status.message
