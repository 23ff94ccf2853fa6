# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""kubeadm's certificates renewed before they expire, one control-plane unit at a time.

Each joined unit reads its certificates' expiry at most once an hour (`certificates.py`)
and publishes the earliest in its peer databag, with whether it wants a renewal turn
(within `certificate-renewal-days` of the expiry, or asked by the `renew-certificates`
action). The leader hands the turn (`certificate-renewal-turn`, the `rolling.py` pattern)
to one such unit at a time, itself first, and never while an upgrade turn or a
containerd/runc update turn (`runtime_turns.py`) is out: the
unit renews, restarts its static pods and waits for its API server, so no two etcd
members restart at once and etcd keeps its quorum.

An ops component: it writes the peer data and reports a failed renewal as a Blocked line.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Callable, MutableMapping
from typing import NamedTuple

import certificates
import rolling
from context import UnitContext
from peers import NODE_TURNS, RENEWAL_TURN, Peers

from charms.gpu_k8s.v0 import kubeadm
from charms.gpu_k8s.v0.databag import write
from charms.gpu_k8s.v0.unit_state import Gauge

logger = logging.getLogger(__name__)

# The application databag: the unit that may renew now (`peers.RENEWAL_TURN`, one of
# `peers.NODE_TURNS`).
# Each unit's databag: {"name": ..., "expires": ISO} of its earliest certificate, and
# "true" while it waits for a renewal turn.
EXPIRY = "certificates-expiry"
WANTS_TURN = "certificates-renewal"
# This unit's stored state (a mapping the charm keeps).
CHECKED = "checked"
CHECK_FAILURE = "check-failure"
FAILURE = "failure"
REQUESTED = "requested"
# The status line names the earliest expiry this close to it whatever the renewal window
# (`certificate-renewal-days` may be shorter): issue 30 item 1, and the 30 days of the
# GpuK8sCertificateExpiring alert (prometheus_alert_rules).
SHOWN_DAYS = 30


class Renewed(NamedTuple):
    """What a renewal did: the certificates renewed, the new earliest expiry, pods restarted."""

    renewed: list[str]
    earliest: certificates.Certificate | None
    restarted: list[str]


def _unit_key(name: str) -> tuple[str, int]:
    app, _, number = name.rpartition("/")
    return app, int(number) if number.isdigit() else -1


