"""The run worker's loop: launch what Dagster's plan allows, read what the steps wrote, and look
at a running step only when something about it changed or a timer of its own is due.

Dagster's `StepDelegatingExecutor` checks every running step on every pass (or every 20 s);
its cost grows with the number of steps in flight even while none of them changes. Here a pass
costs what changed: the run's new events (one query from a cursor), the attempts a backend
reported as changed (`ReportsChanges`: a pod watch event, a process exit), and the attempts
whose own timer came due (a Pending explanation to refresh, a log to forward, a timeout, a
paced backend's interval; `launch.lifecycle.Attempt.next_check`). Between passes the loop
waits on the backends' change signal, at most the `Pace`'s wait.

What Dagster decides stays Dagster's: `ActiveExecution` orders the steps and applies
`max_concurrent`, `tag_concurrency_limits`, concurrency pools and retries; a termination
request is forwarded to every running step. Only the public parts of the executor API are
overridden (`Executor.execute`); `ActiveExecution`, `StepHandlerContext` and
`InstanceConcurrencyContext` are the pieces every Dagster executor is built from.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from dagster import MetadataValue
from dagster._core.event_api import EventLogCursor
from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData
from dagster._core.execution.context.system import IStepContext, PlanOrchestrationContext
from dagster._core.execution.plan.active import ActiveExecution
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.plan.state import KnownExecutionState
from dagster._core.execution.retries import RetryMode
from dagster._core.execution.step_dependency_config import StepDependencyConfig
from dagster._core.executor.step_delegating.step_handler.base import StepHandlerContext
from dagster._grpc.types import ExecuteStepArgs
from dagster._utils.error import SerializableErrorInfo, serializable_error_info_from_exc_info

from ..launch.settings import ExecutorSettings
from .asset_costs import AssetCosts
from .pace import Pace
from .step_events import undecided_steps
from .step_handler import AIStepHandler

if TYPE_CHECKING:
    from dagster._core.execution.plan.step import ExecutionStep


class AIExecutor(Protocol):
    """What the loop needs of `runner.AIExecutor` (named here to keep imports one-way)."""

    handler: AIStepHandler
    settings: ExecutorSettings
    max_concurrent: int | None
    tag_concurrency_limits: list[dict[str, Any]]

    @property
    def retries(self) -> RetryMode: ...

    @property
    def step_dependency_config(self) -> StepDependencyConfig: ...

    def classify(self, events: Sequence[DagsterEvent]) -> list[DagsterEvent]: ...

    def log_failure_or_retry_event_after_error(
        self, step_context: IStepContext, err_info: SerializableErrorInfo, known_state: Any
    ) -> DagsterEvent: ...


POP_EVENTS_LIMIT = 1000  # events read per pass
ALL_EVENTS = set(DagsterEventType)


class RunEvents:
    """The run's new events, one query per pass from a cursor.

    Event log storages whose writers can commit out of order (`default_run_scoped_event_tailer
    _offset` > 0, e.g. PostgreSQL) are read again from `offset` ids back, and events already
    returned are dropped, as Dagster's step-delegating executor does.
    """

    def __init__(self, plan_context: PlanOrchestrationContext) -> None:
        self._instance = plan_context.instance
        self._run_id = plan_context.run_id
        self._cursor: str | None = None
        self._seen: set[int] = set()
        override = os.environ.get("DAGSTER_EXECUTOR_POP_EVENTS_OFFSET")
        storage = self._instance.event_log_storage
        self._offset = (
            int(override) if override else storage.default_run_scoped_event_tailer_offset()
        )

    def pop(self) -> list[DagsterEvent]:
        conn = self._instance.get_records_for_run(
            self._run_id, self._cursor, of_type=ALL_EVENTS, limit=POP_EVENTS_LIMIT
        )
        if not self._offset:
            self._cursor = conn.cursor
            return [
                r.event_log_entry.dagster_event
                for r in conn.records
                if r.event_log_entry.dagster_event
            ]
        fresh = [r for r in conn.records if r.storage_id not in self._seen]
        ids = [r.storage_id for r in conn.records]
        if len(ids) == POP_EVENTS_LIMIT and not fresh:  # a page of seen ids: move past half
            self._cursor = EventLogCursor.from_storage_id(
                ids[POP_EVENTS_LIMIT // 2 - 1]
            ).to_string()
        else:
            at = EventLogCursor.parse(self._cursor).storage_id() if self._cursor else 0
            read = EventLogCursor.parse(conn.cursor).storage_id()
            self._cursor = EventLogCursor.from_storage_id(max(at, read - self._offset)).to_string()
        self._seen.update(ids)
        return [r.event_log_entry.dagster_event for r in fresh if r.event_log_entry.dagster_event]


class StepLoop:
    """One run's loop; `run()` yields the events Dagster's run iterator expects."""

    def __init__(
        self,
        executor: AIExecutor,
        plan_context: PlanOrchestrationContext,
        active: ActiveExecution,
    ) -> None:
        self._executor = executor
        self._handler = executor.handler
        self._plan_context = plan_context
        self._active = active
        self._events = RunEvents(plan_context)
        settings = executor.settings
        self._pace = Pace(settings.poll_interval_s, settings.idle_poll_interval_s)
        self._running: dict[str, ExecutionStep] = {}
        self._costs = AssetCosts()  # what each ended step's materializations cost

    def run(self) -> Iterator[DagsterEvent]:
        if self._plan_context.resume_from_failure:
            yield from self._resume()
        try:
            while not self._active.is_complete:
                if self._active.check_for_interrupts():
                    self._interrupted()
                    return
                busy = False
                if self._active.has_in_flight_steps:
                    released = self._executor.classify(self._events.pop())
                    for event in released:
                        busy = True
                        yield event
                        self._handle(event)
                    self._observe_costs(released)
                list(self._active.plan_events_iterator(self._plan_context))
                busy = self._check_due() or busy
                self._handler.tails.forward()
                list(self._active.concurrency_event_iterator(self._plan_context))
                busy = self._launch_ready() or busy
                if busy:
                    self._pace.busy()
                self._handler.attention.wait(
                    min(self._pace.next_wait(), self._handler.attention.next_due_in())
                )
            self._handler.tails.finish()
            self._observe_costs(self._events.pop())  # the summaries of the last pass
        except Exception:
            self._terminate_after_error()
            raise

    # -- one pass --------------------------------------------------------------------------

    def _handle(self, event: DagsterEvent) -> None:
        active, key = self._active, event.step_key
        if event.is_step_skipped:
            assert isinstance(key, str)
            active.verify_complete(self._plan_context, key)
            return
        if event.is_resource_init_failure:
            active.handle_event(event)
            assert isinstance(key, str)
            step_context = self._plan_context.for_step(active.get_step_by_key(key))
            error = event.engine_event_data.error
            assert isinstance(error, SerializableErrorInfo)
            self._executor.log_failure_or_retry_event_after_error(
                step_context, error, active.get_known_state()
            )
            return
        active.handle_event(event)
        if event.is_step_success or event.is_step_failure or event.is_step_up_for_retry:
            assert isinstance(key, str)
            self._running.pop(key, None)
            if not event.is_step_up_for_retry:
                active.verify_complete(self._plan_context, key)

    def _observe_costs(self, events: Sequence[DagsterEvent]) -> None:
        """Each ended step's figures on the assets it materialized (`asset_costs`)."""
        for key, observation in self._costs.seen(events):
            step = self._plan_context.for_step(self._active.get_step_by_key(key))
            DagsterEvent.asset_observation(step, observation)

    def _check_due(self) -> bool:
        """Health of the running steps that changed or whose timer is due; True if a backend
        reported a change (the loop then keeps its fast pace)."""
        due, changed = self._handler.attention.due(self._running)
        for key in due:
            step = self._running[key]
            step_context = self._plan_context.for_step(step)
            try:
                unhealthy = self._handler.check(key, step_context)
            except Exception:
                DagsterEvent.engine_event(
                    step_context,
                    f"Error while checking health for step {key}",
                    EngineEventData(error=serializable_error_info_from_exc_info(sys.exc_info())),
                )
                continue
            if unhealthy is not None:
                error = SerializableErrorInfo(
                    message=f"Step {key} failed health check: {unhealthy}", stack=[], cls_name=None
                )
                self._executor.log_failure_or_retry_event_after_error(
                    step_context, error, self._active.get_known_state()
                )
        return changed

    def _launch_ready(self) -> bool:
        limit = self._executor.max_concurrent
        room = None if limit is None else limit - len(self._running)
        launched, known = False, None
        for step in self._active.get_steps_to_execute(room):
            self._running[step.key] = step
            known = known or self._active.get_known_state()  # once a pass: it copies the run's
            list(self._handler.launch_step(self._step_handler_context(step, known)))
            launched = True
        return launched

    # -- start, stop -------------------------------------------------------------------------

    def _resume(self) -> Iterator[DagsterEvent]:
        """A run resumed after its run worker died: rebuild the plan's state from all the
        run's events, then take over each step that was in flight (`AIStepHandler.adopt`:
        its attempt is watched again where the backend still has it, else relaunched). A
        step whose last event is a failure the dead run worker may not have decided on is
        taken over too, its failure held as a live run worker holds it (`classify`): after a
        preemption it relaunches, else the failure is released."""
        DagsterEvent.engine_event(
            self._plan_context, "Resuming execution from failure", EngineEventData()
        )
        prior: list[DagsterEvent] = []
        while page := self._events.pop():
            prior.extend(page)
        yield from prior
        self._handler.resume(prior)
        self._observe_costs(prior)  # steps that ended unobserved before the run worker died
        undecided = undecided_steps(prior)
        failures = [u.event for u in undecided.values() if u.event.is_step_failure]
        held = {id(event) for event in failures}
        replay = [event for event in prior if id(event) not in held]
        steps = self._active.rebuild_from_events(replay)  # each says what became of it
        known = self._active.get_known_state()  # once: it copies the run's
        for step in steps:
            self._running[step.key] = step
            context = self._step_handler_context(step, known)
            yield from self._handler.adopt(context, undecided.get(step.key))
        for event in self._executor.classify(failures):
            self._handle(event)  # a failure no backend attempt stands behind: decided now

    def _interrupted(self) -> None:
        plan_context = self._plan_context
        self._active.mark_interrupted()
        if plan_context.instance.run_will_resume(plan_context.run_id):
            DagsterEvent.engine_event(
                plan_context,
                "Executor received termination signal, not forwarding to steps because run "
                "will be resumed",
                EngineEventData(
                    metadata={"steps_in_flight": MetadataValue.text(str(self._running.keys()))}
                ),
            )
            return
        DagsterEvent.engine_event(
            plan_context,
            "Executor received termination signal, forwarding to steps",
            EngineEventData.interrupted(list(self._running.keys())),
        )
        self._terminate_all()

    def _terminate_after_error(self) -> None:
        if self._active.is_complete or not self._running:
            return
        DagsterEvent.engine_event(
            self._plan_context,
            "Unexpected exception while steps were still in-progress - terminating running steps:",
            EngineEventData(
                metadata={"steps_interrupted": MetadataValue.text(str(list(self._running)))},
                error=serializable_error_info_from_exc_info(sys.exc_info()),
            ),
        )
        self._terminate_all()

    def _terminate_all(self) -> None:
        for step in self._running.values():
            self._handler.terminate(step.key, self._plan_context.for_step(step))

    def _step_handler_context(
        self, step: ExecutionStep, known: KnownExecutionState
    ) -> StepHandlerContext:
        plan_context = self._plan_context
        instance = plan_context.plan_data.instance
        return StepHandlerContext(
            instance=instance,
            plan_context=plan_context,
            steps=[step],
            execute_step_args=ExecuteStepArgs(
                job_origin=plan_context.reconstructable_job.get_python_origin(),
                run_id=plan_context.dagster_run.run_id,
                step_keys_to_execute=[step.key],
                instance_ref=instance.get_ref(),
                retry_mode=self._executor.retries.for_inner_plan(),
                known_state=known_state_for(known, step),
                should_verify_step=False,
                print_serialized_events=False,
            ),
            dagster_run=plan_context.dagster_run,
        )


