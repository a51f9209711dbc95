"""ai_executor's wait between passes: short after activity, doubling while the run is quiet."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from dagster._core.execution.retries import RetryMode
from dagster._core.executor.step_delegating import StepDelegatingExecutor

from k8s_ai_orchestrator.errors import ConfigError
from k8s_ai_orchestrator.executor.definition import AIExecutor
from k8s_ai_orchestrator.executor.step_handler import AIStepHandler
from k8s_ai_orchestrator.launch.settings import ExecutorSettings


def executor(**config: object) -> AIExecutor:
    settings = ExecutorSettings.from_config(config)
    return AIExecutor(AIStepHandler(settings), retries=RetryMode.ENABLED, settings=settings)


def test_passes_slow_down_to_the_idle_interval_while_nothing_happens() -> None:
    quiet = executor(poll_interval_s=0.1, idle_poll_interval_s=0.5)

    assert [quiet._sleep_seconds for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]


def test_an_event_from_a_step_makes_the_next_wait_the_shortest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    busy = executor(poll_interval_s=0.1)
    for _ in range(6):
        _ = busy._sleep_seconds
    event = SimpleNamespace(step_key=None, is_step_failure=False, is_step_up_for_retry=False)
    monkeypatch.setattr(StepDelegatingExecutor, "_pop_events", lambda *_a: [event])

    assert busy._pop_events(None, "run", set()) == [event]
    assert busy._sleep_seconds == 0.1


def test_by_default_a_quiet_run_is_read_about_once_a_second() -> None:
    default = executor()
    waits = [default._sleep_seconds for _ in range(8)]

    assert waits[0] == 0.1 and waits[-1] == 1.0


def test_an_idle_interval_below_the_poll_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"idle_poll_interval_s=0.05 is not allowed.*>= 0.1"):
        executor(idle_poll_interval_s=0.05)
