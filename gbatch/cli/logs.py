"""gbatch logs: a job's output (stdout and stderr, every attempt), optionally followed."""

from __future__ import annotations

import argparse
import sys
import time

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, parse_job
from gbatch.cli.exits import Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["logs"]
POLL_SECONDS = 0.2


def add_parser(commands: Any) -> None:
    p = commands.add_parser("logs", help=HELP, description=HELP + ".")
    p.add_argument("job", metavar="JOBID", help="N, or N_K: task K of array N")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument(
        "-l",
        "--label",
        action="store_true",
        help="the output of the job's srun steps of several tasks, or of its runs on every "
        "node, each line prefixed with its task's rank (`0: `; a node's SLURM_NODEID) as "
        "srun -l prints it (the job's log where it ran neither)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.protocol import requests

    target = parse_job(args.job, "JOBID")
    task = None if target.tasks is None else target.tasks[0][0]
    offset = 0
    while True:
        reply = ctx.client.call(
            requests.ReadLog(id=target.job, task=task, offset=offset, label=args.label)
        )
        if reply["data"]:
            sys.stdout.write(reply["data"])
            sys.stdout.flush()
        offset = reply["offset"]
        if reply["done"]:
            return Exit.OK
        if not reply["data"]:
            if not args.follow:
                return Exit.OK  # all the log holds now, in as many chunks as it takes
            time.sleep(POLL_SECONDS)
