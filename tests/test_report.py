"""The run report: a real run through ai_executor, read back from its event log and drawn.

One module-scoped run of `tests.local.jobs:oom` (a step that is OOMKilled twice and succeeds
on its third attempt with 1Gi) backs the integration tests; pure tests feed events directly.
The HTML and the PNG draw one `ReportSummary`; the tests check that each shows all of it.
"""

from __future__ import annotations

import html as htmllib
import os
import struct
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import DagsterInstance, MetadataValue, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository
from matplotlib.colors import to_hex
from matplotlib.text import Text

from k8s_ai_orchestrator.errors import OrchestratorError
from k8s_ai_orchestrator.report import (
    LoggedEvent,
    ReportError,
    RunReport,
    build_report,
    load_run_report,
    render_html,
    render_png,
    report_figure,
    report_metadata,
    summarize,
)
from k8s_ai_orchestrator.report.files import screenshot_png
from k8s_ai_orchestrator.report.summary import COLUMNS, PENDING_COLOR, money
from k8s_ai_orchestrator.report.timeline import Usage, usage_from

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


def _png_size(png: Path) -> tuple[int, int]:
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC)
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_cli_writes_a_non_empty_html_and_png_report(oom_run: FinishedRun, tmp_path: Path):
    done = _cli(oom_run.home, "report", oom_run.run_id, "--out", str(tmp_path / "reports"))
    assert done.returncode == 0, done.stderr
    html, png = (Path(line) for line in done.stdout.split())
    assert html.name == f"run-{oom_run.run_id[:8]}.html" and png.suffix == ".png"
    assert "hog_600mi" in html.read_text(encoding="utf-8")
    assert png.stat().st_size > 10_000
    assert _png_size(png)[0] == 1540  # matplotlib's page: 14 in at 110 dpi


@pytest.mark.parametrize("given", ["short", "latest"])
def test_cli_accepts_the_short_run_id_and_latest(oom_run: FinishedRun, tmp_path: Path, given: str):
    run_id = oom_run.run_id[:8] if given == "short" else given
    done = _cli(oom_run.home, "report", run_id, "--out", str(tmp_path / "reports"))
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.split()[0]).name == f"run-{oom_run.run_id[:8]}.html"


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


@pytest.mark.browser
def test_png_can_be_a_chromium_screenshot_of_the_html(
    oom_run: FinishedRun, tmp_path: Path, chromium: str
):
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


def _mixed_run() -> RunReport:
    """Two steps: `train` preempted then succeeded on a tenant, `embed` cancelled while Pending."""
    relaunch = {"k8s_ai/reasons": "Preempted"}
    used = {
        "k8s_ai/cpu_seconds": 40.0,
        "k8s_ai/memory_gib_seconds": 80.0,
        "k8s_ai/gpu_seconds": 7200.0,
        "k8s_ai/reasons": "Preempted",
    }
    launch = {
        "k8s_ai/attempt": 1,
        "k8s_ai/memory": "8Gi",
        "k8s_ai/backend": "kubernetes",
        "k8s_ai/tenant": "research",
        "k8s_ai/size": "gpu-1",
        "k8s_ai/cpu": 4.0,
        "k8s_ai/gpu": 1,
    }
    events = [
        LoggedEvent(0.0, "RUN_START", None),
        LoggedEvent(1.0, "ENGINE_EVENT", "train", "Launching step 'train'", launch),
        LoggedEvent(2.0, "ENGINE_EVENT", "train", "Step 'train' is running on gpu-node-1"),
        LoggedEvent(5.0, "ENGINE_EVENT", "train", "Relaunching: step 'train' ...", relaunch),
        LoggedEvent(
            6.0, "ENGINE_EVENT", "train", "Launching step 'train'", {**launch, "k8s_ai/attempt": 2}
        ),
        LoggedEvent(7.0, "ENGINE_EVENT", "train", "Step 'train' is running on gpu-node-2"),
        LoggedEvent(9.0, "STEP_SUCCESS", "train"),
        LoggedEvent(9.1, "ENGINE_EVENT", "train", "Step 'train' used ...", used),
        _launch(3.0, "embed", 1, "48Gi"),
        LoggedEvent(8.0, "ENGINE_EVENT", "embed", "Cancelled step 'embed'"),
        LoggedEvent(10.0, "RUN_CANCELED", None),
    ]
    return build_report("5f0c2a91-77aa", "training", "CANCELED", events)


