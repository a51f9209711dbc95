"""The attempts of one Pipes program: launch, watch, relaunch or fail — the executor's rules.

Each attempt has its own Pipes session (so only the last attempt's reported results count);
the program's size, tenant and backend were resolved before the first submit. OOMKilled
attempts are relaunched with memory × factor and Preempted/Evicted/Lost ones at the same size
(`launch.relaunch.decide`), each decision written to the run's log.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from dagster import (
    DagsterEventType,
    PipesClientCompletedInvocation,
    PipesMessageReader,
    PipesSession,
    RunsFilter,
)

from .. import stepenv
from ..backends.base import (
    RELAUNCH_REASONS,
    Backend,
    Capabilities,
    FailureReason,
    LaunchRequest,
    StepState,
    StepStatus,
)
from ..errors import BudgetError, CheckpointError, PipesProgramError
from ..launch.attempts import LOG_TAIL_LINES, StepAttempts
from ..launch.budget import CapWatch, estimate, over_budget, spent
from ..launch.cost import step_prices, work_since_save
from ..launch.lifecycle import Attempt, Observation, Verdict, launch_note
from ..launch.plan import PlannedStep, launch_request
from ..launch.relaunch import StepHistory, decide
from ..launch.settings import ExecutorSettings
from ..spec import ComputeSpec
from .messages import PodLogMessageReader
from .supervise import AttemptWatcher

OpenSession = Callable[[PipesMessageReader], AbstractContextManager[PipesSession]]
MakeReader = Callable[[int], PipesMessageReader]


class PipesAttempts:
    """Runs one program attempt after another until it succeeds or may not be relaunched."""

    def __init__(
        self,
        backend: Backend,
        planned: PlannedStep,
        settings: ExecutorSettings,
        context: Any,
        command: Sequence[str],
        *,
        last_save: Callable[[], float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._backend = backend
        self._last_save = last_save  # when its checkpoint was last saved (unix time)
        self._caps = Capabilities.of(backend)
        self._clock = clock  # timeouts and durations
        self._wall_clock = wall_clock  # each attempt's times in the summary
        self._planned = planned
        self._settings = settings
        self._context = context
        self._command = list(command)
        self._live = StepAttempts(
            planned.spec, planned.backend, planned.tenant, StepHistory(planned.key)
        )
        growth = settings.growth
        self._live.grow_at = growth.grow_at if growth else 0.0
        self._attempt_rows: list[dict[str, Any]] = []
        self._prices = step_prices(settings.prices, planned.backend, planned.tenant)
        currency = self._prices.currency if self._prices else ""
        self._cap_watch = CapWatch(settings.budget, currency) if settings.budget else None
        self._budget_stop = ""  # why the running program was stopped for its budget

    def validate(self, env: Mapping[str, str]) -> None:
        """Every check the backend's submit makes, creating nothing (the pre-flight); then the
        `budget`, against the program's estimate from its earlier runs (`BudgetError`)."""
        if self._caps.validates is not None:
            self._caps.validates.validate(self._request(self._planned.spec, 0, env))
        budget, key = self._settings.budget, self._planned.key
        if budget is None:
            return
        prices = self._prices
        runs = program_walls(self._context, key, self._settings.auto_sizing.runs)
        guess = estimate(key, self._planned.spec, runs, prices)
        refused = over_budget(
            {key: guess} if guess else {}, budget, prices.currency if prices else ""
        )
        if refused:
            raise BudgetError(f"program '{key}': " + "; ".join(refused[key]))

    def run(
        self, open_session: OpenSession, make_reader: MakeReader, env: Mapping[str, str]
    ) -> PipesClientCompletedInvocation:
        """Launch attempts until one succeeds; the completed invocation of that one."""
        live = self._live
        while True:
            spec = live.spec.with_memory(live.next_memory) if live.next_memory else live.spec
            live.history = live.history.launched(spec.memory_bytes)
            attempt = len(live.history.memory_tried) - 1
            reader = make_reader(attempt)
            with open_session(reader) as session:
                bootstrap = session.get_bootstrap_env_vars()
                status = self._run_attempt(
                    self._request(spec, attempt, {**env, **bootstrap}), reader
                )
            if self._budget_stop:
                raise BudgetError(self._budget_stop)
            if status.state is StepState.SUCCEEDED:
                message, meta = live.summary(self._planned.key, self._settings.prices)
                self._log(message)
                return PipesClientCompletedInvocation(
                    session,
                    metadata={
                        **meta,
                        "program": self._planned.key,
                        "attempts_usage": self._attempt_rows,
                    },
                )
            self._relaunch_or_fail(status)

    def _run_attempt(self, request: LaunchRequest, reader: PipesMessageReader) -> StepStatus:
        live, backend = self._live, self._backend
        launched_at, launched_wall = self._clock(), self._wall_clock()
        handle = backend.submit(request)
        attempt = live.attempt = Attempt(
            handle, launched_at, self._planned.where, request.spec.timeout_s, "timeout=..."
        )
        job = f"job {handle.job_id}"
        planned, spec = self._planned, request.spec
        self._log(launch_note(planned, spec, request.attempt, handle.job_id, job, "program")[0])
        on_poll = self._message_poller(reader)
        resizes = self._caps.resizes
        watcher = AttemptWatcher(
            backend,
            attempt,
            self._log,
            observe=lambda status, now: self._hold_to_budget(
                live.observe(status, now, resizes.resizes(handle) if resizes else ()), now
            ),
            on_poll=on_poll,
            poll_interval_s=self._settings.poll_interval_s,
            clock=self._clock,
        )
        try:
            status = watcher.wait()
        except BaseException:
            backend.cancel(handle)
            self._log(f"Cancelled '{request.step_key}' ({live.backend} job {handle.job_id})")
            raise
        ended_at = self._clock()
        on_poll(final=True)
        if self._budget_stop:
            status = StepStatus.failed(FailureReason.CANCELLED, self._budget_stop)

        def wall(at: float | None) -> float | None:
            return None if at is None else round(launched_wall + at - launched_at, 3)

        usage = backend.usage(handle)
        if status.state is StepState.FAILED:
            reason = status.reason or FailureReason.ERROR
            live.failed_for(reason, self._redone(reason, wall(attempt.running_at), wall(ended_at)))
        live.finished(usage, status)
        self._attempt_rows.append(
            {
                "attempt": request.attempt + 1,
                "job": handle.job_id,
                "cpu": request.spec.cpu,
                "memory": request.spec.memory_quantity,
                "gpu": request.spec.gpu,
                "outcome": (status.reason or status.state).value,
                "launched_at": wall(launched_at),
                "running_at": wall(attempt.running_at),
                "ended_at": wall(ended_at),
                "cpu_seconds": round(usage.cpu_seconds, 2),
                "memory_gib_seconds": round(usage.memory_gib_seconds, 2),
                "gpu_seconds": round(usage.gpu_seconds, 2),
                "wall_seconds": round(usage.wall_seconds, 2),
            }
        )
        return status

    def _hold_to_budget(self, seen: Observation, now: float) -> Observation:
        """The running program against the budget's caps (`CapWatch`): each warning logged
        once; a stop gives the attempt up (cancelled: SIGTERM, then SIGKILL after its grace)."""
        if self._cap_watch is None or seen.status.state is not StepState.RUNNING:
            return seen
        key = self._planned.key
        so_far = {key: spent(self._live.reserved_so_far(now), self._live.spec, self._prices)}
        warnings, stop = self._cap_watch.verdict(key, so_far)
        for _cap, why in warnings:
            self._context.log.warning(f"Budget: program '{key}' {why}")
        if not stop:
            return seen
        self._budget_stop = f"program '{key}' {stop}"
        return replace(seen, verdict=Verdict.GIVE_UP)

    def _redone(
        self, reason: FailureReason, ran_from: float | None, ended: float | None
    ) -> float | None:
        """The work a relaunch after `reason` redoes: since the program's last checkpoint save
        while it ran (`checkpoints` given to `run`); None (all of it) when unknown."""
        if reason not in RELAUNCH_REASONS or ended is None or self._last_save is None:
            return None
        try:
            saved_at = self._last_save()
        except CheckpointError:
            return None
        return work_since_save(saved_at, ran_from, ended)

    def _message_poller(self, reader: PipesMessageReader) -> Callable[..., None]:
        """Reads the pod's log for Pipes messages (Kubernetes); file readers tail on their own."""
        logs = self._caps.logs
        attempt = self._live.attempt

        def poll(final: bool = False) -> None:
            if not isinstance(reader, PodLogMessageReader) or logs is None or attempt is None:
                return

            def read(offset: int) -> tuple[str, int]:
                return logs.logs_since(attempt.handle, offset)

            if final:
                reader.drain(read)
            else:
                reader.poll(read)

        return poll

    def _relaunch_or_fail(self, status: StepStatus) -> None:
        live = self._live
        reason = status.reason or FailureReason.ERROR  # `failed_for` noted it
        decision = decide(self._settings.relaunch, live.history, reason)
        if decision.relaunch:
            live.record_relaunch(reason, decision.memory_bytes)
            self._log(f"Relaunching: {decision.message}")
            return
        assert live.attempt is not None
        tail = self._backend.logs(live.attempt.handle, tail_lines=LOG_TAIL_LINES)
        failure = live.describe_failure(self._planned.key, status, tail, LOG_TAIL_LINES)
        raise PipesProgramError(f"{decision.message}\n{failure}" if decision.message else failure)

    def _request(self, spec: ComputeSpec, attempt: int, env: Mapping[str, str]) -> LaunchRequest:
        run_id = self._context.run.run_id
        return launch_request(
            self._settings,
            self._planned,
            spec,
            run_id=run_id,
            attempt=attempt,
            command=self._command,
            preemptions=self._live.history.preemptions,
            labels={"dagster/job": self._context.run.job_name},
            env=env,
            raw_command=True,
            parent_step_key=_parent_step(run_id),
        )

    def _log(self, message: str) -> None:
        self._context.log.info(message)


def program_walls(context: Any, program: str, runs: int) -> list[tuple[str, float]]:
    """(run id, seconds `program` held its size, all attempts) in the last `runs` earlier runs
    of this run's job that ran it, newest first: from its summary, the materialization's
    metadata (`program`, `wall_seconds`)."""
    instance, run = context.instance, context.run
    earlier = instance.get_runs(RunsFilter(job_name=run.job_name), limit=runs * 4 + 1)
    found: list[tuple[str, float]] = []
    for past in earlier:
        if len(found) >= runs:
            break
        if past.run_id == run.run_id:
            continue
        for record in instance.all_logs(
            past.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
        ):
            meta = record.asset_materialization.metadata if record.asset_materialization else {}
            name, wall = meta.get("program"), meta.get("wall_seconds")
            if name is not None and name.value == program and wall is not None:
                found.append((past.run_id, float(wall.value)))
                break
    return found


def _parent_step(run_id: str) -> str:
    """The `ai_executor` step this command is launched from ("" outside one, or another run's)."""
    if os.environ.get(stepenv.RUN_ID) != run_id:
        return ""
    return os.environ.get(stepenv.STEP_KEY, "")
