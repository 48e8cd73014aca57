"""gbatch tui: a full-screen, live view of the queue, the nodes and job logs."""

from __future__ import annotations

import argparse
import gc
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["tui"]


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
    from gbatch.protocol import requests

    # Fail before taking over the terminal: "no daemon" reads better as a line.
    ctx.client.call(requests.Ping())
    ctx.client.close()
    _need_a_terminal()
    # No cyclic garbage collection while textual is imported and the first reply is
    # decoded: each of the many collections those allocations set off would walk
    # every object made so far, and nothing made here is garbage yet.
    gc.disable()
    # No textual: a client and the decoder.
    from gbatch.tui.data import DaemonLink, QueueView
    from gbatch.tui.rows import QueueFilter

    # The first read of the queue (the first page of the view the app opens with)
    # runs while textual is imported, most of the start.
    link = DaemonLink(ctx.paths.socket)
    link.prefetch_queue(QueueView(QueueFilter(user=ctx.me)))
    # Deferred: textual costs far more to import than every other command needs.
    from gbatch.tui.app import make_app

    app = make_app(ctx.paths.socket, user=ctx.me, refresh_seconds=args.refresh, link=link)
    # What lives this long lives as long as the app: the collector need never walk it.
    gc.freeze()
    gc.enable()
    app.run()
    return Exit.OK


def _need_a_terminal() -> None:
    """Refuse before textual starts when stdin or stdout is not a terminal: there it
    would draw escape codes into a pipe and wait for keys that never come."""
    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):
        if stream is None or not stream.isatty():
            raise CliError(
                f"{name} is not a terminal, and the full-screen view needs one. In a script "
                "use `gbatch squeue` (add -i SECONDS to watch it)",
                Exit.USAGE,
            )
