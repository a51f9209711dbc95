"""An attempt's `StepStatus`, read from the watch cache: one pod's, or a whole gang's.

While it runs, nothing is asked of the API server but what a concern needs: Pending gets its
reason (the admission mode's, else the scheduler's events, `pending.py`; the step's `timeout`
is its observer's, `launch.lifecycle`); a measured running pod has its memory read
(`growth.py`); a preempted attempt has its preemptor named (`preemption.py`); an attempt
that ends takes its admission's eviction into account, keeps its failed pod's log tail, and
has its Job deleted when its pod cannot finish by itself.

Example:
    >>> observer = AttemptObserver(config, tenants, jobs, growth, logs, clock)  # doctest: +SKIP
    >>> observer.status(handle, attempt).state  # doctest: +SKIP
    <StepState.RUNNING: 'Running'>
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from ...usage_report import MemoryReading
from ..base import FailureReason, JobHandle, StepState, StepStatus
from .attempts import Attempt
from .config import KubernetesConfig
from .dra import claims_gpus
from .dra_devices import read_allocated_gpus
from .dra_occupancy import FreeDevices, waits_for_devices
from .gangs import (
    abandoned_rank,
    gang_status,
    lost_pods,
    partial_gang,
    pending_pod,
    pod_index,
    preempted_pods,
    running_count,
)
from .growth import PodGrowth
from .jobapi import JobApi
from .logs import LogStreams, read_tail
from .pending import PendingExplainer
from .preemption import preempted_event, preempted_unseen
from .scaleup import NODE_COMING
from .status import (
    container_ages,
    deleted_pod_status,
    gang_seen_ended,
    gang_wait,
    pod_name,
    settled_pod_status,
)
from .tenants import TenantConnections
from .waiting import split_wait

FAILURE_LOG_TAIL_LINES = 50

Pod = Mapping[str, Any]


class AttemptObserver:
    """Turns what the watch saw of an attempt into its status (see the module docstring)."""

    def __init__(
        self,
        config: KubernetesConfig,
        tenants: TenantConnections,
        jobs: JobApi,
        growth: PodGrowth,
        logs: LogStreams,
        clock: Callable[[], float],
        wall: Callable[[], float] = time.time,  # the kubelet's timestamps are epoch seconds
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._config = config
        self._wall = wall
        self._sleep = sleep
        self._tenants = tenants
        self._jobs = jobs
        self._growth = growth
        self._logs = logs
        self._clock = clock
        self._pending = PendingExplainer(config.pending_events_interval_s, clock)
        self._free = FreeDevices(config.pending_events_interval_s, clock)

    def status(self, handle: JobHandle, attempt: Attempt) -> StepStatus:
        """The attempt's state (its final one once it has ended)."""
        if attempt.final is not None:
            return attempt.final
        if attempt.cancelled:
            return self.finish(attempt, StepStatus.failed(FailureReason.CANCELLED, "cancelled"))
        if attempt.is_gang:
            return self._gang_status(handle, attempt)
        pod = attempt.latest_pod()
        gone = attempt.watch.deleted(handle.job_id) if pod is None else None
        if pod is not None:
            current = settled_pod_status(pod, self._wall())
            if current.state is StepState.RUNNING and _phase(pod) == "Failed":
                return current  # its OOM kill may not be told yet: nothing to measure
        elif gone is not None:
            current = deleted_pod_status(gone)
        else:
            current = attempt.ended_unseen or StepStatus.pending()
        if current.state == StepState.PENDING:
            current = self._explain_pending(handle, attempt, pod)
        elif current.state == StepState.RUNNING:
            self._started(attempt, [pod] if pod is not None else [])
            if pod is not None:
                self._measure(attempt, pod)
                current = self._coming_eviction(attempt, current, [pod])
        victim = pod or gone
        if current.reason == FailureReason.LOST and victim is not None:
            said = self._preempted_said(attempt, [victim]).get(pod_name(victim), "")
            current = preempted_unseen(current, victim, said)
        if current.reason == FailureReason.PREEMPTED and victim is not None:
            current = self._name_preemptor(attempt, current, [victim])
        if current.is_terminal:
            return self.finish(attempt, current, pod, pod_gone=gone is not None)
        return current

    def _started(self, attempt: Attempt, pods: list[Pod]) -> None:
        """Mark when a running attempt started, on this run worker's clock: now, or for an
        adopted one when its containers started (it ran while no run worker watched); a DRA
        step's allocated devices are read then, while its claims exist (its GPU-seconds)."""
        if attempt.started_at is None:
            ran = container_ages(pods, self._wall())[0] if attempt.adopted else 0.0
            attempt.started_at = self._clock() - ran
            self._waited(attempt, pods)
            if attempt.is_gang and not attempt.adopted:  # its ranks that ran while it waited
                attempt.gang_wait_node_s = gang_wait(pods, self._wall())
            spec, tenant = attempt.request.spec, self._config.tenant(attempt.tenant)
            if claims_gpus(spec, self._config.gpus_of(tenant)):
                api_client = self._tenants.client(attempt.tenant, attempt.request.step_key)
                attempt.gpu_devices = read_allocated_gpus(
                    api_client, attempt.namespace, pods, partitions=bool(spec.gpu_partition)
                )

    def _waited(self, attempt: Attempt, pods: list[Pod]) -> None:
        """Record once what the attempt waited before it ran, split by whether it held its
        quota (`waiting.split_wait`); an adopted attempt's submit was not seen: not recorded."""
        if attempt.waited is None and not attempt.adopted:
            since_submit = (attempt.finished_at or self._clock()) - attempt.submitted_at
            holds = attempt.admission.holds_quota
            attempt.waited = split_wait(since_submit, pods, self._wall(), holds_quota=holds)

    def core(self, attempt: Attempt) -> CoreV1Api:
        """The CoreV1Api of the attempt's tenant."""
        return CoreV1Api(self._tenants.client(attempt.tenant, attempt.request.step_key))

    def _gang_status(self, handle: JobHandle, attempt: Attempt) -> StepStatus:
        """A gang's state from all its pods, with its all-running timeout."""
        pods = attempt.pods()
        nodes = attempt.request.spec.nodes
        gone = attempt.watch.deleted_pods(handle.job_id)
        current, said = gang_status(pods, gone, nodes, now=self._wall()), {}
        if current.reason == FailureReason.LOST:  # a rank gone before its end was copied
            said = self._preempted_said(attempt, lost_pods(pods, gone, now=self._wall()))
            current = gang_status(pods, gone, nodes, now=self._wall(), preempted=said)
        if not pods and not gone and attempt.ended_unseen is not None:
            current = attempt.ended_unseen  # adopted after its pods were gone
        running = running_count(pods)
        if current.state == StepState.PENDING and running:
            current = self._partial_gang(handle, attempt, pods, running)
        elif current.state == StepState.PENDING:
            current = self._explain_pending(handle, attempt, pending_pod(pods))
        elif current.state == StepState.RUNNING:
            self._started(attempt, pods)
            current = self._coming_eviction(attempt, current, pods)
        if current.reason == FailureReason.PREEMPTED:
            current = self._name_preemptor(attempt, current, preempted_pods(pods, gone, said))
        if not attempt.stopped and abandoned_rank(current, pods, now=self._wall()) is not None:
            attempt.stopped = True  # its Job will never stop the other ranks: deleted here
            self._jobs.delete(attempt.tenant, attempt.namespace, attempt.job.name, handle.step_key)
        if current.is_terminal:
            if attempt.started_at is None and not attempt.adopted:  # ended between two looks
                whole, attempt.gang_wait_node_s = gang_seen_ended(pods, nodes, self._wall())
                if whole is not None:
                    attempt.started_at = self._clock() - whole
            leader = next((p for p in pods if pod_index(p) == 0), None)
            return self.finish(attempt, current, leader, pod_gone=leader is None)
        return current

    def _partial_gang(
        self, handle: JobHandle, attempt: Attempt, pods: list[Any], running: int
    ) -> StepStatus:
        """Some pods run, not all: wait up to all_running_timeout_s, then delete the gang."""
        nodes, now = attempt.request.spec.nodes, self._clock()
        if attempt.partial_since is None:
            attempt.partial_since = now
        waiting = pending_pod(pods)
        last = self._pending.explain(handle, attempt.namespace, waiting, self.core(attempt))
        why = f"{last.waiting}: {last.message}" if last.waiting else "no reason reported yet"
        gangs = self._config.tenant(attempt.tenant).gang_admission
        limit = gangs.partial_limit_s(provisioning=last.waiting in NODE_COMING)
        status = partial_gang(
            handle.step_key,
            attempt.tenant,
            nodes=nodes,
            running=running,
            waited_s=now - attempt.partial_since,
            why=why,
            limit_s=limit,
        )
        if status.is_terminal:
            self._jobs.delete(attempt.tenant, attempt.namespace, handle.job_id, handle.step_key)
        return status

    def _explain_pending(self, handle: JobHandle, attempt: Attempt, pod: Pod | None) -> StepStatus:
        """Why it is Pending: its admission's reason while it has no pod, else the
        scheduler's; a DRA step whose claims wait is also told which devices are free."""
        queued = attempt.admission.pending(attempt.job) if pod is None else None
        if queued is not None:
            return queued
        status = self._pending.explain(handle, attempt.namespace, pod, self.core(attempt))
        spec, tenant = attempt.request.spec, self._config.tenant(attempt.tenant)
        gpus = self._config.gpus_of(tenant)
        if claims_gpus(spec, gpus) and waits_for_devices(status.message):
            api_client = self._tenants.client(attempt.tenant, attempt.request.step_key)
            note = self._free.note(attempt.job.name, spec, gpus, api_client, attempt.namespace)
            if note:
                status = replace(status, message=f"{status.message}; {note}")
        return status

    def finish(
        self,
        attempt: Attempt,
        status: StepStatus,
        pod: Pod | None = None,
        pod_gone: bool = False,
    ) -> StepStatus:
        """Record the final status; stop a Job whose pod cannot finish by itself."""
        evicted = attempt.admission.evicted(attempt.job, cancelled=attempt.cancelled)
        status = evicted or status
        attempt.finished_at = self._clock()
        if attempt.started_at is None and attempt.adopted and pod is not None:
            started, ended = container_ages([pod], self._wall())  # it ended while unwatched
            attempt.started_at = attempt.finished_at - started
            attempt.finished_at -= ended or 0.0
        pods = attempt.pods() or ([pod] if pod is not None else [])
        if attempt.started_at is None and status.node and not attempt.is_gang:
            ran = container_ages(pods, self._wall())[0]  # it ran between two looks
            attempt.started_at = attempt.finished_at - ran if ran else attempt.submitted_at
            if not ran:  # when is unknown: all of it counts as run, none as waited
                attempt.waited = attempt.waited or (0.0, 0.0)
        self._waited(attempt, pods)
        if status.state == StepState.FAILED and pod is not None and not attempt.cancelled:
            try:
                attempt.log_tail = read_tail(
                    self.core(attempt), attempt.namespace, pod_name(pod), FAILURE_LOG_TAIL_LINES
                )
            except ApiException:
                attempt.log_tail = ""
        stuck = pod is not None and not _pod_finished(pod)
        never_started = pod is None and not pod_gone
        stuck = stuck or evicted is not None  # Kueue would readmit the suspended Job
        if status.state == StepState.FAILED and not attempt.cancelled and (stuck or never_started):
            self._jobs.delete(
                attempt.tenant, attempt.namespace, attempt.job.name, attempt.request.step_key
            )
        attempt.final = status
        self._pending.forget(attempt.job.name)
        self._free.forget(attempt.job.name)
        attempt.admission.finished(attempt.job)
        return status

    def _coming_eviction(
        self, attempt: Attempt, current: StepStatus, pods: Iterable[Pod]
    ) -> StepStatus:
        """A running attempt whose pods are being deleted because admission took it back
        (Kueue): Running still (the pods save their checkpoints), with the eviction as the
        reason of what is coming."""
        terminating = any((p.get("metadata") or {}).get("deletionTimestamp") for p in pods)
        if not terminating:
            return current
        eviction = attempt.admission.evicted(attempt.job, cancelled=attempt.cancelled)
        if eviction is None:
            return current
        attempt.preemptor.named_by_admission()
        return StepStatus(StepState.RUNNING, eviction.reason, eviction.message, node=current.node)

    def _preempted_said(self, attempt: Attempt, lost: list[Pod]) -> dict[str, str]:
        """The scheduler's `Preempted` event message on each pod that reads Lost, by name:
        what still says it was preempted when its host pod went before its DisruptionTarget
        and end reached the tenant."""
        if not lost:
            return {}
        core = self.core(attempt)
        said = {pod_name(p): preempted_event(core, attempt.namespace, p) for p in lost}
        return {name: message for name, message in said.items() if message}

    def _name_preemptor(
        self, attempt: Attempt, status: StepStatus, victims: list[Pod]
    ) -> StepStatus:
        """The status with the step (or pod) that preempted its pod (a gang's preempted pods),
        while they save in their grace period (the step may ask first, on its SIGTERM) and
        once they have ended: then read again for a moment until a tenant pod is named, once
        (`PreemptorLookup.wait`), since the victim may end before its tenant shows the
        preemptor."""
        core, lookup, namespace = self.core(attempt), attempt.preemptor, attempt.namespace
        named = lookup.found is not None and lookup.found.named
        if not status.is_terminal or (lookup.settled and not named):
            return replace(status, message=lookup.name(core, namespace, victims, status.message))
        said = lookup.wait(core, namespace, victims, clock=self._clock, sleep=self._sleep)
        return replace(status, message="; ".join(t for t in (status.message, said) if t))

    def _measure(self, attempt: Attempt, pod: Pod) -> None:
        """Measure a running pod's memory (growth on, or a memory="auto" step) and grow it;
        a pod that reports its memory is read from its log stream."""
        job, core = attempt.job, self.core(attempt)

        def report() -> MemoryReading | None:
            return self._logs.follow(job.name, core, job.namespace, pod_name(pod)).last_report

        self._growth.measure(job.name, job.request, core, job.tenant, pod, report)


def _pod_finished(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _phase(pod: Mapping[str, Any]) -> str | None:
    return (pod.get("status") or {}).get("phase")
