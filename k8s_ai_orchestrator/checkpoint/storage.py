"""Byte-level storage of one key's folder on any fsspec filesystem, hashed and durable.

On a local filesystem data files and the manifest are fsync'ed and the manifest is replaced by
an atomic rename; on object stores (`s3://`, `memory://`) one whole-object write is atomic.
Below the store's root nothing is ever reached through a symbolic link: a link anywhere on the
way to a file or folder stops the read, write or prune with `LinkRefused` before it acts.

Example:
    >>> import fsspec
    >>> folder = KeyFolder(fsspec.filesystem("memory"), "/doc-example/k")
    >>> folder.write_file("data/1/x.bin", lambda sink: sink.write(b"hi")).size
    2
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import IO, Any

import pyarrow as pa
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from .manifest import CommitFile

CHUNK = 8 << 20
OVERLAP_MIN = 4 * CHUNK  # from a write this large on, hashing runs in a helper thread
MANIFEST = "manifest.json"


class HashingSink:
    """A write-only file object that hashes what passes through it (pyarrow writes here).

    Once a large write arrives, hashing moves to a helper thread fed in order, so it overlaps
    the remaining writes and the final fsync. Every queued piece is an immutable object kept
    alive by its memoryview (bytes, or an Arrow buffer of the table being saved); call
    `finish()` before trusting `hexdigest()`.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()
        self._hasher: ThreadPoolExecutor | None = None
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self._hasher is None and len(view) >= OVERLAP_MIN:
            self._hasher = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-sha256")
        if self._hasher is None:
            self._hash.update(view)
        else:
            self._hasher.submit(self._hash.update, view if len(view) >= CHUNK else bytes(view))
        done = 0
        while done < len(view):
            written = self._raw.write(view[done:])
            done += len(view) - done if written is None else written
        self.size += done
        return done

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        self.closed = True

    def finish(self) -> None:
        """Wait until everything written has been hashed."""
        if self._hasher is not None:
            self._hasher.shutdown(wait=True)
            self._hasher = None

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class ChecksumMismatch(Exception):
    """A data file does not match the sha256 its commit recorded."""


class LinkRefused(OSError):
    """A path below the store root is a symbolic link; nothing was read, written or deleted."""


