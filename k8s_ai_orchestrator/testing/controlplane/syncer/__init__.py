"""A vCluster-style tenant syncer for the real control plane (pods down, status and nodes up).

Example:
    >>> from k8s_ai_orchestrator.testing.controlplane.syncer import host_name
    >>> host_name("step-0", "default", "team-a")
    'step-0-x-default-x-team-a'
"""

from .syncer import TenantSyncer
from .translate import host_name

__all__ = ["TenantSyncer", "host_name"]
