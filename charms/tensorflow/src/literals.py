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
LABEL_COMPONENT = "gpu-k8s.io/component"  # training | tensorboard | purge | scale
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# Set by Kubernetes on the pods of an Indexed Job.
LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# The validated train request (JSON) is kept on the job's JobSet, for scale and status.
ANNOTATION_REQUEST = "gpu-k8s.io/request"
# Beside it, the fields of that request the charm filled in where the user left them empty
# (placement.with_gpu_defaults), comma-separated: what the user asked is the request with
# them empty again (params.TrainRequest.same_job). Apart from the request, so that an
# earlier revision of the charm still reads the request.
ANNOTATION_DEFAULTED = "gpu-k8s.io/defaulted"

# JobSet (kubernetes-sigs/jobset v0.12.0, api/jobset/v1alpha2/jobset_types.go): the API, and
# labels its controller puts on child Jobs and pods (jobset_controller.go
# labelAndAnnotateObject). Pod hostnames are `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`
# under the subdomain (the Job controller names Indexed pods `<job>-<index>`).
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
LABEL_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LABEL_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
# Kueue (kubernetes-sigs/kueue v0.19.2, pkg/controller/constants): the queue and priority a
# job names; Kueue suspends a JobSet carrying the queue label until it admits it.
KUEUE_API = "kueue.x-k8s.io/v1beta2"
# The team's LocalQueue, which every job names. Not `default`: Kueue makes a LocalQueue of
# that name the namespace's default queue (kueue v0.19.2 pkg/controller/constants
# DefaultLocalQueueName), and its webhooks then put every unlabelled Job, Deployment and
# Pod of the namespace in it (jobframework/defaults.go): TensorBoard and the purge Job
# would wait for quota and could be preempted.
LOCAL_QUEUE = "training"
# The label kubernetes-worker puts on its GPU nodes (gpu_labels.py LABEL_PRODUCT), which the
# control plane's GPU ResourceFlavors select.
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
# And how its GPUs are shared, as GPU Feature Discovery writes it (gpu_labels.py
# LABEL_SHARING_STRATEGY; NVIDIA/k8s-device-plugin v0.20.0 internal/lm/resource.go):
# `time-slicing` when the control plane's gpu-time-slicing-replicas is above 1.
LABEL_GPU_SHARING = "nvidia.com/gpu.sharing-strategy"
TIME_SLICING = "time-slicing"
# Earlier revisions named it `default`; the charm deletes that one when it is its own.
RETIRED_LOCAL_QUEUES = ("default",)
LABEL_QUEUE = "kueue.x-k8s.io/queue-name"
# kueue v0.19.2 pkg/controller/constants MaxExecTimeSecondsLabel: `train deadline=` hours
LABEL_MAX_EXEC_TIME = "kueue.x-k8s.io/max-exec-time-seconds"
LABEL_PRIORITY = "kueue.x-k8s.io/priority-class"
PRIORITIES = ("low", "normal", "high")  # WorkloadPriorityClasses the control plane makes
# kueue v0.19.2 pkg/controller/jobs/pod/constants SuspendedByParentAnnotation: Kueue's
# deployment webhook marks a Deployment's pod template with it (deployment_webhook.go
# Default, on create and update), and the pod webhook gates every pod that carries it
ANNOTATION_KUEUE_PARENT = "kueue.x-k8s.io/pod-suspending-parent"

COMPONENT_TRAINING = "training"
COMPONENT_TENSORBOARD = "tensorboard"
COMPONENT_PURGE = "purge"
COMPONENT_SCALE = "scale"  # the record a scale keeps (scale_records.py)

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
IMPORTER = "dataset_import.py"  # the import-dataset Job's program (datasets.py)
UPLOADER = "model_upload.py"  # fetch-model destination=s3:..., beside IMPORTER (exports.py)
TF_PORT = 2222
TENSORBOARD_PORT = 6006
# The launcher's Prometheus endpoint in every training pod (tf_launcher.py, "Metrics"):
# pods have their own network namespace, so no node port is taken; not a port TensorFlow,
# TensorBoard or TF Serving use.
METRICS_PORT = 9464

