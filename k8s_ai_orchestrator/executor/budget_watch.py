"""The budget while the run goes on: each running step's reservation so far, and the run's,
held to the `budget` caps at every health check (`launch.budget.passed`). A check costs the
same at any fan-out: the rest of the run is read at most once a second (`RunTally`).

`on_exceeded: warn` writes one warning per step and cap passed and lets the step go on;
`stop` cancels the step's attempt as a preemption stops it (SIGTERM: it saves at its next
checkpoint within its grace period) and fails it with `BudgetError`, never relaunched nor
retried by its RetryPolicy. What its process writes after that is not this attempt's outcome
(`late`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dagster._core.execution.context.system import IStepContext

from ..backends.base import ResourceUsage, StepState, StepStatus
from ..errors import BudgetError
from ..launch.attempts import StepAttempts
from ..launch.budget import (
    NOTHING,
    REST_OF_RUN,
    Budget,
    CapWatch,
    RunTally,
    Spent,
    seconds_to_cap,
    spent,
)
from ..launch.cost import step_prices
from ..launch.settings import ExecutorSettings
from .step_events import RecordedSteps

MIN_RECHECK_S = 0.5  # the soonest a running step is looked at again for its budget


class BudgetWatch:
    """See the module docstring; `warn(step_context, message, metadata)` writes a warning."""

    def __init__(self, settings: ExecutorSettings, warn: Callable[..., Any]) -> None:
        self._budget = settings.budget
        self._prices = settings.prices
        self._warn = warn
        self._ended: dict[str, Spent] = {}  # steps of this run that have ended
        self._currency = settings.prices.currency if settings.prices else ""
        self._caps = CapWatch(settings.budget or Budget(), self._currency)
        self.stopped: dict[str, str] = {}  # step → why it was stopped
        self._due: dict[str, float] = {}  # step → when it passes a cap at its current rate
        self._tally = RunTally()  # the rest of the run, for a run cap

    def restore(self, recorded: RecordedSteps) -> RecordedSteps:
        """A resumed run worker counts the steps that ended before it (their summaries)."""
        self._ended.update(recorded.spent)
        return recorded

    def ended(self, key: str, live: StepAttempts) -> None:
        """The step's last attempt was accounted: its reservation counts for the run."""
        if self._budget is not None:
            self._ended[key] = self._spent(live, live.usage)

    def check(
        self,
        key: str,
        live_steps: dict[str, StepAttempts],
        status: StepStatus,
        now: float,
        step_context: IStepContext,
    ) -> str | None:
        """Hold the running step `key` (of `live_steps`, the run's steps in flight) to the
        caps: its warnings written, or why it is stopped now."""
        budget = self._budget
        if budget is None or key in self.stopped or status.state is not StepState.RUNNING:
            return None
        live = live_steps[key]
        own, own_rate = self._figures(live, now)
        so_far, rates = {key: own}, {key: own_rate}
        if budget.max_cost_per_run is not None or budget.max_gpu_hours_per_run is not None:
            rest = self._tally.rest(key, now, lambda: self._run_figures(live_steps, now))
            so_far[REST_OF_RUN], rates[REST_OF_RUN] = rest
        warnings, stop = self._caps.verdict(key, so_far)
        wait = seconds_to_cap(key, so_far, rates, budget, self._currency)
        self._due[key] = float("inf") if stop else now + max(wait, MIN_RECHECK_S)
        if stop:
            self.stopped[key] = f"{BudgetError.__module__}.BudgetError: step '{key}' {stop}"
            return self.stopped[key]
        for cap, why in warnings:
            self._warn(step_context, f"Budget: step '{key}' {why}", {"budget_passed": cap})
        return None

    def due(self, key: str) -> float:
        """When to look at the running step again for its budget (the observer's clock): when
        it would pass a cap at the rate the run reserves now; inf without a budget."""
        return self._due.get(key, float("inf"))

    def late(self, key: str, pid: int | None, own_pid: int) -> str:
        """What the run says of an outcome event that the stopped step's process wrote after
        it was stopped (its Preempted failure or retry); "" for any other event: the step's
        outcome is its BudgetError, written by this run worker (`own_pid`)."""
        if key not in self.stopped or pid is None or pid == own_pid:
            return ""
        return (
            f"Ignored the outcome step '{key}' wrote from process {pid} after it was stopped "
            "for its budget: the step failed with BudgetError"
        )

    def _figures(self, live: StepAttempts, now: float) -> tuple[Spent, Spent]:
        """What the step has reserved by `now`, and reserves a second while it holds a size."""
        spec = live.held()
        rate = NOTHING if spec is None else self._spent(live, [ResourceUsage.reserved(spec, 1.0)])
        return self._spent(live, live.reserved_so_far(now)), rate

    def _run_figures(
        self, live_steps: dict[str, StepAttempts], now: float
    ) -> dict[str, tuple[Spent, Spent]]:
        """Every step of the run: those that ended (their summaries) and those in flight."""
        ended = {key: (figures, NOTHING) for key, figures in self._ended.items()}
        return {**ended, **{key: self._figures(held, now) for key, held in live_steps.items()}}

    def _spent(self, live: StepAttempts, attempts: list[Any]) -> Spent:
        return spent(attempts, live.spec, step_prices(self._prices, live.backend, live.tenant))


__all__ = ["BudgetWatch"]
