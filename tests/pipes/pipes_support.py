"""Helpers of the Pipes resource tests: one asset that runs programs/tiles.py through AICompute."""

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckSpec,
    AssetExecutionContext,
    AssetsDefinition,
    DagsterInstance,
    ExecuteInProcessResult,
    asset,
    materialize,
)

from k8s_ai_orchestrator import AICompute, CheckpointStore

PROGRAM = str(Path(__file__).parent / "programs" / "tiles.py")
TILES_COMMAND = [sys.executable, PROGRAM]


def tiles_asset(
    size: Mapping[str, Any], env: Mapping[str, str], *, checkpointed: bool = False
) -> AssetsDefinition:
    """The `tiles` asset: runs the tiles program sized by `size`, reports it and its check."""

    @asset(check_specs=[AssetCheckSpec("tiles_complete", asset="tiles")], code_version="v1")
    def tiles(context: AssetExecutionContext, ai: AICompute, checkpoints: CheckpointStore):
        store = checkpoints if checkpointed else None
        invocation = ai.run(
            context=context, command=TILES_COMMAND, env=dict(env), checkpoints=store, **size
        )
        if store is not None:
            with store.open(context) as ckpt:
                context.log.info(f"CheckpointStore.open(context) loads {ckpt.load()}")
        return invocation.get_results()

    return tiles


def materialize_tiles(
    ai: AICompute,
    size: Mapping[str, Any],
    env: Mapping[str, str],
    checkpoint_root: str,
    *,
    checkpointed: bool = False,
    instance: DagsterInstance | None = None,
) -> ExecuteInProcessResult:
    return materialize(
        [tiles_asset(size, env, checkpointed=checkpointed)],
        resources={"ai": ai, "checkpoints": CheckpointStore(root=checkpoint_root)},
        instance=instance,
        raise_on_error=False,
    )


def materialization_metadata(result: ExecuteInProcessResult) -> dict[str, Any]:
    """The `tiles` materialization's metadata as plain values."""
    (event,) = result.get_asset_materialization_events()
    metadata = event.materialization.metadata
    return {key: getattr(value, "value", value) for key, value in metadata.items()}


def check_evaluation(result: ExecuteInProcessResult) -> tuple[str, bool]:
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation.check_name, evaluation.passed


def log_messages(instance: DagsterInstance, run_id: str) -> list[str]:
    """Every message of the run's event log (context.log lines included), in order."""
    return [record.user_message for record in instance.all_logs(run_id)]


def attempt_rows(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = metadata["attempts_usage"]
    return rows if isinstance(rows, list) else json.loads(rows)
