"""Checkpoints for long steps, so preemption never restarts them from zero.

Example:
    >>> from k8s_ai_orchestrator.checkpoint import CheckpointStore
    >>> ckpt = CheckpointStore(root="memory://doc-pkg").open("tiles")
    >>> _ = ckpt.save(b"\\x00\\x01", progress=1)
    >>> ckpt.load()
    b'\\x00\\x01'
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .handle import CheckpointHandle, HandleSettings
    from .keys import CheckpointKey
    from .manifest import Commit
    from .resource import CheckpointStore
    from .signals import PREEMPTION_SIGNALS, Preempted, PreemptedRelaunch

# Each public name's module, imported the first time the name is asked for (PEP 562): the run
# worker reads preemption signals (`signals.py`) without loading pyarrow and fsspec.
_HOMES = {
    "PREEMPTION_SIGNALS": ".signals",
    "CheckpointHandle": ".handle",
    "CheckpointKey": ".keys",
    "CheckpointStore": ".resource",
    "Commit": ".manifest",
    "HandleSettings": ".handle",
    "Preempted": ".signals",
    "PreemptedRelaunch": ".signals",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "PREEMPTION_SIGNALS",
    "CheckpointHandle",
    "CheckpointKey",
    "CheckpointStore",
    "Commit",
    "HandleSettings",
    "Preempted",
    "PreemptedRelaunch",
]
