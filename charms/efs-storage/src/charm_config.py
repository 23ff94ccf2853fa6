# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The efs-storage charm's configuration, validated before anything talks to AWS."""

from __future__ import annotations

import re

import ops
import pydantic
from efs_model import PERFORMANCE_MODES, THROUGHPUT_MODES

from charms.gpu_k8s.v0.config import CharmConfig
from charms.gpu_k8s.v0.images import validate_registry

_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")
_FS_ID = re.compile(r"^fs-[0-9a-f]{8,40}$")
_KMS = re.compile(
    r"^(arn:aws[a-z-]*:kms:\S+|alias/[\w/.-]+"
    r"|[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}|mrk-[0-9a-f]{32})$"
)
_QUANTITY = re.compile(r"^[1-9][0-9]*(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_PATH = re.compile(r"^/([\w.-]+/?)*$")
# A Juju application name: juju/names application.go `ApplicationSnippet` (lowercase
# letters, digits and dashes, starting with a letter, no segment of digits only).
_APP = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]*[a-z][a-z0-9]*)*$")


def _names(value: str) -> list[str]:
    return [name.strip() for name in value.split(",") if name.strip()]


class Config(CharmConfig):
    """The charm's configuration."""

    model_config = pydantic.ConfigDict(
        frozen=True,
        extra="ignore",
        populate_by_name=True,
        arbitrary_types_allowed=True,
        defer_build=True,
    )

    credentials: ops.Secret | None = None
    region: str = ""
    file_system_id: str = ""
    performance_mode: str = "generalPurpose"
    throughput_mode: str = "elastic"
    provisioned_throughput: int = 0
    kms_key_id: str = ""
    path: str = "/"
    capacity: str = "1Ti"
    delete_on_remove: bool = False
    image_registry: str = ""
    root_consumers: str = ""
    aws_backup: bool = False

    @pydantic.field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if value and not _REGION.match(value):
            raise ValueError(f"{value!r} is not an AWS region such as us-east-1; fix or unset it")
        return value

    @pydantic.field_validator("file_system_id")
    @classmethod
    def _fs_id(cls, value: str) -> str:
        if value and not _FS_ID.match(value):
            raise ValueError(
                f"{value!r} is not an EFS id; use the form fs-0123456789abcdef0 or unset it"
            )
        return value

    @pydantic.field_validator("performance_mode")
    @classmethod
    def _performance(cls, value: str) -> str:
        if value not in PERFORMANCE_MODES:
            raise ValueError(f"must be {' or '.join(PERFORMANCE_MODES)}")
        return value

    @pydantic.field_validator("throughput_mode")
    @classmethod
    def _throughput(cls, value: str) -> str:
        if value not in THROUGHPUT_MODES:
            raise ValueError(f"must be {', '.join(THROUGHPUT_MODES)}; {value!r} is unknown")
        return value

    @pydantic.field_validator("kms_key_id")
    @classmethod
    def _kms(cls, value: str) -> str:
        if value and not _KMS.match(value):
            raise ValueError("must be a KMS key id, key ARN, alias/<name> or alias ARN")
        return value

    @pydantic.field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not _PATH.match(value) or "/../" in f"{value}/" or "/./" in f"{value}/":
            raise ValueError("must be an absolute path on the file system such as / or /data")
        return value

    @pydantic.field_validator("capacity")
    @classmethod
    def _capacity(cls, value: str) -> str:
        if not _QUANTITY.match(value):
            raise ValueError("must be a Kubernetes quantity such as 1Ti or 500Gi")
        return value

    @pydantic.field_validator("image_registry")
    @classmethod
    def _registry(cls, value: str) -> str:
        return validate_registry(value)

    @pydantic.field_validator("root_consumers")
    @classmethod
    def _root_consumers(cls, value: str) -> str:
        for name in _names(value):
            if not _APP.match(name):
                raise ValueError(f"{name!r} is not an application name; list them with commas")
        return value

    @property
    def root_consumer_names(self) -> frozenset[str]:
        """The consumers the operator lets have the file system's root (`root-consumers`)."""
        return frozenset(_names(self.root_consumers))

    @pydantic.model_validator(mode="after")
    def _combination(self) -> Config:
        if self.throughput_mode == "provisioned" and self.provisioned_throughput < 1:
            raise ValueError(
                "provisioned-throughput must be at least 1 (MiB/s) with throughput-mode "
                "provisioned"
            )
        if self.throughput_mode != "provisioned" and self.provisioned_throughput != 0:
            raise ValueError(
                "provisioned-throughput is only used with throughput-mode provisioned; set it "
                "to 0 or change throughput-mode"
            )
        if self.throughput_mode == "elastic" and self.performance_mode == "maxIO":
            raise ValueError(
                "throughput-mode elastic needs performance-mode generalPurpose; change one"
            )
        return self
