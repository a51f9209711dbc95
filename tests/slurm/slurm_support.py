"""Helpers for the Slurm tests: launch requests for small step programs, bounded polling."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from k8s_ai_orchestrator.backends.base import JobHandle, LaunchRequest, StepStatus
from k8s_ai_orchestrator.backends.slurm import SlurmBackend
from k8s_ai_orchestrator.spec import ComputeSpec, MiB
from k8s_ai_orchestrator.stepenv import step_env

PROGRAMS = Path(__file__).parent / "programs"


def program(name: str, *args: str) -> list[str]:
    """argv running one of tests/slurm/programs with this interpreter."""
    return [sys.executable, str(PROGRAMS / name), *args]


def launch_request(
    command: Sequence[str],
    *,
    step_key: str = "train",
    run_id: str | None = None,
    nodes: int = 2,
    gpu: int = 0,
    preemptible: bool = False,
    env: Mapping[str, str] | None = None,
) -> LaunchRequest:
    spec = ComputeSpec(cpu=1, memory_bytes=256 * MiB, nodes=nodes, gpu=gpu, preemptible=preemptible)
    run_id = run_id or uuid.uuid4().hex
    full_env = step_env(
        backend="slurm", run_id=run_id, step_key=step_key, attempt=0, spec=spec, grace_s=4
    )
    full_env.update(env or {})
    return LaunchRequest(
        run_id=run_id, step_key=step_key, attempt=0, command=command, env=full_env, spec=spec
    )


def wait_for_status(
    backend: SlurmBackend,
    handle: JobHandle,
    done: Callable[[StepStatus], bool],
    timeout_s: float = 90.0,
) -> StepStatus:
    """Poll until `done(status)`; fail with the last status and the job log otherwise."""
    deadline = time.monotonic() + timeout_s
    status = backend.status(handle)
    while not done(status):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"job {handle.job_id}: last status {status}; log:\n{backend.logs(handle)}"
            )
        time.sleep(0.2)
        status = backend.status(handle)
    return status


def wait_for_file(path: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear in {timeout_s:g}s")
        time.sleep(0.1)
