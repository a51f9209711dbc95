"""Properties of compute specs over generated inputs: whatever a user writes, `compute()` and
hand-written tags either give a spec that survives the trip through op tags unchanged, or raise
`ComputeSpecError` — never another exception — whose message names the field and the value.
Valid values within the rules between fields are always accepted, so an implementation that
refused everything would fail here too.

Example counts are modest and derandomized: CI has two cores and must not flake.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8s_ai_orchestrator import ComputeSpecError, compute
from k8s_ai_orchestrator.spec import (
    DEFAULT_SIZE_CLASSES,
    SPEC_FIELDS,
    ComputeSpec,
    parse_size_table,
    resolve_spec,
)
from k8s_ai_orchestrator.tags import TAG_PREFIX, spec_from_tags

PROPERTY = settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

NUMBER = r"[0-9]{1,12}(\.[0-9]{1,8})?"
QUANTITY_TEXT = st.one_of(
    st.from_regex(rf"\A{NUMBER}(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?\Z"),
    st.from_regex(rf"\A{NUMBER}(s|min|h|d|m)?\Z"),
    st.sampled_from(
        ["nan", "inf", "-inf", "1e400", "-1", "0", " 2Gi", "2Gi\n", "a100\n", "true", "false"]
        + ["xs", "gpu-8", "local", "slurm", "research", "a100", "500m", "30min", "٣", ""]
    ),
    st.text(max_size=12),
)
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(),
    QUANTITY_TEXT,
)
VALID = {
    "size": st.sampled_from(list(DEFAULT_SIZE_CLASSES)),
    "cpu": st.one_of(st.sampled_from([1, 0.5, "500m", "2", "auto"]), st.floats(0.001, 1e6)),
    "memory": st.one_of(st.from_regex(r"\A[1-9][0-9]{0,3}(Mi|Gi|G)\Z"), st.just("auto")),
    "cpu_default": st.one_of(st.sampled_from([1, 0.5, "500m"]), st.floats(0.001, 1e6)),
    "memory_default": st.from_regex(r"\A[1-9][0-9]{0,3}(Mi|Gi|G)\Z"),
    "gpu": st.integers(0, 8),
    "gpu_type": st.sampled_from(["a100", "nvidia-h100-80gb"]),
    "gpu_partition": st.sampled_from(["1g.10gb", "3g.40gb", "1g.10gb+me"]),
    "gpu_memory": st.from_regex(r"\A[1-9][0-9]{0,2}(Mi|Gi|G)\Z"),
    "nodes": st.integers(1, 4),
    "tasks_per_node": st.integers(1, 8),
    "gpus_per_node": st.integers(0, 8),
    "preemptible": st.booleans(),
    "backend": st.sampled_from(["local", "kubernetes", "slurm"]),
    "tenant": st.sampled_from(["research", "team-a"]),
    "timeout": st.one_of(st.floats(1, 86400), st.sampled_from(["30s", "30min", "2h", "1d"])),
}
# Mostly valid fields with now and then a wild one, so that checks deep in resolution run too.
COMPUTE_ARGS = st.fixed_dictionaries(
    {},
    optional={
        name: st.one_of(VALID[name], VALID[name], VALID[name], ANY_VALUE) for name in SPEC_FIELDS
    },
)


def within_the_rules_between_fields(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` less what a rule between fields refuses: `<x>_default` only with x='auto' and
    no size; 'auto' only on one node; gpu or gpus_per_node, not both; gpu_partition and
    gpu_memory only with at least one GPU."""
    kept = dict(kwargs)
    for name in ("cpu", "memory"):
        if kept.get(name) == "auto" and kept.get("nodes", 1) > 1:
            del kept[name]
        if kept.get(name) != "auto" or "size" in kept:
            kept.pop(f"{name}_default", None)
    if "gpu" in kept:
        kept.pop("gpus_per_node", None)
    size_gpus = DEFAULT_SIZE_CLASSES[kept.get("size", "xs")].gpu
    if kept.get("gpu", kept.get("gpus_per_node", size_gpus)) < 1:
        kept.pop("gpu_partition", None)
        kept.pop("gpu_memory", None)
    return kept


VALID_ARGS = st.fixed_dictionaries({}, optional=VALID).map(within_the_rules_between_fields)


def names_the_value(message: str, value: Any) -> bool:
    """Whether an error message shows `value` as field_error writes it (long ones cut)."""
    return repr(value)[:40] in message


