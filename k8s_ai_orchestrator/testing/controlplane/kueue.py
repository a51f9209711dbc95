"""Kueue (sigs.k8s.io/kueue v0.17, built by `scripts/build-kueue.sh`) as a plain process against
one apiserver of the test control plane, so tests see real Kueue admit labelled Jobs.

Kueue runs with its default internal certificate management; this module plays the parts of
the release's in-cluster install that a process outside the cluster lacks:

- the release's CRDs, with the `/convert` webhook its kustomize patches add to five of them;
- namespace `kueue-system` and the empty Secret `kueue-webhook-server-cert` that Kueue's cert
  rotator fills with a CA and a serving certificate for `kueue-webhook-service.kueue-system.svc`;
- that Service, as `ExternalName: 127.0.0.1`: the apiserver calls a service-referenced webhook
  on `<externalName>:<clientConfig port>` with that TLS server name, so loopback reaches Kueue;
- the kubelet's secret volume: the Secret's `tls.crt`/`tls.key` copied into the webhook's
  certificate directory;
- the release's webhook configurations, cut to the Job and kueue.x-k8s.io webhooks (the others
  have no handler with only `batch/job` enabled, and fail closed), the Job ones only for Jobs
  labelled `kueue.x-k8s.io/queue-name`.

(Certificates of our own, `internalCertManagement.enable: false`, are no option: v0.17 then
reads the metrics certificate from the fixed path /etc/kueue/metrics/certs and exits without it.
The visibility API server, which writes its certificates to /visibility, is switched off.)

Example:
    >>> with start_kueue(bin_dir, plane.tenants["team-a"], run_dir) as kueue:  # doctest: +SKIP
    ...     # the queues: `helm install … helm/k8s-ai-tenant --set kueue.enabled=true`
    ...     print(kueue.ready_after_s)
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from .apiobjects import create_if_absent, create_or_replace, delete_if_present, not_established
from .cluster import ApiServer
from .process import Component, ControlPlaneError, HttpsTarget, Probe, free_port

Obj = dict[str, Any]

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"  # the storage version of every v0.17 CRD
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
NAMESPACE = "kueue-system"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
# the names Kueue's cert rotator injects its CA into
MUTATING = "kueue-mutating-webhook-configuration"
VALIDATING = "kueue-validating-webhook-configuration"
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class KueuePorts:
    """Kueue's loopback ports."""

    webhook: int  # HTTPS, admission and conversion webhooks
    health: int  # HTTP, /healthz and /readyz
    metrics: int  # HTTPS, /metrics


def kueue_configuration(
    ports: KueuePorts, cert_dir: Path, wait_for_pods_ready_s: float | None = None
) -> Obj:
    """Kueue's `Configuration`: one replica (no leader election), Jobs only, and only Jobs
    that name a queue; `waitForPodsReady` with the given timeout when asked."""
    configuration: Obj = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"{LOOPBACK}:{ports.health}"},
        "metrics": {"bindAddress": f"{LOOPBACK}:{ports.metrics}"},
        "webhook": {"host": LOOPBACK, "port": ports.webhook, "certDir": str(cert_dir)},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": {"VisibilityOnDemand": False},
    }
    if wait_for_pods_ready_s is not None:
        configuration["waitForPodsReady"] = {"timeout": f"{wait_for_pods_ready_s:g}s"}
    return configuration


def _service_ref(path: str, port: int) -> Obj:
    return {
        "service": {"namespace": NAMESPACE, "name": WEBHOOK_SERVICE, "path": path, "port": port}
    }


def with_conversion_webhook(crd: Obj, port: int) -> Obj:
    """The CRD as the release installs it: the five CRDs with two schema versions convert
    through Kueue's `/convert` (and the cert rotator refuses to start without that)."""
    if crd["spec"]["names"]["plural"] not in CONVERTED:
        return crd
    conversion = {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": _service_ref("/convert", port),
            "conversionReviewVersions": ["v1"],
        },
    }
    return {**crd, "spec": {**crd["spec"], "conversion": conversion}}


