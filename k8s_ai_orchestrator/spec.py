"""Compute specs: what a step needs, validated and normalised. Pure: no I/O, no Dagster.

A `ComputeSpec` is what every backend receives. It is built from a size class (a row of the
size table) with explicit fields laid over it.

Example:
    >>> spec = resolve_spec({"size": "xs", "memory": "4Gi"})
    >>> spec.cpu, spec.memory_bytes
    (1.0, 4294967296)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from .errors import ComputeSpecError
from .quantities import (
    MiB,
    field_error,
    parse_count,
    parse_cpu,
    parse_duration,
    parse_memory,
    show_value,
    whitespace_fix,
)

GiB = 1024**3

BACKENDS = ("local", "kubernetes", "slurm")

# Validated with `fullmatch`: with `match`/`$`, "a100\n" would pass and break an sbatch header.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")  # label value
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
# A GPU partition profile as drivers name them: "1g.10gb", "1g.10gb+me", "3g.40gb".
_PARTITION = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.+]{0,61}[A-Za-z0-9])?")

# Field names a spec understands (the keys of `compute(...)` and of size-table rows).
SPEC_FIELDS = (
    "size",
    "cpu",
    "memory",
    "cpu_default",
    "memory_default",
    "gpu",
    "gpu_type",
    "gpu_partition",
    "gpu_memory",
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
AUTO = "auto"  # cpu / memory sized at launch from the step's recorded use


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
    gpu_partition: str | None = None  # `gpu` partitions of this profile ("1g.10gb"), not GPUs
    gpu_memory_bytes: int | None = None  # each GPU (or partition) has at least this memory
    nodes: int = 1  # >1 means a multi-node gang (Slurm)
    tasks_per_node: int = 1  # ranks per node for gang steps
    preemptible: bool = False  # may run on preemptible capacity; resumes from checkpoint
    backend: str | None = None  # None = executor default
    tenant: str | None = None  # None = executor default_tenant
    timeout_s: float | None = None  # max seconds Pending before the step fails
    size: str | None = None  # size class the spec started from, for display
    cpu_auto: bool = False  # cpu="auto": `cpu` is the first run's; later runs size from history
    memory_auto: bool = False  # memory="auto": likewise for `memory_bytes`

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

    @property
    def is_auto(self) -> bool:
        """Whether the executor sizes CPU or memory from the step's history at launch."""
        return self.cpu_auto or self.memory_auto

    def describe(self) -> str:
        parts = [f"{_fmt_number(self.cpu)} CPU", self.memory_quantity]
        if self.gpu:
            kind = f"× {self.gpu_partition} GPU partition" if self.gpu_partition else "GPU"
            wanted = [self.gpu_type] if self.gpu_type else []
            if self.gpu_memory_bytes:
                wanted.append(f"≥ {format_memory(self.gpu_memory_bytes)} each")
            parts.append(f"{self.gpu} {kind}" + (f" ({', '.join(wanted)})" if wanted else ""))
        text = " / ".join(parts)
        if self.nodes > 1:
            text = f"{self.nodes} nodes × {self.tasks_per_node} tasks × ({text})"
        return f"{self.size}: {text}" if self.size else text


def _fmt_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


_BINARY_UNITS = (
    ("Ei", 1024**6),
    ("Pi", 1024**5),
    ("Ti", 1024**4),
    ("Gi", GiB),
    ("Mi", MiB),
    ("Ki", 1024),
)
_DECIMAL_UNITS = (
    ("E", 10**18),
    ("P", 10**15),
    ("T", 10**12),
    ("G", 10**9),
    ("M", 10**6),
    ("k", 1000),
)


def format_memory(num_bytes: int) -> str:
    """Bytes as the shortest exact Kubernetes quantity, binary when it is as short.

    Exact, so it is also what a Job requests: Kubernetes reads "1.5G" as 1500000000 bytes.
    Raw bytes only when no unit says them exactly in fewer characters.

    Example:
        >>> format_memory(450 * GiB), format_memory(1536 * MiB)
        ('450Gi', '1536Mi')
        >>> format_memory(1_500_000_000), format_memory(2 * 10**12)  # "1.5G", "2T"
        ('1.5G', '2T')
        >>> format_memory(1_000_000_001)
        '1000000001'
    """
    forms = [
        f"{num_bytes // unit}{suffix}"
        for suffix, unit in _BINARY_UNITS
        if num_bytes >= unit and num_bytes % unit == 0
    ][:1]
    forms += [
        f"{(Decimal(num_bytes) / unit).normalize():f}{suffix}"
        for suffix, unit in _DECIMAL_UNITS
        if num_bytes >= unit
    ][:1]
    return min([*forms, str(num_bytes)], key=len)


