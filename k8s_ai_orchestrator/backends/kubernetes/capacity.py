"""Room on a tenant's nodes and in its ResourceQuotas: the one home of that arithmetic.

Pre-flight (`preflight.py`) asks whether a step can *ever* fit (a node's allocatable, a
quota's hard limit); the gang guard (`admission/guard.py`) asks whether a whole gang fits
*now* (allocatable minus what the node's pods request, a quota's hard minus its used). Both
read the same things the same way, here, as pure functions over what the API server returns:

- node `status.allocatable`, container `resources.requests`: `cpu`, `memory`,
  `nvidia.com/gpu` (`resources`);
- ResourceQuota `status.hard` (else `spec.hard`) and `status.used`, compared on the keys of
  `QUOTA_KEYS` (`quota_lines`);
- pods' `spec.nodeName`, `status.phase` and `spec.priorityClassName` (`gang_room`).

Example:
    >>> needs = {"cpu": Decimal(4), "memory": Decimal(2**30), "gpu": Decimal(0)}
    >>> fits(resources({"cpu": "8", "memory": "16Gi"}), needs)
    True
    >>> [line.short for line in quota_lines("q", {"requests.cpu": "6"},
    ...     {"requests.cpu": "3"}, needs)]
    [True]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from ...spec import ComputeSpec, format_memory

GPU_RESOURCE = "nvidia.com/gpu"  # the device plugin's resource name
Needs = Mapping[str, Decimal]  # resource kind (cpu, memory, gpu) → amount

# Quota keys compared with the step's requests, and the kind each one limits.
QUOTA_KEYS = {
    "requests.cpu": "cpu",
    "cpu": "cpu",
    "requests.memory": "memory",
    "memory": "memory",
    "limits.memory": "memory",
    f"requests.{GPU_RESOURCE}": "gpu",
}


def resources(values: Mapping[str, str]) -> dict[str, Decimal]:
    """cpu, memory and GPUs of a resource list (node allocatable, container requests).

    Example:
        >>> resources({"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "2"})["cpu"]
        Decimal('0.500')
    """
    return {
        "cpu": parse_quantity(values.get("cpu", "0")),
        "memory": parse_quantity(values.get("memory", "0")),
        "gpu": parse_quantity(values.get(GPU_RESOURCE, "0")),
    }


def step_needs(spec: ComputeSpec) -> dict[str, Decimal]:
    """What one pod of the step requests, by resource kind (a gang's pod: one node's ranks).

    Example:
        >>> from k8s_ai_orchestrator.spec import resolve_spec
        >>> step_needs(resolve_spec({"cpu": 2, "memory": "1Gi", "nodes": 2,
        ...     "tasks_per_node": 2}))["cpu"]
        Decimal('4.0')
    """
    return {
        "cpu": Decimal(str(spec.cpu)) * spec.tasks_per_node,
        "memory": Decimal(spec.memory_bytes),
        "gpu": Decimal(spec.gpu),
    }


def gang_needs(spec: ComputeSpec) -> dict[str, Decimal]:
    """What all the step's pods request together (what a quota must hold)."""
    return {kind: value * spec.nodes for kind, value in step_needs(spec).items()}


def fits(free: Needs, needs: Needs) -> bool:
    """Whether `needs` fits in `free`, kind by kind.

    Example:
        >>> fits({"cpu": Decimal(2)}, {"cpu": Decimal(3)})
        False
    """
    return all(free[kind] >= needs[kind] for kind in needs)


def show(kind: str, value: Decimal) -> str:
    """A resource amount as a person reads it: memory in Gi/Mi, the rest as a number.

    Example:
        >>> show("memory", Decimal(2**31)), show("cpu", Decimal("4.0"))
        ('2Gi', '4')
    """
    if kind == "memory":
        return format_memory(int(value))
    return f"{value.normalize():f}"


@dataclass(frozen=True)
class QuotaLine:
    """One key of one ResourceQuota that the step asks for, against the step's needs."""

    quota: str  # the ResourceQuota's name
    key: str  # its key (requests.cpu, limits.memory, ...)
    kind: str  # the resource kind the key limits
    hard_text: str  # the hard limit as the quota writes it
    hard: Decimal
    left: Decimal  # hard minus used, right now
    needs: Decimal  # what the step asks for of that kind

    @property
    def never_fits(self) -> bool:
        """More than the quota ever allows."""
        return self.needs > self.hard

    @property
    def short(self) -> bool:
        """More than the quota has left right now."""
        return self.needs > self.left


def quota_lines(
    quota: str, hard: Mapping[str, str], used: Mapping[str, str], needs: Needs
) -> list[QuotaLine]:
    """Each key of a quota's `hard` that limits a kind the step asks for (in `QUOTA_KEYS`
    order).

    Example:
        >>> line, = quota_lines("q", {"requests.memory": "4Gi"}, {"requests.memory": "3Gi"},
        ...     {"cpu": Decimal(1), "memory": Decimal(2 * 2**30), "gpu": Decimal(0)})
        >>> line.never_fits, line.short, show(line.kind, line.left)
        (False, True, '1Gi')
    """
    lines = []
    for key, kind in QUOTA_KEYS.items():
        if key not in hard or not needs[kind]:
            continue
        limit = parse_quantity(hard[key])
        left = limit - parse_quantity(used.get(key, "0"))
        lines.append(QuotaLine(quota, key, kind, hard[key], limit, left, needs[kind]))
    return lines


def quota_of(quota: Any) -> tuple[str, Mapping[str, str], Mapping[str, str]]:
    """A ResourceQuota (kubernetes-client model) as (name, hard, used)."""
    hard: Mapping[str, str] = (quota.status and quota.status.hard) or quota.spec.hard or {}
    used: Mapping[str, str] = (quota.status and quota.status.used) or {}
    return quota.metadata.name, hard, used


def schedulable(node: Any, node_labels: Mapping[str, str]) -> bool:
    """Whether pods may land on the node (kubernetes-client model): not cordoned, and with
    every label of `node_labels` (the nodeSelector of the pods counted)."""
    labels = node.metadata.labels or {}
    cordoned = bool(node.spec and node.spec.unschedulable)
    return not cordoned and all(labels.get(k) == v for k, v in node_labels.items())


@dataclass(frozen=True)
class GangRoom:
    """How many of a gang's pods fit on the tenant's nodes right now, and which nodes."""

    fits: int  # nodes with room for one pod now
    needed: int  # the gang's pods
    nodes: tuple[str, ...]  # those nodes

    @property
    def enough(self) -> bool:
        return self.fits >= self.needed

    def describe(self) -> str:
        where = f" ({', '.join(self.nodes)})" if self.nodes else ""
        return f"{self.fits} of the {self.needed} nodes it needs have room for one pod now{where}"


def gang_room(
    nodes: Iterable[Any],
    pods: Iterable[Any],
    needs: Needs,
    needed: int,
    *,
    node_labels: Mapping[str, str],
    reclaimable_class: str | None,
) -> GangRoom:
    """Nodes whose allocatable minus what their pods request fits one pod of the gang.

    `nodes` and `pods` are kubernetes-client models; pods of `reclaimable_class` (the
    preemptible PriorityClass, for a gang that may preempt them) count as free.
    """
    used: dict[str, dict[str, Decimal]] = {}
    for pod in pods:
        phase = pod.status.phase if pod.status else None
        node = pod.spec.node_name if pod.spec else None
        if not node or phase in ("Succeeded", "Failed"):
            continue
        if reclaimable_class and pod.spec.priority_class_name == reclaimable_class:
            continue
        total = used.setdefault(node, {kind: Decimal(0) for kind in needs})
        for kind, value in pod_requests(pod).items():
            total[kind] += value
    fitting = []
    for node in nodes:
        if not schedulable(node, node_labels):
            continue
        free = resources(node.status.allocatable or {})
        taken = used.get(node.metadata.name, {})
        left = {kind: free[kind] - taken.get(kind, Decimal(0)) for kind in needs}
        if fits(left, needs):
            fitting.append(node.metadata.name)
    return GangRoom(len(fitting), needed, tuple(sorted(fitting)))


def pod_requests(pod: Any) -> dict[str, Decimal]:
    """What a pod (kubernetes-client model) requests, summed over its containers."""
    total = {"cpu": Decimal(0), "memory": Decimal(0), "gpu": Decimal(0)}
    for container in pod.spec.containers or []:
        requests = (container.resources and container.resources.requests) or {}
        for kind, value in resources(requests).items():
            total[kind] += value
    return total


__all__ = [
    "QUOTA_KEYS",
    "GangRoom",
    "QuotaLine",
    "fits",
    "gang_needs",
    "gang_room",
    "pod_requests",
    "quota_lines",
    "quota_of",
    "resources",
    "schedulable",
    "show",
    "step_needs",
]
