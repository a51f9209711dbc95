"""No stale result on Slurm (`backend: slurm`, tests/checkpoint/reruns.py), each version over
each transport (conftest.py's `versioned_cluster` and `executor_slurm`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance

from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster
from tests.checkpoint import reruns

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_pairs, pytest.mark.timeout(300)]


@pytest.fixture
def cluster(versioned_cluster: LocalSlurmCluster) -> LocalSlurmCluster:
    return versioned_cluster


@pytest.fixture
def executor(
    executor_slurm: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Any:
    reruns.use_checkpoints(monkeypatch, tmp_path)
    return {"backend": "slurm", "slurm": executor_slurm}


def test_new_data_recomputes_and_a_failed_run_resumes_on_reexecution(
    instance: DagsterInstance, executor: Any, tmp_path: Path
) -> None:
    reruns.new_data_recomputes_and_a_failed_run_resumes_on_reexecution(instance, executor, tmp_path)


def test_a_preempted_attempt_resumes(
    instance: DagsterInstance, executor: Any, tmp_path: Path
) -> None:
    reruns.a_preempted_attempt_resumes(instance, executor, tmp_path)
