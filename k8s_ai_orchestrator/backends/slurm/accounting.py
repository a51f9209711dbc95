"""What a job measurably used, from Slurm's accounting: its peak RSS and its CPU time.

Pure functions over what each transport reads; `backend.py` decides when to ask. Fields read:

- `sstat -a -j <id> -P -o MaxRSS` (CLI, running steps, from the nodes' slurmstepd): one
  MaxRSS per running step, "10660K";
- `sacct -D -j <id> -P -o JobID,State,MaxRSS,TotalCPU` (CLI, slurmdbd): per run of the job
  (a requeued job has several) the allocation's row (its TotalCPU is the sum of its steps')
  and one row per step with its MaxRSS, the largest RSS of any of its tasks;
- `GET /slurmdb/<version>/job/<id>` (REST, slurmdbd; the same shape in v0.0.38 and v0.0.40 to
  v0.0.42): per step `tres.requested.max`, whose `mem` item counts the largest task's RSS in
  bytes, and `time.total` `{seconds, microseconds}`, the step's user + system CPU time; one
  job per run of a requeued job, its `state.current` a string (v0.0.38) or a list.

slurmctld sends a job's end to slurmdbd a moment after the job ends, and until then slurmdbd
holds the job as it started (State PENDING or RUNNING, no CPU time): such a record is no
measurement (`NOT_ENDED`), not a job that used nothing.

Without slurmdbd (`AccountingStorageType=accounting_storage/none`) `sacct` refuses and
slurmrestd serves no `/slurmdb/` paths: nothing is measured after the job ends.

Example:
    >>> rows = ["7|COMPLETED||00:02.500", "7.batch|COMPLETED|10660K|00:00.020",
    ...         "7.0|COMPLETED|64600K|00:02.480"]
    >>> from_sacct(rows, "7")
    Measured(max_rss_bytes=66150400, cpu_used_seconds=2.5, ended=True)
    >>> from_sacct(["7|PENDING||00:00:00"], "7") is NOT_ENDED  # its end not recorded yet
    True
    >>> rss_bytes("1.5G"), rss_bytes("0"), rss_bytes("")
    (1610612736, 0, None)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .states import PENDING_STATES, RUNNING_STATES

# sacct's and sstat's size suffixes (powers of 1024).
SIZE_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


@dataclass(frozen=True)
class Measured:
    """A finished job's measured use over all its runs, as slurmdbd recorded it."""

    max_rss_bytes: int | None = None  # largest RSS of any task of any step
    cpu_used_seconds: float | None = None  # user + system CPU time of all its steps
    ended: bool = True  # False: slurmdbd has the job, but not its end yet (`NOT_ENDED`)


NOT_ENDED = Measured(ended=False)


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
    """`JobID|State|MaxRSS|TotalCPU` rows of one job → Measured (None without an allocation
    row; `NOT_ENDED` while the last run's end is not recorded)."""
    fields = [row.split("|") for row in rows if row.count("|") == 3]
    allocations = [(state, cpu_seconds(cpu)) for jid, state, _, cpu in fields if jid == job_id]
    if not allocations:
        return None
    if not _ended(allocations[-1][0]):
        return NOT_ENDED
    steps = [rss for jid, _, rss, _ in fields if jid.startswith(f"{job_id}.")]
    known = [cpu for _, cpu in allocations if cpu is not None]
    return Measured(max_rss(steps), sum(known) if known else None)


def from_slurmdb_jobs(rows: Sequence[Mapping[str, Any]]) -> Measured | None:
    """The `jobs` of `GET /slurmdb/<version>/job/<id>` (one per run) → Measured (None when
    slurmdbd has no record of it; `NOT_ENDED` while its last run's end is not recorded)."""
    if not rows:
        return None
    if not _ended((rows[-1].get("state") or {}).get("current")):
        return NOT_ENDED
    steps = [step for row in rows for step in row.get("steps") or []]
    peaks = [_tres_count(step, "mem") for step in steps]
    known = [peak for peak in peaks if peak is not None]
    times = [(step.get("time") or {}).get("total") or {} for step in steps]
    used = [float(t.get("seconds") or 0) + float(t.get("microseconds") or 0) / 1e6 for t in times]
    return Measured(max(known) if known else None, sum(used) if steps else None)


def _ended(state: Any) -> bool:
    """Whether a run's recorded state (sacct's "CANCELLED by 0", or slurmdbd's string or
    list of state and flags) is an end."""
    if isinstance(state, list):
        state = state[0] if state else ""
    words = str(state or "").split()
    return bool(words) and words[0] not in PENDING_STATES | RUNNING_STATES


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
