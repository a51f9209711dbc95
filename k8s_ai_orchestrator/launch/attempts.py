"""One step's attempts, backend-neutral and pure: the live attempt, the history of sizes and
reasons behind it, and what each attempt used. `ai_executor` and `AICompute` keep one per step.

Example:
    >>> from k8s_ai_orchestrator.backends.base import FailureReason
    >>> from k8s_ai_orchestrator.spec import ComputeSpec, GiB
    >>> step = StepAttempts(ComputeSpec(cpu=1, memory_bytes=GiB), "local", None,
    ...                     StepHistory("tiles").launched(GiB))
    >>> step.record_relaunch(FailureReason.OOM_KILLED, 2 * GiB)
    >>> step.history.relaunches, step.next_memory == 2 * GiB
    (1, True)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..backends.base import (
    FailureReason,
    GrowOutcome,
    Resize,
    ResourceUsage,
    StepState,
    StepStatus,
)
from ..memorygrowth import MemoryGrowth
from ..spec import ComputeSpec, format_memory
from .cost import Prices, ended, step_costs, step_prices
from .lifecycle import Attempt, Note, NoteKind, Observation, resize_message
from .plan import PlannedStep
from .relaunch import StepHistory


@dataclass
class StepAttempts:
    """The current attempt of one step and what came before it in this run."""

    spec: ComputeSpec  # as declared; `next_memory` overrides its memory after an OOM
    backend: str
    tenant: str | None
    history: StepHistory
    next_memory: int | None = None  # memory of the next attempt (OOM escalation)
    attempt: Attempt | None = None  # the attempt in flight, or the last one
    cancelled: bool = False  # the executor cancelled it: never a relaunch
    fail_message: str = ""  # why the executor failed it (replaces the health-check text)
    terminal_events_at_launch: int = 0  # step terminal events in the log before this attempt
    usage: list[ResourceUsage] = field(default_factory=list)  # one per finished attempt
    reasons: list[FailureReason] = field(default_factory=list)  # infrastructure reasons seen
    own_retry_pending: bool = False  # the next STEP_UP_FOR_RETRY is the executor's own
    worker_pid: int | None = None  # the process that wrote the attempt's STEP_WORKER_STARTED
    awaiting_worker: bool = False  # launched by this run worker, its process not started yet
    decided: bool = False  # its relaunch is decided: its process's later events are stale
    grow_at: float = 0.0  # the in-place growth threshold, for the resize notes
    measured: bool = False  # its memory is read while it runs (growth, memory="auto")
    failed_as: FailureReason | None = None  # the executor's reason for the attempt in flight
    lost_seconds: float | None = None  # ... and its work since its checkpoint, when it said

    def worker_started(self, pid: int | None) -> None:
        """The attempt's step process wrote STEP_WORKER_STARTED (its first event); after its
        relaunch was decided, that is the old attempt's process starting late: not taken."""
        if not self.decided:
            self.worker_pid, self.awaiting_worker = pid, False

    def stale_failure(self, pid: int | None, own_pid: int) -> bool:
        """Whether a step failure written by process `pid` belongs to an earlier attempt: it
        came before this attempt's process started, or from another process than the one that
        started it (a cancelled attempt's process writes its interruption late), or after the
        attempt's relaunch was decided (its process, started late on a failed node, tells of
        its interruption: deciding it again would launch the step twice). A failure the run
        worker (`own_pid`) wrote, or, before a decision, one of unknown origin, is never stale.

        Example:
            >>> from k8s_ai_orchestrator.launch.plan import PlannedStep
            >>> from k8s_ai_orchestrator.spec import resolve_spec
            >>> live = StepAttempts.of(PlannedStep("t", resolve_spec({}), "local", None), None)
            >>> live.awaiting_worker = True
            >>> live.stale_failure(41, own_pid=7), live.stale_failure(7, own_pid=7)
            (True, False)
            >>> live.worker_started(42)
            >>> live.stale_failure(41, own_pid=7), live.stale_failure(42, own_pid=7)
            (True, False)
            >>> live.record_relaunch(FailureReason.PREEMPTED, None)
            >>> live.worker_started(43)
            >>> live.stale_failure(42, own_pid=7), live.stale_failure(43, own_pid=7)
            (True, True)
        """
        if pid == own_pid:
            return False
        if self.decided:
            return True
        if pid is None:
            return False
        if self.awaiting_worker:
            return True
        return self.worker_pid is not None and pid != self.worker_pid

    @classmethod
    def of(cls, step: PlannedStep, growth: MemoryGrowth | None) -> StepAttempts:
        """A planned step before its first attempt, under the run's growth policy."""
        live = cls(step.spec, step.backend, step.tenant, StepHistory(step.key))
        live.grow_at = growth.grow_at if growth else 0.0
        live.measured = growth is not None or step.spec.is_auto
        return live

    def observe(
        self, status: StepStatus, now: float, resizes: Sequence[Resize] = ()
    ) -> Observation:
        """The live attempt's notes and verdict for `status` at `now` (`Attempt.observe`),
        with a note for each in-place growth in `resizes` not seen before; an accepted growth
        becomes the attempt's memory, so an OOM after it escalates from the grown size."""
        assert self.attempt is not None
        notes = [self._resize_note(resize) for resize in self.attempt.new_resizes(resizes)]
        seen = self.attempt.observe(status, now)
        return replace(seen, notes=(*notes, *seen.notes))

    def _resize_note(self, resize: Resize) -> Note:
        if resize.outcome is GrowOutcome.ACCEPTED:
            self.record_resize(resize.new_bytes)
        meta = {
            **self.history_metadata(),
            "resize_outcome": resize.outcome.value,
            "resize_from": format_memory(resize.old_bytes),
            "resize_to": format_memory(resize.new_bytes),
            "resize_in_use_bytes": resize.used_bytes,
            "resize_reason": resize.reason or "none",
        }
        message = resize_message(self.history.step_key, resize, self.grow_at)
        return Note(NoteKind.RESIZE, message, meta)

    def failed_for(self, reason: FailureReason, lost_seconds: float | None = None) -> None:
        """The executor's reason for the failure of the attempt in flight. It can differ from
        the backend's: a local step process that exits on SIGTERM reads as an Error to its
        backend, and is a preemption. The attempt is accounted as failed for it (`finished`),
        with the work it had done since its checkpoint when its step said (`lost_seconds`).

        Example:
            >>> from k8s_ai_orchestrator.launch.plan import PlannedStep
            >>> from k8s_ai_orchestrator.spec import resolve_spec
            >>> live = StepAttempts.of(PlannedStep("t", resolve_spec({}), "local", None), None)
            >>> live.failed_for(FailureReason.PREEMPTED)
            >>> live.finished(ResourceUsage(), StepStatus.failed(FailureReason.ERROR, "exit 143"))
            >>> live.reasons, live.usage[0].ended
            ([<FailureReason.PREEMPTED: 'Preempted'>], 'Preempted')
        """
        self.reasons.append(reason)
        self.failed_as, self.lost_seconds = reason, lost_seconds

    def finished(self, usage: ResourceUsage, status: StepStatus) -> None:
        """Account a finished attempt: what it reserved and, when it failed, why (the
        executor's reason, `failed_for`, over the backend's)."""
        if self.failed_as is not None:
            why = ended(StepState.FAILED, self.failed_as)
        else:
            why = ended(status.state, status.reason)
        self.usage.append(replace(usage, ended=why, lost_seconds=self.lost_seconds))
        self.failed_as, self.lost_seconds = None, None

    def held(self) -> ComputeSpec | None:
        """The size its running attempt holds (grown memory included); None when none runs."""
        attempt = self.attempt
        if attempt is None or attempt.running_at is None or attempt.status.is_terminal:
            return None
        memory = self.history.memory_tried[-1] if self.history.memory_tried else 0
        return self.spec.with_memory(memory) if memory else self.spec

    def reserved_so_far(self, now: float) -> list[ResourceUsage]:
        """Its finished attempts' reservations, and the running one's from when it started
        running until `now` (the observer's clock) at the size it holds (`held`)."""
        spec = self.held()
        if spec is None or self.attempt is None or self.attempt.running_at is None:
            return list(self.usage)
        held_s = max(0.0, now - self.attempt.running_at)
        return [*self.usage, ResourceUsage.reserved(spec, held_s)]

    def record_resize(self, new_bytes: int) -> None:
        """The attempt in flight was grown in place: it now holds `new_bytes`."""
        tried = self.history.memory_tried
        self.history = replace(self.history, memory_tried=(*tried[:-1], new_bytes))

    def record_relaunch(self, reason: FailureReason, memory_bytes: int | None) -> None:
        """Count a relaunch the executor makes (never counted by the op's RetryPolicy); the
        attempt in flight is decided until the next launch (`launched`)."""
        preempted = reason is not FailureReason.OOM_KILLED
        self.history = StepHistory(
            self.history.step_key,
            self.history.memory_tried,
            self.history.preemptions + int(preempted),
            self.history.relaunches + 1,
        )
        self.next_memory, self.decided = memory_bytes, True

    def launched(self) -> None:
        """A new attempt was submitted: its process is awaited, nothing about it decided."""
        self.worker_pid, self.awaiting_worker, self.decided = None, True, False

    def history_metadata(self) -> dict[str, Any]:
        return history_metadata(self.history, self.reasons, self.next_memory)

    def launch_metadata(self) -> dict[str, Any]:
        """What a launch (or a reattachment) records: the step's history and, after its first
        attempt, what the finished attempts used, so that a run worker resumed after this one
        died sums every attempt (`usage_from_metadata`)."""
        if not self.usage:
            return self.history_metadata()
        used = json.dumps([usage_record(u) for u in self.usage], separators=(",", ":"))
        return {**self.history_metadata(), USAGE_KEY: used}

    def summary(self, key: str, prices: Prices | None = None) -> tuple[str, dict[str, Any]]:
        """The step's closing line and metadata: where it ran, what it reserved, what it used,
        what that cost and what of it was wasted (`cost.py`)."""
        total = ResourceUsage(
            cpu_seconds=sum(u.cpu_seconds for u in self.usage),
            memory_gib_seconds=sum(u.memory_gib_seconds for u in self.usage),
            gpu_seconds=sum(u.gpu_seconds for u in self.usage),
            wall_seconds=sum(u.wall_seconds for u in self.usage),
        )
        meta = {
            **self.history_metadata(),
            "backend": self.backend,
            "tenant": self.tenant or "",
            "size": self.spec.size or "custom",
            "nodes_used": ", ".join(sorted({n for u in self.usage for n in u.nodes})),
            "cpu_seconds": round(total.cpu_seconds, 2),
            "memory_gib_seconds": round(total.memory_gib_seconds, 2),
            "gpu_seconds": round(total.gpu_seconds, 2),
            "wall_seconds": round(total.wall_seconds, 2),
            "queued_seconds": round(sum(u.queued_seconds for u in self.usage), 2),
            "quota_idle_seconds": round(sum(u.quota_idle_seconds for u in self.usage), 2),
            **self.measured_metadata(),
            **step_costs(self.usage, self.spec, step_prices(prices, self.backend, self.tenant)),
        }
        measured = [u.cpu_used_seconds for u in self.usage if u.cpu_used_seconds is not None]
        used = f"; used {sum(measured):.1f} CPU-s (measured)" if measured else ""
        cost = f"; cost {meta['cost']:.2f} {meta['currency']}" if "cost" in meta else ""
        message = (
            f"Step '{key}' reserved {total.cpu_seconds:.1f} CPU-s, "
            f"{total.memory_gib_seconds:.1f} GiB-s, {total.gpu_seconds:.1f} GPU-s (size × wall "
            f"time) over {len(self.usage)} attempt(s) on {self.backend}{used}{cost}"
        )
        return message, meta

    def measured_metadata(self) -> dict[str, Any]:
        """Requested vs measured use, for the report and `memory="auto"`.

        Empty when the backend measured no memory (an unmeasured Kubernetes step); without
        `peak_cpu` when it measured no CPU peak (Slurm and Kubernetes measure CPU time only).
        """
        peaks = [u.max_rss_bytes for u in self.usage if u.max_rss_bytes]
        if not peaks:
            return {}
        final_memory = self.history.memory_tried[-1] if self.history.memory_tried else 0
        cpu_peaks = [u.peak_cpu for u in self.usage if u.peak_cpu is not None]
        cpu = {"peak_cpu": max(cpu_peaks)} if cpu_peaks else {}
        return {
            **cpu,
            "requested_cpu": self.spec.cpu,
            "requested_memory_bytes": final_memory or self.spec.memory_bytes,
            "peak_memory_bytes": max(peaks),
            "peak_memory": f"{max(peaks) / 1024**2:.0f}Mi",
            "cpu_used_seconds": round(sum(u.cpu_used_seconds or 0.0 for u in self.usage), 2),
        }

    def describe_failure(self, key: str, status: StepStatus, tail: str, tail_lines: int) -> str:
        """What the step's failure says: where, why, the exit code and the log tail."""
        where = self.backend + (f" tenant '{self.tenant}'" if self.tenant else "")
        text = f"step '{key}' failed on {where}: {status.reason}"
        text += f" ({status.message})" if status.message else ""
        if status.exit_code is not None:
            text += f", exit code {status.exit_code}"
        return text + (f"\n--- last {tail_lines} log lines ---\n{tail}" if tail else "")


