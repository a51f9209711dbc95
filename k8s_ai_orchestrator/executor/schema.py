"""`ai_executor`'s Dagster config schema: typed, so the launchpad validates and autocompletes.

Dagster checks types and unknown keys when a run is launched, before the run is stored;
`settings.ExecutorSettings.from_config` then checks values (ranges, names, quantities) at
executor start, before any step is submitted. Secrets are never values here: the Slurm REST
token is given as `{env: VAR}` (a literal string is refused by this schema, so it never
reaches run storage).

Example:
    >>> sorted(CONFIG_SCHEMA["slurm"].config_type.fields)[:3]
    ['account', 'command_timeout_s', 'grace_period_s']
"""

from __future__ import annotations

from dagster import (
    Any,
    Array,
    Bool,
    Enum,
    EnumValue,
    Field,
    Float,
    Int,
    Map,
    Noneable,
    Permissive,
    Shape,
    String,
)
from dagster._core.execution.retries import get_retries_config
from dagster._core.execution.step_dependency_config import get_step_dependency_config_field
from dagster._core.execution.tags import get_tag_concurrency_limits_config


def _opt(config_type: object, description: str) -> Field:
    return Field(config_type, is_required=False, description=description)


def _enum(name: str, *values: str) -> Enum:
    return Enum(name, [EnumValue(value) for value in values])


GPUS_SCHEMA = _opt(
    Shape(
        {
            "request": _opt(
                String, "device_plugin (nvidia.com/gpu limits, default) or dra (a claim)."
            ),
            "device_class": _opt(String, "dra: the DeviceClass GPU steps claim devices of."),
            "model_attribute": _opt(
                String, "dra: <domain>/<name> gpu_type matches (gpu.nvidia.com/productName)."
            ),
            "partition_device_class": _opt(
                String, "dra: the DeviceClass of GPU partitions (mig.nvidia.com)."
            ),
            "partition_attribute": _opt(
                String, "dra: <domain>/<name> gpu_partition matches (gpu.nvidia.com/profile)."
            ),
            "memory_capacity": _opt(
                String, "dra: <domain>/<name> capacity gpu_memory bounds (gpu.nvidia.com/memory)."
            ),
        }
    ),
    "How GPU steps request GPUs: the device plugin, or Dynamic Resource Allocation.",
)

TENANT_SCHEMA = Shape(
    {
        "kubeconfig": _opt(String, "Path of a kubeconfig file for the tenant's API."),
        "context": _opt(Noneable(String), "kubeconfig context (default: its current one)."),
        "vcluster": _opt(String, "vCluster name: its kubeconfig is secret vc-<name>."),
        "host_namespace": _opt(String, "Host namespace holding the vc-<name> secret."),
        "host_kubeconfig": _opt(
            Noneable(String), "Path of the host cluster's kubeconfig (default: in-cluster)."
        ),
        "server": _opt(Noneable(String), "API URL override (vCluster exportKubeConfig.server)."),
        "namespace": Field(String, default_value="default", description="Namespace of Jobs."),
        "image": _opt(Noneable(String), "Image of this tenant's steps (overrides `image`)."),
        "service_account": _opt(Noneable(String), "Service account of this tenant's steps."),
        "allowed_sizes": _opt(Noneable(Array(String)), "Size classes this tenant accepts."),
        "gang_admission": _opt(
            Shape(
                {
                    "mode": _opt(
                        String,
                        "guard (the executor's own), workload (PodGroups, Kubernetes 1.37 "
                        "gang scheduling) or kueue (Kueue admits every Job of the tenant).",
                    ),
                    "local_queue": _opt(
                        String, "mode kueue: the LocalQueue of the tenant's Jobs (required)."
                    ),
                    "all_running_timeout_s": _opt(
                        Float, "Cancel a gang not all Running this long after its first pod."
                    ),
                    "provisioning_timeout_s": _opt(
                        Float, "More time while an autoscaler says a waiting pod's node comes."
                    ),
                }
            ),
            "All-or-nothing admission of multi-node steps.",
        ),
        "gpus": GPUS_SCHEMA,
        "node_pools": _opt(
            Array(
                Shape(
                    {
                        "name": Field(String, description="The pool's name (NodePool, group)."),
                        "node": Field(
                            Map(String, Any), description="Largest node: {cpu, memory[, gpu]}."
                        ),
                        "labels": _opt(Map(String, String), "Labels its nodes carry."),
                        "limit": _opt(Map(String, Any), "Its ceiling: {cpu, memory, gpu}."),
                    }
                )
            ),
            "The host's autoscaled pools, counted by pre-flight (docs/autoscaled-clusters.md).",
        ),
    },
    description="Exactly one of kubeconfig, or vcluster + host_namespace.",
)

