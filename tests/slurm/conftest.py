"""Real Slurm clusters (3 nodes, two with 2 fake GPUs) for the whole test session: Debian's
22.05 packages (`slurm_cluster`) and a current Slurm built from source beside them
(`slurm_current_cluster`, scripts/build-slurm.sh); `versioned_cluster` runs a test on both,
and `transport` over both transports (`any_backend`, `executor_slurm`); the end-to-end modules
(`slurm_pairs`) run each version and each transport once (`PAIRS`).
Each keeps accounting as production does: a slurmdbd of its own (Debian's 22.05 one, or the
build's) with its own database in one MariaDB server the session starts (`slurm_accounting`)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from k8s_ai_orchestrator.backends.slurm import SlurmBackend, SlurmConfig
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster, missing_slurm_programs
from k8s_ai_orchestrator.testing.slurmdbd import LocalMariaDB, missing_accounting_programs
from tests.requirements import INSTALL_DEPS, in_ci, require

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-slurm.sh"
PREFIX_ENV = "K8S_AI_SLURM_PREFIX"  # a current Slurm's prefix, instead of the script's cache
VERSIONS = ("22.05", "24.11")  # Debian's packages; scripts/build-slurm.sh's build
TRANSPORTS = ("cli", "rest")
TOKEN_ENV = "K8S_AI_TEST_SLURM_JWT"  # where `executor_slurm` puts the REST token
# The (version, transport) pairs of an end-to-end module (`slurm_pairs`): each version and
# each transport once. The backend-level modules (lifecycle, gang, transports), where the
# transports differ, run all four; an end-to-end run adds Dagster, not transport paths.
PAIRS = {(VERSIONS[0], TRANSPORTS[0]), (VERSIONS[1], TRANSPORTS[1])}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the other two pairs of the `slurm_pairs` modules' tests (deselected, as
    `-m` would: they are not skips)."""
    left_out = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        pair = (params.get("versioned_cluster"), params.get("transport"))
        if item.get_closest_marker("slurm_pairs") and None not in pair and pair not in PAIRS:
            left_out.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]


def _require_slurm(prefix: Path | None = None) -> None:
    missing = missing_slurm_programs(prefix)
    what = "Slurm" if prefix is None else f"the Slurm built in {prefix}"
    hint = INSTALL_DEPS if prefix is None else "run scripts/build-slurm.sh (make slurm-current)"
    require(f"{what} ({', '.join(missing)})" if missing else what, not missing, hint)
    missing = missing_accounting_programs(prefix)
    what = "Slurm accounting: MariaDB and slurmdbd"
    hint = INSTALL_DEPS + ("" if prefix is None else " and scripts/build-slurm.sh")
    require(f"{what} ({', '.join(missing)})" if missing else what, not missing, hint)
    root = "root (the local Slurm cluster runs its daemons as root)"
    require(root, os.geteuid() == 0, "run the Slurm tests as root")


def current_slurm_prefix() -> Path:
    """The prefix of the current Slurm: `$K8S_AI_SLURM_PREFIX`, else scripts/build-slurm.sh's
    cache, which it builds (minutes) only under CI=true; without one the test skips, or fails
    under CI (tests/requirements.py)."""
    if os.environ.get(PREFIX_ENV):
        return Path(os.environ[PREFIX_ENV])
    argv = ["bash", str(BUILD_SCRIPT)] + ([] if in_ci() else ["--check"])
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    hint = f"run scripts/build-slurm.sh (make slurm-current): {done.stderr.strip()[-300:]}"
    require("a current Slurm (24.11)", done.returncode == 0 and bool(lines), hint)
    return Path(lines[-1])


@pytest.fixture(scope="session")
def slurm_accounting() -> Iterator[LocalMariaDB]:
    """One MariaDB server for the session's clusters; each slurmdbd has a database in it."""
    _require_slurm()
    with LocalMariaDB() as db:
        yield db


@pytest.fixture(scope="session")
def slurm_cluster(slurm_accounting: LocalMariaDB) -> Iterator[LocalSlurmCluster]:
    with LocalSlurmCluster(accounting=slurm_accounting) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def slurm_current_cluster(slurm_accounting: LocalMariaDB) -> Iterator[LocalSlurmCluster]:
    prefix = current_slurm_prefix()
    _require_slurm(prefix)
    # The kernel enforces --mem here (OUT_OF_MEMORY), slurmstepd's sampling on 22.05 (FAILED)
    with LocalSlurmCluster(prefix=prefix, cgroup_memory=True, accounting=slurm_accounting) as c:
        yield c


def _fresh(session_cluster: LocalSlurmCluster) -> Iterator[LocalSlurmCluster]:
    """A session cluster, checked idle before a test and cleared of jobs after it."""
    session_cluster.wait_until_idle(60)
    yield session_cluster
    session_cluster.run(["scancel", "--full", "--user=root"])
    for name in (node.name for node in session_cluster.nodes):
        if session_cluster.node_states().get(name, "").startswith(("down", "drain")):
            session_cluster.set_node_state(name, "resume")


@pytest.fixture
def cluster(slurm_cluster: LocalSlurmCluster) -> Iterator[LocalSlurmCluster]:
    """The 22.05 session cluster, idle before each test and cleared of jobs after it."""
    yield from _fresh(slurm_cluster)


@pytest.fixture(params=VERSIONS)
def versioned_cluster(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalSlurmCluster]:
    """The session cluster of each Slurm version in turn, idle before each test and cleared of
    jobs after it. Its commands come first on PATH: the CLI transport's sbatch, and the job's
    srun (a job inherits the submitter's PATH), are that version's."""
    name = "slurm_cluster" if request.param == VERSIONS[0] else "slurm_current_cluster"
    session_cluster: LocalSlurmCluster = request.getfixturevalue(name)
    if session_cluster.prefix is not None:
        monkeypatch.setenv("PATH", session_cluster.env["PATH"])
    yield from _fresh(session_cluster)


@pytest.fixture
def cli_config(cluster: LocalSlurmCluster) -> SlurmConfig:
    return cluster.backend_config("cli")


@pytest.fixture
def backend(cli_config: SlurmConfig) -> SlurmBackend:
    return SlurmBackend(cli_config, rss_sample_interval_s=0)


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    """Each transport in turn: the Slurm commands (`cli`) and slurmrestd (`rest`)."""
    return str(request.param)


@pytest.fixture
def any_backend(cluster: LocalSlurmCluster, transport: str) -> SlurmBackend:
    """The backend on `cluster` over each transport in turn."""
    return SlurmBackend(cluster.backend_config(transport), rss_sample_interval_s=0)


@pytest.fixture
def executor_slurm(
    cluster: LocalSlurmCluster, transport: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The executor's (and AICompute's) `slurm:` config for `cluster` over each transport in
    turn; for `rest` a fresh token in $K8S_AI_TEST_SLURM_JWT, named by `rest_token: {env}`."""
    slurm: dict[str, Any] = {"workdir": str(cluster.workdir), "slurm_conf": str(cluster.conf_path)}
    if transport == "rest":
        monkeypatch.setenv(TOKEN_ENV, cluster.jwt_token())
        rest = {"rest_url": cluster.rest_url, "rest_user": "root", "rest_token": {"env": TOKEN_ENV}}
        slurm |= {"transport": "rest", **rest}
    return slurm
