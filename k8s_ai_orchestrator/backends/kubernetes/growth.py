"""Memory of running step pods, and in-place growth through the `pods/resize` subresource.

While a step's pod runs, its memory in use comes from the step itself: a measured step's
container starts through `steppod` (`reporting.report_usage` rewrites its argv), which writes its
cgroup's working set to the pod's log every `K8S_AI_USAGE_INTERVAL_S` seconds; the log
follower takes those lines out (`usage_report`) and `observe` uses each new one. Pods that do
not report (not `python -m|-c ...`, or no report within `REPORT_GRACE_S`) are read from their
node's kubelet summary (`nodes/{node}/proxy/stats/summary`, at most once a second), only when
growth or `memory="auto"` needs it. The peak becomes the attempt's `max_rss_bytes`. With a
`MemoryGrowth` policy, past `grow_at` of its limit the pod's memory request and limit are
raised in place by what its climb needs (`memorygrowth`), without a restart (`resizable`):

accepted when `status.containerStatuses[].resources` shows it; pending under `PodResizePending`
(the kubelet keeps trying; past its old limit the step is OOM-relaunched); refused by the API
server: for permission never asked again, for the node's allocatable no size as large again.
The summary needs `get nodes/proxy` (the chart's opt-in `rbac.nodeProxy`: exec-equivalent);
without node stats a growing step that does not report records once a refused growth naming
the fix (`NODE_PROXY_FIX`) and falls back to the OOM relaunch.

Example:
    >>> pod = {"spec": {"containers": [{"name": "dagster"}]}, "status": {"containerStatuses": [
    ...     {"name": "dagster", "resources": {"limits": {"memory": "2Gi"}}}]}}
    >>> applied_memory_limit(pod)
    2147483648
    >>> in_use({"pods": [{"podRef": {"name": "p", "namespace": "ns"},
    ...     "memory": {"workingSetBytes": 42}}]}, "ns", "p")
    42
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from ...errors import BackendError
from ...memorygrowth import MemoryGrowth, MemoryTrend
from ...spec import ComputeSpec
from ...usage_report import MemoryReading
from ..base import GrowOutcome, GrowResult, JobHandle, LaunchRequest, Resize
from .api import ApiRetry, api_message
from .config import KubernetesConfig
from .reporting import report_usage, reports_usage

SAMPLE_S = 1.0  # at most one summary read per attempt per second
# how long a reporting pod may take to its first report (Python's and the step's imports)
# before its node stats are read instead
REPORT_GRACE_S = 30.0
NODE_PROXY_FIX = (
    "set rbac.nodeProxy: true in the tenant chart's values (helm/k8s-ai-tenant); it grants "
    "get on nodes/proxy on every node, which is exec-equivalent (the kubelet's /exec through "
    "the node proxy), so grant it only where the executor may already run commands in pods"
)
# A vCluster's own apiserver proxies nodes/<node>/proxy with the caller's Host header, by which
# the vCluster syncer finds no node: the request comes back to that apiserver as a plain path.
VCLUSTER_APISERVER_ANSWER = 'cannot get path "/stats/summary"'
VCLUSTER_SERVICE_FIX = (
    "point the tenant's kubeconfig at the vCluster's Service (exportKubeConfig.server in its "
    "values), whose syncer serves nodes/<node>/proxy from the host, not at the vCluster's own "
    "API server"
)
_MiB = 1024**2


@dataclass
class PodMemory:
    """What the backend knows about one attempt's memory (mutable, private)."""

    limit_bytes: int  # the limit in effect (grows with each accepted resize)
    step: str  # run and step key: what is said once per step, not once per attempt
    sampled_at: float = -math.inf
    reports: bool = False  # the pod runs `steppod`: its own reports come through its log
    samples: bool = True  # node stats are read when it does not report (not for figures only)
    watched_since: float | None = None  # first seen running with a node
    report_at: float | None = None  # the step's stamp on the last report used
    peak_bytes: int = 0
    asked_bytes: int | None = None  # a resize sent, its outcome not seen yet
    asked_used: int = 0  # memory in use when it was sent
    reported_pending: str = ""  # the PodResizePending message already recorded
    refused_from: int | None = None  # the least size the API refused (0: it refuses any)
    resizes: list[Resize] = field(default_factory=list)
    trend: MemoryTrend = field(default_factory=MemoryTrend)  # how fast its memory rises


