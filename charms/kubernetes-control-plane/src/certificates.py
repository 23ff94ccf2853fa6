# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""kubeadm's certificates on this node: their expiry, their renewal, the restart after it.

No ops imports. kubeadm signs the control plane's certificates for one year
(constants.CertificateValidityPeriod) and its CAs for ten (CACertificateValidityPeriod);
only `kubeadm upgrade` renews them on its own. kubernetes.io "Certificate Management with
kubeadm" (tasks/administer-cluster/kubeadm/kubeadm-certs):
- `kubeadm certs check-expiration` lists every certificate kubeadm manages and its CAs;
  with `-o json` it prints the object of cmd/kubeadm/app/apis/output/v1alpha3
  (`CertificateExpirationInfo`: `certificates` and `certificateAuthorities`, each a
  `Certificate` with name, expirationDate in RFC 3339 UTC, residualTime in seconds,
  externallyManaged, caName, missing), built by cmd/kubeadm/app/cmd/certs.go
  fetchCertificateExpirationInfo;
- `kubeadm certs renew all` renews them all, unconditionally, in place with the local CAs
  (certs.go renewCert, renewal.Manager.RenewUsingLocalCA). It cannot renew CAs ("we are
  not offering support for renewing CAs", renewal/manager.go). A CA whose key is absent
  counts as external: kubeadm prints "Detected external ca, ... can't be renewed" and
  exits 0, so what it renewed is read back with check-expiration rather than trusted. A
  failure stops at that certificate: those before it are renewed, the rest keep their
  old, still valid, files;
- "After running the command you should restart the control plane Pods": static pods are
  kubelet's, so each manifest is moved out of /etc/kubernetes/manifests for kubelet's
  fileCheckFrequency (20 s) and moved back; kubelet then starts the pods again with the
  new certificates.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Callable

from charms.gpu_k8s.v0.kubeadm import KUBEADM
from charms.gpu_k8s.v0.system import CommandError, Host, poll_until

logger = logging.getLogger(__name__)

CHECK = (KUBEADM, "certs", "check-expiration", "-o", "json")
RENEW = (KUBEADM, "certs", "renew", "all")
MANIFESTS = "/etc/kubernetes/manifests"
# Where the manifests wait while kubelet stops their pods: outside the directory kubelet
# watches (staticPodPath).
PARKED = "/etc/kubernetes/manifests-restarting"
# KubeletConfiguration fileCheckFrequency's default (20 s), and a margin for kubelet to
# stop or start the pods.
FILE_CHECK_SECONDS = 20.0
RESTART_WAIT_SECONDS = FILE_CHECK_SECONDS + 10.0
READY_TIMEOUT_SECONDS = 300.0
CHECK_TIMEOUT_SECONDS = 120.0
RENEW_TIMEOUT_SECONDS = 300.0
# One GET /readyz of the wait: charm.py `_api_server_ready` (no retry, timeout=10, which
# the Kubernetes client takes as urllib3's total for the request).
READY_PROBE_SECONDS = 10.0
# The longest a renewal runs, every command to its timeout: read the expiry, renew, read
# it again, the two restart waits, then the /readyz wait and the probe started before its
# end. renew-certificates holds machine 0's lock that long at most (it restarts the API
# server the other charms' hooks call; docs/explanation/design-choices.md).
RENEWAL_MAX_SECONDS = (
    2 * CHECK_TIMEOUT_SECONDS
    + RENEW_TIMEOUT_SECONDS
    + 2 * RESTART_WAIT_SECONDS
    + READY_TIMEOUT_SECONDS
    + READY_PROBE_SECONDS
)
CHECK_EVERY = datetime.timedelta(hours=1)


class CertificateError(Exception):
    """kubeadm could not read or renew the certificates; the message says why."""


@dataclasses.dataclass(frozen=True)
class Certificate:
    """One certificate or CA as `check-expiration` lists it."""

    name: str
    expires: datetime.datetime | None  # None when missing
    authority: str = ""
    external: bool = False

    @property
    def missing(self) -> bool:
        """Whether kubeadm found no such file."""
        return self.expires is None


@dataclasses.dataclass(frozen=True)
class Expiry:
    """What `kubeadm certs check-expiration` says of this node's PKI."""

    certificates: tuple[Certificate, ...]
    authorities: tuple[Certificate, ...]

    def earliest(self) -> Certificate | None:
        """The present certificate that expires first (CAs left out)."""
        present = [c for c in self.certificates if c.expires is not None]
        return min(present, key=lambda c: c.expires) if present else None  # type: ignore[arg-type, return-value]

    def earliest_authority(self) -> Certificate | None:
        """The present CA that expires first (reported, never renewed)."""
        present = [c for c in self.authorities if c.expires is not None]
        return min(present, key=lambda c: c.expires) if present else None  # type: ignore[arg-type, return-value]

    def due(self, now: datetime.datetime, days: int) -> list[Certificate]:
        """The present certificates that expire within `days` of `now`."""
        limit = now + datetime.timedelta(days=days)
        return [c for c in self.certificates if c.expires is not None and c.expires <= limit]


def _time(text: object) -> datetime.datetime | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"expirationDate {text!r} is not a time")
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse(text: str) -> Expiry:
    """`check-expiration -o json`'s output; ValueError when it has another shape."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("kind") != "CertificateExpirationInfo":
        raise ValueError("not a CertificateExpirationInfo")

    def entries(key: str) -> tuple[Certificate, ...]:
        out = []
        for item in data.get(key) or []:
            missing = bool(item.get("missing"))
            out.append(
                Certificate(
                    name=str(item["name"]),
                    expires=None if missing else _time(item.get("expirationDate")),
                    authority=str(item.get("caName") or ""),
                    external=bool(item.get("externallyManaged")),
                )
            )
        return tuple(out)

    return Expiry(entries("certificates"), entries("certificateAuthorities"))


def check(host: Host) -> Expiry:
    """Ask kubeadm when this node's certificates and CAs expire.

    Raises:
        CertificateError: kubeadm failed or printed something else.
    """
    try:
        out = host.run(*CHECK, timeout=CHECK_TIMEOUT_SECONDS)
    except CommandError as e:
        raise CertificateError(f"kubeadm certs check-expiration failed: {e.last_line}") from None
    try:
        return parse(out)
    except (ValueError, KeyError, TypeError) as e:
        raise CertificateError(f"kubeadm certs check-expiration printed no expiry: {e}") from None


def renew(host: Host, before: Expiry, now: datetime.datetime, days: int) -> Expiry:
    """`kubeadm certs renew all`, then what it renewed read back; the new expiry.

    A certificate whose expiry did not move and that is still due within `days` of `now`,
    or that kubeadm calls externally managed (its CA's key is absent), was not renewed.

    Raises:
        CertificateError: kubeadm failed (its last line), or left a certificate it
            listed unrenewed (what it printed about it, e.g. an external CA).
    """
    try:
        out = host.run(*RENEW, timeout=RENEW_TIMEOUT_SECONDS)
    except CommandError as e:
        raise CertificateError(f"kubeadm certs renew all failed: {e.last_line}") from None
    after = check(host)
    old = {c.name: c.expires for c in before.certificates if c.expires is not None}
    due = {c.name for c in after.due(now, days)}
    stale = [
        c.name
        for c in after.certificates
        if c.name in old
        and c.expires is not None
        and c.expires <= old[c.name]  # type: ignore[operator]
        and (c.external or c.name in due)
    ]
    if stale:
        said = [line.strip() for line in out.splitlines() if "can't be renewed" in line]
        why = said[0] if said else "kubeadm said nothing about them"
        raise CertificateError(f"kubeadm did not renew {', '.join(stale)}: {why}")
    return after


def restart_static_pods(host: Host, sleep: Callable[[float], None]) -> list[str]:
    """Restart the control-plane static pods so they load the renewed certificates.

    Moves every manifest out of kubelet's directory, waits for kubelet to stop the pods,
    moves them back and waits for it to start them again. Returns the pods restarted.
    A manifest left parked by an interrupted restart is moved back first.
    """
    manifests, parked = host.path(MANIFESTS), host.path(PARKED)
    parked.mkdir(mode=0o700, parents=True, exist_ok=True)
    moved = sorted(p.name for p in manifests.glob("*.yaml")) if manifests.is_dir() else []
    for name in moved:
        (manifests / name).rename(parked / name)
    if moved:
        sleep(RESTART_WAIT_SECONDS)
    back = sorted(p.name for p in parked.glob("*.yaml"))
    for name in back:
        (parked / name).rename(manifests / name)
    if back:
        sleep(RESTART_WAIT_SECONDS)
    return [name.removesuffix(".yaml") for name in back]


def wait_ready(
    probe: Callable[[], bool],
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    timeout: float = READY_TIMEOUT_SECONDS,
) -> None:
    """Wait until `probe` (this node's API server's /readyz) says ready.

    Raises:
        CertificateError: it did not within `timeout`.
    """
    if poll_until(lambda: True if probe() else None, timeout, poll=5.0, clock=clock, sleep=sleep):
        return
    raise CertificateError(
        f"this node's API server was not ready {int(timeout)} s after the restart"
    )


def due_for_check(last: datetime.datetime | None, now: datetime.datetime) -> bool:
    """Whether the expiry was read more than an hour ago (or never)."""
    return last is None or now - last >= CHECK_EVERY or now < last