def parse_bool(value: Any, field: str, step: str | None = None) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    allowed = f'{field} must be True or False (in op tags: "true" or "false")'
    raise field_error(field, value, allowed, step)


def parse_name(value: Any, field: str, step: str | None = None) -> str:
    if not isinstance(value, str) or not _DNS_LABEL.fullmatch(value):
        allowed = f"{field} must be a non-empty lowercase DNS label (letters, digits, '-')"
        raise field_error(field, value, allowed, step, whitespace_fix(value, _DNS_LABEL))
    return value


def parse_gpu_type(value: Any, step: str | None = None) -> str:
    """A GPU model name: it becomes a Kubernetes node label value and a Slurm GRES type.

    Example:
        >>> parse_gpu_type("nvidia-h100-80gb")
        'nvidia-h100-80gb'
    """
    if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value):
        allowed = (
            "gpu_type must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a "
            'letter or digit (it becomes a node label value and a Slurm GRES type): "a100"'
        )
        raise field_error("gpu_type", value, allowed, step, whitespace_fix(value, _LABEL_VALUE))
    return value


def parse_gpu_partition(value: Any, gpu: int, step: str | None = None) -> str:
    """A GPU partition profile (a MIG profile such as "1g.10gb"): the step gets `gpu` such
    partitions instead of whole GPUs.

    Example:
        >>> parse_gpu_partition("1g.10gb", 1)
        '1g.10gb'
    """
    if not isinstance(value, str) or not _PARTITION.fullmatch(value):
        allowed = (
            "gpu_partition must be a partition profile the GPU driver publishes: 1-63 letters, "
            "digits, '-', '_', '.' or '+', starting and ending with a letter or digit: \"1g.10gb\""
        )
        raise field_error("gpu_partition", value, allowed, step, whitespace_fix(value, _PARTITION))
    if gpu < 1:
        allowed = (
            "gpu_partition needs gpu (or gpus_per_node) >= 1, the number of partitions: write "
            f'gpu=1, gpu_partition="{value}"'
        )
        raise field_error("gpu_partition", value, allowed, step)
    return value


def parse_size_table(raw: Any) -> dict[str, SizeClass]:
    """Merge user size-class overrides (executor config) over the defaults.

    Example:
        >>> parse_size_table({"xl": {"memory": "300Gi"}})["xl"]
        SizeClass(cpu=72, memory='300Gi', gpu=0)
    """
    if raw is None:
        return dict(DEFAULT_SIZE_CLASSES)
    if not isinstance(raw, Mapping):
        raise ComputeSpecError(
            f"size_classes={show_value(raw)} is not allowed: size_classes must be a mapping of "
            "class name to {cpu, memory, gpu}; write e.g. {xl: {memory: 300Gi}}"
        )
    table = dict(DEFAULT_SIZE_CLASSES)
    for name, row in raw.items():
        table[name] = _size_class(name, row, table.get(name) if isinstance(name, str) else None)
    return table


def _size_class(name: Any, row: Any, base: SizeClass | None) -> SizeClass:
    where = f"size_classes.{name}"
    if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
        allowed = "a size class name must be a lowercase DNS label (letters, digits, '-')"
        raise ComputeSpecError(f"size class name {show_value(name)} is not allowed: {allowed}")
    if not isinstance(row, Mapping):
        raise ComputeSpecError(
            f"{where}={show_value(row)} is not allowed: a size class is a mapping with cpu, memory "
            f"and/or gpu; write e.g. {{{name}: {{cpu: 8, memory: 32Gi}}}} or remove '{name}'"
        )
    unknown = set(row) - {"cpu", "memory", "gpu"}
    if unknown:
        raise ComputeSpecError(
            f"size class '{name}': unknown keys {sorted(unknown, key=repr)}; allowed: cpu, "
            "memory, gpu"
        )
    if base is None and not {"cpu", "memory"} <= set(row):
        raise ComputeSpecError(
            f"new size class '{name}' needs both cpu and memory; write e.g. "
            f"{{{name}: {{cpu: 8, memory: 32Gi}}}}"
        )
    base = base or SizeClass(cpu=1, memory="2Gi")  # a new class: cpu and memory are in `row`
    cpu = parse_cpu(row["cpu"], field=f"{where}.cpu") if "cpu" in row else base.cpu
    memory = base.memory
    if "memory" in row:
        parse_memory(row["memory"], field=f"{where}.memory")
        memory = row["memory"]
    gpu = parse_count(row["gpu"], f"{where}.gpu", minimum=0) if "gpu" in row else base.gpu
    return SizeClass(cpu=cpu, memory=memory, gpu=gpu)


