"""Slurm job states → `StepStatus`, and the `JobInfo` both transports report.

A job whose step slurmstepd killed over its memory ends OUT_OF_MEMORY only with the cgroup
OOM killer on a batch step; the sampling enforcement (`JobAcctGatherParams=OverMemoryKill`)
ends it FAILED (reason JobLaunchFailure, exit code 0:9, exactly like a `kill -9`), and a gang
whose srun step was killed ends FAILED with the step process's exit code. What tells them apart
is slurmstepd's line in the job's output (`memory_kill`); such a FAILED job is OOMKilled too.

Example:
    >>> to_step_status(JobInfo("7", "OUT_OF_MEMORY", exit_code=0, signal=9)).reason
    <FailureReason.OOM_KILLED: 'OOMKilled'>
    >>> line = "slurmstepd-n1: error: StepId=7.batch exceeded memory limit (90 > 64), being killed"
    >>> to_step_status(JobInfo("7", "FAILED", exit_code=0, signal=9, memory_kill=line)).reason
    <FailureReason.OOM_KILLED: 'OOMKilled'>
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from ..base import FailureReason, StepStatus

# Slurm base states of a job that has not finished: the step is pending or running.
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING"})

FAILURE_REASONS = {
    "FAILED": FailureReason.ERROR,
    "BOOT_FAIL": FailureReason.LOST,
    "NODE_FAIL": FailureReason.LOST,
    "OUT_OF_MEMORY": FailureReason.OOM_KILLED,
    "PREEMPTED": FailureReason.PREEMPTED,
    "TIMEOUT": FailureReason.DEADLINE_EXCEEDED,
    "DEADLINE": FailureReason.DEADLINE_EXCEEDED,
    "CANCELLED": FailureReason.CANCELLED,
    "REVOKED": FailureReason.CANCELLED,
    "SPECIAL_EXIT": FailureReason.ERROR,
}


# Ended states whose output may hold slurmstepd's memory-kill line (`memory_kill`): FAILED under
# the sampling enforcement or for a gang's srun step, OUT_OF_MEMORY under the cgroup one.
MEMORY_KILL_STATES = frozenset({"FAILED", "OUT_OF_MEMORY"})

# What a "signal" in a job's ExitCode means when it is no signal of the kernel's.
SIGNAL_NOTES = {125: ": Slurm's out-of-memory mark"}


@dataclass(frozen=True)
class JobInfo:
    """What Slurm says about one job, whichever transport asked."""

    job_id: str
    state: str  # Slurm base state, e.g. "PENDING", "NODE_FAIL"
    reason: str = ""  # Slurm's Reason (Resources, Priority, ReqNodeNotAvail, ...)
    exit_code: int | None = None
    signal: int | None = None  # the signal that ended the batch script, if any
    nodes: tuple[str, ...] = ()
    batch_host: str | None = None
    start_time: float | None = None  # epoch seconds
    end_time: float | None = None
    submit_time: float | None = None  # when it was (last) queued
    restarts: int = 0  # times Slurm requeued the job
    cpus: int = 0  # allocated CPUs, all nodes
    memory_mb: int = 0  # allocated memory, all nodes
    gpus: int = 0  # allocated GPUs, all nodes
    output_path: str | None = None  # the batch script's stdout file
    memory_kill: str = ""  # slurmstepd's line in that file: it killed a step over its memory


def to_step_status(info: JobInfo) -> StepStatus:
    """Map a Slurm state to the backend-neutral status the executor acts on."""
    node = info.batch_host or (info.nodes[0] if info.nodes else None)
    state = info.state.upper()
    if state in PENDING_STATES:
        reason = info.reason if info.reason and info.reason != "None" else ""
        message = f"Slurm job {info.job_id} is {state.lower()}"
        if reason:
            message += f" ({reason})"
        if info.restarts:
            message += f"; requeued {info.restarts} time(s)"
        return StepStatus.pending(reason or state.capitalize(), message)
    if state in RUNNING_STATES:
        return StepStatus.running(node)
    if state == "COMPLETED":
        return StepStatus.succeeded(node)
    failure = FAILURE_REASONS.get(state, FailureReason.ERROR)
    memory_killed = state == "FAILED" and bool(info.memory_kill)
    message = f"Slurm job {info.job_id} ended {state}"
    if info.exit_code is not None:
        message += f" with exit code {info.exit_code}"
    if info.signal:
        message += f" (signal {info.signal}{SIGNAL_NOTES.get(info.signal, '')})"
    if info.reason and info.reason != "None" and not memory_killed:
        message += f"; reason: {info.reason}"
    if info.nodes:
        message += f"; nodes {','.join(info.nodes)}"
    if memory_killed:
        failure = FailureReason.OOM_KILLED
    if info.memory_kill:
        message += f"; {info.memory_kill}"
    return StepStatus.failed(failure, message, exit_code=info.exit_code, node=node)


# What slurmstepd writes to a job's output when it kills one of the job's steps over its
# memory: the sampling enforcement (JobAcctGatherParams=OverMemoryKill) and the cgroup OOM
# killer (TaskPlugin=task/cgroup with ConstrainRAMSpace=yes), in 22.05's wording ("Detected 1
# oom-kill event(s) in StepId=7.0.") and 24.11's ("Detected 1 oom_kill event in StepId=7.0.").
_MEMORY_KILL = re.compile(
    r"slurmstepd[^\s:]*: error: (?:"
    r"StepId=(?P<sampled>\d+)\.\S+ exceeded memory limit \(\d+ > \d+\), being killed"
    r"|Detected \d+ oom[-_]kill events?(?:\(s\))? in (?:StepId=|step )(?P<cgroup>\d+)\.[^\n]*)"
)


def memory_kill(output: str, job_id: str) -> str:
    """slurmstepd's line in a job's output saying it killed a step of job `job_id` over its
    memory, or "" when there is none.

    Example:
        >>> output = "start\\nslurmstepd-n1: error: Detected 1 oom-kill event(s) in StepId=7.0.\\n"
        >>> memory_kill(output, "7")
        'slurmstepd-n1: error: Detected 1 oom-kill event(s) in StepId=7.0.'
        >>> memory_kill(output, "8")
        ''
    """
    for match in _MEMORY_KILL.finditer(output):
        if job_id in (match.group("sampled"), match.group("cgroup")):
            return match.group(0).strip()
    return ""


def parse_time(text: str | None) -> float | None:
    """Slurm's ISO timestamps ("2026-11-29T17:10:02", "Unknown", "None") → epoch seconds."""
    if not text or not text[0].isdigit():
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """ "1:0" → (1, None); "0:9" → (0, 9)."""
    code, _, sig = text.partition(":")
    exit_code = int(code) if code.isdigit() else None
    signal = int(sig) if sig.isdigit() and int(sig) else None
    return exit_code, signal


