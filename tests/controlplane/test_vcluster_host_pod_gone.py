"""A tenant pod whose host pod is gone before its end was copied, through the real vCluster
syncer (team-a of `vcluster_plane`) and through ours (team-b), held to the same behaviour.

The syncer deletes the tenant pod (vCluster's first with the pod's grace period when it saw the
host pod being deleted, then with none) and copies nothing more; the Job controller's
tracking finalizer keeps it, Running, its Job active, and no kubelet will ever end it. The
step must still end (as `Preempted`, the condition it carries), and leave neither Job nor pod.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from k8s_ai_orchestrator.backends.base import FailureReason, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.backends.kubernetes.status import SETTLE_S
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from tests.kubernetes.k8s_support import NAMESPACE, python_step, tenant_config, wait_until
from tests.plane_fixtures import TENANTS

pytestmark = [pytest.mark.controlplane, pytest.mark.vcluster, pytest.mark.timeout(180)]

SLEEPER = "import time; print('started', flush=True); time.sleep(300)"


def _step_pod(kube: RealKube, tenant: str, job: str) -> dict[str, Any] | None:
    pods = kube.pods(tenant, NAMESPACE)
    return next((p for p in pods if p["metadata"]["labels"].get("k8s-ai/job") == job), None)


def _job(kube: RealKube, tenant: str, name: str) -> dict[str, Any] | None:
    return next((j for j in kube.jobs(tenant, NAMESPACE) if j["metadata"]["name"] == name), None)


@pytest.mark.parametrize("tenant", TENANTS, ids=["real-vcluster-syncer", "our-syncer"])
def test_a_tenant_pod_left_running_when_its_host_pod_vanished_ends_the_step(
    vcluster_plane: RealKube, tenant: str
) -> None:
    kube = vcluster_plane.fresh()
    config = KubernetesConfig.from_dict(tenant_config(kube))
    backend = KubernetesBackend(config, sleep=lambda s: None)
    try:
        handle = backend.submit(python_step(SLEEPER, tenant=tenant, preemptible=True))
        wait_until(kube, backend, handle, lambda s: s.state == StepState.RUNNING)
        pod = _step_pod(kube, tenant, handle.job_id)
        assert pod is not None
        kube.preempt_pod(tenant, NAMESPACE, pod["metadata"]["name"], grace_s=0)

        # What the syncer leaves: deleted, never ended, held by the finalizer.
        def left_behind() -> dict[str, Any] | None:
            seen = _step_pod(kube, tenant, handle.job_id)
            deleted = seen is not None and seen["metadata"].get("deletionTimestamp")
            return seen if deleted else None

        held = kube.wait_for(left_behind, timeout=30)  # (vCluster's: its grace, then none)
        assert held["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
        time.sleep(1.0)
        still = _step_pod(kube, tenant, handle.job_id)
        assert still is not None and still["status"]["phase"] == "Running"
        job = _job(kube, tenant, handle.job_id)
        assert job is not None and not (job.get("status") or {}).get("failed")  # it waits too

        status = wait_until(kube, backend, handle, lambda s: s.is_terminal, timeout=SETTLE_S + 40)
        assert status.reason == FailureReason.PREEMPTED.value, status
        assert "PreemptionByScheduler" in status.message

        def all_gone() -> bool:
            gone = _job(kube, tenant, handle.job_id) is None
            return gone and _step_pod(kube, tenant, handle.job_id) is None

        kube.wait_for(all_gone, timeout=60)  # deleting the Job let its pod go
    finally:
        backend.close()
