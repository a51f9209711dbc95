"""Checks before a tenant's first step of a size: may we create Jobs, and can the step fit?

Three questions, each answered once per tenant (permission) or per tenant and size (fit):
a SelfSubjectAccessReview for `create jobs.batch` in the namespace; the step's requests
against every ResourceQuota's hard limits; and the requests against the largest visible node's
allocatable resources (the arithmetic is `capacity.py`'s, shared with the gang guard). A step
claiming its GPUs through DRA (`dra.py`) is held to those without its GPUs, and its claim to
the DeviceClass and the devices its ResourceSlices offer per node. A failure is a
`SubmitError` that names step, tenant, limit and fix.
A tenant that lists no nodes (a vCluster without `sync.fromHost.nodes`), or may not list
them, skips the node check with a warning that says so and how to enable it.

A step that fits a quota's hard limit but not what is left of it right now is not refused:
other steps free quota as they finish. It stays Pending with the quota reason and fails
after its timeout.

Example:
    >>> check = Preflight(retry=ApiRetry())  # doctest: +SKIP
    >>> check.run(request, tenant_config, api_client)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubernetes.client import (
    ApiClient,
    AuthorizationV1Api,
    CoreV1Api,
    CustomObjectsApi,
    SchedulingV1Api,
)
from kubernetes.client.exceptions import ApiException

from ...errors import SubmitError
from ...spec import ComputeSpec
from ..base import LaunchRequest
from .api import ApiRetry
from .autoscaling import pool_verdict
from .capacity import (
    fits,
    gang_needs,
    quota_lines,
    quota_of,
    resources,
    schedulable,
    show,
    step_needs,
)
from .config import KubernetesConfig, TenantConfig
from .dra import GROUP, VERSION, GpuRequest, claims_gpus, host_fit
from .dra_devices import offer_problem, partitions_offered, pool_offer

_LOG = logging.getLogger(__name__)


class Preflight:
    """Pre-flight checks, cached per tenant (permission) and per tenant and size (fit)."""

    def __init__(self, config: KubernetesConfig, retry: ApiRetry) -> None:
        self._config = config
        self._retry = retry
        self._checked: set[tuple[Any, ...]] = set()

    def run(
        self,
        request: LaunchRequest,
        tenant: TenantConfig,
        api_client: ApiClient,
        node_labels: Mapping[str, str],
    ) -> None:
        """Raise `SubmitError` if the step can never run in the tenant. Nodes and node pools
        count only where their labels match `node_labels` (the nodeSelector of the step's
        pods). A step claiming its GPUs through DRA is checked without them: nodes and quotas
        hold no nvidia.com/gpu."""
        spec, gpus = request.spec, self._config.gpus_of(tenant)
        dra = claims_gpus(spec, gpus)
        access_key = (tenant.name, tenant.namespace)
        if access_key not in self._checked:
            self._check_access(request.step_key, tenant, api_client)
            self._checked.add(access_key)
        priority_class = self._config.priority_classes.of(spec.preemptible)
        if (tenant.name, priority_class) not in self._checked:
            self._check_priority_class(request.step_key, priority_class, tenant, api_client)
            self._checked.add((tenant.name, priority_class))
        fit_key = (
            tenant.name,
            spec.cpu,
            spec.memory_bytes,
            spec.gpu,
            spec.gpu_type,
            spec.gpu_partition,
            spec.gpu_memory_bytes,
            spec.nodes,
            spec.tasks_per_node,
            tuple(sorted(node_labels.items())),
        )
        if fit_key not in self._checked:
            fit = host_fit(spec, gpus)
            self._check_quota(request.step_key, fit, tenant, api_client)
            self._check_nodes(request.step_key, fit, tenant, api_client, node_labels)
            if dra:
                self._check_devices(request.step_key, spec, tenant, gpus, api_client)
            self._checked.add(fit_key)

    def _check_devices(
        self,
        step: str,
        spec: ComputeSpec,
        tenant: TenantConfig,
        gpus: GpuRequest,
        api_client: ApiClient,
    ) -> None:
        """DRA: the DeviceClass exists, and some node's ResourceSlices hold `gpu` devices of
        the step's model (read as `model_selector` matches them), or partitions of its
        `gpu_partition` profile."""
        custom = CustomObjectsApi(api_client)
        refused = f"step '{step}' ({spec.describe()}) can never run in tenant '{tenant.name}'"
        partition = spec.gpu_partition
        device_class = gpus.partition_device_class if partition else gpus.device_class
        key = "partition_device_class" if partition else "device_class"
        try:
            self._retry.call(
                "read DeviceClass",
                tenant.name,
                lambda: custom.get_cluster_custom_object(
                    GROUP, VERSION, "deviceclasses", device_class
                ),
            )
            slices = self._retry.call(
                "list ResourceSlices",
                tenant.name,
                lambda: custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices"),
            )["items"]
        except ApiException as error:
            if error.status == 404:
                raise SubmitError(
                    f"{refused}: DeviceClass '{device_class}' does not exist there (or "
                    f"{GROUP}/{VERSION} is not served: Kubernetes 1.34+); install the GPU's DRA "
                    f"driver, or set gpus.{key} to a class `kubectl get deviceclasses` lists"
                ) from None
            if error.status not in (401, 403):
                raise
            _warn_unchecked(
                step,
                spec,
                tenant,
                f"the executor may not read DeviceClasses and ResourceSlices ({error.status})",
                "grant it get on deviceclasses and list on resourceslices (resource.k8s.io; "
                "helm chart: rbac.listNodes=true)",
            )
            return
        offer = pool_offer(gpus, slices, partition, spec.gpu_memory_bytes)
        problem = offer_problem(spec, offer)
        if problem is None:
            return
        fix = "pick a gpu_type and a gpu count one node's devices offer"
        if partition:
            profiles = partitions_offered(gpus, slices)
            offered = ", ".join(profiles) if profiles else "none"
            fix = f"pick a gpu_partition the devices offer ({offered}) and a count one node has"
        raise SubmitError(
            f"{refused}: its ResourceClaim (DeviceClass {device_class}) asks for {problem}; "
            f"{fix}, or add such devices to the cluster"
        )

    def _check_access(self, step: str, tenant: TenantConfig, api_client: ApiClient) -> None:
        body = {
            "spec": {
                "resourceAttributes": {
                    "namespace": tenant.namespace,
                    "verb": "create",
                    "group": "batch",
                    "resource": "jobs",
                }
            }
        }
        api = AuthorizationV1Api(api_client)
        review = self._retry.call(
            "check permissions", tenant.name, lambda: api.create_self_subject_access_review(body)
        )
        if not review.status.allowed:
            raise SubmitError(
                f"step '{step}': the executor may not create Jobs in namespace "
                f"'{tenant.namespace}' of tenant '{tenant.name}'"
                f"{': ' + review.status.reason if review.status.reason else ''}; grant its "
                "identity create/get/list/watch/delete on jobs.batch and get/list/watch on pods "
                "and pods/log there (helm chart: rbac.create=true)"
            )

    def _check_priority_class(
        self, step: str, name: str, tenant: TenantConfig, api_client: ApiClient
    ) -> None:
        api = SchedulingV1Api(api_client)
        try:
            self._retry.call(
                "read priority class", tenant.name, lambda: api.read_priority_class(name)
            )
        except ApiException as error:
            if error.status in (401, 403):
                return  # not visible to the executor; pod admission will tell
            if error.status != 404:
                raise
            raise SubmitError(
                f"step '{step}': PriorityClass '{name}' does not exist in tenant "
                f"'{tenant.name}', so its pods would be refused; install helm/k8s-ai-tenant "
                "there (priorityClasses.create=true) or set kubernetes.priority_classes to "
                "classes that exist"
            ) from None

    def _check_quota(
        self, step: str, spec: ComputeSpec, tenant: TenantConfig, api_client: ApiClient
    ) -> None:
        core = CoreV1Api(api_client)
        quotas = self._retry.call(
            "read resource quotas",
            tenant.name,
            lambda: core.list_namespaced_resource_quota(tenant.namespace),
        )
        for quota in quotas.items:
            name, hard, used = quota_of(quota)
            for line in quota_lines(name, hard, used, gang_needs(spec)):
                if line.never_fits:
                    raise SubmitError(
                        f"step '{step}' ({spec.describe()}) can never run in tenant "
                        f"'{tenant.name}': it requests {line.key}={show(line.kind, line.needs)} "
                        f"but ResourceQuota '{name}' allows {line.hard_text} in namespace "
                        f"'{tenant.namespace}'; raise policies.resourceQuota.quota.{line.key} in "
                        "the tenant's vCluster values (helm chart: quota.hard) or pick a smaller "
                        "size"
                    )
                if line.short:
                    _LOG.warning(
                        "step '%s' requests %s=%s but only %s of quota '%s' is free in tenant "
                        "'%s' right now; it will wait Pending until quota frees up",
                        step,
                        line.key,
                        show(line.kind, line.needs),
                        show(line.kind, line.left),
                        name,
                        tenant.name,
                    )

    def _check_nodes(
        self,
        step: str,
        spec: ComputeSpec,
        tenant: TenantConfig,
        api_client: ApiClient,
        selector: Mapping[str, str],
    ) -> None:
        """Some nodes (as many as a gang has pods) hold one pod of the step: nodes that exist,
        or nodes the tenant's autoscaled `node_pools` can create, with `selector`'s labels."""
        nodes = self._list_nodes(step, spec, tenant, api_client)
        if nodes is None:
            return
        needs = step_needs(spec)
        largest: dict[str, Decimal] = {kind: Decimal(0) for kind in needs}
        fitting = []
        for node in (n for n in nodes if schedulable(n, selector)):
            free = resources(node.status.allocatable or {})
            if fits(free, needs):
                fitting.append(node.metadata.name)
            largest = {kind: max(largest[kind], free[kind]) for kind in needs}
        missing = spec.nodes - len(fitting)
        if missing <= 0:
            return
        pools = pool_verdict(tenant.node_pools, needs, pods=missing, node_labels=selector)
        if tenant.node_pools and pools.holds(missing):
            _LOG.info(
                "step '%s' (%s): no node of tenant '%s' holds it now; the autoscaler can create "
                "its node(s) from pool(s) %s, so it waits Pending for them",
                step,
                spec.describe(),
                tenant.name,
                ", ".join(sorted(name for name, n in pools.nodes.items() if n != 0)),
            )
            return
        refused = f"step '{step}' ({spec.describe()}) can never run in tenant '{tenant.name}'"
        if tenant.node_pools:
            raise SubmitError(
                f"{refused}: {len(fitting)} node(s) hold one of its {spec.nodes} pod(s) and no "
                f"node pool can create the rest: {pools.why}; raise that pool's node size or "
                "limit (and the tenant's node_pools with it), or pick a smaller size class"
            )
        if fitting:
            raise SubmitError(
                f"{refused}: its gang needs {spec.nodes} schedulable nodes with room for one pod "
                f"each, and only {len(fitting)} node(s) have enough allocatable resources "
                f"({', '.join(sorted(fitting))}); lower compute(nodes=...) to {len(fitting)} or "
                "add nodes to the host cluster's pool (and sync them into the vCluster)"
            )
        short = [k for k in needs if needs[k] > largest[k]] or list(needs)
        labels = ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
        where = f" with {labels}" if selector else ""
        raise SubmitError(
            f"{refused}: no schedulable node{where} has enough allocatable "
            + ", ".join(
                f"{k} (needs {show(k, needs[k])}, largest {show(k, largest[k])})" for k in short
            )
            + "; add a node pool with larger nodes to the host cluster (and sync it into the "
            "vCluster; an autoscaled pool at zero nodes: declare it in the tenant's "
            "node_pools), or pick a smaller size class"
        )

    def _list_nodes(
        self, step: str, spec: ComputeSpec, tenant: TenantConfig, api_client: ApiClient
    ) -> list[Any] | None:
        """The tenant's nodes; None (with a warning) when they cannot be checked and no
        `node_pools` are declared to check against instead."""
        try:
            nodes: list[Any] = self._retry.call(
                "list nodes", tenant.name, CoreV1Api(api_client).list_node
            ).items
        except ApiException as error:
            if error.status not in (401, 403):
                raise
            if tenant.node_pools:
                return []
            _warn_unchecked(
                step,
                spec,
                tenant,
                f"the executor may not list nodes there ({error.status})",
                "grant it list on nodes (helm chart: rbac.listNodes=true)",
            )
            return None
        if not nodes and not tenant.node_pools:
            _warn_unchecked(
                step,
                spec,
                tenant,
                "it lists no nodes",
                "sync the host's nodes into it (vCluster values: "
                "sync.fromHost.nodes.enabled=true, as in helm/vcluster-values.yaml), or declare "
                "its autoscaled pools in the tenant's node_pools",
            )
            return None
        return nodes


def _warn_unchecked(step: str, spec: ComputeSpec, tenant: TenantConfig, why: str, fix: str) -> None:
    _LOG.warning(
        "step '%s' (%s): tenant '%s' cannot be checked for a node large enough: %s. A step no "
        "node can hold is not refused before it runs; it waits Pending and fails after its "
        "timeout. To check it at launch, %s",
        step,
        spec.describe(),
        tenant.name,
        why,
        fix,
    )
