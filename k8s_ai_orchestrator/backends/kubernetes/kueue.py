"""Admission through Kueue (`gang_admission.mode: kueue`): quota first, then all pods at once.

Every Job of a Kueue tenant is created suspended with the label
`kueue.x-k8s.io/queue-name: <local_queue>`. Kueue keeps one `Workload` per Job (owned by it)
and unsuspends the Job only when the ClusterQueue behind the LocalQueue has quota for all of
its pods, so a gang's pods are created together or not at all. While the Job waits, the step
is Pending with Kueue's own reason (`insufficient unused quota for nvidia.com/gpu in flavor
default, 4 more needed`); a step that asks for more than the ClusterQueue can ever hold fails
at once instead of waiting for its timeout.

When Kueue preempts an admitted Workload for a higher-priority one, it marks the Workload
`Evicted` (reason `Preempted`, message naming the preemptor's Job UID) and suspends its Job,
which deletes the pods. The step reports that as Preempted — naming the step that preempted
it — and the executor relaunches it from its checkpoint as a new attempt; the evicted Job is
deleted so that Kueue never readmits an attempt the executor has left.

Example:
    >>> manifest = {"metadata": {"name": "k8s-ai-abc-0"}, "spec": {}}
    >>> queue_job(manifest, "k8s-ai")
    >>> manifest["metadata"]["labels"], manifest["spec"]["suspend"]
    ({'kueue.x-k8s.io/queue-name': 'k8s-ai'}, True)
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import ApiClient, BatchV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from ...errors import SubmitError
from ..base import FailureReason, StepStatus
from .api import ApiRetry, api_message, is_transient, serves
from .preemption import describe_uid
from .status import condition_of

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
NEVER_FITS = "> maximum capacity"  # Kueue's flavor assigner: the request can never fit
_JOB_UID = re.compile(r"JobUID: (?P<uid>[0-9A-Za-z-]+)")

# Workload `Evicted` reasons → how the step's attempt ended (anything else: Evicted).
_EVICTIONS = {"Preempted": FailureReason.PREEMPTED}

Workload = Mapping[str, Any]


def queue_job(manifest: dict[str, Any], local_queue: str) -> None:
    """Label the Job for Kueue and create it suspended: Kueue unsuspends it on admission."""
    manifest["metadata"].setdefault("labels", {})[QUEUE_LABEL] = local_queue
    manifest["spec"]["suspend"] = True


def check_local_queue(
    step: str, tenant: str, namespace: str, local_queue: str, api_client: ApiClient, retry: ApiRetry
) -> None:
    """`SubmitError` unless Kueue is served and the LocalQueue exists and is active."""
    custom = CustomObjectsApi(api_client)
    where = f"step '{step}': tenant '{tenant}' uses gang_admission.mode=kueue"
    try:
        queue = retry.call(
            "read LocalQueue",
            tenant,
            lambda: custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "localqueues", local_queue
            ),
        )
    except ApiException as error:
        if error.status != 404:
            raise
        if not retry.call(
            "read API discovery", tenant, lambda: serves(api_client, GROUP, VERSION, "localqueues")
        ):
            raise SubmitError(
                f"{where}, but its API server does not serve {GROUP}/{VERSION} LocalQueues: "
                "Kueue (v0.17 or later) is not installed there; install it in the tenant, or use "
                "gang_admission.mode=guard"
            ) from None
        raise SubmitError(
            f"{where}, but LocalQueue '{local_queue}' does not exist in namespace "
            f"'{namespace}'; create it pointing at the tenant's ClusterQueue (the tenant chart "
            f"does with kueue.enabled=true) or fix kubernetes.tenants.{tenant}.gang_admission."
            "local_queue"
        ) from None
    active = condition(queue, "Active")
    if active is not None and active.get("status") == "False":
        raise SubmitError(
            f"{where}, but LocalQueue '{local_queue}' in namespace '{namespace}' is not active "
            f"({active.get('reason')}: {active.get('message')}); check its ClusterQueue "
            f"'{(queue.get('spec') or {}).get('clusterQueue')}' and that Kueue is running"
        )


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The status condition of type `kind` of a Kueue object, or None."""
    return condition_of(obj.get("status") or {}, kind)


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def queued_status(
    workload: Workload | None, step: str, tenant: str, local_queue: str
) -> StepStatus | None:
    """Why a suspended Job waits in Kueue (Pending), or that it never can (failed); None
    once the Workload is admitted (its pods tell the rest)."""
    if workload is not None and _true(workload, "Admitted"):
        return None
    where = f"queued in Kueue (LocalQueue '{local_queue}')"
    if workload is None:
        return StepStatus.pending("QueuedInKueue", f"{where}: Kueue has not taken the Job up yet")
    reserved = condition(workload, "QuotaReserved") or {}
    if reserved.get("status") == "True":  # quota held; Kueue's admission checks still run
        return StepStatus.pending(
            "QueuedInKueue", f"{where}: {reserved.get('message')}; waiting for admission checks"
        )
    message = reserved.get("message") or "waiting for quota in its ClusterQueue"
    if NEVER_FITS in message:
        return StepStatus.failed(
            FailureReason.UNSCHEDULABLE,
            f"step '{step}' can never be admitted by Kueue in tenant '{tenant}': {message}; "
            "make the step smaller or raise the ClusterQueue's nominalQuota",
        )
    reason = "QueuedInKueue" if reserved.get("reason") in (None, "Pending") else reserved["reason"]
    return StepStatus.pending(reason, f"{where}: {message}")


