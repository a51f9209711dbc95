"""The HTTP request handler: routing, auth, faults, verbs, watch and log streaming.

Example:
    >>> ApiHandler.protocol_version
    'HTTP/1.1'
"""

from __future__ import annotations

import json
import re
import select
import socket
import ssl
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

from .api import ObjectApi
from .discovery import document
from .lifecycle import delete_pod, disrupt
from .patch import APPLY_PATCH
from .resources import RESOURCES
from .routing import FaultPlan, Route, parse_route
from .store import ApiError, Obj
from .views import render
from .watch import watch_stream

TLS_ALERT = b"\x15"  # the content type of a TLS alert record (close_notify is one)


class ServedApi(Protocol):
    """What the handler needs of the API server it answers for (`server.ApiServer`)."""

    name: str
    api: ObjectApi
    token: str
    port: int
    logs: Any  # the kubelet: log_file(uid, container, previous), is_running(uid, container)
    faults: FaultPlan
    denied: set[tuple[str, str]]
    stopping: threading.Event
    wake: threading.Event
    bookmark_interval: float

    def count(self, verb: str, resource: str) -> None: ...


# Request bodies a real server decodes and the emulator does not: kubectl and client-go send
# built-in kinds as protobuf (`kubectl create configmap`, `kubectl auth can-i`). They get the
# real server's answer to a format it does not read, 415, whose message lists what it reads.
UNREAD_MEDIA_TYPES = frozenset({"application/vnd.kubernetes.protobuf", "application/cbor"})
_NODE_STATS = re.compile(r"^/api/v1/nodes/([^/]+)/proxy/stats/summary/?$")
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiHandler(BaseHTTPRequestHandler):
    """Serves one request (or a keep-alive series of them) for an `ApiServer`."""

    protocol_version = "HTTP/1.1"
    server_version = "kube-emulator"
    answer_delay_s = 0.0  # a "slow" fault: the request is carried out, its answer held back

    def send_response(self, code: int, message: str | None = None) -> None:
        delay, self.answer_delay_s = self.answer_delay_s, 0.0
        if delay:
            time.sleep(delay)
        super().send_response(code, message)

    def setup(self) -> None:
        super().setup()
        # headers and body go out in separate writes: without this, Nagle's algorithm and
        # delayed ACKs add ~40 ms to every request
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        return None

    @property
    def api_server(self) -> ServedApi:
        return self.server.api_server  # type: ignore[attr-defined,no-any-return]

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        body = self._read_body()
        route = parse_route(url.path)
        verb = route.verb(method, params) if route else method.lower()
        self.api_server.count(verb, route.resource_label if route else url.path)
        if self._apply_faults(verb, url.path):
            return
        if self.headers.get("Authorization", "") != f"Bearer {self.api_server.token}":
            self._send_status(ApiError(401, "Unauthorized", "Unauthorized"))
            return
        try:
            self._dispatch(method, url.path, route, verb, params, body)
        except ApiError as error:
            self._send_status(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as error:  # a bug in the emulator: answer like a real server would
            traceback.print_exc()
            self._send_status(ApiError(500, "InternalError", f"emulator error: {error!r}"))

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _apply_faults(self, verb: str, path: str) -> bool:
        """Apply planned faults; True when the request was answered (or dropped) by one."""
        for rule in self.api_server.faults.take(verb, path):
            if rule.kind == "slow":
                self.answer_delay_s = rule.seconds
            elif rule.kind == "reset":
                self._drop()
                return True
            elif rule.kind == "error":
                reason = _REASONS.get(rule.status, "InternalError")
                error = ApiError(rule.status, reason, f"injected fault: {reason}")
                headers = {"Retry-After": "1"} if rule.status == 429 else {}
                self._send_status(error, headers)
                return True
        return False

    def _json_body(self, body: bytes) -> Any:
        media = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if body and media in UNREAD_MEDIA_TYPES:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json, application/merge-patch+json, "
                "application/strategic-merge-patch+json, application/json-patch+json, "
                "application/apply-patch+yaml",
            )
        try:
            return json.loads(body or b"{}")
        except ValueError as error:
            raise ApiError(
                400, "BadRequest", f"couldn't get version/kind; json parse error: {error}"
            ) from error

    def _dispatch(
        self, method: str, path: str, route: Route | None, verb: str, params: dict, body: bytes
    ) -> None:
        proxied = _NODE_STATS.match(unquote(path))  # clients send stats%2Fsummary
        if route is None and proxied is not None and method == "GET":
            self._node_stats(proxied.group(1))
            return
        if route is None:
            found = document(path) if method == "GET" else None
            if found is None:
                if path.rstrip("/") in ("/healthz", "/readyz", "/livez"):
                    self._send_bytes(200, b"ok", "text/plain")
                    return
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if path.rstrip("/") == "/api":
                address = f"127.0.0.1:{self.api_server.port}"
                found = {
                    **found,
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": address}
                    ],
                }
            self._send_json(200, found)
            return
        self._authorize(route, verb)
        if verb == "watch":
            self._watch(route, params)
        elif route.sub == "log":
            self._log(route, params)
        else:
            payload = None if method in ("GET",) else self._json_body(body)
            code, result = self._call(method, route, verb, params, payload)
            if verb in ("get", "list"):
                result = render(route.rt, result, self.headers.get("Accept", ""))
            self._send_json(code, result)

    def _authorize(self, route: Route, verb: str) -> None:
        if (verb, route.resource_label) not in self.api_server.denied:
            return
        rt = route.rt
        where = (
            f' in the namespace "{route.namespace}"' if route.namespace else " at the cluster scope"
        )
        user = f"system:serviceaccount:{self.api_server.name}:executor"
        raise ApiError(
            403,
            "Forbidden",
            f'{rt.qualified} is forbidden: User "{user}" cannot {verb} resource "{rt.plural}" in '
            f'API group "{rt.group}"{where}',
            {"group": rt.group, "kind": rt.plural},
        )

    def _call(
        self, method: str, route: Route, verb: str, params: dict, payload: Any
    ) -> tuple[int, Obj]:
        api, rt, ns = self.api_server.api, route.rt, route.namespace or ""
        name = route.name or ""
        with api.store.cluster.lock:
            try:
                if rt.plural == "selfsubjectaccessreviews":
                    return 201, self._review(payload)
                if route.sub in ("eviction", "binding"):
                    return 201, self._pod_action(route, payload)
                if verb == "get":
                    return 200, api.get(rt, ns, name)
                if verb == "list":
                    return 200, api.list(rt, route.namespace, params)
                if verb == "create":
                    return 201, api.create(rt, ns, payload, params)
                if verb == "update":
                    return 200, api.update(rt, ns, name, payload, params, route.sub or "")
                if verb == "patch":
                    content_type = self.headers.get("Content-Type", "")
                    if content_type.split(";")[0].strip().lower() == APPLY_PATCH:
                        return api.apply(rt, ns, name, payload, params, route.sub or "")
                    sub = route.sub or ""
                    return 200, api.patch(rt, ns, name, payload, content_type, sub, params)
                options = {**params, **(payload or {})}
                if "gracePeriodSeconds" in options:
                    options["gracePeriodSeconds"] = int(options["gracePeriodSeconds"])
                if verb == "delete":
                    return 200, api.delete(rt, ns, name, options)
                return 200, api.delete_collection(rt, route.namespace, params, options)
            finally:
                if verb not in ("get", "list"):
                    self.api_server.wake.set()

    def _node_stats(self, node: str) -> None:
        """`nodes/{node}/proxy/stats/summary`: the kubelet's summary, this server's pods only."""
        nodes = RESOURCES[("", "nodes")]
        self._authorize(Route(nodes, None, node, "proxy"), "get")
        api, kubelet = self.api_server.api, self.api_server.logs
        with api.store.cluster.lock:
            api.get(nodes, "", node)  # 404 for an unknown node
        if kubelet is None:
            raise ApiError(503, "ServiceUnavailable", f'no kubelet serves node "{node}"')
        self._send_json(200, kubelet.summary(node, store=api.store.name))

    def _review(self, payload: Obj) -> Obj:
        attributes = (payload.get("spec") or {}).get("resourceAttributes") or {}
        label = attributes.get("resource", "")
        if attributes.get("subresource"):
            label = f"{label}/{attributes['subresource']}"
        allowed = (attributes.get("verb", ""), label) not in self.api_server.denied
        review = dict(payload)
        review.update(kind="SelfSubjectAccessReview", apiVersion="authorization.k8s.io/v1")
        review.setdefault("metadata", {})
        review["status"] = {"allowed": allowed, "denied": not allowed}
        if not allowed:
            review["status"]["reason"] = "denied by the emulator's permission table"
        return review

    def _pod_action(self, route: Route, payload: Obj) -> Obj:
        api, ns, name = self.api_server.api, route.namespace or "", route.name or ""
        pod = api.get(route.rt, ns, name)
        if route.sub == "binding":
            bound = dict(pod, spec={**pod["spec"], "nodeName": payload["target"]["name"]})
            api.store.put("pods", bound)
        else:
            grace = ((payload or {}).get("deleteOptions") or {}).get("gracePeriodSeconds")
            stored = disrupt(api.store, pod, "EvictionByEvictionAPI", "Eviction API: evicting")
            delete_pod(api.store, stored, grace)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def _watch(self, route: Route, params: dict) -> None:
        api = self.api_server.api
        with api.store.cluster.lock:
            api.select(route.rt, route.namespace, params)  # 400 on bad selectors before streaming
        events = watch_stream(
            api,
            route.rt,
            route.namespace,
            params,
            self.api_server.stopping,
            self.api_server.bookmark_interval,
        )
        self._start_chunked("application/json")
        try:
            for event in events:
                self._chunk(json.dumps(event).encode() + b"\n")
            if self.api_server.stopping.is_set():
                self._drop()  # a server going away does not end its streams cleanly
            else:
                self._end_chunks()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _log(self, route: Route, params: dict) -> None:
        from .logs import stream_log

        stream_log(self, route, params)

    def _send_status(self, error: ApiError, headers: dict[str, str] | None = None) -> None:
        self._send_json(error.code, error.status(), headers)

    def _send_json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(code, json.dumps(payload).encode(), "application/json", headers)

    def _send_bytes(
        self, code: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def client_gone(self) -> bool:
        """Whether the client closed its end while a response streams to it: its socket reads
        end-of-file, a reset, or (under TLS) an alert, its `close_notify`. A streaming request
        gets nothing else from its client, and Go's server, the kubelet's, notices the same on
        its background read and cancels the request; a stream that has nothing to send then
        stops instead of waiting for output it could not deliver."""
        sock = self.connection
        try:
            readable = select.select([sock], [], [], 0)[0]
            if not readable:
                return False
            peeked = socket.socket.recv(sock, 1, socket.MSG_PEEK)  # the raw bytes, not TLS's
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True
        return not peeked or (isinstance(sock, ssl.SSLSocket) and peeked == TLS_ALERT)

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def _end_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
