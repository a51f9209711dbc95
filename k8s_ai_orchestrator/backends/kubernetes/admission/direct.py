"""Direct admission: the Job is created at once and the scheduler places its pod.

The mode of every single-pod step of a tenant whose `gang_admission` is `guard` or `workload`
(a gang of one pod needs no all-or-nothing admission).

Example:
    >>> DirectAdmission(tools).submit(job, manifest, api_client)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient

from ...base import LaunchRequest, StepStatus
from ..config import TenantConfig
from .base import AdmissionTools, AttemptJob


class DirectAdmission:
    """Creates the Job at once; nothing to check before, wait for or undo after."""

    holds_quota = False  # a Pending pod holds nothing

    def __init__(self, tools: AdmissionTools) -> None:
        self._tools = tools

    def prepare(
        self, request: LaunchRequest, settings: TenantConfig, api_client: ApiClient
    ) -> None:
        """Nothing to check: every tenant takes Jobs."""

    def submit(self, job: AttemptJob, manifest: dict[str, Any], api_client: ApiClient) -> None:
        """Create the Job."""
        self._tools.jobs.create(job.request, job.namespace, manifest)

    def pending(self, job: AttemptJob) -> StepStatus | None:
        """Nothing: the scheduler's events say why the pod waits."""
        return None

    def evicted(self, job: AttemptJob, *, cancelled: bool) -> StepStatus | None:
        """Never: nothing but the scheduler and the kubelet stop the pod."""
        return None

    def finished(self, job: AttemptJob) -> None:
        """Nothing kept."""
