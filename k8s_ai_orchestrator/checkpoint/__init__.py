"""Checkpoints for long steps, so preemption never restarts them from zero.

Example:
    >>> from k8s_ai_orchestrator.checkpoint import CheckpointStore
    >>> ckpt = CheckpointStore(root="memory://doc-pkg").open("tiles")
    >>> _ = ckpt.save(b"\\x00\\x01", progress=1)
    >>> ckpt.load()
    b'\\x00\\x01'
"""

from .handle import CheckpointHandle, HandleSettings
from .keys import CheckpointKey
from .manifest import Commit
from .resource import CheckpointStore
from .signals import PREEMPTION_SIGNALS, Preempted, PreemptedRelaunch

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
