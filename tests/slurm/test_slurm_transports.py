"""The CLI and REST transports against the real daemons of each Slurm version (Debian's 22.05,
whose slurmrestd serves v0.0.38, and 24.11 built from source, v0.0.40-v0.0.42), including
hostile names and values: quotes, `$()`, `;` and newlines reach the step verbatim and never
run."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest
from slurm_support import launch_request, program, wait_for_status

from k8s_ai_orchestrator.backends.base import FailureReason, StepState
from k8s_ai_orchestrator.backends.slurm import SlurmBackend, SlurmConfig
from k8s_ai_orchestrator.backends.slurm.rest import RestTransport
from k8s_ai_orchestrator.errors import SubmitError
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]


def hostile(marker: Path) -> str:
    """A value that creates `marker` if it is ever interpreted by a shell."""
    return f"x'\"; touch {marker}; $(touch {marker}) `touch {marker}`\ntouch {marker} #"


@pytest.fixture
def cluster(versioned_cluster: LocalSlurmCluster) -> LocalSlurmCluster:
    """Every test here runs on each Slurm version (conftest.py's `versioned_cluster`)."""
    return versioned_cluster


@pytest.fixture
def rest_backend(cluster: LocalSlurmCluster) -> SlurmBackend:
    return SlurmBackend(cluster.backend_config("rest"))


# Each version's commands (what the CLI transport runs) and the REST API version chosen.
EXPECTED = {"22.05": ("22.05.", "v0.0.38"), "24.11": ("24.11.5", "v0.0.42")}


def test_each_version_runs_its_own_daemons_commands_and_rest_api(
    request: pytest.FixtureRequest, cluster: LocalSlurmCluster, rest_backend: SlurmBackend
) -> None:
    release, api = EXPECTED[request.node.callspec.params["versioned_cluster"]]
    env = {**os.environ, "SLURM_CONF": str(cluster.conf_path)}  # PATH as the transports see it
    version = subprocess.run(["sbatch", "--version"], env=env, capture_output=True, text=True)
    config = cluster.run(["scontrol", "show", "config"]).stdout
    daemons = next(line for line in config.splitlines() if line.startswith("SLURM_VERSION"))

    assert version.stdout.split()[-1].startswith(release), version
    assert daemons.split("=")[1].strip().startswith(release)
    assert RestTransport(rest_backend.config).version == api


def test_hostile_step_key_run_id_env_and_arguments_run_nothing(
    any_backend: SlurmBackend, cluster: LocalSlurmCluster, tmp_path: Path
) -> None:
    marker = tmp_path / "injected"
    value = hostile(marker)
    out = tmp_path / "argv.json"
    request = launch_request(
        program("argv_step.py", str(out), value, "--flag=$HOME"),
        step_key=f"train[{value}]",
        run_id=f"run-{value}",
        env={"K8S_AI_TEST_VALUE": value},
    )

    handle = any_backend.submit(request)
    status = wait_for_status(any_backend, handle, lambda s: s.is_terminal)

    assert status.state is StepState.SUCCEEDED, any_backend.logs(handle)
    assert json.loads(out.read_text()) == {"argv": [value, "--flag=$HOME"], "value": value}
    assert not marker.exists(), "a hostile value was executed by a shell"
    job = cluster.run(["scontrol", "show", "job", "-o", handle.job_id]).stdout
    comment = job.split("Comment=")[1].split()[0]
    assert unquote(comment.split("step=")[1].split(",")[0]) == f"train[{value}]"


def test_a_workdir_with_quotes_hash_and_hetjob_reaches_sbatch_intact(
    cluster: LocalSlurmCluster, tmp_path: Path
) -> None:
    workdir = cluster.workdir / 'it\'s#1"hetjob"'
    config = SlurmConfig(workdir=str(workdir), slurm_conf=str(cluster.conf_path))
    backend = SlurmBackend(config, rss_sample_interval_s=0)
    out = tmp_path / "argv.json"

    handle = backend.submit(
        launch_request(program("argv_step.py", str(out), "ran"), step_key="hetjob_train")
    )
    status = wait_for_status(backend, handle, lambda s: s.is_terminal)

    assert status.state is StepState.SUCCEEDED, backend.logs(handle)
    job = cluster.run(["scontrol", "show", "job", "-o", handle.job_id]).stdout
    assert f"WorkDir={workdir}/" in job
    assert "JobName=k8sai." in job and "hetjob_train" in job
    assert json.loads(out.read_text())["argv"] == ["ran"]


def test_rest_transport_runs_a_two_node_step(rest_backend: SlurmBackend) -> None:
    handle = rest_backend.submit(launch_request(["bash", "-c", "echo on $SLURM_JOB_NUM_NODES"]))

    status = wait_for_status(rest_backend, handle, lambda s: s.is_terminal)

    assert status.state is StepState.SUCCEEDED
    assert "on 2" in rest_backend.logs(handle)
    assert len(rest_backend.usage(handle).nodes) == 2


def test_rest_transport_reports_exit_codes(rest_backend: SlurmBackend) -> None:
    handle = rest_backend.submit(launch_request(["bash", "-c", "exit 3"], nodes=1))

    status = wait_for_status(rest_backend, handle, lambda s: s.is_terminal)

    assert (status.reason, status.exit_code) == (FailureReason.ERROR.value, 3)


def test_a_step_slurm_kills_over_its_memory_is_reported_oom_killed(
    any_backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    hog = "import time; block = bytearray(400 * 2**20); time.sleep(60)"
    handle = any_backend.submit(launch_request([sys.executable, "-c", hog], nodes=1))

    status = wait_for_status(any_backend, handle, lambda s: s.is_terminal, timeout_s=60)

    assert (status.state, status.reason) == (StepState.FAILED, "OOMKilled"), status
    if cluster.cgroup_memory:  # 24.11: the kernel's cgroup OOM killer
        assert f"Slurm job {handle.job_id} ended OUT_OF_MEMORY" in status.message
        assert "(signal 125: Slurm's out-of-memory mark); reason: OutOfMemory" in status.message
        assert f"oom_kill event in StepId={handle.job_id}.batch" in status.message
    else:  # 22.05: slurmstepd's sampling (OverMemoryKill)
        assert f"StepId={handle.job_id}.batch exceeded memory limit" in status.message
        assert "> 268435456), being killed" in status.message  # 256Mi, the step's memory


def test_rest_transport_refuses_oversized_gangs_and_cancels(
    rest_backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    with pytest.raises(SubmitError, match="nodes=4 but Slurm partition 'debug' has 3 nodes"):
        rest_backend.submit(launch_request(["true"], nodes=4))

    handle = rest_backend.submit(launch_request(["sleep", "300"]))
    wait_for_status(rest_backend, handle, lambda s: s.state is StepState.RUNNING)
    rest_backend.cancel(handle)

    status = wait_for_status(rest_backend, handle, lambda s: s.is_terminal)
    assert status.reason == FailureReason.CANCELLED.value


def test_rest_jobs_get_usr2_before_their_time_limit_then_requeue_and_resume(
    cluster: LocalSlurmCluster, tmp_path: Path
) -> None:
    config = cluster.backend_config(
        "rest",
        time_limit=1,
        grace_period_s=57,  # USR2 three seconds into the one-minute limit
    )
    backend = SlurmBackend(config)
    step = program("checkpoint_step.py", str(tmp_path), "--stop-after-save")

    handle = backend.submit(launch_request(step, preemptible=True))
    status = wait_for_status(backend, handle, lambda s: s.is_terminal, timeout_s=150)

    assert status.state is StepState.SUCCEEDED, backend.logs(handle)
    assert (tmp_path / "checkpoint").read_text() == "saved"
    assert (tmp_path / "resumed").read_text() == "1"


def test_a_new_backend_finds_a_submitted_attempt_by_its_run_step_and_attempt(
    any_backend: SlurmBackend, cluster: LocalSlurmCluster, tmp_path: Path
) -> None:
    """What a resumed run worker does (`Adopts`): the job of attempt 0 is found, with its
    state; attempt 1 of the same step, never submitted, is not."""
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    request = launch_request(command, nodes=1)
    handle = any_backend.submit(request)
    try:
        config = any_backend.config
        adopted = SlurmBackend(config).adopt(request)
        assert adopted is not None and adopted.job_id == handle.job_id
        other = dataclasses.replace(request, attempt=1)
        assert SlurmBackend(config).adopt(other) is None
        fresh = SlurmBackend(config)
        found = fresh.adopt(request)
        assert found is not None
        wait_for_status(fresh, found, lambda s: s.state == StepState.RUNNING)
    finally:
        any_backend.cancel(handle)
