"""Gang steps on a real 3-node Slurm, each version (conftest.py's `versioned_cluster`) over
each transport (`any_backend`): one sbatch allocation, one srun, one rank per node."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from slurm_support import launch_request, program, wait_for_status

from k8s_ai_orchestrator.backends.base import FailureReason, StepState
from k8s_ai_orchestrator.backends.slurm import SlurmBackend
from k8s_ai_orchestrator.errors import SubmitError
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]


@pytest.fixture
def cluster(versioned_cluster: LocalSlurmCluster) -> LocalSlurmCluster:
    return versioned_cluster


@pytest.fixture
def backend(any_backend: SlurmBackend) -> SlurmBackend:
    """Every test here runs over the CLI and over slurmrestd (conftest.py's `transport`)."""
    return any_backend


def test_two_node_gang_step_runs_one_rank_per_node_with_torch_style_env(
    backend: SlurmBackend, tmp_path: Path
) -> None:
    out = tmp_path / "ranks"
    out.mkdir()
    handle = backend.submit(launch_request(program("gang_step.py", "record_rank", str(out))))

    status = wait_for_status(backend, handle, lambda s: s.is_terminal)

    assert status.state is StepState.SUCCEEDED, backend.logs(handle)
    ranks = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["RANK"] for r in ranks] == ["0", "1"]
    assert [r["NODE_RANK"] for r in ranks] == ["0", "1"]
    assert {r["WORLD_SIZE"] for r in ranks} == {"2"}
    assert {r["LOCAL_RANK"] for r in ranks} == {"0"}
    assert len({r["node"] for r in ranks}) == 2, "ranks must run on distinct nodes"
    assert len({(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in ranks}) == 1
    assert f"GANG RESULT: rank 0 on {ranks[0]['node']}" in backend.logs(handle)


def test_a_failing_rank_fails_the_step_with_its_traceback_and_stops_the_others(
    backend: SlurmBackend,
) -> None:
    handle = backend.submit(launch_request(program("gang_step.py", "fail_on_rank_one")))

    status = wait_for_status(backend, handle, lambda s: s.is_terminal, timeout_s=150)

    assert status.reason == FailureReason.ERROR.value
    assert status.exit_code == 3
    log = backend.logs(handle)
    assert "GANG ERROR: gang rank 1 of 2 failed" in log
    assert "ValueError: rank 1 found a corrupt shard" in log


def test_a_failed_gang_fails_the_slurm_job_even_when_the_step_process_exits_0(
    backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    request = launch_request(
        program("gang_step.py", "fail_on_rank_one"), env={"GANG_ERROR_EXIT": "0"}
    )
    handle = backend.submit(request)

    status = wait_for_status(backend, handle, lambda s: s.is_terminal, timeout_s=150)

    assert status.state is StepState.FAILED, backend.logs(handle)
    assert status.exit_code == 1
    assert "k8s_ai: gang rank 1 of 2 failed" in backend.logs(handle)
    job = cluster.run(["scontrol", "show", "job", "-o", handle.job_id]).stdout
    assert "JobState=FAILED" in job and "ExitCode=1:0" in job


def test_a_rank_past_its_nodes_memory_fails_the_step_as_oom_killed(
    backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    request = launch_request(program("gang_step.py", "hold_memory_on_rank_one", "400"))
    handle = backend.submit(request)

    status = wait_for_status(backend, handle, lambda s: s.is_terminal, timeout_s=150)

    assert (status.state, status.reason) == (StepState.FAILED, "OOMKilled"), backend.logs(handle)
    srun_step = f"StepId={handle.job_id}.0"  # the srun step
    killed = f"oom_kill event in {srun_step}" if cluster.cgroup_memory else f"{srun_step} exceeded"
    assert killed in status.message
    assert status.exit_code == 3  # the step process's own exit after the GangError
    assert "GANG ERROR: gang rank" in backend.logs(handle)


def test_a_gang_past_its_timeout_is_stopped_and_fails_the_step(
    backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    request = launch_request(program("gang_step.py", "sleep_forever"), env={"GANG_TIMEOUT_S": "3"})
    handle = backend.submit(request)

    status = wait_for_status(backend, handle, lambda s: s.is_terminal, timeout_s=150)

    assert status.exit_code == 3
    assert "gang of 2 ranks did not finish: srun still running after 3s" in backend.logs(handle)
    # the job ends FAILED while Slurm still tears its cancelled srun step down (COMPLETING)
    deadline = time.monotonic() + 30
    while steps := cluster.run(["squeue", "-h", "-s"]).stdout.strip():
        assert time.monotonic() < deadline, f"job steps left running: {steps}"
        time.sleep(0.2)


def test_more_nodes_than_the_partition_has_is_refused_before_submitting(
    backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    with pytest.raises(SubmitError) as refusal:
        backend.submit(launch_request(program("argv_step.py", "/dev/null"), nodes=5))

    assert "step 'train': nodes=5 but Slurm partition 'debug' has 3 nodes" in str(refusal.value)
    assert cluster.run(["squeue", "-h"]).stdout.strip() == ""


def test_more_gpus_per_node_than_any_node_has_is_refused_before_submitting(
    backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    with pytest.raises(SubmitError, match="gpus_per_node=4 but no node .* more than 2 GPUs"):
        backend.submit(launch_request(program("argv_step.py", "/dev/null"), gpu=4))

    assert cluster.run(["squeue", "-h"]).stdout.strip() == ""


def test_gpu_gang_step_gets_the_gpus_of_each_node(backend: SlurmBackend, tmp_path: Path) -> None:
    out = tmp_path / "ranks"
    out.mkdir()
    request = launch_request(program("gang_step.py", "record_rank", str(out)), gpu=2)

    status = wait_for_status(backend, backend.submit(request), lambda s: s.is_terminal)

    assert status.state is StepState.SUCCEEDED
    assert {json.loads((out / f"rank-{r}.json").read_text())["node"] for r in (0, 1)} == {
        "n1",
        "n2",
    }
