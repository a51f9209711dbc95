"""Admission through Kueue (`gang_admission.mode: kueue`), for every step of the tenant.

The Job is created suspended in the tenant's LocalQueue (`jobs.py` labels it, `kueue.py`
reads Kueue's Workloads): while Kueue has not admitted it the step is Pending with Kueue's
reason (or fails when it never fits), and an attempt Kueue evicts ends Preempted or Evicted.
Before a step's relaunch is queued, the Jobs of its earlier attempts that have not succeeded
are deleted: Kueue would readmit an evicted Job and run the step twice.

Example:
    >>> admission = KueueAdmission(tools, drop_earlier=lambda request: None)  # doctest: +SKIP
    >>> admission.pending(job).waiting  # doctest: +SKIP
    'QueuedInKueue'
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient

from ...base import LaunchRequest, StepStatus
from ..config import TenantConfig
from ..kueue import KueueWorkloads, check_local_queue
from .base import AdmissionTools, AttemptJob


class KueueAdmission:
    """Queues Jobs in the tenant's LocalQueue and reads what Kueue made of them.

    Args:
        tools: what the admission modes share with the backend.
        drop_earlier: deletes the Jobs of a step's earlier attempts that have not succeeded.
    """

    holds_quota = True  # an admitted Workload's pods hold its quota until they run

    def __init__(
        self, tools: AdmissionTools, drop_earlier: Callable[[LaunchRequest], None]
    ) -> None:
        self._tools = tools
        self._drop_earlier = drop_earlier
        self._workloads = KueueWorkloads(
            tools.retry, tools.config.pending_events_interval_s, tools.clock
        )
        self._checked: set[str] = set()  # tenants whose LocalQueue was found active
        self._evictions: dict[str, StepStatus] = {}  # Job → Kueue's eviction, once seen
        self._lock = threading.Lock()

    def prepare(
        self, request: LaunchRequest, settings: TenantConfig, api_client: ApiClient
    ) -> None:
        """`SubmitError` unless Kueue is served and the LocalQueue is there and active."""
        tenant = str(request.tenant)
        if tenant in self._checked:
            return
        queue = str(settings.gang_admission.local_queue)
        retry = self._tools.retry
        check_local_queue(request.step_key, tenant, settings.namespace, queue, api_client, retry)
        self._checked.add(tenant)

    def submit(self, job: AttemptJob, manifest: dict[str, Any], api_client: ApiClient) -> None:
        """Delete the step's earlier attempts, then create the (suspended) Job."""
        self._drop_earlier(job.request)
        self._tools.jobs.create(job.request, job.namespace, manifest)

    def pending(self, job: AttemptJob) -> StepStatus | None:
        """Why Kueue has not admitted the Job yet (read every `pending_events_interval_s`)."""
        queue = str(self._tools.config.tenant(job.tenant).gang_admission.local_queue)
        return self._workloads.pending(
            self._tools.client(job), job.tenant, job.namespace, job.name, job.step, queue
        )

    def evicted(self, job: AttemptJob, *, cancelled: bool) -> StepStatus | None:
        """Kueue's eviction of the attempt (its pods deleted by the suspension, whatever they
        reported), read until seen and then remembered."""
        with self._lock:
            seen = self._evictions.get(job.name)
        if seen is not None or cancelled:
            return seen
        found = self._workloads.evicted(
            self._tools.client(job), job.tenant, job.namespace, job.name, job.step
        )
        if found is not None:
            with self._lock:
                self._evictions[job.name] = found
        return found

    def finished(self, job: AttemptJob) -> None:
        """Forget the Job's last Kueue reason and eviction."""
        self._workloads.forget(job.name)
        with self._lock:
            self._evictions.pop(job.name, None)
