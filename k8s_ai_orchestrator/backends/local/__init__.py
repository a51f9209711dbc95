"""The embedded local backend: each step a real process on this machine.

- `backend.py`: admission against the machine's capacity, status, cancel, usage;
- `launch.py`: how step processes start (spawn, or forked from a warm forkserver);
- `proctree.py`: the memory a process tree is charged, and killing a tree.

Example:
    >>> LocalBackend(LocalCapacity(cpus=1, memory_bytes=2 * 1024**3, gpus=0)).name
    'local'
"""

from .backend import OOM_EXIT_CODE, LocalBackend, LocalCapacity

__all__ = ["OOM_EXIT_CODE", "LocalBackend", "LocalCapacity"]
