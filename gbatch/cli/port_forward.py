"""gbatch port-forward N LOCAL[:REMOTE]: a local port that reaches a port inside your job.

As `kubectl port-forward` and `ssh -L`: it listens on this machine (127.0.0.1 unless
--address says otherwise) and carries each connection it accepts to the job's port,
each on a connection of its own to gbatchd (requests.OpenForward), which connects from
the job's node (its host's loopback for a bare job, its container's address for a
container job, over the host's SSH connection for a fleet host) and relays the bytes.
With --api URL, each connection goes through the HTTP API's WebSocket tunnel instead,
with an API token (gbatch/cli/apitunnel.py). A watch (a connection of its own) says when
the job's run ends: the forward then says so and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.exits import CliError, Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any, Protocol

    from gbatch.cli.context import Context

    class Stream(Protocol):
        """A tunnel's far end: the daemon's socket, or a WebSocket."""

        def recv(self, size: int, /) -> bytes: ...

        def sendall(self, data: bytes, /) -> None: ...

        def shutdown(self, how: int, /) -> None: ...

        def close(self) -> None: ...


HELP = COMMANDS["port-forward"]
CHUNK = 256 * 1024
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def add_parser(commands: Any) -> None:
    """The `port-forward` sub-command."""
    p = commands.add_parser(
        "port-forward",
        help=HELP,
        description=HELP + ". It listens on LOCAL on this machine and carries each "
        "connection to port REMOTE (default: LOCAL) inside your running job N: on the job's "
        "host's 127.0.0.1 for a bare job (a socket your own user listens on), at its "
        "container's address for a container job, through gbatchd and the host's SSH "
        "connection, never by opening the host's ports. It runs until the job ends or "
        "Ctrl-C. Slurm has no such command; the spelling is kubectl's and ssh -L's.",
        epilog="example: gbatch port-forward 12 8888          # jupyter lab --port 8888 in job 12\n"
        "         gbatch port-forward 12 8080:80 9000     # two ports\n"
        "         gbatch port-forward 12 :8888            # any free local port\n"
        "         gbatch port-forward --api https://head:8080 --token $T 12 8888\n"
        "output:  Forwarding from 127.0.0.1:8888 -> job 12:8888  (one line per port)\n"
        "         Handling connection for 8888               (one line per connection)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("job", metavar="N", help="your running job: N, or N_K for an array's task")
    p.add_argument(
        "ports",
        nargs="+",
        metavar="LOCAL[:REMOTE]",
        help="a local port and the job's port (REMOTE defaults to LOCAL; LOCAL empty or 0: "
        "any free port, printed)",
    )
    p.add_argument(
        "--address",
        default="127.0.0.1",
        metavar="ADDR",
        help="the local address to listen on (default 127.0.0.1: this machine only). Any "
        "other lets whoever reaches ADDR reach your job's port",
    )
    p.add_argument(
        "--api",
        metavar="URL",
        help="go through the HTTP API at URL (e.g. https://head:8080) instead of the "
        "daemon's socket: for use off the head, with --token",
    )
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help="with --api: an API token with the ports scope (default: $GBATCH_TOKEN; mint "
        "one on the head with `gbatch token --scope ports,read`)",
    )
    p.set_defaults(run=run)


def parse_ports(text: str) -> tuple[int, int]:
    """LOCAL[:REMOTE] as (local, remote); local 0 is any free port. Exit 2 when bad."""
    local_text, colon, remote_text = text.partition(":")
    try:
        local = int(local_text) if local_text else 0
        remote = int(remote_text) if colon else local
    except ValueError:
        local = remote = -1
    if not (0 <= local <= 65535 and 1 <= remote <= 65535):
        raise CliError(
            f"{text!r} is not LOCAL[:REMOTE]: give ports 1-65535 (8888, 8888:80, or :80 "
            "for any free local port)",
            Exit.USAGE,
        )
    return local, remote


def run(args: argparse.Namespace, ctx: Context) -> int:
    """gbatch port-forward N LOCAL[:REMOTE]...: listen, and forward until the job ends."""
    from gbatch.cli.context import parse_job

    target = parse_job(args.job.strip(), "port-forward: N")
    pairs = [parse_ports(text) for text in args.ports]
    way = _way(args, ctx, target.job, target.single_task)
    watch, leftover = way.watch(tuple(remote for _, remote in pairs))
    listeners = [_listen(args.address, local) for local, _ in pairs]
    if args.address not in LOOPBACK:
        print(
            f"port-forward: warning: listening on {args.address}: whoever reaches it reaches "
            f"job {target.job}'s ports",
            file=sys.stderr,
            flush=True,
        )
    for listener, (_, remote) in zip(listeners, pairs, strict=True):
        host, port = listener.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"Forwarding from {shown}:{port} -> job {args.job}:{remote}", flush=True)
        threading.Thread(
            target=_accept, args=(listener, way, port, remote), daemon=True, name="accept"
        ).start()
    return _until_the_job_ends(way, watch, leftover, args.job)


def _way(args: argparse.Namespace, ctx: Context, job: int, task: int | None) -> Any:
    if args.api is None:
        return DaemonWay(ctx, job, task)
    from gbatch.cli.apitunnel import ApiWay

    token = args.token or os.environ.get("GBATCH_TOKEN")
    if not token:
        raise CliError(
            "--api needs a token: --token TOKEN or $GBATCH_TOKEN (mint one on the head with "
            "`gbatch token --scope ports,read`)",
            Exit.USAGE,
        )
    return ApiWay(args.api, token, job, task)


class DaemonWay:
    """Tunnels and the watch over the daemon's socket (this machine is the head)."""

    def __init__(self, ctx: Context, job: int, task: int | None) -> None:
        self.ctx = ctx
        self.job = job
        self.task = task

    def _open(self, ports: tuple[int, ...], watch: bool) -> tuple[Stream, bytes]:
        from gbatch.cli.stepclient import open_connection
        from gbatch.protocol import requests

        request = requests.OpenForward(job=self.job, ports=ports, watch=watch, task=self.task)
        sock, leftover, _ = open_connection(self.ctx, request)
        return sock, leftover

    def watch(self, ports: tuple[int, ...]) -> tuple[Stream, bytes]:
        """The watch's connection, once gbatchd has accepted the forward."""
        return self._open(ports, True)

    def tunnel(self, port: int) -> tuple[Stream, bytes]:
        """A connection carrying one TCP connection to `port` in the job."""
        return self._open((port,), False)


