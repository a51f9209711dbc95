"""The ranks of a `Gang.run` call on the local backend: `nodes × tasks_per_node` local
processes, so the same asset runs on a laptop.

Example:
    >>> LocalRanks(environ={}).directory(GangPlan(2, 1, 0, 1, "python", None, 60.0), "/shared")
    PosixPath('/shared')
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ...errors import GangError
from ...proctree import stop_processes
from ...ranks import GangPlan, LaunchOutcome, given_directory, rank_env


class LocalRanks:
    """Starts every rank as a process on this machine and supervises them until all exit,
    one fails (the others are stopped at once) or a timeout passes (all are stopped).

    Args:
        environ: the step's environment, which each rank inherits.
        clock: seconds, for the timeouts.
        sleep: waits between polls.
        kill_grace_s: SIGTERM → SIGKILL when ranks are stopped.
    """

    def __init__(
        self,
        environ: Mapping[str, str] = os.environ,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        kill_grace_s: float = 5.0,
    ) -> None:
        self._environ = environ
        self._clock = clock
        self._sleep = sleep
        self._kill_grace_s = kill_grace_s

    def directory(self, plan: GangPlan, workdir: str | None) -> Path:
        return given_directory(workdir, self._environ) or Path(tempfile.gettempdir())

    def launch(
        self, plan: GangPlan, directory: Path, port: int, argv: Sequence[str]
    ) -> LaunchOutcome:
        procs = []
        try:
            for rank in range(plan.world_size):
                env = dict(self._environ)
                env.update(
                    rank_env(
                        node_rank=rank // plan.tasks_per_node,
                        local_rank=rank % plan.tasks_per_node,
                        world_size=plan.world_size,
                        tasks_per_node=plan.tasks_per_node,
                        master_addr="127.0.0.1",
                        master_port=port,
                        mode="local",
                    )
                )
                procs.append(subprocess.Popen(list(argv), env=env, stdin=subprocess.DEVNULL))
            return supervise(procs, plan, self._clock, self._sleep)
        finally:
            stop_processes(procs, self._kill_grace_s)

    def failed(self, error: GangError) -> None:
        """Nothing to leave: the step process fails with the error itself."""


def supervise(
    procs: Sequence[subprocess.Popen[bytes]],
    plan: GangPlan,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> LaunchOutcome:
    """Poll the rank processes until all exit 0, one fails, or a timeout passes."""
    started, first_exit = clock(), None
    while True:
        codes = [proc.poll() for proc in procs]
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            rank, code = failed[0]
            return LaunchOutcome(code or 1, False, f"rank {rank} exited with code {code}")
        if all(code == 0 for code in codes):
            return LaunchOutcome(0, False, "every rank exited 0")
        now = clock()
        running = [rank for rank, code in enumerate(codes) if code is None]
        if first_exit is None and len(running) < len(procs):
            first_exit = now
        if plan.timeout_s is not None and now - started > plan.timeout_s:
            return LaunchOutcome(
                -1, True, f"ranks {running} still running after {plan.timeout_s:g}s"
            )
        if first_exit is not None and now - first_exit > plan.straggler_timeout_s:
            detail = (
                f"ranks {running} still running {plan.straggler_timeout_s:g}s after a peer exited"
            )
            return LaunchOutcome(-1, True, detail)
        sleep(0.05)
