"""AWS calls made by the efs-storage workload module (create path, steady state, teardown).

Runs the real boto3 against moto on 127.0.0.1 through the counting proxy of
``tests/fakes/aws.py``: a VPC with two subnets in each of three zones and two
nodes per zone, each a Juju machine (model group + machine group) registered as kubeadm
does here (Juju hostname, no providerID, an InternalIP), so nodes are found by IP. New
file systems and mount targets report ``creating`` for one describe and deleted ones
``deleting`` for one describe, as AWS does for a while.

Run: ``.venv/bin/python tests/bench/bench_efs.py`` from the repository root. Prints numbers
only; the target (a reconcile with nothing to do makes no mutating call) is asserted by
``tests/functional/test_efs.py``. ``--smoke`` changes nothing: the bench is one
small run already (six nodes).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for extra in ("charms/efs-storage/src", "lib", "tests"):
    sys.path.insert(0, str(ROOT / extra))

from aws import Credentials  # noqa: E402
from efs import Efs  # noqa: E402
from efs_model import Desired, nodes_from_kubernetes  # noqa: E402
from run import options  # noqa: E402

from fakes.aws import (  # noqa: E402
    ACCESS_KEY_ID,
    REGION,
    SECRET_ACCESS_KEY,
    ZONES,
    build_network,
    local_aws,
    node_object,
)


def report(title: str, passes: int, seconds: float, total: Counter, mutating: Counter) -> None:
    """Print one phase's numbers."""
    print(f"\n## {title}")
    print(
        f"passes: {passes}  requests: {sum(total.values())}  "
        f"mutating: {sum(mutating.values())}  wall: {seconds * 1000:.0f} ms"
    )
    for action, count in sorted(total.items()):
        kind = "mutating" if action in mutating else "read"
        print(f"  {action:32s} {count:3d}  {kind}")


def main() -> None:
    """Measure and print."""
    options(__doc__).parse_args()
    with local_aws() as aws:
        ec2 = aws.client("ec2")
        model_uuid = str(uuid.uuid4())
        net = build_network(ec2, model_uuid=model_uuid)
        instances = []
        for zone in ZONES:
            for subnet in net.subnets[zone]:
                instances.append(net.run_machine(ec2, subnet, len(instances)))
        items = []
        for machine, inst in enumerate(instances):
            name, obj = node_object(inst, machine, model_uuid)
            items.append({"metadata": {"name": name}, **obj})
        desired = Desired(
            model_uuid=model_uuid, app="efs-storage", nodes=nodes_from_kubernetes(items)
        )
        manager = Efs.connect(
            Credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY), REGION, endpoint_url=aws.url
        )
        proxy = aws.proxy
        proxy.creating_describes.update({"file-system": 1, "mount-target": 1})
        proxy.deleting_describes.update({"file-system": 1, "mount-target": 1})
        print(f"nodes: {len(instances)} in {len(ZONES)} zones, 2 subnets per zone")

        proxy.clear_counts()
        start, passes = time.perf_counter(), 0
        for passes in range(1, 11):
            observed = manager.reconcile(desired)
            print(f"  pass {passes}: {observed.progress}")
            if observed.ready:
                break
        report(
            "create path (until ready)",
            passes,
            time.perf_counter() - start,
            proxy.counts(),
            proxy.counts(mutating=True),
        )

        proxy.clear_counts()
        start = time.perf_counter()
        manager.reconcile(desired)
        report(
            "steady-state reconcile (nothing to do)",
            1,
            time.perf_counter() - start,
            proxy.counts(),
            proxy.counts(mutating=True),
        )

        proxy.clear_counts()
        start, passes = time.perf_counter(), 0
        for passes in range(1, 11):
            if manager.teardown(desired, delete=True).done:
                break
        report(
            "teardown (delete-on-remove=true)",
            passes,
            time.perf_counter() - start,
            proxy.counts(),
            proxy.counts(mutating=True),
        )


if __name__ == "__main__":
    main()
