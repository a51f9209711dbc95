"""Right-sizing without step processes: when memory grows in place and by how much, how "auto"
sizes from history and where that history is read, what is refused and why, and what the
report shows of requested vs used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterRun
from dagster._core.events import EngineEventData

from k8s_ai_orchestrator import ComputeSpecError, compute
from k8s_ai_orchestrator.backends.base import (
    GrowOutcome,
    GrowResult,
    JobHandle,
    Resize,
    ResourceUsage,
    StepStatus,
)
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.backends.local import AdmissionLedger, LocalCapacity
from k8s_ai_orchestrator.backends.local.ledger import Want
from k8s_ai_orchestrator.backends.local.meter import AttemptMeter
from k8s_ai_orchestrator.errors import BackendError, ConfigError
from k8s_ai_orchestrator.executor.step_events import metadata_values
from k8s_ai_orchestrator.executor.usage_history import PARTITION_TAG, load_usage_history
from k8s_ai_orchestrator.launch.attempts import StepAttempts
from k8s_ai_orchestrator.launch.autosize import AutoSizing, UsageRecord, size_from_history
from k8s_ai_orchestrator.launch.lifecycle import Attempt, Note, NoteKind
from k8s_ai_orchestrator.launch.relaunch import StepHistory
from k8s_ai_orchestrator.launch.settings import ExecutorSettings
from k8s_ai_orchestrator.memorygrowth import MemoryGrowth
from k8s_ai_orchestrator.report import LoggedEvent, build_report, render_html, summarize
from k8s_ai_orchestrator.report.model import Measured
from k8s_ai_orchestrator.report.png import report_figure
from k8s_ai_orchestrator.report.summary import requested_and_used
from k8s_ai_orchestrator.spec import ComputeSpec, resolve_spec

MiB, GiB = 1024**2, 1024**3
MAX_MEMORY, MAX_CPU = 450 * GiB, 72.0


# -- grow before the OOM -------------------------------------------------------------------


def test_memory_grows_by_the_escalation_factor_once_use_passes_the_threshold():
    growth = MemoryGrowth(grow_at=0.85, factor=2.0, max_memory_bytes=8 * GiB)
    assert growth.target(GiB, used_bytes=860 * MiB) is None
    assert growth.target(GiB, used_bytes=871 * MiB) == 2 * GiB


def test_growth_stops_at_max_memory_and_says_so_by_asking_for_the_same_limit():
    growth = MemoryGrowth(grow_at=0.85, factor=2.0, max_memory_bytes=3 * GiB)
    assert growth.target(2 * GiB, used_bytes=2 * GiB) == 3 * GiB
    assert growth.target(3 * GiB, used_bytes=3 * GiB) == 3 * GiB


def test_the_ledger_grows_a_claim_only_when_the_machine_has_room(tmp_path: Path):
    capacity = LocalCapacity(cpus=2, memory_bytes=3 * GiB)
    ledger = AdmissionLedger(tmp_path)
    other = AdmissionLedger(tmp_path)
    assert ledger.admit(Want("run-a", "tiles", "a-tiles-0", 1, GiB), capacity).admitted
    assert other.admit(Want("run-b", "mosaic", "b-mosaic-0", 1, GiB), capacity).admitted
    assert ledger.grow("a-tiles-0", 2 * GiB, capacity).admitted
    refused = ledger.grow("a-tiles-0", 4 * GiB, capacity)
    assert not refused.admitted
    assert refused.reason == (
        "4.0Gi does not fit in the local memory of 3.0Gi, of which other running steps hold "
        "1.0Gi; other runs on this machine hold 'mosaic' of run run-b"
    )
    assert [c.memory_bytes for c in ledger.snapshot().claims] == [2 * GiB, GiB]
    ledger.leave()
    other.leave()


def test_memory_held_is_integrated_over_each_limit_the_attempt_had():
    meter = AttemptMeter(limit_bytes=GiB, started_at=10.0)
    meter.set_limit(3 * GiB, now=12.0)
    assert meter.memory_byte_seconds(now=13.0) == (2 * 1 + 1 * 3) * GiB


def test_peak_cpu_is_measured_over_one_second_windows_and_counts_exited_processes():
    meter = AttemptMeter(limit_bytes=GiB, started_at=0.0)
    meter.observe(now=1.0, memory_bytes=0, cpu={(1, 0.0): 0.5, (2, 0.0): 1.5})
    meter.observe(now=2.0, memory_bytes=0, cpu={(1, 0.0): 1.0})  # process 2 has exited
    assert meter.cpu_seconds == 2.5
    assert meter.peak_cpu(now=2.0) == 2.0


def test_the_kubernetes_backend_refuses_to_grow_a_job_it_did_not_submit():
    config = KubernetesConfig.from_dict(
        {"image": "pipeline:1", "tenants": {"team-a": {"kubeconfig": "/nonexistent"}}}
    )
    backend = KubernetesBackend(config, allowed_tenants=["team-a"], default_tenant="team-a")
    handle = JobHandle("kubernetes", "tiles-abc12", "tiles", tenant="team-a", namespace="default")
    with pytest.raises(BackendError, match="was not submitted by this backend instance"):
        backend.grow_memory(handle, 2 * GiB)
    backend.close()


class RecordingGrowthBackend:
    """A backend double whose attempt grew once and was then refused (as the local one does)."""

    name = "local"

    def resizes(self, handle: JobHandle) -> tuple[Resize, ...]:
        return (
            Resize(256 * MiB, 512 * MiB, 230 * MiB, GrowOutcome.ACCEPTED),
            Resize(512 * MiB, GiB, 440 * MiB, GrowOutcome.REFUSED, "only 0.1Gi is free"),
        )


def test_each_growth_becomes_one_event_and_the_grown_size_is_the_attempts_memory():
    live = StepAttempts(
        ComputeSpec(cpu=1, memory_bytes=256 * MiB), "local", None, StepHistory("tiles")
    )
    live.history = live.history.launched(256 * MiB)
    live.attempt = Attempt(JobHandle("local", "r-tiles-0", "tiles"), launched_at=0.0)
    live.grow_at = 0.85
    backend = RecordingGrowthBackend()
    running = StepStatus.running("node-a")

    def notes() -> list[Note]:
        seen = live.observe(running, 1.0, backend.resizes(live.attempt.handle))  # type: ignore[union-attr]
        return [note for note in seen.notes if note.kind is NoteKind.RESIZE]

    events = [(note.message, note.metadata) for note in notes()]
    assert [message for message, _ in events] == [
        "Grew step 'tiles' in place: memory 256Mi → 512Mi (230Mi in use passed 85% of 256Mi); "
        "the step keeps running",
        "Could not grow step 'tiles' in place from 512Mi to 1Gi (440Mi in use passed 85% of "
        "512Mi): only 0.1Gi is free; if it passes 512Mi it is OOMKilled and relaunched with "
        "more memory",
    ]
    assert live.history.memory_tried == (512 * MiB,)
    assert events[1][1]["resize_outcome"] == "refused"
    assert notes() == []  # each written once


@pytest.mark.parametrize("grow_at", [0, 1, 1.5, -0.2])
def test_grow_at_outside_0_to_1_is_refused_naming_the_key(grow_at: float):
    with pytest.raises(ConfigError, match=r"oom_escalation\.grow_at"):
        ExecutorSettings.from_config({"oom_escalation": {"grow_at": grow_at}})


def test_grow_at_takes_the_escalation_factor_and_cap():
    settings = ExecutorSettings.from_config(
        {"oom_escalation": {"grow_at": 0.9, "factor": 1.5, "max_memory": "64Gi"}}
    )
    assert settings.growth == MemoryGrowth(0.9, 1.5, 64 * GiB)
    assert ExecutorSettings.from_config({}).growth is None


# -- size from history ---------------------------------------------------------------------


def test_auto_fields_become_op_tags_and_start_from_the_declared_default():
    tags = compute(memory="auto", memory_default="4Gi", cpu="auto", cpu_default=2)
    spec = resolve_spec({k.removeprefix("k8s_ai/"): v for k, v in tags.items()})
    assert (spec.memory_auto, spec.cpu_auto, spec.memory_bytes, spec.cpu) == (
        True,
        True,
        4 * GiB,
        2.0,
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"memory_default": "4Gi"},
            "memory_default='4Gi' is not allowed: memory_default is the first run's memory of "
            "a step sized from its history: write memory='auto' with it, or drop memory_default",
        ),
        (
            {"size": "m", "memory": "auto", "memory_default": "4Gi"},
            "memory_default='4Gi' is not allowed: give either size or memory_default: with "
            "size='m', memory='auto' starts from the class's memory and never goes above it",
        ),
        (
            {"nodes": 2, "cpu": "auto"},
            "cpu='auto' is not allowed: cpu='auto' sizes single-node steps; give a gang step an "
            "explicit cpu",
        ),
        (
            {"memory": "auto", "memory_default": "lots"},
            "memory_default='lots' is not allowed: memory_default must be a number with a unit",
        ),
        (
            {"cpu": "auto", "cpu_default": 0},
            "cpu_default=0 is not allowed: cpu_default must be a number of cores",
        ),
    ],
)
def test_bad_auto_fields_are_refused_at_definition_time(fields: dict[str, Any], message: str):
    with pytest.raises(ComputeSpecError) as error:
        compute(**fields)
    assert message in str(error.value)


def _auto_spec(**fields: Any) -> ComputeSpec:
    return resolve_spec({"memory": "auto", **fields})


def test_auto_memory_is_the_highest_recent_peak_with_headroom():
    records = [
        UsageRecord("run-new-1", None, peak_memory_bytes=700 * MiB),
        UsageRecord("run-old-2", None, peak_memory_bytes=1000 * MiB),
    ]
    sizing = size_from_history(
        "tiles", _auto_spec(memory_default="4Gi"), records, AutoSizing(), MAX_MEMORY, MAX_CPU
    )
    assert sizing.spec.memory_bytes == 1200 * MiB
    assert sizing.note == "memory auto: 1.2 × peak 1000Mi of runs run-new-, run-old- → 1200Mi"
    assert sizing.metadata == {
        "auto_headroom": 1.2,
        "auto_peak_memory_bytes": 1000 * MiB,
        "auto_memory_runs": "run-new-1, run-old-2",
    }


def _records(*peaks_mib: int) -> list[UsageRecord]:
    """Records of runs newest first, with these peaks."""
    return [
        UsageRecord(f"run-{n:04d}", None, peak_memory_bytes=mib * MiB)
        for n, mib in enumerate(peaks_mib)
    ]


def test_auto_memory_follows_a_climb_of_the_peaks_to_the_next_run():
    spec = _auto_spec(memory_default="4Gi")
    sizing = size_from_history(
        "tiles", spec, _records(1600, 1300, 1000), AutoSizing(), MAX_MEMORY, MAX_CPU
    )
    # 300Mi a run: 1900Mi expected, × 1.2 (the highest peak alone would give 1920Mi → too
    # little for the 1900Mi the next run reaches with 1.2 of headroom on 1600Mi)
    assert sizing.spec.memory_bytes == 2280 * MiB
    assert sizing.note == (
        "memory auto: 1.2 × 1900Mi, the trend of the peaks of runs run-0000, run-0001, "
        "run-0002 (1000Mi → 1600Mi) → 2280Mi"
    )
    assert sizing.metadata is not None
    assert sizing.metadata["auto_trend_memory_bytes"] == 1900 * MiB
    assert sizing.metadata["auto_peak_memory_bytes"] == 1600 * MiB


def test_auto_memory_of_a_shrinking_step_stops_holding_its_old_peak():
    spec = _auto_spec(memory_default="4Gi")
    sizing = size_from_history(
        "tiles", spec, _records(1000, 2000, 3000, 4000), AutoSizing(), MAX_MEMORY, MAX_CPU
    )
    assert sizing.spec.memory_bytes == 1200 * MiB  # the newest peak × 1.2, not 4000Mi × 1.2


def test_auto_memory_of_a_flat_noisy_step_or_a_short_history_is_the_highest_peak():
    spec = _auto_spec(memory_default="4Gi")
    for records in (_records(1000, 1300, 1000, 1300, 1000), _records(1000, 1300)):
        sizing = size_from_history("tiles", spec, records, AutoSizing(), MAX_MEMORY, MAX_CPU)
        assert sizing.spec.memory_bytes == 1560 * MiB  # 1300Mi × 1.2


def test_auto_memory_after_a_jump_expects_more_of_it():
    spec = _auto_spec(memory_default="16Gi")
    records = _records(10_000, 100, 100)
    sizing = size_from_history("tiles", spec, records, AutoSizing(), MAX_MEMORY, MAX_CPU)
    # the line through 100, 100, 10,000 reaches 13,300 next, and runs rose 1,650 above it
    assert sizing.spec.memory_bytes == 17_940 * MiB  # 14,950Mi × 1.2


def test_auto_memory_with_the_trend_off_is_the_highest_peak():
    spec = _auto_spec(memory_default="4Gi")
    policy = ExecutorSettings.from_config({"auto_sizing": {"trend": False}}).auto_sizing
    records = _records(1600, 1300, 1000)
    sizing = size_from_history("tiles", spec, records, policy, MAX_MEMORY, MAX_CPU)
    assert sizing.spec.memory_bytes == 1920 * MiB
    assert sizing.metadata is not None and "auto_trend_memory_bytes" not in sizing.metadata


def test_auto_memory_without_history_is_the_default_and_says_so():
    sizing = size_from_history(
        "tiles", _auto_spec(memory_default="4Gi"), [], AutoSizing(), MAX_MEMORY, MAX_CPU
    )
    assert sizing.spec.memory_bytes == 4 * GiB
    assert sizing.note == "memory auto: no earlier run recorded 'tiles', the default 4Gi"


def test_auto_memory_never_exceeds_its_size_class():
    records = [UsageRecord("run-1", None, peak_memory_bytes=40 * GiB)]
    sizing = size_from_history(
        "tiles", _auto_spec(size="m"), records, AutoSizing(), MAX_MEMORY, MAX_CPU
    )
    assert sizing.spec.memory_bytes == 32 * GiB
    assert sizing.note.endswith("→ 32Gi (capped at 32Gi)")


def test_auto_cpu_rounds_the_peak_with_headroom_up_to_a_tenth_of_a_core():
    spec = resolve_spec({"cpu": "auto", "cpu_default": 8})
    records = [UsageRecord("run-1", None, peak_memory_bytes=None, peak_cpu=1.01)]
    sizing = size_from_history("tiles", spec, records, AutoSizing(), MAX_MEMORY, MAX_CPU)
    assert sizing.spec.cpu == 1.3
    assert sizing.spec.memory_bytes == spec.memory_bytes  # memory was not auto


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"headroom": 0.9}, "auto_sizing.headroom"),
        ({"runs": 0}, "auto_sizing.runs"),
        ({"trend": "yes"}, "auto_sizing.trend"),
    ],
)
def test_bad_auto_sizing_config_is_refused_naming_the_key(config: dict[str, Any], key: str):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ExecutorSettings.from_config({"auto_sizing": config})


# -- the run report: requested vs used -----------------------------------------------------


def _measured_run() -> Any:
    launch = {"k8s_ai/attempt": 1, "k8s_ai/memory": "8Gi", "k8s_ai/cpu": 4.0}
    used = {
        "k8s_ai/cpu_seconds": 40.0,
        "k8s_ai/requested_cpu": 4.0,
        "k8s_ai/requested_memory_bytes": 8 * GiB,
        "k8s_ai/peak_cpu": 0.9,
        "k8s_ai/peak_memory_bytes": 1536 * MiB,
    }
    events = [
        LoggedEvent(0.0, "RUN_START", None),
        LoggedEvent(1.0, "ENGINE_EVENT", "tiles", "Launching step 'tiles'", launch),
        LoggedEvent(9.0, "STEP_SUCCESS", "tiles"),
        LoggedEvent(9.1, "ENGINE_EVENT", "tiles", "Step 'tiles' used ...", used),
        LoggedEvent(10.0, "RUN_SUCCESS", None),
    ]
    return build_report("5f0c2a91-77aa", "tiles_job", "SUCCESS", events)


def test_the_report_shows_requested_vs_peak_used_and_counts_over_sized_steps():
    summary = summarize(_measured_run())
    row = dict(zip(summary.columns, summary.rows[0].cells, strict=True))
    assert row["requested"] == "4 CPU / 8Gi"
    assert row["peak used"] == "0.9 CPU / 1.5Gi (19% of memory, over-sized)"
    assert {c.label: c.value for c in summary.cards}["over-sized steps"] == "1"


def test_html_and_png_both_show_requested_vs_used():
    report = _measured_run()
    page = render_html(report)
    drawn = [t.get_text() for t in report_figure(report).texts]
    for text in ("4 CPU / 8Gi", "0.9 CPU / 1.5Gi (19% of memory, over-sized)", "over-sized steps"):
        assert text in page and text in drawn


def test_grow_result_constructors_name_their_outcome():
    assert GrowResult.pending("waiting for the kubelet").outcome is GrowOutcome.PENDING


# -- where the history is read from -------------------------------------------------------


def _past_run(instance: Any, run_id: str, partition: str | None, peak_mib: int | None) -> Any:
    tags = {PARTITION_TAG: partition} if partition else {}
    run = instance.add_run(DagsterRun(job_name="tiles_job", run_id=run_id, tags=tags))
    if peak_mib is not None:
        meta = metadata_values({"cpu_seconds": 1.0, "peak_memory_bytes": peak_mib * MiB})
        meta.update(metadata_values({"peak_cpu": 0.5}))
        instance.report_engine_event(
            "Step 'tiles' used ...", run, EngineEventData(metadata=meta), step_key="tiles"
        )
    return run


def test_history_is_read_from_the_same_partition_first_then_from_any(instance: Any):
    _past_run(instance, "run-a-0000", "2026-01-01", peak_mib=100)
    _past_run(instance, "run-b-0000", "2026-01-02", peak_mib=200)
    _past_run(instance, "run-c-0000", "2026-01-01", peak_mib=None)  # never ran 'tiles'
    same = _past_run(instance, "run-d-0000", "2026-01-01", peak_mib=None)
    assert [r.run_id for r in load_usage_history(instance, same, "tiles", runs=5)] == ["run-a-0000"]
    new = _past_run(instance, "run-e-0000", "2026-01-03", peak_mib=None)
    found = load_usage_history(instance, new, "tiles", runs=5)
    assert [(r.run_id, r.peak_memory_bytes) for r in found] == [
        ("run-b-0000", 200 * MiB),
        ("run-a-0000", 100 * MiB),
    ]
    assert load_usage_history(instance, new, "mosaic", runs=5) == []


def test_a_backend_that_measures_memory_only_records_no_cpu_peak_and_shows_none():
    live = StepAttempts(ComputeSpec(cpu=4, memory_bytes=8 * GiB), "slurm", None, StepHistory("a"))
    live.history = live.history.launched(8 * GiB)
    live.usage.append(ResourceUsage(wall_seconds=60.0, max_rss_bytes=6 * GiB))  # as sstat gives
    meta = live.measured_metadata()
    assert meta["peak_memory_bytes"] == 6 * GiB and "peak_cpu" not in meta
    measured = Measured(4.0, 8 * GiB, None, 6 * GiB)
    assert requested_and_used(measured) == ("4 CPU / 8Gi", "— CPU / 6.0Gi (75% of memory)")


def test_a_backend_that_measures_nothing_records_nothing_to_size_from():
    live = StepAttempts(
        ComputeSpec(cpu=4, memory_bytes=8 * GiB), "kubernetes", None, StepHistory("a")
    )
    live.usage.append(ResourceUsage(wall_seconds=60.0))
    assert live.measured_metadata() == {}
    assert requested_and_used(None) == ("—", "—")