# Built-in example scripts: name -> the actions/ program the launcher runs by default.
BUILTIN_SCRIPTS = {"mnist": TRAINER}

# The chief prints one line per progress report: `GPU_K8S_PROGRESS {json}`.
PROGRESS_MARKER = "GPU_K8S_PROGRESS "
PROGRESS_LOG_LINES = 300

JOB_NAME_MAX = 40  # leaves room for `-tensorboard` and `-worker-<index>` within 63
MAX_WORKERS = 1000
DEFAULT_MAX_RESTARTS = 3
# Exit codes of the training container (tf_launcher.py's table): stopped on a SIGTERM, its
# own or a peer's (128 + 15); the launcher cannot start the task; TensorFlow sees none of
# the GPUs the task asked for.
EXIT_STOPPED = 143
EXIT_SETUP = 82
EXIT_NO_GPU = 83
# terminationGracePeriodSeconds of a training pod (the launcher's GPU_K8S_GRACE_SECONDS):
# the time a stop has for the chief's checkpoint save; Kubernetes' default is 30.
GRACE_SECONDS = 60
PURGE_TTL_SECONDS = 600

# RBAC asked from the control plane: exactly what the actions use.
NAMESPACED_RULES: list[dict[str, Any]] = [
    {"api-groups": ["jobset.x-k8s.io"], "resources": ["jobsets"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    {"api-groups": ["batch"], "resources": ["jobs"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    {"api-groups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
    {"api-groups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"api-groups": [""], "resources": ["services", "configmaps"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    # serve: the model server's REST API through the API server (serving.py); GET is
    # `get` on services/proxy, POST is `create`
    {"api-groups": [""], "resources": ["services/proxy"], "verbs": ["get", "create"]},
    {"api-groups": ["apps"], "resources": ["deployments"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    {"api-groups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]},
    # what may reach the team's pods beyond the control plane's default-deny
    # (network_policies.py): each job's and each served model's NetworkPolicy
    {"api-groups": ["networking.k8s.io"], "resources": ["networkpolicies"],
     "verbs": ["get", "create", "patch", "delete"]},
    # the image pull Secret from config image-pull-secret (registry_auth.py)
    {"api-groups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch", "delete"]},
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["localqueues"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    {"api-groups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list"]},
    # job-status and train dry-run=true: the team's queue as Kueue orders it, through the
    # visibility API (queues.py); in this namespace only, so never another team's queue
    {"api-groups": ["visibility.kueue.x-k8s.io"], "resources": ["localqueues/pendingworkloads"],
     "verbs": ["get"]},
]  # fmt: skip
CLUSTER_QUEUE_PREFIX = "team-"  # the team's ClusterQueue is team-<namespace> (queues.py)
COHORT = "gpu-k8s"  # the control plane's cohort, which every team's ClusterQueue joins


def cluster_rules(namespace: str) -> list[dict[str, Any]]:
    """The cluster-wide rules asked for: allowed reads only (kube_api CLUSTER_READS).

    The team's ClusterQueue is the control plane's: it writes it from the quota this
    application asks for on the relation (`quota_request`), so none is written here.
    """
    return [
        # Nodes: GPU capacity for the quota and for refusing jobs no node can hold
        {"api-groups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
        # the flavors the ClusterQueue draws on
        {"api-groups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"],
         "verbs": ["get", "list"]},
        # the cohort's whole quota (its own and every member's nominal), the most Kueue
        # could ever admit: train refuses a job larger (placement.beyond_cohort)
        {"api-groups": ["kueue.x-k8s.io"], "resources": ["cohorts"], "verbs": ["get"],
         "resource-names": [COHORT]},
        # every ClusterQueue of the cohort: their nominal quotas, limits and use (status
        # flavorsReservation), what the cohort lends the team now and could ever give it
        # (queues.Tree: job-status, train dry-run=true, placement.beyond_cohort)
        {"api-groups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"],
         "verbs": ["get", "list"]},
    ]  # fmt: skip
