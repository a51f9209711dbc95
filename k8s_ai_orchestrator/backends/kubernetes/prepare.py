"""Everything a submit checks and builds before it creates anything.

The step's tenant (its own, else the executor's `default_tenant`) must be allowed and accept
the step's size class; the tenant's config and the Job built from it must hold only names the
API server accepts; pre-flight (`preflight.py`) and the tenant's admission mode
(`admission/`) must find that the step can run there. `validate` runs all of it for every
step before the first submit, so a run that cannot work fails before anything runs.

Example:
    >>> prepared = preparer.prepare(request)  # doctest: +SKIP
    >>> prepared.manifest["kind"], prepared.request.tenant  # doctest: +SKIP
    ('Job', 'team-a')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from ...errors import ConfigError, SubmitError
from ..base import LaunchRequest
from .admission import Admission, Admissions
from .api import ApiRetry, api_message
from .config import KubernetesConfig, TenantConfig
from .growth import PodGrowth
from .jobs import build_job, config_problems, manifest_problems, pod_node_selector
from .preflight import Preflight
from .tenants import TenantConnections


@dataclass(frozen=True)
class Prepared:
    """A step checked for its tenant, with what its submit creates."""

    request: LaunchRequest  # with its tenant resolved
    settings: TenantConfig  # the tenant
    manifest: dict[str, Any]  # the attempt's Job
    api_client: ApiClient  # the tenant's
    admission: Admission  # the mode that admits it
    node_labels: dict[str, str]  # the nodeSelector of the attempt's pods


class Preparer:
    """Resolves a step's tenant, builds its Job and runs the checks before a submit.

    Args:
        config: the `kubernetes` section of the executor config.
        tenants: the tenants' connections and allowlist.
        retry: the backend's API retry policy.
        growth: makes a measured step's pod report (and grow) its memory.
        admissions: the admission mode of each step.
        default_tenant: tenant of steps that name none.
    """

    def __init__(
        self,
        config: KubernetesConfig,
        tenants: TenantConnections,
        retry: ApiRetry,
        growth: PodGrowth,
        admissions: Admissions,
        default_tenant: str | None,
    ) -> None:
        self._config = config
        self._tenants = tenants
        self._preflight = Preflight(config, retry)
        self._growth = growth
        self._admissions = admissions
        self._default_tenant = default_tenant
        # step shapes whose Job `check` built → its pods' nodeSelector
        self._shapes: dict[tuple[object, ...], dict[str, str]] = {}

    def prepare(self, request: LaunchRequest, preflight: bool = True) -> Prepared:
        """The checked step; `ConfigError` or `SubmitError` naming what to fix. Without
        `preflight` (an attempt to adopt, whose Job the cluster took already) nothing is
        asked of the tenant's API server: its config and Job are checked, not its room."""
        request, settings = self._resolve(request)
        manifest = self._manifest(request, settings)
        labels = pod_node_selector(manifest)
        api_client, admission = self._admit(request, settings, labels, preflight)
        return Prepared(request, settings, manifest, api_client, admission, labels)

    def check(self, request: LaunchRequest) -> None:
        """What `prepare` checks, creating nothing: the executor's validation of every step
        before the first submit. The Job is built once per step shape (`_shape`): a run of a
        thousand alike steps builds one, and its submits build their own."""
        request, settings = self._resolve(request)
        shape = _shape(request)
        if shape not in self._shapes:
            self._shapes[shape] = pod_node_selector(self._manifest(request, settings))
        self._admit(request, settings, self._shapes[shape])

    def _resolve(self, request: LaunchRequest) -> tuple[LaunchRequest, TenantConfig]:
        tenant = request.tenant or request.spec.tenant or self._default_tenant
        if tenant is None:
            raise ConfigError(
                f"step '{request.step_key}' names no tenant and the executor has no "
                "default_tenant; set default_tenant or compute(tenant=...)"
            )
        settings = self._tenants.check_allowed(tenant, request.step_key)
        size = request.spec.size
        if settings.allowed_sizes is not None and size not in settings.allowed_sizes:
            raise SubmitError(
                f"step '{request.step_key}' has size class '{size}', which tenant '{tenant}' "
                f"does not accept (allowed_sizes: {list(settings.allowed_sizes)}); pick one of "
                f"those or add '{size}' to kubernetes.tenants.{tenant}.allowed_sizes"
            )
        return replace(request, tenant=tenant), settings

    def _manifest(self, request: LaunchRequest, settings: TenantConfig) -> dict[str, Any]:
        tenant = str(request.tenant)
        problems = config_problems(settings, self._config)
        if problems:  # before the Job is built: building it would trip over them
            raise _names_error(request, tenant, problems)
        manifest = build_job(request, settings, self._config)
        self._growth.prepare(manifest, request, self._config)
        problems = manifest_problems(manifest)
        if problems:
            raise _names_error(request, tenant, problems)
        return manifest

    def _admit(
        self,
        request: LaunchRequest,
        settings: TenantConfig,
        node_labels: dict[str, str],
        preflight: bool = True,
    ) -> tuple[ApiClient, Admission]:
        tenant = str(request.tenant)
        api_client = self._tenants.client(tenant, request.step_key)
        admission = self._admissions.of(settings.gang_admission, request.spec)
        if not preflight:
            return api_client, admission
        try:
            self._preflight.run(request, settings, api_client, node_labels)
            admission.prepare(request, settings, api_client)
        except ApiException as error:
            raise SubmitError(
                f"step '{request.step_key}': tenant '{tenant}' refused the pre-flight checks "
                f"({api_message(error)}); check the tenant's API server and the executor's "
                "permissions there"
            ) from None
        return api_client, admission


def _shape(request: LaunchRequest) -> tuple[object, ...]:
    """What a step's Job can be refused for, beyond the config: its tenant, size, tags (the
    `dagster-k8s/config` tag and the labels), the names of its environment, whether its
    command is raw. The run, step and attempt only reach sanitized labels and a hashed name."""
    labels = tuple(sorted(request.labels.items()))
    return (request.tenant, request.spec, labels, tuple(sorted(request.env)), request.raw_command)


def _names_error(request: LaunchRequest, tenant: str, problems: list[str]) -> ConfigError:
    """One error naming the step, its tenant and every problem of its Job's config."""
    return ConfigError(f"step '{request.step_key}' (tenant '{tenant}'): " + "; ".join(problems))
