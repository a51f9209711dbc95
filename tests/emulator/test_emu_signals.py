"""A container's process starts with every signal at its default, whatever the process that
spawns it ignores: a run worker started in the background ignores SIGINT, and Dagster maps
SIGTERM to SIGINT's handler, so an inherited ignored SIGTERM made evictions wait for SIGKILL."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_ai_orchestrator.testing.kube.containers import ContainerProcess

pytestmark = pytest.mark.emulator


@pytest.fixture
def sigterm_ignored_here() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_container_gets_sigterm_even_when_its_spawner_ignores_it(
    tmp_path: Path, sigterm_ignored_here: None
) -> None:
    sleeper = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
    log = tmp_path / "log"
    container = ContainerProcess(sleeper, {}, tmp_path, log, None)
    deadline = time.monotonic() + 30
    while b"up" not in log.read_bytes():  # running its own code, past any start-up
        assert time.monotonic() < deadline and container.proc.poll() is None
        time.sleep(0.02)

    container.signal_group(signal.SIGTERM)

    assert container.proc.wait(timeout=10) == -signal.SIGTERM
