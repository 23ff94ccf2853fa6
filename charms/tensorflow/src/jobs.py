# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Training jobs as Kubernetes objects: request validation and manifests.

No ops and no I/O here: functions take data and return data (`training.py` talks to the
API server).

A job `<job>` is:

- one JobSet `<job>` (jobset.x-k8s.io/v1alpha2, see `jobset`), labelled with the
  application's Kueue LocalQueue and a priority, holding one replicated Job per role
  (`worker`; for `strategy=ps` also `chief` and `ps`), each a single Indexed Job with
  completions = parallelism = replicas. JobSet gives every pod the hostname
  `<job>-<role>-0-<i>` under the subdomain `<job>` (its headless Service), exactly the
  address `tf_launcher.build_tf_config` writes into `TF_CONFIG`; it restarts the gang on a
  failure, ends the job when the chief succeeds and deletes it `job-ttl` after;
- a ConfigMap `<job>-code` holding `tf_launcher.py` and `tf_trainer.py`, mounted at
  /opt/gpu-k8s; the shared volume's claim is mounted at /data;
- a TensorBoard Deployment + Service `<job>-tensorboard` over `/data/jobs/<job>/logs`.

Where a job could run is `placement.py`, where it stands `job_state.py`, how far it got
`progress.py`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Mapping
from typing import Any, Literal

import datasets
import pydantic
from literals import (
    ANNOTATION_REQUEST,
    BUILTIN_SCRIPTS,
    CODE_MOUNT,
    COMPONENT_PURGE,
    COMPONENT_TENSORBOARD,
    COMPONENT_TRAINING,
    DATA_MOUNT,
    EXIT_NO_GPU,
    EXIT_STOPPED,
    GPU_RESOURCE,
    GPU_RUNTIME_CLASS,
    JOB_NAME_MAX,
    JOBSET_API,
    LABEL_COMPONENT,
    LABEL_GPU_PRODUCT,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_PRIORITY,
    LABEL_QUEUE,
    LABEL_ROLE,
    LAUNCHER,
    LOCAL_QUEUE,
    MAX_WORKERS,
    PURGE_TTL_SECONDS,
    TENSORBOARD_PORT,
    TF_PORT,
)

from charms.gpu_k8s.v0.config import ActionParams
from charms.gpu_k8s.v0.images import mirrored

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")
_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "m": 10**-3, "": 1,
}  # fmt: skip


