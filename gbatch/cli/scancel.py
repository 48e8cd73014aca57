"""gbatch scancel: cancel pending or running jobs (running ones get SIGTERM, then
SIGKILL after the grace period)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gbatch.cli.context import Context, parse_ids, split_list
from gbatch.cli.exits import CliError, Exit

HELP = "cancel jobs"


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "scancel",
        help=HELP,
        description=HELP + ". Prints nothing on success; each failure is one line and exit 1.",
    )
    p.add_argument("ids", nargs="*", metavar="JOBID", help="job ids (also `12,13`)")
    p.add_argument(
        "-u",
        "--user",
        action="append",
        metavar="USER[,USER]",
        help="cancel this user's active jobs (yours unless you are an admin)",
    )
    p.add_argument(
        "-t",
        "--state",
        action="append",
        metavar="STATE[,STATE]",
        help="only jobs in these states, e.g. PENDING or PD",
    )
    p.add_argument("--me", action="store_true", help="all my active jobs")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch import wire

    ids = parse_ids(args.ids) or []
    users = split_list(args.user) or ([ctx.me] if args.me else [])
    states = split_list(args.state) or []
    if not ids and not users and not states:
        raise CliError(
            "no job ids given. Name job ids, or use -u USER / -t STATE / --me", Exit.USAGE
        )
    reply = ctx.client.call(wire.Cancel(ids=tuple(ids), users=tuple(users), states=tuple(states)))
    failures = [r for r in reply["results"] if not r["ok"]]
    for failure in failures:
        print(
            f"gbatch scancel: error: Kill job error on job id {failure['id']}: {failure['error']}",
            file=sys.stderr,
        )
    return Exit.FAILED if failures else Exit.OK
