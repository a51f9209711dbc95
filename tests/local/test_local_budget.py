"""A running step that passes its budget: warned about, or stopped at its next checkpoint.

Real instance, real step processes on the embedded local backend. The step is
`checkpointed_tiles` (tests/local/jobs.py): ten fast units, then thirty at 0.3 s, saving
after each (about 9 s). At 1 EUR per CPU-second on the local backend, its 1 CPU passes a
5 EUR cap 5 s after its process starts: after its first units even where starting a step
process takes seconds (a loaded machine), well before it ends.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from dagster import DagsterEventType, DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository

from tests.support import engine_messages

JOBS = ReconstructableRepository.for_module(
    "tests.local.jobs", "defs", working_directory=str(Path(__file__).parents[2])
)
PRICES = {"currency": "EUR", "backends": {"local": {"cpu_hour": 3600.0}}}
STEP = "checkpointed_tiles"
CAP_EUR = 5.0


def run(instance: DagsterInstance, on_exceeded: str, cap: str = "max_cost_per_step") -> Any:
    budget = {cap: CAP_EUR, "on_exceeded": on_exceeded}
    executor = {"local": {"cpus": 2}, "prices": PRICES, "budget": budget}
    return execute_job(
        JOBS.get_reconstructable_job("checkpointed_preemption"),
        instance=instance,
        run_config={"execution": {"config": executor}},
        raise_on_error=False,
    )


def tiles_started(out: Path) -> list[int]:
    import json

    lines = (out / "events.jsonl").read_text().splitlines()
    return [e["attempt"] for e in map(json.loads, lines) if e["name"] == "tiles"]


def test_a_step_past_its_cap_is_stopped_at_its_checkpoint_and_fails_with_budget_error(
    instance: DagsterInstance, test_out: Path
) -> None:
    result = run(instance, "stop")

    assert not result.success
    # the run worker's failure decides; the step process's own outcome (its Preempted
    # failure, or a retry request) is in the log too, and ignored
    failures = instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_FAILURE)
    decided = [f for f in failures if f.dagster_event.pid == os.getpid()]  # type: ignore[union-attr]
    assert [f.step_key for f in decided] == [STEP]
    error = decided[0].dagster_event.step_failure_data.error  # type: ignore[union-attr]
    assert error.cls_name == "BudgetError"
    assert f"BudgetError: step '{STEP}' has reserved " in error.message
    assert "past budget.max_cost_per_step 5.00 EUR; stopped at its next checkpoint" in (
        error.message
    )
    # stopped, not relaunched nor retried: one attempt, and its own Preempted outcome ignored
    assert tiles_started(test_out) == [0]
    messages = engine_messages(instance, result.run_id)
    assert any(m.startswith(f"Ignored the outcome step '{STEP}' wrote from") for m in messages)
    assert not any(m.startswith("Relaunching") for m in messages)
    # it saved as it stopped: a later run resumes there, and its cost counts what it reserved
    saved = list((test_out / "checkpoints").rglob("*"))
    assert saved, "the stopped step left its checkpoint"
    [summary] = [m for m in messages if m.startswith(f"Step '{STEP}' reserved")]
    cost = float(summary.rsplit("cost ", 1)[1].split()[0])
    assert CAP_EUR < cost < CAP_EUR + 4.0


def test_a_step_past_its_cap_is_warned_about_once_and_goes_on(
    instance: DagsterInstance, test_out: Path
) -> None:
    result = run(instance, "warn")

    assert result.success
    warnings = [
        r
        for r in instance.all_logs(result.run_id, of_type=DagsterEventType.ENGINE_EVENT)
        if (r.dagster_event.message or "").startswith("Budget: step")  # type: ignore[union-attr]
    ]
    assert len(warnings) == 1
    assert warnings[0].level == logging.WARNING
    message = warnings[0].dagster_event.message  # type: ignore[union-attr]
    assert f"Budget: step '{STEP}' has reserved " in message
    assert message.endswith(
        "past budget.max_cost_per_step 5.00 EUR; it goes on (budget.on_exceeded: warn)"
    )
    assert tiles_started(test_out) == [0]


def test_a_run_past_its_run_cap_is_warned_about_once_and_goes_on(
    instance: DagsterInstance, test_out: Path
) -> None:
    result = run(instance, "warn", cap="max_cost_per_run")

    assert result.success
    messages = [m for m in engine_messages(instance, result.run_id) if m.startswith("Budget: step")]
    assert len(messages) == 1
    assert f"Budget: step '{STEP}' the run has reserved " in messages[0]
    assert messages[0].endswith(
        "past budget.max_cost_per_run 5.00 EUR; it goes on (budget.on_exceeded: warn)"
    )
    assert tiles_started(test_out) == [0]
