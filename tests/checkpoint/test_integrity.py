"""Commits are atomic, verified, pruned; damage degrades to an older commit or a fresh start."""

from __future__ import annotations

import json
import logging

import fsspec
import pytest

from k8s_ai_orchestrator.checkpoint import CheckpointStore
from k8s_ai_orchestrator.errors import CheckpointError

pytestmark = pytest.mark.timeout(60)
LOGGER = "k8s_ai_orchestrator.checkpoint"


def key_folder(root: str, key: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The documented layout: <root>/keys/<encoded key>/unpartitioned/."""
    fs, base = fsspec.core.url_to_fs(root)
    return fs, f"{base.rstrip('/')}/keys/{key}/unpartitioned"


def manifest_of(root: str, key: str) -> dict:
    fs, folder = key_folder(root, key)
    return json.loads(fs.cat_file(f"{folder}/manifest.json"))


def commit_dirs(root: str, key: str) -> list[str]:
    fs, folder = key_folder(root, key)
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(f"{folder}/data", detail=False))


def test_only_the_last_keep_commits_are_kept(root: str) -> None:
    store = CheckpointStore(root=root, keep=3, handle_signals=False)
    ckpt = store.open("tiles")
    commits = [ckpt.save({"i": i}) for i in range(6)]
    assert [c["id"] for c in manifest_of(root, "tiles")["commits"]] == [
        c.id for c in reversed(commits[-3:])
    ]
    assert commit_dirs(root, "tiles") == sorted(c.id for c in commits[-3:])


def test_keep_defaults_to_two(store: CheckpointStore, root: str) -> None:
    ckpt = store.open("tiles")
    for i in range(4):
        ckpt.save({"i": i})
    assert len(commit_dirs(root, "tiles")) == 2


def test_each_commit_records_the_sha256_and_size_of_its_data(
    store: CheckpointStore, root: str
) -> None:
    import hashlib

    store.open("blob").save(b"0123456789")
    (entry,) = manifest_of(root, "blob")["commits"][0]["files"]
    assert entry["size"] == 10
    assert entry["sha256"] == hashlib.sha256(b"0123456789").hexdigest()


def test_a_corrupt_latest_commit_falls_back_to_the_previous_one_with_a_warning(
    store: CheckpointStore, root: str, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = store.open("tiles")
    ckpt.save({"i": 1}, progress=1)
    latest = ckpt.save({"i": 2}, progress=2)
    fs, folder = key_folder(root, "tiles")
    fs.pipe_file(f"{folder}/{latest.files[0].path}", b'{"i": 3}')

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        resumed = store.open("tiles")
        assert resumed.load() == {"i": 1}
    assert f"checkpoint {latest.id}" in caplog.text and "corrupt" in caplog.text
    assert resumed.resume_metadata()["resumed_progress"] == 1


def test_a_missing_data_file_falls_back_to_the_previous_commit(
    store: CheckpointStore, root: str
) -> None:
    ckpt = store.open("tiles")
    ckpt.save(b"old")
    latest = ckpt.save(b"new")
    fs, folder = key_folder(root, "tiles")
    fs.rm(f"{folder}/data/{latest.id}", recursive=True)
    assert store.open("tiles").load() == b"old"


def test_a_save_after_a_corrupt_commit_drops_it_from_the_manifest(
    store: CheckpointStore, root: str
) -> None:
    ckpt = store.open("tiles")
    ckpt.save({"i": 1})
    bad = ckpt.save({"i": 2})
    fs, folder = key_folder(root, "tiles")
    fs.pipe_file(f"{folder}/{bad.files[0].path}", b"garbage")
    resumed = store.open("tiles")
    resumed.load()
    resumed.save({"i": 3})
    assert bad.id not in [c["id"] for c in manifest_of(root, "tiles")["commits"]]


def test_when_every_commit_is_corrupt_the_step_starts_fresh(
    store: CheckpointStore, root: str, caplog: pytest.LogCaptureFixture
) -> None:
    only = store.open("tiles").save({"i": 1})
    fs, folder = key_folder(root, "tiles")
    fs.pipe_file(f"{folder}/{only.files[0].path}", b"{}")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert store.open("tiles").load() is None
    assert "starting fresh" in caplog.text


@pytest.mark.parametrize(
    "garbage",
    [b"\x00\xff not json", b"[]", b'{"format": "k8s-ai-checkpoint/1"}', b'{"format": 2}',
     b'{"format": "k8s-ai-checkpoint/1", "fingerprint": "", "commits": [{"id": 1}]}',
     b'{"format": "k8s-ai-checkpoint/1", "fingerprint": "", "commits": [{"id": "x", "seq": 1,'
     b' "kind": "json", "saved_at": 0, "files": [{"path": "data/../../../etc/passwd",'
     b' "size": 1, "sha256": "0"}]}]}'],
)  # fmt: skip
def test_a_garbage_manifest_starts_fresh_with_a_warning_and_the_next_save_works(
    store: CheckpointStore, root: str, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    store.open("tiles").save({"i": 1})
    fs, folder = key_folder(root, "tiles")
    fs.pipe_file(f"{folder}/manifest.json", garbage)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ckpt = store.open("tiles")
        assert ckpt.load() is None
    assert "manifest" in caplog.text and "starting fresh" in caplog.text
    ckpt.save({"i": 2})
    assert store.open("tiles").load() == {"i": 2}


def test_a_different_fingerprint_starts_fresh_and_says_so(
    store: CheckpointStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.open("tiles", fingerprint="v1").save({"i": 1})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert store.open("tiles", fingerprint="v2").load() is None
    assert "'v1'" in caplog.text and "'v2'" in caplog.text and "starting fresh" in caplog.text


def test_the_same_fingerprint_resumes(store: CheckpointStore) -> None:
    store.open("tiles", fingerprint="v1").save({"i": 1})
    assert store.open("tiles", fingerprint="v1").load() == {"i": 1}


def test_a_save_under_a_new_fingerprint_replaces_the_old_commits(
    store: CheckpointStore, root: str
) -> None:
    old = store.open("tiles", fingerprint="v1").save({"i": 1})
    new = store.open("tiles", fingerprint="v2").save({"i": 2})
    assert commit_dirs(root, "tiles") == [new.id]
    assert old.id != new.id
    assert store.open("tiles", fingerprint="v2").load() == {"i": 2}


class NotSerializable:
    pass


@pytest.mark.parametrize(
    ("state", "named"),
    [
        (NotSerializable(), "NotSerializable"),
        ({"model": {"weights": NotSerializable()}}, "state['model']['weights']"),
        ({"ok": [1, 2, {1, 2}]}, "set"),
        ({1: "int key"}, "int"),
        ({"loss": float("nan")}, "nan"),
        ([1, 2, 3], "list"),
    ],
)
def test_unserializable_state_is_refused_naming_the_type(
    store: CheckpointStore, state: object, named: str
) -> None:
    with pytest.raises(CheckpointError, match=named.replace("[", r"\[").replace("]", r"\]")):
        store.open("tiles").save(state)  # type: ignore[arg-type]
    assert store.open("tiles").load() is None


def test_progress_must_be_a_number(store: CheckpointStore) -> None:
    with pytest.raises(CheckpointError, match="progress='half'"):
        store.open("tiles").save({"i": 1}, progress="half")  # type: ignore[arg-type]


def test_loading_a_folder_checkpoint_with_load_says_to_use_restore_dir(
    store: CheckpointStore, tmp_path
) -> None:
    store.open("train").save_dir(tmp_path)
    with pytest.raises(CheckpointError, match="restore_dir"):
        store.open("train").load()


def test_one_flipped_byte_in_a_large_commit_is_detected(store: CheckpointStore, root: str) -> None:
    import os

    ckpt = store.open("large")
    ckpt.save(b"previous")
    latest = ckpt.save(os.urandom(40 << 20))
    fs, folder = key_folder(root, "large")
    path = f"{folder}/{latest.files[0].path}"
    data = bytearray(fs.cat_file(path))
    data[len(data) // 2] ^= 0x01
    fs.pipe_file(path, bytes(data))
    assert store.open("large").load() == b"previous"
