"""Write the pruned copies of JobSet's and Kueue's CRDs the fake API server validates against.

    python tools/prune_crds.py DOWNLOADED_DIR

DOWNLOADED_DIR holds the upstream files at the pinned tags, as downloaded by hand (the test
suite never downloads; each file's URL is in `SOURCES`):

    curl -fsSLO https://raw.githubusercontent.com/kubernetes-sigs/jobset/v0.12.0/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml
    (and each kueue.x-k8s.io_<plural>.yaml at v0.19.2)

Each CRD is kept whole except every `description` (the schemas' documentation: 70-90% of
the bytes) and the `controller-gen` annotations; the result goes to
tests/fixtures/crds/<file>.json (JSON has no comments: README.md there names each file's
source URL and tag, as `SOURCES` does).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "crds"

# The control plane's pins (charms/kubernetes-control-plane/src/literals.py JOBSET and
# KUEUE .version); the files are controller-gen's output committed at each tag (the release
# asset's CRDs are these, plus Kueue's conversion-webhook patch).
JOBSET_TAG = "v0.12.0"
KUEUE_TAG = "v0.19.2"
KUEUE_PLURALS = (
    "clusterqueues",
    "cohorts",
    "localqueues",
    "resourceflavors",
    "workloadpriorityclasses",
    "workloads",
)
_BASES = "config/components/crd/bases"
SOURCES = {
    "jobset.x-k8s.io_jobsets.yaml": (
        f"https://raw.githubusercontent.com/kubernetes-sigs/jobset/{JOBSET_TAG}/{_BASES}/"
        "jobset.x-k8s.io_jobsets.yaml",
        f"kubernetes-sigs/jobset {JOBSET_TAG}",
    ),
    **{
        f"kueue.x-k8s.io_{plural}.yaml": (
            f"https://raw.githubusercontent.com/kubernetes-sigs/kueue/{KUEUE_TAG}/{_BASES}/"
            f"kueue.x-k8s.io_{plural}.yaml",
            f"kubernetes-sigs/kueue {KUEUE_TAG}",
        )
        for plural in KUEUE_PLURALS
    },
}


def prune(node: Any) -> Any:
    """The node without its schemas' `description` texts, at any depth.

    Only the text is dropped: a property named `description` (WorkloadPriorityClass has
    one) is a schema, a mapping, and stays.
    """
    if isinstance(node, dict):
        return {
            k: prune(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [prune(v) for v in node]
    return node


def pruned_crd(text: str) -> dict:
    """The CRD of an upstream file, descriptions and generator annotations dropped."""
    crd = yaml.safe_load(text)
    if crd.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"not a CustomResourceDefinition: {crd.get('kind')}")
    crd["metadata"] = {"name": crd["metadata"]["name"]}
    return prune(crd)


def out_name(name: str) -> str:
    """`kueue.x-k8s.io_cohorts.json`: JSON, which loads in ~10 ms where libyaml takes ~1 s."""
    return name.removesuffix(".yaml") + ".json"


def render(crd: dict) -> str:
    """One line per schema node: small, loads fast, diffs readably."""
    return json.dumps(crd, indent=1, separators=(",", ":")) + "\n"


def main(argv: list[str]) -> int:
    """Prune each file of `SOURCES` found in the directory argv[0]."""
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    source = Path(argv[0])
    OUT.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        crd = pruned_crd((source / name).read_text())
        target = OUT / out_name(name)
        target.write_text(render(crd))
        print(f"{name}: {(source / name).stat().st_size} -> {target.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
