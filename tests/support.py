"""Small helpers shared by tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance

from tests.requirements import in_ci


def engine_messages(instance: DagsterInstance, run_id: str) -> list[str]:
    """The messages of a run's engine events, in order."""
    records = instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
    return [r.dagster_event.message or "" for r in records if r.dagster_event]


def update_golden(path: Path, text: str) -> None:
    """With UPDATE_GOLDEN set, write `text` to the golden file `path` and fail the test, so an
    update run is never green; CI (CI=true) refuses the variable outright."""
    if not os.environ.get("UPDATE_GOLDEN"):
        return
    if in_ci():
        pytest.fail("UPDATE_GOLDEN is set under CI=true: update golden files locally and commit")
    rewritten = not path.exists() or path.read_text() != text
    path.write_text(text)
    what = "rewrote" if rewritten else "left unchanged"
    pytest.fail(f"UPDATE_GOLDEN: {what} {path}; review it, then run again without UPDATE_GOLDEN")


def pids_alive(pids: list[int]) -> list[int]:
    """The pids among `pids` that still exist."""
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive


class FakeClock:
    """A monotonic clock that moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
