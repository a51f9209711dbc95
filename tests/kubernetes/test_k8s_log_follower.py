"""One follow stream per pod: re-opened after an error, never after the server ended it.

A follow stream ends when its container exits (the kubelet's rule): what it carried is the
whole log, so the last read of an ended attempt asks nothing more of the API server. A
stream that broke (a reset connection) is opened again, skipping what was already read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from urllib3.exceptions import ProtocolError

from k8s_ai_orchestrator.backends.kubernetes.logs import LogFollower


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


class Core:
    """Answers `read_namespaced_pod_log` with the next stream, counting requests."""

    def __init__(self, *streams: Stream) -> None:
        self.streams, self.opened = list(streams), 0

    def read_namespaced_pod_log(self, pod: str, namespace: str, **kwargs: Any) -> Stream:
        assert kwargs["follow"] is True
        self.opened += 1
        return self.streams.pop(0)


def test_a_stream_the_server_ended_is_the_whole_log_and_is_not_opened_again() -> None:
    core = Core(Stream([b"epoch 1\n", b"epoch 2\n"]))
    follower = LogFollower(core, "default", "train-0")  # type: ignore[arg-type]

    first = follower.read_since(0, drain_s=5.0)
    last = follower.read_since(first[1], drain_s=5.0)  # the ended attempt's last read

    assert first == ("epoch 1\nepoch 2\n", 16)
    assert last == ("", 16)
    assert core.opened == 1


def test_a_broken_stream_is_opened_again_and_skips_what_was_read() -> None:
    broken = Stream([b"epoch 1\n"], ProtocolError("Response ended prematurely"))
    core = Core(broken, Stream([b"epoch 1\n", b"epoch 2\n"]))
    follower = LogFollower(core, "default", "train-0")  # type: ignore[arg-type]

    first = follower.read_since(0, drain_s=5.0)
    second = follower.read_since(first[1], drain_s=5.0)
    third = follower.read_since(second[1], drain_s=5.0)

    assert first == ("epoch 1\n", 8)
    assert second == ("epoch 2\n", 16)
    assert third == ("", 16)
    assert core.opened == 2
