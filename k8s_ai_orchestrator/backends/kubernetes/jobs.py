"""The batch/v1 Job of one step attempt, built with dagster-k8s's job construction.

dagster-k8s supplies image, env, secrets, service account, volumes and the `dagster-k8s/config`
tag (for users migrating from `k8s_job_executor`); this module lays the step's `ComputeSpec`
over it: requests and memory limit, GPUs (a count and a node selector, or a DRA claim:
`dra.py`), the priority class, a pod failure policy that surfaces disruptions, the grace
period for the checkpoint save, labels and a restricted security context.

Example:
    >>> from k8s_ai_orchestrator.spec import resolve_spec
    >>> from k8s_ai_orchestrator.backends.base import LaunchRequest
    >>> request = LaunchRequest("r1", "tiles", 0, ["python", "-c", "pass"], {},
    ...                         resolve_spec({"size": "xs"}), tenant="team-a")
    >>> job_name(request)
    'k8s-ai-de3cdad468c5171a9c1260573b1bfb80-0'
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from dagster_k8s.container_context import K8sContainerContext
from dagster_k8s.job import (
    K8S_RESOURCE_REQUIREMENTS_KEY,
    USER_DEFINED_K8S_CONFIG_KEY,
    DagsterK8sJobConfig,
    UserDefinedDagsterK8sConfig,
    construct_dagster_k8s_job,
    get_user_defined_k8s_config,
)
from dagster_k8s.models import k8s_snake_case_dict
from dagster_k8s.utils import sanitize_k8s_label
from kubernetes.client import ApiClient, Configuration, V1SecurityContext

from ... import gangpods
from ...errors import ConfigError, SubmitError
from ...stepenv import GANG_DIR, NODE_NAME, POD_IP
from ..base import LaunchRequest, cpu_quantity
from .capacity import GPU_RESOURCE
from .config import KubernetesConfig, TenantConfig
from .dra import claim_devices, claims_gpus, device_problem, dra_problem
from .kueue import queue_job
from .names import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    ENV_VAR_NAME,
    LABEL_VALUE,
    image_pull_policy_problem,
    label_key_problem,
)

LABEL_PREFIX = "k8s-ai"
RUN_LABEL = f"{LABEL_PREFIX}/run-id"
STEP_LABEL = f"{LABEL_PREFIX}/step"
TENANT_LABEL = f"{LABEL_PREFIX}/tenant"
ATTEMPT_LABEL = f"{LABEL_PREFIX}/attempt"
JOB_LABEL = f"{LABEL_PREFIX}/job"
MANAGED_BY = {"app.kubernetes.io/managed-by": "k8s-ai-orchestrator"}
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Entry point of every pod of a gang (`-c`, not `-m`: the package imports the module itself).
GANG_POD_MAIN = (
    f"import sys; from {gangpods.__name__} import pod_main; sys.exit(pod_main(sys.argv[1:]))"
)

# Keys of `LaunchRequest.labels` read as dagster-k8s step tags rather than turned into labels.
DAGSTER_K8S_TAG_KEYS = (USER_DEFINED_K8S_CONFIG_KEY, K8S_RESOURCE_REQUIREMENTS_KEY)

_SERIALIZER = ApiClient(Configuration())


def job_name(request: LaunchRequest) -> str:
    """A DNS-safe, 63-character-bounded Job name, unique per run, step and attempt."""
    digest = hashlib.md5(f"{request.run_id}/{request.step_key}".encode()).hexdigest()
    return f"k8s-ai-{digest}-{request.attempt}"


def run_selector(run_id: str) -> str:
    """The label selector of every pod and Job of one run."""
    return f"{RUN_LABEL}={sanitize_k8s_label(run_id)}"


def container_args(command: Sequence[str], config: KubernetesConfig) -> list[str]:
    """The container argv: `python -m dagster ...` → `command_prefix ...`, else python + rest.

    Example:
        >>> container_args(["/venv/bin/python", "-m", "dagster", "api", "execute_step", "{}"],
        ...                KubernetesConfig())
        ['dagster', 'api', 'execute_step', '{}']
    """
    if len(command) >= 3 and list(command[1:3]) == ["-m", "dagster"]:
        return [*config.command_prefix, *command[3:]]
    return [config.python, *command[1:]]


def build_job(
    request: LaunchRequest, tenant: TenantConfig, config: KubernetesConfig
) -> dict[str, Any]:
    """The Job manifest (API JSON form) for one step attempt in `tenant`."""
    step_tags = {k: v for k, v in request.labels.items() if k in DAGSTER_K8S_TAG_KEYS}
    user_config = _user_config(request, step_tags, config)
    name = job_name(request)
    image = tenant.image or config.image
    if not image and "image" not in user_config.container_config:
        raise ConfigError(
            f"step '{request.step_key}': no image for tenant '{tenant.name}'; set "
            "kubernetes.image or kubernetes.tenants.<tenant>.image in the executor config"
        )
    job = construct_dagster_k8s_job(
        job_config=_dagster_job_config(tenant, config, image),
        args=list(request.command)
        if request.raw_command
        else container_args(request.command, config),
        job_name=name,
        pod_name=name,
        component="step_worker",
        user_defined_k8s_config=user_config,
        labels=_labels(request, name, config),
        env_vars=[{"name": k, "value": v} for k, v in sorted(request.env.items())],
    )
    manifest: dict[str, Any] = _SERIALIZER.sanitize_for_serialization(job)
    _apply_spec(manifest, request, config, tenant)
    annotations = {
        f"{LABEL_PREFIX}/run-id": request.run_id,
        f"{LABEL_PREFIX}/step-key": request.step_key,
        f"{LABEL_PREFIX}/tenant": tenant.name,
        f"{LABEL_PREFIX}/size": request.spec.describe(),
    }
    for metadata in (manifest["metadata"], manifest["spec"]["template"]["metadata"]):
        metadata.setdefault("annotations", {}).update(annotations)
    return manifest


def pod_node_selector(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The nodeSelector of a Job manifest's pods (the step's `dagster-k8s/config`, the size's
    `gpu_node_selectors`, the GPU model): the labels a node needs to hold one of them.

    Example:
        >>> pod_node_selector({"spec": {"template": {"spec": {"nodeSelector": {"pool": "gpu"}}}}})
        {'pool': 'gpu'}
    """
    return dict(manifest["spec"]["template"]["spec"].get("nodeSelector") or {})


