"""The `k8s-ai` command line.

Example:
    $ DAGSTER_HOME=~/dagster_home k8s-ai report 813621f2 --out reports   # or: report latest
    reports/run-813621f2.html
    reports/run-813621f2.png
    $ DAGSTER_HOME=~/dagster_home k8s-ai cost --days 7 --by asset,partition --out reports
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

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
    cost = commands.add_parser(
        "cost",
        help="print what the steps of recent runs cost and wasted, and chart it as a PNG",
        description="Reads the runs' events from the Dagster instance at $DAGSTER_HOME: "
        "the figures each step recorded (docs/cost.md).",
    )
    window = cost.add_mutually_exclusive_group()
    window.add_argument("--days", type=int, default=7, help="the last N days (default: 7)")
    window.add_argument("--since", type=date.fromisoformat, help="from this UTC date on")
    cost.add_argument("--until", type=date.fromisoformat, help="before this UTC date")
    cost.add_argument("--job", help="only the runs of this job")
    cost.add_argument(
        "--by",
        default="asset",
        help="what to group by, comma-separated: asset, partition, tenant, day, job, step, "
        "backend (default: %(default)s)",
    )
    cost.add_argument(
        "--out", default="k8s-ai-reports", help="folder for the PNG (default: %(default)s)"
    )
    return parser


def _report(run_id: str, out: str) -> int:
    from dagster import DagsterInstance

    from .report.files import write_report
    from .report.model import load_run_report, resolve_run_id

    if _instance_missing("report"):
        return 2
    with DagsterInstance.get() as instance:
        report = load_run_report(instance, resolve_run_id(instance, run_id))
    files = write_report(report, out)
    print(files.html)
    print(files.png)
    return 0


def _instance_missing(command: str) -> bool:
    if os.environ.get("DAGSTER_HOME"):
        return False
    print(
        f"k8s-ai {command}: DAGSTER_HOME is not set; point it at the Dagster instance "
        "that ran the runs",
        file=sys.stderr,
    )
    return True


def _cost(args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from .report.costchart import write_cost_png
    from .report.costs import GROUPS, aggregate, format_table, load_cost_entries

    by = tuple(g.strip() for g in args.by.split(",") if g.strip())
    unknown = [g for g in by if g not in GROUPS]
    if not by or unknown:
        print(
            f"k8s-ai cost: --by {args.by!r}: group by one or more of {', '.join(GROUPS)}",
            file=sys.stderr,
        )
        return 2
    if args.days < 1:
        print(f"k8s-ai cost: --days {args.days}: give 1 or more", file=sys.stderr)
        return 2
    if _instance_missing("cost"):
        return 2
    if args.since is not None:
        since = datetime.combine(args.since, datetime.min.time(), UTC)
    else:
        since = datetime.now(UTC) - timedelta(days=args.days)
    until = datetime.combine(args.until, datetime.min.time(), UTC) if args.until else None
    with DagsterInstance.get() as instance:
        entries = load_cost_entries(instance, since, until, args.job)
    span = f"{since.date().isoformat()}_{(until or datetime.now(UTC)).date().isoformat()}"
    if not entries:
        print(f"no step with recorded figures in the runs from {span.replace('_', ' to ')}")
        return 0
    print(format_table(aggregate(entries, by), by))
    print(write_cost_png(entries, by[0], os.path.join(args.out, f"cost-{span}.png")))
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
        if args.command == "cost":
            return _cost(args)
    except OrchestratorError as error:
        print(f"k8s-ai {args.command}: {error}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
