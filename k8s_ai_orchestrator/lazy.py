"""Public names of a package loaded the first time they are asked for (PEP 562), so that
importing one module of the package does not import all of it.

Example:
    >>> import types
    >>> package = types.ModuleType("k8s_ai_orchestrator.backends")
    >>> load_export(package, {"StepState": ".base"}, "StepState").RUNNING.value
    'Running'
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from types import ModuleType
from typing import Any


def load_export(package: ModuleType, homes: Mapping[str, str], name: str) -> Any:
    """`name` from its module in `homes` (relative to `package`), kept on the package so the
    next lookup is a plain attribute; `AttributeError` for a name the package does not export."""
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {package.__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home, package.__name__), name)
    setattr(package, name, value)
    return value


__all__ = ["load_export"]
