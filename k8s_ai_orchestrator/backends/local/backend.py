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

import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ...errors import ConfigError, SubmitError
from ...spec import ComputeSpec, format_memory
from ..base import (
    FailureReason,
    GrowOutcome,
    GrowResult,
    JobHandle,
    LaunchRequest,
    MemoryGrowth,
    Resize,
    ResourceUsage,
    StepStatus,
)
from .capacity import LocalCapacity, local_cpu, local_gpus, local_memory
from .launch import ProcessLauncher, StartMethod, StepProcess
from .ledger import AdmissionLedger, Want
from .meter import AttemptMeter
from .outcome import OOM_EXIT_CODE, exit_status, format_memory_approx
from .proctree import charged_memory, kill_group, tree_cpu_seconds

Oversize = Literal["run_alone", "fail"]


@dataclass
class _Attempt:
    request: LaunchRequest
    handle: JobHandle
    log_path: Path
    alone: bool  # larger than the machine: runs with nothing else
    gpu_ids: tuple[int, ...] = ()
    process: StepProcess | None = None
    started_at: float | None = None
    ended_at: float | None = None
    status: StepStatus = field(default_factory=lambda: StepStatus.pending("WaitingForCapacity"))
    meter: AttemptMeter | None = None  # limit, peak memory and CPU, from the start
    resizes: list[Resize] = field(default_factory=list)  # in-place growths tried
    growth_refused: str = ""  # why the last growth was refused ("" if none was)
    kill_reason: FailureReason | None = None
    kill_message: str = ""


