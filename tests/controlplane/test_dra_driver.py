"""The node agent's DRA driver, its pure parts: the ResourceSlice it publishes, the devices it
shows a container, and the nodes it accepts (the real plane's tests: test_dra.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8s_ai_orchestrator.testing.controlplane.agent import NodeAgent
from k8s_ai_orchestrator.testing.controlplane.agent.dra import (
    DRIVER,
    DraGpus,
    resource_slice,
    visible_devices,
)
from k8s_ai_orchestrator.testing.kube.nodes import NodeSpec

H100 = DraGpus("gpu-1", count=2, product="NVIDIA H100 80GB HBM3", memory="80Gi")


def test_the_slice_is_the_nodes_pool_of_gpus_with_nvidias_attributes() -> None:
    body = resource_slice(H100, "uid-1")
    spec = body["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == (DRIVER, "gpu-1", "gpu-1")
    assert body["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "gpu-1",
        "uid": "uid-1",
    }
    first = spec["devices"][0]
    assert first["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert first["attributes"]["uuid"] == {"string": H100.uuid(0)}
    assert first["capacity"] == {"memory": {"value": "80Gi"}}
    assert len({d["attributes"]["uuid"]["string"] for d in spec["devices"]}) == 2


@pytest.mark.parametrize(
    ("devices", "node", "shown"),
    [
        ([("gpu-1", "gpu-1"), ("gpu-1", "gpu-0")], "gpu-1", "1,0"),
        ([("gpu-1", "gpu-2")], "gpu-1", "device gpu-1/gpu-2 is not a device of node gpu-1"),
        ([("gpu-9", "gpu-0")], "gpu-1", "device gpu-9/gpu-0 is not a device of node gpu-1"),
    ],
)
def test_a_container_sees_only_its_nodes_allocated_devices(
    devices: list[tuple[str, str]], node: str, shown: str
) -> None:
    env = visible_devices(H100, devices, node)
    if isinstance(env, str):
        assert env == shown
    else:
        assert env["CUDA_VISIBLE_DEVICES"] == shown
        assert env["NVIDIA_VISIBLE_DEVICES"].split(",") == [H100.uuid(1), H100.uuid(0)]


@pytest.mark.parametrize(
    "nodes", [[NodeSpec("gpu-1", gpus=2)], [NodeSpec("other")]], ids=["plugin-gpus", "absent"]
)
def test_dra_gpus_need_a_node_of_the_agent_without_device_plugin_gpus(
    nodes: list[NodeSpec], tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="need a node of this agent with gpus=0"):
        NodeAgent(tmp_path / "no.kubeconfig", nodes, tmp_path, dra_gpus=[H100])