def known_state_for(known: KnownExecutionState, step: ExecutionStep) -> KnownExecutionState:
    """The part of the run's known state a step's process reads: of the outputs produced so
    far, those of the steps its inputs come from (what its `can_load` asks); the rest whole.

    The whole state names every output the run has produced, so launching the N-th step of a
    fan-out would serialize N handles into its arguments: O(N²) over the run. Trimmed, a
    launch costs the size of the step's inputs.
    """
    upstream = step.get_execution_dependency_keys()
    return known._replace(
        ready_outputs={h for h in known.ready_outputs if h.step_key in upstream},
        step_output_versions={
            h: v for h, v in known.step_output_versions.items() if h.step_key in upstream
        },
    )


def run_plan(
    executor: AIExecutor, plan_context: PlanOrchestrationContext, plan: ExecutionPlan
) -> Iterator[DagsterEvent]:
    """Run every step of `plan` through `executor`'s handler (see `StepLoop`)."""
    DagsterEvent.engine_event(
        plan_context, "Starting execution with step handler AIStepHandler.", EngineEventData()
    )
    with InstanceConcurrencyContext(plan_context.instance, plan_context.dagster_run) as pools:
        with ActiveExecution(
            plan,
            retry_mode=executor.retries,
            max_concurrent=executor.max_concurrent,
            tag_concurrency_limits=executor.tag_concurrency_limits,
            instance_concurrency_context=pools,
            step_dependency_config=executor.step_dependency_config,
        ) as active:
            yield from StepLoop(executor, plan_context, active).run()


__all__ = ["RunEvents", "StepLoop", "known_state_for", "run_plan"]
