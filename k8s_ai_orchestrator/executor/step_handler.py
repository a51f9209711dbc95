"""The one StepHandler behind `ai_executor`: resolve a step's spec, route it, watch it. Per
step a `StepAttempts`: its observer (`launch.lifecycle`) says what a status means, `Relaunches`
decides relaunches, `BudgetWatch` holds it to the budget, this module turns notes into engine
events and verdicts into Dagster's health results (last log lines: `LogTails`)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

from dagster._core.events import DagsterEvent
from dagster._core.execution.context.system import IStepContext, PlanOrchestrationContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.executor.step_delegating.step_handler.base import StepHandlerContext
from dagster._utils.error import SerializableErrorInfo

from ..backends.base import Backend, Capabilities, ResourceUsage, StepState, StepStatus
from ..launch.attempts import LOG_TAIL_LINES, StepAttempts
from ..launch.backends import make_backend
from ..launch.lifecycle import Attempt, Verdict, launch_note, read_status
from ..launch.plan import PlannedStep
from ..launch.settings import ExecutorSettings
from .attention import Attention
from .budget_watch import BudgetWatch
from .log_tails import LogTails
from .reattach import reattach
from .relaunching import Relaunches, without_relaunches
from .right_sizing import size_first_attempt
from .step_events import (
    RecordedSteps,
    Undecided,
    engine_event,
    forward_logs,
    recorded_steps,
    terminal_event_count,
    warning_event,
)
from .step_requests import StepRequests, single_key
from .validation import RunCheck, check_budget, check_run


class AIStepHandler:
    """Routes each step to its backend and watches it for the run's loop (`loop.StepLoop`)."""

    def __init__(self, settings: ExecutorSettings, clock: Any = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._backends: dict[str, tuple[Backend, Capabilities]] = {}
        self._live: dict[str, StepAttempts] = {}
        self._plan_context: PlanOrchestrationContext | None = None
        self._plan: ExecutionPlan | None = None
        self._planned: dict[str, PlannedStep] = {}
        self._relaunches = Relaunches(settings, self._refresh, self._event)
        self.attention = Attention(clock)  # the backends' change feeds, the steps' timers
        self._requests = StepRequests(settings)
        self._recorded: RecordedSteps | None = None  # a resumed run worker's (`resume`)
        self.tails = LogTails(clock)  # ended steps' attempts whose log is read on
        self.budget = BudgetWatch(settings, warning_event)  # running steps against the caps

    def bind(self, plan_context: PlanOrchestrationContext, plan: ExecutionPlan) -> RunCheck:
        """Plan and validate every step before any submit (resumed: plan only); what was refused."""
        self._plan_context, self._plan = plan_context, plan
        self._requests.plan_context = plan_context
        steps = [(step.key, step.tags or {}) for step in plan.get_steps_to_execute_in_topo_order()]
        req, resumed = self._requests, plan_context.resume_from_failure
        self._planned, check = check_run(steps, req.plan, self.backend, req.first, resumed)
        return check_budget(check, self._planned, self._settings, plan_context)

    def backend(self, name: str) -> Backend:
        return self._backend(name)[0]

    def _backend(self, name: str) -> tuple[Backend, Capabilities]:
        if name not in self._backends:
            built = make_backend(name, self._settings)
            if (caps := Capabilities.of(built)).changes is not None:
                caps.changes.on_change(self.attention.on_change)
            self._backends[name] = (built, caps)
        return self._backends[name]

    def launch_step(self, step_handler_context: StepHandlerContext) -> Iterator[DagsterEvent]:
        args, key = step_handler_context.execute_step_args, single_key(step_handler_context)
        step_context, known = step_handler_context.get_step_context(key), args.known_state
        previous = known.previous_retry_attempts.get(key, 0) if known else 0
        live = self._live.get(key) or self._new_live(key, step_handler_context, previous)
        sizing_note, sizing_meta = size_first_attempt(live, self._settings, self._plan_context)
        spec = live.spec.with_memory(live.next_memory) if live.next_memory else live.spec
        live.history = live.history.launched(spec.memory_bytes)
        attempt = len(live.history.memory_tried) - 1
        args = without_relaunches(args, key, live.history.relaunches)
        backend, caps = self._backend(live.backend)
        planned, request = self._requests.attempt(live, step_handler_context, spec, attempt, args)
        for note in caps.placement.placement_warnings(spec) if caps.placement else []:
            yield warning_event(step_context, f"Warning: {note}", {"warning": note})
        live.terminal_events_at_launch = previous and terminal_event_count(self._plan_context, key)
        live.launched()
        resumed = caps.adopts if self._recorded is not None else None  # never launch twice
        handle = (resumed and resumed.adopt(request)) or backend.submit(request)
        live.attempt = Attempt(handle, self._clock(), planned.where, spec.timeout_s)
        self.attention.launched(handle.job_id, key)
        message, meta = launch_note(planned, spec, attempt, handle.job_id, sizing_note)
        meta |= {**sizing_meta, **live.launch_metadata()}
        yield self._event(step_context, message, meta)

    def resume(self, events: Iterable[DagsterEvent]) -> None:
        """This run worker resumes a run: `events` (all the run's) tell what its steps did."""
        self._recorded = self.budget.restore(RecordedSteps.of(events))

    def adopt(self, hctx: StepHandlerContext, last: Undecided | None) -> Iterator[DagsterEvent]:
        """Take over a step in flight when its run worker died (`reattach`, after `resume`);
        `last`: its undecided failure or unlaunched retry (`step_events.Undecided`)."""
        key, recorded = single_key(hctx), self._recorded or RecordedSteps()
        live = self._new_live(key, hctx, 0)
        failed = last is not None and last.event.is_step_failure
        live.terminal_events_at_launch = recorded.terminal.get(key, 0) - failed
        fresh = last is not None and last.event.is_step_up_for_retry
        if last is not None and fresh and not last.counted:
            self.account_retry(key, last.event)
        request_of = partial(self._requests.attempt, live, hctx)
        adopts = self._backend(live.backend)[1].adopts
        found = reattach(live, adopts, request_of, recorded, self._clock(), fresh)
        if found is None:  # never launched: launch it now
            yield from self.launch_step(hctx)
            return
        if found.attempt is None:
            del self._live[key]  # followed through its own events only
        else:
            live.attempt = found.attempt
            self.attention.launched(found.attempt.handle.job_id, key)
        write = warning_event if found.warning else self._event
        yield write(hctx.get_step_context(key), found.message, found.metadata)

    def check(self, key: str, step_context: IStepContext) -> str | None:
        """Why the step's attempt is unhealthy, or None (healthy, or its own failure decides)."""
        live = self._live.get(key)
        if live is None or live.attempt is None:
            return None
        backend, caps = self._backend(live.backend)
        attempt = live.attempt
        if not attempt.due(self._clock(), caps.status_interval_s):
            self.attention.arm(key, attempt.checked_at + caps.status_interval_s)
            return None
        status, verdict = self._observe(live, step_context)
        stop = self.budget.check(key, self._live, status, self._clock(), step_context)
        if verdict is Verdict.GIVE_UP or stop:
            live.cancelled = True
            backend.cancel(attempt.handle)
            live.fail_message = stop or status.message
            return live.fail_message
        if status.state is not StepState.PENDING:
            forward_logs(live, caps.logs, step_context, self._clock(), status.is_terminal)
        attempt.schedule(self._clock(), caps, measured=live.measured)
        self.attention.arm(key, min(attempt.next_check_at, self.budget.due(key)))
        if status.state is not StepState.FAILED:
            return None
        if terminal_event_count(self._plan_context, key) > live.terminal_events_at_launch:
            return None  # the step's own failure event decides
        tail = "" if attempt.vanished else backend.logs(attempt.handle, tail_lines=LOG_TAIL_LINES)
        return live.describe_failure(key, status, tail, LOG_TAIL_LINES)

    def terminate(self, key: str, step_context: IStepContext) -> None:
        """Cancel the step's attempt (the run was terminated)."""
        live = self._live.get(key)
        if live is not None and live.attempt is not None and not live.attempt.vanished:
            live.cancelled = True
            self.backend(live.backend).cancel(live.attempt.handle)
            job = live.attempt.handle.job_id
            self._event(step_context, f"Cancelled step '{key}' ({live.backend} job {job})")

    def live(self, key: str) -> StepAttempts | None:
        return self._live.get(key)

    def note(self, key: str, message: str) -> None:
        self._event(self._step_context(key), message)

    def attempt_ended(self, key: str) -> bool:
        """Whether the step's attempt is known to have ended (True for one never launched)."""
        live = self._live.get(key)
        return live is None or live.attempt is None or self._refresh(live).is_terminal

    def relaunch_if_infrastructure(
        self, key: str, error: SerializableErrorInfo | None, failure: DagsterEvent | None
    ) -> DagsterEvent | None:
        """A retry event when the attempt failed for an infrastructure reason and may relaunch."""
        if (live := self._live.get(key)) is None:
            return None
        caps = self._backend(live.backend)[1]
        return self._relaunches.after_failure(live, caps, self._step_context(key), error, failure)

    def account_retry(self, key: str, retry: DagsterEvent) -> None:
        """A STEP_UP_FOR_RETRY the step process wrote itself (see `Relaunches.account_retry`)."""
        live = self._live.get(key)
        if live is not None:
            caps = self._backend(live.backend)[1]
            self._relaunches.account_retry(live, caps, self._step_context(key), retry)

    def fail_message(self, key: str) -> str:
        """Why the executor failed the step ("" when the step's own failure says it)."""
        live = self._live.get(key)
        return live.fail_message if live is not None else ""

    def finish_attempt(self, key: str, *, final: bool) -> None:
        """Account the attempt; after the last one, write the step's summary event."""
        live = self._live.get(key)
        if live is None or live.attempt is None:
            return
        (backend, caps), step_context = self._backend(live.backend), self._step_context(key)
        status = self._observe(live, step_context)[0]  # an ended one's last read waits for it
        self.tails.after_final(live, status, (backend, caps), step_context)
        gone = live.attempt.vanished
        live.finished(ResourceUsage() if gone else backend.usage(live.attempt.handle), status)
        self.attention.ended(live.attempt.handle.job_id)
        if final:
            self.tails.release(live.attempt, caps)
            self.budget.ended(key, self._live.pop(key))
            self._event(step_context, *live.summary(key, self._settings.prices))

    def close(self) -> None:
        for live in self._live.values():
            if live.attempt is not None and not (live.cancelled or live.attempt.vanished):
                self.backend(live.backend).cancel(live.attempt.handle)
        for backend, _caps in self._backends.values():
            backend.close()

    def _observe(
        self, live: StepAttempts, step_context: IStepContext
    ) -> tuple[StepStatus, Verdict]:
        """Read the live attempt's status and write what the observer notes of it."""
        assert live.attempt is not None
        backend, caps = self._backend(live.backend)
        status = read_status(backend, live.attempt)
        resizes = caps.resizes.resizes(live.attempt.handle) if caps.resizes else ()
        seen = live.observe(status, self._clock(), resizes)
        for note in seen.notes:
            self._event(step_context, note.message, note.metadata)
        return seen.status, seen.verdict

    def _refresh(self, live: StepAttempts) -> StepStatus:
        """The live attempt's status, its notes written (growths absorbed before a decision)."""
        return self._observe(live, self._step_context(live.history.step_key))[0]

    def _new_live(self, key: str, ctx: StepHandlerContext, previous: int) -> StepAttempts:
        step = self._planned.get(key) or self._requests.plan(key, ctx.step_tags[key])
        live = StepAttempts.of(step, self._settings.growth)
        if previous or self._recorded:  # rebuild from this run's events (read once on resume)
            (self._recorded or recorded_steps(self._plan_context)).restore(live)
        self._live[key] = live
        return live

    def _step_context(self, key: str) -> IStepContext:
        assert self._plan_context is not None and self._plan is not None
        step = self._plan.get_step_by_key(key)
        return self._plan_context.for_step(step)  # type: ignore[arg-type]

    _event = staticmethod(engine_event)


__all__ = ["AIStepHandler"]
