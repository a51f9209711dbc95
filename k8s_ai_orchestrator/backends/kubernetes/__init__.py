"""The Kubernetes backend: each step attempt a batch/v1 Job on a vCluster tenant.

- `backend.py`: submit, status, logs, cancel, usage (the `Backend` protocol), wiring the rest;
- `prepare.py`: what a submit checks and builds first; `attempts.py`: the submitted attempts;
- `admission/`: how a Job gets room — direct, guard, workload (PodGroup), kueue — one module
  per mode behind one protocol;
- `observe.py`: an attempt's status from the watch (one pod, or a gang's: `gangs.py`);
- `config.py`: the `kubernetes:` executor config as typed tenants;
- `tenants.py`: one API client per tenant (kubeconfig or the `vc-<name>` secret), allowlist;
- `api.py`: API calls with retries of transient errors only;
- `jobs.py`: the Job manifest, built with dagster-k8s's job builder;
- `preflight.py`: access, quota and node-size checks before the first submit;
- `capacity.py`: room on nodes and in ResourceQuotas (pure), for pre-flight and the guard;
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
