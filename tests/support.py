"""Small helpers shared by tests."""

from __future__ import annotations

import os

from dagster import DagsterEventType, DagsterInstance


def engine_messages(instance: DagsterInstance, run_id: str) -> list[str]:
    """The messages of a run's engine events, in order."""
    records = instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
    return [r.dagster_event.message or "" for r in records if r.dagster_event]


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
