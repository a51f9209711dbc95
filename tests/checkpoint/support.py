"""Helpers shared by the checkpoint tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

PROGRAMS = Path(__file__).parent / "programs"


def program(name: str) -> list[str]:
    """Command line running one of the helper programs with this interpreter."""
    return [sys.executable, str(PROGRAMS / name)]


CRASH_KEY = "crash-consistency"
CRASH_KINDS = ("json", "bytes", "arrow")


def crash_state(kind: str, i: int) -> object:
    """A state of a few MB whose every part says which save `i` it belongs to."""
    import pyarrow as pa

    if kind == "json":
        return {"i": i, "payload": [i] * 100_000}
    if kind == "bytes":
        return i.to_bytes(8, "big") + bytes([i % 256]) * (2 << 20)
    return pa.table({"i": pa.repeat(pa.scalar(i, pa.int64()), 300_000)})


def crash_state_number(state: object) -> int:
    """Which save a loaded state came from; fails if its parts disagree (a torn state)."""
    import pyarrow as pa

    if isinstance(state, dict):
        i = state["i"]
        assert state["payload"] == [i] * 100_000
        return int(i)
    if isinstance(state, bytes):
        i = int.from_bytes(state[:8], "big")
        assert state[8:] == bytes([i % 256]) * (2 << 20)
        return i
    assert isinstance(state, pa.Table) and state.num_rows == 300_000
    values = state.column("i").unique().to_pylist()
    assert len(values) == 1
    return int(values[0])


def save_forever(root: str, kind: str, first: int, started: Any) -> None:
    """Child process body: commit states first, first+1, ... until killed."""
    from k8s_ai_orchestrator.checkpoint import CheckpointStore

    ckpt = CheckpointStore(root=root, handle_signals=False).open(CRASH_KEY)
    started.set()
    i = first
    while True:
        ckpt.save(crash_state(kind, i), progress=i)  # type: ignore[arg-type]
        i += 1
