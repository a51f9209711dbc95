"""The backend's book of submitted attempts: what each one is, and where its pods are seen.

An `Attempt` holds what the backend itself tracks of one attempt — its Job, its pod watch,
the admission mode that admits it, when it started and ended, how it ended — while each
concern keeps its own per-attempt state beside it: the admission mode (`admission/`), memory
and growth (`growth.py`), log streams (`logs.py`), the Pending explanation (`pending.py`).

Example:
    >>> book = AttemptBook()
    >>> book.find("k8s-ai-3f2a-train-0") is None
    True
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import BackendError
from ..base import JobHandle, LaunchRequest, ResourceUsage, StepState, StepStatus
from .admission import Admission, AttemptJob
from .gangs import pod_index, preempted_pods
from .jobapi import JobApi
from .preemption import PreemptorLookup
from .status import pod_name, pod_status
from .watch import PodWatch

Pod = Mapping[str, Any]


@dataclass
class Attempt:
    """One submitted attempt (mutable, private to the backend)."""

    job: AttemptJob  # its Job: request, tenant, namespace, name
    watch: PodWatch  # the run's pods in its namespace
    admission: Admission  # the mode that admits it, chosen at submit
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    final: StepStatus | None = None
    cancelled: bool = False
    stopped: bool = False  # a gang whose Job the backend deleted (`gangs.abandoned_rank`)
    log_tail: str = ""  # the failed pod's last lines, read when it ended
    partial_since: float | None = None  # a gang's first pod Running, not all of them yet
    preemptor: PreemptorLookup = field(default_factory=PreemptorLookup)
    adopted: bool = False  # found by a resumed run worker (it ran while no one watched)
    ended_unseen: StepStatus | None = None  # adopted: how its Job ended, if it had (no pods)
    gpu_devices: float | None = None  # DRA: GPUs allocated to its claims (`dra_devices.py`)
    gang_wait_node_s: float = 0.0  # a gang: its ranks' node-seconds before all of them ran
    # before it ran: (queued holding nothing, quota held idle) seconds (`waiting.split_wait`);
    # None until it ran or ended, and for an adopted attempt (its submit was not seen)
    waited: tuple[float, float] | None = None

    @property
    def request(self) -> LaunchRequest:
        return self.job.request

    @property
    def tenant(self) -> str:
        return self.job.tenant

    @property
    def namespace(self) -> str:
        return self.job.namespace

    @property
    def is_gang(self) -> bool:
        return self.job.request.spec.is_gang

    def usage(
        self,
        clock: Callable[[], float],
        max_rss_bytes: int | None,
        cpu_used_seconds: float | None = None,
    ) -> ResourceUsage:
        """Requested resources × seconds it has run (so far: until `clock()`); GPUs are the
        devices allocated to its claims where they were read (DRA), else those it asked for.
        A gang counts its ranks that ran before all of them did (`gang_wait_node_s`), and a
        gang that never ran whole only those; quota held idle before it ran counts as held."""
        queued, idle = self.waited or (0.0, 0.0)
        end = self.finished_at if self.finished_at is not None else clock()
        wall = 0.0 if self.started_at is None else max(0.0, end - self.started_at)
        placed = {str(p["spec"]["nodeName"]) for p in self.pods() if p["spec"].get("nodeName")}
        nodes = (self.final.node,) if self.final and self.final.node else tuple(sorted(placed))
        spec = self.request.spec
        parts = [
            ResourceUsage.reserved(spec, wall + idle, self.gpu_devices),
            ResourceUsage.reserved(replace(spec, nodes=1), self.gang_wait_node_s),
        ]
        return ResourceUsage(
            cpu_seconds=sum(part.cpu_seconds for part in parts),
            memory_gib_seconds=sum(part.memory_gib_seconds for part in parts),
            gpu_seconds=sum(part.gpu_seconds for part in parts),
            wall_seconds=wall,
            nodes=nodes,
            max_rss_bytes=max_rss_bytes if self.started_at is not None else None,
            cpu_used_seconds=cpu_used_seconds if self.started_at is not None else None,
            waiting_node_seconds=self.gang_wait_node_s,
            queued_seconds=round(queued, 3),
            quota_idle_seconds=round(idle, 3),
        )

    def pods(self) -> list[Pod]:
        """Its live pods from the watch cache, oldest first."""
        return self.watch.pods(self.job.name)

    def latest_pod(self) -> Pod | None:
        """Its newest live pod from the watch cache, or None."""
        pods = self.pods()
        return pods[-1] if pods else None

    def running_pod(self) -> dict[str, Any] | None:
        """Its newest pod if that is Running, else None."""
        pod = self.latest_pod()
        if pod is None or pod_status(pod).state != StepState.RUNNING:
            return None
        return dict(pod)

    def log_pod(self) -> str | None:
        """The pod whose log is the step's: the only one, or a gang's leader (index 0)."""
        pods = self.pods()
        if self.is_gang:
            gone = self.watch.deleted_pods(self.job.name)
            leaders = [p for p in [*pods, *gone] if pod_index(p) == 0]
            return pod_name(leaders[0]) if leaders else None
        if pods:
            return pod_name(pods[-1])
        last = self.watch.deleted(self.job.name)
        return pod_name(last) if last is not None else None

    def victims(self) -> list[Pod]:
        """The pods a preemption of the attempt would have hit: a gang's preempted pods (else
        all of them), or the step's pod (live, else its last state)."""
        pods = self.pods()
        if self.is_gang:
            gone = self.watch.deleted_pods(self.job.name)
            return preempted_pods(pods, gone) or [*pods, *gone]
        last = pods[-1] if pods else self.watch.deleted(self.job.name)
        return [last] if last is not None else []