class Renewal:
    """This unit's certificates, and the renewal turn as the leader passes it.

    `stored`: this unit's own state (last check, last failure); `ready`: whether this
    node's API server answers /readyz; `clock`: the time (UTC); `days`: the renewal window
    (`certificate-renewal-days`); `monotonic`, `sleep`: the restart's waits; `renewed`:
    what follows a renewal on this node (the charm refreshes the `get-kubeconfig` secret,
    whose client certificate is admin.conf's old one).
    """

    def __init__(
        self,
        ctx: UnitContext,
        peers: Peers,
        stored: MutableMapping[str, str],
        *,
        ready: Callable[[], bool],
        clock: Callable[[], datetime.datetime],
        days: int,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        renewed: Callable[[], None] = lambda: None,
    ):
        self._ctx = ctx
        self._peers = peers
        self._stored = stored
        self._ready = ready
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._days = days
        self._renewed = renewed

    # -- the reconcile ----------------------------------------------------------------

    def reconcile(self, *, leader: bool) -> tuple[list[str], list[str]]:
        """Check (hourly), pass the turn (leader), renew in turn: (notes, blocked lines)."""
        days = self._days
        if not self._ctx.joined():
            return [], []
        now = self._clock()
        last = _parse(self._stored.get(CHECKED))
        if certificates.due_for_check(last, now):
            try:
                expiry = certificates.check(self._ctx.host)
            except certificates.CertificateError as e:
                self._stored[CHECK_FAILURE] = str(e)
            else:
                self._stored.pop(CHECK_FAILURE, None)
                self._stored[CHECKED] = now.isoformat()
                self._publish(expiry, wants=bool(expiry.due(now, days)) or self._requested())
            self._kubelet_serving_certificate(now)
        if leader:
            self.pass_turn()
        if self._peers.app.get(RENEWAL_TURN) == self._ctx.unit:
            try:
                self.renew()
            except certificates.CertificateError:
                pass  # recorded: Blocked below, retried on the next hook
            if leader:
                self.pass_turn()
        return self._notes(now, days), self._blocked()

    def _kubelet_serving_certificate(self, now: datetime.datetime) -> None:
        """Renew kubelet's self-signed serving certificate within 30 days of expiry.

        kubeadm's certificates do not include it (kubeadm certs renew leaves it alone);
        no turn: the running kubelet loads the new pair from its files, nothing restarts
        (kubeadm.rotate_kubelet_serving_certificate).
        """
        kubeadm.rotate_kubelet_serving_certificate(self._ctx.host, now)

    def pass_turn(self) -> str | None:
        """Give the turn to the first unit that wants one, this (leading) unit first.

        Never while another of `peers.NODE_TURNS` is out (`rolling.pass_turn`).
        """
        bag = self._peers.app
        waiting = [m.name for m in self._peers.joined() if m.data.get(WANTS_TURN) == "true"]
        waiting.sort(key=_unit_key)
        if self._peers.mine.get(WANTS_TURN) == "true":
            waiting.insert(0, self._ctx.unit)
        # one node restarts at a time: not while an upgrade or containerd update turn is out
        holder = rolling.pass_turn(bag, RENEWAL_TURN, waiting, exclusive=NODE_TURNS)
        if holder:
            logger.info("certificate renewal turn: %s", holder)
        return holder

    def renew(self) -> Renewed:
        """Renew this node's certificates now and restart its static pods (its turn).

        Raises:
            certificates.CertificateError: recorded for the status; the old certificates
                kubeadm did not replace still serve until they expire.
        """
        host = self._ctx.host
        try:
            before = certificates.check(host)
            after = certificates.renew(host, before, self._clock(), self._days)
            restarted = certificates.restart_static_pods(host, self._sleep)
            certificates.wait_ready(self._ready, clock=self._monotonic, sleep=self._sleep)
        except certificates.CertificateError as e:
            self._stored[FAILURE] = str(e)
            logger.error("certificate renewal failed: %s", e)
            raise
        now = self._clock()
        self._stored.pop(FAILURE, None)
        self._stored.pop(REQUESTED, None)
        self._stored[CHECKED] = now.isoformat()
        self._publish(after, wants=False)
        self._renewed()
        earliest = after.earliest()
        renewed = [c.name for c in after.certificates if not c.missing]
        logger.info(
            "renewed %s; restarted %s; earliest expiry %s",
            ", ".join(renewed),
            ", ".join(restarted),
            earliest.expires.isoformat() if earliest and earliest.expires else "none",
        )
        return Renewed(renewed, earliest, restarted)

    def request(self) -> None:
        """The operator asked for a renewal (action): want a turn until it is done."""
        self._stored[REQUESTED] = "true"
        write(self._peers.mine, {WANTS_TURN: "true"})

    def turn(self) -> str | None:
        """Who holds the renewal turn now."""
        return self._peers.app.get(RENEWAL_TURN) or None

    # -- what it says -----------------------------------------------------------------

    def _requested(self) -> bool:
        return self._stored.get(REQUESTED) == "true"

    def _publish(self, expiry: certificates.Expiry, *, wants: bool) -> None:
        earliest = expiry.earliest()
        data = {WANTS_TURN: "true" if wants else "false"}
        if earliest is not None and earliest.expires is not None:
            value = {"name": earliest.name, "expires": earliest.expires.isoformat()}
            ca = expiry.earliest_authority()
            if ca is not None and ca.expires is not None:  # CAs: reported, not renewed
                value.update({"ca": ca.name, "ca-expires": ca.expires.isoformat()})
            data[EXPIRY] = json.dumps(value, sort_keys=True)
        write(self._peers.mine, data)

    def _notes(self, now: datetime.datetime, days: int) -> list[str]:
        earliest = earliest_of(self._peers.mine)
        if earliest is None or self._stored.get(FAILURE):
            return []  # a failed renewal's Blocked line carries the date
        name, expires = earliest
        left = expires - now
        if left <= datetime.timedelta(days=days):
            return [f"certificate {name} expires {expires:%Y-%m-%d}, renewing in turn"]
        if left <= datetime.timedelta(days=SHOWN_DAYS):
            return [f"certificate {name} expires {expires:%Y-%m-%d}, renewed {days} days before"]
        return []

    def _blocked(self) -> list[str]:
        lines = []
        earliest = earliest_of(self._peers.mine)
        date = f" ({earliest[0]} expires {earliest[1]:%Y-%m-%d})" if earliest else ""
        if failure := self._stored.get(CHECK_FAILURE):
            lines.append(f"cannot read certificate expiry{date}: {failure}; retrying hourly")
        if failure := self._stored.get(FAILURE):
            lines.append(
                f"certificate renewal failed{date}: {failure}; retrying on the next hook "
                "(fix the cause, or run renew-certificates)"
            )
        return lines


