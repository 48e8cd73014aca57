"""gbatch sacct: accounting for jobs, finished ones included."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, parse_ids, split_list
from gbatch.cli.exits import CliError, Exit

HELP = COMMANDS["sacct"]


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
        help="jobs submitted since TIME: YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS] (the last "
        "one past), now[-N[seconds|minutes|hours|days|weeks]] (now-3days), midnight, noon, "
        "teatime, today, or `all`; default: midnight",
    )
    p.add_argument(
        "-E",
        "--endtime",
        metavar="TIME",
        help="jobs submitted before TIME (the forms of --starttime but `all`)",
    )
    p.add_argument("--name", action="append", metavar="NAME[,NAME]", help="only jobs so named")
    p.add_argument(
        "--units",
        metavar="[KMGTP]",
        help="memory fields (ReqMem) in KiB, MiB, GiB, TiB or PiB",
    )
    p.add_argument(
        "-o",
        "--format",
        metavar="FIELD[,FIELD]",
        help="e.g. JobID,JobName,State,ExitCode,Elapsed,AllocGPUS,NodeList; also UID, "
        "Partition, Submit, Start, End, Timelimit, Reason, Attempt, NNodes, AllocTRES, ReqTRES, "
        "TRESUsageInMax (the GPUs' peak memory and utilisation), "
        "AllocCPUS, ReqMem, Comment; Params: a parameter sweep task's parameters, "
        "MaxGpuMem: the most GPU memory the job's own processes used (gbatch's)",
    )
    p.add_argument("-P", "--parsable2", action="store_true", help="`|`-separated, no padding")
    p.add_argument("-n", "--noheader", action="store_true")
    p.add_argument(
        "-X",
        "--allocations",
        action="store_true",
        help="jobs only, without their steps' lines (N.batch, N.interactive, N.0, ...)",
    )
    p.add_argument(
        "--array",
        action="store_true",
        help="an array's pending tasks one line each (default: one line, N_[4-15], as Slurm)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def _since(text: str | None, now: float) -> float | None:
    if text is None:
        return _time("today", now, "--starttime")
    if text.lower() == "all":
        return None
    return _time(text, now, "--starttime")


def _time(text: str, now: float, option: str) -> float:
    """Slurm's sacct times: sbatch --begin's forms, read towards the past (sacct's
    parse_time(..., past)), and a plain ISO date-time."""
    from datetime import datetime  # deferred: a millisecond on every other command

    from gbatch.core.timefmt import TimeLimitError, parse_begin

    try:
        return parse_begin(text, now, field=option, past=True)
    except TimeLimitError as err:
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError:
            raise CliError(str(err), Exit.USAGE) from err


def _asks_params(fmt: str | None) -> bool:
    return fmt is not None and any(
        name.strip().lower().split("%")[0] == "params" for name in fmt.split(",")
    )


def _steps_of(ctx: Context, jobs: list[Any]) -> dict[int, list[Any]] | None:
    """The steps of those of `jobs` that started, by job (ListSteps); None when none did."""
    started = [job.id for job in jobs if job.start_time is not None]
    if not started:
        return None
    from gbatch.core.steps import Step
    from gbatch.protocol import requests

    reply = ctx.client.call(requests.ListSteps(ids=tuple(started)))
    steps: dict[int, list[Any]] = {}
    for data in reply["steps"]:
        step = Step.from_wire(data)
        steps.setdefault(step.job_id, []).append(step)
    return steps


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.core.gpuusage import GpuUsage
    from gbatch.protocol import codec, requests
    from gbatch.render import cells, sacct

    ids = parse_ids(args.jobs, "-j/--jobs")
    users = split_list(args.user)
    if users is None and not args.allusers and ids is None:
        users = [ctx.me]
    now = time.time()
    since = None if ids else _since(args.starttime, now)
    until = None if args.endtime is None else _time(args.endtime, now, "--endtime")
    units = None if args.units is None else args.units.upper()
    if units is not None and (len(units) != 1 or units not in sacct.UNITS):
        raise CliError(f"--units: {args.units!r} is not a unit. Use K, M, G, T or P", Exit.USAGE)
    names = split_list(args.name)
    fields = split_list([args.format]) if args.format else None
    wanted = {f.split("%")[0].strip().lower() for f in fields or ()}
    brief = not args.json and not wanted & sacct.SACCT_FULL_SPEC_FIELDS
    reply = ctx.client.call(
        requests.ListJobs(
            history=True,
            jobs=tuple(ids or ()),
            users=tuple(users or ()),
            states=tuple(split_list(args.state) or ()),
            since=since,
            # A brief spec leaves a sweep task's params out: ask for whole specs then.
            brief=brief and not _asks_params(args.format),
            gpu_usage=bool(wanted & sacct.GPU_USAGE_FIELDS),
        )
    )
    jobs = [codec.job_from_wire(j) for j in reply["jobs"]]
    # Narrowed here, not by the daemon: both keep the reply a subset of the one asked for.
    if until is not None:
        jobs = [j for j in jobs if j.submit_time is not None and j.submit_time <= until]
    if names is not None:
        jobs = [j for j in jobs if j.spec.name in names]
    steps = None if args.allocations or args.json else _steps_of(ctx, jobs)
    try:
        if args.json:
            out = sacct.format_sacct_json(jobs, reply["now"])
        else:
            out = sacct.format_sacct(
                jobs,
                reply["now"],
                fields=fields,
                header=not args.noheader,
                parsable=args.parsable2,
                units=units,
                expand_arrays=args.array,
                steps=steps,
                gpu_usage={
                    int(row[0]): GpuUsage.from_wire(row[1:]) for row in reply.get("gpu_usage", [])
                },
            )
    except cells.FormatError as err:
        raise CliError(f"--format: {err}", Exit.USAGE) from err
    sys.stdout.write(out)
    return Exit.OK
