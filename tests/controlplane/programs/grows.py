"""An external program that knows only dagster-pipes and does not report its memory: it holds
GROW_MIB (4 MiB at a time, every page touched), waits until its container's memory limit is
raised (cgroup v1 `memory.limit_in_bytes`, at most WAIT_S), then reports what it saw."""

import os
import time
from pathlib import Path

from dagster_pipes import open_dagster_pipes

LIMIT = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")

with open_dagster_pipes() as pipes:
    first = int(LIMIT.read_text())
    blocks = []
    for _ in range(int(os.environ["GROW_MIB"]) // 4):
        block = bytearray(4 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        blocks.append(block)
        time.sleep(0.01)
    deadline = time.monotonic() + float(os.environ.get("WAIT_S", "60"))
    while int(LIMIT.read_text()) == first and time.monotonic() < deadline:
        time.sleep(0.2)
    pipes.report_asset_materialization(
        metadata={
            "held_mib": len(blocks) * 4,
            "limit_before": first,
            "limit": int(LIMIT.read_text()),
        }
    )
