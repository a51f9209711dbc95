"""Disruptions a step survives through the executor: preemption, node loss, API outages.

Each reports the reason the executor relaunches on; none loses the step's status.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_support import (
    NAMESPACE,
    TENANTS,
    install_priority_classes,
    python_step,
    running_pod,
    tenant_config,
    wait_terminal,
    wait_until,
)
from kubernetes.client import CoreV1Api

from k8s_ai_orchestrator.backends.base import FailureReason, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(180)]

SLEEPER = "import time; print('started', flush=True); time.sleep(120)"


def test_a_higher_priority_pod_preempts_a_preemptible_step(
    emulator: Any, backend: KubernetesBackend
) -> None:
    handles = [
        backend.submit(python_step(SLEEPER, step=f"embed-{i}", cpu=7, preemptible=True))
        for i in range(2)
    ]
    for handle in handles:
        running_pod(emulator, backend, handle)
    core = CoreV1Api(emulator.tenant("team-a").api_client())
    urgent = {
        "metadata": {"name": "urgent-inference"},
        "spec": {
            "priorityClassName": "urgent",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "serve",
                    "image": "serve:1",
                    "args": [sys.executable, "-c", "import time; time.sleep(60)"],
                    "resources": {"requests": {"cpu": "7"}},
                }
            ],
        },
    }
    core.create_namespaced_pod(NAMESPACE, urgent)
    try:

        def ended_preempted() -> list[Any]:  # a victim reads Preempted while it still stops
            return [
                h
                for h in handles
                if backend.status(h).is_terminal
                and backend.status(h).reason == FailureReason.PREEMPTED.value
            ]

        emulator.wait_for(ended_preempted, timeout=60)
        preempted = [h for h in handles if backend.status(h).is_terminal]
        assert len(preempted) == 1
        assert "PreemptionByScheduler" in backend.status(preempted[0]).message
    finally:
        core.delete_namespaced_pod("urgent-inference", NAMESPACE, grace_period_seconds=0)
        for handle in handles:
            backend.cancel(handle)


def test_expired_watches_are_relisted_and_a_restarted_api_server_is_reconnected(
    emulator: Any, backend: KubernetesBackend
) -> None:
    work = "import time; time.sleep(2); print('done', flush=True)"
    handle = backend.submit(python_step(work))
    running_pod(emulator, backend, handle)
    emulator.reset_request_counts()
    emulator.expire_watches("team-a")
    emulator.restart_server("team-a")
    assert wait_terminal(emulator, backend, handle).state == StepState.SUCCEEDED
    assert emulator.request_counts(server="team-a")[("list", "pods")] >= 1


def test_live_logs_are_read_incrementally_from_one_stream(
    emulator: Any, backend: KubernetesBackend
) -> None:
    code = "import time\nfor i in range(3):\n    print(f'tile {i}', flush=True); time.sleep(0.5)\n"
    handle = backend.submit(python_step(code))
    running_pod(emulator, backend, handle)
    received = {"text": "", "offset": 0}

    def read_new_lines() -> bool:
        chunk, received["offset"] = backend.logs_since(handle, int(received["offset"]))
        received["text"] += chunk
        return "tile 2" in str(received["text"])

    emulator.wait_for(read_new_lines, timeout=60)
    text = str(received["text"])
    assert text.splitlines() == ["tile 0", "tile 1", "tile 2"]
    wait_terminal(emulator, backend, handle)
    assert emulator.request_counts(server="team-a")[("get", "pods/log")] <= 2


def test_tenant_reached_through_its_vcluster_secret_on_the_host(emulator: Any) -> None:
    tenants = {
        "team-a": {
            "vcluster": "team-a",
            "host_namespace": emulator.host_namespace("team-a"),
            "host_kubeconfig": emulator.host.kubeconfig_path,
            "server": emulator.tenant("team-a").server_url,
            "namespace": NAMESPACE,
        }
    }
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emulator, tenants=tenants)),
        default_tenant="team-a",
    )
    try:
        handle = backend.submit(python_step("print('via vc-team-a')", tenant=None))
        assert wait_terminal(emulator, backend, handle).state == StepState.SUCCEEDED
        assert "via vc-team-a" in backend.logs(handle)
    finally:
        backend.close()


@pytest.fixture
def lonely_node_emulator() -> Iterator[Any]:
    node = NodeSpec(name="node-z", cpu="4", memory="8Gi", gpus=0, labels={}, taints=())
    with KubeEmulator(nodes=[node], tenants=list(TENANTS), tls=False, workdir=None) as emu:
        install_priority_classes(emu.tenant("team-a").api_client())
        yield emu


def test_a_step_on_a_failed_node_is_reported_lost(lonely_node_emulator: Any) -> None:
    emu = lonely_node_emulator
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emu)), sleep=lambda s: None
    )
    try:
        handle = backend.submit(python_step(SLEEPER))
        running_pod(emu, backend, handle)
        emu.fail_node("node-z")
        status = wait_until(emu, backend, handle, lambda s: s.is_terminal)
        assert status.reason == FailureReason.LOST.value
        assert "DeletionByTaintManager" in status.message
    finally:
        backend.close()


def test_tenants_over_tls_each_use_their_own_credentials() -> None:
    node = NodeSpec(name="node-t", cpu="4", memory="8Gi", gpus=0, labels={}, taints=())
    with KubeEmulator(nodes=[node], tenants=list(TENANTS), tls=True, workdir=None) as emu:
        for tenant in TENANTS:
            install_priority_classes(emu.tenant(tenant).api_client())
        backend = KubernetesBackend(KubernetesConfig.from_dict(tenant_config(emu)))
        try:
            handles = [
                backend.submit(python_step(f"print('hello from {t}')", tenant=t)) for t in TENANTS
            ]
            for tenant, handle in zip(TENANTS, handles, strict=True):
                assert wait_terminal(emu, backend, handle).state == StepState.SUCCEEDED
                assert f"hello from {tenant}" in backend.logs(handle)
                assert len(emu.jobs(tenant, NAMESPACE)) == 1
        finally:
            backend.close()
