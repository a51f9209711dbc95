"""All-or-nothing admission of gangs by the executor's guard, and GPU pools shared with
preemptible steps: the guard waits for room for every pod, counts preemptible pods as room,
deletes a gang that only partly runs, and a preemptible step learns who preempted it.

Runs on every target of `gang_support.GANG_TARGETS`: the emulator and a real control plane.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator

import pytest
from gang_support import (
    GangTarget,
    gang_step,
    gpu_pod,
    job_pods,
    make_backend,
    run_gang_code,
    wait_status,
)
from k8s_support import NAMESPACE

from k8s_ai_orchestrator.backends.base import FailureReason, LaunchRequest, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.errors import ConfigError, SubmitError
from k8s_ai_orchestrator.spec import resolve_spec
from tests.support import FakeClock


@pytest.fixture
def backend(gang_target: GangTarget) -> Iterator[KubernetesBackend]:
    built = make_backend(gang_target)
    yield built
    built.close()


def hold_node(gang_target: GangTarget, tenant: str, name: str, node: str) -> None:
    """Create pod `name` in `tenant` holding all 4 GPUs of `node`; return once it is bound there
    (until then the scheduler may give `node` to the pods a test submits next)."""
    gang_target.core(tenant).create_namespaced_pod(
        NAMESPACE, gpu_pod(name, node, "k8s-ai-standard")
    )
    gang_target.wait_for(
        lambda: any(
            p["metadata"]["name"] == name and p["spec"].get("nodeName") == node
            for p in gang_target.pods(tenant)
        ),
        timeout=120,
    )


def release(gang_target: GangTarget, tenant: str, name: str) -> None:
    gang_target.core(tenant).delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    gang_target.wait_for(
        lambda: name not in [p["metadata"]["name"] for p in gang_target.pods(tenant)], timeout=120
    )


@pytest.mark.slow
def test_a_gang_is_created_only_when_every_pod_has_room(
    gang_target: GangTarget, backend: KubernetesBackend
) -> None:
    hold_node(gang_target, "team-a", "holds-node-b", "node-b")
    handle = backend.submit(
        gang_step(run_gang_code("sleep_rank", 0), run_id="waits", gpus_per_node=4)
    )

    status = backend.status(handle)

    assert (status.state, status.waiting) == (StepState.PENDING, "WaitingForGangRoom")
    assert "1 of the 2 nodes it needs have room for one pod now (node-a)" in status.message
    assert not [j for j in gang_target.jobs("team-a") if j["metadata"]["name"] == handle.job_id]
    release(gang_target, "team-a", "holds-node-b")
    assert wait_status(gang_target, backend, handle, lambda s: s.is_terminal).state == (
        StepState.SUCCEEDED
    )


@pytest.mark.slow
def test_a_gang_waits_until_its_quota_has_room_for_every_pod(
    gang_target: GangTarget, backend: KubernetesBackend
) -> None:
    core = gang_target.core("team-b")
    core.create_namespaced_resource_quota(
        NAMESPACE, {"metadata": {"name": "compute"}, "spec": {"hard": {"requests.cpu": "2"}}}
    )
    holder = gpu_pod("holds-cpu", "node-a", "k8s-ai-standard", gpus=0)
    holder["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}

    def quota_status(field: str) -> dict[str, str]:
        status = core.read_namespaced_resource_quota("compute", NAMESPACE).status
        return (getattr(status, field) if status else None) or {}

    try:
        # Quota admission counts a pod only against a quota whose status.hard the quota
        # controller has filled; a pod admitted before that is counted at the controller's
        # next full resync (minutes), so the holder is created once the quota is live.
        gang_target.wait_for(lambda: "requests.cpu" in quota_status("hard"), timeout=60)
        core.create_namespaced_pod(NAMESPACE, holder)
        gang_target.wait_for(lambda: quota_status("used").get("requests.cpu") == "1", timeout=60)
        handle = backend.submit(
            gang_step(run_gang_code("sleep_rank", 0), run_id="quota", tenant="team-b", cpu=1)
        )

        status = backend.status(handle)

        assert (status.state, status.waiting) == (StepState.PENDING, "WaitingForGangRoom")
        assert "ResourceQuota 'compute' has requests.cpu=1 left, the gang's 2 pods need 2" in (
            status.message
        )
        release(gang_target, "team-b", "holds-cpu")
        assert wait_status(gang_target, backend, handle, lambda s: s.is_terminal).state == (
            StepState.SUCCEEDED
        )
    finally:
        core.delete_namespaced_resource_quota("compute", NAMESPACE)


def test_a_gang_that_only_partly_runs_is_deleted_after_its_all_running_timeout(
    gang_target: GangTarget,
) -> None:
    # team-a cannot see team-b's pods, so the guard sees room that team-b's pod holds
    hold_node(gang_target, "team-b", "team-b-holds-node-b", "node-b")
    clock = FakeClock()
    tenants = gang_target.config()["tenants"]
    tenants["team-a"]["gang_admission"] = {"mode": "guard", "all_running_timeout_s": 120}
    backend = make_backend(gang_target, clock, tenants=tenants)
    try:
        handle = backend.submit(
            gang_step(run_gang_code("sleep_rank", 0), run_id="partial", gpus_per_node=4)
        )
        # the scheduler's verdict on pod 1 (its PodScheduled condition or FailedScheduling
        # event, whichever the syncer copies first) may reach team-a after pod 0 runs
        partial = wait_status(
            gang_target,
            backend,
            handle,
            lambda s: s.waiting == "GangPartiallyRunning" and "no reason" not in s.message,
        )
        assert re.match(
            r"1 of 2 gang pods running; (Unschedulable|FailedScheduling): 0/2 nodes",
            partial.message,
        ), partial.message
        time.sleep(1.5)  # pod 0 runs a whole second at least (the kubelet's times are whole)
        clock.advance(121)

        status = backend.status(handle)

        assert status.reason == FailureReason.UNSCHEDULABLE
        # it never ran whole: it reserved what its running rank held, all of it gang waiting
        usage = backend.usage(handle)
        assert usage.wall_seconds == 0 and usage.waiting_node_seconds >= 1
        assert usage.cpu_seconds == pytest.approx(usage.waiting_node_seconds * 0.5)
        assert usage.gpu_seconds == pytest.approx(usage.waiting_node_seconds * 4)
        assert status.message.startswith(
            "gang step 'train' in tenant 'team-a': only 1 of 2 pods were running 120s after "
            "the first one started"
        )
        assert "raise kubernetes.tenants.team-a.gang_admission.all_running_timeout_s" in (
            status.message
        )
        gang_target.wait_for(lambda: not job_pods(gang_target, handle), timeout=120)
    finally:
        backend.close()
        release(gang_target, "team-b", "team-b-holds-node-b")


@pytest.mark.slow
def test_a_gang_preempts_a_preemptible_step_which_learns_who_preempted_it(
    gang_target: GangTarget, backend: KubernetesBackend
) -> None:
    filler = LaunchRequest(
        run_id="fill",
        step_key="embed_tiles",
        attempt=0,
        command=[sys.executable, "-c", "import time; time.sleep(600)"],
        env={},
        spec=resolve_spec({"size": "gpu-1", "gpu": 4, "memory": "256Mi", "preemptible": True}),
        tenant="team-a",
        grace_period_s=1,
    )
    filled = backend.submit(filler)
    wait_status(gang_target, backend, filled, lambda s: s.state == StepState.RUNNING)
    gang = backend.submit(
        gang_step(run_gang_code("sleep_rank", 1), run_id="trains", gpus_per_node=4)
    )

    preempted = wait_status(gang_target, backend, filled, lambda s: s.is_terminal)

    assert preempted.reason == FailureReason.PREEMPTED, preempted
    assert "PreemptionByScheduler" in preempted.message
    assert "preempted by step 'train' of run 'trains' (pod k8s-ai-" in preempted.message
    assert wait_status(gang_target, backend, gang, lambda s: s.is_terminal).state == (
        StepState.SUCCEEDED
    )


def test_a_gang_larger_than_the_pool_is_refused_before_anything_is_created(
    backend: KubernetesBackend,
) -> None:
    with pytest.raises(SubmitError) as refused:
        backend.submit(gang_step("pass", run_id="too-big", nodes=3, gpus_per_node=4))
    assert str(refused.value).startswith(
        "step 'train' (3 nodes × 1 tasks × (0.5 CPU / 2Gi / 4 GPU)) can never run in tenant "
        "'team-a': its gang needs 3 schedulable nodes with room for one pod each, and only 2 "
        "node(s) have enough allocatable resources (node-a, node-b); lower compute(nodes=...) "
        "to 2"
    )


def test_kueue_admission_needs_its_local_queue() -> None:
    raw = {"tenants": {"t": {"kubeconfig": "/k", "gang_admission": {"mode": "kueue"}}}}
    with pytest.raises(ConfigError) as refused:
        KubernetesConfig.from_dict(raw)
    assert str(refused.value).startswith(
        "kubernetes.tenants.t.gang_admission: mode kueue needs local_queue"
    )
    raw["tenants"]["t"]["gang_admission"]["local_queue"] = "gpu-queue"
    admission = KubernetesConfig.from_dict(raw).tenants["t"].gang_admission
    assert (admission.kueue, admission.local_queue, admission.guarded) == (True, "gpu-queue", False)


def test_workload_admission_is_accepted_in_config() -> None:
    raw = {"tenants": {"t": {"kubeconfig": "/k", "gang_admission": {"mode": "workload"}}}}
    assert KubernetesConfig.from_dict(raw).tenants["t"].gang_admission.mode == "workload"


@pytest.mark.parametrize(
    ("admission", "message"),
    [
        ({"mode": "fifo"}, "mode='fifo' is not one of guard, workload, kueue"),
        ({"all_running_timeout_s": 0}, "all_running_timeout_s=0.0 is not allowed"),
        ({"timeout": 5}, "gang_admission: unknown key(s) ['timeout']"),
        ({"local_queue": "q"}, "local_queue is only read with mode: kueue (mode is 'guard')"),
        ({"mode": "kueue", "local_queue": "Q_1"}, "local_queue='Q_1' is not a Kubernetes"),
    ],
)
def test_bad_gang_admission_settings_are_refused(admission: dict, message: str) -> None:
    raw = {"tenants": {"t": {"kubeconfig": "/k", "gang_admission": admission}}}
    with pytest.raises(ConfigError, match=re.escape(message)):
        KubernetesConfig.from_dict(raw)


def test_a_relative_gang_workdir_is_refused() -> None:
    with pytest.raises(ConfigError, match="gang_workdir='shared' is not an absolute path"):
        KubernetesConfig.from_dict({"gang_workdir": "shared"})
