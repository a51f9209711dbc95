"""Gang admission through the Kubernetes gang-scheduling API (`gang_admission.mode: workload`).

Kubernetes 1.37 schedules a group of pods all-or-nothing when they join a `PodGroup`
(`scheduling.k8s.io/v1beta1`, served with the `GenericWorkload` feature gate) whose policy is
`gang` with `minCount`: the scheduler binds none of them until it can bind `minCount`, and
reports `pod group is unschedulable, minCount (N) cannot be satisfied` while it waits.

A gang's Job is created at once; its pods carry `spec.schedulingGroup.podGroupName` (set in
`jobs.py`), and its PodGroup — named as the Job, `minCount` = the step's nodes, the step's
PriorityClass — is created right after it, owned by the Job so it goes when the Job goes.

Example:
    >>> podgroup("k8s-ai-abc-train-0", 2, "k8s-ai-standard", "6f1c…")["spec"]
    {'schedulingPolicy': {'gang': {'minCount': 2}}, 'priorityClassName': 'k8s-ai-standard'}
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from ...errors import SubmitError
from ..base import LaunchRequest
from .api import ApiRetry, api_message, create_for_job, job_owner, serves

GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1beta1", "podgroups"


def podgroup(name: str, nodes: int, priority_class: str, job_uid: str) -> dict[str, Any]:
    """The PodGroup of one gang attempt, owned by its Job."""
    owner = job_owner(name, job_uid)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name, "ownerReferences": [owner]},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": nodes}},
            "priorityClassName": priority_class,
        },
    }


def serves_podgroups(api_client: ApiClient) -> bool:
    """Whether the API server serves PodGroups (its discovery of scheduling.k8s.io/v1beta1)."""
    return serves(api_client, GROUP, VERSION, PLURAL)


def check_served(step: str, tenant: str, api_client: ApiClient, retry: ApiRetry) -> None:
    """`SubmitError` unless the tenant's API server serves PodGroups (pre-flight)."""
    if not retry.call("read API discovery", tenant, lambda: serves_podgroups(api_client)):
        raise SubmitError(
            f"step '{step}': tenant '{tenant}' uses gang_admission.mode=workload, but its API "
            f"server does not serve {GROUP}/{VERSION} PodGroups; run Kubernetes 1.37+ with the "
            "GenericWorkload feature gate and --runtime-config=scheduling.k8s.io/v1beta1=true "
            "(on the vCluster and its host), or use gang_admission.mode=guard"
        )


def create_podgroup(
    request: LaunchRequest,
    namespace: str,
    name: str,
    priority_class: str,
    api_client: ApiClient,
    retry: ApiRetry,
) -> None:
    """Create the PodGroup of a gang whose Job `name` exists; `SubmitError` if refused."""
    tenant = str(request.tenant)
    body_of = partial(podgroup, name, request.spec.nodes, priority_class)
    try:
        create_for_job(
            api_client, retry, (tenant, namespace, name), (GROUP, VERSION, PLURAL), body_of
        )
    except ApiException as error:
        raise SubmitError(
            f"step '{request.step_key}': tenant '{tenant}' refused PodGroup {name} in namespace "
            f"'{namespace}' ({api_message(error)}); the executor needs create on "
            f"{GROUP} podgroups there (helm chart: rbac.create=true)"
        ) from None


__all__ = ["check_served", "create_podgroup", "podgroup", "serves_podgroups"]