def _user_config(
    request: LaunchRequest, tags: Mapping[str, str], config: KubernetesConfig
) -> UserDefinedDagsterK8sConfig:
    """The step's `dagster-k8s/config` tag merged over `kubernetes.step_k8s_config`, the way
    `k8s_job_executor` merges a step's tag over its own `step_k8s_config`."""
    try:
        tag = get_user_defined_k8s_config(tags)
    except Exception as error:  # dagster raises its own config and JSON errors here
        raise SubmitError(
            f"step '{request.step_key}': the {USER_DEFINED_K8S_CONFIG_KEY} tag is invalid "
            f"({type(error).__name__}: {error}); fix the tag's JSON or remove it"
        ) from None
    if not config.step_k8s_config:
        return tag
    base = K8sContainerContext(
        run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(config.step_k8s_config)
    )
    return base.merge(K8sContainerContext(run_k8s_config=tag)).run_k8s_config


def _dagster_job_config(
    tenant: TenantConfig, config: KubernetesConfig, image: str | None
) -> DagsterK8sJobConfig:
    return DagsterK8sJobConfig(
        job_image=image,
        image_pull_policy=config.image_pull_policy,
        image_pull_secrets=[{"name": name} for name in config.image_pull_secrets],
        service_account_name=tenant.service_account or config.service_account,
        env_config_maps=list(config.env_config_maps),
        env_secrets=list(config.env_secrets),
        env_vars=list(config.env_vars),
        volume_mounts=list(config.volume_mounts),
        volumes=list(config.volumes),
        security_context=k8s_snake_case_dict(V1SecurityContext, config.security_context),
    )


