"""The Kubernetes backend: each step attempt is a batch/v1 Job in its tenant's (v)cluster.

Submitting resolves the tenant (refusing ones outside `allowed_tenants`), runs the pre-flight
checks once per tenant and size, and creates the Job. Status comes from one pod watch per
tenant namespace shared by all steps of the run; `status()` reads memory. A step that stays
Pending is explained with the scheduler's message (or the quota error that keeps its pod from
being created) and fails with that reason once Pending longer than its `timeout`. With a
`MemoryGrowth` policy (or a `memory="auto"` step) a running pod's memory is read from its node
and grown in place through `pods/resize` (`growth.py`).

Example:
    >>> backend = KubernetesBackend(
    ...     KubernetesConfig.from_dict({"image": "ghcr.io/acme/pipeline:1.0",
    ...         "tenants": {"team-a": {"kubeconfig": "/etc/team-a/kubeconfig"}}}),
    ...     allowed_tenants=["team-a"], default_tenant="team-a")
    >>> handle = backend.submit(request)  # doctest: +SKIP
    >>> backend.status(handle).state  # doctest: +SKIP
    <StepState.RUNNING: 'Running'>
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from ...errors import BackendError, ConfigError, SubmitError
from ..base import (
    FailureReason,
    GrowResult,
    JobHandle,
    LaunchRequest,
    MemoryGrowth,
    Resize,
    ResourceUsage,
    StepState,
    StepStatus,
)
from .api import ApiRetry, api_message
from .config import KubernetesConfig, TenantConfig
from .gangs import GangGuard, gang_status, pending_pod, pod_index, running_count
from .growth import PodGrowth, PodMemory, resizable
from .jobapi import JobApi
from .jobs import build_job, config_problems, job_name, manifest_problems, run_selector
from .kueue import KueueWorkloads, check_local_queue
from .logs import LogFollower, read_tail
from .pending import PendingExplainer
from .podgroups import check_served, create_podgroup
from .preemption import who_preempted
from .preflight import Preflight
from .status import deleted_pod_status, pod_name, pod_status
from .tenants import TenantConnections
from .watch import PodWatch

__all__ = ["KubernetesBackend", "KubernetesConfig"]

_GiB = 1024**3
FAILURE_LOG_TAIL_LINES = 50


@dataclass
class _Attempt:
    """Book-keeping of one submitted attempt (mutable, private to the backend)."""

    request: LaunchRequest
    tenant: str
    namespace: str
    watch: PodWatch
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    final: StepStatus | None = None
    cancelled: bool = False
    log_tail: str = ""
    follower: LogFollower | None = None
    waiting_manifest: dict[str, Any] | None = None  # a gang not created yet: no room
    partial_since: float | None = None  # a gang's first pod Running, not all of them yet
    final_hint: StepStatus | None = None  # why a gang's Job waits for room (not created)
    room_checked_at: float = 0.0
    memory: PodMemory | None = None  # measured (and grown) while it runs
    local_queue: str | None = None  # the tenant's Kueue LocalQueue (gang_admission: kueue)
    eviction: StepStatus | None = None  # Kueue evicted it (seen once its pods terminate)


class KubernetesBackend:
    """Runs step attempts as Jobs on vCluster tenants (see the module docstring).

    Args:
        config: the `kubernetes` section of the executor config.
        allowed_tenants: tenants this run may use; None allows every configured tenant.
        default_tenant: tenant of steps that name none.
        clock: monotonic seconds (Pending timeouts and resource-seconds).
        sleep: waits between API retries and watch reconnects.
        logger: where reconnects and warnings go (never credentials).
        growth: when to raise a running pod's memory in place (None: never; measured only
            for `memory="auto"` steps).
    """

    name = "kubernetes"

    def __init__(
        self,
        config: KubernetesConfig,
        *,
        allowed_tenants: Iterable[str] | None = None,
        default_tenant: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        logger: logging.Logger | None = None,
        growth: MemoryGrowth | None = None,
    ) -> None:
        self.config = config
        self.default_tenant = default_tenant
        self._clock = clock
        self._sleep = sleep
        self._watch_sleep = None if sleep is time.sleep else sleep
        self._log = logger or logging.getLogger(__name__)
        self._tenants = TenantConnections(config, allowed_tenants)
        self._retry = ApiRetry(
            retries=config.api_retries, sleep=sleep, server_of=self._tenants.server
        )
        self._preflight = Preflight(config, self._retry)
        self._jobs = JobApi(self._tenants, self._retry)
        self._guard = GangGuard(config, self._retry)
        self._pending = PendingExplainer(config.pending_events_interval_s, clock)
        self._growth = PodGrowth(growth, self._retry, clock, self._log)
        self._kueue = KueueWorkloads(self._retry, config.pending_events_interval_s, clock)
        self._admission_checked: set[str] = set()  # tenants whose gang admission was found
        self._watches: dict[tuple[str, str, str], PodWatch] = {}
        self._attempts: dict[str, _Attempt] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None, **kwargs: Any) -> KubernetesBackend:
        """Build from the executor config's raw `kubernetes` section."""
        return cls(KubernetesConfig.from_dict(raw), **kwargs)

    def validate(self, request: LaunchRequest) -> None:
        """Every check `submit` makes, creating nothing: tenant, size, names, pre-flight.

        The executor calls it for every step of a run before the first submit, so a missing
        kubeconfig, a name the API server would refuse or a step that can never fit fails
        the run before anything runs. Raises `ConfigError` or `SubmitError`.
        """
        self._prepare(request)

    def submit(self, request: LaunchRequest) -> JobHandle:
        """Create the attempt's Job; `SubmitError` if it can never run where it is routed."""
        request, settings, manifest, api_client = self._prepare(request)
        tenant = str(request.tenant)
        watch = self._watch_for(tenant, settings.namespace, request.run_id, api_client)
        admission = settings.gang_admission
        attempt = _Attempt(request, tenant, settings.namespace, watch, self._clock())
        attempt.local_queue = admission.local_queue if admission.kueue else None
        workload = request.spec.is_gang and admission.podgroups
        if request.spec.is_gang and admission.guarded:
            attempt.final_hint = self._guard.waiting_for_room(
                CoreV1Api(api_client), tenant, settings.namespace, request.spec
            )
        if attempt.local_queue is not None:
            self._drop_earlier_attempts(request)
        if attempt.final_hint is not None:
            attempt.waiting_manifest = manifest  # created by status() once there is room
        else:
            self._jobs.create(request, settings.namespace, manifest)
        if workload:  # the scheduler binds all the Job's pods or none
            name = manifest["metadata"]["name"]
            priority = self.config.priority_classes.of(request.spec.preemptible)
            create_podgroup(request, settings.namespace, name, priority, api_client, self._retry)
        name = job_name(request)
        with self._lock:
            self._attempts[name] = attempt
        return JobHandle(self.name, name, request.step_key, tenant, settings.namespace)

    def _drop_earlier_attempts(self, request: LaunchRequest) -> None:
        """Delete the Jobs of the step's earlier attempts that have not succeeded: the executor
        has left them, and Kueue would readmit a Job it evicted (suspended, requeued) and run
        the step twice."""
        with self._lock:
            earlier = [
                (name, a)
                for name, a in self._attempts.items()
                if a.request.run_id == request.run_id
                and a.request.step_key == request.step_key
                and a.request.attempt < request.attempt
            ]
        for name, old in earlier:
            if old.final is not None and old.final.state == StepState.SUCCEEDED:
                continue
            if old.final is None:
                old.cancelled = True
            self._jobs.delete(old.tenant, old.namespace, name, request.step_key)

    def _prepare(
        self, request: LaunchRequest
    ) -> tuple[LaunchRequest, TenantConfig, dict[str, Any], ApiClient]:
        """The request with its tenant, the tenant, the Job manifest and the tenant's client."""
        tenant = request.tenant or request.spec.tenant or self.default_tenant
        if tenant is None:
            raise ConfigError(
                f"step '{request.step_key}' names no tenant and the executor has no "
                "default_tenant; set default_tenant or compute(tenant=...)"
            )
        settings = self._tenants.check_allowed(tenant, request.step_key)
        size = request.spec.size
        if settings.allowed_sizes is not None and size not in settings.allowed_sizes:
            raise SubmitError(
                f"step '{request.step_key}' has size class '{size}', which tenant '{tenant}' "
                f"does not accept (allowed_sizes: {list(settings.allowed_sizes)}); pick one of "
                f"those or add '{size}' to kubernetes.tenants.{tenant}.allowed_sizes"
            )
        request = replace(request, tenant=tenant)
        problems = config_problems(settings, self.config)
        manifest = build_job(request, settings, self.config)
        if self._growth.growth is not None and not request.spec.is_gang:
            resizable(manifest)  # grown in place without a restart
        problems += [] if problems else manifest_problems(manifest)
        if problems:
            raise ConfigError(
                f"step '{request.step_key}' (tenant '{tenant}'): " + "; ".join(problems)
            )
        api_client = self._tenants.client(tenant, request.step_key)
        try:
            self._preflight.run(request, settings, api_client)
            self._check_admission(request, settings, api_client)
        except ApiException as error:
            raise SubmitError(
                f"step '{request.step_key}': tenant '{tenant}' refused the pre-flight checks "
                f"({api_message(error)}); check the tenant's API server and the executor's "
                "permissions there"
            ) from None
        return request, settings, manifest, api_client

    def _check_admission(
        self, request: LaunchRequest, settings: TenantConfig, api_client: ApiClient
    ) -> None:
        """Pre-flight of the tenant's gang admission, once per tenant: PodGroups served for
        `workload` (gangs only), the LocalQueue there and active for `kueue` (every step)."""
        admission, tenant = settings.gang_admission, str(request.tenant)
        if tenant in self._admission_checked:
            return
        if admission.podgroups and request.spec.is_gang:
            check_served(request.step_key, tenant, api_client, self._retry)
        elif admission.kueue:
            check_local_queue(
                request.step_key,
                tenant,
                settings.namespace,
                str(admission.local_queue),
                api_client,
                self._retry,
            )
        else:
            return
        self._admission_checked.add(tenant)

    def status(self, handle: JobHandle) -> StepStatus:
        """The attempt's state from the watch cache (no API request while it runs)."""
        attempt = self._attempt(handle)
        if attempt.final is not None:
            return attempt.final
        if attempt.cancelled:
            return self._finish(attempt, StepStatus.failed(FailureReason.CANCELLED, "cancelled"))
        if attempt.request.spec.is_gang:
            return self._gang_status(handle, attempt)
        pod = self._latest_pod(handle, attempt)
        gone = attempt.watch.deleted(handle.job_id) if pod is None else None
        if pod is not None:
            current = pod_status(pod)
        elif gone is not None:
            current = deleted_pod_status(gone)
        else:
            current = StepStatus.pending()
        if current.state == StepState.PENDING:
            current = self._explain_pending(handle, attempt, pod)
        elif current.state == StepState.RUNNING:
            if attempt.started_at is None:
                attempt.started_at = self._clock()
            if pod is not None:
                self._observe_memory(attempt, pod)
                current = self._coming_eviction(attempt, current, [pod])
        if current.is_terminal:
            victim = pod or gone
            if current.reason == FailureReason.PREEMPTED and victim is not None:
                current = self._name_preemptor(attempt, current, pod_name(victim))
            return self._finish(attempt, current, pod, pod_gone=gone is not None)
        return current

    def _name_preemptor(self, attempt: _Attempt, status: StepStatus, victim: str) -> StepStatus:
        """The status with the step (or pod) that preempted it, from the scheduler's event."""
        who = who_preempted(self._core(attempt), attempt.namespace, victim)
        return replace(status, message=f"{status.message}; {who}") if who else status

    def logs(self, handle: JobHandle, tail_lines: int | None = None) -> str:
        """The attempt's log (last `tail_lines` lines); one API request."""
        attempt = self._attempt(handle)
        pod = self._pod_name(handle, attempt)
        if pod is None:
            return attempt.log_tail
        core = CoreV1Api(self._tenants.client(attempt.tenant, handle.step_key))
        try:
            text = self._retry.call(
                "read logs",
                attempt.tenant,
                lambda: read_tail(core, attempt.namespace, pod, tail_lines),
            )
        except (ApiException, BackendError):
            return attempt.log_tail
        return text or attempt.log_tail

    def logs_since(self, handle: JobHandle, offset: int = 0) -> tuple[str, int]:
        """New log text after byte `offset` and the next offset; one follow stream per pod.

        Example:
            >>> text, offset = backend.logs_since(handle)  # doctest: +SKIP
            >>> more, offset = backend.logs_since(handle, offset)  # doctest: +SKIP
        """
        attempt = self._attempt(handle)
        pod = self._pod_name(handle, attempt)
        if pod is None:
            return "", offset
        if attempt.follower is None or attempt.follower.pod != pod:
            core = CoreV1Api(self._tenants.client(attempt.tenant, handle.step_key))
            attempt.follower = LogFollower(core, attempt.namespace, pod)
        return attempt.follower.read_since(offset)

    def cancel(self, handle: JobHandle) -> None:
        """Delete the attempt's Job and its pods (propagation Background); idempotent.

        A Job seen to succeed is left to its `ttlSecondsAfterFinished` (one day, as
        dagster-k8s sets it): its pods have ended, so there is nothing to stop.
        """
        attempt = self._attempts.get(handle.job_id)
        if attempt is not None:
            if attempt.final is not None and attempt.final.state == StepState.SUCCEEDED:
                return
            attempt.cancelled = True
            if attempt.follower is not None:
                attempt.follower.close()
        tenant = handle.tenant or (attempt.tenant if attempt else None)
        if tenant is None or handle.namespace is None:
            return
        self._jobs.delete(tenant, handle.namespace, handle.job_id, handle.step_key)

    def usage(self, handle: JobHandle) -> ResourceUsage:
        """Requested resources × seconds the attempt has run (so far)."""
        attempt = self._attempt(handle)
        if attempt.started_at is None:
            return ResourceUsage()
        end = attempt.finished_at if attempt.finished_at is not None else self._clock()
        wall = max(0.0, end - attempt.started_at)
        spec = attempt.request.spec
        node = attempt.final.node if attempt.final else None
        memory = attempt.memory
        return ResourceUsage(
            cpu_seconds=spec.total_cpu * wall,
            memory_gib_seconds=spec.memory_bytes * spec.nodes / _GiB * wall,
            gpu_seconds=spec.gpu * spec.nodes * wall,
            wall_seconds=wall,
            nodes=(node,) if node else (),
            max_rss_bytes=(memory.peak_bytes or None) if memory is not None else None,
        )

    def grow_memory(self, handle: JobHandle, new_limit_bytes: int) -> GrowResult:
        """Ask for the running pod's memory to be raised to `new_limit_bytes` in place.

        The answer is pending until the kubelet applies it (see `resizes`); it is refused
        when the attempt has no running pod or the API server says no.
        """
        attempt = self._attempt(handle)
        pod = self._running_pod(handle, attempt)
        if pod is None or attempt.memory is None:
            return GrowResult.refused(f"step '{handle.step_key}' has no running pod to resize")
        memory = attempt.memory
        before = len(memory.resizes)
        core = self._core(attempt)
        self._growth.ask(core, attempt.tenant, pod, memory, new_limit_bytes, memory.peak_bytes)
        if len(memory.resizes) > before:
            return GrowResult.refused(memory.resizes[-1].reason)
        return GrowResult.pending("the kubelet applies it when the node has room")

    def resizes(self, handle: JobHandle) -> tuple[Resize, ...]:
        """Every in-place growth tried for the attempt so far, in order."""
        attempt = self._attempts.get(handle.job_id)
        memory = attempt.memory if attempt is not None else None
        return tuple(memory.resizes) if memory is not None else ()

    def _observe_memory(self, attempt: _Attempt, pod: Mapping[str, Any]) -> None:
        """Measure a running pod's memory (growth on, or a memory="auto" step) and grow it."""
        spec = attempt.request.spec
        if self._growth.growth is None and not spec.memory_auto:
            return
        if attempt.memory is None:
            attempt.memory = PodMemory(limit_bytes=spec.memory_bytes)
        self._growth.observe(self._core(attempt), attempt.tenant, pod, attempt.memory)

    def _latest_pod(self, handle: JobHandle, attempt: _Attempt) -> Any:
        """The attempt's newest live pod from the watch cache, or None."""
        pods = attempt.watch.pods(handle.job_id)
        return pods[-1] if pods else None

    def _running_pod(self, handle: JobHandle, attempt: _Attempt) -> dict[str, Any] | None:
        pod = self._latest_pod(handle, attempt)
        if pod is None or pod_status(pod).state != StepState.RUNNING:
            return None
        return dict(pod)

    def wait_for_change(self, timeout: float) -> None:
        """Block until a watched pod changes or `timeout` passes (lets a poller sleep less)."""
        with self._lock:
            watches = list(self._watches.values())
        if watches:
            watches[0].wait_for_change(timeout)
        else:
            self._sleep(timeout)

    def close(self) -> None:
        """Stop the watches and log streams and close the tenants' connections."""
        with self._lock:
            watches, self._watches = list(self._watches.values()), {}
            followers = [a.follower for a in self._attempts.values() if a.follower]
        for follower in followers:
            follower.close()
        for watch in watches:
            watch.stop()
        self._tenants.close()

    def _attempt(self, handle: JobHandle) -> _Attempt:
        try:
            return self._attempts[handle.job_id]
        except KeyError:
            raise BackendError(
                f"step '{handle.step_key}': Job {handle.job_id} was not submitted by this "
                "backend instance; its status cannot be followed"
            ) from None

    def _watch_for(self, tenant: str, namespace: str, run_id: str, api_client: Any) -> PodWatch:
        key = (tenant, namespace, run_id)
        with self._lock:
            watch = self._watches.get(key)
            if watch is None:
                watch = PodWatch(
                    CoreV1Api(api_client),
                    namespace,
                    run_selector(run_id),
                    backoff_s=self.config.watch_reconnect_backoff_s,
                    timeout_s=self.config.watch_timeout_s,
                    sleep=self._watch_sleep,
                    logger=self._log,
                )
                watch.start()
                self._watches[key] = watch
        return watch

    def _gang_status(self, handle: JobHandle, attempt: _Attempt) -> StepStatus:
        """A gang's state from all its pods, with guard admission and its all-running timeout."""
        if attempt.waiting_manifest is not None and not self._admit_gang(attempt):
            return self._past_timeout(handle, attempt, attempt.final_hint or StepStatus.pending())
        pods = attempt.watch.pods(handle.job_id)
        nodes = attempt.request.spec.nodes
        current = gang_status(pods, attempt.watch.deleted_pods(handle.job_id), nodes)
        running = running_count(pods)
        if current.state == StepState.PENDING and running:
            current = self._partial_gang(handle, attempt, pods, running)
        elif current.state == StepState.PENDING:
            current = self._explain_pending(handle, attempt, pending_pod(pods))
        elif current.state == StepState.RUNNING:
            if attempt.started_at is None:
                attempt.started_at = self._clock()
            current = self._coming_eviction(attempt, current, pods)
        if current.is_terminal:
            leader = next((p for p in pods if pod_index(p) == 0), None)
            return self._finish(attempt, current, leader, pod_gone=leader is None)
        return current

    def _admit_gang(self, attempt: _Attempt) -> bool:
        """Create a waiting gang's Job once every pod has room (checked every events interval)."""
        now = self._clock()
        if now - attempt.room_checked_at < self.config.pending_events_interval_s:
            return False
        attempt.room_checked_at = now
        attempt.final_hint = self._guard.waiting_for_room(
            self._core(attempt), attempt.tenant, attempt.namespace, attempt.request.spec
        )
        if attempt.final_hint is not None:
            return False
        manifest, attempt.waiting_manifest = attempt.waiting_manifest, None
        self._jobs.create(attempt.request, attempt.namespace, manifest or {})
        return True

    def _partial_gang(
        self, handle: JobHandle, attempt: _Attempt, pods: list[Any], running: int
    ) -> StepStatus:
        """Some pods run, not all: wait up to all_running_timeout_s, then delete the gang."""
        nodes, now = attempt.request.spec.nodes, self._clock()
        if attempt.partial_since is None:
            attempt.partial_since = now
        waiting = pending_pod(pods)
        last = self._pending.explain(handle, attempt.namespace, waiting, self._core(attempt))
        why = f"{last.reason}: {last.message}" if last.reason else "no reason reported yet"
        status = self._guard.partial(
            handle.step_key,
            attempt.tenant,
            nodes=nodes,
            running=running,
            waited_s=now - attempt.partial_since,
            why=why,
        )
        if status.is_terminal:
            self._jobs.delete(attempt.tenant, attempt.namespace, handle.job_id, handle.step_key)
        return status

    def _core(self, attempt: _Attempt) -> CoreV1Api:
        return CoreV1Api(self._tenants.client(attempt.tenant, attempt.request.step_key))

    def _explain_pending(
        self, handle: JobHandle, attempt: _Attempt, pod: Mapping[str, Any] | None
    ) -> StepStatus:
        queued = None
        if attempt.local_queue is not None and pod is None:  # a Job Kueue has not admitted
            queued = self._kueue.pending(
                self._tenants.client(attempt.tenant, handle.step_key),
                attempt.tenant,
                attempt.namespace,
                handle.job_id,
                handle.step_key,
                attempt.local_queue,
            )
        status = queued or self._pending.explain(
            handle, attempt.namespace, pod, self._core(attempt)
        )
        return status if status.is_terminal else self._past_timeout(handle, attempt, status)

    def _past_timeout(self, handle: JobHandle, attempt: _Attempt, status: StepStatus) -> StepStatus:
        """`status`, or the step's failure once it has been Pending longer than its timeout."""
        timeout = attempt.request.spec.timeout_s
        waited = self._clock() - attempt.submitted_at
        if timeout is None or waited <= timeout:
            return status
        last = f"{status.reason}: {status.message}" if status.reason else "no reason reported"
        return StepStatus.failed(
            FailureReason.UNSCHEDULABLE,
            f"step '{handle.step_key}' was Pending for {waited:.0f}s in tenant "
            f"'{attempt.tenant}', longer than its timeout of {timeout:g}s; last reason: {last}",
        )

    def _finish(
        self,
        attempt: _Attempt,
        status: StepStatus,
        pod: Mapping[str, Any] | None = None,
        pod_gone: bool = False,
    ) -> StepStatus:
        """Record the final status; stop a Job whose pod cannot finish by itself."""
        evicted = attempt.eviction or self._kueue_eviction(attempt)
        status = evicted or status
        attempt.finished_at = self._clock()
        if attempt.started_at is None and status.node:
            attempt.started_at = attempt.submitted_at
        if status.state == StepState.FAILED and pod is not None and not attempt.cancelled:
            core = CoreV1Api(self._tenants.client(attempt.tenant, attempt.request.step_key))
            try:
                attempt.log_tail = read_tail(
                    core, attempt.namespace, pod_name(pod), FAILURE_LOG_TAIL_LINES
                )
            except ApiException:
                attempt.log_tail = ""
        stuck = pod is not None and not _pod_finished(pod)
        never_started = pod is None and not pod_gone
        stuck = stuck or evicted is not None  # Kueue would readmit the suspended Job
        if status.state == StepState.FAILED and not attempt.cancelled and (stuck or never_started):
            self._jobs.delete(
                attempt.tenant,
                attempt.namespace,
                job_name(attempt.request),
                attempt.request.step_key,
            )
        attempt.final = status
        self._pending.forget(job_name(attempt.request))
        self._kueue.forget(job_name(attempt.request))
        return status

    def _coming_eviction(
        self, attempt: _Attempt, current: StepStatus, pods: Iterable[Mapping[str, Any]]
    ) -> StepStatus:
        """A running attempt of a Kueue tenant whose pods are being deleted: Running still (the
        pods save their checkpoints), with Kueue's eviction as the reason of what is coming."""
        terminating = any((p.get("metadata") or {}).get("deletionTimestamp") for p in pods)
        if attempt.local_queue is None or not terminating:
            return current
        if attempt.eviction is None:
            attempt.eviction = self._kueue_eviction(attempt)
        if attempt.eviction is None:
            return current
        return StepStatus(
            StepState.RUNNING, attempt.eviction.reason, attempt.eviction.message, node=current.node
        )

    def _kueue_eviction(self, attempt: _Attempt) -> StepStatus | None:
        """How the attempt ended if Kueue evicted it (its pods deleted by the suspension,
        whatever they reported), else None; only for an attempt of a Kueue tenant."""
        if attempt.local_queue is None or attempt.cancelled:
            return None
        return self._kueue.evicted(
            self._tenants.client(attempt.tenant, attempt.request.step_key),
            attempt.tenant,
            attempt.namespace,
            job_name(attempt.request),
            attempt.request.step_key,
        )

    def _pod_name(self, handle: JobHandle, attempt: _Attempt) -> str | None:
        """The pod whose log is the step's: the only one, or a gang's leader (index 0)."""
        pods = attempt.watch.pods(handle.job_id)
        if attempt.request.spec.is_gang:
            gone = attempt.watch.deleted_pods(handle.job_id)
            leaders = [p for p in [*pods, *gone] if pod_index(p) == 0]
            return pod_name(leaders[0]) if leaders else None
        if pods:
            return pod_name(pods[-1])
        last = attempt.watch.deleted(handle.job_id)
        return pod_name(last) if last is not None else None


def _pod_finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
