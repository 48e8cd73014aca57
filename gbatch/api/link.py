"""The HTTP API's connections to gbatchd, on the event loop: one JSON line out, one
back, as gbatch.client.Client speaks, with its errors (DaemonUnavailable, ReplyTimeout,
RequestFailed) and its limits.

Why not Client in a worker thread: the hop to a thread and back (a queue, a condition,
a wake-up of the loop) was a fifth of the API's CPU per submit. A slow gbatchd still
holds up no other request: each waits for its reply on the loop, within `timeout`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gbatch.client import (
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
LINE_LIMIT = 1 << 31  # a reply's line (a listing's megabytes): no limit of the link's own

_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class DaemonLink:
    """Exchanges with the daemon at `socket_path`, each on a connection of its own,
    kept for the next one unless it failed. Bound to the event loop that uses it: on
    another loop (a test's second client) it starts over."""

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
        slots = self._bind()
        async with slots:
            connection = self._take_idle() or await self._connect()
            try:
                async with asyncio.timeout(self.timeout):
                    line = await self._talk(connection, payload)
            except TimeoutError as err:
                _close(connection)
                raise ReplyTimeout(self.socket_path, self.timeout) from err
            except OSError as err:
                _close(connection)
                raise DaemonUnavailable(self.socket_path, f"connection lost: {err}") from err
            except BaseException:
                _close(connection)
                raise
            if not line.endswith(b"\n"):  # gbatchd ends every reply's line
                _close(connection)
                why = "the daemon closed the connection"
                raise DaemonUnavailable(
                    self.socket_path, f"{why} before its reply's end" if line else why
                )
            self._keep(connection)
            return line

    def _bind(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._slots is None:
            # Streams and semaphores belong to the loop that made them.
            self._loop, self._idle = loop, []
            self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        return self._slots

    async def _talk(self, connection: _Connection, payload: bytes) -> bytes:
        reader, writer = connection
        writer.write(payload)
        try:
            await writer.drain()
        except (BrokenPipeError, ConnectionResetError):
            # gbatchd may answer before it has read the whole request (one it will not
            # serve) and close: that answer is waiting to be read.
            line = await _read_line(reader)
            if not line:
                raise
            return line
        return await _read_line(reader)

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            reader, writer = connection
            if not reader.at_eof() and not writer.is_closing():
                return connection
            _close(connection)  # gbatchd closes a connection idle for minutes
        return None

    def _keep(self, connection: _Connection) -> None:
        if len(self._idle) < MAX_IDLE_CONNECTIONS:
            self._idle.append(connection)
        else:
            _close(connection)

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(self.timeout):
                return await asyncio.open_unix_connection(str(self.socket_path), limit=LINE_LIMIT)
        except TimeoutError as err:
            # A full listen backlog: gbatchd is busy, not gone.
            raise DaemonUnavailable(self.socket_path, "busy: too many connections") from err
        except (FileNotFoundError, ConnectionRefusedError) as err:
            raise DaemonUnavailable(self.socket_path, err.strerror or str(err)) from err
        except PermissionError as err:
            raise SocketPermissionDenied(self.socket_path) from err


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    """The next line with its newline; at the end of the stream, what came before it
    (b"" for nothing)."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as err:
        return err.partial


def _close(connection: _Connection) -> None:
    connection[1].close()
