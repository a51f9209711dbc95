"""UPDATE_GOLDEN rewrites golden files but never passes: an update run is always red."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import update_golden


def test_an_update_run_rewrites_the_golden_file_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    golden = tmp_path / "step.json"
    golden.write_text("old")
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("UPDATE_GOLDEN", "1")
    with pytest.raises(pytest.fail.Exception, match="UPDATE_GOLDEN: rewrote .*step.json"):
        update_golden(golden, "new")
    assert golden.read_text() == "new"
    with pytest.raises(pytest.fail.Exception, match="left unchanged"):
        update_golden(golden, "new")


def test_under_ci_the_update_variable_is_refused_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    golden = tmp_path / "step.json"
    golden.write_text("old")
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("UPDATE_GOLDEN", "1")
    with pytest.raises(pytest.fail.Exception, match="UPDATE_GOLDEN is set under CI=true"):
        update_golden(golden, "new")
    assert golden.read_text() == "old"


def test_without_the_variable_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("UPDATE_GOLDEN", raising=False)
    update_golden(tmp_path / "step.json", "new")
    assert not (tmp_path / "step.json").exists()
