"""Helpers for the emulator tests: manifests and small waits, no fixtures."""

from __future__ import annotations

import sys
from typing import Any

from kubernetes import client

PYTHON = sys.executable


def python_pod(
    name: str,
    code: str,
    *,
    memory_limit: str | None = None,
    cpu: str | None = None,
    restart_policy: str = "Never",
    grace: int | None = None,
    image: str = "python:3.11-slim",
    env: list[client.V1EnvVar] | None = None,
    **spec: Any,
) -> client.V1Pod:
    """A pod whose single container `main` runs `python -c code`."""
    resources = client.V1ResourceRequirements(
        limits={"memory": memory_limit} if memory_limit else None,
        requests={"cpu": cpu} if cpu else None,
    )
    container = client.V1Container(
        name="main", image=image, command=[PYTHON, "-c", code], resources=resources, env=env
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            containers=[container],
            restart_policy=restart_policy,
            termination_grace_period_seconds=grace,
            **spec,
        ),
    )


def python_job(name: str, code: str, **job_spec: Any) -> client.V1Job:
    """A Job whose pods run `python -c code` with restartPolicy Never."""
    container = client.V1Container(
        name="main", image="python:3.11-slim", command=[PYTHON, "-c", code]
    )
    template = client.V1PodTemplateSpec(
        spec=client.V1PodSpec(containers=[container], restart_policy="Never")
    )
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(template=template, **job_spec),
    )


def condition(obj: Any, type_: str) -> Any:
    """The condition of `type_` on a model's status, or None."""
    for cond in obj.status.conditions or []:
        if cond.type == type_:
            return cond
    return None


def terminated(pod: client.V1Pod) -> Any:
    """The terminated state of the pod's first container, or None."""
    statuses = pod.status.container_statuses or []
    return statuses[0].state.terminated if statuses else None


def read_log(core: client.CoreV1Api, name: str, namespace: str, **kwargs: Any) -> str:
    """A pod's log as text (kubernetes client 36 returns "b'...'" from the plain call)."""
    response = core.read_namespaced_pod_log(name, namespace, _preload_content=False, **kwargs)
    return str(response.data.decode())


def log_contains(core: client.CoreV1Api, name: str, namespace: str, text: str) -> bool:
    """Whether the pod's log contains `text` yet (False while the container has not started)."""
    try:
        return text in read_log(core, name, namespace)
    except client.ApiException:
        return False
