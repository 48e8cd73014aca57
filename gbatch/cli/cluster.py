"""gbatch cluster link|unlink|status: your own login on a per-user Slurm cluster partition."""

from __future__ import annotations

import argparse
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["cluster"]
EPILOG = """\
A partition with `identity: per_user` runs your jobs on its cluster as your own login
there. `link` makes a key pair on the head (its private half is sealed in the head's store
and never leaves it) and prints the public half: add that line to ~/.ssh/authorized_keys
of your login on the cluster. Linking again makes a new key (add the new line; remove the
old one). `unlink` deletes the key (admins: `--user NAME` deletes another user's). `status`
shows each cluster partition (up, or down and why) and your links (ok, or broken and why:
the cluster refused the key).
examples:
  gbatch cluster link uni --login alice > uni.pub
  ssh alice@login.uni.example 'cat >> ~/.ssh/authorized_keys' < uni.pub
  gbatch cluster status
  gbatch cluster unlink uni
  gbatch cluster unlink uni --user bob      (admins)"""


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "cluster",
        help=HELP,
        description=HELP + ".",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=("link", "unlink", "status"))
    p.add_argument("partition", nargs="?", metavar="PARTITION", help="the cluster partition")
    p.add_argument("--login", metavar="NAME", help="link: your login name on the cluster")
    p.add_argument("-a", "--all", action="store_true", help="status: everyone's links (admins)")
    p.add_argument("--user", metavar="NAME", help="unlink: that user's link (admins)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.protocol import requests

    if args.action == "status":
        return _status(ctx, requests.ClusterStatus(all_users=args.all))
    if args.partition is None:
        raise CliError(
            f"{args.action}: give the partition, e.g. `gbatch cluster {args.action} uni`",
            Exit.USAGE,
        )
    if args.action == "unlink":
        reply = ctx.client.call(requests.UnlinkCluster(partition=args.partition, user=args.user))
        print(
            f"unlinked {reply['login']} ({reply['user']}) on partition {reply['partition']}; "
            "remove the key's line from ~/.ssh/authorized_keys there too",
            file=sys.stderr,
        )
        return Exit.OK
    if not args.login:
        raise CliError(
            f"link: --login: missing. Give your login on the cluster, e.g. "
            f"`gbatch cluster link {args.partition} --login alice`",
            Exit.USAGE,
        )
    reply = ctx.client.call(requests.LinkCluster(partition=args.partition, login=args.login))
    print(reply["public"])
    print(
        f"linked {reply['login']} on partition {reply['partition']}: add the line above to "
        f"~/.ssh/authorized_keys of {reply['login']} on the cluster; jobs wait until it is "
        "there (gbatch cluster status)",
        file=sys.stderr,
    )
    return Exit.OK


def _status(ctx: Context, request: Any) -> int:
    from gbatch.render.clusterstatus import cluster_status_text

    print(cluster_status_text(ctx.client.call(request)), end="")
    return Exit.OK
