# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The tensorflow charm's config options as one validated model, and what they imply.

`charm.py` loads it with `load_config` (a ValueError names the option and the values it
accepts, and becomes the Blocked status); `quotas` and `job_context` turn it into what
`queues.py` and the workload modules take. Pinned images carry their sources here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ops
import pydantic
import registry_auth
import serving
from literals import DEFAULT_MAX_RESTARTS, DEFAULT_USER
from manifests import Context, gpu_variant
from params import parse_user, quantity

from charms.gpu_k8s.v0.config import CharmConfig
from charms.gpu_k8s.v0.images import validate_registry
from charms.gpu_k8s.v0.kube_api import RequirerAppData


class Config(CharmConfig):
    """The charm's config options."""

    model_config = pydantic.ConfigDict(
        frozen=True,
        extra="ignore",
        populate_by_name=True,
        arbitrary_types_allowed=True,
        defer_build=True,
    )

    default_image: str = "tensorflow/tensorflow:2.21.0"
    # TF 2.21 dropped its `tensorboard` dependency (TF 2.21.0 release notes; the 2.21.0
    # wheel's METADATA has no Requires-Dist on it), and the tensorflow/tensorflow images
    # install only the wheel and what it requires (tensorflow/tools/dockerfiles/partials/
    # tensorflow.partial.Dockerfile), so 2.21.0 has no `tensorboard` command. The 2.20.0
    # wheel requires tensorboard~=2.20.0 (its METADATA, read from PyPI 2026-11-24);
    # TensorBoard 2.20 reads the event files TF 2.21 writes (same format).
    tensorboard_image: str = "tensorflow/tensorflow:2.20.0"
    # TensorFlow Serving 2.20.0, its latest release (tag 2.20.0 of tensorflow/serving,
    # 2026-04-23, read 2026-11-24); `-gpu` for serve gpus > 0. It loads SavedModels of
    # later TensorFlow versions as long as their ops exist (the built-in trainer's do).
    serving_image: str = "tensorflow/serving:2.20.0"
    job_ttl: int = 24
    max_restarts: int = DEFAULT_MAX_RESTARTS
    image_registry: str = ""
    run_as: str = DEFAULT_USER
    gpu_quota: str = ""
    cpu_quota: str = ""
    memory_quota: str = ""
    image_pull_secret: ops.Secret | None = None
    dataset_credentials: ops.Secret | None = None

    @pydantic.field_validator("default_image", "tensorboard_image", "serving_image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not value or any(c.isspace() for c in value):
            raise ValueError("must be an image reference such as tensorflow/tensorflow:2.21.0")
        return value

    @pydantic.field_validator("job_ttl")
    @classmethod
    def _ttl(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1 (hours a finished job is kept)")
        return value

    @pydantic.field_validator("max_restarts")
    @classmethod
    def _restarts(cls, value: int) -> int:
        if not 0 <= value <= 100:
            raise ValueError("must be between 0 and 100 (gang restarts before a job fails)")
        return value

    @pydantic.field_validator("image_registry")
    @classmethod
    def _registry(cls, value: str) -> str:
        return validate_registry(value)

    @pydantic.field_validator("run_as")
    @classmethod
    def _run_as(cls, value: str) -> str:
        parse_user(value)
        return value

    @pydantic.field_validator("gpu_quota")
    @classmethod
    def _gpus(cls, value: str) -> str:
        if value.strip() and not value.strip().isdigit():
            raise ValueError("must be empty (every GPU the nodes have) or a number >= 0")
        return value.strip()

    @pydantic.field_validator("cpu_quota", "memory_quota")
    @classmethod
    def _quantity(cls, value: str) -> str:
        if value.strip():
            quantity(value)  # raises with the reason
        return value.strip()

    @property
    def user(self) -> tuple[int, int]:
        """`run-as` as (uid, gid)."""
        return parse_user(self.run_as)

    def job_context(self, app: str, namespace: str, claim: str) -> Context:
        """Where and how this application's jobs run under this config."""
        return Context(
            namespace=namespace,
            app=app,
            claim=claim,
            default_image=self.default_image,
            tensorboard_image=self.tensorboard_image,
            registry=self.image_registry,
            user=self.user,
            max_restarts=self.max_restarts,
            ttl_seconds=self.job_ttl * 3600,
            pull_secret=registry_auth.secret_name(app) if self.image_pull_secret else "",
        )


QUOTA_OPTIONS = ("gpu-quota", "cpu-quota", "memory-quota")


def upstream_images() -> tuple[str, ...]:
    """Every image this charm pulls by default, as upstream publishes it.

    What a mirror must hold for `image-registry`: default-image and its `-gpu` variant
    (training pods, the purge, import and export Jobs), tensorboard-image, and
    serving-image with its `-gpu` variant (`serve`), each at its option's default. The
    option's help text and docs/how-to/air-gapped.md are checked against it
    (tests/unit/docs/test_images.py).
    """
    fields = Config.model_fields
    default = fields["default_image"].default
    model_server = fields["serving_image"].default
    return (
        default,
        gpu_variant(default) or default,
        fields["tensorboard_image"].default,
        model_server,
        serving.gpu_variant(model_server),
    )


def quota_request(raw: Mapping[str, Any]) -> dict[str, str]:
    """The team's wanted Kueue quota as the kube-api request carries it (set options only).

    The control plane writes the team's ClusterQueue from it (its kueue.py). A malformed
    value is left out (none of its own meanwhile); Config says what is wrong in the status.
    """
    out = {}
    for key in QUOTA_OPTIONS:
        value = str(raw.get(key, "")).strip()
        try:
            RequirerAppData.model_validate({"namespace": "x", key: value})
        except pydantic.ValidationError:
            continue
        if value:
            out[key] = value
    return out
