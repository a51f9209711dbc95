"""The risk report: an external program that knows only `dagster-pipes` (no Dagster, no
k8s_ai_orchestrator). The `risk_report` asset runs it through `AICompute`, sized like any step;
it reads the risk scores from the Pipes extras, writes the report, and reports the
materialization and an asset check back to Dagster.
"""

import json
import os

from dagster_pipes import open_dagster_pipes


def main() -> None:
    with open_dagster_pipes() as pipes:
        scores = pipes.get_extra("risk_scores")
        out_dir = pipes.get_extra("out_dir")
        riskiest = max(scores, key=scores.get)
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "risk_report.json")
        with open(path, "w") as f:
            json.dump({"scores": scores, "riskiest": riskiest}, f, indent=1)
        pipes.log.info(f"risk report for {len(scores)} regions written to {path}")
        pipes.report_asset_materialization(
            metadata={"riskiest_region": riskiest, "max_risk": scores[riskiest], "path": path}
        )
        pipes.report_asset_check(
            check_name="scores_are_shares",
            passed=all(0.0 <= s <= 1.0 for s in scores.values()),
            metadata={"regions": len(scores)},
        )


if __name__ == "__main__":
    main()
