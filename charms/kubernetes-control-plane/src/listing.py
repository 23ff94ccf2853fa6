# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""A bounded list in a status line: the first few, then how many more (no ops imports).

The control plane's status names units, nodes and refused reports; with 1,000 workers
it must stay one readable line, so each list shows its first `limit` and counts the rest
the same way everywhere: `a; b; c and 2 more`.
"""

from __future__ import annotations

from collections.abc import Sequence

LIMIT = 3  # what a status line names of one list; the rest are counted


def shown(items: Sequence[str], limit: int = LIMIT, *, sep: str = "; ", more: str = "") -> str:
    """The first `limit` of `items` joined by `sep`, then ` and N more` (` more <more>`).

    `more` names what the rest are when the items alone do not say it (`MIG report(s)
    refused`): `a; b; c and 2 more MIG report(s) refused`.
    """
    rest = len(items) - limit
    tail = f" and {rest} more{' ' + more if more else ''}" if rest > 0 else ""
    return sep.join(items[:limit]) + tail
