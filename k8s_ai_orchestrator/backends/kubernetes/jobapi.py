"""Creating, adopting and deleting a step's Job in its tenant (and its DRA claim template), with
the backend's retries.

A 409 on a retried create means an earlier try was applied (the Job exists); a 404 on delete
means it is already gone. A resumed run worker finds the Jobs to adopt in one list of the
run's Jobs (`adopt`), not one read per step. A refused create is a `SubmitError` naming step,
tenant, Job, namespace and the fix.

Example:
    >>> jobs = JobApi(connections, retry, config)  # doctest: +SKIP
    >>> jobs.create(request, "default", manifest)  # doctest: +SKIP
    >>> jobs.delete("team-a", "default", "k8s-ai-…-0", "tiles")  # doctest: +SKIP
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from kubernetes.client import BatchV1Api
from kubernetes.client.exceptions import ApiException

from ...errors import SubmitError
from ..base import LaunchRequest
from .api import ApiRetry, api_message
from .config import KubernetesConfig
from .dra import claims_gpus, create_claim_template
from .jobs import run_selector
from .status import job_status
from .tenants import TenantConnections


class JobApi:
    """The create, adopt and delete calls of the backend's Jobs."""

    def __init__(
        self, tenants: TenantConnections, retry: ApiRetry, config: KubernetesConfig
    ) -> None:
        self._tenants = tenants
        self._retry = retry
        self._config = config
        self._runs: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}

    def create(self, request: LaunchRequest, namespace: str, manifest: dict[str, Any]) -> None:
        """Create the attempt's Job, then (`ensure_claim_template`) the ResourceClaimTemplate
        its pod claims GPUs from when they come through DRA; `SubmitError` if the tenant
        refuses either."""
        self._create_job(request, namespace, manifest)
        self.ensure_claim_template(request, namespace, manifest["metadata"]["name"])

    def ensure_claim_template(self, request: LaunchRequest, namespace: str, name: str) -> None:
        """The DRA claim template of Job `name`, owned by it (one that exists is taken: a
        resumed run worker calls this for a Job whose creator may have died before it); a
        refused template deletes the Job, whose pod could never start. Nothing without DRA."""
        tenant = str(request.tenant)
        gpus = self._config.gpus_of(self._config.tenant(tenant))
        if not claims_gpus(request.spec, gpus):
            return
        api_client = self._tenants.client(tenant, request.step_key)
        try:
            create_claim_template(
                request.step_key,
                tenant,
                namespace,
                name,
                request.spec,
                gpus,
                api_client,
                self._retry,
            )
        except SubmitError:
            self.delete(tenant, namespace, name, request.step_key)
            raise

    def _create_job(self, request: LaunchRequest, namespace: str, manifest: dict[str, Any]) -> None:
        batch = BatchV1Api(self._tenants.client(str(request.tenant), request.step_key))

        def create() -> None:
            try:
                response = batch.create_namespaced_job(namespace, manifest, _preload_content=False)
                response.drain_conn()  # the created Job is not read: no model is built of it
                response.release_conn()
            except ApiException as error:
                if error.status == 409:
                    return  # an earlier try of this call was applied; the Job exists
                raise

        try:
            self._retry.call("create Job", str(request.tenant), create)
        except ApiException as error:
            message = api_message(error)
            fix = (
                "raise the quota in the tenant's vCluster values (policies.resourceQuota)"
                if "exceeded quota" in message
                else "check the executor config and the step's dagster-k8s/config tag"
            )
            raise SubmitError(
                f"step '{request.step_key}': tenant '{request.tenant}' refused Job "
                f"{manifest['metadata']['name']} in namespace '{namespace}' ({message}); {fix}"
            ) from None

    def adopt(
        self, tenant: str, namespace: str, name: str, request: LaunchRequest
    ) -> dict[str, Any] | None:
        """The Job `name` of the request's run as the API server has it, or None. The run's
        Jobs are listed once (one request for every step a resumed run worker adopts, not one
        each) and each is handed out once. A Job created after that list is not found;
        creating it then takes it (a 409 means it exists). A live Job gets its DRA claim
        template if it has none (`ensure_claim_template`: its creator may have died between
        the two creates)."""
        key = (tenant, namespace, request.run_id)
        if key not in self._runs:
            listing = partial(self._run_jobs, tenant, namespace, request.run_id, request.step_key)
            self._runs[key] = self._retry.call("list Jobs", tenant, listing)
        found = self._runs[key].pop(name, None)
        if found is not None and job_status(found) is None:
            self.ensure_claim_template(request, namespace, name)
        return found

    def _run_jobs(
        self, tenant: str, namespace: str, run_id: str, step: str
    ) -> dict[str, dict[str, Any]]:
        batch = BatchV1Api(self._tenants.client(tenant, step))
        response = batch.list_namespaced_job(
            namespace, label_selector=run_selector(run_id), _preload_content=False
        )
        items = json.loads(response.data).get("items") or ()
        return {job["metadata"]["name"]: job for job in items}

    def delete_run(self, run_id: str, where: list[tuple[str, str]]) -> list[str]:
        """Delete every Job of `run_id` (its run label) in each (tenant, namespace); their
        names."""
        deleted = []
        for tenant, namespace in where:
            listed = self._retry.call(
                "list Jobs", tenant, partial(self._list, tenant, namespace, run_id)
            )
            for name in listed:
                self.delete(tenant, namespace, name, "?")
            deleted += listed
        return deleted

    def _list(self, tenant: str, namespace: str, run_id: str) -> list[str]:
        batch = BatchV1Api(self._tenants.client(tenant, "?"))
        found = batch.list_namespaced_job(namespace, label_selector=run_selector(run_id))
        return [job.metadata.name for job in found.items]

    def delete(self, tenant: str, namespace: str, name: str, step: str) -> None:
        """Delete a Job and its pods (propagation Background); a missing Job is fine."""
        batch = BatchV1Api(self._tenants.client(tenant, step))

        def delete() -> None:
            try:
                batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
            except ApiException as error:
                if error.status != 404:
                    raise

        self._retry.call(f"delete Job {name}", tenant, delete)
