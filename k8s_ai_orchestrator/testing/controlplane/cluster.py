"""A real Kubernetes control plane on loopback: one etcd, a host apiserver with its controller
manager and scheduler, and per tenant one more apiserver (own etcd prefix, own service-account
key and tokens) with a vCluster-style controller manager and no scheduler.

All components are personalities of the `kubeplane` binary (`scripts/build-kubeplane.sh`).

Example:
    >>> with start_control_plane(bin_dir, run_dir, tenants=["team-a"]) as plane:  # doctest: +SKIP
    ...     print(plane.host.url, plane.tenants["team-a"].kubeconfig)
    https://127.0.0.1:40123 /tmp/run/team-a/admin.kubeconfig
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from . import flags, pki
from .flags import EtcdPorts, Gates
from .process import Component, ControlPlaneError, HttpsTarget, free_port

HOST = "host"
KUBELET_CLIENT = "kube-apiserver-kubelet-client"  # the apiservers' identity towards nodes
_TENANT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")


@dataclass(frozen=True)
class ApiServer:
    """One running apiserver as a client sees it."""

    name: str  # "host" or the tenant name
    url: str  # https://127.0.0.1:<port>
    etcd_prefix: str
    admin_token: str  # user "admin" in group system:masters
    ca_file: Path  # verifies the serving certificate
    kubeconfig: Path  # admin kubeconfig (token auth)
    # where its kubelet traffic goes (an HTTP CONNECT proxy's Unix socket), when the plane was
    # started with this tenant in `kubelet_egress`; the proxy is the tenant syncer's to serve
    kubelet_egress_socket: Path | None = None


def write_kubeconfig(
    path: Path,
    server: str,
    ca_file: Path,
    user: str,
    token: str = "",
    client_cert: pki.KeyPair | None = None,
) -> Path:
    """Write a one-context kubeconfig (JSON, which every YAML loader reads) and return it.

    The user proves itself with `token`, or with `client_cert` when one is given.
    """
    credentials: dict[str, str] = {"token": token}
    if client_cert is not None:
        credentials = {
            "client-certificate": str(client_cert.cert),
            "client-key": str(client_cert.key),
        }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kubeplane",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "kubeplane", "context": {"cluster": "kubeplane", "user": user}}],
        "current-context": "kubeplane",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


def _default_etcd_dir(run_dir: Path) -> Path:
    shm = Path("/dev/shm")
    parent = shm if shm.is_dir() and shm.stat().st_mode & 0o002 else run_dir
    return Path(tempfile.mkdtemp(prefix="kubeplane-etcd-", dir=parent))


class ControlPlane:
    """Start and stop the control plane; see the module docstring.

    Args:
        bin_dir: directory with the `kubeplane` binary (the build script's last output line).
        run_dir: PKI, kubeconfigs and one log file per component go here (created if needed).
        tenants: tenant names (DNS labels); each gets its own apiserver and controller manager.
        etcd_data_dir: etcd's data directory; default a fresh directory on /dev/shm (removed on
            stop), or under `run_dir` without /dev/shm.
        gates: feature gates / runtime config for the apiservers, controller managers, scheduler.
        kubelet_egress: tenants whose apiserver reaches kubelets through an HTTP CONNECT proxy
            on `<run_dir>/<tenant>/kubelet-egress.sock`, Hostname addresses first (for the real
            vCluster syncer: `vclustersyncer`); without a proxy there their `pods/log` fails.
        startup_timeout_s: per component, from its start to ready.
        clock, sleep: injected so tests can drive time.
    """

    def __init__(
        self,
        bin_dir: Path,
        run_dir: Path,
        tenants: Sequence[str] = (),
        *,
        etcd_data_dir: Path | None = None,
        gates: Gates | None = None,
        kubelet_egress: Sequence[str] = (),
        startup_timeout_s: float = 180.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        bad = [name for name in tenants if not _TENANT_NAME.match(name) or name == HOST]
        if bad or len(set(tenants)) != len(tenants):
            raise ControlPlaneError(
                f"tenant names {list(tenants)} must be distinct DNS labels of at most 32 "
                f"characters and not '{HOST}' (bad: {bad})"
            )
        self.binary = Path(bin_dir) / "kubeplane"
        self.run_dir = Path(run_dir)
        self.tenant_names = tuple(tenants)
        unknown = set(kubelet_egress) - set(tenants)
        if unknown:
            raise ControlPlaneError(f"kubelet_egress names no tenant: {sorted(unknown)}")
        self.kubelet_egress = frozenset(kubelet_egress)
        self.gates = gates or Gates()
        self.startup_timeout_s = startup_timeout_s
        self._etcd_dir = etcd_data_dir
        self._own_etcd_dir = etcd_data_dir is None
        self._clock = clock
        self._sleep = sleep
        self.components: list[Component] = []
        self.host: ApiServer | None = None
        self.tenants: dict[str, ApiServer] = {}
        self.etcd_url = ""

    # -- public ------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        """Start every component in dependency order and wait until each is ready.

        Raises:
            ControlPlaneError: the binary is missing or a component failed; everything already
                started is stopped first.
        """
        if self.components:
            return self  # already started (e.g. start_control_plane() used in a `with`)
        if not self.binary.is_file():
            raise ControlPlaneError(
                f"no kubeplane binary at {self.binary}; build it with scripts/build-kubeplane.sh"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_all()
        except BaseException:
            self.stop()
            raise
        return self

    def compact_history(self) -> int:
        """Compact etcd's history up to its current revision, as kube-apiserver does every
        `--etcd-compaction-interval` (5 min); returns that revision.

        Afterwards a watch or list from an older resourceVersion gets 410 Gone, which a plane
        started for one test session would otherwise not show for its first minutes.
        """
        if not self.etcd_url:
            raise ControlPlaneError("the control plane is not started")
        header = _etcd_call(self.etcd_url, "kv/range", {"key": base64.b64encode(b"/").decode()})
        revision = int(header["header"]["revision"])
        _etcd_call(self.etcd_url, "kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def stop(self) -> None:
        """Stop every component, newest first, and remove an etcd directory made by start."""
        for component in reversed(self.components):
            component.stop()
        if self._own_etcd_dir and self._etcd_dir is not None:
            shutil.rmtree(self._etcd_dir, ignore_errors=True)
            self._etcd_dir = None

    @property
    def ca(self) -> pki.KeyPair:
        """The CA that signs every certificate of this plane; apiservers trust its clients."""
        return pki.KeyPair(self.run_dir / "pki" / "ca.crt", self.run_dir / "pki" / "ca.key")

    @property
    def ready_times(self) -> dict[str, float]:
        """Seconds from each component's start to each readiness stage, keyed "name: stage"."""
        return {
            f"{c.name}: {what}": seconds
            for c in self.components
            for what, seconds in c.ready_after_s.items()
        }

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- startup -------------------------------------------------------------------------------

    def _start_all(self) -> None:
        ca = pki.write_ca(self.ca.cert.parent)
        etcd = self._start_etcd()
        names = (HOST, *self.tenant_names)
        plans = [
            _ApiServerPlan.create(self.run_dir / name, name, ca, name in self.kubelet_egress)
            for name in names
        ]
        servers = [self._start_apiserver(plan, etcd) for plan in plans]
        for plan, (component, server) in zip(plans, servers, strict=True):
            target = HttpsTarget(server.url, server.admin_token, server.ca_file)
            component.wait_ready(target.probe("/readyz"), self.startup_timeout_s, "ready")
            if plan.name == HOST:
                self.host = server
            else:
                self.tenants[plan.name] = server
        controllers = [self._start_controller_manager(plan, ca) for plan in plans]
        controllers.append(self._start_scheduler(plans[0]))
        for component, port in controllers:
            probe = HttpsTarget(f"https://127.0.0.1:{port}").probe("/healthz")
            component.wait_ready(probe, self.startup_timeout_s, "healthy")
        for component, server in servers:
            target = HttpsTarget(server.url, server.admin_token, server.ca_file)
            probe = target.probe("/api/v1/namespaces/default/serviceaccounts/default")
            component.wait_ready(probe, self.startup_timeout_s, "serving ServiceAccount default")

    def _launch(self, name: str, personality: str, args: Sequence[str]) -> Component:
        component = Component(
            name,
            [str(self.binary), personality, *args],
            self.run_dir / "logs" / f"{name}.log",
            clock=self._clock,
            sleep=self._sleep,
        )
        self.components.append(component.start())
        return component

    def _start_etcd(self) -> EtcdPorts:
        if self._etcd_dir is None:
            self._etcd_dir = _default_etcd_dir(self.run_dir)
        ports = EtcdPorts(client=free_port(), peer=free_port())
        etcd = self._launch("etcd", "etcd", flags.etcd_args(ports, self._etcd_dir))
        probe = HttpsTarget(ports.client_url).probe("/health")
        etcd.wait_ready(probe, self.startup_timeout_s, "healthy")
        self.etcd_url = ports.client_url
        return ports

    def _start_apiserver(
        self, plan: _ApiServerPlan, etcd: EtcdPorts
    ) -> tuple[Component, ApiServer]:
        port = free_port()
        url = f"https://127.0.0.1:{port}"
        args = flags.apiserver_args(port, etcd, plan.etcd_prefix, plan.files, self.gates)
        component = self._launch(f"apiserver-{plan.name}", "kube-apiserver", args)
        kubeconfig = write_kubeconfig(
            plan.directory / "admin.kubeconfig", url, plan.ca.cert, "admin", plan.admin.token
        )
        for identity in (plan.controller_manager, plan.scheduler):
            write_kubeconfig(
                plan.directory / f"{identity.user.split(':')[-1]}.kubeconfig",
                url,
                plan.ca.cert,
                identity.user,
                identity.token,
            )
        egress = plan.files.egress_selector_config
        server = ApiServer(
            plan.name,
            url,
            plan.etcd_prefix,
            plan.admin.token,
            plan.ca.cert,
            kubeconfig,
            kubelet_egress_socket=None if egress is None else egress.with_suffix(".sock"),
        )
        return component, server

    def _start_controller_manager(
        self, plan: _ApiServerPlan, ca: pki.KeyPair
    ) -> tuple[Component, int]:
        port = free_port()
        files = flags.ControllerManagerFiles(
            kubeconfig=plan.directory / "kube-controller-manager.kubeconfig",
            ca_cert=ca.cert,
            ca_key=ca.key,
            service_account_key=plan.files.service_account_key,
            cert_dir=plan.directory / "kcm-certs",
        )
        if plan.name == HOST:
            args = flags.controller_manager_args(port, files, flags.HOST_CONTROLLERS, self.gates)
        else:
            args = flags.controller_manager_args(
                port, files, flags.TENANT_CONTROLLERS, self.gates, node_monitor_grace_period="180s"
            )
        name = f"controller-manager-{plan.name}"
        return self._launch(name, "kube-controller-manager", args), port

    def _start_scheduler(self, plan: _ApiServerPlan) -> tuple[Component, int]:
        port = free_port()
        kubeconfig = plan.directory / "kube-scheduler.kubeconfig"
        args = flags.scheduler_args(
            port, kubeconfig, plan.directory / "scheduler-certs", self.gates
        )
        return self._launch(f"scheduler-{plan.name}", "kube-scheduler", args), port


