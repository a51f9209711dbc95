"""The node agent: the emulator's kubelet as a real client of a real API server.

It registers Nodes, keeps their leases fresh, runs the containers of pods the real scheduler
binds to them as local process groups (the emulator's `Kubelet`: RSS-enforced memory limits →
OOMKilled 137, SIGTERM → grace → SIGKILL on deletion, restartPolicy, activeDeadlineSeconds),
writes `pods/status` as a kubelet does (terminal phase before the final grace-0 delete),
applies in-place resizes (`pods/resize`) when the node has room, and serves `/containerLogs`
and `/stats/summary` (one server per node) so `pods/log` and the node proxy work through the
apiserver.

With `adopt_selector`, it also adopts the host Nodes that match it as they appear (the Nodes an
autoscaler's cloud provider creates with no kubelet behind them, as Karpenter's kwok provider
does): it patches their status Ready with their allocatable, keeps their leases, runs the pods
bound to them (also those bound before it adopted the Node) and lets them go when the Node is
deleted.

Example:
    >>> nodes = [NodeSpec("node-a", cpu="8", memory="16Gi")]
    >>> with NodeAgent(host_kubeconfig, nodes, workdir) as agent:  # doctest: +SKIP
    ...     agent.node_names
    ('node-a',)
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from ...kube.kubelet import Kubelet
from ...kube.nodes import NodeSpec
from ...kube.store import ClusterState, Obj
from .. import pki
from ..informer import TIMEOUT, Informer
from ..loops import describe_loop
from ..patches import STRATEGIC
from .dra import ClaimPreparer, DraGpus, publish
from .logserver import LogServer, NotOnNode
from .nodes import NodeHeartbeat, adopted_status, age_s, node_address, node_object
from .remote import RemoteStore

TICK_S = 0.1  # while containers run: memory sampling and exits
IDLE_TICK_S = 2.0  # nothing running: pod changes wake the loop anyway


class NodeAgent:
    """Nodes of a real cluster whose pods run as local processes; see the module docstring.

    Args:
        kubeconfig: the agent's kubeconfig (an identity that may write nodes, leases,
            pods/status, events and delete pods).
        nodes: the nodes to register.
        workdir: pod directories, log files and the agent's serving certificate go here.
        client_ca: serve only clients with a certificate this CA signed (the apiservers'
            `--kubelet-client-certificate`); None serves anyone.
        address: the nodes' InternalIP, where their servers listen (`node_address()`).
        dra_gpus: fake GPUs published as DRA devices (`dra.py`: the agent plays their driver).
        adopt_selector: a label selector of host Nodes to adopt (see the module docstring).
        adopt_after_s: adopt a Node only this long after it was created: the time a real
            machine takes to boot and its kubelet to register (0: at once, as kwok's Nodes
            appear with nothing to boot).
    """

    def __init__(
        self,
        kubeconfig: Path,
        nodes: Sequence[NodeSpec],
        workdir: Path,
        client_ca: Path | None = None,
        address: str | None = None,
        dra_gpus: Sequence[DraGpus] = (),
        adopt_selector: str | None = None,
        adopt_after_s: float = 0.0,
    ) -> None:
        if not (nodes or adopt_selector) or len({n.name for n in nodes}) != len(nodes):
            names = [n.name for n in nodes]
            raise ValueError(f"a node agent needs distinct node names, got {names}")
        self.node_names = tuple(n.name for n in nodes)
        by_name = {n.name: n for n in nodes}
        for gpus in dra_gpus:
            spec = by_name.get(gpus.node)
            if spec is None or spec.gpus:
                raise ValueError(
                    f"DRA GPUs of node {gpus.node!r} need a node of this agent with gpus=0 (a "
                    "node offers its GPUs through the device plugin or a DRA driver, not both)"
                )
        self.workdir = Path(workdir)
        self.api_client = config.new_client_from_config(config_file=str(kubeconfig))
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._mine = set(self.node_names)  # with the adopted nodes
        self.store = RemoteStore(self.api_client, "host", self._mine.__contains__, self._wake.set)
        state = ClusterState()
        state.stores[self.store.name] = self.store
        self._nodes_view = state.new_store("nodes")  # what the kubelet checks for Ready
        del state.stores["nodes"]
        self.dra_gpus = tuple(dra_gpus)
        claims = ClaimPreparer(self.api_client, self.dra_gpus).prepare if dra_gpus else None
        self.kubelet = Kubelet(
            state, self._nodes_view, self.workdir / "pods", self._wake, claims, self._pod_error
        )
        ca = pki.write_ca(self.workdir / "pki", "k8s-ai-node-agent")
        self.address = address or node_address()
        hosts = list(dict.fromkeys([self.address, "127.0.0.1", "localhost"]))
        self._serving = pki.write_serving_cert(ca, self.workdir / "serving", hosts)
        self._client_ca = client_ca
        self.servers = {n.name: self._server(n.name) for n in nodes}
        self._version = client.VersionApi(self.api_client).get_code().git_version
        self.node_objects = [
            node_object(n, self._version, self.servers[n.name].port, self.address) for n in nodes
        ]
        self.heartbeat = NodeHeartbeat(self.api_client, self.node_objects)
        self.adopted: dict[str, Obj] = {}  # adopted node name → the Node as adopted
        self.adopt_after_s = adopt_after_s
        self._host_nodes = (
            Informer(
                self.api_client,
                client.CoreV1Api(self.api_client).list_node,
                self._wake.set,
                label_selector=adopt_selector,
            )
            if adopt_selector
            else None
        )
        self._loop = threading.Thread(target=self._run, name="agent-kubelet", daemon=True)
        self._errors: list[BaseException] = []

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> NodeAgent:
        """Serve logs, register the nodes, start watching pods and running them."""
        for server in self.servers.values():
            server.start()
        for node in self.node_objects:
            self._nodes_view.put("nodes", node)
        self.heartbeat.register()
        if self.dra_gpus:
            publish(self.api_client, self.dra_gpus)
        self.store.start()
        if self._host_nodes is not None:
            self._host_nodes.start()
        self._loop.start()
        return self

    def stop(self) -> None:
        """Kill every container process and stop serving (the Node objects stay)."""
        self._stop.set()
        self._wake.set()
        if self._loop.is_alive():
            self._loop.join(timeout=10)
        self.kubelet.stop()
        self.heartbeat.stop()
        self.store.stop()
        if self._host_nodes is not None:
            self._host_nodes.stop()
        for server in list(self.servers.values()):
            server.stop()

    def __enter__(self) -> NodeAgent:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- what tests look at ----------------------------------------------------------------------

    def processes_alive(self) -> int:
        """Container process groups still alive on this agent's nodes."""
        return self.kubelet.processes_alive()

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions the kubelet loop met (it goes on after each)."""
        return list(self._errors)

    def describe(self) -> str:
        """The kubelet loop (alive, where, its last errors) and the pods it runs, for a test
        that waited in vain."""
        lines = [describe_loop("node agent", self._loop, self._errors)]
        for run in list(self.kubelet.runs.values()):
            alive = [n for n, c in run.containers.items() if c.process is not None]
            lines.append(f"runs pod {run.namespace}/{run.name} on {run.node}: processes {alive}")
        return "\n".join(lines)

    def kill_container(self, namespace: str, pod: str, signum: int = signal.SIGKILL) -> None:
        """Send a signal to a running pod's containers (a crash from outside)."""
        for run in self.kubelet.runs.values():
            meta = self._pod_meta(run.uid)
            if meta is not None and (meta["namespace"], meta["name"]) == (namespace, pod):
                for state in run.containers.values():
                    if state.process is not None:
                        state.process.signal_group(signum)
        self._wake.set()

    # -- internals -------------------------------------------------------------------------------

    def _server(self, node: str) -> LogServer:
        """The (not yet started) `/containerLogs` and `/stats/summary` server of `node`."""
        return LogServer(
            self.log_lookup,
            self._serving,
            stats=partial(self.kubelet.summary, node),
            address=self.address,
            client_ca=self._client_ca,
        )

    def _follow_host_nodes(self) -> None:
        """Adopt the matching Nodes that appeared, let go of those that were deleted."""
        if self._host_nodes is None:
            return
        present = {n["metadata"]["name"]: n for n in self._host_nodes.items()}
        for name, node in present.items():
            meta = node["metadata"]
            if name in self.adopted or meta.get("deletionTimestamp"):
                continue
            if age_s(meta.get("creationTimestamp")) >= self.adopt_after_s:
                self._adopt(node)
        for name in [n for n in self.adopted if n not in present]:
            self._release(name)

    def _adopt(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        server = self._server(name).start()
        status = adopted_status(node, self._version, server.port, self.address)
        try:
            client.CoreV1Api(self.api_client).patch_node_status(
                name,
                {"status": status},
                _content_type=STRATEGIC,
                **TIMEOUT,
            )
            self.heartbeat.add(name)
        except ApiException as error:
            server.stop()
            if error.status == 404:
                return  # deleted before it was adopted
            raise
        self.servers[name] = server
        self.adopted[name] = {**node, "status": {**(node.get("status") or {}), **status}}
        self._nodes_view.put("nodes", self.adopted[name])
        self._mine.add(name)

    def _release(self, name: str) -> None:
        self._mine.discard(name)
        self._nodes_view.remove("nodes", "", name)
        self.heartbeat.remove(name)
        self.servers.pop(name).stop()
        del self.adopted[name]

    def _pod_error(self, error: BaseException) -> None:
        self._errors.append(error)  # one pod's: the kubelet synced the others all the same

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._follow_host_nodes()
                self.kubelet.tick()
            except Exception as error:  # noqa: BLE001 - one bad pass must not stop the node
                self._errors.append(error)
            self._wake.wait(TICK_S if self.kubelet.processes_alive() else IDLE_TICK_S)

    def _pod_meta(self, uid: str) -> dict[str, str] | None:
        for pod in self.store.list("pods"):
            if pod["metadata"]["uid"] == uid:
                return dict(pod["metadata"])
        return None

    def log_lookup(
        self, namespace: str, name: str, container: str, previous: bool
    ) -> tuple[Path, Callable[[], bool]] | str:
        pods = [p for p in self.store.list("pods", namespace) if p["metadata"]["name"] == name]
        if not pods:
            return NotOnNode(f'pod "{name}" does not exist')  # a kubelet's words
        uid = pods[0]["metadata"]["uid"]
        path = self.kubelet.log_file(uid, container, previous)
        if path is not None:
            return path, lambda: self.kubelet.is_running(uid, container)
        if previous:
            return f'previous terminated container "{container}" in pod "{name}" not found'
        return f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
