"""Small helpers shared by tests."""

from __future__ import annotations

import os


def pids_alive(pids: list[int]) -> list[int]:
    """The pids among `pids` that still exist."""
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive
