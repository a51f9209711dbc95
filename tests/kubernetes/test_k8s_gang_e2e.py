"""Gang steps through `ai_executor` on the emulated cluster, end to end: the example
project's 2-node training step on a tenant (one config switch, `gang_backend: kubernetes`),
and a gang whose worker pod is evicted, relaunched whole from its checkpoint.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository
from gang_support import GangTarget

from tests.support import engine_messages

# emulator or controlplane: each target parameter carries its marker (tests/plane_fixtures.py)
pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).parents[2]
HERE = Path(__file__).parent


def gang_executor_config(gang_target: GangTarget) -> dict[str, Any]:
    """Single-node steps stay local; multi-node steps go to tenant team-a."""
    return {
        "backend": "local",
        "gang_backend": "kubernetes",
        "default_tenant": "team-a",
        "kubernetes": gang_target.config(),
    }


@pytest.mark.slow
def test_the_example_training_step_runs_as_a_gang_on_a_tenant_with_one_config_switch(
    gang_target: GangTarget, dagster_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VEGETATION_CHECKPOINTS", (tmp_path / "ckpt").as_uri())
    monkeypatch.chdir(ROOT)
    repo = ReconstructableRepository.for_module(
        "example_project.definitions", "defs", working_directory=str(ROOT)
    )
    with DagsterInstance.get() as instance:
        result = execute_job(
            repo.get_reconstructable_job("vegetation_risk"),
            instance=instance,
            run_config={"execution": {"config": gang_executor_config(gang_target)}},
            asset_selection=[AssetKey("vegetation_model")],
        )
        assert result.success
        messages = engine_messages(instance, result.run_id)
        (summary,) = [
            {k: v.value for k, v in r.dagster_event.engine_event_data.metadata.items()}
            for r in instance.all_logs(result.run_id, of_type=DagsterEventType.ENGINE_EVENT)
            if (r.dagster_event.message or "").startswith("Step 'vegetation_model' reserved")
        ]
        (materialized,) = [
            r.dagster_event.event_specific_data.materialization  # type: ignore[union-attr]
            for r in instance.all_logs(
                result.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
            )
        ]
    assert any("'vegetation_model' on kubernetes tenant 'team-a'" in m for m in messages)
    assert materialized.metadata["ranks"].value == 2
    (job,) = [
        j
        for j in gang_target.jobs("team-a")
        if j["metadata"]["annotations"].get("k8s-ai/step-key") == "vegetation_model"
    ]
    assert (job["spec"]["completionMode"], job["spec"]["completions"]) == ("Indexed", 2)
    # the ranks that ran before the whole gang did are held, counted, and its waste
    waited = summary["k8s_ai/waste_gang_waiting_cpu_seconds"]
    assert 0 <= waited < summary["k8s_ai/cpu_seconds"]


@pytest.mark.slow
def test_an_evicted_worker_pod_relaunches_the_whole_gang_from_its_checkpoint(
    gang_target: GangTarget, dagster_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = ReconstructableRepository.for_module(
        "k8s_gang_pipelines", "defs", working_directory=str(HERE)
    )
    marker = tmp_path / "evict-me"
    monkeypatch.setenv("EVICT_MARKER", str(marker))
    monkeypatch.setenv("CHECKPOINT_ROOT", (tmp_path / "ckpt").as_uri())
    stop = threading.Event()

    def evict_the_worker() -> None:
        while not stop.is_set() and not marker.exists():
            stop.wait(0.05)
        while not stop.is_set():
            workers = [
                p
                for p in gang_target.pods("team-a")
                if p["metadata"]["labels"].get("k8s-ai/step") == "train"
                and p["metadata"]["labels"].get("k8s-ai/attempt") == "0"
                and p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index")
                == "1"
                and p["status"].get("phase") == "Running"
            ]
            if workers:
                gang_target.evict("team-a", workers[0]["metadata"]["name"])
                return
            stop.wait(0.05)

    evictor = threading.Thread(target=evict_the_worker, daemon=True)
    evictor.start()
    try:
        with (
            DagsterInstance.get() as instance,
            execute_job(
                repo.get_reconstructable_job("gang_job"),
                instance=instance,
                run_config={"execution": {"config": gang_executor_config(gang_target)}},
            ) as result,
        ):
            assert result.success
            messages = engine_messages(instance, result.run_id)
            output = result.output_for_node("train")
    finally:
        stop.set()
        evictor.join(timeout=5)
    relaunch = [m for m in messages if "'train' was Evicted; relaunching at the same size" in m]
    assert relaunch and "gang pod 1 of 2" in relaunch[0]
    assert output == {"resumed_from": 5, "world_size": 2}
    attempts = sorted(
        j["metadata"]["labels"]["k8s-ai/attempt"]
        for j in gang_target.jobs("team-a")
        if j["metadata"]["annotations"].get("k8s-ai/step-key") == "train"
    )
    assert attempts == ["0", "1"]
    gang_target.wait_for(  # the worker pod exits once the leader has
        lambda: (
            not [p for p in gang_target.pods("team-a") if p["status"].get("phase") == "Running"]
        ),
        timeout=120,
    )


@pytest.mark.slow
def test_steps_the_scheduler_preempts_for_a_gang_are_relaunched_naming_the_gang(
    gang_target: GangTarget, dagster_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run H's preemptible 4-GPU `hold` and run E's checkpointed 4-GPU `embed` fill both GPU
    nodes; run T's standard 2 × 4-GPU gang arrives (guard admission counts them as room) and
    the scheduler preempts both. `embed` stops itself on SIGTERM (the step asks for its
    relaunch first), `hold` is only interrupted (the backend sees its pod go first); either
    relaunch event names T's step and run, also on a vCluster-style tenant whose events carry
    the host pod's UID."""
    repo = ReconstructableRepository.for_module(
        "k8s_preemption_pipelines", "defs", working_directory=str(HERE)
    )
    markers = {name: tmp_path / f"{name}-running" for name in ("hold", "embed")}
    monkeypatch.setenv("HOLD_MARKER", str(markers["hold"]))
    monkeypatch.setenv("EMBED_MARKER", str(markers["embed"]))
    monkeypatch.setenv("CHECKPOINT_ROOT", (tmp_path / "ckpt").as_uri())
    config = {"backend": "kubernetes", "default_tenant": "team-a", "grace_period_s": 10.0}
    run_config = {"execution": {"config": {**config, "kubernetes": gang_target.config()}}}
    outcome: dict[str, tuple[bool, str]] = {}

    def run(name: str) -> None:
        with (
            DagsterInstance.get() as instance,
            execute_job(
                repo.get_reconstructable_job(f"{name}_job"),
                instance=instance,
                run_config=run_config,
            ) as result,
        ):
            outcome[name] = (result.success, result.run_id)

    runners = [threading.Thread(target=run, args=(n,), daemon=True) for n in ("hold", "embed")]
    for runner, marker in zip(runners, markers.values(), strict=True):
        runner.start()
        gang_target.wait_for(marker.exists, timeout=180)
    with DagsterInstance.get() as instance:
        train = execute_job(
            repo.get_reconstructable_job("train_job"), instance=instance, run_config=run_config
        )
        assert train.success
        for runner in runners:
            runner.join(timeout=240)
        for name in ("hold", "embed"):
            success, run_id = outcome[name]
            assert success, name
            messages = engine_messages(instance, run_id)
            relaunch = [m for m in messages if f"'{name}' was Preempted; relaunching" in m]
            assert relaunch, messages
            print(relaunch[0])
            assert (
                f"preempted by step 'train' of run '{train.run_id}' (pod k8s-ai-" in (relaunch[0])
            )
