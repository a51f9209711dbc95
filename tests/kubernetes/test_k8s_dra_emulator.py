"""GPUs through DRA on the emulator, which does not emulate `resource.k8s.io`: a DRA step is
refused at pre-flight, before anything is created (the real plane's tests allocate devices:
tests/controlplane/test_dra.py)."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_support import NAMESPACE, TENANTS, python_step, tenant_config

from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
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
