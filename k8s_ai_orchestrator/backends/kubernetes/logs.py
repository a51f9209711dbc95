"""Pod logs: a tail on demand, or one follow stream per pod feeding an in-memory buffer.

`LogFollower` opens `GET .../log?follow=true` once and appends what arrives to a buffer, so
an executor that shows new lines on every poll costs one API request per pod, not one per
poll. A stream that ends is re-opened by the next read, skipping the bytes already buffered:
the API server ends a follow stream when the container exits, but also when its connection to
the kubelet breaks while the container runs, and the two look alike. A stream that ended
after the reader knew the container had ended (`read_since(..., ended=True)`) holds the whole
log, and so does one that ended after the step's last report (a measured step pod's reporter
writes it as the step process returns: one stream per pod instead of a second one, which only
re-sent the log, for most short steps); either makes the log `complete`, and it is not opened
again. So does a `404` to a stream opened after the end was known (the pod is gone); an
earlier `404` is a node, or a tenant's syncer, that has not got the pod yet, and is tried
again. An ended attempt's last read need not wait for that: `complete` says when the stream
has caught up, so a caller with other work (the executor's loop) looks again later instead of
blocking on a stream. A step's own memory reports
(`usage_report`) are taken out of the stream as it arrives: the latest is `last_report`, and
no reader of the log sees them.

Example:
    >>> follower = LogFollower(core_api, "default", "k8s-ai-0f3c-0-abcde")  # doctest: +SKIP
    >>> text, offset = follower.read_since(0)  # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from ...usage_report import MemoryReading, ReportFilter, without_reports

_MAX_BUFFER = 4 * 1024 * 1024  # bytes kept per pod; older output is dropped
DRAIN_S = 2.0  # how long the last read of an ended attempt waits for its stream's last lines


class LogFollower:
    """Follows one pod's log in a background thread.

    Args:
        core: the tenant's CoreV1Api.
        namespace: the pod's namespace.
        pod: the pod's name.
    """

    def __init__(self, core: CoreV1Api, namespace: str, pod: str) -> None:
        self._core = core
        self._namespace = namespace
        self.pod = pod
        self._buffer = bytearray()
        self._dropped = 0  # bytes dropped from the front of the buffer
        self._received = 0  # bytes received over all streams of this pod
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self._closed = False
        self._reports = ReportFilter()
        self._last_report: MemoryReading | None = None
        self._complete = False  # a stream ended after the container did: nothing follows
        self._end_known_at: float | None = None  # when a reader first said the container ended

    @property
    def last_report(self) -> MemoryReading | None:
        """The pod's latest memory report (the stream is opened if it is not)."""
        self._ensure_streaming()
        return self._last_report

    @property
    def complete(self) -> bool:
        """Whether the whole log has arrived (a stream ended after the container did, or after
        the step's last report) or the follower was closed: nothing more will be read."""
        return self._complete or self._closed

    def read_since(self, offset: int, drain_s: float = 0.0, ended: bool = False) -> tuple[str, int]:
        """Text received after byte `offset`, and the offset to pass next time (never less
        than `offset`: a new follower of a pod whose log an earlier run worker read up to
        `offset` says nothing until its stream has gone past it). `ended`: the container is
        known to have exited, so the stream that ends from now on is the whole log (one that
        already ended is opened again). `drain_s`: first wait that long for it to end."""
        if ended and self._end_known_at is None:
            self._end_known_at = time.monotonic()
        self._ensure_streaming()
        if drain_s and self._thread is not None:
            self._thread.join(drain_s)
        with self._lock:
            start = max(offset - self._dropped, 0)
            chunk = bytes(self._buffer[start:])
            end = max(offset, self._dropped + len(self._buffer))
            return chunk.decode("utf-8", errors="replace"), end

    def close(self) -> None:
        self._closed = True
        response = self._response
        if response is not None:
            sock = getattr(getattr(response, "connection", None), "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(2)
                except OSError:
                    pass

    def _ensure_streaming(self) -> None:
        if self._closed or self._complete:
            return
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(
            target=self._follow, name=f"k8s-ai-logs-{self.pod}", daemon=True
        )
        self._thread.start()

    def _follow(self) -> None:
        skip, opened_at = self._received, time.monotonic()
        try:
            self._response = self._core.read_namespaced_pod_log(
                self.pod, self._namespace, follow=True, _preload_content=False
            )
            for chunk in self._response.stream(amt=None, decode_content=True):
                if self._closed:
                    break
                if skip:
                    used = min(skip, len(chunk))
                    chunk, skip = chunk[used:], skip - used
                self._append(chunk)
            ended_at, end_known_at, last = time.monotonic(), self._end_known_at, self._last_report
            after_end = end_known_at is not None and end_known_at <= ended_at
            if not self._closed and (after_end or (last is not None and last.last)):
                with self._lock:
                    self._keep(self._reports.flush())
                self._complete = True
        except ApiException as error:
            end_known_at = self._end_known_at
            if error.status == 404 and end_known_at is not None and end_known_at <= opened_at:
                self._complete = True  # the pod ran and is gone now, and its log with it
            return  # else not there yet (a kubelet, or a tenant's syncer, that has not got
            # the pod answers 404 too) or not started: the next read tries again
        except (OSError, ValueError):
            return  # the next read tries again
        except Exception:
            return  # urllib3 protocol errors on a reset stream; the next read re-opens it
        finally:
            response, self._response = self._response, None
            if response is not None:
                response.release_conn()

    def _append(self, chunk: bytes) -> None:
        kept, reports = self._reports.feed(chunk)
        with self._lock:
            if reports:
                self._last_report = reports[-1]
            self._received += len(chunk)
            self._keep(kept)

    def _keep(self, kept: bytes) -> None:
        """Buffer `kept` (with `_lock` held), dropping the oldest output past `_MAX_BUFFER`."""
        self._buffer.extend(kept)
        overflow = len(self._buffer) - _MAX_BUFFER
        if overflow > 0:
            del self._buffer[:overflow]
            self._dropped += overflow


class LogStreams:
    """Each attempt's one log stream (keyed by its Job), following its current pod."""

    def __init__(self) -> None:
        self._followers: dict[str, LogFollower] = {}
        self._lock = threading.Lock()

    def follow(self, job: str, core: CoreV1Api, namespace: str, pod: str) -> LogFollower:
        """The Job's stream of `pod`'s log; a new one when the Job's pod changed."""
        with self._lock:
            follower = self._followers.get(job)
        if follower is None or follower.pod != pod:
            follower = LogFollower(core, namespace, pod)
            with self._lock:
                self._followers[job] = follower
        return follower

    def complete(self, job: str) -> bool:
        """Whether the Job's pod's log has arrived whole (`LogFollower.complete`); True when
        it is not followed (nothing more will be read of it)."""
        with self._lock:
            follower = self._followers.get(job)
        return follower is None or follower.complete

    def report(self, job: str) -> MemoryReading | None:
        """The latest usage report read from the Job's pod so far (no stream is opened)."""
        with self._lock:
            follower = self._followers.get(job)
        return follower._last_report if follower is not None else None

    def close(self, job: str) -> None:
        """Stop following the Job's pod (the attempt was cancelled)."""
        with self._lock:
            follower = self._followers.get(job)
        if follower is not None:
            follower.close()

    def drop(self, job: str) -> None:
        """Stop following the Job's pod and let its buffer go (the executor is done with it)."""
        with self._lock:
            follower = self._followers.pop(job, None)
        if follower is not None:
            follower.close()

    def close_all(self) -> None:
        with self._lock:
            followers = list(self._followers.values())
        for follower in followers:
            follower.close()


def read_tail(core: CoreV1Api, namespace: str, pod: str, tail_lines: int | None) -> str:
    """The pod's log (last `tail_lines` lines); empty if the pod or its log is gone."""
    kwargs: dict[str, Any] = {"tail_lines": tail_lines} if tail_lines else {}
    try:
        response = core.read_namespaced_pod_log(pod, namespace, _preload_content=False, **kwargs)
    except ApiException as error:
        if error.status in (400, 404):
            return ""
        raise
    return without_reports(bytes(response.data).decode("utf-8", errors="replace"))
