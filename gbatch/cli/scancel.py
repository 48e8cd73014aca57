"""gbatch scancel: cancel pending or running jobs.

Running ones get SIGTERM, then SIGKILL after the grace period.
"""

from __future__ import annotations

import argparse
from typing import Any

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, parse_ids, print_failures, split_list
from gbatch.cli.exits import CliError, Exit

HELP = COMMANDS["scancel"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "scancel",
        help=HELP,
        description=HELP + ". Prints nothing on success; each failure is one line and exit 1.",
    )
    p.add_argument(
        "ids",
        nargs="*",
        metavar="JOBID",
        help="job ids: N (an array's id: all its tasks), N_K (task K of array N), N_[K-M,J], "
        "FIRST-LAST (every job in that id range), and comma lists of those",
    )
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
    from gbatch.protocol import requests

    jobs = parse_ids(args.ids, "JOBID") or []
    users = split_list(args.user) or ([ctx.me] if args.me else [])
    states = split_list(args.state) or []
    if not jobs and not users and not states:
        raise CliError(
            "no job ids given. Name job ids, or use -u USER / -t STATE / --me", Exit.USAGE
        )
    request = requests.Cancel(jobs=tuple(jobs), users=tuple(users), states=tuple(states))
    reply = ctx.client.call(request)
    failed = print_failures(
        "scancel", reply, lambda f: f"Kill job error on job id {f['id']}: {f['error']}"
    )
    return Exit.FAILED if failed else Exit.OK
