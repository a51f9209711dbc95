"""Under CI=true, the real control plane's contract may not skip: CI must run it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")
PLANE_TESTS = """
import pytest

def test_api_check_without_a_plane():
    pytest.skip("kubeplane is not built")

def test_api_check():
    pass
"""


@pytest.fixture
def plane_suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_contract_control_plane=PLANE_TESTS)
    return pytester


def test_in_ci_a_skip_fails_naming_its_reason(
    plane_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = plane_suite.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*CI=true: the real control plane's contract was skipped: kubeplane is not built*"]
    )


def test_outside_ci_a_skip_stays_a_skip(
    plane_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    result = plane_suite.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
