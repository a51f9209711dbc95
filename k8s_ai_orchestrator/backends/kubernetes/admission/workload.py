"""Gangs admitted by the scheduler through a PodGroup (`gang_admission.mode: workload`).

The gang's Job is created at once and its PodGroup (`podgroups.py`: gang `minCount` = the
step's nodes) right after it; the scheduler binds all its pods or none, and its own events say
why they wait. Whether the tenant serves PodGroups is checked once, before its first gang.

Example:
    >>> WorkloadAdmission(tools).submit(job, manifest, api_client)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient

from ...base import LaunchRequest, StepStatus
from ..config import TenantConfig
from ..podgroups import check_served, create_podgroup
from .base import AdmissionTools, AttemptJob


class WorkloadAdmission:
    """Creates a gang's Job with its PodGroup (see the module docstring)."""

    holds_quota = False  # a Pending pod holds nothing

    def __init__(self, tools: AdmissionTools) -> None:
        self._tools = tools
        self._checked: set[str] = set()  # tenants found to serve PodGroups

    def prepare(
        self, request: LaunchRequest, settings: TenantConfig, api_client: ApiClient
    ) -> None:
        """`SubmitError` unless the tenant serves PodGroups (asked once per tenant)."""
        tenant = str(request.tenant)
        if tenant not in self._checked:
            check_served(request.step_key, tenant, api_client, self._tools.retry)
            self._checked.add(tenant)

    def submit(self, job: AttemptJob, manifest: dict[str, Any], api_client: ApiClient) -> None:
        """Create the Job, then the PodGroup its pods join (owned by the Job)."""
        self._tools.jobs.create(job.request, job.namespace, manifest)
        priority = self._tools.config.priority_classes.of(job.request.spec.preemptible)
        name = manifest["metadata"]["name"]
        create_podgroup(job.request, job.namespace, name, priority, api_client, self._tools.retry)

    def pending(self, job: AttemptJob) -> StepStatus | None:
        """Nothing: the scheduler's events say why the gang waits."""
        return None

    def evicted(self, job: AttemptJob, *, cancelled: bool) -> StepStatus | None:
        """Never: the scheduler preempts pods, which their own status tells."""
        return None

    def finished(self, job: AttemptJob) -> None:
        """Nothing kept: the PodGroup goes with its Job."""
