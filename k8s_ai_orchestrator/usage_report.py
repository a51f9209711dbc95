"""A step's own usage reports: the working set as the kubelet computes it, the CPU time its
cgroup has charged, and the log line.

A Kubernetes step process started through `steppod` prints, every `K8S_AI_USAGE_INTERVAL_S`
seconds, one line to the container's stderr::

    @k8s-ai-usage {"working_set_bytes": 1234567, "source": "cgroup v2", "at": 1733.5,
                   "cpu_seconds": 12.5}

The step's last report, written as it returns or exits, also says `"last": true`. The executor
already follows the pod's log; `ReportFilter` takes these lines out of it (they
never reach the Dagster UI) and hands the readings to in-place growth, so measuring a running
step needs no `get nodes/proxy`.

The working set is the kubelet's (cAdvisor's): the container cgroup's usage less its inactive
file cache (cgroup v2: `memory.current` − `inactive_file` of `memory.stat`; v1:
`memory.usage_in_bytes` − `total_inactive_file`), never below 0. The CPU time is the same
cgroup's (v2: `usage_usec` of `cpu.stat`; v1: `cpuacct.usage` of the cpuacct controller), the
figure the kubelet reports as `usageCoreNanoSeconds`. It is read only from a cgroup
that is the container's own, one with a memory limit; elsewhere (a process of the emulator's
kubelet or the node agent, which run containers as plain processes) `cgroup_usage` says
None and the reporter measures its process tree instead.

Example:
    >>> working_set_v2("104857600\\n", "anon 73400320\\ninactive_file 20971520\\n")
    83886080
    >>> line = format_report(MemoryReading(83886080, "cgroup v2", 1733.5, cpu_seconds=2.5))
    >>> kept, [reading] = ReportFilter().feed(("step says hi\\n" + line).encode())
    >>> kept, reading.working_set_bytes, reading.cpu_seconds
    (b'step says hi\\n', 83886080, 2.5)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

PREFIX = "@k8s-ai-usage "
_PREFIX = PREFIX.encode()
_UNLIMITED = 1 << 60  # a v1 limit at or above this is the kernel's "no limit" (2**63 − page)


@dataclass(frozen=True)
class MemoryReading:
    """One report of a step's memory in use."""

    working_set_bytes: int  # what the kubelet would call the container's working set
    source: str  # "cgroup v2", "cgroup v1" or "process tree" (RSS, no cgroup of its own)
    at: float  # the step's wall clock (Unix seconds) when it was read
    cpu_seconds: float | None = None  # CPU time charged so far (its cgroup's, or its tree's)
    last: bool = False  # the step process's last report: it wrote it as it returned or exited


def format_report(reading: MemoryReading) -> str:
    """The log line carrying `reading` (with its newline)."""
    body: dict[str, object] = {
        "working_set_bytes": reading.working_set_bytes,
        "source": reading.source,
        "at": round(reading.at, 3),
    }
    if reading.cpu_seconds is not None:
        body["cpu_seconds"] = round(reading.cpu_seconds, 3)
    if reading.last:
        body["last"] = True
    return PREFIX + json.dumps(body, separators=(",", ":")) + "\n"


def _parse(body: bytes) -> MemoryReading | None:
    try:
        fields = json.loads(body)
        cpu = fields.get("cpu_seconds")
        return MemoryReading(
            int(fields["working_set_bytes"]),
            str(fields["source"]),
            float(fields["at"]),
            None if cpu is None else float(cpu),
            fields.get("last") is True,
        )
    except (ValueError, KeyError, TypeError):
        return None


class ReportFilter:
    """Takes report lines out of a streamed log, chunk by chunk (one per log stream).

    A report may arrive split over chunks, or after a partial line the step wrote without a
    newline (both streams share one log on some nodes); the text before it stays in the log.
    Only a line that could still become a report is held back until its newline arrives.
    """

    def __init__(self) -> None:
        self._held = b""

    def feed(self, chunk: bytes) -> tuple[bytes, list[MemoryReading]]:
        """The log text to keep from `chunk`, and the readings it completed."""
        data, self._held = self._held + chunk, b""
        kept: list[bytes] = []
        readings: list[MemoryReading] = []
        start = 0
        while True:
            at = data.find(_PREFIX, start)
            if at < 0:
                break
            end = data.find(b"\n", at)
            if end < 0:
                kept.append(data[start:at])
                self._held = data[at:]
                return b"".join(kept), readings
            reading = _parse(data[at + len(_PREFIX) : end])
            if reading is None:  # not ours after all: the step's own text
                kept.append(data[start : end + 1])
            else:
                kept.append(data[start:at])
                readings.append(reading)
            start = end + 1
        rest = data[start:]
        hold = _partial_prefix(rest)
        self._held = rest[len(rest) - hold :] if hold else b""
        kept.append(rest[: len(rest) - hold])
        return b"".join(kept), readings

    def flush(self) -> bytes:
        """What is held back, once the stream has ended."""
        held, self._held = self._held, b""
        return held


