"""gbatch sshare: your fair-share figures, what your jobs hold, and your limits."""

from __future__ import annotations

import argparse
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, split_list
from gbatch.cli.exits import Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["sshare"]
EPILOG = """\
columns: RawUsage (GPU-seconds, decayed with half_life_days), EffectvUsage (its share of
everyone's), FairShare (the queue's factor, 1 = unused); then Pending, Running (jobs on
a node) and GPUs held, each beside its limit (MaxPending, MaxRunning, MaxGPUs), and
MaxArray (tasks per array submit). `-` is no limit. A job held back by a limit waits
with reason QOSMaxJobsPerUserLimit or QOSMaxGRESPerUser (see squeue). Limits are set in
the head's config.yaml (`limits:`); others' rows are for admins."""


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "sshare",
        help=HELP,
        description=HELP + " (like Slurm's sshare).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-a", "--all", action="store_true", help="every user (admins)")
    p.add_argument(
        "-u", "--users", action="append", metavar="USER[,USER]", help="these users (admins)"
    )
    p.add_argument("-n", "--noheader", action="store_true")
    p.add_argument("-P", "--parsable2", action="store_true", help="`|`-separated, no padding")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.protocol import codec, requests
    from gbatch.render import reports

    request = requests.ShowShares(users=tuple(split_list(args.users) or ()), all_users=args.all)
    shares = [codec.share_from_wire(row) for row in ctx.client.call(request)["users"]]
    if args.json:
        sys.stdout.write(reports.format_sshare_json(shares))
    else:
        sys.stdout.write(
            reports.format_sshare(shares, header=not args.noheader, parsable=args.parsable2)
        )
    return Exit.OK
