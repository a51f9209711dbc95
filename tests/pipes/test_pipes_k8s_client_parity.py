"""The same program through dagster-k8s's PipesK8sClient and through AICompute, same cluster:
a user switching clients sees the same Dagster events and the same reported values."""

from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetCheckSpec,
    AssetExecutionContext,
    DagsterEventType,
    ResourceParam,
    asset,
    materialize,
)
from dagster_k8s import PipesK8sClient

from k8s_ai_orchestrator import AICompute
from tests.pipes.conftest import PipesCluster
from tests.pipes.pipes_support import TILES_COMMAND, check_evaluation, materialization_metadata

# emulator or controlplane: each target parameter carries its marker (tests/plane_fixtures.py)
pytestmark = pytest.mark.timeout(180)
ENV = {"TILES": "2"}
PROGRAM_KEYS = ("tiles", "resumed_at", "attempt")
COMPARED = (
    DagsterEventType.STEP_START,
    DagsterEventType.ASSET_MATERIALIZATION,
    DagsterEventType.ASSET_CHECK_EVALUATION,
    DagsterEventType.STEP_SUCCESS,
)


def _asset_with(launch: Any) -> Any:
    @asset(check_specs=[AssetCheckSpec("tiles_complete", asset="tiles")])
    def tiles(context: AssetExecutionContext, pipes: ResourceParam[Any]):
        return launch(pipes, context).get_results()

    return tiles


def test_pipes_k8s_client_and_ai_compute_give_the_same_events(
    k8s_cluster: PipesCluster, tmp_path: Path
) -> None:
    kubeconfig = k8s_cluster.kubernetes["tenants"]["team-a"]["kubeconfig"]
    theirs = materialize(
        [
            _asset_with(
                lambda pipes, context: pipes.run(
                    context=context,
                    image="k8s-ai-test:latest",
                    command=TILES_COMMAND,
                    env=ENV,
                    namespace="default",
                )
            )
        ],
        resources={"pipes": PipesK8sClient(kubeconfig_file=kubeconfig, poll_interval=0.1)},
    )
    ours = materialize(
        [
            _asset_with(
                lambda pipes, context: pipes.run(
                    context=context, command=TILES_COMMAND, env=ENV, cpu=0.5, memory="256Mi"
                )
            )
        ],
        resources={
            "pipes": AICompute(
                backend="kubernetes",
                kubernetes=k8s_cluster.kubernetes,
                default_tenant="team-a",
                poll_interval_s=0.05,
            )
        },
    )

    assert theirs.success and ours.success
    assert _event_types(ours) == _event_types(theirs)
    assert (
        _program_values(ours)
        == _program_values(theirs)
        == {"tiles": 2, "resumed_at": 0, "attempt": 0}
    )
    assert check_evaluation(ours) == check_evaluation(theirs) == ("tiles_complete", True)


def _event_types(result: Any) -> list[str]:
    return [e.event_type_value for e in result.all_events if e.event_type in COMPARED]


def _program_values(result: Any) -> dict[str, Any]:
    metadata = materialization_metadata(result)
    return {key: metadata[key] for key in PROGRAM_KEYS}
