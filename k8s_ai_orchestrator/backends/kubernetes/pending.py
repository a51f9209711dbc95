"""Why a step is Pending: the autoscaler's word, the scheduler's condition on its pod, or the
events of its Job.

A pod the scheduler cannot place carries `PodScheduled=False` with the scheduler's message
("0/3 nodes are available: 3 Insufficient nvidia.com/gpu"), which the watch already delivers.
On a cluster that autoscales, the autoscaler says on the same pod whether a node is coming:
the pod's events are read, at most once per `interval_s` per step, and the newest autoscaler
event (`scaleup.py`: Karpenter's Nominated or FailedScheduling, the cluster-autoscaler's
TriggeredScaleUp, NotTriggerScaleUp, FailedScaleUp) leads the reason, the scheduler's message
after it. A pod whose DRA claims wait (`cannot allocate all claims`) is told that Kubernetes
does not preempt for devices (`dra_devices.with_device_note`). A pod the default scheduler
has not looked at yet has nothing in its events and they are not read (`unseen_by_scheduler`).
When there is no condition otherwise (a scheduled pod whose kubelet has not said more, a pod of
another scheduler) — or no pod at all because quota admission refused to create it — the
newest Warning (FailedScheduling, FailedCreate "exceeded quota: ...") becomes the reason.

Example:
    >>> explainer = PendingExplainer(interval_s=5.0, clock=time.monotonic)  # doctest: +SKIP
    >>> explainer.explain(handle, "default", pod, core_api).message  # doctest: +SKIP
    '0/2 nodes are available: 2 Insufficient cpu.'
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from ..base import JobHandle, StepStatus
from .api import is_transient
from .dra_devices import with_device_note
from .scaleup import ScaleEvent, read_scale_event
from .status import UNSCHEDULABLE, condition_of, pending_status, pod_name

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
        self._scale: dict[str, ScaleEvent] = {}  # the autoscaler's newest word per step
        self._lock = threading.Lock()

    def explain(
        self, handle: JobHandle, namespace: str, pod: Mapping[str, Any] | None, core: CoreV1Api
    ) -> StepStatus:
        """The Pending status of the step, with the best reason known so far: the autoscaler's
        word on an unschedulable pod (`scaleup.py`) before the scheduler's, the scheduler's or
        kubelet's condition, else the newest Warning event."""
        job = handle.job_id
        status = pending_status(pod) if pod is not None else StepStatus.pending()
        if status.message:
            status = replace(status, message=with_device_note(status.message))
        if status.waiting and status.waiting not in UNSCHEDULABLE:
            with self._lock:
                self._last[job] = status
            return status  # the kubelet's (ContainerCreating, ...): no autoscaler involved
        subject = pod_name(pod) if pod is not None else job
        unseen = pod is not None and unseen_by_scheduler(pod)  # nothing said of it: not read
        events = self._events_due(job, namespace, subject, core, readable=not unseen)
        with self._lock:
            if events is not None:
                words = [(e, w) for e in events if (w := read_scale_event(e)) is not None]
                if words:
                    self._scale[job] = max(words, key=lambda pair: _event_time(pair[0]))[1]
                warning = _newest(e for e in events if e.get("type") == "Warning")
                if warning is not None:
                    self._last[job] = StepStatus.pending(
                        warning.get("reason") or "Warning", warning.get("message") or ""
                    )
            if status.waiting:
                self._last[job] = status
            last, word = self._last.get(job, StepStatus.pending()), self._scale.get(job)
        if word is None:
            return last
        said = f"; the scheduler: {status.message}" if status.message else ""
        return StepStatus.pending(word.reason, word.text + said)

    def forget(self, job: str) -> None:
        with self._lock:
            for table in (self._first_seen, self._read_at, self._last, self._scale):
                table.pop(job, None)  # type: ignore[attr-defined]

    def _events_due(
        self, job: str, namespace: str, subject: str, core: CoreV1Api, readable: bool = True
    ) -> list[Mapping[str, Any]] | None:
        """The subject's events, when `interval_s` has passed since the last read (or since it
        was first seen); None when not due or not readable now (`readable` False: the step is
        only counted as seen)."""
        now = self._clock()
        with self._lock:
            first = self._first_seen.setdefault(job, now)
            if not readable or now - max(first, self._read_at.get(job, first)) < self._interval_s:
                return None
            self._read_at[job] = now
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
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == subject]


def unseen_by_scheduler(pod: Mapping[str, Any]) -> bool:
    """Whether the default scheduler has not looked at `pod` yet: no node and no
    `PodScheduled` condition. It writes that condition with its `FailedScheduling` event, and an
    autoscaler speaks only of pods it marked unschedulable, so such a pod's events are empty (a
    large fan-out's pods wait here for seconds on a busy control plane). A pod of another
    scheduler, which may say why only in events, is not counted.

    Example:
        >>> unseen_by_scheduler({"metadata": {"name": "p"}, "status": {"phase": "Pending"}})
        True
        >>> unseen_by_scheduler({"spec": {"schedulerName": "volcano"}, "status": {}})
        False
    """
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or condition_of(status, "PodScheduled") is not None:
        return False
    return spec.get("schedulerName") in (None, "default-scheduler")


def _newest(events: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return max(events, key=_event_time, default=None)


def _event_time(event: Mapping[str, Any]) -> str:
    metadata = event.get("metadata") or {}
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or metadata.get("creationTimestamp")
        or ""
    )
