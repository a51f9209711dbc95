"""The behaviour contract (tests/contract_support) holds on the emulator."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
from kubernetes import client

from k8s_ai_orchestrator.testing.kube import KubeEmulator
from tests.contract_support.contract import CHECKS, ContractTarget

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(90)]


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_the_emulator_honours_the_contract(
    emu: KubeEmulator, api: client.ApiClient, ns: str, check: Callable[[ContractTarget], None]
) -> None:
    check(ContractTarget(api, ns, (sys.executable,), timeout=60))
