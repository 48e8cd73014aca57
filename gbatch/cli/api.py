"""gbatch api serve|openapi: the HTTP API in front of gbatchd (gbatch/api/)."""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import socket
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["api"]
DEFAULT_LISTEN = "127.0.0.1:8642"


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "api",
        help=HELP,
        description=HELP + ". The API reaches gbatchd on its socket, as the CLI does; each "
        "request runs as its token's user.",
        epilog="example: gbatch api serve --listen 127.0.0.1:8642   # behind nginx for TLS\n"
        "         gbatch api serve --listen 0.0.0.0:8443 --tls-cert cert.pem --tls-key key.pem",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=("serve", "openapi"))
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"where to listen (default {DEFAULT_LISTEN}; port 0: any free one). An address "
        "other than loopback needs --tls-cert and --tls-key",
    )
    p.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", metavar="FILE", help="... and this private key (PEM)")
    p.add_argument(
        "--local-metrics",
        action="store_true",
        help="serve /metrics without a token to clients on this machine (loopback), as "
        "this process's user: for a Prometheus on the head. Elsewhere a token with scope "
        "read is needed",
    )
    p.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="a reverse proxy's address or network (repeat for more): only from it are "
        "X-Forwarded-For (the client's address) and X-Forwarded-Proto (https: the web "
        "page's cookie is Secure) believed. Default: none, from anyone",
    )
    limits = p.add_argument_group(
        "each user's share (a token's user; a client address for requests without a "
        "token gbatchd has accepted); past it: 429 with Retry-After"
    )
    limits.add_argument(
        "--user-requests", type=_positive_int, metavar="N", help="requests at once (default 4)"
    )
    limits.add_argument(
        "--user-rate", type=_positive_float, metavar="N", help="requests a second (default 50)"
    )
    limits.add_argument(
        "--user-burst",
        type=_positive_int,
        metavar="N",
        help="requests in a burst after a quiet while (default 100)",
    )
    limits.add_argument(
        "--user-streams",
        type=_positive_int,
        metavar="N",
        help="logs followed at once (logs/follow; default 4)",
    )
    p.set_defaults(run=run)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0")
    return value


def parse_listen(text: str, tls: bool) -> tuple[str, int]:
    """`--listen`'s HOST:PORT as (host, port), checked; CliError (usage) otherwise.

    The port must be a port number, and the host a loopback one unless TLS is on (tokens
    must not cross a network in clear).
    """
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise CliError(f"--listen: {text!r} is not HOST:PORT, e.g. {DEFAULT_LISTEN}", Exit.USAGE)
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not tls:
        raise CliError(
            f"--listen: {host} is reachable from other machines, and bearer tokens would "
            "cross the network in clear. Give --tls-cert and --tls-key, or listen on "
            "127.0.0.1 behind a TLS proxy (README, HTTP API)",
            Exit.USAGE,
        )
    return host, int(port)


def run(args: argparse.Namespace, ctx: Context) -> int:
    if args.action == "openapi":
        from gbatch.api.openapi import document

        json.dump(document(), sys.stdout, indent=1)
        print()
        return Exit.OK
    if (args.tls_cert is None) != (args.tls_key is None):
        raise CliError("--tls-cert and --tls-key go together", Exit.USAGE)
    host, port = parse_listen(args.listen, tls=args.tls_cert is not None)
    args.trusted_proxy = parse_trusted_proxies(args.trusted_proxy)
    return _serve(ctx, host, port, args.tls_cert, args.tls_key, args.local_metrics, args)


def parse_trusted_proxies(given: list[str]) -> tuple[str, ...]:
    """`--trusted-proxy` values as addresses or networks (CIDR); CliError (usage) else.

    Everyone (`*`, 0.0.0.0/0) is refused: the headers would be anyone's to forge.
    """
    proxies: list[str] = []
    for text in given:
        try:
            network = ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            network = None
        if network is None or network.prefixlen == 0:
            raise CliError(
                f"--trusted-proxy: {text!r} is not a proxy's address or network, e.g. "
                "127.0.0.1 or 10.1.0.0/24 (trusting everyone would let any client name "
                "its own address)",
                Exit.USAGE,
            )
        proxies.append(str(network.network_address) if network.num_addresses == 1 else str(network))
    return tuple(dict.fromkeys(proxies))


def make_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port for uvicorn; CliError when it cannot bind.

    Made with proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections
    whose proto says TCP, and without it a response's headers and body (two writes) wait
    out the client's delayed ACK on each request of a keep-alive connection
    (bench/bench_api.py).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as err:
        listener.close()
        raise CliError(f"--listen: cannot listen on {host}:{port} ({err.strerror})") from err
    listener.listen(128)
    return listener


def _serve(
    ctx: Context,
    host: str,
    port: int,
    cert: str | None,
    key: str | None,
    local_metrics: bool,
    args: argparse.Namespace,
) -> int:
    # Deferred: only this command loads the web stack.
    import uvicorn

    from gbatch.api.app import make_app
    from gbatch.api.guard import Guard
    from gbatch.api.ratelimit import RateLimits
    from gbatch.api.server import GuardedServer

    given = {
        "requests": args.user_requests,
        "rate": args.user_rate,
        "burst": args.user_burst,
        "streams": args.user_streams,
    }
    limits = RateLimits(**{name: value for name, value in given.items() if value is not None})

    listener = make_listener(host, port)
    bound = listener.getsockname()[1]
    _bound_server_logs()
    app = make_app(
        ctx.paths.socket,
        local_metrics=local_metrics,
        limits=limits,
        trusted_proxies=args.trusted_proxy,
    )
    config = uvicorn.Config(
        app,
        ssl_certfile=cert,
        ssl_keyfile=key,
        log_config=None,  # one line per start below; the daemon's log audits each request
        access_log=False,
        server_header=False,
        # make_app reads X-Forwarded-* from --trusted-proxy only (uvicorn's own
        # default would believe anyone on 127.0.0.1, local users included).
        proxy_headers=False,
        # Requests at once are limited by the rate limiter (per user, and in all), and
        # connections by the guard (api/server.py): uvicorn's limit_concurrency would
        # count the connections of slow clients that have not sent a request yet.
        limit_concurrency=None,
        timeout_keep_alive=5,
        # uvloop (a dependency) when it imports, else asyncio's own loop: the same
        # behaviour, libuv's loop in C in place of asyncio's selector loop in Python
        # (bench/README.md, issue 17's fifth round).
        loop="auto",
        # WebSockets (port-forward's tunnel, api/tunnel.py) by wsproto, a dependency.
        ws="wsproto",
    )
    scheme = "https" if cert else "http"
    shown = f"[{host}]" if ":" in host else host
    print(
        f"gbatch API on {scheme}://{shown}:{bound}/api/v1 (gbatchd at {ctx.paths.socket})",
        flush=True,
    )
    GuardedServer(config, Guard()).run(sockets=[listener])
    return Exit.OK


# Loggers of the server's libraries that write a line per bad request or connection a
# client sends (uvicorn's `Invalid HTTP request received.`, `Exceeded concurrency
# limit.`; asyncio's failed TLS handshakes): an outsider's flood must not grow the log
# without bound. The API's own bugs are bounded where they are caught (api/app._App).
SERVER_LOGGERS = ("uvicorn.error", "asyncio")


def _bound_server_logs() -> None:
    """Give the server's libraries' loggers a budget of like lines (core/loglines.LikeLines)."""
    from gbatch.core.loglines import LikeLines

    like_lines = LikeLines()
    for name in SERVER_LOGGERS:
        logging.getLogger(name).addFilter(like_lines)
