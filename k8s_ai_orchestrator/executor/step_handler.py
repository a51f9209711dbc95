"""The one StepHandler behind `ai_executor`: resolve a step's spec, route it, watch it.

It keeps, per step, the live attempt and its infrastructure history (memory tried,
preemptions), decides relaunches with `relaunch.decide`, and writes engine events that say
where each step runs, why it is Pending, and what each relaunch changed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData, StepRetryData
from dagster._core.execution.context.system import IStepContext, PlanOrchestrationContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.executor.step_delegating.step_handler.base import (
    CheckStepHealthResult,
    StepHandler,
    StepHandlerContext,
)
from dagster._utils.error import SerializableErrorInfo
from dagster_shared.record import copy as copy_record

from .. import stepenv
from ..backends.base import (
    RELAUNCH_REASONS,
    Backend,
    FailureReason,
    LaunchRequest,
    StepState,
    StepStatus,
)
from ..errors import BackendError
from ..launch.attempts import StepAttempts
from ..launch.backends import make_backend
from ..launch.plan import PlannedStep, plan_step
from ..launch.relaunch import StepHistory, decide
from ..launch.settings import ExecutorSettings
from ..spec import ComputeSpec
from ..tags import TAG_PREFIX, spec_from_tags
from .right_sizing import new_resizes, sized_spec
from .step_events import (
    history_from_events,
    interrupted,
    interrupted_error,
    metadata_values,
    user_output,
)
from .validation import RunCheck, check_run

LOG_TAIL_LINES = 30
LOG_FORWARD_INTERVAL_S = 1.0  # how often new remote log lines become an engine event
LOG_FORWARD_MAX_CHARS = 8000
# A step Pending with no reason yet (the backends report none while a pod is unbound or its
# containers are being created) is starting as usual: said only once it lasts this long; a
# reason from the scheduler, a quota or the kubelet is said at once.
STARTING_QUIET_S = 5.0
DAGSTER_K8S_TAGS = ("dagster-k8s/config", "dagster-k8s/resource_requirements")


class AIStepHandler(StepHandler):
    """Routes each step to its backend; see `k8s_ai_orchestrator.executor.definition`."""

    def __init__(self, settings: ExecutorSettings) -> None:
        self._settings = settings
        self._backends: dict[str, Backend] = {}
        self._live: dict[str, StepAttempts] = {}
        self._plan_context: PlanOrchestrationContext | None = None
        self._plan: ExecutionPlan | None = None
        self._planned: dict[str, PlannedStep] = {}

    @property
    def name(self) -> str:
        return "AIStepHandler"

    # -- run start ----------------------------------------------------------------------

    def bind(self, plan_context: PlanOrchestrationContext, plan: ExecutionPlan) -> RunCheck:
        """Plan and validate every step of the run before anything is submitted.

        Returns what was refused (see `validation.check_run`); the executor fails the run
        with it before the first launch when it is not empty.
        """
        self._plan_context, self._plan = plan_context, plan
        steps = [(step.key, step.tags or {}) for step in plan.get_steps_to_execute_in_topo_order()]
        self._planned, check = check_run(steps, self._plan_step, self.backend, self._first_request)
        return check

    def _plan_step(self, step_key: str, tags: Mapping[str, str]) -> PlannedStep:
        spec = spec_from_tags(tags, self._settings.size_classes, step=step_key)
        run_tags = self._plan_context.dagster_run.tags if self._plan_context else {}
        return plan_step(self._settings, step_key, spec, run_tags.get(TAG_PREFIX + "tenant"))

    def _first_request(self, step: PlannedStep, tags: Mapping[str, str]) -> LaunchRequest:
        """The launch request of the step's first attempt, as validated at run start."""
        run_id = self._plan_context.run_id if self._plan_context else "validation"
        command = [sys.executable, "-m", "dagster", "api", "execute_step"]
        return self._request(step, step.spec, run_id, 0, command, tags)

    def _request(
        self,
        step: PlannedStep,
        spec: ComputeSpec,
        run_id: str,
        attempt: int,
        command: list[str],
        tags: Mapping[str, str],
        preemptions: int = 0,
    ) -> LaunchRequest:
        left = self._settings.relaunch.max_preemption_retries - preemptions
        return LaunchRequest(
            run_id=run_id,
            step_key=step.key,
            attempt=attempt,
            command=command,
            env=stepenv.step_env(
                backend=step.backend,
                run_id=run_id,
                step_key=step.key,
                attempt=attempt,
                spec=spec,
                grace_s=self._settings.grace_period_s,
                preemption_relaunches_left=left,
            ),
            spec=spec,
            tenant=step.tenant,
            grace_period_s=self._settings.grace_period_s,
            labels=self._launch_labels(tags),
        )

    def backend(self, name: str) -> Backend:
        if name not in self._backends:
            self._backends[name] = make_backend(name, self._settings)
        return self._backends[name]

    # -- StepHandler --------------------------------------------------------------------

    def launch_step(self, step_handler_context: StepHandlerContext) -> Iterator[DagsterEvent]:
        args = step_handler_context.execute_step_args
        key = _single_key(step_handler_context)
        step_context = step_handler_context.get_step_context(key)
        known = args.known_state
        previous = known.previous_retry_attempts.get(key, 0) if known is not None else 0
        live = self._live.get(key) or self._new_live(key, step_handler_context, previous)
        sizing_note, sizing_meta = self._size_from_history(key, live)
        spec = live.spec.with_memory(live.next_memory) if live.next_memory else live.spec
        live.history = live.history.launched(spec.memory_bytes)
        attempt = len(live.history.memory_tried) - 1
        if known is not None and live.history.relaunches:
            counts = dict(known.previous_retry_attempts)
            counts[key] = max(0, counts.get(key, 0) - live.history.relaunches)
            args = copy_record(args, known_state=known._replace(previous_retry_attempts=counts))
        backend = self.backend(live.backend)
        planned = PlannedStep(key, live.spec, live.backend, live.tenant)
        tags = step_handler_context.step_tags[key]
        request = self._request(
            planned,
            spec,
            args.run_id,
            attempt,
            _step_command(args),
            tags,
            preemptions=live.history.preemptions,
        )
        for note in getattr(backend, "placement_warnings", lambda _s: [])(spec):
            yield self._event(step_context, f"Warning: {note}", {"warning": note})
        live.terminal_events_at_launch = self._terminal_event_count(key) if previous else 0
        live.handle = backend.submit(request)
        live.launched_at, live.last_note, live.running_noted = time.monotonic(), "", False
        live.resizes_seen = 0
        where = live.backend + (f" tenant '{live.tenant}'" if live.tenant else "")
        sized = f"; {sizing_note}" if sizing_note else ""
        yield self._event(
            step_context,
            f"Launching step '{key}' on {where} with {spec.describe()} (attempt {attempt + 1})"
            + sized,
            {
                **sizing_meta,
                "backend": live.backend,
                "tenant": live.tenant or "",
                "size": spec.size or "custom",
                "cpu": spec.cpu,
                "memory": spec.memory_quantity,
                "gpu": spec.gpu,
                "nodes": spec.nodes,
                "attempt": attempt + 1,
                "job": live.handle.job_id,
            },
        )

    def check_step_health(self, step_handler_context: StepHandlerContext) -> CheckStepHealthResult:
        key = _single_key(step_handler_context)
        live = self._live.get(key)
        if live is None or live.handle is None:
            return CheckStepHealthResult.healthy()
        backend = self.backend(live.backend)
        now = time.monotonic()
        if now - live.checked_at < getattr(backend, "status_interval_s", 0.0):
            return CheckStepHealthResult.healthy()
        live.checked_at = now
        status = self._status(live)
        step_context = step_handler_context.get_step_context(key)
        if status.state is StepState.PENDING:
            return self._check_pending(key, live, status, step_context)
        if status.state is StepState.RUNNING and not live.running_noted:
            live.running_noted = True
            self._event(step_context, f"Step '{key}' is running on {status.node or live.backend}")
        if status.state is not StepState.PENDING:
            self._forward_logs(key, live, step_context, final=status.is_terminal)
            self._write_resizes(key, live)
        if status.state is not StepState.FAILED:
            return CheckStepHealthResult.healthy()
        if self._terminal_event_count(key) > live.terminal_events_at_launch:
            return CheckStepHealthResult.healthy()  # the step's own failure event decides
        return CheckStepHealthResult.unhealthy(self._describe_failure(key, live, status))

    def _check_pending(
        self, key: str, live: StepAttempts, status: StepStatus, step_context: IStepContext
    ) -> CheckStepHealthResult:
        note = status.message or status.reason or "Pending"
        starting = not status.reason and not status.message
        quiet = starting and time.monotonic() - live.launched_at < STARTING_QUIET_S
        if note != live.last_note and not quiet:
            live.last_note = note
            self._event(step_context, f"Step '{key}' is Pending: {note}", {"reason": note})
        timeout = live.spec.timeout_s
        if timeout is None or time.monotonic() - live.launched_at <= timeout:
            return CheckStepHealthResult.healthy()
        live.cancelled = True
        self.backend(live.backend).cancel(live.handle)  # type: ignore[arg-type]
        live.fail_message = (
            f"step '{key}' stayed Pending for more than {timeout:g}s on {live.backend}"
            f"{' tenant ' + repr(live.tenant) if live.tenant else ''}; last reason: {note}. "
            "Free capacity, lower the step's size, or raise compute(timeout=...)"
        )
        return CheckStepHealthResult.unhealthy(live.fail_message)

    def terminate_step(self, step_handler_context: StepHandlerContext) -> Iterator[DagsterEvent]:
        key = _single_key(step_handler_context)
        live = self._live.get(key)
        if live is not None and live.handle is not None:
            live.cancelled = True
            self.backend(live.backend).cancel(live.handle)
            yield self._event(
                step_handler_context.get_step_context(key),
                f"Cancelled step '{key}' ({live.backend} job {live.handle.job_id})",
            )

    # -- used by AIExecutor ---------------------------------------------------------------

    def owns(self, key: str) -> bool:
        return key in self._live

    def attempt_ended(self, key: str) -> bool:
        live = self._live.get(key)
        if live is None or live.handle is None:
            return True
        return self._status(live).is_terminal

    def relaunch_if_infrastructure(
        self, key: str, error: SerializableErrorInfo | None, failure: DagsterEvent | None
    ) -> DagsterEvent | None:
        """A retry event when the attempt failed for an infrastructure reason and may relaunch."""
        live = self._live.get(key)
        if live is None or live.handle is None or live.cancelled:
            return None
        status = self._status(live)
        reason = status.reason if status.state is StepState.FAILED else None
        self._write_resizes(key, live)
        infra = {FailureReason.OOM_KILLED.value, *(r.value for r in RELAUNCH_REASONS)}
        if reason not in infra:
            reason = FailureReason.PREEMPTED.value if interrupted(failure) else None
        if reason is None:
            return None
        decision = decide(self._settings.relaunch, live.history, reason)
        live.reasons.append(reason)
        if not decision.relaunch:
            live.fail_message = decision.message
            return None
        live.record_relaunch(reason, decision.memory_bytes)
        step_context = self._step_context(key)
        why = f" ({status.message})" if status.message else ""
        self._event(step_context, f"Relaunching: {decision.message}{why}", live.history_metadata())
        message = error.message if error else status.message
        retry_error = SerializableErrorInfo(
            message=f"{reason}: {message}", stack=[], cls_name=reason
        )
        live.own_retry_pending = True
        attempt = len(live.history.memory_tried) + 1
        return DagsterEvent.from_step(
            DagsterEventType.STEP_UP_FOR_RETRY,
            step_context,
            StepRetryData(error=retry_error),
            message=f"Relaunch, attempt {attempt}: {decision.message}",
        )

    def account_retry(self, key: str, retry: DagsterEvent) -> None:
        """A STEP_UP_FOR_RETRY the step process wrote itself after a preemption signal.

        With an op RetryPolicy, Dagster turns the interrupt into a policy retry; the executor
        then counts it as a relaunch so that the policy gets its budget back.
        """
        live = self._live.get(key)
        if live is None or live.cancelled:
            return
        if live.own_retry_pending:
            live.own_retry_pending = False
            return
        if not interrupted_error(retry.step_retry_data.error):
            return
        reason, detail = self._disruption_reason(live)
        decision = decide(self._settings.relaunch, live.history, reason)
        live.reasons.append(reason)
        if decision.relaunch:
            live.record_relaunch(reason, decision.memory_bytes)
            why = f" ({detail})" if detail else ""
            self._event(
                self._step_context(key),
                f"Relaunching: {decision.message}{why}",
                live.history_metadata(),
            )

    def failure_error(self, key: str, err: SerializableErrorInfo) -> SerializableErrorInfo:
        live = self._live.get(key)
        if live is None or not live.fail_message:
            return err
        return SerializableErrorInfo(message=live.fail_message, stack=err.stack, cls_name=None)

    def finish_attempt(self, key: str, *, final: bool) -> None:
        """Account the attempt; after the last one, write the step's summary event."""
        live = self._live.get(key)
        if live is None or live.handle is None:
            return
        self._forward_logs(key, live, self._step_context(key), final=True)
        self._write_resizes(key, live)
        live.usage.append(self.backend(live.backend).usage(live.handle))
        if not final:
            return
        del self._live[key]
        message, meta = live.summary(key)
        self._event(self._step_context(key), message, meta)

    def close(self) -> None:
        for live in self._live.values():
            if live.handle is not None and not live.cancelled:
                self.backend(live.backend).cancel(live.handle)
        for backend in self._backends.values():
            backend.close()

    # -- helpers ----------------------------------------------------------------------------

    def _disruption_reason(self, live: StepAttempts) -> tuple[str, str]:
        """What the backend says stopped the attempt (Evicted, Lost...; else Preempted), and
        its words for it (who preempted it, where known) or ""."""
        if live.handle is not None:
            try:
                status = self._status(live)
            except BackendError:
                status = StepStatus.pending()
            if status.reason in {r.value for r in RELAUNCH_REASONS}:
                return str(status.reason), status.message
        return FailureReason.PREEMPTED.value, ""

    def _size_from_history(self, key: str, live: StepAttempts) -> tuple[str, dict[str, Any]]:
        """Size the "auto" fields before the step's first attempt; what the launch says of it."""
        if live.history.memory_tried or not live.spec.is_auto:
            return "", {}
        ctx = self._plan_context
        instance, run = (ctx.instance, ctx.dagster_run) if ctx else (None, None)
        sizing = sized_spec(key, live.spec, self._settings, instance, run)
        live.spec = sizing.spec
        return sizing.note, sizing.metadata or {}

    def _write_resizes(self, key: str, live: StepAttempts) -> None:
        """Engine events for the in-place growths the backend tried since the last look."""
        growth = self._settings.growth
        backend = self.backend(live.backend)
        for message, meta in new_resizes(key, live, backend, growth.grow_at if growth else 0.0):
            self._event(self._step_context(key), message, meta)

    def _status(self, live: StepAttempts) -> StepStatus:
        """The attempt's status; a transient backend error keeps the last known one."""
        assert live.handle is not None
        try:
            live.last_status = self.backend(live.backend).status(live.handle)
        except BackendError as exc:
            if not exc.transient:
                raise
        return live.last_status

    def _new_live(self, key: str, ctx: StepHandlerContext, previous_attempts: int) -> StepAttempts:
        step = self._planned.get(key) or self._plan_step(key, ctx.step_tags[key])
        live = StepAttempts(step.spec, step.backend, step.tenant, StepHistory(key))
        self._restore_history(key, live, previous_attempts)
        self._live[key] = live
        return live

    def _restore_history(self, key: str, live: StepAttempts, previous_attempts: int) -> None:
        """Rebuild the history from this run's engine events (survives a restarted coordinator)."""
        if self._plan_context is None or previous_attempts == 0:
            return
        records = self._plan_context.instance.all_logs(
            self._plan_context.run_id, of_type=DagsterEventType.ENGINE_EVENT
        )
        found = history_from_events(key, (r.dagster_event for r in records if r.dagster_event))
        if found is not None:
            live.history, live.next_memory = found

    def _launch_labels(self, step_tags: Mapping[str, str]) -> dict[str, str]:
        """Job name, plus the dagster-k8s tags a Kubernetes backend reads as job config."""
        labels = {k: v for k, v in step_tags.items() if k in DAGSTER_K8S_TAGS}
        if self._plan_context is not None:
            labels["dagster/job"] = self._plan_context.dagster_run.job_name
        return labels

    def _forward_logs(
        self, key: str, live: StepAttempts, step_context: IStepContext, *, final: bool
    ) -> None:
        """Stream new log lines of a remote attempt into the run's event log."""
        backend = self.backend(live.backend)
        logs_since = getattr(backend, "logs_since", None)
        now = time.monotonic()
        if logs_since is None or live.handle is None:
            return
        if not final and now - live.logs_read_at < LOG_FORWARD_INTERVAL_S:
            return
        live.logs_read_at = now
        try:
            text, live.log_offset = logs_since(live.handle, live.log_offset)
        except BackendError:
            return
        text = user_output(text, self._plan_context.run_id if self._plan_context else "")
        if text.strip():
            lines = text.rstrip("\n")[-LOG_FORWARD_MAX_CHARS:]
            self._event(step_context, f"[{live.backend} log] {key}:\n{lines}")

    def _describe_failure(self, key: str, live: StepAttempts, status: StepStatus) -> str:
        assert live.handle is not None
        tail = self.backend(live.backend).logs(live.handle, tail_lines=LOG_TAIL_LINES)
        return live.describe_failure(key, status, tail, LOG_TAIL_LINES)

    def _terminal_event_count(self, key: str) -> int:
        if self._plan_context is None:
            return 0
        kinds = {
            DagsterEventType.STEP_SUCCESS,
            DagsterEventType.STEP_FAILURE,
            DagsterEventType.STEP_UP_FOR_RETRY,
        }
        records = self._plan_context.instance.get_records_for_run(
            self._plan_context.run_id, of_type=kinds, limit=10_000
        ).records
        return sum(1 for r in records if r.event_log_entry.step_key == key)

    def _step_context(self, key: str) -> IStepContext:
        assert self._plan_context is not None and self._plan is not None
        step = self._plan.get_step_by_key(key)
        return self._plan_context.for_step(step)  # type: ignore[arg-type]

    def _event(
        self, step_context: IStepContext, message: str, meta: Mapping[str, Any] | None = None
    ) -> DagsterEvent:
        metadata = metadata_values(meta or {})
        return DagsterEvent.engine_event(step_context, message, EngineEventData(metadata=metadata))


def _step_command(args: Any) -> list[str]:
    """`python -m dagster api execute_step ...` with the code location's own interpreter."""
    command = list(args.get_command_args())
    if command and command[0] == "dagster":
        return [args.job_origin.executable_path, "-m", "dagster", *command[1:]]
    return command


def _single_key(ctx: StepHandlerContext) -> str:
    keys = ctx.execute_step_args.step_keys_to_execute or []
    assert len(keys) == 1, f"ai_executor launches one step at a time, got {keys}"
    return keys[0]


__all__ = ["AIStepHandler"]
