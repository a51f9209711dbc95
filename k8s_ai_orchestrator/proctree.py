"""Process trees: resident memory, group signals and stopping (shared by the backends, the
step pod's memory reporter and the gang launchers).

Summed RSS counts a page once per process that maps it, so right after a step process forks a
helper (before the helper execs) the tree looks twice its size. A kernel cgroup charges each
page once; `TreeSampler.charged_memory` does the same by falling back to the proportional set
size (PSS) when the cheap RSS sum is over the limit.

Finding a tree's members means reading every process's parent (psutil's `children` reads
/proc/PID/stat of each process on the machine, each read giving up the GIL and waiting to get
it back). `TreeSampler`, for a tree sampled many times a second, does that at most every
`RESCAN_S` and reads only the members it knows in between.

The admission ledger reclaims crashed holders by `process_alive` and `group_left_behind`: a
PID is matched with its start time, and zombies count as gone.

Example:
    >>> import os
    >>> tree_rss(os.getpid()) > 0
    True
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence

import psutil

RESCAN_S = 1.0  # how often a `TreeSampler` looks for new members of its tree


def _members(pid: int) -> list[psutil.Process]:
    """The process `pid` and all its descendants (none if it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _tree_sum(pid: int, measure: Callable[[psutil.Process], int]) -> int:
    """`measure` summed over the process `pid` and all its descendants (0 if it is gone)."""
    return _sum(_members(pid), measure)


def _sum(members: Sequence[psutil.Process], measure: Callable[[psutil.Process], int]) -> int:
    total = 0
    for member in members:
        try:
            total += measure(member)
        except (psutil.Error, AttributeError):
            continue
    return total


def _rss(member: psutil.Process) -> int:
    return int(member.memory_info().rss)


def tree_rss(pid: int) -> int:
    """Resident bytes of the process `pid` and all its descendants (0 if it is gone)."""
    return _tree_sum(pid, _rss)


def peak_rss(pid: int) -> int:
    """The kernel's high-water mark of the resident memory of the process `pid` itself (VmHWM
    of /proc/PID/status), in bytes: every spike since it started (or exec'd), however short,
    also one between two samples. 0 if it is gone or the kernel does not tell.

    Example:
        >>> peak_rss(os.getpid()) >= psutil.Process().memory_info().rss > 0
        True
        >>> peak_rss(-1)
        0
    """
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_pss(pid: int) -> int:
    """Proportional set size of the tree: shared pages split among the processes mapping them."""
    return _tree_sum(pid, lambda p: int(p.memory_full_info().pss))


def tree_cpu_seconds(pid: int) -> dict[tuple[int, float], float]:
    """CPU seconds (user + system) of each live process of the tree, keyed by (pid, start)."""
    return _cpu_seconds(_members(pid))


def _cpu_seconds(members: Sequence[psutil.Process]) -> dict[tuple[int, float], float]:
    seconds = {}
    for member in members:
        try:
            with member.oneshot():
                times = member.cpu_times()
                seconds[(member.pid, member.create_time())] = times.user + times.system
        except psutil.Error:
            continue
    return seconds


class TreeSampler:
    """One process tree read many times a second: its members are looked for at most every
    `rescan_s` (a process the tree starts counts from the next look), only they are read in
    between, and one that has gone is dropped.

    Example:
        >>> sampler = TreeSampler(os.getpid())
        >>> sampler.charged_memory(limit=1 << 62) > 0, len(sampler.cpu_seconds()) >= 1
        (True, True)
    """

    def __init__(
        self, pid: int, rescan_s: float = RESCAN_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.pid = pid
        self._rescan_s = rescan_s
        self._clock = clock
        self._members: list[psutil.Process] = []
        self._looked_at: float | None = None

    def members(self) -> list[psutil.Process]:
        """The tree's members: looked for again when `rescan_s` passed, else those known."""
        now = self._clock()
        if self._looked_at is None or now - self._looked_at >= self._rescan_s:
            self._members, self._looked_at = _members(self.pid), now
        return self._members

    def charged_memory(self, limit: int) -> int:
        """The tree's memory as a cgroup would charge it: the known members' RSS, or the PSS of
        the whole tree (looked for afresh) when that is over `limit`."""
        rss = _sum(self.members(), self._member_rss)
        return rss if rss <= limit else tree_pss(self.pid)

    def cpu_seconds(self) -> dict[tuple[int, float], float]:
        """As `tree_cpu_seconds`, over the known members."""
        return _cpu_seconds(self.members())

    def _member_rss(self, member: psutil.Process) -> int:
        try:
            return _rss(member)
        except psutil.NoSuchProcess:
            self._members = [m for m in self._members if m.pid != member.pid]
            raise


def kill_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a whole process group; a group that is already gone is fine."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_processes(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM every process still running, SIGKILL what is left after `grace_s`."""
    alive = [proc for proc in procs if proc.poll() is None]
    for proc in alive:
        proc.send_signal(signal.SIGTERM)
    for proc in alive:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=grace_s)


def process_alive(pid: int, started: float) -> bool:
    """Whether the process `pid` that started at `started` (its create time) still runs."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            alive = process.status() != psutil.STATUS_ZOMBIE
            return alive and abs(process.create_time() - started) < 0.01
    except psutil.Error:
        return False


def group_left_behind(pgid: int) -> bool:
    """Whether live processes are left in group `pgid` (a tree outlives its leader).

    Ask only once the leader is known to be gone: a live process with that PID then means
    the PID was reused, so the old group is gone too.
    """
    if _pid_exists(pgid):
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == pgid:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def _pid_exists(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
