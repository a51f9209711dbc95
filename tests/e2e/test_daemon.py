"""Runs started by a real `dagster-daemon`: the example's sensor and an every-minute schedule.

One daemon serves both tests. It loads two code locations: `example_project.definitions`
(the example's real `new_scenes` sensor) and `tests.e2e.every_minute` (the example's job on
an every-minute cron, since the example's own schedule fires at 02:00). Both instigators are
started with the `dagster sensor start` / `dagster schedule start` commands a user would type;
runs go through the default QueuedRunCoordinator, which the daemon dequeues.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus
from dagster._core.scheduler.instigation import InstigatorType, TickStatus

from example_project.scenes import drop_scene
from k8s_ai_orchestrator.report import REPORT_TAG
from tests.support import engine_messages

from .e2e_support import (
    ROOT,
    ExampleEnv,
    Service,
    Services,
    example_env,
    finished_run,
    wait_until,
)
from .every_minute import SCHEDULE_NAME

pytestmark = [pytest.mark.daemon, pytest.mark.timeout(420)]

BIN = Path(sys.executable).parent
EXAMPLE = ["-m", "example_project.definitions"]
EVERY_MINUTE = ["-m", "tests.e2e.every_minute"]
CLI_TIMEOUT_S = 120
TICK_TIMEOUT_S = 120
RUN_TIMEOUT_S = 240


@dataclass(frozen=True)
class DaemonWorld:
    example: ExampleEnv
    daemon: Service
    instance: DagsterInstance


def _start_instigators(example: ExampleEnv) -> None:
    """`dagster sensor start` and `dagster schedule start`, as a user would run them."""
    with example.instance():
        pass  # create the instance's storage before two commands open it at once
    commands = [
        [str(BIN / "dagster"), "sensor", "start", "new_scenes", *EXAMPLE],
        [str(BIN / "dagster"), "schedule", "start", SCHEDULE_NAME, *EVERY_MINUTE],
    ]
    procs = [
        subprocess.Popen(
            c, cwd=ROOT, env=example.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for c in commands
    ]
    for command, proc in zip(commands, procs, strict=True):
        try:
            out, _ = proc.communicate(timeout=CLI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        assert proc.returncode == 0, f"{' '.join(command[1:4])} failed:\n{out.decode()[-3000:]}"


@pytest.fixture(scope="module")
def daemon_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonWorld]:
    example = example_env(tmp_path_factory.mktemp("daemon"), with_daemon=True)
    services = Services()
    try:
        _start_instigators(example)
        daemon = services.start(
            "dagster-daemon",
            [str(BIN / "dagster-daemon"), "run", *EXAMPLE, *EVERY_MINUTE],
            example.env,
            example.logs / "daemon.log",
        )
        with example.instance() as instance:
            yield DaemonWorld(example, daemon, instance)
    finally:
        services.stop_all()


def _sensor_skipped_once(instance: DagsterInstance, name: str) -> bool | None:
    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.instigator_name != name:
            continue
        ticks = instance.get_ticks(
            state.instigator_origin_id, state.selector_id, statuses=[TickStatus.SKIPPED]
        )
        return True if ticks else None
    return None


def _assert_ran_through_ai_executor(instance: DagsterInstance, run: DagsterRun) -> None:
    assert run.status is DagsterRunStatus.SUCCESS, f"run {run.run_id} ended {run.status}"
    launches = [m for m in engine_messages(instance, run.run_id) if m.startswith("Launching")]
    assert "Launching step 'mosaic' on local with xl: 72 CPU / 450Gi (attempt 1)" in launches
    assert all(m.endswith("(attempt 1)") for m in launches)  # each step launched once


def test_a_scene_landing_in_the_inbox_makes_the_sensor_start_a_run_that_succeeds(
    daemon_world: DaemonWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    wait_until(
        lambda: _sensor_skipped_once(daemon_world.instance, "new_scenes"),
        timeout_s=TICK_TIMEOUT_S,
        what="the new_scenes sensor to tick on an empty inbox",
        services=[daemon_world.daemon],
    )
    monkeypatch.setenv("VEGETATION_INBOX", str(daemon_world.example.inbox))
    drop_scene("north", 7)

    run = wait_until(
        lambda: finished_run(daemon_world.instance, **{"dagster/sensor_name": "new_scenes"}),
        timeout_s=RUN_TIMEOUT_S,
        what="the run requested by the new_scenes sensor to finish",
        services=[daemon_world.daemon],
    )
    assert run.tags["trigger"] == "new_scenes"
    assert run.tags["scenes"] == "north-000007.json"
    assert run.job_name == "vegetation_risk"
    _assert_ran_through_ai_executor(daemon_world.instance, run)


def test_a_schedule_fires_under_the_daemon_and_its_run_succeeds(daemon_world: DaemonWorld) -> None:
    run = wait_until(
        lambda: finished_run(daemon_world.instance, **{"dagster/schedule_name": SCHEDULE_NAME}),
        timeout_s=RUN_TIMEOUT_S,
        what=f"the run fired by {SCHEDULE_NAME} at the next minute to finish",
        services=[daemon_world.daemon],
    )
    assert run.tags["trigger"] == "every_minute"
    assert run.job_name == "vegetation_risk"
    _assert_ran_through_ai_executor(daemon_world.instance, run)


def test_the_run_report_sensor_tags_a_finished_run_with_its_report(
    daemon_world: DaemonWorld,
) -> None:
    run = wait_until(
        lambda: finished_run(daemon_world.instance, **{"dagster/schedule_name": SCHEDULE_NAME}),
        timeout_s=RUN_TIMEOUT_S,
        what=f"the run fired by {SCHEDULE_NAME} to finish",
        services=[daemon_world.daemon],
    )
    tags = wait_until(
        lambda: _with_report_tags(daemon_world.instance.get_run_by_id(run.run_id)),
        timeout_s=TICK_TIMEOUT_S,
        what=f"the run report sensor to tag run {run.run_id}",
        services=[daemon_world.daemon],
    )
    html, png = Path(tags[REPORT_TAG]), Path(tags[REPORT_TAG + "_png"])
    assert html.parent == daemon_world.example.reports
    assert "mosaic" in html.read_text(encoding="utf-8")
    assert png.read_bytes().startswith(b"\x89PNG")


def _with_report_tags(run: DagsterRun | None) -> Mapping[str, str] | None:
    return run.tags if run is not None and REPORT_TAG in run.tags else None
