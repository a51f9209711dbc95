"""The `k8s-ai` command line.

Example:
    $ DAGSTER_HOME=~/dagster_home k8s-ai report 813621f2 --out reports   # or: report latest
    reports/run-813621f2.html
    reports/run-813621f2.png
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .errors import OrchestratorError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="k8s-ai", description="Tools for pipelines that run through ai_executor."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser(
        "report",
        help="write a finished run's step timeline and resource use as HTML and PNG",
        description="Reads the run's events from the Dagster instance at $DAGSTER_HOME.",
    )
    report.add_argument(
        "run_id",
        metavar="RUN_ID",
        help="the Dagster run id, a unique prefix of it (the 8 characters the UI shows), "
        "or 'latest' for the newest run",
    )
    report.add_argument(
        "--out", default="k8s-ai-reports", help="folder to write into (default: %(default)s)"
    )
    return parser


def _report(run_id: str, out: str) -> int:
    from dagster import DagsterInstance

    from .report.files import write_report
    from .report.model import load_run_report, resolve_run_id

    if not os.environ.get("DAGSTER_HOME"):
        print(
            "k8s-ai report: DAGSTER_HOME is not set; point it at the Dagster instance "
            "that ran the run",
            file=sys.stderr,
        )
        return 2
    with DagsterInstance.get() as instance:
        report = load_run_report(instance, resolve_run_id(instance, run_id))
    files = write_report(report, out)
    print(files.html)
    print(files.png)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `k8s-ai`; returns the exit status.

    Example:
        >>> main(["report", run_id, "--out", "reports"])  # doctest: +SKIP
        0
    """
    args = _parser().parse_args(argv)
    try:
        if args.command == "report":
            return _report(args.run_id, args.out)
    except OrchestratorError as error:
        print(f"k8s-ai {args.command}: {error}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
