# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""A training job as the Kubernetes objects the charm applies (no ops, no I/O).

`Context` is where and how the charm runs jobs (namespace, claim, images, user, pull
Secret); the functions turn a validated `params.TrainRequest` into manifests, and
`training.py` applies them. A job `<job>` is:

- one JobSet `<job>` (jobset.x-k8s.io/v1alpha2, see `jobset`), labelled with the
  application's Kueue LocalQueue and a priority, holding one replicated Job per role
  (`worker`; for `strategy=ps` also `chief` and `ps`), each a single Indexed Job with
  completions = parallelism = replicas. JobSet gives every pod the hostname
  `<job>-<role>-0-<i>` under the subdomain `<job>` (its headless Service), exactly the
  address `tf_launcher.build_tf_config` writes into `TF_CONFIG`; it restarts the gang on a
  failure, ends the job when the chief succeeds and deletes it `job-ttl` after;
- a ConfigMap `<job>-code` holding `tf_launcher.py` and `tf_trainer.py`, mounted at
  /opt/gpu-k8s; the shared volume's claim is mounted at /data;
- a TensorBoard Deployment + Service `<job>-tensorboard` over `/data/jobs/<job>/logs`;
- after `stop purge=true`, a Job `<job>-purge` that removes the job's data.

Every object carries the labels `labels`/`selector` read back.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import datasets
import network_policies
import oneshot
from literals import (
    CODE_MOUNT,
    COMPONENT_PURGE,
    COMPONENT_TENSORBOARD,
    COMPONENT_TRAINING,
    DATA_MOUNT,
    EXIT_NO_GPU,
    EXIT_SETUP,
    EXIT_STOPPED,
    GPU_RUNTIME_CLASS,
    GRACE_SECONDS,
    JOBSET_API,
    LABEL_COMPONENT,
    LABEL_GPU_PRODUCT,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_MAX_EXEC_TIME,
    LABEL_PRIORITY,
    LABEL_QUEUE,
    LABEL_ROLE,
    LAUNCHER,
    LOCAL_QUEUE,
    METRICS_PORT,
    PURGE_TTL_SECONDS,
    TENSORBOARD_PORT,
    TF_PORT,
)
from params import TrainRequest, check_job_name, parse_env, split_words

from charms.gpu_k8s.v0.images import mirrored
from charms.gpu_k8s.v0.kube_objects import GPU_RESOURCE

_TF_IMAGE = re.compile(r"^(docker\.io/)?tensorflow/tensorflow:[^-]+$")

# Every container of the charm's pods: what Pod Security `restricted` requires of a
# container (kubernetes.io/docs/concepts/security/pod-security-standards/, "Restricted":
# allowPrivilegeEscalation false, capabilities drop ALL and add at most NET_BIND_SERVICE;
# pod-security-admission policy/check_allowPrivilegeEscalation.go,
# check_capabilities_restricted.go). No process of a job gains a privilege through a
# setuid binary of its image, and none keeps a capability.
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def from_registry(image: str, registry: str) -> str:
    """A configured image as pods pull it: moved to the `image-registry` mirror.

    Empty `registry` keeps `image`; so does an image already under `registry` (an operator
    may configure the mirrored name itself: it is not moved a second time).
    """
    return mirrored(image, registry)


