"""What the local backend may hand out at once, and what a step takes of it.

Example:
    >>> LocalCapacity(cpus=2, memory_bytes=4 * 1024**3, gpus=0).describe()
    '2 CPU / 4.0Gi / 0 GPU'
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

from ...errors import ConfigError, SubmitError
from ...spec import ComputeSpec, parse_cpu, parse_memory


def detect_gpus() -> int:
    """Number of NVIDIA GPUs `nvidia-smi -L` lists (0 without a driver)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


@dataclass(frozen=True)
class LocalCapacity:
    """What the local backend may hand out at once."""

    cpus: float
    memory_bytes: int
    gpus: int = 0

    @classmethod
    def detect(cls) -> LocalCapacity:
        return cls(
            cpus=float(os.cpu_count() or 1),
            memory_bytes=psutil.virtual_memory().total,
            gpus=detect_gpus(),
        )

    @classmethod
    def from_config(cls, raw: Mapping[str, object]) -> LocalCapacity:
        """Build from the executor's `local` config; missing values are detected."""
        detected = cls.detect()
        cpus = raw.get("cpus")
        memory = raw.get("memory")
        gpus = raw.get("gpus")
        try:
            capacity = cls(
                cpus=parse_cpu(cpus, field="local.cpus") if cpus is not None else detected.cpus,
                memory_bytes=(
                    parse_memory(memory, field="local.memory")
                    if memory is not None
                    else detected.memory_bytes
                ),
                gpus=int(gpus) if gpus is not None else detected.gpus,  # type: ignore[call-overload]
            )
        except ValueError as exc:
            raise ConfigError(f"executor config: {exc}; omit the key to detect it") from None
        if capacity.gpus < 0:
            raise ConfigError(f"executor config: local.gpus={gpus!r} must be >= 0")
        return capacity

    def fits(self, spec: ComputeSpec) -> bool:
        return (
            local_cpu(spec) <= self.cpus + 1e-9
            and local_memory(spec) <= self.memory_bytes
            and local_gpus(spec) <= self.gpus
        )

    def describe(self) -> str:
        return f"{self.cpus:g} CPU / {self.memory_bytes / 1024**3:.1f}Gi / {self.gpus} GPU"

    def cpu_memory_fit(self, spec: ComputeSpec) -> bool:
        """Whether the step's CPUs and memory fit the machine (its GPUs aside)."""
        return local_cpu(spec) <= self.cpus and local_memory(spec) <= self.memory_bytes

    def placement_warnings(self, spec: ComputeSpec) -> list[str]:
        """Why a step will not run here exactly as sized (under `oversize: run_alone`).

        Example:
            >>> capacity = LocalCapacity(cpus=16, memory_bytes=64 * 1024**3)
            >>> capacity.placement_warnings(ComputeSpec(cpu=1, memory_bytes=1024**3, gpu=1))
            ['step asks for 1 GPU but this machine has 0: it runs on CPU without a GPU']
        """
        notes = []
        if not self.cpu_memory_fit(spec):
            notes.append(
                f"step needs {spec.describe()}, more than this machine's "
                f"{self.describe()}: it runs alone, with the memory limit still enforced"
            )
        wanted = local_gpus(spec)
        if wanted > self.gpus:
            given = (
                "it runs on CPU without a GPU"
                if self.gpus == 0
                else f"it runs with the {self.gpus} GPU this machine has"
            )
            notes.append(f"step asks for {wanted} GPU but this machine has {self.gpus}: {given}")
        return notes

    def refuse_oversize(self, step_key: str, spec: ComputeSpec) -> None:
        """Under `oversize: fail`, raise `SubmitError` for a step larger than the machine or
        short of GPUs."""
        if not self.cpu_memory_fit(spec):
            raise SubmitError(
                f"step '{step_key}' needs {spec.describe()} but the local backend has "
                f"{self.describe()} and local.oversize is 'fail': run it on a cluster "
                "backend, shrink it with compute(...), or set local.oversize: run_alone"
            )
        if local_gpus(spec) > self.gpus:
            raise SubmitError(
                f"step '{step_key}' asks for {local_gpus(spec)} GPU but the local backend has "
                f"{self.gpus} ({self.describe()}) and local.oversize is "
                "'fail': run it on a machine with GPUs, set local.gpus if this machine has "
                "GPUs that nvidia-smi does not list, use the kubernetes backend, or set "
                "local.oversize: run_alone to run it on CPU"
            )


def local_cpu(spec: ComputeSpec) -> float:
    return spec.total_cpu


def local_memory(spec: ComputeSpec) -> int:
    return spec.memory_bytes * spec.nodes


def local_gpus(spec: ComputeSpec) -> int:
    return spec.gpu * spec.nodes


__all__ = ["LocalCapacity", "detect_gpus", "local_cpu", "local_gpus", "local_memory"]
