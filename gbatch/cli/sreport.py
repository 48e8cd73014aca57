"""gbatch sreport: GPU-hours per user or Unix group over a period."""

from __future__ import annotations

import argparse
import sys
import time

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, split_list
from gbatch.cli.exits import CliError, Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["sreport"]
EPILOG = """\
A simplified `sreport cluster AccountUtilizationByUser` in GPU-hours: each job's GPUs
times the part of its run inside [START, END), running jobs up to now. Only a job's
last run is known: an earlier run of a requeued job is not counted. The period is
Slurm's default, yesterday, unless -S/-E say otherwise. Your own row; other users
(-u, -a) and groups (--group: the submitter's primary group) are for admins. Partitions
(--partition) sum every user's jobs, for anyone, as the web page's usage chart does."""


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "sreport",
        help=HELP,
        description=HELP + ".",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-S", "--start", metavar="TIME", help="YYYY-MM-DD[THH:MM[:SS]]; default: yesterday 00:00"
    )
    p.add_argument(
        "-E", "--end", metavar="TIME", help="YYYY-MM-DD[THH:MM[:SS]] or `now`; default: today 00:00"
    )
    p.add_argument("-u", "--users", action="append", metavar="USER[,USER]", help="(admins)")
    p.add_argument("-a", "--all", action="store_true", help="every user (admins)")
    p.add_argument("--group", action="store_true", help="per Unix group (admins)")
    p.add_argument("--partition", action="store_true", help="per partition (every user's jobs)")
    p.add_argument("-P", "--parsable2", action="store_true", help="`|`-separated, no banner")
    p.add_argument("-n", "--noheader", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def period(start: str | None, end: str | None, now: float) -> tuple[float, float]:
    """[start, end) in epoch seconds from -S/-E; Slurm's default is yesterday."""
    from datetime import datetime, timedelta  # deferred: only sreport reads dates

    midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)

    def parse(text: str, option: str) -> float:
        if text.lower() == "now":
            return now
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError as err:
            raise CliError(
                f"{option}: {text!r} is not a time. Use YYYY-MM-DD[THH:MM[:SS]] or now",
                Exit.USAGE,
            ) from err

    first = parse(start, "--start") if start else (midnight - timedelta(days=1)).timestamp()
    last = parse(end, "--end") if end else midnight.timestamp()
    if last <= first:
        raise CliError("--end: the period ends before it starts. Give -E after -S", Exit.USAGE)
    return first, last


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.core.views import UsageRow
    from gbatch.protocol import requests
    from gbatch.render import reports

    start, end = period(args.start, args.end, time.time())
    reply = ctx.client.call(
        requests.ReportUsage(
            start=start,
            end=end,
            users=tuple(split_list(args.users) or ()),
            all_users=args.all,
            by_group=args.group,
            by_partition=args.partition,
        )
    )
    by = "group" if args.group else "partition" if args.partition else "user"
    rows = [UsageRow.from_wire(row) for row in reply["rows"]]
    if args.json:
        sys.stdout.write(reports.format_sreport_json(rows, start, end, by))
    else:
        sys.stdout.write(
            reports.format_sreport(
                rows,
                start,
                end,
                by=by,
                header=not args.noheader,
                parsable=args.parsable2,
            )
        )
    return Exit.OK
