"""gbatch node list|install|trust|drain|resume: the fleet's nodes, for admins."""

from __future__ import annotations

import argparse
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["node"]
INSTALL_TIMEOUT = 600.0  # copying and probing many hosts takes a while


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "node",
        help=HELP,
        description=HELP + ". A drained node keeps its running jobs. `trust` shows the key "
        "a host offers and pins it in the daemon's known_hosts once you confirm it, or "
        "non-interactively with --fingerprint equal to the offered one (check it on the "
        "host: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub).",
        epilog="examples: gbatch node list | gbatch node install --all | "
        "gbatch node trust gpu03 | gbatch node trust gpu03 --fingerprint SHA256:... | "
        'gbatch node drain gpu03 --reason "fan noise" | gbatch node resume gpu03',
    )
    p.add_argument("action", choices=("list", "install", "trust", "drain", "resume"))
    p.add_argument("name", nargs="*", metavar="NAME", help="the node(s)")
    p.add_argument(
        "--all",
        action="store_true",
        help="install: every host in the inventory (none: says so, exit 0)",
    )
    p.add_argument("--reason", metavar="TEXT", help="drain: why (required)")
    p.add_argument(
        "--fingerprint",
        metavar="SHA256:...",
        help="trust: the key you checked on the host; required when stdin is not a terminal",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="trust: replace a DIFFERENT key already on file (the host was reinstalled)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.protocol import codec, requests
    from gbatch.render import sinfo

    if args.action == "list":
        nodes = [codec.node_from_wire(n) for n in ctx.client.call(requests.ListNodes())["nodes"]]
        sys.stdout.write(sinfo.format_node_list(nodes))
        return Exit.OK
    if args.action == "install":
        return _install(args, ctx)
    if len(args.name) != 1:
        raise CliError(f"name one node: gbatch node {args.action} NAME", Exit.USAGE)
    (name,) = args.name
    if args.action == "trust":
        return _trust(name, args, ctx)
    if args.action == "drain":
        if not args.reason:
            raise CliError(
                '--reason is required: gbatch node drain NAME --reason "why"', Exit.USAGE
            )
        ctx.client.call(requests.DrainNode(name=name, reason=args.reason))
    else:
        ctx.client.call(requests.ResumeNode(name=name))
    return Exit.OK


def _install(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.protocol import requests

    if not args.name and not args.all:
        raise CliError("which nodes? Name them, or use --all", Exit.USAGE)
    ctx.client.timeout = INSTALL_TIMEOUT
    results = ctx.client.call(requests.InstallAgent(names=tuple(args.name)))["results"]
    if not results:
        # Only --all gets no results: nothing to do is no failure, but say so.
        print(
            "no remote nodes to install: the fleet is the local node, whose agent the "
            "daemon runs itself; list GPU hosts in an inventory (inventory.example.yaml)"
        )
        return Exit.OK
    for result in results:
        if result["ok"]:
            print(result["summary"])
        else:
            print(f"gbatch node: error: {result['name']}: {result['error']}", file=sys.stderr)
    return Exit.OK if all(r["ok"] for r in results) else Exit.FAILED


def _trust(name: str, args: argparse.Namespace, ctx: Context) -> int:
    """Show the offered key, have a person confirm it (a prompt, or --fingerprint), and
    ask the daemon to pin it; the daemon checks again that the host still offers it."""
    from gbatch.protocol import requests

    wanted: str | None = args.fingerprint
    if wanted is not None and not wanted.startswith("SHA256:"):
        raise CliError(
            f"--fingerprint: {wanted!r} is not a SHA256 fingerprint. Give it as "
            "`ssh-keygen -lf` prints it: SHA256:<base64>",
            Exit.USAGE,
        )
    key = ctx.client.call(requests.GetHostKey(name=name))
    print(f"host {name} ({key['address']}) offers {key['key_type']} key {key['fingerprint']}")
    if key["pinned"] == "same":
        if wanted is not None and wanted != key["fingerprint"]:
            raise _mismatch(name, key, wanted)
        print(f"already trusted: {key['known_hosts']} holds this key")
        return Exit.OK
    if key["pinned"] == "different":
        for old in key["pinned_keys"]:
            print(f"{key['known_hosts']} holds {old['key_type']} key {old['fingerprint']}")
        print(
            "WARNING: the host key has CHANGED. The host may have been reinstalled, or "
            "someone may be intercepting the connection.",
            file=sys.stderr,
        )
        if not args.replace:
            raise CliError(
                f"--replace: a different key is on file for {name}; nothing was trusted. "
                f"Check the new key on the host, then run `gbatch node trust {name} --replace`",
                Exit.USAGE,
            )
    if wanted is None:
        wanted = _confirm(name, key["fingerprint"])
    elif wanted != key["fingerprint"]:
        raise _mismatch(name, key, wanted)
    reply = ctx.client.call(
        requests.TrustHostKey(name=name, fingerprint=wanted, replace=args.replace)
    )
    print(
        f"trusted {name}'s {reply['key_type']} key {reply['fingerprint']} "
        f"(in {reply['known_hosts']}); the daemon reconnects to {name} now"
    )
    return Exit.OK


def _confirm(name: str, offered: str) -> str:
    """The offered fingerprint once a person at the terminal says yes."""
    if not sys.stdin.isatty():
        raise CliError(
            f"--fingerprint: stdin is not a terminal, so nobody can confirm the key. Check it "
            f"on the host, then run `gbatch node trust {name} --fingerprint SHA256:...`",
            Exit.USAGE,
        )
    try:
        answer = input("Trust it? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise CliError(f"not trusted: nothing was written. Node {name} stays refused", Exit.FAILED)
    return offered


def _mismatch(name: str, key: dict[str, Any], wanted: str) -> CliError:
    return CliError(
        f"--fingerprint: host {name} offers {key['fingerprint']}, not {wanted}; nothing was "
        "trusted. Check the key on the host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub): "
        "a mismatch can mean someone is intercepting the connection",
        Exit.USAGE,
    )
