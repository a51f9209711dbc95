"""The last lines of a step's log are read on after its final event without holding up the loop.

An ended attempt whose log stream has not yet delivered its last bytes stays tailed: each pass
reads what arrived without waiting for the stream, and the attempt is let go (released to its
backend) once the backend says its log is complete, or when `TAIL_S` has passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from k8s_ai_orchestrator.backends.base import Capabilities, JobHandle, StepStatus
from k8s_ai_orchestrator.executor.log_tails import TAIL_S, LogTails
from k8s_ai_orchestrator.launch.attempts import StepAttempts
from k8s_ai_orchestrator.launch.lifecycle import Attempt
from k8s_ai_orchestrator.launch.relaunch import StepHistory
from k8s_ai_orchestrator.spec import ComputeSpec

HANDLE = JobHandle("kubernetes", "job-a", "a")


@dataclass
class Backend:
    """Streams logs that arrive whole only once `complete` is set; records every read."""

    name: str = "kubernetes"
    state: StepStatus = field(default_factory=StepStatus.running)
    complete: bool = False
    reads: list[bool] = field(default_factory=list)  # the `wait` of each read
    complete_after: int | None = None  # the log's last bytes come during this many-th read
    released: list[str] = field(default_factory=list)

    def status(self, handle: JobHandle) -> StepStatus:
        return self.state

    def logs_since(self, handle: JobHandle, offset: int = 0, wait: bool = True) -> tuple[str, int]:
        self.reads.append(wait)
        self.complete = self.complete or len(self.reads) == self.complete_after
        return "", offset  # nothing new: no event is written

    def log_complete(self, handle: JobHandle) -> bool:
        return self.complete

    def release(self, handle: JobHandle) -> None:
        self.released.append(handle.job_id)


def ended_step(backend: Backend, clock: list[float]) -> LogTails:
    tails = LogTails(clock=lambda: clock[0])
    spec = ComputeSpec(cpu=1, memory_bytes=2**31)
    live = StepAttempts(spec, "kubernetes", None, StepHistory("a"))
    live.attempt = Attempt(HANDLE, launched_at=0.0)
    caps = Capabilities.of(backend)
    assert caps.logs is backend and caps.releases is backend
    context = SimpleNamespace(run_id="r")  # no text is read, so no event is written
    tails.after_final(live, backend.state, (backend, caps), context)  # type: ignore[arg-type]
    tails.release(live.attempt, caps)
    return tails


def test_an_ended_attempt_is_read_on_without_waiting_until_its_log_is_complete() -> None:
    backend, clock = Backend(state=StepStatus.succeeded()), [100.0]
    tails = ended_step(backend, clock)

    clock[0] += 0.1
    tails.forward()
    tails.forward()
    assert backend.released == []  # its stream has not caught up: still tailed

    backend.complete = True
    tails.forward()
    assert backend.released == ["job-a"]
    tails.forward()
    assert backend.reads == [False] * 4  # never a read that waits for a stream


def test_an_attempt_whose_log_is_complete_when_it_ends_is_let_go_at_once() -> None:
    backend, clock = Backend(state=StepStatus.succeeded(), complete=True), [100.0]
    ended_step(backend, clock).finish(sleep=lambda s: None)

    assert backend.released == ["job-a"]
    assert backend.reads == [False]


def test_a_running_attempt_is_tailed_until_it_ends_and_then_until_its_log_is_complete() -> None:
    backend, clock = Backend(), [100.0]
    tails = ended_step(backend, clock)

    tails.forward()
    backend.state = StepStatus.succeeded()
    tails.forward()
    assert backend.released == []
    backend.complete = True
    tails.forward()
    assert backend.released == ["job-a"]


def test_a_log_that_never_completes_is_let_go_after_the_tail_time() -> None:
    backend, clock = Backend(state=StepStatus.succeeded()), [100.0]
    tails = ended_step(backend, clock)

    clock[0] += TAIL_S - 0.5
    tails.forward()
    assert backend.released == []
    clock[0] += 1.0
    tails.forward()
    assert backend.released == ["job-a"]


def test_a_log_that_completes_during_the_final_read_is_read_once_more() -> None:
    """The stream's last bytes may land between the final read and the question whether the
    log is whole: what counts is whether it was whole before the read."""
    backend, clock = Backend(state=StepStatus.succeeded(), complete_after=1), [100.0]
    tails = ended_step(backend, clock)
    assert backend.released == [] and backend.complete

    tails.forward()
    assert backend.released == ["job-a"]
    assert backend.reads == [False, False]
