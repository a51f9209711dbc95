"""How a tenant admits multi-node gangs all-or-nothing: its `gang_admission` config section.

The admissions themselves live in `admission/`; this is only the checked config they read.

Example:
    >>> GangAdmission.from_dict(None, "kubernetes.tenants.t").mode
    'guard'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, check_keys, config_number
from .names import DNS_SUBDOMAIN

GANG_ADMISSION_MODES = ("guard", "workload", "kueue")
_KEYS = frozenset({"mode", "all_running_timeout_s", "provisioning_timeout_s", "local_queue"})
# vCluster's open-source syncer (v0.34) copies no scheduling.k8s.io PodGroups to the host and
# drops a pod's `schedulingGroup` (its Kubernetes types predate it): the host scheduler would
# bind a gang's pods one by one, so `workload` on a vCluster tenant is refused, not silently
# ungang-ed.
VCLUSTER_WORKLOAD = (
    "{where}: gang_admission.mode: workload cannot gang on vCluster '{name}': vCluster's syncer "
    "copies no scheduling.k8s.io PodGroups to the host cluster and drops the pods' "
    "schedulingGroup, so the host scheduler would place a gang's pods one by one. Use mode: "
    "guard (the executor's own all-or-nothing admission) or mode: kueue on this tenant"
)


@dataclass(frozen=True)
class GangAdmission:
    """How a tenant admits multi-node gangs all-or-nothing (`gang_admission` in its config).

    `guard`, the executor's own: the Job is created only when the tenant's nodes and quota
    have room for every pod, and the whole gang is deleted when not all its pods run within
    `all_running_timeout_s` of the first one, so a partial gang never holds GPUs.

    `workload`, the Kubernetes gang-scheduling API (`scheduling.k8s.io/v1beta1`, Kubernetes
    1.37 with the `GenericWorkload` feature gate): the Job is created at once with a
    `PodGroup` (gang `minCount` = nodes) that its pods join, and the scheduler binds all of
    them or none. The all-running timeout stays as a safety net. Refused on a `vcluster:`
    tenant (`VCLUSTER_WORKLOAD`): the scheduler must see the PodGroup.

    `kueue`, Kueue (v0.17+) in the tenant: every Job of the tenant is created suspended with
    the `kueue.x-k8s.io/queue-name: <local_queue>` label, and Kueue unsuspends it once its
    ClusterQueue has quota for all of its pods (preempting lower-priority steps by its
    ClusterQueue's preemption policy). The all-running timeout stays as a safety net.

    On autoscaled pools (`node_pools`), a gang's pods wait for nodes the autoscaler creates
    one by one: while the autoscaler says a waiting pod's node is coming (Karpenter's
    `Nominated`, the cluster-autoscaler's `TriggeredScaleUp`), the all-running timeout is
    extended by up to `provisioning_timeout_s`.

    Example:
        >>> GangAdmission.from_dict({"all_running_timeout_s": 120}, "kubernetes.tenants.t")
        ...  # doctest: +NORMALIZE_WHITESPACE
        GangAdmission(mode='guard', all_running_timeout_s=120.0, local_queue=None,
                      provisioning_timeout_s=900.0)
        >>> GangAdmission.from_dict({"mode": "kueue", "local_queue": "gpu"}, "t").kueue
        True
    """

    mode: str = "guard"
    all_running_timeout_s: float = 300.0  # first pod Running → every pod Running, or cancel
    local_queue: str | None = None  # mode kueue: the LocalQueue of the tenant's Jobs
    # more time for a partial gang while the autoscaler says a waiting pod's node is coming
    provisioning_timeout_s: float = 900.0

    def partial_limit_s(self, provisioning: bool) -> float:
        """How long a partial gang may wait for its other pods: `all_running_timeout_s`, plus
        `provisioning_timeout_s` while the autoscaler says a waiting pod's node is coming."""
        return self.all_running_timeout_s + (self.provisioning_timeout_s if provisioning else 0)

    @property
    def podgroups(self) -> bool:
        """Whether gangs join a PodGroup (`workload`) instead of waiting for the guard."""
        return self.mode == "workload"

    @property
    def kueue(self) -> bool:
        """Whether Kueue admits the tenant's Jobs (every step, not only gangs)."""
        return self.mode == "kueue"

    @property
    def guarded(self) -> bool:
        """Whether gangs wait for the executor's own room check before their Job exists."""
        return self.mode == "guard"

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None, where: str) -> GangAdmission:
        where = f"{where}.gang_admission"
        raw = dict(raw or {})
        check_keys(raw, _KEYS, where)
        mode = raw.get("mode", "guard")
        if mode not in GANG_ADMISSION_MODES:
            raise ConfigError(
                f"{where}.mode={mode!r} is not one of {', '.join(GANG_ADMISSION_MODES)}; use "
                "guard (the executor's own all-or-nothing admission)"
            )
        timeout = config_number(
            raw.get("all_running_timeout_s", cls.all_running_timeout_s),
            f"{where}.all_running_timeout_s",
            above=True,
        )
        provisioning = config_number(
            raw.get("provisioning_timeout_s", cls.provisioning_timeout_s),
            f"{where}.provisioning_timeout_s",
        )
        queue = raw.get("local_queue")
        if queue is not None and not isinstance(queue, str):
            raise ConfigError(f"{where}.local_queue must be a string, got {queue!r}")
        if mode == "kueue" and not queue:
            raise ConfigError(
                f"{where}: mode kueue needs local_queue, the name of the Kueue LocalQueue in "
                "the tenant's namespace that points at the tenant's ClusterQueue (the tenant "
                "chart's kueue.localQueue, k8s-ai by default)"
            )
        if queue is not None and mode != "kueue":
            raise ConfigError(
                f"{where}.local_queue is only read with mode: kueue (mode is {mode!r}); remove "
                "it or set mode: kueue"
            )
        if queue is not None and DNS_SUBDOMAIN.problem(queue):
            raise ConfigError(
                f"{where}.local_queue={queue!r} is not a Kubernetes object name (lowercase "
                "letters, digits, '-' and '.', starting and ending with a letter or digit)"
            )
        return cls(mode, float(timeout), queue, float(provisioning))
