"""Transient API failures are retried a bounded number of times; others surface at once."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from k8s_ai_orchestrator.backends.kubernetes.api import ApiRetry, api_message
from k8s_ai_orchestrator.errors import BackendError


class Flaky:
    """Fails with the given errors in turn, then returns 'ok'."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_throttling_server_errors_and_resets_are_retried_with_growing_waits() -> None:
    waits: list[float] = []
    retry = ApiRetry(retries=4, backoff_s=0.5, sleep=waits.append)
    flaky = Flaky(ApiException(status=429), ApiException(status=503), ProtocolError("reset"))
    assert retry.call("create Job", "team-a", flaky) == "ok"
    assert waits == [0.5, 1.0, 2.0]


def test_client_errors_are_not_retried() -> None:
    flaky = Flaky(ApiException(status=403, reason="Forbidden"))
    with pytest.raises(ApiException):
        ApiRetry(sleep=lambda s: None).call("create Job", "team-a", flaky)
    assert flaky.calls == 1


def test_persistent_outage_becomes_a_transient_backend_error_naming_the_tenant() -> None:
    flaky = Flaky(*[ApiException(status=500, reason="Internal")] * 5)
    with pytest.raises(BackendError, match="tenant 'team-a': list pods failed 3 times") as raised:
        ApiRetry(retries=2, sleep=lambda s: None).call("list pods", "team-a", flaky)
    assert raised.value.transient


def test_error_text_keeps_the_server_message_and_drops_headers() -> None:
    error = ApiException(status=403, reason="Forbidden")
    error.body = '{"message": "exceeded quota: k8s-ai-steps"}'
    error.headers = {"Authorization": "Bearer sekret"}
    assert api_message(error) == "403 Forbidden: exceeded quota: k8s-ai-steps"
