"""The worker's MIG-capable models are the ones the control plane has NVIDIA's layouts for.

Both charms' suites check against tests/fixtures/mig/nvidia-mig-models.yaml (its README
names the sources: pci.ids, developer.nvidia.com/cuda-gpus, mig-parted v0.15.0's
config-default.yaml); the control plane's tests/unit/kubernetes_control_plane/
test_mig_models.py holds its NVIDIA_MIG_PROFILES to the same ids, so a model the worker
reports as MIG-capable is one the control plane offers layouts for.
"""

from __future__ import annotations

from pathlib import Path

import gpu
import pytest
import yaml

from fakes.sysfs import Function, build

MODELS = yaml.safe_load(
    (Path(__file__).parents[3] / "fixtures" / "mig" / "nvidia-mig-models.yaml").read_text()
)["models"]


def test_the_mig_capable_ids_are_the_ones_nvidias_layouts_cover():
    assert {f"{device:04x}" for device in gpu.MIG_CAPABLE} == set(MODELS)


@pytest.mark.parametrize("pci", sorted(MODELS))
def test_each_mig_capable_model_is_named_and_has_its_compute_capability(tmp_path, pci):
    """Detected with no pci.ids installed: the built-in name, MIG and compute capability."""
    root = build(tmp_path / pci, [Function("0000:53:00.0", 0x10DE, int(pci, 16), 0x030200)])

    inventory = gpu.detect(root, None)

    assert inventory.model == f"NVIDIA {MODELS[pci]['name']}"
    assert inventory.mig_capable
    assert inventory.compute_capability == MODELS[pci]["compute"]
