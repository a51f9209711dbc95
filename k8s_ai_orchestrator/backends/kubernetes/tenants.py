"""Tenants: which vCluster (or plain cluster) a step may reach, and one API client per tenant.

A tenant's API is reached either from a kubeconfig file, or from the kubeconfig vCluster
writes into the `vc-<name>` secret (key `config`) of its host namespace. The host cluster is
reached in-cluster, or through `host_kubeconfig`. `server` replaces the kubeconfig's API URL,
as vCluster's `exportKubeConfig.server` does. Every tenant gets its own isolated
`Configuration`; the process-global kubernetes configuration is never loaded or changed.

Example:
    >>> tenants = TenantConnections(config, allowed=["team-a", "team-b"])  # doctest: +SKIP
    >>> tenants.client("team-a", step="tiles")  # doctest: +SKIP
    <kubernetes.client.api_client.ApiClient object at ...>
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterable
from typing import Any

import yaml
from kubernetes.client import ApiClient, Configuration, CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException, new_client_from_config, new_client_from_config_dict
from kubernetes.config.incluster_config import InClusterConfigLoader

from ...errors import ConfigError, SubmitError, TenantAccessError
from .config import KubernetesConfig, TenantConfig

SECRET_KEY = "config"


def vcluster_secret_name(vcluster: str) -> str:
    """The host-side secret vCluster writes its kubeconfig into."""
    return f"vc-{vcluster}"


class TenantConnections:
    """One `ApiClient` per tenant, created on first use; enforces the allowed tenants.

    Args:
        config: the backend configuration (tenants and how to reach them).
        allowed: tenants steps of this run may use; None allows every configured tenant.
    """

    def __init__(self, config: KubernetesConfig, allowed: Iterable[str] | None = None) -> None:
        self._config = config
        self.allowed = tuple(sorted(allowed)) if allowed is not None else None
        self._clients: dict[str, ApiClient] = {}
        self._lock = threading.Lock()

    def check_allowed(self, tenant: str, step: str) -> TenantConfig:
        """The tenant's settings, or `TenantAccessError` if the run may not use it."""
        if self.allowed is not None and tenant not in self.allowed:
            raise TenantAccessError(
                f"step '{step}' asked for tenant '{tenant}', which this run may not use; "
                f"allowed tenants: {list(self.allowed)}. Add it to the executor's "
                "allowed_tenants or route the step elsewhere with compute(tenant=...)"
            )
        if tenant not in self._config.tenants:
            raise TenantAccessError(
                f"step '{step}' asked for tenant '{tenant}', which is not configured; "
                f"configured tenants: {sorted(self._config.tenants)}. Add it under "
                "kubernetes.tenants in the executor config"
            )
        return self._config.tenants[tenant]

    def usable(self) -> list[tuple[str, str]]:
        """(tenant, namespace) of every configured tenant this run may use."""
        tenants = self._config.tenants
        return [
            (t, s.namespace)
            for t, s in sorted(tenants.items())
            if self.allowed is None or t in self.allowed
        ]

    def client(self, tenant: str, step: str) -> ApiClient:
        """The tenant's API client (checked against the allowed tenants first)."""
        settings = self.check_allowed(tenant, step)
        with self._lock:
            if tenant not in self._clients:
                self._clients[tenant] = connect(settings, step)
            return self._clients[tenant]

    def server(self, tenant: str) -> str | None:
        """The API server URL of a connected tenant (no credentials), else None."""
        with self._lock:
            api_client = self._clients.get(tenant)
        return str(api_client.configuration.host) if api_client is not None else None

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for api_client in clients:
            api_client.close()


def connect(tenant: TenantConfig, step: str = "?") -> ApiClient:
    """A new API client for the tenant, from its kubeconfig file or its vCluster secret."""
    if tenant.kubeconfig:
        api_client = _from_file(tenant.kubeconfig, tenant.context, tenant.name)
    else:
        api_client = _from_vcluster_secret(tenant, step)
    if tenant.server:
        api_client.configuration.host = tenant.server.rstrip("/")
    return api_client


def _from_file(path: str, context: str | None, tenant: str) -> ApiClient:
    try:
        return new_client_from_config(config_file=path, context=context, persist_config=False)
    except (OSError, ConfigException, yaml.YAMLError) as error:
        raise ConfigError(
            f"tenant '{tenant}': cannot load kubeconfig {path} ({type(error).__name__}); "
            "check kubernetes.tenants.<tenant>.kubeconfig points at a readable kubeconfig "
            "file with a current context"
        ) from None


def _host_client(tenant: TenantConfig) -> ApiClient:
    if tenant.host_kubeconfig:
        return _from_file(tenant.host_kubeconfig, None, tenant.name)
    configuration = Configuration()
    try:
        InClusterConfigLoader(
            token_filename="/var/run/secrets/kubernetes.io/serviceaccount/token",
            cert_filename="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        ).load_and_set(configuration)
    except ConfigException:
        raise ConfigError(
            f"tenant '{tenant.name}': vCluster '{tenant.vcluster}' needs the host cluster, but "
            "this process is not in a pod and no host_kubeconfig is set; set "
            "kubernetes.tenants.<tenant>.host_kubeconfig"
        ) from None
    return ApiClient(configuration)


def _from_vcluster_secret(tenant: TenantConfig, step: str) -> ApiClient:
    vcluster = str(tenant.vcluster)
    secret = vcluster_secret_name(vcluster)
    namespace = str(tenant.host_namespace)
    host = _host_client(tenant)
    try:
        data = CoreV1Api(host).read_namespaced_secret(secret, namespace).data or {}
    except ApiException as error:
        raise SubmitError(
            f"step '{step}': cannot read secret {secret} in host namespace {namespace} for "
            f"tenant '{tenant.name}' ({error.status} {error.reason}); check the vCluster is "
            f"installed there and the executor may get secrets in {namespace} "
            "(helm chart: rbac.hostSecretAccess=true)"
        ) from None
    finally:
        host.close()
    encoded = data.get(SECRET_KEY)
    if not encoded:
        raise SubmitError(
            f"tenant '{tenant.name}': secret {secret} in {namespace} has no '{SECRET_KEY}' key; "
            "is vCluster's exportKubeConfig disabled? Re-enable it in the vCluster values"
        )
    try:
        kubeconfig: Any = yaml.safe_load(base64.b64decode(encoded))
        return new_client_from_config_dict(kubeconfig, persist_config=False)
    except (ValueError, yaml.YAMLError, ConfigException, TypeError, AttributeError):
        raise SubmitError(
            f"tenant '{tenant.name}': secret {secret} in {namespace} does not hold a valid "
            "kubeconfig under 'config'; recreate it from vCluster (vcluster connect --print)"
        ) from None
