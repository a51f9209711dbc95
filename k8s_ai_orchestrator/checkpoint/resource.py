"""`CheckpointStore`: the Dagster resource that hands each step its checkpoint handle.

Example:
    >>> store = CheckpointStore(root="memory://doc-store", interval_s=60)
    >>> with store.open("nightly-mosaic") as ckpt:
    ...     state = ckpt.load() or {"next_tile": 0}
    >>> state
    {'next_tile': 0}
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import fsspec
from dagster import (
    AssetExecutionContext,
    ConfigurableResource,
    EnvVar,
    InitResourceContext,
    OpExecutionContext,
)
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem
from pydantic import Field, PrivateAttr, field_validator

from ..errors import CheckpointError
from ..stepenv import RUN_ID, StepEnv
from .handle import CheckpointHandle, HandleSettings, Log
from .keys import CheckpointKey, key_from_context
from .manifest import FORMAT
from .signals import PROCESS_WATCH
from .storage import KeyFolder

LOGGER = logging.getLogger("k8s_ai_orchestrator.checkpoint")
_INSTALL_HINTS = {
    "s3": "pip install 'k8s-ai-orchestrator[s3]'  (installs s3fs)",
    "gs": "pip install gcsfs",
    "gcs": "pip install gcsfs",
    "az": "pip install adlfs",
    "abfs": "pip install adlfs",
}


class CheckpointStore(ConfigurableResource):  # type: ignore[misc]
    """Checkpoints for long steps, on any fsspec filesystem (`file://`, `s3://`, `memory://`).

    Checkpoints are keyed by asset (or op) + partition + fingerprint, not by run id, so a
    relaunch after preemption, a retry and a manual re-run all resume where the last commit
    left off.

    Example:
        >>> from dagster import asset
        >>> @asset(code_version="v1")
        ... def embeddings(context, checkpoints: CheckpointStore):
        ...     with checkpoints.open(context) as ckpt:
        ...         state = ckpt.load() or {"done": 0}
        ...         ...
    """

    root: str = Field(description="Where checkpoints live: file:///data/ckpt, s3://bucket/ckpt")
    keep: int = Field(default=2, description="Commits kept per key (>= 1); older are deleted")
    interval_s: float = Field(default=300.0, description="due() turns true this often (s)")
    clear_on_success: bool = Field(
        default=True,
        description="Delete a key's checkpoints when its `with store.open(...)` block succeeds "
        "(and, with AICompute.run(checkpoints=...), when the program succeeds), so a finished "
        "checkpoint never satisfies a later materialization",
    )
    handle_signals: bool = Field(
        default=True,
        description="Turn SIGTERM/SIGUSR2 into a save-then-exit notice (see docs/checkpoints.md)",
    )
    stop_after_preempted_save: bool = Field(
        default=True,
        description="After a preemption notice, save() commits and then raises Preempted; "
        "False lets a step finish its unit of work and call exit_if_preempted() itself",
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Passed to fsspec, e.g. {'endpoint_url': 'http://minio:9000'} for s3",
    )

    @field_validator("root", mode="before")
    @classmethod
    def _root_is_usable(cls, root: Any) -> Any:
        # refused when the store is made, not at a step's first open(); an EnvVar is read,
        # and checked, at run time
        if isinstance(root, str) and not isinstance(root, EnvVar):
            _check_root(root)
        return root

    _fs: AbstractFileSystem | None = PrivateAttr(default=None)
    _base: str = PrivateAttr(default="")
    _handles: list[CheckpointHandle] = PrivateAttr(default_factory=list)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        """Check the root before any step runs: bad protocol or unwritable root fail here."""
        self._filesystem()

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        """Close handles the step left open, giving back their signal handlers (no clearing)."""
        while self._handles:
            self._handles.pop().close()

    def open(
        self,
        context_or_key: Any,
        *,
        fingerprint: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> CheckpointHandle:
        """The checkpoint handle of a step (from its Dagster context) or of a plain string key.

        Args:
            context_or_key: an `AssetExecutionContext` / `OpExecutionContext`, or a string.
            fingerprint: identity of the code that wrote the state; commits with another
                fingerprint are ignored (with a warning). Default: the asset's code version
                for a context, "" for a string key.
            clock: monotonic seconds for `due()`; tests pass a fake one.

        Raises:
            CheckpointError: the root cannot be used, or the key is empty.
        """
        fs, base = self._filesystem()
        key = self._key(context_or_key, fingerprint)
        log: Log
        if isinstance(context_or_key, str):
            log, run_id = LOGGER, os.environ.get(RUN_ID)
        else:
            log, run_id = context_or_key.log, context_or_key.run.run_id
        settings = HandleSettings(
            keep=self.keep,
            interval_s=self.interval_s,
            clear_on_success=self.clear_on_success,
            stop_after_preempted_save=self.stop_after_preempted_save,
            attempt=StepEnv.current().attempt,
            run_id=run_id,
        )
        folder = KeyFolder(fs, f"{base}/{key.relative_path()}", root=base)
        handle = CheckpointHandle(
            folder,
            key,
            settings,
            log=log,
            watch=PROCESS_WATCH,
            install_signals=self.handle_signals,
            clock=clock,
        )
        if not isinstance(context_or_key, str):
            self._handles.append(handle)
        return handle

    def clear(self, context_or_key: Any, *, fingerprint: str | None = None) -> None:
        """Delete every checkpoint of a step (or string key), e.g. once its output is stored.

        Example:
            >>> store = CheckpointStore(root="memory://doc-clear", handle_signals=False)
            >>> _ = store.open("tiles").save({"next": 3})
            >>> store.clear("tiles")
            >>> store.open("tiles").load() is None
            True
        """
        self._quiet_handle(context_or_key, fingerprint).clear()

    def last_saved_at(self, context_or_key: Any, *, fingerprint: str | None = None) -> float | None:
        """When the step's newest intact-looking commit was saved (unix time), None without
        one; read only, no handle kept. `AICompute` reads it after a preempted attempt: the
        work since then is what its relaunch redoes.

        Example:
            >>> store = CheckpointStore(root="memory://doc-saved-at", handle_signals=False)
            >>> store.last_saved_at("tiles") is None
            True
            >>> _ = store.open("tiles").save({"next": 3})
            >>> store.last_saved_at("tiles") > 0
            True
        """
        latest = self._quiet_handle(context_or_key, fingerprint).latest
        return None if latest is None else latest.saved_at

    def _quiet_handle(self, context_or_key: Any, fingerprint: str | None) -> CheckpointHandle:
        """A handle of the key that installs no signal handler and is not kept: for the
        store's own reads and deletes outside a step."""
        fs, base = self._filesystem()
        key = self._key(context_or_key, fingerprint)
        folder = KeyFolder(fs, f"{base}/{key.relative_path()}", root=base)
        return CheckpointHandle(
            folder, key, HandleSettings(), log=LOGGER, watch=PROCESS_WATCH, install_signals=False
        )

    def location(self, context_or_key: Any, *, fingerprint: str | None = None) -> dict[str, str]:
        """Where a step's checkpoints live, for a program that runs without Dagster.

        `AICompute.run(checkpoints=...)` hands this to the program as the Pipes extra
        `k8s_ai_checkpoint`; docs/pipes-resource.md shows the lines that load and save there.

        Returns:
            `url` (the key's folder), `path` (the same on a local filesystem, else ""),
            `fingerprint` (commits with another one are ignored) and `format`.

        Example:
            >>> store = CheckpointStore(root="memory://doc-location")
            >>> store.location("nightly-mosaic")["url"]
            'memory:///doc-location/keys/nightly-mosaic/unpartitioned'
        """
        fs, base = self._filesystem()
        key = self._key(context_or_key, fingerprint)
        folder = f"{base}/{key.relative_path()}"
        local = isinstance(fs, LocalFileSystem)
        return {
            "url": fs.unstrip_protocol(folder),
            "path": folder if local else "",
            "fingerprint": key.fingerprint,
            "format": FORMAT,
        }

    @staticmethod
    def _key(context_or_key: Any, fingerprint: str | None) -> CheckpointKey:
        if isinstance(context_or_key, str):
            return CheckpointKey((context_or_key,), fingerprint=fingerprint or "", namespace="keys")
        if not isinstance(context_or_key, AssetExecutionContext | OpExecutionContext):
            raise CheckpointError(
                f"open({context_or_key!r}): pass the step's Dagster context "
                "(open(context)) or a non-empty string key (open('nightly-mosaic')), "
                f"not a {type(context_or_key).__name__}"
            )
        return key_from_context(context_or_key, fingerprint)

    def _filesystem(self) -> tuple[AbstractFileSystem, str]:
        if self._fs is None:
            self._check_settings()
            fs, base = _connect(self.root, self.storage_options)
            _probe_writable(fs, base, self.root)
            self._fs, self._base = fs, base
        return self._fs, self._base

    def _check_settings(self) -> None:
        _check_root(self.root)
        if self.keep < 1:
            raise CheckpointError(f"CheckpointStore keep={self.keep}: keep at least 1 commit")
        if not self.interval_s > 0:
            raise CheckpointError(
                f"CheckpointStore interval_s={self.interval_s}: use a number of seconds > 0"
            )


