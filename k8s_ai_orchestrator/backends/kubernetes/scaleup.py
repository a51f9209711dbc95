"""What an autoscaler said about a Pending pod, in a person's words: a pure mapping of events.

On a cluster whose pools grow from zero, the scheduler's "0/3 nodes are available: 3
Insufficient cpu" is only half the story: the autoscaler says on the same pod whether a node is
coming. Karpenter writes `Nominated` ("Pod should schedule on: nodeclaim/gpu-x7k2q") when it
has launched a NodeClaim for the pod, and its own `FailedScheduling` ("Failed to schedule pod,
incompatible with nodepool …; all available instance types exceed limits for nodepool …")
when no NodePool will; the cluster-autoscaler writes `TriggeredScaleUp`, `NotTriggerScaleUp`
and `FailedScaleUp`. `read_scale_event` turns one such event into a `ScaleEvent`; events of
anyone else are None. The texts are stable (no age), so a Pending note changes only when the
autoscaler's word does.

Example:
    >>> event = {"reason": "Nominated", "message": "Pod should schedule on: nodeclaim/gpu-x7k2q",
    ...     "lastTimestamp": "2026-12-03T14:02:11Z"}
    >>> print(read_scale_event(event).text)
    waiting for a node from NodePool 'gpu' (NodeClaim gpu-x7k2q, launched for it at 14:02:11 UTC)
    >>> print(read_scale_event({"reason": "NotTriggerScaleUp",
    ...     "message": "pod didn't trigger scale-up: 2 max node group size reached"}).text)
    the cluster autoscaler will not add a node for it: 2 max node group size reached
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

KARPENTER_REFUSAL = "Failed to schedule pod, "  # Karpenter's FailedScheduling, not the scheduler's
_NODECLAIM = re.compile(r"nodeclaim/(?P<claim>(?P<pool>[a-z0-9.-]+?)-[a-z0-9]{5})\b")
_NODE = re.compile(r"\bnode/(?P<node>\S+)")
_GROUP = re.compile(r"\{(?P<group>\S+) (?P<old>\d+)->(?P<new>\d+) \(max: (?P<max>\d+)\)\}")
# where a Karpenter clause names its NodePool: `nodepool "gpu"` (v1.0–1.3), `(NodePool=gpu)`
# (klog references, v1.4+), or only the pool's requirement `karpenter.sh/nodepool In [gpu]`
_POOL = re.compile(
    r'nodepool:? "(?P<quoted>[^"]+)"|NodePool="?(?P<ref>[\w.-]+)"?'
    r"|karpenter\.sh/nodepool In \[(?P<requirement>[\w.-]+)\]"
)
_PREFIX = re.compile(r'^incompatible with nodepool "[^"]+",(?: daemonset overhead=\{[^}]*\},)? ?')
# the events that say a node is on its way for the pod (the wait should end by itself)
NODE_COMING = frozenset({"Nominated", "TriggeredScaleUp"})
_WHY_CHARS = 160  # a pool's reason can list every requirement; its start says enough


@dataclass(frozen=True)
class ScaleEvent:
    """One autoscaler event on a Pending pod."""

    reason: str  # the event's reason, the Pending note's key
    text: str  # what it means, as a sentence a person acts on

    @property
    def coming(self) -> bool:
        """A node is on its way for the pod."""
        return self.reason in NODE_COMING


def _nominated(message: str, at: str) -> ScaleEvent:
    since = f" at {at}" if at else ""
    claim = _NODECLAIM.search(message)
    if claim is not None:
        return ScaleEvent(
            "Nominated",
            f"waiting for a node from NodePool '{claim['pool']}' (NodeClaim {claim['claim']}, "
            f"launched for it{since})",
        )
    node = _NODE.search(message)
    where = f"node {node['node']}" if node else "a node"
    return ScaleEvent("Nominated", f"waiting for {where}, which Karpenter chose for it")


def _karpenter_refusal(message: str, at: str) -> ScaleEvent:
    """Karpenter's FailedScheduling: one clause per NodePool, joined by "; "."""
    reasons: list[str] = []
    for clause in (c.strip() for c in message[len(KARPENTER_REFUSAL) :].split("; ")):
        found = _POOL.search(clause)
        pool = next((g for g in found.groups() if g), None) if found else None
        if "exceed limits for nodepool" in clause:
            reason = f"NodePool '{pool}' is at its limit (spec.limits)"
        else:
            why = _PREFIX.sub("", clause).split(", requirements=")[0].strip()
            why = why if len(why) <= _WHY_CHARS else why[:_WHY_CHARS].rstrip() + " …"
            reason = f"NodePool '{pool}' cannot hold it ({why})" if pool else why
        if reason and reason not in reasons:
            reasons.append(reason)
    return ScaleEvent(
        "FailedScheduling", "Karpenter will not create a node for it: " + "; ".join(reasons)
    )


def _triggered(message: str, at: str) -> ScaleEvent:
    groups = [
        f"node group {g['group']} from {g['old']} to {g['new']} nodes (max {g['max']})"
        for g in _GROUP.finditer(message)
    ]
    grows = ", ".join(groups) or message
    return ScaleEvent(
        "TriggeredScaleUp", f"waiting for a node: the cluster autoscaler grows {grows}"
    )


def _after_colon(reason: str, prefix: str) -> Callable[[str, str], ScaleEvent]:
    """A cluster-autoscaler refusal: its own words after the first colon, after `prefix`."""

    def read(message: str, at: str) -> ScaleEvent:
        said = message.split(":", 1)[1].strip() if ":" in message else message
        return ScaleEvent(reason, f"{prefix}: {said or 'no reason given'}")

    return read


# reason → how to read its message (FailedScheduling only when Karpenter wrote it)
READERS: Mapping[str, Callable[[str, str], ScaleEvent]] = {
    "Nominated": _nominated,
    "FailedScheduling": _karpenter_refusal,
    "TriggeredScaleUp": _triggered,
    "NotTriggerScaleUp": _after_colon(
        "NotTriggerScaleUp", "the cluster autoscaler will not add a node for it"
    ),
    "FailedScaleUp": _after_colon(
        "FailedScaleUp", "the cluster autoscaler's scale-up for it failed"
    ),
}


def read_scale_event(event: Mapping[str, Any]) -> ScaleEvent | None:
    """The autoscaler's word in a pod event (a raw Event dict), or None for anyone else's."""
    reason, message = event.get("reason") or "", event.get("message") or ""
    read = READERS.get(reason)
    if read is None or (reason == "FailedScheduling" and not message.startswith(KARPENTER_REFUSAL)):
        return None
    return read(message, _clock_time(event))


def _clock_time(event: Mapping[str, Any]) -> str:
    stamp = str(event.get("lastTimestamp") or event.get("eventTime") or "")
    match = re.search(r"T(\d\d:\d\d:\d\d)", stamp)
    return f"{match[1]} UTC" if match and stamp.endswith("Z") else ""
