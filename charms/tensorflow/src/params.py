# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the operator asks of the charm's job actions, validated (no ops, no I/O).

The parameter models of `train` (`TrainRequest`, also stored on the job's JobSet for
`scale` and `job-status`), `scale`, `logs`, `stop` and the actions that name one job, loaded
by `charm.py` with `event.load_params(..., errors="fail")`; and the checks they and the
charm config share: job names, `KEY=VALUE` environments, `uid:gid` users, Kubernetes
quantities (kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/).
Every ValueError says what to change.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Literal, NoReturn

import datasets
import pydantic
from literals import (
    ANNOTATION_DEFAULTED,
    ANNOTATION_REQUEST,
    BUILTIN_SCRIPTS,
    JOB_NAME_MAX,
    MAX_WORKERS,
)

from charms.gpu_k8s.v0.config import ActionParams

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


def check_job_name(value: str) -> str:
    """Return `value` when it is a valid job name; raise ValueError saying what to change."""
    if not isinstance(value, str) or not _DNS_LABEL.match(value) or len(value) > JOB_NAME_MAX:
        raise ValueError(
            f"{value!r} is not a valid job name: use 1-{JOB_NAME_MAX} lowercase letters, "
            "digits and '-', starting with a letter and ending with a letter or digit"
        )
    return value


# Names the charm derives from a job's (or a dataset's) name for its own objects in the
# namespace, each with what it names. A new job named like one of them would collide with
# another job's object of the same kind (or, under another kind, leave two objects whose
# names read alike). The worst is a Service: the JobSet `<job>` gets a headless Service
# named after its subdomain, which the charm sets to `<job>` (manifests.jobset), and
# JobSet v0.12.0 creates it only when no Service of that name exists, using any existing
# one whatever its owner or selector (pkg/controllers/jobset_controller.go,
# createHeadlessSvcIfNecessary: `r.Get(subdomain)`, created only on NotFound). So a job
# `resnet-serving` beside `serve job=resnet` gets TF Serving's Service as its DNS: no pod
# records, MWMS peers never resolve, the pods hang holding GPUs; and in the other order
# the charm's `serve` would take over the JobSet's Service by server-side apply. A
# Service's name must be a DNS-1035 label (Kubernetes ValidateServiceName,
# pkg/apis/core/validation: NameIsDNS1035Label), which JOB_NAME_MAX and `_DNS_LABEL`
# keep every derived name to; JobSet v0.12.0's webhook also checks the subdomain and
# every generated Job and pod name as DNS-1035 labels (pkg/webhooks/jobset_webhook.go).
# Kept equal to serving.name_of, manifests (`-tensorboard`, `-code`, purge_job),
# exports.job_name, fetch_name, upload_name and datasets.job_name by
# tests/unit/tensorflow/test_jobs.py.
RESERVED_SUFFIXES = {
    "-serving": "the Deployment and Service serving job {}",
    "-tensorboard": "the Deployment and Service of the TensorBoard of job {}",
    "-code": "the code ConfigMap of job {}",
    "-purge": "the purge Job of job {}",
}
RESERVED_PREFIXES = {
    "export-": "the export Job of job {}",
    "fetch-": "the fetch-model Job of job {}",
    "upload-": "the upload Job of job {}",
    "import-": "the import Job of dataset {}",
}


def check_new_job_name(value: str) -> str:
    """`check_job_name`, and not a name the charm derives for another object (see above)."""
    check_job_name(value)
    for suffix, what in RESERVED_SUFFIXES.items():
        if value.endswith(suffix):
            _reserved(value, what.format(value.removesuffix(suffix)), f"end in {suffix}")
    for prefix, what in RESERVED_PREFIXES.items():
        if value.startswith(prefix):
            _reserved(value, what.format(value.removeprefix(prefix)), f"start with {prefix}")
    return value


