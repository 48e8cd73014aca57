"""gbatch squeue: jobs waiting and running, in Slurm's columns."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gbatch.cli.context import Context, parse_ids, split_list
from gbatch.cli.exits import CliError, Exit

HELP = "show queued and running jobs"


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "squeue", help=HELP, description=HELP + " (like Slurm's squeue).", add_help=False
    )
    p.add_argument("-u", "--user", action="append", metavar="USER[,USER]")
    p.add_argument("--me", action="store_true", help="only my jobs")
    p.add_argument(
        "-j",
        "--jobs",
        action="append",
        metavar="ID[,ID]",
        help="only these jobs: N (an array's id: all its tasks), N_K, N_[K-M], FIRST-LAST",
    )
    p.add_argument(
        "-t",
        "--states",
        action="append",
        metavar="STATE[,STATE]",
        help="e.g. PD,R; `all` includes finished jobs",
    )
    p.add_argument(
        "-r",
        "--array",
        action="store_true",
        help="one row per array task; by default an array's pending tasks share one row, "
        "N_[4-15], as in Slurm",
    )
    p.add_argument("-h", "--noheader", action="store_true")
    p.add_argument("-o", "--format", metavar="FMT", help='Slurm format, e.g. "%%.7i %%.9T %%R"')
    p.add_argument("--json", action="store_true")
    p.add_argument("--help", action="help", help="show this help and exit")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch import formatting, wire

    users = split_list(args.user) or ([ctx.me] if args.me else [])
    states = split_list(args.states) or []
    history = "all" in (s.lower() for s in states)  # every state, finished ones too
    request = wire.ListJobs(
        users=tuple(users),
        jobs=tuple(parse_ids(args.jobs, "-j/--jobs") or ()),
        states=() if history else tuple(states),
        history=history,
        brief=not args.json,
    )
    reply = ctx.client.call(request)
    jobs = [wire.job_from_wire(j) for j in reply["jobs"]]
    try:
        if args.json:
            out = formatting.format_squeue_json(jobs, reply["now"])
        else:
            out = formatting.format_squeue(
                jobs,
                reply["now"],
                fmt=args.format,
                header=not args.noheader,
                expand_arrays=args.array,
            )
    except formatting.FormatError as err:
        raise CliError(f"--format: {err}", Exit.USAGE) from err
    sys.stdout.write(out)
    return Exit.OK
