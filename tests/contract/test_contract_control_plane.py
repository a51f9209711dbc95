"""The emulator's behaviour contract, held by the real Kubernetes control plane in `make test`.

Each check runs in a fresh namespace of the host API server (fixtures in conftest.py):
`API_CHECKS` on the session plane, `NODE_CHECKS` on `plane_with_nodes`, whose node agent runs
the pods, on a real kubelet, and in a tenant through the real vCluster syncer and through ours.
`HISTORY_CHECKS` need history compacted away: a plane started for the session has not yet had
kube-apiserver's first compaction (every 5 min), so the test compacts etcd first, as that
compaction would.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from k8s_ai_orchestrator.testing.controlplane import ControlPlane
from tests.contract_support.contract import (
    API_CHECKS,
    HISTORY_CHECKS,
    NODE_CHECKS,
    ContractTarget,
)

pytestmark = [pytest.mark.contract, pytest.mark.controlplane, pytest.mark.timeout(300)]


@pytest.mark.parametrize("check", API_CHECKS, ids=[c.__name__ for c in API_CHECKS])
def test_the_real_api_server_honours_the_api_contract(
    plane_target: ContractTarget, check: Callable[[ContractTarget], None]
) -> None:
    check(plane_target)


@pytest.mark.parametrize("check", NODE_CHECKS, ids=[c.__name__ for c in NODE_CHECKS])
def test_the_real_plane_with_nodes_honours_the_node_contract(
    node_target: ContractTarget, check: Callable[[ContractTarget], None]
) -> None:
    check(node_target)


@pytest.mark.vcluster
@pytest.mark.parametrize("check", NODE_CHECKS, ids=[c.__name__ for c in NODE_CHECKS])
def test_a_tenant_honours_the_node_contract_through_either_syncer(
    tenant_target: ContractTarget, check: Callable[[ContractTarget], None]
) -> None:
    check(tenant_target)


@pytest.mark.realnode
@pytest.mark.parametrize("check", NODE_CHECKS, ids=[c.__name__ for c in NODE_CHECKS])
def test_a_real_kubelet_honours_the_node_contract(
    real_node_target: ContractTarget, check: Callable[[ContractTarget], None]
) -> None:
    check(real_node_target)


@pytest.mark.parametrize("check", HISTORY_CHECKS, ids=[c.__name__ for c in HISTORY_CHECKS])
def test_the_real_api_server_honours_the_history_contract_once_compacted(
    control_plane: ControlPlane,
    plane_target: ContractTarget,
    check: Callable[[ContractTarget], None],
) -> None:
    control_plane.compact_history()
    check(plane_target)