def resizable(manifest: dict[str, Any]) -> None:
    """Say in the Job's step container that memory and CPU change without a restart
    (`resizePolicy` NotRequired, the default written out, so a pod template override that
    asks for RestartContainer is the user's visible choice)."""
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    policies = {p.get("resourceName"): p for p in container.get("resizePolicy") or []}
    for resource in ("cpu", "memory"):
        policies.setdefault(resource, {"resourceName": resource, "restartPolicy": "NotRequired"})
    container["resizePolicy"] = list(policies.values())


def in_use(summary: Mapping[str, Any], namespace: str, pod: str) -> int | None:
    """The pod's working set in a kubelet summary (None if the pod is not in it)."""
    for entry in summary.get("pods") or []:
        ref = entry.get("podRef") or {}
        if (ref.get("namespace"), ref.get("name")) == (namespace, pod):
            total = (entry.get("memory") or {}).get("workingSetBytes")
            if total is None:
                containers = entry.get("containers") or []
                total = sum((c.get("memory") or {}).get("workingSetBytes") or 0 for c in containers)
            return int(total)
    return None


def applied_memory_limit(pod: Mapping[str, Any]) -> int | None:
    """The memory limit the kubelet applied to the pod's first container (its status)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    name = containers[0]["name"] if containers else None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            limit = ((status.get("resources") or {}).get("limits") or {}).get("memory")
            return int(parse_quantity(limit)) if limit else None
    return None


def resize_pending(pod: Mapping[str, Any]) -> str:
    """The `PodResizePending` condition's reason and message, or ""."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodResizePending" and condition.get("status") == "True":
            return f"{condition.get('reason', 'Deferred')}: {condition.get('message', '')}"
    return ""