@dataclasses.dataclass(frozen=True)
class Context:
    """Where and how the charm runs jobs.

    `default_image` and `tensorboard_image` are the config values; pods pull them from
    `registry` (the `image-registry` option) when it is set. An image given to `train`
    is used as given.
    """

    namespace: str
    app: str
    claim: str
    default_image: str
    tensorboard_image: str
    registry: str = ""
    user: tuple[int, int] = (1000, 1000)
    max_restarts: int = 3
    ttl_seconds: int = 24 * 3600
    queue: str = LOCAL_QUEUE
    pull_secret: str = ""  # the image pull Secret every pod names (registry_auth), if any

    @property
    def identity_env(self) -> dict[str, str]:
        """Environment for a user the image has no passwd entry for (empty for root).

        Programs that write under ~ (Keras' cache, pip --user) get a writable HOME, and
        `getpass.getuser()` (which reads LOGNAME and USER first) a name; a job's own env
        wins.
        """
        if self.user[0] == 0:
            return {}
        return {"HOME": "/tmp", "USER": self.app, "LOGNAME": self.app}

    def identity_env_list(self) -> list[dict[str, str]]:
        """`identity_env` as a container's `env`."""
        return [{"name": k, "value": v} for k, v in self.identity_env.items()]

    @property
    def pod_security(self) -> dict[str, Any]:
        """The pod securityContext: the `run-as` user and group, Pod Security `restricted`.

        The application's namespace enforces `restricted` (the control plane labels it),
        which refuses a pod without `runAsNonRoot: true`, with `runAsUser: 0`, or without a
        RuntimeDefault or Localhost seccomp profile (kubernetes.io/docs/concepts/security/
        pod-security-standards/, "Restricted"; pod-security-admission policy/
        check_runAsNonRoot.go, check_runAsUser.go, check_seccompProfile_restricted.go).
        `run-as` refuses uid 0 (params.parse_user), so a pod never asks for root.
        """
        uid, gid = self.user
        return {
            "runAsUser": uid,
            "runAsGroup": gid,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }

    def pod_basics(self) -> dict[str, Any]:
        """What every pod of the charm has: its user, no API token, the pull Secret if any.

        No pod of the charm talks to the Kubernetes API, so none gets the namespace's
        default ServiceAccount token (a token mounted into a tenant's image is a
        credential it does not need; Pod Security's "Restricted" profile and the RBAC
        good-practices page both say so).
        """
        basics: dict[str, Any] = {
            "securityContext": self.pod_security,
            "automountServiceAccountToken": False,
        }
        if self.pull_secret:
            basics["imagePullSecrets"] = [{"name": self.pull_secret}]
        return basics

    @staticmethod
    def restricted(container: dict[str, Any]) -> dict[str, Any]:
        """`container` with the securityContext every container of the charm has."""
        return {**container, "securityContext": copy.deepcopy(CONTAINER_SECURITY)}

    def pulled(self, image: str) -> str:
        """A configured image as pods pull it (see `from_registry`)."""
        return from_registry(image, self.registry)

    def image_for(self, request: TrainRequest, role: str = "worker") -> str:
        """The request's image, or the default: its `-gpu` variant for a role with GPUs.

        A chief or parameter server without GPUs gets the CPU image (about a tenth of the
        `-gpu` one's size) on whatever node it lands; parameter servers get `ps_image`
        when the request names one.
        """
        if role == "ps" and request.ps_image:
            return request.ps_image
        if request.image:
            return request.image
        image = self.pulled(self.default_image)
        upstream = self.default_image
        if self.registry:
            upstream = upstream.removeprefix(f"{self.registry}/")
        if request.gpus(role) and gpu_variant(upstream) is not None:
            return f"{image}-gpu"
        return image


def gpu_variant(image: str) -> str | None:
    """The `-gpu` image of a tensorflow/tensorflow image (None: other images have none).

    TensorFlow's Docker guide (tensorflow.org/install/docker) tags each release `<version>`
    and `<version>-gpu`, the latter with CUDA; training roles with GPUs get it.
    """
    return f"{image}-gpu" if _TF_IMAGE.match(image) else None


def labels(app: str, job: str, component: str | None = None, role: str | None = None) -> dict:
    """The labels of one object of a job."""
    out = {LABEL_MANAGED_BY: app, LABEL_JOB: job}
    if component:
        out[LABEL_COMPONENT] = component
    if role:
        out[LABEL_ROLE] = role
    return out


def selector(app: str, job: str | None = None, component: str | None = None) -> str:
    """A label selector string for the app's objects (of one job, of one component)."""
    terms = [f"{LABEL_MANAGED_BY}={app}"]
    if job:
        terms.append(f"{LABEL_JOB}={job}")
    if component:
        terms.append(f"{LABEL_COMPONENT}={component}")
    return ",".join(terms)


