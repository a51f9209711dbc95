"""Helpers shared by the checkpoint tests."""

from __future__ import annotations

import sys
from pathlib import Path

PROGRAMS = Path(__file__).parent / "programs"


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def program(name: str) -> list[str]:
    """Command line running one of the helper programs with this interpreter."""
    return [sys.executable, str(PROGRAMS / name)]
