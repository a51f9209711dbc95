"""Right-sizing on the local backend with a real instance and real step processes:
memory grown in place before the OOM, and compute(memory="auto") sized from the last run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterEventType, DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository

from k8s_ai_orchestrator.quantities import parse_memory

JOBS = ReconstructableRepository.for_module(
    "tests.local.sizing_jobs", "defs", working_directory=str(Path(__file__).parents[2])
)
MiB = 1024**2
GROW = {"local": {"cpus": 2, "memory": "4Gi"}, "oom_escalation": {"grow_at": 0.85}}


def run(instance: DagsterInstance, job: str, executor: dict[str, Any]) -> Any:
    return execute_job(
        JOBS.get_reconstructable_job(job),
        instance=instance,
        run_config={"execution": {"config": executor}},
        raise_on_error=False,
    )


def recorded(out: Path, phase: str) -> list[dict[str, Any]]:
    lines = (out / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("phase", "start") == phase]


def engine_events(instance: DagsterInstance, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        event = record.dagster_event
        if event is not None:
            meta = {k: v.value for k, v in event.engine_event_data.metadata.items()}
            events.append((event.message or "", meta))
    return events


def launch(instance: DagsterInstance, run_id: str) -> tuple[str, dict[str, Any]]:
    return next(e for e in engine_events(instance, run_id) if e[0].startswith("Launching step"))


def summary(instance: DagsterInstance, run_id: str) -> dict[str, Any]:
    return [m for _, m in engine_events(instance, run_id) if "k8s_ai/cpu_seconds" in m][-1]


def test_a_step_growing_past_its_limit_grows_in_place_and_finishes_in_one_attempt(
    instance, test_out
):
    result = run(instance, "growing", GROW)
    assert result.success
    starts, ends = recorded(test_out, "start"), recorded(test_out, "end")
    assert [s["attempt"] for s in starts] == [0]
    assert starts[0]["pid"] == ends[0]["pid"]  # the same process ran it to the end
    messages = [m for m, _ in engine_events(instance, result.run_id)]
    assert any("Grew step 'grower' in place: memory 256Mi → 512Mi" in m for m in messages)
    assert not any(m.startswith("Relaunching") for m in messages)
    meta = summary(instance, result.run_id)
    assert meta["k8s_ai/attempts"] == 1
    assert meta["k8s_ai/requested_memory_bytes"] >= 512 * MiB
    assert meta["k8s_ai/peak_memory_bytes"] > 256 * MiB


@pytest.mark.slow
def test_without_room_to_grow_the_step_is_oom_killed_and_relaunched_with_more_memory(
    instance, test_out
):
    executor = {**GROW, "local": {"cpus": 2, "memory": "384Mi"}}
    result = run(instance, "growing", executor)
    assert result.success
    assert [s["attempt"] for s in recorded(test_out, "start")][:2] == [0, 1]
    messages = [m for m, _ in engine_events(instance, result.run_id)]
    refused = next(m for m in messages if m.startswith("Could not grow step 'grower'"))
    assert "from 256Mi to 512Mi" in refused
    assert "512Mi does not fit in the local memory of 384Mi" in refused
    assert any("Relaunching" in m and "256Mi → 512Mi" in m for m in messages)


@pytest.mark.slow
def test_growth_is_off_unless_grow_at_is_set(instance, test_out):
    result = run(instance, "growing", {"local": {"cpus": 2, "memory": "4Gi"}})
    assert result.success
    assert [s["attempt"] for s in recorded(test_out, "start")][:2] == [0, 1]
    messages = [m for m, _ in engine_events(instance, result.run_id)]
    assert not any("in place" in m for m in messages)


@pytest.mark.slow
def test_memory_auto_converges_within_1_3x_of_the_true_peak_after_one_run(instance, test_out):
    executor = {"local": {"cpus": 2, "memory": "4Gi"}}
    first = run(instance, "auto", executor)
    assert first.success
    message, meta = launch(instance, first.run_id)
    assert meta["k8s_ai/memory"] == "2Gi"
    assert "memory auto: no earlier run recorded 'auto_sized', the default 2Gi" in message

    second = run(instance, "auto", executor)
    assert second.success
    message, meta = launch(instance, second.run_id)
    assert f"of run {first.run_id[:8]}" in message
    assert meta["k8s_ai/auto_memory_runs"] == first.run_id
    assert meta["k8s_ai/auto_headroom"] == 1.2
    sized = parse_memory(meta["k8s_ai/memory"])
    peak = summary(instance, second.run_id)["k8s_ai/peak_memory_bytes"]
    assert summary(instance, second.run_id)["k8s_ai/attempts"] == 1
    assert peak <= sized <= 1.3 * peak
