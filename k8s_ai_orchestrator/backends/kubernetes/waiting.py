"""How long an attempt waited before it ran, and how much of that it held its quota: pure.

An attempt waits from its submit until its first container starts. Under Kueue
(`gang_admission.mode: kueue`) its Job is created suspended; Kueue unsuspends it when it admits
the Job's Workload, which reserves the ClusterQueue's quota for it, and the Job controller
creates its pods at once. From its oldest pod's creation until its first container starts
(nodes being provisioned, images pulled, a node Kueue counts as free but the scheduler does
not), the attempt holds quota that no other Workload can be admitted to; before that it holds
nothing. Without Kueue a Pending pod holds nothing: a namespace's ResourceQuota counts it, but
that is a cap, not capacity.

Example:
    >>> pod = {"metadata": {"creationTimestamp": "2026-12-02T10:00:20Z"},
    ...        "status": {"containerStatuses": [{"state": {"running": {
    ...            "startedAt": "2026-12-02T10:00:50Z"}}}]}}
    >>> now = datetime.fromisoformat("2026-12-02T10:01:00Z").timestamp()
    >>> split_wait(55.0, [pod], now, holds_quota=True)  # submitted 10:00:05; ran at 10:00:50
    (15.0, 30.0)
    >>> split_wait(55.0, [pod], now, holds_quota=False)
    (45.0, 0.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .status import container_ages


def split_wait(
    since_submit_s: float, pods: Sequence[Mapping[str, Any]], now: float, *, holds_quota: bool
) -> tuple[float, float]:
    """What an attempt submitted `since_submit_s` ago waited before its first container
    started (all of it when none started), by the kubelet's timestamps at `now` (epoch
    seconds), split into (queued holding nothing, quota held idle). The second is, when the
    admission mode `holds_quota` once pods exist, from its oldest pod's creation to that start
    (or `now`)."""
    started, _ = container_ages(pods, now)  # 0.0: nothing started
    waited = max(0.0, since_submit_s - started)
    created = [
        datetime.fromisoformat(stamp).timestamp()
        for pod in pods
        if (stamp := (pod.get("metadata") or {}).get("creationTimestamp"))
    ]
    if not holds_quota or not created:
        return waited, 0.0
    idle = min(waited, max(0.0, now - started - min(created)))
    return waited - idle, idle


__all__ = ["split_wait"]
