"""No stale result on the local backend (tests/checkpoint/reruns.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance

from tests.checkpoint import reruns

EXECUTOR = {"local": {"cpus": 2}}


@pytest.fixture(autouse=True)
def checkpoints(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    reruns.use_checkpoints(monkeypatch, tmp_path)


@pytest.mark.slow
def test_new_data_recomputes_and_a_failed_run_resumes_on_reexecution(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    reruns.new_data_recomputes_and_a_failed_run_resumes_on_reexecution(instance, EXECUTOR, tmp_path)


@pytest.mark.slow
def test_a_preempted_attempt_resumes(instance: DagsterInstance, tmp_path: Path) -> None:
    reruns.a_preempted_attempt_resumes(instance, EXECUTOR, tmp_path)
