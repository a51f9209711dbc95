"""kill -9 at random moments during saves never leaves a torn or unverifiable checkpoint."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import signal
from pathlib import Path

import fsspec
import pytest

from k8s_ai_orchestrator.checkpoint import CheckpointStore

from .support import CRASH_KEY, CRASH_KINDS, crash_state, crash_state_number, save_forever

pytestmark = pytest.mark.timeout(120)
KILLS = 60


def uncommitted_data(root: str) -> set[str]:
    """Commit folders that exist on disk but that the manifest does not name."""
    fs, base = fsspec.core.url_to_fs(root)
    folder = f"{base}/keys/{CRASH_KEY}/unpartitioned"
    named = {c["id"] for c in json.loads(fs.cat_file(f"{folder}/manifest.json"))["commits"]}
    on_disk = {p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(f"{folder}/data", detail=False)}
    return on_disk - named


@pytest.mark.slow
def test_kill_9_during_saves_leaves_a_complete_old_or_new_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = f"file://{tmp_path}/ckpt"
    store = CheckpointStore(root=root, handle_signals=False)
    store.open(CRASH_KEY).save(crash_state("json", 0))  # type: ignore[arg-type]
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["pyarrow", "k8s_ai_orchestrator.checkpoint", __name__])
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    last, torn_writes = 0, 0

    with caplog.at_level(logging.WARNING, logger="k8s_ai_orchestrator.checkpoint"):
        for kill in range(KILLS):
            started = context.Event()
            kind = CRASH_KINDS[kill % len(CRASH_KINDS)]
            saver = context.Process(target=save_forever, args=(root, kind, last + 1, started))
            saver.start()
            assert started.wait(60), "the saving process did not start"
            started_at_kill = rng.uniform(0.0, 0.06)
            saver.join(started_at_kill)
            os.kill(saver.pid, signal.SIGKILL)  # type: ignore[arg-type]
            saver.join(30)
            torn_writes += bool(uncommitted_data(root))

            current = crash_state_number(store.open(CRASH_KEY).load())
            assert current >= last, f"went back from {last} to {current} (seed {seed})"
            last = current

    assert caplog.text == "", f"a commit was found corrupt (seed {seed})"
    assert last >= 5, "too few saves happened between kills to test anything"
    assert torn_writes >= 5, f"only {torn_writes} kills landed mid-save (seed {seed})"
