"""No stale result, on any backend: the runs a user makes after new data arrives, after a
failure and after a preemption, driven through `ai_executor` on a real Dagster instance.

Each backend's suite calls these with its executor config (tests/local, tests/kubernetes,
tests/slurm); the assets are tests/checkpoint/rerun_jobs.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, ReexecutionOptions, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository

from tests.checkpoint.rerun_jobs import UNITS

ROOT = Path(__file__).parents[2]
JOB = ReconstructableRepository.for_module(
    "tests.checkpoint.rerun_jobs", "defs", working_directory=str(ROOT)
).get_reconstructable_job("batch_and_total")


def use_checkpoints(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Point the assets' CheckpointStore at a folder every step process can reach."""
    monkeypatch.setenv("RERUN_CHECKPOINTS", (tmp_path / "ckpt").as_uri())


def materialize(
    instance: DagsterInstance,
    executor: dict[str, Any],
    value: int,
    stop: dict[str, Any] | None = None,
    reexecute: str | None = None,
) -> tuple[str, dict[str, Any] | None]:
    """Run batch -> total; the run's id and total's metadata (None when the run failed)."""
    config = {
        "execution": {"config": executor},
        "ops": {"batch": {"config": {"value": value}}, "total": {"config": stop or {}}},
    }
    options = None if reexecute is None else ReexecutionOptions.from_failure(reexecute, instance)
    with execute_job(
        JOB, instance=instance, run_config=config, raise_on_error=False, reexecution_options=options
    ) as result:
        if not result.success:
            return result.run_id, None
        (materialization,) = [m for m in result.asset_materializations_for_node("total")]
        return result.run_id, {k: v.value for k, v in materialization.metadata.items()}


def new_data_recomputes_and_a_failed_run_resumes_on_reexecution(
    instance: DagsterInstance, executor: dict[str, Any], tmp_path: Path
) -> None:
    """New data after a finished run or after a failed one starts from 0; the re-execution of
    a failed run (same inputs) resumes where it stopped.

    The totals prove which checkpoint each run started from: a run that wrongly resumed
    another run's units would add values of the other batch.
    """
    _, first = materialize(instance, executor, value=1)
    _, second = materialize(instance, executor, value=5)
    assert first == {"total": UNITS, "resumed_from": 0}
    assert second == {"total": 5 * UNITS, "resumed_from": 0}  # not 10: nothing stale

    stop = {"stop_at": 7, "how": "fail", "marker": str(tmp_path / "failed-on-2s")}
    _, nothing = materialize(instance, executor, value=2, stop=stop)  # 7 units of 2 saved
    assert nothing is None
    stop = {"stop_at": 4, "how": "fail", "marker": str(tmp_path / "failed-on-3s")}
    failed, nothing = materialize(instance, executor, value=3, stop=stop)  # new data: fresh
    assert nothing is None
    _, again = materialize(instance, executor, value=3, stop=stop, reexecute=failed)
    assert again == {"total": 3 * UNITS, "resumed_from": 4}  # 14 + 3 * 3 had it resumed 2s


def a_preempted_attempt_resumes(
    instance: DagsterInstance, executor: dict[str, Any], tmp_path: Path
) -> None:
    """`total` preempted after unit 4 is relaunched in the same run and resumes at unit 5."""
    stop = {"stop_at": 4, "how": "preempt", "marker": str(tmp_path / "preempted")}
    _, done = materialize(instance, executor, value=1, stop=stop)
    assert done == {"total": UNITS, "resumed_from": 5}