def earliest_of(data: MutableMapping[str, str] | dict) -> tuple[str, datetime.datetime] | None:
    """(name, expiry) of the earliest certificate a unit's databag names, or None."""
    try:
        value = json.loads(data.get(EXPIRY) or "null")
        return (str(value["name"]), datetime.datetime.fromisoformat(value["expires"]))
    except (ValueError, TypeError, KeyError):
        return None


def report(peers: Peers) -> str:
    """cluster-info's `certificates`: each unit's earliest certificate expiry."""
    units = {peers.me: peers.mine, **{m.name: m.data for m in peers.members}}
    lines = []
    for unit in sorted(units, key=_unit_key):
        found = earliest_of(units[unit])
        if found is not None:
            line = f"{unit}: {found[0]} expires {found[1]:%Y-%m-%d %H:%M} UTC"
            ca = _ca_of(units[unit])
            if ca:
                line += f"; CA {ca}"
            lines.append(line)
    return "\n".join(lines) or "not checked yet"


def gauges(peers: Peers) -> list[Gauge]:
    """Each control-plane unit's earliest certificate and CA expiry, for COS (the leader's).

    Seconds since the epoch, not days left: the alert compares them with Prometheus'
    time(), so it stays right between the hourly checks and fires even if hooks stop.
    """
    units = {peers.me: peers.mine, **{m.name: m.data for m in peers.members}}
    out = []
    for unit in sorted(units, key=_unit_key):
        found = earliest_of(units[unit])
        if found is not None:
            out.append(
                Gauge(
                    "gpu_k8s_certificate_expiry_timestamp_seconds",
                    "When the unit's earliest kubeadm certificate expires (renewed in turn).",
                    found[1].timestamp(),
                    {"unit": unit, "certificate": found[0]},
                )
            )
        ca = _ca_expiry(units[unit])
        if ca is not None:
            out.append(
                Gauge(
                    "gpu_k8s_certificate_authority_expiry_timestamp_seconds",
                    "When the unit's earliest kubeadm CA expires (kubeadm never renews CAs).",
                    ca[1].timestamp(),
                    {"unit": unit, "authority": ca[0]},
                )
            )
    return out


def _ca_expiry(data: MutableMapping[str, str] | dict) -> tuple[str, datetime.datetime] | None:
    try:
        value = json.loads(data.get(EXPIRY) or "null")
        return (str(value["ca"]), datetime.datetime.fromisoformat(value["ca-expires"]))
    except (ValueError, TypeError, KeyError):
        return None


def _ca_of(data: MutableMapping[str, str] | dict) -> str:
    found = _ca_expiry(data)
    return f"{found[0]} expires {found[1]:%Y-%m-%d}" if found else ""


def _parse(text: str | None) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
