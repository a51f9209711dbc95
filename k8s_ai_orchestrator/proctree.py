"""Process trees: resident memory and group signals (used where memory limits are enforced).

Example:
    >>> import os
    >>> tree_rss(os.getpid()) > 0
    True
"""

from __future__ import annotations

import os
import signal

import psutil


def tree_rss(pid: int) -> int:
    """Resident bytes of the process `pid` and all its descendants (0 if it is gone)."""
    try:
        root = psutil.Process(pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            continue
    return total


def kill_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a whole process group; a group that is already gone is fine."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