KUBERNETES_SCHEMA = Shape(
    {
        "tenants": _opt(Map(String, TENANT_SCHEMA), "Tenants by name: how to reach each."),
        "image": _opt(Noneable(String), "Container image of step pods."),
        "image_pull_policy": _opt(String, "Always, IfNotPresent or Never (IfNotPresent)."),
        "image_pull_secrets": _opt(Array(String), "Names of docker-registry secrets."),
        "service_account": _opt(Noneable(String), "Service account of step pods."),
        "env_vars": _opt(
            Array(String),
            "KEY=VALUE, or KEY to copy from the executor's env; no secrets (use env_secrets).",
        ),
        "env_secrets": _opt(Array(String), "Secrets loaded whole into step env (envFrom)."),
        "env_config_maps": _opt(Array(String), "Config maps loaded whole into step env."),
        "volumes": _opt(Array(Permissive()), "Pod volumes (Kubernetes API dicts)."),
        "volume_mounts": _opt(Array(Permissive()), "Container volume mounts."),
        "labels": _opt(Map(String, String), "Extra labels on Jobs and pods."),
        "priority_classes": _opt(
            Shape(
                {
                    "default": Field(String, default_value="k8s-ai-standard"),
                    "preemptible": Field(String, default_value="k8s-ai-preemptible"),
                }
            ),
            "PriorityClass names of ordinary and preemptible steps.",
        ),
        "security_context": _opt(Permissive(), "Container securityContext (default: hardened)."),
        "gpu_node_selectors": _opt(
            Map(String, Map(String, String)), "Node selector per size class."
        ),
        "gpu_type_label": _opt(String, "Node label gpu_type matches (nvidia.com/gpu.product)."),
        "gpu_tolerations": _opt(Array(Permissive()), "Tolerations of GPU steps."),
        "gpus": GPUS_SCHEMA,
        "command_prefix": _opt(Array(String), "Replaces `python -m dagster` in step argv."),
        "python": _opt(String, "Replaces argv[0] of other step commands (default python)."),
        "watch_reconnect_backoff_s": _opt(Float, "First wait after a watch error; > 0 (1.0)."),
        "watch_timeout_s": _opt(Int, "Server-side timeout of one watch request; >= 1 (300)."),
        "pending_events_interval_s": _opt(Float, "Min s between event reads; >= 0 (5.0)."),
        "api_retries": _opt(Int, "Retries of a transient API error; >= 0 (4)."),
        "gang_workdir": _opt(
            Noneable(String), "Absolute directory every pod of a multi-node step mounts."
        ),
        "step_k8s_config": _opt(
            Permissive(),
            "Every step's dagster-k8s/config (same keys); a step's own tag merges over it.",
        ),
    }
)

SLURM_SCHEMA = Shape(
    {
        "transport": Field(
            _enum("SlurmTransport", "cli", "rest"),
            default_value="cli",
            description="cli: sbatch/squeue/scontrol/scancel; rest: slurmrestd with a JWT.",
        ),
        "partition": _opt(Noneable(String), "Partition (default: the cluster's default)."),
        "account": _opt(Noneable(String), "--account of every job."),
        "python": _opt(Noneable(String), "Interpreter on compute nodes."),
        "workdir": _opt(String, "Absolute directory every node and this host share."),
        "ssh_host": _opt(Noneable(String), "Run the CLI on this login node over ssh."),
        "rest_url": _opt(Noneable(String), "slurmrestd base URL, e.g. http://slurm:6820."),
        "rest_user": _opt(Noneable(String), "X-SLURM-USER-NAME."),
        "rest_token": _opt(
            Shape({"env": Field(String, description="Variable holding the JWT.")}),
            "The JWT from an environment variable: {env: SLURM_JWT}; never a literal.",
        ),
        "rest_token_env": _opt(Noneable(String), "Name of the variable holding the JWT."),
        "time_limit": _opt(Any, 'Minutes (120) or "D-HH:MM:SS" (default: the partition\'s).'),
        "grace_period_s": _opt(Float, "USR2 this long before the time limit; >= 0 (30)."),
        "slurm_conf": _opt(Noneable(String), "SLURM_CONF for the CLI and the job."),
        "command_timeout_s": _opt(Float, "Bound on every Slurm command or HTTP call; > 0 (30)."),
        "rest_api_version": _opt(
            String,
            "slurmrestd data-parser version, e.g. v0.0.42; default: the newest the server "
            "serves that this library knows (v0.0.38-v0.0.42).",
        ),
    }
)

LOCAL_SCHEMA = Shape(
    {
        "cpus": _opt(Noneable(Float), "CPU cores handed out at once; > 0 (default: detected)."),
        "memory": _opt(Noneable(String), "Memory handed out at once (default: detected)."),
        "gpus": _opt(Noneable(Int), "GPUs handed out; >= 0 (default: nvidia-smi -L)."),
        "oversize": Field(
            _enum("Oversize", "run_alone", "fail"),
            default_value="run_alone",
            description="A step larger than the machine: run_alone (warning) or fail.",
        ),
        "log_dir": _opt(Noneable(String), "Attempt logs; created at executor start."),
        "start_method": Field(
            _enum("StartMethod", "spawn", "forkserver"),
            default_value="spawn",
            description="How step processes start.",
        ),
    }
)

