"""Dagster's own controls keep working under `ai_executor`'s loop: `max_concurrent`,
`tag_concurrency_limits`, concurrency pools (`@op(pool=...)` with the instance's limit) and
an op's `RetryPolicy`; termination is in test_local_executor. Real instance, real step
processes on the local backend."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterEventType, DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository

from .test_local_executor import overlaps, recorded, spans

JOBS = ReconstructableRepository.for_module(
    "tests.local.control_jobs", "defs", working_directory=str(Path(__file__).parents[2])
)
ROOMY = {"local": {"cpus": 8, "memory": "8Gi"}}


def run(instance: DagsterInstance, job: str, executor: dict[str, Any]) -> Any:
    return execute_job(
        JOBS.get_reconstructable_job(job),
        instance=instance,
        run_config={"execution": {"config": {**ROOMY, **executor}}},
        raise_on_error=False,
    )


def pairs_overlapping(found: dict[str, tuple[float, float]], names: list[str]) -> int:
    return sum(overlaps(found[a], found[b]) for a, b in itertools.combinations(names, 2))


@pytest.mark.slow
def test_max_concurrent_one_runs_the_fan_out_one_step_at_a_time(instance, test_out):
    result = run(instance, "fan_out", {"max_concurrent": 1})

    assert result.success
    found = spans(test_out)
    assert sorted(found) == [f"fan_{i}" for i in range(4)]
    assert pairs_overlapping(found, sorted(found)) == 0


@pytest.mark.slow
def test_tag_concurrency_limits_hold_tagged_steps_apart_and_leave_the_others_free(
    instance, test_out
):
    limits = [{"key": "database", "value": "warehouse", "limit": 1}]
    result = run(instance, "tagged", {"tag_concurrency_limits": limits})

    assert result.success
    found = spans(test_out)
    assert not overlaps(found["db_0"], found["db_1"])
    assert overlaps(found["free_0"], found["free_1"])


@pytest.mark.slow
def test_a_concurrency_pool_of_one_slot_runs_its_steps_one_at_a_time(instance, test_out):
    instance.event_log_storage.set_concurrency_slots("k8s-ai-test-pool", 1)

    result = run(instance, "pools", {})

    assert result.success
    found = spans(test_out)
    assert sorted(found) == ["pooled_0", "pooled_1"]
    assert not overlaps(found["pooled_0"], found["pooled_1"])


@pytest.mark.slow
def test_an_ops_retry_policy_retries_a_user_failure_as_dagster_does(instance, test_out):
    result = run(instance, "retried", {})

    assert result.success
    assert [e["attempt"] for e in recorded(test_out) if e["name"] == "flaky"] == [1, 2, 3]
    retries = instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)
    assert len(retries) == 2
    errors = [r.dagster_event.step_retry_data.error for r in retries]
    assert all(e is not None and "failing attempt" in e.to_string() for e in errors)
