"""What every admission mode implements (`Admission`), and what it is handed (`AttemptJob`,
`AdmissionTools`).

An admission mode decides when an attempt's Job gets room on the tenant: at once (`direct`),
once the executor sees room for the whole gang (`guard`), through the scheduler's PodGroup
(`workload`), or through Kueue's quota (`kueue`). The backend calls the same five methods
whatever the mode; a mode keeps the state it needs per attempt, keyed by the Job's name.

Example:
    >>> job = AttemptJob(request, "team-a", "default", "k8s-ai-3f2a-train-0")  # doctest: +SKIP
    >>> admission.submit(job, manifest, api_client)  # doctest: +SKIP
    >>> admission.pending(job)  # doctest: +SKIP
    StepStatus(state=<StepState.PENDING: 'Pending'>, reason=None, ..., waiting='WaitingForGangRoom')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes.client import ApiClient

from ...base import LaunchRequest, StepStatus
from ..api import ApiRetry
from ..config import KubernetesConfig, TenantConfig
from ..jobapi import JobApi
from ..tenants import TenantConnections


@dataclass(frozen=True)
class AttemptJob:
    """One attempt's Job, as admission sees it."""

    request: LaunchRequest  # the attempt, its tenant resolved
    tenant: str  # where it runs
    namespace: str  # the Job's namespace in the tenant
    name: str  # the Job's name (the attempt's handle)
    node_labels: Mapping[str, str] = field(default_factory=dict)  # its pods' nodeSelector

    @property
    def step(self) -> str:
        return self.request.step_key


@dataclass(frozen=True)
class AdmissionTools:
    """What the modes share with the backend: its config, API retries, Job calls and clock."""

    config: KubernetesConfig
    retry: ApiRetry
    jobs: JobApi
    tenants: TenantConnections
    clock: Callable[[], float]  # monotonic seconds

    def client(self, job: AttemptJob) -> ApiClient:
        """The API client of the job's tenant."""
        return self.tenants.client(job.tenant, job.step)


class Admission(Protocol):
    """How an attempt's Job gets room in its tenant (one implementation per mode)."""

    # whether an attempt whose pods exist but do not run yet holds the tenant's quota (Kueue
    # admitted it): the wait is then quota held idle, not queued (`waiting.split_wait`)
    holds_quota: bool

    def prepare(
        self, request: LaunchRequest, settings: TenantConfig, api_client: ApiClient
    ) -> None:
        """Pre-flight of the mode in the request's tenant (once per tenant); `SubmitError`
        when the mode cannot work there (PodGroups not served, no LocalQueue)."""

    def submit(self, job: AttemptJob, manifest: dict[str, Any], api_client: ApiClient) -> None:
        """Create the attempt's Job (with what the mode needs beside it), or hold it back
        until there is room; `SubmitError` if the tenant refuses it."""

    def pending(self, job: AttemptJob) -> StepStatus | None:
        """Why the attempt, which has no pod yet, still waits for admission (Pending, or a
        failure if it never can be admitted); None when admission has nothing to say."""

    def evicted(self, job: AttemptJob, *, cancelled: bool) -> StepStatus | None:
        """How admission took the attempt back (Kueue's eviction, remembered once seen), or
        None; not read again for an attempt the executor cancelled."""

    def finished(self, job: AttemptJob) -> None:
        """The attempt has ended: forget what the mode kept for it."""


__all__ = ["Admission", "AdmissionTools", "AttemptJob"]
