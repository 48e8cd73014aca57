"""uvicorn, with the API's connections guarded against slow clients (api/guard.py).

uvicorn has no time limit on a request head, and its `limit_concurrency` counts the
connections still sending one: 300 connections trickling a header line every 4 s made
every request 503 (issue 29). Here uvicorn's HTTP protocol (httptools) is kept, and
around it:
  - GuardedHttp, its subclass, tells the Guard when a request head begins and when it
    is in, and counts its bytes; the Guard says what to close;
  - GuardedServer, uvicorn's Server with its own startup: its Acceptor accepts each
    connection itself, so that it is counted (and refused, for its address) from its
    accept, before any TLS handshake, then hands it to the loop with the TLS handshake
    in the time its head has (loop.connect_accepted_socket); and it sweeps the
    Guard's expired connections twice a second.
No `limit_concurrency`: requests at once are limited per user and in all by the rate
limiter (api/ratelimit.py), which knows whose token a request carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import sys
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from gbatch.api import guard as guards
from gbatch.api.guard import Guard

log = logging.getLogger("gbatch.api")
SWEEP_SECONDS = 0.5
REPORT_SECONDS = 60.0  # at most one line a minute of what the guard closed
_TIMEOUT_REPLY = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)
_TOO_LARGE_REPLY = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; "
    b"charset=utf-8\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
)


def _reply(template: bytes, text: str) -> bytes:
    body = text.encode()
    return template % (len(body), body)


class Entry:
    """One accepted connection, as the guard knows it.

    Its socket until the protocol serving it is made (after the TLS handshake), then
    that protocol.
    """

    __slots__ = ("protocol", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.protocol: GuardedHttp | None = None

    def drop(self, why: str) -> None:
        if self.protocol is not None:
            self.protocol.drop(why)
            return
        # Still in its TLS handshake: cut it, and the handshake fails at once.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol for one connection, telling `guard` of its heads."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        guard: Guard,
        entry: Entry,
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.guard = guard
        self.entry = entry
        self.dropped = False
        self.head_size = 0  # bytes of the request head under way; -1: none under way

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.entry.protocol = self
        self.guard.attached(self.entry)
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.dropped:
            return
        super().data_received(data)
        if self.head_size >= 0:
            self.head_size += len(data)
            if self.guard.too_large(self.head_size):
                self.guard.closed(self.entry)
                self.drop(guards.LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_size = 0
        for other in self.guard.head_started(self.entry, self.loop.time()):
            other.drop(guards.ADDRESS)

    def on_headers_complete(self) -> None:
        self.head_size = -1
        self.guard.head_done(self.entry)
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.closed(self.entry)
        super().connection_lost(exc)

    def drop(self, why: str) -> None:
        """Close this connection for `why`, a guard.* reason.

        With an HTTP reply saying so when its head was late or too large.
        """
        if self.dropped or self.transport.is_closing():
            return
        self.dropped = True
        limits = self.guard.limits
        if why == guards.SLOW:
            said = f"the request head did not come within {limits.head_seconds:g} s\n"
            self.transport.write(_reply(_TIMEOUT_REPLY, said))
        elif why == guards.LARGE:
            said = f"the request head is over {limits.head_bytes} bytes\n"
            self.transport.write(_reply(_TOO_LARGE_REPLY, said))
        self.transport.close()


class Acceptor:
    """Accepts connections on `sock` and hands each to the loop and GuardedHttp.

    Each is counted by the guard from its accept, the TLS handshake included, which the
    loop does (connect_accepted_socket). Stands in uvicorn's Server.servers for an
    asyncio Server: close, wait_closed.
    """

    def __init__(self, server: GuardedServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        sock.setblocking(False)
        self.task = self.loop.create_task(self._accept())

    def close(self) -> None:
        self.task.cancel()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def _accept(self) -> None:
        while True:
            try:
                conn, peer = await self.loop.sock_accept(self.sock)
            except OSError as err:
                # Out of descriptors or buffers: wait rather than spin; a connection
                # that went away before its accept: nothing to do; the listener closed
                # (shutting down): no more to accept.
                if err.errno in (errno.EBADF, errno.EINVAL):
                    return
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    await asyncio.sleep(0.1)
                continue
            address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            entry = Entry(conn)
            guard = self.server.guard
            admitted, evicted = guard.opened(entry, address, self.loop.time())
            for other in evicted:
                other.drop(guards.ROOM)  # or ADDRESS: both close it without a reply
            if not admitted:
                conn.close()
                continue
            self.loop.create_task(self._serve(entry))

    async def _serve(self, entry: Entry) -> None:
        """Start `entry`'s connection: its TLS handshake, then its protocol."""
        server, config = self.server, self.server.config

        def protocol() -> GuardedHttp:
            state = server.lifespan.state
            return GuardedHttp(config, server.server_state, state, server.guard, entry, self.loop)

        try:
            # A response's headers and body are two writes: without it each would wait
            # out the client's delayed ACK (bench/bench_api.py).
            entry.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await self.loop.connect_accepted_socket(
                protocol,
                entry.sock,
                ssl=config.ssl,
                ssl_handshake_timeout=server.guard.limits.head_seconds if config.ssl else None,
            )
        except (OSError, RuntimeError):
            # The handshake failed, timed out or was cut (Entry.drop), or the client left.
            server.guard.closed(entry)
            entry.sock.close()


class GuardedServer(uvicorn.Server):
    """uvicorn's Server, accepting through Acceptor into GuardedHttp."""

    def __init__(self, config: uvicorn.Config, guard: Guard) -> None:
        super().__init__(config)
        self.guard = guard
        self.sweeper: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(STARTUP_FAILURE)
        self.servers = [Acceptor(self, sock) for sock in sockets or []]  # type: ignore[misc]
        self.sweeper = asyncio.get_running_loop().create_task(self._sweep())
        self.started = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.sweeper is not None:
            self.sweeper.cancel()
        await super().shutdown(sockets)

    async def _sweep(self) -> None:
        """Close the connections whose head is late; a line a minute of what was closed."""
        loop = asyncio.get_running_loop()
        reported = loop.time()
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            now = loop.time()
            for conn in self.guard.expired(now):
                conn.drop(guards.SLOW)
            if now - reported >= REPORT_SECONDS:
                reported = now
                counts = self.guard.took_counts()
                if counts:
                    said = "; ".join(f"{n:,} {why}" for why, n in counts.items())
                    log.warning("slow or excess connections closed in the last minute: %s", said)
