"""The PriorityClasses the tenant chart (`helm/k8s-ai-tenant`) installs, for a test cluster.

Step Jobs name `k8s-ai-standard` and `k8s-ai-preemptible` (`kubernetes.priority_classes`); a
cluster without them refuses the Jobs' pods. `install_priority_classes` creates them as the
chart does (the preemptible class never preempts), on the emulator or a real API server, and
keeps those that exist. `tests/test_helm_chart.py` holds these to the chart's rendering.

Example:
    >>> [(c["metadata"]["name"], c["value"], c["preemptionPolicy"]) for c in CHART_CLASSES]
    [('k8s-ai-standard', 100000, 'PreemptLowerPriority'), ('k8s-ai-preemptible', 1000, 'Never')]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes.client import ApiClient, SchedulingV1Api
from kubernetes.client.exceptions import ApiException


def priority_class(name: str, value: int, preemption_policy: str) -> dict[str, Any]:
    """A PriorityClass body (not the global default)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": False,
        "preemptionPolicy": preemption_policy,
    }


CHART_CLASSES = (
    priority_class("k8s-ai-standard", 100000, "PreemptLowerPriority"),
    priority_class("k8s-ai-preemptible", 1000, "Never"),
)


def install_priority_classes(
    api_client: ApiClient, extra: Iterable[Mapping[str, Any]] = ()
) -> list[str]:
    """Create the chart's PriorityClasses and `extra` ones; one that exists is kept as it is.
    Returns the names this call created (to delete after a test on a shared cluster)."""
    api = SchedulingV1Api(api_client)
    created = []
    for body in (*CHART_CLASSES, *extra):
        try:
            api.create_priority_class(dict(body))
        except ApiException as error:
            if error.status != 409:
                raise
            continue
        created.append(str(body["metadata"]["name"]))
    return created


__all__ = ["CHART_CLASSES", "install_priority_classes", "priority_class"]
