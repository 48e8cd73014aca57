"""gbatch mcp serve: gbatch's tools for a coding agent, as an MCP server over stdio.

A Model Context Protocol server (gbatch/mcp/). The agent's client starts it as its
user; each tool call is a request on gbatchd's socket like any command's, so the agent
may do what its user may, and nothing else.
"""

from __future__ import annotations

import argparse

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["mcp"]
EPILOG = """\
tools: submit (a job file's or batch script's text, or a --wrap command, with
sbatch's options), queue (squeue's listing; users, states, job ids), why-pending (a
job's state, reason, place in the queue and what it waits for), logs (the last N
lines, or a byte range), cancel (scancel's refusals word for word).

The server reads one JSON-RPC 2.0 message a line on stdin and answers on stdout
(MCP revision 2025-06-18); nothing else is written there. Diagnostics go to stderr.
A client's configuration, e.g. .mcp.json or claude_desktop_config.json:

  {"mcpServers": {"gbatch": {"command": "gbatch", "args": ["mcp", "serve"]}}}

Jobs are submitted as `gbatch sbatch` would from the server's working directory,
with its environment (a job without an image gets it, as with the CLI)."""


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "mcp",
        help=HELP,
        description=HELP + ".",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=("serve",), help="serve: answer an MCP client on stdio")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.mcp.server import serve  # deferred: only `gbatch mcp serve` needs it

    return serve(ctx)