@dataclass(frozen=True)
class _ApiServerPlan:
    """Files and identities of one apiserver, written before it starts."""

    name: str
    directory: Path
    etcd_prefix: str
    ca: pki.KeyPair
    files: flags.ApiServerFiles
    admin: pki.Identity
    controller_manager: pki.Identity
    scheduler: pki.Identity

    @staticmethod
    def create(
        directory: Path, name: str, ca: pki.KeyPair, kubelet_egress: bool = False
    ) -> _ApiServerPlan:
        directory.mkdir(parents=True, exist_ok=True)
        egress_config = None
        if kubelet_egress:  # the socket is kubelet-egress.sock beside it
            egress_config = directory / "kubelet-egress.json"
            socket_path = egress_config.with_suffix(".sock")
            egress_config.write_text(json.dumps(flags.kubelet_egress_config(socket_path)))
        serving = pki.write_serving_cert(ca, directory / "serving", ["127.0.0.1", "localhost"])
        admin = pki.new_identity("admin", "system:masters")
        kcm = pki.new_identity("system:kube-controller-manager")
        scheduler = pki.new_identity("system:kube-scheduler")
        sa_key = directory / "service-account.key"
        sa_public_key = pki.write_public_key(
            pki.write_private_key(sa_key), directory / "service-account.pub"
        )
        files = flags.ApiServerFiles(
            tls_cert=serving.cert,
            tls_key=serving.key,
            client_ca=ca.cert,
            token_file=pki.write_token_file(directory / "tokens.csv", [admin, kcm, scheduler]),
            service_account_key=sa_key,
            service_account_public_key=sa_public_key,
            kubelet_client=astuple(
                pki.write_client_cert(ca, directory / "kubelet-client", KUBELET_CLIENT)
            ),
            egress_selector_config=egress_config,
        )
        prefix = f"/kubeplane/{name}" if name == HOST else f"/kubeplane/tenant-{name}"
        return _ApiServerPlan(name, directory, prefix, ca, files, admin, kcm, scheduler)


def start_control_plane(
    bin_dir: Path,
    run_dir: Path,
    tenants: Sequence[str] = (),
    *,
    etcd_data_dir: Path | None = None,
    gates: Gates | None = None,
    kubelet_egress: Sequence[str] = (),
    startup_timeout_s: float = 180.0,
) -> ControlPlane:
    """Start a `ControlPlane` (arguments as in its constructor) and return it, ready.

    Use it as a context manager, or call `stop()`, to leave no process behind.
    """
    plane = ControlPlane(
        bin_dir,
        run_dir,
        tenants,
        etcd_data_dir=etcd_data_dir,
        gates=gates,
        kubelet_egress=kubelet_egress,
        startup_timeout_s=startup_timeout_s,
    )
    return plane.start()


def _etcd_call(url: str, path: str, body: dict[str, object]) -> dict[str, Any]:
    """One call of etcd's JSON gateway (`/v3/...`) on its client URL."""
    request = urllib.request.Request(
        f"{url}/v3/{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer
