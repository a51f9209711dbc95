"""A list+watch cache of one resource, as client-go's reflector keeps one.

The cache holds raw objects (dicts) keyed by (namespace, name); it relists when the watch ends
or expires, keeps the last state of each deleted object (its tombstone) until asked for it,
and calls `on_change` after every change so a control loop can run at once.

Example:
    >>> key_of({"metadata": {"namespace": "default", "name": "web-0"}})
    ('default', 'web-0')
    >>> core = client.CoreV1Api(api_client)  # doctest: +SKIP
    >>> pods = Informer(api_client, core.list_pod_for_all_namespaces).start()  # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

Obj = dict[str, Any]
Key = tuple[str, str]
_RELIST_BACKOFF_S = 0.5
# A request whose answer is not back in this time fails, so that no loop waits forever on one
# stalled connection (the caller retries: a relist, a control loop's next pass).
REQUEST_TIMEOUT_S = 30
TIMEOUT = {"_request_timeout": REQUEST_TIMEOUT_S}  # a call's keyword: no loop waits for ever
WATCH_S = 300  # the server ends each watch after this; the client gives it 30 s more


def key_of(obj: Obj) -> Key:
    """(namespace, name) of an object ("" namespace for cluster-scoped ones)."""
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def _rv(obj: Obj) -> int:
    return int(obj["metadata"].get("resourceVersion") or 0)


class Informer:
    """See the module docstring.

    Args:
        api_client: used to turn models into raw dicts.
        list_fn: a `list_*` method of a kubernetes client API (it must accept `watch`).
        on_change: called after each change of the cache.
        keep: objects for which it is False are left out of the cache.
        list_kwargs: passed to every list and watch (e.g. `label_selector`).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        list_fn: Callable[..., Any],
        on_change: Callable[[], None] | None = None,
        keep: Callable[[Obj], bool] | None = None,
        **list_kwargs: Any,
    ) -> None:
        self._api_client = api_client
        self._list_fn = list_fn
        self._list_kwargs = list_kwargs
        self._on_change = on_change or (lambda: None)
        self._keep = keep or (lambda obj: True)
        self._lock = threading.Lock()
        self._objects: dict[Key, Obj] = {}
        self._tombstones: dict[Key, Obj] = {}
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._watcher: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name="informer", daemon=True)

    def start(self, timeout_s: float = 30.0) -> Informer:
        """Start watching and wait for the first list."""
        self._thread.start()
        if not self._synced.wait(timeout_s):
            raise TimeoutError(f"the first list did not arrive within {timeout_s}s")
        return self

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.stop()

    def items(self) -> list[Obj]:
        """The cached objects (shared, never copied: read them, do not change them)."""
        with self._lock:
            return list(self._objects.values())

    def get(self, namespace: str, name: str) -> Obj | None:
        """One cached object (shared: do not change it), or None."""
        with self._lock:
            return self._objects.get((namespace, name))

    def pop_tombstone(self, namespace: str, name: str) -> Obj | None:
        """The last state of a deleted object, once (None when it was not deleted)."""
        with self._lock:
            return self._tombstones.pop((namespace, name), None)

    def update(self, obj: Obj) -> None:
        """Put a write's answer into the cache unless the watch already has a newer state."""
        self._apply("MODIFIED", obj)

    def _apply(self, kind: str, obj: Obj) -> None:
        key = key_of(obj)
        with self._lock:
            known = self._objects.get(key)
            if kind == "DELETED":
                if known is not None and known["metadata"].get("uid") == obj["metadata"].get("uid"):
                    self._objects.pop(key, None)
                    self._tombstones[key] = obj
            elif (
                known is not None
                and known["metadata"].get("uid") == obj["metadata"].get("uid")
                and _rv(known) > _rv(obj)
            ):
                return
            elif self._keep(obj):
                self._objects[key] = obj
                self._tombstones.pop(key, None)
            else:
                self._objects.pop(key, None)
        self._on_change()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._list_then_watch()
            except Exception:  # noqa: BLE001 - a dropped watch relists, as a reflector does
                time.sleep(_RELIST_BACKOFF_S)

    def _list_then_watch(self) -> None:
        listed = self._list_fn(_request_timeout=REQUEST_TIMEOUT_S, **self._list_kwargs)
        objects = self._api_client.sanitize_for_serialization(listed.items)
        with self._lock:
            fresh = {key_of(o): o for o in objects if self._keep(o)}
            for key, gone in self._objects.items():
                if key not in fresh:
                    self._tombstones[key] = gone
            self._objects = fresh
        self._synced.set()
        self._on_change()
        self._watcher = watch.Watch()
        stream = self._watcher.stream(
            self._list_fn,
            resource_version=listed.metadata.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_S,
            _request_timeout=(REQUEST_TIMEOUT_S, WATCH_S + REQUEST_TIMEOUT_S),
            **self._list_kwargs,
        )
        for event in stream:
            if self._stop.is_set():
                return
            if event["type"] == "ERROR":
                return  # expired: relist
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(event["type"], event["raw_object"])
