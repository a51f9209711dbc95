"""Multi-node steps on Kubernetes: one state for a gang's pods, and room for all of them.

A gang is one Indexed Job with one pod per node (see `jobs.py`). Its state is read from all
its pods at once: a disrupted pod (preempted, evicted, node lost) stands for the whole gang,
which the Job's pod failure policy fails and the executor relaunches from its checkpoint; a
finished leader (index 0, the step process) stands for the step; a failed worker fails it.

The executor's own all-or-nothing admission (`gang_admission.mode: guard`) creates the Job
only when the tenant's nodes have room for every pod at once (`gang_room`), counting what
lower-priority preemptible pods hold as free, since the scheduler preempts them.

Example:
    >>> running = {"metadata": {"annotations": {INDEX_KEY: "0"}}, "spec": {"nodeName": "n1"},
    ...            "status": {"phase": "Running"}}
    >>> gang_status([running], [], nodes=2).state
    <StepState.PENDING: 'Pending'>
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from ...spec import ComputeSpec
from ..base import RELAUNCH_REASONS, FailureReason, StepState, StepStatus
from .api import ApiRetry
from .config import KubernetesConfig
from .preflight import QUOTA_KEYS, step_needs
from .status import deleted_pod_status, pod_name, pod_status

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
GPU_RESOURCE = "nvidia.com/gpu"

Pod = Mapping[str, Any]


def pod_index(pod: Pod) -> int:
    """The pod's completion index (its node rank); -1 if it has none."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return int(annotations.get(INDEX_KEY, -1))


def gang_status(pods: Sequence[Pod], gone: Sequence[Pod], nodes: int) -> StepStatus:
    """The state of a gang from its live pods and the last state of its deleted ones."""
    seen = [(pod, pod_status(pod)) for pod in pods]
    seen += [(pod, deleted_pod_status(pod)) for pod in gone]
    for pod, status in seen:
        if status.reason in RELAUNCH_REASONS:
            return _whole_gang(pod, status, nodes, ended=all(_ended(p) for p in pods))
    leader = [status for pod, status in seen if pod_index(pod) == 0 and status.is_terminal]
    if leader:
        return leader[0]
    for pod, status in seen:
        if status.state == StepState.FAILED:
            return _whole_gang(pod, status, nodes, ended=True)
    running = [status for pod, status in seen if status.state == StepState.RUNNING]
    if len(running) >= nodes:
        return StepStatus.running(_leader_node(pods))
    waiting = [status for _, status in seen if status.state == StepState.PENDING]
    return waiting[0] if waiting else StepStatus.pending()


def pending_pod(pods: Sequence[Pod]) -> Pod | None:
    """The pod a Pending gang waits for (the first not yet running), for its reason."""
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in (None, "Pending"):
            return pod
    return None


def running_count(pods: Iterable[Pod]) -> int:
    return sum(1 for pod in pods if (pod.get("status") or {}).get("phase") == "Running")


def _whole_gang(pod: Pod, status: StepStatus, nodes: int, *, ended: bool) -> StepStatus:
    where = f" on {status.node}" if status.node else ""
    message = f"gang pod {pod_index(pod)} of {nodes} ({pod_name(pod)}{where}): {status.message}"
    if not ended:  # the other pods are still stopping: the relaunch must not overlap them
        return StepStatus(StepState.RUNNING, status.reason, message, node=status.node)
    reason = FailureReason(status.reason) if status.reason else FailureReason.ERROR
    return StepStatus.failed(reason, message, status.exit_code, status.node)