TAGS = st.dictionaries(
    st.sampled_from([TAG_PREFIX + name for name in SPEC_FIELDS] + ["k8s_ai/cpus", "team"]),
    QUANTITY_TEXT,
    max_size=6,
)


@PROPERTY
@given(VALID_ARGS)
def test_valid_arguments_within_the_rules_between_fields_are_accepted(kwargs: dict[str, Any]):
    tags = compute(**kwargs)
    assert spec_from_tags(tags) == resolve_spec(kwargs)


@PROPERTY
@given(COMPUTE_ARGS)
def test_compute_round_trips_through_tags_or_raises_compute_spec_error(kwargs: dict[str, Any]):
    try:
        tags = compute(**kwargs)
    except ComputeSpecError as error:
        given_values = [(name, value) for name, value in kwargs.items() if value is not None]
        assert any(
            f"{name}=" in str(error) and names_the_value(str(error), value)
            for name, value in given_values
        ), str(error)
        return
    expected = resolve_spec({k: v for k, v in kwargs.items() if v is not None})
    assert spec_from_tags(tags) == expected
    assert all(isinstance(value, str) for value in tags.values())


@PROPERTY
@given(st.sampled_from(SPEC_FIELDS), ANY_VALUE)
def test_any_single_value_for_any_field_gives_a_spec_or_compute_spec_error(name: str, value: Any):
    try:
        tags = compute(**{name: value})
    except ComputeSpecError as error:
        assert f"{name}=" in str(error) and names_the_value(str(error), value), str(error)
        return
    assert spec_from_tags(tags) == resolve_spec({name: value} if value is not None else {})


@PROPERTY
@given(TAGS)
def test_hand_written_tags_give_a_spec_that_compute_reproduces_or_raise(tags: dict[str, str]):
    try:
        spec = spec_from_tags(tags, step="mosaic")
    except ComputeSpecError as error:
        message = str(error)
        assert message.startswith("step 'mosaic': ")
        assert any(key.removeprefix(TAG_PREFIX) in message for key in tags), message
        return
    assert isinstance(spec, ComputeSpec)
    fields = {key[len(TAG_PREFIX) :]: value for key, value in tags.items() if key != "team"}
    assert compute(**fields) == {key: value for key, value in tags.items() if key != "team"}
    assert spec_from_tags(compute(**fields)) == spec


SIZE_ROWS = st.dictionaries(st.sampled_from(["cpu", "memory", "gpu", "ram"]), ANY_VALUE)
SIZE_TABLES = st.one_of(
    st.dictionaries(st.sampled_from([*DEFAULT_SIZE_CLASSES, "huge", "Huge", ""]), SIZE_ROWS),
    st.dictionaries(st.sampled_from(["xl", "huge"]), ANY_VALUE, max_size=2),
    ANY_VALUE,
)


SIZE_OVERRIDES = {
    "cpu": st.integers(1, 256),
    "memory": st.from_regex(r"\A[1-9][0-9]{0,3}(Mi|Gi)\Z"),
    "gpu": st.integers(0, 8),
}
VALID_SIZE_TABLES = st.fixed_dictionaries(
    {},
    optional={
        **{
            name: st.fixed_dictionaries({}, optional=SIZE_OVERRIDES)
            for name in DEFAULT_SIZE_CLASSES
        },
        "huge": st.fixed_dictionaries(
            {"cpu": SIZE_OVERRIDES["cpu"], "memory": SIZE_OVERRIDES["memory"]},
            optional={"gpu": SIZE_OVERRIDES["gpu"]},
        ),
    },
)


@PROPERTY
@given(VALID_SIZE_TABLES)
def test_size_class_tables_that_override_or_add_whole_classes_are_accepted(raw: dict[str, Any]):
    table = parse_size_table(raw)
    for name, row in raw.items():
        base = DEFAULT_SIZE_CLASSES.get(name)
        resolved = resolve_spec({"size": name}, table)
        assert resolved.cpu == row.get("cpu", base.cpu if base else None)
        assert resolved.gpu == row.get("gpu", base.gpu if base else 0)


@PROPERTY
@given(SIZE_TABLES)
def test_size_class_tables_resolve_every_class_or_raise_compute_spec_error(raw: Any):
    try:
        table = parse_size_table(raw)
    except ComputeSpecError as error:
        message = str(error)
        if isinstance(raw, dict):
            named = (f"size_classes.{name}" in message or repr(name) in message for name in raw)
            assert any(named), message
        else:
            assert message.startswith("size_classes=") and names_the_value(message, raw)
        return
    for name in table:
        assert isinstance(resolve_spec({"size": name}, table), ComputeSpec)
