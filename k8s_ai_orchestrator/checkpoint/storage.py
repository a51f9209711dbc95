"""Byte-level storage of one key's folder on any fsspec filesystem, hashed and durable.

On a local filesystem data files and the manifest are fsync'ed and the manifest is replaced by
an atomic rename; on object stores (`s3://`, `memory://`) one whole-object write is atomic.

Example:
    >>> import fsspec
    >>> folder = KeyFolder(fsspec.filesystem("memory"), "/doc-example/k")
    >>> folder.write_file("data/1/x.bin", lambda sink: sink.write(b"hi")).size
    2
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

import pyarrow as pa
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from .manifest import CommitFile

CHUNK = 8 << 20
MANIFEST = "manifest.json"


class HashingSink:
    """A write-only file object that hashes what passes through it (pyarrow writes here)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._hash.update(view)
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

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class ChecksumMismatch(Exception):
    """A data file does not match the sha256 its commit recorded."""


class KeyFolder:
    """The files of one checkpoint key, relative to `base` on `fs`."""

    def __init__(self, fs: AbstractFileSystem, base: str) -> None:
        self.fs = fs
        self.base = base.rstrip("/")
        self.local = isinstance(fs, LocalFileSystem)

    def path(self, rel: str) -> str:
        return f"{self.base}/{rel}"

    def write_file(self, rel: str, produce: Callable[[HashingSink], object]) -> CommitFile:
        """Create `rel` with what `produce` writes into the sink; durable once this returns."""
        with self._open_write(self.path(rel)) as raw:
            sink = HashingSink(raw)
            produce(sink)
            sink.flush()
        return CommitFile(rel, sink.size, sink.hexdigest())

    def read_buffer(self, cf: CommitFile) -> pa.Buffer:
        """Whole file as a pyarrow buffer (memory-mapped on local disks), checksum verified."""
        path = self.path(cf.path)
        if self.local:
            buffer = pa.memory_map(path, "r").read_buffer()
        else:
            buffer = pa.py_buffer(self.fs.cat_file(path))
        _verify(cf, buffer.size, hashlib.sha256(memoryview(buffer)).hexdigest())
        return buffer

    def download_verified(self, cf: CommitFile, local_path: str) -> None:
        """Copy one data file to a local path, checking size and checksum as it streams."""
        digest, size = hashlib.sha256(), 0
        with self.fs.open(self.path(cf.path), "rb") as src, open(local_path, "wb") as dst:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                dst.write(chunk)
                size += len(chunk)
        _verify(cf, size, digest.hexdigest())

    def read_manifest(self) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self.path(MANIFEST)))
        except FileNotFoundError:
            return None

    def replace_manifest(self, content: bytes) -> None:
        """Atomically make `content` the manifest: the commit point of a save."""
        target = self.path(MANIFEST)
        if not self.local:
            self.fs.pipe_file(target, content)
            return
        tmp = self.path(f".{MANIFEST}.{uuid.uuid4().hex}.tmp")
        with self._open_write(tmp) as f:
            f.write(content)
        os.replace(tmp, target)
        _fsync_dir(self.base)

    def remove_commits_except(self, keep_ids: set[str]) -> None:
        """Delete every `data/<id>` not in `keep_ids` (old commits and half-written ones)."""
        data = self.path("data")
        try:
            entries = self.fs.ls(data, detail=False, refresh=True)
        except FileNotFoundError:
            return
        for entry in entries:
            if str(entry).rstrip("/").rsplit("/", 1)[-1] not in keep_ids:
                self.fs.rm(entry, recursive=True)

    def remove_all(self) -> None:
        if self.fs.exists(self.base):
            self.fs.rm(self.base, recursive=True)

    @contextmanager
    def _open_write(self, path: str) -> Iterator[IO[bytes]]:
        if not self.local:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            with self.fs.open(path, "wb") as f:
                yield f
            return
        parent = os.path.dirname(path)
        new_dir = not os.path.isdir(parent)
        os.makedirs(parent, exist_ok=True)
        with open(path, "wb", buffering=0) as f:
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


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
