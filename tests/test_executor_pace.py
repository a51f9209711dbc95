"""ai_executor's wait between passes: short after activity, doubling while the run is quiet,
cut short by a backend's change feed; and when an attempt is looked at without a change."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from dagster._core.execution.retries import RetryMode

from k8s_ai_orchestrator.backends.base import Capabilities, JobHandle, StepStatus
from k8s_ai_orchestrator.errors import ConfigError
from k8s_ai_orchestrator.executor.pace import Pace
from k8s_ai_orchestrator.executor.runner import AIExecutor
from k8s_ai_orchestrator.executor.step_handler import AIStepHandler
from k8s_ai_orchestrator.launch.lifecycle import LOG_MAX_S, RUNNING_SWEEP_S, Attempt
from k8s_ai_orchestrator.launch.settings import ExecutorSettings


def executor(**config: object) -> AIExecutor:
    settings = ExecutorSettings.from_config(config)
    return AIExecutor(AIStepHandler(settings), retries=RetryMode.ENABLED, settings=settings)


def pace_of(**config: object) -> Pace:
    settings = executor(**config).settings
    return Pace(settings.poll_interval_s, settings.idle_poll_interval_s)


def test_passes_slow_down_to_the_idle_interval_while_nothing_happens() -> None:
    quiet = pace_of(poll_interval_s=0.1, idle_poll_interval_s=0.5)

    assert [quiet.next_wait() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]


def test_activity_makes_the_next_wait_the_shortest() -> None:
    busy = pace_of(poll_interval_s=0.1)
    for _ in range(6):
        busy.next_wait()
    busy.busy()

    assert busy.next_wait() == 0.1


def test_by_default_a_quiet_run_is_read_about_once_a_second() -> None:
    default = pace_of()
    waits = [default.next_wait() for _ in range(8)]

    assert waits[0] == 0.1 and waits[-1] == 1.0


def test_an_idle_interval_below_the_poll_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"idle_poll_interval_s=0.05 is not allowed.*>= 0.1"):
        executor(idle_poll_interval_s=0.05)


def test_a_backends_change_ends_the_wait_between_passes() -> None:
    handler = executor().handler
    threading.Timer(0.05, handler.attention.on_change, args=("job-1",)).start()
    ended = threading.Event()

    def wait() -> None:
        handler.attention.wait(30)
        ended.set()

    thread = threading.Thread(target=wait)
    thread.start()
    assert ended.wait(10)
    thread.join()


def caps(*, feed: bool, logs: bool = False) -> Capabilities:
    """A backend's capabilities: a change feed or not, log streaming or not."""
    present: Any = object()
    return Capabilities(changes=present if feed else None, logs=present if logs else None)


def attempt(**fields: object) -> Attempt:
    return Attempt(JobHandle("kubernetes", "j-1", "train"), launched_at=0.0, **fields)  # type: ignore[arg-type]


def test_with_a_change_feed_a_quiet_running_attempt_is_looked_at_only_by_the_sweep() -> None:
    running = attempt()
    running.observe(StepStatus.running("node-a"), now=1.0)
    running.logs_read_at, running.log_wait_s = 1.0, LOG_MAX_S

    running.schedule(1.0, caps(feed=True, logs=True), measured=False)

    assert running.next_check_at == 1.0 + RUNNING_SWEEP_S


def test_without_a_change_feed_or_while_measured_an_attempt_is_looked_at_every_pass() -> None:
    running = attempt()
    running.observe(StepStatus.running("node-a"), now=1.0)

    running.schedule(1.0, caps(feed=False), measured=False)
    assert running.next_check_at == 1.0
    running.schedule(1.0, caps(feed=True), measured=True)
    assert running.next_check_at == 1.0


def test_a_pending_attempt_is_looked_at_when_its_timeout_ends_at_the_latest() -> None:
    pending = attempt(timeout_s=0.5)
    pending.observe(StepStatus.pending("Unschedulable", "0/2 nodes"), now=0.1)

    pending.schedule(0.1, caps(feed=True), measured=False)

    assert pending.next_check_at == pytest.approx(0.501)


def test_a_quiet_log_is_read_less_and_less_often_and_a_busy_one_every_second() -> None:
    log = attempt()
    waits = []
    for _ in range(7):
        log.logs_read(anything_new=False)
        waits.append(log.log_wait_s)
    log.logs_read(anything_new=True)

    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert log.log_wait_s == 1.0
