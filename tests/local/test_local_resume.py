"""A run worker SIGKILLed mid-run is a non-event on the embedded local backend: the steps'
processes (each in its own session) outlive it, and the resumed run worker (`dagster api
resume_run`, as run monitoring starts it) takes each one over through the machine-wide ledger
(run, step, attempt; PID and start time checked): its memory limit is enforced again, it is
never started a second time, and terminating the resumed run stops it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from k8s_ai_orchestrator.backends.local.ledger import AdmissionLedger
from k8s_ai_orchestrator.proctree import process_alive
from k8s_ai_orchestrator.testing.kube.emulator import wait_until

pytestmark = [pytest.mark.timeout(300)]

LOCAL = {"backend": "local", "local": {"cpus": 2, "memory": "4Gi"}}


def run_config(op: str, folder: Path) -> dict[str, Any]:
    return {"execution": {"config": LOCAL}, "ops": {op: {"config": {"dir": str(folder)}}}}


def step_pids(run_id: str) -> list[tuple[int, float]]:
    """The live step processes (PID, start time) of `run_id` the ledger holds (dead entries
    are dropped)."""
    claims = AdmissionLedger().snapshot().claims
    return [(c.pid, c.pid_started) for c in claims if c.run_id == run_id and c.pid]


def test_a_resumed_run_worker_takes_over_the_running_step_process(
    run_worker: Any, tmp_path: Path
) -> None:
    worker = run_worker("tally_job", run_config("tally", tmp_path))
    worker.started(tmp_path)
    (step,) = step_pids(worker.run.run_id)
    worker.kill()
    assert process_alive(*step)  # the step runs on, unwatched

    worker.resume()
    reattached = worker.reattached()
    worker.release(tmp_path)
    assert [m for m in worker.messages() if m.startswith("Reattached")] == [reattached]
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    assert reattached.startswith("Reattached to step 'tally' (attempt 1, local job ")
    assert step_pids(worker.run.run_id) == []


def test_a_run_worker_killed_while_launching_the_step_process_is_resumed_onto_it(
    run_worker: Any, tmp_path: Path
) -> None:
    """Killed during the launch: the step process exists (the ledger names its PID) but the
    step has not begun (its Python is still importing; nothing counted yet). That process goes
    on alone and starts the step; the resumed run worker finds it in the ledger and takes it
    over instead of launching attempt 2: the step runs once, in the attempt already made."""
    worker = run_worker("tally_job", run_config("tally", tmp_path))
    wait_until(lambda: step_pids(worker.run.run_id), 120, 0.02)
    begun = (tmp_path / "executions").exists()
    worker.kill()
    assert not begun, "the step began before the run worker was killed: not during launch"

    worker.resume()
    worker.started(tmp_path)
    reattached = worker.reattached()
    worker.release(tmp_path)
    assert reattached.startswith("Reattached to step 'tally' (attempt 1, local job ")
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    assert not any(m.startswith("Relaunching") for m in worker.messages())
    assert step_pids(worker.run.run_id) == []


def test_a_taken_over_step_is_held_to_its_memory_limit_and_relaunched_with_more(
    run_worker: Any, tmp_path: Path
) -> None:
    worker = run_worker("hungry_later_job", run_config("hungry_later", tmp_path))
    worker.started(tmp_path)
    worker.kill()
    worker.resume()
    worker.reattached()
    worker.release(tmp_path)  # attempt 0 now outgrows its 256Mi
    executions = (tmp_path / "executions").read_text().splitlines()
    assert executions == ["hungry_later attempt 0", "hungry_later attempt 1"]
    messages = worker.messages()
    relaunch = [m for m in messages if m.startswith("Relaunching:")]
    assert relaunch and "OOMKilled" in relaunch[0] and "512Mi" in relaunch[0], messages


def test_a_resumed_run_worker_s_summary_counts_the_attempts_the_lost_one_watched(
    run_worker: Any, tmp_path: Path
) -> None:
    """Attempt 1 runs (the lost run worker relaunched the OOM-killed attempt 0) when the run
    worker dies: the step's summary still sums both attempts (their launch events carry it)."""
    worker = run_worker("hungry_first_job", run_config("hungry_first", tmp_path))
    worker.started(tmp_path)
    time.sleep(2)  # attempt 1 runs 2 s unwatched: its usage counts from its start
    worker.kill()
    worker.resume()
    worker.reattached()
    worker.release(tmp_path)
    assert (tmp_path / "executions").read_text().splitlines() == ["hungry_first attempt 1"]
    cpu_seconds, attempts = worker.summary("hungry_first")
    assert attempts == 2
    assert cpu_seconds >= 0.5 * 2  # 0.5 CPU × at least the 2 s


