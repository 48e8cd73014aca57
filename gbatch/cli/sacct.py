"""gbatch sacct: accounting for jobs, finished ones included."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from gbatch.cli.context import Context, parse_ids, split_list
from gbatch.cli.exits import CliError, Exit

HELP = "show accounting data for jobs, finished ones included"


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "sacct",
        help=HELP,
        description=HELP + ". By default: your jobs submitted since midnight, as Slurm does.",
    )
    p.add_argument(
        "-j",
        "--jobs",
        action="append",
        metavar="ID[,ID]",
        help="only these jobs: N (an array's id: all its tasks), N_K, N_[K-M], FIRST-LAST",
    )
    p.add_argument("-u", "--user", action="append", metavar="USER[,USER]")
    p.add_argument("-a", "--allusers", action="store_true")
    p.add_argument("-s", "--state", action="append", metavar="STATE[,STATE]")
    p.add_argument(
        "-S",
        "--starttime",
        metavar="TIME",
        help="jobs submitted since TIME: YYYY-MM-DD[THH:MM[:SS]] or `all`",
    )
    p.add_argument(
        "-o",
        "--format",
        metavar="FIELD[,FIELD]",
        help="e.g. JobID,JobName,State,ExitCode,Elapsed,AllocGPUS,NodeList; Params: a "
        "parameter sweep task's parameters (gbatch's own field)",
    )
    p.add_argument("-P", "--parsable2", action="store_true", help="`|`-separated, no padding")
    p.add_argument("-n", "--noheader", action="store_true")
    p.add_argument("-X", "--allocations", action="store_true", help="accepted; gbatch has no steps")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def _since(text: str | None, now: float) -> float | None:
    from datetime import datetime  # deferred: a millisecond on every other command

    if text is None:
        midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight.timestamp()
    if text.lower() == "all":
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError as err:
        raise CliError(
            f"--starttime: {text!r} is not a time. Use YYYY-MM-DD[THH:MM[:SS]] or all", Exit.USAGE
        ) from err


def _asks_params(fmt: str | None) -> bool:
    return fmt is not None and any(
        name.strip().lower().split("%")[0] == "params" for name in fmt.split(",")
    )


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch import formatting, wire

    ids = parse_ids(args.jobs, "-j/--jobs")
    users = split_list(args.user)
    if users is None and not args.allusers and ids is None:
        users = [ctx.me]
    since = None if ids else _since(args.starttime, time.time())
    reply = ctx.client.call(
        wire.ListJobs(
            history=True,
            jobs=tuple(ids or ()),
            users=tuple(users or ()),
            states=tuple(split_list(args.state) or ()),
            since=since,
            # A brief spec leaves a sweep task's params out: ask for whole specs then.
            brief=not args.json and not _asks_params(args.format),
        )
    )
    jobs = [wire.job_from_wire(j) for j in reply["jobs"]]
    try:
        if args.json:
            out = formatting.format_sacct_json(jobs, reply["now"])
        else:
            out = formatting.format_sacct(
                jobs,
                reply["now"],
                fields=split_list([args.format]) if args.format else None,
                header=not args.noheader,
                parsable=args.parsable2,
            )
    except formatting.FormatError as err:
        raise CliError(f"--format: {err}", Exit.USAGE) from err
    sys.stdout.write(out)
    return Exit.OK
