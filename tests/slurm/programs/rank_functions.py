"""Functions the gang steps of the Slurm tests run on every rank."""

from __future__ import annotations

import json
import os
from pathlib import Path

RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


def record_rank(out_dir: str) -> str:
    env = {name: os.environ[name] for name in RANK_VARS}
    env["node"] = os.environ["SLURMD_NODENAME"]
    Path(out_dir, f"rank-{env['RANK']}.json").write_text(json.dumps(env))
    return f"rank 0 on {env['node']}"


def fail_on_rank_one() -> None:
    if os.environ["RANK"] == "1":
        raise ValueError("rank 1 found a corrupt shard")
    import time

    time.sleep(300)


def hold_memory_on_rank_one(mib: str) -> None:
    """Rank 1 holds `mib` MiB until Slurm kills its srun step; rank 0 waits."""
    import time

    held = bytearray(int(mib) * 2**20 if os.environ["RANK"] == "1" else 0)
    time.sleep(300)
    del held


def sleep_forever() -> None:
    import time

    time.sleep(600)
