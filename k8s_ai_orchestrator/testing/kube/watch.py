"""Watch streams: initial ADDED events, changes after a resourceVersion, bookmarks, expiry.

A too-old resourceVersion, or `expire_watches`, ends the stream with an ERROR event carrying
a Status 410 Expired, as the real server does after etcd compaction.

Example:
    >>> from .api import ObjectApi
    >>> from .resources import RESOURCES
    >>> from .store import ClusterState
    >>> api = ObjectApi(ClusterState().new_store("host"))
    >>> stop = threading.Event()
    >>> events = watch_stream(api, RESOURCES[("", "namespaces")], None, {"timeoutSeconds": "0"},
    ...                       stop)
    >>> sorted(e["object"]["metadata"]["name"] for e in events)[:2]
    ['default', 'kube-node-lease']
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

from .api import ObjectApi, Params
from .resources import ResourceType
from .store import ApiError, Change, Obj

DEFAULT_WATCH_SECONDS = 1800


def _translate(change: Change, matches: Callable[[Obj], bool]) -> Obj | None:
    """A store change as the watcher sees it, given its selectors."""
    now_matches = change.type != "DELETED" and matches(change.obj)
    was_matching = change.old is not None and matches(change.old)
    if change.type == "DELETED":
        return {"type": "DELETED", "object": change.obj} if was_matching else None
    if now_matches and was_matching:
        return {"type": "MODIFIED", "object": change.obj}
    if now_matches:
        return {"type": "ADDED", "object": change.obj}
    if was_matching:
        return {"type": "DELETED", "object": change.obj}
    return None


def _error_event(error: ApiError) -> Obj:
    return {"type": "ERROR", "object": error.status()}


def _parse_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f'invalid resource version "{text}"') from exc


def watch_stream(
    api: ObjectApi,
    rt: ResourceType,
    namespace: str | None,
    params: Params,
    stop: threading.Event,
    bookmark_interval: float = 1.0,
) -> Iterator[Obj]:
    """Yield watch events until timeoutSeconds, a 410, or `stop` (server shutdown)."""
    store, cond = api.store, api.store.cluster.changed
    matches = api.select(rt, namespace, params)
    timeout = float(params.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
    deadline = time.monotonic() + timeout
    bookmarks = params.get("allowWatchBookmarks") in ("true", "1", "True")
    rv_text = params.get("resourceVersion") or "0"
    with cond:
        epoch = store.watch_epoch
        if rv_text == "0":
            last = store.cluster.current_rv
            listed = [obj for obj in store.list(rt.plural, namespace) if matches(obj)]
            initial = [{"type": "ADDED", "object": obj} for obj in listed]
        else:
            last, initial = _parse_rv(rv_text), []
    yield from initial
    next_bookmark = time.monotonic() + bookmark_interval
    while not stop.is_set():
        with cond:
            changes, error = _wait_for_changes(api, last, epoch, deadline, next_bookmark, stop)
            fetched_at = store.cluster.current_rv
        if error is not None:
            yield _error_event(error)
            return
        for change in changes:
            event = _translate(change, matches)
            if event is not None:
                yield event
        last = max(last, fetched_at)
        now = time.monotonic()
        if bookmarks and now >= next_bookmark:
            meta = {"resourceVersion": str(last)}
            yield {
                "type": "BOOKMARK",
                "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta},
            }
        if now >= next_bookmark:
            next_bookmark = now + bookmark_interval
        if now >= deadline:
            return


def _wait_for_changes(
    api: ObjectApi,
    last: int,
    epoch: int,
    deadline: float,
    next_bookmark: float,
    stop: threading.Event,
) -> tuple[Sequence[Change], ApiError | None]:
    """Block (holding the condition) until changes, expiry, a bookmark is due or the deadline."""
    store = api.store
    while True:
        if store.watch_epoch != epoch:
            return [], ApiError(410, "Expired", "watch closed: resource version expired")
        try:
            changes = store.changes_since(last)
        except ApiError as error:
            return [], error
        now = time.monotonic()
        if changes or stop.is_set() or now >= min(deadline, next_bookmark):
            return changes, None
        store.cluster.changed.wait(min(deadline, next_bookmark) - now)