def quantity(text: str) -> float:
    """A Kubernetes quantity as a number (`500m` 0.5, `64Gi` 68719476736); ValueError."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes quantity such as 16, 500m or 64Gi")
    return float(match.group(1)) * _SUFFIXES[match.group(2) or ""]


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_ENV = ("GPU_K8S_", "TF_CONFIG", "JOB_COMPLETION_INDEX")
_TF_IMAGE = re.compile(r"^(docker\.io/)?tensorflow/tensorflow:[^-]+$")


def check_job_name(value: str) -> str:
    """Return `value` when it is a valid job name; raise ValueError saying what to change."""
    if not isinstance(value, str) or not _DNS_LABEL.match(value) or len(value) > JOB_NAME_MAX:
        raise ValueError(
            f"{value!r} is not a valid job name: use 1-{JOB_NAME_MAX} lowercase letters, "
            "digits and '-', starting with a letter and ending with a letter or digit"
        )
    return value


def _check_quantity(value: str, what: str, example: str) -> str:
    if not _QUANTITY.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity: give {what} like {example}")
    return value


def parse_env(text: str) -> dict[str, str]:
    """Parse `KEY=VALUE KEY2='VALUE 2'` (shell quoting) into a dict.

    Raises:
        ValueError: a word is not KEY=VALUE, or a key is malformed or reserved.
    """
    env: dict[str, str] = {}
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"cannot parse env ({e}): use KEY=VALUE pairs") from None
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not _ENV_NAME.match(key):
            raise ValueError(f"{word!r} is not KEY=VALUE: use pairs such as BATCH=64 SEED=1")
        if key.startswith(_RESERVED_ENV):
            raise ValueError(f"{key} is set by the charm: remove it from env")
        env[key] = value
    return env


_ID_MAX = 2**32 - 2


def parse_user(text: str) -> tuple[int, int]:
    """`uid:gid` as two numbers; ValueError saying what is wrong."""
    uid, sep, gid = text.partition(":")
    if not sep or not uid.isdigit() or not gid.isdigit():
        raise ValueError(f"{text!r} is not uid:gid, such as 1000:1000 (0:0 runs pods as root)")
    if int(uid) > _ID_MAX or int(gid) > _ID_MAX:
        raise ValueError(f"uid and gid must be at most {_ID_MAX}")
    return int(uid), int(gid)


def _split(text: str, what: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as e:
        raise ValueError(f"cannot parse {what} ({e}): check its quotes") from None


class JobParams(ActionParams):
    """Parameters naming one existing job."""

    job: str

    @pydantic.field_validator("job")
    @classmethod
    def _job(cls, value: str) -> str:
        return check_job_name(value)


class TrainRequest(ActionParams):
    """The `train` action's parameters (also stored on the job for `scale`)."""

    job: str = "mnist"
    image: str = ""
    script: str = ""
    command: str = ""
    args: str = ""
    env: str = ""
    strategy: Literal["mwms", "ps"] = "mwms"
    workers: int = 2
    ps: int = 0
    gpus_per_worker: int = 0
    cpu: str = "1"
    memory: str = "4Gi"
    # Per role (strategy=ps): empty means as the workers.
    chief_cpu: str = ""
    chief_memory: str = ""
    ps_cpu: str = ""
    ps_memory: str = ""
    ps_image: str = ""
    steps: int = 1000
    timeout: int = 300
    priority: Literal["low", "normal", "high"] = "normal"
    wait: bool = False
    dataset: str = ""  # an imported dataset (datasets.py), at GPU_K8S_DATASET_DIR

    @pydantic.field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        return datasets.check_name(value) if value else value

    @pydantic.field_validator("job")
    @classmethod
    def _job(cls, value: str) -> str:
        return check_job_name(value)

    @pydantic.field_validator("workers")
    @classmethod
    def _workers(cls, value: int) -> int:
        if not 1 <= value <= MAX_WORKERS:
            raise ValueError(f"must be between 1 and {MAX_WORKERS}, got {value}")
        return value

    @pydantic.field_validator("ps", "timeout")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be 0 or more, got {value}")
        return value

    @pydantic.field_validator("gpus_per_worker")
    @classmethod
    def _gpus(cls, value: int) -> int:
        if not 0 <= value <= 16:
            raise ValueError(f"must be between 0 and 16 GPUs, got {value}")
        return value

    @pydantic.field_validator("steps")
    @classmethod
    def _steps(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be at least 1, got {value}")
        return value

    @pydantic.field_validator("cpu", "chief_cpu", "ps_cpu")
    @classmethod
    def _cpu(cls, value: str, info: pydantic.ValidationInfo) -> str:
        if not value and info.field_name != "cpu":
            return value
        return _check_quantity(value, "cpu", "2 or 500m")

    @pydantic.field_validator("memory", "chief_memory", "ps_memory")
    @classmethod
    def _memory(cls, value: str, info: pydantic.ValidationInfo) -> str:
        if not value and info.field_name != "memory":
            return value
        return _check_quantity(value, "memory", "8Gi")

    @pydantic.field_validator("script")
    @classmethod
    def _script(cls, value: str) -> str:
        if value and value not in BUILTIN_SCRIPTS:
            raise ValueError(
                f"unknown script {value!r}: use {', '.join(sorted(BUILTIN_SCRIPTS))}, "
                "or run your own program with command=..."
            )
        return value

    @pydantic.field_validator("env")
    @classmethod
    def _env(cls, value: str) -> str:
        parse_env(value)
        return value

    @pydantic.field_validator("command", "args")
    @classmethod
    def _words(cls, value: str, info: pydantic.ValidationInfo) -> str:
        _split(value, info.field_name or "value")
        return value

    @pydantic.field_validator("image", "ps_image")
    @classmethod
    def _image(cls, value: str) -> str:
        if value and (any(c.isspace() for c in value) or value.startswith("-")):
            raise ValueError(f"{value!r} is not an image reference such as repo/name:tag")
        return value

    @pydantic.model_validator(mode="after")
    def _combination(self) -> TrainRequest:
        if self.script and self.command:
            raise ValueError("give either script or command, not both")
        if self.strategy == "mwms" and self.ps:
            raise ValueError(f"ps={self.ps} needs strategy=ps; set ps=0 for strategy mwms")
        if self.strategy == "ps" and self.ps < 1:
            raise ValueError("strategy=ps needs at least one parameter server: set ps >= 1")
        per_role = ("chief_cpu", "chief_memory", "ps_cpu", "ps_memory", "ps_image")
        given = [name.replace("_", "-") for name in per_role if getattr(self, name)]
        if given and self.strategy != "ps":
            raise ValueError(
                f"{', '.join(given)} apply to strategy=ps only (under mwms every task is a "
                "worker: use cpu, memory and image)"
            )
        return self

    def resources(self, role: str) -> tuple[str, str]:
        """(cpu, memory) each replica of `role` requests."""
        cpu = {"chief": self.chief_cpu, "ps": self.ps_cpu}.get(role) or self.cpu
        memory = {"chief": self.chief_memory, "ps": self.ps_memory}.get(role) or self.memory
        return cpu, memory

    def replicas(self) -> dict[str, int]:
        """Replicas of every role, in creation order."""
        if self.strategy == "ps":
            return {"chief": 1, "ps": self.ps, "worker": self.workers}
        return {"worker": self.workers}

    def gpus(self, role: str) -> int:
        """GPUs per replica of `role` (only workers get GPUs)."""
        return self.gpus_per_worker if role == "worker" else 0

    def gpu_demands(self) -> list[int]:
        """GPUs of every replica that needs some."""
        return [g for role, n in self.replicas().items() for g in [self.gpus(role)] * n if g]

    def chief(self) -> tuple[str, int]:
        """The task that reports progress: `chief` 0 for ps, else `worker` 0."""
        return ("chief", 0) if self.strategy == "ps" else ("worker", 0)

    def to_json(self) -> str:
        """The request as JSON, for the job's annotation."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> TrainRequest:
        """The request stored by `to_json` (raises ValueError when it does not validate)."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            raise ValueError("the job's stored request is not JSON") from None
        if not isinstance(data, dict):
            raise ValueError("the job's stored request is not a JSON object")
        return cls(**data)


class ScaleParams(JobParams):
    """The `scale` action's parameters."""

    workers: int
    timeout: int = 300

    @pydantic.field_validator("workers")
    @classmethod
    def _workers(cls, value: int) -> int:
        if not 1 <= value <= MAX_WORKERS:
            raise ValueError(f"must be between 1 and {MAX_WORKERS}, got {value}")
        return value

    @pydantic.field_validator("timeout")
    @classmethod
    def _timeout(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be 0 or more, got {value}")
        return value


class LogsParams(JobParams):
    """The `logs` action's parameters: every replica, or one role, or one replica."""

    lines: int = 20
    role: Literal["all", "chief", "ps", "worker"] = "all"
    index: int = -1  # -1: every index

    @pydantic.model_validator(mode="after")
    def _index_needs_role(self) -> LogsParams:
        if self.index >= 0 and self.role == "all":
            raise ValueError("index needs role (for example role=worker index=3)")
        return self

    @pydantic.field_validator("lines")
    @classmethod
    def _lines(cls, value: int) -> int:
        if not 1 <= value <= 1000:
            raise ValueError(f"must be between 1 and 1000, got {value}")
        return value


class StopParams(JobParams):
    """The `stop` action's parameters."""

    purge: bool = False


class NoParams(ActionParams):
    """An action without parameters."""


# ---------------------------------------------------------------- manifests


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
        """The pod securityContext: the `run-as` user and group, never a privilege gain."""
        uid, gid = self.user
        security: dict[str, Any] = {"runAsUser": uid, "runAsGroup": gid}
        if uid != 0:
            security["runAsNonRoot"] = True
        return security

    def pod_basics(self) -> dict[str, Any]:
        """What every pod of the charm has: its user, and the image pull Secret if any."""
        basics: dict[str, Any] = {"securityContext": self.pod_security}
        if self.pull_secret:
            basics["imagePullSecrets"] = [{"name": self.pull_secret}]
        return basics

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
        if request.gpus(role) and _TF_IMAGE.match(upstream):
            return f"{image}-gpu"
        return image


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
    args = _split(request.args, "args")
    if request.command:
        return [*launcher, *_split(request.command, "command"), *args]
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
    exit anyway once a peer dies. `podFailurePolicy` (kubernetes.io Job docs, "Pod failure
    policy") replaces without counting a pod evicted by a drain or preempted (condition
    `DisruptionTarget`) and one that exited 143 after the gang agreed to stop and saved
    (tf_trainer's SIGTERM path: the pods come back and resume from that step); and fails
    the Job for good when the launcher found no GPU (exit 3), which the JobSet's
    failure policy turns into a failed job instead of futile restarts. Under MWMS the worker Job
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
        **ctx.pod_basics(),
        "containers": [
            {
                "name": "tensorflow",
                "image": ctx.image_for(request, role),
                "command": _command(request),
                "env": _env(request, role, ctx),
                "ports": [{"name": "grpc", "containerPort": TF_PORT}],
                "resources": resources,
                "volumeMounts": [
                    {"name": "data", "mountPath": DATA_MOUNT},
                    {"name": "code", "mountPath": CODE_MOUNT, "readOnly": True},
                ],
            }
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
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
                {  # the gang agreed to stop and saved (tf_trainer): replaced, not counted
                    "action": "Ignore",
                    "onExitCodes": {
                        "containerName": "tensorflow",
                        "operator": "In",
                        "values": [EXIT_STOPPED],
                    },
                },
                {  # TensorFlow sees no GPU (tf_launcher): a restart cannot help
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": "tensorflow",
                        "operator": "In",
                        "values": [EXIT_NO_GPU],
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
    every Job on any failure, `max-restarts` times; `ttlSecondsAfterFinished` has JobSet
    delete a finished job (its data stays on the shared volume). `suspend` is left to
    Kueue, whose webhook suspends a JobSet with a queue label until it is admitted.
    """
    chief_role, _ = request.chief()
    meta = _meta(request.job, ctx, labels(ctx.app, request.job, COMPONENT_TRAINING))
    meta["labels"][LABEL_QUEUE] = ctx.queue
    meta["labels"][LABEL_PRIORITY] = request.priority
    meta["annotations"] = {ANNOTATION_REQUEST: request.to_json()}
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
                "restartStrategy": "Recreate",
                # a Job failed by its podFailurePolicy (FailJob: no GPU) ends the job
                "rules": [
                    {
                        "name": "noRestartWithoutGPU",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
            "ttlSecondsAfterFinished": ctx.ttl_seconds,
            "replicatedJobs": [replicated_job(request, ctx, r) for r in request.replicas()],
        },
    }


def tensorboard(request: TrainRequest, ctx: Context) -> list[dict]:
    """The TensorBoard Deployment and Service `<job>-tensorboard`."""
    name = f"{request.job}-tensorboard"
    lbls = labels(ctx.app, request.job, COMPONENT_TENSORBOARD)
    logdir = f"{DATA_MOUNT}/jobs/{request.job}/logs"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, ctx, lbls),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": lbls},
            "template": {
                "metadata": {"labels": lbls},
                "spec": {
                    **ctx.pod_basics(),
                    "containers": [
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


def manifests(request: TrainRequest, ctx: Context, code: Mapping[str, str]) -> list[dict]:
    """Every object of a job, in creation order (JobSet, code, TensorBoard).

    The JobSet comes first: the others are created owned by it (training._apply_all).
    """
    return [jobset(request, ctx), code_configmap(request, ctx, code), *tensorboard(request, ctx)]


def tensorboard_url(job: str, namespace: str) -> str:
    """The in-cluster URL of a job's TensorBoard."""
    return f"http://{job}-tensorboard.{namespace}.svc:{TENSORBOARD_PORT}"


def purge_job(job: str, ctx: Context) -> dict:
    """A short-lived Job that removes `/data/jobs/<job>` from the shared volume."""
    check_job_name(job)  # the name goes into an rm -rf path
    lbls = labels(ctx.app, job, COMPONENT_PURGE)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(f"{job}-purge", ctx, lbls),
        "spec": {
            "backoffLimit": 2,
            "ttlSecondsAfterFinished": PURGE_TTL_SECONDS,
            "template": {
                "metadata": {"labels": lbls},
                "spec": {
                    "restartPolicy": "Never",
                    **ctx.pod_basics(),
                    "containers": [
                        {
                            "name": "purge",
                            "image": ctx.pulled(ctx.default_image),
                            "env": ctx.identity_env_list(),
                            "command": ["rm", "-rf", "--", f"{DATA_MOUNT}/jobs/{job}"],
                            "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT}],
                        }
                    ],
                    "volumes": [
                        {"name": "data", "persistentVolumeClaim": {"claimName": ctx.claim}}
                    ],
                },
            },
        },
    }
