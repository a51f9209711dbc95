"""A run worker SIGKILLed mid-run is a non-event on Slurm: the resumed run worker (`dagster api
resume_run`, as run monitoring starts it) finds the step's sbatch job by its name and comment
(run, step, attempt), and watches it instead of submitting it again; each Slurm version over each
transport (conftest.py's `versioned_cluster` and `executor_slurm`)."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterRunStatus

from k8s_ai_orchestrator.launch.backends import cancel_run
from k8s_ai_orchestrator.launch.settings import ExecutorSettings
from k8s_ai_orchestrator.testing.kube.emulator import wait_until
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_pairs, pytest.mark.timeout(300)]


@pytest.fixture
def cluster(versioned_cluster: LocalSlurmCluster) -> LocalSlurmCluster:
    """Every run here goes to each Slurm version (conftest.py's `versioned_cluster`)."""
    return versioned_cluster


def run_config(slurm: dict[str, Any], op: str, folder: Path) -> dict:
    executor = {"backend": "slurm", "slurm": slurm}
    return {"execution": {"config": executor}, "ops": {op: {"config": {"dir": str(folder)}}}}


def wait_for_state(cluster: LocalSlurmCluster, run_id: str, *states: str) -> str:
    """Wait until the run's one Slurm job is in one of `states` (squeue's %T); its line."""

    def reached() -> str | None:
        (job,) = jobs_of(cluster, run_id)
        return job if job.rsplit("|", 1)[-1] in states else None

    return str(wait_until(reached, 60, 0.5))


def jobs_of(cluster: LocalSlurmCluster, run_id: str) -> list[str]:
    done = cluster.run(["squeue", "--noheader", "--states=all", "--format=%i|%j|%T"])
    return [line for line in done.stdout.splitlines() if f"k8sai.{run_id[:8]}." in line]


def test_a_resumed_run_worker_finds_the_step_s_slurm_job_and_runs_it_once(
    cluster: LocalSlurmCluster, executor_slurm: dict[str, Any], run_worker: Any, tmp_path: Path
) -> None:
    worker = run_worker("tally_job", run_config(executor_slurm, "tally", tmp_path))
    worker.started(tmp_path)
    worker.kill()
    worker.resume()
    reattached = worker.reattached()
    worker.release(tmp_path)
    assert [m for m in worker.messages() if m.startswith("Reattached")] == [reattached]
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    assert reattached.startswith("Reattached to step 'tally' (attempt 1, slurm job ")
    # the step's last event comes before its batch script exits
    wait_for_state(cluster, worker.run.run_id, "COMPLETED")


def test_every_slurm_job_of_a_run_whose_run_worker_is_gone_is_cancelled_by_the_run_alone(
    cluster: LocalSlurmCluster, executor_slurm: dict[str, Any], run_worker: Any, tmp_path: Path
) -> None:
    """What terminating such a run does (`ProcessRunLauncher.terminate`): `CancelsRuns`."""
    config = run_config(executor_slurm, "tally", tmp_path)
    worker = run_worker("tally_job", config)
    worker.started(tmp_path)
    worker.kill()
    (job,) = jobs_of(cluster, worker.run.run_id)
    settings = ExecutorSettings.from_config(config["execution"]["config"])
    assert cancel_run(settings, worker.run.run_id) == {"local": [], "slurm": [job.split("|")[0]]}
    wait_for_state(cluster, worker.run.run_id, "CANCELLED")


def test_a_resumed_run_worker_reattaches_to_a_running_gang_allocation_and_runs_each_rank_once(
    cluster: LocalSlurmCluster, executor_slurm: dict[str, Any], run_worker: Any, tmp_path: Path
) -> None:
    """Mid-gang: both ranks of the 2-node allocation run (one srun) when the run worker dies;
    the resumed one finds the allocation and no rank starts again."""
    worker = run_worker("gang_tally_job", run_config(executor_slurm, "gang_tally", tmp_path))
    reattached = worker.taken_over_mid_gang(tmp_path)
    assert reattached.startswith("Reattached to step 'gang_tally' (attempt 1, slurm job ")
    (job,) = jobs_of(cluster, worker.run.run_id)
    assert job.split("|")[0] in reattached


def test_a_step_pending_when_the_run_worker_died_runs_once_when_slurm_has_room(
    cluster: LocalSlurmCluster, executor_slurm: dict[str, Any], run_worker: Any, tmp_path: Path
) -> None:
    """Killed while the step's sbatch job waits for nodes (an exclusive job holds all three):
    the resumed run worker finds the pending job, and once the nodes are free it runs once."""
    blocker = cluster.run(
        ["sbatch", "--parsable", "--nodes=3", "--exclusive", "--output=/dev/null"]
        + ["--wrap=sleep 600"]
    ).stdout.strip()
    try:
        worker = run_worker("tally_job", run_config(executor_slurm, "tally", tmp_path))
        pending = "Step 'tally' is Pending"
        wait_until(lambda: any(m.startswith(pending) for m in worker.messages()), 120, 0.2)
        worker.kill()
        worker.resume()
        reattached = worker.reattached()
    finally:
        cluster.run(["scancel", blocker])
    worker.release(tmp_path)
    assert reattached.startswith("Reattached to step 'tally' (attempt 1, slurm job ")
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    assert len(jobs_of(cluster, worker.run.run_id)) == 1


def test_a_step_oom_killed_while_no_run_worker_watched_is_relaunched_with_more_memory(
    cluster: LocalSlurmCluster, executor_slurm: dict[str, Any], run_worker: Any, tmp_path: Path
) -> None:
    """Escalated: slurmstepd kills the step over its 1Gi while no run worker watches; the
    resumed run worker reads how the job ended and relaunches it with 2Gi, once."""
    worker = run_worker(
        "hungry_later_1gi_job", run_config(executor_slurm, "hungry_later_1gi", tmp_path)
    )
    worker.started(tmp_path)
    worker.kill()
    (tmp_path / "release").touch()  # attempt 0 now holds 1.25 GiB, unwatched
    wait_for_state(cluster, worker.run.run_id, "FAILED", "OUT_OF_MEMORY")
    worker.resume()
    assert worker.process.wait(180) == 0, worker.messages()
    assert worker.status() == DagsterRunStatus.SUCCESS

    executions = (tmp_path / "executions").read_text().splitlines()
    assert executions == ["hungry_later_1gi attempt 0", "hungry_later_1gi attempt 1"]
    messages = worker.messages()
    assert any(m.startswith("Reattached to step 'hungry_later_1gi' (attempt 1") for m in messages)
    relaunch = [m for m in messages if m.startswith("Relaunching:")]
    assert relaunch and "OOMKilled with 1Gi; relaunching with 1Gi → 2Gi" in relaunch[0], messages
    assert len(jobs_of(cluster, worker.run.run_id)) == 2


def test_a_step_preempted_while_no_run_worker_watched_resumes_from_its_checkpoint(
    cluster: LocalSlurmCluster, executor_slurm: dict[str, Any], run_worker: Any, tmp_path: Path
) -> None:
    """Preempted: the step's job gets its grace signal (USR2) while no run worker watches; the
    step saves, asks for a retry and its job ends. The resumed run worker acts on that retry
    as a live one would: the next attempt resumes from the checkpoint, without spending the
    RetryPolicy."""
    config = run_config(executor_slurm, "resumable", tmp_path)
    config["resources"] = {"checkpoints": {"config": {"root": (tmp_path / "ck").as_uri()}}}
    worker = run_worker("resumable_job", config)
    worker.started(tmp_path)
    worker.kill()
    (job,) = jobs_of(cluster, worker.run.run_id)
    cluster.run(["scancel", "--batch", "--signal=USR2", job.split("|")[0]])
    wait_for_state(cluster, worker.run.run_id, "COMPLETED")  # saved and stopped, unwatched

    worker.resumes_from_checkpoint(tmp_path)
    assert len(jobs_of(cluster, worker.run.run_id)) == 2


@pytest.mark.parametrize("transport", ["cli"])  # it holds back the sbatch command
def test_a_run_worker_lost_while_sbatch_ran_is_resumed_onto_the_job_it_submitted(
    cluster: LocalSlurmCluster,
    executor_slurm: dict[str, Any],
    run_worker: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed during the launch: `sbatch` (held back 4 s on its way) submits the job after
    the run worker that ran it died, so no launch event records it. The resumed run worker
    finds the job by its name and comment (run, step, attempt) and submits nothing twice."""
    held = tmp_path / "sbatch-held"
    wrapper = tmp_path / "bin" / "sbatch"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        f"if [ ! -e {shlex.quote(str(held))} ]; then touch {shlex.quote(str(held))}; sleep 4; fi\n"
        f'exec {shlex.quote(str(shutil.which("sbatch")))} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ['PATH']}")
    worker = run_worker("tally_job", run_config(executor_slurm, "tally", tmp_path))
    wait_until(held.exists, 120, 0.05)
    worker.kill()
    wait_until(lambda: jobs_of(cluster, worker.run.run_id), 30, 0.2)
    assert not any(m.startswith("Launching step 'tally'") for m in worker.messages())

    worker.resume()
    reattached = worker.reattached()
    worker.release(tmp_path)
    assert reattached.startswith("Reattached to step 'tally' (attempt 1, slurm job ")
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    assert len(jobs_of(cluster, worker.run.run_id)) == 1
    wait_for_state(cluster, worker.run.run_id, "COMPLETED")
