"""`ProcessRunLauncher`: run workers as processes on this machine that Dagster's run monitoring
can see die and resume, for the embedded local mode (`dagster dev`, one machine).

Dagster's `DefaultRunLauncher` starts run workers through the code server and cannot resume
them: a run worker killed (an OOM, `kill -9`, a reboot of the process tree) leaves its run
`STARTED` for good. This launcher starts each run worker itself, as its own session
(`dagster api execute_run` with the code location's interpreter), and records its PID and start
time in the run's tags. With `run_monitoring` enabled in `dagster.yaml`, the daemon asks it
about every started run (`check_run_worker_health`: the recorded process, start time checked so
a reused PID never counts) and, when the run worker is gone, resumes the run
(`resume_run`: `dagster api resume_run`), whose `ai_executor` reattaches to the steps still
running (`executor/reattach.py`). Terminating a run signals its run worker, which cancels every
step; a run whose run worker is gone has every attempt of its steps cancelled here, on every
backend its executor config names (`CancelsRuns`: local processes by the machine's ledger,
Jobs by their run label, sbatch jobs by their comment).

Example (`dagster.yaml`):

    run_launcher:
      module: k8s_ai_orchestrator
      class: ProcessRunLauncher
    run_monitoring:
      enabled: true
      max_resume_run_attempts: 3
      poll_interval_seconds: 30
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from typing import Any

import psutil
from dagster import DagsterInstance, DagsterRun
from dagster._core.launcher.base import (
    CheckRunHealthResult,
    LaunchRunContext,
    ResumeRunContext,
    RunLauncher,
    WorkerStatus,
)
from dagster._grpc.types import ExecuteRunArgs, ResumeRunArgs
from dagster._serdes import ConfigurableClass, ConfigurableClassData
from dagster_shared.serdes import serialize_value

from ..errors import ConfigError
from ..launch.backends import cancel_run
from ..launch.settings import ExecutorSettings
from ..proctree import process_alive

PID_TAG = "k8s_ai/run_worker_pid"
STARTED_TAG = "k8s_ai/run_worker_started"


class ProcessRunLauncher(RunLauncher, ConfigurableClass):
    """Starts each run worker as a local process that run monitoring can check and resume."""

    def __init__(self, inst_data: ConfigurableClassData | None = None) -> None:
        self._inst_data = inst_data
        self._children: list[subprocess.Popen[bytes]] = []  # reaped once they exit
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> ProcessRunLauncher:
        return cls(inst_data=inst_data)

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        origin = _origin(run)
        args = ExecuteRunArgs(origin, run.run_id, self._instance.get_ref(), True)
        self._start(run, "execute_run", args, origin.executable_path)

    @property
    def supports_resume_run(self) -> bool:
        return True

    def resume_run(self, context: ResumeRunContext) -> None:
        run = context.dagster_run
        origin = _origin(run)
        args = ResumeRunArgs(origin, run.run_id, self._instance.get_ref(), True)
        self._start(run, "resume_run", args, origin.executable_path)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        self._reap()
        worker = _worker(run)
        if worker is None:
            return CheckRunHealthResult(WorkerStatus.NOT_FOUND, "no run worker was recorded")
        if process_alive(*worker):
            return CheckRunHealthResult(WorkerStatus.RUNNING, run_worker_id=str(worker[0]))
        message = f"run worker process {worker[0]} is gone"
        return CheckRunHealthResult(WorkerStatus.FAILED, message, run_worker_id=str(worker[0]))

    def terminate(self, run_id: str) -> bool:
        """Signal the run's worker (it cancels every step); a run whose run worker is gone has
        every attempt of its steps cancelled here (`launch.backends.cancel_run`) and is marked
        canceled."""
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        worker = _worker(run)
        if worker is not None and process_alive(*worker):
            os.kill(worker[0], signal.SIGTERM)  # the run worker maps it to an interrupt
            return True
        cancel_orphaned_run(self._instance, run, self.__class__)
        return True

    def _start(self, run: DagsterRun, command: str, args: Any, python: str) -> None:
        self._reap()
        argv = [python, "-m", "dagster", "api", command, serialize_value(args)]
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        self._children.append(process)
        started = psutil.Process(process.pid).create_time()
        tags = {PID_TAG: str(process.pid), STARTED_TAG: repr(started)}
        self._instance.add_run_tags(run.run_id, tags)
        self._instance.report_engine_event(
            f"Started run worker process {process.pid} ({command})", run, cls=self.__class__
        )

    def _reap(self) -> None:
        """Collect the exit status of run workers that ended (no zombies are left)."""
        self._children = [child for child in self._children if child.poll() is None]


def cancel_orphaned_run(instance: DagsterInstance, run: DagsterRun, by: type) -> None:
    """Cancel every attempt of every step of `run`, whose run worker is gone, on every backend
    its executor config names (`launch.backends.cancel_run`: local processes by the machine's
    ledger, Jobs by their run label, sbatch jobs by their comment), say so in the run's events
    and mark it canceled. The one home of what each of our run launchers does then."""
    run_config: Mapping[str, Any] = run.run_config
    config = (run_config.get("execution") or {}).get("config") or {}
    cancelled = cancel_run(ExecutorSettings.from_config(config), run.run_id)
    found = "; ".join(f"{name}: {', '.join(jobs)}" for name, jobs in cancelled.items() if jobs)
    instance.report_engine_event(
        f"Run worker of run {run.run_id} is gone; cancelled its steps' attempts on every "
        f"backend ({found or 'none left'})",
        run,
        cls=by,
    )
    instance.report_run_canceled(run)


def _origin(run: DagsterRun) -> Any:
    if run.job_code_origin is None:
        raise ConfigError(
            f"run {run.run_id} has no code origin to start its run worker from; launch it from "
            "the UI, a schedule, a sensor or `dagster job launch`"
        )
    return run.job_code_origin


def _worker(run: DagsterRun) -> tuple[int, float] | None:
    """The recorded run worker: PID and start time."""
    pid, started = run.tags.get(PID_TAG), run.tags.get(STARTED_TAG)
    if not pid or not started:
        return None
    return int(pid), float(started)


__all__ = ["PID_TAG", "ProcessRunLauncher", "cancel_orphaned_run"]
