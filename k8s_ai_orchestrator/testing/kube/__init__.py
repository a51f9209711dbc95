"""An in-process Kubernetes API emulator (host cluster + vCluster tenants) for offline tests.

The official `kubernetes` client talks to it over real HTTP; pods run as local processes.

Example:
    >>> from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec
    >>> emu = KubeEmulator(nodes=[NodeSpec("node-a", cpu="4", memory="8Gi")], tenants=["t"])
    >>> _ = emu.start()
    >>> emu.host_namespace("t")
    'vcluster-t'
    >>> emu.stop()
"""

from .emulator import KubeEmulator, NodeSpec
from .server import ApiServer
from .store import ApiError

__all__ = ["ApiError", "ApiServer", "KubeEmulator", "NodeSpec"]
