"""Configuration of the Kubernetes backend: tenants, images, priority classes, GPU placement.

The executor passes the `kubernetes` section of its config to `KubernetesConfig.from_dict`.
Unknown keys are refused with a `ConfigError` that lists the allowed ones, so a typo never
silently falls back to a default.

Example:
    >>> config = KubernetesConfig.from_dict(
    ...     {"image": "ghcr.io/acme/pipeline:1.0",
    ...      "tenants": {"team-a": {"kubeconfig": "/etc/team-a/kubeconfig"}}}
    ... )
    >>> config.tenants["team-a"].namespace
    'default'
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dagster_k8s.job import USER_DEFINED_K8S_CONFIG_KEY, get_user_defined_k8s_config

from ...errors import ConfigError, check_keys, config_number
from .api_values import security_context
from .autoscaling import NodePool, node_pools
from .dra import GpuRequest
from .gang_admission import VCLUSTER_WORKLOAD, GangAdmission
from .names import label_key_problem

DEFAULT_SECURITY_CONTEXT: Mapping[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}

DEFAULT_GPU_TOLERATIONS: tuple[Mapping[str, Any], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)


@dataclass(frozen=True)
class PriorityClasses:
    """PriorityClass names: preemptible steps get the low one, every other step the default."""

    default: str = "k8s-ai-standard"
    preemptible: str = "k8s-ai-preemptible"

    def of(self, preemptible: bool) -> str:
        """The class of a step that is (or is not) preemptible."""
        return self.preemptible if preemptible else self.default


@dataclass(frozen=True)
class TenantConfig:
    """How to reach one tenant's API and where its steps run.

    Exactly one of `kubeconfig` (a file) or `vcluster` (a vCluster name whose `vc-<name>`
    secret in `host_namespace` on the host cluster holds the kubeconfig) is set.
    """

    name: str
    kubeconfig: str | None = None  # path of a kubeconfig file for the tenant's API
    context: str | None = None  # kubeconfig context; None = the file's current context
    vcluster: str | None = None  # vCluster name: the kubeconfig is secret vc-<name>
    host_namespace: str | None = None  # host namespace holding that secret
    host_kubeconfig: str | None = None  # host cluster kubeconfig; None = in-cluster
    server: str | None = None  # API URL override (vCluster exportKubeConfig.server)
    namespace: str = "default"  # namespace for the step Jobs inside the tenant
    image: str | None = None  # overrides the backend-wide image
    service_account: str | None = None  # overrides the backend-wide service account
    allowed_sizes: tuple[str, ...] | None = None  # size classes this tenant accepts
    gang_admission: GangAdmission = field(default_factory=GangAdmission)  # multi-node steps
    gpus: GpuRequest | None = None  # how GPUs are requested here; None = kubernetes.gpus
    node_pools: tuple[NodePool, ...] = ()  # the host's autoscaled pools (autoscaling.py)

    @classmethod
    def from_dict(cls, name: str, raw: Mapping[str, Any]) -> TenantConfig:
        where = f"kubernetes.tenants.{name}"
        check_keys(raw, _TENANT_KEYS, where)
        has_file, has_vcluster = "kubeconfig" in raw, "vcluster" in raw
        if has_file == has_vcluster:
            raise ConfigError(
                f"{where}: give either 'kubeconfig' (a file) or 'vcluster' + 'host_namespace' "
                "(the vCluster whose vc-<name> secret holds the kubeconfig)"
            )
        if has_vcluster and not raw.get("host_namespace"):
            raise ConfigError(
                f"{where}: 'vcluster: {raw['vcluster']}' needs 'host_namespace', the host "
                f"namespace vCluster was installed in: add host_namespace: "
                f"vcluster-{raw['vcluster']} (vCluster's usual one) or the one you chose"
            )
        sizes = raw.get("allowed_sizes")
        for key in ("kubeconfig", "host_kubeconfig"):
            _refuse_kubeconfig_contents(raw.get(key), f"{where}.{key}")
        gangs = GangAdmission.from_dict(raw.get("gang_admission"), where)
        if has_vcluster and gangs.podgroups:
            raise ConfigError(VCLUSTER_WORKLOAD.format(where=where, name=raw["vcluster"]))
        return cls(
            name=name,
            kubeconfig=_opt_str(raw, "kubeconfig", where),
            context=_opt_str(raw, "context", where),
            vcluster=_opt_str(raw, "vcluster", where),
            host_namespace=_opt_str(raw, "host_namespace", where),
            host_kubeconfig=_opt_str(raw, "host_kubeconfig", where),
            server=_opt_str(raw, "server", where),
            namespace=_opt_str(raw, "namespace", where) or "default",
            image=_opt_str(raw, "image", where),
            service_account=_opt_str(raw, "service_account", where),
            allowed_sizes=tuple(_str_list(sizes, f"{where}.allowed_sizes")) if sizes else None,
            gang_admission=gangs,
            gpus=GpuRequest.from_dict(raw["gpus"], f"{where}.gpus") if "gpus" in raw else None,
            node_pools=node_pools(raw.get("node_pools"), f"{where}.node_pools"),
        )


@dataclass(frozen=True)
class KubernetesConfig:
    """The Kubernetes backend's settings (the executor config's `kubernetes` section)."""

    tenants: Mapping[str, TenantConfig] = field(default_factory=dict)
    image: str | None = None  # container image of step pods
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()  # names of docker-registry secrets
    service_account: str | None = None  # service account of step pods
    env_vars: tuple[str, ...] = ()  # "KEY=VALUE", or "KEY" to copy from the executor's env
    env_secrets: tuple[str, ...] = ()  # secrets loaded whole with envFrom
    env_config_maps: tuple[str, ...] = ()  # config maps loaded whole with envFrom
    volumes: tuple[Mapping[str, Any], ...] = ()  # pod volumes (Kubernetes API dicts)
    volume_mounts: tuple[Mapping[str, Any], ...] = ()  # container volume mounts
    labels: Mapping[str, str] = field(default_factory=dict)  # extra labels on Jobs and pods
    priority_classes: PriorityClasses = field(default_factory=PriorityClasses)
    security_context: Mapping[str, Any] = field(default_factory=lambda: DEFAULT_SECURITY_CONTEXT)
    gpu_node_selectors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # per size
    gpu_type_label: str = "nvidia.com/gpu.product"  # node label `gpu_type` is matched against
    gpu_tolerations: tuple[Mapping[str, Any], ...] = DEFAULT_GPU_TOLERATIONS
    gpus: GpuRequest = field(default_factory=GpuRequest)  # device plugin or DRA (`dra.py`)
    command_prefix: tuple[str, ...] = ("dagster",)  # replaces `python -m dagster` in step argv
    python: str = "python"  # replaces argv[0] of any other step command
    watch_reconnect_backoff_s: float = 1.0  # first wait after a watch error (doubles, max 30)
    watch_timeout_s: int = 300  # server-side timeout of one watch request
    pending_events_interval_s: float = 5.0  # min seconds between event reads of a Pending step
    api_retries: int = 4  # retries of a transient API error (429, 5xx, connection reset)
    gang_workdir: str | None = None  # absolute path every pod of a gang mounts (payloads)
    # every step's dagster-k8s/config (same keys, as k8s_job_executor's step_k8s_config): a
    # step's own tag is merged over it
    step_k8s_config: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> KubernetesConfig:
        """Validate the raw config section; `ConfigError` names the bad key and the allowed ones.

        Example:
            >>> KubernetesConfig.from_dict({"imagee": "x"})  # doctest: +IGNORE_EXCEPTION_DETAIL
            Traceback (most recent call last):
            ConfigError: kubernetes: unknown key(s) ['imagee']; allowed: ...
        """
        raw = dict(raw or {})
        check_keys(raw, _TOP_KEYS, "kubernetes")
        tenants_raw = raw.get("tenants") or {}
        if not isinstance(tenants_raw, Mapping):
            raise ConfigError("kubernetes.tenants must map tenant names to their settings")
        priority = raw.get("priority_classes") or {}
        check_keys(priority, {"default", "preemptible"}, "kubernetes.priority_classes")
        defaults = cls()
        return cls(
            tenants={name: TenantConfig.from_dict(name, t) for name, t in tenants_raw.items()},
            gpus=GpuRequest.from_dict(raw.get("gpus"), "kubernetes.gpus"),
            image=_opt_str(raw, "image", "kubernetes"),
            image_pull_policy=_opt_str(raw, "image_pull_policy", "kubernetes")
            or defaults.image_pull_policy,
            image_pull_secrets=tuple(
                _str_list(raw.get("image_pull_secrets"), "image_pull_secrets")
            ),
            service_account=_opt_str(raw, "service_account", "kubernetes"),
            env_vars=_env_vars(raw.get("env_vars")),
            env_secrets=tuple(_str_list(raw.get("env_secrets"), "kubernetes.env_secrets")),
            env_config_maps=tuple(_str_list(raw.get("env_config_maps"), "env_config_maps")),
            volumes=tuple(raw.get("volumes") or ()),
            volume_mounts=tuple(raw.get("volume_mounts") or ()),
            labels=dict(raw.get("labels") or {}),
            priority_classes=PriorityClasses(**priority),
            security_context=security_context(
                raw.get("security_context") or DEFAULT_SECURITY_CONTEXT
            ),
            gpu_node_selectors={
                k: dict(v) for k, v in (raw.get("gpu_node_selectors") or {}).items()
            },
            gpu_type_label=_gpu_type_label(raw, defaults.gpu_type_label),
            gpu_tolerations=tuple(raw.get("gpu_tolerations", DEFAULT_GPU_TOLERATIONS)),
            command_prefix=tuple(
                _str_list(raw.get("command_prefix"), "kubernetes.command_prefix")
                or defaults.command_prefix
            ),
            python=_opt_str(raw, "python", "kubernetes") or defaults.python,
            gang_workdir=_gang_workdir(raw.get("gang_workdir")),
            step_k8s_config=_step_k8s_config(raw.get("step_k8s_config")),
            **_numbers(raw, defaults),
        )

    def gpus_of(self, tenant: TenantConfig) -> GpuRequest:
        """How GPU steps of `tenant` request their GPUs: its own `gpus`, else the backend's."""
        return tenant.gpus or self.gpus

    def tenant(self, name: str) -> TenantConfig:
        """The named tenant's settings; `ConfigError` listing the configured ones if absent."""
        try:
            return self.tenants[name]
        except KeyError:
            raise ConfigError(
                f"tenant '{name}' is not configured; configured tenants: "
                f"{sorted(self.tenants) or 'none'} (add it under kubernetes.tenants)"
            ) from None


