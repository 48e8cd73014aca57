"""gbatch node list|install|drain|resume: the fleet's nodes, for admins."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit

HELP = "list nodes; install the agent on hosts; drain a node or resume it (admins)"
INSTALL_TIMEOUT = 600.0  # copying and probing many hosts takes a while


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "node",
        help=HELP,
        description=HELP + ". A drained node keeps its running jobs.",
        epilog="examples: gbatch node list | gbatch node install --all | "
        'gbatch node drain gpu03 --reason "fan noise" | gbatch node resume gpu03',
    )
    p.add_argument("action", choices=("list", "install", "drain", "resume"))
    p.add_argument("name", nargs="*", metavar="NAME", help="the node(s)")
    p.add_argument("--all", action="store_true", help="install: every host in the inventory")
    p.add_argument("--reason", metavar="TEXT", help="drain: why (required)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch import formatting, wire

    if args.action == "list":
        nodes = [wire.node_from_wire(n) for n in ctx.client.call("nodes")["nodes"]]
        sys.stdout.write(formatting.format_node_list(nodes))
        return Exit.OK
    if args.action == "install":
        return _install(args, ctx)
    if len(args.name) != 1:
        raise CliError(f"name one node: gbatch node {args.action} NAME", Exit.USAGE)
    (name,) = args.name
    if args.action == "drain":
        if not args.reason:
            raise CliError(
                '--reason is required: gbatch node drain NAME --reason "why"', Exit.USAGE
            )
        ctx.client.call("node_drain", name=name, reason=args.reason)
    else:
        ctx.client.call("node_resume", name=name)
    return Exit.OK


def _install(args: argparse.Namespace, ctx: Context) -> int:
    if not args.name and not args.all:
        raise CliError("which nodes? Name them, or use --all", Exit.USAGE)
    ctx.client.timeout = INSTALL_TIMEOUT
    results = ctx.client.call("node_install", names=args.name)["results"]
    for result in results:
        if result["ok"]:
            print(result["summary"])
        else:
            print(f"gbatch node: error: {result['name']}: {result['error']}", file=sys.stderr)
    return Exit.OK if all(r["ok"] for r in results) else Exit.FAILED
