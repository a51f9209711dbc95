"""The texts a user reads first stay true to the code: every executor config key is named in
`ai_executor`'s docstring and in docs/executor-config.md, and no page says a capability is
missing where the code has it."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8s_ai_orchestrator import ai_executor
from k8s_ai_orchestrator.executor.schema import CONFIG_SCHEMA

ROOT = Path(__file__).parents[1]
NESTED = ("local", "oom_escalation", "auto_sizing")  # sections whose keys the docstring lists


def config_keys() -> list[str]:
    keys = list(CONFIG_SCHEMA)
    for section in NESTED:
        keys += [f"{section}.{k}" for k in CONFIG_SCHEMA[section].config_type.fields]
    return keys


@pytest.mark.parametrize("key", config_keys())
def test_the_executor_docstring_names_every_config_key(key: str) -> None:
    doc = " ".join((ai_executor.executor_creation_fn.__doc__ or "").split())
    section, _, leaf = key.rpartition(".")
    if section:
        block = doc[doc.index(f"{section} {{") :]
        assert leaf in block[: block.index("}")], f"{key} is missing from ai_executor's docstring"
    else:
        assert leaf in doc, f"{key} is missing from ai_executor's docstring"


@pytest.mark.parametrize("key", config_keys())
def test_the_config_page_documents_every_config_key(key: str) -> None:
    assert f"`{key}" in (ROOT / "docs" / "executor-config.md").read_text()


def test_growth_is_not_described_as_local_only() -> None:
    grow_at = CONFIG_SCHEMA["oom_escalation"].config_type.fields["grow_at"].description
    assert "Kubernetes" in grow_at and "local backend only" not in grow_at
    page = (ROOT / "docs" / "executor-config.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| `oom_escalation.grow_at`"))
    assert "local backend only" not in row and "Kubernetes" in row
