"""The embedded local backend: each step a real process on this machine.

- `backend.py`: the step queue, status, cancel, usage;
- `capacity.py`: what the backend may hand out, and what a step takes of it;
- `ledger.py`: machine-wide admission, shared by every run of the instance (a file + flock);
- `launch.py`: how step processes start (spawn, or forked from a warm forkserver);
- `meter.py`: what a running attempt holds (its limit, grown in place) and uses (peak, CPU);
- `outcome.py`: an attempt's exit code and kill reason as a `StepStatus`;
- `rank_launcher.py`: the ranks of a `Gang.run` call as local processes.

Process trees (memory, CPU time, killing a tree) are measured by `k8s_ai_orchestrator.proctree`,
which the step pod's memory reporter shares.

Example:
    >>> backend = LocalBackend(LocalCapacity(cpus=1, memory_bytes=2 * 1024**3, gpus=0))
    >>> backend.name
    'local'
    >>> backend.close()  # its thread stopped, its temp folder removed
"""

from .backend import OOM_EXIT_CODE, LocalBackend
from .capacity import LocalCapacity
from .ledger import AdmissionLedger

__all__ = ["OOM_EXIT_CODE", "AdmissionLedger", "LocalBackend", "LocalCapacity"]