def _meta(name: str, ctx: Context, lbls: dict) -> dict:
    return {"name": name, "namespace": ctx.namespace, "labels": dict(lbls)}


def code_configmap(request: TrainRequest, ctx: Context, code: Mapping[str, str]) -> dict:
    """The ConfigMap `<job>-code` with the launcher and trainer sources."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(f"{request.job}-code", ctx, labels(ctx.app, request.job)),
        "data": dict(code),
    }


def _command(request: TrainRequest) -> list[str]:
    launcher = ["python3", f"{CODE_MOUNT}/{LAUNCHER}", "--"]
    args = split_words(request.args, "args")
    if request.command:
        return [*launcher, *split_words(request.command, "command"), *args]
    return [*launcher, "--steps", str(request.steps), *args]


def _env(request: TrainRequest, role: str, ctx: Context) -> list[dict]:
    fixed = {
        "GPU_K8S_JOB": request.job,
        "GPU_K8S_SERVICE": request.job,
        "GPU_K8S_STRATEGY": request.strategy,
        "GPU_K8S_ROLE": role,
        "GPU_K8S_WORKERS": str(request.workers),
        "GPU_K8S_PS": str(request.ps),
        "GPU_K8S_PORT": str(TF_PORT),
        "GPU_K8S_DATA_DIR": DATA_MOUNT,
        "GPU_K8S_STEPS": str(request.steps),
        "GPU_K8S_GPUS": str(request.gpus(role)),
        "GPU_K8S_GRACE_SECONDS": str(GRACE_SECONDS),
        "GPU_K8S_METRICS_PORT": str(METRICS_PORT),  # the launcher's progress (job_metrics.py)
        "PYTHONUNBUFFERED": "1",
    }
    if request.dataset:
        fixed["GPU_K8S_DATASET_DIR"] = datasets.dataset_dir(request.dataset)
    if request.strategy == "ps":
        # TensorFlow's parameter-server tutorial sets it on every task, so that worker and
        # ps failures reach the coordinator instead of hanging its RPCs.
        fixed["GRPC_FAIL_FAST"] = "use_caller"
    merged = {**ctx.identity_env, **parse_env(request.env), **fixed}
    return [{"name": k, "value": v} for k, v in merged.items()]


def _volumes(request: TrainRequest, ctx: Context, read_only: bool = False) -> list[dict]:
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": ctx.claim, "readOnly": read_only}}
    ]
    if not read_only:
        volumes.append(
            {"name": "code", "configMap": {"name": f"{request.job}-code", "defaultMode": 0o555}}
        )
    return volumes


def replicated_job(request: TrainRequest, ctx: Context, role: str) -> dict:
    """One role of the JobSet: a single Indexed Job of `replicas` pods that never restart.

    A pod that fails fails its Job at once (`backoffLimit: 0`, `restartPolicy: Never`), and
    the JobSet's failure policy restarts the whole gang: under MWMS every survivor would
    exit anyway once a peer dies. `podFailurePolicy` (kubernetes.io Job docs, "Handling
    retriable and non-retriable pod failures with Pod failure policy"; rules in order, the
    first match wins) replaces without counting a pod evicted by a drain or preempted
    (condition `DisruptionTarget`), and fails the Job (FailJob, reason PodFailurePolicy,
    message "Container tensorflow for pod <ns>/<pod> failed with exit code <N> matching
    FailJob rule at index <i>", kubernetes pkg/controller/job/pod_failure_policy.go) on
    the launcher's exit codes: 143, stopped on a SIGTERM (its own or a peer's, after the
    chief's save), which `jobset`'s first rule restarts without counting; 82 (the
    launcher cannot start the task) and 83 (no GPU), which its second rule turns into a
    failed job instead of futile restarts. Any other exit counts (backoffLimit 0: the
    Job fails, BackoffLimitExceeded, and JobSet restarts the gang toward max-restarts). A
    GPU fault fails the program before the GPU watcher's eviction: the launcher holds a
    failed program's exit for its fault window (tf_launcher.py "A GPU fault"), so the
    eviction finds the pod Running, which ends with DisruptionTarget and 143 (rule 0), its
    peers with 143 (rule 1): neither counts. Under MWMS the worker Job
    succeeds as soon as worker 0, the chief, does (Job `successPolicy`, GA in 1.33).
    """
    replicas = request.replicas()[role]
    gpus = request.gpus(role)
    cpu, memory = request.resources(role)
    # No CPU limit: TensorFlow sizes its thread pools by the host's cores, not the CFS
    # quota, so a limit throttles it (tf.md #12); the request is what Kueue counts against
    # the team's cpu quota and what the scheduler reserves. Memory is limited at the
    # request, so a replica that outgrows it is OOMKilled (and `logs` says so) rather than
    # starving its node.
    resources: dict[str, dict[str, str]] = {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"memory": memory},
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        **ctx.pod_basics(),
        "containers": [
            ctx.restricted(
                {
                    "name": "tensorflow",
                    "image": ctx.image_for(request, role),
                    "command": _command(request),
                    "env": _env(request, role, ctx),
                    "ports": [
                        {"name": "grpc", "containerPort": TF_PORT},
                        {"name": "metrics", "containerPort": METRICS_PORT},
                    ],
                    "resources": resources,
                    "volumeMounts": [
                        {"name": "data", "mountPath": DATA_MOUNT},
                        {"name": "code", "mountPath": CODE_MOUNT, "readOnly": True},
                    ],
                }
            )
        ],
        "volumes": _volumes(request, ctx),
        # Every role tolerates the GPU nodes' taint: the team's cpu and memory quota counts
        # their CPUs and memory (queues.capacity), so a chief, parameter server or CPU-only
        # worker Kueue admitted must be able to land there, or its gang would wait for a
        # node until waitForPodsReady evicts it, again and again. A pod with no GPU still
        # prefers a node without one, leaving the GPU nodes' CPUs to their GPU pods.
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists"}],
    }
    if gpus:
        resources["limits"][GPU_RESOURCE] = str(gpus)
        pod_spec["runtimeClassName"] = GPU_RUNTIME_CLASS
    else:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [
                                {"key": LABEL_GPU_PRODUCT, "operator": "DoesNotExist"}
                            ]
                        },
                    }
                ]
            }
        }
    if gpus > 1:
        # NCCL between the GPUs of one pod passes data through /dev/shm, which a container
        # gets at 64 MiB by default; a memory-backed emptyDir lifts that (it counts against
        # the pod's memory limit).
        pod_spec["volumes"].append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        pod_spec["containers"][0]["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
    pod_labels = labels(ctx.app, request.job, COMPONENT_TRAINING, role)
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": replicas,
        "parallelism": replicas,
        "backoffLimit": 0,
        # What the podFailurePolicy implies (SetDefaults_Job), written out: the JobSet
        # controller copies this spec into each Job (jobset v0.12.0 constructJob) and the
        # control plane wants it on the template (admission_policies CONSUMER_TERMINATING)
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
                {  # stopped on a SIGTERM (tf_launcher): the JobSet's rule 0 restarts it
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": "tensorflow",
                        "operator": "In",
                        "values": [EXIT_STOPPED],
                    },
                },
                {  # cannot start, or no GPU (tf_launcher): a restart cannot help
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": "tensorflow",
                        "operator": "In",
                        "values": [EXIT_SETUP, EXIT_NO_GPU],
                    },
                },
            ]
        },
        "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
    }
    if request.strategy == "mwms" and role == "worker":
        job_spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
    return {
        "name": role,
        "replicas": 1,
        "template": {"metadata": {"labels": pod_labels}, "spec": job_spec},
    }


def jobset(request: TrainRequest, ctx: Context) -> dict:
    """The JobSet `<job>`: every role, queued in Kueue, restarted and ended as one gang.

    JobSet API v1alpha2 (kubernetes-sigs/jobset v0.12.0): `network` gives each pod the
    hostname `<job>-<role>-0-<i>` under the subdomain `<job>` (the launcher's TF_CONFIG);
    `successPolicy` Any on the chief's role ends the job when the chief succeeds and
    JobSet deletes the Jobs still running (parameter servers); `failurePolicy` recreates
    every Job on a failure (`replicated_job`'s exit codes): without counting when the
    gang stopped on a SIGTERM, for good when the task cannot start or has no GPU, and
    otherwise `max-restarts` times (jobset v0.12.0 api/jobset/v1alpha2/jobset_types.go
    FailurePolicyRule: rules in order, the first whose `onJobFailureReasons` and
    `onJobFailureMessagePatterns` (RE2, unanchored) both match a failed Job wins;
    none matching: RestartJobSet). `restartStrategy: BlockingRecreate` ("all Jobs (and
    their Pods) from the previous iteration are deleted before creating new Jobs", same
    file; `Recreate` recreates each Job as soon as its own previous one is gone), so a
    new gang never meets an old one still saving under the same DNS names (review N5);
    `ttlSecondsAfterFinished` has JobSet delete a finished job (its data stays on the
    shared volume). `suspend` is left to Kueue, whose webhook suspends a JobSet with a
    queue label until it is admitted.
    """
    chief_role, _ = request.chief()
    meta = _meta(request.job, ctx, labels(ctx.app, request.job, COMPONENT_TRAINING))
    meta["labels"][LABEL_QUEUE] = ctx.queue
    meta["labels"][LABEL_PRIORITY] = request.priority
    if request.deadline:
        # Kueue v0.19.2 copies this label to its Workload's maximumExecutionTimeSeconds
        # (pkg/controller/jobframework/utils.go MaximumExecutionTimeSecondsForObject) and
        # deactivates the Workload once it has been admitted that long in all, the time
        # of earlier admissions (before a preemption or requeue) included
        # (core/workload_controller.go reconcileMaxExecutionTime:
        # accumulatedPastExecutionTimeSeconds + time since the Admitted condition). The
        # start is Kueue's admission, not the creation: queued time does not count. An
        # evicted JobSet is suspended and its pods deleted with their grace period, so
        # the trainer saves on SIGTERM as for a preemption; the JobSet, its request and
        # the checkpoints stay (the job is not restarted: `stop` removes it).
        meta["labels"][LABEL_MAX_EXEC_TIME] = str(request.deadline * 3600)
    meta["annotations"] = request.annotations()
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": meta,
        "spec": {
            "network": {
                "enableDNSHostnames": True,
                "subdomain": request.job,
                "publishNotReadyAddresses": True,
            },
            "successPolicy": {"operator": "Any", "targetReplicatedJobs": [chief_role]},
            "failurePolicy": {
                "maxRestarts": ctx.max_restarts,
                "restartStrategy": "BlockingRecreate",
                # in order, the first rule any failed Job matches wins: a job that cannot
                # start fails; a real failure counts even when other Jobs stopped with it
                "rules": [
                    {  # the launcher cannot start the task, or sees no GPU (exit 82, 83)
                        "name": "noRestartWithoutGPU",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                        "onJobFailureMessagePatterns": [
                            f"failed with exit code ({EXIT_SETUP}|{EXIT_NO_GPU}) matching FailJob"
                        ],
                    },
                    {  # any other exit of a program: counted toward max-restarts
                        "name": "failureCounts",
                        "action": "RestartJobSet",
                        "onJobFailureReasons": ["BackoffLimitExceeded"],
                    },
                    {  # stopped on a SIGTERM (exit 143): a drain is not the job's fault
                        "name": "stoppedNotCounted",
                        "action": "RestartJobSetAndIgnoreMaxRestarts",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                        "onJobFailureMessagePatterns": [
                            f"failed with exit code {EXIT_STOPPED} matching FailJob rule"
                        ],
                    },
                ],
            },
            "ttlSecondsAfterFinished": ctx.ttl_seconds,
            "replicatedJobs": [replicated_job(request, ctx, r) for r in request.replicas()],
        },
    }


def tensorboard(request: TrainRequest, ctx: Context) -> list[dict]:
    """The TensorBoard Deployment and Service `<job>-tensorboard`.

    Queued in the team's LocalQueue at its job's priority (oneshot.queued: Kueue admits
    every pod of the team's namespace), so it shares the job's fate within the queue.
    """
    name = f"{request.job}-tensorboard"
    lbls = labels(ctx.app, request.job, COMPONENT_TENSORBOARD)
    queued = oneshot.queued(lbls, ctx.queue, request.priority)
    logdir = f"{DATA_MOUNT}/jobs/{request.job}/logs"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, ctx, queued),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": lbls},
            "template": {
                "metadata": {"labels": queued},
                "spec": {
                    **ctx.pod_basics(),
                    "containers": [
                        ctx.restricted(
                            {
                                "name": "tensorboard",
                                "image": ctx.pulled(ctx.tensorboard_image),
                                "env": ctx.identity_env_list(),
                                "command": [
                                    "tensorboard",
                                    "--logdir",
                                    logdir,
                                    "--bind_all",
                                    "--port",
                                    str(TENSORBOARD_PORT),
                                ],  # fmt: skip
                                "ports": [{"name": "http", "containerPort": TENSORBOARD_PORT}],
                                "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}},
                                "volumeMounts": [
                                    {"name": "data", "mountPath": DATA_MOUNT, "readOnly": True}
                                ],
                            }
                        )
                    ],
                    "volumes": _volumes(request, ctx, read_only=True),
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, ctx, lbls),
        "spec": {
            "selector": lbls,
            "ports": [{"name": "http", "port": TENSORBOARD_PORT, "targetPort": TENSORBOARD_PORT}],
        },
    }
    return [deployment, service]


def network_policies_of(request: TrainRequest, ctx: Context) -> list[dict]:
    """What may reach the job's pods (network_policies.py): its own pods, the team's."""
    return [
        network_policies.training(ctx.app, request.job, ctx.namespace, COMPONENT_TRAINING),
        network_policies.tensorboard(
            ctx.app,
            request.job,
            ctx.namespace,
            labels(ctx.app, request.job, COMPONENT_TENSORBOARD),
        ),
    ]


def manifests(request: TrainRequest, ctx: Context, code: Mapping[str, str]) -> list[dict]:
    """Every object of a job, in creation order (JobSet, code, TensorBoard, policies).

    The JobSet comes first: the others are created owned by it (training._apply_all).
    """
    return [
        jobset(request, ctx),
        code_configmap(request, ctx, code),
        *tensorboard(request, ctx),
        *network_policies_of(request, ctx),
    ]


def tensorboard_url(job: str, namespace: str) -> str:
    """The in-cluster URL of a job's TensorBoard."""
    return f"http://{job}-tensorboard.{namespace}.svc:{TENSORBOARD_PORT}"


def purge_job(job: str, ctx: Context) -> dict:
    """A short-lived Job that removes `/data/jobs/<job>` from the shared volume.

    In the team's LocalQueue like every Job of the charm (oneshot.queued).
    """
    check_job_name(job)  # the name goes into an rm -rf path
    lbls = labels(ctx.app, job, COMPONENT_PURGE)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(f"{job}-purge", ctx, oneshot.queued(lbls, ctx.queue)),
        "spec": {
            "backoffLimit": 2,
            # a replacement only once the old pod is gone (admission_policies
            # CONSUMER_TERMINATING refuses any other in a consumer's namespace)
            "podReplacementPolicy": "Failed",
            "ttlSecondsAfterFinished": PURGE_TTL_SECONDS,
            "template": {
                "metadata": {"labels": lbls},
                "spec": {
                    "restartPolicy": "Never",
                    **ctx.pod_basics(),
                    "containers": [
                        ctx.restricted(
                            {
                                "name": "purge",
                                "image": ctx.pulled(ctx.default_image),
                                "env": ctx.identity_env_list(),
                                "command": ["rm", "-rf", "--", f"{DATA_MOUNT}/jobs/{job}"],
                                "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT}],
                            }
                        )
                    ],
                    "volumes": [
                        {"name": "data", "persistentVolumeClaim": {"claimName": ctx.claim}}
                    ],
                },
            },
        },
    }
