"""`AIExecutor`: the executor a run worker builds from `ai_executor`'s config.

It lives apart from `definition.py` so that a process that only loads the code location (the
webserver, the daemon, every step process) does not import the run worker's modules: the
settings, the step handler, the loop and the backends load when a run worker builds the
executor.

Example:
    >>> executor = build_executor({"retries": {"enabled": {}}, "max_concurrent": 8})
    >>> executor.max_concurrent, executor.retries.enabled
    (8, True)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData, StepFailureData
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.retries import RetryMode
from dagster._core.execution.step_dependency_config import StepDependencyConfig
from dagster._core.executor.base import Executor
from dagster._utils.error import SerializableErrorInfo

from ..errors import ConfigError
from ..launch.settings import ExecutorSettings
from .loop import run_plan
from .step_events import stale_note, temporary_instance_note, warning_event
from .step_handler import AIStepHandler
from .validation import RunCheck


def build_executor(raw: dict[str, Any]) -> AIExecutor:
    """The executor for `ai_executor`'s resolved config `raw` (Dagster's defaults filled in)."""
    settings = ExecutorSettings.from_config(raw)
    retries = RetryMode.from_config(raw["retries"]) or RetryMode.ENABLED
    return AIExecutor(
        AIStepHandler(settings),
        retries=retries,
        settings=settings,
        tag_concurrency_limits=raw.get("tag_concurrency_limits"),
        step_dependency_config=StepDependencyConfig.from_config(raw.get("step_dependency_config")),
    )


class AIExecutor(Executor):
    """Runs a plan's steps through `AIStepHandler` in its own loop (`loop.StepLoop`), and
    classifies failed attempts: infrastructure failures are relaunched, not failed."""

    def __init__(
        self,
        handler: AIStepHandler,
        *,
        retries: RetryMode,
        settings: ExecutorSettings,
        tag_concurrency_limits: list[dict[str, Any]] | None = None,
        step_dependency_config: StepDependencyConfig | None = None,
    ) -> None:
        self.handler = handler
        self.settings = settings
        self.max_concurrent = settings.max_concurrent
        self.tag_concurrency_limits = tag_concurrency_limits or []
        self._retries = retries
        self._step_dependency_config = step_dependency_config or StepDependencyConfig.default()
        self._held: dict[str, tuple[DagsterEvent, float]] = {}

    @property
    def retries(self) -> RetryMode:
        return self._retries

    @property
    def step_dependency_config(self) -> StepDependencyConfig:
        return self._step_dependency_config

    def execute(
        self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan
    ) -> Iterator[DagsterEvent]:
        if not self.retries.enabled:
            raise ConfigError(
                "ai_executor needs retries enabled to relaunch preempted and OOMKilled steps: "
                "remove `retries: {disabled: {}}` from the executor config"
            )
        check = self.handler.bind(plan_context, execution_plan)
        if check.problems:
            self.handler.close()
            yield from self._fail_refused_steps(plan_context, execution_plan, check)
            raise check.error()
        for budget_note in check.notes:
            yield DagsterEvent.engine_event(plan_context, budget_note, EngineEventData())
        note = temporary_instance_note(plan_context.instance.root_directory)
        if note:
            yield warning_event(plan_context, f"Warning: {note}", {"warning": note})
        try:
            yield from run_plan(self, plan_context, execution_plan)
        finally:
            self.handler.close()

    def _fail_refused_steps(
        self, plan_context: PlanOrchestrationContext, plan: ExecutionPlan, check: RunCheck
    ) -> Iterator[DagsterEvent]:
        """A STEP_FAILURE for each refused step, naming its problems; nothing was submitted.

        Its error keeps the class of the library error that refused the step (`cls_name`, and
        the message begins with it), so the Dagster UI shows e.g. `...ComputeSpecError: step
        'tiles': cpu='-1' is not allowed: ...`, not a bare failure.
        """
        for key in check.problems:
            step_context = plan_context.for_step(plan.get_step_by_key(key))  # type: ignore[arg-type]
            kind = check.error_type(key)
            error = SerializableErrorInfo(  # as Dagster words an exception: "module.Class: ..."
                f"{kind.__module__}.{kind.__qualname__}: {check.step_message(key)}\n",
                stack=[],
                cls_name=kind.__name__,
            )
            yield DagsterEvent.step_failure_event(
                step_context, StepFailureData(error=error, user_failure_data=None)
            )

    def classify(self, events: Sequence[DagsterEvent]) -> list[DagsterEvent]:
        """The run's new events as the plan should see them: a step failure is held until its
        attempt has ended, then either relaunched (its retry event stands for it) or released."""
        released: list[DagsterEvent] = []
        for event in events:
            key = event.step_key
            live = self.handler.live(key) if key else None
            if live is not None and event.event_type is DagsterEventType.STEP_WORKER_STARTED:
                live.worker_started(event.pid)
            outcome = event.is_step_failure or event.is_step_up_for_retry or event.is_step_success
            if key and outcome and (late := self.handler.budget.late(key, event.pid, os.getpid())):
                self.handler.note(key, late)
                continue  # the step was stopped for its budget: that is its outcome
            if key and live is not None and event.is_step_failure:
                if live.stale_failure(event.pid, os.getpid()):
                    live.terminal_events_at_launch += 1  # in the log, but not this attempt's
                    self.handler.note(key, stale_note(key, event.pid))
                    continue
                self._held[key] = (event, time.monotonic())
                continue
            if key and event.is_step_up_for_retry:
                self.handler.account_retry(key, event)
            if key and (event.is_step_success or event.is_step_up_for_retry):
                self.handler.finish_attempt(key, final=event.is_step_success)
            released.append(event)
        released.extend(self._release_held())
        return released

    def _release_held(self) -> list[DagsterEvent]:
        """Held step failures are classified once the backend attempt has ended."""
        released = []
        for key, (event, held_at) in list(self._held.items()):
            waited = time.monotonic() - held_at
            if not self.handler.attempt_ended(key) and waited < self.settings.grace_period_s + 5:
                continue
            del self._held[key]
            error = event.step_failure_data.error
            retry_event = self.handler.relaunch_if_infrastructure(key, error, event)
            if retry_event is None:
                self.handler.finish_attempt(key, final=True)
                released.append(event)
        return released

    def log_failure_or_retry_event_after_error(self, step_context, err_info, known_state):  # type: ignore[no-untyped-def]
        key = step_context.step.key
        retry_event = self.handler.relaunch_if_infrastructure(key, err_info, None)
        if retry_event is not None:
            return retry_event
        message = self.handler.fail_message(key)
        if message:
            err_info = SerializableErrorInfo(message=message, stack=err_info.stack, cls_name=None)
        self.handler.finish_attempt(key, final=True)
        if key in self.handler.budget.stopped:  # a BudgetError: no RetryPolicy retries it
            error = SerializableErrorInfo(err_info.message, stack=[], cls_name="BudgetError")
            failure = StepFailureData(error=error, user_failure_data=None)
            return DagsterEvent.step_failure_event(step_context, failure)
        return super().log_failure_or_retry_event_after_error(step_context, err_info, known_state)


__all__ = ["AIExecutor", "build_executor"]
