"""Kueue admission (`gang_admission.mode: kueue`) on the real v1.37 control plane with a real
Kueue v0.17 (built from its Go module, run out of cluster against tenant team-a, fixture
`kueue_team_a`): every Job of the tenant is created suspended in the LocalQueue, Kueue admits a
gang only when its ClusterQueue has quota for all its pods, and preempts preemptible steps
for it; the backend reports Kueue's reasons and who preempted whom."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository
from gang_support import (
    GangTarget,
    _gang_target,
    gang_step,
    gpu_pod,
    make_backend,
    run_gang_code,
    wait_status,
)
from k8s_support import NAMESPACE
from kubernetes import client

from k8s_ai_orchestrator.backends.base import FailureReason, JobHandle, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend
from k8s_ai_orchestrator.backends.kubernetes.kueue import GROUP, QUEUE_LABEL, VERSION
from k8s_ai_orchestrator.errors import SubmitError
from tests.support import engine_messages

pytestmark = [pytest.mark.controlplane, pytest.mark.kueue, pytest.mark.timeout(400)]

SLEEP = "import time; time.sleep(600)"
SLEEP_A_BIT = "import time; time.sleep(1)"
ROOT = Path(__file__).parents[2]
HERE = Path(__file__).parent


@pytest.fixture
def plane(gang_plane: Any, kueue_team_a: Any, tmp_path: Any) -> GangTarget:
    """The gang plane, once the ClusterQueue is Active (Kueue has seen the chart's flavor and
    queue) and no Workload of an earlier test holds quota in it (a gang's Job completes, and
    frees its quota, when its last worker pod has exited)."""
    custom = client.CustomObjectsApi(gang_plane.tenant("team-a").api_client())

    def idle() -> bool:
        queue = custom.get_cluster_custom_object(
            GROUP, VERSION, "clusterqueues", kueue_team_a.cluster_queue
        )
        active = conditions(queue).get("Active") == "True"
        return active and not (queue.get("status") or {}).get("reservingWorkloads")

    try:
        gang_plane.wait_for(idle, 120)
    except TimeoutError:
        held = [(w["metadata"]["name"], conditions(w)) for w in workloads(gang_plane)]
        raise AssertionError(f"ClusterQueue not Active, or reserving quota for {held}") from None
    return _gang_target("control-plane", gang_plane.fresh(), tmp_path)


def kueue_backend(target: GangTarget, local_queue: str) -> KubernetesBackend:
    """A backend whose tenant team-a admits every Job through Kueue."""
    tenants = target.config()["tenants"]
    tenants["team-a"]["gang_admission"] = {"mode": "kueue", "local_queue": local_queue}
    return make_backend(target, tenants=tenants)


def workloads(gang_plane: Any) -> list[dict[str, Any]]:
    found = client.CustomObjectsApi(
        gang_plane.tenant("team-a").api_client()
    ).list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "workloads")
    return list(found["items"])


def workload_of(gang_plane: Any, job: str) -> dict[str, Any] | None:
    for item in workloads(gang_plane):
        owners = item["metadata"].get("ownerReferences") or []
        if any(o["name"] == job for o in owners):
            return item
    return None


def conditions(item: dict[str, Any] | None) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (item or {}).get("status", {}).get("conditions", [])}


def job_of(target: GangTarget, name: str) -> dict[str, Any] | None:
    return next((j for j in target.jobs("team-a") if j["metadata"]["name"] == name), None)


def gang_pods(target: GangTarget, handle: JobHandle) -> list[dict[str, Any]]:
    return [p for p in target.pods("team-a") if handle.job_id in p["metadata"]["name"]]


def test_a_kueue_gang_is_admitted_whole_and_runs_every_rank(
    plane: GangTarget, gang_plane: Any, kueue_team_a: Any, tmp_path: Any
) -> None:
    backend = kueue_backend(plane, kueue_team_a.local_queue)
    out = tmp_path / "ranks"
    out.mkdir()
    handle = backend.submit(
        gang_step(run_gang_code("record_rank", str(out)), run_id="kq-ranks", gpus_per_node=2)
    )
    try:
        job = job_of(plane, handle.job_id)
        assert job is not None and job["metadata"]["labels"][QUEUE_LABEL] == "k8s-ai"
        status = wait_status(plane, backend, handle, lambda s: s.is_terminal)
        assert status.state == StepState.SUCCEEDED, status
        ranks = sorted(json.loads(p.read_text())["RANK"] for p in out.glob("rank-*.json"))
        assert ranks == ["0", "1"]
        admitted = workload_of(gang_plane, handle.job_id)
        assert conditions(admitted)["Admitted"] == "True", admitted
        (pod_set,) = admitted["spec"]["podSets"]  # type: ignore[index]
        assert pod_set["count"] == 2
    finally:
        backend.cancel(handle)
        backend.close()


def test_a_kueue_gang_waits_without_pods_until_its_cluster_queue_has_quota_for_all(
    plane: GangTarget, kueue_team_a: Any
) -> None:
    """The ClusterQueue holds 8 GPUs; a 4-GPU step holds half. A gang of 2 × 4 GPUs waits
    in Kueue with no pod at all (nothing holds a GPU), then runs once the step is gone."""
    backend = kueue_backend(plane, kueue_team_a.local_queue)
    holder = backend.submit(gang_step(SLEEP, step="holder", run_id="kq-quota", nodes=1, gpu=4))
    gang = None
    try:
        wait_status(plane, backend, holder, lambda s: s.state == StepState.RUNNING)
        submitted = time.monotonic()
        gang = backend.submit(
            gang_step(run_gang_code("sleep_rank", 0), run_id="kq-quota", gpus_per_node=4)
        )

        def queued() -> Any:
            status = backend.status(gang)
            return status if "insufficient unused quota" in status.message else None

        status = plane.wait_for(queued, timeout=120)
        assert status.state == StepState.PENDING and status.waiting == "QueuedInKueue", status
        assert status.message == (
            "queued in Kueue (LocalQueue 'k8s-ai'): couldn't assign flavors to pod set main: "
            "insufficient unused quota for nvidia.com/gpu in flavor default, 4 more needed"
        )
        assert gang_pods(plane, gang) == []
        assert (job_of(plane, gang.job_id) or {})["spec"]["suspend"] is True
        queued_at_least = time.monotonic() - submitted
        backend.cancel(holder)
        status = wait_status(plane, backend, gang, lambda s: s.is_terminal)
        assert status.state == StepState.SUCCEEDED, status
        # its wait in the queue held nothing; from admission (its pods made) to its first
        # rank's start it held the quota: a moment here, where the nodes were free
        usage = backend.usage(gang)
        assert usage.queued_seconds >= queued_at_least - 1, usage
        assert 0 <= usage.quota_idle_seconds < 30, usage
        assert usage.wall_seconds > 0, usage
    finally:
        for handle in (holder, gang):
            if handle is not None:
                backend.cancel(handle)
        backend.close()


def test_a_step_admitted_while_its_gpus_are_held_outside_kueue_records_idle_quota(
    plane: GangTarget, kueue_team_a: Any
) -> None:
    """Pods Kueue does not count (tenant team-b's, not in its queue) hold every GPU of both
    nodes: Kueue admits a 4-GPU step at once (its ClusterQueue has the quota), and the step's
    pod waits for a node while its quota is held. That wait is `quota_idle_seconds` (held,
    waste), not `queued_seconds`."""
    backend = kueue_backend(plane, kueue_team_a.local_queue)
    holders = [f"outside-kueue-{node}" for node in ("node-a", "node-b")]
    core = plane.core("team-b")
    step = None
    try:
        for name, node in zip(holders, ("node-a", "node-b"), strict=True):
            core.create_namespaced_pod(NAMESPACE, gpu_pod(name, node, "k8s-ai-standard"))
        plane.wait_for(
            lambda: (
                all(
                    p["spec"].get("nodeName")
                    for p in plane.pods("team-b")
                    if p["metadata"]["name"] in holders
                )
                and len([p for p in plane.pods("team-b") if p["metadata"]["name"] in holders]) == 2
            ),
            timeout=120,
        )
        step = backend.submit(gang_step(SLEEP_A_BIT, step="idle", run_id="kq-idle", nodes=1, gpu=4))
        # admitted: its pod exists (Kueue unsuspended the Job), and waits for GPUs
        plane.wait_for(lambda: gang_pods(plane, step), timeout=120)
        held_from = time.monotonic()
        time.sleep(6)
        assert backend.status(step).state == StepState.PENDING
        core.delete_namespaced_pod(holders[0], NAMESPACE, grace_period_seconds=0)
        status = wait_status(plane, backend, step, lambda s: s.is_terminal)
        held = time.monotonic() - held_from
        assert status.state == StepState.SUCCEEDED, status
        usage = backend.usage(step)
        assert usage.quota_idle_seconds >= 5, usage
        assert usage.quota_idle_seconds <= held + 2, (usage, held)
        assert usage.queued_seconds < usage.quota_idle_seconds, usage
    finally:
        if step is not None:
            backend.cancel(step)
        backend.close()
        for name in holders:
            try:
                core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
            except client.ApiException as error:
                if error.status != 404:
                    raise


def test_kueue_preempts_preemptible_steps_for_a_gang_and_names_it(
    plane: GangTarget, gang_plane: Any, kueue_team_a: Any
) -> None:
    """Two preemptible 4-GPU steps fill the ClusterQueue; a standard gang of 2 × 4 GPUs makes
    Kueue evict both. Each reports Preempted by the gang's step, and its Job is deleted so
    that Kueue never readmits the attempt the executor relaunches."""
    backend = kueue_backend(plane, kueue_team_a.local_queue)
    fillers = [
        backend.submit(
            gang_step(SLEEP, step=f"fill-{n}", run_id="kq-fill", nodes=1, gpu=4, preemptible=True)
        )
        for n in range(2)
    ]
    gang = None
    try:
        for filler in fillers:
            wait_status(plane, backend, filler, lambda s: s.state == StepState.RUNNING)
        gang = backend.submit(
            gang_step(run_gang_code("sleep_rank", 0), run_id="kq-train", gpus_per_node=4)
        )
        for filler in fillers:
            status = wait_status(plane, backend, filler, lambda s: s.is_terminal)
            assert status.reason == FailureReason.PREEMPTED, status
            assert status.message.startswith(
                f"step '{filler.step_key}' was preempted by step 'train' of run 'kq-train' "
                f"(Job {gang.job_id}) through Kueue: Preempted to accommodate a workload"
            ), status
            assert "due to prioritization in the ClusterQueue" in status.message
            plane.wait_for(lambda f=filler: job_of(plane, f.job_id) is None, 60)
        status = wait_status(plane, backend, gang, lambda s: s.is_terminal)
        assert status.state == StepState.SUCCEEDED, status
    finally:
        for handle in (*fillers, gang):
            if handle is not None:
                backend.cancel(handle)
        backend.close()


def test_a_missing_local_queue_is_refused_before_anything_is_created(
    plane: GangTarget,
) -> None:
    backend = kueue_backend(plane, "no-such-queue")
    try:
        with pytest.raises(SubmitError) as refused:
            backend.submit(gang_step("pass", run_id="kq-missing"))
        assert str(refused.value).startswith(
            "step 'train': tenant 'team-a' uses gang_admission.mode=kueue, but LocalQueue "
            f"'no-such-queue' does not exist in namespace '{NAMESPACE}'; create it"
        )
        assert plane.jobs("team-a") == []
    finally:
        backend.close()


def kueue_executor_config(target: GangTarget, local_queue: str, **top: Any) -> dict[str, Any]:
    """Every step on tenant team-a, admitted by Kueue."""
    kubernetes = target.config()
    kubernetes["tenants"]["team-a"]["gang_admission"] = {
        "mode": "kueue",
        "local_queue": local_queue,
    }
    return {"backend": "kubernetes", "default_tenant": "team-a", "kubernetes": kubernetes, **top}


def test_the_example_training_step_runs_through_kueue_with_one_config_switch(
    plane: GangTarget,
    gang_plane: Any,
    kueue_team_a: Any,
    dagster_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VEGETATION_CHECKPOINTS", (tmp_path / "ckpt").as_uri())
    monkeypatch.chdir(ROOT)
    repo = ReconstructableRepository.for_module(
        "example_project.definitions", "defs", working_directory=str(ROOT)
    )
    config = kueue_executor_config(plane, kueue_team_a.local_queue, backend="local")
    config["gang_backend"] = "kubernetes"
    with DagsterInstance.get() as instance:
        result = execute_job(
            repo.get_reconstructable_job("vegetation_risk"),
            instance=instance,
            run_config={"execution": {"config": config}},
            asset_selection=[AssetKey("vegetation_model")],
        )
        assert result.success
    (job,) = [
        j
        for j in plane.jobs("team-a")
        if j["metadata"]["annotations"].get("k8s-ai/step-key") == "vegetation_model"
    ]
    assert job["metadata"]["labels"][QUEUE_LABEL] == "k8s-ai"
    assert conditions(workload_of(gang_plane, job["metadata"]["name"]))["Admitted"] == "True"


def test_a_step_kueue_preempts_for_a_gang_resumes_from_its_checkpoint_through_the_executor(
    plane: GangTarget,
    kueue_team_a: Any,
    dagster_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run A's preemptible 4-GPU step holds half the ClusterQueue; run B's 2 × 4-GPU gang
    arrives. Kueue evicts A's step, which saves, is relaunched (no RetryPolicy spent) with an
    engine event naming B's step, waits in Kueue while the gang runs, then resumes."""
    repo = ReconstructableRepository.for_module(
        "k8s_kueue_pipelines", "defs", working_directory=str(HERE)
    )
    marker = tmp_path / "embed-running"
    monkeypatch.setenv("EMBED_MARKER", str(marker))
    monkeypatch.setenv("CHECKPOINT_ROOT", (tmp_path / "ckpt").as_uri())
    config = kueue_executor_config(plane, kueue_team_a.local_queue, grace_period_s=10.0)
    run_config = {"execution": {"config": config}}
    outcome: dict[str, Any] = {}

    def run_embed() -> None:
        with (
            DagsterInstance.get() as instance,
            execute_job(
                repo.get_reconstructable_job("embed_job"), instance=instance, run_config=run_config
            ) as result,
        ):
            outcome["result"] = (result.success, result.run_id, result.output_for_node("embed"))

    embedder = threading.Thread(target=run_embed, daemon=True)
    embedder.start()
    plane.wait_for(marker.exists, timeout=180)
    with DagsterInstance.get() as instance:
        train = execute_job(
            repo.get_reconstructable_job("train_job"), instance=instance, run_config=run_config
        )
        assert train.success
        embedder.join(timeout=240)
        success, embed_run, output = outcome["result"]
        assert success
        messages = engine_messages(instance, embed_run)
    relaunch = [m for m in messages if "'embed' was Preempted; relaunching" in m]
    assert relaunch, messages
    print(relaunch[0])
    assert f"preempted by step 'train' of run '{train.run_id}'" in relaunch[0]
    assert "through Kueue: Preempted to accommodate a workload" in relaunch[0]
    assert output["resumed_from"] >= 4
