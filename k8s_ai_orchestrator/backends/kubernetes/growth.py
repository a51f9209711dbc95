"""Memory of running step pods, and in-place growth through the `pods/resize` subresource.

While a step's pod runs, its memory in use is read from the kubelet's summary on its node
(`GET /api/v1/nodes/{node}/proxy/stats/summary`, the source metrics-server reads; at most once
a second per attempt, and only when growth or `memory="auto"` needs it). The peak becomes the
attempt's `max_rss_bytes`. With a `MemoryGrowth` policy, once the pod uses `grow_at` of its
limit its memory request and limit are raised in place (× the escalation factor, capped by
`max_memory`); the step container's `resizePolicy` says NotRequired (`resizable`), so the
kubelet applies it without a restart when the node has room. What became of
each resize is read from the pod's status:

- accepted: `status.containerStatuses[].resources.limits.memory` shows the new limit;
- pending: the condition `PodResizePending` (reason Deferred: the node has no room now); the
  kubelet keeps trying, and the step falls back to OOM escalation if it passes its old limit;
- refused: the API server said no (no `pods/resize` permission, or more than the node's
  allocatable); the same size is not asked for again.

Example:
    >>> pod = {"spec": {"containers": [{"name": "dagster"}]}, "status": {"containerStatuses": [
    ...     {"name": "dagster", "resources": {"limits": {"memory": "2Gi"}}}]}}
    >>> applied_memory_limit(pod)
    2147483648
    >>> in_use({"pods": [{"podRef": {"name": "p", "namespace": "ns"},
    ...     "memory": {"workingSetBytes": 42}}]}, "ns", "p")
    42
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from ...errors import BackendError
from ..base import GrowOutcome, MemoryGrowth, Resize
from .api import ApiRetry, api_message

SAMPLE_S = 1.0  # at most one summary read per attempt per second
_MiB = 1024**2


@dataclass
class PodMemory:
    """What the backend knows about one attempt's memory (mutable, private)."""

    limit_bytes: int  # the limit in effect (grows with each accepted resize)
    sampled_at: float = -math.inf
    peak_bytes: int = 0
    asked_bytes: int | None = None  # a resize sent, its outcome not seen yet
    asked_used: int = 0  # memory in use when it was sent
    reported_pending: str = ""  # the PodResizePending message already recorded
    refused: set[int] = field(default_factory=set)  # sizes the API refused
    resizes: list[Resize] = field(default_factory=list)


def resizable(manifest: dict[str, Any]) -> None:
    """Say in the Job's step container that memory and CPU change without a restart
    (`resizePolicy` NotRequired, the default written out, so a pod template override that
    asks for RestartContainer is the user's visible choice)."""
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    policies = {p.get("resourceName"): p for p in container.get("resizePolicy") or []}
    for resource in ("cpu", "memory"):
        policies.setdefault(resource, {"resourceName": resource, "restartPolicy": "NotRequired"})
    container["resizePolicy"] = list(policies.values())


def in_use(summary: Mapping[str, Any], namespace: str, pod: str) -> int | None:
    """The pod's working set in a kubelet summary (None if the pod is not in it)."""
    for entry in summary.get("pods") or []:
        ref = entry.get("podRef") or {}
        if (ref.get("namespace"), ref.get("name")) == (namespace, pod):
            total = (entry.get("memory") or {}).get("workingSetBytes")
            if total is None:
                containers = entry.get("containers") or []
                total = sum((c.get("memory") or {}).get("workingSetBytes") or 0 for c in containers)
            return int(total)
    return None


def applied_memory_limit(pod: Mapping[str, Any]) -> int | None:
    """The memory limit the kubelet applied to the pod's first container (its status)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    name = containers[0]["name"] if containers else None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            limit = ((status.get("resources") or {}).get("limits") or {}).get("memory")
            return int(parse_quantity(limit)) if limit else None
    return None


def resize_pending(pod: Mapping[str, Any]) -> str:
    """The `PodResizePending` condition's reason and message, or ""."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodResizePending" and condition.get("status") == "True":
            return f"{condition.get('reason', 'Deferred')}: {condition.get('message', '')}"
    return ""


