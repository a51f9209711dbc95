"""No stale result on Kubernetes tenants, emulated and real (tests/checkpoint/reruns.py).

The step processes run as the pods' containers; the checkpoint store is a folder of this
machine, which every node of both targets shares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance
from test_k8s_executor_e2e import executor_config

from tests.checkpoint import reruns
from tests.plane_fixtures import TENANT_TARGETS

# emulator or controlplane: each target parameter carries its marker (tests/plane_fixtures.py)
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def checkpoints(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    reruns.use_checkpoints(monkeypatch, tmp_path)


@pytest.mark.slow
def test_new_data_recomputes_and_a_failed_run_resumes_on_reexecution(
    cluster: Any, tmp_path: Path
) -> None:
    with DagsterInstance.get() as instance:
        reruns.new_data_recomputes_and_a_failed_run_resumes_on_reexecution(
            instance, executor_config(cluster), tmp_path
        )


@pytest.mark.parametrize("cluster", TENANT_TARGETS, indirect=True)
@pytest.mark.slow
def test_a_preempted_attempt_resumes(cluster: Any, tmp_path: Path) -> None:
    with DagsterInstance.get() as instance:
        reruns.a_preempted_attempt_resumes(instance, executor_config(cluster), tmp_path)
