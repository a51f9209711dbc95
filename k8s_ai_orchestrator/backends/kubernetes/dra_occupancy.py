"""Which DRA devices are free now: what a step whose claims wait is told besides the
scheduler's words.

The kube-scheduler says only `cannot allocate all claims`. Free devices are read from the
ResourceSlices (every device, and the counters partitionable devices share) and the
ResourceClaims' allocations: a device is free when no claim holds it and, for a device that
consumes shared counters (a GPU or one of its partitions), what the allocated devices consume
of its counter sets leaves room for it. Each device is counted on its own, so free partitions
of one GPU may not all fit at once.

Claims are listed cluster-wide (the tenant chart's `rbac.listNodes`); without that permission
the namespace's own claims are read, and the note says the rest are not seen.

Example:
    >>> from k8s_ai_orchestrator.backends.kubernetes.dra import GpuRequest
    >>> gpus = GpuRequest(request="dra", device_class="gpu.nvidia.com")
    >>> gpu = {"attributes": {"productName": {"string": "H100"}}}
    >>> slices = [{"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1"},
    ...            "devices": [{"name": "gpu-0", **gpu}, {"name": "gpu-1", **gpu}]}}]
    >>> held = {"status": {"allocation": {"devices": {"results": [
    ...     {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]}}}}
    >>> free_devices(gpus, slices, [held])
    {'n1': (1, 2)}
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from ...spec import ComputeSpec
from .dra import GROUP, VERSION, GpuRequest
from .dra_devices import (
    CANNOT_ALLOCATE,
    counter_values,
    memory_of,
    model_of,
    partition_of,
)

Obj = Mapping[str, Any]
Key = tuple[str, str, str]  # (driver, pool, device or counter set name)


def free_devices(
    gpus: GpuRequest,
    slices: Iterable[Obj],
    claims: Iterable[Obj],
    spec: ComputeSpec | None = None,
) -> dict[str, tuple[int, int]]:
    """Per node: (free, all) devices of the step's kind (whole GPUs, or partitions of its
    profile), model and least memory (any, without a `spec`)."""
    items = list(slices)
    totals: dict[Key, dict[str, Decimal]] = {}
    devices: dict[Key, tuple[str, Obj]] = {}
    for item in items:
        body = item.get("spec") or {}
        driver, pool = str(body.get("driver")), str((body.get("pool") or {}).get("name"))
        node = str(body.get("nodeName") or pool)
        for counter_set in body.get("sharedCounters") or []:
            totals[(driver, pool, str(counter_set.get("name")))] = counter_values(counter_set)
        for device in body.get("devices") or []:
            devices[(driver, pool, str(device.get("name")))] = (node, device)
    held = {
        (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for claim in claims
        for r in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        )
        or []
    }
    used: dict[Key, dict[str, Decimal]] = {}
    for driver, pool, name in held & devices.keys():
        for counter_set, values in _consumes(devices[(driver, pool, name)][1]):
            sums = used.setdefault((driver, pool, counter_set), {})
            for counter, value in values.items():
                sums[counter] = sums.get(counter, Decimal(0)) + value
    found: dict[str, tuple[int, int]] = {}
    for key, (node, device) in devices.items():
        driver, pool, _ = key
        if not _wanted(gpus, device, driver, spec):
            continue
        room = key not in held and all(
            used.get((driver, pool, s), {}).get(c, Decimal(0)) + v
            <= totals.get((driver, pool, s), {}).get(c, Decimal(0))
            for s, values in _consumes(device)
            for c, v in values.items()
        )
        free, every = found.get(node, (0, 0))
        found[node] = (free + room, every + 1)
    return found


def _consumes(device: Obj) -> list[tuple[str, dict[str, Decimal]]]:
    return [
        (str(c.get("counterSet")), counter_values(c)) for c in device.get("consumesCounters") or []
    ]


def _wanted(gpus: GpuRequest, device: Obj, driver: str, spec: ComputeSpec | None) -> bool:
    if model_of(gpus, device, driver) is None:
        return False
    if spec is None:
        return True
    if partition_of(gpus, device, driver) != spec.gpu_partition:
        return False
    model = model_of(gpus, device, driver)
    if spec.gpu_type and model != spec.gpu_type.lower():
        return False
    memory = memory_of(gpus, device, driver)
    return not spec.gpu_memory_bytes or (memory is not None and memory >= spec.gpu_memory_bytes)


def free_note(spec: ComputeSpec, free: Mapping[str, tuple[int, int]], partial: str = "") -> str:
    """What `free_devices` found, as the end of a Pending note.

    Example:
        >>> from k8s_ai_orchestrator.spec import resolve_spec
        >>> free_note(resolve_spec({"gpu": 2, "gpu_type": "h100"}), {"n1": (1, 4), "n2": (0, 4)})
        'free now: n1 1 of 4, n2 0 of 4 devices of model h100'
    """
    what = f"{spec.gpu_partition} partitions" if spec.gpu_partition else "devices"
    if spec.gpu_type:
        what += f" of model {spec.gpu_type.lower()}"
    if not free:
        return f"free now: no node has {what}{partial}"
    nodes = ", ".join(f"{node} {n} of {every}" for node, (n, every) in sorted(free.items()))
    return f"free now: {nodes} {what}{partial}"


class FreeDevices:
    """Reads which devices are free for a waiting step, at most once per `interval_s` per
    step (its last note is kept in between)."""

    def __init__(self, interval_s: float, clock: Callable[[], float]) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._notes: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def note(
        self, key: str, spec: ComputeSpec, gpus: GpuRequest, api_client: ApiClient, namespace: str
    ) -> str | None:
        """The step's free-device note, read when due; None when nothing could be read."""
        now = self._clock()
        with self._lock:
            last = self._notes.get(key)
        if last is not None and now - last[0] < self._interval_s:
            return last[1]
        custom = CustomObjectsApi(api_client)
        partial = ""
        try:
            slices = custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
            try:
                claims = custom.list_cluster_custom_object(GROUP, VERSION, "resourceclaims")
            except ApiException as error:
                if error.status not in (401, 403):
                    raise
                claims = custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, "resourceclaims"
                )
                partial = f" (only the claims of namespace '{namespace}' are visible)"
        except ApiException:
            return last[1] if last is not None else None
        text = free_note(spec, free_devices(gpus, slices, claims.get("items") or [], spec), partial)
        with self._lock:
            self._notes[key] = (now, text)
        return text

    def forget(self, key: str) -> None:
        with self._lock:
            self._notes.pop(key, None)


def waits_for_devices(message: str) -> bool:
    """Whether a Pending message is the scheduler's word that claims wait for devices."""
    return CANNOT_ALLOCATE in message


__all__ = ["FreeDevices", "free_devices", "free_note", "waits_for_devices"]
