"""`CheckpointHandle`: load, save, and know when to save, for one step.

The step contract (also in docs/checkpoints.md):

    state = ckpt.load() or fresh_state()
    for unit in remaining(state):
        work(unit)
        if ckpt.due():                      # interval elapsed, or SIGTERM/SIGUSR2 arrived
            ckpt.save(state, progress=n)    # after a preemption notice: commits, then raises
                                            # Preempted (opt out: stop_after_preempted_save)

Example:
    >>> from k8s_ai_orchestrator.checkpoint import CheckpointStore
    >>> store = CheckpointStore(root="memory://doc-handle", handle_signals=False)
    >>> ckpt = store.open("demo")
    >>> ckpt.load() is None
    True
    >>> _ = ckpt.save({"next_tile": 12}, progress=12)
    >>> store.open("demo").load()
    {'next_tile': 12}
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import pyarrow as pa

from ..errors import CheckpointError
from .codecs import State, decode, decode_table, encode
from .keys import CheckpointKey, what_changed
from .manifest import Commit, CommitFile, Manifest, parse_manifest
from .signals import Preempted, PreemptionWatch, work_lost_phrase
from .storage import CHUNK, ChecksumMismatch, HashingSink, KeyFolder, LinkRefused

_CORRUPT = (ChecksumMismatch, FileNotFoundError, ValueError, pa.ArrowInvalid, OSError)


class Log(Protocol):
    """Where warnings go: a Dagster `context.log` or a `logging.Logger`."""

    def info(self, msg: str) -> Any: ...

    def warning(self, msg: str) -> Any: ...


@dataclass(frozen=True)
class HandleSettings:
    """How a handle behaves; filled from `CheckpointStore` config and the step environment."""

    keep: int = 2  # commits kept; older ones are deleted after each save
    interval_s: float = 300.0  # due() turns true this long after the last save
    clear_on_success: bool = True  # close(succeeded=True) deletes the key's checkpoints
    stop_after_preempted_save: bool = True  # save() raises Preempted after a preemption notice
    attempt: int = 0  # infrastructure attempt (K8S_AI_ATTEMPT), recorded on commits
    run_id: str | None = None  # recorded on commits


class CheckpointHandle:
    """The checkpoints of one step (asset/op + partition + fingerprint).

    Obtain one with `CheckpointStore.open(...)`; use it as a context manager so the signal
    handlers are given back and `clear_on_success` applies when the block succeeds.
    """

    def __init__(
        self,
        folder: KeyFolder,
        key: CheckpointKey,
        settings: HandleSettings,
        *,
        log: Log,
        watch: PreemptionWatch,
        install_signals: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.key = key
        self._folder = folder
        self._settings = settings
        self._log = log
        self._watch = watch
        self._clock = clock
        self._wall_clock = wall_clock
        self._last_save = clock()
        self._manifest: Manifest | None = None
        self._resumed: Commit | None = None
        self._bad: set[str] = set()
        self._closed = False
        self._stopped = False  # Preempted was raised: not finished, never cleared
        self._owns_signals = install_signals and watch.acquire()

    # ---- reading -------------------------------------------------------------------------

    def load(self) -> State | None:
        """The latest intact committed state, or None when there is none (a fresh start).

        A commit whose data is missing or fails its checksum is skipped with a warning and the
        previous one is used.
        """
        found = self._first_intact("state", self._read_state)
        return None if found is None else found[1]

    def restore_dir(self, local_path: str | os.PathLike[str]) -> bool:
        """Write the latest folder saved with `save_dir` into `local_path`; False if none.

        Files are verified in a staging folder next to `local_path` first, then moved in,
        replacing files of the same name; other files in `local_path` are left alone.
        """
        target = Path(local_path)
        return self._first_intact("dir", lambda c: self._restore_into(c, target)) is not None

    @property
    def latest(self) -> Commit | None:
        """The newest commit this handle knows of (loaded, or saved by it)."""
        commits = self._committed().commits
        return commits[0] if commits else None

    def resume_metadata(self) -> dict[str, Any]:
        """Materialization metadata saying what this step resumed from; {} after a fresh start.

        Example:
            >>> from k8s_ai_orchestrator.checkpoint import CheckpointStore
            >>> store = CheckpointStore(root="memory://doc-meta", handle_signals=False)
            >>> store.open("never-saved").resume_metadata()
            {}
        """
        c = self._resumed
        if c is None:
            return {}
        return {
            "resumed_from_checkpoint": c.id,
            "resumed_checkpoint_saved_at": time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(c.saved_at)
            ),
            "resumed_progress": c.progress,
            "checkpoint_attempt": c.attempt,
        }

    # ---- writing -------------------------------------------------------------------------

    def save(self, state: State, *, progress: int | float | None = None) -> Commit:
        """Commit `state` atomically: a dict of JSON values, bytes, or a pyarrow Table.

        After a preemption notice the commit is made and then the step stops: `Preempted` is
        raised, as by `exit_if_preempted()`, unless the store has
        `stop_after_preempted_save=False`.

        Raises:
            CheckpointError: the state cannot be serialized (the message names its type) or
                the store cannot be written.
            Preempted: a preemption notice arrived; the state was committed first.
        """
        kind, name, produce = encode(state)
        return self._commit(
            kind, lambda cid: [self._folder.write_file(f"data/{cid}/{name}", produce)], progress
        )

    def save_dir(
        self, local_path: str | os.PathLike[str], *, progress: int | float | None = None
    ) -> Commit:
        """Commit every file under a local folder (a framework checkpoint) atomically; after a
        preemption notice it stops the step like `save()`."""
        root = Path(local_path)
        if not root.is_dir():
            raise CheckpointError(
                f"save_dir({str(local_path)!r}) for {self.key.describe()}: not a directory; "
                "pass the folder your framework wrote its checkpoint into"
            )
        files = sorted(p for p in root.rglob("*") if p.is_file())

        def write_all(cid: str) -> list[CommitFile]:
            return [
                self._folder.write_file(
                    f"data/{cid}/dir/{p.relative_to(root).as_posix()}", _copier(p)
                )
                for p in files
            ]

        return self._commit("dir", write_all, progress)

    def clear(self) -> None:
        """Delete all checkpoints of this key (for example once the step's output is safe)."""
        try:
            self._folder.remove_all()
        except LinkRefused as exc:
            raise CheckpointError(f"clearing {self.key.describe()}: {exc}") from exc
        self._manifest = Manifest(self.key.fingerprint)

    # ---- preemption ----------------------------------------------------------------------

    @property
    def preempted(self) -> bool:
        """True once SIGTERM or SIGUSR2 reached this process while a handle was open."""
        return self._watch.received is not None

    def due(self) -> bool:
        """True when a save is due: `interval_s` elapsed since the last save, or preempted."""
        elapsed = self._clock() - self._last_save
        return self.preempted or elapsed >= self._settings.interval_s

    def exit_if_preempted(self) -> None:
        """Raise `Preempted` if a preemption signal arrived (`save()` calls it by default)."""
        if not self.preempted:
            return
        self._stopped = True
        latest = self.latest
        where = "no checkpoint saved yet" if latest is None else f"checkpoint {latest.id}"
        progress = None if latest is None else latest.progress
        # what a relaunch redoes: the work since the checkpoint it resumes from (none when
        # `save()` stopped it, right after its commit)
        lost = None if latest is None else max(0.0, self._wall_clock() - latest.saved_at)
        lost_words = "" if lost is None else f"; {work_lost_phrase(lost)}"
        raise Preempted.notice(
            f"{self.key.describe()} received {self._watch.received_name} and stopped "
            f"({where}, progress {progress}{lost_words}); the executor relaunches it and it "
            "resumes there",
            metadata={
                "preempted_by": self._watch.received_name or "",
                "checkpoint": "" if latest is None else latest.id,
                "checkpoint_progress": progress,
                "work_lost_s": lost,
            },
        )

    # ---- lifetime ------------------------------------------------------------------------

    def close(self, *, succeeded: bool = False) -> None:
        """Give back the signal handlers; with `succeeded` and `clear_on_success`, clear.

        A step that stopped for a preemption (`Preempted` was raised, even if the step caught
        it) has not finished: its checkpoints stay for the relaunch.
        """
        if self._closed:
            return
        self._closed = True
        if self._owns_signals:
            self._watch.release()
        if succeeded and self._settings.clear_on_success and not self._stopped:
            self.clear()

    def __enter__(self) -> CheckpointHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(succeeded=exc_type is None)

    # ---- internals -----------------------------------------------------------------------

    def _committed(self) -> Manifest:
        if self._manifest is None:
            self._manifest = self._read_manifest()
        return self._manifest

    def _read_manifest(self) -> Manifest:
        fresh = Manifest(self.key.fingerprint)
        where = f"{self.key.describe()} at {self._folder.base}"
        try:
            raw = self._folder.read_manifest()
        except LinkRefused as exc:
            raise CheckpointError(f"reading {self.key.describe()}: {exc}") from exc
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoints of {where}: {exc}") from exc
        if raw is None:
            return fresh
        try:
            manifest = parse_manifest(raw)
        except ValueError as exc:
            self._log.warning(
                f"checkpoint manifest of {where} is unreadable ({exc}); starting fresh — "
                "the next save replaces it"
            )
            return fresh
        if manifest.fingerprint != self.key.fingerprint:
            changed = what_changed(manifest.fingerprint, self.key.fingerprint)
            fix = (
                "To resume across versions pass the old value: open(context, fingerprint=...)"
                if changed.startswith("its code")
                else "A checkpoint made on other inputs is never resumed"
            )
            self._log.warning(
                f"checkpoints of {where} were saved with fingerprint {manifest.fingerprint!r} "
                f"but this step's is {self.key.fingerprint!r} ({changed}); starting fresh and "
                f"ignoring {len(manifest.commits)} old commit(s). {fix}"
            )
            return fresh
        return manifest

    def _first_intact(self, want: str, read: Callable[[Commit], Any]) -> tuple[Commit, Any] | None:
        commits = [c for c in self._committed().commits if c.id not in self._bad]
        for commit in commits:
            if (commit.kind == "dir") != (want == "dir"):
                saved_with, use = ("save_dir", "restore_dir") if want != "dir" else ("save", "load")
                raise CheckpointError(
                    f"checkpoint {commit.id} of {self.key.describe()} was written with "
                    f"{saved_with}(); read it with {use}()"
                )
            try:
                value = read(commit)
            except LinkRefused as exc:
                raise CheckpointError(f"reading {self.key.describe()}: {exc}") from exc
            except _CORRUPT as exc:
                self._bad.add(commit.id)
                self._log.warning(
                    f"checkpoint {commit.id} of {self.key.describe()} is corrupt or incomplete "
                    f"({exc}); falling back to the previous commit"
                )
                continue
            self._resumed = commit
            self._log.info(
                f"resuming {self.key.describe()} from checkpoint {commit.id} "
                f"(progress {commit.progress}, saved by attempt {commit.attempt})"
            )
            return commit, value
        if commits:
            self._log.warning(f"no intact checkpoint of {self.key.describe()}; starting fresh")
        return None

    def _read_state(self, commit: Commit) -> State:
        if len(commit.files) != 1:
            raise ValueError(f"a {commit.kind} commit has {len(commit.files)} files, not 1")
        if commit.kind == "arrow":
            return decode_table(self._folder.read_buffer(commit.files[0]))
        return decode(commit.kind, self._folder.read_bytes(commit.files[0]))

    def _restore_into(self, commit: Commit, target: Path) -> None:
        prefix = f"data/{commit.id}/dir/"
        if any(not f.path.startswith(prefix) for f in commit.files):
            raise ValueError(f"commit files are not under {prefix}")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.parent / f".{target.name}.restore-{uuid.uuid4().hex[:8]}"
        try:
            for f in commit.files:
                dest = staging / f.path[len(prefix) :]
                dest.parent.mkdir(parents=True, exist_ok=True)
                self._folder.download_verified(f, str(dest))
            target.mkdir(exist_ok=True)
            for f in commit.files:
                rel = f.path[len(prefix) :]
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / rel, target / rel)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _commit(
        self,
        kind: str,
        write_files: Callable[[str], Sequence[CommitFile]],
        progress: int | float | None,
    ) -> Commit:
        if progress is not None and (
            isinstance(progress, bool) or not isinstance(progress, int | float)
        ):
            raise CheckpointError(f"progress={progress!r} must be an int, a float or None")
        base = self._committed()
        seq = max((c.seq for c in base.commits), default=0) + 1
        cid = f"{seq:06d}-{uuid.uuid4().hex[:8]}"
        try:
            files = tuple(write_files(cid))
            commit = Commit(
                cid, seq, kind, files, progress, self._wall_clock(),
                self._settings.attempt, self._settings.run_id,
            )  # fmt: skip
            older = [c for c in base.commits if c.id not in self._bad]
            manifest = Manifest(self.key.fingerprint, (commit, *older[: self._settings.keep - 1]))
            self._folder.replace_manifest(manifest.to_json())
        except LinkRefused as exc:
            raise CheckpointError(f"saving {self.key.describe()}: {exc}") from exc
        except OSError as exc:
            raise CheckpointError(
                f"saving checkpoint of {self.key.describe()} to {self._folder.base} failed: "
                f"{exc}; check the store's free space and write permission"
            ) from exc
        self._manifest = manifest
        self._last_save = self._clock()
        try:
            self._folder.remove_commits_except({c.id for c in manifest.commits})
        except OSError as exc:
            self._log.warning(f"could not delete old checkpoints of {self.key.describe()}: {exc}")
        if self._settings.stop_after_preempted_save:
            self.exit_if_preempted()
        return commit


def _copier(path: Path) -> Callable[[HashingSink], None]:
    def copy(sink: HashingSink) -> None:
        with open(path, "rb") as src:
            while chunk := src.read(CHUNK):
                sink.write(chunk)

    return copy