_KEY_VALUE = re.compile(r"(?:^|\s)([A-Za-z/:]+)=(\S*)")
_TRES_FIELD = re.compile(r"(cpu|mem|gres/gpu)=(\d+(?:\.\d+)?)([KMGT]?)")


def parse_tres(text: str) -> tuple[int, int, int]:
    """ "cpu=2,mem=2G,node=2,billing=2,gres/gpu=4" → (cpus, memory MB, gpus)."""
    values = {"cpu": 0.0, "mem": 0.0, "gres/gpu": 0.0}
    scale = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}
    for key, number, unit in _TRES_FIELD.findall(text):
        values[key] = float(number) * (scale[unit] if key == "mem" else 1.0)
    return int(values["cpu"]), int(values["mem"]), int(values["gres/gpu"])


_GPUS_PER_NODE = re.compile(r"(?:^|,)gres/gpu(?::[^:,]+)?:(\d+)(?:,|$)")


def gpus_per_node(tres_per_node: str) -> int:
    """GPUs a job asked for on each node ("gres/gpu:2", "gres/gpu:a100:4"): where Slurm 24.11
    without slurmdbd tells them, since it refuses to count gres/gpu in the allocated TRES.

    Example:
        >>> gpus_per_node("gres/gpu:a100:4"), gpus_per_node("gres/gpu:1,gres/nic:1")
        (4, 1)
    """
    match = _GPUS_PER_NODE.search(tres_per_node)
    return int(match.group(1)) if match else 0


def job_gpus(allocated: int, tres_per_node: str, nodes: int) -> int:
    """A job's GPUs: the allocated TRES's, else those asked per node times its nodes (24.11
    without slurmdbd), whichever transport read them.

    Example:
        >>> job_gpus(4, "", 2), job_gpus(0, "gres/gpu:2", 2)
        (4, 4)
    """
    return allocated or gpus_per_node(tres_per_node) * nodes


def expand_hostlist(text: str) -> tuple[str, ...]:
    """ "n[1-3,5],gpu7" → ("n1", "n2", "n3", "n5", "gpu7") (one bracket group per name)."""
    names: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", text):
        if plain:
            names.append(plain)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                names.append(f"{prefix}{number:0{width}d}")
    return tuple(name for name in names if name not in ("", "(null)", "None"))


def parse_scontrol_job(line: str) -> JobInfo:
    """One `scontrol show job -o <id>` line → JobInfo."""
    fields = dict(_KEY_VALUE.findall(line))
    exit_code, signal = parse_exit_code(fields.get("ExitCode", ""))
    # 22.05 prints the allocation as TRES=, 24.11 as AllocTRES= (beside ReqTRES=)
    cpus, memory_mb, gpus = parse_tres(fields.get("AllocTRES") or fields.get("TRES", ""))
    nodes = expand_hostlist(fields.get("NodeList", ""))
    state = fields.get("JobState", "UNKNOWN")
    return JobInfo(
        job_id=fields.get("JobId", ""),
        state=state,
        reason=fields.get("Reason", ""),
        exit_code=exit_code,
        signal=signal,
        nodes=nodes,
        batch_host=fields.get("BatchHost") or None,
        start_time=parse_time(fields.get("StartTime")) if state not in PENDING_STATES else None,
        end_time=parse_time(fields.get("EndTime")),
        submit_time=parse_time(fields.get("SubmitTime")),
        restarts=int(fields.get("Restarts", "0") or 0),
        cpus=cpus,
        memory_mb=memory_mb,
        gpus=job_gpus(gpus, fields.get("TresPerNode", ""), len(nodes)),
        output_path=fields.get("StdOut") or None,
    )