LOG_TAIL_LINES = 30  # the log lines a step's failure message ends with
USAGE_KEY = "usage_before"  # the finished attempts' usage, in a launch's metadata
_ZERO_SAYS = {"lost_seconds"}  # fields whose 0 means something (nothing lost), not "none"


def usage_record(usage: ResourceUsage) -> dict[str, Any]:
    """An attempt's usage as plain values, without the ones it did not measure.

    Example:
        >>> record = usage_record(ResourceUsage(cpu_seconds=4.0, wall_seconds=2.0, nodes=("n1",)))
        >>> record
        {'cpu_seconds': 4.0, 'wall_seconds': 2.0, 'nodes': ['n1']}
        >>> usage_from_record(record) == ResourceUsage(4.0, wall_seconds=2.0, nodes=("n1",))
        True
    """
    kept = {k: v for k, v in asdict(usage).items() if v or (k in _ZERO_SAYS and v is not None)}
    return {k: (list(v) if k == "nodes" else v) for k, v in kept.items()}


def usage_from_record(record: dict[str, Any]) -> ResourceUsage:
    return ResourceUsage(**{**record, "nodes": tuple(record.get("nodes", ()))})


def usage_from_metadata(text: str) -> list[ResourceUsage]:
    """The finished attempts' usage as `StepAttempts.launch_metadata` wrote it."""
    return [usage_from_record(record) for record in json.loads(text)]


def history_metadata(
    history: StepHistory, reasons: Iterable[str], next_memory: int | None
) -> dict[str, Any]:
    """The step's history as metadata values (written with every relaunch and summary)."""
    tried = history.memory_tried
    return {
        "relaunches": history.relaunches,
        "preemptions": history.preemptions,
        "attempts": len(tried),
        "reasons": ", ".join(reasons) or "none",
        "memory_tried": " → ".join(format_memory(m) for m in tried),
        "memory_tried_bytes": ",".join(str(m) for m in tried),
        "next_memory_bytes": next_memory or 0,
    }
