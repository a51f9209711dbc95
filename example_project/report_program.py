"""The `risk_report` asset: a light asset that runs an external program through `AICompute`.

The program (programs/risk_report.py) uses only `dagster-pipes`; the resource runs it where
its size says — here a local process with 0.5 CPU and 256Mi, with OOM escalation and
relaunches as for executor steps — and hands back what it reported.
"""

import os
import sys
from pathlib import Path

from dagster import AssetCheckSpec, AssetExecutionContext, asset

from k8s_ai_orchestrator import AICompute, compute

PROGRAM = str(Path(__file__).parent / "programs" / "risk_report.py")


@asset(
    group_name="vegetation",
    op_tags=compute("xs"),
    check_specs=[AssetCheckSpec("scores_are_shares", asset="risk_report")],
    description="A JSON risk report written by an external program run through AICompute.",
)
def risk_report(context: AssetExecutionContext, ai: AICompute, risk_scores: dict[str, float]):
    out_dir = os.environ.get("VEGETATION_REPORTS") or str(Path(".demo/reports").resolve())
    return ai.run(
        context=context,
        command=[sys.executable, PROGRAM],
        extras={"risk_scores": risk_scores, "out_dir": out_dir},
        cpu=0.5,
        memory="256Mi",
    ).get_results()