def test_summary_cards_sum_the_run():
    cards = {card.label: card.value for card in summarize(_mixed_run()).cards}
    assert cards == {
        "status": "CANCELED",
        "duration": "10.0 s",
        "steps": "2",
        "relaunches": "1",
        "OOM kills": "0",
        "preemptions": "1",
        "CPU-hours": "0.011",
        "memory GiB-hours": "0.022",
        "GPU-hours": "2.000",
        "over-sized steps": "0",
    }


def test_summary_table_has_one_cell_per_column_for_each_step():
    summary = summarize(_mixed_run())
    train, embed = (dict(zip(summary.columns, row.cells, strict=True)) for row in summary.rows)
    assert train == {
        "step": "train",
        "backend": "kubernetes / research",
        "node": "gpu-node-1, gpu-node-2",
        "size": "gpu-1: 4 CPU / 8Gi / 1 GPU",
        "attempts": "2",
        "memory": "8Gi → 8Gi",
        "requested": "—",
        "peak used": "—",
        "reasons": "Preempted",
        "reserved CPU-s": "40.0",
        "reserved GiB-s": "80.0",
        "reserved GPU-s": "7200.0",
        "cost": "—",  # the run had no prices
        "wasted": "—",
        "s lost": "4.0",
        "outcome": "succeeded",
    }
    assert (embed["node"], embed["reserved CPU-s"], embed["outcome"]) == ("—", "—", "cancelled")
    assert [row.cpu_share for row in summary.rows] == [1.0, 0.0]


def test_a_priced_steps_cost_and_waste_come_from_its_summary_into_the_table_and_a_card():
    meta = {
        "k8s_ai/cpu_seconds": 40.0,
        "k8s_ai/cost": 1.5,
        "k8s_ai/currency": "EUR",
        "k8s_ai/waste_oom_killed_cost": 0.5,
        "k8s_ai/waste_interrupted_cost": 0.25,
        "k8s_ai/waste_unused_memory_cost": 0.1,
    }
    usage = usage_from(meta, "k8s_ai/")
    assert (usage.cost, usage.wasted, usage.currency) == (1.5, 0.85, "EUR")
    assert money(usage) == ("1.5000 EUR", "0.8500 EUR")
    assert usage.plus(Usage(cost=0.5, wasted=0.0, currency="EUR")).cost == 2.0
    assert usage_from({"k8s_ai/cpu_seconds": 1.0}, "k8s_ai/").cost is None


def test_summary_timeline_has_a_bar_per_attempt_in_seconds_since_the_run_started():
    train = summarize(_mixed_run()).timeline[0]
    assert train.caption == "kubernetes · gpu-1: 4 CPU / 8Gi / 1 GPU"
    first, second = train.bars
    assert (first.launched, first.running, first.ended) == (1.0, 2.0, 5.0)
    assert (first.mark, first.label, first.color) == ("✕ preempted", "#1 8Gi", "#e58e26")
    assert (second.mark, second.outcome) == ("", "succeeded")


def test_legend_keys_cancelled_only_when_an_attempt_was_cancelled():
    keyed = [entry.label for entry in summarize(_mixed_run()).legend]
    assert keyed == [
        "pending",
        "succeeded",
        "OOMKilled",
        "Preempted / Evicted / Lost",
        "failed",
        "retried",
        "cancelled",
    ]
    quiet = RunReport("r", "j", "SUCCESS", 0.0, 1.0, steps=())
    assert "cancelled" not in [entry.label for entry in summarize(quiet).legend]


def test_html_shows_every_text_of_the_summary():
    report = _mixed_run()
    page = render_html(report)
    missing = [t for t in summarize(report).texts() if htmllib.escape(t, quote=True) not in page]
    assert missing == []