def check_size_name(size: Any, table: Mapping[str, SizeClass], step: str | None = None) -> str:
    if not isinstance(size, str) or size not in table:
        raise field_error("size", size, f"valid size classes are {', '.join(table)}", step)
    return size


def _check_field_names(fields: Mapping[str, Any], step: str | None) -> None:
    unknown = set(fields) - set(SPEC_FIELDS)
    if unknown:
        where = f"step '{step}': " if step else ""
        raise ComputeSpecError(
            f"{where}unknown compute field(s) {sorted(unknown, key=repr)}; allowed: "
            f"{', '.join(SPEC_FIELDS)}"
        )


def _auto(fields: Mapping[str, Any], name: str, nodes: int, step: str | None) -> tuple[Any, bool]:
    """`fields[name]` with "auto" replaced by its first-run default, and whether it was auto."""
    value, default = fields.get(name), fields.get(f"{name}_default")
    auto = value == AUTO
    if default is not None and not auto:
        allowed = (
            f"{name}_default is the first run's {name} of a step sized from its history: "
            f"write {name}='auto' with it, or drop {name}_default"
        )
        raise field_error(f"{name}_default", default, allowed, step)
    size = fields.get("size")
    if auto and default is not None and size is not None:
        allowed = (
            f"give either size or {name}_default: with size={size!r}, {name}='auto' starts "
            f"from the class's {name} and never goes above it"
        )
        raise field_error(f"{name}_default", default, allowed, step)
    if auto and nodes > 1:
        allowed = f"{name}='auto' sizes single-node steps; give a gang step an explicit {name}"
        raise field_error(name, value, allowed, step)
    return (default if auto else value), auto


def _field(name: str, fields: Mapping[str, Any]) -> str:
    """The field a value came from: `<name>_default` when "auto" starts from it."""
    auto_default = fields.get(name) == AUTO and fields.get(f"{name}_default") is not None
    return f"{name}_default" if auto_default else name


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
    _check_field_names(fields, step)
    explicit_size = fields.get("size")
    size = check_size_name(explicit_size, table, step) if explicit_size is not None else None
    row = table[size or DEFAULT_SIZE]

    def get(name: str, default: Any) -> Any:
        value = fields.get(name)
        return default if value is None else value

    nodes = parse_count(get("nodes", 1), "nodes", minimum=1, step=step)
    cpu, cpu_auto = _auto(fields, "cpu", nodes, step)
    memory, memory_auto = _auto(fields, "memory", nodes, step)
    gpus_per_node = fields.get("gpus_per_node")
    gpu_field = fields.get("gpu")
    if gpus_per_node is not None and gpu_field is not None:
        raise field_error("gpus_per_node", gpus_per_node, "give either gpu or gpus_per_node", step)
    gpu_name = "gpus_per_node" if gpus_per_node is not None else "gpu"
    gpu = parse_count(get(gpu_name, row.gpu), gpu_name, minimum=0, step=step)
    backend = fields.get("backend")
    if backend is not None and backend not in BACKENDS:
        raise field_error("backend", backend, f"backend must be one of {', '.join(BACKENDS)}", step)
    tenant = fields.get("tenant")
    timeout = fields.get("timeout")
    gpu_type = fields.get("gpu_type")
    partition = fields.get("gpu_partition")
    gpu_memory = fields.get("gpu_memory")
    if gpu_memory is not None and gpu < 1:
        allowed = (
            f'gpu_memory is per GPU and needs gpu >= 1: write gpu=1, gpu_memory="{gpu_memory}"'
        )
        raise field_error("gpu_memory", gpu_memory, allowed, step)
    return ComputeSpec(
        cpu=parse_cpu(row.cpu if cpu is None else cpu, step, _field("cpu", fields)),
        memory_bytes=parse_memory(
            row.memory if memory is None else memory, step, _field("memory", fields)
        ),
        gpu=gpu,
        gpu_type=parse_gpu_type(gpu_type, step) if gpu_type is not None else None,
        gpu_partition=(
            parse_gpu_partition(partition, gpu, step) if partition is not None else None
        ),
        gpu_memory_bytes=(
            parse_memory(gpu_memory, step, "gpu_memory") if gpu_memory is not None else None
        ),
        nodes=nodes,
        tasks_per_node=parse_count(
            get("tasks_per_node", 1), "tasks_per_node", minimum=1, step=step
        ),
        preemptible=parse_bool(get("preemptible", False), "preemptible", step),
        backend=backend,
        tenant=parse_name(tenant, "tenant", step) if tenant is not None else None,
        timeout_s=parse_duration(timeout, step) if timeout is not None else None,
        size=size,
        cpu_auto=cpu_auto,
        memory_auto=memory_auto,
    )
