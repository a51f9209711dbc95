"""Keys never leave the root; bad roots fail before the step's work starts."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import (
    AssetExecutionContext,
    DagsterUserCodeExecutionError,
    StaticPartitionsDefinition,
    asset,
    materialize,
)

from k8s_ai_orchestrator.checkpoint import CheckpointKey, CheckpointStore
from k8s_ai_orchestrator.errors import CheckpointError
from tests.requirements import INSTALL_DEPS, require_program

pytestmark = pytest.mark.timeout(60)

ESCAPES = ["..", "../../outside", "/etc/passwd", ".", "a/../../b", "%2E%2E", "..\\..\\x", ""]


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


@pytest.mark.parametrize("key", [k for k in ESCAPES if k])
def test_string_keys_cannot_escape_the_root(tmp_path: Path, key: str) -> None:
    root = tmp_path / "sandbox" / "root"
    store = CheckpointStore(root=f"file://{root}", handle_signals=False)
    store.open(key).save({"key": key})
    assert all(root in p.parents for p in files_under(tmp_path))
    assert store.open(key).load() == {"key": key}


@pytest.mark.parametrize("partition", ESCAPES)
def test_partition_keys_cannot_escape_their_key_folder(partition: str) -> None:
    path = CheckpointKey(("mosaic",), partition=partition).relative_path()
    parts = path.split("/")
    assert parts[:2] == ["assets", "mosaic"] and len(parts) == 3
    assert parts[2].startswith("p-") and "." not in parts[2]


def test_distinct_keys_get_distinct_folders() -> None:
    keys = [
        CheckpointKey(("a", "b")),
        CheckpointKey(("a/b",)),
        CheckpointKey(("a",), partition="b"),
        CheckpointKey(("a",), partition=""),
        CheckpointKey(("a",)),
        CheckpointKey(("a",), namespace="keys"),
    ]
    assert len({k.relative_path() for k in keys}) == len(keys)


def test_an_empty_string_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="empty"):
        CheckpointStore(root=f"file://{tmp_path}").open("")


def test_an_unknown_protocol_is_refused_when_opening(tmp_path: Path) -> None:
    store = CheckpointStore(root="nosuchproto://bucket/ckpt")
    with pytest.raises(CheckpointError, match="unknown protocol 'nosuchproto'"):
        store.open("tiles")


def test_an_unknown_protocol_fails_at_resource_init_before_the_asset_runs() -> None:
    ran = []

    @asset
    def tiles(checkpoints: CheckpointStore) -> None:
        ran.append(True)

    with pytest.raises(DagsterUserCodeExecutionError) as failure:
        materialize([tiles], resources={"checkpoints": CheckpointStore(root="nope://x")})
    assert isinstance(failure.value.user_exception, CheckpointError)
    assert "unknown protocol" in str(failure.value.user_exception)
    assert ran == []


# Opens the root in argv[1] in a fresh process, with the modules named after it hidden (as if
# not installed), and prints the CheckpointError.
OPEN_ROOT = """
import sys
for hidden in sys.argv[2:]:
    sys.modules[hidden] = None
from k8s_ai_orchestrator.checkpoint import CheckpointStore
from k8s_ai_orchestrator.errors import CheckpointError
from tests.requirements import INSTALL_DEPS, require_program
try:
    CheckpointStore(root=sys.argv[1]).open("tiles")
except CheckpointError as error:
    print(error)
else:
    print("opened")
