"""Resource quantities: parse "500m"/"2Gi", sum pod requests and limits, format canonically.

Example:
    >>> to_milli("500m"), to_milli("2"), format_quantity("memory", 2 * 1024**3 * 1000)
    (500, 2000, '2Gi')
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

GPU = "nvidia.com/gpu"


def to_milli(value: Any) -> int:
    """A quantity in thousandths ("500m" → 500, "1Gi" → 1073741824000)."""
    return int(Decimal(parse_quantity(str(value))) * 1000)


_BINARY = [("Ei", 1024**6), ("Pi", 1024**5), ("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2)]
_BINARY += [("Ki", 1024)]
_DECIMAL = [("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)]


def format_quantity(resource: str, milli: int) -> str:
    """Canonical text for a quantity held in thousandths, the way the API server prints it."""
    if milli % 1000:
        return f"{milli}m"
    whole = milli // 1000
    if resource.split(".")[-1] in ("memory", "storage", "ephemeral-storage") and whole:
        for suffixes in (_BINARY, _DECIMAL):
            for suffix, factor in suffixes:
                if whole % factor == 0:
                    return f"{whole // factor}{suffix}"
    return str(whole)


def container_amounts(container: Mapping[str, Any], section: str) -> dict[str, int]:
    """Requests or limits of one container in thousandths; requests default to limits."""
    resources = container.get("resources") or {}
    values = dict(resources.get(section) or {})
    if section == "requests":
        for name, limit in (resources.get("limits") or {}).items():
            values.setdefault(name, limit)
    return {name: to_milli(value) for name, value in values.items()}


def pod_amounts(pod: Mapping[str, Any], section: str = "requests") -> dict[str, int]:
    """What a pod asks of a node: the sum over containers, at least the largest init container."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, value in container_amounts(container, section).items():
            total[name] = total.get(name, 0) + value
    for container in spec.get("initContainers") or []:
        for name, value in container_amounts(container, section).items():
            total[name] = max(total.get(name, 0), value)
    return total
