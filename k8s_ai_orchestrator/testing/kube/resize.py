"""In-place pod resize on the node, as the kubelet does it (InPlacePodVerticalScaling, GA 1.35).

A resize changes a running pod's `spec.containers[].resources` through the `pods/resize`
subresource. The API server (`resized`) takes only the containers' resources and `resizePolicy`
from the request (other changes are dropped), lets only cpu and memory amounts change, never
removes a request or limit, keeps the pod's QoS class, and refuses a pod whose running
containers report no `resources` (a node without resize support); an accepted resize bumps
`metadata.generation`; its PodResize admission refuses (403) new requests larger than the
node's allocatable (`check_node_capacity`). The kubelet compares the new resources with
what it allocated:

- if the node's allocatable, less what the other pods on it were allocated, holds the new
  requests, it allocates them, applies the new limits to the running containers (no restart)
  and reports them in `status.containerStatuses[].resources`, with the events `ResizeStarted`
  and `ResizeCompleted`;
- otherwise the resize waits: the pod gets the condition `PodResizePending` (reason
  `Deferred`, message "Node didn't have enough resource: memory, requested: …, used: …,
  capacity: …") and a `ResizeDeferred` warning ("Pod resize OutOfmemory: {…}", the kubelet's
  admission reason), and is retried at every pass until the node
  has room or the resize is reverted.

Example:
    >>> pod = {"spec": {"containers": [{"name": "step",
    ...     "resources": {"limits": {"memory": "2Gi"}, "requests": {"memory": "2Gi"}}}]}}
    >>> node = {"status": {"allocatable": {"cpu": "8", "memory": "3Gi"}}}
    >>> shortfall(pod, node, {"memory": 2 * 1024**3 * 1000})
    "Node didn't have enough resource: memory, requested: 2147483648, used: 2147483648, \
capacity: 3221225472"
    >>> shortfall(pod, node, {}) is None
    True
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from .quantity import container_amounts, to_milli
from .resources import ResourceType, invalid, qos_class
from .store import ApiError

RESIZABLE = ("cpu", "memory")
PENDING = "PodResizePending"
IN_PROGRESS = "PodResizeInProgress"
DEFERRED = "Deferred"

Obj = dict[str, Any]


def desired(pod: Mapping[str, Any]) -> dict[str, Obj]:
    """Each container's cpu and memory requests and limits, as the spec asks now."""
    wanted = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted[container["name"]] = {
            section: {k: v for k, v in (resources.get(section) or {}).items() if k in RESIZABLE}
            for section in ("requests", "limits")
            if resources.get(section)
        }
    return wanted


def requests_of(allocated: Mapping[str, Obj]) -> dict[str, int]:
    """The cpu and memory requests (thousandths) of a pod's allocated containers."""
    total: dict[str, int] = {}
    for resources in allocated.values():
        for name, value in container_amounts({"resources": resources}, "requests").items():
            if name in RESIZABLE:
                total[name] = total.get(name, 0) + value
    return total


