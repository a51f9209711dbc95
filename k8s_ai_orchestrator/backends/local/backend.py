"""The embedded local backend: each step is a real subprocess on this machine.

Admission: steps wait, in submission order, until their CPU, memory and GPU requests fit the
local capacity, counting what every run of the instance holds on this machine (`ledger.py`).
Memory limits are enforced the way a kernel cgroup would: the resident set of the step's whole
process tree is sampled and the tree is killed at the limit (reported as OOMKilled, exit 137).
With a `MemoryGrowth` policy, a step whose memory passes `grow_at` of its limit has the limit
raised in place (× factor, capped) when the machine-wide ledger has room for it; the step keeps
running in the same process. Without room it is killed at its limit as before.
A step killed by SIGTERM from outside the executor is reported as Preempted.

Example:
    >>> backend = LocalBackend(LocalCapacity(cpus=2, memory_bytes=4 * 1024**3, gpus=0))
    >>> backend.capacity.describe()
    '2 CPU / 4.0Gi / 0 GPU'
    >>> backend.close()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ...errors import ConfigError
from ...memorygrowth import MemoryGrowth
from ...proctree import TreeSampler, peak_rss
from ...spec import ComputeSpec, format_memory
from ..base import (
    FailureReason,
    GrowOutcome,
    GrowResult,
    JobHandle,
    LaunchRequest,
    Resize,
    ResourceUsage,
    StepStatus,
    refuse_device_fields,
)
from .attempt import LocalAttempt
from .capacity import LocalCapacity, local_cpu, local_gpus, local_memory
from .launch import (
    AdoptedProcess,
    ProcessLauncher,
    StartMethod,
    kill_step,
    stop_run,
)
from .ledger import AdmissionLedger, Want
from .meter import AttemptMeter
from .outcome import OOM_EXIT_CODE, exit_status, oom_message

Oversize = Literal["run_alone", "fail"]


class LocalBackend:
    """Runs steps as local process trees with admission control and RSS-based OOM kills.

    Args:
        capacity: what may run at once (`LocalCapacity.detect()` by default).
        oversize: a step larger than the whole capacity either runs alone ("run_alone") or
            is refused at submit ("fail").
        sample_interval_s: how often RSS is sampled and queued steps are admitted.
        log_dir: where each attempt's stdout/stderr is written and kept; by default a
            `k8s-ai-local-*` folder in the temp dir that `close()` removes (the executor has
            forwarded the logs to the run's event log by then).
        start_method: "spawn" starts each step with a fresh interpreter; "forkserver" forks
            it from a process that has Dagster imported already (as Dagster's multiprocess
            executor does), which starts steps faster.
        clock: monotonic clock, injectable for tests.
        ledger: the machine-wide admission ledger shared with the instance's other runs
            (`AdmissionLedger()`: under `$DAGSTER_HOME`, or a per-user temp folder).
        growth: when to raise a running step's memory limit in place (None: never; a step
            at its limit is OOMKilled).
    """

    name = "local"

    def __init__(
        self,
        capacity: LocalCapacity | None = None,
        *,
        oversize: Oversize = "run_alone",
        sample_interval_s: float = 0.05,
        log_dir: str | None = None,
        start_method: StartMethod = "spawn",
        clock: Callable[[], float] = time.monotonic,
        ledger: AdmissionLedger | None = None,
        growth: MemoryGrowth | None = None,
    ) -> None:
        self.capacity = capacity or LocalCapacity.detect()
        if self.capacity.cpus <= 0 or self.capacity.memory_bytes <= 0:
            raise ConfigError(
                f"local capacity {self.capacity.describe()} cannot run anything: "
                "set local.cpus and local.memory above 0, or omit them to detect the machine's"
            )
        self.oversize = oversize
        self.ledger = ledger or AdmissionLedger()
        self.growth = growth
        self._interval = sample_interval_s
        self._own_log_dir = not log_dir  # a temp folder of ours: removed by close()
        self._log_dir = Path(log_dir or tempfile.mkdtemp(prefix="k8s-ai-local-"))
        self._clock = clock
        self._launcher = ProcessLauncher(start_method)
        self._lock = threading.Lock()
        self._queue: deque[LocalAttempt] = deque()
        self._running: dict[str, LocalAttempt] = {}
        self._attempts: dict[str, LocalAttempt] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._listeners: list[Callable[[str], None]] = []
        self._thread = threading.Thread(target=self._loop, name="k8s-ai-local", daemon=True)
        self._thread.start()

    # -- Backend protocol -------------------------------------------------------------------

    def placement_warnings(self, spec: ComputeSpec) -> list[str]:
        """Why this step will not run exactly as sized here (shown as warning events); none
        under `oversize: fail`, where `submit` refuses such a step."""
        return [] if self.oversize == "fail" else self.capacity.placement_warnings(spec)

    def validate(self, request: LaunchRequest) -> None:
        """Every check `submit` makes, creating nothing: under `oversize: fail`, a step larger
        than the machine or asking for more GPUs than it has raises `SubmitError`, and so does
        a step asking for GPU partitions."""
        refuse_device_fields(request, "local")
        if self.oversize == "fail":
            self.capacity.refuse_oversize(request.step_key, request.spec)

    def submit(self, request: LaunchRequest) -> JobHandle:
        self.validate(request)
        job_id = _job_id(request)
        handle = JobHandle(backend=self.name, job_id=job_id, step_key=request.step_key)
        log_path = self._log_dir / f"{_safe_file_name(job_id)}.log"
        alone = not self.capacity.cpu_memory_fit(request.spec)
        attempt = LocalAttempt(request, handle, log_path, alone=alone, queued_at=self._clock())
        with self._lock:
            self._attempts[job_id] = attempt
            self._queue.append(attempt)
        self._wake.set()
        return handle

    def adopt(self, request: LaunchRequest) -> JobHandle | None:
        """The attempt's step process if it still runs (`Adopts`; its run worker died): found
        by its ledger claim (run, step and attempt), start-time checked so a reused PID is
        never taken. The claim becomes this backend's and its memory limit is enforced from
        now on; its usage counts from the process's start; its exit status is unknown (its
        own events tell). None if it is not running."""
        job_id = _job_id(request)
        claim = self.ledger.adopt(request.run_id, job_id)
        if claim is None:
            return None
        handle = JobHandle(backend=self.name, job_id=job_id, step_key=request.step_key)
        log_path = Path(claim.log_path or self._log_dir / f"{_safe_file_name(job_id)}.log")
        attempt = LocalAttempt(request, handle, log_path, claim.alone, claim.gpu_ids, adopted=True)
        attempt.process = AdoptedProcess(claim.pid, claim.pid_started)
        ran = max(0.0, time.time() - claim.pid_started) if claim.pid_started else 0.0
        attempt.started_at = self._clock() - ran  # it ran while no run worker watched
        attempt.meter = AttemptMeter(claim.memory_bytes, attempt.started_at)
        attempt.status = StepStatus.running(node="localhost")
        with self._lock:
            self._attempts[job_id] = self._running[job_id] = attempt
        self._wake.set()
        return handle

    def cancel_run(self, run_id: str) -> list[str]:
        """Stop every step process of `run_id` the machine's ledger holds (`CancelsRuns`),
        whichever run worker started it: SIGTERM, SIGKILL after a grace period."""
        return stop_run(self.ledger, run_id)

    def status(self, handle: JobHandle) -> StepStatus:
        with self._lock:
            return self._attempts[handle.job_id].status

    def logs(self, handle: JobHandle, tail_lines: int | None = None) -> str:
        path = self._attempts[handle.job_id].log_path
        if not path.exists():
            return ""
        text = path.read_text(errors="replace")
        if tail_lines is None:
            return text
        return "\n".join(text.splitlines()[-tail_lines:])

    def cancel(self, handle: JobHandle) -> None:
        with self._lock:
            attempt = self._attempts.get(handle.job_id)
            if attempt is None or attempt.status.is_terminal:
                return
            if attempt in self._queue:
                self._queue.remove(attempt)
                self.ledger.release(attempt.handle.job_id)
                self._set_status(
                    attempt, StepStatus.failed(FailureReason.CANCELLED, "cancelled while queued")
                )
                return
            attempt.kill_reason = FailureReason.CANCELLED
            attempt.kill_message = "cancelled by the executor"
        self._terminate(attempt, attempt.request.grace_period_s)
        self._reap(attempt, block=True)

    def usage(self, handle: JobHandle) -> ResourceUsage:
        with self._lock:
            attempt = self._attempts[handle.job_id]
            if attempt.started_at is None or attempt.meter is None:
                return ResourceUsage()
            spec, now = attempt.request.spec, attempt.ended_at or self._clock()
            gpus = min(local_gpus(spec), self.capacity.gpus)
            return attempt.meter.usage(local_cpu(spec), gpus, now)

    def grow_memory(self, handle: JobHandle, new_limit_bytes: int) -> GrowResult:
        """Raise a running attempt's memory limit in place, if the machine has room for it.

        Example:
            >>> backend = LocalBackend(LocalCapacity(cpus=1, memory_bytes=1024**3))
            >>> gone = JobHandle("local", "never-submitted", "tiles")
            >>> backend.grow_memory(gone, 2 * 1024**3).reason
            'the attempt is not running'
            >>> backend.close()
        """
        with self._lock:
            attempt = self._running.get(handle.job_id)
        if attempt is None or attempt.meter is None:
            return GrowResult.refused("the attempt is not running")
        meter = attempt.meter
        if new_limit_bytes <= meter.limit_bytes:
            return GrowResult.refused(
                f"{format_memory(new_limit_bytes)} is not above the limit "
                f"{format_memory(meter.limit_bytes)}"
            )
        if attempt.alone:
            return GrowResult.refused(
                f"it runs alone, larger than the local capacity {self.capacity.describe()}"
            )
        verdict = self.ledger.grow(handle.job_id, new_limit_bytes, self.capacity)
        if not verdict.admitted:
            return GrowResult.refused(verdict.reason)
        meter.set_limit(new_limit_bytes, self._clock())
        return GrowResult.accepted()

    def resizes(self, handle: JobHandle) -> tuple[Resize, ...]:
        """Every in-place growth tried for the attempt so far, in order (none for an attempt
        this backend does not hold: one that never started before its run worker died)."""
        with self._lock:
            attempt = self._attempts.get(handle.job_id)
        return tuple(attempt.resizes) if attempt is not None else ()

    def close(self) -> None:
        """Stop the monitor thread, kill anything still running and remove the temp log
        folder (nothing is left behind)."""
        with self._lock:
            running = list(self._running.values())
            self._queue.clear()
        for attempt in running:
            attempt.kill_reason = FailureReason.CANCELLED
            self._terminate(attempt, grace_s=1.0)
            self._reap(attempt, block=True)
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)
        self.ledger.leave()
        if self._own_log_dir:
            shutil.rmtree(self._log_dir, ignore_errors=True)
        for adopted in (a for a in self._attempts.values() if a.adopted):
            adopted.log_path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # the dead run worker's folder, once empty
                adopted.log_path.parent.rmdir()

    # -- monitor thread ---------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._reap_and_police()
            self._admit()
            self._wake.wait(self._interval)
            self._wake.clear()

    def on_change(self, callback: Callable[[str], None]) -> None:
        """`callback(job_id)` whenever an attempt's status changes (`ReportsChanges`)."""
        self._listeners.append(callback)

    def _set_status(self, attempt: LocalAttempt, status: StepStatus) -> None:
        if status == attempt.status:
            return
        attempt.status = status
        for listener in self._listeners:
            listener(attempt.handle.job_id)

    def _admit(self) -> None:
        with self._lock:
            while self._queue:
                head = self._queue[0]
                verdict = self.ledger.admit(self._want(head), self.capacity)
                if not verdict.admitted:
                    self._set_status(head, StepStatus.pending("WaitingForCapacity", verdict.reason))
                    return
                self._queue.popleft()
                head.gpu_ids = verdict.gpu_ids
                self._start(head)

    def _want(self, attempt: LocalAttempt) -> Want:
        spec, request = attempt.request.spec, attempt.request
        return Want(
            run_id=request.run_id,
            step_key=request.step_key,
            job_id=attempt.handle.job_id,
            cpus=local_cpu(spec),
            memory_bytes=local_memory(spec),
            gpus=min(local_gpus(spec), self.capacity.gpus),
            alone=attempt.alone,
            size=spec.describe(),
            parent_step_key=request.parent_step_key,
        )

    def _start(self, attempt: LocalAttempt) -> None:
        env = {**os.environ, **attempt.request.env}
        if attempt.gpu_ids or attempt.request.spec.gpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in attempt.gpu_ids)
        try:
            attempt.process = self._launcher.start(attempt.request.command, env, attempt.log_path)
        except OSError as exc:
            self.ledger.release(attempt.handle.job_id)
            self._set_status(
                attempt, StepStatus.failed(FailureReason.ERROR, f"could not start: {exc}")
            )
            return
        self.ledger.started(attempt.handle.job_id, attempt.process.pid, str(attempt.log_path))
        attempt.started_at = self._clock()
        queued = attempt.started_at - (attempt.queued_at or attempt.started_at)
        attempt.meter = AttemptMeter(local_memory(attempt.request.spec), attempt.started_at, queued)
        self._set_status(attempt, StepStatus.running(node="localhost"))
        self._running[attempt.handle.job_id] = attempt

    def _reap_and_police(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for attempt in running:
            if not self._reap(attempt, block=False):
                self._police(attempt)

    def _police(self, attempt: LocalAttempt) -> None:
        """Sample the attempt's tree; grow its limit when due; kill it past its limit."""
        meter, process = attempt.meter, attempt.process
        if meter is None or process is None:
            return
        if attempt.tree is None or attempt.tree.pid != process.pid:
            attempt.tree = TreeSampler(process.pid)
        rss = attempt.tree.charged_memory(meter.limit_bytes)
        meter.observe(self._clock(), rss, attempt.tree.cpu_seconds(), peak_rss(process.pid))
        if self.growth is not None:
            self._grow_if_due(attempt, meter, rss, self.growth)
        if rss > meter.limit_bytes:
            attempt.kill_reason = FailureReason.OOM_KILLED
            attempt.kill_message = oom_message(rss, meter.limit_bytes, attempt.growth_refused)
            kill_step(process, signal.SIGKILL)
            self._reap(attempt, block=True)

    def _grow_if_due(
        self, attempt: LocalAttempt, meter: AttemptMeter, rss: int, growth: MemoryGrowth
    ) -> None:
        old = meter.limit_bytes
        target = growth.target(old, rss, meter.trend.rate())
        if target is None:
            return
        if target <= old:
            result = GrowResult.refused(
                f"the limit is already oom_escalation.max_memory={format_memory(old)}"
            )
        else:
            result = self.grow_memory(attempt.handle, target)
        accepted = result.outcome is GrowOutcome.ACCEPTED
        if accepted or result.reason != attempt.growth_refused:
            with self._lock:
                attempt.resizes.append(Resize(old, target, rss, result.outcome, result.reason))
        attempt.growth_refused = "" if accepted else result.reason

    def _terminate(self, attempt: LocalAttempt, grace_s: float) -> None:
        kill_step(attempt.process, signal.SIGTERM)
        process = attempt.process
        if process is None:
            return
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        kill_step(process, signal.SIGKILL)

    def _reap(self, attempt: LocalAttempt, *, block: bool) -> bool:
        process = attempt.process
        if process is None:
            return True
        code = process.wait() if block else process.poll()
        if code is None:
            return False
        kill_step(process, signal.SIGKILL)  # leftovers of the tree
        with self._lock:
            if attempt.handle.job_id not in self._running:
                return True
            del self._running[attempt.handle.job_id]
            self.ledger.release(attempt.handle.job_id)
            attempt.ended_at = self._clock()
            self._set_status(attempt, exit_status(code, attempt.kill_reason, attempt.kill_message))
        self._wake.set()
        return True


def _job_id(request: LaunchRequest) -> str:
    return f"{request.run_id[:8]}-{request.step_key}-{request.attempt}"


def _safe_file_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


__all__ = ["LocalBackend", "OOM_EXIT_CODE"]
