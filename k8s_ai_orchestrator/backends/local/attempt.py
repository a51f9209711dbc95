"""What the local backend keeps of one attempt: its request, process, status and meter."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...proctree import TreeSampler
from ..base import FailureReason, JobHandle, LaunchRequest, Resize, StepStatus
from .launch import StepProcess
from .meter import AttemptMeter


@dataclass
class LocalAttempt:
    """One attempt of a step on this machine, from its submit (queued) to its end."""

    request: LaunchRequest
    handle: JobHandle
    log_path: Path
    alone: bool  # larger than the machine: runs with nothing else
    gpu_ids: tuple[int, ...] = ()
    process: StepProcess | None = None
    started_at: float | None = None
    ended_at: float | None = None
    status: StepStatus = field(default_factory=lambda: StepStatus.pending("WaitingForCapacity"))
    meter: AttemptMeter | None = None  # limit, peak memory and CPU, from the start
    tree: TreeSampler | None = None  # its process tree, sampled by the monitor thread
    resizes: list[Resize] = field(default_factory=list)  # in-place growths tried
    growth_refused: str = ""  # why the last growth was refused ("" if none was)
    kill_reason: FailureReason | None = None
    kill_message: str = ""
    adopted: bool = False  # started by an earlier run worker: its log file is removed here
    queued_at: float | None = None  # when it was submitted (None: adopted, not seen)


__all__ = ["LocalAttempt"]
