"""The same contract on s3:// (an in-process moto S3 server; s3fs and moto are dev dependencies)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from k8s_ai_orchestrator.checkpoint import CheckpointStore
from tests.requirements import DEV_EXTRA, require_module

require_module("s3fs", "s3fs (checkpoints on s3://)", DEV_EXTRA)
moto_server = require_module("moto.server", "moto[server] (an in-process S3)", DEV_EXTRA)
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_store(endpoint: str, monkeypatch: pytest.MonkeyPatch, request) -> CheckpointStore:
    import boto3

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    bucket = f"ckpt-{abs(hash(request.node.name)) % 10**8}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    options = {"endpoint_url": endpoint, "skip_instance_cache": True}
    return CheckpointStore(
        root=f"s3://{bucket}/ckpt", storage_options=options, handle_signals=False
    )


def test_state_round_trips_on_s3(s3_store: CheckpointStore) -> None:
    table = pa.table({"tile": list(range(100))})
    s3_store.open("dict").save({"next": 3}, progress=3)
    s3_store.open("bytes").save(b"\x00" * 1000)
    s3_store.open("table").save(table)
    assert s3_store.open("dict").load() == {"next": 3}
    assert s3_store.open("bytes").load() == b"\x00" * 1000
    assert s3_store.open("table").load().equals(table)


def test_a_folder_round_trips_on_s3(s3_store: CheckpointStore, tmp_path: Path) -> None:
    (tmp_path / "src" / "shard").mkdir(parents=True)
    (tmp_path / "src" / "shard" / "0.pt").write_bytes(b"weights")
    s3_store.open("train").save_dir(tmp_path / "src")
    assert s3_store.open("train").restore_dir(tmp_path / "dst")
    assert (tmp_path / "dst" / "shard" / "0.pt").read_bytes() == b"weights"


def test_keep_and_corrupt_fallback_on_s3(s3_store: CheckpointStore) -> None:
    import fsspec

    ckpt = s3_store.open("tiles")
    for i in range(4):
        latest = ckpt.save({"i": i})
    fs, base = fsspec.core.url_to_fs(s3_store.root, **s3_store.storage_options)
    folder = f"{base}/keys/tiles/unpartitioned"
    assert len(fs.ls(f"{folder}/data")) == 2
    fs.pipe_file(f"{folder}/{latest.files[0].path}", b"{}")
    assert s3_store.open("tiles").load() == {"i": 2}
