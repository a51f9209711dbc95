"""How GPU steps ask for GPUs: the device plugin's count, or a Dynamic Resource Allocation claim.

`compute(gpu=N, gpu_type=...)` means the same either way; the backend's `gpus` config (or a
tenant's own) picks the request:

- `device_plugin` (the default): the container's `nvidia.com/gpu: N` limit, the model as a
  node selector on `gpu_type_label` (`jobs.py`).
- `dra`: Kubernetes' Dynamic Resource Allocation (`resource.k8s.io/v1`, GA since 1.34). The
  step's pod gets a ResourceClaimTemplate named `<job>-gpus`, created right after its Job and
  owned by it (so it goes with the Job), asking for exactly N devices of `device_class`, the
  model as a CEL selector on the driver's `model_attribute`; the pod's `resourceClaims` names
  the template, the container's `resources.claims` the claim, and no `nvidia.com/gpu` limit
  is set. The kube-scheduler picks the devices (every one on the pod's node) and writes them
  into the claim's status; the driver's kubelet plugin hands them to the container. A gang's
  rank pods share the Job's pod template, so each rank pod gets a claim of its own from the
  template (one claim per rank pod; claims shared by a PodGroup are not used).

`compute(gpu=N, gpu_partition="1g.10gb")` asks for N partitions of that profile instead of
whole GPUs (MIG-style devices, which a driver publishes as partitionable devices consuming
their GPU's shared counters): the claim asks for devices of `partition_device_class`
(NVIDIA's `mig.nvidia.com`) whose `partition_attribute` (`gpu.nvidia.com/profile`) is the
profile. `gpu_memory="40Gi"` adds a selector on each device's `memory_capacity`
(`gpu.nvidia.com/memory`): at least that much. Both are claimed through DRA only: a tenant on
`device_plugin` refuses them.

`gpu_type` is a label-style name ("nvidia-h100-80gb-hbm3"), and NVIDIA's driver publishes
`productName` as "NVIDIA H100 80GB HBM3": the selector compares the attribute lower-cased with
spaces as '-', which is how NVIDIA's GPU feature discovery writes the same name as a label.

Pre-flight (`preflight.py`) reads the cluster's ResourceSlices (`dra_devices.py`) and
refuses a step no node's devices could ever satisfy; nodes and quotas are checked without a
DRA step's GPUs (`host_fit`).

Example:
    >>> gpus = GpuRequest.from_dict({"request": "dra", "device_class": "gpu.nvidia.com"}, "k")
    >>> model_selector(gpus, "nvidia-h100")  # doctest: +ELLIPSIS
    'device.attributes["gpu.nvidia.com"].productName.lowerAscii().replace(" ", "-") == ...'
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from ...errors import ConfigError, SubmitError, check_keys
from ...spec import ComputeSpec, format_memory
from .api import ApiRetry, api_message, create_for_job, job_owner
from .names import DNS_SUBDOMAIN

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceclaimtemplates"
CLAIM = "gpus"  # the name of the claim in the pod and of the request in the claim
REQUESTS = ("device_plugin", "dra")
DEFAULT_MODEL_ATTRIBUTE = "gpu.nvidia.com/productName"  # NVIDIA's DRA driver's model name
DEFAULT_PARTITION_ATTRIBUTE = "gpu.nvidia.com/profile"  # the MIG profile of NVIDIA's devices
DEFAULT_MEMORY_CAPACITY = "gpu.nvidia.com/memory"  # each NVIDIA device's memory capacity
# A fully qualified device attribute: `<driver domain>/<C identifier of at most 32 characters>`.
_ATTRIBUTE = re.compile(r"(?P<domain>[a-z0-9][-a-z0-9.]*[a-z0-9])/(?P<name>[A-Za-z_]\w{0,31})")
_DRA_ONLY = (
    "device_class",
    "model_attribute",
    "partition_device_class",
    "partition_attribute",
    "memory_capacity",
)
_KEYS = frozenset({"request", *_DRA_ONLY})


@dataclass(frozen=True)
class GpuRequest:
    """How a GPU step's pod asks for its GPUs (`kubernetes.gpus`, or a tenant's `gpus`).

    Example:
        >>> GpuRequest.from_dict(None, "kubernetes.gpus").dra
        False
        >>> GpuRequest.from_dict({"request": "dra"}, "kubernetes.gpus")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        k8s_ai_orchestrator.errors.ConfigError: kubernetes.gpus: request: dra needs ...
    """

    request: str = "device_plugin"  # device_plugin | dra
    device_class: str | None = None  # dra: the DeviceClass the claim asks devices of
    model_attribute: str = DEFAULT_MODEL_ATTRIBUTE  # dra: `<domain>/<name>` gpu_type matches
    partition_device_class: str | None = None  # dra: the DeviceClass of GPU partitions
    partition_attribute: str = DEFAULT_PARTITION_ATTRIBUTE  # dra: what gpu_partition matches
    memory_capacity: str = DEFAULT_MEMORY_CAPACITY  # dra: the capacity gpu_memory bounds

    @property
    def dra(self) -> bool:
        """Whether GPUs are requested through a ResourceClaim."""
        return self.request == "dra"

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None, where: str) -> GpuRequest:
        """The checked section; `ConfigError` naming the key, the value and what is allowed."""
        if raw is None:
            return cls()
        check_keys(raw, _KEYS, where)
        request = raw.get("request", "device_plugin")
        if request not in REQUESTS:
            raise ConfigError(
                f"{where}.request={request!r} is not one of {', '.join(REQUESTS)}; use "
                "device_plugin (nvidia.com/gpu limits) or dra (a ResourceClaim per step)"
            )
        device_class = raw.get("device_class")
        if request != "dra":
            given = [key for key in _DRA_ONLY if key in raw]
            if given:
                raise ConfigError(
                    f"{where}: {', '.join(given)} is only read with request: dra (request is "
                    f"{request!r}); remove it or set request: dra"
                )
            return cls()
        if device_class is None:
            raise ConfigError(
                f"{where}: request: dra needs device_class, the DeviceClass whose devices GPU "
                "steps claim: set device_class: gpu.nvidia.com for NVIDIA's DRA driver, or a "
                "name `kubectl get deviceclasses` lists"
            )
        partition_class = raw.get("partition_device_class")
        for key, name in (
            ("device_class", device_class),
            ("partition_device_class", partition_class),
        ):
            allowed = DNS_SUBDOMAIN.problem(name) if name is not None else None
            if allowed:
                raise ConfigError(
                    f"{where}.{key}={name!r} is not {allowed}; give the name of a "
                    "DeviceClass (`kubectl get deviceclasses`)"
                )
        return cls(
            request="dra",
            device_class=device_class,
            model_attribute=_attribute(raw, "model_attribute", where, DEFAULT_MODEL_ATTRIBUTE),
            partition_device_class=partition_class,
            partition_attribute=_attribute(
                raw, "partition_attribute", where, DEFAULT_PARTITION_ATTRIBUTE
            ),
            memory_capacity=_attribute(raw, "memory_capacity", where, DEFAULT_MEMORY_CAPACITY),
        )


def _attribute(raw: Mapping[str, Any], key: str, where: str, default: str) -> str:
    """A qualified device attribute key of the `gpus` section (`ConfigError` if malformed)."""
    attribute = raw.get(key, default)
    if not isinstance(attribute, str) or not _ATTRIBUTE.fullmatch(attribute):
        raise ConfigError(
            f"{where}.{key}={attribute!r} is not a qualified device attribute (<driver "
            "domain>/<name>, the name a C identifier of at most 32 characters); give the "
            f"attribute the driver publishes, e.g. {default}"
        )
    return attribute


def split_attribute(attribute: str) -> tuple[str, str]:
    """(driver domain, name) of a qualified attribute checked by `GpuRequest.from_dict`."""
    match = _ATTRIBUTE.fullmatch(attribute)
    assert match is not None  # checked by GpuRequest.from_dict
    return match["domain"], match["name"]


def claims_gpus(spec: ComputeSpec, gpus: GpuRequest) -> bool:
    """Whether a step of `spec` claims its GPUs through DRA (a ResourceClaimTemplate)."""
    return bool(spec.gpu) and gpus.dra


def model_selector(gpus: GpuRequest, gpu_type: str) -> str:
    """The CEL expression a device of model `gpu_type` satisfies (see the module docstring)."""
    domain, name = split_attribute(gpus.model_attribute)
    wanted = json.dumps(gpu_type.lower())
    return (
        f'device.attributes[{json.dumps(domain)}].{name}.lowerAscii().replace(" ", "-") == {wanted}'
    )


def partition_selector(gpus: GpuRequest, profile: str) -> str:
    """The CEL expression a partition of `profile` satisfies (the attribute as published).

    Example:
        >>> gpus = GpuRequest(request="dra", device_class="gpu.nvidia.com")
        >>> partition_selector(gpus, "1g.10gb")
        'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
    """
    domain, name = split_attribute(gpus.partition_attribute)
    return f"device.attributes[{json.dumps(domain)}].{name} == {json.dumps(profile)}"


def memory_selector(gpus: GpuRequest, least_bytes: int) -> str:
    """The CEL expression a device with at least `least_bytes` of memory satisfies.

    Example:
        >>> gpus = GpuRequest(request="dra", device_class="gpu.nvidia.com")
        >>> memory_selector(gpus, 40 * 2**30)
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
    """
    domain, name = split_attribute(gpus.memory_capacity)
    least = json.dumps(format_memory(least_bytes))
    return f"device.capacity[{json.dumps(domain)}].{name}.compareTo(quantity({least})) >= 0"


def device_problem(spec: ComputeSpec, gpus: GpuRequest, tenant: str) -> str | None:
    """Why a step selecting its GPUs by partition or memory cannot in `tenant`, or None."""
    asked = [
        f"{field}={value!r}"
        for field, value in (
            ("gpu_partition", spec.gpu_partition),
            ("gpu_memory", format_memory(spec.gpu_memory_bytes) if spec.gpu_memory_bytes else None),
        )
        if value
    ]
    if not asked:
        return None
    where = f"kubernetes.tenants.{tenant}"
    if not gpus.dra:
        return (
            f"{' and '.join(asked)} needs gpus.request: dra on tenant '{tenant}' (the device "
            "plugin's nvidia.com/gpu counts whole GPUs, without their attributes); set "
            f"{where}.gpus (or kubernetes.gpus) to request: dra"
        )
    if spec.gpu_partition and gpus.partition_device_class is None:
        return (
            f"gpu_partition={spec.gpu_partition!r} needs gpus.partition_device_class on tenant "
            f"'{tenant}', the DeviceClass whose devices are GPU partitions: set "
            "partition_device_class: mig.nvidia.com for NVIDIA's DRA driver, or a name "
            "`kubectl get deviceclasses` lists"
        )
    return None


def template_name(job: str) -> str:
    """The name of the ResourceClaimTemplate of Job `job` (one per attempt)."""
    return f"{job}-{CLAIM}"


def claim_template(job: str, job_uid: str, spec: ComputeSpec, gpus: GpuRequest) -> dict[str, Any]:
    """The ResourceClaimTemplate of one attempt's pod, owned by its Job.

    Example:
        >>> from k8s_ai_orchestrator.spec import resolve_spec
        >>> gpus = GpuRequest(request="dra", device_class="gpu.example.com")
        >>> body = claim_template("j-0", "uid-1", resolve_spec({"gpu": 2}), gpus)
        >>> body["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"]
        2
    """
    partition = spec.gpu_partition
    exactly: dict[str, Any] = {
        "deviceClassName": gpus.partition_device_class if partition else gpus.device_class,
        "allocationMode": "ExactCount",
        "count": spec.gpu,
    }
    selectors = [partition_selector(gpus, partition)] if partition else []
    if spec.gpu_type:
        selectors.append(model_selector(gpus, spec.gpu_type))
    if spec.gpu_memory_bytes:
        selectors.append(memory_selector(gpus, spec.gpu_memory_bytes))
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    owner = job_owner(job, job_uid)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name(job), "ownerReferences": [owner]},
        "spec": {"spec": {"devices": {"requests": [{"name": CLAIM, "exactly": exactly}]}}},
    }


def claim_devices(pod: dict[str, Any], job: str) -> None:
    """Make the pod spec's first container use the claim made from the Job's template."""
    claims = [c for c in pod.get("resourceClaims") or [] if c.get("name") != CLAIM]
    pod["resourceClaims"] = [
        *claims,
        {"name": CLAIM, "resourceClaimTemplateName": template_name(job)},
    ]
    resources = pod["containers"][0].setdefault("resources", {})
    resources["claims"] = [*(resources.get("claims") or []), {"name": CLAIM}]


def dra_problem(spec: ComputeSpec, tenant: str, vcluster: str | None, kueue: bool) -> str | None:
    """Why a GPU step of `tenant` cannot ask for its GPUs through DRA (yet), or None. A gang's
    rank pods each claim from the Job's template: one claim of `gpu` devices per rank pod."""
    if not spec.gpu:
        return None
    return _tenant_problem(tenant, vcluster, kueue)


