"""`k8s-ai cost`: the figures steps recorded, grouped over runs, printed and charted.

The end-to-end checks against a real instance and real step processes are in
`tests/local/test_local_executor.py` (an `ai_executor` step relaunched after OOM kills) and
`tests/pipes/test_pipes_local.py` (an `AICompute` program relaunched after a preemption).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from k8s_ai_orchestrator.cli import main
from k8s_ai_orchestrator.launch.cost import CAUSES
from k8s_ai_orchestrator.report.costchart import chart_unit, write_cost_png
from k8s_ai_orchestrator.report.costs import (
    NO_ASSET,
    CostEntry,
    aggregate,
    entries_from_events,
    format_table,
)
from k8s_ai_orchestrator.report.timeline import LoggedEvent

DAY1, DAY2 = 1764547200.0, 1764633600.0  # 2025-12-01 and 2025-12-02, 00:00 UTC


def summary(step: str, at: float, **figures: Any) -> LoggedEvent:
    meta = {"k8s_ai/cpu_seconds": 3600.0, "k8s_ai/tenant": "team-a", **figures}
    return LoggedEvent(at, "ENGINE_EVENT", step, f"Step '{step}' reserved ...", meta)


def materialized(step: str, at: float, asset: str, partition: str = "") -> LoggedEvent:
    return LoggedEvent(at, "ASSET_MATERIALIZATION", step, asset=asset, partition=partition)


def priced(cost: float, oom: float = 0.0, currency: str = "USD") -> dict[str, Any]:
    return {
        "k8s_ai/cost": cost,
        "k8s_ai/currency": currency,
        "k8s_ai/waste_oom_killed_cost": oom,
        "k8s_ai/waste_oom_killed_cpu_seconds": 1800.0 if oom else 0.0,
    }


def test_a_step_is_charged_to_the_assets_and_partition_it_materialized() -> None:
    events = [
        materialized("embed", DAY1, "embeddings", "p1"),
        materialized("embed", DAY1, "index", "p1"),
        summary("embed", DAY1 + 5, **priced(2.0, oom=0.5)),
        summary("plain_op", DAY1 + 6),  # an op: no asset, no prices
        LoggedEvent(DAY1 + 7, "ENGINE_EVENT", "embed", "Launching step 'embed'", {}),
    ]
    embed, plain = entries_from_events("r1", "daily", {"dagster/partition": "run-tag"}, events)
    assert (embed.asset, embed.partition, embed.tenant, embed.day) == (
        "embeddings, index",
        "p1",
        "team-a",
        "2025-12-01",
    )
    assert (embed.cost, embed.waste_cost["oom_killed"], embed.cpu_seconds) == (2.0, 0.5, 3600.0)
    assert (plain.asset, plain.partition, plain.cost) == (NO_ASSET, "run-tag", None)


def test_an_ai_compute_program_is_read_from_its_materialization() -> None:
    meta = {
        "program": "tiles-pipes",
        "backend": "kubernetes",
        "attempts": 2,
        "attempts_usage": [],
        "tenant": "team-b",
        "cpu_seconds": 10.0,
        "cost": 0.25,
        "currency": "EUR",
        "waste_interrupted_cost": 0.1,
    }
    event = LoggedEvent(DAY2, "ASSET_MATERIALIZATION", "tiles", metadata=meta, asset="tiles")
    (entry,) = entries_from_events("r2", "job", {}, [event])
    assert (entry.step, entry.asset, entry.tenant, entry.backend) == (
        "tiles › tiles-pipes",
        "tiles",
        "team-b",
        "kubernetes",
    )
    assert (entry.cost, entry.currency, entry.waste_cost["interrupted"]) == (0.25, "EUR", 0.1)


def entry(asset: str, day: str, cost: float | None, currency: str = "USD", **kw: Any) -> CostEntry:
    waste = {"oom_killed": (cost or 0.0) / 4} if cost is not None else {}
    return CostEntry(
        "r", "job", asset, asset, kw.get("partition", ""), kw.get("tenant", "team-a"), "local",
        day, cpu_seconds=3600.0, gpu_seconds=kw.get("gpu_seconds", 0.0), cost=cost,
        currency=currency if cost is not None else "", waste_cost=waste,
    )  # fmt: skip


def test_groups_sum_costliest_first_and_unpriced_or_other_currency_groups_stay_apart() -> None:
    entries = [
        entry("embed", "2025-12-01", 1.0),
        entry("embed", "2025-12-02", 3.0),
        entry("train", "2025-12-01", 8.0),
        entry("train", "2025-12-01", 2.0, currency="EUR"),
        entry("score", "2025-12-02", None),
    ]
    rows = aggregate(entries, ("asset",))
    assert [(r.key, r.currency, r.steps, r.cost, r.wasted) for r in rows] == [
        (("train",), "USD", 1, 8.0, 2.0),
        (("embed",), "USD", 2, 4.0, 1.0),
        (("train",), "EUR", 1, 2.0, 0.5),
        (("score",), "", 1, None, None),
    ]
    by_day = aggregate(entries, ("day", "tenant"))
    assert {r.key for r in by_day} == {("2025-12-01", "team-a"), ("2025-12-02", "team-a")}
    table = format_table(rows, ("asset",)).splitlines()
    assert table[0].split()[:5] == ["asset", "currency", "steps", "cost", "wasted"]
    assert table[1].split()[:5] == ["train", "USD", "1", "8.0000", "2.0000"]
    assert table[3].split()[:5] == ["train", "EUR", "1", "2.0000", "0.5000"]
    assert table[4].split()[:5] == ["score", "—", "1", "—", "—"]  # never a made-up price
    assert len(table) == 5
    unpriced = format_table(aggregate(entries[-1:], ("asset",)), ("asset",)).splitlines()
    assert unpriced[-1].startswith("(no prices in the executor config: resource-hours only")
    with pytest.raises(ValueError, match="cannot group by colour"):
        aggregate(entries, ("colour",))


def test_the_chart_is_in_money_when_priced_else_in_gpu_or_cpu_hours(tmp_path: Path) -> None:
    priced_entries = [entry("embed", "2025-12-01", 1.0), entry("embed", "2025-12-01", 2.0, "EUR")]
    assert chart_unit(priced_entries[:1] * 2 + priced_entries[1:]) == "USD"
    assert chart_unit([entry("score", "2025-12-01", None)]) == "CPU-hours"
    assert chart_unit([entry("train", "2025-12-01", None, gpu_seconds=7200.0)]) == "GPU-hours"
    png = write_cost_png(priced_entries, "asset", tmp_path / "charts" / "cost.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    every_cause = replace(priced_entries[0], waste_cost=dict.fromkeys(CAUSES, 0.1))
    png = write_cost_png([every_cause], "asset", tmp_path / "charts" / "causes.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # each cause has its colour


def test_the_command_refuses_an_unknown_grouping_and_a_missing_instance(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["cost", "--by", "asset,colour"]) == 2
    assert "group by one or more of asset, partition" in capsys.readouterr().err
    assert main(["cost", "--days", "0"]) == 2
    assert "--days 0: give 1 or more" in capsys.readouterr().err
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main(["cost"]) == 2
    assert "DAGSTER_HOME is not set" in capsys.readouterr().err


def test_the_command_says_so_when_no_run_recorded_figures(
    dagster_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cost", "--since", "2025-12-01", "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.startswith("no step with recorded figures in the runs from")
    assert not (tmp_path / "out").exists()
