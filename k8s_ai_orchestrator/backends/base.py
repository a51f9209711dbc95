"""The backend protocol: submit a step, ask its state, read its logs, cancel it.

Backends know nothing of Dagster. The executor hands them a `LaunchRequest` (a command line,
an environment and a `ComputeSpec`) and reads back `StepStatus` values whose `reason` is a
`FailureReason` (a Pending one's own words are its `waiting`) — the executor decides from the
reason whether to relaunch (Preempted, Evicted, Lost), escalate memory (OOMKilled) or fail.

Optional capabilities are Protocols below (`StreamsLogs`, `ReportsResizes`, `Validates`,
`WarnsOfPlacement`, `PacesStatus`, `NamesPreemptors`, `ReportsChanges`, `Adopts`,
`CancelsRuns`); a backend has one
by defining its methods, and `Capabilities.of(backend)` finds them once, when the backend is
made. A backend
that grows steps itself takes a `MemoryGrowth` policy; without one, an attempt at its limit is
OOMKilled and the executor relaunches it with more memory.

Example:
    >>> status = StepStatus.failed(FailureReason.OOM_KILLED, "exceeded 256Mi", exit_code=137)
    >>> status.is_terminal, status.reason
    (True, <FailureReason.OOM_KILLED: 'OOMKilled'>)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..errors import SubmitError
from ..spec import ComputeSpec


class StepState(enum.StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class FailureReason(enum.StrEnum):
    OOM_KILLED = "OOMKilled"  # memory limit hit; the executor escalates memory
    PREEMPTED = "Preempted"  # capacity reclaimed (priority preemption, spot, SIGTERM from outside)
    EVICTED = "Evicted"  # node pressure / API eviction
    LOST = "Lost"  # node failure, job vanished
    UNSCHEDULABLE = "Unschedulable"  # Pending past the step's timeout
    DEADLINE_EXCEEDED = "DeadlineExceeded"  # ran past its time limit
    IMAGE_PULL = "ImagePullBackOff"  # image cannot be pulled
    CONFIG_ERROR = "CreateContainerConfigError"  # bad secret/configmap reference etc.
    CANCELLED = "Cancelled"  # cancelled by the executor (run terminated)
    ERROR = "Error"  # the step process exited non-zero


# Reasons after which the step is relaunched at the same size and resumes from its checkpoint.
RELAUNCH_REASONS = frozenset({FailureReason.PREEMPTED, FailureReason.EVICTED, FailureReason.LOST})


@dataclass(frozen=True)
class StepStatus:
    """State of one submitted step attempt, with a human reason.

    Two vocabularies, two fields: `reason` is what the executor acts on (a `FailureReason`:
    why it failed, or the disruption a running attempt is about to meet); `waiting` is what
    a Pending attempt waits for, in its scheduler's, queue's or kubelet's own words
    ("Unschedulable", "WaitingForGangRoom", "Resources"), only ever shown to the user."""

    state: StepState
    reason: FailureReason | None = None  # failed, or running but disrupted
    message: str = ""  # human detail: scheduler message, exit code, node name...
    exit_code: int | None = None
    node: str | None = None  # where it runs (first node for gangs)
    waiting: str = ""  # Pending: its backend's reason ("" when none was given yet)

    @property
    def is_terminal(self) -> bool:
        return self.state in (StepState.SUCCEEDED, StepState.FAILED)

    @classmethod
    def pending(cls, waiting: str = "", message: str = "") -> StepStatus:
        return cls(StepState.PENDING, None, message, waiting=waiting)

    @classmethod
    def running(cls, node: str | None = None) -> StepStatus:
        return cls(StepState.RUNNING, node=node)

    @classmethod
    def succeeded(cls, node: str | None = None) -> StepStatus:
        return cls(StepState.SUCCEEDED, exit_code=0, node=node)

    @classmethod
    def failed(
        cls,
        reason: FailureReason,
        message: str = "",
        exit_code: int | None = None,
        node: str | None = None,
    ) -> StepStatus:
        return cls(StepState.FAILED, reason, message, exit_code, node)


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a backend needs to start one attempt of one step."""

    run_id: str
    step_key: str
    attempt: int  # 0 for the first launch; every relaunch is a new attempt
    command: Sequence[str]  # argv of the step process (`dagster api execute_step ...`)
    env: Mapping[str, str]  # extra environment for the step process
    spec: ComputeSpec
    tenant: str | None = None  # resolved tenant (kubernetes backend)
    grace_period_s: float = 30.0  # SIGTERM → SIGKILL, time for the checkpoint save
    labels: Mapping[str, str] = field(default_factory=dict)  # run/step/attempt labels
    # run `command` exactly as given; by default the Kubernetes and Slurm backends put their
    # configured python in place of argv[0] (the coordinator's interpreter path)
    raw_command: bool = False
    # the running step of the same run this launch comes from (a Pipes command started inside
    # a step); the local backend lets it go ahead of waiting steps and lends it the step's share
    parent_step_key: str = ""
    # the run prices its steps (executor `prices`): report what the attempt used where the
    # backend can (a Kubernetes step reports its own, as a measured one does)
    measure_usage: bool = False


