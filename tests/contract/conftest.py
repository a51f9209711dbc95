"""Contract targets on the real control plane, and the one skip CI allows.

`plane_target`: a fresh namespace on the session plane's host API server (the fixture
`control_plane`). `node_target`: the same on the fixture `plane_with_nodes` (a `ControlPlane`
whose host has nodes running pods), skipped with `NODES_NOT_YET` while that fixture does not
exist. Under CI=true that is the only skip test_contract_control_plane.py may report; any
other is turned into a failure naming it (the real control plane must run in CI).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from k8s_ai_orchestrator.testing.controlplane import ApiServer, ControlPlane
from k8s_ai_orchestrator.testing.kube.contract import ContractTarget

NODES_NOT_YET = (
    "needs the fixture plane_with_nodes (the real control plane with the node agent), "
    "which does not exist yet"
)
PLANE_MODULE = "test_contract_control_plane.py"


def _wait_for_default_service_account(core: client.CoreV1Api, namespace: str) -> None:
    deadline = time.monotonic() + 60
    while not core.list_namespaced_service_account(namespace).items:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {namespace} after 60 s"
        time.sleep(0.2)


def _target(server: ApiServer) -> Iterator[ContractTarget]:
    api = config.new_client_from_config(config_file=str(server.kubeconfig))
    core = client.CoreV1Api(api)
    namespace = f"k8s-ai-contract-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    _wait_for_default_service_account(core, namespace)
    yield ContractTarget(api, namespace, (sys.executable,), timeout=120)
    core.delete_namespace(namespace, propagation_policy="Background")
    api.close()


@pytest.fixture
def plane_target(control_plane: ControlPlane) -> Iterator[ContractTarget]:
    """A fresh namespace on the real control plane's host API server."""
    assert control_plane.host is not None
    yield from _target(control_plane.host)


@pytest.fixture
def node_target(request: pytest.FixtureRequest) -> Iterator[ContractTarget]:
    """A fresh namespace on the real control plane with nodes (`plane_with_nodes`)."""
    try:
        plane: ControlPlane = request.getfixturevalue("plane_with_nodes")
    except pytest.FixtureLookupError:
        pytest.skip(NODES_NOT_YET)
    assert plane.host is not None
    yield from _target(plane.host)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    in_ci = os.environ.get("CI", "").lower() == "true"
    if not (in_ci and report.skipped and item.path.name == PLANE_MODULE):
        return
    reason = _skip_reason(report)
    if reason != NODES_NOT_YET:
        report.outcome = "failed"
        report.longrepr = f"CI=true: the real control plane's contract was skipped: {reason}"
