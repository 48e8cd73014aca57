"""gbatch sacct: accounting for jobs, finished ones included."""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Iterator

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, parse_ids, split_list
from gbatch.cli.exits import CliError, Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

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


PAGE = 5000
"""Jobs sacct asks for at once when it pages through a listing (issue 35: at 1,000,000
jobs, the whole listing's reply and its Jobs were gigabytes in this process)."""


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.protocol import requests
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
    fields = split_list([args.format]) if args.format else None
    wanted = {f.split("%")[0].strip().lower() for f in fields or ()}
    brief = not args.json and not wanted & sacct.SACCT_FULL_SPEC_FIELDS
    gpu_usage = bool(wanted & sacct.GPU_USAGE_FIELDS)
    request = requests.ListJobs(
        history=True,
        jobs=tuple(ids or ()),
        users=tuple(users or ()),
        states=tuple(split_list(args.state) or ()),
        since=since,
        # A brief spec leaves a sweep task's params out: ask for whole specs then.
        brief=brief and not _asks_params(args.format),
        gpu_usage=gpu_usage,
    )
    try:
        if ids is None and not gpu_usage:
            # Page by page, each written before the next is asked for: bounded memory
            # whatever the history's size.
            pages = _pages(ctx, request)
        else:  # jobs named by id (bounded), or GPU use (read with the whole listing)
            pages = iter([_listed(ctx, request)])
        # The first page asked for before anything is written: a refusal prints nothing.
        first = next(pages)
        pages = itertools.chain([first], pages)
        if args.json:
            _write_json(args, pages, until)
        else:
            _write_table(args, ctx, pages, until, fields, units)
    except cells.FormatError as err:
        raise CliError(f"--format: {err}", Exit.USAGE) from err
    return Exit.OK


if TYPE_CHECKING:
    Page = tuple[list[Any], float, dict[str, Any]]  # (Jobs, the reply's now, its gpu_usage)


def _listed(ctx: Context, request: Any) -> Page:
    """The whole listing `request` asks for, as one page."""
    from gbatch.protocol import codec

    reply = ctx.client.call(request)
    jobs = [codec.job_from_wire(j) for j in reply["jobs"]]
    return jobs, reply["now"], {"gpu_usage": reply.get("gpu_usage", [])}


def _pages(ctx: Context, request: Any) -> Iterator[Page]:
    """The listing `request` asks for, PAGE jobs a request (ListJobs after/limit)."""
    from gbatch.protocol import codec

    after: int | None = None
    while True:
        reply = ctx.client.call(type(request)(**{**vars(request), "after": after, "limit": PAGE}))
        yield [codec.job_from_wire(j) for j in reply["jobs"]], reply["now"], {}
        after = reply.get("next")
        if after is None:
            return


def _kept(args: argparse.Namespace, jobs: list[Any], until: float | None) -> list[Any]:
    """The jobs of a page that -E and --name keep.

    Narrowed here, not by the daemon: both keep the reply a subset of the one asked for."""
    names = split_list(args.name)
    if until is not None:
        jobs = [j for j in jobs if j.submit_time is not None and j.submit_time <= until]
    if names is not None:
        jobs = [j for j in jobs if j.spec.name in names]
    return jobs


def _write_table(
    args: argparse.Namespace,
    ctx: Context,
    pages: Iterator[Page],
    until: float | None,
    fields: list[str] | None,
    units: str | None,
) -> None:
    """sacct's table, written a page at a time (render.sacct.SacctTable)."""
    from gbatch.core.gpuusage import GpuUsage
    from gbatch.render import sacct
    from gbatch.render.cells import as_text

    usage: dict[int, Any] = {}
    table = sacct.SacctTable(
        fields=fields,
        parsable=args.parsable2,
        units=units,
        gpu_usage=usage,
        expand_arrays=args.array,
    )
    out = sys.stdout
    if not args.noheader:
        out.write(as_text(table.header()))
    held: list[Any] = []  # an array's jobs whose pending tasks the next page may add to
    now: float | None = None
    for page, page_now, extra in pages:
        now = page_now if now is None else now  # the first reply's, for every page
        usage.update(
            (int(row[0]), GpuUsage.from_wire(row[1:])) for row in extra.get("gpu_usage", [])
        )
        jobs = held + _kept(args, page, until)
        cut = table.held_back(jobs)
        jobs, held = jobs[:cut], jobs[cut:]
        _write_lines(args, ctx, table, jobs, now, out)
    if held and now is not None:
        _write_lines(args, ctx, table, held, now, out)


def _write_lines(
    args: argparse.Namespace, ctx: Context, table: Any, jobs: list[Any], now: float, out: Any
) -> None:
    from gbatch.render.cells import as_text

    if not jobs:
        return
    steps = None if args.allocations else _steps_of(ctx, jobs)
    out.write(as_text(table.lines(jobs, now, steps)))


def _write_json(args: argparse.Namespace, pages: Iterator[Page], until: float | None) -> None:
    """sacct --json: `{"jobs": [...]}` as format_sacct_json writes it, a page at a time."""
    from gbatch.render import cells

    now: float | None = None
    out = sys.stdout
    for piece in cells.jobs_json_pieces(
        (job, now := page_now if now is None else now)
        for page, page_now, _ in pages
        for job in _kept(args, page, until)
    ):
        out.write(piece)
