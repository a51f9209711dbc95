"""Compute specs: what a step needs, validated and normalised. Pure: no I/O, no Dagster.

A `ComputeSpec` is what every backend receives. It is built from a size class (a row of the
size table) with explicit fields laid over it.

Example:
    >>> spec = resolve_spec({"size": "xs", "memory": "4Gi"})
    >>> spec.cpu, spec.memory_bytes
    (1.0, 4294967296)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils import parse_quantity

from .errors import ComputeSpecError

GiB = 1024**3
MiB = 1024**2

BACKENDS = ("local", "kubernetes", "slurm")

# Field names a spec understands (the keys of `compute(...)` and of size-table rows).
SPEC_FIELDS = (
    "size",
    "cpu",
    "memory",
    "gpu",
    "gpu_type",
    "nodes",
    "tasks_per_node",
    "gpus_per_node",
    "preemptible",
    "backend",
    "tenant",
    "timeout",
)


@dataclass(frozen=True)
class SizeClass:
    """One row of the size table."""

    cpu: float  # CPU cores requested (fractions allowed)
    memory: str  # memory request and limit, Kubernetes quantity ("2Gi")
    gpu: int = 0  # GPUs per node


DEFAULT_SIZE_CLASSES: dict[str, SizeClass] = {
    "xs": SizeClass(cpu=1, memory="2Gi"),
    "s": SizeClass(cpu=4, memory="16Gi"),
    "m": SizeClass(cpu=8, memory="32Gi"),
    "l": SizeClass(cpu=32, memory="128Gi"),
    "xl": SizeClass(cpu=72, memory="450Gi"),
    "gpu-1": SizeClass(cpu=8, memory="48Gi", gpu=1),
    "gpu-8": SizeClass(cpu=64, memory="400Gi", gpu=8),
}

DEFAULT_SIZE = "xs"


@dataclass(frozen=True)
class ComputeSpec:
    """The resolved resources of one step.

    Example:
        >>> ComputeSpec(cpu=2, memory_bytes=4 * GiB).describe()
        '2 CPU / 4Gi'
    """

    cpu: float  # CPU cores per task
    memory_bytes: int  # memory per node (request == limit)
    gpu: int = 0  # GPUs per node
    gpu_type: str | None = None  # e.g. "nvidia-h100-80gb"; None = any
    nodes: int = 1  # >1 means a multi-node gang (Slurm)
    tasks_per_node: int = 1  # ranks per node for gang steps
    preemptible: bool = False  # may run on preemptible capacity; resumes from checkpoint
    backend: str | None = None  # None = executor default
    tenant: str | None = None  # None = executor default_tenant
    timeout_s: float | None = None  # max seconds Pending before the step fails
    size: str | None = None  # size class the spec started from, for display

    @property
    def is_gang(self) -> bool:
        return self.nodes > 1

    @property
    def total_cpu(self) -> float:
        return self.cpu * self.tasks_per_node * self.nodes

    @property
    def memory_quantity(self) -> str:
        return format_memory(self.memory_bytes)

    def with_memory(self, memory_bytes: int) -> ComputeSpec:
        return replace(self, memory_bytes=memory_bytes)

    def describe(self) -> str:
        parts = [f"{_fmt_number(self.cpu)} CPU", self.memory_quantity]
        if self.gpu:
            parts.append(f"{self.gpu} GPU" + (f" ({self.gpu_type})" if self.gpu_type else ""))
        text = " / ".join(parts)
        if self.nodes > 1:
            text = f"{self.nodes} nodes × {self.tasks_per_node} tasks × ({text})"
        return f"{self.size}: {text}" if self.size else text


def _fmt_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def format_memory(num_bytes: int) -> str:
    """Format bytes as the largest exact binary Kubernetes quantity ("450Gi", "300Mi")."""
    for suffix, unit in (("Ti", 1024**4), ("Gi", GiB), ("Mi", MiB), ("Ki", 1024)):
        if num_bytes >= unit and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)


def _error(field: str, value: Any, allowed: str, step: str | None = None) -> ComputeSpecError:
    where = f"step '{step}': " if step else ""
    return ComputeSpecError(f"{where}{field}={value!r} is not allowed: {allowed}")


def parse_cpu(value: Any, step: str | None = None, field: str = "cpu") -> float:
    allowed = f'{field} must be a number > 0 (e.g. 1, 0.5, "500m")'
    if isinstance(value, bool):
        raise _error(field, value, allowed, step)
    try:
        number = float(parse_quantity(value))
    except (ValueError, TypeError, InvalidOperation):
        raise _error(field, value, allowed, step) from None
    if not math.isfinite(number) or number <= 0:
        raise _error(field, value, allowed, step)
    return number


_DECIMAL_BYTE_SUFFIX = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPE])B\s*$", re.IGNORECASE)


def parse_memory(value: Any, step: str | None = None, field: str = "memory") -> int:
    allowed = f'{field} must be a Kubernetes quantity > 0 such as "2Gi", "512Mi" or "2G"'
    if isinstance(value, bool):
        raise _error(field, value, allowed, step)
    if isinstance(value, str):
        match = _DECIMAL_BYTE_SUFFIX.match(value)
        if match:
            number, unit = match.groups()
            hint = f'did you mean "{number}{unit.upper()}i" (binary) or "{number}{unit.upper()}"'
            raise _error(field, value, f"{allowed}; {hint} (decimal)?", step)
    try:
        number = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        raise _error(field, value, allowed, step) from None
    if number <= 0:
        raise _error(field, value, allowed, step)
    return int(number.to_integral_value(rounding="ROUND_CEILING"))


def parse_count(value: Any, field: str, *, minimum: int, step: str | None = None) -> int:
    allowed = f"{field} must be a whole number >= {minimum}"
    if isinstance(value, bool):
        raise _error(field, value, allowed, step)
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise _error(field, value, allowed, step) from None
    if not number.is_finite() or number != number.to_integral_value() or number < minimum:
        raise _error(field, value, allowed, step)
    return int(number)


def parse_bool(value: Any, field: str, step: str | None = None) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise _error(field, value, f"{field} must be True or False", step)


def parse_name(value: Any, field: str, step: str | None = None) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value):
        raise _error(
            field,
            value,
            f"{field} must be a non-empty lowercase DNS label (letters, digits, '-')",
            step,
        )
    return value


def parse_size_table(raw: Mapping[str, Mapping[str, Any]] | None) -> dict[str, SizeClass]:
    """Merge user size-class overrides (executor config) over the defaults."""
    table = dict(DEFAULT_SIZE_CLASSES)
    for name, row in (raw or {}).items():
        base = table.get(name)
        unknown = set(row) - {"cpu", "memory", "gpu"}
        if unknown:
            raise ComputeSpecError(
                f"size class '{name}': unknown keys {sorted(unknown)}; allowed: cpu, memory, gpu"
            )
        if base is None and not {"cpu", "memory"} <= set(row):
            raise ComputeSpecError(f"new size class '{name}' needs both cpu and memory")
        cpu = parse_cpu(row["cpu"], field=f"size_classes.{name}.cpu") if "cpu" in row else None
        if "memory" in row:
            memory = format_memory(parse_memory(row["memory"], field=f"size_classes.{name}.memory"))
        else:
            memory = None
        gpu = (
            parse_count(row["gpu"], f"size_classes.{name}.gpu", minimum=0) if "gpu" in row else None
        )
        table[name] = SizeClass(
            cpu=cpu if cpu is not None else base.cpu,  # type: ignore[union-attr]
            memory=memory if memory is not None else base.memory,  # type: ignore[union-attr]
            gpu=gpu if gpu is not None else (base.gpu if base else 0),
        )
    return table


def check_size_name(size: Any, table: Mapping[str, SizeClass], step: str | None = None) -> str:
    if not isinstance(size, str) or size not in table:
        raise _error("size", size, f"valid size classes are {', '.join(table)}", step)
    return size


def resolve_spec(
    fields: Mapping[str, Any],
    table: Mapping[str, SizeClass] | None = None,
    *,
    step: str | None = None,
) -> ComputeSpec:
    """Build a validated `ComputeSpec` from raw fields (tag values or `compute()` arguments).

    Explicit fields override the size class's. Raises `ComputeSpecError` naming the step,
    the field, the value and what is allowed.
    """
    table = table if table is not None else DEFAULT_SIZE_CLASSES
    unknown = set(fields) - set(SPEC_FIELDS)
    if unknown:
        where = f"step '{step}': " if step else ""
        raise ComputeSpecError(
            f"{where}unknown compute field(s) {sorted(unknown)}; allowed: {', '.join(SPEC_FIELDS)}"
        )
    explicit_size = fields.get("size")
    size = check_size_name(explicit_size, table, step) if explicit_size is not None else None
    row = table[size or DEFAULT_SIZE]

    def get(name: str, default: Any) -> Any:
        value = fields.get(name)
        return default if value is None else value

    nodes = parse_count(get("nodes", 1), "nodes", minimum=1, step=step)
    gpus_per_node = fields.get("gpus_per_node")
    gpu_field = fields.get("gpu")
    if gpus_per_node is not None and gpu_field is not None:
        raise _error("gpus_per_node", gpus_per_node, "give either gpu or gpus_per_node", step)
    gpu = parse_count(get("gpu", get("gpus_per_node", row.gpu)), "gpu", minimum=0, step=step)
    backend = fields.get("backend")
    if backend is not None and backend not in BACKENDS:
        raise _error("backend", backend, f"backend must be one of {', '.join(BACKENDS)}", step)
    tenant = fields.get("tenant")
    timeout = fields.get("timeout")
    gpu_type = fields.get("gpu_type")
    if gpu_type is not None and (not isinstance(gpu_type, str) or not gpu_type.strip()):
        raise _error("gpu_type", gpu_type, "gpu_type must be a non-empty string", step)
    return ComputeSpec(
        cpu=parse_cpu(get("cpu", row.cpu), step),
        memory_bytes=parse_memory(get("memory", row.memory), step),
        gpu=gpu,
        gpu_type=gpu_type,
        nodes=nodes,
        tasks_per_node=parse_count(
            get("tasks_per_node", 1), "tasks_per_node", minimum=1, step=step
        ),
        preemptible=parse_bool(get("preemptible", False), "preemptible", step),
        backend=backend,
        tenant=parse_name(tenant, "tenant", step) if tenant is not None else None,
        timeout_s=(
            float(parse_cpu(timeout, step, field="timeout")) if timeout is not None else None
        ),
        size=size,
    )
