"""The run report: a real run through ai_executor, read back from its event log and drawn.

One module-scoped run of `tests.local.jobs:oom` (a step that is OOMKilled twice and succeeds
on its third attempt with 1Gi) backs the integration tests; pure tests feed events directly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import DagsterInstance, MetadataValue, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository

from k8s_ai_orchestrator.report import (
    LoggedEvent,
    RunReport,
    build_report,
    load_run_report,
    report_metadata,
)
from k8s_ai_orchestrator.report.render import render_html, screenshot_png

ROOT = Path(__file__).parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class FinishedRun:
    home: Path
    run_id: str
    report: RunReport


@pytest.fixture(scope="module")
def oom_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FinishedRun]:
    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAGSTER_HOME", str(home))
        env.setenv("TEST_OUT", str(tmp_path_factory.mktemp("out")))
        repo = ReconstructableRepository.for_module(
            "tests.local.jobs", "defs", working_directory=str(ROOT)
        )
        with DagsterInstance.get() as instance:
            result = execute_job(
                repo.get_reconstructable_job("oom"),
                instance,
                run_config={"execution": {"config": {"local": {"cpus": 2}}}},
            )
            assert result.success
            yield FinishedRun(home, result.run_id, load_run_report(instance, result.run_id))


def test_oom_escalated_step_shows_three_attempts_with_doubling_memory(oom_run: FinishedRun):
    step = oom_run.report.step("hog_600mi")
    assert [a.number for a in step.attempts] == [1, 2, 3]
    assert step.memory_tried == ("256Mi", "512Mi", "1Gi")
    assert [a.backend for a in step.attempts] == ["local", "local", "local"]
    assert all(a.cpu == 1.0 for a in step.attempts)


def test_oom_killed_attempts_are_marked_and_the_last_one_succeeds(oom_run: FinishedRun):
    step = oom_run.report.step("hog_600mi")
    assert [a.outcome for a in step.attempts] == ["OOMKilled", "OOMKilled", "succeeded"]
    assert [a.oom_killed for a in step.attempts] == [True, True, False]
    assert not any(a.preempted for a in step.attempts)
    assert step.reasons == ("OOMKilled", "OOMKilled")
    assert step.relaunches == 2
    assert step.seconds_lost > 0


def test_attempts_follow_one_another_on_the_run_timeline(oom_run: FinishedRun):
    report = oom_run.report
    attempts = report.step("hog_600mi").attempts
    for earlier, later in zip(attempts, attempts[1:], strict=False):
        assert earlier.ended_at <= later.launched_at
    for attempt in attempts:
        assert report.started_at <= attempt.launched_at <= attempt.ended_at <= report.ended_at
        assert attempt.running_at is not None and attempt.node == "localhost"


def test_resource_seconds_come_from_the_executor_summary(oom_run: FinishedRun):
    report = oom_run.report
    usage = report.step("hog_600mi").usage
    assert usage is not None and usage.cpu_seconds > 0 and usage.memory_gib_seconds > 0
    assert usage.gpu_seconds == 0
    assert report.total_usage == usage
    assert report.status == "SUCCESS" and report.job_name == "oom"


def test_html_report_is_self_contained_and_shows_the_escalation(oom_run: FinishedRun):
    page = render_html(oom_run.report)
    assert "256Mi → 512Mi → 1Gi" in page
    assert page.count("✕ OOM") == 2
    assert "<svg" in page and "src=" not in page and "https://" not in page


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    command = [sys.executable, "-m", "k8s_ai_orchestrator.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_cli_writes_a_non_empty_html_and_png_report(oom_run: FinishedRun, tmp_path: Path):
    done = _cli(oom_run.home, "report", oom_run.run_id, "--out", str(tmp_path / "reports"))
    assert done.returncode == 0, done.stderr
    html, png = (Path(line) for line in done.stdout.split())
    assert html.name == f"run-{oom_run.run_id[:8]}.html" and png.suffix == ".png"
    assert "hog_600mi" in html.read_text(encoding="utf-8")
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 10_000


def test_cli_names_the_instance_when_the_run_is_unknown(oom_run: FinishedRun, tmp_path: Path):
    done = _cli(oom_run.home, "report", "no-such-run", "--out", str(tmp_path))
    assert done.returncode == 1
    assert "run 'no-such-run' is not in the Dagster instance" in done.stderr
    assert "DAGSTER_HOME" in done.stderr


def test_report_metadata_links_the_written_files(oom_run: FinishedRun, tmp_path: Path):
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAGSTER_HOME", str(oom_run.home))
        with DagsterInstance.get() as instance:
            meta = report_metadata(oom_run.run_id, tmp_path, instance)
    assert meta["report_html"] == MetadataValue.path(
        str(tmp_path / f"run-{oom_run.run_id[:8]}.html")
    )
    assert Path(str(meta["report_png"].value)).is_file()
    assert str(meta["report_url"].value).startswith("file://")
    assert meta["relaunches"] == MetadataValue.int(2)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian chromium")
def test_png_can_be_a_chromium_screenshot_of_the_html(oom_run: FinishedRun, tmp_path: Path):
    page = tmp_path / "run.html"
    page.write_text(render_html(oom_run.report), encoding="utf-8")
    png = screenshot_png(page, tmp_path / "run.png", rows=1)
    assert png.read_bytes().startswith(PNG_MAGIC)


def _launch(ts: float, step: str, attempt: int, memory: str = "2Gi") -> LoggedEvent:
    meta = {"k8s_ai/attempt": attempt, "k8s_ai/memory": memory, "k8s_ai/backend": "kubernetes"}
    return LoggedEvent(ts, "ENGINE_EVENT", step, f"Launching step '{step}' ...", meta)


def test_preemption_under_a_retry_policy_is_marked_preempted_not_retried():
    relaunch = {"k8s_ai/reasons": "Preempted", "k8s_ai/preemptions": 1}
    events = [
        LoggedEvent(0.0, "RUN_START", None),
        _launch(1.0, "train", 1),
        LoggedEvent(2.0, "STEP_START", "train"),
        LoggedEvent(5.0, "STEP_UP_FOR_RETRY", "train"),
        LoggedEvent(5.1, "ENGINE_EVENT", "train", "Relaunching: step 'train' ...", relaunch),
        _launch(6.0, "train", 2),
        LoggedEvent(7.0, "STEP_START", "train"),
        LoggedEvent(9.0, "STEP_SUCCESS", "train"),
        LoggedEvent(9.5, "RUN_SUCCESS", None),
    ]
    step = build_report("r", "j", "SUCCESS", events).step("train")
    assert [a.outcome for a in step.attempts] == ["Preempted", "succeeded"]
    assert step.attempts[0].preempted and step.attempts[0].ended_at == 5.0
    assert "✕ preempted" in render_html(build_report("r", "j", "SUCCESS", events))


def test_a_step_that_never_left_pending_shows_its_last_reason_and_no_running_time():
    pending = {"k8s_ai/reason": "0/12 nodes available: Insufficient nvidia.com/gpu"}
    events = [
        LoggedEvent(0.0, "RUN_START", None),
        _launch(1.0, "embed", 1, "48Gi"),
        LoggedEvent(2.0, "ENGINE_EVENT", "embed", "Step 'embed' is Pending: 0/12 ...", pending),
        LoggedEvent(30.0, "STEP_FAILURE", "embed"),
        LoggedEvent(31.0, "RUN_FAILURE", None),
    ]
    attempt = build_report("r", "j", "FAILURE", events).step("embed").attempts[0]
    assert attempt.outcome == "failed"
    assert attempt.running_seconds == 0 and attempt.pending_seconds == 29.0
    assert "Insufficient nvidia.com/gpu" in attempt.pending_reason
