"""Machine-wide admission: one ledger shared by every run of a Dagster instance on this machine.

Each run's executor has its own `LocalBackend`, often in its own run-worker process. So that
two runs do not each hand out the whole machine, admission goes through a small JSON file
under `$DAGSTER_HOME` (`k8s_ai_local/admission-<hostname>.json`, one per machine should
DAGSTER_HOME be shared; without DAGSTER_HOME, a per-user folder in the temp dir), read and
rewritten under `fcntl.flock`. It records every admitted step (run id, step key, CPU, memory,
GPU ids, the PID of its process group) and every run's first waiting step with a ticket. The
file is rewritten in place with one `pwrite`, so a writer killed midway leaves the old tail
after a complete new document, which readers ignore.

Rules, applied by `judge`:
- each run admits against its own configured capacity, counting what every run holds;
- the waiting step with the oldest ticket goes first, machine-wide (FIFO across runs);
- a step larger than the machine (`oversize: run_alone`) starts only when nothing is held,
  and nothing starts beside it;
- a launch from inside a running step of the same run (a Pipes command, `parent_step_key`)
  goes ahead of every waiting step, and its parent's share counts as free for it (the parent
  waits on it): otherwise a step holding capacity while its child queues behind another run's
  step, which waits for that capacity, would never finish;
- an entry whose processes are gone (a run worker killed with `kill -9`, a crashed step) is
  dropped at the next admission, so capacity never leaks.

Example:
    >>> cap = LocalCapacity(cpus=2, memory_bytes=4 * 1024**3)
    >>> want = Want("run-b", "train", "b-train-0", cpus=2, memory_bytes=1024**3)
    >>> held = LedgerState(claims=(Claim(owner=Owner("a", 1, 0.0), run_id="run-a",
    ...     step_key="prep", job_id="a-prep-0", cpus=1, memory_bytes=1024**3),))
    >>> judge(held, Owner("b", 2, 0.0), want, cap).admitted
    False
    >>> judge(LedgerState(), Owner("b", 2, 0.0), want, cap).admitted
    True
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from ...errors import ConfigError
from ...proctree import group_left_behind, process_alive
from .capacity import LocalCapacity

LEDGER_FOLDER = "k8s_ai_local"


@dataclass(frozen=True)
class Owner:
    """One `LocalBackend` taking part in the ledger: a token and the process it lives in."""

    token: str  # unique per backend (a process may hold several)
    pid: int
    started: float  # the process's create time, so a reused PID is not mistaken for it

    @classmethod
    def this_process(cls) -> Owner:
        return cls(uuid.uuid4().hex, os.getpid(), psutil.Process().create_time())


@dataclass(frozen=True)
class Want:
    """What one queued step asks for (GPUs already capped at the machine's count)."""

    run_id: str
    step_key: str
    job_id: str
    cpus: float
    memory_bytes: int
    gpus: int = 0
    alone: bool = False  # larger than the run's capacity: runs with nothing beside it
    size: str = ""  # the step's size as users read it, for the Pending message
    parent_step_key: str = ""  # launched from inside this running step of the same run


@dataclass(frozen=True)
class Claim:
    """An admitted step's share of the machine."""

    owner: Owner
    run_id: str
    step_key: str
    job_id: str
    cpus: float
    memory_bytes: int
    gpu_ids: tuple[int, ...] = ()
    alone: bool = False
    pid: int = 0  # the step's process (its group leader); 0 while it starts
    pid_started: float = 0.0  # that process's create time
    parent_step_key: str = ""  # see `Want.parent_step_key`
    log_path: str = ""  # where the step's output goes (a resumed run worker reads it there)


@dataclass(frozen=True)
class Waiter:
    """A run's first queued step, holding its place in the machine-wide line."""

    owner: Owner
    run_id: str
    step_key: str
    job_id: str
    ticket: int


@dataclass(frozen=True)
class LedgerState:
    """The whole ledger file."""

    claims: tuple[Claim, ...] = ()
    waiters: tuple[Waiter, ...] = ()
    next_ticket: int = 1


@dataclass(frozen=True)
class Verdict:
    """`judge`'s answer: admitted (with GPU ids), or why not."""

    admitted: bool
    gpu_ids: tuple[int, ...] = ()
    reason: str = ""


def judge(state: LedgerState, owner: Owner, want: Want, capacity: LocalCapacity) -> Verdict:
    """Whether `want` may start now, given what every run holds and who waits first."""
    parent = _parent_claim(state, want)
    claims = tuple(c for c in state.claims if c is not parent)  # a parent lends its share
    cpus = capacity.cpus - sum(c.cpus for c in claims)
    memory = capacity.memory_bytes - sum(c.memory_bytes for c in claims)
    free_gpus = sorted(set(range(capacity.gpus)) - {g for c in claims for g in c.gpu_ids})
    blocker = _blocker(claims, () if parent else state.waiters, owner, want)
    if not blocker and not want.alone:
        fits = want.cpus <= cpus + 1e-9 and want.memory_bytes <= memory
        blocker = "" if fits and want.gpus <= len(free_gpus) else "not enough is free"
    if not blocker:
        return Verdict(True, tuple(free_gpus[: want.gpus]))
    free = f"free {max(cpus, 0):g} CPU / {max(memory, 0) / 1024**3:.1f}Gi / {len(free_gpus)} GPU"
    held = _held_by_other_runs([c for c in claims if c.owner.token != owner.token])
    return Verdict(
        False,
        reason=f"waiting for local capacity: needs {want.size or _describe(want)}, {free} of "
        f"{capacity.describe()}; {blocker}{held}",
    )


def _parent_claim(state: LedgerState, want: Want) -> Claim | None:
    """The running step `want` was launched from, if it holds a claim."""
    if not want.parent_step_key:
        return None
    key = (want.run_id, want.parent_step_key)
    return next(
        (c for c in state.claims if (c.run_id, c.step_key) == key and not c.parent_step_key),
        None,
    )


def _blocker(
    claims: tuple[Claim, ...], waiters: tuple[Waiter, ...], owner: Owner, want: Want
) -> str:
    """Why `want` may not start whatever is free ("" if nothing but capacity stands in the way)."""
    alone = next((c for c in claims if c.alone), None)
    if alone is not None:
        return f"step '{alone.step_key}' of run {alone.run_id[:8]} runs alone (oversize)"
    first = min(waiters, key=lambda w: w.ticket, default=None)
    if first is not None and (first.owner.token, first.job_id) != (owner.token, want.job_id):
        return f"step '{first.step_key}' of run {first.run_id[:8]} waits first (FIFO)"
    if want.alone and claims:
        return "it is larger than the machine and runs alone once nothing else runs"
    return ""


def _held_by_other_runs(claims: list[Claim]) -> str:
    if not claims:
        return ""
    shown = ", ".join(f"'{c.step_key}' of run {c.run_id[:8]}" for c in claims[:3])
    more = f" and {len(claims) - 3} more" if len(claims) > 3 else ""
    return f"; other runs on this machine hold {shown}{more}"


def _size(num_bytes: int) -> str:
    if num_bytes < 1024**3:
        return f"{num_bytes / 1024**2:.0f}Mi"
    return f"{num_bytes / 1024**3:.1f}Gi"


def _describe(want: Want) -> str:
    return f"{want.cpus:g} CPU / {want.memory_bytes / 1024**3:.1f}Gi / {want.gpus} GPU"


def default_ledger_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """`$DAGSTER_HOME/k8s_ai_local`, or a per-user temp folder when DAGSTER_HOME is unset.

    Example:
        >>> default_ledger_dir({"DAGSTER_HOME": "/srv/dagster"})
        PosixPath('/srv/dagster/k8s_ai_local')
    """
    home = environ.get("DAGSTER_HOME")
    if home:
        return Path(home) / LEDGER_FOLDER
    return Path(tempfile.gettempdir()) / f"{LEDGER_FOLDER}-{os.getuid()}"


class AdmissionLedger:
    """One backend's handle on the machine-wide ledger in `directory`.

    Args:
        directory: where the ledger file lives (`default_ledger_dir()`).

    Example:
        >>> import tempfile
        >>> ledger = AdmissionLedger(Path(tempfile.mkdtemp()))
        >>> want = Want("run-1", "prep", "run-1-prep-0", cpus=1, memory_bytes=1024**3)
        >>> ledger.admit(want, LocalCapacity(cpus=2, memory_bytes=4 * 1024**3)).admitted
        True
        >>> [c.step_key for c in ledger.snapshot().claims]
        ['prep']
        >>> ledger.leave()
        >>> ledger.snapshot().claims
        ()
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or default_ledger_dir()
        self.owner = Owner.this_process()
        self.path = self.directory / f"admission-{socket.gethostname()}.json"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.path.touch(exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"local backend: cannot use the admission ledger in {self.directory} "
                f"({exc.strerror}): make DAGSTER_HOME a writable folder, or unset it to use "
                "a per-user temp folder"
            ) from None

    def admit(self, want: Want, capacity: LocalCapacity) -> Verdict:
        """Claim `want` if it may start now; otherwise keep (or take) its place in line."""
        with self._transaction() as (state, commit):
            me = self.owner.token
            waiters = tuple(
                w for w in state.waiters if w.owner.token != me or w.job_id == want.job_id
            )
            state = replace(state, waiters=waiters)
            verdict = judge(state, self.owner, want, capacity)
            others = tuple(w for w in waiters if w.owner.token != me)
            if verdict.admitted:
                claim = Claim(
                    self.owner,
                    want.run_id,
                    want.step_key,
                    want.job_id,
                    want.cpus,
                    want.memory_bytes,
                    gpu_ids=verdict.gpu_ids,
                    alone=want.alone,
                    parent_step_key=want.parent_step_key,
                )
                state = replace(state, claims=(*state.claims, claim), waiters=others)
            elif others == waiters:  # not in line yet: take a ticket
                ticket = state.next_ticket
                waiter = Waiter(self.owner, want.run_id, want.step_key, want.job_id, ticket)
                state = replace(state, waiters=(*waiters, waiter), next_ticket=waiter.ticket + 1)
            commit(state)
            return verdict

    def grow(self, job_id: str, memory_bytes: int, capacity: LocalCapacity) -> Verdict:
        """Raise the memory of this backend's claim `job_id` if the machine has room for it.

        Room is `capacity` less what every other admitted step holds, whichever run it is in;
        steps still waiting in line do not count (a running step goes first, as in a kubelet).
        """
        with self._transaction() as (state, commit):
            token = self.owner.token
            mine = next(
                (c for c in state.claims if (c.owner.token, c.job_id) == (token, job_id)), None
            )
            if mine is None:
                return Verdict(False, reason="the step holds no claim any more (it has ended)")
            others = [c for c in state.claims if c is not mine]
            held_by_others = sum(c.memory_bytes for c in others)
            if memory_bytes > capacity.memory_bytes - held_by_others:
                held = _held_by_other_runs([c for c in others if c.owner.token != token])
                return Verdict(
                    False,
                    reason=f"{_size(memory_bytes)} does not fit in the local memory of "
                    f"{_size(capacity.memory_bytes)}, of which other running steps hold "
                    f"{_size(held_by_others)}{held}",
                )
            grown = replace(mine, memory_bytes=memory_bytes)
            commit(replace(state, claims=tuple(grown if c is mine else c for c in state.claims)))
            return Verdict(True)

    def started(self, job_id: str, pid: int, log_path: str = "") -> None:
        """Record the process (group leader) of an admitted step, so a crash is reclaimed."""
        try:
            pid_started = psutil.Process(pid).create_time()
        except psutil.Error:
            pid_started = 0.0
        self._update(
            job_id, lambda c: replace(c, pid=pid, pid_started=pid_started, log_path=log_path)
        )

    def adopt(self, run_id: str, job_id: str) -> Claim | None:
        """Take over the claim of a step of `run_id` whose process still runs (its run worker
        died; dead entries are dropped first, so a reused PID never matches): it becomes this
        backend's. None if there is none."""
        with self._transaction() as (state, commit):
            for claim in state.claims:
                if (claim.run_id, claim.job_id) == (run_id, job_id) and claim.pid:
                    mine = replace(claim, owner=self.owner)
                    claims = tuple(mine if c is claim else c for c in state.claims)
                    commit(replace(state, claims=claims))
                    return mine
        return None

    def release(self, job_id: str) -> None:
        """Drop this backend's claim or place in line for `job_id` (done, failed, cancelled)."""
        self._update(job_id, lambda _c: None)

    def leave(self) -> None:
        """Drop everything this backend holds or waits for (its run is over)."""
        with self._transaction() as (state, commit):
            commit(
                LedgerState(
                    tuple(c for c in state.claims if c.owner.token != self.owner.token),
                    tuple(w for w in state.waiters if w.owner.token != self.owner.token),
                    state.next_ticket,
                )
            )

    def snapshot(self) -> LedgerState:
        """The ledger as it stands, dead entries dropped (for tests and diagnostics)."""
        with self._transaction() as (state, _commit):
            return state

    def _update(self, job_id: str, change: Callable[[Claim], Claim | None]) -> None:
        with self._transaction() as (state, commit):
            claims: list[Claim] = []
            for claim in state.claims:
                mine = claim.owner.token == self.owner.token and claim.job_id == job_id
                changed = change(claim) if mine else claim
                if changed is not None:
                    claims.append(changed)
            waiters = tuple(
                w for w in state.waiters if (w.owner.token, w.job_id) != (self.owner.token, job_id)
            )
            commit(LedgerState(tuple(claims), waiters, state.next_ticket))

    @contextlib.contextmanager
    def _transaction(
        self,
    ) -> Iterator[tuple[LedgerState, Callable[[LedgerState], None]]]:
        """The live ledger under an exclusive `flock`; `commit(state)` rewrites it in place."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            stored = _read(fd)
            state = LedgerState(
                tuple(c for c in stored.claims if entry_alive(c)),
                tuple(w for w in stored.waiters if entry_alive(w)),
                stored.next_ticket,
            )
            if state != stored:
                _write(fd, state)

            def commit(new: LedgerState) -> None:
                if new != state:
                    _write(fd, new)

            yield state, commit
        finally:
            os.close(fd)  # closing the file releases the lock


def entry_alive(entry: Claim | Waiter) -> bool:
    """A started step is alive while its process group is; anything else while its owner is."""
    if isinstance(entry, Claim) and entry.pid:
        return process_alive(entry.pid, entry.pid_started) or group_left_behind(entry.pid)
    return process_alive(entry.owner.pid, entry.owner.started)


def _read(fd: int) -> LedgerState:
    """The ledger's first JSON document (a tail left by a write cut short is ignored)."""
    text = os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")
    try:
        raw: dict[str, Any] = json.JSONDecoder().raw_decode(text)[0] if text.strip() else {}
    except ValueError:
        return LedgerState()
    return LedgerState(
        tuple(_claim(c) for c in raw.get("claims", [])),
        tuple(Waiter(**{**w, "owner": Owner(**w["owner"])}) for w in raw.get("waiters", [])),
        int(raw.get("next_ticket", 1)),
    )


def _claim(raw: dict[str, Any]) -> Claim:
    return Claim(**{**raw, "owner": Owner(**raw["owner"]), "gpu_ids": tuple(raw["gpu_ids"])})


def _write(fd: int, state: LedgerState) -> None:
    """One `pwrite` of the whole document, then the old tail cut off (no rename: fast)."""
    data = json.dumps({"version": 1, **asdict(state)}).encode()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))


__all__ = [
    "AdmissionLedger",
    "Claim",
    "LedgerState",
    "Owner",
    "Verdict",
    "Waiter",
    "Want",
    "default_ledger_dir",
    "entry_alive",
    "judge",
]
