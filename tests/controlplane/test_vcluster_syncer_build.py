"""The real vCluster syncer's build (scripts/build-vcluster.sh), without starting it: the binary
runs, offers `vcluster start --config`, reports the pinned version, and its chart's values sit
beside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.vcluster

GO_MOD = Path(__file__).resolve().parents[1] / "vcluster" / "go.mod"


def run_syncer(bin_dir: Path, *args: str) -> str:
    result = subprocess.run(
        [str(bin_dir / "vcluster"), *args], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout


def test_the_syncer_offers_the_start_command_and_its_config_flag(vcluster_bin_dir: Path) -> None:
    commands = run_syncer(vcluster_bin_dir, "--help")
    start = run_syncer(vcluster_bin_dir, "start", "--help")

    assert re.search(r"^\s+start\s", commands, re.MULTILINE), commands
    assert "--config" in start, start


def test_the_syncer_reports_the_version_go_mod_pins(vcluster_bin_dir: Path) -> None:
    pinned = re.search(r"github\.com/loft-sh/vcluster (v\S+)", GO_MOD.read_text())

    assert pinned is not None
    assert run_syncer(vcluster_bin_dir, "version").strip() == pinned.group(1)


def test_the_chart_values_beside_the_syncer_are_its_config_defaults(
    vcluster_bin_dir: Path,
) -> None:
    values = yaml.safe_load((vcluster_bin_dir / "values.yaml").read_text())

    assert {"sync", "controlPlane", "telemetry"} <= set(values)
