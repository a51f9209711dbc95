"""How an attempt's Pipes messages come back, per backend.

- local and Slurm: the program appends them to a file (a temp file for local processes; a file
  in the shared `slurm.workdir` for Slurm jobs, written by the rank the batch script starts,
  rank 0), tailed by dagster's `PipesFileMessageReader`;
- Kubernetes: the program writes them to stderr and they are read back from the pod's logs,
  as dagster-k8s does, through the backend's `logs_since`.

Example:
    >>> reader = PodLogMessageReader()
    >>> reader.no_messages_debug_text()
    "Attempted to read messages from the step pod's logs (stderr); check the pod's logs."
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dagster import PipesMessageHandler, PipesMessageReader
from dagster_pipes import PIPES_PROTOCOL_VERSION_FIELD, PipesDefaultMessageWriter

LogsSince = Callable[[int], tuple[str, int]]  # offset → (new text, next offset)


class PodLogMessageReader(PipesMessageReader):
    """Reads Pipes messages out of a Kubernetes pod's log; other lines go to stdout.

    The program is told to write its messages to stderr; the resource calls `poll` while the
    attempt runs and once more after it ended, with the backend's `logs_since`.
    """

    def __init__(self) -> None:
        self._handler: PipesMessageHandler | None = None
        self._offset = 0
        self._partial = ""

    @contextmanager
    def read_messages(self, handler: PipesMessageHandler) -> Iterator[dict[str, Any]]:
        self._handler = handler
        try:
            yield {PipesDefaultMessageWriter.STDIO_KEY: PipesDefaultMessageWriter.STDERR}
        finally:
            self._handler = None

    def poll(self, logs_since: LogsSince) -> bool:
        """Hand every complete new log line that is a Pipes message to the session.

        Returns whether new log text arrived.
        """
        text, self._offset = logs_since(self._offset)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._consume(line)
        return bool(text)

    def drain(
        self,
        logs_since: LogsSince,
        *,
        settle_s: float = 1.0,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Read the log of an ended pod to its end: until the program closed its Pipes
        session, or nothing new arrived for `settle_s` (a killed program never closes it)."""
        started = quiet_since = clock()
        while clock() - started < timeout_s:
            if self.poll(logs_since):
                quiet_since = clock()
            if self._closed() or clock() - quiet_since >= settle_s:
                break
            sleep(0.1)
        if self._partial:
            self._consume(self._partial)
            self._partial = ""

    def _closed(self) -> bool:
        return self._handler is not None and self._handler.received_closed_message

    def _consume(self, line: str) -> None:
        message = _pipes_message(line)
        if message is not None and self._handler is not None:
            self._handler.handle_message(message)
        elif line.strip():
            sys.stdout.write(line + "\n")

    def no_messages_debug_text(self) -> str:
        return "Attempted to read messages from the step pod's logs (stderr); check the pod's logs."


def _pipes_message(line: str) -> Any:
    """The Pipes message a log line holds, else None (a plain log line)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        message = json.loads(text)
    except json.JSONDecodeError:
        return None
    return (
        message if isinstance(message, dict) and PIPES_PROTOCOL_VERSION_FIELD in message else None
    )
