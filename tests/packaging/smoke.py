"""Smoke test of the built wheel, run by `scripts/wheel-smoke.sh` in a fresh virtualenv.

It runs from a temporary directory with only the wheel installed: the repository is not on
sys.path, so a module the wheel forgot to ship fails here. Checks the wheel's contents and
metadata, imports the public names and the test doubles users test with, and runs a two-step
pipeline on the local backend and on the Kubernetes emulator (`k8s_ai_orchestrator.testing.kube`).
"""

from __future__ import annotations

import os
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository

DEFS = Path(__file__).with_name("smoke_defs.py")


def check_distribution() -> None:
    dist = metadata.distribution("k8s-ai-orchestrator")
    files = [str(f) for f in dist.files or []]
    # entries under ".." are the console scripts in the venv's bin/
    tops = {f.split("/")[0] for f in files if "/" in f and ".dist-info" not in f} - {".."}
    assert tops == {"k8s_ai_orchestrator"}, f"the wheel installs more than the library: {tops}"
    assert "k8s_ai_orchestrator/py.typed" in files, "the wheel has no py.typed marker"
    license_expr = dist.metadata.get("License-Expression") or dist.metadata.get("License")
    assert license_expr == "Apache-2.0", f"license metadata: {license_expr!r}"
    assert any(f.endswith("licenses/LICENSE") for f in files), "the wheel ships no LICENSE"


def check_public_names() -> None:
    import k8s_ai_orchestrator as lib

    for name in (
        "compute",
        "ai_executor",
        "CheckpointStore",
        "Gang",
        "AICompute",
        "ComputeSpecError",
        "ProcessRunLauncher",
        "AIK8sRunLauncher",
    ):
        assert hasattr(lib, name), name
    assert lib.compute("xs")["k8s_ai/size"] == "xs"


def check_test_doubles(files: list[str]) -> None:
    """The doubles a user tests pipelines with ship; this repository's contract checks do not."""
    from k8s_ai_orchestrator.testing.controlplane import build_kubeplane, start_control_plane
    from k8s_ai_orchestrator.testing.controlplane.agent import NodeAgent
    from k8s_ai_orchestrator.testing.controlplane.karpenter import start_karpenter
    from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
    from k8s_ai_orchestrator.testing.controlplane.kueue import start_kueue
    from k8s_ai_orchestrator.testing.controlplane.syncer import TenantSyncer
    from k8s_ai_orchestrator.testing.kube import KubeEmulator
    from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster

    for double in (KubeEmulator, LocalSlurmCluster, build_kubeplane, start_control_plane):
        assert callable(double), double
    for double in (NodeAgent, RealKube, TenantSyncer, start_kueue, start_karpenter):
        assert callable(double), double
    contract = [f for f in files if f.startswith("k8s_ai_orchestrator/testing/kube/contract")]
    assert contract == [], f"the wheel ships the repository's contract checks: {contract}"


def run_two_steps(executor: dict[str, Any]) -> None:
    repo = ReconstructableRepository.for_file(str(DEFS), "defs", str(DEFS.parent))
    with tempfile.TemporaryDirectory() as home:
        os.environ["DAGSTER_HOME"] = home
        with DagsterInstance.get() as instance:
            with execute_job(
                repo.get_reconstructable_job("two_steps"),
                instance=instance,
                run_config={"execution": {"config": executor}},
            ) as result:
                assert result.success, executor["backend"]
                assert result.output_for_node("consume") == 42


def run_on_emulator() -> None:
    from kubernetes.client import SchedulingV1Api

    from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

    with KubeEmulator(nodes=[NodeSpec("node-a", cpu="4", memory="8Gi")], tenants=["t"]) as emu:
        client = emu.tenant("t").api_client()
        for name, value in (("k8s-ai-standard", 100000), ("k8s-ai-preemptible", 1000)):
            SchedulingV1Api(client).create_priority_class(
                {"metadata": {"name": name}, "value": value}
            )
        run_two_steps(
            {
                "backend": "kubernetes",
                "default_tenant": "t",
                "kubernetes": {
                    "image": "smoke:latest",
                    "command_prefix": [sys.executable, "-m", "dagster"],
                    "tenants": {"t": {"kubeconfig": emu.tenant("t").kubeconfig_path}},
                },
            }
        )


def main() -> None:
    import k8s_ai_orchestrator

    location = Path(k8s_ai_orchestrator.__file__).resolve()
    assert "site-packages" in location.parts, f"not the installed wheel: {location}"
    check_distribution()
    check_public_names()
    check_test_doubles([str(f) for f in metadata.distribution("k8s-ai-orchestrator").files or []])
    run_two_steps({"backend": "local", "local": {"cpus": 2, "memory": "2Gi"}})
    run_on_emulator()
    print(f"wheel smoke test passed: {location.parent}")


if __name__ == "__main__":
    main()
