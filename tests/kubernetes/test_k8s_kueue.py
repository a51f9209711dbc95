"""Kueue admission (`gang_admission.mode: kueue`) without Kueue: the Job each step gets, how
Kueue's Workload conditions read as step states, and the pre-flight refusal where Kueue is not
installed (the emulator serves no kueue.x-k8s.io). The runs through a real Kueue are in
test_k8s_gang_kueue.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gang_support import GangTarget, emulated_gang_target, gang_step, make_backend

from k8s_ai_orchestrator.backends.base import FailureReason, StepState
from k8s_ai_orchestrator.backends.kubernetes.config import KubernetesConfig
from k8s_ai_orchestrator.backends.kubernetes.jobs import build_job
from k8s_ai_orchestrator.backends.kubernetes.kueue import QUEUE_LABEL, eviction, queued_status
from k8s_ai_orchestrator.errors import SubmitError

KUEUE = {"mode": "kueue", "local_queue": "k8s-ai"}
PREEMPTED = (
    "Preempted to accommodate a workload (UID: 9d0e, JobUID: 5c1a-77) due to prioritization "
    "in the ClusterQueue; preemptor path: /team-a; preemptee path: /team-a"
)


def kueue_config(gang_workdir: str = "/shared") -> KubernetesConfig:
    return KubernetesConfig.from_dict(
        {
            "image": "img",
            "gang_workdir": gang_workdir,
            "tenants": {"team-a": {"kubeconfig": "/k", "gang_admission": KUEUE}},
        }
    )


@pytest.mark.parametrize("nodes", [1, 2])
def test_every_job_of_a_kueue_tenant_is_created_suspended_in_its_local_queue(nodes: int) -> None:
    config = kueue_config()
    manifest = build_job(gang_step("pass", nodes=nodes), config.tenant("team-a"), config)
    assert manifest["metadata"]["labels"][QUEUE_LABEL] == "k8s-ai"
    assert manifest["spec"]["suspend"] is True
    assert QUEUE_LABEL not in manifest["spec"]["template"]["metadata"]["labels"]
    assert manifest["spec"].get("parallelism", 1) == nodes


def workload(**conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "status": {
            "conditions": [
                {"type": kind, "status": status, "reason": reason, "message": message}
                for kind, (status, reason, message) in conditions.items()
            ]
        }
    }


def test_a_queued_workload_reads_as_pending_with_kueues_reason() -> None:
    short = "couldn't assign flavors to pod set main: insufficient unused quota for "
    short += "nvidia.com/gpu in flavor default, 4 more needed"
    status = queued_status(
        workload(QuotaReserved=("False", "Pending", short)), "train", "team-a", "k8s-ai"
    )
    assert status is not None and status.state == StepState.PENDING
    assert (status.waiting, status.message) == (
        "QueuedInKueue",
        f"queued in Kueue (LocalQueue 'k8s-ai'): {short}",
    )
    waiting = queued_status(None, "train", "team-a", "k8s-ai")
    assert waiting is not None and "Kueue has not taken the Job up yet" in waiting.message
    reserved = workload(QuotaReserved=("True", "QuotaReserved", "Quota reserved in ClusterQueue x"))
    checking = queued_status(reserved, "train", "team-a", "k8s-ai")
    assert checking is not None and checking.message == (
        "queued in Kueue (LocalQueue 'k8s-ai'): Quota reserved in ClusterQueue x; waiting for "
        "admission checks"
    )
    admitted = workload(QuotaReserved=("True", "QuotaReserved", ""), Admitted=("True", "A", ""))
    assert queued_status(admitted, "train", "team-a", "k8s-ai") is None


def test_a_workload_that_can_never_fit_its_cluster_queue_fails_at_once() -> None:
    never = (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        "flavor default, previously considered podsets requests (0) + current podset request "
        "(12) > maximum capacity (8)"
    )
    status = queued_status(
        workload(QuotaReserved=("False", "Pending", never)), "train", "team-a", "k8s-ai"
    )
    assert status is not None and status.reason == FailureReason.UNSCHEDULABLE
    assert status.message.startswith(
        "step 'train' can never be admitted by Kueue in tenant 'team-a': couldn't assign"
    )
    assert status.message.endswith("raise the ClusterQueue's nominalQuota")


def test_an_evicted_workload_names_its_preemptor_job() -> None:
    evicted = workload(Evicted=("True", "Preempted", PREEMPTED))
    assert eviction(evicted) == (FailureReason.PREEMPTED, PREEMPTED, "5c1a-77")
    timed_out = workload(Evicted=("True", "PodsReadyTimeout", "Exceeded the PodsReady timeout"))
    assert eviction(timed_out) == (FailureReason.EVICTED, "Exceeded the PodsReady timeout", None)
    assert eviction(workload(Evicted=("False", "Preempted", PREEMPTED))) is None
    assert eviction(None) is None


@pytest.fixture
def emulated(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[GangTarget]:
    with emulated_gang_target(tmp_path, request) as target:
        yield target


@pytest.mark.emulator
@pytest.mark.parametrize("nodes", [1, 2])
def test_kueue_mode_is_refused_before_anything_is_created_where_kueue_is_not_installed(
    emulated: GangTarget, nodes: int
) -> None:
    tenants = emulated.config()["tenants"]
    tenants["team-a"]["gang_admission"] = KUEUE
    backend = make_backend(emulated, tenants=tenants)
    try:
        with pytest.raises(SubmitError) as refused:
            backend.submit(gang_step("pass", run_id="no-kueue", nodes=nodes))
        assert str(refused.value) == (
            "step 'train': tenant 'team-a' uses gang_admission.mode=kueue, but its API server "
            "does not serve kueue.x-k8s.io/v1beta2 LocalQueues: Kueue (v0.17 or later) is not "
            "installed there; install it in the tenant, or use gang_admission.mode=guard"
        )
        assert emulated.jobs("team-a") == []
    finally:
        backend.close()
