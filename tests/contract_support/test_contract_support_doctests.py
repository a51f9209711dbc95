"""The contract modules' docstring examples still run now that they live under tests/.

`make checks` runs the package's doctests (`--doctest-modules k8s_ai_orchestrator`); these
modules left the package, so their examples run here.
"""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from tests.contract_support import contract, contract_api, contract_target, contract_validation


@pytest.mark.parametrize(
    "module",
    [contract, contract_api, contract_target, contract_validation],
    ids=lambda module: module.__name__.rsplit(".", 1)[-1],
)
def test_contract_module_examples_pass(module: ModuleType) -> None:
    result = doctest.testmod(module, raise_on_error=False, report=True)
    assert result.attempted > 0 and result.failed == 0, result
