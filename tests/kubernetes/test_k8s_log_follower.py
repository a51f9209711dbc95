"""One follow stream per pod, opened again when it ended or broke, skipping what was read.

A follow stream can end before its container has written anything (the node's log server
saw no process yet, or the apiserver's proxy closed it): a stream that ended is not the
whole log, so the next read opens it again. A broken stream (a reset connection) too. A stream
that ended after the step's last usage report, or after a reader said the container had ended,
holds the whole log: it is not opened again, and the log is `complete`; so is a 404 to a
stream opened after that (the pod is gone), but not an earlier one (the node has not got it).
A read that says the container ended does not wait for that unless asked to (`drain_s`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from k8s_ai_orchestrator.backends.kubernetes.logs import LogFollower
from k8s_ai_orchestrator.usage_report import MemoryReading, format_report

REPORT = format_report(MemoryReading(1 << 20, "cgroup v2", 1.0, cpu_seconds=0.5)).encode()
LAST = format_report(MemoryReading(1 << 20, "cgroup v2", 2.0, 0.9, last=True)).encode()


class Stream:
    """A `_preload_content=False` log response: its chunks, then an end or an error."""

    def __init__(self, chunks: list[bytes], error: Exception | None = None) -> None:
        self.chunks, self.error = chunks, error

    def stream(self, amt: Any = None, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks
        if self.error is not None:
            raise self.error

    def release_conn(self) -> None:
        pass


class Gated(Stream):
    """A stream that carries its chunks, then stays open until `gate` is set."""

    def __init__(self, chunks: list[bytes]) -> None:
        super().__init__(chunks)
        self.gate = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks
        self.gate.wait(10.0)


def eventually(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + 10.0
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


class Core:
    """Answers `read_namespaced_pod_log` with the next stream or error (the last one again when
    none are left: the whole log of an exited container), counting requests."""

    def __init__(self, *streams: Any) -> None:
        self.streams, self.opened = list(streams), 0

    def read_namespaced_pod_log(self, pod: str, namespace: str, **kwargs: Any) -> Stream:
        assert kwargs["follow"] is True
        self.opened += 1
        answer = self.streams.pop(0) if len(self.streams) > 1 else self.streams[0]
        if isinstance(answer, ApiException):
            raise answer
        return answer


def test_a_stream_that_ended_before_the_container_wrote_is_opened_again() -> None:
    core = Core(Stream([]), Stream([b"epoch 1\n", b"epoch 2\n"]))
    follower = LogFollower(core, "default", "train-0")  # type: ignore[arg-type]

    first = follower.read_since(0, drain_s=5.0)
    second = follower.read_since(first[1], drain_s=5.0)  # the ended attempt's last read

    assert first == ("", 0)
    assert second == ("epoch 1\nepoch 2\n", 16)
    assert core.opened == 2


def test_a_broken_stream_is_opened_again_and_skips_what_was_read() -> None:
    broken = Stream([b"epoch 1\n"], ProtocolError("Response ended prematurely"))
    core = Core(broken, Stream([b"epoch 1\n", b"epoch 2\n"]))
    follower = LogFollower(core, "default", "train-0")  # type: ignore[arg-type]

    first = follower.read_since(0, drain_s=5.0)
    second = follower.read_since(first[1], drain_s=5.0)
    third = follower.read_since(second[1], drain_s=5.0)

    assert first == ("epoch 1\n", 8)
    assert second == ("epoch 2\n", 16)
    assert third == ("", 16)  # the ended stream, read again, skips all it carried
    assert core.opened == 3


def test_a_stream_that_ended_after_the_steps_last_report_is_the_whole_log() -> None:
    core = Core(Stream([REPORT, b"epoch 1\n", LAST]), Stream([b"never read\n"]))
    follower = LogFollower(core, "default", "train-0")  # type: ignore[arg-type]

    first = follower.read_since(0, drain_s=5.0)
    second = follower.read_since(first[1], drain_s=5.0)  # the ended attempt's last read

    assert first == ("epoch 1\n", 8)
    assert second == ("", 8)
    assert core.opened == 1
    assert follower.last_report is not None and follower.last_report.cpu_seconds == 0.9
    assert core.opened == 1


def test_a_stream_that_ended_after_an_earlier_report_is_opened_again() -> None:
    core = Core(Stream([REPORT, b"epoch 1\n"]), Stream([REPORT, b"epoch 1\n", b"epoch 2\n", LAST]))
    follower = LogFollower(core, "default", "train-0")  # type: ignore[arg-type]

    first = follower.read_since(0, drain_s=5.0)
    second = follower.read_since(first[1], drain_s=5.0)
    third = follower.read_since(second[1], drain_s=5.0)

    assert (first, second, third) == (("epoch 1\n", 8), ("epoch 2\n", 16), ("", 16))
    assert core.opened == 2


def test_a_stream_that_ends_after_the_container_was_said_to_have_ended_is_the_whole_log() -> None:
    running = Gated([b"epoch 1\n"])
    core = Core(running, Stream([b"never read\n"]))
    follower = LogFollower(core, "default", "train-0")  # type: ignore[arg-type]
    assert eventually(lambda: follower.read_since(0)[1] == 8)

    text, offset = follower.read_since(8, ended=True)  # the container exited: no wait
    assert (text, offset, follower.complete) == ("", 8, False)
    running.gate.set()  # the API server ends the stream

    assert eventually(lambda: follower.complete)
    assert follower.read_since(8, ended=True) == ("", 8)
    assert core.opened == 1


def test_an_ended_attempts_read_opens_an_ended_stream_once_without_waiting_for_it() -> None:
    opened_again = Gated([b"epoch 1\n"])
    core = Core(Stream([]), opened_again)  # the first stream ended before the step wrote
    follower = LogFollower(core, "default", "train-0")  # type: ignore[arg-type]
    assert follower.read_since(0, drain_s=5.0) == ("", 0)

    text, _ = follower.read_since(0, ended=True)  # opens it again; the stream is still open
    assert text in ("", "epoch 1\n") and not follower.complete  # so the read did not wait
    assert core.opened == 2
    opened_again.gate.set()

    assert eventually(lambda: follower.complete)
    assert follower.read_since(0, ended=True) == ("epoch 1\n", 8)
    assert core.opened == 2


def test_the_log_of_a_pod_that_is_gone_after_it_ended_is_complete() -> None:
    core = Core(ApiException(status=404, reason="Not Found"))
    follower = LogFollower(core, "default", "train-0")  # type: ignore[arg-type]

    assert follower.read_since(0, drain_s=5.0, ended=True) == ("", 0)
    assert follower.complete
    follower.read_since(0, ended=True)
    assert core.opened == 1


def test_a_404_before_the_pod_is_known_to_have_ended_is_tried_again() -> None:
    """A kubelet that has not got the pod yet answers 404, and so does a tenant's syncer whose
    host pod is not made yet: that is not a pod gone, and its log is read once it is there."""
    core = Core(ApiException(status=404, reason="Not Found"), Stream([b"epoch 1\n"]))
    follower = LogFollower(core, "default", "train-0")  # type: ignore[arg-type]

    assert follower.read_since(0, drain_s=5.0) == ("", 0)
    assert not follower.complete
    assert follower.read_since(0, drain_s=5.0, ended=True) == ("epoch 1\n", 8)
    assert follower.complete and core.opened == 2
