"""How the local backend starts a step process: forked from a warm forkserver, or spawned.

By default (`local.start_method: spawn`) each step is a fresh `python -m dagster api
execute_step` process, which spends a second or two of CPU on imports. With `forkserver`, step
processes are forked from a process that has Dagster imported already, as Dagster's
multiprocess executor does: each step is still its own process, in its own session, with its
own environment and log file. Two consequences: a script that launches runs in-process needs
an `if __name__ == "__main__":` guard (as with the multiprocess executor), and a forked step's
resident memory includes the pages it shares with the forkserver, which count against its
memory limit.

Example:
    >>> ProcessLauncher().start_method
    'spawn'
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Literal, Protocol

StartMethod = Literal["forkserver", "spawn"]
PRELOAD = ["dagster", "dagster._cli.api", "k8s_ai_orchestrator"]


class StepProcess(Protocol):
    """What the local backend needs of a started step process (as `subprocess.Popen`)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class ForkedProcess:
    """A step process forked from the forkserver; exit codes as `Popen` reports them."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process
        self.pid = process.pid or 0

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"step process {self.pid}", timeout or 0)
        return code


class ProcessLauncher:
    """Starts step processes; `dagster api execute_step` command lines are forked warm."""

    def __init__(self, start_method: StartMethod = "spawn") -> None:
        self.start_method = start_method
        self._context: BaseContext | None = None

    def start(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> StepProcess:
        if self.start_method == "forkserver" and _is_dagster_cli(argv):
            return self._fork(argv, env, log_path)
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                list(argv),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _fork(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> StepProcess:
        if self._context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            self._context = context
        process = self._context.Process(  # type: ignore[attr-defined]
            target=run_dagster_cli,
            args=(list(argv[3:]), dict(env), str(log_path)),
            name=f"k8s-ai-step-{log_path.stem}",
        )
        process.start()
        return ForkedProcess(process)


def _is_dagster_cli(argv: Sequence[str]) -> bool:
    return (
        len(argv) > 3
        and os.path.realpath(argv[0]) == os.path.realpath(sys.executable)
        and list(argv[1:3]) == ["-m", "dagster"]
    )


def run_dagster_cli(args: list[str], env: dict[str, str], log_path: str) -> None:
    """Body of a forked step process: its own session, environment and log, then the CLI."""
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["dagster", *args]
    runpy.run_module("dagster", run_name="__main__", alter_sys=True)
