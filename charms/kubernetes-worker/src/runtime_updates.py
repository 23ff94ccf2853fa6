# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""containerd and runc security updates for a joined node, in drain turns (no ops imports).

containerd and runc are held in their series (lib containerd.py), so a fix published in
noble-security or -updates never reaches a running node by itself (apt-mark(8): a held
package "will not be automatically installed, upgraded or removed"). The worker asks
apt what its series has (`containerd.pending_updates`, `apt-get -s`, after an
`apt-get update`) once a day and on upgrade-charm, not on every hook (a refresh costs
seconds); what is pending is installed in a drain turn
(`reboot_turns`, purpose `RUNTIME`), as a Kubernetes upgrade is: drain, install, restart
containerd, uncordon, give the turn back.
"""

from __future__ import annotations

from collections.abc import Mapping

# At most one check a day: the lists refresh and a simulated install cost seconds, and
# Ubuntu publishes security fixes for these packages days apart at the most.
CHECK_INTERVAL = 24 * 3600.0
# upgrade-charm asks apt again, refreshing the lists unless they are this fresh (a second
# upgrade-charm right after the first changes nothing on the machine).
REFRESH_AFTER = 3600.0


def due(last_checked: float | None, now: float, *, upgrading: bool) -> tuple[bool, bool]:
    """(ask apt now, refresh its lists first): a day since the last check, or upgrade-charm."""
    age = None if last_checked is None else now - last_checked
    if age is None or not 0 <= age < CHECK_INTERVAL:
        return True, True
    return upgrading, upgrading and age >= REFRESH_AFTER


def pending_message(pending: Mapping[str, str]) -> str:
    """`containerd/runc security update pending: runc 1.3.4-0ubuntu1~24.04.2`."""
    found = ", ".join(f"{name} {version}" for name, version in sorted(pending.items()))
    return f"containerd/runc security update pending: {found}"
