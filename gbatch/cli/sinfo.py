"""gbatch sinfo: nodes and their GPUs (total, allocated, free, busy outside gbatch)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gbatch.cli.context import Context
from gbatch.cli.exits import Exit

HELP = "show nodes, their partitions (* the default) and their GPUs"


def add_parser(commands: Any) -> None:
    p = commands.add_parser("sinfo", help=HELP, description=HELP + ".", add_help=False)
    p.add_argument("-h", "--noheader", action="store_true")
    p.add_argument("-N", "--Node", action="store_true", help="one line per node (the default)")
    p.add_argument("--json", action="store_true", help="per-GPU detail as JSON")
    p.add_argument("--help", action="help", help="show this help and exit")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch import formatting, wire

    reply = ctx.client.call(wire.ListNodes())
    nodes = [wire.node_from_wire(n) for n in reply["nodes"]]
    default = reply.get("default_partition")
    if args.json:
        sys.stdout.write(formatting.format_sinfo_json(nodes))
    else:
        sys.stdout.write(
            formatting.format_sinfo(nodes, header=not args.noheader, default_partition=default)
        )
    return Exit.OK
