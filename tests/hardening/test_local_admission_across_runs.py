"""The local backend admits machine-wide: concurrent runs of one instance share its capacity.

Two run workers (two `execute_job` processes on one temporary DAGSTER_HOME) each have a step
needing 2 CPU on a machine configured with 2 CPU. Each step records its own start and end;
the test asserts their order, never a duration.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance

ROOT = Path(__file__).parents[2]
TWO_CPU_MACHINE = {"local": {"cpus": 2, "memory": "4Gi"}}


def _start_run(job: str, executor: dict[str, object]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.local.run_job", job, json.dumps(executor)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def _finish(run: subprocess.Popen[str]) -> dict[str, object]:
    out, _ = run.communicate(timeout=580)
    assert run.returncode == 0, f"run worker exited with {run.returncode}"
    return json.loads(out.strip().splitlines()[-1])


def _spans(out: Path) -> dict[str, dict[str, float]]:
    spans: dict[str, dict[str, float]] = {}
    for line in (out / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        spans.setdefault(event["name"], {})[event["phase"]] = event["t"]
    return spans


def _engine_messages(instance: DagsterInstance, run_id: str) -> list[str]:
    return [
        r.dagster_event.message or ""
        for r in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
        if r.dagster_event
    ]


def _ledger_entries(dagster_home: Path) -> list[object]:
    """What the ledger file itself holds (no reclaiming of dead entries on the way)."""
    (ledger,) = (dagster_home / "k8s_ai_local").glob("admission-*.json")
    raw = json.loads(ledger.read_text())
    return [*raw["claims"], *raw["waiters"]]


@pytest.mark.timeout(600)  # two run workers and their step processes on a loaded machine
@pytest.mark.slow
def test_two_runs_with_a_two_cpu_step_on_a_two_cpu_machine_run_them_one_after_the_other(
    instance: DagsterInstance, dagster_home: Path, test_out: Path
) -> None:
    runs = [_start_run("machine_wide", TWO_CPU_MACHINE) for _ in range(2)]
    results = [_finish(run) for run in runs]

    assert all(r["success"] for r in results)
    spans = _spans(test_out)
    first, second = sorted(spans, key=lambda run_id: spans[run_id]["start"])
    assert {first, second} == {r["run_id"] for r in results}
    assert spans[first]["end"] <= spans[second]["start"]
    waited = _engine_messages(instance, second)
    assert any(
        "waiting for local capacity" in m
        and f"other runs on this machine hold 'two_cpu_beside_another_run' of run {first[:8]}" in m
        for m in waited
    ), waited
    assert _ledger_entries(dagster_home) == []
