"""Room on nodes and in ResourceQuotas (`capacity.py`), the arithmetic pre-flight and the gang
guard share, and which admission mode admits a step (`admission.admission_mode`)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from k8s_ai_orchestrator.backends.kubernetes.admission import admission_mode
from k8s_ai_orchestrator.backends.kubernetes.capacity import (
    fits,
    gang_needs,
    quota_lines,
    resources,
    show,
    step_needs,
)
from k8s_ai_orchestrator.backends.kubernetes.config import GangAdmission
from k8s_ai_orchestrator.spec import resolve_spec

GiB = 2**30


def test_a_gang_pod_asks_for_one_node_s_ranks_and_the_quota_for_every_pod() -> None:
    spec = resolve_spec({"cpu": 2, "memory": "4Gi", "gpu": 1, "nodes": 3, "tasks_per_node": 2})
    assert step_needs(spec) == {"cpu": 4, "memory": 4 * GiB, "gpu": 1}
    assert gang_needs(spec) == {"cpu": 12, "memory": 12 * GiB, "gpu": 3}


@pytest.mark.parametrize(
    ("allocatable", "fit"),
    [
        ({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}, True),
        ({"cpu": "3500m", "memory": "8Gi", "nvidia.com/gpu": "1"}, False),
        ({"cpu": "8", "memory": "8Gi"}, False),
    ],
)
def test_a_pod_fits_a_node_only_with_room_for_every_kind(
    allocatable: dict[str, str], fit: bool
) -> None:
    needs = {"cpu": Decimal(4), "memory": Decimal(8 * GiB), "gpu": Decimal(1)}
    assert fits(resources(allocatable), needs) is fit


@pytest.mark.parametrize(
    ("hard", "used", "never", "short"),
    [
        ({"requests.memory": "16Gi"}, {"requests.memory": "2Gi"}, False, False),
        ({"requests.memory": "16Gi"}, {"requests.memory": "10Gi"}, False, True),
        ({"limits.memory": "4Gi"}, {}, True, True),
    ],
)
def test_a_quota_says_whether_the_step_can_ever_fit_and_whether_it_fits_now(
    hard: dict[str, str], used: dict[str, str], never: bool, short: bool
) -> None:
    needs = {"cpu": Decimal(1), "memory": Decimal(8 * GiB), "gpu": Decimal(0)}
    (line,) = quota_lines("team-quota", hard, used, needs)
    assert (line.never_fits, line.short) == (never, short)


def test_a_quota_key_of_a_kind_the_step_does_not_ask_for_is_not_compared() -> None:
    needs = {"cpu": Decimal(1), "memory": Decimal(GiB), "gpu": Decimal(0)}
    hard = {"requests.nvidia.com/gpu": "0", "pods": "10", "requests.cpu": "2"}
    assert [line.key for line in quota_lines("q", hard, {}, needs)] == ["requests.cpu"]
    assert show("memory", Decimal(3 * GiB)) == "3Gi"


@pytest.mark.parametrize(
    ("admission", "fields", "mode"),
    [
        (GangAdmission(), {"nodes": 2}, "guard"),
        (GangAdmission(), {}, "direct"),
        (GangAdmission(mode="workload"), {"nodes": 2}, "workload"),
        (GangAdmission(mode="workload"), {}, "direct"),
        (GangAdmission(mode="kueue", local_queue="q"), {"nodes": 2}, "kueue"),
        (GangAdmission(mode="kueue", local_queue="q"), {}, "kueue"),
    ],
)
def test_kueue_admits_every_step_of_its_tenant_and_the_other_modes_only_gangs(
    admission: GangAdmission, fields: dict[str, int], mode: str
) -> None:
    assert admission_mode(admission, resolve_spec(fields)) == mode
