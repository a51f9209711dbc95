"""Pod logs: a tail on demand, or one follow stream per pod feeding an in-memory buffer.

`LogFollower` opens `GET .../log?follow=true` once and appends what arrives to a buffer, so
an executor that shows new lines on every poll costs one API request per pod, not one per
poll. If the stream breaks while the pod still runs, the next read re-opens it and skips the
bytes already buffered.

Example:
    >>> follower = LogFollower(core_api, "default", "k8s-ai-0f3c-0-abcde")  # doctest: +SKIP
    >>> text, offset = follower.read_since(0)  # doctest: +SKIP
"""

from __future__ import annotations

import threading
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

_MAX_BUFFER = 4 * 1024 * 1024  # bytes kept per pod; older output is dropped


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

    def read_since(self, offset: int) -> tuple[str, int]:
        """Text received after byte `offset`, and the offset to pass next time."""
        self._ensure_streaming()
        with self._lock:
            start = max(offset - self._dropped, 0)
            chunk = bytes(self._buffer[start:])
            return chunk.decode("utf-8", errors="replace"), self._dropped + len(self._buffer)

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
        if self._closed or (self._thread is not None and self._thread.is_alive()):
            return
        self._thread = threading.Thread(
            target=self._follow, name=f"k8s-ai-logs-{self.pod}", daemon=True
        )
        self._thread.start()

    def _follow(self) -> None:
        skip = self._received
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
        except (ApiException, OSError, ValueError):
            return  # the pod is gone or not started yet; the next read tries again
        except Exception:
            return  # urllib3 protocol errors on a reset stream; the next read re-opens it
        finally:
            response, self._response = self._response, None
            if response is not None:
                response.release_conn()

    def _append(self, chunk: bytes) -> None:
        with self._lock:
            self._buffer.extend(chunk)
            self._received += len(chunk)
            overflow = len(self._buffer) - _MAX_BUFFER
            if overflow > 0:
                del self._buffer[:overflow]
                self._dropped += overflow


def read_tail(core: CoreV1Api, namespace: str, pod: str, tail_lines: int | None) -> str:
    """The pod's log (last `tail_lines` lines); empty if the pod or its log is gone."""
    kwargs: dict[str, Any] = {"tail_lines": tail_lines} if tail_lines else {}
    try:
        response = core.read_namespaced_pod_log(pod, namespace, _preload_content=False, **kwargs)
    except ApiException as error:
        if error.status in (400, 404):
            return ""
        raise
    return bytes(response.data).decode("utf-8", errors="replace")
