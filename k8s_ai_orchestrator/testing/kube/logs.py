"""GET pods/{name}/log: container, previous, tailLines, limitBytes, follow and timestamps.

The kubelet here keeps no time per line: with `timestamps=true` each line is stamped with the
time it is first served (a following reader sees it within `FOLLOW_POLL_SECONDS` of its
writing). `sinceSeconds` is accepted and serves the whole log. A follow stream whose client went
away stops at once, as the kubelet's does, not when the container next writes or exits.

Example:
    >>> tail_lines(b"a\\nb\\nc\\n", 2)
    b'b\\nc\\n'
    >>> stamper = Stamper(enabled=True, clock=lambda: 0.5)
    >>> print((stamper.stamp(b"a\\nb") + stamper.stamp(b"c\\n")).decode(), end="")
    1970-01-01T00:00:00.500000000Z a
    1970-01-01T00:00:00.500000001Z bc
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .routing import Route
from .store import ApiError, Obj

FOLLOW_POLL_SECONDS = 0.1


def tail_lines(data: bytes, lines: int) -> bytes:
    """The last `lines` lines of a log (the kubelet's tailLines)."""
    if lines <= 0:
        return b""
    kept = data.splitlines(keepends=True)[-lines:]
    return b"".join(kept)


class Stamper:
    """Prefixes every line with an RFC 3339 time, as the kubelet's `timestamps=true`.

    Times strictly increase from line to line (readers such as dagster-k8s join lines that
    share a timestamp into one).
    """

    def __init__(self, enabled: bool, clock: Callable[[], float] = time.time) -> None:
        self._enabled = enabled
        self._clock = clock
        self._at_line_start = True
        self._last_ns = 0

    def stamp(self, data: bytes) -> bytes:
        if not self._enabled or not data:
            return data
        out = bytearray()
        for line in data.splitlines(keepends=True):
            if self._at_line_start:
                out += self._next_stamp()
            out += line
            self._at_line_start = line.endswith(b"\n")
        return bytes(out)

    def _next_stamp(self) -> bytes:
        self._last_ns = max(int(self._clock() * 1e9), self._last_ns + 1)
        seconds, nanos = divmod(self._last_ns, 10**9)
        moment = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{moment}.{nanos:09d}Z ".encode()


def _choose_container(pod: Obj, params: dict[str, str]) -> str:
    names = [c["name"] for c in pod["spec"]["containers"]]
    name = pod["metadata"]["name"]
    chosen = params.get("container")
    if not chosen:
        if len(names) > 1:
            raise ApiError(
                400,
                "BadRequest",
                f"a container name must be specified for pod {name}, choose one of: "
                f"[{' '.join(names)}]",
            )
        chosen = names[0]
    if chosen not in names:
        raise ApiError(400, "BadRequest", f"container {chosen} is not valid for pod {name}")
    return chosen


def _waiting_reason(pod: Obj, container: str) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status["name"] == container:
            return str(((status.get("state") or {}).get("waiting") or {}).get("reason", ""))
    return "ContainerCreating"


def _log_path(kubelet: Any, pod: Obj, container: str, previous: bool) -> Path:
    path = kubelet.log_file(pod["metadata"]["uid"], container, previous) if kubelet else None
    if path is not None:
        return Path(path)
    name = pod["metadata"]["name"]
    if previous:
        message = f'previous terminated container "{container}" in pod "{name}" not found'
    else:
        reason = _waiting_reason(pod, container) or "ContainerCreating"
        message = f'container "{container}" in pod "{name}" is waiting to start: {reason}'
    raise ApiError(400, "BadRequest", message)


def stream_log(handler: Any, route: Route, params: dict[str, str]) -> None:
    """Answer a log request on `handler` (an ApiHandler)."""
    server = handler.api_server
    with server.api.store.cluster.lock:
        pod = server.api.get(route.rt, route.namespace or "", route.name or "")
    container = _choose_container(pod, params)
    previous = params.get("previous") in ("true", "1", "True")
    path = _log_path(server.logs, pod, container, previous)
    data = path.read_bytes()
    size = len(data)  # follow from what was read: a line written since must not be skipped
    if params.get("tailLines"):
        data = tail_lines(data, int(params["tailLines"]))
    limit = int(params["limitBytes"]) if params.get("limitBytes") else None
    follow = params.get("follow") in ("true", "1", "True") and not previous
    stamper = Stamper(params.get("timestamps") in ("true", "1", "True"))
    if not follow:
        handler._send_bytes(200, stamper.stamp(data[:limit] if limit else data), "text/plain")
        return
    handler._start_chunked("text/plain")
    try:
        handler._chunk(stamper.stamp(data))
        offset = size
        uid = pod["metadata"]["uid"]
        while not server.stopping.is_set():
            running = server.logs.is_running(uid, container)
            with path.open("rb") as log:
                log.seek(offset)
                fresh = log.read()
            offset += len(fresh)
            handler._chunk(stamper.stamp(fresh))
            if not running:
                break
            if handler.client_gone():  # as the kubelet: a request its client left is cancelled
                handler.close_connection = True
                return
            time.sleep(FOLLOW_POLL_SECONDS)
        handler._end_chunks()
    except (BrokenPipeError, ConnectionResetError, OSError):
        handler.close_connection = True
