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
import time
from collections.abc import Mapping, Sequence
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Literal, Protocol

from ...proctree import kill_group, process_alive
from .ledger import AdmissionLedger, entry_alive

StartMethod = Literal["forkserver", "spawn"]
STOP_GRACE_S = 10.0  # SIGTERM → SIGKILL when a run's steps are stopped by the run alone
UNKNOWN_EXIT = -(2**16)  # the exit code of an adopted process, which is not ours to wait for
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


class AdoptedProcess:
    """A step process an earlier run worker started (`LocalBackend.adopt`): not a child of
    this one, so it is watched by its PID and create time, and its exit status is unknown
    (`poll` and `wait` answer `UNKNOWN_EXIT` once it has gone)."""

    def __init__(self, pid: int, started: float, poll_s: float = 0.05) -> None:
        self.pid = pid
        self._started = started
        self._poll_s = poll_s

    def poll(self) -> int | None:
        return None if process_alive(self.pid, self._started) else UNKNOWN_EXIT

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"step process {self.pid}", timeout or 0)
            time.sleep(self._poll_s)
        return code


def kill_step(process: StepProcess | None, sig: signal.Signals) -> None:
    """Signal a step's process group (and the step itself: a forked step that has not called
    setsid yet leads no group)."""
    if process is not None:
        kill_group(process.pid, sig)
        try:
            os.kill(process.pid, sig)
        except ProcessLookupError:
            pass


def stop_run(ledger: AdmissionLedger, run_id: str, grace_s: float = STOP_GRACE_S) -> list[str]:
    """SIGTERM the process group of every step of `run_id` the machine's ledger holds, SIGKILL
    what is left after `grace_s` (whichever run worker started them); their job ids."""
    claims = [c for c in ledger.snapshot().claims if c.run_id == run_id and c.pid]
    for claim in claims:
        kill_group(claim.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(entry_alive(c) for c in claims) and time.monotonic() < deadline:
        time.sleep(0.05)
    for claim in (c for c in claims if entry_alive(c)):
        kill_group(claim.pid, signal.SIGKILL)
    return [claim.job_id for claim in claims]


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
