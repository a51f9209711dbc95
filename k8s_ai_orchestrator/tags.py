"""`compute(...)`: declare a step's size as op tags; and op tags → `ComputeSpec`.

Example:
    >>> compute("m", memory="64Gi")
    {'k8s_ai/size': 'm', 'k8s_ai/memory': '64Gi'}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .spec import DEFAULT_SIZE_CLASSES, SPEC_FIELDS, ComputeSpec, SizeClass, resolve_spec

TAG_PREFIX = "k8s_ai/"


def _tag_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def compute(
    size: str | None = None,
    *,
    cpu: float | str | None = None,
    memory: str | None = None,
    cpu_default: float | str | None = None,
    memory_default: str | None = None,
    gpu: int | None = None,
    gpu_type: str | None = None,
    gpu_partition: str | None = None,
    gpu_memory: str | None = None,
    nodes: int | None = None,
    tasks_per_node: int | None = None,
    gpus_per_node: int | None = None,
    preemptible: bool | None = None,
    backend: str | None = None,
    tenant: str | None = None,
    timeout: float | str | None = None,
) -> dict[str, str]:
    """Op tags declaring what a step needs. Validated now; resolved again at launch.

    Args:
        size: a size class: xs (1 CPU/2Gi), s, m, l, xl (72 CPU/450Gi), gpu-1, gpu-8.
        cpu: CPU cores (per task for multi-node steps): 4, 0.5 or "500m"; or "auto": sized
            at launch from the peak CPU of the step's earlier runs (see sizing-steps.md).
        memory: memory request and limit (per node), a number with a unit, at least 1Mi:
            "16Gi", "512Mi", "2G". A bare number (bytes) is refused. Or "auto": sized at
            launch from the peak memory of the step's earlier runs, with headroom.
        cpu_default: with cpu="auto" and no size class, the CPU of the first run.
        memory_default: with memory="auto" and no size class, the memory of the first run
            (without it, the xs class's). With a size class, the class's value is the first
            run's and the most "auto" ever asks for.
        gpu: GPUs (per node).
        gpu_type: GPU model to select nodes by (the executor maps it to node labels).
        gpu_partition: a partition profile ("1g.10gb"): ``gpu`` partitions of a GPU instead
            of whole GPUs (Kubernetes with ``gpus.request: dra``; see gpus-with-dra.md).
        gpu_memory: the least memory each GPU (or partition) must have: "40Gi" (Kubernetes
            with ``gpus.request: dra``).
        nodes: nodes for a multi-node gang step (> 1 runs on Slurm).
        tasks_per_node: ranks per node for gang steps.
        gpus_per_node: GPUs per node for gang steps (same as ``gpu``).
        preemptible: may run on preemptible capacity (low priority); resumes from checkpoint.
        backend: force "local", "kubernetes" or "slurm" for this step.
        tenant: the vCluster tenant to run in (must be in the run's allowed tenants).
        timeout: how long the step may stay Pending before it fails with the last reason:
            seconds (1800) or "30s", "30min", "2h", "1d" ("m" is refused: minutes or milli?).

    Returns:
        A dict of ``k8s_ai/...`` op tags.

    Raises:
        ComputeSpecError: a field has a bad value; the message names field, value and
            what is allowed.

    Example:
        >>> compute(cpu=4, memory="16Gi")
        {'k8s_ai/cpu': '4', 'k8s_ai/memory': '16Gi'}
        >>> compute(memory="auto", memory_default="4Gi")
        {'k8s_ai/memory': 'auto', 'k8s_ai/memory_default': '4Gi'}
    """
    fields = {
        "size": size,
        "cpu": cpu,
        "memory": memory,
        "cpu_default": cpu_default,
        "memory_default": memory_default,
        "gpu": gpu,
        "gpu_type": gpu_type,
        "gpu_partition": gpu_partition,
        "gpu_memory": gpu_memory,
        "nodes": nodes,
        "tasks_per_node": tasks_per_node,
        "gpus_per_node": gpus_per_node,
        "preemptible": preemptible,
        "backend": backend,
        "tenant": tenant,
        "timeout": timeout,
    }
    given = {name: value for name, value in fields.items() if value is not None}
    resolve_spec(given, DEFAULT_SIZE_CLASSES)
    return {TAG_PREFIX + name: _tag_value(value) for name, value in given.items()}


def spec_fields_from_tags(tags: Mapping[str, str]) -> dict[str, Any]:
    """The raw `k8s_ai/*` fields of a step's tags (unknown `k8s_ai/` keys are kept, to fail)."""
    return {
        key[len(TAG_PREFIX) :]: value
        for key, value in tags.items()
        if isinstance(key, str) and key.startswith(TAG_PREFIX)
    }


def spec_from_tags(
    tags: Mapping[str, str],
    table: Mapping[str, SizeClass] | None = None,
    *,
    step: str | None = None,
) -> ComputeSpec:
    """Resolve a step's op tags (possibly hand-written) into a validated `ComputeSpec`.

    Hand-written tags follow the rules of `compute()`; errors name the step.

    Example:
        >>> spec_from_tags({"k8s_ai/cpu": "500m", "k8s_ai/timeout": "30min"}).timeout_s
        1800.0
    """
    return resolve_spec(spec_fields_from_tags(tags), table, step=step)


__all__ = ["TAG_PREFIX", "SPEC_FIELDS", "compute", "spec_from_tags"]
