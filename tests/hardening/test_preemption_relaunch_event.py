"""A preempted step that the executor relaunches gets a STEP_UP_FOR_RETRY that reads as one.

The step process runs for real (local backend); the test sends it SIGTERM from outside, as a
node drain or a spot reclaim would.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from dagster import (
    DagsterEventType,
    DagsterInstance,
    JobDefinition,
    build_reconstructable_job,
    execute_job,
    job,
    op,
)

from k8s_ai_orchestrator import ai_executor, compute

HERE = Path(__file__).parent
MARKER_ENV = "PREEMPT_MARKER"


@op(tags=compute(cpu=0.5, memory="256Mi"))
def mosaic() -> int:
    """Announces its pid on the first attempt and waits to be preempted; then succeeds."""
    attempt = int(os.environ.get("K8S_AI_ATTEMPT", "0"))
    if attempt == 0:
        Path(os.environ[MARKER_ENV]).write_text(str(os.getpid()))
        time.sleep(60)
    return attempt


def preemptible_job() -> JobDefinition:
    @job(executor_def=ai_executor)
    def preemptible() -> None:
        mosaic()

    return preemptible


def _preempt_when_announced(marker: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker.exists() and marker.read_text():
            time.sleep(0.5)
            os.kill(int(marker.read_text()), signal.SIGTERM)
            return
        time.sleep(0.05)


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_preempted_step_is_up_for_retry_with_a_relaunch_message(
    instance: DagsterInstance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "preempt-me"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    killer = threading.Thread(target=_preempt_when_announced, args=(marker,))
    killer.start()
    recon = build_reconstructable_job(
        "test_preemption_relaunch_event",
        preemptible_job.__name__,
        reconstructor_working_directory=str(HERE),
    )
    result = execute_job(
        recon,
        instance=instance,
        run_config={"execution": {"config": {"local": {"cpus": 2}}}},
        raise_on_error=False,
    )
    killer.join()

    assert result.success
    retries = [
        r.dagster_event.message or ""
        for r in instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)
        if r.dagster_event
    ]
    assert len(retries) == 1
    assert retries[0].startswith("Relaunch, attempt 2: step 'mosaic' was Preempted")
    assert "resumes from its last checkpoint" in retries[0]