class AttemptBook:
    """The attempts a backend instance submitted, by Job name (thread-safe)."""

    def __init__(self) -> None:
        self._attempts: dict[str, Attempt] = {}
        self._lock = threading.Lock()

    def add(self, attempt: Attempt) -> None:
        with self._lock:
            self._attempts[attempt.job.name] = attempt

    def find(self, job: str) -> Attempt | None:
        with self._lock:
            return self._attempts.get(job)

    def of(self, handle: JobHandle) -> Attempt:
        """The handle's attempt; `BackendError` if this instance did not submit it."""
        found = self.find(handle.job_id)
        if found is None:
            raise BackendError(
                f"step '{handle.step_key}': Job {handle.job_id} was not submitted by this "
                "backend instance; its status cannot be followed"
            )
        return found

    def release(self, handle: JobHandle) -> list[Attempt]:
        """Take the handle's attempt and the same step's earlier ones out of the book (the
        executor is done with the step); returns them."""
        with self._lock:
            found = self._attempts.get(handle.job_id)
            if found is None:
                return []
            run, step = found.request.run_id, found.request.step_key
            gone = [
                a
                for a in self._attempts.values()
                if a.request.run_id == run
                and a.request.step_key == step
                and a.request.attempt <= found.request.attempt
            ]
            for attempt in gone:
                del self._attempts[attempt.job.name]
        return gone

    def drop_earlier(self, request: LaunchRequest, jobs: JobApi) -> None:
        """Delete the Jobs of the step's earlier attempts that have not succeeded: the executor
        has left them, and Kueue would readmit a Job it evicted (suspended, requeued) and run
        the step twice."""
        with self._lock:
            earlier = [
                a
                for a in self._attempts.values()
                if a.request.run_id == request.run_id
                and a.request.step_key == request.step_key
                and a.request.attempt < request.attempt
            ]
        for old in earlier:
            if old.final is not None and old.final.state == StepState.SUCCEEDED:
                continue
            if old.final is None:
                old.cancelled = True
            jobs.delete(old.tenant, old.namespace, old.job.name, request.step_key)