@dataclass(frozen=True)
class JobHandle:
    """A backend's reference to a submitted attempt."""

    backend: str
    job_id: str  # pid, Job name or Slurm job id
    step_key: str
    tenant: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class ResourceUsage:
    """Accounted usage of a finished (or running) attempt."""

    cpu_seconds: float = 0.0  # requested CPU × wall seconds
    memory_gib_seconds: float = 0.0  # requested memory (GiB) × wall seconds
    gpu_seconds: float = 0.0  # GPUs × wall seconds
    wall_seconds: float = 0.0
    max_rss_bytes: int | None = None  # measured peak resident memory (per node for gangs)
    nodes: tuple[str, ...] = ()
    cpu_used_seconds: float | None = None  # measured CPU time of the step's processes
    peak_cpu: float | None = None  # measured peak cores in use (over windows of about 1 s)
    ended: str = ""  # why the attempt ended (a FailureReason), "" when its step ended it
    # an interrupted attempt's work after the checkpoint its relaunch resumes from, as its step
    # said when it stopped (0.0: it saved as it stopped); None: not said, all of it is redone
    lost_seconds: float | None = None
    # a gang's ranks that ran while the others were not running yet, in node-seconds: held,
    # so part of the reservation above, but no work was done in them (the gang waited)
    waiting_node_seconds: float = 0.0
    # what it waited before it ran (from its submit), holding nothing (a queue, the scheduler)
    queued_seconds: float = 0.0
    # what it waited before it ran holding its quota (Kueue admitted it; its pods not running
    # yet): reserved, so part of the reservation above, but nothing ran in it
    quota_idle_seconds: float = 0.0

    @classmethod
    def reserved(
        cls, spec: ComputeSpec, seconds: float, gpus: float | None = None, **measured: object
    ) -> ResourceUsage:
        """`spec`'s whole reservation (every node of a gang) held for `seconds`; `gpus`: the
        GPUs it was given, when they were counted (DRA: a partition by its share of its GPU),
        else those it asked for.

        Example:
            >>> ResourceUsage.reserved(ComputeSpec(cpu=4, memory_bytes=2**30, nodes=2), 10.0)
            ... # doctest: +ELLIPSIS
            ResourceUsage(cpu_seconds=80.0, memory_gib_seconds=20.0, gpu_seconds=0.0, ...)
        """
        devices = spec.gpu * spec.nodes if gpus is None else gpus
        return cls(
            cpu_seconds=spec.total_cpu * seconds,
            memory_gib_seconds=spec.memory_bytes * spec.nodes / 2**30 * seconds,
            gpu_seconds=devices * seconds,
            wall_seconds=seconds,
            **measured,  # type: ignore[arg-type]
        )


class GrowOutcome(enum.StrEnum):
    ACCEPTED = "accepted"  # the new limit holds now
    PENDING = "pending"  # asked for; the node has not applied it yet (Kubernetes)
    REFUSED = "refused"  # no room, a quota, a tenant that forbids resizes, or not supported


