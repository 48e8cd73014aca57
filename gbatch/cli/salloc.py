"""gbatch salloc: an allocation and a shell in it; `gbatch srun` there runs steps in it.

It queues an allocation with sbatch's options, waits for it, and runs CMD (default:
your login shell) as the allocation's interactive step (`N.interactive`), on its node
with its GPUs, SLURM_JOB_ID and the job's variables; on a terminal, on a terminal of its
own. Leaving it releases the allocation (`salloc: Relinquishing job allocation N`).
"""

from __future__ import annotations

import argparse
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context
from gbatch.cli.stepclient import add_interactive_options, immediate_seconds, login_shell

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["salloc"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "salloc",
        help=HELP,
        description=HELP + ". salloc queues an allocation with the options (as sbatch's), "
        "waits for it, then runs CMD (default: your login shell) in it, on its node with "
        "its GPUs and SLURM_JOB_ID set; `gbatch srun CMD` there runs CMD as a step of it. "
        "Leaving the shell releases the allocation. Exits with CMD's status.",
        epilog="example: gbatch salloc --gpus 1 -t 2:00:00\n"
        "         gbatch salloc -G 2 ./run_experiments.sh",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="CMD [ARG...]",
        help="what to run in the allocation (default: your login shell)",
    )
    add_interactive_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.cli import stepclient
    from gbatch.core.steps import step_name

    command = list(args.cmd)
    if command[:1] == ["--"]:
        command = command[1:]
    stepclient.refuse_batch_options("salloc", args)
    immediate = immediate_seconds(args.immediate)
    name = step_name(command) if command else "interactive"
    command = command or [login_shell()]
    job_id = stepclient.queue_allocation(ctx, args, command, "salloc", name)
    stepclient.wait_for_allocation(ctx, job_id, "salloc", immediate)
    stepclient.say("salloc", f"Granted job allocation {job_id}")
    pty = args.pty or sys.stdin.isatty()
    try:
        return stepclient.run_step(ctx, "salloc", job_id, command, pty=pty, interactive=True)
    finally:
        stepclient.say("salloc", f"Relinquishing job allocation {job_id}")
