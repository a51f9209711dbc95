"""The kubelet's `/containerLogs` and `/stats/summary` endpoints, reached through the apiserver.

The apiserver proxies `GET pods/{name}/log` to `https://<node InternalIP>:<daemonEndpoints
port>/containerLogs/{namespace}/{pod}/{container}` with the query parameters `follow`,
`previous`, `tailLines`, `limitBytes` and `timestamps`. This server answers from the log files
the kubelet keeps per container run, following a running container until it exits. As in the
emulator, a line is stamped with the time it is first served (`timestamps=true`); `sinceSeconds`
serves the whole log. `GET /api/v1/nodes/{node}/proxy/stats/summary` reaches
`/stats/summary`, the memory in use of each running container on that node (what
metrics-server and the executor's in-place growth read); one server answers for one node.

Example:
    >>> parse_path("/containerLogs/default/train-0/main")
    ('default', 'train-0', 'main')
    >>> parse_path("/pods") is None
    True
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ...kube.logs import Stamper, tail_lines
from ..pki import KeyPair

FOLLOW_POLL_S = 0.1


class NotOnNode(str):
    """A lookup's answer for a pod the node does not have (yet, or any more): a kubelet
    answers it `404`, where a container it cannot serve a log of is a `400`."""


# (namespace, pod, container, previous) → (log file, still running?) or an error text
LogLookup = Callable[[str, str, str, bool], tuple[Path, Callable[[], bool]] | str]
StatsSummary = Callable[[], dict[str, Any]]  # the node's /stats/summary document


def parse_path(path: str) -> tuple[str, str, str] | None:
    """(namespace, pod, container) of a `/containerLogs/...` path, else None."""
    parts = path.strip("/").split("/")
    if len(parts) != 4 or parts[0] != "containerLogs":
        return None
    return parts[1], parts[2], parts[3]


class LogServer:
    """An HTTPS server answering `/containerLogs` from `lookup` and `/stats/summary` from
    `stats` (404 without it), on `address`. With `client_ca`, only clients with a certificate
    it signed are served (the apiservers' kubelet client certificate), as a kubelet does."""

    def __init__(
        self,
        lookup: LogLookup,
        serving: KeyPair,
        port: int = 0,
        stats: StatsSummary | None = None,
        address: str = "127.0.0.1",
        client_ca: Path | None = None,
    ) -> None:
        self.lookup = lookup
        self.stats = stats
        self.stopping = threading.Event()
        handler = type("Handler", (_Handler,), {"log_server": self})
        self._server = ThreadingHTTPServer((address, port), handler)
        self._server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(serving.cert), str(serving.key))
        if client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=str(client_ca))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="agent-logs", daemon=True
        )

    def start(self) -> LogServer:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; open follow streams end."""
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    log_server: LogServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base signature
        """Quiet: the apiserver polls logs often."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urllib.parse.urlsplit(self.path)
        if url.path.rstrip("/") == "/stats/summary" and self.log_server.stats is not None:
            body = json.dumps(self.log_server.stats()).encode()
            self._send(200, body, "application/json")
            return
        target = parse_path(url.path)
        if target is None:
            self._send(404, b"not found")
            return
        query = dict(urllib.parse.parse_qsl(url.query))
        previous = query.get("previous") in ("true", "1")
        found = self.log_server.lookup(*target, previous)
        if isinstance(found, str):
            self._send(404 if isinstance(found, NotOnNode) else 400, found.encode())
            return
        path, running = found
        data = path.read_bytes()
        size = len(data)
        if query.get("tailLines"):
            data = tail_lines(data, int(query["tailLines"]))
        if query.get("limitBytes"):
            data = data[: int(query["limitBytes"])]
        stamper = Stamper(query.get("timestamps") in ("true", "1"))
        if query.get("follow") not in ("true", "1") or previous:
            self._send(200, stamper.stamp(data))
            return
        self._follow(path, stamper.stamp(data), size, running, stamper)

    def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _follow(
        self,
        path: Path,
        first: bytes,
        offset: int,
        running: Callable[[], bool],
        stamper: Stamper,
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            self._chunk(first)
            while not self.log_server.stopping.is_set():
                alive = running()
                with path.open("rb") as log:
                    log.seek(offset)
                    fresh = log.read()
                offset += len(fresh)
                self._chunk(stamper.stamp(fresh))
                if not alive:
                    break
                time.sleep(FOLLOW_POLL_S)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