@dataclass(frozen=True)
class GrowResult:
    """A backend's answer to `grow_memory`.

    Example:
        >>> GrowResult.refused("only 1.0Gi free").outcome
        <GrowOutcome.REFUSED: 'refused'>
    """

    outcome: GrowOutcome
    reason: str = ""  # why it is pending or refused, in words a user can act on

    @classmethod
    def accepted(cls) -> GrowResult:
        return cls(GrowOutcome.ACCEPTED)

    @classmethod
    def pending(cls, reason: str) -> GrowResult:
        return cls(GrowOutcome.PENDING, reason)

    @classmethod
    def refused(cls, reason: str) -> GrowResult:
        return cls(GrowOutcome.REFUSED, reason)


@dataclass(frozen=True)
class Resize:
    """One in-place growth of a running attempt's memory limit, as tried."""

    old_bytes: int  # the limit before
    new_bytes: int  # the limit asked for (= old_bytes: growth could not be tried, see reason)
    used_bytes: int  # the memory in use that passed the threshold
    outcome: GrowOutcome
    reason: str = ""  # why it was refused or is pending


@runtime_checkable
class Backend(Protocol):
    """What every backend implements. Calls are made from the executor's one thread."""

    name: str

    def submit(self, request: LaunchRequest) -> JobHandle:
        """Start the attempt (or queue it). Raise `SubmitError` for refusals a user must fix."""

    def status(self, handle: JobHandle) -> StepStatus:
        """Current state; cheap (served from a watch/cache where the backend has one)."""

    def logs(self, handle: JobHandle, tail_lines: int | None = None) -> str:
        """The attempt's stdout/stderr so far (last `tail_lines` lines if given)."""

    def cancel(self, handle: JobHandle) -> None:
        """Stop the attempt and everything it started; idempotent."""

    def usage(self, handle: JobHandle) -> ResourceUsage:
        """Resource-seconds of the attempt so far."""

    def close(self) -> None:
        """Release connections/threads; cancel nothing."""


@runtime_checkable
class NamesPreemptors(Protocol):
    """A backend that can say who preempted an attempt after its step said it was preempted
    (Kubernetes: the scheduler's marks on the attempt's pods)."""

    def preempted_by(self, handle: JobHandle) -> str:
        """Who preempted the attempt, in words; "" when nothing names it."""


@runtime_checkable
class StreamsLogs(Protocol):
    """A backend whose attempts' logs are read a piece at a time while they run (Kubernetes);
    the executor forwards new lines to the run's log and Pipes reads its messages from them."""

    def logs_since(self, handle: JobHandle, offset: int = 0, wait: bool = True) -> tuple[str, int]:
        """The log text after `offset` and the offset to ask from next time; an ended
        attempt's read first waits briefly for the last of its log, unless `wait` is False."""

    def log_complete(self, handle: JobHandle) -> bool:
        """Whether the attempt's log has been read whole: it ended and its last bytes arrived
        (the executor reads an ended attempt's log on, without waiting, until it has)."""


@runtime_checkable
class ReportsResizes(Protocol):
    """A backend that grows a running attempt's memory in place (its `MemoryGrowth` policy
    decides when) and says what it tried, for the executor's events and relaunch sizes."""

    def grow_memory(self, handle: JobHandle, new_limit_bytes: int) -> GrowResult:
        """Raise the attempt's memory limit in place: accepted, pending or refused."""

    def resizes(self, handle: JobHandle) -> tuple[Resize, ...]:
        """Every in-place growth tried so far, oldest first; none for an attempt the backend
        does not hold (a resumed run worker's attempt that had vanished)."""


@runtime_checkable
class Validates(Protocol):
    """A backend that can make every check `submit` makes without creating anything; the
    executor calls it for every step of a run before the first submit."""

    def validate(self, request: LaunchRequest) -> None:
        """Raise the `OrchestratorError` `submit` would raise for `request`; create nothing."""


@runtime_checkable
class WarnsOfPlacement(Protocol):
    """A backend that can say why a step will not run exactly as sized (local: fewer GPUs or
    less memory than asked for)."""

    def placement_warnings(self, spec: ComputeSpec) -> list[str]:
        """One sentence per way `spec` will be placed differently from what it asks."""


@runtime_checkable
class ReportsChanges(Protocol):
    """A backend that says when an attempt's status may have changed (Kubernetes: a pod watch
    event; local: a process started or ended), so that the executor looks at an attempt when
    something happened instead of at every pass."""

    def on_change(self, callback: Callable[[str], None]) -> None:
        """Call `callback(job_id)`, from any thread, whenever that attempt may have changed."""


