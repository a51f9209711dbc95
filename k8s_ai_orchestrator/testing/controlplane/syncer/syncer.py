"""A vCluster-style syncer between one tenant apiserver and the host.

What it does, as vCluster does with our recommended values (`helm/vcluster-values.yaml`):

- host namespace `vcluster-<tenant>` with the secret `vc-<tenant>` (key `config`: the tenant's
  kubeconfig; labels `app=vcluster`, `vcluster-name=<tenant>`);
- nodes from the host: every host node appears in the tenant with its labels, taints and
  status (`nodes.py`), its kubelet endpoint pointing at this syncer's proxy for that node,
  which serves `/containerLogs` and `/stats/summary` with host pod names turned into the
  tenant's (`proxies.py`);
- pods to the host: a tenant pod (the tenant has no scheduler) becomes a host pod named
  `<name>-x-<namespace>-x-<tenant>` in `vcluster-<tenant>`, with the secrets and config maps it
  reads and its PriorityClass copied; when the host scheduler places it, the tenant pod is bound
  to the same node, and the host pod's status flows back. As vCluster's (every host node
  synced, no node selector): a pod created with a `nodeName` keeps it on the host, unchecked,
  and a pod that has started is never created on the host again;
- no PodGroups: as vCluster's open-source syncer, it copies no `scheduling.k8s.io` objects and
  drops a pod's `schedulingGroup` (its Kubernetes types predate it), so a gang admitted with
  `workload` in a tenant is no gang on the host (the executor refuses that mode on vCluster
  tenants);
- resizes: a tenant pod resized in place (`pods/resize`) has its host pod resized the same way;
  whether the node had room comes back with the status (`PodResizePending`, the resources);
- deletion both ways: a tenant delete deletes the host pod with the same grace period; when the
  host pod is gone (finished deletion, eviction, preemption) the tenant pod is deleted with
  grace 0, as vCluster's does. Its status stays what was copied while the host pod existed: an
  end the host pod reached just before it went is not copied from the deleted object, so a
  tenant pod a finalizer keeps (the Job's) can stay Running, deleted, with its Job active;
- events on host pods (the scheduler's `FailedScheduling` and `Preempted`, the agent's) are
  copied to the tenant pod with the host's message, as vCluster copies them: a UID in it (the
  scheduler's `Preempted by pod <uid>`) stays the host pod's (`events.py`). An event for a
  tenant namespace being deleted is dropped (the API takes nothing new there); a write that
  fails otherwise is tried on the next pass and keeps no pod from syncing.

Jobs stay in the tenant, where the tenant's controller manager runs them.

Example:
    >>> syncer = TenantSyncer(host, tenant, "team-a", kubeconfig, logs, work)  # doctest: +SKIP
    >>> syncer.start(); syncer.host_namespace  # doctest: +SKIP
    'vcluster-team-a'
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from ...kube import resize
from ...kube.lifecycle import is_terminal
from ..agent.logserver import LogLookup
from ..informer import TIMEOUT, Informer, Obj
from ..loops import describe_loop
from ..patches import STRATEGIC, ignoring, replaced, status_patch, terminating
from . import translate
from .events import EventSync, PodRef
from .nodes import NodeSync
from .proxies import NodeProxies

TICK_S = 5.0  # a safety net: every watched change wakes the loop at once
MAX_ERRORS = 100  # the last errors kept for `describe`


class TenantSyncer:
    """See the module docstring.

    Args:
        host_api, tenant_api: admin clients of the host and the tenant apiserver.
        tenant: the tenant (vCluster) name.
        tenant_kubeconfig: the kubeconfig stored in `vc-<tenant>`.
        host_logs: the node agent's log lookup, by host namespace and pod name.
        workdir: the node proxies' serving certificate goes here.
        host_stats: a host node's `/stats/summary` (node name → document), if any.
        address: where the node proxies listen (the host nodes' InternalIP, which the tenant's
            copies keep).
        client_ca: serve only the tenant apiserver's kubelet client certificate (its CA).
    """

    def __init__(
        self,
        host_api: client.ApiClient,
        tenant_api: client.ApiClient,
        tenant: str,
        tenant_kubeconfig: Path,
        host_logs: LogLookup,
        workdir: Path,
        host_stats: Callable[[str], Obj] | None = None,
        address: str = "127.0.0.1",
        client_ca: Path | None = None,
    ) -> None:
        self.tenant = tenant
        self.host_namespace = f"vcluster-{tenant}"
        self.tenant_kubeconfig = Path(tenant_kubeconfig)
        self.host_api, self.tenant_api = host_api, tenant_api
        self.host = client.CoreV1Api(host_api)
        self.virtual = client.CoreV1Api(tenant_api)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.host_pods = Informer(
            host_api,
            self.host.list_namespaced_pod,
            self._wake.set,
            namespace=self.host_namespace,
            label_selector=f"{translate.MANAGED_BY}={tenant}",
        )
        self.tenant_pods = Informer(
            tenant_api, self.virtual.list_pod_for_all_namespaces, self._wake.set
        )
        self.host_nodes = Informer(host_api, self.host.list_node, self._wake.set)
        self.host_events = Informer(
            host_api,
            self.host.list_namespaced_event,
            self._wake.set,
            namespace=self.host_namespace,
        )
        self.events = EventSync(self._write_event, self._record)
        self.proxies = NodeProxies(
            tenant,
            self.host_namespace,
            self.tenant_pods.items,
            host_logs,
            workdir,
            host_stats,
            address,
            client_ca,
        )
        self.nodes = NodeSync(self.virtual, self.proxies.port)
        self._copied: dict[str, Obj] = {}  # tenant pod uid → the status last copied
        self._gone: set[str] = set()  # tenant pod uids whose host pod is gone
        self._synced_classes: set[str] = set()
        self.errors: list[BaseException] = []
        self._loop = threading.Thread(target=self._run, name=f"syncer-{tenant}", daemon=True)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> TenantSyncer:
        """Create the host namespace and secret, start the watches, the log proxy and the loop."""
        self._publish_secret()
        for informer in self._informers():
            informer.start()
        self._loop.start()
        return self

    def stop(self) -> None:
        """Stop the loop, the watches and the log proxy."""
        self._stop.set()
        self._wake.set()
        if self._loop.is_alive():
            self._loop.join(timeout=10)
        for informer in self._informers():
            informer.stop()
        self.proxies.stop()

    def describe(self) -> str:
        """What the syncer holds now, for a test that waited in vain: its loop (and where it
        is), its last errors, its host pods and where each stands."""
        lines = [describe_loop(f"our syncer of {self.tenant}", self._loop, self.errors)]
        for pod in self.host_pods.items():
            status = pod.get("status") or {}
            conditions = [
                (c["type"], c["status"], c.get("reason")) for c in status.get("conditions") or []
            ]
            lines.append(
                f"host pod {pod['metadata']['name']}: node={pod['spec'].get('nodeName')} "
                f"phase={status.get('phase')} conditions={conditions}"
            )
        return "\n".join(lines)

    def _informers(self) -> tuple[Informer, ...]:
        return (self.host_nodes, self.host_pods, self.tenant_pods, self.host_events)

    def _publish_secret(self) -> None:
        with ignoring(409):
            self.host.create_namespace({"metadata": {"name": self.host_namespace}})
        labels = {"app": "vcluster", "vcluster-name": self.tenant}
        secret = {
            "metadata": {
                "name": f"vc-{self.tenant}",
                "namespace": self.host_namespace,
                "labels": labels,
            },
            "stringData": {"config": self.tenant_kubeconfig.read_text()},
        }
        try:
            self.host.create_namespaced_secret(self.host_namespace, secret)
        except ApiException as error:
            if error.status != 409:
                raise
            self.host.replace_namespaced_secret(f"vc-{self.tenant}", self.host_namespace, secret)

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.reconcile()
            except Exception as error:  # noqa: BLE001 - the next pass retries
                self._record(error)
            self._wake.wait(TICK_S)

    def reconcile(self) -> None:
        """One pass: nodes, events, every tenant pod, then host pods whose tenant pod is gone."""
        self.nodes.sync(self.host_nodes.items())
        virtual = {self._host_name(p): p for p in self.tenant_pods.items()}
        for name, pod in virtual.items():
            meta = pod["metadata"]
            self.events.remember(name, PodRef(meta["namespace"], meta["name"], meta["uid"]))
        self.events.sync(self.host_events.items())  # before a pod's end is copied
        for pod in virtual.values():
            self._each(self._sync_pod, pod)
        for pod in self.host_pods.items():
            owner = virtual.get(pod["metadata"]["name"])
            uid = (pod["metadata"].get("annotations") or {}).get(translate.OBJECT_UID)
            if owner is None or owner["metadata"]["uid"] != uid:
                self._each(self._delete_host, pod, None)

    def _each(self, sync: Callable[..., None], pod: Obj, *args: object) -> None:
        """One pod's part of a pass: its error is recorded and retried on the next pass, and
        never keeps the pods after it from syncing (vCluster's syncer requeues per object)."""
        try:
            sync(pod, *args)
        except Exception as error:  # noqa: BLE001 - the next pass retries this pod
            self._record(error)

    def _record(self, error: BaseException) -> None:
        """Keep an error of the loop for `describe`: the last `MAX_ERRORS` of them."""
        self.errors.append(error)
        del self.errors[:-MAX_ERRORS]

    def _sync_pod(self, vpod: Obj) -> None:
        meta = vpod["metadata"]
        uid = meta["uid"]
        name = self._host_name(vpod)
        tomb = self.host_pods.pop_tombstone(self.host_namespace, name)
        if tomb is not None and _owner_uid(tomb) == uid:
            self._gone.add(uid)  # its last state is not copied: vCluster's does not either
        hpod = self.host_pods.get(self.host_namespace, name)
        if hpod is not None and _owner_uid(hpod) != uid:
            return  # a host pod of an older tenant pod of the same name: removed by reconcile
        if hpod is None:
            if uid in self._gone or meta.get("deletionTimestamp"):
                self._finish_tenant_delete(vpod)
            elif not is_terminal(vpod) and not (vpod.get("status") or {}).get("startTime"):
                self._create_host(vpod)  # as vCluster: never for a pod that already started
            return
        node = (hpod.get("spec") or {}).get("nodeName")
        if node and not vpod["spec"].get("nodeName"):
            self._bind(vpod, node)
        self._copy_status(vpod, hpod)
        if meta.get("deletionTimestamp") and not hpod["metadata"].get("deletionTimestamp"):
            self._delete_host(hpod, meta.get("deletionGracePeriodSeconds"))
        elif not is_terminal(hpod) and resize.desired(vpod) != resize.desired(hpod):
            self._resize_host(hpod, vpod)

    def _host_name(self, vpod: Obj) -> str:
        meta = vpod["metadata"]
        return translate.host_name(meta["name"], meta["namespace"], self.tenant)

    # -- writes --------------------------------------------------------------------------------

    def _create_host(self, vpod: Obj) -> None:
        namespace = vpod["metadata"]["namespace"]
        for kind, name in sorted(translate.referenced(vpod)):
            self._copy_object(kind, namespace, name)
        priority = vpod["spec"].get("priorityClassName")
        if priority:
            self._copy_priority_class(priority)
        body = translate.host_pod(vpod, self.tenant, self.host_namespace, priority_synced=True)
        try:
            created = self.host.create_namespaced_pod(self.host_namespace, body, **TIMEOUT)
        except ApiException as error:
            if error.status == 409:
                return  # created by an earlier pass; the watch brings it
            raise
        self.host_pods.update(self.host_api.sanitize_for_serialization(created))

    def _copy_object(self, kind: str, namespace: str, name: str) -> None:
        read = (
            self.virtual.read_namespaced_secret
            if kind == "Secret"
            else self.virtual.read_namespaced_config_map
        )
        try:
            obj = self.tenant_api.sanitize_for_serialization(read(name, namespace, **TIMEOUT))
        except ApiException as error:
            if error.status == 404:
                return  # the agent reports CreateContainerConfigError, as a kubelet would
            raise
        body = translate.host_copy(obj, kind, self.tenant, self.host_namespace)
        create = (
            self.host.create_namespaced_secret
            if kind == "Secret"
            else self.host.create_namespaced_config_map
        )
        with ignoring(409):
            create(self.host_namespace, body, **TIMEOUT)

    def _copy_priority_class(self, name: str) -> None:
        if name in self._synced_classes:
            return
        scheduling = client.SchedulingV1Api(self.tenant_api)
        try:
            found = scheduling.read_priority_class(name, **TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                return
            raise
        host_name = translate.host_priority_class(name, self.host_namespace, self.tenant)
        body = {
            "metadata": {"name": host_name, "labels": {translate.MANAGED_BY: self.tenant}},
            "value": found.value,
            "preemptionPolicy": found.preemption_policy or "PreemptLowerPriority",
            "description": f"{name} of vCluster {self.tenant}",
        }
        with ignoring(409):
            client.SchedulingV1Api(self.host_api).create_priority_class(body, **TIMEOUT)
        self._synced_classes.add(name)

    def _bind(self, vpod: Obj, node: str) -> None:
        meta = vpod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        with ignoring(404, 409):
            self.virtual.create_namespaced_pod_binding(
                meta["name"], meta["namespace"], body, _preload_content=False, **TIMEOUT
            )

    def _copy_status(self, vpod: Obj, hpod: Obj) -> None:
        meta = vpod["metadata"]
        status = translate.tenant_status(hpod)
        if not status or self._copied.get(meta["uid"]) == status:
            return
        before = self._copied.get(meta["uid"])  # only conditions copied earlier are removed
        # the tenant pod gone, or a new one took its name: nothing to copy
        with ignoring(404, 409, refused=replaced):
            self.virtual.patch_namespaced_pod_status(
                meta["name"],
                meta["namespace"],
                status_patch(before, status, uid=meta["uid"]),
                _content_type=STRATEGIC,
                **TIMEOUT,
            )
            self._copied[meta["uid"]] = status

    def _resize_host(self, hpod: Obj, vpod: Obj) -> None:
        """Give the host pod the tenant pod's new container resources (`pods/resize`)."""
        wanted = {c["name"]: c for c in vpod["spec"]["containers"]}
        containers = [
            {
                "name": c["name"],
                "resources": wanted[c["name"]].get("resources") or {},
                **({"resizePolicy": c["resizePolicy"]} if "resizePolicy" in c else {}),
            }
            for c in hpod["spec"]["containers"]
            if c["name"] in wanted
        ]
        meta = hpod["metadata"]
        with ignoring(404, 409, 422):
            answer = self.host.patch_namespaced_pod_resize(
                meta["name"], meta["namespace"], {"spec": {"containers": containers}}, **TIMEOUT
            )
            self.host_pods.update(self.host_api.sanitize_for_serialization(answer))

    def _delete_host(self, hpod: Obj, grace: int | None) -> None:
        meta = hpod["metadata"]
        options = client.V1DeleteOptions(
            grace_period_seconds=grace, preconditions=client.V1Preconditions(uid=meta["uid"])
        )
        with ignoring(404, 409):
            self.host.delete_namespaced_pod(
                meta["name"], meta["namespace"], body=options, **TIMEOUT
            )

    def _finish_tenant_delete(self, vpod: Obj) -> None:
        meta = vpod["metadata"]
        if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0:
            return  # already finished; only finalizers hold it
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
        )
        with ignoring(404, 409):
            self.virtual.delete_namespaced_pod(
                meta["name"], meta["namespace"], body=options, **TIMEOUT
            )

    def _write_event(self, event: Obj, exists: bool) -> None:
        meta = event["metadata"]
        with ignoring(404, 409, 422, refused=terminating):  # others: retried next pass
            if exists:
                self.virtual.replace_namespaced_event(
                    meta["name"], meta["namespace"], event, **TIMEOUT
                )
            else:
                self.virtual.create_namespaced_event(meta["namespace"], event, **TIMEOUT)


def _owner_uid(hpod: Obj) -> str | None:
    return (hpod["metadata"].get("annotations") or {}).get(translate.OBJECT_UID)
