"""Pure parts of the Pipes resource: watching an attempt, and Pipes messages in a pod log."""

from __future__ import annotations

import json
from typing import Any

from dagster_pipes import PIPES_PROTOCOL_VERSION, PIPES_PROTOCOL_VERSION_FIELD

from k8s_ai_orchestrator.backends.base import FailureReason, JobHandle, StepStatus
from k8s_ai_orchestrator.launch.lifecycle import Attempt
from k8s_ai_orchestrator.pipes.messages import PodLogMessageReader
from k8s_ai_orchestrator.pipes.supervise import AttemptWatcher
from tests.support import FakeClock

HANDLE = JobHandle("kubernetes", "k8s-ai-1-0", "train-pipes", tenant="team-a")


class ScriptedBackend:
    """Answers `status` from a script of statuses (the last one repeats); records cancels."""

    def __init__(self, *statuses: StepStatus) -> None:
        self._statuses = list(statuses)
        self.cancelled: list[JobHandle] = []

    def status(self, handle: JobHandle) -> StepStatus:
        return self._statuses.pop(0) if len(self._statuses) > 1 else self._statuses[0]

    def cancel(self, handle: JobHandle) -> None:
        self.cancelled.append(handle)


def test_each_new_pending_reason_is_said_once_then_where_it_runs() -> None:
    backend = ScriptedBackend(
        StepStatus.pending("Unschedulable", "0/2 nodes: Insufficient cpu"),
        StepStatus.pending("Unschedulable", "0/2 nodes: Insufficient cpu"),
        StepStatus.pending("", "pulling image"),
        StepStatus.running("node-b"),
        StepStatus.succeeded("node-b"),
    )
    said: list[str] = []

    attempt = Attempt(HANDLE, launched_at=0.0)
    status = AttemptWatcher(backend, attempt, said.append, sleep=lambda s: None).wait()

    assert status.state.value == "Succeeded"
    assert said == [
        "Step 'train-pipes' is Pending: 0/2 nodes: Insufficient cpu",
        "Step 'train-pipes' is Pending: pulling image",
        "Step 'train-pipes' is running on node-b",
    ]


def test_an_attempt_pending_past_its_timeout_is_cancelled_as_unschedulable() -> None:
    clock = FakeClock()
    backend = ScriptedBackend(StepStatus.pending("Unschedulable", "Insufficient nvidia.com/gpu"))
    attempt = Attempt(
        HANDLE,
        clock(),
        where="kubernetes tenant 'team-a'",
        timeout_s=60,
        timeout_knob="timeout=...",
    )
    watcher = AttemptWatcher(backend, attempt, lambda line: None, clock=clock, sleep=clock.advance)

    status = watcher.wait()

    assert status.reason == FailureReason.UNSCHEDULABLE.value
    assert status.message == (
        "step 'train-pipes' stayed Pending for more than 60s on kubernetes tenant 'team-a'; "
        "last reason: Insufficient nvidia.com/gpu. Free capacity, lower its size, "
        "or raise timeout=..."
    )
    assert backend.cancelled == [HANDLE]


class Handler:
    """Collects what a Pipes session would handle."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.received_closed_message = False

    def handle_message(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.received_closed_message = message["method"] == "closed"


def _message(method: str, **params: Any) -> str:
    return json.dumps(
        {PIPES_PROTOCOL_VERSION_FIELD: PIPES_PROTOCOL_VERSION, "method": method, "params": params}
    )


def test_pipes_messages_are_picked_out_of_a_pod_log_split_anywhere(capsys: Any) -> None:
    log = "\n".join(
        ["starting", _message("opened", extras={}), _message("log", message="hi"), "{not json"]
    )
    log += "\n" + _message("closed") + "\n"
    chunks = [log[:20], log[20:77], log[77:]]
    reader, handler = PodLogMessageReader(), Handler()

    def logs_since(offset: int) -> tuple[str, int]:
        return (chunks.pop(0), offset + 1) if chunks else ("", offset)

    with reader.read_messages(handler):  # type: ignore[arg-type]
        reader.poll(logs_since)
        reader.drain(logs_since, sleep=lambda s: None)

    assert [m["method"] for m in handler.messages] == ["opened", "log", "closed"]
    assert capsys.readouterr().out == "starting\n{not json\n"
