"""Process trees: resident memory and group signals (used where memory limits are enforced).

Summed RSS counts a page once per process that maps it, so right after a step process forks a
helper (before the helper execs) the tree looks twice its size. A kernel cgroup charges each
page once; `charged_memory` does the same by falling back to the proportional set size (PSS)
when the cheap RSS sum is over the limit.

Example:
    >>> import os
    >>> tree_rss(os.getpid()) > 0
    True
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import psutil


def _tree_sum(pid: int, measure: Callable[[psutil.Process], int]) -> int:
    """`measure` summed over the process `pid` and all its descendants (0 if it is gone)."""
    try:
        root = psutil.Process(pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for member in members:
        try:
            total += measure(member)
        except (psutil.Error, AttributeError):
            continue
    return total


def tree_rss(pid: int) -> int:
    """Resident bytes of the process `pid` and all its descendants (0 if it is gone)."""
    return _tree_sum(pid, lambda p: int(p.memory_info().rss))


def tree_pss(pid: int) -> int:
    """Proportional set size of the tree: shared pages split among the processes mapping them."""
    return _tree_sum(pid, lambda p: int(p.memory_full_info().pss))


def charged_memory(pid: int, limit: int) -> int:
    """The tree's memory as a cgroup would charge it: RSS, or PSS when RSS is over `limit`."""
    rss = tree_rss(pid)
    return rss if rss <= limit else tree_pss(pid)


def kill_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a whole process group; a group that is already gone is fine."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
