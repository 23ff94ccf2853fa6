"""What charms of earlier revisions ask on kube-api, for the upgrade tests of the docs.

docs/how-to/upgrade.md refreshes the teams first and efs-storage last because of what an
older charm asks for. The requests are recorded here, each with the revision it is from;
the control plane's suite (test_older_consumers.py) runs them against the charm and the
docs suite (test_day2_commands.py) ties the page's wording to that. An efs-storage
from before it published `storage-consumers` (commit d8b6106^) asked for the rules it asks
for today (charms/efs-storage/src/literals.py, unchanged since), without that key.
"""

from __future__ import annotations


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
