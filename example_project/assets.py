"""The pipeline: per-region tiles (xs) → mosaic (xl) → vegetation index (gpu-1) → risk (s).

The mosaic and the vegetation index are long steps in real life, so they checkpoint: a
preempted attempt resumes where its last checkpoint left off.
"""

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from dagster import AssetExecutionContext, AssetIn, AssetsDefinition, asset

from k8s_ai_orchestrator import CheckpointStore, compute
from k8s_ai_orchestrator.checkpoint import CheckpointHandle

from .scenes import REGIONS, latest_scene, render_tile

MOSAIC_CHUNKS_PER_TILE = 8
UNIT_SECONDS = float(os.environ.get("VEGETATION_UNIT_SECONDS", "0.05"))


def _tile_asset(region: str) -> AssetsDefinition:
    @asset(
        name=f"tiles_{region}",
        group_name="vegetation",
        op_tags=compute("xs"),
        description=f"Calibrated pixels of the newest scene over the {region} region.",
    )
    def tiles(context: AssetExecutionContext) -> pa.Table:
        scene = latest_scene(region)
        table = render_tile(scene)
        context.add_output_metadata({"scene": scene.scene_id, "pixels": table.num_rows})
        return table

    return tiles


tile_assets = [_tile_asset(region) for region in REGIONS]


def _maybe_get_preempted(context: AssetExecutionContext, unit: int, ckpt: CheckpointHandle) -> None:
    """Demo hook: announce this process so the demo can SIGTERM it, as a cluster would."""
    at = os.environ.get("VEGETATION_PREEMPT_AT")
    if at is None or unit != int(at) or os.environ.get("K8S_AI_ATTEMPT", "0") != "0":
        return
    marker = Path(os.environ.get("VEGETATION_PREEMPT_MARKER", ".demo/preempt-me"))
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(os.getpid()))
    context.log.info(f"unit {unit}: waiting to be preempted (pid {os.getpid()})")
    deadline = time.monotonic() + 30
    while not ckpt.preempted and time.monotonic() < deadline:
        time.sleep(0.05)


@asset(
    group_name="vegetation",
    op_tags=compute("xl"),
    ins={f"tiles_{region}": AssetIn(f"tiles_{region}") for region in REGIONS},
    description="All regions stitched into one mosaic; checkpoints every few chunks.",
)
def mosaic(
    context: AssetExecutionContext, checkpoints: CheckpointStore, **tiles_by_region: pa.Table
) -> pa.Table:
    tiles = [tiles_by_region[f"tiles_{region}"] for region in REGIONS]
    chunks = [
        tile.slice(i * len(tile) // MOSAIC_CHUNKS_PER_TILE, len(tile) // MOSAIC_CHUNKS_PER_TILE)
        for tile in tiles
        for i in range(MOSAIC_CHUNKS_PER_TILE)
    ]
    ckpt = checkpoints.open(context)
    state = ckpt.load()
    done: list[pa.Table] = [state] if isinstance(state, pa.Table) else []
    start = done[0].num_rows // len(chunks[0]) if done else 0
    for unit in range(start, len(chunks)):
        _maybe_get_preempted(context, unit, ckpt)
        time.sleep(UNIT_SECONDS)  # stands in for reprojection and blending
        done.append(chunks[unit])
        if ckpt.due() or unit == len(chunks) - 1:
            merged = pa.concat_tables(done)
            done = [merged]
            ckpt.save(merged, progress=unit + 1)
            ckpt.exit_if_preempted()
    result = pa.concat_tables(done)
    context.add_output_metadata(
        {"units": len(chunks), "units_redone_avoided": start, **ckpt.resume_metadata()}
    )
    return result


@asset(
    group_name="vegetation",
    op_tags=compute("gpu-1", tenant="vision"),
    description="NDVI per pixel and a small embedding per region (a GPU step in production).",
)
def vegetation_index(context: AssetExecutionContext, mosaic: pa.Table) -> pa.Table:
    red, nir = mosaic.column("red"), mosaic.column("nir")
    ndvi = pc.divide(pc.subtract(nir, red), pc.add(nir, red))
    table = mosaic.select(["region", "pixel"]).append_column("ndvi", ndvi)
    context.add_output_metadata({"mean_ndvi": round(pc.mean(ndvi).as_py(), 4)})
    return table


@asset(
    group_name="vegetation",
    op_tags=compute("s", tenant="vision"),
    description="Wildfire/vegetation risk score per region: share of dry pixels.",
)
def risk_scores(context: AssetExecutionContext, vegetation_index: pa.Table) -> dict[str, float]:
    scores = {}
    for region in REGIONS:
        rows = vegetation_index.filter(pc.equal(vegetation_index.column("region"), region))
        dry = pc.sum(pc.less(rows.column("ndvi"), 0.3)).as_py() or 0
        scores[region] = round(dry / max(rows.num_rows, 1), 4)
    context.add_output_metadata({f"risk_{k}": v for k, v in scores.items()})
    return scores
