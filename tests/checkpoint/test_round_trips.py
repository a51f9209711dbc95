"""Whatever a step saves, the next handle on the same key loads back unchanged."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from k8s_ai_orchestrator.checkpoint import CheckpointStore

pytestmark = pytest.mark.timeout(60)


def test_a_fresh_key_loads_none(store: CheckpointStore) -> None:
    assert store.open("never-saved").load() is None


def test_a_dict_of_json_values_round_trips(store: CheckpointStore) -> None:
    state = {"next_tile": 17, "done": ["a", "b"], "loss": 0.25, "nested": {"ok": True}}
    store.open("tiles").save(state, progress=17)
    assert store.open("tiles").load() == state


def test_bytes_round_trip(store: CheckpointStore) -> None:
    payload = bytes(range(256)) * 1000
    store.open("blob").save(payload)
    assert store.open("blob").load() == payload


def test_a_pyarrow_table_round_trips(store: CheckpointStore) -> None:
    table = pa.table({"tile": list(range(1000)), "score": [i / 7 for i in range(1000)]})
    store.open("table").save(table)
    loaded = store.open("table").load()
    assert isinstance(loaded, pa.Table)
    assert loaded.equals(table)


def test_a_record_batch_is_saved_as_a_table(store: CheckpointStore) -> None:
    batch = pa.record_batch({"x": [1, 2, 3]})
    store.open("batch").save(batch)
    assert store.open("batch").load().equals(pa.Table.from_batches([batch]))


def test_a_framework_checkpoint_folder_round_trips(store: CheckpointStore, tmp_path: Path) -> None:
    written = tmp_path / "written"
    (written / "optim").mkdir(parents=True)
    (written / "model.pt").write_bytes(b"\x00weights" * 1000)
    (written / "optim" / "adam.pt").write_bytes(b"moments")
    (written / "empty.txt").write_bytes(b"")
    store.open("train").save_dir(written, progress=3)

    restored = tmp_path / "restored"
    assert store.open("train").restore_dir(restored) is True
    assert sorted(p.relative_to(restored).as_posix() for p in restored.rglob("*")) == [
        "empty.txt",
        "model.pt",
        "optim",
        "optim/adam.pt",
    ]
    assert (restored / "model.pt").read_bytes() == b"\x00weights" * 1000
    assert (restored / "optim" / "adam.pt").read_bytes() == b"moments"


def test_restore_dir_replaces_same_named_files_and_keeps_others(
    store: CheckpointStore, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "model.pt").write_bytes(b"saved")
    store.open("train").save_dir(source)
    target = tmp_path / "target"
    target.mkdir()
    (target / "model.pt").write_bytes(b"stale")
    (target / "notes.txt").write_bytes(b"mine")

    store.open("train").restore_dir(target)

    assert (target / "model.pt").read_bytes() == b"saved"
    assert (target / "notes.txt").read_bytes() == b"mine"


def test_restore_dir_without_a_checkpoint_returns_false(
    store: CheckpointStore, tmp_path: Path
) -> None:
    assert store.open("train").restore_dir(tmp_path / "out") is False


def test_the_latest_save_wins(store: CheckpointStore) -> None:
    ckpt = store.open("tiles")
    for i in range(5):
        ckpt.save({"i": i}, progress=i)
    assert store.open("tiles").load() == {"i": 4}


def test_resume_metadata_names_the_commit_and_progress(store: CheckpointStore) -> None:
    commit = store.open("tiles").save({"next": 45}, progress=45)
    resumed = store.open("tiles")
    resumed.load()
    meta = resumed.resume_metadata()
    assert meta["resumed_from_checkpoint"] == commit.id
    assert meta["resumed_progress"] == 45
    assert meta["checkpoint_attempt"] == 0
    assert meta["resumed_checkpoint_saved_at"].endswith("Z")


def test_resume_metadata_is_empty_after_a_fresh_start(store: CheckpointStore) -> None:
    fresh = store.open("tiles")
    assert fresh.load() is None
    assert fresh.resume_metadata() == {}


def test_commits_record_the_infrastructure_attempt(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K8S_AI_ATTEMPT", "3")
    assert store.open("tiles").save({"a": 1}).attempt == 3


def test_clear_deletes_every_commit(store: CheckpointStore) -> None:
    ckpt = store.open("tiles")
    ckpt.save({"a": 1})
    ckpt.clear()
    assert store.open("tiles").load() is None


def test_a_finished_with_block_clears_its_checkpoints_by_default(root: str) -> None:
    store = CheckpointStore(root=root, handle_signals=False)
    with store.open("tiles") as ckpt:
        ckpt.save({"a": 1})
    assert store.open("tiles").load() is None


def test_clear_by_step_deletes_what_the_step_saved(root: str) -> None:
    store = CheckpointStore(root=root, handle_signals=False)
    store.open("tiles").save({"a": 1})
    store.clear("tiles")
    assert store.open("tiles").load() is None


def test_clear_on_success_keeps_checkpoints_when_the_block_fails(root: str) -> None:
    store = CheckpointStore(root=root, clear_on_success=True, handle_signals=False)
    with pytest.raises(RuntimeError), store.open("tiles") as ckpt:
        ckpt.save({"a": 1})
        raise RuntimeError("step failed")
    assert store.open("tiles").load() == {"a": 1}


def test_without_clear_on_success_checkpoints_outlive_the_step(root: str) -> None:
    store = CheckpointStore(root=root, clear_on_success=False, handle_signals=False)
    with store.open("tiles") as ckpt:
        ckpt.save({"a": 1})
    assert store.open("tiles").load() == {"a": 1}


@pytest.mark.parametrize("empty", [b"", {}, pa.table({"x": pa.array([], pa.int64())})])
def test_empty_states_round_trip(store: CheckpointStore, empty: object) -> None:
    store.open("empty").save(empty)  # type: ignore[arg-type]
    loaded = store.open("empty").load()
    assert loaded.equals(empty) if isinstance(empty, pa.Table) else loaded == empty


def test_large_states_round_trip_and_are_checksummed(store: CheckpointStore) -> None:
    import hashlib
    import os

    payload = os.urandom(40 << 20)  # large enough to hash alongside the writes
    values = pa.py_buffer(os.urandom(40 << 20))
    table = pa.table({"v": pa.Array.from_buffers(pa.int64(), (40 << 20) // 8, [None, values])})
    blob = store.open("large-bytes").save(payload)
    store.open("large-table").save(table)
    assert blob.files[0].sha256 == hashlib.sha256(payload).hexdigest()
    assert store.open("large-bytes").load() == payload
    assert store.open("large-table").load().equals(table)
