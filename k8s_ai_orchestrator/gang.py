"""`Gang`: run one function on every rank of a multi-node step and get rank 0's result.

The resource only chooses how the ranks start, by the backend the step runs on: under Slurm
(the step runs inside its gang allocation) one bounded `srun` (`backends/slurm/rank_launcher.py`);
on Kubernetes (the step runs in pod 0 of its gang Job) each pod starts its node's ranks
(`backends/kubernetes/rank_launcher.py`, `gangpods`); under the local backend
`nodes × tasks_per_node` local processes (`backends/local/rank_launcher.py`), so the same asset
runs on a laptop. Every rank runs the same program (`ranks`): it loads the pickled function and
arguments, sets RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK, MASTER_ADDR and MASTER_PORT, calls
the function and writes its result or traceback to a file.

The function is pickled by reference, so it must be importable: define it at module level in
a module the step can import (not in `__main__`, not a lambda or closure).

Example:
    >>> from dagster import asset
    >>> from k8s_ai_orchestrator import compute
    >>> from k8s_ai_orchestrator.gang import Gang
    >>> def train_rank(epochs):  # at module level
    ...     import os
    ...     return int(os.environ["WORLD_SIZE"])
    >>> @asset(op_tags=compute(nodes=2, tasks_per_node=1))
    ... def model(gang: Gang) -> int:
    ...     return gang.run(train_rank, 3)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from .errors import GangError
from .ranks import GangPlan, RankLauncher, run_gang
from .stepenv import CPUS, GANG_DIR, StepEnv


class Gang(ConfigurableResource):  # type: ignore[misc]
    """Runs a function on every rank of the step's allocation.

    Example:
        >>> from k8s_ai_orchestrator.gang import Gang
        >>> Gang(timeout_s=600).timeout_s
        600.0
    """

    timeout_s: float | None = Field(
        default=None, description="Fail the step if the ranks run longer than this (seconds)."
    )
    straggler_timeout_s: float = Field(
        default=60.0,
        description="Once one rank has exited, kill the others after this many seconds.",
    )
    python: str | None = Field(
        default=None, description="Interpreter for the ranks; default: the step's own."
    )
    workdir: str | None = Field(
        default=None,
        description="Shared directory for payloads/results; default: the Slurm job directory "
        "(or a temporary directory on the local backend).",
    )
    srun_args: list[str] = Field(default_factory=list, description="Extra srun arguments.")

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on every rank and return rank 0's result.

        Raises:
            GangError: a rank failed (the message carries its traceback), the gang timed out,
                or `fn` is not importable by the ranks.

        Example:
            >>> Gang().run(len, "abc")  # one local rank outside a multi-node step
            3
        """
        self._check_settings()
        env = os.environ
        step = StepEnv.current(env)
        launcher = choose_launcher(step, env)
        plan = GangPlan(
            nodes=step.nodes,
            tasks_per_node=step.tasks_per_node,
            gpus_per_node=step.gpus_per_node,
            cpus_per_task=max(1, int(-(-float(env.get(CPUS, "1")) // 1))),
            python=self.python or sys.executable,
            timeout_s=self.timeout_s,
            straggler_timeout_s=self.straggler_timeout_s,
            srun_args=tuple(self.srun_args),
        )
        try:
            return run_gang(plan, fn, args, launcher.directory(plan, self.workdir), launcher)
        except GangError as exc:
            launcher.failed(exc)
            raise

    def _check_settings(self) -> None:
        """Refuse settings that would hang, time out at once, or split the ranks' paths."""
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise GangError(
                f"Gang(timeout_s={self.timeout_s!r}): give seconds > 0, or None for no limit"
            )
        if not self.straggler_timeout_s >= 0:
            raise GangError(
                f"Gang(straggler_timeout_s={self.straggler_timeout_s!r}): give seconds >= 0"
            )
        if self.workdir is not None and not os.path.isabs(self.workdir):
            raise GangError(
                f"Gang(workdir={self.workdir!r}) is a relative path: each node would resolve it "
                "against its own working directory; give an absolute path on a filesystem "
                "every node mounts"
            )


def choose_launcher(step: StepEnv, env: Mapping[str, str]) -> RankLauncher:
    """The launcher of the backend the step runs on (imported only when chosen)."""
    if step.backend == "kubernetes" and step.nodes > 1:
        if not env.get(GANG_DIR):
            raise GangError(
                f"K8S_AI_BACKEND=kubernetes with {step.nodes} nodes but {GANG_DIR} is not set: "
                "Gang.run must be called inside the step's own gang Job (a step launched by "
                "ai_executor's kubernetes backend)"
            )
        from .backends.kubernetes.rank_launcher import PodRanks

        return PodRanks(env)
    if step.backend != "slurm":
        from .backends.local.rank_launcher import LocalRanks

        return LocalRanks(env)
    if "SLURM_JOB_ID" not in env:
        raise GangError(
            "K8S_AI_BACKEND=slurm but SLURM_JOB_ID is not set: Gang.run must be called inside "
            "the step's Slurm allocation (a step launched by ai_executor's Slurm backend)"
        )
    from .backends.slurm.rank_launcher import SrunRanks

    return SrunRanks(env)
