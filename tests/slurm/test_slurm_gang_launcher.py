"""The srun rank launcher runs srun and its clean-up through the Slurm backend's `Runner`
(a fake squeue/srun that behaves; no daemons, no waiting)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from k8s_ai_orchestrator.backends.slurm import CommandResult, Runner
from k8s_ai_orchestrator.backends.slurm.rank_launcher import SrunRanks
from k8s_ai_orchestrator.errors import GangError
from k8s_ai_orchestrator.ranks import GangPlan

JOB_ENV = {"SLURM_JOB_ID": "42", "PATH": "/usr/bin"}


class FakeSlurm:
    """srun that exits with `srun_code` or outlives its timeout, squeue listing the job's steps,
    scancel removing them; every command with the variables and capture it ran with."""

    def __init__(self, srun_code: int | None, steps: Mapping[str, str]) -> None:
        self.srun_code = srun_code  # None: srun never ends
        self.steps = dict(steps)  # step id → step name
        self.ran: list[tuple[list[str], dict[str, str], bool, float]] = []

    def runners(
        self,
        env: Mapping[str, str] | None = None,
        base: Mapping[str, str] | None = None,
        *,
        capture: bool = True,
    ) -> Runner:
        full_env = {**(base or {}), **(env or {})}

        def run(argv: Sequence[str], stdin: str | None, timeout_s: float) -> CommandResult:
            self.ran.append((list(argv), full_env, capture, timeout_s))
            if argv[0] == "srun":
                if self.srun_code is None:
                    raise TimeoutError(f"srun did not finish in {timeout_s:g}s")
                return CommandResult(self.srun_code, "", "")
            if argv[0] == "squeue":
                listing = "".join(f"{i} {name}\n" for i, name in self.steps.items())
                return CommandResult(0, listing, "")
            for step in argv[1:]:
                self.steps.pop(step, None)
            return CommandResult(0, "", "")

        return run


def plan(timeout_s: float | None) -> GangPlan:
    return GangPlan(2, 2, 1, 4, "python", timeout_s, 30.0, ("--mpi=none",))


def test_srun_starts_every_rank_with_the_rank_port_and_its_output_on_the_step_log() -> None:
    slurm = FakeSlurm(srun_code=0, steps={})
    ranks = SrunRanks(JOB_ENV, runners=slurm.runners)

    outcome = ranks.launch(plan(None), Path("/shared/gang-abc"), 29500, ["python", "-m", "r"])

    assert (outcome.returncode, outcome.timed_out) == (0, False)
    assert outcome.detail == "srun exited with code 0"
    [(argv, env, capture, timeout_s)] = slurm.ran
    assert argv == [
        "srun",
        "--job-name=k8sai-gang-abc",
        "--nodes=2",
        "--ntasks=4",
        "--ntasks-per-node=2",
        "--cpus-per-task=4",
        "--kill-on-bad-exit=1",
        "--wait=30",
        "--label",
        "--gres=gpu:1",
        "--mpi=none",
        "python",
        "-m",
        "r",
    ]
    assert env == {**JOB_ENV, "MASTER_PORT": "29500", "K8S_AI_GANG_MODE": "slurm"}
    assert capture is False
    assert timeout_s == float("inf")


def test_srun_past_the_gang_timeout_is_stopped_and_its_job_steps_cancelled() -> None:
    slurm = FakeSlurm(srun_code=None, steps={"42.0": "batch", "42.1": "k8sai-gang-abc"})
    ranks = SrunRanks(JOB_ENV, runners=slurm.runners, kill_grace_s=5.0)

    outcome = ranks.launch(plan(3.0), Path("/shared/gang-abc"), 29500, ["rank"])

    assert (outcome.returncode, outcome.timed_out) == (-1, True)
    assert outcome.detail == "srun still running after 3s"
    assert slurm.ran[0][3] == 3.0
    assert [argv for argv, *_ in slurm.ran[1:]] == [
        ["squeue", "-h", "-s", "-j", "42", "-o", "%i %j"],
        ["scancel", "42.1"],
    ]
    assert all(timeout_s == 20.0 and capture for _, _, capture, timeout_s in slurm.ran[1:])
    assert slurm.steps == {"42.0": "batch"}


def test_a_failed_gang_leaves_the_marker_that_fails_the_slurm_job(tmp_path: Path) -> None:
    ranks = SrunRanks({**JOB_ENV, "K8S_AI_SLURM_JOB_DIR": str(tmp_path)})

    ranks.failed(GangError("gang rank 1 of 2 failed on n2: ValueError: bad\ntraceback"))

    marker = (tmp_path / "k8s_ai_step_failed").read_text()
    assert marker == "gang rank 1 of 2 failed on n2: ValueError: bad\n"


def test_a_multi_node_gang_without_a_shared_directory_is_refused() -> None:
    with pytest.raises(GangError, match="needs a directory every node sees"):
        SrunRanks(JOB_ENV).directory(plan(None), None)
