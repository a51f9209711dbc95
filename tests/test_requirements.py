"""The rules of tests/requirements.py, run on tiny suites in a pytest subprocess each.

Under CI=true a missing component fails the run and names it with its install hint, and so does
any other skip outside tests marked `optin`; outside CI the same tests skip with the reason. A
test that uses a component's fixture without its marker stops every run at collection.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest

from tests.requirements import (
    check_markers,
    pytest_make_collect_report,
    pytest_runtest_makereport,
)


def pytest_collection_modifyitems(items):
    check_markers(items)


@pytest.fixture
def kubeplane_bin_dir():
    return "/nonexistent"


@pytest.fixture(params=["emulator", "control-plane"])
def cluster(request):
    return request.param
"""
INI = """
[pytest]
markers =
    controlplane: the real control plane
    optin: may skip under CI
"""
NEEDS_A_PROGRAM = """
from tests.requirements import require_program

def test_needs_a_program():
    require_program("k8s-ai-no-such-program", "the no-such program", "apt-get install no-such")

def test_needs_nothing():
    pass
"""
NEEDS_A_MODULE = """
from tests.requirements import require_module

require_module("k8s_ai_no_such_module", "the no-such module", "pip install no-such")

def test_uses_the_module():
    pass
"""
SKIPS = """
import pytest

def test_skips_on_its_own():
    pytest.skip("not today")

@pytest.mark.optin
def test_runs_only_when_asked():
    pytest.skip("set K8S_AI_CONTRACT=1")
"""
UNMARKED = """
import pytest

def test_uses_the_real_plane(kubeplane_bin_dir):
    pass

@pytest.mark.controlplane
def test_says_it_uses_the_real_plane(kubeplane_bin_dir):
    pass

def test_runs_on_either_target(cluster):
    pass
"""
MARKED = """
import pytest

pytestmark = pytest.mark.controlplane

def test_uses_the_real_plane(kubeplane_bin_dir):
    pass

def test_runs_on_either_target(cluster):
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("CI", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    return pytester


def run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    return suite.runpytest_subprocess("-p", "no:cacheprovider", "-rsfE", *args)


def test_under_ci_a_missing_component_fails_naming_it_and_how_to_install_it(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite.makepyfile(test_program=NEEDS_A_PROGRAM, test_module=NEEDS_A_MODULE)
    monkeypatch.setenv("CI", "true")
    result = run(suite, "--continue-on-collection-errors")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*CI=true needs the no-such module, which is missing: pip install no-such*",
            "*CI=true needs the no-such program, which is missing: apt-get install no-such*",
        ],
        consecutive=False,
    )


def test_a_component_hidden_by_the_override_fails_under_ci_like_a_missing_one(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite.makepyfile(
        test_present="""
from tests.requirements import require

def test_needs_slurm():
    require("Slurm (slurmctld)", True, "run scripts/install-system-deps.sh")
"""
    )
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("K8S_AI_TEST_HIDE", "chromium, slurm")
    result = run(suite)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CI=true needs Slurm (slurmctld), which is missing: run *"])


def test_outside_ci_a_missing_component_skips_with_the_reason(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_program=NEEDS_A_PROGRAM, test_module=NEEDS_A_MODULE)
    result = run(suite)
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED*needs the no-such module: pip install no-such*",
            "SKIPPED*needs the no-such program: apt-get install no-such*",
        ],
        consecutive=False,
    )


def test_under_ci_any_other_skip_fails_unless_the_test_is_opt_in(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite.makepyfile(test_skips=SKIPS)
    monkeypatch.setenv("CI", "true")
    result = run(suite)
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*test_skips_on_its_own was skipped (not today)*"])


def test_a_component_fixture_without_its_marker_stops_the_run(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_unmarked=UNMARKED)
    result = run(suite, "-m", "not controlplane")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*tests use a component without its marker*",
            "*test_unmarked.py::test_uses_the_real_plane: controlplane",
            "*test_unmarked.py::test_runs_on_either_target?control-plane?: controlplane",
        ]
    )
    assert "test_says_it_uses_the_real_plane" not in result.stderr.str()
    assert "[emulator]" not in result.stderr.str()


def test_marked_component_tests_are_left_out_by_their_marker(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_marked=MARKED)
    run(suite, "-m", "not controlplane").assert_outcomes(passed=0, deselected=3)
    run(suite).assert_outcomes(passed=3)


TWINS_CONFTEST = """
import pytest

from tests.plane_fixtures import KUBE_TARGETS, deselect_emulator_twins


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    deselect_emulator_twins(config, items)


@pytest.fixture(params=KUBE_TARGETS)
def cluster(request):
    return request.param
"""
TWINS = """
import pytest

@pytest.mark.parametrize("size", [1, 2])
def test_on_either_plane(cluster, size):
    pass

@pytest.mark.emulator
def test_on_the_emulator_only():
    pass
"""


@pytest.mark.parametrize(
    ("ci", "selection", "ran"),
    [
        ("true", [], "3 passed, 2 deselected"),  # the real plane's two, the emulator-only test
        ("true", ["-m", "not controlplane"], "3 passed, 2 deselected"),  # the emulator's run
        ("", [], "5 passed"),  # outside CI the real plane may skip: both run
    ],
)
def test_a_scenario_on_both_planes_runs_on_the_emulator_only_where_the_real_plane_does_not(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    ci: str,
    selection: list[str],
    ran: str,
) -> None:
    pytester.makeconftest(TWINS_CONFTEST)
    pytester.makeini(INI + "    emulator: the emulator\n")
    pytester.makepyfile(test_twins=TWINS)
    monkeypatch.setenv("CI", ci)
    result = run(pytester, "-v", *selection)
    result.stdout.fnmatch_lines([f"*{ran}*"])
    emulator_runs = [line for line in result.outlines if "[emulator" in line and "PASSED" in line]
    assert len(emulator_runs) == (0 if ci and not selection else 2), result.outlines
