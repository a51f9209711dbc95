"""The Kubernetes backend on the real v1.37 control plane: real scheduler, Job controller,
ResourceQuota admission and Eviction API; pods run by the node agent, tenants by the syncer.

The host has big-1 (96 CPU, 768Gi) and gpu-1 (32 CPU, 256Gi, 4 GPUs, tainted
nvidia.com/gpu=present:NoSchedule); see tests/plane_fixtures.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from k8s_support import (
    NAMESPACE,
    TENANTS,
    python_step,
    running_pod,
    tenant_config,
    wait_terminal,
    wait_until,
)
from kubernetes.client import CoreV1Api

from k8s_ai_orchestrator.backends.base import FailureReason, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.errors import SubmitError
from k8s_ai_orchestrator.launch.lifecycle import Attempt, Verdict
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from tests.support import FakeClock

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]

SLEEPER = "import time; print('started', flush=True); time.sleep(120)"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(real_kube: RealKube, clock: FakeClock) -> Iterator[KubernetesBackend]:
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(real_kube)),
        allowed_tenants=TENANTS,
        default_tenant="team-a",
        clock=clock,
        sleep=lambda s: None,
    )
    yield backend
    backend.close()


def of_run(kube: RealKube, server: str, namespace: str, run_id: str) -> list[Any]:
    """Jobs and pods of one run on a server."""
    objects = kube.jobs(server, namespace) + kube.pods(server, namespace)
    return [o for o in objects if o["metadata"].get("labels", {}).get("k8s-ai/run-id") == run_id]


def test_the_suite_runs_against_a_real_v1_37_api_server(real_kube: RealKube) -> None:
    assert real_kube.api_server_version == "v1.37.2"


def test_a_step_runs_in_its_tenant_on_a_host_node_and_its_log_is_read_through_the_tenant(
    real_kube: RealKube, backend: KubernetesBackend
) -> None:
    request = python_step("print('tile 7 done')", tenant="team-b")
    handle = backend.submit(request)
    status = wait_terminal(real_kube, backend, handle)
    assert status.state == StepState.SUCCEEDED
    assert status.node == "big-1"  # the only untainted node
    assert "tile 7 done" in backend.logs(handle)
    host_pods = of_run(real_kube, "host", real_kube.host_namespace("team-b"), request.run_id)
    (host_pod,) = host_pods  # named <pod>-x-default-x-team-b (hashed when over 63 characters)
    assert host_pod["metadata"]["annotations"]["vcluster.loft.sh/object-namespace"] == NAMESPACE
    assert of_run(real_kube, "team-a", NAMESPACE, request.run_id) == []


def test_cancel_leaves_no_job_and_no_pod_in_the_tenant_or_on_the_host(
    real_kube: RealKube, backend: KubernetesBackend
) -> None:
    request = python_step(SLEEPER, grace_period_s=1)
    handle = backend.submit(request)
    running_pod(real_kube, backend, handle)
    backend.cancel(handle)
    assert backend.status(handle).reason == FailureReason.CANCELLED.value
    host_ns = real_kube.host_namespace("team-a")
    real_kube.wait_for(
        lambda: (
            of_run(real_kube, "team-a", NAMESPACE, request.run_id) == []
            and of_run(real_kube, "host", host_ns, request.run_id) == []
        ),
        timeout=60,
    )
    real_kube.wait_for(lambda: real_kube.processes_alive() == 0, timeout=30)


def test_an_unschedulable_step_is_pending_with_the_real_scheduler_message(
    real_kube: RealKube, backend: KubernetesBackend, clock: FakeClock
) -> None:
    # 90 of big-1's 96 CPUs taken; gpu-1 is tainted: a 40-CPU step fits a node, but not now.
    blocker = backend.submit(python_step(SLEEPER, step="blocker", cpu=72, grace_period_s=1))
    running_pod(real_kube, backend, blocker)
    filler = backend.submit(python_step(SLEEPER, step="filler", cpu=18, grace_period_s=1))
    running_pod(real_kube, backend, filler)
    handle = backend.submit(python_step("pass", step="mosaic", cpu=40, timeout=600))
    attempt = Attempt(handle, clock(), "kubernetes tenant 'team-a'", timeout_s=600)
    try:
        pending = wait_until(real_kube, backend, handle, lambda s: bool(s.waiting))
        attempt.observe(pending, clock())
        assert pending.state == StepState.PENDING
        assert "0/2 nodes are available" in pending.message
        assert "Insufficient cpu" in pending.message
        assert "untolerated taint" in pending.message
        real_kube.wait_for(  # the host scheduler's event, copied onto the tenant pod
            lambda: any(
                e.get("reason") == "FailedScheduling"
                and e["involvedObject"]["name"].startswith(handle.job_id)
                and "0/2 nodes are available" in (e.get("message") or "")
                for e in real_kube.events("team-a", NAMESPACE)
            ),
            30,
        )
        clock.advance(601)
        seen = attempt.observe(backend.status(handle), clock())  # the step's observer gives up
        assert seen.verdict is Verdict.GIVE_UP
        assert seen.status.reason == FailureReason.UNSCHEDULABLE.value
        assert "stayed Pending for more than 600s" in seen.status.message
    finally:
        for step in (blocker, filler, handle):
            backend.cancel(step)


def test_a_step_for_an_autoscaled_pool_waits_pending_with_the_autoscalers_word(
    real_kube: RealKube, clock: FakeClock
) -> None:
    """An 8-GPU step (the largest node has 4) on a tenant whose host declares an 8-GPU pool is
    not refused: it is created and waits Pending with the real scheduler's message. When the
    autoscaler on the host nominates a node for its host pod (the event Karpenter writes,
    recorded from a real cluster), the syncer copies the event to the tenant pod and the
    step's Pending reason becomes the autoscaler's word, the scheduler's message after it."""
    raw = tenant_config(real_kube)
    pool = {"name": "gpu-8", "node": {"cpu": 64, "memory": "900Gi", "gpu": 8}}
    raw["tenants"]["team-a"]["node_pools"] = [pool]
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(raw),
        allowed_tenants=TENANTS,
        default_tenant="team-a",
        clock=clock,
        sleep=lambda s: None,
    )
    handle = backend.submit(python_step("pass", step="train", cpu=8, memory="32Gi", gpu=8))
    try:
        pending = wait_until(real_kube, backend, handle, lambda s: s.waiting == "Unschedulable")
        assert "Insufficient nvidia.com/gpu" in pending.message
        (host_pod,) = [
            p
            for p in real_kube.pods("host", "vcluster-team-a")
            if p["metadata"]["name"].startswith(handle.job_id)
        ]
        meta = host_pod["metadata"]
        CoreV1Api(real_kube.host.api_client()).create_namespaced_event(
            meta["namespace"],
            {
                "metadata": {"name": f"{meta['name']}.karpenter", "namespace": meta["namespace"]},
                "involvedObject": {
                    "kind": "Pod",
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
                "reason": "Nominated",
                "message": "Pod should schedule on: nodeclaim/gpu-8-x7k2q",
                "type": "Normal",
                "source": {"component": "karpenter"},
                "firstTimestamp": "2026-12-03T14:02:11Z",
                "lastTimestamp": "2026-12-03T14:02:11Z",
                "count": 1,
            },
        )
        word = wait_until(real_kube, backend, handle, lambda s: s.waiting == "Nominated")
        assert word.message.startswith(
            "waiting for a node from NodePool 'gpu-8' (NodeClaim gpu-8-x7k2q, launched for it "
            "at 14:02:11 UTC); the scheduler: 0/2 nodes are available"
        ), word.message
    finally:
        backend.cancel(handle)
        backend.close()


def test_a_step_needing_more_gpus_than_any_node_fails_in_pre_flight(
    backend: KubernetesBackend,
) -> None:
    with pytest.raises(SubmitError, match=r"no schedulable node.*gpu \(needs 8, largest 4\)"):
        backend.submit(python_step("pass", step="train", cpu=8, memory="32Gi", gpu=8))


def test_a_step_larger_than_the_real_tenant_quota_fails_in_pre_flight(
    real_kube: RealKube, backend: KubernetesBackend
) -> None:
    quota = {"metadata": {"name": "k8s-ai-steps"}, "spec": {"hard": {"requests.memory": "1Gi"}}}
    core = CoreV1Api(real_kube.tenant("team-b").api_client())
    core.create_namespaced_resource_quota(NAMESPACE, quota)
    try:
        with pytest.raises(SubmitError, match=r"requests.memory=2Gi.*allows 1Gi"):
            backend.submit(python_step("pass", step="mosaic", tenant="team-b", memory="2Gi"))
    finally:
        core.delete_namespaced_resource_quota("k8s-ai-steps", NAMESPACE)


def test_a_step_waiting_for_quota_is_pending_with_the_job_controllers_quota_error(
    real_kube: RealKube, backend: KubernetesBackend
) -> None:
    quota = {"metadata": {"name": "tight"}, "spec": {"hard": {"requests.cpu": "1"}}}
    core = CoreV1Api(real_kube.tenant("team-b").api_client())
    core.create_namespaced_resource_quota(NAMESPACE, quota)
    real_kube.wait_for(
        lambda: core.read_namespaced_resource_quota("tight", NAMESPACE).status.hard or {},
        timeout=30,
    )  # the quota controller has computed its status: admission now enforces it
    try:
        first = backend.submit(python_step(SLEEPER, tenant="team-b", cpu=0.75))
        running_pod(real_kube, backend, first)
        second = backend.submit(python_step("pass", step="tile-2", tenant="team-b", cpu=0.75))
        status = wait_until(real_kube, backend, second, lambda s: bool(s.waiting), timeout=90)
        assert status.state == StepState.PENDING
        assert "exceeded quota" in status.message
        backend.cancel(first)
        assert wait_terminal(real_kube, backend, second).state == StepState.SUCCEEDED
    finally:
        core.delete_namespaced_resource_quota("tight", NAMESPACE)


def test_the_real_scheduler_preempts_a_preemptible_gpu_step_for_a_standard_one(
    real_kube: RealKube, backend: KubernetesBackend
) -> None:
    filler = backend.submit(
        python_step(SLEEPER, step="embed", cpu=4, gpu=4, preemptible=True, grace_period_s=1)
    )
    running_pod(real_kube, backend, filler)
    trainer = backend.submit(python_step("print('trained')", step="train", cpu=4, gpu=4))
    try:
        preempted = wait_terminal(real_kube, backend, filler)
        assert preempted.reason == FailureReason.PREEMPTED.value
        assert "PreemptionByScheduler" in preempted.message
        # the scheduler's Preempted event on the host pod, copied to the tenant, names the step
        assert "preempted by step 'train'" in preempted.message
        assert wait_terminal(real_kube, backend, trainer).state == StepState.SUCCEEDED
    finally:
        backend.cancel(trainer)


def test_an_evicted_step_is_reported_evicted(
    real_kube: RealKube, backend: KubernetesBackend
) -> None:
    handle = backend.submit(python_step(SLEEPER, grace_period_s=1))
    real_kube.evict_pod("team-a", NAMESPACE, running_pod(real_kube, backend, handle))
    status = wait_terminal(real_kube, backend, handle)
    assert status.reason == FailureReason.EVICTED.value
