"""Fixtures: an emulated host cluster with two vCluster tenants, and backends wired to it;
`cluster`, the emulator or the real control plane, for the end-to-end runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gang_support import GANG_TARGETS, GangTarget
from k8s_support import (
    TENANTS,
    install_priority_classes,
    tenant_config,
)

from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec
from tests.plane_fixtures import KUBE_TARGETS
from tests.requirements import REAL_PLANE_PARAM, VCLUSTER_PARAM
from tests.support import FakeClock

assert {p.values[0] for p in KUBE_TARGETS} == set(GANG_TARGETS)


@pytest.fixture(scope="module")
def emulator() -> Iterator[Any]:
    nodes = [
        NodeSpec(name="node-a", cpu="8", memory="16Gi", gpus=0, labels={}, taints=()),
        NodeSpec(name="node-b", cpu="8", memory="16Gi", gpus=0, labels={}, taints=()),
    ]
    with KubeEmulator(nodes=nodes, tenants=list(TENANTS), tls=False, workdir=None) as emu:
        for tenant in TENANTS:
            install_priority_classes(emu.tenant(tenant).api_client())
        yield emu


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(emulator: Any, clock: FakeClock) -> Iterator[KubernetesBackend]:
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emulator)),
        allowed_tenants=TENANTS,
        default_tenant="team-a",
        clock=clock,
        sleep=lambda s: None,
    )
    yield backend
    backend.close()


@pytest.fixture(scope="module", params=KUBE_TARGETS)
def gang_target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GangTarget]:
    """A cluster for the gang tests, one per module and target (gang_support.GANG_TARGETS)."""
    with GANG_TARGETS[request.param](tmp_path_factory.mktemp("gangs"), request) as built:
        yield built


@pytest.fixture(autouse=True)
def _clear_gang_target(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on a gang target, what it left is deleted (`GangTarget.clear`)."""
    target = (
        request.getfixturevalue("gang_target") if "gang_target" in request.fixturenames else None
    )
    yield
    if target is not None:
        target.clear()


@pytest.fixture(params=KUBE_TARGETS)
def cluster(request: pytest.FixtureRequest, dagster_home: Path) -> Iterator[Any]:
    """A host with one node big enough for an xl step and one GPU node, two tenants: the
    emulator, or the real v1.37 control plane with the node agent and tenant syncers; a test
    parametrized with `TENANT_TARGETS` also runs where the real vCluster syncer serves team-a."""
    if request.param == REAL_PLANE_PARAM:
        yield request.getfixturevalue("real_kube")
        return
    if request.param == VCLUSTER_PARAM:
        yield request.getfixturevalue("vcluster_plane").fresh()
        return
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    nodes = [
        NodeSpec(name="big-1", cpu="96", memory="768Gi"),
        NodeSpec(name="gpu-1", cpu="32", memory="256Gi", gpus=4, taints=(gpu_taint,)),
    ]
    with KubeEmulator(nodes=nodes, tenants=list(TENANTS), tls=False, workdir=None) as emu:
        for tenant in TENANTS:
            install_priority_classes(emu.tenant(tenant).api_client())
        yield emu