_PRICE_FIELDS = {
    "cpu_hour": _opt(Float, "Per CPU-hour reserved; >= 0."),
    "memory_gib_hour": _opt(Float, "Per GiB-hour of memory reserved; >= 0."),
    "gpu_hour": _opt(Float, "Per GPU-hour of a GPU model without its own price."),
    "gpu_hour_by_type": _opt(Map(str, Float), "Per GPU-hour, by compute(gpu_type)."),
    "preemptible_factor": _opt(Float, "× the price of preemptible steps; (0, 1]."),
}

CONFIG_SCHEMA = {
    "backend": Field(
        _enum("Backend", "local", "kubernetes", "slurm"),
        default_value="local",
        description="Default backend of single-node steps.",
    ),
    "size_classes": _opt(
        Map(String, Permissive()), "Override or add size classes: {name: {cpu, memory, gpu}}."
    ),
    "local": _opt(LOCAL_SCHEMA, "Local capacity and what to do with oversize steps."),
    "kubernetes": _opt(KUBERNETES_SCHEMA, "Tenants and job settings."),
    "slurm": _opt(SLURM_SCHEMA, "Slurm transport and job settings."),
    "gang_backend": _opt(
        Noneable(String),
        "Where multi-node steps run: slurm, kubernetes or local (default: slurm when a slurm "
        "section is given, else backend).",
    ),
    "default_tenant": _opt(Noneable(String), "Tenant of steps that name none."),
    "allowed_tenants": _opt(Noneable(Array(String)), "Tenants this run may reach."),
    "oom_escalation": _opt(
        Shape(
            {
                "factor": Field(Float, default_value=2.0, description="Finite, > 1."),
                "max_memory": Field(
                    String, default_value="450Gi", description="Cap of every launch."
                ),
                "max_attempts": Field(Int, default_value=4, description="Attempts in all, >= 1."),
                "grow_at": _opt(
                    Noneable(Float),
                    "Raise a running step's limit in place at this fraction of it (0.85); "
                    "local and Kubernetes backends (not Slurm).",
                ),
            }
        ),
        "How OOMKilled steps are relaunched with more memory.",
    ),
    "auto_sizing": _opt(
        Shape(
            {
                "headroom": Field(Float, default_value=1.2, description="Peak × this; >= 1."),
                "runs": Field(Int, default_value=5, description="Earlier runs read; >= 1."),
                "trend": Field(
                    Bool,
                    default_value=True,
                    description="Memory follows its peaks' trend (false: the highest peak).",
                ),
            }
        ),
        'How compute(memory="auto") / cpu="auto" are sized from earlier runs.',
    ),
    "prices": _opt(
        Shape(
            {
                **_PRICE_FIELDS,
                "currency": _opt(String, "A label for the figures (USD)."),
                "backends": _opt(
                    Map(str, Shape(_PRICE_FIELDS)), "A backend's own prices, over these."
                ),
                "tenants": _opt(
                    Map(str, Shape(_PRICE_FIELDS)), "A tenant's own prices, over its backend's."
                ),
            }
        ),
        "What reserved resources cost: each step's cost and waste in its summary (docs/cost.md).",
    ),
    "budget": _opt(
        Shape(
            {
                "max_cost_per_step": _opt(Float, "Refuse a step estimated above; needs prices."),
                "max_cost_per_run": _opt(Float, "Refuse a run estimated above; needs prices."),
                "max_gpu_hours_per_step": _opt(Float, "Refuse a step estimated above; > 0."),
                "max_gpu_hours_per_run": _opt(Float, "Refuse a run estimated above; > 0."),
                "on_exceeded": _opt(
                    str, "A running step past a cap: warn (default), or stop at its checkpoint."
                ),
            }
        ),
        "Caps checked before anything is submitted, from earlier runs, and while steps run "
        "(docs/cost.md#budgets).",
    ),
    "max_preemption_retries": Field(Int, default_value=3, description="Relaunches; >= 0."),
    "grace_period_s": Field(Float, default_value=30.0, description="SIGTERM → SIGKILL; >= 0."),
    "poll_interval_s": Field(
        Float, default_value=0.1, description="Wait between passes after activity; > 0."
    ),
    "idle_poll_interval_s": Field(
        Float,
        is_required=False,
        description="Longest wait between passes while nothing happens; >= poll_interval_s "
        "(default: 1, or poll_interval_s if larger).",
    ),
    "max_concurrent": _opt(Noneable(Int), "Steps in flight at once; >= 1 (default: no limit)."),
    "tag_concurrency_limits": get_tag_concurrency_limits_config(),
    "step_dependency_config": get_step_dependency_config_field(),
    "retries": get_retries_config(),
}

__all__ = ["CONFIG_SCHEMA", "KUBERNETES_SCHEMA", "LOCAL_SCHEMA", "SLURM_SCHEMA"]
