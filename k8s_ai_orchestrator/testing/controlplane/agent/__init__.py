"""The node agent: our stand-in for the kubelet on the real control plane.

Example:
    >>> from k8s_ai_orchestrator.testing.controlplane.agent import NodeAgent, NodeSpec
    >>> NodeSpec("gpu-1", cpu="32", memory="256Gi", gpus=4).gpus
    4
"""

from ...kube.nodes import NodeSpec
from .agent import NodeAgent

__all__ = ["NodeAgent", "NodeSpec"]