def _reserved(value: str, what: str, rule: str) -> NoReturn:
    raise ValueError(
        f"job name {value!r} is reserved: the charm names {what} so, and the two would "
        f"collide (JobSet takes any Service named like the job as its own): choose a job "
        f"name that does not {rule}"
    )


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
    """`uid:gid` as two numbers; ValueError saying what is wrong.

    uid 0 is refused: the application's namespace enforces Pod Security `restricted`,
    which forbids `runAsUser: 0` and requires `runAsNonRoot` (kubernetes.io/docs/concepts/
    security/pod-security-standards/, "Running as Non-root user", "Running as Non-root";
    pod-security-admission policy/check_runAsUser.go), so no pod asking for root could
    start. gid 0 is allowed: no Pod Security check reads runAsGroup.
    """
    uid, sep, gid = text.partition(":")
    if not sep or not uid.isdigit() or not gid.isdigit():
        raise ValueError(f"{text!r} is not uid:gid, such as 1000:1000")
    if int(uid) > _ID_MAX or int(gid) > _ID_MAX:
        raise ValueError(f"uid and gid must be at most {_ID_MAX}")
    if int(uid) == 0:
        raise ValueError(
            "uid 0 (root) is refused: the namespace enforces Pod Security restricted; "
            "use a non-root uid:gid such as 1000:1000"
        )
    return int(uid), int(gid)


def split_words(text: str, what: str) -> list[str]:
    """`text` split into words as a shell does (`what` names it in the ValueError)."""
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


MAX_DEADLINE_HOURS = 8760  # a year; Kueue keeps the seconds in an int32

# What a replica requests when `cpu`/`memory` are left empty and it has no GPU (a GPU
# worker gets its node's share instead: placement.with_gpu_defaults).
CPU_DEFAULT = "1"
MEMORY_DEFAULT = "4Gi"

# `train` parameters that say how long the action waits for the job, not what the job is:
# `train` again with only these different is the same job (review N3), and they are not
# stored on it.
ACTION_ONLY = ("wait", "timeout")

