"""Shared fixtures: a real Dagster instance in a temporary DAGSTER_HOME."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance

from tests.plane_fixtures import (
    control_plane,
    deselect_emulator_twins,
    gang_plane,
    host,
    karpenter_bin_dir,
    kubeplane_bin_dir,
    kueue_bin_dir,
    kueue_team_a,
    node_bin_dir,
    plane_with_nodes,
    real_kube,
    summary_line,
    tenant,
    vcluster_bin_dir,
    vcluster_plane,
)
from tests.requirements import (
    INSTALL_DEPS,
    VCLUSTER_PARAM,
    check_markers,
    pytest_make_collect_report,
    pytest_runtest_makereport,
    require_program,
)
from tests.resume_support import run_worker

__all__ = [
    # under CI=true a skip fails (tests/requirements.py)
    "pytest_make_collect_report",
    "pytest_runtest_makereport",
    # the real control plane
    "control_plane",
    "gang_plane",
    "host",
    "karpenter_bin_dir",
    "kubeplane_bin_dir",
    "kueue_bin_dir",
    "kueue_team_a",
    "node_bin_dir",
    "plane_with_nodes",
    "real_kube",
    "tenant",
    "vcluster_bin_dir",
    "vcluster_plane",
    # a run whose run worker is killed and resumed (tests/resume_support.py)
    "run_worker",
]


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.fixture
def instance(dagster_home: Path) -> Iterator[DagsterInstance]:
    with DagsterInstance.get() as inst:
        yield inst


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium: the browser test and the report's screenshot PNG."""
    return require_program("chromium", "Debian chromium", INSTALL_DEPS)


@pytest.fixture
def test_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("TEST_OUT", str(out))
    return out


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers must match the components tests use; under CI=true a scenario that runs on the
    real plane does not run on the emulator too (`deselect_emulator_twins`); tests on the real
    node, the real vCluster syncer, Karpenter or the current Slurm, then on Kueue, run last:
    `make test` builds them in the background meanwhile."""
    check_markers(items)
    deselect_emulator_twins(config, items)

    def late(item: pytest.Item) -> int:
        names = set(getattr(item, "fixturenames", ()))
        if "kueue_team_a" in names:
            return 2
        params = getattr(getattr(item, "callspec", None), "params", {})
        current_slurm = params.get("versioned_cluster") == "24.11"
        # a test parametrised over targets asks for the real syncer's plane at run time
        # (`getfixturevalue`), so its build is not among its fixture names
        real_syncer = VCLUSTER_PARAM in params.values()
        late_builds = {"node_bin_dir", "vcluster_bin_dir", "karpenter_bin_dir"}
        return 1 if names & late_builds or current_slurm or real_syncer else 0

    items.sort(key=late)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which Kubernetes API server the Kubernetes suites ran against."""
    terminalreporter.write_line(summary_line())