def _excess(
    pod: Mapping[str, Any], capacity: Mapping[str, int], used: Mapping[str, int]
) -> list[tuple[str, int, int, int]]:
    """(resource, requested, used, capacity) for each of cpu and memory whose desired request
    beside `used` is over `capacity` (thousandths in; millicores and bytes out)."""
    wanted = requests_of(desired(pod))
    rows = []
    for name in RESIZABLE:
        want, taken = wanted.get(name, 0), used.get(name, 0)
        if name in capacity and want + taken > capacity[name]:
            unit = 1 if name == "cpu" else 1000  # cpu in millicores, memory in bytes
            rows.append((name, want // unit, taken // unit, capacity[name] // unit))
    return rows


def shortfall(
    pod: Mapping[str, Any], node: Mapping[str, Any], used: Mapping[str, int]
) -> str | None:
    """Why the node cannot hold `pod`'s desired requests beside `used`; None if it can."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    capacity = {name: to_milli(allocatable[name]) for name in RESIZABLE if name in allocatable}
    over = _excess(pod, capacity, used)
    if not over:
        return None
    name, want, taken, have = over[0]
    return f"{_SHORT}{name}, requested: {want}, used: {taken}, capacity: {have}"


_SHORT = "Node didn't have enough resource: "


def deferred_event_prefix(problem: str) -> str:
    """What the kubelet's `ResizeDeferred` event says before the resources, for a `shortfall`
    `problem`: "Pod resize OutOf<resource>" (the kubelet's admission reason, not "Deferred").

    Example:
        >>> deferred_event_prefix("Node didn't have enough resource: memory, requested: 1")
        'Pod resize OutOfmemory'
    """
    resource = problem.removeprefix(_SHORT).split(",", 1)[0]
    return f"Pod resize OutOf{resource}"


def memory_limits(allocated: Mapping[str, Obj]) -> dict[str, int | None]:
    """Each container's allocated memory limit in bytes (None: no limit)."""
    limits = {}
    for name, resources in allocated.items():
        limit = (resources.get("limits") or {}).get("memory")
        limits[name] = to_milli(limit) // 1000 if limit else None
    return limits


def resized(rt: ResourceType, current: Obj, patched: Obj) -> Obj:
    """The pod after a `pods/resize` write of `patched`; raises 422 Invalid as the API does."""
    old = (current.get("spec") or {}).get("containers") or []
    new = (patched.get("spec") or {}).get("containers") or []
    causes: list[tuple[str, str, str]] = []
    if len(old) != len(new):
        text = "Forbidden: containers may not be added or removed on resize"
        causes.append(("spec.containers", "FieldValueForbidden", text))
    for index, (before, after) in enumerate(zip(old, new, strict=False)):
        if before.get("name") != after.get("name"):
            text = "Forbidden: containers may not be renamed or reordered on resize"
            causes.append((f"spec.containers[{index}].name", "FieldValueForbidden", text))
    if causes:
        raise invalid(rt, current["metadata"]["name"], causes)
    for index, (before, after) in enumerate(zip(old, new, strict=True)):
        where = f"spec.containers[{index}].resources"
        was, will = before.get("resources") or {}, after.get("resources") or {}
        for section in ("requests", "limits"):
            if set(was.get(section) or {}) - set(will.get(section) or {}):
                text = f"Forbidden: resource {section} cannot be removed"
                causes.append((f"{where}.{section}", "FieldValueForbidden", text))
        if _fixed_amounts(was) != _fixed_amounts(will):
            text = "Forbidden: only cpu and memory resources are mutable"
            causes.append(("spec", "FieldValueForbidden", text))
    status = current.get("status") or {}
    qos = status.get("qosClass") or qos_class(current.get("spec") or {})
    if qos_class(patched.get("spec") or {}) != qos:
        text = f'Invalid value: "{qos}": Pod QOS Class may not change as a result of resizing'
        causes.append(("spec", "FieldValueInvalid", text))
    for container in status.get("containerStatuses") or []:
        if "running" in (container.get("state") or {}):
            if "resources" not in container:
                text = "Forbidden: Pod running on node without support for resize"
                causes.append(("spec", "FieldValueForbidden", text))
            break
    if causes:
        raise invalid(rt, current["metadata"]["name"], list(dict.fromkeys(causes)))
    pod = copy.deepcopy(current)
    for container, after in zip(pod["spec"]["containers"], new, strict=True):
        for key in ("resources", "resizePolicy"):
            if key in after:
                container[key] = copy.deepcopy(after[key])
    meta = pod["metadata"]
    if pod["spec"] != current["spec"]:
        meta["generation"] = int(meta.get("generation") or 1) + 1
    return pod


def check_node_capacity(pod: Obj, node: Obj | None) -> None:
    """The PodResize admission: 403 when a bound pod's new requests exceed its node's
    allocatable (the kubelet could never hold them)."""
    name, node_name = pod["metadata"]["name"], pod["spec"].get("nodeName")
    if not node_name:
        return
    if node is None:
        raise ApiError(
            403, "Forbidden", f'pods "{name}" is forbidden: node "{node_name}" not found'
        )
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    capacity = {name: to_milli(allocatable.get(name, 0)) for name in RESIZABLE}
    over = [
        f"{resource}, requested: {want}, allocatable: {have}"
        for resource, want, _, have in _excess(pod, capacity, {})
    ]
    if over:
        raise ApiError(
            403,
            "Forbidden",
            f'pods "{name}" is forbidden: node didn\'t have enough allocatable resources: '
            + "; ".join(over),
            {"name": name, "kind": "pods", "causes": [{"reason": "NodeCapacity"}]},
        )


def _fixed_amounts(resources: Obj) -> Obj:
    """The resources a resize may not change: all but cpu and memory (GPUs, storage)."""
    return {
        section: {k: v for k, v in (amounts or {}).items() if k not in RESIZABLE}
        for section, amounts in resources.items()
        if isinstance(amounts, dict)
    }


def event_message(prefix: str, pod: Mapping[str, Any], error: str = "") -> str:
    """The kubelet's resize event text: the prefix, then the desired resources as JSON."""
    summary: Obj = {
        "containers": [{"name": n, "resources": r} for n, r in desired(pod).items()],
        "generation": int((pod.get("metadata") or {}).get("generation") or 1),
    }
    if error:
        summary["error"] = error
    return f"{prefix}: {json.dumps(summary, separators=(',', ':'))}"


__all__ = [
    "DEFERRED",
    "deferred_event_prefix",
    "IN_PROGRESS",
    "PENDING",
    "desired",
    "event_message",
    "check_node_capacity",
    "resized",
    "shortfall",
]
