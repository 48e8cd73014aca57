"""gbatch node list|drain|resume: the fleet's nodes, for admins."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit

HELP = "list nodes; drain a node out of scheduling or resume it (admins)"


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "node",
        help=HELP,
        description=HELP + ". A drained node keeps its running jobs.",
        epilog='examples: gbatch node list | gbatch node drain gpu03 --reason "fan noise" | '
        "gbatch node resume gpu03",
    )
    p.add_argument("action", choices=("list", "drain", "resume"))
    p.add_argument("name", nargs="?", metavar="NAME", help="the node (drain, resume)")
    p.add_argument("--reason", metavar="TEXT", help="why the node is drained (required)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch import formatting, wire

    if args.action == "list":
        nodes = [wire.node_from_wire(n) for n in ctx.client.call("nodes")["nodes"]]
        sys.stdout.write(formatting.format_sinfo(nodes))
        return Exit.OK
    if args.name is None:
        raise CliError(f"which node? usage: gbatch node {args.action} NAME", Exit.USAGE)
    if args.action == "drain":
        if not args.reason:
            raise CliError(
                '--reason is required: gbatch node drain NAME --reason "why"', Exit.USAGE
            )
        ctx.client.call("node_drain", name=args.name, reason=args.reason)
    else:
        ctx.client.call("node_resume", name=args.name)
    return Exit.OK