_TENANT_KEYS = frozenset(TenantConfig.__dataclass_fields__) - {"name"}
_TOP_KEYS = frozenset(KubernetesConfig.__dataclass_fields__)

# (key, smallest allowed, must be above it, whole number)
_NUMBERS = (
    ("watch_reconnect_backoff_s", 0, True, False),
    ("watch_timeout_s", 1, False, True),
    ("pending_events_interval_s", 0, False, False),
    ("api_retries", 0, False, True),
)

# Names of environment variables that hold secrets: never copied into a Job manifest.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|API_KEY|ACCESS_KEY|JWT", re.IGNORECASE
)


def _numbers(raw: Mapping[str, Any], defaults: KubernetesConfig) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, minimum, above, integer in _NUMBERS:
        value = raw.get(key, getattr(defaults, key))
        number = config_number(
            value, f"kubernetes.{key}", minimum=minimum, above=above, integer=integer
        )
        values[key] = int(number) if integer else float(number)
    return values


def _env_vars(value: Any) -> tuple[str, ...]:
    """`env_vars`, refusing any whose name says it holds a secret (it would be in the Job)."""
    entries = tuple(_str_list(value, "kubernetes.env_vars"))
    for entry in entries:
        name = entry.split("=", 1)[0]
        if name.isidentifier() and SECRET_NAME.search(name):
            raise ConfigError(
                f"kubernetes.env_vars: '{name}' looks like a secret, and env_vars are written "
                "into the Job manifest (and a KEY=VALUE into Dagster's run storage): put it in "
                "a Kubernetes Secret in the tenant namespace and list that secret in "
                "kubernetes.env_secrets"
            )
    return entries