def _served(webhook: Obj) -> bool:
    """Whether Kueue serves the webhook with only `batch/job` enabled."""
    targets = {
        (group, resource)
        for rule in webhook["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    return all(group == GROUP or (group, r) == ("batch", "jobs") for group, r in targets)


def webhook_configurations(manifests: str, port: int) -> list[Obj]:
    """The release's webhook configurations (`config/components/webhook/manifests.yaml`), cut
    to the webhooks Kueue serves here, pointed at its Service and port; the Job webhooks only
    see Jobs that carry `kueue.x-k8s.io/queue-name`, so other Jobs never wait on Kueue."""
    names = {"MutatingWebhookConfiguration": MUTATING, "ValidatingWebhookConfiguration": VALIDATING}
    result = []
    for document in yaml.safe_load_all(manifests):
        webhooks = []
        for webhook in filter(_served, document["webhooks"]):
            webhook = {
                **webhook,
                "clientConfig": _service_ref(webhook["clientConfig"]["service"]["path"], port),
            }
            if any("jobs" in rule["resources"] for rule in webhook["rules"]):
                exists = {"key": QUEUE_NAME_LABEL, "operator": "Exists"}
                webhook["objectSelector"] = {"matchExpressions": [exists]}
            webhooks.append(webhook)
        metadata = {"name": names[document["kind"]]}
        result.append({**document, "metadata": metadata, "webhooks": webhooks})
    return result


PROBE_NAMESPACE = "default"  # where the start's dry-run Job goes


class KueueProcess:
    """Kueue running against one apiserver; see the module docstring.

    Args:
        bin_dir: the build directory (`build_kueue`): `kueue`, `crds/`, `webhook-manifests.yaml`.
        api: the apiserver Kueue manages, through its admin kubeconfig.
        run_dir: configuration, certificates and `kueue.log` go here (created if needed).
        wait_for_pods_ready_s: turn on `waitForPodsReady` with this timeout.
        startup_timeout_s: for each stage of the start (CRDs, certificates, ready, webhooks).
        clock, sleep: injected so tests can drive time.
    """

    def __init__(
        self,
        bin_dir: Path,
        api: ApiServer,
        run_dir: Path,
        *,
        wait_for_pods_ready_s: float | None = None,
        startup_timeout_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bin_dir = Path(bin_dir)
        self.api = api
        self.run_dir = Path(run_dir)
        self.wait_for_pods_ready_s = wait_for_pods_ready_s
        self.startup_timeout_s = startup_timeout_s
        self.ports = KueuePorts(webhook=free_port(), health=free_port(), metrics=free_port())
        self.log_path = self.run_dir / "kueue.log"
        self.component: Component | None = None
        self._cert_dir = self.run_dir / "webhook-certs"
        self._clock = clock
        self._sleep = sleep

    def api_client(self) -> client.ApiClient:
        """A new admin client of the apiserver Kueue manages."""
        return config.new_client_from_config(config_file=str(self.api.kubeconfig))

    @property
    def ready_after_s(self) -> dict[str, float]:
        """Seconds from the process start to each readiness stage."""
        return dict(self.component.ready_after_s) if self.component else {}

    def start(self) -> KueueProcess:
        """Install the CRDs and webhooks, start Kueue and wait until its webhooks answer.

        Raises:
            ControlPlaneError: a stage timed out or Kueue exited; the message holds the log
                tail. Whatever was started is stopped first.
        """
        if self.component is not None:
            return self
        if not (self.bin_dir / "kueue").is_file():
            raise ControlPlaneError(
                f"no kueue binary in {self.bin_dir}; build it with scripts/build-kueue.sh"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            with self.api_client() as api:
                self._install(api)
                self.component = Component(
                    "kueue", self._argv(), self.log_path, clock=self._clock, sleep=self._sleep
                ).start()
                self._wait_ready(self.component, api)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Remove the webhook configurations (a stopped Kueue must not block the apiserver),
        then stop the process."""
        try:
            with self.api_client() as api:
                admission = client.AdmissionregistrationV1Api(api)
                delete_if_present(admission.delete_mutating_webhook_configuration, MUTATING)
                delete_if_present(admission.delete_validating_webhook_configuration, VALIDATING)
        finally:
            if self.component is not None:
                self.component.stop()

    def __enter__(self) -> KueueProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- startup -------------------------------------------------------------------------------

    def _argv(self) -> list[str]:
        path = self.run_dir / "kueue-config.yaml"
        configuration = kueue_configuration(self.ports, self._cert_dir, self.wait_for_pods_ready_s)
        path.write_text(yaml.safe_dump(configuration, sort_keys=False))
        return [
            str(self.bin_dir / "kueue"),
            f"--config={path}",
            f"--kubeconfig={self.api.kubeconfig}",
        ]

    def _install(self, api: client.ApiClient) -> None:
        extensions = client.ApiextensionsV1Api(api)
        crds = [
            with_conversion_webhook(yaml.safe_load(path.read_text()), self.ports.webhook)
            for path in sorted((self.bin_dir / "crds").glob("*.yaml"))
        ]
        for crd in crds:
            create_or_replace(extensions, "custom_resource_definition", crd)
        names = [crd["metadata"]["name"] for crd in crds]
        self._poll(lambda: not_established(extensions, names), "CRDs established")
        core = client.CoreV1Api(api)
        create_if_absent(core.create_namespace, {"metadata": {"name": NAMESPACE}})
        secret = {"metadata": {"name": WEBHOOK_SECRET}, "type": "Opaque"}
        create_if_absent(lambda body: core.create_namespaced_secret(NAMESPACE, body), secret)
        service = {
            "metadata": {"name": WEBHOOK_SERVICE},
            "spec": {"type": "ExternalName", "externalName": LOOPBACK},
        }
        create_if_absent(lambda body: core.create_namespaced_service(NAMESPACE, body), service)
        admission = client.AdmissionregistrationV1Api(api)
        manifests = (self.bin_dir / "webhook-manifests.yaml").read_text()
        for body in webhook_configurations(manifests, self.ports.webhook):
            kind = "mutating" if body["kind"] == "MutatingWebhookConfiguration" else "validating"
            create_or_replace(admission, f"{kind}_webhook_configuration", body)

    def _wait_ready(self, component: Component, api: client.ApiClient) -> None:
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        timeout = self.startup_timeout_s
        component.wait_ready(lambda: self._mount_certificates(core), timeout, "certificates")
        health = HttpsTarget(f"http://{LOOPBACK}:{self.ports.health}")
        component.wait_ready(health.probe("/readyz"), timeout, "ready")
        component.wait_ready(lambda: _job_webhook_fails(batch), timeout, "suspending Jobs")

    def _mount_certificates(self, core: client.CoreV1Api) -> str | None:
        """What the kubelet's secret volume does in a cluster: the rotator's certificate and
        key from the Secret into the webhook server's certificate directory."""
        data = core.read_namespaced_secret(WEBHOOK_SECRET, NAMESPACE).data or {}
        if not {"tls.crt", "tls.key"} <= data.keys():
            return f"Secret {NAMESPACE}/{WEBHOOK_SECRET} holds no certificate yet"
        self._cert_dir.mkdir(parents=True, exist_ok=True)
        for name in ("tls.key", "tls.crt"):  # Kueue waits for tls.crt, so it comes last
            partial = self._cert_dir / f".{name}"
            partial.write_bytes(base64.b64decode(data[name]))
            partial.chmod(0o600)
            partial.replace(self._cert_dir / name)
        return None

    def _poll(self, probe: Probe, what: str) -> None:
        deadline = self._clock() + self.startup_timeout_s
        while (why := probe()) is not None:
            if self._clock() > deadline:
                raise ControlPlaneError(
                    f"{what}: not after {self.startup_timeout_s:.0f} s on {self.api.url} ({why})"
                )
            self._sleep(0.2)


def start_kueue(
    bin_dir: Path,
    api: ApiServer,
    run_dir: Path,
    *,
    wait_for_pods_ready_s: float | None = None,
    startup_timeout_s: float = 120.0,
) -> KueueProcess:
    """Start a `KueueProcess` (arguments as in its constructor) and return it, ready; use it as
    a context manager, or call `stop()`, to leave no process and no webhook behind."""
    kueue = KueueProcess(
        bin_dir,
        api,
        run_dir,
        wait_for_pods_ready_s=wait_for_pods_ready_s,
        startup_timeout_s=startup_timeout_s,
    )
    return kueue.start()


def _job_webhook_fails(batch: client.BatchV1Api) -> str | None:
    """Why a dry-run create of an unsuspended labelled Job does not come back suspended."""
    job = {
        "metadata": {"name": "kueue-webhook-probe", "labels": {QUEUE_NAME_LABEL: "probe"}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": "probe", "command": ["true"]}],
                }
            }
        },
    }
    try:
        created = batch.create_namespaced_job(PROBE_NAMESPACE, job, dry_run="All")
    except ApiException as error:
        return f"dry-run Job create: HTTP {error.status}: {str(error.body)[:300]}"
    if not created.spec.suspend:
        return "dry-run Job create: the Job is not suspended (Kueue's webhook was not called)"
    return None
