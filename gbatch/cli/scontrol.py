"""gbatch scontrol: show one job's full record and history; hold, release and requeue
jobs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gbatch.cli.context import Context, parse_ids, parse_job, print_failures
from gbatch.cli.exits import CliError, Exit

HELP = "show a job's details and history; hold, release or requeue jobs"


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "scontrol",
        help=HELP,
        description=HELP + ".",
        epilog="examples: gbatch scontrol show job 12 | gbatch scontrol hold 12,13 | "
        "gbatch scontrol hold 20-511 (every job with an id in that range) | "
        "gbatch scontrol release 12 | gbatch scontrol requeue 12 (a running job is stopped, "
        "then queued again; a finished one is queued again)",
    )
    p.add_argument("action", choices=("show", "hold", "release", "requeue"))
    p.add_argument(
        "args",
        nargs="+",
        metavar="ARG",
        help="`job ID` for show (N or N_K); otherwise job ids: N (an array's id: all its "
        "tasks), N_K, N_[K-M], FIRST-LAST, and comma lists of those",
    )
    p.add_argument("--json", action="store_true", help="with show: JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch import formatting, wire

    if args.action == "show":
        if len(args.args) != 2 or args.args[0].lower() != "job":
            raise CliError("usage: gbatch scontrol show job ID", Exit.USAGE)
        target = parse_job(args.args[1], "job")
        task = None if target.tasks is None else target.tasks[0][0]
        # JSON stays one object (the job named); the text shows an array's every task.
        reply = ctx.client.call(wire.ShowJob(id=target.job, task=task, with_tasks=not args.json))
        job = wire.job_from_wire(reply["job"])
        events = [wire.event_from_wire(e) for e in reply["events"]]
        tasks = [wire.job_from_wire(j) for j in reply.get("tasks", ())]
        if args.json:
            out = formatting.format_job_details_json(job, events, reply["now"])
        else:  # an array's tasks one after another, a blank line between, as scontrol
            out = "\n".join(
                formatting.format_job_details(j, events if j is job else (), reply["now"])
                for j in [job, *tasks]
            )
        sys.stdout.write(out)
        return Exit.OK
    actions: dict[str, type[wire.Hold | wire.Release | wire.Requeue]] = {
        "hold": wire.Hold,
        "release": wire.Release,
        "requeue": wire.Requeue,
    }
    jobs = parse_ids(args.args, "JOBID") or []
    reply = ctx.client.call(actions[args.action](jobs=tuple(jobs)))
    failed = print_failures("scontrol", reply, lambda f: f"job {f['id']}: {f['error']}")
    return Exit.FAILED if failed else Exit.OK