def host_fit(spec: ComputeSpec, gpus: GpuRequest) -> ComputeSpec:
    """What nodes and quotas must hold for a step: without its GPUs when it claims them
    through DRA (nodes and quotas hold no nvidia.com/gpu then; its devices are the slices').

    Example:
        >>> from k8s_ai_orchestrator.spec import resolve_spec
        >>> gpus = GpuRequest(request="dra", device_class="gpu.example.com")
        >>> host_fit(resolve_spec({"gpu": 2, "gpu_type": "h100"}), gpus).gpu
        0
    """
    if claims_gpus(spec, gpus):
        return replace(spec, gpu=0, gpu_type=None, gpu_partition=None, gpu_memory_bytes=None)
    return spec


def create_claim_template(
    step: str,
    tenant: str,
    namespace: str,
    job: str,
    spec: ComputeSpec,
    gpus: GpuRequest,
    api_client: ApiClient,
    retry: ApiRetry,
) -> None:
    """Create the template of Job `job` (which exists), owned by it; `SubmitError` if refused."""
    where, resource = (tenant, namespace, job), (GROUP, VERSION, PLURAL)
    try:
        create_for_job(
            api_client, retry, where, resource, partial(claim_template, job, spec=spec, gpus=gpus)
        )
    except ApiException as error:
        raise SubmitError(
            f"step '{step}': tenant '{tenant}' refused ResourceClaimTemplate "
            f"{template_name(job)} in namespace '{namespace}' ({api_message(error)}); the "
            f"executor needs create on {GROUP} {PLURAL} there (helm chart: rbac.create=true), "
            f"and the tenant must serve {GROUP}/{VERSION} (Kubernetes 1.34+)"
        ) from None


