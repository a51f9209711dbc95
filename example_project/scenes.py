"""Synthetic satellite scenes: red and near-infrared bands over a grid of pixels.

Scenes are deterministic in their seed, so the pipeline needs no downloads. A scene "lands"
when a small JSON file appears in the inbox folder (the sensor watches it).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

REGIONS = ("north", "south", "east", "west")
TILE_PIXELS = 64 * 64


def inbox_dir() -> Path:
    """Where new scene files land (env `VEGETATION_INBOX`, default ./.demo/inbox)."""
    return Path(os.environ.get("VEGETATION_INBOX", ".demo/inbox"))


@dataclass(frozen=True)
class Scene:
    """A scene announcement: which region it covers and the seed of its pixels."""

    scene_id: str
    region: str
    seed: int


def latest_scene(region: str) -> Scene:
    """The newest scene for a region in the inbox, or a default synthetic one."""
    candidates = sorted(inbox_dir().glob(f"{region}-*.json")) if inbox_dir().exists() else []
    if not candidates:
        return Scene(scene_id=f"{region}-default", region=region, seed=REGIONS.index(region))
    doc = json.loads(candidates[-1].read_text())
    return Scene(scene_id=candidates[-1].stem, region=region, seed=int(doc.get("seed", 0)))


def drop_scene(region: str, seed: int) -> Path:
    """Write a scene announcement into the inbox (what a satellite ground station would do)."""
    inbox_dir().mkdir(parents=True, exist_ok=True)
    path = inbox_dir() / f"{region}-{seed:06d}.json"
    path.write_text(json.dumps({"region": region, "seed": seed}))
    return path


def render_tile(scene: Scene) -> pa.Table:
    """Pixels of one scene tile: red and NIR reflectance in [0, 1]."""
    rng = random.Random(scene.seed)
    red = [rng.uniform(0.02, 0.3) for _ in range(TILE_PIXELS)]
    nir = [min(1.0, r + rng.uniform(0.0, 0.6)) for r in red]
    return pa.table(
        {
            "region": pa.array([scene.region] * TILE_PIXELS),
            "pixel": pa.array(range(TILE_PIXELS), pa.int32()),
            "red": pa.array(red, pa.float32()),
            "nir": pa.array(nir, pa.float32()),
        }
    )
