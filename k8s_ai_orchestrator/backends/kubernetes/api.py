"""Retries of transient Kubernetes API errors, and error text safe to show.

Only listed statuses (429, 500, 502, 503, 504) and dropped connections are retried, with a
doubling wait from an injected `sleep`. A 401 (the tenant's credentials were refused) becomes
a `TenantAccessError` naming the tenant, its API server and the fix. Messages never include
request headers or bodies (a kubeconfig or token must not leak into a log): only status,
reason and the server's message.

Example:
    >>> retry = ApiRetry(retries=2, sleep=lambda s: None)
    >>> retry.call("list pods", "team-a", lambda: "ok")
    'ok'
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from kubernetes.client import BatchV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from ...errors import BackendError, TenantAccessError, config_number

T = TypeVar("T")

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


def api_message(error: ApiException) -> str:
    """`status reason: server message`, without headers or request details."""
    message = ""
    try:
        body = json.loads(error.body or "{}")
        message = body.get("message", "") if isinstance(body, dict) else ""
    except (ValueError, TypeError):
        pass
    text = f"{error.status} {error.reason or ''}".strip()
    return f"{text}: {message}" if message else text


def is_transient(error: BaseException) -> bool:
    if isinstance(error, ApiException):
        return error.status in TRANSIENT_STATUSES or error.status == 0
    return isinstance(error, (Urllib3Error, ConnectionError, TimeoutError))


class ApiRetry:
    """Calls an API function, retrying transient failures.

    Args:
        retries: attempts after the first one.
        backoff_s: first wait; doubles each retry.
        sleep: the wait function (tests pass one that records instead of sleeping).
        server_of: the API server URL of a tenant, for error messages (None: unknown).
    """

    def __init__(
        self,
        retries: int = 4,
        backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        server_of: Callable[[str], str | None] = lambda tenant: None,
    ) -> None:
        self.retries = int(config_number(retries, "kubernetes.api_retries", integer=True))
        self.backoff_s = float(config_number(backoff_s, "api retry backoff_s"))
        self.sleep = sleep
        self.server_of = server_of

    def call(self, what: str, tenant: str, fn: Callable[[], T]) -> T:
        """`fn()`, retried; a persistent transient failure becomes `BackendError(transient)`."""
        wait = self.backoff_s
        attempt = 0
        while True:
            try:
                return fn()
            except ApiException as error:
                if error.status == 401:
                    raise self._unauthorized(what, tenant) from None
                if not is_transient(error) or attempt == self.retries:
                    self._raise_final(what, tenant, error)
            except (Urllib3Error, ConnectionError, TimeoutError) as error:
                if attempt == self.retries:
                    self._raise_final(what, tenant, error)
            self.sleep(wait)
            wait *= 2
            attempt += 1

    def _raise_final(self, what: str, tenant: str, error: Exception) -> NoReturn:
        """Re-raise a permanent error as is; a transient one that outlived its retries as
        `BackendError(transient)`."""
        if not is_transient(error):
            raise error
        detail = api_message(error) if isinstance(error, ApiException) else type(error).__name__
        raise BackendError(
            f"tenant '{tenant}': {what} failed {self.retries + 1} times ({detail}); "
            "the tenant's API server is unreachable or overloaded, try again later",
            transient=True,
        ) from None

    def _unauthorized(self, what: str, tenant: str) -> TenantAccessError:
        server = self.server_of(tenant) or "its API server"
        return TenantAccessError(
            f"tenant '{tenant}': {server} refused the executor's credentials (401 Unauthorized) "
            f"on {what}; the token in its kubeconfig is wrong or expired. Refresh it: for a "
            "vCluster tenant, recreate the vc-<name> secret in its host namespace (`vcluster "
            "connect --print`); for a kubeconfig tenant, rewrite the file named by "
            f"kubernetes.tenants.{tenant}.kubeconfig"
        )


def job_owner(job: str, uid: str) -> dict[str, Any]:
    """The ownerReference that makes an object go with Job `job` (garbage collection)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": job,
        "uid": uid,
        "blockOwnerDeletion": True,
    }


def create_for_job(
    api_client: Any,
    retry: ApiRetry,
    where: tuple[str, str, str],
    resource: tuple[str, str, str],
    body_of: Callable[[str], dict[str, Any]],
) -> None:
    """Create a custom object that Job `where` = (tenant, namespace, job) owns: the Job is read
    for its uid, `body_of(uid)` is created in `resource` = (group, version, plural), with
    `retry`; a 409 means an earlier try was applied. A refusal is raised as the
    `ApiException`, for the caller to word as a `SubmitError`."""
    tenant, namespace, job = where
    group, version, plural = resource

    def create() -> None:
        uid = BatchV1Api(api_client).read_namespaced_job(job, namespace).metadata.uid
        try:
            CustomObjectsApi(api_client).create_namespaced_custom_object(
                group, version, namespace, plural, body_of(uid)
            )
        except ApiException as error:
            if error.status != 409:  # an earlier try was applied
                raise

    retry.call(f"create {plural}", tenant, create)


def serves(api_client: Any, group: str, version: str, plural: str) -> bool:
    """Whether the API server serves `plural` in `group/version` (its discovery document)."""
    try:
        answer = api_client.call_api(
            f"/apis/{group}/{version}",
            "GET",
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return plural in [r["name"] for r in json.loads(answer.data).get("resources") or []]
