"""The manifest: the one small file whose replacement commits a checkpoint.

A key's folder holds `manifest.json` and `data/<commit id>/...`. Data is written first under a
name no other commit uses; the manifest naming it is replaced last, so a reader sees either
the old set of commits or the new one. Each data file's sha256 is recorded and checked on load.

Example:
    >>> c = Commit("000001-ab12cd34", 1, "json", (CommitFile("data/000001-ab12cd34/state.json",
    ...     2, "44136fa3"),), progress=5, saved_at=0.0, attempt=0, run_id=None)
    >>> parse_manifest(Manifest("v1", (c,)).to_json()).commits[0].progress
    5
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

FORMAT = "k8s-ai-checkpoint/1"
KINDS = ("json", "bytes", "arrow", "dir")


@dataclass(frozen=True)
class CommitFile:
    """One data file of a commit."""

    path: str  # relative to the key folder: data/<commit id>/<name>
    size: int  # bytes
    sha256: str  # hex digest of the file's bytes


@dataclass(frozen=True)
class Commit:
    """One committed checkpoint."""

    id: str  # "<seq:06d>-<random hex>", unique per commit
    seq: int  # 1, 2, ... within a fingerprint
    kind: str  # one of KINDS: how `files` decode into state
    files: tuple[CommitFile, ...]
    progress: int | float | None  # the step's own measure of work done, shown after resume
    saved_at: float  # unix time of the commit
    attempt: int  # infrastructure attempt that wrote it (K8S_AI_ATTEMPT)
    run_id: str | None  # Dagster run that wrote it, when known

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "seq": self.seq,
            "kind": self.kind,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
            "progress": self.progress,
            "saved_at": self.saved_at,
            "attempt": self.attempt,
            "run_id": self.run_id,
        }


@dataclass(frozen=True)
class Manifest:
    """The committed state of one key: its fingerprint and its commits, newest first."""

    fingerprint: str
    commits: tuple[Commit, ...] = ()

    def to_json(self) -> bytes:
        doc = {
            "format": FORMAT,
            "fingerprint": self.fingerprint,
            "commits": [c.to_dict() for c in self.commits],
        }
        return json.dumps(doc, indent=1).encode()


def parse_manifest(raw: bytes) -> Manifest:
    """Parse and validate a manifest; any defect raises `ValueError` saying what is wrong."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"'format' is not {FORMAT!r}")
    fingerprint = doc.get("fingerprint")
    commits = doc.get("commits")
    if not isinstance(fingerprint, str) or not isinstance(commits, list):
        raise ValueError("'fingerprint' must be a string and 'commits' a list")
    return Manifest(fingerprint, tuple(_parse_commit(c) for c in commits))


def _parse_commit(doc: Any) -> Commit:
    try:
        files = tuple(
            CommitFile(_safe_relpath(f["path"]), int(f["size"]), str(f["sha256"]))
            for f in doc["files"]
        )
        commit = Commit(
            id=str(doc["id"]),
            seq=int(doc["seq"]),
            kind=str(doc["kind"]),
            files=files,
            progress=_number_or_none(doc.get("progress")),
            saved_at=float(doc["saved_at"]),
            attempt=int(doc.get("attempt", 0)),
            run_id=None if doc.get("run_id") is None else str(doc["run_id"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"commit entry {doc!r:.200} is malformed ({exc!r})") from None
    if commit.kind not in KINDS:
        raise ValueError(f"commit {commit.id} has unknown kind {commit.kind!r}")
    return commit


def _number_or_none(value: Any) -> int | float | None:
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    raise ValueError(f"progress {value!r} is not a number")


def _safe_relpath(path: Any) -> str:
    """Reject manifest paths that would leave the key's data folder (hand-edited manifests)."""
    if not isinstance(path, str) or not path.startswith("data/"):
        raise ValueError(f"file path {path!r} is not under data/")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in path:
        raise ValueError(f"file path {path!r} is not a plain relative path")
    return path