def eviction(workload: Workload | None) -> tuple[FailureReason, str, str | None] | None:
    """(reason, Kueue's message, preemptor Job UID) if Kueue evicted the Workload."""
    if workload is None:
        return None
    evicted = condition(workload, "Evicted")
    if evicted is None or evicted.get("status") != "True":
        return None
    message = str(evicted.get("message") or evicted.get("reason") or "evicted")
    found = _JOB_UID.search(message)
    uid = found.group("uid") if found and found.group("uid") != "UNKNOWN" else None
    return _EVICTIONS.get(str(evicted.get("reason")), FailureReason.EVICTED), message, uid


class KueueWorkloads:
    """Reads the Workloads Kueue keeps for the backend's Jobs.

    `pending` reads at most once per `interval_s` per Job (it runs on every status poll of a
    queued step); `evicted` reads once, when an attempt ends.
    """

    def __init__(self, retry: ApiRetry, interval_s: float, clock: Callable[[], float]) -> None:
        self._retry = retry
        self._interval_s = interval_s
        self._clock = clock
        self._read_at: dict[str, float] = {}
        self._last: dict[str, StepStatus | None] = {}
        self._lock = threading.Lock()

    def pending(
        self,
        api_client: ApiClient,
        tenant: str,
        namespace: str,
        job: str,
        step: str,
        local_queue: str,
    ) -> StepStatus | None:
        """`queued_status` of the Job's Workload, re-read every `interval_s`."""
        now = self._clock()
        with self._lock:
            due = job not in self._read_at or now - self._read_at[job] >= self._interval_s
            if due:
                self._read_at[job] = now
        if due:
            try:
                workload = self.of_job(api_client, tenant, namespace, job)
            except ApiException as error:
                if not is_transient(error):
                    raise
                workload = None
            status = queued_status(workload, step, tenant, local_queue)
            with self._lock:
                self._last[job] = status
        with self._lock:
            return self._last.get(job)

    def evicted(
        self, api_client: ApiClient, tenant: str, namespace: str, job: str, step: str
    ) -> StepStatus | None:
        """The attempt's end as Kueue caused it (Preempted, naming the preemptor), or None."""
        try:
            found = eviction(self.of_job(api_client, tenant, namespace, job))
        except ApiException:
            return None
        if found is None:
            return None
        reason, message, uid = found
        who = _describe_job(api_client, namespace, uid) if uid else None
        by = f"{who} through Kueue" if who else "Kueue"
        verb = "preempted" if reason == FailureReason.PREEMPTED else "evicted"
        return StepStatus.failed(
            reason,
            f"step '{step}' was {verb} by {by}: {message}; Kueue suspended its Job "
            f"{job}, which is deleted so that only the relaunch is queued",
        )

    def forget(self, job: str) -> None:
        with self._lock:
            self._read_at.pop(job, None)
            self._last.pop(job, None)

    def of_job(
        self, api_client: ApiClient, tenant: str, namespace: str, job: str
    ) -> Workload | None:
        """The newest Workload owned by Job `job`, or None (not created yet, or gone)."""
        custom = CustomObjectsApi(api_client)
        listed = self._retry.call(
            "list Kueue Workloads",
            tenant,
            lambda: custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads"),
        )
        owned = [
            w
            for w in listed.get("items") or ()
            if any(
                o.get("kind") == "Job" and o.get("name") == job
                for o in (w.get("metadata") or {}).get("ownerReferences") or ()
            )
        ]
        owned.sort(key=lambda w: str((w.get("metadata") or {}).get("creationTimestamp") or ""))
        return owned[-1] if owned else None


def _describe_job(api_client: ApiClient, namespace: str, uid: str) -> str:
    """ "step 'train' of run 'r1' (Job k8s-ai-…)" for the Job with `uid` in the namespace."""
    try:
        jobs = BatchV1Api(api_client).list_namespaced_job(namespace).items
    except ApiException as error:
        return f"the Job with UID {uid} ({api_message(error)})"
    return describe_uid(jobs, uid, "Job", namespace)


__all__ = [
    "QUEUE_LABEL",
    "KueueWorkloads",
    "check_local_queue",
    "eviction",
    "queue_job",
    "queued_status",
]