def test_a_step_preempted_while_no_run_worker_watched_resumes_from_its_checkpoint(
    run_worker: Any, tmp_path: Path
) -> None:
    """Preempted: SIGTERM from outside reaches the step process while no run worker watches;
    it saves, asks for a retry and exits. The resumed run worker acts on that retry as a live
    one would: the next attempt resumes from the checkpoint."""
    config = run_config("resumable", tmp_path)
    config["resources"] = {"checkpoints": {"config": {"root": (tmp_path / "ck").as_uri()}}}
    worker = run_worker("resumable_job", config)
    worker.started(tmp_path)
    (step,) = step_pids(worker.run.run_id)
    worker.kill()
    os.kill(step[0], signal.SIGTERM)
    wait_until(lambda: not process_alive(*step), 60, 0.1)  # saved and stopped, unwatched

    worker.resumes_from_checkpoint(tmp_path)
    assert step_pids(worker.run.run_id) == []


def test_terminating_a_resumed_run_stops_the_step_process_the_first_run_worker_started(
    run_worker: Any, tmp_path: Path
) -> None:
    worker = run_worker("tally_job", run_config("tally", tmp_path))
    worker.started(tmp_path)
    (step,) = step_pids(worker.run.run_id)
    worker.kill()
    worker.resume()
    worker.reattached()
    worker.terminate()
    assert any(m.startswith("Cancelled step 'tally' (local job") for m in worker.messages())
    wait_until(lambda: not process_alive(*step), 30, 0.1)
    assert step_pids(worker.run.run_id) == []


def test_a_step_waiting_for_local_capacity_when_the_run_worker_died_runs_once(
    run_worker: Any, tmp_path: Path
) -> None:
    """Killed while its step waits in the machine-wide queue (another run's step holds the
    capacity): that attempt never started and went with its run worker, so the resumed run
    worker reports it Lost and launches the next one, which runs once."""
    tight = {"backend": "local", "local": {"cpus": 0.75, "memory": "4Gi"}}
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    holder = run_worker(
        "tally_job",
        {"execution": {"config": tight}, "ops": {"tally": {"config": {"dir": str(first)}}}},
    )
    holder.started(first)
    worker = run_worker(
        "tally_job",
        {"execution": {"config": tight}, "ops": {"tally": {"config": {"dir": str(second)}}}},
    )
    pending = "Step 'tally' is Pending"
    wait_until(lambda: any(m.startswith(pending) for m in worker.messages()), 120, 0.2)
    worker.kill()
    worker.resume()
    wait_until(lambda: "Resuming execution from failure" in worker.messages(), 60, 0.2)
    holder.release(first)
    worker.started(second)
    worker.release(second)
    # attempt 1 never started: it was in line, in the dead run worker's queue
    assert (second / "executions").read_text().splitlines() == ["tally attempt 1"]
    assert any(m.startswith("Relaunching: step 'tally' was Lost") for m in worker.messages())
    assert step_pids(worker.run.run_id) == []


def test_a_resumed_run_worker_takes_over_a_running_local_gang_and_runs_each_rank_once(
    run_worker: Any, tmp_path: Path
) -> None:
    """Mid-gang: both ranks of the 2-node gang run (local processes under the step's one
    process) when the run worker dies; the resumed one takes the step over and no rank starts
    again."""
    worker = run_worker("gang_tally_job", run_config("gang_tally", tmp_path))
    reattached = worker.taken_over_mid_gang(tmp_path)
    assert reattached.startswith("Reattached to step 'gang_tally' (attempt 1, local job ")
    assert step_pids(worker.run.run_id) == []
