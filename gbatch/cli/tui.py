"""gbatch tui: a full-screen, live view of the queue, the nodes and job logs."""

from __future__ import annotations

import argparse
from typing import Any

from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit

HELP = "full-screen live view of jobs, nodes and logs (cancel, hold, release)"


def add_parser(commands: Any) -> None:
    p = commands.add_parser("tui", help=HELP, description=HELP + ".")
    p.add_argument(
        "--refresh",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often to re-read the daemon (default 1)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    if not 0.1 <= args.refresh <= 60:
        raise CliError(f"--refresh {args.refresh:g}: give 0.1 to 60 seconds", Exit.USAGE)
    # Fail before taking over the terminal: "no daemon" reads better as a line.
    ctx.client.call("ping")
    ctx.client.close()
    # Deferred: textual costs far more to import than every other command needs.
    from gbatch.tui.app import make_app

    make_app(ctx.paths.socket, user=ctx.me, refresh_seconds=args.refresh).run()
    return Exit.OK
