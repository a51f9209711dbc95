"""The attempts of one Pipes program: launch, watch, relaunch or fail — the executor's rules.

Each attempt has its own Pipes session (so only the last attempt's reported results count);
the program's size, tenant and backend were resolved before the first submit. OOMKilled
attempts are relaunched with memory × factor and Preempted/Evicted/Lost ones at the same size
(`launch.relaunch.decide`), each decision written to the run's log.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from dagster import PipesClientCompletedInvocation, PipesMessageReader, PipesSession

from .. import stepenv
from ..backends.base import Backend, LaunchRequest, StepState, StepStatus
from ..errors import PipesProgramError
from ..launch.attempts import StepAttempts
from ..launch.plan import PlannedStep
from ..launch.relaunch import StepHistory, decide
from ..launch.settings import ExecutorSettings
from ..spec import ComputeSpec
from .messages import PodLogMessageReader
from .supervise import AttemptWatcher

LOG_TAIL_LINES = 30
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
    ) -> None:
        self._backend = backend
        self._planned = planned
        self._settings = settings
        self._context = context
        self._command = list(command)
        self._live = StepAttempts(
            planned.spec, planned.backend, planned.tenant, StepHistory(planned.key)
        )
        self._attempt_rows: list[dict[str, Any]] = []

    def validate(self, env: Mapping[str, str]) -> None:
        """Every check the backend's submit makes, creating nothing (the pre-flight)."""
        validate = getattr(self._backend, "validate", None)
        if validate is not None:
            validate(self._request(self._planned.spec, 0, env))

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
            if status.state is StepState.SUCCEEDED:
                message, meta = live.summary(self._planned.key)
                self._log(message)
                return PipesClientCompletedInvocation(
                    session, metadata={**meta, "attempts_usage": self._attempt_rows}
                )
            self._relaunch_or_fail(status)

    def _run_attempt(self, request: LaunchRequest, reader: PipesMessageReader) -> StepStatus:
        live, backend = self._live, self._backend
        handle = live.handle = backend.submit(request)
        self._log(
            f"Launching '{request.step_key}' on {self._where()} with {request.spec.describe()} "
            f"(attempt {request.attempt + 1}, job {handle.job_id})"
        )
        on_poll = self._message_poller(reader)
        watcher = AttemptWatcher(
            backend,
            handle,
            self._log,
            on_poll=on_poll,
            poll_interval_s=self._settings.poll_interval_s,
            where=self._where(),
        )
        try:
            status = watcher.wait(request.spec.timeout_s)
        except BaseException:
            backend.cancel(handle)
            self._log(f"Cancelled '{request.step_key}' ({live.backend} job {handle.job_id})")
            raise
        on_poll(final=True)
        usage = backend.usage(handle)
        live.usage.append(usage)
        live.last_status = status
        self._attempt_rows.append(
            {
                "attempt": request.attempt + 1,
                "job": handle.job_id,
                "memory": request.spec.memory_quantity,
                "outcome": status.reason or status.state.value,
                "cpu_seconds": round(usage.cpu_seconds, 2),
                "memory_gib_seconds": round(usage.memory_gib_seconds, 2),
                "gpu_seconds": round(usage.gpu_seconds, 2),
                "wall_seconds": round(usage.wall_seconds, 2),
            }
        )
        return status

    def _message_poller(self, reader: PipesMessageReader) -> Callable[..., None]:
        """Reads the pod's log for Pipes messages (Kubernetes); file readers tail on their own."""
        logs_since = getattr(self._backend, "logs_since", None)
        handle = self._live.handle

        def poll(final: bool = False) -> None:
            if not isinstance(reader, PodLogMessageReader) or logs_since is None or not handle:
                return

            def read(offset: int) -> tuple[str, int]:
                return logs_since(handle, offset)  # type: ignore[no-any-return]

            if final:
                reader.drain(read)
            else:
                reader.poll(read)

        return poll

    def _relaunch_or_fail(self, status: StepStatus) -> None:
        live = self._live
        reason = status.reason or status.state.value
        decision = decide(self._settings.relaunch, live.history, reason)
        live.reasons.append(reason)
        if decision.relaunch:
            live.record_relaunch(reason, decision.memory_bytes)
            self._log(f"Relaunching: {decision.message}")
            return
        assert live.handle is not None
        tail = self._backend.logs(live.handle, tail_lines=LOG_TAIL_LINES)
        failure = live.describe_failure(self._planned.key, status, tail, LOG_TAIL_LINES)
        raise PipesProgramError(f"{decision.message}\n{failure}" if decision.message else failure)

    def _request(self, spec: ComputeSpec, attempt: int, env: Mapping[str, str]) -> LaunchRequest:
        planned, settings = self._planned, self._settings
        left = settings.relaunch.max_preemption_retries - self._live.history.preemptions
        run_id = self._context.run.run_id
        step_env = stepenv.step_env(
            backend=planned.backend,
            run_id=run_id,
            step_key=planned.key,
            attempt=attempt,
            spec=spec,
            grace_s=settings.grace_period_s,
            preemption_relaunches_left=left,
        )
        return LaunchRequest(
            run_id=run_id,
            step_key=planned.key,
            attempt=attempt,
            command=self._command,
            env={**step_env, **env},
            spec=spec,
            tenant=planned.tenant,
            grace_period_s=settings.grace_period_s,
            labels={"dagster/job": self._context.run.job_name},
            raw_command=True,
            parent_step_key=_parent_step(run_id),
        )

    def _where(self) -> str:
        tenant = self._planned.tenant
        return self._planned.backend + (f" tenant '{tenant}'" if tenant else "")

    def _log(self, message: str) -> None:
        self._context.log.info(message)


def _parent_step(run_id: str) -> str:
    """The `ai_executor` step this command is launched from ("" outside one, or another run's)."""
    if os.environ.get(stepenv.RUN_ID) != run_id:
        return ""
    return os.environ.get(stepenv.STEP_KEY, "")
