"""What the executor does after an attempt fails for an infrastructure reason. Pure logic.

Preempted, Evicted and Lost attempts are relaunched at the same size (they resume from their
last checkpoint); OOMKilled attempts are relaunched with memory × factor up to a cap. Neither
counts against the op's RetryPolicy.

Example:
    >>> policy = RelaunchPolicy(OomEscalation(factor=2, max_memory_bytes=8 * GiB, max_attempts=3))
    >>> history = StepHistory(step_key="mosaic", memory_tried=(2 * GiB,))
    >>> decide(policy, history, FailureReason.OOM_KILLED).memory_bytes == 4 * GiB
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..backends.base import RELAUNCH_REASONS, FailureReason
from ..errors import config_number
from ..spec import GiB, format_memory


@dataclass(frozen=True)
class OomEscalation:
    """How OOMKilled steps grow."""

    factor: float = 2.0  # memory multiplier per OOM relaunch
    max_memory_bytes: int = 450 * GiB  # never ask for more than this
    max_attempts: int = 4  # attempts in all (first launch included) before failing

    def __post_init__(self) -> None:
        config_number(self.factor, "oom_escalation.factor", minimum=1, above=True)
        config_number(self.max_attempts, "oom_escalation.max_attempts", minimum=1, integer=True)
        config_number(self.max_memory_bytes, "oom_escalation.max_memory", above=True)


@dataclass(frozen=True)
class RelaunchPolicy:
    oom: OomEscalation = OomEscalation()
    max_preemption_retries: int = 3  # relaunches after Preempted/Evicted/Lost

    def __post_init__(self) -> None:
        config_number(self.max_preemption_retries, "max_preemption_retries", integer=True)


@dataclass(frozen=True)
class StepHistory:
    """The infrastructure attempts of one step in one run (kept in engine-event metadata)."""

    step_key: str
    memory_tried: tuple[int, ...] = ()  # memory of each attempt so far, in order
    preemptions: int = 0  # relaunches after Preempted/Evicted/Lost
    relaunches: int = 0  # all relaunches the executor made (never counted by RetryPolicy)

    def launched(self, memory_bytes: int) -> StepHistory:
        return replace(self, memory_tried=(*self.memory_tried, memory_bytes))


@dataclass(frozen=True)
class Decision:
    """Relaunch (with `memory_bytes`) or fail (with `message`)."""

    relaunch: bool
    reason: FailureReason
    message: str
    memory_bytes: int | None = None  # memory of the next attempt when relaunching


def decide(policy: RelaunchPolicy, history: StepHistory, reason: FailureReason) -> Decision:
    """Decide what follows a failed attempt whose backend reason is `reason`."""
    current = history.memory_tried[-1] if history.memory_tried else 0
    if reason is FailureReason.OOM_KILLED:
        return _decide_oom(policy.oom, history, current)
    if reason in RELAUNCH_REASONS:
        if history.preemptions >= policy.max_preemption_retries:
            return Decision(
                False,
                reason,
                f"step '{history.step_key}' was {reason} {history.preemptions + 1} times, more "
                f"than max_preemption_retries={policy.max_preemption_retries}: raise "
                "max_preemption_retries or run it as non-preemptible (compute(preemptible=False))",
            )
        return Decision(
            True,
            reason,
            f"step '{history.step_key}' was {reason}; relaunching at the same size "
            f"({history.preemptions + 1}/{policy.max_preemption_retries}), it resumes from its "
            "last checkpoint",
            current,
        )
    return Decision(False, reason, "")


def _decide_oom(oom: OomEscalation, history: StepHistory, current: int) -> Decision:
    tried = ", ".join(format_memory(m) for m in history.memory_tried)
    reason = FailureReason.OOM_KILLED
    grown = _round_up_mib(current * oom.factor)
    if len(history.memory_tried) >= oom.max_attempts or current >= oom.max_memory_bytes:
        return Decision(
            False,
            reason,
            f"step '{history.step_key}' was OOMKilled at every size tried ({tried}); "
            f"oom_escalation allows {oom.max_attempts} attempts up to "
            f"{format_memory(oom.max_memory_bytes)}: give the step more memory with "
            "compute(memory=...), raise oom_escalation.max_memory / max_attempts, or reduce "
            "what it holds in memory",
        )
    new = min(grown, oom.max_memory_bytes)
    return Decision(
        True,
        reason,
        f"step '{history.step_key}' was OOMKilled with {format_memory(current)}; relaunching "
        f"with {format_memory(current)} → {format_memory(new)} "
        f"(attempt {len(history.memory_tried) + 1}/{oom.max_attempts})",
        new,
    )


def _round_up_mib(num_bytes: float) -> int:
    mib = 1024**2
    return int(math.ceil(num_bytes / mib)) * mib
