"""One emulated API server: HTTP(S) on 127.0.0.1, bearer-token auth, faults, request counts.

Example:
    >>> from .api import ObjectApi
    >>> from .store import ClusterState
    >>> server = ApiServer("host", ObjectApi(ClusterState().new_store("host")), token="t")
    >>> server.start(); server.server_url.startswith("http://127.0.0.1:")
    True
    >>> server.stop()
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections import Counter
from http.server import ThreadingHTTPServer
from typing import Any

from .api import ObjectApi
from .handler import ApiHandler
from .routing import FaultPlan

LogSource = Any  # the kubelet: log_file(uid, container, previous) and is_running(uid, container)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], api_server: ApiServer) -> None:
        self.api_server = api_server
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, ApiHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        with self.connections_lock:
            open_connections = list(self.connections)
        for connection in open_connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ApiServer:
    """An API server (the host cluster's or one vCluster tenant's) over its own store."""

    def __init__(
        self,
        name: str,
        api: ObjectApi,
        token: str,
        logs: LogSource = None,
        tls: ssl.SSLContext | None = None,
        bookmark_interval: float = 1.0,
    ) -> None:
        self.name = name
        self.api = api
        self.token = token
        self.logs = logs
        self.tls = tls
        self.bookmark_interval = bookmark_interval
        self.faults = FaultPlan()
        self.denied: set[tuple[str, str]] = set()  # (verb, resource) this server's token lacks
        self.kubeconfig_path = ""
        self.stopping = threading.Event()
        self.wake: threading.Event = threading.Event()  # set after writes: controllers react
        self._counts: Counter[tuple[str, str]] = Counter()
        self._counts_lock = threading.Lock()
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def server_url(self) -> str:
        """http(s)://127.0.0.1:<port>."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Listen on 127.0.0.1 (a new port the first time)."""
        httpd = _HttpServer(("127.0.0.1", self.port), self)
        if self.tls is not None:
            httpd.socket = self.tls.wrap_socket(httpd.socket, server_side=True)
        self.port = httpd.server_address[1]
        self.stopping.clear()
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and drop every open connection (watches included)."""
        self.stopping.set()
        with self.api.store.cluster.changed:
            self.api.store.cluster.changed.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.drop_connections()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)

    def restart(self) -> None:
        """Stop and start again on the same port; the store and token are kept."""
        self.stop()
        self.start()

    def count(self, verb: str, resource: str) -> None:
        """Count one request."""
        with self._counts_lock:
            self._counts[(verb, resource)] += 1

    def counts(self) -> Counter[tuple[str, str]]:
        """Requests by (verb, resource)."""
        with self._counts_lock:
            return Counter(self._counts)

    def reset_counts(self) -> None:
        """Forget the counts."""
        with self._counts_lock:
            self._counts.clear()

    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` built from this server's kubeconfig."""
        from kubernetes.config import new_client_from_config

        return new_client_from_config(config_file=self.kubeconfig_path)
