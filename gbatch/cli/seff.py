"""gbatch seff: how well a job used what it was given."""

from __future__ import annotations

import argparse
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, parse_job
from gbatch.cli.exits import Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["seff"]
EPILOG = """\
Like Slurm's seff. gbatch measures neither a job's CPU time nor its memory use: those
lines say `not measured`. Time Limit Efficiency is the run's wall-clock time over its
time limit; GPU-hours its GPUs times that time. GPU Utilization is the mean, over the
node reports taken while the run ran (one a report interval), of its GPUs' mean
utilisation, and the busiest single GPU in any report; GPU Memory the most memory its
GPUs held together, against their total. Both are the job's latest run's (a requeued
job starts afresh). Cluster is the head's host name."""


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "seff",
        help=HELP,
        description=HELP + ".",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("job", metavar="JOBID", help="N, or N_K (an array task)")
    p.set_defaults(run=run)


def _group(uid: int) -> str:
    import grp
    import pwd

    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        return str(uid)
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def run(args: argparse.Namespace, ctx: Context) -> int:
    import socket

    from gbatch.core.gpuusage import GpuUsage
    from gbatch.protocol import codec, requests
    from gbatch.render import reports

    target = parse_job(str(args.job), "JOBID")
    task = None if target.tasks is None else target.tasks[0][0]
    reply = ctx.client.call(requests.ShowJob(id=target.job, task=task))
    job = codec.job_from_wire(reply["job"])
    usage = reply.get("gpu_usage")  # absent from an older daemon's reply
    sys.stdout.write(
        reports.format_seff(
            job,
            reply["now"],
            cluster=socket.gethostname(),
            group=_group(job.uid),
            gpu_usage=None if usage is None else GpuUsage.from_wire(usage),
        )
    )
    return Exit.OK
