"""What the cluster's DRA devices offer, and what a step's claims were given.

Read from ResourceSlices (`resource.k8s.io/v1`), the objects a DRA driver publishes: each
device with its attributes (the model, a partition's profile) and, for partitionable devices,
the counters it consumes from its GPU's shared counter set.

- `pool_offer` / `offer_problem`: pre-flight. Devices per node and model, of one kind (whole
  GPUs: no `partition_attribute`; or partitions of one profile) and, for a step with a
  `gpu_memory`, with at least that `memory_capacity`; and why no placement could ever
  satisfy a step's claims. DeviceClass selectors are CEL that only the scheduler
  evaluates; the count here reads the model and partition attributes alone. For partitions it
  is an upper bound: partitions that share a GPU's counters are counted as if each could be
  allocated, which holds for the placements of one profile as drivers publish them.
- `allocated_gpus` / `read_allocated_gpus`: usage. A whole GPU counts one; a partition counts
  its share of its GPU: the largest fraction of any shared counter it consumes (a `1g.10gb`
  partition consuming 10Gi of an 80Gi GPU's memory and 16 of its 132 multiprocessors counts
  0.125).

Example:
    >>> from k8s_ai_orchestrator.backends.kubernetes.dra import GpuRequest
    >>> gpus = GpuRequest(request="dra", device_class="gpu.nvidia.com")
    >>> whole = {"attributes": {"productName": {"string": "NVIDIA H100"}}}
    >>> mig = {"attributes": {"productName": {"string": "NVIDIA H100"},
    ...                       "profile": {"string": "1g.10gb"}}}
    >>> slices = [{"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
    ...                     "devices": [whole, mig, mig]}}]
    >>> pool_offer(gpus, slices), pool_offer(gpus, slices, "1g.10gb")
    ({'n1': {'nvidia-h100': 1}}, {'n1': {'nvidia-h100': 2}})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from ...spec import ComputeSpec, format_memory
from .dra import CLAIM, GROUP, VERSION, GpuRequest, split_attribute

Obj = Mapping[str, Any]
Device = tuple[str, str, str]  # (driver, pool, device name) of an allocated device


def _attribute(device: Obj, qualified: str, driver: str) -> str | None:
    """The string value of a device attribute, fully qualified or (the driver's own domain)
    unqualified, as the scheduler's CEL sees it."""
    domain, name = split_attribute(qualified)
    attributes = device.get("attributes") or {}
    value = (attributes.get(qualified) or {}).get("string")
    if value is None and driver == domain:
        value = (attributes.get(name) or {}).get("string")
    return None if value is None else str(value)


def model_of(gpus: GpuRequest, device: Obj, driver: str) -> str | None:
    """The label-style model of a ResourceSlice device (as `model_selector` compares it)."""
    value = _attribute(device, gpus.model_attribute, driver)
    return None if value is None else value.lower().replace(" ", "-")


def partition_of(gpus: GpuRequest, device: Obj, driver: str) -> str | None:
    """The partition profile of a device, None for a whole GPU."""
    return _attribute(device, gpus.partition_attribute, driver)


def memory_of(gpus: GpuRequest, device: Obj, driver: str) -> int | None:
    """The device's `memory_capacity` in bytes, None when it publishes none."""
    domain, name = split_attribute(gpus.memory_capacity)
    capacity = device.get("capacity") or {}
    found = capacity.get(gpus.memory_capacity) or (capacity.get(name) if driver == domain else None)
    value = (found or {}).get("value")
    return None if value is None else int(parse_quantity(value))


def pool_offer(
    gpus: GpuRequest,
    slices: Iterable[Obj],
    partition: str | None = None,
    least_memory: int | None = None,
) -> dict[str, dict[str, int]]:
    """Devices per node (or pool) and model, from the ResourceSlices of the model's driver:
    whole GPUs, or with `partition` the partitions of that profile, each with at least
    `least_memory` bytes of memory when given (see the module)."""
    offer: dict[str, dict[str, int]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        where = spec.get("nodeName") or (spec.get("pool") or {}).get("name", "?")
        driver = str(spec.get("driver"))
        for device in spec.get("devices") or []:
            model = model_of(gpus, device, driver)
            if model is None or partition_of(gpus, device, driver) != partition:
                continue
            memory = memory_of(gpus, device, driver)
            if least_memory is None or (memory is not None and memory >= least_memory):
                models = offer.setdefault(where, {})
                models[model] = models.get(model, 0) + 1
    return offer


def partitions_offered(gpus: GpuRequest, slices: Iterable[Obj]) -> list[str]:
    """Every partition profile the slices' devices carry, sorted (for a refusal's text)."""
    found = set()
    for item in slices:
        spec = item.get("spec") or {}
        for device in spec.get("devices") or []:
            profile = partition_of(gpus, device, str(spec.get("driver")))
            if profile is not None:
                found.add(profile)
    return sorted(found)


def offer_problem(spec: ComputeSpec, offer: Mapping[str, Mapping[str, int]]) -> str | None:
    """Why no placement's devices could ever satisfy the step's claims, or None (pre-flight):
    each of its `nodes` pods (a gang's rank pods, on nodes of their own) claims `gpu` devices
    (or partitions) on its node, so that many nodes must each offer that many of the model.

    Example:
        >>> from k8s_ai_orchestrator.spec import resolve_spec
        >>> offer_problem(resolve_spec({"gpu": 1, "gpu_type": "b200"}), {"n1": {"h100": 4}})
        'no device of model b200 (the pool offers n1: 4 × h100)'
        >>> gang = resolve_spec({"gpu": 2, "nodes": 2})
        >>> offer_problem(gang, {"n1": {"h100": 4}}).split(" (the pool")[0]
        '2 devices on each of 2 nodes (one claim per rank pod), and only 1 node offers that'
        >>> offer_problem(resolve_spec({"gpu": 1, "gpu_partition": "2g.20gb"}), {})
        'no 2g.20gb partition (the pool offers no such partitions)'
    """
    wanted = spec.gpu_type.lower() if spec.gpu_type else None
    counts = {
        node: sum(n for model, n in models.items() if wanted in (None, model))
        for node, models in offer.items()
    }
    most = max(counts.values(), default=0)
    enough = sum(1 for n in counts.values() if n >= spec.gpu)
    if enough >= spec.nodes:
        return None
    pool = "; ".join(
        f"{node}: " + ", ".join(f"{n} × {model}" for model, n in sorted(models.items()))
        for node, models in sorted(offer.items())
    )
    what = f"{spec.gpu_partition} partition" if spec.gpu_partition else "device"
    nothing = "no such partitions" if spec.gpu_partition else "no devices"
    of_model = f" of model {wanted}" if wanted else ""
    if spec.gpu_memory_bytes:
        of_model += f" with at least {format_memory(spec.gpu_memory_bytes)} of memory"
    if most == 0:
        return f"no {what}{of_model} (the pool offers {pool or nothing})"
    if most < spec.gpu:
        return (
            f"{spec.gpu} {what}s{of_model} on one node, and no node has more than {most} (the "
            f"pool offers {pool})"
        )
    return (
        f"{spec.gpu} {what}s{of_model} on each of {spec.nodes} nodes (one claim per rank pod), "
        f"and only {enough} node{'s offer' if enough != 1 else ' offers'} that (the pool "
        f"offers {pool})"
    )


# The kube-scheduler's words for a pod whose claims no node's free devices satisfy, and what
# it does not do about it (v1.37: its DynamicResources plugin takes no part in preemption).
CANNOT_ALLOCATE = "cannot allocate all claims"
NO_DEVICE_PREEMPTION = (
    "Kubernetes does not preempt pods to free DRA devices: lower-priority steps holding "
    "matching devices keep them until they end"
)


def with_device_note(message: str) -> str:
    """The scheduler's Pending message, with what it leaves unsaid when claims wait.

    Example:
        >>> with_device_note("0/2 nodes are available: 2 cannot allocate all claims.")
        ... # doctest: +ELLIPSIS
        '0/2 nodes are available: 2 cannot allocate all claims. (Kubernetes does not ...)'
        >>> with_device_note("0/2 nodes are available: 2 Insufficient cpu.")
        '0/2 nodes are available: 2 Insufficient cpu.'
    """
    if CANNOT_ALLOCATE not in message or NO_DEVICE_PREEMPTION in message:
        return message
    return f"{message} ({NO_DEVICE_PREEMPTION})"


def allocated(claim: Obj) -> list[Device]:
    """The devices the claim's allocation (`status.allocation.devices.results`) holds for
    the step's request (another request's devices are not the step's GPUs)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [
        (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for r in results
        if r.get("request") == CLAIM
    ]


def device_shares(slices: Iterable[Obj]) -> dict[Device, float]:
    """The share of its GPU each partitionable device takes: the largest fraction of any
    counter it consumes from its pool's shared counter sets. Devices that consume no
    counters are absent (a whole GPU counts one).

    Example:
        >>> counters = {"spec": {"driver": "d", "pool": {"name": "n1"}, "sharedCounters": [
        ...     {"name": "gpu-0", "counters": {"memory": {"value": "80Gi"},
        ...                                    "multiprocessors": {"value": "132"}}}]}}
        >>> mig = {"name": "gpu-0-mig-1", "consumesCounters": [{"counterSet": "gpu-0",
        ...        "counters": {"memory": {"value": "10Gi"}, "multiprocessors": {"value": "16"}}}]}
        >>> devices = {"spec": {"driver": "d", "pool": {"name": "n1"}, "devices": [mig]}}
        >>> device_shares([counters, devices])
        {('d', 'n1', 'gpu-0-mig-1'): 0.125}
    """
    items = list(slices)
    totals: dict[tuple[str, str, str], dict[str, Decimal]] = {}
    for item in items:
        spec = item.get("spec") or {}
        pool = (str(spec.get("driver")), str((spec.get("pool") or {}).get("name")))
        for counter_set in spec.get("sharedCounters") or []:
            totals[(*pool, str(counter_set.get("name")))] = counter_values(counter_set)
    shares: dict[Device, float] = {}
    for item in items:
        spec = item.get("spec") or {}
        pool = (str(spec.get("driver")), str((spec.get("pool") or {}).get("name")))
        for device in spec.get("devices") or []:
            fractions = [
                float(used / total[name])
                for consumed in device.get("consumesCounters") or []
                if (total := totals.get((*pool, str(consumed.get("counterSet"))))) is not None
                for name, used in counter_values(consumed).items()
                if total.get(name)
            ]
            if fractions:
                shares[(*pool, str(device.get("name")))] = min(1.0, max(fractions))
    return shares


def counter_values(counters: Obj) -> dict[str, Decimal]:
    """A counter set's (or a consumption's) counters as numbers."""
    return {
        str(name): Decimal(parse_quantity((value or {}).get("value", "0")))
        for name, value in (counters.get("counters") or {}).items()
    }


def allocated_gpus(claim: Obj, shares: Mapping[Device, float]) -> float:
    """The GPUs the claim was given: each whole device one, each partition its share.

    Example:
        >>> claim = {"status": {"allocation": {"devices": {"results": [
        ...     {"request": "gpus", "driver": "d", "pool": "n1", "device": "gpu-0"},
        ...     {"request": "gpus", "driver": "d", "pool": "n1", "device": "gpu-1-mig-0"}]}}}}
        >>> allocated_gpus(claim, {("d", "n1", "gpu-1-mig-0"): 0.125})
        1.125
    """
    return sum(shares.get(device, 1.0) for device in allocated(claim))


def pod_claim(pod: Obj) -> str | None:
    """The name of the ResourceClaim made for the pod's `gpus` claim (its status says), or
    None while the resource-claim controller has not made it."""
    for made in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if made.get("name") == CLAIM and made.get("resourceClaimName"):
            return str(made["resourceClaimName"])
    return None


def read_allocated_gpus(
    api_client: ApiClient, namespace: str, pods: list[Obj], partitions: bool
) -> float | None:
    """The GPUs allocated to the running pods' claims together (a gang: one claim per rank
    pod), read once when the attempt starts (a claim goes with its pod); with `partitions`,
    each partition by its share (the ResourceSlices read once more). None when a claim is
    not named yet or cannot be read, or the slices cannot be: usage then counts the GPUs
    the step asked for."""
    custom = CustomObjectsApi(api_client)
    claims = []
    for pod in pods:
        name = pod_claim(pod)
        if name is None:
            return None
        try:
            claims.append(
                custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, "resourceclaims", name
                )
            )
        except ApiException:
            return None
    shares: dict[Device, float] = {}
    if partitions:
        try:
            slices = custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices")
        except ApiException:
            return None
        shares = device_shares(slices.get("items") or [])
    return sum(allocated_gpus(claim, shares) for claim in claims)


__all__ = [
    "CANNOT_ALLOCATE",
    "NO_DEVICE_PREEMPTION",
    "allocated",
    "allocated_gpus",
    "counter_values",
    "device_shares",
    "memory_of",
    "model_of",
    "offer_problem",
    "partition_of",
    "partitions_offered",
    "pod_claim",
    "pool_offer",
    "read_allocated_gpus",
    "with_device_note",
]