class PodGrowth:
    """Samples running pods' memory and grows them in place (see the module docstring).

    Args:
        growth: when and how much to grow (None: only measure).
        retry: the backend's API retry policy.
        clock: monotonic seconds.
        logger: where a tenant that hides node stats is reported, once.
    """

    def __init__(
        self,
        growth: MemoryGrowth | None,
        retry: ApiRetry,
        clock: Callable[[], float],
        logger: logging.Logger,
    ) -> None:
        self.growth = growth
        self._retry = retry
        self._clock = clock
        self._log = logger
        self._no_stats: dict[str, str] = {}  # tenant → why its node stats cannot be read
        self._told_no_stats: set[str] = set()  # steps whose growth was refused for it
        self._memory: dict[str, PodMemory] = {}  # Job → its attempt's memory, once running

    def measures(self, request: LaunchRequest) -> bool:
        """Whether a step's memory is read while it runs: to grow it, to size `auto` next
        time, or for its used figures in a priced run (single-pod steps only)."""
        spec = request.spec
        wanted = self._samples(spec) or request.measure_usage
        return wanted and not spec.is_gang

    def _samples(self, spec: ComputeSpec) -> bool:
        """Whether a pod that does not report is sampled from node stats: to grow it or size
        it, not for figures alone (a request per second, and `nodes/proxy`, which the chart
        does not grant by default)."""
        return self.growth is not None or spec.memory_auto

    def prepare(
        self, manifest: dict[str, Any], request: LaunchRequest, config: KubernetesConfig
    ) -> None:
        """Make the Job's pod growable in place (growth on) and reporting its memory
        (measured), for a single-pod step."""
        if self.growth is not None and not request.spec.is_gang:
            resizable(manifest)
        if self.measures(request):
            report_usage(manifest, request, config)

    def measure(
        self,
        job: str,
        request: LaunchRequest,
        core: CoreV1Api,
        tenant: str,
        pod: Mapping[str, Any],
        report_of: Callable[[], MemoryReading | None],
    ) -> None:
        """`observe` the running pod of a measured step's attempt, whose memory state is kept
        per Job; `report_of` gives the step's latest report from its log (asked only of a
        pod that reports)."""
        if not self.measures(request):
            return
        state = self._memory.get(job)
        if state is None:
            step = f"{request.run_id}/{request.step_key}"
            reports, samples = reports_usage(pod), self._samples(request.spec)
            state = PodMemory(request.spec.memory_bytes, step, reports=reports, samples=samples)
            self._memory[job] = state
        self.observe(core, tenant, pod, state, report_of() if state.reports else None)

    def drop(self, job: str) -> None:
        """Forget the Job's memory and growths (the executor is done with its attempt)."""
        self._memory.pop(job, None)

    def memory(self, job: str) -> PodMemory | None:
        """The memory of the Job's attempt, if it was measured."""
        return self._memory.get(job)

    def observe(
        self,
        core: CoreV1Api,
        tenant: str,
        pod: Mapping[str, Any],
        state: PodMemory,
        report: MemoryReading | None = None,
    ) -> None:
        """Settle the last resize from the pod's status; take the pod's latest `report` (or
        sample node stats when it does not report) and grow when due."""
        self._settle(pod, state)
        now = self._clock()
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        if state.watched_since is None:
            state.watched_since = now
        used = None
        if report is not None and (state.report_at is None or report.at > state.report_at):
            state.report_at, used = report.at, report.working_set_bytes
        elif self._stats_due(state, now):
            used = self._node_stats(core, tenant, node, pod, state)
        if used is None:
            return
        state.peak_bytes = max(state.peak_bytes, used)
        state.trend.add(now, used)
        if self.growth is None or state.asked_bytes is not None:
            return
        target = self.growth.target(state.limit_bytes, used, state.trend.rate())
        refused = state.refused_from
        if (
            target is None
            or target <= state.limit_bytes
            or (refused is not None and target >= refused)
        ):
            return
        self.ask(core, tenant, pod, state, target, used)

    def _stats_due(self, state: PodMemory, now: float) -> bool:
        """Node stats: at most once a second, and for a reporting pod only if it never did."""
        if not state.samples or now - state.sampled_at < SAMPLE_S:
            return False
        assert state.watched_since is not None
        silent = state.report_at is None and now - state.watched_since >= REPORT_GRACE_S
        return not state.reports or silent

    def _node_stats(
        self, core: CoreV1Api, tenant: str, node: str, pod: Mapping[str, Any], state: PodMemory
    ) -> int | None:
        state.sampled_at = self._clock()
        meta = pod["metadata"]
        used = None
        if tenant not in self._no_stats:
            used = self._memory_in_use(core, tenant, node, meta["namespace"], meta["name"])
        if tenant in self._no_stats:
            self._cannot_measure(tenant, state)
        return used

    def _memory_in_use(
        self, core: CoreV1Api, tenant: str, node: str, namespace: str, pod: str
    ) -> int | None:
        try:
            answer = self._retry.call(
                "read node stats",
                tenant,
                lambda: core.connect_get_node_proxy_with_path(
                    node, "stats/summary", _preload_content=False
                ),
            )
            summary = json.loads(answer.data)
        except ApiException as error:
            # a permanent answer: asking again each second is noise
            self._no_stats[tenant] = _no_stats_reason(error)
            self._log.warning(
                "tenant '%s': cannot read node stats (%s); steps there are not measured "
                "and not grown in place; to measure them, %s",
                tenant,
                api_message(error),
                stats_fix(error),
            )
            return None
        except (BackendError, ValueError):
            return None
        return in_use(summary, namespace, pod)

    def _cannot_measure(self, tenant: str, state: PodMemory) -> None:
        """Record once per growing step that it cannot be grown: its memory is unknown."""
        if self.growth is None or state.step in self._told_no_stats:
            return
        self._told_no_stats.add(state.step)
        limit = state.limit_bytes  # nothing asked for: old and new limits are the same
        reason = self._no_stats[tenant]
        state.resizes.append(Resize(limit, limit, 0, GrowOutcome.REFUSED, reason))

    def grow(
        self, core: CoreV1Api, handle: JobHandle, pod: Mapping[str, Any] | None, target: int
    ) -> GrowResult:
        """An asked-for growth of the attempt's running `pod` to `target` bytes: pending until
        the kubelet applies it, refused when there is no running pod or the API says no."""
        memory = self._memory.get(handle.job_id)
        if pod is None or memory is None:
            return GrowResult.refused(f"step '{handle.step_key}' has no running pod to resize")
        before = len(memory.resizes)
        self.ask(core, str(handle.tenant), pod, memory, target, memory.peak_bytes)
        if len(memory.resizes) > before:
            return GrowResult.refused(memory.resizes[-1].reason)
        return GrowResult.pending("the kubelet applies it when the node has room")

    def ask(
        self,
        core: CoreV1Api,
        tenant: str,
        pod: Mapping[str, Any],
        state: PodMemory,
        target: int,
        used: int,
    ) -> None:
        """Send one resize to `target` bytes; a refusal is recorded at once."""
        meta = pod["metadata"]
        container = pod["spec"]["containers"][0]["name"]
        amount = f"{math.ceil(target / _MiB)}Mi"
        resources = {"requests": {"memory": amount}, "limits": {"memory": amount}}
        body = {"spec": {"containers": [{"name": container, "resources": resources}]}}
        try:
            self._retry.call(
                "resize pod",
                tenant,
                lambda: core.patch_namespaced_pod_resize(meta["name"], meta["namespace"], body),
            )
        except (ApiException, BackendError) as error:
            if isinstance(error, ApiException):
                denied = error.status in (401, 403)  # no permission: no size will do
                least = target if state.refused_from is None else min(target, state.refused_from)
                state.refused_from = 0 if denied else least  # not asked for again
                reason = f"the API server refused the resize ({api_message(error)})"
            else:
                reason = f"the resize could not be sent ({error})"
            state.resizes.append(
                Resize(state.limit_bytes, target, used, GrowOutcome.REFUSED, reason)
            )
            return
        state.asked_bytes, state.asked_used, state.reported_pending = target, used, ""

    def _settle(self, pod: Mapping[str, Any], state: PodMemory) -> None:
        target = state.asked_bytes
        if target is None:
            return
        applied = applied_memory_limit(pod)
        if applied is not None and applied >= target:
            state.resizes.append(
                Resize(state.limit_bytes, target, state.asked_used, GrowOutcome.ACCEPTED)
            )
            state.limit_bytes, state.asked_bytes = applied, None
            return
        pending = resize_pending(pod)
        if pending and pending != state.reported_pending:
            state.reported_pending = pending
            state.resizes.append(
                Resize(state.limit_bytes, target, state.asked_used, GrowOutcome.PENDING, pending)
            )