# The fields an empty value of which the charm fills in from the nodes of the moment
# (placement.with_gpu_defaults): `train` again compares what the user gave for them, not
# what the nodes gave (review31 gap 1).
RESOURCE_FIELDS = ("cpu", "memory", "chief_cpu", "chief_memory", "ps_cpu", "ps_memory")


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
    # Empty: a GPU worker's share of its GPU node (placement.with_gpu_defaults), else
    # CPU_DEFAULT and MEMORY_DEFAULT.
    cpu: str = ""
    memory: str = ""
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
    # `train dry-run=true` answers admit now / wait / never and creates nothing: not part
    # of the job (never stored, never compared)
    dry_run: bool = pydantic.Field(default=False, exclude=True)
    dataset: str = ""  # an imported dataset (datasets.py), at GPU_K8S_DATASET_DIR
    deadline: int = 0  # hours the job may be admitted in all (manifests.jobset); 0: none
    # The RESOURCE_FIELDS the charm filled in where the user left them empty
    # (`filled_in`); None: not known, for a job stored before they were recorded. Not a
    # parameter: stored apart, as ANNOTATION_DEFAULTED (`annotations`).
    _defaulted: tuple[str, ...] | None = pydantic.PrivateAttr(default=())

    @pydantic.field_validator("deadline")
    @classmethod
    def _deadline(cls, value: int) -> int:
        if not 0 <= value <= MAX_DEADLINE_HOURS:
            raise ValueError(f"must be between 0 and {MAX_DEADLINE_HOURS} hours, got {value}")
        return value

    @pydantic.field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        return datasets.check_name(value) if value else value

    @pydantic.field_validator("job")
    @classmethod
    def _job(cls, value: str) -> str:
        return check_new_job_name(value)

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
    def _cpu(cls, value: str) -> str:
        return _check_quantity(value, "cpu", "2 or 500m") if value else value

    @pydantic.field_validator("memory", "chief_memory", "ps_memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        return _check_quantity(value, "memory", "8Gi") if value else value

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
        split_words(value, info.field_name or "value")
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
        return cpu or CPU_DEFAULT, memory or MEMORY_DEFAULT

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
        """The job as JSON, for its annotation: the request less `ACTION_ONLY`."""
        return self.model_dump_json(exclude=set(ACTION_ONLY))

    def filled_in(self, values: Mapping[str, str]) -> TrainRequest:
        """This request with `values` for some RESOURCE_FIELDS, those it left empty marked."""
        filled = self.model_copy(update=dict(values))
        filled._defaulted = tuple(sorted({*(self._defaulted or ()), *self._empty(values)}))
        return filled

    def _empty(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if name in RESOURCE_FIELDS and not getattr(self, name)]

    def _asked(self) -> dict:
        """What the user asked: the job less ACTION_ONLY, what the charm filled in empty."""
        asked = self.model_dump(exclude=set(ACTION_ONLY))
        return asked | dict.fromkeys(self._defaulted or (), "")

    def same_job(self, other: TrainRequest) -> bool:
        """Whether `other` asks for this job, stored: only `ACTION_ONLY` may differ.

        Either the two are the same job once filled in (the defaults gave what the other
        gives) or the users asked the same (the nodes that sized the defaults changed since:
        a node joined, the only GPU node is cordoned). A job stored before the fields the
        charm fills in were recorded takes each of those fields `other` leaves empty as
        asked empty too, where its revision could have filled it in (`_earlier_filled`):
        nothing says whether its user gave that value.
        """
        if self.model_dump(exclude=set(ACTION_ONLY)) == other.model_dump(exclude=set(ACTION_ONLY)):
            return True
        ours, theirs = self._asked(), other._asked()
        if self._defaulted is None:
            ours |= {
                name: ""
                for name in RESOURCE_FIELDS
                if not theirs[name] and self._earlier_filled(name, ours[name])
            }
        return ours == theirs

    def _earlier_filled(self, name: str, value: str) -> bool:
        """Whether a revision that recorded no ANNOTATION_DEFAULTED could fill in `value`.

        Before b0237a3, `cpu` and `memory` defaulted to CPU_DEFAULT and MEMORY_DEFAULT (the
        model's own defaults since 1bad3e1; the chief's and ps's fields stayed empty). From
        b0237a3 to 2f0cf87, placement.with_gpu_defaults filled in a GPU job's: the worker's
        share written as "<n>m" and "<n>Mi", and under strategy=ps the chief's and the ps's
        CPU_DEFAULT and MEMORY_DEFAULT. Any other value was the user's.
        """
        kind = "cpu" if name.endswith("cpu") else "memory"
        default = CPU_DEFAULT if kind == "cpu" else MEMORY_DEFAULT
        if name == kind:
            share = r"[0-9]+m" if kind == "cpu" else r"[0-9]+Mi"
            gpu_share = self.gpus_per_worker > 0 and re.fullmatch(share, value) is not None
            return value == default or gpu_share
        return self.gpus_per_worker > 0 and self.strategy == "ps" and value == default

    def annotations(self) -> dict[str, str]:
        """The job as its JobSet's (and its scale record's) annotations keep it.

        What the charm filled in stays unsaid where it is not known (a job an earlier
        revision stored, scaled), so that it is read back as not known.
        """
        if self._defaulted is None:
            return {ANNOTATION_REQUEST: self.to_json()}
        return {
            ANNOTATION_REQUEST: self.to_json(),
            ANNOTATION_DEFAULTED: ",".join(self._defaulted),
        }

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> TrainRequest:
        """The request `annotations` wrote (ValueError when it does not validate).

        An ANNOTATION_DEFAULTED that is not a list of RESOURCE_FIELDS (someone edited it)
        is read as not known: the request itself, all a job needs, is still read.
        """
        request = cls.from_json(annotations.get(ANNOTATION_REQUEST, ""))
        text = annotations.get(ANNOTATION_DEFAULTED)
        names = None if text is None else tuple(n for n in text.split(",") if n)
        if names is not None and set(names) <= set(RESOURCE_FIELDS):
            request._defaulted = names
        else:
            request._defaulted = None
        return request

    @classmethod
    def from_json(cls, text: str) -> TrainRequest:
        """The request stored by `to_json` (raises ValueError when it does not validate)."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            raise ValueError("the job's stored request is not JSON") from None
        if not isinstance(data, dict):
            raise ValueError("the job's stored request is not a JSON object")
        # A job made before its name was reserved (check_new_job_name) is still read: its
        # name is checked as any existing job's, the rest as a new request.
        job = check_job_name(data.get("job", cls.model_fields["job"].default))
        return cls(**{**data, "job": "mnist"}).model_copy(update={"job": job})


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
