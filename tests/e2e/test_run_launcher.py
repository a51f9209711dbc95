"""`ProcessRunLauncher` under a real `dagster-daemon` with run monitoring: a run worker killed
with SIGKILL mid-run is seen gone and the run is resumed; the new run worker reattaches to the
step that was running, which runs once. Terminating a run whose run worker is gone stops its
step processes."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus
from dagster._core.definitions.reconstruct import ReconstructableRepository

from k8s_ai_orchestrator.backends.local.ledger import AdmissionLedger
from k8s_ai_orchestrator.executor.run_launcher import PID_TAG
from k8s_ai_orchestrator.proctree import process_alive
from tests.support import engine_messages

from .e2e_support import Service, Services, wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.timeout(300)]

BIN = Path(sys.executable).parent
TESTS = Path(__file__).parents[1]
REPO = ReconstructableRepository.for_module(
    "resume_pipelines", "defs", working_directory=str(TESTS)
)
INSTANCE_YAML = """telemetry:
  enabled: false
run_launcher:
  module: k8s_ai_orchestrator
  class: ProcessRunLauncher
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
run_monitoring:
  enabled: true
  max_resume_run_attempts: 2
  poll_interval_seconds: 1
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.fixture
def instance(home: Path) -> Iterator[DagsterInstance]:
    with DagsterInstance.get() as instance:
        yield instance


def launch(instance: DagsterInstance, folder: Path) -> DagsterRun:
    """A run of `tally_job` launched through the instance's run launcher."""
    recon = REPO.get_reconstructable_job("tally_job")
    run = instance.create_run_for_job(
        job_def=recon.get_definition(),
        run_config={
            "execution": {"config": {"backend": "local"}},
            "ops": {"tally": {"config": {"dir": str(folder)}}},
        },
        job_code_origin=recon.get_python_origin(),
    )
    instance.launch_run(run.run_id, workspace=None)  # type: ignore[arg-type]
    return run


def worker_pid(instance: DagsterInstance, run: DagsterRun) -> int:
    found = instance.get_run_by_id(run.run_id)
    assert found is not None
    return int(found.tags[PID_TAG])


def status(instance: DagsterInstance, run: DagsterRun) -> DagsterRunStatus:
    found = instance.get_run_by_id(run.run_id)
    assert found is not None
    return found.status


def started(folder: Path) -> bool | None:
    return True if (folder / "executions").exists() else None


def test_the_daemon_resumes_a_run_whose_run_worker_was_killed_and_the_step_runs_once(
    home: Path, instance: DagsterInstance, tmp_path: Path
) -> None:
    services = Services()
    try:
        env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
        argv = [str(BIN / "dagster-daemon"), "run", "-m", "resume_pipelines", "-d", str(TESTS)]
        daemon: Service = services.start("daemon-resume", argv, env, tmp_path / "daemon.log")
        run = launch(instance, tmp_path)
        wait_until(lambda: started(tmp_path), timeout_s=120, what="the step", services=[daemon])
        first = worker_pid(instance, run)
        os.kill(first, signal.SIGKILL)

        def reattached() -> bool | None:
            messages = engine_messages(instance, run.run_id)
            return True if any(m.startswith("Reattached") for m in messages) else None

        wait_until(reattached, timeout_s=120, what="the resumed run worker", services=[daemon])
        assert worker_pid(instance, run) != first
        (tmp_path / "release").touch()

        def finished() -> DagsterRunStatus | None:
            now = status(instance, run)
            return now if now in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE) else None

        assert wait_until(finished, timeout_s=120, what="the run", services=[daemon]) == (
            DagsterRunStatus.SUCCESS
        )
    finally:
        services.stop_all()
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    messages = engine_messages(instance, run.run_id)
    assert any("Resuming run" in m for m in messages), messages


def test_terminating_a_run_whose_run_worker_is_gone_stops_its_steps(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    run = launch(instance, tmp_path)
    wait_until(lambda: started(tmp_path), timeout_s=120, what="the step")
    (claim,) = [c for c in AdmissionLedger().snapshot().claims if c.run_id == run.run_id]
    os.kill(worker_pid(instance, run), signal.SIGKILL)

    assert instance.run_launcher.terminate(run.run_id)
    assert status(instance, run) == DagsterRunStatus.CANCELED
    gone = f"Run worker of run {run.run_id} is gone; cancelled its steps' attempts on every "
    messages = engine_messages(instance, run.run_id)
    assert any(gone in m and f"(local: {claim.job_id})" in m for m in messages), messages
    assert not process_alive(claim.pid, claim.pid_started)
    assert [c for c in AdmissionLedger().snapshot().claims if c.run_id == run.run_id] == []
    assert not (tmp_path / "release").exists()
