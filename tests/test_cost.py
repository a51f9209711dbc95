"""What a step's attempts cost and what was wasted (`launch/cost.py`): prices from the executor
config, checked before anything runs; the waste split by cause (OOM-killed attempts,
interrupted attempts, memory reserved above the measured peak); every attempt counted once,
also across a run worker that died (the figures travel in the launch metadata)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from k8s_ai_orchestrator.backends.base import FailureReason, ResourceUsage, StepState, StepStatus
from k8s_ai_orchestrator.checkpoint.signals import work_lost_phrase, work_lost_s
from k8s_ai_orchestrator.errors import ConfigError
from k8s_ai_orchestrator.launch.attempts import (
    StepAttempts,
    usage_from_metadata,
    usage_from_record,
    usage_record,
)
from k8s_ai_orchestrator.launch.cost import Prices, step_costs
from k8s_ai_orchestrator.launch.plan import PlannedStep
from k8s_ai_orchestrator.launch.relaunch import StepHistory
from k8s_ai_orchestrator.launch.settings import ExecutorSettings
from k8s_ai_orchestrator.spec import ComputeSpec, GiB, resolve_spec

PRICES = {"cpu_hour": 0.04, "memory_gib_hour": 0.005, "gpu_hour": 2.0}
HOUR = 3600.0


def reserved(cpu: float, memory_gib: float, gpu: int = 0, hours: float = 1.0) -> ResourceUsage:
    wall = hours * HOUR
    return ResourceUsage(cpu * wall, memory_gib * wall, gpu * wall, wall)


def test_an_oom_killed_and_a_preempted_attempt_are_waste_by_cause_and_the_last_is_not() -> None:
    spec = resolve_spec({"cpu": 4, "memory": "16Gi"})
    prices = Prices.from_config(PRICES)
    attempts = [
        replace(reserved(4, 16), ended=FailureReason.OOM_KILLED.value),
        replace(reserved(4, 32, hours=0.5), ended=FailureReason.PREEMPTED.value),
        reserved(4, 32, hours=2),
    ]
    figures = step_costs(attempts, spec, prices)
    # 4 CPU × 0.04 + 16 GiB × 0.005 = 0.24 for the first hour; 0.32 / h at 32 GiB after it
    assert figures["waste_oom_killed_cost"] == pytest.approx(0.24)
    assert figures["waste_interrupted_cost"] == pytest.approx(0.16)
    assert figures["cost"] == pytest.approx(0.24 + 0.16 + 0.64)
    assert figures["waste_oom_killed_cpu_seconds"] == 4 * HOUR
    assert figures["waste_interrupted_memory_gib_seconds"] == 32 * HOUR / 2
    assert "waste_unused_memory_cost" not in figures  # no attempt's peak was measured


def test_a_preempted_attempt_wastes_only_the_work_since_the_checkpoint_its_step_named() -> None:
    spec = resolve_spec({"cpu": 4, "memory": "16Gi"})
    prices = Prices.from_config(PRICES)
    preempted = replace(reserved(4, 16), ended=FailureReason.PREEMPTED.value)
    said = [replace(preempted, lost_seconds=HOUR / 4), reserved(4, 16)]  # saved 15 min before
    assert step_costs(said, spec, prices)["waste_interrupted_cost"] == pytest.approx(0.24 / 4)
    saved_as_it_stopped = [replace(preempted, lost_seconds=0.0), reserved(4, 16)]
    figures = step_costs(saved_as_it_stopped, spec, prices)
    assert figures["waste_interrupted_cost"] == 0 and figures["cost"] == pytest.approx(0.48)
    unsaid = [preempted, reserved(4, 16)]  # killed before it said: the whole attempt
    assert step_costs(unsaid, spec, prices)["waste_interrupted_cost"] == pytest.approx(0.24)
    # a zero travels to a resumed run worker as a zero, not as "not said"
    assert usage_from_record(usage_record(saved_as_it_stopped[0])).lost_seconds == 0.0
    assert work_lost_s(f"stopped (checkpoint 000002-9d42, {work_lost_phrase(12.34)})") == 12.3


def test_a_gangs_ranks_that_ran_while_the_others_waited_are_waste() -> None:
    spec = resolve_spec({"cpu": 4, "memory": "16Gi", "nodes": 2})
    prices = Prices.from_config(PRICES)
    # 2 nodes for an hour, and one rank half an hour before the other started
    held = ResourceUsage.reserved(spec, HOUR)
    waited = ResourceUsage.reserved(replace(spec, nodes=1), HOUR / 2)
    gang = replace(
        held,
        cpu_seconds=held.cpu_seconds + waited.cpu_seconds,
        memory_gib_seconds=held.memory_gib_seconds + waited.memory_gib_seconds,
        waiting_node_seconds=HOUR / 2,
    )
    figures = step_costs([gang], spec, prices)
    assert figures["cost"] == pytest.approx(0.24 * 2.5)  # 2.5 node-hours at 0.24 each
    assert figures["waste_gang_waiting_cost"] == pytest.approx(0.24 / 2)
    assert figures["waste_gang_waiting_cpu_seconds"] == pytest.approx(4 * HOUR / 2)
    assert step_costs([held], spec, prices)["waste_gang_waiting_cost"] == 0


def test_quota_held_idle_before_a_kueue_attempt_ran_is_waste_and_its_queue_wait_is_not() -> None:
    """An attempt Kueue admitted whose gang pods waited 15 min for their nodes held its quota
    then: reserved (in `cost`) and `quota_idle` waste; its hour in the queue before admission
    held nothing and costs nothing. Neither is counted again under how the attempt ended."""
    spec = resolve_spec({"cpu": 4, "memory": "16Gi", "nodes": 2})
    prices = Prices.from_config(PRICES)
    # two nodes: 1 h run, 15 min admitted and idle (both nodes' quota), 1 h queued
    held = ResourceUsage.reserved(spec, HOUR + HOUR / 4)
    attempt = replace(held, wall_seconds=HOUR, quota_idle_seconds=HOUR / 4, queued_seconds=HOUR)
    figures = step_costs([attempt], spec, prices)
    assert figures["cost"] == pytest.approx(0.24 * 2 * 1.25)
    assert figures["waste_quota_idle_cost"] == pytest.approx(0.24 * 2 / 4)
    assert figures["waste_quota_idle_cpu_seconds"] == pytest.approx(2 * 4 * HOUR / 4)
    oom = replace(attempt, ended=FailureReason.OOM_KILLED.value, max_rss_bytes=8 * GiB)
    figures = step_costs([oom, attempt], spec, prices)
    assert figures["waste_oom_killed_cost"] == pytest.approx(0.24 * 2)  # what it ran, only
    assert figures["waste_quota_idle_cost"] == pytest.approx(0.24 * 2 / 4 * 2)
    # 8 of 16 GiB unused on each of the 2 nodes for the hour it ran, not for its idle quota
    assert figures["waste_unused_memory_gib_seconds"] == pytest.approx(8 * 2 * HOUR)
    record = usage_from_record(usage_record(attempt))  # it travels to a resumed run worker
    assert (record.quota_idle_seconds, record.queued_seconds) == (HOUR / 4, HOUR)


def test_memory_reserved_above_the_measured_peak_is_waste_and_without_prices_no_money() -> None:
    spec = resolve_spec({"cpu": 1, "memory": "8Gi"})
    attempt = replace(reserved(1, 8), max_rss_bytes=2 * GiB)
    figures = step_costs([attempt], spec, None)
    assert figures["waste_unused_memory_gib_seconds"] == 6 * HOUR
    assert not [key for key in figures if key.endswith("_cost") or key in ("cost", "currency")]


def test_a_gpu_models_own_price_and_the_preemptible_factor_apply() -> None:
    prices = Prices.from_config(
        {**PRICES, "gpu_hour_by_type": {"h100": 4.0}, "preemptible_factor": 0.5, "currency": "EUR"}
    )
    assert prices is not None
    h100 = resolve_spec({"cpu": 8, "memory": "64Gi", "gpu": 1, "gpu_type": "h100"})
    other = resolve_spec({"cpu": 8, "memory": "64Gi", "gpu": 1, "gpu_type": "l4"})
    spot = resolve_spec({"cpu": 8, "memory": "64Gi", "gpu": 1, "preemptible": True})
    usage = reserved(8, 64, gpu=1)
    base = 8 * 0.04 + 64 * 0.005
    assert prices.of(usage, h100) == pytest.approx(base + 4.0)
    assert prices.of(usage, other) == pytest.approx(base + 2.0)
    assert prices.of(usage, spot) == pytest.approx((base + 2.0) * 0.5)
    assert step_costs([usage], h100, prices)["currency"] == "EUR"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"cpu_hours": 1}, r"prices: unknown key\(s\) \['cpu_hours'\]"),
        ({"cpu_hour": -1}, r"prices\.cpu_hour=-1"),
        ({"gpu_hour": "cheap"}, r"prices\.gpu_hour='cheap'"),
        ({"preemptible_factor": 0}, r"preemptible_factor=0.*\(0, 1\]"),
        ({"preemptible_factor": 1.5}, r"preemptible_factor=1\.5"),
        ({"gpu_hour_by_type": ["h100"]}, "gpu_hour_by_type must map a gpu_type"),
        ({"gpu_hour_by_type": {"h100": -4}}, r"gpu_hour_by_type\.h100=-4"),
        ({"currency": ""}, "currency=''"),
    ],
)
def test_bad_prices_are_refused_with_the_key_before_anything_runs(raw: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        ExecutorSettings.from_config({"prices": raw})


def test_each_attempt_is_counted_once_with_how_it_ended_also_after_a_resumed_run_worker() -> None:
    """The executor records why each attempt ended with what it reserved; a run worker that
    takes over reads the finished attempts back from the launch metadata, reasons included."""
    step = PlannedStep("embed", resolve_spec({"cpu": 2, "memory": "4Gi"}), "local", None)
    live = StepAttempts.of(step, None)
    oom = StepStatus(StepState.FAILED, FailureReason.OOM_KILLED, "exit 137")
    live.finished(reserved(2, 4, hours=0.25), oom)
    live.finished(reserved(2, 8, hours=0.5), StepStatus(StepState.SUCCEEDED))
    assert [u.ended for u in live.usage] == ["OOMKilled", ""]

    resumed = StepAttempts.of(step, None)
    resumed.usage = usage_from_metadata(live.launch_metadata()["usage_before"])
    assert resumed.usage == live.usage
    _, meta = resumed.summary("embed", Prices.from_config(PRICES))
    assert meta["waste_oom_killed_cost"] == pytest.approx((2 * 0.04 + 4 * 0.005) / 4)
    assert meta["cost"] == pytest.approx((2 * 0.04 + 4 * 0.005) / 4 + (2 * 0.04 + 8 * 0.005) / 2)


def test_a_backend_and_a_tenant_have_prices_of_their_own_over_the_sections() -> None:
    prices = Prices.from_config(
        {
            "cpu_hour": 0.04,
            "gpu_hour": 2.0,
            "currency": "EUR",
            "backends": {"slurm": {"gpu_hour": 1.2}, "kubernetes": {"cpu_hour": 0.05}},
            "tenants": {"team-a": {"gpu_hour": 3.0, "preemptible_factor": 0.5}},
        }
    )
    assert prices is not None
    in_team_a = prices.for_step("kubernetes", "team-a")
    assert (in_team_a.cpu_hour, in_team_a.gpu_hour, in_team_a.preemptible_factor) == (
        0.05,  # its backend's
        3.0,  # its own
        0.5,
    )
    assert in_team_a.currency == "EUR"
    assert prices.for_step("slurm", None).gpu_hour == 1.2
    assert prices.for_step("local", None) is prices  # nothing of its own
    with pytest.raises(
        ConfigError, match=r"prices.tenants.team-b: unknown key\(s\) \['currency'\]"
    ):
        Prices.from_config({"tenants": {"team-b": {"currency": "USD"}}})
    with pytest.raises(ConfigError, match="prices.backends.slurm.preemptible_factor=2"):
        Prices.from_config({"backends": {"slurm": {"preemptible_factor": 2}}})
    with pytest.raises(ConfigError, match="prices.tenants must map a tenant name"):
        Prices.from_config({"tenants": ["team-a"]})


def test_a_steps_summary_is_priced_at_its_tenants_prices() -> None:
    prices = Prices.from_config({"cpu_hour": 1.0, "tenants": {"team-a": {"cpu_hour": 2.0}}})
    spec = ComputeSpec(cpu=1, memory_bytes=2**30)
    hour = ResourceUsage(cpu_seconds=3600.0, wall_seconds=3600.0)
    costs = {}
    for tenant in ("team-a", "team-b"):
        live = StepAttempts(spec, "kubernetes", tenant, StepHistory("s").launched(2**30))
        live.finished(hour, StepStatus.succeeded("node-a"))
        costs[tenant] = live.summary("s", prices)[1]["cost"]
    assert costs == {"team-a": 2.0, "team-b": 1.0}
