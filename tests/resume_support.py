"""A run whose run worker a test SIGKILLs and resumes as Dagster's run monitoring does: the
run worker is a real `dagster api execute_run` process, and the resumed one a real `dagster api
resume_run` process (what a resuming run launcher starts). The jobs are `resume_pipelines`."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._grpc.types import ExecuteRunArgs, ResumeRunArgs
from dagster_shared.serdes import serialize_value

from k8s_ai_orchestrator.testing.kube.emulator import wait_until
from tests.support import engine_messages

HERE = Path(__file__).parent
REPO = ReconstructableRepository.for_module("resume_pipelines", "defs", working_directory=str(HERE))


class RunWorker:
    """A run of `job` started as its own `dagster api execute_run` process."""

    def __init__(self, instance: DagsterInstance, job: str, run_config: dict[str, Any]) -> None:
        self.instance = instance
        self.recon = REPO.get_reconstructable_job(job)
        self.run = instance.create_run_for_job(
            job_def=self.recon.get_definition(),
            run_config=run_config,
            job_code_origin=self.recon.get_python_origin(),
        )
        self.process = self._start(
            "execute_run",
            ExecuteRunArgs(self.recon.get_python_origin(), self.run.run_id, instance.get_ref()),
        )

    def _start(self, command: str, args: Any) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "dagster", "api", command, serialize_value(args)]
        return subprocess.Popen(argv, cwd=HERE, stdout=subprocess.DEVNULL)

    def started(self, folder: Path) -> None:
        """Wait until a step of `resume_pipelines` has counted its execution in `folder` (or
        the run worker has exited, which fails here with its messages)."""
        executions = folder / "executions"
        wait_until(lambda: executions.exists() or self.process.poll() is not None, 120, 0.1)
        assert executions.exists(), self.messages()

    def terminate(self) -> None:
        """Terminate the run as Dagster does (SIGINT to its run worker); it ends canceled
        (or failed, when a step's cancellation is reported as its failure)."""
        self.process.send_signal(signal.SIGINT)
        self.process.wait(120)
        assert self.status() in (DagsterRunStatus.CANCELED, DagsterRunStatus.FAILURE)

    def kill(self) -> None:
        """SIGKILL the run worker, as a node drain or an OOM of its pod does."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def resume(self) -> None:
        """Start a new run worker that resumes the run (what run monitoring does)."""
        args = ResumeRunArgs(
            self.recon.get_python_origin(), self.run.run_id, self.instance.get_ref()
        )
        self.process = self._start("resume_run", args)

    def reattached(self, timeout_s: float = 120) -> str:
        """Wait for the resumed run worker's "Reattached to step ..." event; its message."""

        def found() -> str | None:
            return next((m for m in self.messages() if m.startswith("Reattached")), None)

        return str(wait_until(found, timeout_s, 0.1))

    def release(self, folder: Path) -> None:
        """Let the steps of `resume_pipelines` go on, then wait for the run to succeed."""
        (folder / "release").touch()
        assert self.process.wait(180) == 0
        assert self.status() == DagsterRunStatus.SUCCESS

    def resumes_from_checkpoint(self, folder: Path) -> None:
        """Resume the run once `resumable` saved and stopped while no run worker watched: the
        run succeeds, and the step's next attempt (launched as attempt 2) resumed from the
        checkpoint its first one saved (checked)."""
        self.resume()
        assert self.process.wait(180) == 0, self.messages()
        assert self.status() == DagsterRunStatus.SUCCESS
        first, second = (folder / "executions").read_text().splitlines()
        assert first == "resumable attempt 0 from 0"
        assert second.startswith("resumable attempt 1 from ") and int(second.split()[-1]) >= 5
        launches = [m for m in self.messages() if m.startswith("Launching step 'resumable'")]
        assert len(launches) == 2 and "(attempt 2)" in launches[1], launches

    def taken_over_mid_gang(self, folder: Path, ranks: int = 2) -> str:
        """With every rank of `gang_tally` running: kill the run worker, resume it, release
        the ranks once it has reattached, wait for the run to succeed; the "Reattached"
        message. The ranks must each have run once (checked)."""
        executions = folder / "executions"

        def every_rank_runs() -> bool:
            return executions.exists() and len(executions.read_text().splitlines()) == ranks

        wait_until(lambda: every_rank_runs() or self.process.poll() is not None, 180, 0.2)
        assert every_rank_runs(), self.messages()
        self.kill()
        self.resume()
        reattached = self.reattached()
        self.release(folder)
        expected = [f"rank {rank} attempt 0" for rank in range(ranks)]
        assert sorted(executions.read_text().splitlines()) == expected
        return reattached

    def messages(self) -> list[str]:
        return engine_messages(self.instance, self.run.run_id)

    def summary(self, step: str) -> tuple[float, int]:
        """The step's summary event: the CPU-seconds it reserved over how many attempts."""
        (line,) = [m for m in self.messages() if m.startswith(f"Step '{step}' reserved")]
        found = re.search(r"reserved ([0-9.]+) CPU-s, .* over (\d+) attempt", line)
        assert found, line
        return float(found[1]), int(found[2])

    def status(self) -> DagsterRunStatus:
        run = self.instance.get_run_by_id(self.run.run_id)
        assert run is not None
        return run.status

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


@pytest.fixture
def run_worker(dagster_home: Path) -> Iterator[Any]:
    workers: list[RunWorker] = []

    def start(job: str, run_config: dict[str, Any]) -> RunWorker:
        worker = RunWorker(instance, job, run_config)
        workers.append(worker)
        return worker

    with DagsterInstance.get() as instance:
        yield start
        for worker in workers:
            worker.stop()
