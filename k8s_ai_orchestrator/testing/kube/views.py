"""Content negotiation of reads: plain JSON, a Table, or metadata only, as the Accept header asks.

`Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` lists metadata
only; `as=PartialObjectMetadata` reads one object's; `as=Table` is `kubectl get`'s view. The
first media type the answer can take wins; when none can, the answer is 406 NotAcceptable with
the real server's message.

Example:
    >>> negotiate("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", False)
    ('Table', 'v1')
    >>> negotiate("application/json", True) is None
    True
"""

from __future__ import annotations

from .resources import ResourceType
from .store import ApiError, Obj
from .tables import to_table

_VIEWS = ("Table", "PartialObjectMetadata", "PartialObjectMetadataList")


def _media_types(accept: str) -> list[dict[str, str]]:
    found = []
    for media in accept.split(","):
        kind, *parameters = [part.strip() for part in media.split(";")]
        fields = dict(p.split("=", 1) for p in parameters if "=" in p)
        found.append({"type": kind.lower(), **fields})
    return found


def _go_type(rt: ResourceType, is_list: bool) -> str:
    package = rt.group.split(".")[0] if rt.group else "core"
    return f"*{package}.{rt.kind}{'List' if is_list else ''}"


def negotiate(accept: str, is_list: bool, go_type: str = "") -> tuple[str, str] | None:
    """(view, meta.k8s.io version) the Accept header asks for; None for plain JSON.

    `go_type` names the answer's type in a 406 message, as the real server does.
    """
    refused = ""
    for media in _media_types(accept or "application/json"):
        view = media.get("as")
        if view is None:
            if media["type"] in ("application/json", "*/*", "application/*"):
                return None
            continue
        if view not in _VIEWS or media.get("g") != "meta.k8s.io":
            continue
        if view == "PartialObjectMetadataList" and not is_list:
            refused = "PartialObjectMetadataList, but the requested object is not a list"
            continue
        if view == "PartialObjectMetadata" and is_list:
            refused = "PartialObjectMetadata, but the requested object is a list"
            continue
        return view, media.get("v", "v1")
    message = "only the following media types are accepted: application/json"
    if refused:
        message = f"you requested {refused} ({go_type})"
    raise ApiError(406, "NotAcceptable", message)


def _partial(obj: Obj, version: str) -> Obj:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj["metadata"],
    }


def render(rt: ResourceType, result: Obj, accept: str) -> Obj:
    """`result` (one object or a list answer) in the view the Accept header asks for."""
    is_list = "items" in result
    chosen = negotiate(accept, is_list, _go_type(rt, is_list))
    if chosen is None:
        return result
    view, version = chosen
    if view == "Table":
        return to_table(rt, result, version)
    if not is_list:
        return _partial(result, version)
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": result["metadata"],
        "items": [_partial(item, version) for item in result["items"]],
    }
