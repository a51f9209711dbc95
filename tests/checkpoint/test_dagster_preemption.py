"""A real Dagster step that gets SIGTERM mid-way saves, stops, and the next run resumes there.

The step (programs/mosaic.py) walks 60 units of 50 ms and saves every 0.5 s (about 10 units)
or at once on SIGTERM. Each test stops it after some units, runs it again, and counts how many
units ran twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from dagster import DagsterEvent, DagsterInstance
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.execution.api import create_execution_plan
from dagster._grpc.types import ExecuteStepArgs
from dagster._serdes import serialize_value

from .support import PROGRAMS, program

pytestmark = pytest.mark.timeout(120)
UNITS_PER_INTERVAL = 10


def env_for(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MOSAIC_ROOT": f"file://{tmp_path}/ckpt",
        "MOSAIC_PROGRESS_LOG": str(tmp_path / "progress.log"),
    }


def units_done(tmp_path: Path) -> list[int]:
    log = tmp_path / "progress.log"
    return [int(line.split()[1]) for line in log.read_text().splitlines()] if log.exists() else []


def sigterm_after(process: subprocess.Popen[str], tmp_path: Path, units: int) -> None:
    deadline = time.monotonic() + 60
    while len(units_done(tmp_path)) < units:
        assert process.poll() is None, "the step ended before it was preempted"
        assert time.monotonic() < deadline, "the step made no progress"
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)


def assert_every_unit_done_with_little_redone(tmp_path: Path) -> None:
    done = units_done(tmp_path)
    assert sorted(set(done)) == list(range(60))
    redone = sum(n - 1 for n in Counter(done).values())
    assert redone <= UNITS_PER_INTERVAL


@pytest.mark.slow
def test_a_sigtermed_materialization_saves_and_the_rerun_resumes(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    first = subprocess.Popen(
        program("mosaic.py"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    sigterm_after(first, tmp_path, 25)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 1, err
    assert "Preempted" in json.loads(out.splitlines()[-1])["error"]
    stopped_at = len(units_done(tmp_path))

    second = subprocess.run(program("mosaic.py"), env=env, capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert second.returncode == 0, second.stderr
    metadata = json.loads(second.stdout.splitlines()[-1])["metadata"]
    assert metadata["total"] == sum(range(60))
    assert metadata["resumed_progress"] >= stopped_at - UNITS_PER_INTERVAL
    assert metadata["resumed_from_checkpoint"]
    assert_every_unit_done_with_little_redone(tmp_path)


def new_step_command(instance: DagsterInstance) -> tuple[str, list[str]]:
    """Create a run in the SQLite instance; return its id and its `execute_step` command."""
    repo = ReconstructableRepository.for_file(str(PROGRAMS / "mosaic.py"), "defs")
    job = repo.get_reconstructable_job("mosaic_job")
    tags = {"dagster/partition": "eu"}
    run = instance.create_run_for_job(
        job_def=job.get_definition(),
        execution_plan=create_execution_plan(job, run_config={}, tags=tags),
        job_code_origin=job.get_python_origin(),
        tags=tags,
        run_config={},
    )
    args = ExecuteStepArgs(job.get_python_origin(), run.run_id, ["mosaic"], instance.get_ref())
    return run.run_id, [
        sys.executable,
        "-m",
        "dagster",
        "api",
        "execute_step",
        serialize_value(args),
    ]


def events_of(instance: DagsterInstance, run_id: str, event_type: str) -> list[DagsterEvent]:
    records = instance.all_logs(run_id)
    return [
        r.dagster_event
        for r in records
        if r.dagster_event is not None and r.dagster_event.event_type_value == event_type
    ]


@pytest.mark.slow
def test_a_sigtermed_dagster_execute_step_process_saves_and_a_new_run_resumes(
    tmp_path: Path, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = env_for(tmp_path)
    monkeypatch.setenv("MOSAIC_ROOT", env["MOSAIC_ROOT"])
    first_run, first_cmd = new_step_command(instance)
    first = subprocess.Popen(first_cmd, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    sigterm_after(first, tmp_path, 15)
    first.wait(timeout=60)
    (failure,) = events_of(instance, first_run, "STEP_FAILURE")
    error = failure.step_failure_data.error
    assert error is not None and "received SIGTERM" in error.to_string()
    assert "Preempted" in error.to_string()
    failure_metadata = failure.step_failure_data.user_failure_data.metadata
    assert failure_metadata["preempted_by"].value == "SIGTERM"

    second_run, second_cmd = new_step_command(instance)
    subprocess.run(second_cmd, env=env, capture_output=True, timeout=60, check=True)
    (materialized,) = events_of(instance, second_run, "ASSET_MATERIALIZATION")
    metadata = materialized.materialization.metadata
    assert metadata["resumed_progress"].value == failure_metadata["checkpoint_progress"].value
    assert metadata["total"].value == sum(range(60))
    assert_every_unit_done_with_little_redone(tmp_path)
