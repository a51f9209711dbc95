"""Host events about a tenant's pods, copied into the tenant as vCluster's syncer copies them.

The host's scheduler and node agent record events on host pods (`FailedScheduling`,
`Preempted`, `Killing`...). A tenant user (and the executor, which names a preemptor from the
`Preempted` event) reads them in the tenant, on the tenant pod. Each host event whose
involved object is a synced pod becomes a tenant event on that pod, in its namespace, with
the host's message: like vCluster's syncer, this one does not turn host pod UIDs in it into
tenant UIDs (`Preempted by pod <host uid>` stays so). An event seen again with a new
resourceVersion (its count went up) is updated. A write that fails is kept for the next pass
and holds up neither the other events nor the pass (vCluster's syncer requeues per object).

Example:
    >>> host_pod_event = {"metadata": {"name": "a.1", "uid": "e1", "resourceVersion": "7"},
    ...     "involvedObject": {"kind": "Pod", "name": "a-x-default-x-team-a", "uid": "h1"},
    ...     "reason": "Preempted", "message": "Preempted by pod h2 on node gpu-1",
    ...     "type": "Normal", "count": 1}
    >>> pods = {"a-x-default-x-team-a": PodRef("default", "a", "t1")}
    >>> tenant_event(host_pod_event, pods["a-x-default-x-team-a"])["message"]
    'Preempted by pod h2 on node gpu-1'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
_KEPT = ("reason", "type", "count", "source", "firstTimestamp", "lastTimestamp")


@dataclass(frozen=True)
class PodRef:
    """A tenant pod, as a host event's involved object is translated to."""

    namespace: str
    name: str
    uid: str


def tenant_event(event: Obj, pod: PodRef) -> Obj:
    """The tenant's copy of a host event on the host pod of `pod`."""
    meta = event["metadata"]
    copied = {k: event[k] for k in _KEPT if event.get(k) is not None}
    when = event.get("eventTime")  # events.k8s.io events carry only this time
    if when:
        copied.setdefault("firstTimestamp", when)
        copied.setdefault("lastTimestamp", when)
    return {
        **copied,
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod.name}.{meta['uid'][:13]}", "namespace": pod.namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
        },
        "message": event.get("message") or "",
    }


class EventSync:
    """Copies host pod events into the tenant; remembers what it copied.

    Args:
        write: creates (or, given the existing name, replaces) a tenant event.
        failed: told of a write that raised (for `describe`; no default, so that no caller drops
            one unseen); that event is tried again on the next `sync`.
    """

    def __init__(
        self,
        write: Callable[[Obj, bool], None],
        failed: Callable[[Exception], None],
    ) -> None:
        self._write = write
        self._failed = failed
        self._copied: dict[str, str] = {}  # host event uid → resourceVersion copied
        self.pods: dict[str, PodRef] = {}  # host pod name → tenant pod, every one seen

    def remember(self, host_name: str, pod: PodRef) -> None:
        self.pods[host_name] = pod

    def sync(self, events: list[Obj]) -> None:
        for event in events:
            involved = event.get("involvedObject") or {}
            pod = self.pods.get(str(involved.get("name")))
            if involved.get("kind") != "Pod" or pod is None:
                continue
            meta = event["metadata"]
            seen = self._copied.get(meta["uid"])
            if seen == meta.get("resourceVersion"):
                continue
            try:
                self._write(tenant_event(event, pod), seen is not None)
            except Exception as error:  # noqa: BLE001 - retried on the next pass
                self._failed(error)
                continue
            self._copied[meta["uid"]] = str(meta.get("resourceVersion"))


__all__ = ["EventSync", "PodRef", "tenant_event"]
