"""The executor's own all-or-nothing admission of gangs (`gang_admission.mode: guard`).

A gang's Job is created only when the tenant's nodes have room for every pod at once
(`capacity.gang_room`, counting what lower-priority preemptible pods hold as free, since the
scheduler preempts them) — or, on a tenant with autoscaled `node_pools`, when the pools can
create nodes for the pods the nodes have no room for — and its ResourceQuotas have room for
all of them (`capacity.quota_lines`). Until then the Job is held back: the step is Pending
with reason `WaitingForGangRoom`, and room is looked for again every
`pending_events_interval_s`.

Example:
    >>> guard = GuardAdmission(tools)  # doctest: +SKIP
    >>> guard.submit(job, manifest, api_client)  # doctest: +SKIP
    >>> guard.pending(job).waiting  # doctest: +SKIP
    'WaitingForGangRoom'
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from ....spec import ComputeSpec
from ...base import LaunchRequest, StepStatus
from ..api import ApiRetry
from ..autoscaling import pool_verdict
from ..capacity import GangRoom, gang_needs, gang_room, quota_lines, quota_of, step_needs
from ..config import KubernetesConfig, TenantConfig
from ..dra import host_fit
from .base import AdmissionTools, AttemptJob


def read_gang_room(
    core: Any,
    retry: ApiRetry,
    *,
    tenant: str,
    namespace: str,
    needs: Mapping[str, Decimal],
    needed: int,
    node_labels: Mapping[str, str],
    reclaimable_class: str | None,
) -> GangRoom:
    """`gang_room` from the tenant's nodes and pods (cluster-wide where the executor may list
    them, else its namespace's); a tenant that may not list nodes is taken to have room."""
    try:
        nodes = retry.call("list nodes", tenant, core.list_node).items
    except ApiException as error:
        if error.status in (401, 403):
            return GangRoom(needed, needed, ())
        raise
    try:
        pods = retry.call("list pods", tenant, core.list_pod_for_all_namespaces).items
    except ApiException as error:
        if error.status not in (401, 403):
            raise
        pods = retry.call("list pods", tenant, lambda: core.list_namespaced_pod(namespace)).items
    return gang_room(
        nodes,
        pods,
        needs,
        needed,
        node_labels=node_labels,
        reclaimable_class=reclaimable_class,
    )


def waiting_for_room(
    config: KubernetesConfig,
    retry: ApiRetry,
    core: Any,
    job: AttemptJob,
) -> StepStatus | None:
    """None when every pod of the gang fits now, else why its Job waits (Pending). A gang
    claiming its GPUs through DRA is counted without them (`host_fit`): the scheduler
    allocates its devices, and a rank pod left waiting for them ends as a partial gang."""
    tenant = config.tenant(job.tenant)
    spec = host_fit(job.request.spec, config.gpus_of(tenant))
    labels = job.node_labels
    needs = step_needs(spec)
    room = read_gang_room(
        core,
        retry,
        tenant=job.tenant,
        namespace=job.namespace,
        needs=needs,
        needed=spec.nodes,
        node_labels=labels,
        reclaimable_class=None if spec.preemptible else config.priority_classes.preemptible,
    )
    missing = spec.nodes - room.fits
    pools = pool_verdict(tenant.node_pools, needs, pods=missing, node_labels=labels)
    grows = bool(tenant.node_pools) and pools.holds(missing)  # the autoscaler makes the rest
    short = None if room.enough or grows else room.describe()
    short = short or _quota_short(retry, core, job, spec)
    if short is None:
        return None
    return StepStatus.pending(
        "WaitingForGangRoom",
        f"gang of {spec.nodes} pods not created yet: {short}; it is created when every "
        "pod can start at once (gang_admission: guard)",
    )


def _quota_short(retry: ApiRetry, core: Any, job: AttemptJob, spec: ComputeSpec) -> str | None:
    """What a ResourceQuota has left that is less than the whole gang asks, if any."""
    quotas = retry.call(
        "read resource quotas",
        job.tenant,
        lambda: core.list_namespaced_resource_quota(job.namespace),
    ).items
    for quota in quotas:
        name, hard, used = quota_of(quota)
        for line in quota_lines(name, hard, used, gang_needs(spec)):
            if line.short:
                return (
                    f"ResourceQuota '{name}' has {line.key}={line.left.normalize():f} "
                    f"left, the gang's {spec.nodes} pods need {line.needs.normalize():f}"
                )
    return None


@dataclass
class _Held:
    """A gang's Job held back until there is room for all its pods."""

    manifest: dict[str, Any]
    why: StepStatus  # the last reason it waits
    checked_at: float = 0.0  # when room was last looked for (status polls)


class GuardAdmission:
    """Holds a gang's Job back until all its pods have room (see the module docstring)."""

    holds_quota = False  # a Pending pod holds nothing

    def __init__(self, tools: AdmissionTools) -> None:
        self._tools = tools
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    def prepare(
        self, request: LaunchRequest, settings: TenantConfig, api_client: ApiClient
    ) -> None:
        """Nothing to check: the guard needs only what pre-flight checked."""

    def submit(self, job: AttemptJob, manifest: dict[str, Any], api_client: ApiClient) -> None:
        """Create the Job if the whole gang has room now, else hold it back."""
        why = waiting_for_room(self._tools.config, self._tools.retry, CoreV1Api(api_client), job)
        if why is None:
            self._tools.jobs.create(job.request, job.namespace, manifest)
            return
        with self._lock:
            self._held[job.name] = _Held(manifest, why)

    def pending(self, job: AttemptJob) -> StepStatus | None:
        """Why a held gang waits; its Job is created once room shows (looked for every
        `pending_events_interval_s`), and then None."""
        with self._lock:
            held = self._held.get(job.name)
        if held is None:
            return None
        now = self._tools.clock()
        if now - held.checked_at < self._tools.config.pending_events_interval_s:
            return held.why
        held.checked_at = now
        core = CoreV1Api(self._tools.client(job))
        why = waiting_for_room(self._tools.config, self._tools.retry, core, job)
        if why is not None:
            held.why = why
            return why
        with self._lock:
            self._held.pop(job.name, None)
        self._tools.jobs.create(job.request, job.namespace, held.manifest)
        return None

    def evicted(self, job: AttemptJob, *, cancelled: bool) -> StepStatus | None:
        """Never: once created, the gang's pods are the scheduler's."""
        return None

    def finished(self, job: AttemptJob) -> None:
        """Drop a Job still held back (the attempt ended before it had room)."""
        with self._lock:
            self._held.pop(job.name, None)


__all__ = ["GuardAdmission", "read_gang_room", "waiting_for_room"]
