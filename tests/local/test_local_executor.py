"""ai_executor on the embedded local backend, with a real instance and real step processes."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterEventType, DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository

from k8s_ai_orchestrator.cli import main
from k8s_ai_orchestrator.report.costs import NO_ASSET, load_cost_entries
from tests.support import engine_messages, pids_alive

JOBS = ReconstructableRepository.for_module(
    "tests.local.jobs", "defs", working_directory=str(Path(__file__).parents[2])
)


def run(instance: DagsterInstance, job: str, executor: dict[str, Any]) -> Any:
    config = {"execution": {"config": executor}}
    return execute_job(
        JOBS.get_reconstructable_job(job),
        instance=instance,
        run_config=config,
        raise_on_error=False,
    )


def recorded(out: Path) -> list[dict[str, Any]]:
    path = out / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def spans(out: Path) -> dict[str, tuple[float, float]]:
    starts = {e["name"]: e["t"] for e in recorded(out) if e.get("phase") == "start"}
    ends = {e["name"]: e["t"] for e in recorded(out) if e.get("phase") == "end"}
    return {name: (starts[name], ends[name]) for name in starts}


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def summary_metadata(instance: DagsterInstance, run_id: str, step: str) -> dict[str, Any]:
    """The step's closing engine event's metadata, as plain values."""
    [meta] = [
        {k: v.value for k, v in r.dagster_event.engine_event_data.metadata.items()}
        for r in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
        if (r.dagster_event.message or "").startswith(f"Step '{step}' reserved")
    ]
    return meta


@pytest.mark.slow
def test_two_one_cpu_steps_overlap_and_a_two_cpu_step_runs_alone(instance, test_out):
    result = run(instance, "admission", {"local": {"cpus": 2, "memory": "4Gi"}})
    assert result.success
    s = spans(test_out)
    assert overlaps(s["one_cpu_a"], s["one_cpu_b"])
    assert not overlaps(s["two_cpu"], s["one_cpu_a"])
    assert not overlaps(s["two_cpu"], s["one_cpu_b"])
    messages = engine_messages(instance, result.run_id)
    assert any("Launching step 'two_cpu' on local with 2 CPU / 256Mi" in m for m in messages)
    assert any("waiting for local capacity" in m for m in messages)


def test_a_pipes_command_started_by_a_step_holding_the_machine_runs_in_its_share(
    instance, test_out
):
    result = run(instance, "command_in_a_full_machine", {"local": {"cpus": 2, "memory": "4Gi"}})

    assert result.success
    assert [e["name"] for e in recorded(test_out)] == ["step_running_a_command"]


def test_step_allocating_past_its_limit_fails_as_oom_killed(instance, test_out):
    executor = {"local": {"cpus": 2}, "oom_escalation": {"max_attempts": 1}}
    result = run(instance, "oom", executor)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
    message = failure.step_failure_data.error.message
    assert "OOMKilled" in message
    assert "256Mi" in message and "hog_600mi" in message
    assert "exit code 137" in message or "oom_escalation" in message


@pytest.mark.slow
def test_oom_killed_step_is_relaunched_with_double_memory_until_it_fits(
    instance, test_out, tmp_path, capsys
):
    since = datetime.now(UTC) - timedelta(minutes=1)
    prices = {"cpu_hour": 0.04, "memory_gib_hour": 0.005, "currency": "EUR"}
    result = run(instance, "oom", {"local": {"cpus": 2}, "prices": prices})
    assert result.success
    attempts = [e["attempt"] for e in recorded(test_out) if e["name"] == "hog"]
    assert attempts == [0, 1, 2]  # 256Mi, 512Mi, then 1Gi fits 600Mi
    messages = engine_messages(instance, result.run_id)
    assert any("256Mi → 512Mi" in m for m in messages)
    assert any("512Mi → 1Gi" in m for m in messages)
    # the step's summary: what its three attempts cost, two of them wasted by OOM kills
    [summary] = [m for m in messages if m.startswith("Step 'hog_600mi' reserved")]
    assert "over 3 attempt(s)" in summary and " EUR" in summary
    meta = summary_metadata(instance, result.run_id, "hog_600mi")
    assert 0 < meta["k8s_ai/waste_oom_killed_cost"] < meta["k8s_ai/cost"]
    assert meta["k8s_ai/waste_interrupted_cost"] == 0
    assert meta["k8s_ai/waste_oom_killed_cpu_seconds"] > 0
    # `k8s-ai cost` reads the same figures back from the instance
    (row,) = [e for e in load_cost_entries(instance, since) if e.run_id == result.run_id]
    assert (row.job, row.step, row.asset, row.currency) == ("oom", "hog_600mi", NO_ASSET, "EUR")
    assert row.cost == meta["k8s_ai/cost"]
    assert row.waste_cost["oom_killed"] == meta["k8s_ai/waste_oom_killed_cost"]
    capsys.readouterr()
    assert main(["cost", "--days", "1", "--by", "job,step", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    header, line = printed[0].split(), printed[1].split()
    assert header[:5] == ["job", "step", "currency", "steps", "cost"]
    assert line[:5] == ["oom", "hog_600mi", "EUR", "1", f"{meta['k8s_ai/cost']:.4f}"]
    assert Path(printed[-1]).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_oom_escalation_stops_at_max_memory_with_the_sizes_tried(instance, test_out):
    executor = {"local": {"cpus": 2}, "oom_escalation": {"max_memory": "512Mi"}}
    result = run(instance, "oom", executor)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
    message = failure.step_failure_data.error.message
    assert "256Mi, 512Mi" in message and "compute(memory=...)" in message


def _preempt_when_announced(out: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    marker = out / "preempt-me"
    while time.monotonic() < deadline:
        if marker.exists() and marker.read_text():
            time.sleep(0.5)  # let the step settle in its sleep
            os.kill(int(marker.read_text()), signal.SIGTERM)
            return
        time.sleep(0.05)
    raise AssertionError("the step never announced itself")


@pytest.mark.slow
def test_preemption_relaunch_does_not_consume_the_ops_retry_policy(instance, test_out):
    import threading

    killer = threading.Thread(target=_preempt_when_announced, args=(test_out,))
    killer.start()
    result = run(instance, "preemption", {"local": {"cpus": 2}})
    killer.join()
    assert result.success, "the user's RetryPolicy(max_retries=1) still had its retry"
    seen = [(e["attempt"], e["retry_number"]) for e in recorded(test_out) if e["name"] == "flaky"]
    assert seen == [(0, 0), (1, 0), (2, 1)]
    messages = engine_messages(instance, result.run_id)
    assert any("was Preempted; relaunching at the same size" in m for m in messages)


@pytest.mark.slow
def test_a_step_preempted_in_its_save_loop_reads_as_a_relaunch_and_resumes(instance, test_out):
    import threading

    killer = threading.Thread(target=_preempt_when_announced, args=(test_out,))
    killer.start()
    result = run(instance, "checkpointed_preemption", {"local": {"cpus": 2}})
    killer.join()
    assert result.success
    starts = [(e["attempt"], e["start"]) for e in recorded(test_out) if e["name"] == "tiles"]
    assert [attempt for attempt, _ in starts] == [0, 1]
    assert starts[1][1] >= 10, "the relaunch resumed from the checkpoint"
    failures = instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_FAILURE)
    assert failures == [], "a relaunched preemption is not shown as a failed step"
    (retry,) = instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)
    assert retry.dagster_event is not None
    assert "PreemptedRelaunch" in retry.dagster_event.step_retry_data.error.to_string()
    messages = engine_messages(instance, result.run_id)
    assert any("Relaunching" in m and "Preempted" in m for m in messages)
    # the preempted attempt saved as it stopped: its relaunch redoes nothing of its work, so
    # the interrupted waste is the work since that save, as the step said (not the attempt)
    said = retry.dagster_event.step_retry_data.error.to_string()
    assert "work since that checkpoint: " in said
    relaunch = next(
        r.dagster_event.engine_event_data.metadata
        for r in instance.all_logs(result.run_id, of_type=DagsterEventType.ENGINE_EVENT)
        if "k8s_ai/usage_before" in r.dagster_event.engine_event_data.metadata
    )
    (first,) = json.loads(relaunch["k8s_ai/usage_before"].value)
    assert first["ended"] == "Preempted" and 0 <= first["lost_seconds"] < 1.0
    meta = summary_metadata(instance, result.run_id, "checkpointed_tiles")
    share = first["lost_seconds"] / first["wall_seconds"]
    expected = round(first["cpu_seconds"] * share, 2)
    assert meta["k8s_ai/waste_interrupted_cpu_seconds"] == pytest.approx(expected, abs=0.01)
    assert meta["k8s_ai/waste_interrupted_cpu_seconds"] < first["cpu_seconds"]
    assert meta["k8s_ai/waste_oom_killed_cpu_seconds"] == 0


@pytest.mark.slow
def test_a_run_with_an_oom_relaunch_and_a_preemption_splits_its_waste_by_cause_and_step(
    instance, test_out
):
    import threading

    since = datetime.now(UTC) - timedelta(minutes=1)
    killer = threading.Thread(target=_preempt_when_announced, args=(test_out,))
    killer.start()
    prices = {"cpu_hour": 3600.0, "currency": "EUR"}  # 1 EUR a CPU-second
    result = run(instance, "oom_and_preemption", {"local": {"cpus": 2}, "prices": prices})
    killer.join()
    assert result.success
    hog = summary_metadata(instance, result.run_id, "hog_600mi")
    tiles = summary_metadata(instance, result.run_id, "checkpointed_tiles")
    # the OOM-killed attempts are the hog's waste, the work lost to preemption the tiles'
    assert 0 < hog["k8s_ai/waste_oom_killed_cost"] < hog["k8s_ai/cost"]
    assert hog["k8s_ai/waste_interrupted_cost"] == 0
    assert tiles["k8s_ai/waste_oom_killed_cost"] == 0
    relaunch = next(
        r.dagster_event.engine_event_data.metadata
        for r in instance.all_logs(result.run_id, of_type=DagsterEventType.ENGINE_EVENT)
        if r.step_key == "checkpointed_tiles"
        and "k8s_ai/usage_before" in r.dagster_event.engine_event_data.metadata
    )
    (preempted,) = json.loads(relaunch["k8s_ai/usage_before"].value)
    assert preempted["ended"] == "Preempted" and 0 <= preempted["lost_seconds"] < 1.0
    # its reserved CPU-seconds since its last save, at 1 EUR each
    lost = preempted["cpu_seconds"] * preempted["lost_seconds"] / preempted["wall_seconds"]
    assert tiles["k8s_ai/waste_interrupted_cost"] == pytest.approx(lost, abs=0.02)
    # `k8s-ai cost` sums the run's two causes, each from its own step
    rows = [e for e in load_cost_entries(instance, since) if e.run_id == result.run_id]
    by_cause = {
        cause: sum(row.waste_cost.get(cause, 0.0) for row in rows)
        for cause in ("oom_killed", "interrupted")
    }
    assert by_cause == {
        "oom_killed": pytest.approx(hog["k8s_ai/waste_oom_killed_cost"]),
        "interrupted": pytest.approx(tiles["k8s_ai/waste_interrupted_cost"]),
    }


def test_gpu_step_on_a_machine_without_gpus_runs_on_cpu_with_a_warning(instance, test_out):
    result = run(
        instance, "gpu_on_cpu_machine", {"local": {"cpus": 64, "memory": "64Gi", "gpus": 0}}
    )
    assert result.success
    messages = engine_messages(instance, result.run_id)
    assert any(
        "asks for 1 GPU but this machine has 0: it runs on CPU without a GPU" in m for m in messages
    )
    assert not any("runs alone" in m for m in messages)  # 8 CPU fit in 64: only the GPU is missing
    assert [e["cuda"] for e in recorded(test_out) if e["name"] == "gpu"] == [""]


def test_a_step_larger_than_the_machine_is_warned_that_it_runs_alone(instance, test_out):
    result = run(instance, "gpu_on_cpu_machine", {"local": {"cpus": 2, "gpus": 0}})
    assert result.success
    messages = engine_messages(instance, result.run_id)
    assert any("it runs alone" in m for m in messages)  # gpu-1 is 8 CPU, more than 2
    assert any("it runs on CPU without a GPU" in m for m in messages)


def test_executor_warnings_are_stored_at_warning_level(instance, test_out):
    result = run(instance, "gpu_on_cpu_machine", {"local": {"cpus": 2, "gpus": 0}})
    records = instance.all_logs(result.run_id, of_type=DagsterEventType.ENGINE_EVENT)
    levels = {r.dagster_event.message: r.level for r in records if r.dagster_event}
    warnings = [m for m in levels if m.startswith("Warning:")]
    assert len(warnings) == 2
    assert all(levels[m] == logging.WARNING for m in warnings)
    assert all(level == logging.DEBUG for m, level in levels.items() if m not in warnings)


def _refusal(result: Any) -> Any:
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
    return failure.step_failure_data.error


def test_oversize_fail_refuses_the_step_before_running_it(instance, test_out):
    result = run(instance, "gpu_on_cpu_machine", {"local": {"cpus": 2, "oversize": "fail"}})
    assert not result.success
    assert not recorded(test_out)
    error = _refusal(result)
    assert error.cls_name == "SubmitError"
    assert "local.oversize is 'fail'" in error.message
    messages = engine_messages(instance, result.run_id)
    assert not any("Warning" in m or "runs alone" in m for m in messages)  # the refusal alone


def test_oversize_fail_refuses_a_gpu_step_on_a_machine_without_gpus(instance, test_out):
    executor = {"local": {"cpus": 64, "memory": "64Gi", "gpus": 0, "oversize": "fail"}}
    result = run(instance, "gpu_on_cpu_machine", executor)
    assert not result.success
    assert not recorded(test_out)
    error = _refusal(result)
    assert error.cls_name == "SubmitError"
    assert "step 'wants_gpu' asks for 1 GPU but the local backend has 0" in error.message
    assert "machine with GPUs" in error.message and "local.gpus" in error.message
    assert "kubernetes backend" in error.message
    assert not any("Warning" in m for m in engine_messages(instance, result.run_id))


def test_a_gpu_partition_step_is_refused_before_it_runs(instance, test_out):
    result = run(instance, "gpu_partition_locally", {"local": {"cpus": 2, "gpus": 1}})
    assert not result.success
    assert not recorded(test_out)
    error = _refusal(result)
    assert error.cls_name == "SubmitError"
    assert "step 'wants_partition' (1 CPU / 2Gi / 1 × 1g.10gb GPU partition): gpu_partition is" in (
        error.message
    )
    assert "not served by the local backend" in error.message
    assert "gpus.request: dra" in error.message


def test_hand_edited_tags_are_rejected_before_any_step_runs(instance, test_out):
    result = run(instance, "bad_tags", {"local": {"cpus": 2}})
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.RUN_FAILURE)
    error = failure.event_specific_data.error
    assert "step 'hand_edited': cpu='lots' is not allowed" in error.message
    assert not recorded(test_out)


def test_a_step_cannot_reach_a_tenant_outside_allowed_tenants(instance, test_out):
    executor = {"local": {"cpus": 2}, "allowed_tenants": ["research"]}
    result = run(instance, "tenant_routed", executor)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.RUN_FAILURE)
    message = failure.event_specific_data.error.message
    assert "step 'vision_step' asks for tenant 'vision'" in message
    assert "allowed_tenants: research" in message
    assert not recorded(test_out)  # refused before any step was submitted


@pytest.mark.slow
def test_a_run_over_its_budget_is_refused_from_the_last_runs_figures_before_any_submit(
    instance, test_out
):
    # 1 EUR per CPU-second on the local backend: its own price, over the section's
    prices = {"cpu_hour": 0.01, "currency": "EUR", "backends": {"local": {"cpu_hour": 3600.0}}}
    first = run(instance, "admission", {"prices": prices, "budget": {"max_cost_per_run": 1e6}})
    assert first.success  # no history yet: nothing estimated, nothing refused
    notes = engine_messages(instance, first.run_id)
    assert "Budget: 0 step(s) estimated at 0.00 EUR, 0.00 GPU-hours from earlier runs; " in (
        "\n".join(notes)
    )
    started = len(recorded(test_out))

    second = run(instance, "admission", {"prices": prices, "budget": {"max_cost_per_step": 0.5}})
    assert not second.success
    failures = [e for e in second.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    assert {e.step_key for e in failures} == {"one_cpu_a", "one_cpu_b", "two_cpu"}
    error = next(e for e in failures if e.step_key == "two_cpu").step_failure_data.error
    assert error.cls_name == "BudgetError"
    assert "over budget.max_cost_per_step 0.50 EUR: the longest of its last 1 run(s) took" in (
        error.message
    )
    assert f"(run {first.run_id[:8]})" in error.message
    [summary] = [m for m in engine_messages(instance, first.run_id) if "'two_cpu' reserved" in m]
    assert summary.endswith(" EUR") and "cost 0.00 EUR" not in summary  # the local price
    assert len(recorded(test_out)) == started  # refused before any step was submitted


def test_a_run_tag_cannot_route_steps_to_a_tenant_outside_allowed_tenants(instance, test_out):
    executor = {"local": {"cpus": 2}, "allowed_tenants": ["vision"]}
    result = execute_job(
        JOBS.get_reconstructable_job("admission"),
        instance=instance,
        run_config={"execution": {"config": executor}},
        tags={"k8s_ai/tenant": "finance"},
        raise_on_error=False,
    )
    assert not result.success
    assert not recorded(test_out)


@pytest.mark.parametrize(
    "executor, fragment",
    [
        ({"local": {"cpus": 0}}, "local.cpus=0"),
        ({"local": {"memory": "0"}}, "local.memory='0'"),
        ({"local": {"cpuz": 2}}, "cpuz"),
        ({"bakend": "local"}, "bakend"),
        ({"local": {"start_method": "fork"}}, "start_method"),
    ],
)
def test_bad_executor_config_is_refused_with_the_key_named(instance, test_out, executor, fragment):
    with pytest.raises(Exception) as info:
        result = run(instance, "admission", executor)
        raise AssertionError(str([str(e.message) for e in result.all_events]))
    assert fragment in str(info.value)
    assert not recorded(test_out)


@pytest.mark.slow
def test_terminating_the_run_kills_every_step_process_tree(dagster_home, test_out):
    code = (
        "import sys; from dagster import DagsterInstance, execute_job\n"
        "from tests.local.test_local_executor import JOBS\n"
        "with DagsterInstance.get() as i:\n"
        "    execute_job(JOBS.get_reconstructable_job('long_running'), instance=i,\n"
        "        run_config={'execution': {'config': {'local': {'cpus': 2}}}})\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", code], cwd=Path(__file__).parents[2], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while not any(e["name"] == "children" for e in recorded(test_out)):
            assert time.monotonic() < deadline, "step never started"
            time.sleep(0.1)
        event = next(e for e in recorded(test_out) if e["name"] == "children")
        step_pids = [event["pid"], event["child"]]
        worker.send_signal(signal.SIGINT)  # what `dagster run terminate` delivers to the worker
        worker.wait(timeout=60)
        deadline = time.monotonic() + 10
        while pids_alive(step_pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pids_alive(step_pids) == []
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)


@pytest.mark.slow
def test_forkserver_step_processes_are_policed_and_relaunched_like_spawned_ones(instance, test_out):
    result = run(instance, "oom", {"local": {"cpus": 2, "start_method": "forkserver"}})
    assert result.success
    attempts = [e["attempt"] for e in recorded(test_out) if e["name"] == "hog"]
    assert attempts == [0, 1, 2]  # OOMKilled at 256Mi and 512Mi, fits 1Gi
    pids = {e["pid"] for e in recorded(test_out) if e["name"] == "hog"}
    assert len(pids) == 3 and os.getpid() not in pids  # each attempt its own process


def test_a_run_on_dagster_devs_temporary_instance_warns_that_its_report_is_lost(
    tmp_path, monkeypatch, test_out
):
    home = tmp_path / ".tmp_dagster_home_abc123"  # where `dagster dev` puts it without DAGSTER_HOME
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with DagsterInstance.get() as temporary:
        result = run(temporary, "gpu_on_cpu_machine", {"local": {"cpus": 64, "memory": "64Gi"}})
        records = temporary.all_logs(result.run_id, of_type=DagsterEventType.ENGINE_EVENT)
    notes = [r for r in records if "DAGSTER_HOME is not set" in (r.dagster_event.message or "")]
    assert len(notes) == 1
    assert notes[0].level == logging.WARNING and notes[0].step_key is None
    assert "k8s-ai report" in notes[0].dagster_event.message


def test_a_run_leaves_no_step_log_folder_in_the_temp_dir(tmp_path, monkeypatch, instance, test_out):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # the run worker runs in this process
    result = run(instance, "gpu_on_cpu_machine", {"local": {"cpus": 64, "memory": "64Gi"}})
    assert result.success
    assert recorded(test_out)  # the step ran, its log went through a k8s-ai-local-* folder
    assert not list(temp.glob("k8s-ai-local-*"))
