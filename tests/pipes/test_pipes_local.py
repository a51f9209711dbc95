"""AICompute on the local backend: a program outside Dagster, sized, watched and relaunched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance

from k8s_ai_orchestrator import AICompute, ComputeSpecError
from k8s_ai_orchestrator.checkpoint.keys import CheckpointKey
from k8s_ai_orchestrator.errors import ConfigError, TenantAccessError
from k8s_ai_orchestrator.report.costs import load_cost_entries
from tests.pipes.pipes_support import (
    attempt_rows,
    check_evaluation,
    log_messages,
    materialization_metadata,
    materialize_tiles,
)

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).parents[2]
LOCAL = {"cpus": 2, "memory": "2Gi"}


def local_ai(**config: object) -> AICompute:
    return AICompute(local=LOCAL, poll_interval_s=0.05, **config)  # type: ignore[arg-type]


def wait_for(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_program_reports_its_materialization_metadata_and_asset_check(tmp_path: Path) -> None:
    result = materialize_tiles(
        local_ai(), {"cpu": 0.5, "memory": "256Mi"}, {"TILES": "3"}, f"file://{tmp_path}"
    )

    assert result.success
    metadata = materialization_metadata(result)
    assert (metadata["tiles"], metadata["backend"], metadata["attempts"]) == (3, "local", 1)
    assert check_evaluation(result) == ("tiles_complete", True)
    (row,) = attempt_rows(metadata)
    assert row["outcome"] == "Succeeded" and row["memory"] == "256Mi" and row["wall_seconds"] > 0


def test_a_program_leaves_no_log_folder_or_message_file_in_the_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # materialize runs in this process
    result = materialize_tiles(
        local_ai(), {"cpu": 0.5, "memory": "256Mi"}, {"TILES": "1"}, f"file://{tmp_path}"
    )
    assert result.success
    left = sorted(p.name for p in temp.iterdir())
    assert left == [f"k8s_ai_local-{os.getuid()}"]  # only the machine-wide admission ledger


def test_an_undersized_program_succeeds_after_memory_escalation(
    tmp_path: Path, instance: DagsterInstance
) -> None:
    result = materialize_tiles(
        local_ai(),
        {"cpu": 0.5, "memory": "64Mi"},
        {"NEED_MIB": "150"},
        f"file://{tmp_path}",
        instance=instance,
    )

    assert result.success
    metadata = materialization_metadata(result)
    assert metadata["memory_tried"] == "64Mi → 128Mi → 256Mi"
    assert metadata["reasons"] == "OOMKilled, OOMKilled" and metadata["attempt"] == 2
    assert [r["outcome"] for r in attempt_rows(metadata)] == ["OOMKilled", "OOMKilled", "Succeeded"]
    logs = log_messages(instance, result.run_id)
    assert (
        "Relaunching: step 'tiles-pipes' was OOMKilled with 64Mi; relaunching with "
        "64Mi → 128Mi (attempt 2/4)" in logs
    )


def test_a_program_oomkilled_at_every_size_fails_naming_the_sizes_tried(tmp_path: Path) -> None:
    ai = local_ai(oom_escalation={"max_attempts": 2})
    result = materialize_tiles(
        ai, {"cpu": 0.5, "memory": "64Mi"}, {"NEED_MIB": "400"}, f"file://{tmp_path}"
    )

    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.cause.message  # type: ignore[union-attr]
    assert "PipesProgramError: step 'tiles-pipes' was OOMKilled at every size tried " in message
    assert "(64Mi, 128Mi); oom_escalation allows 2 attempts" in message


def test_a_preempted_program_is_relaunched_and_resumes_from_its_checkpoint(
    tmp_path: Path, instance: DagsterInstance
) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    folder = ckpt / CheckpointKey(("tiles",)).relative_path()
    env = {"TILES": "8", "TILE_S": "0.3", "PIPES_TEST_OUT": str(out)}

    def preempt_after_two_tiles() -> None:
        wait_for(lambda: (out / "pid-0").exists() and _tiles_done(folder) >= 2)
        os.kill(int((out / "pid-0").read_text()), signal.SIGTERM)

    preempter = threading.Thread(target=preempt_after_two_tiles)
    preempter.start()
    result = materialize_tiles(
        local_ai(prices={"cpu_hour": 3600.0, "memory_gib_hour": 0.005}),
        {"cpu": 0.5, "memory": "256Mi"},
        env,
        f"file://{ckpt}",
        checkpointed=True,
        instance=instance,
    )
    preempter.join()

    assert result.success
    metadata = materialization_metadata(result)
    assert metadata["attempt"] == 1 and metadata["resumed_at"] >= 2 and metadata["tiles"] == 8
    assert metadata["reasons"] == "Preempted" and metadata["preemptions"] == 1
    # the materialization's cost: both attempts; interrupted waste is what the relaunch
    # redid: the first attempt's work since its last save (under a tile of 0.3 s, and the
    # watcher's look at its end), not the whole first attempt
    assert 0 < metadata["waste_interrupted_cost"] < metadata["cost"]
    first = attempt_rows(metadata)[0]
    redone = metadata["waste_interrupted_cpu_seconds"]
    assert 0 < redone <= 0.5 * (0.3 + 0.2) and redone < first["cpu_seconds"], (redone, first)
    assert metadata["waste_oom_killed_cost"] == 0 and metadata["currency"] == "USD"
    # `k8s-ai cost` charges it to the asset, read back from the instance
    (entry,) = load_cost_entries(instance, datetime.now(UTC) - timedelta(hours=1))
    assert (entry.step, entry.asset, entry.backend) == ("tiles › tiles-pipes", "tiles", "local")
    assert (entry.cost, entry.waste_cost["interrupted"]) == (
        metadata["cost"],
        metadata["waste_interrupted_cost"],
    )
    logs = log_messages(instance, result.run_id)
    assert any(
        m.startswith("Relaunching: step 'tiles-pipes' was Preempted; relaunching at the same size")
        for m in logs
    )
    # the program succeeded: AICompute cleared its key, the one open(context) reads
    assert "CheckpointStore.open(context) loads None" in logs
    assert not (folder / "manifest.json").exists()


@pytest.mark.slow
def test_terminating_the_run_stops_the_program(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = {"TILES": "100", "TILE_S": "1", "PIPES_TEST_OUT": str(out)}
    config = {"local": LOCAL, "poll_interval_s": 0.05}
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.pipes.terminate_run", json.dumps(config), json.dumps(env)],
        cwd=ROOT,
    )
    wait_for(lambda: (out / "pid-0").exists())
    program = int((out / "pid-0").read_text())

    run.send_signal(signal.SIGINT)

    assert run.wait(timeout=60) != 0
    wait_for(lambda: not _alive(program), timeout_s=10)


@pytest.mark.parametrize(
    ("size", "config", "error", "text"),
    [
        (
            {"memory": "512m"},
            {},
            ComputeSpecError,
            "step 'tiles-pipes': memory='512m' is not allowed",
        ),
        (
            {"memory": "8Gi"},
            {"oom_escalation": {"max_memory": "4Gi"}},
            ConfigError,
            "step 'tiles-pipes' declares 8Gi of memory, more than oom_escalation.max_memory=4Gi",
        ),
        (
            {"cpu": 1, "tenant": "team-c"},
            {"allowed_tenants": ["team-a"]},
            TenantAccessError,
            "step 'tiles-pipes' asks for tenant 'team-c', which this run may not use",
        ),
    ],
)
def test_bad_sizes_are_refused_before_anything_is_submitted(
    tmp_path: Path, size: dict[str, object], config: dict[str, object], error: type, text: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = materialize_tiles(
        local_ai(**config), size, {"PIPES_TEST_OUT": str(out)}, f"file://{tmp_path}"
    )

    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    cause = failure.step_failure_data.error.cause  # type: ignore[union-attr]
    assert cause.cls_name == error.__name__ and text in cause.message
    assert list(out.iterdir()) == []


def test_a_program_over_its_budget_is_refused_from_its_last_runs_figures(
    tmp_path: Path, instance: DagsterInstance
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env, size = {"TILES": "2", "PIPES_TEST_OUT": str(out)}, {"cpu": 0.5, "memory": "256Mi"}
    prices = {"cpu_hour": 3600.0, "currency": "EUR"}  # 1 EUR per CPU-second

    def materialize_with(budget: dict[str, float]) -> Any:
        ai = local_ai(prices=prices, budget=budget)
        return materialize_tiles(ai, size, env, f"file://{tmp_path}", instance=instance)

    first = materialize_with({"max_cost_per_step": 1e6})
    assert first.success  # no earlier run: nothing to estimate from
    wall = materialization_metadata(first)["wall_seconds"]
    programs_run = len(list(out.iterdir()))

    second = materialize_with({"max_cost_per_step": 0.01})
    assert not second.success
    (failure,) = [e for e in second.all_events if e.is_step_failure]
    cause = failure.step_failure_data.error.cause  # type: ignore[union-attr]
    assert cause.cls_name == "BudgetError"
    assert (
        f"program 'tiles-pipes': estimated at {0.5 * wall:.2f} EUR, over budget.max_cost_per_step"
        f" 0.01 EUR: the longest of its last 1 run(s) took {wall:.0f} s (run {first.run_id[:8]})"
    ) in cause.message
    assert len(list(out.iterdir())) == programs_run  # refused before it was submitted
    with pytest.raises(ConfigError, match="AICompute budget.max_cost_per_run: AICompute checks"):
        local_ai(prices=prices, budget={"max_cost_per_run": 5.0}).settings()


@pytest.mark.parametrize("on_exceeded", ["stop", "warn"])
def test_a_running_program_past_its_cap_is_stopped_or_warned_about(
    tmp_path: Path, instance: DagsterInstance, on_exceeded: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = {"TILES": "8", "TILE_S": "0.3", "PIPES_TEST_OUT": str(out)}
    prices = {"cpu_hour": 3600.0, "currency": "EUR"}  # 0.5 CPU: 0.5 EUR a second
    ai = local_ai(prices=prices, budget={"max_cost_per_step": 0.5, "on_exceeded": on_exceeded})
    result = materialize_tiles(
        ai, {"cpu": 0.5, "memory": "256Mi"}, env, f"file://{tmp_path}", instance=instance
    )

    logs = log_messages(instance, result.run_id)
    said = [m for m in logs if m.startswith("Budget: program 'tiles-pipes' has reserved ")]
    assert sorted(p.name for p in out.glob("pid-*")) == ["pid-0"]  # one attempt, no relaunch
    if on_exceeded == "warn":
        assert result.success
        assert len(said) == 1 and said[0].endswith(
            "past budget.max_cost_per_step 0.50 EUR; it goes on (budget.on_exceeded: warn)"
        )
        return
    assert not result.success and said == []
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    cause = failure.step_failure_data.error.cause  # type: ignore[union-attr]
    assert cause.cls_name == "BudgetError"
    assert "BudgetError: program 'tiles-pipes' has reserved " in cause.message
    assert "past budget.max_cost_per_step 0.50 EUR; stopped at its next checkpoint" in (
        cause.message
    )
    assert not _alive(int((out / "pid-0").read_text()))
    assert not any(m.startswith("Relaunching") for m in logs)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _tiles_done(folder: Path) -> int:
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return 0
    return int(manifest["commits"][0]["progress"])
