"""Where the gang tests run, and the rank functions their steps call.

`GangTarget` is what a gang test needs of a cluster: a backend config for its tenants, its
pods and a way to place a blocking pod. `emulated_gang_target` builds one on the emulator
(2 nodes × 4 fake GPUs), `control_plane_gang_target` on a second real control plane with
the same nodes (the session fixture `gang_plane`); the `gang_target` fixture of
tests/kubernetes/conftest.py is parametrised over both (`GANG_TARGETS`).

The rank functions live at module level so the ranks can import them (`Gang.run` pickles
by reference).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from k8s_support import NAMESPACE, TENANTS, install_priority_classes, tenant_config
from kubernetes.client import BatchV1Api, CoreV1Api
from kubernetes.client.rest import ApiException

from k8s_ai_orchestrator.backends.base import JobHandle, LaunchRequest, StepStatus
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.spec import resolve_spec
from k8s_ai_orchestrator.stepenv import step_env

REPO = Path(__file__).resolve().parents[2]
RANK_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class GangTarget:
    """A cluster the gang tests run on."""

    name: str
    config: Callable[..., dict[str, Any]]  # the backend's `kubernetes` section (overrides)
    core: Callable[[str], CoreV1Api]  # a tenant's CoreV1Api
    pods: Callable[[str], list[dict[str, Any]]]  # a tenant's pods (API JSON)
    jobs: Callable[[str], list[dict[str, Any]]]  # a tenant's Jobs (API JSON)
    wait_for: Callable[..., Any]  # wait_for(predicate, timeout=...)
    processes_alive: Callable[[], int]  # pod processes still running (0 when all ended)
    evict: Callable[[str, str], None]  # evict(tenant, pod name) through the Eviction API
    # vanish(tenant, pod name): its host pod preempted and gone at once, before any kubelet
    # wrote its end (a vCluster tenant's syncer then leaves the pod Running); real plane only
    vanish: Callable[[str, str], None] | None = None

    def clear(self, timeout: float = 120) -> None:
        """Delete every Job and pod a test left in either tenant and wait until they are gone
        and no pod process runs: a test that failed midway must not hold the next one's node."""
        for tenant in TENANTS:
            batch = BatchV1Api(self.core(tenant).api_client)
            for job in self.jobs(tenant):
                with suppress(ApiException):
                    batch.delete_namespaced_job(
                        job["metadata"]["name"], NAMESPACE, propagation_policy="Background"
                    )
            for pod in self.pods(tenant):
                with suppress(ApiException):
                    self.core(tenant).delete_namespaced_pod(
                        pod["metadata"]["name"], NAMESPACE, grace_period_seconds=0
                    )
        self.wait_for(
            lambda: not any(self.pods(t) for t in TENANTS) and self.processes_alive() == 0,
            timeout=timeout,
        )


@contextmanager
def emulated_gang_target(workdir: Path, request: Any) -> Iterator[GangTarget]:
    """The emulator with 2 nodes of 8 CPUs, 16Gi and 4 fake GPUs, tenants team-a and team-b."""
    from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

    nodes = [NodeSpec(name=f"node-{n}", cpu="8", memory="16Gi", gpus=4) for n in "ab"]
    with KubeEmulator(nodes=nodes, tenants=list(TENANTS), tls=False, workdir=None) as emu:
        for tenant in TENANTS:
            install_priority_classes(emu.tenant(tenant).api_client())
        yield _gang_target("emulator", emu, workdir)


@contextmanager
def control_plane_gang_target(workdir: Path, request: Any) -> Iterator[GangTarget]:
    """The real control plane with the same nodes (the session's `gang_plane`), fresh view."""
    kube = request.getfixturevalue("gang_plane").fresh()

    def vanish(tenant: str, pod: str) -> None:
        kube.preempt_pod(tenant, NAMESPACE, pod, grace_s=0)

    yield replace(_gang_target("control-plane", kube, workdir), vanish=vanish)


def _gang_target(name: str, kube: Any, workdir: Path) -> GangTarget:
    """A target from a `KubeEmulator` or a `RealKube` (the same test surface)."""

    def config(**overrides: Any) -> dict[str, Any]:
        gang = {"gpu_tolerations": [], "gang_workdir": str(workdir)}
        return tenant_config(kube, **{**gang, **overrides})

    return GangTarget(
        name=name,
        config=config,
        core=lambda tenant: CoreV1Api(kube.tenant(tenant).api_client()),
        pods=lambda tenant: kube.pods(tenant, NAMESPACE),
        jobs=lambda tenant: kube.jobs(tenant, NAMESPACE),
        wait_for=kube.wait_for,
        processes_alive=kube.processes_alive,
        evict=lambda tenant, pod: kube.evict_pod(tenant, NAMESPACE, pod),
    )


