"""The emulator's behaviour contract, run against a real cluster (opt-in).

Set KUBECONFIG and K8S_AI_CONTRACT=1; each check works in a fresh namespace that is deleted
afterwards. K8S_AI_CONTRACT_IMAGE overrides the Python image (default python:3.12-slim).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client, config

from tests.contract_support.contract import CHECKS, ContractTarget

ENABLED = os.environ.get("K8S_AI_CONTRACT") == "1" and bool(os.environ.get("KUBECONFIG"))

# Opt-in: skipped without KUBECONFIG and K8S_AI_CONTRACT=1, even under CI=true (`optin`),
# since CI has no external cluster; test_contract_control_plane.py runs the same checks there.
pytestmark = [
    pytest.mark.contract,
    pytest.mark.optin,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not ENABLED,
        reason="set KUBECONFIG and K8S_AI_CONTRACT=1 to run the contract against a real cluster",
    ),
]


@pytest.fixture
def target() -> Iterator[ContractTarget]:
    api = config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    core = client.CoreV1Api(api)
    namespace = f"k8s-ai-contract-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    image = os.environ.get("K8S_AI_CONTRACT_IMAGE", "python:3.12-slim")
    yield ContractTarget(api, namespace, ("python",), image, timeout=300)
    core.delete_namespace(namespace, propagation_policy="Background")


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_real_cluster_honours_the_contract(
    target: ContractTarget, check: Callable[[ContractTarget], None]
) -> None:
    check(target)
