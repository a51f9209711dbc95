"""Generated batch scripts, compared line by line with checked-in golden files.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/slurm/test_sbatch_script.py`
and review the diff.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from k8s_ai_orchestrator.backends.base import LaunchRequest
from k8s_ai_orchestrator.backends.slurm import SlurmConfig, batch_job, render_script
from k8s_ai_orchestrator.errors import SubmitError
from k8s_ai_orchestrator.spec import ComputeSpec, GiB

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
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(script)
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
        batch_job(request(gpu=1, gpu_type="a100\n#SBATCH --uid=0"), SlurmConfig())