def _listen(address: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((address, port))
        listener.listen(64)
    except OSError as err:
        listener.close()
        raise CliError(
            f"unable to listen on {address}:{port}: {err.strerror or err}. Pick another "
            "LOCAL port (or :REMOTE for any free one)"
        ) from err
    return listener


def _accept(listener: socket.socket, way: Any, local: int, remote: int) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        print(f"Handling connection for {local}", flush=True)
        threading.Thread(target=_carry, args=(conn, way, remote), daemon=True).start()


def _carry(conn: socket.socket, way: Any, remote: int) -> None:
    """One accepted connection, carried to the job's port; a refusal is one line."""
    from gbatch.cli._main import daemon_failure

    with conn:
        try:
            far, leftover = way.tunnel(remote)
        except Exception as err:  # this connection's failure, said; the forward goes on
            known = daemon_failure(err)
            message = known[0] if known is not None else str(err)
            print(f"port-forward: error: {message}", file=sys.stderr, flush=True)
            return
        try:
            if leftover:
                conn.sendall(leftover)
            relay(conn, far)
        except OSError:
            pass
        finally:
            far.close()


def relay(conn: socket.socket, far: Stream) -> None:
    """Carry bytes both ways between `conn` and `far` until both ends are done."""
    back = threading.Thread(target=_pump, args=(far, conn, conn, far), daemon=True)
    back.start()
    _pump(conn, far, conn, far)
    back.join()


def _pump(source: Stream, sink: Stream, conn: socket.socket, far: Stream) -> None:
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except (OSError, EOFError):
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError, EOFError):
            far.shutdown(socket.SHUT_RDWR)


def _until_the_job_ends(way: Any, watch: Stream, leftover: bytes, job: str) -> int:
    """Read the watch until the job's run ends; say so and return 0."""
    import json

    received = leftover
    with contextlib.suppress(OSError):
        while b"\n" not in received:
            chunk = watch.recv(4096)
            if not chunk:
                break
            received += chunk
    watch.close()
    line = received.partition(b"\n")[0]
    try:
        state = json.loads(line).get("ended") if line else None
    except (ValueError, AttributeError):
        state = None
    if state is None:
        raise CliError(
            f"lost gbatchd while forwarding to job {job} (it stopped or restarted). Run "
            "gbatch port-forward again",
            Exit.UNAVAILABLE,
        )
    print(f"port-forward: job {job} ended ({state}); forwarding stopped", file=sys.stderr)
    return 0
