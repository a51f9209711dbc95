"""Environment variables the executor sets for every step process, on every backend.

Step-side code (`CheckpointStore`, `Gang`) reads them; backends pass them through unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .spec import ComputeSpec

BACKEND = "K8S_AI_BACKEND"  # "local" | "kubernetes" | "slurm"
RUN_ID = "K8S_AI_RUN_ID"
STEP_KEY = "K8S_AI_STEP_KEY"
ATTEMPT = "K8S_AI_ATTEMPT"  # infrastructure attempt number, 0-based
NODES = "K8S_AI_NODES"
TASKS_PER_NODE = "K8S_AI_TASKS_PER_NODE"
GPUS_PER_NODE = "K8S_AI_GPUS_PER_NODE"
CPUS = "K8S_AI_CPUS"  # per task
MEMORY_BYTES = "K8S_AI_MEMORY_BYTES"  # per node
GRACE_PERIOD_S = "K8S_AI_GRACE_PERIOD_S"  # SIGTERM/SIGUSR2 → SIGKILL
# how many more times the executor relaunches this step after a preemption (its budget left)
PREEMPTION_RELAUNCHES_LEFT = "K8S_AI_PREEMPTION_RELAUNCHES_LEFT"
# Kubernetes gangs: the attempt's directory under kubernetes.gang_workdir (every pod mounts
# it), and the pod's IP and node from the Downward API.
GANG_DIR = "K8S_AI_GANG_DIR"
POD_IP = "K8S_AI_POD_IP"
NODE_NAME = "K8S_AI_NODE_NAME"
# Seconds between a Kubernetes step's own memory reports (`steppod`, `usage_report`; default 1)
USAGE_INTERVAL_S = "K8S_AI_USAGE_INTERVAL_S"
SLURM_JOB_DIR = "K8S_AI_SLURM_JOB_DIR"  # a Slurm attempt's directory in the shared workdir
# A file in SLURM_JOB_DIR saying the step failed although its process exits 0 (Gang.run writes
# it when a rank failed); the batch script then exits 1, so sacct shows the job FAILED.
SLURM_FAILED_MARKER = "k8s_ai_step_failed"


def step_env(
    *,
    backend: str,
    run_id: str,
    step_key: str,
    attempt: int,
    spec: ComputeSpec,
    grace_s: float,
    preemption_relaunches_left: int = 0,
) -> dict[str, str]:
    """The variables for one step attempt."""
    return {
        BACKEND: backend,
        RUN_ID: run_id,
        STEP_KEY: step_key,
        ATTEMPT: str(attempt),
        NODES: str(spec.nodes),
        TASKS_PER_NODE: str(spec.tasks_per_node),
        GPUS_PER_NODE: str(spec.gpu),
        CPUS: f"{spec.cpu:g}",
        MEMORY_BYTES: str(spec.memory_bytes),
        GRACE_PERIOD_S: f"{grace_s:g}",
        PREEMPTION_RELAUNCHES_LEFT: str(max(preemption_relaunches_left, 0)),
    }


@dataclass(frozen=True)
class StepEnv:
    """What a step process knows about its own allocation (defaults: a plain local process)."""

    backend: str = "local"
    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    attempt: int = 0
    grace_period_s: float = 30.0

    @classmethod
    def current(cls, environ: Mapping[str, str] | None = None) -> StepEnv:
        env = os.environ if environ is None else environ
        return cls(
            backend=env.get(BACKEND, "local"),
            nodes=int(env.get(NODES, "1")),
            tasks_per_node=int(env.get(TASKS_PER_NODE, "1")),
            gpus_per_node=int(env.get(GPUS_PER_NODE, "0")),
            attempt=int(env.get(ATTEMPT, "0")),
            grace_period_s=float(env.get(GRACE_PERIOD_S, "30")),
        )
