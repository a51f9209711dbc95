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

`gpu_type` is a label-style name ("nvidia-h100-80gb-hbm3"), and NVIDIA's driver publishes
`productName` as "NVIDIA H100 80GB HBM3": the selector compares the attribute lower-cased with
spaces as '-', which is how NVIDIA's GPU feature discovery writes the same name as a label.

Pre-flight (`preflight.py`) reads the cluster's ResourceSlices through `pool_offer` and
refuses a step no node's devices could ever satisfy, or a gang too few nodes' devices could
(`offer_problem`); nodes and quotas are checked without a DRA step's GPUs (`host_fit`).
DeviceClass selectors are CEL that only the scheduler evaluates; the count here reads the
model attribute alone.

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

from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from ...errors import ConfigError, SubmitError, check_keys
from ...spec import ComputeSpec
from .api import ApiRetry, api_message, create_for_job, job_owner
from .names import DNS_SUBDOMAIN

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceclaimtemplates"
CLAIM = "gpus"  # the name of the claim in the pod and of the request in the claim
REQUESTS = ("device_plugin", "dra")
DEFAULT_MODEL_ATTRIBUTE = "gpu.nvidia.com/productName"  # NVIDIA's DRA driver's model name
# A fully qualified device attribute: `<driver domain>/<C identifier of at most 32 characters>`.
_ATTRIBUTE = re.compile(r"(?P<domain>[a-z0-9][-a-z0-9.]*[a-z0-9])/(?P<name>[A-Za-z_]\w{0,31})")
_KEYS = frozenset({"request", "device_class", "model_attribute"})


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
        device_class, attribute = raw.get("device_class"), raw.get("model_attribute")
        if request != "dra":
            given = [key for key in ("device_class", "model_attribute") if key in raw]
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
        allowed = DNS_SUBDOMAIN.problem(device_class)
        if allowed:
            raise ConfigError(
                f"{where}.device_class={device_class!r} is not {allowed}; give the name of a "
                "DeviceClass (`kubectl get deviceclasses`)"
            )
        attribute = DEFAULT_MODEL_ATTRIBUTE if attribute is None else attribute
        if not isinstance(attribute, str) or not _ATTRIBUTE.fullmatch(attribute):
            raise ConfigError(
                f"{where}.model_attribute={attribute!r} is not a qualified device attribute "
                "(<driver domain>/<name>, the name a C identifier of at most 32 characters); "
                f"give the attribute that holds the GPU model, e.g. {DEFAULT_MODEL_ATTRIBUTE}"
            )
        return cls(request="dra", device_class=device_class, model_attribute=attribute)


def claims_gpus(spec: ComputeSpec, gpus: GpuRequest) -> bool:
    """Whether a step of `spec` claims its GPUs through DRA (a ResourceClaimTemplate)."""
    return bool(spec.gpu) and gpus.dra


def model_selector(gpus: GpuRequest, gpu_type: str) -> str:
    """The CEL expression a device of model `gpu_type` satisfies (see the module docstring)."""
    match = _ATTRIBUTE.fullmatch(gpus.model_attribute)
    assert match is not None  # checked by GpuRequest.from_dict
    domain, name = json.dumps(match["domain"]), match["name"]
    wanted = json.dumps(gpu_type.lower())
    return f'device.attributes[{domain}].{name}.lowerAscii().replace(" ", "-") == {wanted}'


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
    exactly: dict[str, Any] = {
        "deviceClassName": gpus.device_class,
        "allocationMode": "ExactCount",
        "count": spec.gpu,
    }
    if spec.gpu_type:
        exactly["selectors"] = [{"cel": {"expression": model_selector(gpus, spec.gpu_type)}}]
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
    return replace(spec, gpu=0, gpu_type=None) if claims_gpus(spec, gpus) else spec


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


def model_of(gpus: GpuRequest, device: Mapping[str, Any], driver: str) -> str | None:
    """The label-style model of a ResourceSlice device (as `model_selector` compares it)."""
    match = _ATTRIBUTE.fullmatch(gpus.model_attribute)
    assert match is not None  # checked by GpuRequest.from_dict
    attributes = device.get("attributes") or {}
    value = (attributes.get(f"{match['domain']}/{match['name']}") or {}).get("string")
    if value is None and driver == match["domain"]:  # unqualified: the driver's own domain
        value = (attributes.get(match["name"]) or {}).get("string")
    return None if value is None else str(value).lower().replace(" ", "-")


