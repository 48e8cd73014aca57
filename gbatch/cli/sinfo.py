"""gbatch sinfo: partitions and nodes in Slurm's layout; `--gpus` for gbatch's GPU view."""

from __future__ import annotations

import argparse
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, split_list
from gbatch.cli.exits import CliError, Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["sinfo"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "sinfo",
        help=HELP,
        description=HELP
        + ": PARTITION AVAIL TIMELIMIT NODES STATE NODELIST, `*` after the default "
        "partition, node lists compressed (gpu[01-03]). A state ending in `*` is a node "
        "that is not responding (gbatch's suspect or down): it gets no new jobs.",
        add_help=False,
    )
    p.add_argument("-h", "--noheader", action="store_true", help="print no header line")
    p.add_argument(
        "-N",
        "--Node",
        action="store_true",
        help="one line per node and partition: NODELIST NODES PARTITION STATE",
    )
    p.add_argument(
        "-l", "--long", action="store_true", help="more columns (with -N: CPUS, MEMORY, REASON)"
    )
    p.add_argument(
        "-s", "--summarize", action="store_true", help="one line per partition, NODES(A/I/O/T)"
    )
    p.add_argument(
        "-R",
        "--list-reasons",
        action="store_true",
        help="drained, down and not responding nodes: REASON USER TIMESTAMP NODELIST",
    )
    p.add_argument(
        "-T",
        "--reservation",
        action="store_true",
        help="the reservations (scontrol create reservation): RESV_NAME STATE START_TIME "
        "END_TIME DURATION NODELIST",
    )
    p.add_argument(
        "-p",
        "--partition",
        action="append",
        metavar="PARTITION[,PARTITION]",
        help="only these partitions",
    )
    p.add_argument(
        "-o",
        "--format",
        metavar="FORMAT",
        help="Slurm's %%[.][width]<letter> fields, e.g. '%%N %%G %%T %%P %%l %%a %%D %%c %%m "
        "%%E %%t'; '.' right-justifies, %%#P is as wide as the widest value",
    )
    p.add_argument(
        "-O",
        "--Format",
        metavar="FIELD[:[.]SIZE][,...]",
        help="Slurm's long field names, e.g. 'NodeList,Gres:10,StateLong,Partition' "
        "(20 wide unless SIZE; '.' right-justifies)",
    )
    p.add_argument(
        "--gpus",
        action="store_true",
        help="gbatch's GPU view: one line per node with GPUs total/allocated/free/busy "
        "outside gbatch, GPU type and reason",
    )
    p.add_argument("--json", action="store_true", help="per-GPU detail as JSON")
    p.add_argument("--help", action="help", help="show this help and exit")
    p.set_defaults(run=run)


def _format(args: argparse.Namespace) -> str | list[Any]:
    from gbatch.render import cells, sinfo

    if args.format is not None and args.Format is not None:
        raise CliError("--format: -o and -O cannot both be given. Use one of them", Exit.USAGE)
    try:
        if args.Format is not None:
            return sinfo.parse_sinfo_long_format(args.Format)
        if args.format is not None:
            sinfo.parse_sinfo_format(args.format)  # checked here, to name the option
            return str(args.format)
    except cells.FormatError as err:
        option = "--Format" if args.Format is not None else "--format"
        raise CliError(f"{option}: {err}", Exit.USAGE) from err
    if args.list_reasons:
        return sinfo.SINFO_REASONS_LONG_FORMAT if args.long else sinfo.SINFO_REASONS_FORMAT
    if args.summarize:
        return "%#P %.5a %.10l %.16F %N"
    if args.Node:
        return sinfo.SINFO_NODE_LONG_FORMAT if args.long else sinfo.SINFO_NODE_FORMAT
    return sinfo.SINFO_LONG_FORMAT if args.long else sinfo.SINFO_DEFAULT_FORMAT


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.core.constants import IMPLICIT_PARTITION
    from gbatch.protocol import codec, requests
    from gbatch.render import sinfo

    if args.reservation:
        return _reservations(args, ctx)
    fmt = _format(args)
    reply = ctx.client.call(requests.ListNodes())
    nodes = [codec.node_from_wire(n) for n in reply["nodes"]]
    default = reply.get("default_partition")
    only = split_list(args.partition)
    if only is not None:
        nodes = [n for n in nodes if set(n.partitions or (IMPLICIT_PARTITION,)) & set(only)]
    partitions = [codec.partition_from_wire(p) for p in reply.get("partitions", ())]
    if args.json:
        shown = [p for p in partitions if only is None or p.name in only]
        sys.stdout.write(sinfo.format_sinfo_json(nodes, shown))
        return Exit.OK
    if args.gpus:  # the lab's GPUs: a cluster's nodes are its own sinfo's to show
        sys.stdout.write(
            sinfo.format_sinfo_gpus(nodes, header=not args.noheader, default_partition=default)
        )
        return Exit.OK
    rows = sinfo.sinfo_rows(nodes, partitions, default_partition=default, only=only)
    if args.list_reasons:
        rows = sinfo.sinfo_reason_rows(rows)
    sys.stdout.write(
        sinfo.format_sinfo(
            rows,
            fmt=fmt,
            header=not args.noheader,
            node_oriented=args.Node and not args.list_reasons,
        )
    )
    return Exit.OK


def _reservations(args: argparse.Namespace, ctx: Context) -> int:
    """sinfo -T: one line per reservation, Slurm's columns."""
    import time

    from gbatch.core import hostlist
    from gbatch.core.reservations import Reservation, duration_text, state
    from gbatch.protocol import requests

    reply = ctx.client.call(requests.ListReservations())
    now = reply["now"]
    rows = []
    for record in reply["reservations"]:
        found = Reservation.from_dict(record)
        start, end = found.window(now) or (found.start, found.end)
        rows.append(
            (
                found.name,
                state(found, now),
                time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)),
                time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(end)),
                duration_text(end - start),
                hostlist.compress(found.node_names),
            )
        )
    header = ("RESV_NAME", "STATE", "START_TIME", "END_TIME", "DURATION", "NODELIST")
    if not rows and not args.noheader:
        print("No reservations in the system")
        return Exit.OK
    width = max([14, *(len(r[0]) for r in rows)])
    lines = [] if args.noheader else [header]
    for row in [*lines, *rows]:
        print(f"{row[0]:>{width}} {row[1]:>8} {row[2]:>19} {row[3]:>19} {row[4]:>11} {row[5]}")
    return Exit.OK
