"""Generated batch scripts, compared line by line with checked-in golden files.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/slurm/test_sbatch_script.py`
(the run rewrites the files and fails; review the diff, then run again without it).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from k8s_ai_orchestrator.backends.base import LaunchRequest
from k8s_ai_orchestrator.backends.slurm import SlurmConfig, batch_job, render_script
from k8s_ai_orchestrator.errors import SubmitError
from k8s_ai_orchestrator.spec import ComputeSpec, GiB
from k8s_ai_orchestrator.stepenv import SLURM_FAILED_MARKER as MARKER
from tests.support import update_golden

GOLDEN = Path(__file__).parent / "golden"
HOSTILE = "x'\"; touch /tmp/pwned; $(touch /tmp/pwned) `id`\nrm -rf / #"
STEP_COMMAND = [
    "/usr/bin/python3",
    "-m",
    "dagster",
    "api",
    "execute_step",
    '{"__class__": "ExecuteStepArgs", "step_keys_to_execute": ["train"]}',
]


def request(
    step_key: str = "train",
    run_id: str = "4f1c2d3e-aaaa-bbbb-cccc-0123456789ab",
    env: dict[str, str] | None = None,
    **spec: object,
) -> LaunchRequest:
    fields: dict[str, object] = {"cpu": 8, "memory_bytes": 64 * GiB, "nodes": 2}
    fields.update(spec)
    return LaunchRequest(
        run_id=run_id,
        step_key=step_key,
        attempt=1,
        command=STEP_COMMAND,
        env=env or {"K8S_AI_BACKEND": "slurm", "DAGSTER_HOME": "/shared/dagster"},
        spec=ComputeSpec(**fields),
    )


def assert_matches_golden(name: str, script: str) -> None:
    path = GOLDEN / name
    update_golden(path, script)
    expected = path.read_text().splitlines()
    actual = script.splitlines()
    for number, (want, got) in enumerate(zip(expected, actual, strict=False), start=1):
        assert got == want, f"{name}:{number}: expected {want!r}, generated {got!r}"
    assert len(actual) == len(expected), f"{name}: {len(expected)} lines expected, {len(actual)}"
    check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, timeout=10)
    assert check.returncode == 0, check.stderr


def test_preemptible_gpu_gang_script() -> None:
    config = SlurmConfig(
        partition="gpu",
        account="ml-research",
        python="/opt/venv/bin/python",
        workdir="/shared/k8s_ai",
        time_limit="1-00:00:00",
        grace_period_s=120,
    )
    job = batch_job(request(gpu=8, gpu_type="a100", tasks_per_node=4, preemptible=True), config)

    assert_matches_golden("gang_gpu_preemptible.sh", render_script(job))


def test_hostile_step_key_run_id_and_env_are_quoted_or_reduced() -> None:
    job = batch_job(
        request(step_key=f"train[{HOSTILE}]", run_id=HOSTILE, env={"K8S_AI_NOTE": HOSTILE}),
        SlurmConfig(workdir="/shared/k8s_ai"),
    )

    assert_matches_golden("hostile_names.sh", render_script(job))


def test_rest_transport_script_sends_its_own_usr2_before_the_time_limit() -> None:
    config = SlurmConfig(
        transport="rest",
        rest_url="http://slurm:6820",
        rest_user="ml",
        rest_token="token",
        workdir="/shared/k8s_ai",
        time_limit=60,
        grace_period_s=30,
        slurm_conf="/etc/slurm/slurm.conf",
    )

    assert_matches_golden("rest_timer.sh", render_script(batch_job(request(), config)))


def test_environment_names_a_shell_cannot_export_are_refused() -> None:
    with pytest.raises(SubmitError, match=r"step 'train': environment variable names \['A-B'\]"):
        batch_job(request(env={"A-B": "1"}), SlurmConfig())


def test_a_gpu_type_that_could_add_sbatch_options_is_refused() -> None:
    with pytest.raises(SubmitError, match="step 'train': gpu_type=.* is not a Slurm GRES type"):
        batch_job(request(gpu=1, gpu_type="a100 --uid=0"), SlurmConfig())


@pytest.mark.parametrize("gpu_type", ["a100\n", "a100\n#SBATCH --uid=0", "a100\r"])
def test_a_gpu_type_with_a_line_break_is_refused_even_a_trailing_one(gpu_type: str) -> None:
    with pytest.raises(SubmitError, match=r"gpu_type=.* contains a control character \(U\+000"):
        batch_job(request(gpu=1, gpu_type=gpu_type), SlurmConfig())


def run_script_here(
    tmp_path: Path, step: str, *, stale_marker: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run the generated script with bash outside Slurm, with `step` as the step process."""
    job = batch_job(request(), SlurmConfig(workdir=str(tmp_path)))
    job = replace(job, command=("bash", "-c", step))
    Path(job.job_dir).mkdir(parents=True)
    if stale_marker:
        Path(job.job_dir, MARKER).write_text("gang rank 0 of 2 failed in attempt 0\n")
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7"}
    return subprocess.run(
        ["bash", "-c", render_script(job), "job"], env=env, text=True, capture_output=True,
        timeout=30, cwd=job.job_dir,
    )  # fmt: skip


def test_a_step_that_exits_0_after_leaving_the_failed_marker_makes_the_job_exit_1(
    tmp_path: Path,
) -> None:
    done = run_script_here(
        tmp_path, f'echo "gang rank 1 of 2 failed on n2: boom" > "$K8S_AI_SLURM_JOB_DIR/{MARKER}"'
    )

    assert done.returncode == 1
    assert "k8s_ai: gang rank 1 of 2 failed on n2: boom; the job exits 1" in done.stderr


def test_a_stale_failed_marker_from_an_earlier_attempt_is_removed_before_the_step_starts(
    tmp_path: Path,
) -> None:
    done = run_script_here(
        tmp_path, f'test ! -e "$K8S_AI_SLURM_JOB_DIR/{MARKER}"', stale_marker=True
    )

    assert done.returncode == 0, done.stderr


def test_a_step_that_fails_keeps_its_own_exit_code(tmp_path: Path) -> None:
    done = run_script_here(tmp_path, f'touch "$K8S_AI_SLURM_JOB_DIR/{MARKER}"; exit 5')

    assert done.returncode == 5
