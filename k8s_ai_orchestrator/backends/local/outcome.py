"""How a local attempt's end reads: its exit code and the backend's kill reason → `StepStatus`.

Example:
    >>> exit_status(-9, FailureReason.OOM_KILLED, "exceeded 256Mi").exit_code
    137
    >>> exit_status(-15, None, "").reason
    <FailureReason.PREEMPTED: 'Preempted'>
"""

from __future__ import annotations

import signal

from ...spec import format_memory
from ..base import FailureReason, StepStatus
from .launch import UNKNOWN_EXIT

OOM_EXIT_CODE = 137


def exit_status(code: int, kill_reason: FailureReason | None, kill_message: str) -> StepStatus:
    """The status of an attempt that exited with `code`, killed by the backend for `kill_reason`."""
    node = "localhost"
    if kill_reason is FailureReason.OOM_KILLED:
        return StepStatus.failed(kill_reason, kill_message, OOM_EXIT_CODE, node)
    if kill_reason is not None:
        return StepStatus.failed(kill_reason, kill_message, code, node)
    if code == UNKNOWN_EXIT:
        return StepStatus.failed(
            FailureReason.ERROR,
            "the step process, started by an earlier run worker, ended; its exit status is "
            "known only to the events it wrote",
            None,
            node,
        )
    if code == 0:
        return StepStatus.succeeded(node)
    if code == -signal.SIGTERM:
        return StepStatus.failed(
            FailureReason.PREEMPTED, "terminated by SIGTERM from outside the executor", 143, node
        )
    if code == -signal.SIGKILL:
        return StepStatus.failed(FailureReason.LOST, "killed by SIGKILL", OOM_EXIT_CODE, node)
    return StepStatus.failed(FailureReason.ERROR, f"step process exited with code {code}", code)


def oom_message(rss: int, limit_bytes: int, growth_refused: str) -> str:
    """Why the backend killed an attempt at its memory limit (and why it was not grown)."""
    refused = f"; growing it in place was refused: {growth_refused}" if growth_refused else ""
    return (
        f"resident memory {format_memory_approx(rss)} exceeded the limit "
        f"{format_memory(limit_bytes)}{refused}"
    )


def format_memory_approx(num_bytes: int) -> str:
    """Memory in whole Mi, for messages about sampled (not declared) sizes."""
    return f"{num_bytes / 1024**2:.0f}Mi"


__all__ = ["OOM_EXIT_CODE", "exit_status", "format_memory_approx", "oom_message"]