GANG_TARGETS = {"emulator": emulated_gang_target, "control-plane": control_plane_gang_target}


def gang_step(
    code: str,
    *,
    step: str = "train",
    run_id: str = "run-1",
    tenant: str = "team-a",
    attempt: int = 0,
    **fields: Any,
) -> LaunchRequest:
    """A gang step whose process is `python -c code`, with the environment the executor
    gives every step (so `Gang.run` finds its ranks)."""
    spec_fields: dict[str, Any] = {"cpu": 0.5, "memory": "2Gi", "nodes": 2}
    spec_fields.update(fields)
    spec = resolve_spec(spec_fields)
    env = step_env(
        backend="kubernetes", run_id=run_id, step_key=step, attempt=attempt, spec=spec, grace_s=5
    )
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{REPO / 'tests' / 'kubernetes'}"
    return LaunchRequest(
        run_id=run_id,
        step_key=step,
        attempt=attempt,
        command=[sys.executable, "-c", code],
        env=env,
        spec=spec,
        tenant=tenant,
        grace_period_s=5.0,
    )


def run_gang_code(function: str, *args: Any) -> str:
    """Step code calling `Gang().run(gang_support.<function>, *args)` and printing the result."""
    return (
        "import json, gang_support\n"
        "from k8s_ai_orchestrator.gang import Gang\n"
        f"result = Gang(straggler_timeout_s=120).run(gang_support.{function}, *{args!r})\n"
        "print('RESULT', json.dumps(result), flush=True)\n"
    )


def record_rank(out_dir: str) -> dict[str, str]:
    """Write this rank's identity to `<out_dir>/rank-<RANK>.json`; return it."""
    seen = {key: os.environ[key] for key in RANK_KEYS}
    seen["NODE"] = os.environ.get("K8S_AI_NODE_NAME", "")
    Path(out_dir, f"rank-{seen['RANK']}.json").write_text(json.dumps(seen))
    return seen


def fail_on_rank(bad_rank: int, out_dir: str, sleep_s: float) -> None:
    """Rank `bad_rank` raises at once; the others note they started, then sleep."""
    rank = int(os.environ["RANK"])
    if rank == bad_rank:
        raise ValueError(f"rank {rank} broke")
    Path(out_dir, f"started-{rank}").write_text(str(os.getpid()))
    time.sleep(sleep_s)


def sleep_rank(seconds: float) -> None:
    time.sleep(seconds)


def gpu_pod(name: str, node: str, priority_class: str, gpus: int = 4) -> dict[str, Any]:
    """A pod of `priority_class` that holds `gpus` GPUs of `node` until deleted."""
    return {
        "metadata": {"name": name},
        "spec": {
            "priorityClassName": priority_class,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": "k8s-ai-test:latest",
                    "command": [sys.executable, "-c", "import time; time.sleep(600)"],
                    "resources": {
                        "requests": {"nvidia.com/gpu": str(gpus)},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def make_backend(target: GangTarget, clock: Any = time.monotonic, **overrides: Any) -> Any:
    """A Kubernetes backend on the target's tenants; `overrides` go into its config."""
    return KubernetesBackend(
        KubernetesConfig.from_dict(target.config(**overrides)),
        allowed_tenants=TENANTS,
        default_tenant="team-a",
        clock=clock,
        sleep=lambda s: None,
    )


def wait_status(
    target: GangTarget, backend: KubernetesBackend, handle: JobHandle, predicate: Any
) -> StepStatus:
    """Poll `status()` until `predicate(status)` holds; the last status on timeout."""
    seen: list[StepStatus] = []

    def check() -> bool:
        seen.append(backend.status(handle))
        return bool(predicate(seen[-1]))

    try:
        target.wait_for(check, timeout=240)
    except TimeoutError as error:
        last = seen[-1] if seen else None
        raise AssertionError(f"last status: {last}; {error}") from None
    return seen[-1]


def job_pods(target: GangTarget, handle: JobHandle) -> list[dict[str, Any]]:
    """The pods of the attempt's Job."""
    return [
        p
        for p in target.pods(str(handle.tenant))
        if p["metadata"]["labels"].get("k8s-ai/job") == handle.job_id
    ]
