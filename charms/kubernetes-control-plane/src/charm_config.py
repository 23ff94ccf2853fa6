# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The charm's configuration and action parameters, validated (no ops).

Each model raises a one-line error naming the option as the operator types it, which
becomes the Blocked status or the action's failure message.
"""

from __future__ import annotations

import ipaddress
import re

import device_plugin
import etcd_s3
import kueue
import network_policies
import ops
import pydantic
import team_quota
from literals import API_PORT, CALICO, CNIS

from charms.gpu_k8s.v0 import images, kubeadm
from charms.gpu_k8s.v0.config import ActionParams, CharmConfig

_MIRROR = re.compile(r"^https://[^\s/]+(/\S*)?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# A DNS name a certificate may carry: RFC 1123 labels, a wildcard first label allowed
# (kubeadm validates certSANs the same way: IsDNS1123Subdomain or its wildcard form).
_DNS_NAME = re.compile(
    r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)


def _split_names(text: str) -> list[str]:
    return [name for name in re.split(r"[\s,]+", text.strip()) if name]


def _san(name: str) -> str:
    """`name` if it is an IP address or a DNS name a certificate may list, else ValueError."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    if len(name) > 253 or not _DNS_NAME.match(name):
        raise ValueError(f"{name!r} is not a DNS name or IP address")
    return name