def _check_root(root: str) -> None:
    """Refuse a root that each process would resolve against its own working directory."""
    hint = (
        "use an absolute path such as 'file:///data/checkpoints' or a remote URL such as "
        "'s3://bucket/checkpoints'"
    )
    if not root.strip():
        raise CheckpointError(f"CheckpointStore root={root!r} is empty; {hint}")
    if any(ord(char) < 32 or ord(char) == 127 for char in root):
        raise CheckpointError(
            f"CheckpointStore root={root!r} contains a control character (newline, tab, NUL, "
            f"...); {hint}"
        )
    protocol, sep, rest = root.partition("://")
    if sep and protocol not in ("file", "local"):
        return  # a remote URL (s3://, gs://, memory://): the same place for every process
    if not (rest if sep else root).startswith("/"):
        raise CheckpointError(
            f"CheckpointStore root={root!r} is a relative path: every process would resolve it "
            "against its own working directory, so a step relaunched on another pod or node "
            f"would never find its checkpoints; {hint}"
        )


def _connect(root: str, options: dict[str, Any]) -> tuple[AbstractFileSystem, str]:
    protocol = root.split("://", 1)[0] if "://" in root else "file"
    try:
        fs, base = fsspec.core.url_to_fs(root, **options)
    except ImportError as exc:
        hint = _INSTALL_HINTS.get(protocol, f"install the fsspec driver for {protocol}://")
        raise CheckpointError(
            f"CheckpointStore root={root!r} needs an optional package: {hint} ({exc})"
        ) from exc
    except ValueError as exc:
        raise CheckpointError(
            f"CheckpointStore root={root!r}: unknown protocol {protocol!r}; use file://, "
            "s3:// or memory:// (or another fsspec protocol whose driver is installed)"
        ) from exc
    if isinstance(fs, LocalFileSystem):  # a root that is a link is resolved once, here
        base = os.path.realpath(base)
    return fs, str(base).rstrip("/") or "/"


def _probe_writable(fs: AbstractFileSystem, base: str, root: str) -> None:
    probe = f"{base}/.k8s-ai-probe-{uuid.uuid4().hex}"
    try:
        fs.makedirs(base, exist_ok=True)
        fs.pipe_file(probe, b"ok")
        fs.rm_file(probe)
    except Exception as exc:
        raise CheckpointError(
            f"CheckpointStore root={root!r} is not writable ({type(exc).__name__}: {exc}); "
            "create it or grant this step's user/service account write access"
        ) from exc
