"""The HTTP API's connections to gbatchd, on the event loop: one JSON line out, one back.

They speak as gbatch.protocol.client.Client does, with its errors (DaemonUnavailable,
ReplyTimeout, RequestFailed) and its limits.

Why not Client in a worker thread: the hop to a thread and back (a queue, a condition,
a wake-up of the loop) was a large part of the API's CPU per submit. A slow gbatchd
still holds up no other request: each waits for its reply on the loop, within `timeout`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from gbatch.protocol.client import (
    DaemonUnavailable,
    ReplyTimeout,
    SocketPermissionDenied,
    reply_fields,
    reply_line,
    request_line,
)

MAX_IDLE_CONNECTIONS = 4  # kept open to gbatchd; each counts in its per-user cap
# Exchanges at once: what the worker threads allowed before (anyio's 40), well inside
# gbatchd's 64 connections a user; past it, a request waits for one to end.
MAX_CONNECTIONS = 40


class DaemonLink:
    """Exchanges with the daemon at `socket_path`, one connection each, reused unless it failed.

    Bound to the event loop that uses it: on another loop (a test's second client) it
    starts over.
    """

    def __init__(self, socket_path: Path, timeout: float = 30.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[_Connection] = []
        self._slots: asyncio.Semaphore | None = None

    async def send(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The reply's fields, as Client.send; RequestFailed for a refusal."""
        return reply_fields(await self.exchange(request))

    async def send_raw(self, request: Mapping[str, Any]) -> bytes:
        """The reply's line undecoded, as Client.send_raw."""
        return reply_line(await self.exchange(request))

    async def exchange(self, request: Mapping[str, Any]) -> bytes:
        """Write `request`, read its reply's line (with its newline)."""
        payload = request_line(request)
        loop, slots = self._bind()
        async with slots:
            connection = self._take_idle() or await self._connect(loop)
            try:
                line = await connection.ask(loop, payload, self.timeout)
            except TimeoutError as err:
                connection.close()
                raise ReplyTimeout(self.socket_path, self.timeout) from err
            except OSError as err:
                connection.close()
                raise DaemonUnavailable(self.socket_path, f"connection lost: {err}") from err
            except BaseException:
                connection.close()
                raise
            if not line.endswith(b"\n"):  # gbatchd ends every reply's line
                connection.close()
                why = "the daemon closed the connection"
                raise DaemonUnavailable(
                    self.socket_path, f"{why} before its reply's end" if line else why
                )
            self._keep(connection)
            return line

    def _bind(self) -> tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._slots is None:
            # Connections and semaphores belong to the loop that made them.
            self._loop, self._idle = loop, []
            self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        return loop, self._slots

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable():
                return connection
            connection.close()  # gbatchd closes a connection idle for minutes
        return None

    def _keep(self, connection: _Connection) -> None:
        if len(self._idle) < MAX_IDLE_CONNECTIONS and connection.usable():
            self._idle.append(connection)
        else:
            connection.close()

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        try:
            async with asyncio.timeout(self.timeout):
                _, connection = await loop.create_unix_connection(
                    _Connection, str(self.socket_path)
                )
                return connection
        except TimeoutError as err:
            # A full listen backlog: gbatchd is busy, not gone.
            raise DaemonUnavailable(self.socket_path, "busy: too many connections") from err
        except (FileNotFoundError, ConnectionRefusedError) as err:
            raise DaemonUnavailable(self.socket_path, err.strerror or str(err)) from err
        except PermissionError as err:
            raise SocketPermissionDenied(self.socket_path) from err


class _Connection(asyncio.Protocol):
    """One connection to gbatchd, a protocol rather than a stream reader and writer: the
    reply's bytes are gathered as they come and its line handed to the waiting exchange
    at once (a stream's reader, writer and drain were a visible share of the API's CPU per
    submit). No limit on a reply's line of its own (a listing's megabytes)."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._chunks: list[bytes] = []  # of the reply line not yet whole
        self._line: bytes | None = None  # the reply's whole line, once read
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False  # gbatchd closed it, or it broke
        self._error: OSError | None = None  # how it broke

    async def ask(self, loop: asyncio.AbstractEventLoop, payload: bytes, timeout: float) -> bytes:
        """Write `payload` and return the reply's line, with its newline, within `timeout`.

        `timeout` is in seconds (TimeoutError past it). If the connection ends before the
        newline, what came of the line; when nothing came, the OSError that ended it is
        raised, or b"" returned if none did.
        """
        transport = self._transport
        assert transport is not None and self._waiter is None and self._line is None
        waiter = self._waiter = loop.create_future()
        # gbatchd may answer before it has read the whole request (one it will not
        # serve) and close: the answer is read whether or not the write went through.
        transport.write(payload)
        if self._line is None and not self._ended:
            timer = loop.call_later(timeout, _expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
        self._waiter = None
        line, self._line = self._line, None
        if line is not None:
            return line
        partial = b"".join(self._chunks)
        self._chunks.clear()
        if not partial and self._error is not None:
            raise self._error
        return partial

    def usable(self) -> bool:
        """Open, with nothing read past the last reply: fit for the next exchange."""
        transport = self._transport
        return (
            not self._ended
            and not self._chunks
            and self._line is None
            and transport is not None
            and not transport.is_closing()
        )

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport's subclasses, but write alike.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        end = data.find(b"\n")
        if end < 0 or self._line is not None:
            self._chunks.append(data)
            return
        self._chunks.append(data[: end + 1])
        self._line = b"".join(self._chunks)
        self._chunks.clear()
        if end + 1 < len(data):  # past the reply: not gbatchd's way; not kept (usable)
            self._chunks.append(data[end + 1 :])
        self._wake()

    def eof_received(self) -> bool:
        self._ended = True
        self._wake()
        return False  # close

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        if isinstance(exc, OSError):
            self._error = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