def pool_offer(gpus: GpuRequest, slices: list[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Devices per node (or pool) and model, from the ResourceSlices of the model's driver.

    Example:
        >>> gpus = GpuRequest(request="dra", device_class="gpu.nvidia.com")
        >>> one = {"attributes": {"productName": {"string": "NVIDIA H100"}}}
        >>> pool_offer(gpus, [{"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
        ...                             "pool": {"name": "n1"}, "devices": [one, one]}}])
        {'n1': {'nvidia-h100': 2}}
    """
    offer: dict[str, dict[str, int]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        where = spec.get("nodeName") or (spec.get("pool") or {}).get("name", "?")
        for device in spec.get("devices") or []:
            model = model_of(gpus, device, str(spec.get("driver")))
            if model is not None:
                models = offer.setdefault(where, {})
                models[model] = models.get(model, 0) + 1
    return offer


def offer_problem(spec: ComputeSpec, offer: Mapping[str, Mapping[str, int]]) -> str | None:
    """Why no placement's devices could ever satisfy the step's claims, or None (pre-flight):
    each of its `nodes` pods (a gang's rank pods, on nodes of their own) claims `gpu` devices
    on its node, so that many nodes must each offer that many devices of the model.

    Example:
        >>> from k8s_ai_orchestrator.spec import resolve_spec
        >>> offer_problem(resolve_spec({"gpu": 1, "gpu_type": "b200"}), {"n1": {"h100": 4}})
        'no device of model b200 (the pool offers n1: 4 × h100)'
        >>> gang = resolve_spec({"gpu": 2, "nodes": 2})
        >>> offer_problem(gang, {"n1": {"h100": 4}}).split(" (the pool")[0]
        '2 devices on each of 2 nodes (one claim per rank pod), and only 1 node offers that'
    """
    wanted = spec.gpu_type.lower() if spec.gpu_type else None
    counts = {
        node: sum(n for model, n in models.items() if wanted in (None, model))
        for node, models in offer.items()
    }
    most = max(counts.values(), default=0)
    enough = sum(1 for n in counts.values() if n >= spec.gpu)
    if enough >= spec.nodes:
        return None
    pool = "; ".join(
        f"{node}: " + ", ".join(f"{n} × {model}" for model, n in sorted(models.items()))
        for node, models in sorted(offer.items())
    )
    of_model = f" of model {wanted}" if wanted else ""
    if most == 0:
        return f"no device{of_model} (the pool offers {pool or 'no devices'})"
    if most < spec.gpu:
        return (
            f"{spec.gpu} devices{of_model} on one node, and no node has more than {most} (the "
            f"pool offers {pool})"
        )
    return (
        f"{spec.gpu} devices{of_model} on each of {spec.nodes} nodes (one claim per rank pod), "
        f"and only {enough} node{'s offer' if enough != 1 else ' offers'} that (the pool "
        f"offers {pool})"
    )


def allocated_devices(claim: Mapping[str, Any]) -> int:
    """How many devices the claim's allocation (`status.allocation.devices.results`) holds
    for the step's request: whole GPUs count one each (partitions, not built, would count by
    their share of a device).

    Example:
        >>> allocated_devices({"status": {"allocation": {"devices": {"results": [
        ...     {"request": "gpus", "device": "gpu-0"}, {"request": "gpus", "device": "gpu-1"}]}}}})
        2
        >>> allocated_devices({"status": {}})
        0
    """
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return sum(1 for result in results if result.get("request") == CLAIM)


def pod_claim(pod: Mapping[str, Any]) -> str | None:
    """The name of the ResourceClaim made for the pod's `gpus` claim (its status says), or
    None while the resource-claim controller has not made it."""
    for made in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if made.get("name") == CLAIM and made.get("resourceClaimName"):
            return str(made["resourceClaimName"])
    return None


def read_allocated_devices(
    api_client: ApiClient, namespace: str, pods: list[Mapping[str, Any]]
) -> int | None:
    """The devices allocated to the running pods' claims together (a gang: one claim per rank
    pod), read once when the attempt starts (a claim goes with its pod). None when a claim
    is not named yet or cannot be read: usage then counts the GPUs the step asked for."""
    custom = CustomObjectsApi(api_client)
    total = 0
    for pod in pods:
        name = pod_claim(pod)
        if name is None:
            return None
        try:
            claim = custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "resourceclaims", name
            )
        except ApiException:
            return None
        total += allocated_devices(claim)
    return total


__all__ = [
    "CLAIM",
    "GpuRequest",
    "allocated_devices",
    "claim_devices",
    "claim_template",
    "claims_gpus",
    "create_claim_template",
    "dra_problem",
    "host_fit",
    "model_of",
    "model_selector",
    "offer_problem",
    "pod_claim",
    "pool_offer",
    "read_allocated_devices",
    "template_name",
]
