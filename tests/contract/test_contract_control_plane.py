"""The emulator's behaviour contract, held by the real Kubernetes control plane in `make test`.

Each check runs in a fresh namespace (fixtures in conftest.py). The plane has no nodes yet, so
`API_CHECKS` run on the session plane now; `NODE_CHECKS` run on `plane_with_nodes` once it
exists and are reported as skipped (`NODES_NOT_YET`) until then.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from k8s_ai_orchestrator.testing.kube.contract import API_CHECKS, NODE_CHECKS, ContractTarget

pytestmark = [pytest.mark.contract, pytest.mark.timeout(300)]


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
