"""What tests need beyond `pip install -e '.[dev]'`, and the rules that keep CI honest.

`require` is the one way a test says it needs a component (a Debian program, root, a built
binary, an optional module). Outside CI a missing component skips the test with a one-line
reason; with CI=true it fails the test, naming the component and how to install it, so a green
CI run means every test ran. Two hooks and a check (tests/conftest.py) hold the rest:

- under CI=true any other skip fails too, except in tests marked `optin` (runs the user turns
  on, such as the contract against an external cluster);
- at collection (`check_markers`), a test that uses a fixture of `FIXTURE_MARKERS` (or the
  real control plane as a fixture parameter) without that fixture's marker stops the run, so
  `-m` selections such as `make test-fast` never start a component they claim to leave out.

Example:
    >>> def test_kubectl_lists_pods() -> None:
    ...     kubectl = require_program("kubectl", "kubectl", INSTALL_DEPS)
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Generator
from types import ModuleType

import pytest

# A test using the fixture (directly or through another fixture) must carry the marker.
FIXTURE_MARKERS = {
    "kubeplane_bin_dir": "controlplane",  # every real-plane fixture starts from it
    "kueue_bin_dir": "kueue",
    "karpenter_bin_dir": "karpenter",
    "node_bin_dir": "realnode",
    "vcluster_bin_dir": "vcluster",
    "slurm_accounting": "slurm",
    "slurm_cluster": "slurm",
    "slurm_current_cluster": "slurm",
    "versioned_cluster": "slurm",
    "chromium": "browser",
    "daemon_world": "daemon",
}
# A parametrized fixture that picks the real plane by this parameter calls
# `request.getfixturevalue`, which the fixture closure does not show.
REAL_PLANE_PARAM = "control-plane"
VCLUSTER_PARAM = "vcluster"  # the real plane whose tenant the real vCluster syncer serves
OPT_IN_MARKER = "optin"
INSTALL_DEPS = "run scripts/install-system-deps.sh"
DEV_EXTRA = "pip install -e '.[dev]' (make .venv/.installed)"


def in_ci() -> bool:
    """True when the CI environment variable says so (`.ci/run` sets CI=true)."""
    return os.environ.get("CI", "").lower() == "true"


HIDE = "K8S_AI_TEST_HIDE"  # "slurm,chromium": treat components named so as missing


def hidden(component: str) -> bool:
    """Whether `$K8S_AI_TEST_HIDE` (comma-separated words) names `component`: how to see what
    CI does without a component that `make test` would install again, or that a PATH shim
    cannot hide (the Slurm fixture also looks in /usr/sbin)."""
    words = [w.strip().lower() for w in os.environ.get(HIDE, "").split(",") if w.strip()]
    return any(word in component.lower() for word in words)


def require(component: str, available: bool, hint: str) -> None:
    """Skip (outside CI) or fail (CI=true) the calling test or module unless `available`.

    Args:
        component: what is missing, as a person would name it ("Debian chromium").
        available: whether it is there.
        hint: how to install it ("run scripts/install-system-deps.sh").
    """
    if available and not hidden(component):
        return
    if in_ci():
        pytest.fail(f"CI=true needs {component}, which is missing: {hint}", pytrace=False)
    pytest.skip(f"needs {component}: {hint}", allow_module_level=True)


def require_program(program: str, component: str, hint: str) -> str:
    """The path of `program` on PATH, or `require`'s skip or failure."""
    path = shutil.which(program)
    require(component, path is not None, hint)
    assert path is not None
    return path


def require_module(name: str, component: str, hint: str) -> ModuleType:
    """The imported module `name`, or `require`'s skip or failure when it is not installed.

    Only a missing module counts: an installed one that fails to import raises as usual.
    """
    require(component, not hidden(component), hint)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is None or not (name == error.name or name.startswith(f"{error.name}.")):
            raise
        missing = error
    require(component, False, hint)  # outside the `except`: its message stands alone
    raise missing  # unreachable: require raised


def _skip_reason(longrepr: object) -> str:
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return str(text).removeprefix("Skipped: ")


def _fail_skip_in_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Turn a skip into a failure under CI=true: CI must run every test it collects."""
    if not (in_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"CI=true: {report.nodeid} was skipped ({_skip_reason(report.longrepr)}); CI runs "
        f"every test: provide what it needs, or mark it `{OPT_IN_MARKER}` if it is opt-in"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if item.get_closest_marker(OPT_IN_MARKER) is None:
        _fail_skip_in_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_skip_in_ci(report)
    return report


def missing_markers(item: pytest.Item) -> list[str]:
    """The markers `item` needs by its fixtures (`FIXTURE_MARKERS`) but does not carry."""
    fixtures = set(getattr(item, "fixturenames", ()))
    needed = {marker for name, marker in FIXTURE_MARKERS.items() if name in fixtures}
    callspec = getattr(item, "callspec", None)
    values = [v for v in callspec.params.values() if isinstance(v, str)] if callspec else []
    if REAL_PLANE_PARAM in values:
        needed.add("controlplane")
    if VCLUSTER_PARAM in values:
        needed |= {"controlplane", "vcluster"}
    return sorted(m for m in needed if item.get_closest_marker(m) is None)


def check_markers(items: list[pytest.Item]) -> None:
    """Stop the run (pytest.UsageError) when a test lacks a marker `missing_markers` wants."""
    unmarked = [f"{i.nodeid}: {', '.join(m)}" for i in items if (m := missing_markers(i))]
    if unmarked:
        raise pytest.UsageError(
            "tests use a component without its marker (add it to the module's pytestmark, or "
            "to the fixture parameter with pytest.param(..., marks=...)):\n  "
            + "\n  ".join(unmarked)
        )