class LocalBackend:
    """Runs steps as local process trees with admission control and RSS-based OOM kills.

    Args:
        capacity: what may run at once (`LocalCapacity.detect()` by default).
        oversize: a step larger than the whole capacity either runs alone ("run_alone") or
            is refused at submit ("fail").
        sample_interval_s: how often RSS is sampled and queued steps are admitted.
        log_dir: where each attempt's stdout/stderr is written.
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
        self._log_dir = Path(log_dir or tempfile.mkdtemp(prefix="k8s-ai-local-"))
        self._clock = clock
        self._launcher = ProcessLauncher(start_method)
        self._lock = threading.Lock()
        self._queue: deque[_Attempt] = deque()
        self._running: dict[str, _Attempt] = {}
        self._attempts: dict[str, _Attempt] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="k8s-ai-local", daemon=True)
        self._thread.start()

    # -- Backend protocol -------------------------------------------------------------------

    def placement_warnings(self, spec: ComputeSpec) -> list[str]:
        """Why this step will not run exactly as sized here (shown as warning events)."""
        notes = []
        if not self.capacity.fits(spec):
            notes.append(
                f"step needs {spec.describe()}, more than this machine's "
                f"{self.capacity.describe()}: it runs alone, with the memory limit still enforced"
            )
        if spec.gpu and self.capacity.gpus == 0:
            notes.append(f"step asks for {spec.gpu} GPU but this machine has none: it runs on CPU")
        return notes

    def submit(self, request: LaunchRequest) -> JobHandle:
        spec = request.spec
        cpu_mem_fit = local_cpu(spec) <= self.capacity.cpus and local_memory(spec) <= (
            self.capacity.memory_bytes
        )
        if not cpu_mem_fit and self.oversize == "fail":
            raise SubmitError(
                f"step '{request.step_key}' needs {spec.describe()} but the local backend has "
                f"{self.capacity.describe()} and local.oversize is 'fail': run it on a cluster "
                "backend, shrink it with compute(...), or set local.oversize: run_alone"
            )
        job_id = f"{request.run_id[:8]}-{request.step_key}-{request.attempt}"
        handle = JobHandle(backend=self.name, job_id=job_id, step_key=request.step_key)
        log_path = self._log_dir / f"{_safe_file_name(job_id)}.log"
        attempt = _Attempt(request, handle, log_path, alone=not cpu_mem_fit)
        with self._lock:
            self._attempts[job_id] = attempt
            self._queue.append(attempt)
        self._wake.set()
        return handle

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
                attempt.status = StepStatus.failed(
                    FailureReason.CANCELLED, "cancelled while queued"
                )
                return
            attempt.kill_reason = FailureReason.CANCELLED
            attempt.kill_message = "cancelled by the executor"
        self._terminate(attempt, attempt.request.grace_period_s)
        self._reap(attempt, block=True)

    def usage(self, handle: JobHandle) -> ResourceUsage:
        with self._lock:
            attempt = self._attempts[handle.job_id]
            meter = attempt.meter
            if attempt.started_at is None or meter is None:
                return ResourceUsage()
            now = attempt.ended_at or self._clock()
            wall = now - attempt.started_at
            spec = attempt.request.spec
            return ResourceUsage(
                cpu_seconds=local_cpu(spec) * wall,
                memory_gib_seconds=meter.memory_byte_seconds(now) / 1024**3,
                gpu_seconds=min(local_gpus(spec), self.capacity.gpus) * wall,
                wall_seconds=wall,
                max_rss_bytes=meter.max_rss or None,
                nodes=("localhost",),
                cpu_used_seconds=round(meter.cpu_seconds, 3),
                peak_cpu=meter.peak_cpu(now),
            )

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
        """Every in-place growth tried for the attempt so far, in order."""
        with self._lock:
            return tuple(self._attempts[handle.job_id].resizes)

    def close(self) -> None:
        """Stop the monitor thread and kill anything still running (nothing is left behind)."""
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

    # -- monitor thread ---------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._reap_and_police()
            self._admit()
            self._wake.wait(self._interval)
            self._wake.clear()

    def _admit(self) -> None:
        with self._lock:
            while self._queue:
                head = self._queue[0]
                verdict = self.ledger.admit(self._want(head), self.capacity)
                if not verdict.admitted:
                    head.status = StepStatus.pending("WaitingForCapacity", verdict.reason)
                    return
                self._queue.popleft()
                head.gpu_ids = verdict.gpu_ids
                self._start(head)

    def _want(self, attempt: _Attempt) -> Want:
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

    def _start(self, attempt: _Attempt) -> None:
        env = {**os.environ, **attempt.request.env}
        if attempt.gpu_ids or attempt.request.spec.gpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in attempt.gpu_ids)
        try:
            attempt.process = self._launcher.start(attempt.request.command, env, attempt.log_path)
        except OSError as exc:
            self.ledger.release(attempt.handle.job_id)
            attempt.status = StepStatus.failed(FailureReason.ERROR, f"could not start: {exc}")
            return
        self.ledger.started(attempt.handle.job_id, attempt.process.pid)
        attempt.started_at = self._clock()
        attempt.meter = AttemptMeter(local_memory(attempt.request.spec), attempt.started_at)
        attempt.status = StepStatus.running(node="localhost")
        self._running[attempt.handle.job_id] = attempt

    def _reap_and_police(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for attempt in running:
            if not self._reap(attempt, block=False):
                self._police(attempt)

    def _police(self, attempt: _Attempt) -> None:
        """Sample the attempt's tree; grow its limit when due; kill it past its limit."""
        meter, process = attempt.meter, attempt.process
        if meter is None or process is None:
            return
        rss = _charged_memory(process, meter.limit_bytes)
        meter.observe(self._clock(), rss, tree_cpu_seconds(process.pid))
        if self.growth is not None:
            self._grow_if_due(attempt, meter, rss, self.growth)
        if rss > meter.limit_bytes:
            attempt.kill_reason = FailureReason.OOM_KILLED
            attempt.kill_message = (
                f"resident memory {format_memory_approx(rss)} exceeded the limit "
                f"{format_memory(meter.limit_bytes)}"
                + (
                    f"; growing it in place was refused: {attempt.growth_refused}"
                    if attempt.growth_refused
                    else ""
                )
            )
            _kill_group(process, signal.SIGKILL)
            self._reap(attempt, block=True)

    def _grow_if_due(
        self, attempt: _Attempt, meter: AttemptMeter, rss: int, growth: MemoryGrowth
    ) -> None:
        old = meter.limit_bytes
        target = growth.target(old, rss)
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

    def _terminate(self, attempt: _Attempt, grace_s: float) -> None:
        _kill_group(attempt.process, signal.SIGTERM)
        process = attempt.process
        if process is None:
            return
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        _kill_group(process, signal.SIGKILL)

    def _reap(self, attempt: _Attempt, *, block: bool) -> bool:
        process = attempt.process
        if process is None:
            return True
        code = process.wait() if block else process.poll()
        if code is None:
            return False
        _kill_group(process, signal.SIGKILL)  # leftovers of the tree
        with self._lock:
            if attempt.handle.job_id not in self._running:
                return True
            del self._running[attempt.handle.job_id]
            self.ledger.release(attempt.handle.job_id)
            attempt.ended_at = self._clock()
            attempt.status = exit_status(code, attempt.kill_reason, attempt.kill_message)
        self._wake.set()
        return True


def _charged_memory(process: StepProcess | None, limit: int) -> int:
    return charged_memory(process.pid, limit) if process is not None else 0


def _kill_group(process: StepProcess | None, sig: signal.Signals) -> None:
    if process is not None:
        kill_group(process.pid, sig)
        try:  # a forked step that has not called setsid yet is not a group leader
            os.kill(process.pid, sig)
        except ProcessLookupError:
            pass


def _safe_file_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


__all__ = ["LocalBackend", "OOM_EXIT_CODE"]