def _ended(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _leader_node(pods: Sequence[Pod]) -> str | None:
    for pod in pods:
        if pod_index(pod) == 0:
            return (pod.get("spec") or {}).get("nodeName")
    return None


@dataclass(frozen=True)
class GangRoom:
    """How many of a gang's pods fit on the tenant's nodes right now, and which nodes."""

    fits: int  # nodes with room for one pod now
    needed: int  # the gang's pods
    nodes: tuple[str, ...]  # those nodes

    @property
    def enough(self) -> bool:
        return self.fits >= self.needed

    def describe(self) -> str:
        where = f" ({', '.join(self.nodes)})" if self.nodes else ""
        return f"{self.fits} of the {self.needed} nodes it needs have room for one pod now{where}"


def gang_room(
    nodes: Iterable[Any],
    pods: Iterable[Any],
    needs: Mapping[str, Decimal],
    needed: int,
    *,
    node_labels: Mapping[str, str],
    reclaimable_class: str | None,
) -> GangRoom:
    """Nodes whose allocatable minus what their pods request fits one pod of the gang.

    `nodes` and `pods` are kubernetes-client models; pods of `reclaimable_class` (the
    preemptible PriorityClass, for a gang that may preempt them) count as free.
    """
    used: dict[str, dict[str, Decimal]] = {}
    for pod in pods:
        phase = pod.status.phase if pod.status else None
        node = pod.spec.node_name if pod.spec else None
        if not node or phase in ("Succeeded", "Failed"):
            continue
        if reclaimable_class and pod.spec.priority_class_name == reclaimable_class:
            continue
        total = used.setdefault(node, {kind: Decimal(0) for kind in needs})
        for kind, value in pod_requests(pod).items():
            total[kind] += value
    fitting = []
    for node in nodes:
        labels = node.metadata.labels or {}
        if (node.spec and node.spec.unschedulable) or any(
            labels.get(k) != v for k, v in node_labels.items()
        ):
            continue
        free = allocatable(node.status.allocatable or {})
        taken = used.get(node.metadata.name, {})
        if all(free[kind] - taken.get(kind, Decimal(0)) >= needs[kind] for kind in needs):
            fitting.append(node.metadata.name)
    return GangRoom(len(fitting), needed, tuple(sorted(fitting)))


def pod_requests(pod: Any) -> dict[str, Decimal]:
    """What a pod (kubernetes-client model) requests, summed over its containers."""
    total = {"cpu": Decimal(0), "memory": Decimal(0), "gpu": Decimal(0)}
    for container in pod.spec.containers or []:
        requests = (container.resources and container.resources.requests) or {}
        for kind, value in allocatable(requests).items():
            total[kind] += value
    return total


def allocatable(values: Mapping[str, str]) -> dict[str, Decimal]:
    """cpu, memory and GPUs of a resource list (node allocatable, container requests)."""
    return {
        "cpu": parse_quantity(values.get("cpu", "0")),
        "memory": parse_quantity(values.get("memory", "0")),
        "gpu": parse_quantity(values.get(GPU_RESOURCE, "0")),
    }


def read_gang_room(
    core: Any,
    retry: Any,
    *,
    tenant: str,
    namespace: str,
    needs: Mapping[str, Decimal],
    needed: int,
    node_labels: Mapping[str, str],
    reclaimable_class: str | None,
) -> GangRoom:
    """`gang_room` from the tenant's nodes and pods (cluster-wide where the executor may list
    them, else its namespace's); a tenant that may not list nodes is taken to have room."""
    try:
        nodes = retry.call("list nodes", tenant, core.list_node).items
    except ApiException as error:
        if error.status in (401, 403):
            return GangRoom(needed, needed, ())
        raise
    try:
        pods = retry.call("list pods", tenant, core.list_pod_for_all_namespaces).items
    except ApiException as error:
        if error.status not in (401, 403):
            raise
        pods = retry.call("list pods", tenant, lambda: core.list_namespaced_pod(namespace)).items
    return gang_room(
        nodes,
        pods,
        needs,
        needed,
        node_labels=node_labels,
        reclaimable_class=reclaimable_class,
    )


class GangGuard:
    """The executor's own all-or-nothing admission (`gang_admission.mode: guard`).

    Example:
        >>> guard = GangGuard(KubernetesConfig.from_dict(
        ...     {"tenants": {"t": {"kubeconfig": "/k"}}}), ApiRetry())
        >>> guard.partial("train", "t", nodes=2, running=1, waited_s=10, why="-").reason
        'GangPartiallyRunning'
    """

    def __init__(self, config: KubernetesConfig, retry: ApiRetry) -> None:
        self._config = config
        self._retry = retry

    def waiting_for_room(
        self, core: Any, tenant: str, namespace: str, spec: ComputeSpec
    ) -> StepStatus | None:
        """None when every pod of the gang fits now, else why its Job waits (Pending)."""
        classes = self._config.priority_classes
        room = read_gang_room(
            core,
            self._retry,
            tenant=tenant,
            namespace=namespace,
            needs=step_needs(spec),
            needed=spec.nodes,
            node_labels={self._config.gpu_type_label: spec.gpu_type} if spec.gpu_type else {},
            reclaimable_class=None if spec.preemptible else classes.preemptible,
        )
        short = None if room.enough else room.describe()
        short = short or self._quota_short(core, tenant, namespace, spec)
        if short is None:
            return None
        return StepStatus.pending(
            "WaitingForGangRoom",
            f"gang of {spec.nodes} pods not created yet: {short}; it is created when every "
            "pod can start at once (gang_admission: guard)",
        )

    def _quota_short(self, core: Any, tenant: str, namespace: str, spec: ComputeSpec) -> str | None:
        """What a ResourceQuota has left that is less than the whole gang asks, if any."""
        quotas = self._retry.call(
            "read resource quotas", tenant, lambda: core.list_namespaced_resource_quota(namespace)
        ).items
        needs = {kind: value * spec.nodes for kind, value in step_needs(spec).items()}
        for quota in quotas:
            hard = (quota.status and quota.status.hard) or quota.spec.hard or {}
            used = (quota.status and quota.status.used) or {}
            for key, kind in QUOTA_KEYS.items():
                if key not in hard or not needs[kind]:
                    continue
                left = parse_quantity(hard[key]) - parse_quantity(used.get(key, "0"))
                if needs[kind] > left:
                    return (
                        f"ResourceQuota '{quota.metadata.name}' has {key}={left.normalize():f} "
                        f"left, the gang's {spec.nodes} pods need {needs[kind].normalize():f}"
                    )
        return None

    def partial(
        self, step: str, tenant: str, *, nodes: int, running: int, waited_s: float, why: str
    ) -> StepStatus:
        """Pending while some pods run and the others may still come; a failure (delete the
        gang) once they have not for `all_running_timeout_s`."""
        limit = self._config.tenant(tenant).gang_admission.all_running_timeout_s
        if waited_s <= limit:
            return StepStatus.pending(
                "GangPartiallyRunning", f"{running} of {nodes} gang pods running; {why}"
            )
        return StepStatus.failed(
            FailureReason.UNSCHEDULABLE,
            f"gang step '{step}' in tenant '{tenant}': only {running} of {nodes} pods were "
            f"running {limit:g}s after the first one started (waiting pod: {why}); the whole "
            f"gang was deleted so that a partial gang holds no GPUs; free room for {nodes} pods "
            f"or raise kubernetes.tenants.{tenant}.gang_admission.all_running_timeout_s",
        )
