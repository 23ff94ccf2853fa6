# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Constants of the tensorflow charm."""

from __future__ import annotations

from typing import Any

KUBE_API = "kube-api"
SHARED_STORAGE = "shared-storage"

# Labels put on every object the charm creates.
LABEL_JOB = "gpu-k8s.io/job"
LABEL_ROLE = "gpu-k8s.io/role"
LABEL_COMPONENT = "gpu-k8s.io/component"  # training | tensorboard | purge
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# Set by Kubernetes on the pods of an Indexed Job.
LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# The validated train request (JSON) is kept on the job's headless Service, for scale.
ANNOTATION_REQUEST = "gpu-k8s.io/request"

COMPONENT_TRAINING = "training"
COMPONENT_TENSORBOARD = "tensorboard"
COMPONENT_PURGE = "purge"

GPU_RESOURCE = "nvidia.com/gpu"
GPU_RUNTIME_CLASS = "nvidia"

# The user (uid:gid) pods run as by default (`run-as`): not root, so that a job cannot
# act as root on the node's view of the shared volume; it owns the application's directory.
DEFAULT_USER = "1000:1000"

# Pod layout.
CODE_MOUNT = "/opt/gpu-k8s"
DATA_MOUNT = "/data"
LAUNCHER = "tf_launcher.py"
TRAINER = "tf_trainer.py"
ACTION_FILES = (LAUNCHER, TRAINER)
TF_PORT = 2222
TENSORBOARD_PORT = 6006

# Built-in example scripts: name -> the actions/ program the launcher runs by default.
BUILTIN_SCRIPTS = {"mnist": TRAINER}

# The chief prints one line per progress report: `GPU_K8S_PROGRESS {json}`.
PROGRESS_MARKER = "GPU_K8S_PROGRESS "
PROGRESS_LOG_LINES = 300

JOB_NAME_MAX = 40  # leaves room for `-tensorboard` and `-worker-<index>` within 63
MAX_WORKERS = 1000
JOB_BACKOFF_LIMIT = 6
PURGE_TTL_SECONDS = 600

# RBAC asked from the control plane: exactly what the actions use.
NAMESPACED_RULES: list[dict[str, Any]] = [
    {"api-groups": ["batch"], "resources": ["jobs"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    {"api-groups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
    {"api-groups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"api-groups": [""], "resources": ["services", "configmaps"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    {"api-groups": ["apps"], "resources": ["deployments"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    {"api-groups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]},
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["localqueues"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list"]},
]  # fmt: skip
CLUSTER_RULES: list[dict[str, Any]] = [
    {"api-groups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
    {"api-groups": [""], "resources": ["pods"], "verbs": ["list"]},
    # the team's ClusterQueue (queues.py) and the flavors it draws on
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"], "verbs": ["get", "list"]},
]  # fmt: skip
