"""Retries of transient Kubernetes API errors, and error text safe to show.

Only listed statuses (429, 500, 502, 503, 504) and dropped connections are retried, with a
doubling wait from an injected `sleep`. Messages never include request headers or bodies (a
kubeconfig or secret must not leak into a log): only status, reason and the server's message.

Example:
    >>> retry = ApiRetry(retries=2, sleep=lambda s: None)
    >>> retry.call("list pods", "team-a", lambda: "ok")
    'ok'
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TypeVar

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from ...errors import BackendError

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
    """

    def __init__(
        self,
        retries: int = 4,
        backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.retries = retries
        self.backoff_s = backoff_s
        self.sleep = sleep

    def call(self, what: str, tenant: str, fn: Callable[[], T]) -> T:
        """`fn()`, retried; a persistent transient failure becomes `BackendError(transient)`."""
        wait = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except Exception as error:
                if not is_transient(error):
                    raise
                if attempt == self.retries:
                    detail = (
                        api_message(error)
                        if isinstance(error, ApiException)
                        else (type(error).__name__)
                    )
                    raise BackendError(
                        f"tenant '{tenant}': {what} failed {self.retries + 1} times ({detail}); "
                        "the tenant's API server is unreachable or overloaded, try again later",
                        transient=True,
                    ) from None
                self.sleep(wait)
                wait *= 2
        raise AssertionError("unreachable")
