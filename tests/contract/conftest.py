"""Contract targets on the real control plane; under CI=true its contract may not skip.

`plane_target`: a fresh namespace on the session plane's host API server (the fixture
`control_plane`). `node_target`: the same on the host of `plane_with_nodes`, whose node agent
runs pods. (Not in a tenant: our tenant syncer copies no events from the host, where real
vCluster does, so the scheduler's FailedScheduling event would be missing there.)

Under CI=true a skip of test_contract_control_plane.py is turned into a failure naming its
reason: the real control plane must run in CI.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from k8s_ai_orchestrator.testing.controlplane import ControlPlane
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.kube.contract import ContractTarget

PLANE_MODULE = "test_contract_control_plane.py"


def _wait_for_default_service_account(core: client.CoreV1Api, namespace: str) -> None:
    deadline = time.monotonic() + 60
    while not core.list_namespaced_service_account(namespace).items:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {namespace} after 60 s"
        time.sleep(0.2)


def _target(api: client.ApiClient) -> Iterator[ContractTarget]:
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
    kubeconfig = str(control_plane.host.kubeconfig)
    yield from _target(config.new_client_from_config(config_file=kubeconfig))


@pytest.fixture
def node_target(plane_with_nodes: RealKube) -> Iterator[ContractTarget]:
    """A fresh namespace on the host of the real control plane with nodes."""
    yield from _target(plane_with_nodes.host.api_client())


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
    report.outcome = "failed"
    report.longrepr = (
        f"CI=true: the real control plane's contract was skipped: {_skip_reason(report)}"
    )
