"""Cluster targets of the Pipes resource's Kubernetes tests.

`k8s_cluster` gives what a test needs of a cluster: the `kubernetes` config section (a
kubeconfig per tenant), the tenants' Jobs and pods, a wait helper, and a way to preempt a pod.
Three targets: the emulator, the real control plane (`plane_with_nodes`), and the plane whose
team-a the real vCluster syncer serves (`vcluster_plane`); each plane seen through a `fresh()`
view so that earlier tests' Jobs do not count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec
from tests.kubernetes.k8s_support import (
    NAMESPACE,
    TENANTS,
    install_priority_classes,
    tenant_config,
)
from tests.plane_fixtures import TENANT_TARGETS, VCLUSTER_PARAM


@dataclass(frozen=True)
class PipesCluster:
    """One Kubernetes target: host + tenants team-a and team-b, namespace `default`."""

    name: str
    kubernetes: dict[str, Any]  # the `kubernetes` section of the AICompute config
    jobs: Callable[[str], list[dict[str, Any]]]  # tenant → its Jobs (API JSON form)
    pods: Callable[[str], list[dict[str, Any]]]  # tenant → its pods
    preempt: Callable[[str, str], None]  # (tenant, pod name): preempt it as the scheduler does
    wait_for: Callable[..., None]  # wait_for(predicate, timeout=...)


def _emulator_target() -> Iterator[PipesCluster]:
    nodes = [
        NodeSpec(name="node-a", cpu="8", memory="16Gi", gpus=0, labels={}, taints=()),
        NodeSpec(name="node-b", cpu="8", memory="16Gi", gpus=0, labels={}, taints=()),
    ]
    with KubeEmulator(nodes=nodes, tenants=list(TENANTS), tls=False, workdir=None) as emu:
        for tenant in TENANTS:
            install_priority_classes(emu.tenant(tenant).api_client())
        yield _pipes_cluster("emulator", emu)


def _pipes_cluster(name: str, kube: Any) -> PipesCluster:
    """A target from a `KubeEmulator` or a `RealKube` (the same test surface)."""
    return PipesCluster(
        name=name,
        kubernetes=tenant_config(kube),
        jobs=lambda tenant: kube.jobs(tenant, NAMESPACE),
        pods=lambda tenant: kube.pods(tenant, NAMESPACE),
        preempt=lambda tenant, pod: kube.preempt_pod(tenant, NAMESPACE, pod),
        wait_for=kube.wait_for,
    )


@pytest.fixture(scope="module", params=TENANT_TARGETS)
def k8s_cluster(request: pytest.FixtureRequest) -> Iterator[PipesCluster]:
    if request.param == "control-plane":
        yield _pipes_cluster("control-plane", request.getfixturevalue("plane_with_nodes").fresh())
        return
    if request.param == VCLUSTER_PARAM:
        yield _pipes_cluster(VCLUSTER_PARAM, request.getfixturevalue("vcluster_plane").fresh())
        return
    yield from _emulator_target()
