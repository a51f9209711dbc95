"""Contract targets on the real control plane.

`plane_target`: a fresh namespace on the session plane's host API server (the fixture
`control_plane`). `node_target`: the same on the host of `plane_with_nodes`, whose node agent
runs pods. `tenant_target`: a fresh namespace in a tenant of `vcluster_plane`, once in team-a,
whose pods the real vCluster v0.34 syncer carries to the host, and once in team-b, synced by
ours: the same checks hold both syncers to one contract.

Under CI=true a skip of these tests fails (tests/requirements.py): CI must run the real plane.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from k8s_ai_orchestrator.testing.controlplane import ControlPlane
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.controlplane.nodeconfig import (
    REAL_NODE_KEY,
    REAL_NODE_TOLERATION,
)
from k8s_ai_orchestrator.testing.controlplane.realnode import BASE_IMAGE, RealNode
from tests.contract_support.contract import ContractTarget
from tests.controlplane.realnode_support import real_node  # noqa: F401
from tests.plane_fixtures import TENANT, TENANTS


def _wait_for_default_service_account(core: client.CoreV1Api, namespace: str) -> None:
    deadline = time.monotonic() + 60
    while not core.list_namespaced_service_account(namespace).items:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {namespace} after 60 s"
        time.sleep(0.2)


def _target(api: client.ApiClient, **placement: Any) -> Iterator[ContractTarget]:
    core = client.CoreV1Api(api)
    namespace = f"k8s-ai-contract-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    _wait_for_default_service_account(core, namespace)
    python = placement.pop("python", (sys.executable,))
    yield ContractTarget(api, namespace, python, timeout=120, **placement)
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


TENANT_SYNCERS = {"real-vcluster-syncer": TENANT, "our-syncer": TENANTS[1]}


@pytest.fixture(params=sorted(TENANT_SYNCERS))
def tenant_target(
    vcluster_plane: RealKube, request: pytest.FixtureRequest
) -> Iterator[ContractTarget]:
    """A fresh namespace in a tenant of `vcluster_plane`: team-a (the real vCluster syncer) or
    team-b (ours)."""
    tenant = TENANT_SYNCERS[request.param]
    ours = vcluster_plane.syncers.get(tenant)
    explain = ours.describe if ours is not None else None
    yield from _target(vcluster_plane.tenant(tenant).api_client(), explain=explain)


@pytest.fixture
def real_node_target(
    control_plane: ControlPlane,
    real_node: RealNode,  # noqa: F811 (the fixture imported above)
) -> Iterator[ContractTarget]:
    """A fresh namespace on the session plane's host whose pods land on a real node (kubelet,
    containerd, runc): its label and toleration, the base image, the host's /usr Python."""
    assert control_plane.host is not None
    api = config.new_client_from_config(config_file=str(control_plane.host.kubeconfig))
    yield from _target(
        api,
        python=("/usr/bin/python3",),
        image=BASE_IMAGE,
        image_pull_policy="Never",
        node_selector={REAL_NODE_KEY: "true"},
        tolerations=(REAL_NODE_TOLERATION,),
        host_mounts=("/usr",),
    )
