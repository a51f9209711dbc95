"""A validating admission webhook that holds a namespace's first Job create on a real API
server for a while, then allows it: the create request stays in flight on the server while a
test kills the client that sent it.

The webhook serves HTTPS on loopback with a certificate from the plane's CA (the API server
checks it against `caBundle`), and is registered for `CREATE batch/v1 jobs` in one namespace
only; `stop` deletes its configuration and ends the server.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client

from k8s_ai_orchestrator.testing.controlplane import pki


class HoldingWebhook:
    """Holds the first Job create of `namespace` for `hold_s` seconds, then allows every one.

    `holding` is set while the first create waits in the webhook.
    """

    def __init__(self, ca: pki.KeyPair, workdir: Path, namespace: str, hold_s: float) -> None:
        self.namespace, self.hold_s = namespace, hold_s
        self.holding = threading.Event()
        self._held = False
        self._lock = threading.Lock()
        self._ca = ca
        workdir.mkdir(parents=True, exist_ok=True)
        serving = pki.write_serving_cert(ca, workdir, ["127.0.0.1"])
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(serving.cert, serving.key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._name = f"k8s-ai-test-hold-{namespace}"
        self._api: client.AdmissionregistrationV1Api | None = None

    def start(self, api_client: client.ApiClient) -> HoldingWebhook:
        """Serve, and register the webhook on the API server of `api_client`."""
        self._thread.start()
        port = self._server.server_address[1]
        self._api = client.AdmissionregistrationV1Api(api_client)
        self._api.create_validating_webhook_configuration(
            {
                "metadata": {"name": self._name},
                "webhooks": [
                    {
                        "name": "hold.k8s-ai.test",
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{port}/hold",
                            "caBundle": base64.b64encode(self._ca.cert.read_bytes()).decode(),
                        },
                        "rules": [
                            {
                                "operations": ["CREATE"],
                                "apiGroups": ["batch"],
                                "apiVersions": ["v1"],
                                "resources": ["jobs"],
                            }
                        ],
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": self.namespace}
                        },
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 15,
                        "failurePolicy": "Fail",
                    }
                ],
            }
        )
        return self

    def stop(self) -> None:
        if self._api is not None:
            self._api.delete_validating_webhook_configuration(self._name)
        self._server.shutdown()
        self._server.server_close()

    def _hold_once(self) -> None:
        with self._lock:
            first, self._held = not self._held, True
        if first:
            self.holding.set()
            time.sleep(self.hold_s)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                review: dict[str, Any] = json.loads(self.rfile.read(length))
                webhook._hold_once()
                answer = {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {"uid": review["request"]["uid"], "allowed": True},
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        return Handler
