"""Fixtures: one emulator per test module (three nodes, tenants team-a and team-b)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
NODES = [
    NodeSpec("node-a", cpu="4", memory="8Gi"),
    NodeSpec("node-b", cpu="4", memory="8Gi", labels={"disk": "ssd"}),
    NodeSpec("node-gpu", cpu="8", memory="32Gi", gpus=2, taints=(GPU_TAINT,)),
]


@pytest.fixture(scope="module")
def emu() -> Iterator[KubeEmulator]:
    with KubeEmulator(nodes=NODES, tenants=["team-a", "team-b"]) as emulator:
        yield emulator
        assert not emulator.controller_errors, emulator.controller_errors[0]


@pytest.fixture(scope="module")
def api(emu: KubeEmulator) -> client.ApiClient:
    return emu.tenant("team-a").api_client()


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


@pytest.fixture
def ns(core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace in tenant team-a, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)
