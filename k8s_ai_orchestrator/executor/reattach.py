"""A resumed run worker takes over the attempts the dead one launched, instead of launching them
again.

Dagster resumes a run whose run worker died (run monitoring, `max_resume_run_attempts`); the new
run worker knows from the run's events which steps were in flight, and from the executor's own
engine events (`step_events.recorded_steps`) each step's sizes tried, relaunches and last job.
Each in-flight step's attempt is then asked of its backend by the request that launched it
(`Adopts`: on Kubernetes run, step and attempt name the Job): the attempt found, alive or
ended, is watched as if this run worker had launched it, its log forwarded from where the
last forward stopped; an attempt the backend has no trace of ended Lost, and is relaunched
from its checkpoint like a preempted one. Backends whose attempts die with the run worker
(no `Adopts`; the local, Kubernetes and Slurm backends all adopt) are said to be followed
through the step's own events only.

Example:
    >>> from k8s_ai_orchestrator.launch.relaunch import StepHistory
    >>> candidates(StepHistory("train", (2 << 30, 4 << 30)), next_memory=4 << 30)
    [(2, 4294967296), (1, 4294967296)]
    >>> candidates(StepHistory("train"), next_memory=None)
    [(0, None)]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..backends.base import Adopts, JobHandle, LaunchRequest
from ..launch.attempts import StepAttempts
from ..launch.lifecycle import Attempt, launch_note
from ..launch.plan import PlannedStep
from ..launch.relaunch import StepHistory
from ..spec import ComputeSpec
from .step_events import RecordedSteps

RequestOf = Callable[[ComputeSpec, int], tuple[PlannedStep, LaunchRequest]]


@dataclass(frozen=True)
class Reattached:
    """The attempt a resumed run worker watches for a step, and what to say of it."""

    attempt: Attempt | None  # None: the backend cannot reattach (no `Adopts`)
    message: str
    metadata: dict[str, Any]
    warning: bool  # nothing was found (the attempt ended Lost), or nothing can be


def reattach(
    live: StepAttempts,
    adopts: Adopts | None,
    request_of: RequestOf,
    recorded: RecordedSteps,
    now: float,
    fresh: bool = False,
) -> Reattached | None:
    """Find the step's attempt in flight (`candidates`, asked of the backend in turn); the
    first found is watched from where its log was last forwarded, else the attempt is Lost;
    None when nothing is found of an attempt never recorded as launched (launch it now): the
    step's first, or with `fresh` the one after a retry it asked for. Without `adopts`, a
    warning that the attempt is not watched. `live.history` gains the attempt found when no
    launch of it was recorded."""
    key = live.history.step_key
    if adopts is None:
        if fresh or not live.history.memory_tried:
            return None
        message, meta = unadoptable_note(key, live.backend)
        return Reattached(None, message, meta, warning=True)
    for attempt, memory in candidates(live.history, live.next_memory, fresh):
        spec = live.spec.with_memory(memory) if memory else live.spec
        planned, request = request_of(spec, attempt)
        handle = adopts.adopt(request)
        if handle is None:
            continue
        if attempt == len(live.history.memory_tried):
            live.history = live.history.launched(spec.memory_bytes)
        found = Attempt(handle, now, planned.where, spec.timeout_s)
        found.log_offset = recorded.log_offsets.get(handle.job_id, 0)
        meta = {**launch_note(planned, spec, attempt, handle.job_id)[1], "reattached": True}
        message = reattached_note(key, live.backend, attempt, handle.job_id)
        return Reattached(found, message, meta | live.launch_metadata(), warning=False)
    if fresh or not live.history.memory_tried:
        return None  # never launched: the run worker died before it could
    job, attempt = recorded.jobs.get(key, ""), len(live.history.memory_tried) - 1
    where = PlannedStep(key, live.spec, live.backend, live.tenant).where
    message = lost_message(key, where, attempt, job)
    lost = Attempt.lost(JobHandle(live.backend, job, key, live.tenant), now, where, message)
    return Reattached(lost, f"Warning: {message}", {"job": job, "warning": message}, True)


def candidates(
    history: StepHistory, next_memory: int | None, fresh: bool = False
) -> list[tuple[int, int | None]]:
    """(attempt number, memory) of the attempts that may be in flight, the likelier last:
    one launched after the last recorded launch (the run worker may have died between the
    submit and its event), then the last recorded one; with `fresh` (the last one asked for a
    retry) only the one after it. None: the step's declared memory."""
    tried = history.memory_tried
    if not tried:
        return [(0, next_memory)]
    after = (len(tried), next_memory or tried[-1])
    return [after] if fresh else [after, (len(tried) - 1, tried[-1])]


def reattached_note(key: str, backend: str, attempt: int, job: str) -> str:
    return (
        f"Reattached to step '{key}' (attempt {attempt + 1}, {backend} job {job}) after the "
        "run worker was lost"
    )


def lost_message(key: str, where: str, attempt: int, job: str) -> str:
    named = f" ({job})" if job else ""
    return (
        f"attempt {attempt + 1} of step '{key}'{named} was not found on {where} after the run "
        "worker was lost"
    )


def unadoptable_note(key: str, backend: str) -> tuple[str, dict[str, Any]]:
    message = (
        f"Warning: step '{key}' was in flight when the run worker was lost; the {backend} "
        "backend cannot reattach to it, so it is followed only through the events its own "
        "process writes"
    )
    return message, {"warning": message}


__all__ = [
    "Reattached",
    "candidates",
    "reattach",
    "lost_message",
    "reattached_note",
    "unadoptable_note",
]