def _tenant_problem(tenant: str, vcluster: str | None, kueue: bool) -> str | None:
    """Why a tenant cannot request GPUs through DRA yet (with `gpus.request: dra`), or None."""
    where = f"kubernetes.tenants.{tenant}"
    if vcluster is not None:
        return (
            f"{where}: gpus.request: dra is not supported on vCluster '{vcluster}' yet: what "
            "vCluster's syncer does with ResourceClaims and ResourceClaimTemplates is not "
            "settled here; use gpus.request: device_plugin on this tenant, or reach a cluster "
            "whose scheduler sees the claims with a kubeconfig tenant"
        )
    if kueue:
        return (
            f"{where}: gpus.request: dra with gang_admission.mode: kueue is not supported yet: "
            "Kueue's ClusterQueue quota counts nvidia.com/gpu, which a DRA step does not "
            "request, so its GPUs would go unaccounted; use gang_admission.mode: guard, or "
            "gpus.request: device_plugin on this tenant"
        )
    return None


__all__ = [
    "CLAIM",
    "GpuRequest",
    "claim_devices",
    "claim_template",
    "claims_gpus",
    "create_claim_template",
    "device_problem",
    "dra_problem",
    "host_fit",
    "memory_selector",
    "model_selector",
    "partition_selector",
    "split_attribute",
    "template_name",
]
