"""The ranks of a `Gang.run` call on Kubernetes: the step runs in pod 0 of its gang Job, which
publishes the call to the worker pods and runs node 0's ranks itself (see `gangpods`).

Example:
    >>> PodRanks(environ={"K8S_AI_GANG_DIR": "/gangs/run-1"}).directory(
    ...     GangPlan(2, 1, 0, 1, "python", None, 60.0), "/ignored")
    PosixPath('/gangs/run-1')
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...errors import GangError
from ...gangpods import GangCall, lead_call, leader_address
from ...ranks import GangPlan, LaunchOutcome
from ...stepenv import GANG_DIR


class PodRanks:
    """Leads each call from the leader pod; a failing rank or a timeout stops the ranks on
    every pod.

    Args:
        environ: the leader pod's environment (its gang directory and IP).
    """

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self._environ = environ

    def directory(self, plan: GangPlan, workdir: str | None) -> Path:
        """The attempt's gang directory, which the worker pods watch (`workdir` is not)."""
        return Path(self._environ[GANG_DIR])

    def launch(
        self, plan: GangPlan, directory: Path, port: int, argv: Sequence[str]
    ) -> LaunchOutcome:
        call = GangCall(
            directory,
            plan.world_size,
            plan.tasks_per_node,
            leader_address(self._environ),
            port,
            tuple(argv),
        )
        code, timed_out, detail = lead_call(
            call, timeout_s=plan.timeout_s, straggler_timeout_s=plan.straggler_timeout_s
        )
        return LaunchOutcome(code, timed_out, detail)

    def failed(self, error: GangError) -> None:
        """Nothing to leave: the step process fails with the error itself."""
