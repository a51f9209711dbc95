"""What a job measurably used, from Slurm's accounting: its peak RSS and its CPU time.

Pure functions over what each transport reads; `backend.py` decides when to ask. Fields read:

- `sstat -a -j <id> -P -o MaxRSS` (CLI, running steps, from the nodes' slurmstepd): one
  MaxRSS per running step, "10660K";
- `sacct -D -j <id> -P -o JobID,MaxRSS,TotalCPU` (CLI, slurmdbd): per run of the job (a
  requeued job has several) the allocation's row (its TotalCPU is the sum of its steps') and
  one row per step with its MaxRSS, the largest RSS of any of its tasks;
- `GET /slurmdb/<version>/job/<id>` (REST, slurmdbd; the same shape in v0.0.38 and v0.0.40 to
  v0.0.42): per step `tres.requested.max`, whose `mem` item counts the largest task's RSS in
  bytes, and `time.total` `{seconds, microseconds}`, the step's user + system CPU time; one
  job per run of a requeued job.

Without slurmdbd (`AccountingStorageType=accounting_storage/none`) `sacct` refuses and
slurmrestd serves no `/slurmdb/` paths: nothing is measured after the job ends.

Example:
    >>> from_sacct(["7||00:02.500", "7.batch|10660K|00:00.020", "7.0|64600K|00:02.480"], "7")
    Measured(max_rss_bytes=66150400, cpu_used_seconds=2.5)
    >>> rss_bytes("1.5G"), rss_bytes("0"), rss_bytes("")
    (1610612736, 0, None)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# sacct's and sstat's size suffixes (powers of 1024).
SIZE_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


@dataclass(frozen=True)
class Measured:
    """A finished job's measured use over all its runs, as slurmdbd recorded it."""

    max_rss_bytes: int | None = None  # largest RSS of any task of any step
    cpu_used_seconds: float | None = None  # user + system CPU time of all its steps


def rss_bytes(text: str) -> int | None:
    """A MaxRSS as sacct and sstat print it ("10660K", "1.5G", "0") in bytes; None when empty
    or unreadable."""
    text = text.strip()
    if not text:
        return None
    number, unit = (text[:-1], SIZE_UNITS[text[-1]]) if text[-1] in SIZE_UNITS else (text, 1)
    try:
        return int(float(number) * unit)
    except ValueError:
        return None


def cpu_seconds(text: str) -> float | None:
    """A TotalCPU as sacct prints it ("[DD-][HH:]MM:SS[.mmm]") in seconds.

    Example:
        >>> cpu_seconds("00:02.500"), cpu_seconds("01:00:00"), cpu_seconds("1-00:00:01")
        (2.5, 3600.0, 86401.0)
    """
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    try:
        seconds = sum(float(part) * 60**power for power, part in enumerate(reversed(parts)))
        return seconds + (int(days) * 86400 if days else 0)
    except ValueError:
        return None


def max_rss(values: Iterable[str]) -> int | None:
    """The largest of MaxRSS values (`sstat`'s running steps), or None when none is known."""
    known = [size for size in map(rss_bytes, values) if size is not None]
    return max(known) if known else None


def from_sacct(rows: Sequence[str], job_id: str) -> Measured | None:
    """`JobID|MaxRSS|TotalCPU` rows of one job → Measured (None without an allocation row)."""
    fields = [row.split("|") for row in rows if row.count("|") == 2]
    allocations = [cpu_seconds(cpu) for jid, _, cpu in fields if jid == job_id]
    if not allocations:
        return None
    steps = [rss for jid, rss, _ in fields if jid.startswith(f"{job_id}.")]
    known = [cpu for cpu in allocations if cpu is not None]
    return Measured(max_rss(steps), sum(known) if known else None)


def from_slurmdb_jobs(rows: Sequence[Mapping[str, Any]]) -> Measured | None:
    """The `jobs` of `GET /slurmdb/<version>/job/<id>` (one per run) → Measured (None when
    slurmdbd has no record of it)."""
    if not rows:
        return None
    steps = [step for row in rows for step in row.get("steps") or []]
    peaks = [_tres_count(step, "mem") for step in steps]
    known = [peak for peak in peaks if peak is not None]
    times = [(step.get("time") or {}).get("total") or {} for step in steps]
    used = [float(t.get("seconds") or 0) + float(t.get("microseconds") or 0) / 1e6 for t in times]
    return Measured(max(known) if known else None, sum(used) if steps else None)


def _tres_count(step: Mapping[str, Any], kind: str) -> int | None:
    """The `kind` item's count in a step's `tres.requested.max` (a number, or v0.0.40+'s
    {set, infinite, number} where a count may be unset)."""
    items = ((step.get("tres") or {}).get("requested") or {}).get("max") or []
    for item in items:
        if item.get("type") == kind:
            count = item.get("count")
            if isinstance(count, Mapping):
                count = count.get("number") if count.get("set") else None
            return int(count) if isinstance(count, int | float) else None
    return None