def _figure_texts(report: RunReport) -> list[str]:
    return [artist.get_text() for artist in report_figure(report).findobj(Text)]


def test_html_and_png_of_the_real_run_both_show_every_text_of_its_summary(oom_run: FinishedRun):
    summary = summarize(oom_run.report)
    page = render_html(oom_run.report)
    assert [t for t in summary.texts() if htmllib.escape(t, quote=True) not in page] == []
    drawn = _figure_texts(oom_run.report)
    assert [t for t in summary.texts() if t not in drawn] == []
    assert drawn.count("✕ OOM") == 2
    assert "256Mi → 512Mi → 1Gi" in drawn and "OOMKilled, OOMKilled" in drawn


def test_png_draws_every_text_of_a_run_with_a_tenant_a_preemption_and_a_cancel():
    report = _mixed_run()
    drawn = _figure_texts(report)
    assert [t for t in summarize(report).texts() if t not in drawn] == []


def test_png_gantt_bars_are_the_summary_bars(oom_run: FinishedRun):
    bars = summarize(oom_run.report).timeline[0].bars
    expected = [(b.launched, b.running, PENDING_COLOR) for b in bars if b.pending_seconds > 0]
    expected += [(b.running, b.ended, b.color) for b in bars]
    gantt = report_figure(oom_run.report).axes[0]
    drawn = [
        (p.get_x(), p.get_x() + p.get_width(), to_hex(p.get_facecolor())) for p in gantt.patches
    ]
    assert [color for *_, color in sorted(drawn)] == [color for *_, color in sorted(expected)]
    assert [t for start, end, _ in sorted(drawn) for t in (start, end)] == pytest.approx(
        [t for start, end, _ in sorted(expected) for t in (start, end)]
    )


