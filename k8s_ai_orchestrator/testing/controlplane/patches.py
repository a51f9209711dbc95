"""Status patches as a kubelet or a syncer sends them.

A strategic merge patch merges `status.conditions` by `type`, so a condition that went away
(a resize no longer pending) must be deleted with a `$patch: delete` directive; sending the
shorter list alone would keep it.

Example:
    >>> before = {"conditions": [{"type": "Ready"}, {"type": "PodResizePending"}]}
    >>> status_patch(before, {"conditions": [{"type": "Ready"}]})["status"]["conditions"]
    [{'type': 'Ready'}, {'type': 'PodResizePending', '$patch': 'delete'}]
"""

from __future__ import annotations

import copy
from typing import Any

STRATEGIC = "application/strategic-merge-patch+json"


def status_patch(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """The body that turns status `before` into `after` (conditions gone are deleted)."""
    status = copy.deepcopy(after)
    kept = {c.get("type") for c in status.get("conditions") or []}
    gone = [
        {"type": c["type"], "$patch": "delete"}
        for c in (before or {}).get("conditions") or []
        if c.get("type") not in kept
    ]
    if gone:
        status["conditions"] = [*(status.get("conditions") or []), *gone]
    return {"status": status}


__all__ = ["STRATEGIC", "status_patch"]
