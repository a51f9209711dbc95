"""The emulator's kubelet store interface, served by a real API server.

The emulator's `Kubelet` reads and writes a `Store`. `RemoteStore` gives it the same small
surface over a real apiserver, the way a kubelet talks to one:

- `list("pods")` is a watch-fed cache of the pods bound to this agent's nodes (one list+watch
  of all pods, relisted when the watch expires), so the kubelet loop costs no requests; the
  cache holds every bound pod and `is_mine` is asked at each list, so a node the agent adopts
  brings the pods already bound to it;
- `put("pods", pod)` writes `pods/status` (a strategic merge patch, so conditions others
  added, such as DisruptionTarget, are kept; bound to the pod's uid, so it never lands on a
  new pod of the same name) only when the status differs from what was last sent, and, once
  a pod being deleted is terminal, sends the final `DELETE` with grace 0 and a UID
  precondition — whatever finalizers it still has;
- `get("secrets" | "configmaps", ...)` reads through to the API (environment resolution);
- events are created, and their count bumped, in the pod's namespace.

Example:
    >>> store = RemoteStore(api_client, "host", lambda node: node == "node-a")  # doctest: +SKIP
    >>> store.start(); store.list("pods")  # doctest: +SKIP
    []
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

from ...kube.lifecycle import is_terminal
from ...kube.store import ClusterState, Obj, Store
from ..informer import TIMEOUT, Informer
from ..patches import STRATEGIC, ignoring, replaced, status_patch, terminating


def _node_of(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


class RemoteStore(Store):
    """See the module docstring.

    Args:
        api_client: a client of the apiserver (the agent's identity).
        name: how the kubelet names this store in pod directories ("host").
        is_mine: whether a node name is one of this agent's nodes.
        on_change: called after the pod cache changed (wakes the kubelet loop).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        name: str,
        is_mine: Callable[[str], bool],
        on_change: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name, ClusterState())  # the kubelet's view; objects live in the API
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.is_mine = is_mine
        self.pods = Informer(
            api_client,
            self.core.list_pod_for_all_namespaces,
            on_change,
            keep=lambda pod: bool(_node_of(pod)),
        )
        self._sent: dict[str, Obj] = {}  # uid → the status last written
        self._final_deleted: set[str] = set()
        self._events: dict[tuple[str, str], Obj] = {}
        self.requests = 0  # writes and reads this store sent (not the watch)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the pod watch and wait for the first list."""
        self.pods.start(timeout_s)

    def stop(self) -> None:
        """Stop the watch."""
        self.pods.stop()

    # -- the Store surface the kubelet uses ------------------------------------------------------

    def list(self, resource: str, namespace: str | None = None) -> list[Obj]:
        """Cached pods bound to this agent's nodes (the only list the kubelet makes)."""
        if resource != "pods":
            raise ValueError(f"RemoteStore lists only pods, not {resource}")
        return [
            pod
            for pod in self.pods.items()
            if self.is_mine(_node_of(pod))
            and (namespace is None or pod["metadata"]["namespace"] == namespace)
        ]

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        """A secret or configmap from the API, an event from this agent's own, else None."""
        if resource == "events":
            return copy.deepcopy(self._events.get((namespace, name)))
        readers = {
            "secrets": self.core.read_namespaced_secret,
            "configmaps": self.core.read_namespaced_config_map,
        }
        if resource not in readers:
            raise ValueError(f"RemoteStore reads secrets, configmaps and events, not {resource}")
        self.requests += 1
        try:
            found = readers[resource](name, namespace, **TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(self.api_client.sanitize_for_serialization(found))

    def put(self, resource: str, obj: Obj) -> Obj:
        """Write a pod's status (and finish its deletion) or record an event."""
        if resource == "events":
            return self._put_event(obj)
        if resource != "pods":
            raise ValueError(f"RemoteStore writes pods and events, not {resource}")
        meta = obj["metadata"]
        uid = meta["uid"]
        if self._sent.get(uid) != obj.get("status"):
            self._patch_status(obj)
        if meta.get("deletionTimestamp") and is_terminal(obj):
            self._final_delete(obj)
        return obj

    def remove(
        self, resource: str, namespace: str, name: str, final: Obj | None = None
    ) -> Obj | None:
        """Finish a pod's deletion: its terminal status, then DELETE with grace 0 (UID-bound)."""
        if resource != "pods" or final is None:
            raise ValueError("RemoteStore removes only pods it was given")
        return self.put("pods", final)

    # -- writes --------------------------------------------------------------------------------

    def _patch_status(self, pod: Obj) -> None:
        meta = pod["metadata"]
        status = copy.deepcopy(pod.get("status") or {})
        before = self._sent.get(meta["uid"])
        self.requests += 1
        # gone, or replaced by a new pod of the same name: nothing to report
        with ignoring(404, 409, refused=replaced):
            answer = self.core.patch_namespaced_pod_status(
                meta["name"],
                meta["namespace"],
                status_patch(before, status, uid=meta["uid"]),
                _content_type=STRATEGIC,  # conditions merge by type, as a kubelet's patch
                **TIMEOUT,
            )
            self._sent[meta["uid"]] = status
            self.pods.update(self.api_client.sanitize_for_serialization(answer))

    def _final_delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        if meta["uid"] in self._final_deleted:
            return
        self._final_deleted.add(meta["uid"])
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
        )
        self.requests += 1
        try:
            self.core.delete_namespaced_pod(
                meta["name"], meta["namespace"], body=options, **TIMEOUT
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _put_event(self, event: Obj) -> Obj:
        meta = event["metadata"]
        key = (meta["namespace"], meta["name"])
        body = {k: v for k, v in event.items() if k != "metadata"}
        body["metadata"] = {"name": meta["name"], "namespace": meta["namespace"]}
        body["involvedObject"] = {
            k: v for k, v in event["involvedObject"].items() if k != "resourceVersion"
        }
        self.requests += 1
        # a namespace being deleted takes no event (403): as a kubelet's recorder, the node
        # drops it rather than fail the pass that stops the namespace's pods
        with ignoring(404, 409, 422, refused=terminating):
            if key in self._events:
                self.core.patch_namespaced_event(
                    meta["name"],
                    meta["namespace"],
                    {"count": event["count"], "lastTimestamp": event["lastTimestamp"]},
                    **TIMEOUT,
                )
            else:
                self.core.create_namespaced_event(meta["namespace"], body, **TIMEOUT)
        self._events[key] = copy.deepcopy(event)
        return event
