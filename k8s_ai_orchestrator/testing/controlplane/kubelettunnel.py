"""The HTTP CONNECT proxy between a tenant apiserver and the real vCluster syncer's kubelet
proxy (`vclustersyncer`).

vCluster names each tenant node's kubelet `<node>.nodes.vcluster.com:10250`. A tenant apiserver
started with `kubelet_egress` (`ControlPlane`) sends its kubelet traffic (`pods/log`,
`nodes/proxy`) to this proxy's Unix socket instead of resolving that name; the proxy takes it
to the syncer's port on loopback, which finds the node by the Host header and forwards to the
host's `nodes/<node>/proxy`. Nothing else is tunnelled, so the apiserver dials no other address.

Example:
    >>> tunnel = KubeletTunnel(Path("/run/k.sock"), proxy_port=8443)  # doctest: +SKIP
    >>> tunnel.start(); ...; tunnel.stop()  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from pathlib import Path

LOOPBACK = "127.0.0.1"
NODE_SUFFIX = ".nodes.vcluster.com"  # a tenant node's kubelet hostname: <node>.nodes.vcluster.com
KUBELET_PORT = 10250  # the port vCluster writes into a tenant node's daemonEndpoints


def tunnel_target(request_line: str, proxy_port: int) -> tuple[str, int] | None:
    """Where a `CONNECT` from the tenant apiserver goes: a tenant node's kubelet
    (`<node>.nodes.vcluster.com:10250`) is the syncer's proxy on loopback (which finds the node
    by the Host header and forwards to the host's `nodes/<node>/proxy`); anything else, None.

    >>> tunnel_target("CONNECT big-1.nodes.vcluster.com:10250 HTTP/1.1", 8443)
    ('127.0.0.1', 8443)
    >>> tunnel_target("CONNECT 10.96.0.1:443 HTTP/1.1", 8443) is None
    True
    """
    parts = request_line.split()
    if len(parts) != 3 or parts[0] != "CONNECT":
        return None
    host, _, port = parts[1].rpartition(":")
    if not host.endswith(NODE_SUFFIX) or port != str(KUBELET_PORT):
        return None
    return (LOOPBACK, proxy_port)


class _TunnelServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    proxy_port = 0
    requests_seen: list[str]


class _TunnelHandler(socketserver.StreamRequestHandler):
    server: _TunnelServer

    def handle(self) -> None:
        line = self.rfile.readline(8192).decode("latin-1").strip()
        while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
            pass  # the request's headers
        self.server.requests_seen.append(line)
        target = tunnel_target(line, self.server.proxy_port)
        if target is None:
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\n\r\n")
            return
        try:
            upstream = socket.create_connection(target, timeout=10)
        except OSError:
            self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        upstream.settimeout(None)
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        back = threading.Thread(target=_pipe, args=(upstream, self.connection), daemon=True)
        back.start()
        _pipe(self.connection, upstream)
        back.join()
        upstream.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` ends, then end `sink`'s writing side."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class KubeletTunnel:
    """The HTTP CONNECT proxy a `kubelet_egress` tenant apiserver sends its kubelet traffic to
    (`ApiServer.kubelet_egress_socket`): tenant node hostnames go to the syncer's proxy port, any
    other target is refused (403), so the apiserver never dials outside loopback."""

    def __init__(self, socket_path: Path, proxy_port: int) -> None:
        self.socket_path = socket_path
        self.proxy_port = proxy_port
        self._server: _TunnelServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def requests_seen(self) -> list[str]:
        """The request lines received, in order."""
        return self._server.requests_seen if self._server else []

    def start(self) -> KubeletTunnel:
        """Listen on the socket (a stale one is replaced) and serve in a thread."""
        self.socket_path.unlink(missing_ok=True)
        server = _TunnelServer(str(self.socket_path), _TunnelHandler)
        server.proxy_port = self.proxy_port
        server.requests_seen = []
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.socket_path.unlink(missing_ok=True)