def stats_fix(error: ApiException) -> str:
    """What lets the executor read a node's stats, from the refusal: RBAC's (`get nodes/proxy`)
    or a vCluster's own API server's (reached instead of its Service).

    Example:
        >>> error = ApiException(status=403, reason="Forbidden")
        >>> stats_fix(error) == NODE_PROXY_FIX
        True
        >>> error.body = json.dumps({"message": f"forbidden: {VCLUSTER_APISERVER_ANSWER}"})
        >>> stats_fix(error) == VCLUSTER_SERVICE_FIX
        True
    """
    if VCLUSTER_APISERVER_ANSWER in api_message(error):
        return VCLUSTER_SERVICE_FIX
    return NODE_PROXY_FIX


def _no_stats_reason(error: ApiException) -> str:
    """Why a step on a tenant whose node stats were refused cannot grow, and the fix."""
    unreported = (
        "growing in place needs the memory in use; the step's pod did not report it (its "
        "command is not `python -m ...` or `python -c ...`, or its log cannot be read) and"
    )
    if error.status == 403 and stats_fix(error) == VCLUSTER_SERVICE_FIX:
        return (
            f"{unreported} the tenant's API server did not proxy to the node's kubelet "
            f"({api_message(error)}); {VCLUSTER_SERVICE_FIX}"
        )
    if error.status == 403:
        return (
            f"{unreported} the executor may not get nodes/proxy ({api_message(error)}) to read "
            f"it from the node's kubelet; to allow it, {NODE_PROXY_FIX}"
        )
    return f"{unreported} the tenant did not give the node's stats ({api_message(error)})"


__all__ = [
    "NODE_PROXY_FIX",
    "VCLUSTER_SERVICE_FIX",
    "REPORT_GRACE_S",
    "PodGrowth",
    "PodMemory",
    "applied_memory_limit",
    "in_use",
    "resizable",
    "resize_pending",
    "stats_fix",
]
