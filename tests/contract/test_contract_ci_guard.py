"""Under CI=true, the control plane's contract may skip only because the node agent is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")
PLANE_TESTS = """
import pytest
from conftest import NODES_NOT_YET

def test_node_check():
    pytest.skip(NODES_NOT_YET)

def test_api_check_without_a_plane():
    pytest.skip("kubeplane is not built")
"""


@pytest.fixture
def plane_suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_contract_control_plane=PLANE_TESTS)
    return pytester


def test_in_ci_a_skip_for_any_other_reason_fails_naming_it(
    plane_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = plane_suite.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*CI=true: the real control plane's contract was skipped: kubeplane is not built*"]
    )


def test_outside_ci_both_are_reported_as_skipped(
    plane_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    plane_suite.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(skipped=2)