def _partial_prefix(text: bytes) -> int:
    """The length of the longest end of `text` that begins the prefix (0 if none)."""
    for size in range(min(len(text), len(_PREFIX) - 1), 0, -1):
        if _PREFIX.startswith(text[-size:]):
            return size
    return 0


def without_reports(text: str) -> str:
    """`text` (a whole log) without its report lines."""
    report_filter = ReportFilter()
    kept, _ = report_filter.feed(text.encode())
    return (kept + report_filter.flush()).decode("utf-8", errors="replace")


def _stat(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def working_set_v2(memory_current: str, memory_stat: str) -> int:
    """cgroup v2: `memory.current` less `inactive_file` (the kubelet's working set)."""
    return max(int(memory_current) - _stat(memory_stat, "inactive_file"), 0)


def working_set_v1(usage_in_bytes: str, memory_stat: str) -> int:
    """cgroup v1: `memory.usage_in_bytes` less `total_inactive_file`."""
    return max(int(usage_in_bytes) - _stat(memory_stat, "total_inactive_file"), 0)


def _own_cgroup_dirs(proc_cgroup: str, root: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """Candidate v2, v1 memory and v1 cpuacct cgroup directories of this process: the path
    named in /proc/self/cgroup under the mount, then the mount itself (a container sees its own
    cgroup there when it has a cgroup namespace or a private mount)."""
    v2: list[Path] = []
    v1: list[Path] = []
    cpuacct: list[Path] = []
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        names = controllers.split(",")
        if controllers == "":
            v2 += [root / "sys/fs/cgroup" / relative, root / "sys/fs/cgroup"]
        elif "memory" in names:
            v1 += [root / "sys/fs/cgroup/memory" / relative, root / "sys/fs/cgroup/memory"]
        elif "cpuacct" in names:
            for mount in dict.fromkeys((controllers, "cpuacct", "cpu,cpuacct")):
                base = root / "sys/fs/cgroup" / mount
                cpuacct += [base / relative, base]
    return v2, v1, cpuacct


def _cpu_v2(directory: Path) -> float | None:
    try:
        return _stat((directory / "cpu.stat").read_text(), "usage_usec") / 1e6
    except (OSError, ValueError):
        return None


def _cpu_v1(directories: list[Path]) -> float | None:
    for directory in directories:
        try:
            return int((directory / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            continue
    return None


def cgroup_usage(root: Path = Path("/")) -> MemoryReading | None:
    """This container's working set from its memory cgroup, and its CPU time when readable;
    None without a cgroup of its own (no limit set on it) or without a readable one. `at` is 0:
    the caller stamps it."""
    try:
        v2, v1, cpuacct = _own_cgroup_dirs((root / "proc/self/cgroup").read_text(), root)
    except (OSError, ValueError):
        return None
    for directory in v2:
        try:
            if (directory / "memory.max").read_text().strip() == "max":
                continue
            used = working_set_v2(
                (directory / "memory.current").read_text(), (directory / "memory.stat").read_text()
            )
        except (OSError, ValueError):
            continue
        return MemoryReading(used, "cgroup v2", 0.0, _cpu_v2(directory))
    for directory in v1:
        try:
            if int((directory / "memory.limit_in_bytes").read_text()) >= _UNLIMITED:
                continue
            used = working_set_v1(
                (directory / "memory.usage_in_bytes").read_text(),
                (directory / "memory.stat").read_text(),
            )
        except (OSError, ValueError):
            continue
        return MemoryReading(used, "cgroup v1", 0.0, _cpu_v1(cpuacct))
    return None


__all__ = [
    "PREFIX",
    "MemoryReading",
    "ReportFilter",
    "cgroup_usage",
    "format_report",
    "without_reports",
    "working_set_v1",
    "working_set_v2",
]
