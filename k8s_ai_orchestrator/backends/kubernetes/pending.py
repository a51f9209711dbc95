"""Why a step is Pending: the scheduler's condition on its pod, or the events of its Job.

A pod the scheduler cannot place carries `PodScheduled=False` with the scheduler's message
("0/3 nodes are available: 3 Insufficient nvidia.com/gpu"), which the watch already delivers.
When there is no such condition — or no pod at all because quota admission refused to create
it — the step's events are read, at most once per `interval_s` per step, and the newest
Warning (FailedScheduling, FailedCreate "exceeded quota: ...") becomes the reason.

Example:
    >>> explainer = PendingExplainer(interval_s=5.0, clock=time.monotonic)  # doctest: +SKIP
    >>> explainer.explain(handle, "default", pod, core_api).message  # doctest: +SKIP
    '0/2 nodes are available: 2 Insufficient cpu.'
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from ..base import JobHandle, StepStatus
from .api import is_transient
from .status import pending_status, pod_name

_LOG = logging.getLogger(__name__)


class PendingExplainer:
    """Remembers the last known reason of each Pending step; reads events sparingly.

    Args:
        interval_s: minimum seconds between two event reads for one step.
        clock: monotonic seconds.
    """

    def __init__(self, interval_s: float, clock: Callable[[], float]) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._first_seen: dict[str, float] = {}
        self._read_at: dict[str, float] = {}
        self._last: dict[str, StepStatus] = {}
        self._lock = threading.Lock()

    def explain(
        self, handle: JobHandle, namespace: str, pod: Mapping[str, Any] | None, core: CoreV1Api
    ) -> StepStatus:
        """The Pending status of the step, with the best reason known so far."""
        job = handle.job_id
        if pod is not None:
            status = pending_status(pod)
            if status.waiting:
                with self._lock:
                    self._last[job] = status
                return status
        now = self._clock()
        with self._lock:
            first = self._first_seen.setdefault(job, now)
            due = now - max(first, self._read_at.get(job, first)) >= self._interval_s
            if due:
                self._read_at[job] = now
        if due:
            subject = pod_name(pod) if pod is not None else job
            found = self._read_events(namespace, subject, core)
            if found is not None:
                with self._lock:
                    self._last[job] = found
        with self._lock:
            return self._last.get(job, StepStatus.pending())

    def forget(self, job: str) -> None:
        with self._lock:
            for table in (self._first_seen, self._read_at, self._last):
                table.pop(job, None)  # type: ignore[attr-defined]

    def _read_events(self, namespace: str, subject: str, core: CoreV1Api) -> StepStatus | None:
        try:
            response = core.list_namespaced_event(
                namespace,
                field_selector=f"involvedObject.name={subject}",
                _preload_content=False,
            )
            items = json.loads(response.data).get("items") or []
        except (ApiException, ValueError) as error:
            if isinstance(error, ApiException) and not is_transient(error):
                _LOG.debug("cannot read events of %s in %s: %s", subject, namespace, error.status)
            return None
        except Exception as error:
            if is_transient(error):
                return None
            raise
        warnings = [
            e
            for e in items
            if e.get("type") == "Warning" and (e.get("involvedObject") or {}).get("name") == subject
        ]
        if not warnings:
            return None
        newest = max(warnings, key=_event_time)
        return StepStatus.pending(newest.get("reason") or "Warning", newest.get("message") or "")


def _event_time(event: Mapping[str, Any]) -> str:
    metadata = event.get("metadata") or {}
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or metadata.get("creationTimestamp")
        or ""
    )
