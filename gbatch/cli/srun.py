"""gbatch srun: run a command in an allocation, attached to this terminal.

Outside a job: queue an allocation with sbatch's options, wait for it, run the command
as its first step (`N.0`), release the allocation when it ends, and exit with its
status. Inside one (SLURM_JOB_ID set, as in a batch script or an salloc shell; or
--jobid): run the command as a new step of that job. The transport is
gbatch/cli/py's.
"""

from __future__ import annotations

import argparse
import os

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit
from gbatch.cli.stepclient import (
    add_interactive_options,
    add_task_options,
    immediate_seconds,
    queue_allocation,
    refuse_batch_options,
    run_step,
    step_ask,
    step_tasks,
    wait_for_allocation,
)

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["srun"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "srun",
        help=HELP,
        description=HELP + ". Outside a job it queues an allocation with the options "
        "(as sbatch's), waits for it, runs CMD in it with this terminal attached, and "
        "releases it when CMD ends; inside a job (SLURM_JOB_ID set) or with --jobid it "
        "runs CMD as a new step of that job: on all its GPUs, or with -G/-c/--mem on that "
        "share of them (GPUs of its own unless --overlap; it waits while other steps hold "
        "them, as Slurm's srun). In a job across nodes it starts one task per node (or "
        "per --ntasks-per-node, or -n spread over them; -N/-w some of its nodes), each "
        "with its ranks and MASTER_ADDR/MASTER_PORT; the step fails when a task fails, the "
        "others stopped (-K0: left running). An interactive job's terminal is warned "
        "before its time limit. Exits with CMD's status.",
        epilog="example: gbatch srun --gpus 1 --pty bash\n"
        "         gbatch srun -t 10 python -c 'import torch; print(torch.cuda.is_available())'\n"
        "         gbatch srun --jobid 12 nvidia-smi     # a step in your running job 12\n"
        "         gbatch srun -G 1 python fold.py       # in a 2-GPU job: one GPU of its own\n"
        "         gbatch srun -l hostname               # in a job across nodes: a task on each",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="CMD [ARG...]",
        help="the command to run, and its arguments",
    )
    add_interactive_options(p)
    p.add_argument(
        "--jobid",
        metavar="N",
        help="run CMD as a step of your running job N (default: $SLURM_JOB_ID when set)",
    )
    p.add_argument(
        "--overlap",
        action="store_true",
        help="inside a job: this step may share GPUs the job's other steps hold for "
        "themselves (steps asking -G get GPUs of their own by default, as in Slurm)",
    )
    add_task_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.core.steps import step_name

    command = list(args.cmd)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise CliError(
            "no command given. Name one: gbatch srun [OPTIONS] CMD [ARG...], e.g. "
            "gbatch srun --gpus 1 --pty bash",
            Exit.USAGE,
        )
    refuse_batch_options("srun", args)
    immediate = immediate_seconds(args.immediate)
    inside = args.jobid or os.environ.get("SLURM_JOB_ID")
    if inside:
        from gbatch.cli.context import parse_job

        target = parse_job(inside.strip(), "--jobid" if args.jobid else "SLURM_JOB_ID")
        # A step of the job it is in, no new queueing: the share of the job's resources
        # it asks (-G, -c, --mem: its own GPUs unless --overlap), else all of them.
        return run_step(
            ctx,
            "srun",
            target.job,
            command,
            pty=args.pty,
            task=target.single_task,
            ask={**step_ask(args, command), **step_tasks(args)},
        )
    # Its tasks are the allocation's own layout; -l and -K say how they are run.
    tasks = step_tasks(args)
    ask = {k: v for k, v in tasks.items() if k in ("label", "kill_on_bad_exit")}
    job_id = queue_allocation(ctx, args, command, "srun", step_name(command))
    wait_for_allocation(ctx, job_id, "srun", immediate)
    return run_step(ctx, "srun", job_id, command, pty=args.pty, ask=ask)