class KeyFolder:
    """The files of one checkpoint key, relative to `base` on `fs`.

    `root` is the store's root (default: `base` itself); on a local disk every path from the
    root down is checked to be no symbolic link before it is used.
    """

    def __init__(self, fs: AbstractFileSystem, base: str, root: str | None = None) -> None:
        self.fs = fs
        self.base = base.rstrip("/")
        self.root = (root or base).rstrip("/") or "/"
        self.local = isinstance(fs, LocalFileSystem)

    def path(self, rel: str) -> str:
        return f"{self.base}/{rel}"

    def _unlinked(self, path: str) -> str:
        """`path`, after checking that no component below the root is a symbolic link."""
        if not self.local:
            return path
        prefix = self.root.rstrip("/") + "/"
        if not path.startswith(prefix):
            raise LinkRefused(f"{path} is outside the store root {self.root}")
        current = self.root.rstrip("/")
        for part in path[len(prefix) :].split("/"):
            current = f"{current}/{part}"
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                return path  # nothing below a missing component exists yet
            if stat.S_ISLNK(mode):
                raise LinkRefused(
                    f"{current} is a symbolic link (to {os.readlink(current)!r}); checkpoints "
                    f"never follow links below the store root {self.root}: remove the link "
                    "and point the store's root at the real folder instead"
                )
        return path

    def write_file(self, rel: str, produce: Callable[[HashingSink], object]) -> CommitFile:
        """Create `rel` with what `produce` writes into the sink; durable once this returns."""
        sinks: list[HashingSink] = []
        try:
            with self._open_write(self.path(rel)) as raw:
                sinks.append(HashingSink(raw))
                produce(sinks[0])
                sinks[0].flush()
            # the file is fsync'ed by now; hashing ran alongside the writes and the fsync
        finally:
            for sink in sinks:
                sink.finish()
        return CommitFile(rel, sinks[0].size, sinks[0].hexdigest())

    def read_buffer(self, cf: CommitFile) -> pa.Buffer:
        """Whole file as a pyarrow buffer (memory-mapped on local disks), checksum verified."""
        buffer = self._map(cf)
        _verify(cf, buffer.size, hashlib.sha256(memoryview(buffer)).hexdigest())
        return buffer

    def read_bytes(self, cf: CommitFile) -> bytes:
        """Whole file as bytes, checksum verified; hashing overlaps the copy out of the map."""
        buffer = self._map(cf)
        if buffer.size < OVERLAP_MIN:
            data = buffer.to_pybytes()
            _verify(cf, len(data), hashlib.sha256(data).hexdigest())
            return data
        with ThreadPoolExecutor(1, thread_name_prefix="checkpoint-sha256") as hasher:
            digest = hasher.submit(lambda: hashlib.sha256(memoryview(buffer)).hexdigest())
            data = buffer.to_pybytes()
            _verify(cf, len(data), digest.result())
        return data

    def _map(self, cf: CommitFile) -> pa.Buffer:
        path = self._unlinked(self.path(cf.path))
        if self.local:
            return pa.memory_map(path, "r").read_buffer()
        return pa.py_buffer(self.fs.cat_file(path))

    def download_verified(self, cf: CommitFile, local_path: str) -> None:
        """Copy one data file to a local path, checking size and checksum as it streams."""
        digest, size = hashlib.sha256(), 0
        source = self._unlinked(self.path(cf.path))
        with self.fs.open(source, "rb") as src, open(local_path, "wb") as dst:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                dst.write(chunk)
                size += len(chunk)
        _verify(cf, size, digest.hexdigest())

    def read_manifest(self) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._unlinked(self.path(MANIFEST))))
        except FileNotFoundError:
            return None

    def replace_manifest(self, content: bytes) -> None:
        """Atomically make `content` the manifest: the commit point of a save."""
        target = self._unlinked(self.path(MANIFEST))
        if not self.local:
            self.fs.pipe_file(target, content)
            return
        tmp = self.path(f".{MANIFEST}.{uuid.uuid4().hex}.tmp")
        with self._open_write(tmp) as f:
            f.write(content)
        os.replace(tmp, target)
        _fsync_dir(self.base)

    def remove_commits_except(self, keep_ids: set[str]) -> None:
        """Delete every `data/<id>` not in `keep_ids` (old commits and half-written ones).

        On a local disk a commit folder that is a link is unlinked, never followed.
        """
        data = self._unlinked(self.path("data"))
        if self.local:
            _remove_local_except(data, keep_ids)
            return
        try:
            entries = self.fs.ls(data, detail=False, refresh=True)
        except FileNotFoundError:
            return
        for entry in entries:
            if str(entry).rstrip("/").rsplit("/", 1)[-1] not in keep_ids:
                self.fs.rm(entry, recursive=True)

    def remove_all(self) -> None:
        base = self._unlinked(self.base)
        if self.local:
            if os.path.lexists(base):
                shutil.rmtree(base)
        elif self.fs.exists(base):
            self.fs.rm(base, recursive=True)

    @contextmanager
    def _open_write(self, path: str) -> Iterator[IO[bytes]]:
        if not self.local:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            with self.fs.open(path, "wb") as f:
                yield f
            return
        self._unlinked(path)
        parent = os.path.dirname(path)
        new_dir = not os.path.isdir(parent)
        os.makedirs(parent, exist_ok=True)
        self._unlinked(path)  # nothing turned into a link while the folders were made
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with open(os.open(path, flags, 0o644), "wb", buffering=0) as f:
            yield f  # type: ignore[misc]
            os.fsync(f.fileno())
        if new_dir:
            _fsync_dir(parent)
            _fsync_dir(os.path.dirname(parent))


def _verify(cf: CommitFile, size: int, digest: str) -> None:
    if size != cf.size or digest != cf.sha256:
        raise ChecksumMismatch(
            f"{cf.path}: expected {cf.size} bytes with sha256 {cf.sha256[:12]}…, "
            f"found {size} bytes with sha256 {digest[:12]}…"
        )


def _remove_local_except(data: str, keep_ids: set[str]) -> None:
    try:
        entries = list(os.scandir(data))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name in keep_ids:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)  # removes links inside without following them
        else:
            os.unlink(entry.path)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
