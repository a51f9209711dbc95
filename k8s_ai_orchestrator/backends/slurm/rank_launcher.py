"""The ranks of a `Gang.run` call under Slurm: one bounded `srun` inside the step's gang
allocation, run (like every Slurm command of this backend) through a `Runner`.

srun's output is not captured: the ranks' lines (`--label`led) reach the step log as they come.
When srun outlives the gang's timeout, the runner stops it and the job steps it started are
cancelled by name (`squeue`, `scancel`): srun may die without stopping its remote tasks.

Example:
    >>> SrunRanks(environ={"K8S_AI_SLURM_JOB_DIR": "/shared/job-7"}).directory(
    ...     GangPlan(2, 1, 0, 1, "python", None, 60.0), None)
    PosixPath('/shared/job-7')
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ...errors import GangError
from ...ranks import GANG_MODE, GangPlan, LaunchOutcome, given_directory
from ...stepenv import SLURM_FAILED_MARKER, SLURM_JOB_DIR
from .cli import Runner, subprocess_runner


class RunnerFactory(Protocol):
    """Builds the `Runner` for some commands (`subprocess_runner` runs them here)."""

    def __call__(
        self,
        env: Mapping[str, str] | None = None,
        base: Mapping[str, str] | None = None,
        *,
        capture: bool = True,
    ) -> Runner: ...


class SrunRanks:
    """Starts the ranks with one `srun` in the job's allocation, bounded by the plan's
    timeouts; `--kill-on-bad-exit` stops every rank as soon as one fails.

    Args:
        environ: the step's environment (inside the Slurm job), which srun passes on.
        runners: builds the runners for srun and for the clean-up commands.
        kill_grace_s: the clean-up commands get four times this long.
    """

    def __init__(
        self,
        environ: Mapping[str, str] = os.environ,
        *,
        runners: RunnerFactory = subprocess_runner,
        kill_grace_s: float = 5.0,
    ) -> None:
        self._environ = environ
        self._runners = runners
        self._kill_grace_s = kill_grace_s

    def directory(self, plan: GangPlan, workdir: str | None) -> Path:
        given = given_directory(workdir, self._environ)
        if given is not None:
            return given
        if plan.nodes > 1:
            raise GangError(
                f"Gang under Slurm needs a directory every node sees; {SLURM_JOB_DIR} is not "
                "set. Set Gang(workdir=...) to a shared filesystem path"
            )
        return Path(tempfile.gettempdir())

    def launch(
        self, plan: GangPlan, directory: Path, port: int, argv: Sequence[str]
    ) -> LaunchOutcome:
        name = f"k8sai-{directory.name}"
        env = {"MASTER_PORT": str(port), GANG_MODE: "slurm"}
        run = self._runners(env, self._environ, capture=False)
        timeout_s = math.inf if plan.timeout_s is None else plan.timeout_s
        ended = False
        try:
            code = run(srun_command(plan, name, argv), None, timeout_s).returncode
            ended = True
            return LaunchOutcome(code, False, f"srun exited with code {code}")
        except TimeoutError:
            return LaunchOutcome(-1, True, f"srun still running after {plan.timeout_s:g}s")
        finally:
            if not ended:
                self._cancel_steps(name)

    def failed(self, error: GangError) -> None:
        """Leave the marker that makes the batch script exit 1: the step process itself exits
        0 after Dagster records the failure, and sacct would show the job COMPLETED."""
        job_dir = self._environ.get(SLURM_JOB_DIR)
        if not job_dir:
            return
        first_line = str(error).splitlines()[0] if str(error) else "a gang rank failed"
        with contextlib.suppress(OSError):  # the step still fails with the GangError
            (Path(job_dir) / SLURM_FAILED_MARKER).write_text(f"{first_line}\n")

    def _cancel_steps(self, name: str) -> None:
        """scancel the job steps srun started (srun may die without stopping its remote
        tasks)."""
        run = self._runners(None, self._environ)
        job = self._environ.get("SLURM_JOB_ID", "")
        timeout_s = self._kill_grace_s * 4
        with contextlib.suppress(TimeoutError, OSError):
            out = run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"], None, timeout_s).stdout
            steps = [line.split()[0] for line in out.splitlines() if line.endswith(" " + name)]
            if steps:
                run(["scancel", *steps], None, timeout_s)


def srun_command(plan: GangPlan, name: str, argv: Sequence[str]) -> list[str]:
    """The srun command line that starts every rank of the plan.

    Example:
        >>> srun_command(GangPlan(2, 1, 0, 4, "python", None, 60.0), "k8sai-x", ["rank"])[2:5]
        ['--nodes=2', '--ntasks=2', '--ntasks-per-node=1']
    """
    command = [
        "srun",
        f"--job-name={name}",
        f"--nodes={plan.nodes}",
        f"--ntasks={plan.world_size}",
        f"--ntasks-per-node={plan.tasks_per_node}",
        f"--cpus-per-task={plan.cpus_per_task}",
        "--kill-on-bad-exit=1",
        f"--wait={max(1, int(plan.straggler_timeout_s))}",
        "--label",
    ]
    if plan.gpus_per_node:
        command.append(f"--gres=gpu:{plan.gpus_per_node}")
    return [*command, *plan.srun_args, *argv]
