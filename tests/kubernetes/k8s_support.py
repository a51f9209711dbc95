"""Helpers of the Kubernetes backend tests: launch requests, a fake clock, status waits."""

from __future__ import annotations

import sys
import uuid
from typing import Any

from kubernetes.client import ApiClient

from k8s_ai_orchestrator.backends.base import JobHandle, LaunchRequest, StepState, StepStatus
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend
from k8s_ai_orchestrator.spec import resolve_spec
from k8s_ai_orchestrator.testing.priorityclasses import install_priority_classes as chart_classes
from k8s_ai_orchestrator.testing.priorityclasses import priority_class

TENANTS = ("team-a", "team-b")
NAMESPACE = "default"


URGENT = priority_class("urgent", 1000000, "PreemptLowerPriority")  # preempts both of the chart's


def install_priority_classes(api_client: ApiClient) -> None:
    """The PriorityClasses helm/k8s-ai-tenant installs in a tenant, and `URGENT`."""
    chart_classes(api_client, extra=(URGENT,))


def tenant_config(emu: Any, **overrides: Any) -> dict[str, Any]:
    """The backend's `kubernetes` config section for the emulated tenants."""
    raw: dict[str, Any] = {
        "image": "k8s-ai-test:latest",
        "python": sys.executable,
        "command_prefix": [sys.executable, "-m", "dagster"],
        "watch_reconnect_backoff_s": 0.05,
        "pending_events_interval_s": 0.0,
        "tenants": {
            name: {"kubeconfig": emu.tenant(name).kubeconfig_path, "namespace": NAMESPACE}
            for name in TENANTS
        },
    }
    raw.update(overrides)
    return raw


def python_step(
    code: str,
    *,
    step: str = "tiles",
    tenant: str | None = "team-a",
    run_id: str | None = None,
    attempt: int = 0,
    grace_period_s: float = 5.0,
    **fields: Any,
) -> LaunchRequest:
    """A launch request whose step process is `python -c code`."""
    spec_fields: dict[str, Any] = {"cpu": 0.5, "memory": "256Mi"}
    spec_fields.update(fields)
    return LaunchRequest(
        run_id=run_id or str(uuid.uuid4()),
        step_key=step,
        attempt=attempt,
        command=[sys.executable, "-c", code],
        env={"K8S_AI_STEP_KEY": step},
        spec=resolve_spec(spec_fields),
        tenant=tenant,
        grace_period_s=grace_period_s,
    )


def wait_until(
    emu: Any, backend: KubernetesBackend, handle: JobHandle, predicate: Any, timeout: float = 60
) -> StepStatus:
    """Poll `status()` (served from memory) until `predicate(status)` holds."""
    seen: list[StepStatus] = []

    def check() -> bool:
        seen.append(backend.status(handle))
        return bool(predicate(seen[-1]))

    try:
        emu.wait_for(check, timeout=timeout)
    except TimeoutError:
        raise AssertionError(
            f"{handle.step_key}: last status {seen[-1] if seen else None}"
        ) from None
    return seen[-1]


def wait_terminal(emu: Any, backend: KubernetesBackend, handle: JobHandle) -> StepStatus:
    return wait_until(emu, backend, handle, lambda s: s.is_terminal)


def running_pod(emu: Any, backend: KubernetesBackend, handle: JobHandle) -> str:
    """Name of the step's pod once its process runs."""
    wait_until(emu, backend, handle, lambda s: s.state == StepState.RUNNING)
    (pod,) = [
        p
        for p in emu.pods(handle.tenant, NAMESPACE)
        if p["metadata"]["labels"].get("k8s-ai/job") == handle.job_id
    ]
    return str(pod["metadata"]["name"])
