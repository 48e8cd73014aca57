"""gbatch sprio: pending jobs' priority and the factors that order them."""

from __future__ import annotations

import argparse
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, parse_ids, split_list
from gbatch.cli.exits import Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["sprio"]
EPILOG = """\
gbatch does not add weighted factors as Slurm does: its planner orders pending jobs by
FAIRSHARE (the user's fair-share factor, 0..1, higher first; see `gbatch sshare`), then
PRIORITY (the job's --priority minus --nice, higher first), then AGE (older first),
then job id. RANK (-l) is a job's place in that order among the jobs shown.

As Slurm's sprio, only pending jobs the scheduler may start are listed: held jobs
(`--hold`, `scontrol hold`; priority 0 in Slurm) and jobs whose --begin time is still to
come are not, even when named with -j. With -j and none to list it prints `Unable to
find jobs matching user/id(s) specified` (exit 0), as Slurm does."""


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "sprio",
        help=HELP,
        description=HELP + " (like Slurm's sprio).",
        epilog=EPILOG,
        add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-j",
        "--jobs",
        action="append",
        metavar="ID[,ID]",
        help="these jobs only: N, comma lists of those (an array task by its own job id)",
    )
    p.add_argument("-u", "--user", action="append", metavar="USER[,USER]", help="these users")
    p.add_argument(
        "-l", "--long", action="store_true", help="add RANK, JOBPRIO (before nice), SUBMIT_TIME"
    )
    p.add_argument(
        "-n", "--norm", action="store_true", help="accepted: FAIRSHARE is always shown as 0..1"
    )
    p.add_argument("-h", "--noheader", action="store_true", help="no header line")
    p.add_argument("--help", action="help", help="show this help message and exit")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.core.jobids import JOBS
    from gbatch.core.views import JobPriority
    from gbatch.protocol import requests
    from gbatch.render import reports

    ids = parse_ids(args.jobs, "-j/--jobs", JOBS) or []
    request = requests.ShowPriorities(
        ids=tuple(int(text) for text in ids), users=tuple(split_list(args.user) or ())
    )
    reply = ctx.client.call(request)
    jobs = [JobPriority.from_wire(row) for row in reply["jobs"]]
    if args.json:
        sys.stdout.write(reports.format_sprio_json(jobs, reply["now"]))
    elif ids and not jobs:
        sys.stdout.write("Unable to find jobs matching user/id(s) specified\n")
    else:
        sys.stdout.write(
            reports.format_sprio(jobs, reply["now"], long=args.long, header=not args.noheader)
        )
    return Exit.OK
