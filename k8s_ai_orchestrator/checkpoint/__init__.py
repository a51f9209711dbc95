"""Checkpoints for long steps, so preemption never restarts them from zero.

Example:
    >>> from k8s_ai_orchestrator.checkpoint import CheckpointStore
    >>> ckpt = CheckpointStore(root="memory://doc-pkg", handle_signals=False).open("tiles")
    >>> _ = ckpt.save(b"\\x00\\x01", progress=1)
    >>> ckpt.load()
    b'\\x00\\x01'
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..lazy import load_export

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
    return load_export(sys.modules[__name__], _HOMES, name)


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
