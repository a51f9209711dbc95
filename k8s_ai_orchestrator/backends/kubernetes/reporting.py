"""A measured Kubernetes step pod: its container started through `steppod`, which reports.

`report_usage` rewrites a Python step command so that the container runs `steppod`'s entry
point (`STEP_POD_MAIN`) around it: the step keeps its interpreter, PID, signals and exit code,
and writes its cgroup's working set and CPU time to its stderr, which the log follower reads
(`usage_report`). A pod measured to grow it, to size `memory="auto"`, or for a priced run's
used figures starts this way (`growth.PodGrowth.measures`).

Example:
    >>> pod = {"spec": {"containers": [{"args": ["python", "-c", STEP_POD_MAIN, "-m", "x"]}]}}
    >>> reports_usage(pod), reports_usage({"spec": {"containers": [{"args": ["sh"]}]}})
    (True, False)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import steppod
from ..base import LaunchRequest
from .config import KubernetesConfig

# Entry point of a measured step container (`-c`, not `-m`: the package imports the module).
STEP_POD_MAIN = (
    f"import sys; from {steppod.__name__} import pod_main; sys.exit(pod_main(sys.argv[1:]))"
)


def report_usage(
    manifest: dict[str, Any], request: LaunchRequest, config: KubernetesConfig
) -> None:
    """Start the step container through `steppod`, which reports its memory in the pod's log.

    Only a Python command is rewritten (`python -m dagster ...` with the default
    `command_prefix` or one of the form `[python, -m, dagster]`, and `python -m|-c ...`); any
    other stays as it is and is measured from node stats.
    """
    command = list(request.command)
    if request.raw_command or len(command) < 3 or command[1] not in ("-m", "-c"):
        return
    python = config.python
    if command[1:3] == ["-m", "dagster"]:
        prefix = list(config.command_prefix)
        if prefix[1:] == ["-m", "dagster"]:
            python = prefix[0]
        elif prefix != ["dagster"]:
            return
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [python, "-c", STEP_POD_MAIN, *command[1:]]


def reports_usage(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's step container runs `steppod` (rewritten by `report_usage`)."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return STEP_POD_MAIN in (containers[0].get("args") or [])


__all__ = ["STEP_POD_MAIN", "report_usage", "reports_usage"]