@runtime_checkable
class Adopts(Protocol):
    """A backend whose attempts outlive the run worker that launched them (Kubernetes: a Job),
    and can be found again from the request that launched them (run, step and attempt name
    the same Job): a run worker resumed after the first one died watches the attempt it finds
    instead of launching it a second time."""

    def adopt(self, request: LaunchRequest) -> JobHandle | None:
        """The attempt `request` launched, alive or ended, watched as if just submitted; None
        when the backend has no trace of it. Creates nothing."""


@runtime_checkable
class CancelsRuns(Protocol):
    """A backend that can find every attempt of a run by the run alone, whichever run worker
    launched it: terminating a run whose run worker is gone still reaches its steps."""

    def cancel_run(self, run_id: str) -> list[str]:
        """Cancel every attempt of `run_id` still pending or running; the job ids cancelled."""


@runtime_checkable
class Releases(Protocol):
    """A backend that keeps per-attempt state (Kubernetes: its pods' last states, a log
    stream and its buffer, growths) and lets it go when the executor is done with a step, so
    that what a run worker holds follows the steps in flight, not every step the run had."""

    def release(self, handle: JobHandle) -> None:
        """Forget the step's attempts up to `handle`'s (after its last read); the attempts
        themselves are left as they are, and `cancel` still reaches them."""


@runtime_checkable
class PacesStatus(Protocol):
    """A backend whose `status()` costs a call to a remote service (Slurm): the executor asks
    it no more often than every `status_interval_s` seconds per attempt."""

    status_interval_s: float


@dataclass(frozen=True)
class Capabilities:
    """The optional capabilities of one backend, found once (never by `getattr` per call).

    Example:
        >>> class Minimal:
        ...     name = "minimal"
        >>> caps = Capabilities.of(Minimal())
        >>> caps.logs is None, caps.status_interval_s
        (True, 0.0)
    """

    logs: StreamsLogs | None = None
    resizes: ReportsResizes | None = None
    validates: Validates | None = None
    placement: WarnsOfPlacement | None = None
    preemptors: NamesPreemptors | None = None
    changes: ReportsChanges | None = None
    adopts: Adopts | None = None
    releases: Releases | None = None
    status_interval_s: float = 0.0  # 0: status() is answered from a cache, ask it every pass

    @classmethod
    def of(cls, backend: object) -> Capabilities:
        return cls(
            logs=backend if isinstance(backend, StreamsLogs) else None,
            resizes=backend if isinstance(backend, ReportsResizes) else None,
            validates=backend if isinstance(backend, Validates) else None,
            placement=backend if isinstance(backend, WarnsOfPlacement) else None,
            preemptors=backend if isinstance(backend, NamesPreemptors) else None,
            changes=backend if isinstance(backend, ReportsChanges) else None,
            adopts=backend if isinstance(backend, Adopts) else None,
            releases=backend if isinstance(backend, Releases) else None,
            status_interval_s=(
                float(backend.status_interval_s) if isinstance(backend, PacesStatus) else 0.0
            ),
        )


def refuse_device_fields(request: LaunchRequest, backend: str) -> None:
    """`SubmitError` for a step asking for what only a DRA claim selects (`gpu_partition`, a
    GPU partition; `gpu_memory`, a least memory per GPU) on a backend that cannot: only
    Kubernetes tenants with `gpus.request: dra` select devices by their attributes."""
    spec = request.spec
    asked = [
        name
        for name, value in (
            ("gpu_partition", spec.gpu_partition),
            ("gpu_memory", spec.gpu_memory_bytes),
        )
        if value
    ]
    if asked:
        raise SubmitError(
            f"step '{request.step_key}' ({spec.describe()}): {' and '.join(asked)} is not "
            f"served by the {backend} backend: GPUs are selected by partition or memory only on "
            "Kubernetes with gpus.request: dra; run the step with backend='kubernetes' on such "
            f"a tenant, or drop {' and '.join(asked)}"
        )


def cpu_quantity(cpu: float) -> str:
    """CPU as a Kubernetes quantity: 2 → "2", 0.5 → "500m"."""
    return str(int(cpu)) if float(cpu).is_integer() else f"{int(round(cpu * 1000))}m"
