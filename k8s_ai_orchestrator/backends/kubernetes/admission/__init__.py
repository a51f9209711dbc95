"""How each attempt's Job gets room in its tenant: one module per admission mode.

- `base.py`: the `Admission` protocol (prepare / submit / pending / evicted / finished);
- `direct.py`: the Job at once (single-pod steps outside Kueue);
- `guard.py`: a gang's Job held back until all its pods fit (`gang_admission.mode: guard`);
- `workload.py`: a gang's Job with its PodGroup (`mode: workload`);
- `kueue.py`: every Job of the tenant queued in Kueue (`mode: kueue`).

The mode of an attempt is chosen once, at submit, from its tenant's `gang_admission` and
whether the step is a gang (`admission_mode`).

Example:
    >>> from k8s_ai_orchestrator.spec import resolve_spec
    >>> from k8s_ai_orchestrator.backends.kubernetes.config import GangAdmission
    >>> admission_mode(GangAdmission(mode="workload"), resolve_spec({"nodes": 2}))
    'workload'
    >>> admission_mode(GangAdmission(mode="workload"), resolve_spec({}))
    'direct'
    >>> admission_mode(GangAdmission(mode="kueue", local_queue="q"), resolve_spec({}))
    'kueue'
"""

from __future__ import annotations

from collections.abc import Callable

from ....spec import ComputeSpec
from ...base import LaunchRequest
from ..config import GangAdmission
from .base import Admission, AdmissionTools, AttemptJob
from .direct import DirectAdmission
from .guard import GuardAdmission
from .kueue import KueueAdmission
from .workload import WorkloadAdmission


def admission_mode(admission: GangAdmission, spec: ComputeSpec) -> str:
    """The mode that admits a step: Kueue's for every step of a Kueue tenant, the tenant's
    gang mode for a gang, else direct."""
    if admission.kueue:
        return "kueue"
    return admission.mode if spec.is_gang else "direct"


class Admissions:
    """One admission per mode for a backend, and which one admits a step.

    Args:
        tools: what the modes share with the backend.
        drop_earlier: deletes a step's earlier attempts that have not succeeded (Kueue).
    """

    def __init__(self, tools: AdmissionTools, drop_earlier: Callable[[LaunchRequest], None]):
        self._modes: dict[str, Admission] = {
            "direct": DirectAdmission(tools),
            "guard": GuardAdmission(tools),
            "workload": WorkloadAdmission(tools),
            "kueue": KueueAdmission(tools, drop_earlier),
        }

    def of(self, admission: GangAdmission, spec: ComputeSpec) -> Admission:
        """The admission of a step in a tenant with `admission` config."""
        return self._modes[admission_mode(admission, spec)]


__all__ = ["Admission", "AdmissionTools", "Admissions", "AttemptJob", "admission_mode"]
