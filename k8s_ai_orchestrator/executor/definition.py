"""`ai_executor`: Dagster's step-delegating executor with one step handler for every backend.

Each step's spec is resolved from its op tags before anything is submitted; the step is then
routed to the local, Kubernetes or Slurm backend. Infrastructure failures are handled here,
backend-neutrally: Preempted/Evicted/Lost attempts are relaunched at the same size and
OOMKilled ones with more memory, as new retry attempts that do not consume the op's
RetryPolicy. Only the modules of this package (`executor/`) import `dagster._core`.

Example:
    >>> from dagster import Definitions
    >>> defs = Definitions(assets=[], executor=ai_executor.configured({"local": {"cpus": 4}}))
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from dagster import executor
from dagster._core.definitions.executor_definition import multiple_process_executor_requirements
from dagster._core.events import DagsterEvent, StepFailureData
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.retries import RetryMode
from dagster._core.executor.base import Executor
from dagster._core.executor.init import InitExecutorContext
from dagster._core.executor.step_delegating import StepDelegatingExecutor
from dagster._utils.error import SerializableErrorInfo

from ..errors import ConfigError
from ..launch.settings import ExecutorSettings
from .pace import Pace
from .schema import CONFIG_SCHEMA
from .step_handler import AIStepHandler
from .validation import RunCheck


@executor(
    name="ai_executor",
    config_schema=CONFIG_SCHEMA,
    requirements=multiple_process_executor_requirements(),
)
def ai_executor(init_context: InitExecutorContext) -> Executor:
    """Runs each step where its `compute(...)` tags say, with relaunch and OOM escalation.

    Config keys: backend, size_classes, local {cpus, memory, gpus, oversize, log_dir, start_method},
    kubernetes, slurm, default_tenant, allowed_tenants, oom_escalation {factor, max_memory,
    max_attempts}, max_preemption_retries, grace_period_s, poll_interval_s,
    idle_poll_interval_s, max_concurrent,
    retries. See docs/executor-config.md.

    Example:
        >>> from dagster import Definitions
        >>> defs = Definitions(assets=[], executor=ai_executor)
    """
    raw: dict[str, Any] = dict(init_context.executor_config)
    settings = ExecutorSettings.from_config(raw)
    retries = RetryMode.from_config(raw["retries"]) or RetryMode.ENABLED
    return AIExecutor(
        AIStepHandler(settings),
        retries=retries,
        settings=settings,
        max_concurrent=settings.max_concurrent,
    )


class AIExecutor(StepDelegatingExecutor):
    """A StepDelegatingExecutor that classifies failed attempts and relaunches them."""

    def __init__(
        self,
        handler: AIStepHandler,
        *,
        retries: RetryMode,
        settings: ExecutorSettings,
        max_concurrent: int | None = None,
    ) -> None:
        self._settings = settings
        self._pace = Pace(settings.poll_interval_s, settings.idle_poll_interval_s)
        super().__init__(
            handler,
            retries=retries,
            sleep_seconds=settings.poll_interval_s,
            check_step_health_interval_seconds=0,  # every pass: passes slow down when idle
            max_concurrent=max_concurrent,
        )
        self._handler = handler
        self._held: dict[str, tuple[DagsterEvent, float]] = {}

    @property
    def _sleep_seconds(self) -> float:  # type: ignore[override]
        """Read by `StepDelegatingExecutor.execute` once per pass: the adaptive wait."""
        return self._pace.next_wait()

    @_sleep_seconds.setter
    def _sleep_seconds(self, _fixed: float) -> None:
        """The base class sets a fixed sleep; the pace (from the settings) stands for it."""

    def execute(
        self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan
    ) -> Iterator[DagsterEvent]:
        if not self.retries.enabled:
            raise ConfigError(
                "ai_executor needs retries enabled to relaunch preempted and OOMKilled steps: "
                "remove `retries: {disabled: {}}` from the executor config"
            )
        check = self._handler.bind(plan_context, execution_plan)
        if check.problems:
            self._handler.close()
            yield from self._fail_refused_steps(plan_context, execution_plan, check)
            raise check.error()
        try:
            yield from super().execute(plan_context, execution_plan)
        finally:
            self._handler.close()

    def _fail_refused_steps(
        self, plan_context: PlanOrchestrationContext, plan: ExecutionPlan, check: RunCheck
    ) -> Iterator[DagsterEvent]:
        """A STEP_FAILURE for each refused step, naming its problems; nothing was submitted."""
        for key in check.problems:
            step_context = plan_context.for_step(plan.get_step_by_key(key))  # type: ignore[arg-type]
            error = SerializableErrorInfo(check.step_message(key), stack=[], cls_name=None)
            yield DagsterEvent.step_failure_event(
                step_context, StepFailureData(error=error, user_failure_data=None)
            )

    def _pop_events(self, instance, run_id, seen_storage_ids) -> Sequence[DagsterEvent]:  # type: ignore[no-untyped-def]
        released: list[DagsterEvent] = []
        for event in super()._pop_events(instance, run_id, seen_storage_ids):
            key = event.step_key
            if event.is_step_failure and key and self._handler.owns(key):
                self._held[key] = (event, time.monotonic())
                continue
            if key and event.is_step_up_for_retry:
                self._handler.account_retry(key, event)
            if key and (event.is_step_success or event.is_step_up_for_retry):
                self._handler.finish_attempt(key, final=event.is_step_success)
            released.append(event)
        released.extend(self._release_held())
        if released:
            self._pace.busy()
        return released

    def _release_held(self) -> list[DagsterEvent]:
        """Held step failures are classified once the backend attempt has ended."""
        released = []
        for key, (event, held_at) in list(self._held.items()):
            waited = time.monotonic() - held_at
            if not self._handler.attempt_ended(key) and waited < self._settings.grace_period_s + 5:
                continue
            del self._held[key]
            error = event.step_failure_data.error
            retry_event = self._handler.relaunch_if_infrastructure(key, error, event)
            if retry_event is None:
                self._handler.finish_attempt(key, final=True)
                released.append(event)
        return released

    def log_failure_or_retry_event_after_error(self, step_context, err_info, known_state):  # type: ignore[no-untyped-def]
        key = step_context.step.key
        retry_event = self._handler.relaunch_if_infrastructure(key, err_info, None)
        if retry_event is not None:
            return retry_event
        failure = self._handler.failure_error(key, err_info)
        self._handler.finish_attempt(key, final=True)
        return super().log_failure_or_retry_event_after_error(step_context, failure, known_state)


__all__ = ["AIExecutor", "CONFIG_SCHEMA", "ai_executor"]
