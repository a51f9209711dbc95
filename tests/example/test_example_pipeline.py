"""The example pipeline: materialized through ai_executor on the local backend, plus its
schedule and sensor evaluated the way the daemon evaluates them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dagster import (
    DagsterEventType,
    DagsterInstance,
    build_schedule_context,
    build_sensor_context,
    execute_job,
)
from dagster._core.definitions.reconstruct import ReconstructableRepository

ROOT = Path(__file__).parents[2]


@pytest.fixture
def example_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dagster_home: Path) -> Path:
    monkeypatch.setenv("VEGETATION_INBOX", str(tmp_path / "inbox"))
    monkeypatch.setenv("VEGETATION_CHECKPOINTS", (tmp_path / "ckpt").as_uri())
    monkeypatch.setenv("VEGETATION_UNIT_SECONDS", "0")
    monkeypatch.setenv("VEGETATION_REPORTS", str(tmp_path / "reports"))
    monkeypatch.chdir(ROOT)
    return tmp_path


@pytest.mark.slow
def test_example_materializes_every_asset_through_ai_executor(example_env: Path):
    repo = ReconstructableRepository.for_module(
        "example_project.definitions", "defs", working_directory=str(ROOT)
    )
    with DagsterInstance.get() as instance:
        result = execute_job(repo.get_reconstructable_job("vegetation_risk"), instance=instance)
        assert result.success
        materialized = {
            r.asset_materialization.asset_key.to_user_string()
            for r in instance.all_logs(
                result.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
            )
            if r.asset_materialization
        }
        checks = [
            (e.check_name, e.passed)
            for r in instance.all_logs(
                result.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
            )
            if r.dagster_event and (e := r.dagster_event.event_specific_data)
        ]
        launches = [
            r.dagster_event.message
            for r in instance.all_logs(result.run_id, of_type=DagsterEventType.ENGINE_EVENT)
            if r.dagster_event and (r.dagster_event.message or "").startswith("Launching step")
        ]
        # what each step reserved, on each asset it materialized (one observation each)
        costs = [
            (r.asset_observation.asset_key.to_user_string(), r.asset_observation.metadata)
            for r in instance.all_logs(result.run_id, of_type=DagsterEventType.ASSET_OBSERVATION)
            if r.asset_observation and "k8s_ai/step" in r.asset_observation.metadata
        ]
    assert {
        "tiles_north",
        "mosaic",
        "vegetation_index",
        "risk_scores",
        "risk_report",
    } <= materialized
    assert sorted(asset for asset, _ in costs) == sorted(materialized)
    mosaic = dict(costs)["mosaic"]
    assert mosaic["k8s_ai/step"].value == "mosaic" and mosaic["k8s_ai/wall_seconds"].value > 0
    assert mosaic["k8s_ai/cpu_seconds"].value == pytest.approx(
        72 * mosaic["k8s_ai/wall_seconds"].value, rel=0.05
    )
    assert checks == [("scores_are_shares", True)]  # reported by the program run through AICompute
    assert any("'mosaic' on local with xl: 72 CPU / 450Gi" in m for m in launches)
    assert any("'vegetation_index' on local tenant 'vision' with gpu-1" in m for m in launches)


def test_sensor_requests_a_run_when_new_scenes_land(example_env: Path):
    from example_project.definitions import defs, new_scenes
    from example_project.scenes import drop_scene

    with DagsterInstance.ephemeral() as instance:
        empty = new_scenes(build_sensor_context(instance=instance, definitions=defs))
        assert "no new scenes" in str(
            empty.skip_message if hasattr(empty, "skip_message") else empty
        )
        drop_scene("north", 7)
        context = build_sensor_context(instance=instance, definitions=defs)
        request = new_scenes(context)
        assert request.run_key == "north-000007.json"
        assert context.cursor == "north-000007.json"
        again = new_scenes(
            build_sensor_context(instance=instance, cursor=context.cursor, definitions=defs)
        )
        assert "no new scenes" in str(getattr(again, "skip_message", again))


def test_nightly_schedule_requests_a_vegetation_risk_run(example_env: Path):
    from example_project.definitions import nightly_vegetation_risk

    request = nightly_vegetation_risk(build_schedule_context())
    assert request.tags["trigger"] == "nightly"
    assert nightly_vegetation_risk.cron_schedule == "0 2 * * *"
    assert nightly_vegetation_risk.job_name == "vegetation_risk"
    assert os.environ["VEGETATION_INBOX"]


@pytest.mark.slow
def test_preempted_mosaic_resumes_from_its_checkpoint_without_redoing_work(
    example_env: Path, monkeypatch: pytest.MonkeyPatch
):
    import signal
    import threading
    import time

    marker = example_env / "preempt-me"
    monkeypatch.setenv("VEGETATION_PREEMPT_AT", "16")
    monkeypatch.setenv("VEGETATION_PREEMPT_MARKER", str(marker))

    def preempt_from_outside() -> None:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(int(marker.read_text()), signal.SIGTERM)

    killer = threading.Thread(target=preempt_from_outside, daemon=True)
    killer.start()
    repo = ReconstructableRepository.for_module(
        "example_project.definitions", "defs", working_directory=str(ROOT)
    )
    with DagsterInstance.get() as instance:
        result = execute_job(repo.get_reconstructable_job("vegetation_risk"), instance=instance)
        killer.join(timeout=5)
        assert result.success
        messages = [
            r.dagster_event.message or ""
            for r in instance.all_logs(result.run_id, of_type=DagsterEventType.ENGINE_EVENT)
            if r.dagster_event and r.dagster_event.step_key == "mosaic"
        ]
        mosaic = next(
            r.asset_materialization
            for r in instance.all_logs(
                result.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
            )
            if r.asset_materialization and r.asset_materialization.asset_key.path == ["mosaic"]
        )
    assert any("'mosaic' was Preempted; relaunching at the same size" in m for m in messages)
    meta = {k: v.value for k, v in mosaic.metadata.items()}
    # SIGTERM made due() true at unit 16, so the step saved 16 or 17 units before exiting
    assert meta["resumed_progress"] in (16, 17)
    assert meta["units_redone_avoided"] == meta["resumed_progress"]
