"""Status patches as a kubelet or a syncer sends them, and the answers such a writer ignores.

A strategic merge patch merges `status.conditions` by `type`, so a condition that went away
(a resize no longer pending) must be deleted with a `$patch: delete` directive; sending the
shorter list alone would keep it.

The patch carries the pod's `metadata.uid`, as the kubelet's status patch does: a patch by
name alone would land on a new pod that took the name of a deleted one (a test that deletes
and recreates a pod), giving it the old pod's phase and container states; with the uid the
API refuses it (422, metadata.uid is immutable), which `replaced` recognises.

Example:
    >>> before = {"conditions": [{"type": "Ready"}, {"type": "PodResizePending"}]}
    >>> patch = status_patch(before, {"conditions": [{"type": "Ready"}]}, uid="1234")
    >>> patch["status"]["conditions"]
    [{'type': 'Ready'}, {'type': 'PodResizePending', '$patch': 'delete'}]
    >>> patch["metadata"]
    {'uid': '1234'}
    >>> with ignoring(404, 409):
    ...     raise ApiException(status=409)
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes.client.rest import ApiException

STRATEGIC = "application/strategic-merge-patch+json"


def status_patch(
    before: dict[str, Any] | None, after: dict[str, Any], *, uid: str
) -> dict[str, Any]:
    """The body that turns status `before` into `after` (conditions gone are deleted) on the
    pod whose uid is `uid`, and on no later pod of the same name."""
    status = copy.deepcopy(after)
    kept = {c.get("type") for c in status.get("conditions") or []}
    gone = [
        {"type": c["type"], "$patch": "delete"}
        for c in (before or {}).get("conditions") or []
        if c.get("type") not in kept
    ]
    if gone:
        status["conditions"] = [*(status.get("conditions") or []), *gone]
    return {"metadata": {"uid": uid}, "status": status}


def replaced(error: ApiException) -> bool:
    """Whether the API refused a `status_patch` because its pod's name now belongs to a new
    pod (the uid the patch carries differs from the pod's)."""
    return error.status == 422 and any(c.get("field") == "metadata.uid" for c in _causes(error))


def terminating(error: ApiException) -> bool:
    """Whether the API refused a create because its namespace is being deleted (403 with the
    `NamespaceTerminating` cause; a cause's type is its JSON `reason`): nothing new can go
    there, and nobody will read it.

    Example:
        >>> refused = ApiException(status=403, reason="Forbidden")
        >>> refused.body = '{"details": {"causes": [{"reason": "NamespaceTerminating"}]}}'
        >>> terminating(refused), terminating(ApiException(status=403, reason="Forbidden"))
        (True, False)
    """
    return error.status == 403 and any(
        c.get("reason") == "NamespaceTerminating" for c in _causes(error)
    )


def _causes(error: ApiException) -> list[dict[str, Any]]:
    """The `details.causes` of the Status an API error carries (none when it has no body)."""
    try:
        causes = (json.loads(error.body or "{}").get("details") or {}).get("causes") or []
    except (ValueError, AttributeError):
        return []
    return [cause for cause in causes if isinstance(cause, dict)]


@contextlib.contextmanager
def ignoring(*codes: int, refused: Callable[[ApiException], bool] | None = None) -> Iterator[None]:
    """Swallow an ApiException with one of these statuses (a 409 on a create that an earlier
    pass made, a 404 on a delete of what is already gone), or one that `refused` recognises
    (`replaced`, `terminating`); any other error propagates. What follows the call inside the
    block runs only when it succeeded."""
    try:
        yield
    except ApiException as error:
        if error.status not in codes and not (refused is not None and refused(error)):
            raise


__all__ = ["STRATEGIC", "ignoring", "replaced", "status_patch", "terminating"]
