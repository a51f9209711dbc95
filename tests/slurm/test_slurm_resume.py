"""A run worker SIGKILLed mid-run is a non-event on Slurm: the resumed run worker (`dagster api
resume_run`, as run monitoring starts it) finds the step's sbatch job by its name and comment
(run, step, attempt) through either transport, and watches it instead of submitting it again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from k8s_ai_orchestrator.launch.backends import cancel_run
from k8s_ai_orchestrator.launch.settings import ExecutorSettings
from k8s_ai_orchestrator.testing.kube.emulator import wait_until
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


def slurm(cluster: LocalSlurmCluster, transport: str) -> dict[str, Any]:
    config = {"workdir": str(cluster.workdir), "slurm_conf": str(cluster.conf_path)}
    if transport == "rest":
        rest = {"rest_url": cluster.rest_url, "rest_user": "root", "rest_token_env": "SLURM_JWT"}
        config |= {"transport": "rest", **rest}
    return config


def jobs_of(cluster: LocalSlurmCluster, run_id: str) -> list[str]:
    done = cluster.run(["squeue", "--noheader", "--states=all", "--format=%i|%j|%T"])
    return [line for line in done.stdout.splitlines() if f"k8sai.{run_id[:8]}." in line]


@pytest.mark.parametrize("transport", ["cli", "rest"])
def test_a_resumed_run_worker_finds_the_step_s_slurm_job_and_runs_it_once(
    cluster: LocalSlurmCluster,
    run_worker: Any,
    tmp_path: Path,
    transport: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURM_JWT", cluster.jwt_token())
    run_config = {
        "execution": {"config": {"backend": "slurm", "slurm": slurm(cluster, transport)}},
        "ops": {"tally": {"config": {"dir": str(tmp_path)}}},
    }
    worker = run_worker("tally_job", run_config)
    started = tmp_path / "executions"
    wait_until(lambda: started.exists() or worker.process.poll() is not None, 120, 0.2)
    assert started.exists(), worker.messages()
    worker.kill()
    worker.resume()
    reattached = worker.reattached()
    worker.release(tmp_path)
    assert [m for m in worker.messages() if m.startswith("Reattached")] == [reattached]
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    assert reattached.startswith("Reattached to step 'tally' (attempt 1, slurm job ")

    def completed() -> bool:  # the step's last event comes before its batch script exits
        (job,) = jobs_of(cluster, worker.run.run_id)
        return job.endswith("|COMPLETED")

    wait_until(completed, 60, 0.5)


@pytest.mark.parametrize("transport", ["cli", "rest"])
def test_every_slurm_job_of_a_run_whose_run_worker_is_gone_is_cancelled_by_the_run_alone(
    cluster: LocalSlurmCluster,
    run_worker: Any,
    tmp_path: Path,
    transport: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What terminating such a run does (`ProcessRunLauncher.terminate`): `CancelsRuns`."""
    monkeypatch.setenv("SLURM_JWT", cluster.jwt_token())
    executor = {"backend": "slurm", "slurm": slurm(cluster, transport)}
    run_config = {
        "execution": {"config": executor},
        "ops": {"tally": {"config": {"dir": str(tmp_path)}}},
    }
    worker = run_worker("tally_job", run_config)
    wait_until(lambda: (tmp_path / "executions").exists(), 120, 0.2)
    worker.kill()
    (job,) = jobs_of(cluster, worker.run.run_id)
    cancelled = cancel_run(ExecutorSettings.from_config(executor), worker.run.run_id)
    assert cancelled == {"local": [], "slurm": [job.split("|")[0]]}

    def ended() -> bool:
        (now,) = jobs_of(cluster, worker.run.run_id)
        return now.endswith("|CANCELLED")

    wait_until(ended, 60, 0.5)


def test_a_resumed_run_worker_reattaches_to_a_running_gang_allocation_and_runs_each_rank_once(
    cluster: LocalSlurmCluster, run_worker: Any, tmp_path: Path
) -> None:
    """Mid-gang: both ranks of the 2-node allocation run (one srun) when the run worker dies;
    the resumed one finds the allocation and no rank starts again."""
    run_config = {
        "execution": {"config": {"backend": "slurm", "slurm": slurm(cluster, "cli")}},
        "ops": {"gang_tally": {"config": {"dir": str(tmp_path)}}},
    }
    worker = run_worker("gang_tally_job", run_config)
    reattached = worker.taken_over_mid_gang(tmp_path)
    assert reattached.startswith("Reattached to step 'gang_tally' (attempt 1, slurm job ")
    (job,) = jobs_of(cluster, worker.run.run_id)
    assert job.split("|")[0] in reattached


def test_a_step_pending_when_the_run_worker_died_runs_once_when_slurm_has_room(
    cluster: LocalSlurmCluster, run_worker: Any, tmp_path: Path
) -> None:
    """Killed while the step's sbatch job waits for nodes (an exclusive job holds all three):
    the resumed run worker finds the pending job, and once the nodes are free it runs once."""
    blocker = cluster.run(
        ["sbatch", "--parsable", "--nodes=3", "--exclusive", "--output=/dev/null"]
        + ["--wrap=sleep 600"]
    ).stdout.strip()
    try:
        run_config = {
            "execution": {"config": {"backend": "slurm", "slurm": slurm(cluster, "cli")}},
            "ops": {"tally": {"config": {"dir": str(tmp_path)}}},
        }
        worker = run_worker("tally_job", run_config)
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