class PodGrowth:
    """Samples running pods' memory and grows them in place (see the module docstring).

    Args:
        growth: when and how much to grow (None: only measure).
        retry: the backend's API retry policy.
        clock: monotonic seconds.
        logger: where a tenant that hides node stats is reported, once.
    """

    def __init__(
        self,
        growth: MemoryGrowth | None,
        retry: ApiRetry,
        clock: Callable[[], float],
        logger: logging.Logger,
    ) -> None:
        self.growth = growth
        self._retry = retry
        self._clock = clock
        self._log = logger
        self._no_stats: set[str] = set()  # tenants whose node stats this executor may not read

    def observe(
        self, core: CoreV1Api, tenant: str, pod: Mapping[str, Any], state: PodMemory
    ) -> None:
        """Settle the last resize from the pod's status; sample memory and grow when due."""
        self._settle(pod, state)
        now = self._clock()
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or tenant in self._no_stats or now - state.sampled_at < SAMPLE_S:
            return
        state.sampled_at = now
        meta = pod["metadata"]
        used = self._memory_in_use(core, tenant, node, meta["namespace"], meta["name"])
        if used is None:
            return
        state.peak_bytes = max(state.peak_bytes, used)
        if self.growth is None or state.asked_bytes is not None:
            return
        target = self.growth.target(state.limit_bytes, used)
        if target is None or target <= state.limit_bytes or target in state.refused:
            return
        self.ask(core, tenant, pod, state, target, used)

    def _memory_in_use(
        self, core: CoreV1Api, tenant: str, node: str, namespace: str, pod: str
    ) -> int | None:
        try:
            answer = self._retry.call(
                "read node stats",
                tenant,
                lambda: core.connect_get_node_proxy_with_path(
                    node, "stats/summary", _preload_content=False
                ),
            )
            summary = json.loads(answer.data)
        except ApiException as error:
            self._no_stats.add(tenant)  # a permanent answer: asking again each second is noise
            self._log.warning(
                "tenant '%s': cannot read node stats (%s); steps there are not measured "
                "and not grown in place (grant get on nodes/proxy)",
                tenant,
                api_message(error),
            )
            return None
        except (BackendError, ValueError):
            return None
        return in_use(summary, namespace, pod)

    def ask(
        self,
        core: CoreV1Api,
        tenant: str,
        pod: Mapping[str, Any],
        state: PodMemory,
        target: int,
        used: int,
    ) -> None:
        """Send one resize to `target` bytes; a refusal is recorded at once."""
        meta = pod["metadata"]
        container = pod["spec"]["containers"][0]["name"]
        amount = f"{math.ceil(target / _MiB)}Mi"
        resources = {"requests": {"memory": amount}, "limits": {"memory": amount}}
        body = {"spec": {"containers": [{"name": container, "resources": resources}]}}
        try:
            self._retry.call(
                "resize pod",
                tenant,
                lambda: core.patch_namespaced_pod_resize(meta["name"], meta["namespace"], body),
            )
        except (ApiException, BackendError) as error:
            if isinstance(error, ApiException):
                state.refused.add(target)  # the server's answer: not asked for again
                reason = f"the API server refused the resize ({api_message(error)})"
            else:
                reason = f"the resize could not be sent ({error})"
            state.resizes.append(
                Resize(state.limit_bytes, target, used, GrowOutcome.REFUSED, reason)
            )
            return
        state.asked_bytes, state.asked_used, state.reported_pending = target, used, ""

    def _settle(self, pod: Mapping[str, Any], state: PodMemory) -> None:
        target = state.asked_bytes
        if target is None:
            return
        applied = applied_memory_limit(pod)
        if applied is not None and applied >= target:
            state.resizes.append(
                Resize(state.limit_bytes, target, state.asked_used, GrowOutcome.ACCEPTED)
            )
            state.limit_bytes, state.asked_bytes = applied, None
            return
        pending = resize_pending(pod)
        if pending and pending != state.reported_pending:
            state.reported_pending = pending
            state.resizes.append(
                Resize(state.limit_bytes, target, state.asked_used, GrowOutcome.PENDING, pending)
            )


__all__ = [
    "PodGrowth",
    "PodMemory",
    "applied_memory_limit",
    "in_use",
    "resizable",
    "resize_pending",
]
