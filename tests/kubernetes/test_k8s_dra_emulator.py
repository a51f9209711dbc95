"""GPUs through DRA on the emulator, which does not emulate `resource.k8s.io`: a DRA step is
refused at pre-flight, before anything is created (the real plane's tests allocate devices:
tests/controlplane/test_dra.py)."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_support import NAMESPACE, TENANTS, python_step, tenant_config

from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.backends.kubernetes.api import ApiRetry
from k8s_ai_orchestrator.backends.kubernetes.jobapi import JobApi
from k8s_ai_orchestrator.backends.kubernetes.jobs import build_job, job_name
from k8s_ai_orchestrator.backends.kubernetes.tenants import TenantConnections
from k8s_ai_orchestrator.errors import SubmitError
from tests.support import FakeClock

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(120)]


def test_a_dra_step_is_refused_on_the_emulator_before_anything_is_created(
    emulator: Any, clock: FakeClock
) -> None:
    gpus = {"request": "dra", "device_class": "gpu.nvidia.com"}
    config = KubernetesConfig.from_dict(tenant_config(emulator, gpus=gpus))
    backend = KubernetesBackend(config, allowed_tenants=TENANTS, clock=clock, sleep=lambda s: 0)
    request = python_step("pass", step="embed", gpu=1)
    try:
        with pytest.raises(SubmitError) as error:
            backend.submit(request)
    finally:
        backend.close()
    said = str(error.value)
    assert "step 'embed'" in said and "DeviceClass 'gpu.nvidia.com' does not exist" in said
    assert "resource.k8s.io/v1 is not served" in said
    assert not emulator.jobs("team-a", NAMESPACE)
    assert not emulator.pods("team-a", NAMESPACE)


def test_a_refused_claim_template_deletes_the_job_it_was_created_for(emulator: Any) -> None:
    """Past pre-flight (called directly): the Job is created, its template refused (the
    emulator does not serve resource.k8s.io), and the Job goes again: nothing is left."""
    gpus = {"request": "dra", "device_class": "gpu.nvidia.com"}
    config = KubernetesConfig.from_dict(tenant_config(emulator, gpus=gpus))
    jobs = JobApi(TenantConnections(config), ApiRetry(sleep=lambda s: None), config)
    request = python_step("pass", step="embed", gpu=1)
    manifest = build_job(request, config.tenant("team-a"), config)
    with pytest.raises(SubmitError) as error:
        jobs.create(request, NAMESPACE, manifest)
    said = str(error.value)
    assert f"refused ResourceClaimTemplate {job_name(request)}-gpus" in said, said
    assert "needs create on resource.k8s.io resourceclaimtemplates" in said
    emulator.wait_for(lambda: not emulator.jobs("team-a", NAMESPACE), timeout=10)
    emulator.wait_for(lambda: not emulator.pods("team-a", NAMESPACE), timeout=10)