class Config(CharmConfig):
    """The charm's configuration."""

    model_config = pydantic.ConfigDict(
        frozen=True,
        extra="ignore",
        populate_by_name=True,
        arbitrary_types_allowed=True,  # ops.Secret options
        defer_build=True,
    )

    kubernetes_version: str = kubeadm.DEFAULT_MINOR
    package_mirror: str = ""
    pod_cidr: str = "10.244.0.0/16"
    cni: str = CALICO
    service_cidr: str = "10.96.0.0/12"
    join_token_ttl: int = pydantic.Field(default=24)
    api_extra_sans: str = ""
    kube_api_storage_provisioners: str = "efs-storage"
    mig_strategy: str = "none"
    gpu_time_slicing_replicas: int = 1
    image_registry: str = ""
    batch_engines: bool = True
    efs_csi_driver: bool = True
    addons_mirror: str = ""
    jobset_sha256: str = ""
    kueue_sha256: str = ""
    calico_sha256: str = ""
    pods_ready_timeout: int = 10
    team_quotas: str = ""
    team_object_counts: str = ""
    team_egress: str = ""
    certificate_renewal_days: int = 30
    etcd_backups_kept: int = 7
    etcd_backup_hours: int = 24
    etcd_backup_s3: str = ""
    etcd_backup_credentials: ops.Secret | None = None

    @pydantic.field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if value not in kubeadm.RELEASES:
            raise ValueError(
                f"must be a supported minor version, one of {', '.join(kubeadm.RELEASES)}"
            )
        return value

    @pydantic.field_validator("package_mirror")
    @classmethod
    def _mirror(cls, value: str) -> str:
        if value and not _MIRROR.match(value):
            raise ValueError("must be empty or an http(s) URL serving pkgs.k8s.io's layout")
        return value

    @pydantic.field_validator("pod_cidr", "service_cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            ipaddress.ip_network(value, strict=True)
        except ValueError:
            raise ValueError(f"{value!r} is not a network such as 10.244.0.0/16") from None
        return value

    @pydantic.field_validator("api_extra_sans")
    @classmethod
    def _sans(cls, value: str) -> str:
        for name in _split_names(value):
            _san(name.lower())
        return value

    @property
    def extra_sans(self) -> list[str]:
        """The names and addresses of `api-extra-sans`, normalised and sorted."""
        return sorted({_san(name.lower()) for name in _split_names(self.api_extra_sans)})

    @property
    def storage_provisioners(self) -> frozenset[str]:
        """The applications of `kube-api-storage-provisioners`."""
        return frozenset(_split_names(self.kube_api_storage_provisioners))

    @pydantic.field_validator("mig_strategy")
    @classmethod
    def _mig(cls, value: str) -> str:
        if value not in device_plugin.MIG_STRATEGIES:
            raise ValueError("must be none, single or mixed")
        return value

    @pydantic.field_validator("gpu_time_slicing_replicas")
    @classmethod
    def _replicas(cls, value: int) -> int:
        if not 1 <= value <= 64:
            raise ValueError("must be between 1 (no sharing) and 64")
        return value

    @pydantic.field_validator("image_registry")
    @classmethod
    def _registry(cls, value: str) -> str:
        return images.validate_registry(value)

    @pydantic.field_validator("addons_mirror")
    @classmethod
    def _addons_mirror(cls, value: str) -> str:
        if value and not _MIRROR.match(value):
            raise ValueError(
                "must be empty or an https URL prefix such as https://host/addons (what is "
                "downloaded there is applied with cluster-admin rights)"
            )
        return value.rstrip("/")

    @pydantic.field_validator("cni")
    @classmethod
    def _cni(cls, value: str) -> str:
        if value not in CNIS:
            raise ValueError(f"must be one of {', '.join(CNIS)}")
        return value

    @pydantic.field_validator("jobset_sha256", "kueue_sha256", "calico_sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if value and not _SHA256.match(value.lower()):
            raise ValueError("must be empty or 64 hexadecimal digits (a sha256)")
        return value.lower()

    @pydantic.field_validator("pods_ready_timeout")
    @classmethod
    def _pods_ready(cls, value: int) -> int:
        if not 1 <= value <= 1440:
            raise ValueError("must be between 1 and 1440 (minutes)")
        return value

    @pydantic.field_validator("team_quotas")
    @classmethod
    def _team_quotas(cls, value: str) -> str:
        kueue.parse_allowances(value)  # raises with the entry and the form
        return value

    @property
    def allowances(self) -> kueue.Allowances:
        """`team-quotas`: the most each named team's ClusterQueue may hold (kueue.py)."""
        return kueue.parse_allowances(self.team_quotas)

    @pydantic.field_validator("team_object_counts")
    @classmethod
    def _team_object_counts(cls, value: str) -> str:
        team_quota.parse_counts(value)  # raises with the entry and the form
        return value

    @pydantic.field_validator("team_egress")
    @classmethod
    def _team_egress(cls, value: str, info: pydantic.ValidationInfo) -> str:
        # raises with the entry and why; pod_cidr is validated first (field order), and
        # absent from info.data when it failed
        network_policies.parse_egress(value, info.data.get("pod_cidr", ""))
        return value

    @property
    def egress(self) -> tuple[network_policies.Egress, ...]:
        """`team-egress`: what every team's pods may reach beyond the allow-list."""
        return network_policies.parse_egress(self.team_egress, self.pod_cidr)

    @property
    def object_counts(self) -> dict[str, int]:
        """`team-object-counts`: the counts it changes in every team's quota (team_quota)."""
        return team_quota.parse_counts(self.team_object_counts)

    @pydantic.field_validator("certificate_renewal_days")
    @classmethod
    def _renewal_days(cls, value: int) -> int:
        # kubeadm's certificates last 365 days (constants.CertificateValidityPeriod): a
        # window as long would renew them every hour.
        if not 1 <= value <= 180:
            raise ValueError("must be between 1 and 180 (days before expiry)")
        return value

    @pydantic.field_validator("etcd_backups_kept")
    @classmethod
    def _kept(cls, value: int) -> int:
        if not 1 <= value <= 1000:
            raise ValueError("must be between 1 and 1000 (snapshots kept on the machine)")
        return value

    @pydantic.field_validator("etcd_backup_hours")
    @classmethod
    def _backup_hours(cls, value: int) -> int:
        if not 0 <= value <= 8760:
            raise ValueError("must be between 0 (no scheduled backup) and 8760 (hours)")
        return value

    @pydantic.field_validator("etcd_backup_s3")
    @classmethod
    def _backup_s3(cls, value: str) -> str:
        if value.strip():
            etcd_s3.parse_url(value)  # raises with what it must be
        return value.strip()

    @property
    def backup_target(self) -> etcd_s3.Target | None:
        """Where snapshots are uploaded, or None."""
        return etcd_s3.parse_url(self.etcd_backup_s3) if self.etcd_backup_s3 else None

    @pydantic.field_validator("join_token_ttl")
    @classmethod
    def _ttl(cls, value: int) -> int:
        if value < 2:
            raise ValueError("must be at least 2 (hours)")
        return value

    @pydantic.field_validator("service_cidr")
    @classmethod
    def _disjoint(cls, value: str, info: pydantic.ValidationInfo) -> str:
        pod_cidr = info.data.get("pod_cidr")
        if pod_cidr:
            pods, services = ipaddress.ip_network(pod_cidr), ipaddress.ip_network(value)
            if pods.version == services.version and pods.overlaps(services):  # type: ignore[arg-type]
                raise ValueError(f"overlaps pod-cidr {pod_cidr}; choose disjoint networks")
        return value


class NoParams(ActionParams):
    """Actions without parameters."""


class RestoreParams(ActionParams):
    """restore-etcd: the snapshot (default: the newest kept) and the operator's yes."""

    path: str = ""
    s3_key: str = ""
    confirm: str = ""

    @pydantic.field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if value and not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path on the machine")
        return value


class KubeconfigParams(ActionParams):
    """get-kubeconfig: the API server the kubeconfig names (default: the public address)."""

    server: str = ""

    @pydantic.field_validator("server")
    @classmethod
    def _server(cls, value: str) -> str:
        if not value:
            return value
        match = re.fullmatch(
            r"(?:https://)?(\[[0-9a-fA-F:.]+\]|[^\s/:\[\]]+)(?::(\d{1,5}))?/?", value
        )
        if match is None or not 0 < int(match[2] or API_PORT) < 65536:
            raise ValueError(f"{value!r} must be https://host:port or a host name or address")
        return f"https://{match[1]}:{match[2] or API_PORT}"
