"""Fixtures for checkpoint tests: a fresh store root on each filesystem, a fake clock."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_ai_orchestrator.checkpoint import CheckpointStore
from tests.support import FakeClock


@pytest.fixture(params=["file", "memory"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store root no other test uses, on the local disk and in fsspec's memory filesystem."""
    if request.param == "file":
        yield f"file://{tmp_path}/ckpt"
    else:
        yield f"memory://ckpt-{uuid.uuid4().hex}"


@pytest.fixture
def store(root: str) -> CheckpointStore:
    return CheckpointStore(root=root, handle_signals=False)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