def _gpu_type_label(raw: Mapping[str, Any], default: str) -> str:
    """`gpu_type_label`: a label key, since it becomes a nodeSelector key of GPU steps."""
    label = _opt_str(raw, "gpu_type_label", "kubernetes") or default
    problem = label_key_problem(label)
    if problem is not None:
        raise ConfigError(
            f"kubernetes.gpu_type_label={label!r} is not allowed: it must be {problem}; set it "
            f"to the node label that holds the GPU model ({default}, the default, is the one "
            "NVIDIA's GPU feature discovery sets)"
        )
    return label


def _gang_workdir(value: Any) -> str | None:
    """`gang_workdir`: an absolute path (each pod resolves it on its own filesystem)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(
            f"kubernetes.gang_workdir={value!r} is not an absolute path: give the directory "
            "where every pod of a gang mounts the same volume (a ReadWriteMany volume in "
            "kubernetes.volumes and kubernetes.volume_mounts), e.g. /shared/k8s_ai"
        )
    return value


def _step_k8s_config(value: Any) -> Mapping[str, Any]:
    """`step_k8s_config`: checked as dagster-k8s checks its `dagster-k8s/config` tag."""
    if value is None:
        return {}
    try:
        get_user_defined_k8s_config({USER_DEFINED_K8S_CONFIG_KEY: json.dumps(value)})
    except Exception as error:  # dagster raises its own config and JSON errors here
        said = " ".join(str(error).split())
        raise ConfigError(
            f"kubernetes.step_k8s_config is not what a {USER_DEFINED_K8S_CONFIG_KEY} tag takes "
            f"({type(error).__name__}: {said}); write it as that tag's JSON object, e.g. "
            "{pod_spec_config: {node_selector: {pool: batch}}}"
        ) from None
    return dict(value)


def _refuse_kubeconfig_contents(value: Any, where: str) -> None:
    """A kubeconfig's contents (with its credentials) must not be pasted into run config."""
    if isinstance(value, str) and ("\n" in value or value.lstrip().startswith("apiVersion")):
        raise ConfigError(
            f"{where} holds kubeconfig contents, not a path: run config is stored by Dagster, "
            "so its credentials would be too; write the kubeconfig to a file (or a mounted "
            "Secret) and give its path, or use 'vcluster' + 'host_namespace'"
        )


def _opt_str(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{where}.{key} must be a string, got {value!r}")
    return value


def _str_list(value: Any, where: str) -> Sequence[str]:
    if value is None:
        return ()
    if isinstance(value, str) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    return list(value)
