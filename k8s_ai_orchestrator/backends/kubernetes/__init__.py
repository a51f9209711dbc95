"""The Kubernetes backend: each step attempt a batch/v1 Job on a vCluster tenant.

- `backend.py`: submit, status, logs, cancel, usage (the `Backend` protocol);
- `config.py`: the `kubernetes:` executor config as typed tenants;
- `tenants.py`: one API client per tenant (kubeconfig or the `vc-<name>` secret), allowlist;
- `api.py`: API calls with retries of transient errors only;
- `jobs.py`: the Job manifest, built with dagster-k8s's job builder;
- `preflight.py`: access, quota and node-size checks before the first submit;
- `watch.py`: one pod watch per tenant namespace;
- `status.py`: pod state → `StepStatus` (OOMKilled, Evicted, Preempted, ...);
- `pending.py`: why a pod is Pending, from scheduler events and quota errors;
- `logs.py`: live log streaming and the failure log tail.

Example:
    >>> config = KubernetesConfig.from_dict(
    ...     {"tenants": {"team-a": {"kubeconfig": "/etc/team-a.yaml"}}})
    >>> KubernetesBackend(config, allowed_tenants=None, default_tenant="team-a").name
    'kubernetes'
"""

from .backend import KubernetesBackend
from .config import KubernetesConfig

__all__ = ["KubernetesBackend", "KubernetesConfig"]