def test_png_text_needs_no_glyph_the_font_lacks(oom_run: FinishedRun, tmp_path: Path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        render_png(oom_run.report, tmp_path / "run.png")
    assert [str(w.message) for w in caught if "missing from" in str(w.message)] == []


@pytest.mark.browser
def test_without_matplotlib_the_png_is_a_chromium_screenshot_of_the_html(
    oom_run: FinishedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chromium: str
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    png = render_png(oom_run.report, tmp_path / "run.png")
    assert _png_size(png)[0] == 1050  # Chromium's window, not matplotlib's 1540
    assert "hog_600mi" in (tmp_path / "run.html").read_text(encoding="utf-8")


def test_without_matplotlib_the_figure_is_refused_with_an_install_hint(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ReportError) as refused:
        report_figure(_mixed_run())
    assert isinstance(refused.value, OrchestratorError)
    assert "run '5f0c2a91-77aa'" in str(refused.value)
    assert "pip install 'k8s-ai-orchestrator[report]'" in str(refused.value)


def test_without_matplotlib_or_chromium_the_png_is_refused_naming_the_html(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    page = tmp_path / "run.html"
    page.write_text(render_html(_mixed_run()), encoding="utf-8")
    with pytest.raises(ReportError) as refused:
        screenshot_png(page, tmp_path / "run.png")
    message = str(refused.value)
    assert "neither matplotlib nor a Chromium is installed" in message
    assert "pip install matplotlib" in message and str(page) in message


def test_a_browser_that_fails_is_named_with_its_status_and_last_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    browser = tmp_path / "bin" / "chromium"
    browser.parent.mkdir()
    browser.write_text("#!/bin/sh\necho 'Missing X server or $DISPLAY' >&2\nexit 3\n")
    browser.chmod(0o755)
    monkeypatch.setenv("PATH", str(browser.parent))
    page = tmp_path / "run.html"
    page.write_text(render_html(_mixed_run()), encoding="utf-8")
    with pytest.raises(ReportError) as refused:
        screenshot_png(page, tmp_path / "run.png")
    message = str(refused.value)
    assert f"{browser} exited with status 3" in message
    assert "Missing X server" in message and "pip install matplotlib" in message


def test_a_steps_closing_line_says_reserved_for_size_times_time_and_used_only_for_measured():
    from k8s_ai_orchestrator.backends.base import ResourceUsage
    from k8s_ai_orchestrator.launch.attempts import StepAttempts
    from k8s_ai_orchestrator.launch.relaunch import StepHistory
    from k8s_ai_orchestrator.spec import ComputeSpec

    live = StepAttempts(
        ComputeSpec(cpu=2, memory_bytes=2 * 1024**3), "local", None, StepHistory("a")
    )
    live.usage.append(ResourceUsage(cpu_seconds=14.6, wall_seconds=7.3, cpu_used_seconds=3.2))
    message, _ = live.summary("a")
    assert message.startswith("Step 'a' reserved 14.6 CPU-s, ")
    assert message.endswith("; used 3.2 CPU-s (measured)")
    unmeasured = StepAttempts(live.spec, "kubernetes", None, StepHistory("b"))
    unmeasured.usage.append(ResourceUsage(cpu_seconds=4.0, wall_seconds=2.0))
    assert " used " not in unmeasured.summary("b")[0]


def _program_run() -> RunReport:
    """`embed` (on ai_executor) runs a program OOMKilled once; `score`'s program fails."""
    summary = {
        "program": "embed-pipes",
        "backend": "local",
        "tenant": "",
        "size": "custom",
        "attempts": 2,
        "reasons": "OOMKilled",
        "memory_tried": "64Mi → 128Mi",
        "cpu_seconds": 3.0,
        "memory_gib_seconds": 0.3,
        "gpu_seconds": 0.0,
        "wall_seconds": 6.0,
        "attempts_usage": [
            {"attempt": 1, "cpu": 0.5, "memory": "64Mi", "gpu": 0, "outcome": "OOMKilled",
             "launched_at": 2.0, "running_at": 2.5, "ended_at": 4.0},
            {"attempt": 2, "cpu": 0.5, "memory": "128Mi", "gpu": 0, "outcome": "Succeeded",
             "launched_at": 4.5, "running_at": None, "ended_at": 8.0},
        ],
    }  # fmt: skip
    failure = (
        ("DagsterExecutionStepExecutionError", 'Error occurred while executing op "score"'),
        ("PipesProgramError", "step 'score-pipes' failed on local: Failed, exit code 3"),
    )
    events = [
        LoggedEvent(0.0, "RUN_START", None),
        _launch(1.0, "embed", 1, "1Gi"),
        LoggedEvent(1.5, "STEP_START", "embed"),
        LoggedEvent(8.5, "ASSET_MATERIALIZATION", "embed", "", summary),
        LoggedEvent(8.6, "ASSET_MATERIALIZATION", "embed", "", {"backend": "theirs"}),
        LoggedEvent(9.0, "STEP_SUCCESS", "embed"),
        LoggedEvent(9.5, "STEP_FAILURE", "score", "", {"error_chain": failure}),
        LoggedEvent(10.0, "RUN_FAILURE", None),
    ]
    return build_report("7c1d4e00-aa", "embeddings", "FAILURE", events)


def test_an_aicompute_program_is_its_own_row_after_the_step_that_ran_it():
    report = _program_run()
    assert [s.step_key for s in report.steps] == [
        "embed",
        "embed › embed-pipes",
        "score › score-pipes",
    ]
    program = report.step("embed › embed-pipes")
    assert program.program_of == "embed" and program.memory_tried == ("64Mi", "128Mi")
    assert [a.outcome for a in program.attempts] == ["OOMKilled", "succeeded"]
    assert program.attempts[0].running_seconds == 1.5
    assert program.attempts[1].running_at is None  # never seen running: not invented
    assert program.usage is not None and program.usage.cpu_seconds == 3.0
    assert report.total_usage.cpu_seconds == 3.0  # the step wrote no summary here


def test_a_failed_program_row_says_what_is_missing_instead_of_inventing_attempts():
    report = _program_run()
    failed = report.step("score › score-pipes")
    assert failed.attempts == () and failed.outcome == "failed" and failed.usage is None
    summary = summarize(report)
    row = dict(zip(summary.columns, summary.rows[2].cells, strict=True))
    assert (row["backend"], row["reserved CPU-s"], row["outcome"]) == ("—", "—", "failed")
    assert "writes its summary only on success" in summary.timeline[2].caption
    assert summary.timeline[2].bars == ()


def test_program_rows_show_backend_attempts_memory_and_reserved_seconds():
    summary = summarize(_program_run())
    cards = {card.label: card.value for card in summary.cards}
    assert (cards["steps"], cards["OOM kills"], cards["relaunches"]) == ("1", "1", "1")
    row = dict(zip(summary.columns, summary.rows[1].cells, strict=True))
    assert row["step"] == "embed › embed-pipes" and row["backend"] == "local"
    assert (row["attempts"], row["memory"], row["reasons"]) == ("2", "64Mi → 128Mi", "OOMKilled")
    assert (row["reserved CPU-s"], row["s lost"], row["outcome"]) == ("3.0", "2.0", "succeeded")
    assert [bar.mark for bar in summary.timeline[1].bars] == ["✕ OOM", ""]
    page = render_html(_program_run())
    assert [t for t in summary.texts() if htmllib.escape(t, quote=True) not in page] == []
    assert [t for t in summary.texts() if t not in _figure_texts(_program_run())] == []


def test_a_program_summary_without_attempt_times_draws_no_bars():
    events = [
        LoggedEvent(0.0, "RUN_START", None),
        LoggedEvent(
            5.0,
            "ASSET_MATERIALIZATION",
            "embed",
            "",
            {
                "program": "embed-pipes",
                "backend": "local",
                "attempts": 1,
                "cpu_seconds": 1.0,
                "attempts_usage": [{"attempt": 1, "memory": "1Gi", "outcome": "Succeeded"}],
            },
        ),
        LoggedEvent(6.0, "RUN_SUCCESS", None),
    ]
    report = build_report("r", "j", "SUCCESS", events)
    (program,) = report.steps
    assert not program.timed and program.memory_tried == ("1Gi",)
    (row,) = summarize(report).timeline
    assert row.bars == () and "attempt times not in the metadata" in row.caption
    assert dict(zip(COLUMNS, summarize(report).rows[0].cells, strict=True))["s lost"] == "—"


def test_a_real_aicompute_program_run_shows_in_the_report(tmp_path: Path):
    from dagster import materialize

    from k8s_ai_orchestrator import AICompute, CheckpointStore
    from tests.pipes.pipes_support import tiles_asset

    def run(ai: AICompute, env: dict[str, str]) -> RunReport:
        with DagsterInstance.ephemeral() as instance:
            result = materialize(
                [tiles_asset({"cpu": 0.5, "memory": "64Mi"}, env)],
                resources={"ai": ai, "checkpoints": CheckpointStore(root=f"file://{tmp_path}")},
                instance=instance,
                raise_on_error=False,
            )
            return load_run_report(instance, result.run_id)

    local = {"local": {"cpus": 2, "memory": "2Gi"}, "poll_interval_s": 0.05}
    report = run(AICompute(**local), {"NEED_MIB": "100", "TILES": "1"})  # type: ignore[arg-type]
    program = report.step("tiles › tiles-pipes")
    assert program.memory_tried == ("64Mi", "128Mi")
    assert [a.outcome for a in program.attempts] == ["OOMKilled", "succeeded"]
    assert program.attempts[0].backend == "local" and program.reasons == ("OOMKilled",)
    assert program.usage is not None and program.usage.memory_gib_seconds > 0
    for attempt in program.attempts:
        assert report.started_at <= attempt.launched_at <= attempt.ended_at <= report.ended_at
    assert "tiles › tiles-pipes" in render_html(report)

    capped = AICompute(oom_escalation={"max_attempts": 1}, **local)  # type: ignore[arg-type]
    failed = run(capped, {"NEED_MIB": "100", "TILES": "1"}).step("tiles › tiles-pipes")
    assert failed.attempts == () and failed.outcome == "failed" and failed.note
