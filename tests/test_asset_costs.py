"""An ended step's figures on the assets it materialized (`executor.asset_costs`), from the
run's events alone: one observation per asset and partition, once, also after a resume."""

from __future__ import annotations

from dagster import AssetKey, AssetMaterialization, AssetObservation, MetadataValue
from dagster._core.events import (
    AssetObservationData,
    DagsterEvent,
    DagsterEventType,
    EngineEventData,
    StepMaterializationData,
)

from k8s_ai_orchestrator.executor.asset_costs import STEP_KEY, AssetCosts


def event(kind: DagsterEventType, step: str, data: object) -> DagsterEvent:
    return DagsterEvent(kind.value, "job", event_specific_data=data, step_key=step)  # type: ignore[arg-type]


def materialized(step: str, asset: str, partition: str | None = None) -> DagsterEvent:
    made = AssetMaterialization(asset, partition=partition)
    return event(DagsterEventType.ASSET_MATERIALIZATION, step, StepMaterializationData(made))


def summary(step: str) -> DagsterEvent:
    meta = {
        "k8s_ai/wall_seconds": MetadataValue.float(12.0),
        "k8s_ai/cpu_seconds": MetadataValue.float(48.0),
        "k8s_ai/cost": MetadataValue.float(0.53),
        "k8s_ai/currency": MetadataValue.text("EUR"),
        "k8s_ai/waste_oom_killed_cost": MetadataValue.float(0.2),
        "k8s_ai/nodes_used": MetadataValue.text("gpu-1"),
    }
    return event(DagsterEventType.ENGINE_EVENT, step, EngineEventData(metadata=meta))


def test_a_steps_summary_is_observed_on_each_asset_and_partition_it_materialized() -> None:
    costs = AssetCosts()
    assert costs.seen([materialized("embed", "embeddings", "2026-12-01")]) == []
    due = costs.seen([materialized("embed", "index", "2026-12-01"), summary("embed")])
    assert [(step, o.asset_key, o.partition) for step, o in due] == [
        ("embed", AssetKey("embeddings"), "2026-12-01"),
        ("embed", AssetKey("index"), "2026-12-01"),
    ]
    meta = due[0][1].metadata
    assert meta["k8s_ai/cost"] == MetadataValue.float(0.53)
    assert meta["k8s_ai/waste_oom_killed_cost"] == MetadataValue.float(0.2)
    assert meta["k8s_ai/currency"] == MetadataValue.text("EUR")
    assert meta[STEP_KEY] == MetadataValue.text("embed")
    assert meta["k8s_ai/step_assets"] == MetadataValue.int(2)
    assert "k8s_ai/nodes_used" not in meta  # where it ran is the summary's, not a plot
    assert costs.seen([summary("embed")]) == []  # once


def test_a_resumed_run_worker_observes_only_what_the_dead_one_did_not() -> None:
    written = AssetObservation("embeddings", metadata={STEP_KEY: "embed", "k8s_ai/cost": 0.53})
    prior = [
        materialized("embed", "embeddings"),
        summary("embed"),
        event(DagsterEventType.ASSET_OBSERVATION, "embed", AssetObservationData(written)),
        materialized("score", "scores"),
        summary("score"),  # the run worker died before it observed this one
    ]
    due = AssetCosts().seen(prior)
    assert [(step, o.asset_key) for step, o in due] == [("score", AssetKey("scores"))]


def test_a_step_that_materialized_nothing_is_observed_nowhere() -> None:
    assert AssetCosts().seen([summary("train")]) == []
