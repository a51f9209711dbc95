"""The object store behind every emulated API server: objects, resourceVersions, change history.

All servers of one emulator share one lock and one resourceVersion counter, so versions are
monotonic across the whole emulated fleet. Stored objects are never mutated after `put`; a
writer copies, changes and puts again, so readers may serialise them outside the lock.

Example:
    >>> cluster = ClusterState()
    >>> store = cluster.new_store("host")
    >>> pod = store.put("pods", {"metadata": {"namespace": "default", "name": "p"}})
    >>> pod["metadata"]["resourceVersion"]
    '1'
"""

from __future__ import annotations

import copy
import functools
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

HISTORY_LIMIT = 20000


class ApiError(Exception):
    """An error the API server answers with a `Status` object.

    Example:
        >>> ApiError(404, "NotFound", 'pods "p" not found').status()["code"]
        404
    """

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> Obj:
        """The `Status` body of this error."""
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    """404 NotFound in the real message shape."""
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        404,
        "NotFound",
        f'{qualified} "{name}" not found',
        {"name": name, "group": group, "kind": resource},
    )


def now_rfc3339(ts: float | None = None) -> str:
    """Kubernetes timestamp format, second precision ("2024-05-01T10:00:00Z")."""
    moment = datetime.fromtimestamp(time.time() if ts is None else ts, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@functools.lru_cache(maxsize=65536)  # the controllers read the same stamps every pass
def parse_rfc3339(value: str) -> float:
    """Seconds since the epoch of a Kubernetes timestamp."""
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def new_uid() -> str:
    """A fresh object uid."""
    return str(uuid.uuid4())


_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(length: int = 5) -> str:
    """The random suffix Kubernetes appends to generateName."""
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(length))


# ObjectMeta fields a real API server never returns empty: `finalizers: []` written by a
# client (the usual way to release an object) reads back as no `finalizers` at all.
OMITTED_WHEN_EMPTY = ("finalizers", "ownerReferences", "labels", "annotations")


@dataclass(frozen=True)
class Change:
    """One write to a store, as a watch sees it."""

    rv: int  # resourceVersion the write produced
    type: str  # ADDED | MODIFIED | DELETED
    resource: str  # plural resource name, e.g. "pods"
    obj: Obj  # the object after the write (before it, for DELETED)
    old: Obj | None  # the object before the write (None for ADDED)


class ClusterState:
    """Lock, version counter and wake-up signal shared by every store of one emulator."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._rv = 0
        self.stores: dict[str, Store] = {}

    def next_rv(self) -> int:
        """Allocate the next resourceVersion."""
        self._rv += 1
        return self._rv

    @property
    def current_rv(self) -> int:
        """The latest resourceVersion handed out."""
        return self._rv

    def new_store(self, name: str) -> Store:
        """Create and register the store of one API server."""
        store = Store(name, self)
        self.stores[name] = store
        return store


class Store:
    """Objects of one API server, keyed by resource, namespace and name."""

    def __init__(self, name: str, cluster: ClusterState) -> None:
        self.name = name
        self.cluster = cluster
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._history: deque[Change] = deque(maxlen=HISTORY_LIMIT)
        self.compacted_rv = 0  # watches from a version below this get 410 Expired
        self.watch_epoch = 0  # bumped by expire_watches: open watches end with 410
        self.event_names: dict[tuple[str, str, str, str], str] = {}  # dedupe key → Event name

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        """The stored object, or None."""
        return self._objects.get(resource, {}).get((namespace, name))

    def list(self, resource: str, namespace: str | None = None) -> list[Obj]:
        """Stored objects of a resource, in one namespace or all."""
        items = self._objects.get(resource, {})
        if namespace is None:
            return list(items.values())
        return [obj for (ns, _), obj in items.items() if ns == namespace]

    def put(self, resource: str, obj: Obj) -> Obj:
        """Store a copy of `obj` with a new resourceVersion and record the change."""
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        for field in OMITTED_WHEN_EMPTY:  # the real server's JSON drops them (omitempty)
            if field in meta and not meta[field]:
                del meta[field]
        key = (meta.get("namespace", ""), meta["name"])
        bucket = self._objects.setdefault(resource, {})
        old = bucket.get(key)
        rv = self.cluster.next_rv()
        meta["resourceVersion"] = str(rv)
        bucket[key] = stored
        self._record(Change(rv, "MODIFIED" if old else "ADDED", resource, stored, old))
        return stored

    def remove(
        self, resource: str, namespace: str, name: str, final: Obj | None = None
    ) -> Obj | None:
        """Remove an object; the DELETED event carries `final` (its last state) if given."""
        old = self._objects.get(resource, {}).pop((namespace, name), None)
        if old is None:
            return None
        rv = self.cluster.next_rv()
        gone = copy.deepcopy(final if final is not None else old)
        gone["metadata"]["resourceVersion"] = str(rv)
        self._record(Change(rv, "DELETED", resource, gone, old))
        return gone

    def _record(self, change: Change) -> None:
        with self.cluster.lock:
            if len(self._history) == self._history.maxlen:
                self.compacted_rv = self._history[0].rv
            self._history.append(change)
            self.cluster.changed.notify_all()

    def changes_since(self, rv: int) -> Sequence[Change]:
        """Changes after `rv`, oldest first; 410 Expired when `rv` predates the kept history."""
        if rv < self.compacted_rv:
            raise too_old(rv, self.compacted_rv)
        newer: list[Change] = []
        for change in reversed(self._history):
            if change.rv <= rv:
                break
            newer.append(change)
        newer.reverse()
        return newer

    def expire_history(self) -> None:
        """Forget history: every version up to now becomes too old, open watches end."""
        with self.cluster.lock:
            self.compacted_rv = self.cluster.next_rv()  # a list from now on is watchable
            self._history.clear()
            self.watch_epoch += 1
            self.cluster.changed.notify_all()


def too_old(rv: int, oldest: int) -> ApiError:
    """410 Expired for a resourceVersion older than the kept history."""
    return ApiError(410, "Expired", f"too old resource version: {rv} ({oldest})")
