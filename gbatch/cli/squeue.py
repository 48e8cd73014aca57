"""gbatch squeue: jobs waiting and running, in Slurm's columns."""

from __future__ import annotations

import argparse
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, parse_ids, split_list
from gbatch.cli.everyday import join_option_values as join_option_values  # _main's
from gbatch.cli.everyday import node_list
from gbatch.cli.exits import CliError, Exit
from gbatch.core.constants import (
    SQUEUE_DEFAULT_SORT,
    SQUEUE_FULL_SPEC_LETTERS,
    SQUEUE_LONG_FORMAT,
    SQUEUE_SORT_KEYS,
    SQUEUE_START_LETTERS,
)

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["squeue"]


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
    p.add_argument("-n", "--name", action="append", metavar="NAME[,NAME]", help="job names")
    p.add_argument("-p", "--partition", action="append", metavar="PART[,PART]")
    p.add_argument(
        "-w",
        "--nodelist",
        action="append",
        metavar="NODE[,NODE]",
        help="jobs on any of these nodes (a host list: gpu[01-02]); a job across nodes "
        "is on each of its nodes",
    )
    p.add_argument(
        "-t",
        "--states",
        action="append",
        metavar="STATE[,STATE]",
        help="e.g. PD,R; `all` includes finished jobs",
    )
    p.add_argument(
        "-a", "--all", action="store_true", help="accepted for Slurm; every partition is shown"
    )
    p.add_argument(
        "-r",
        "--array",
        action="store_true",
        help="one row per array task; by default an array's pending tasks share one row, "
        "N_[4-15], as in Slurm",
    )
    p.add_argument("-h", "--noheader", action="store_true")
    p.add_argument(
        "-l",
        "--long",
        action="store_true",
        help="Slurm's long layout (STATE, TIME_LIMIT) under a date line",
    )
    p.add_argument("-o", "--format", metavar="FMT", help='Slurm format, e.g. "%%.7i %%.9T %%R"')
    p.add_argument(
        "-O",
        "--Format",
        dest="fields",
        metavar="FIELD[:[.]WIDTH],...",
        help="Slurm's long field names, e.g. JobID,Name:30,State,TimeLeft,NumCPUs",
    )
    p.add_argument(
        "-S",
        "--sort",
        metavar="KEYS",
        help="Slurm sort keys, e.g. -S -t,i or --sort=P,-p ('-' before a key: descending); "
        f"keys {SQUEUE_SORT_KEYS}; default: {SQUEUE_DEFAULT_SORT} (partition, state: pending "
        "before running, priority highest first), as Slurm",
    )
    p.add_argument(
        "--start",
        action="store_true",
        help="pending jobs by expected start; START_TIME is N/A unless the planner "
        "has reserved GPUs for the job or it waits for its --begin time",
    )
    p.add_argument(
        "-i",
        "--iterate",
        metavar="SECONDS",
        help="print again every SECONDS under a date line, until Ctrl-C",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--help", action="help", help="show this help and exit")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    fmt: str | None = None
    sort: list[tuple[str, bool]] | None = None  # None: Slurm's default (squeue_brief)
    letters: frozenset[str] = frozenset()
    if not _everyday(args):
        from gbatch.render import cells, squeue

        try:
            fmt = _format(args)
            letters = squeue.squeue_letters(fmt)
        except cells.FormatError as err:
            option = (
                "-O/--Format" if args.fields is not None and args.format is None else "--format"
            )
            raise CliError(f"{option}: {err}", Exit.USAGE) from err
        text = args.sort if args.sort is not None else "S" if args.start else SQUEUE_DEFAULT_SORT
        try:  # --start's default: by expected start, as Slurm
            sort = squeue.parse_squeue_sort(text)
        except cells.FormatError as err:
            raise CliError(f"-S/--sort: {err}", Exit.USAGE) from err
    interval = _interval(args.iterate)

    users = split_list(args.user) or ([ctx.me] if args.me else [])
    for user in users:
        _check_user(user)
    states = split_list(args.states) or (["PENDING"] if args.start else [])
    history = "all" in (s.lower() for s in states)  # every state, finished ones too
    needs_starts = bool(letters & SQUEUE_START_LETTERS) or any(key in "Se" for key, _ in sort or ())
    brief = not args.json and not letters & SQUEUE_FULL_SPEC_LETTERS
    from gbatch.render.squeue_brief import list_jobs

    request = list_jobs(
        users=tuple(users),
        jobs=tuple(parse_ids(args.jobs, "-j/--jobs") or ()),
        states=() if history else tuple(states),
        history=history,
        brief=brief,
        # As columns, each spec once: a third of the bytes to encode and parse. A daemon
        # sends no `starts` with a table, so %S/%e and -S S/e ask for records.
        # As columns: the daemon reads narrow rows, builds no Job, sends each spec once.
        # A daemon from before `columns` refuses it: daemon and client ship together.
        columns=brief and not needs_starts,
        names=tuple(split_list(args.name) or ()),
        partitions=tuple(split_list(args.partition) or ()),
        nodes=tuple(node_list(args.nodelist) or ()),
        starts=needs_starts,
    )
    dated = not args.noheader and (interval is not None or args.long)
    if interval is None:
        _show(ctx, request, args, fmt, sort, dated=dated)
        return Exit.OK
    import time  # deferred: only -i sleeps

    try:
        while True:
            _show(ctx, request, args, fmt, sort, dated=dated)
            sys.stdout.write("\n")  # as Slurm: a blank line between iterations
            sys.stdout.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        return Exit.OK  # Ctrl-C is how -i ends


def _everyday(args: argparse.Namespace) -> bool:
    """Whether the options leave Slurm's default format and sort, and name no job ids
    (their grammar is gbatch.core.jobids'): what squeue_brief draws."""
    return (
        args.format is None
        and args.fields is None
        and not args.start
        and not args.long
        and args.sort is None
        and not args.json
        and not args.jobs
    )


def _format(args: argparse.Namespace) -> str | None:
    """The -o format the options mean: -o, else -O, else --start's or -l's layout."""
    from gbatch.render import squeue

    if args.format is not None:
        return str(args.format)
    if args.fields is not None:
        return squeue.squeue_format_from_fields(args.fields)
    if args.start:
        return squeue.SQUEUE_START_FORMAT
    if args.long:
        return SQUEUE_LONG_FORMAT
    return None


def _interval(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        seconds = int(text)
    except ValueError:
        seconds = 0
    if seconds <= 0:
        raise CliError(
            f"-i/--iterate: {text!r} is not a number of seconds. Give a whole number "
            "above 0, e.g. -i 5",
            Exit.USAGE,
        )
    return float(seconds)


def _check_user(user: str) -> None:
    """As Slurm's squeue: a user the system does not know is an error, not an empty
    table (a typo would otherwise read as "no jobs")."""
    from gbatch.core.accounts import user_exists

    if not user_exists(user):
        raise CliError(f"Invalid user: {user}", Exit.FAILED)


def _check_jobs_exist(ctx: Context, jobs: tuple[str, ...]) -> None:
    """-j named jobs and none was listed: when none exists in any state, say so as
    Slurm does (exit 1) instead of printing an empty table. Jobs that exist but were
    filtered out (-t, -u, ...) still give the empty table."""
    from gbatch.protocol import requests

    known = ctx.client.call(requests.ListJobs(jobs=jobs, history=True, brief=True))
    if not known["jobs"]:
        raise CliError(f"Invalid job id specified: {','.join(jobs)}", Exit.FAILED)


def _show(
    ctx: Context,
    request: dict[str, Any],
    args: argparse.Namespace,
    fmt: str | None,
    sort: list[tuple[str, bool]] | None,
    *,
    dated: bool,
) -> None:
    """One listing: `sort` None is the everyday path (squeue_brief)."""
    reply = ctx.client.send(request)
    if sort is None:
        from gbatch.render.squeue_brief import format_default

        out = format_default(
            reply["columns"], reply["now"], header=not args.noheader, expand=args.array
        )
    else:
        out = _full_table(ctx, request, reply, args, fmt, sort)
    if dated and not args.json:
        import time  # deferred: only -l and -i print the date

        # Slurm's date line (its ctime form), in the daemon's clock.
        out = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(reply["now"])) + "\n" + out
    sys.stdout.write(out)


def _full_table(
    ctx: Context,
    request: dict[str, Any],
    reply: dict[str, Any],
    args: argparse.Namespace,
    fmt: str | None,
    sort: list[tuple[str, bool]],
) -> str:
    """The reply's jobs as Jobs, printed by render.squeue (any format, sort, -r, --json)."""
    from gbatch.protocol import codec, listings
    from gbatch.render import squeue

    if "columns" in reply:
        jobs = listings.jobs_from_columns(reply["columns"])
    elif "table" in reply:
        jobs = listings.jobs_from_table(reply["table"])
    else:  # records: asked for, or a daemon from before tables
        jobs = [codec.job_from_wire(j) for j in reply["jobs"]]
    if not jobs and request["jobs"]:
        _check_jobs_exist(ctx, request["jobs"])
    now = reply["now"]
    starts = {int(job_id): at for job_id, at in reply.get("starts", ())}
    jobs = squeue.sort_squeue(jobs, sort, now, starts)
    if args.json:
        return squeue.format_squeue_json(jobs, now)
    return squeue.format_squeue(
        jobs, now, fmt=fmt, header=not args.noheader, starts=starts, expand_arrays=args.array
    )
