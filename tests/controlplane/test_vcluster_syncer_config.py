"""The real vCluster syncer's config, host objects and kubelet tunnel (testing.controlplane.
vclustersyncer), checked without a control plane."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from k8s_ai_orchestrator.testing.controlplane import flags, pki, write_kubeconfig
from k8s_ai_orchestrator.testing.controlplane.kubelettunnel import KubeletTunnel
from k8s_ai_orchestrator.testing.controlplane.process import free_port
from k8s_ai_orchestrator.testing.controlplane.vclusterconfig import (
    SyncerFiles,
    deep_merge,
    syncer_overrides,
)


def test_a_kubelet_egress_apiserver_tries_hostnames_first_through_the_proxy(
    tmp_path: Path,
) -> None:
    config = tmp_path / "kubelet-egress.json"
    a, b, c, d, e, f = (tmp_path / n for n in "abcdef")
    files = flags.ApiServerFiles(a, b, c, d, e, f, egress_selector_config=config)
    plain = flags.ApiServerFiles(a, b, c, d, e, f)

    args = flags.apiserver_args(6443, flags.EtcdPorts(1, 2), "/p", files, flags.Gates())
    plain_args = flags.apiserver_args(6443, flags.EtcdPorts(1, 2), "/p", plain, flags.Gates())

    assert "--kubelet-preferred-address-types=Hostname,InternalIP" in args
    assert f"--egress-selector-config-file={config}" in args
    assert "--kubelet-preferred-address-types=InternalIP" in plain_args
    assert not [a for a in plain_args if a.startswith("--egress-selector")]


@pytest.mark.vcluster
def test_the_merged_config_passes_the_syncers_strict_parse(
    vcluster_bin_dir: Path, tmp_path: Path
) -> None:
    ca = pki.write_ca(tmp_path / "ca")
    files = SyncerFiles(tmp_path / "t.kubeconfig", ca, "127.0.0.1:1", ca.cert, ca)
    values = yaml.safe_load((vcluster_bin_dir / "values.yaml").read_text())
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(deep_merge(values, syncer_overrides(files, 8443))))
    # a host where nothing listens: the syncer parses and validates, then stops at its first call
    host = write_kubeconfig(
        tmp_path / "host.kubeconfig", f"https://127.0.0.1:{free_port()}", ca.cert, "admin", "t"
    )
    env = dict(os.environ, KUBECONFIG=str(host), POD_NAME="team-a-0")
    env.update(VCLUSTER_NAME="team-a", NAMESPACE="vcluster-team-a")

    result = subprocess.run(
        [str(vcluster_bin_dir / "vcluster"), "start", f"--config={config}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )

    assert result.returncode != 0
    assert "get secret: Get" in result.stderr, result.stderr[-2000:]  # vc-config-team-a


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A loopback server that sends back what it reads, one connection."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()


def _connect(path: Path, target: str) -> tuple[socket.socket, bytes]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(str(path))
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1)
    return sock, answer


def test_the_kubelet_tunnel_takes_node_hostnames_to_the_syncer_and_refuses_the_rest(
    echo_port: int,
) -> None:
    # a short directory: a Unix socket's path has at most 107 characters
    with tempfile.TemporaryDirectory(prefix="tun-") as directory:
        path = Path(directory) / "kubelet-egress.sock"
        tunnel = KubeletTunnel(path, echo_port).start()
        try:
            refused, answer = _connect(path, "10.96.0.1:10250")
            refused.close()
            assert answer.startswith(b"HTTP/1.1 403")

            sock, answer = _connect(path, "big-1.nodes.vcluster.com:10250")
            assert answer.startswith(b"HTTP/1.1 200")
            sock.sendall(b"GET /containerLogs/default/hello/main HTTP/1.1\r\n\r\n")
            assert sock.recv(100).startswith(b"GET /containerLogs/")
            sock.close()
        finally:
            tunnel.stop()

        assert not path.exists()
