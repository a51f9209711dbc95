"""A real Kubernetes v1.37.2 control plane (host + tenants team-a, team-b) for the whole session.

Imported by tests/conftest.py, so every test folder can ask for `control_plane`, `host` or `tenant`.

Outside CI the tests skip when `kubeplane` is not built yet (building takes ~20 min cold). With
CI=true a missing Go or a failed build fails them, and the fixture builds the binary itself if
it is not cached. KUBEPLANE_BIN_DIR points at a prebuilt binary directory instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_ai_orchestrator.testing.controlplane import (
    ApiServer,
    ControlPlane,
    KubeplaneUnavailable,
    build_kubeplane,
    start_control_plane,
)

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build-kubeplane.sh"
TENANTS = ("team-a", "team-b")
TENANT = TENANTS[0]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def kubeplane_bin_dir() -> Path:
    """The directory of the kubeplane binary; built here only under CI."""
    if os.environ.get("KUBEPLANE_BIN_DIR"):
        return Path(os.environ["KUBEPLANE_BIN_DIR"])
    try:
        return build_kubeplane(BUILD_SCRIPT, check_only=not _in_ci())
    except KubeplaneUnavailable as error:
        if _in_ci():
            pytest.fail(f"CI=true needs the real control plane: {error}")
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def control_plane(kubeplane_bin_dir: Path) -> Iterator[ControlPlane]:
    # Not under pytest's basetemp: concurrent pytest sessions rotate it away under a live plane.
    run_dir = Path(tempfile.mkdtemp(prefix="k8sai-controlplane-"))
    with start_control_plane(kubeplane_bin_dir, run_dir, tenants=list(TENANTS)) as plane:
        yield plane
    shutil.rmtree(run_dir, ignore_errors=True)  # kept (logs) when startup failed


@pytest.fixture
def host(control_plane: ControlPlane) -> ApiServer:
    """The host apiserver of the session control plane."""
    assert control_plane.host is not None
    return control_plane.host


@pytest.fixture
def tenant(control_plane: ControlPlane) -> ApiServer:
    """The apiserver of the session's first tenant."""
    return control_plane.tenants[TENANT]
