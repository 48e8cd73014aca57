"""gbatch token: API tokens for the HTTP API (`gbatch api serve`).

The daemon mints them for the caller it sees on the socket.
"""

from __future__ import annotations

import argparse
import re
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, split_list
from gbatch.cli.exits import CliError, Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["token"]
EPILOG = """\
scopes: read (jobs, logs, nodes, fair-share), submit (queue jobs), control (cancel, hold,
release, requeue, update), ports (gbatch port-forward --api: a port in one's running job).
Default: read, submit and control; ports only when named. A token acts as its user, with that user's
rights and limits. Admins may mint for a service account (--user ci-bot): a robot's own
account listed under service_accounts in gbatchd's config.yaml; never root, gbatchd's own
account, a system account (uid below UID_MIN) or a person, who mints their own. Each such
mint, allowed or refused, is an audit line in gbatchd.log. Example:
  T=$(gbatch token --lifespan 2h --scope submit,read)
  curl -H "Authorization: Bearer $T" http://127.0.0.1:8642/api/v1/jobs"""

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"([0-9]+)([smhd]?)")


def parse_lifespan(text: str) -> int:
    """`90`, `90s`, `30m`, `2h`, `7d` -> seconds; CliError otherwise."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise CliError(
            f"--lifespan: {text!r} is not a duration. Give e.g. 30m, 2h or 7d", Exit.USAGE
        )
    return int(match.group(1)) * _UNITS[match.group(2) or "s"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "token",
        help=HELP,
        description=HELP + ". The token alone goes to stdout.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--lifespan", default="1h", help="valid for (default 1h, at most 90d)")
    p.add_argument(
        "--scope",
        action="append",
        metavar="SCOPE[,SCOPE]",
        help="what it may do (default: read,submit,control)",
    )
    p.add_argument(
        "--user", help="admins: mint for this service account (listed in service_accounts)"
    )
    p.add_argument("--list", action="store_true", help="list your unexpired tokens")
    p.add_argument("-a", "--all", action="store_true", help="with --list: everyone's (admins)")
    p.add_argument("--revoke", metavar="JTI", help="refuse this token from now on")
    p.add_argument(
        "--rotate-key",
        action="store_true",
        help="admins: sign new tokens with a new key (old tokens stay valid until they expire)",
    )
    p.add_argument(
        "--drop-old",
        action="store_true",
        help="with --rotate-key: delete the old keys, refusing every token they signed",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.core.timefmt import format_timestamp
    from gbatch.protocol import requests

    if args.rotate_key:
        kid = ctx.client.call(requests.RotateTokenKey(drop_old=args.drop_old))["kid"]
        print(f"new signing key {kid}", file=sys.stderr)
        return Exit.OK
    if args.revoke is not None:
        reply = ctx.client.call(requests.RevokeToken(jti=args.revoke))
        print(f"token {reply['jti']} of {reply['user']} revoked", file=sys.stderr)
        return Exit.OK
    if args.list:
        reply = ctx.client.call(requests.ListTokens(all_users=args.all))
        print(f"{'JTI':<24} {'USER':<12} {'SCOPES':<20} {'EXPIRES':<19} REVOKED")
        for t in reply["tokens"]:
            revoked = format_timestamp(t["revoked"]) if t["revoked"] else "-"
            scopes = ",".join(t["scopes"])
            expires = format_timestamp(t["expires"])
            print(f"{t['jti']:<24} {t['user']:<12} {scopes:<20} {expires:<19} {revoked}")
        return Exit.OK
    request = requests.MintToken(
        lifespan=parse_lifespan(args.lifespan),
        scopes=tuple(split_list(args.scope) or ()),
        user=args.user,
    )
    reply = ctx.client.call(request)
    print(reply["token"])
    print(
        f"token {reply['jti']} for {reply['user']}, scopes {','.join(reply['scopes'])}, "
        f"expires {format_timestamp(reply['expires'])}; revoke it with "
        f"`gbatch token --revoke {reply['jti']}`",
        file=sys.stderr,
    )
    return Exit.OK
