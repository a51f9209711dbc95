"""`SlurmBackend`: each step attempt is one sbatch job (a gang allocation for multi-node steps).

Example:
    >>> backend = SlurmBackend(SlurmConfig(workdir="/shared/k8s_ai"))  # doctest: +SKIP
    >>> handle = backend.submit(request)  # doctest: +SKIP
    >>> backend.status(handle).state  # doctest: +SKIP
    <StepState.PENDING: 'Pending'>
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from ...errors import SubmitError
from ..base import (
    FailureReason,
    JobHandle,
    LaunchRequest,
    ResourceUsage,
    StepStatus,
    refuse_device_fields,
)
from .accounting import Measured
from .cli import CliTransport, NodeLimits, Runner
from .config import SlurmConfig
from .rest import HttpCall, RestTransport
from .script import BatchJob, batch_job, render_script
from .states import MEMORY_KILL_STATES, RUNNING_STATES, JobInfo, memory_kill, to_step_status

# How much of a failed job's output is searched for slurmstepd's memory kill: the line comes
# last when the step process itself was killed, before the step process's own failure report
# when a gang's srun step was.
OUTPUT_TAIL_BYTES = 1024**2


class Transport(Protocol):
    """What the backend needs from the CLI or REST transport."""

    def prepare_dir(self, path: str) -> None: ...
    def submit(self, job: BatchJob, script: str, step_key: str) -> str: ...
    def find(self, job: BatchJob) -> str | None: ...
    def run_jobs(self, run_id: str) -> list[str]: ...
    def job_info(self, job_id: str) -> JobInfo | None: ...
    def cancel(self, job_id: str) -> None: ...
    def max_rss_bytes(self, job_id: str) -> int | None: ...
    def measured(self, job_id: str) -> Measured | None: ...
    def limits(self, partition: str | None) -> NodeLimits: ...


ACCOUNTING_SETTLE_S = 3.0  # how long an ended job's end may take to reach slurmdbd
ACCOUNTING_POLL_S = 0.25  # between reads of its record meanwhile


@dataclass
class _Attempt:
    """What the backend remembers about a job it submitted."""

    job: BatchJob
    last_info: JobInfo | None = None
    max_rss_bytes: int | None = None
    rss_sampled_at: float = float("-inf")
    memory_kill: str | None = None  # read once from the output when the job ended FAILED
    measured: Measured | None = None  # slurmdbd's record, read once the job has ended
    unwanted_requeue: StepStatus | None = None  # set once a no-requeue job was requeued


class SlurmBackend:
    """The Slurm backend (cli or rest transport).

    Args:
        config: the executor's `slurm:` config.
        runner: runs Slurm commands (cli transport); default: subprocesses on this host.
        http: performs HTTP calls (rest transport); default: urllib.
        clock: wall-clock seconds (epoch), used for usage of running jobs.
        rss_sample_interval_s: how often `status()` samples a running job's RSS with sstat
            (CLI transport; a finished job's peak RSS and CPU time come from slurmdbd through
            either transport, `accounting.py`).

    Example:
        >>> SlurmBackend(SlurmConfig(partition="gpu")).name
        'slurm'
    """

    name = "slurm"
    status_interval_s = 1.0  # each status() is a squeue/REST call: at most one per second

    def __init__(
        self,
        config: SlurmConfig,
        *,
        runner: Runner | None = None,
        http: HttpCall | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        rss_sample_interval_s: float = 30.0,
    ) -> None:
        self.config = config
        self._transport: Transport = (
            RestTransport(config, http)
            if config.transport == "rest"
            else CliTransport(config, runner)
        )
        self._clock = clock
        self._sleep = sleep
        self._rss_interval_s = rss_sample_interval_s
        self._limits: NodeLimits | None = None
        self._attempts: dict[str, _Attempt] = {}

    def limits(self) -> NodeLimits:
        """The configured partition's size (queried once, then cached)."""
        if self._limits is None:
            self._limits = self._transport.limits(self.config.partition)
        return self._limits

    def validate(self, request: LaunchRequest) -> None:
        """Refuse a step the partition can never run, before anything is submitted."""
        refuse_device_fields(request, "slurm")
        spec, step, limits = request.spec, request.step_key, self.limits()
        where = f"Slurm partition '{limits.partition}'"
        if spec.nodes > len(limits.nodes):
            raise SubmitError(
                f"step '{step}': nodes={spec.nodes} but {where} has {len(limits.nodes)} nodes; "
                f"lower compute(nodes=...) to at most {len(limits.nodes)} or set "
                "slurm.partition to a larger partition"
            )
        if spec.gpu > limits.max_gpus_per_node:
            raise SubmitError(
                f"step '{step}': gpus_per_node={spec.gpu} but no node of {where} has more than "
                f"{limits.max_gpus_per_node} GPUs; lower compute(gpus_per_node=...) or use a "
                "GPU partition"
            )
        cpus = max(1, int(-(-spec.cpu // 1))) * spec.tasks_per_node
        if limits.max_cpus_per_node and cpus > limits.max_cpus_per_node:
            raise SubmitError(
                f"step '{step}': {cpus} CPUs per node (cpu × tasks_per_node) but no node of "
                f"{where} has more than {limits.max_cpus_per_node}; lower cpu or tasks_per_node"
            )
        memory_mb = -(-spec.memory_bytes // 1024**2)
        if limits.max_memory_mb_per_node and memory_mb > limits.max_memory_mb_per_node:
            raise SubmitError(
                f"step '{step}': memory={spec.memory_quantity} per node but no node of {where} "
                f"has more than {limits.max_memory_mb_per_node}M; lower compute(memory=...)"
            )

    def submit(self, request: LaunchRequest) -> JobHandle:
        """Validate, write nothing but the job directory, and sbatch one job."""
        self.validate(request)
        job = batch_job(request, self.config)
        self._transport.prepare_dir(job.job_dir)
        job_id = self._transport.submit(job, render_script(job), request.step_key)
        self._attempts[job_id] = _Attempt(job)
        return JobHandle(backend=self.name, job_id=job_id, step_key=request.step_key)

    def adopt(self, request: LaunchRequest) -> JobHandle | None:
        """The attempt's job if slurmctld still knows it (`Adopts`: its name and comment
        carry run, step and attempt), watched as if just submitted; None if not. A job
        purged from slurmctld (MinJobAge after it ended) is not found."""
        job = batch_job(request, self.config)
        job_id = self._transport.find(job)
        if job_id is None:
            return None
        self._attempts[job_id] = _Attempt(job)
        return JobHandle(backend=self.name, job_id=job_id, step_key=request.step_key)

    def cancel_run(self, run_id: str) -> list[str]:
        """scancel every pending or running job of `run_id` (`CancelsRuns`: its comment names
        the run), whichever run worker submitted it."""
        jobs = self._transport.run_jobs(run_id)
        for job_id in jobs:
            self._transport.cancel(job_id)
        return jobs

    def status(self, handle: JobHandle) -> StepStatus:
        info = self._transport.job_info(handle.job_id)
        attempt = self._attempts.get(handle.job_id)
        if info is None:
            return StepStatus.failed(
                FailureReason.LOST,
                f"Slurm job {handle.job_id} of step '{handle.step_key}' is unknown to "
                "slurmctld (purged or cancelled outside the run)",
            )
        if attempt is not None:
            attempt.last_info = info
            self._sample_rss(handle.job_id, attempt, info)
            lost = self._unwanted_requeue(handle, attempt, info)
            if lost is not None:
                return lost
        if info.state.upper() in MEMORY_KILL_STATES:
            info = replace(info, memory_kill=self._memory_kill(info, attempt))
        return to_step_status(info)

    def _unwanted_requeue(
        self, handle: JobHandle, attempt: _Attempt, info: JobInfo
    ) -> StepStatus | None:
        """A job submitted without requeue that Slurm requeued anyway is cancelled and its step
        reported lost, as the CLI transport's `--no-requeue` job ends NODE_FAIL: slurmrestd's
        v0.0.38 (Slurm 22.05) ignores `requeue: false`, so a node failure requeues the job."""
        if attempt.unwanted_requeue is None and not attempt.job.requeue and info.restarts:
            self._transport.cancel(handle.job_id)
            attempt.unwanted_requeue = StepStatus.failed(
                FailureReason.LOST,
                f"Slurm job {handle.job_id} of step '{handle.step_key}' was requeued (a node "
                "failure, NODE_FAIL, or `scontrol requeue`) although submitted without "
                "requeue, which this slurmrestd ignores (Slurm 22.05's v0.0.38 does); it was "
                "cancelled and the step is relaunched as after a lost node. Use "
                "slurm.transport: cli, or a slurmrestd serving v0.0.40 or later, to have "
                "Slurm end it NODE_FAIL itself",
                node=info.batch_host,
            )
        return attempt.unwanted_requeue

    def _memory_kill(self, info: JobInfo, attempt: _Attempt | None) -> str:
        """slurmstepd's line in the job's output saying it killed a step over its memory."""
        if attempt is not None and attempt.memory_kill is not None:
            return attempt.memory_kill
        output = attempt.job.output_path if attempt is not None else info.output_path
        found = memory_kill(_tail(output, OUTPUT_TAIL_BYTES), info.job_id) if output else ""
        if attempt is not None:
            attempt.memory_kill = found
        return found

    def _sample_rss(self, job_id: str, attempt: _Attempt, info: JobInfo) -> None:
        now = self._clock()
        if info.state not in RUNNING_STATES or now - attempt.rss_sampled_at < self._rss_interval_s:
            return
        attempt.rss_sampled_at = now
        rss = self._transport.max_rss_bytes(job_id)
        if rss is not None:
            attempt.max_rss_bytes = max(rss, attempt.max_rss_bytes or 0)

    def logs(self, handle: JobHandle, tail_lines: int | None = None) -> str:
        """The job's output file (append mode: every requeue of the attempt)."""
        attempt = self._attempts.get(handle.job_id)
        output: str | None
        if attempt is not None:
            output = attempt.job.output_path
        else:
            info = self._transport.job_info(handle.job_id)
            output = info.output_path if info else None
        path = Path(output or "")
        if not output or not path.is_file():
            return ""
        with path.open(errors="replace") as handle_file:
            if tail_lines is None:
                return handle_file.read()
            return "".join(deque(handle_file, maxlen=tail_lines))

    def cancel(self, handle: JobHandle) -> None:
        """scancel the job; a job that already ended is left alone."""
        self._transport.cancel(handle.job_id)

    def usage(self, handle: JobHandle) -> ResourceUsage:
        """Allocated CPU-, memory- and GPU-seconds, wall time and nodes; measured: the largest
        RSS (sampled while running, and slurmdbd's once ended) and the CPU time used
        (slurmdbd's, once ended)."""
        attempt = self._attempts.get(handle.job_id)
        info = self._transport.job_info(handle.job_id)
        if info is None and attempt is not None:
            info = attempt.last_info
        if info is None or info.start_time is None:
            return ResourceUsage()
        measured = self._measured(handle.job_id, attempt, info)
        end = info.end_time if info.end_time is not None else self._clock()
        wall = max(0.0, end - info.start_time)
        job = attempt.job if attempt else None
        nodes = len(info.nodes) or (job.nodes if job else 1)
        memory_mb = info.memory_mb or (job.memory_mb * nodes if job else 0)
        gpus = info.gpus or (job.gpus_per_node * nodes if job else 0)
        peaks = [attempt.max_rss_bytes if attempt else None, measured.max_rss_bytes]
        known = [peak for peak in peaks if peak is not None]
        return ResourceUsage(
            cpu_seconds=info.cpus * wall,
            memory_gib_seconds=memory_mb / 1024 * wall,
            gpu_seconds=gpus * wall,
            wall_seconds=wall,
            max_rss_bytes=max(known) if known else None,
            nodes=info.nodes,
            cpu_used_seconds=measured.cpu_used_seconds,
            queued_seconds=max(0.0, info.start_time - (info.submit_time or info.start_time)),
        )

    def _measured(self, job_id: str, attempt: _Attempt | None, info: JobInfo) -> Measured:
        """slurmdbd's record of an ended job (asked until it has one, then kept); nothing for
        a job still pending or running. slurmctld sends the end a moment after the job ends:
        a record that has not ended yet is read again, for at most `ACCOUNTING_SETTLE_S`."""
        if attempt is not None and attempt.measured is not None:
            return attempt.measured
        if info.end_time is None or info.state in RUNNING_STATES:
            return Measured()
        found = self._transport.measured(job_id)
        deadline = self._clock() + ACCOUNTING_SETTLE_S
        for _ in range(int(ACCOUNTING_SETTLE_S / ACCOUNTING_POLL_S)):  # bounded if clock stalls
            if found is None or found.ended or self._clock() >= deadline:
                break
            self._sleep(ACCOUNTING_POLL_S)
            found = self._transport.measured(job_id)
        if found is None or not found.ended:
            return Measured()
        if attempt is not None:
            attempt.measured = found
        return found

    def close(self) -> None:
        """Nothing to release: every call is a short command or HTTP request."""


def _tail(path: str, max_bytes: int) -> str:
    """The last `max_bytes` of a file as text ("" when it cannot be read)."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - max_bytes))
            return file.read().decode(errors="replace")
    except OSError:
        return ""
