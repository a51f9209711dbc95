"""A real node for the test control plane: the kubelet (a kubeplane personality), containerd
v2.4 with Debian's runc, and the CNI bridge, on this machine's kernel and cgroup v1.

containerd runs inside a network namespace the harness creates (`k8sai-<name>`), so the pods'
bridge and addresses (203.0.113.0/24, a documentation range) never touch the machine's own
interfaces; the kubelet runs beside the apiserver and reports this machine's address as its
InternalIP (the apiserver will not proxy to loopback). Images are imported from OCI archives,
never pulled. The node carries the label and NoSchedule taint `k8s-ai.test/real-node=true`, so
only pods that tolerate it land here.

Everything the node changes on the machine is recorded first (`nodecleanup.NodeRecord`) and put
back at stop, and again at the next start after a crash. One real node per machine at a time.

Example:
    >>> with RealNode(plane, node_bin_dir, work) as node:  # doctest: +SKIP
    ...     node.import_image(archive)
    ...     node.name
    'real-1'
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO

from . import nodecleanup, nodeconfig, ociimage, pki
from .agent.nodes import node_address
from .cluster import ControlPlane, write_kubeconfig
from .nodecleanup import NodeRecord, run_quietly
from .nodeconfig import NodeLayout
from .process import Component, ControlPlaneError, HttpsTarget, Probe, free_port, machine_lock

PAUSE_IMAGE = "k8s-ai.test/pause:1"  # the sandbox image containerd is configured with
BASE_IMAGE = "k8s-ai.test/base:1"  # ociimage.base_layer(): pods mount the host's /usr
INOTIFY_INSTANCES = 1024  # the kubelet and containerd each hold many inotify instances
RECORD = nodecleanup.RECORD_DIR / "realnode.json"
LOCK = nodecleanup.RECORD_DIR / "realnode.lock"


class RealNode:
    """Start and stop one real node on a running `ControlPlane`; see the module docstring.

    Args:
        plane: the started control plane; the node joins its host apiserver.
        node_bin_dir: `scripts/build-node.sh`'s directory (containerd, shim, ctr, cni/, pause).
        root: the node's directory (created; keep the path short, it holds unix sockets).
        name: the Node's name.
        address: the InternalIP the kubelet serves on; default this machine's address.
        startup_timeout_s: per component, from its start to ready.
    """

    def __init__(
        self,
        plane: ControlPlane,
        node_bin_dir: Path,
        root: Path,
        *,
        name: str = "real-1",
        address: str | None = None,
        startup_timeout_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if plane.host is None:
            raise ControlPlaneError("start the control plane before its real node")
        self.plane = plane
        self.host = plane.host
        self.bin_dir = Path(node_bin_dir)
        self.layout = NodeLayout(Path(root))
        self.name = name
        self.address = address or node_address()
        self.startup_timeout_s = startup_timeout_s
        self.netns = f"k8sai-{name}"
        self.cgroup_root = f"/k8sai-{name}"
        self._clock = clock
        self._sleep = sleep
        self.components: list[Component] = []
        self.record: NodeRecord | None = None
        self._lock: IO[str] | None = None
        self._admin = HttpsTarget(self.host.url, self.host.admin_token, self.host.ca_file)

    # -- public ------------------------------------------------------------------------------

    def start(self) -> RealNode:
        """Clean up after a crashed run, record the machine's settings, then start containerd
        and the kubelet and wait until the Node is Ready.

        Raises:
            ControlPlaneError: another real node runs on this machine, a program is missing,
                or a component did not become ready; everything started is stopped first.
        """
        if self.record is not None:
            return self
        self._take_lock()
        try:
            if RECORD.exists():  # a run that never stopped: end what it left, by id
                nodecleanup.clean_up(NodeRecord.from_json(RECORD.read_text()))
                RECORD.unlink()
            self.record = NodeRecord(
                self.name,
                str(self.layout.root),
                self.netns,
                self.cgroup_root,
                nodecleanup.read_sysctls(),
                [str(d) for d in nodecleanup.FIXED_DIRS if not d.exists()],
            )
            RECORD.write_text(self.record.to_json())
            self._start_all()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> list[str]:
        """Stop the kubelet and containerd, end every container and shim by id, unmount, delete
        the network namespace and cgroups, restore the sysctls, delete the Node object.

        Returns what could not be undone (empty when the machine is as before).
        """
        for component in reversed(self.components):
            component.stop()
        self.components = []
        problems: list[str] = []
        if self.record is not None:
            problems = nodecleanup.clean_up(self.record)
            RECORD.unlink(missing_ok=True)
            self.record = None
            self._admin.call("DELETE", f"/api/v1/nodes/{self.name}")
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None
        return problems

    def import_image(self, archive: Path) -> None:
        """Load an OCI archive (`ociimage.write_image`) into the CRI's image store.

        Raises:
            ControlPlaneError: `ctr images import` failed; the message holds its output.
        """
        result = run_quietly(
            [
                str(self.bin_dir / "ctr"),
                "--address",
                str(self.layout.socket),
                "-n",
                "k8s.io",
                "images",
                "import",
                "--platform",
                "linux/amd64",
                str(archive),
            ]
        )
        if result.returncode != 0:
            raise ControlPlaneError(
                f"ctr images import {archive} failed ({result.returncode}): "
                f"{result.stderr.strip()[-500:]}; read {self.layout.root / 'logs'}"
            )

    def crash(self) -> None:
        """SIGKILL the kubelet and containerd and forget the node without cleaning up, as a
        killed test process would leave it: its containers, shims, mounts, namespace and
        sysctls stay until the next `start` of any real node on this machine ends them."""
        for component in self.components:
            if component.pid is not None and component.running:
                os.killpg(component.pid, signal.SIGKILL)
            component.stop()  # only reaps: the process group is gone already
        self.components = []
        self.record = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def leftovers(self) -> list[str]:
        """This node's containers and shims still alive, as "pid: command" lines: container
        processes by their cgroup under the node's cgroup root, shims by their containerd
        socket in the command line. A killed process its parent has not reaped yet (a zombie,
        which still names its cgroup) is not alive."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                cgroups = (entry / "cgroup").read_text()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state in ("Z", "X"):
                continue
            shim = nodecleanup.SHIM_BINARY in cmdline and str(self.layout.socket) in cmdline
            if shim or f":{self.cgroup_root}/" in cgroups:
                found.append(f"{entry.name}: {cmdline.strip()[:120]}")
        return found

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- startup -------------------------------------------------------------------------------

    def _take_lock(self) -> None:
        self._lock = machine_lock(LOCK, "another real node runs on this machine; stop it first")

    def _start_all(self) -> None:
        for program in ("containerd", "containerd-shim-runc-v2", "ctr", "pause", "cni/bridge"):
            if not (self.bin_dir / program).is_file():
                raise ControlPlaneError(
                    f"no {program} in {self.bin_dir}; build it with scripts/build-node.sh"
                )
        root = self.layout.root
        for directory in (root / "logs", root / "images", self.layout.cni_conf_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self._raise_inotify_limit()
        self._create_netns()
        self._start_containerd()
        images = root / "images"
        for image in (
            ociimage.write_image(
                images / "pause.tar",
                PAUSE_IMAGE,
                ociimage.pause_layer(self.bin_dir / "pause"),
                ociimage.ImageConfig(entrypoint=["/pause"]),
            ),
            ociimage.write_image(
                images / "base.tar", BASE_IMAGE, ociimage.base_layer(), ociimage.ImageConfig()
            ),
        ):
            self.import_image(image.archive)
        nodecleanup.make_cgroups(self.cgroup_root)
        self._start_kubelet()

    def _raise_inotify_limit(self) -> None:
        current = nodecleanup.read_sysctls(["fs/inotify/max_user_instances"])
        if int(current.get("fs/inotify/max_user_instances", INOTIFY_INSTANCES)) < INOTIFY_INSTANCES:
            nodecleanup.write_sysctls({"fs/inotify/max_user_instances": str(INOTIFY_INSTANCES)})

    def _create_netns(self) -> None:
        for argv in (
            ["ip", "netns", "add", self.netns],
            ["ip", "-n", self.netns, "link", "set", "lo", "up"],
        ):
            result = run_quietly(argv)
            if result.returncode != 0:
                raise ControlPlaneError(
                    f"{' '.join(argv)} failed: {result.stderr.strip()}; the real node needs "
                    "root and iproute2"
                )

    def _launch(self, name: str, argv: list[str]) -> Component:
        component = Component(
            name,
            argv,
            self.layout.root / "logs" / f"{name}.log",
            clock=self._clock,
            sleep=self._sleep,
        )
        self.components.append(component.start())
        return component

    def _start_containerd(self) -> None:
        config = self.layout.root / "containerd.toml"
        config.write_text(
            nodeconfig.containerd_config(self.layout, PAUSE_IMAGE, self.bin_dir / "cni")
        )
        conflist = self.layout.cni_conf_dir / "10-k8sai.conflist"
        conflist.write_text(json.dumps(nodeconfig.cni_network(self.layout), indent=2))
        containerd = self._launch(
            "containerd",
            [
                "nsenter",
                f"--net=/run/netns/{self.netns}",
                "--",
                str(self.bin_dir / "containerd"),
                "--config",
                str(config),
            ],
        )
        containerd.wait_ready(self._ctr_probe(), self.startup_timeout_s, "serving")

    def _ctr_probe(self) -> Probe:
        ctr = [str(self.bin_dir / "ctr"), "--address", str(self.layout.socket), "version"]

        def check() -> str | None:
            if not self.layout.socket.exists():
                return f"no socket {self.layout.socket}"
            result = run_quietly(ctr)
            return None if result.returncode == 0 else result.stderr.strip()[-200:]

        return check

    def _start_kubelet(self) -> None:
        user = f"system:node:{self.name}"
        client = pki.write_client_cert(
            self.plane.ca, self.layout.root / "kubelet-client", user, ["system:nodes"]
        )
        serving = pki.write_serving_cert(
            self.plane.ca, self.layout.root / "kubelet-serving", [self.address, self.name]
        )
        kubeconfig = self.layout.root / "kubelet.kubeconfig"
        write_kubeconfig(kubeconfig, self.host.url, self.host.ca_file, user, client_cert=client)
        files = nodeconfig.KubeletFiles(kubeconfig, self.plane.ca.cert, serving.cert, serving.key)
        healthz_port = free_port()
        kubelet_config = nodeconfig.kubelet_config(
            self.layout,
            files,
            self.address,
            free_port(self.address),
            healthz_port,
            self.cgroup_root,
        )
        config_file = self.layout.root / "kubelet.json"
        config_file.write_text(json.dumps(kubelet_config, indent=2))
        args = nodeconfig.kubelet_args(
            config_file, self.layout, kubeconfig, self.name, self.address
        )
        kubelet = self._launch("kubelet", [str(self.plane.binary), "kubelet", *args])
        healthz = HttpsTarget(f"http://127.0.0.1:{healthz_port}").probe("/healthz")
        kubelet.wait_ready(healthz, self.startup_timeout_s, "healthy")
        kubelet.wait_ready(self._node_ready_probe(), self.startup_timeout_s, "Node Ready")

    def _node_ready_probe(self) -> Probe:
        def check() -> str | None:
            status, body = self._admin.get(f"/api/v1/nodes/{self.name}")
            if status != 200:
                return f"GET node {self.name}: HTTP {status}"
            conditions = json.loads(body).get("status", {}).get("conditions", [])
            ready = [c for c in conditions if c.get("type") == "Ready"]
            if ready and ready[0].get("status") == "True":
                return None
            return f"node {self.name} Ready condition: {ready[0] if ready else 'none yet'}"

        return check


__all__ = ["BASE_IMAGE", "PAUSE_IMAGE", "RealNode"]
