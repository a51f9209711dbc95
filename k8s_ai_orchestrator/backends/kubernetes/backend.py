"""The Kubernetes backend: each step attempt is a batch/v1 Job in its tenant's (v)cluster.

Submitting resolves the tenant (refusing ones outside `allowed_tenants`), runs the pre-flight
checks once per tenant and size (`prepare.py`), and hands the Job to the tenant's admission
mode (`admission/`: created at once, held back until a gang has room, with a PodGroup, or
queued in Kueue). Status comes from one pod watch per tenant namespace shared by all steps of
the run (`observe.py`): a step that stays Pending is explained with its admission's or the
scheduler's reason (its `timeout` is kept by the step's observer, `launch.lifecycle`). With a
`MemoryGrowth` policy (or a `memory="auto"` step) a running pod's memory is read from the
step's reports in its log (else its node) and grown in place via `pods/resize` (`growth.py`).

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
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from ...errors import BackendError
from ...memorygrowth import MemoryGrowth
from ..base import (
    GrowResult,
    JobHandle,
    LaunchRequest,
    Resize,
    ResourceUsage,
    StepState,
    StepStatus,
)
from .admission import Admissions, AdmissionTools, AttemptJob
from .api import ApiRetry
from .attempts import Attempt, AttemptBook
from .config import KubernetesConfig
from .growth import PodGrowth
from .jobapi import JobApi
from .jobs import job_name, run_selector
from .logs import DRAIN_S, LogStreams, read_tail
from .observe import AttemptObserver
from .prepare import Preparer
from .status import job_status
from .tenants import TenantConnections
from .watch import PodWatches

__all__ = ["KubernetesBackend", "KubernetesConfig"]


class KubernetesBackend:
    """Runs step attempts as Jobs on vCluster tenants (see the module docstring).

    Args:
        config: the `kubernetes` section of the executor config.
        allowed_tenants: tenants this run may use; None allows every configured tenant.
        default_tenant: tenant of steps that name none.
        clock, wall: monotonic seconds (Pending timeouts, resource-seconds); epoch seconds
            (what the kubelet's timestamps are compared with).
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
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.default_tenant = default_tenant
        self._clock = clock
        self._sleep = sleep
        log = logger or logging.getLogger(__name__)
        self._tenants = TenantConnections(config, allowed_tenants)
        self._retry = ApiRetry(config.api_retries, sleep=sleep, server_of=self._tenants.server)
        self._jobs = JobApi(self._tenants, self._retry, config)
        self._growth = PodGrowth(growth, self._retry, clock, log)
        self._logs = LogStreams()
        self._attempts = AttemptBook()
        tools = AdmissionTools(config, self._retry, self._jobs, self._tenants, clock)
        admissions = Admissions(tools, lambda r: self._attempts.drop_earlier(r, self._jobs))
        self._preparer = Preparer(
            config, self._tenants, self._retry, self._growth, admissions, default_tenant
        )
        self._observer = AttemptObserver(
            config, self._tenants, self._jobs, self._growth, self._logs, clock, wall, sleep
        )
        self._watches = PodWatches(
            run_selector,
            backoff_s=config.watch_reconnect_backoff_s,
            timeout_s=config.watch_timeout_s,
            sleep=None if sleep is time.sleep else sleep,
            logger=log,
        )

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
        self._preparer.check(request)

    def submit(self, request: LaunchRequest) -> JobHandle:
        """Create the attempt's Job (one that exists already is taken: its name is the run's,
        step's and attempt's); `SubmitError` if it can never run where it is routed."""
        handle = self._attach(request, create=True)
        assert handle is not None
        return handle

    def adopt(self, request: LaunchRequest) -> JobHandle | None:
        """The attempt's Job, alive or ended, watched as if just submitted (`Adopts`: a resumed
        run worker); None when there is no such Job. One read; nothing is created."""
        return self._attach(request, create=False)

    def _attach(self, request: LaunchRequest, *, create: bool) -> JobHandle | None:
        prepared = self._preparer.prepare(request, preflight=create)
        request, namespace = prepared.request, prepared.settings.namespace
        tenant, name = str(request.tenant), job_name(prepared.request)
        found = None if create else self._jobs.adopt(tenant, namespace, name, request)
        if not (create or found):
            return None
        core = CoreV1Api(prepared.api_client)
        listing = None if create else partial(self._retry.call, "list pods", tenant)
        watch = self._watches.of_run(tenant, namespace, request.run_id, core, list_first=listing)
        job = AttemptJob(request, tenant, namespace, name, prepared.node_labels)
        attempt = Attempt(job, watch, prepared.admission, self._clock())
        attempt.adopted, attempt.ended_unseen = not create, job_status(found or {})
        if create:
            prepared.admission.submit(job, prepared.manifest, prepared.api_client)
        self._attempts.add(attempt)
        return JobHandle(self.name, name, request.step_key, tenant, namespace)

    def status(self, handle: JobHandle) -> StepStatus:
        """The attempt's state from the watch cache (no API request while it runs)."""
        return self._observer.status(handle, self._attempts.of(handle))

    def preempted_by(self, handle: JobHandle) -> str:
        """Who preempted the attempt ("preempted by step 'train' of run 'r1' (pod ...) on
        node-b"; "" if nothing names it), asked once its step said Preempted: its pods and
        events are read again until the scheduler's marks show (`wait_for_preemptor`)."""
        attempt = self._attempts.of(handle)
        core = self._observer.core(attempt)
        return attempt.preemptor.wait(
            core, attempt.namespace, attempt.victims(), clock=self._clock, sleep=self._sleep
        )

    def logs(self, handle: JobHandle, tail_lines: int | None = None) -> str:
        """The attempt's log (last `tail_lines` lines); one API request."""
        attempt = self._attempts.of(handle)
        pod = attempt.log_pod()
        if pod is None:
            return attempt.log_tail
        core = self._observer.core(attempt)
        read = partial(read_tail, core, attempt.namespace, pod, tail_lines)
        try:
            text = self._retry.call("read logs", attempt.tenant, read)
        except (ApiException, BackendError):
            return attempt.log_tail
        return text or attempt.log_tail

    def logs_since(self, handle: JobHandle, offset: int = 0, wait: bool = True) -> tuple[str, int]:
        """New log text after byte `offset` and the next offset; one follow stream per pod
        (an ended attempt's read waits briefly for its last lines unless `wait` is False)."""
        attempt = self._attempts.of(handle)
        pod = attempt.log_pod()
        if pod is None:
            return "", offset
        core, ended = self._observer.core(attempt), attempt.final is not None
        follower = self._logs.follow(handle.job_id, core, attempt.namespace, pod)
        return follower.read_since(offset, DRAIN_S if ended and wait else 0.0, ended)

    def log_complete(self, handle: JobHandle) -> bool:
        return self._logs.complete(handle.job_id)  # `LogFollower.complete`

    def cancel(self, handle: JobHandle) -> None:
        """Delete the attempt's Job and its pods (propagation Background); idempotent.

        A Job seen to succeed is left to its `ttlSecondsAfterFinished` (one day, as
        dagster-k8s sets it): its pods have ended, so there is nothing to stop.
        """
        attempt = self._attempts.find(handle.job_id)
        if attempt is not None:
            if attempt.final is not None and attempt.final.state == StepState.SUCCEEDED:
                return
            attempt.cancelled = True
            self._logs.close(handle.job_id)
        tenant = handle.tenant or (attempt.tenant if attempt else None)
        if tenant is None or handle.namespace is None:
            return
        self._jobs.delete(tenant, handle.namespace, handle.job_id, handle.step_key)

    def cancel_run(self, run_id: str) -> list[str]:  # `CancelsRuns`: in the tenants it may use
        return self._jobs.delete_run(run_id, self._tenants.usable())

    def usage(self, handle: JobHandle) -> ResourceUsage:
        """Requested resources × seconds the attempt has run (so far); a measured step's peak
        memory and CPU time, to its last report (the one it wrote as it ended, once read)."""
        memory, last = self._growth.memory(handle.job_id), self._logs.report(handle.job_id)
        peak = max(memory.peak_bytes if memory else 0, last.working_set_bytes if last else 0)
        cpu = last.cpu_seconds if last is not None else None
        return self._attempts.of(handle).usage(self._clock, peak or None, cpu)

    def grow_memory(self, handle: JobHandle, new_limit_bytes: int) -> GrowResult:
        """Ask for the running pod's memory to be raised to `new_limit_bytes` in place:
        pending until the kubelet applies it (see `resizes`), or refused."""
        attempt = self._attempts.of(handle)
        core, pod = self._observer.core(attempt), attempt.running_pod()
        return self._growth.grow(core, handle, pod, new_limit_bytes)

    def resizes(self, handle: JobHandle) -> tuple[Resize, ...]:
        """Every in-place growth tried for the attempt so far, in order."""
        memory = self._growth.memory(handle.job_id)
        return tuple(memory.resizes) if memory is not None else ()

    def release(self, handle: JobHandle) -> None:
        """`Releases`: forget the step's attempts up to this one (their pods' states, log
        streams, growths); their Jobs are left as they are, and `cancel` still reaches them."""
        for attempt in self._attempts.release(handle):
            self._logs.drop(attempt.job.name)
            self._growth.drop(attempt.job.name)
            attempt.watch.forget(attempt.job.name)

    def on_change(self, callback: Callable[[str], None]) -> None:
        """`callback(job name)` on each watch event of one of the attempt's pods
        (`ReportsChanges`); called on the watch's thread."""
        self._watches.on_change(callback)

    def close(self) -> None:
        """Stop the watches and log streams and close the tenants' connections."""
        self._logs.close_all()
        self._watches.stop_all()
        self._tenants.close()
