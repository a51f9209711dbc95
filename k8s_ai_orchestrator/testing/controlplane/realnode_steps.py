"""The `kubernetes` section that runs steps on a real node (`realnode.RealNode`) of this machine.

Nothing is pulled there: a step's pod runs the node's tiny base image, with the host's `/usr`,
this interpreter's installation and virtual environment (and `PYTHONPATH`, passed on when set),
and the directories a run reads (`read_only`: the code, which holds the paths of `PYTHONPATH`) or
writes (`writable`: DAGSTER_HOME, checkpoints, outputs) mounted
from the host at the same paths (`hostPath`), as a user testing on one machine would. The step
runs as root without capabilities and without privilege escalation: a Python under /root is
not readable by another user. Every step lands on the real node by `step_k8s_config`, with its
label and toleration, as a user pins steps to a node pool.

Example:
    >>> section = kubernetes_section("/run/host.kubeconfig", "steps", ["/src"], ["/tmp/run"])
    >>> section["image"], section["tenants"]["host"]["namespace"]
    ('k8s-ai.test/base:1', 'steps')
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .nodeconfig import REAL_NODE_KEY, REAL_NODE_TOLERATION
from .realnode import BASE_IMAGE

TENANT = "host"  # the one tenant: the host cluster itself, as a cluster without vCluster


def kubernetes_section(
    kubeconfig: str | Path,
    namespace: str,
    read_only: Sequence[str | Path],
    writable: Sequence[str | Path],
    python: str = sys.executable,
) -> dict[str, Any]:
    """The executor's (or `AICompute`'s) `kubernetes` section: the host as tenant `host`,
    `python` as the step interpreter, the mounts above."""
    paths = [("usr", "/usr"), ("python", sys.base_prefix), ("venv", sys.prefix)]
    paths += [(f"ro-{n}", str(path)) for n, path in enumerate(read_only)]
    mounts = [_mount(name, path, writable=False) for name, path in paths]
    mounts += [_mount(f"rw-{n}", str(path), writable=True) for n, path in enumerate(writable)]
    section: dict[str, Any] = {
        "image": BASE_IMAGE,
        "image_pull_policy": "Never",
        "python": python,
        "command_prefix": [python, "-m", "dagster"],
        "volumes": [volume for volume, _ in mounts],
        "volume_mounts": [mount for _, mount in mounts],
        "security_context": {
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "step_k8s_config": {
            "pod_spec_config": {
                "node_selector": {REAL_NODE_KEY: "true"},
                "tolerations": [REAL_NODE_TOLERATION],
            }
        },
        "tenants": {TENANT: {"kubeconfig": str(kubeconfig), "namespace": namespace}},
    }
    if os.environ.get("PYTHONPATH"):  # a checkout run from another's virtual environment
        section["env_vars"] = ["PYTHONPATH"]
    return section


def _mount(name: str, path: str, writable: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    volume = {"name": name, "hostPath": {"path": path, "type": "Directory"}}
    return volume, {"name": name, "mountPath": path, "readOnly": not writable}


__all__ = ["TENANT", "kubernetes_section"]
