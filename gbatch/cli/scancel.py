"""gbatch scancel: cancel or signal pending or running jobs, or one step of a job.

Running jobs get SIGTERM, then SIGKILL after the grace period. With -s/--signal nothing
is cancelled: the signal goes to the jobs' steps (-b: their batch shells alone; --full:
both), as Slurm's scancel sends it.
"""

from __future__ import annotations

import argparse

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, parse_ids, print_failures, split_list
from gbatch.cli.everyday import node_list, scancel_failure_line
from gbatch.cli.exits import CliError, Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["scancel"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "scancel",
        help=HELP,
        description=HELP + ". Prints nothing on success; each failure is one line and exit 1. "
        "Filters combine as in Slurm: a job must match every option given (one item of "
        "each list); with job ids, they narrow the jobs named.",
    )
    p.add_argument(
        "ids",
        nargs="*",
        metavar="JOBID",
        help="job ids: N (an array's id: all its tasks), N_K (task K of array N), N_[K-M,J], "
        "FIRST-LAST (every job in that id range), and comma lists of those; a step: N.M, "
        "N_K.M, N.batch (the batch script: cancelling it cancels the job) or N.interactive",
    )
    p.add_argument(
        "-s",
        "--signal",
        metavar="SIG",
        help="send SIG (a name, with or without SIG, or a number: USR1, SIGTERM, 10) "
        "instead of cancelling: to the job's steps, not its batch script (as Slurm); a "
        "pending job is refused",
    )
    p.add_argument(
        "-b",
        "--batch",
        action="store_true",
        help="with -s: signal only the batch script's shell, not its children nor steps "
        "(the script must trap it)",
    )
    p.add_argument(
        "-f",
        "--full",
        action="store_true",
        help="with -s: signal the batch script's shell, its children and every step",
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
    p.add_argument(
        "-n",
        "--name",
        "--jobname",
        action="append",
        metavar="NAME[,NAME]",
        help="only jobs with these names",
    )
    p.add_argument(
        "-p",
        "--partition",
        action="append",
        metavar="PART[,PART]",
        help="only jobs in these partitions",
    )
    p.add_argument(
        "-w",
        "--nodelist",
        action="append",
        metavar="NODE[,NODE]",
        help="only jobs running on any of these nodes (a host list: gpu[01-02]); a job "
        "across nodes is on each of its nodes",
    )
    p.add_argument("--me", action="store_true", help="all my active jobs")
    p.set_defaults(run=run)


def split_steps(values: list[str]) -> tuple[list[str], list[str]]:
    """JOBID arguments as (job id texts, step id texts): an item with a `.` is a step.

    Comma lists are split (outside a task list's brackets); step ids are checked by the
    one grammar of gbatch/core/steps.py, exit 2 naming the bad one."""
    import re

    jobs: list[str] = []
    steps: list[str] = []
    for value in values:
        plain = []
        for item in re.split(r",(?![^\[]*\])", value):
            if "." in item:
                steps.append(item)
            else:
                plain.append(item)
        if plain:
            jobs.append(",".join(plain))
    if steps:
        from gbatch.core.jobids import JobIdError
        from gbatch.core.steps import parse_step_ref

        for step in steps:
            try:
                parse_step_ref(step)
            except JobIdError as err:
                raise CliError(f"JOBID: {err}", Exit.USAGE) from err
    return jobs, steps


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.protocol import requests

    texts, steps = split_steps(args.ids or [])
    jobs = parse_ids(texts, "JOBID") or []
    users = split_list(args.user) or ([ctx.me] if args.me else [])
    states = split_list(args.state) or []
    names = split_list(args.name) or []
    partitions = split_list(args.partition) or []
    nodes = node_list(args.nodelist) or []
    if args.signal is not None:
        from gbatch.core.signals import SignalNameError, parse_signal_name

        try:
            parse_signal_name(args.signal)
        except SignalNameError as err:
            raise CliError(f"-s/--signal: {err}", Exit.USAGE) from err
    if args.batch and args.full:
        raise CliError("-b/--batch and --full: give one of them", Exit.USAGE)
    if (args.batch or args.full) and steps:
        raise CliError(
            f"-b/--batch and --full act on whole jobs, and {steps[0]} is a step. Drop the "
            "option, or name the job",
            Exit.USAGE,
        )
    if not (jobs or steps or users or states or names or partitions or nodes):
        raise CliError(
            "no job ids given. Name job ids, or use -u USER / -t STATE / -n NAME / "
            "-p PARTITION / -w NODE / --me",
            Exit.USAGE,
        )
    request = requests.Cancel(
        jobs=tuple(jobs),
        steps=tuple(steps),
        users=tuple(users),
        states=tuple(states),
        names=tuple(names),
        partitions=tuple(partitions),
        nodes=tuple(nodes),
        signal=args.signal,
        batch=args.batch,
        full=args.full,
    )
    reply = ctx.client.call(request)
    failed = print_failures("scancel", reply, scancel_failure_line)
    return Exit.FAILED if failed else Exit.OK
