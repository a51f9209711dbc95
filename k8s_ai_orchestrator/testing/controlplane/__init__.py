"""A real Kubernetes v1.37.2 control plane for tests, built from `tests/kubeplane`.

One etcd, a host apiserver with controller manager and scheduler, and vCluster-style tenant
apiservers with their own controller managers, all on loopback with generated PKI.

Example:
    >>> from k8s_ai_orchestrator.testing.controlplane import build_kubeplane, start_control_plane
    >>> bin_dir = build_kubeplane(Path("scripts/build-kubeplane.sh"))  # doctest: +SKIP
    >>> with start_control_plane(bin_dir, run_dir, tenants=["team-a"]) as plane:  # doctest: +SKIP
    ...     plane.tenants["team-a"].kubeconfig
    PosixPath('.../team-a/admin.kubeconfig')
"""

from .binary import KubeplaneUnavailable, build_kubeplane
from .cluster import ApiServer, ControlPlane, start_control_plane, write_kubeconfig
from .flags import Gates
from .process import ControlPlaneError

__all__ = [
    "ApiServer",
    "ControlPlane",
    "ControlPlaneError",
    "Gates",
    "KubeplaneUnavailable",
    "build_kubeplane",
    "start_control_plane",
    "write_kubeconfig",
]