def _labels(request: LaunchRequest, name: str, config: KubernetesConfig) -> dict[str, str]:
    extra = {k: v for k, v in request.labels.items() if k not in DAGSTER_K8S_TAG_KEYS}
    labels = {**config.labels, **extra, **MANAGED_BY}
    labels.update(
        {
            RUN_LABEL: request.run_id,
            STEP_LABEL: request.step_key,
            TENANT_LABEL: request.tenant or "",
            ATTEMPT_LABEL: str(request.attempt),
            JOB_LABEL: name,
        }
    )
    return {k: sanitize_k8s_label(v) for k, v in labels.items()}


def _apply_spec(
    manifest: dict[str, Any], request: LaunchRequest, config: KubernetesConfig, tenant: TenantConfig
) -> None:
    spec = request.spec
    job_spec = manifest["spec"]
    job_spec["backoffLimit"] = 0
    job_spec["podFailurePolicy"] = {
        "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    pod = job_spec["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = max(1, int(round(request.grace_period_s)))
    pod["priorityClassName"] = config.priority_classes.of(spec.preemptible)
    container = pod["containers"][0]
    resources = container.setdefault("resources", {}) or {}
    container["resources"] = resources
    requests = {**(resources.get("requests") or {})}
    limits = {**(resources.get("limits") or {})}
    pod_cpu = spec.cpu * spec.tasks_per_node  # a gang's pod holds every rank of its node
    requests.update({"cpu": cpu_quantity(pod_cpu), "memory": spec.memory_quantity})
    limits["memory"] = spec.memory_quantity
    limits.pop("cpu", None)
    if problem := device_problem(spec, config.gpus_of(tenant), tenant.name):
        raise ConfigError(f"step '{request.step_key}' ({spec.describe()}): {problem}")
    if claims_gpus(spec, config.gpus_of(tenant)):
        _claim_gpus(pod, request, tenant, config)
    elif spec.gpu:
        limits[GPU_RESOURCE] = str(spec.gpu)
        requests[GPU_RESOURCE] = str(spec.gpu)
        _place_on_gpus(pod, request, config, by_label=True)
    resources["requests"], resources["limits"] = requests, limits
    if spec.is_gang:
        _lay_out_gang(manifest, request, config, tenant.gang_admission.podgroups)
    if tenant.gang_admission.kueue:  # every Job of the tenant, so Kueue sees all it admits
        queue_job(manifest, str(tenant.gang_admission.local_queue))


def gang_dir(request: LaunchRequest, config: KubernetesConfig) -> str:
    """The attempt's directory under `kubernetes.gang_workdir`, which every pod mounts."""
    return f"{str(config.gang_workdir).rstrip('/')}/{job_name(request)}"


def _lay_out_gang(
    manifest: dict[str, Any], request: LaunchRequest, config: KubernetesConfig, workload: bool
) -> None:
    """One Indexed Job, one pod per node: index 0 runs the step, the others its ranks. With
    `workload` admission its pods join the PodGroup named as the Job (`podgroups.py`)."""
    if config.gang_workdir is None:
        raise ConfigError(
            f"step '{request.step_key}' ({request.spec.describe()}) is a multi-node gang: set "
            "kubernetes.gang_workdir to a directory every pod of the gang mounts (a "
            "ReadWriteMany volume in kubernetes.volumes and kubernetes.volume_mounts), where "
            "Gang.run leaves its payload and the ranks their results"
        )
    nodes, name = request.spec.nodes, job_name(request)
    job_spec = manifest["spec"]
    job_spec.update(completionMode="Indexed", completions=nodes, parallelism=nodes)
    pod = job_spec["template"]["spec"]
    affinity = pod.get("affinity") or {}
    anti = affinity.setdefault("podAntiAffinity", {})
    anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(
        {
            "labelSelector": {"matchLabels": {JOB_LABEL: name}},
            "topologyKey": HOSTNAME_LABEL,
        }
    )
    pod["affinity"] = affinity
    if workload:
        pod["schedulingGroup"] = {"podGroupName": name}
    container = pod["containers"][0]
    container["args"] = [config.python, "-c", GANG_POD_MAIN, "--", *container["args"]]
    container.setdefault("env", []).extend(
        [
            {"name": GANG_DIR, "value": gang_dir(request, config)},
            {"name": POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ]
    )


def _claim_gpus(
    pod: dict[str, Any], request: LaunchRequest, tenant: TenantConfig, config: KubernetesConfig
) -> None:
    """DRA: the pod claims its GPUs from the Job's ResourceClaimTemplate (`dra.py`, created
    after the Job by `JobApi.create`); no nvidia.com/gpu limit, the model in the claim."""
    kueue = tenant.gang_admission.kueue
    problem = dra_problem(request.spec, tenant.name, tenant.vcluster, kueue)
    if problem is not None:
        raise ConfigError(f"step '{request.step_key}' ({request.spec.describe()}): {problem}")
    claim_devices(pod, job_name(request))
    _place_on_gpus(pod, request, config, by_label=False)


def _place_on_gpus(
    pod: dict[str, Any], request: LaunchRequest, config: KubernetesConfig, *, by_label: bool
) -> None:
    """The size's GPU node selector and the GPU tolerations; with `by_label`, the model as
    a node selector on `gpu_type_label` (DRA matches it in the claim instead)."""
    spec = request.spec
    selector = dict(pod.get("nodeSelector") or {})
    selector.update(config.gpu_node_selectors.get(spec.size or "", {}))
    if spec.gpu_type and by_label:
        selector[config.gpu_type_label] = spec.gpu_type
    if selector:
        pod["nodeSelector"] = selector
    tolerations = list(pod.get("tolerations") or [])
    tolerations.extend(t for t in config.gpu_tolerations if t not in tolerations)
    if tolerations:
        pod["tolerations"] = tolerations


def config_problems(
    tenant: TenantConfig, config: KubernetesConfig, environ: Mapping[str, str] = os.environ
) -> list[str]:
    """Names in the config a step of `tenant` would write into its Job, against the API's rules,
    and the `env_vars` copied from `environ` (the run worker's) that are not set there.

    Each problem reads "<field>=<value> is not <what is allowed>; <fix>".

    Example:
        >>> config = KubernetesConfig.from_dict({"image_pull_policy": "always",
        ...     "tenants": {"t": {"kubeconfig": "/k", "namespace": "Team_A"}}})
        >>> [p.split(" is ")[0] for p in config_problems(config.tenant("t"), config)]
        ["kubernetes.tenants.t.namespace='Team_A'", "kubernetes.image_pull_policy='always'"]
    """
    where = f"kubernetes.tenants.{tenant.name}"
    policy = config.image_pull_policy
    checks = _tenant_checks(tenant)
    checks.append(("kubernetes.image_pull_policy", policy, image_pull_policy_problem(policy)))
    classes = config.priority_classes
    for key, name in (("default", classes.default), ("preemptible", classes.preemptible)):
        checks.append((f"kubernetes.priority_classes.{key}", name, DNS_SUBDOMAIN.problem(name)))
    for field_name, names in (
        ("kubernetes.service_account", [config.service_account]),
        (f"{where}.service_account", [tenant.service_account]),
        ("kubernetes.image_pull_secrets", config.image_pull_secrets),
        ("kubernetes.env_secrets", config.env_secrets),
        ("kubernetes.env_config_maps", config.env_config_maps),
    ):
        checks.extend((field_name, n, DNS_SUBDOMAIN.problem(n)) for n in names if n is not None)
    for entry in config.env_vars:
        name = entry.split("=", 1)[0]
        checks.append(("kubernetes.env_vars", name, ENV_VAR_NAME.problem(name)))
    for key, value in config.labels.items():
        checks.append(("kubernetes.labels key", key, label_key_problem(key)))
        checks.append((f"kubernetes.labels.{key}", value, LABEL_VALUE.problem(value)))
    return [
        f"{field_name}={value!r} is not {allowed}; fix it in the executor config"
        for field_name, value, allowed in checks
        if allowed is not None
    ] + _unset_env_vars(config, environ)


def _unset_env_vars(config: KubernetesConfig, environ: Mapping[str, str]) -> list[str]:
    """A problem for each `env_vars` entry without '=' whose variable `environ` lacks."""
    return [
        f"kubernetes.env_vars={name!r} is not set in the run worker's environment, and an entry "
        f"without '=' copies the variable from there: set {name} where the run starts (its "
        f"code location or run launcher), or give the value here as {name}=<value>"
        for name in config.env_vars
        if "=" not in name and name not in environ
    ]


def _tenant_checks(tenant: TenantConfig) -> list[tuple[str, object, str | None]]:
    """(field, value, what is allowed or None) for the tenant's namespace and vCluster names."""
    where = f"kubernetes.tenants.{tenant.name}"
    checks: list[tuple[str, object, str | None]] = [
        (f"{where}.namespace", tenant.namespace, DNS_LABEL.problem(tenant.namespace))
    ]
    if tenant.vcluster is not None:
        secret_problem = DNS_SUBDOMAIN.problem(f"vc-{tenant.vcluster}")
        allowed = secret_problem and f"a vCluster name whose secret vc-<name> is {secret_problem}"
        checks.append((f"{where}.vcluster", tenant.vcluster, allowed))
        namespace = tenant.host_namespace
        checks.append((f"{where}.host_namespace", namespace, DNS_LABEL.problem(namespace)))
    return checks


def manifest_problems(manifest: Mapping[str, Any]) -> list[str]:
    """Names in a built Job (config plus the step's dagster-k8s/config tag) the API would refuse.

    Example:
        >>> manifest_problems({"metadata": {"name": "j", "labels": {"a b": "x"}}})[0][:30]
        "Job label key 'a b' is not a l"
    """
    pod = manifest.get("spec", {}).get("template", {})
    pod_spec = pod.get("spec") or {}
    checks: list[tuple[str, object, str | None]] = [
        ("Job name", manifest["metadata"]["name"], DNS_LABEL.problem(manifest["metadata"]["name"]))
    ]
    for where, metadata in (("Job", manifest["metadata"]), ("pod", pod.get("metadata") or {})):
        for key, value in (metadata.get("labels") or {}).items():
            checks.append((f"{where} label key", key, label_key_problem(key)))
            checks.append((f"{where} label {key}", value, LABEL_VALUE.problem(value)))
    if "priorityClassName" in pod_spec:
        name = pod_spec["priorityClassName"]
        checks.append(("priorityClassName", name, DNS_SUBDOMAIN.problem(name)))
    for container in pod_spec.get("containers") or []:
        policy = container.get("imagePullPolicy")
        if policy is not None:
            checks.append(("imagePullPolicy", policy, image_pull_policy_problem(policy)))
        for env in container.get("env") or []:
            checks.append(("env var name", env.get("name"), ENV_VAR_NAME.problem(env.get("name"))))
    return [
        f"{field_name} {value!r} is not {allowed}; fix the executor config or the step's "
        f"{USER_DEFINED_K8S_CONFIG_KEY} tag"
        for field_name, value, allowed in checks
        if allowed is not None
    ]


def describe_manifest(manifest: Mapping[str, Any]) -> str:
    """Stable JSON text of a manifest, for golden files and debugging."""
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"
