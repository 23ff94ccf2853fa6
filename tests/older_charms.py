"""What charms of earlier revisions ask on kube-api, for the upgrade tests of the docs.

docs/how-to/upgrade.md refreshes the teams first and efs-storage last because of what an
older charm asks for. The requests are recorded here, each with the revision it is from;
the control plane's suite (test_older_consumers.py) runs them against the charm and the
docs suite (test_day2_commands.py) ties the page's wording to that. An efs-storage
from before it published `storage-consumers` (commit d8b6106^) asked for the rules it asks
for today (charms/efs-storage/src/literals.py) without that key, and besides them for
reading pods cluster-wide, as it did until the control plane granted those reads per
served namespace (review44a G8; commit 0421f29, `old_efs_cluster_rules`).
"""

from __future__ import annotations

from typing import Any

# What efs-storage asked for cluster-wide besides today's rules until commit 0421f29
# (charms/efs-storage/src/literals.py CLUSTER_RULES, its last entry).
OLD_EFS_POD_READS = {"api-groups": [""], "resources": ["pods"], "verbs": ["get", "list"]}


def old_efs_cluster_rules(today: list[Any]) -> list[Any]:
    """The cluster-wide rules an efs-storage of commit 0421f29 and earlier asked for."""
    return [*today, OLD_EFS_POD_READS]


# The cluster rules of the tensorflow charm before the control plane owned the teams'
# ClusterQueues (commit 043e83a^, charms/tensorflow/src/literals.py cluster_rules): it
# wrote its own ClusterQueue `team-<namespace>`, by name.
def old_tensorflow_cluster_rules(namespace: str) -> list[dict]:
    """The cluster-wide rules that charm asked for in `namespace`."""
    return [
        {"api-groups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
        {
            "api-groups": ["kueue.x-k8s.io"],
            "resources": ["resourceflavors"],
            "verbs": ["get", "list"],
        },
        {
            "api-groups": ["kueue.x-k8s.io"],
            "resources": ["clusterqueues"],
            "verbs": ["get", "create", "patch", "delete"],
            "resource-names": [f"team-{namespace}"],
        },
        {
            "api-groups": ["kueue.x-k8s.io"],
            "resources": ["cohorts"],
            "verbs": ["get"],
            "resource-names": ["gpu-k8s"],
        },
        {"api-groups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["list"]},
    ]