"""


def refusal_in_child(root: str, hidden: tuple[str, ...] = (), prefix: tuple[str, ...] = ()) -> str:
    command = [*prefix, sys.executable, "-c", OPEN_ROOT, root, *hidden]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout


def test_an_unwritable_root_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:  # root writes anywhere, unless it lacks CAP_DAC_OVERRIDE
        util_linux = "setpriv (util-linux)"
        setpriv = require_program("setpriv", util_linux, INSTALL_DEPS)
        prefix = (setpriv, "--bounding-set=-dac_override", "--inh-caps=-dac_override")
    assert "is not writable" in refusal_in_child(f"file://{locked}/ckpt", prefix=prefix)


@pytest.mark.parametrize(
    ("root", "driver", "hint"),
    [
        ("s3://bucket/ckpt", "s3fs", "pip install 'k8s-ai-orchestrator[s3]'"),
        ("gs://bucket/ckpt", "gcsfs", "pip install gcsfs"),
    ],
)
def test_a_protocol_whose_driver_is_missing_names_the_package_to_install(
    root: str, driver: str, hint: str
) -> None:
    assert hint in refusal_in_child(root, hidden=(driver,))  # hidden, installed here or not


@pytest.mark.parametrize(("keep", "interval"), [(0, 300.0), (2, 0.0), (2, -1.0)])
def test_bad_keep_or_interval_is_refused(tmp_path: Path, keep: int, interval: float) -> None:
    store = CheckpointStore(root=f"file://{tmp_path}", keep=keep, interval_s=interval)
    with pytest.raises(CheckpointError, match="keep=|interval_s="):
        store.open("tiles")


PARTS = StaticPartitionsDefinition(["2024-01-01", "../../escape"])


def _checkpointed_asset(code_version: str | None):
    @asset(partitions_def=PARTS, code_version=code_version, name="mosaic", key_prefix=["eu"])
    def mosaic(context: AssetExecutionContext, checkpoints: CheckpointStore) -> dict:
        with checkpoints.open(context) as ckpt:
            before = ckpt.load()
            ckpt.save({"partition": context.partition_key})
            return {"before": before, "path": ckpt.key.relative_path()}

    return mosaic


def run(asset_def, root: str, partition: str) -> dict:
    result = materialize(
        [asset_def],
        resources={"checkpoints": CheckpointStore(root=root, clear_on_success=False)},
        partition_key=partition,
    )
    return result.output_for_node("eu__mosaic")


def test_an_asset_is_keyed_by_asset_key_partition_and_code_version(tmp_path: Path) -> None:
    root = f"file://{tmp_path}/ckpt"
    v1 = _checkpointed_asset("v1")
    first = run(v1, root, "2024-01-01")
    assert first == {"before": None, "path": "assets/eu/mosaic/p-2024-01-01"}
    assert run(v1, root, "2024-01-01")["before"] == {"partition": "2024-01-01"}
    assert run(v1, root, "../../escape")["before"] is None
    assert run(_checkpointed_asset("v2"), root, "2024-01-01")["before"] is None
    assert all((tmp_path / "ckpt") in p.parents for p in files_under(tmp_path) if "ckpt" in str(p))
    assert not (tmp_path / "escape").exists()


def test_a_fingerprint_passed_to_open_overrides_the_code_version(tmp_path: Path) -> None:
    store = CheckpointStore(root=f"file://{tmp_path}")

    @asset(code_version="v7")
    def embeddings(context: AssetExecutionContext, checkpoints: CheckpointStore) -> None:
        with checkpoints.open(context, fingerprint="dataset-2024") as ckpt:
            assert ckpt.key.fingerprint == "dataset-2024"
            ckpt.save({"ok": True})

    materialize([embeddings], resources={"checkpoints": store})
    with store.open("x") as ckpt:  # closed, so its signal handlers are given back
        assert ckpt.load() is None


def test_an_op_is_keyed_by_job_and_op_name(tmp_path: Path) -> None:
    from dagster import OpExecutionContext, job, op

    store = CheckpointStore(root=f"file://{tmp_path}", handle_signals=False)

    @op
    def crunch(context: OpExecutionContext, checkpoints: CheckpointStore) -> str:
        return checkpoints.open(context).key.relative_path()

    @job
    def nightly() -> None:
        crunch()

    result = nightly.execute_in_process(resources={"checkpoints": store})
    assert result.output_for_node("crunch") == "ops/nightly/crunch/unpartitioned"
