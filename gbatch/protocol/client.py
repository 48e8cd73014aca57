"""The CLI's and TUI's side of the daemon socket: one JSON line out, one back."""

from __future__ import annotations

import json
import os
import time
from _socket import AF_UNIX, SOCK_STREAM
from _socket import socket as unix_socket
from collections.abc import Mapping

from gbatch.core.constants import CLIENT_TIMEOUT_S, MAX_REQUEST_BYTES

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from gbatch.protocol.requests import ErrorKind, Request


READ_BUFFER = 256 * 1024
# The socket module's C core (_socket), not socket.py: its enums, selectors and makefile
# are ~2 ms of every command's start (bench/bench_startup.py). _Lines reads the replies.


class _Lines:
    """A connection's bytes, a line at a time: what socket.makefile("rb",
    buffering=READ_BUFFER).readline() answers, read READ_BUFFER bytes at a time."""

    def __init__(self, sock: unix_socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def readline(self) -> bytes:
        """The next line with its newline, or the stream's rest without one at its end.

        b"" when nothing is left. OSError (TimeoutError too) as recv raises it.
        """
        buffer = self._buffer
        searched = 0
        while True:
            end = buffer.find(b"\n", searched)
            if end >= 0:
                break
            searched = len(buffer)
            chunk = self._sock.recv(READ_BUFFER)
            if not chunk:
                end = len(buffer) - 1
                break
            buffer += chunk
        if end + 1 == len(buffer):  # the whole buffer: one copy, not two
            line = bytes(buffer)
            buffer.clear()
            return line
        line = bytes(buffer[: end + 1])
        del buffer[: end + 1]
        return line


class DaemonUnavailable(Exception):
    """No daemon answers on the socket."""

    def __init__(self, socket_path: str | Path, why: str) -> None:
        super().__init__(f"no gbatch daemon answers at {socket_path} ({why})")
        self.socket_path = socket_path


class ReplyTimeout(Exception):
    """The daemon took the request but did not reply in time: it may still act on it."""

    def __init__(self, socket_path: str | Path, timeout: float) -> None:
        super().__init__(
            f"the gbatch daemon at {socket_path} did not reply within {timeout:g} s; it may "
            "still carry the request out. Check with `gbatch squeue` before repeating it"
        )


class RequestFailed(Exception):
    """The daemon refused or could not do what was asked; `kind` says why.

    `kind` is a requests.ErrorKind: a request of the wrong shape is "invalid", as bad
    input is.
    """

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class SocketPermissionDenied(RequestFailed):
    """The socket exists but this user may not connect to it (kind "permission")."""

    def __init__(self, socket_path: str | Path) -> None:
        super().__init__(
            "permission", f"permission denied on {socket_path}: {_access_hint(socket_path)}"
        )


def _access_hint(socket_path: str | Path) -> str:
    """Who may use the socket, read from its owner, group and mode."""
    import grp  # deferred: only a refused connection needs the group database
    import pwd

    try:
        st = os.stat(socket_path)
    except OSError:
        return "ask an admin for access to it"
    if st.st_mode & 0o060 == 0o060:
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        return f"ask an admin to add you to group {group}"
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    return f"only {owner} may use it; ask an admin for access"


# How gbatchd's ok reply lines begin (replies.encode_reply; an older gbatchd's with a space).
OK_PREFIXES = (b'{"ok":true', b'{"ok": true')


def request_line(request: Mapping[str, Any]) -> bytes:
    """`request`'s line as gbatchd reads it, newline included.

    RequestFailed ("invalid") for one larger than gbatchd takes.
    """
    payload = json.dumps(request).encode() + b"\n"
    if len(payload) > MAX_REQUEST_BYTES + 1:
        raise RequestFailed(
            "invalid",
            f"the request takes {len(payload) / 2**20:.1f} MiB, more than the "
            f"{MAX_REQUEST_BYTES // 2**20} MiB gbatchd reads. Pass large data in a "
            "file the job mounts",
        )
    return payload


def reply_fields(line: bytes) -> dict[str, Any]:
    """A reply line's fields (without "ok"); RequestFailed for a refusal."""
    reply: dict[str, Any] = json.loads(line)
    if not reply.pop("ok", False):
        raise _refusal(reply)
    return reply


def reply_line(line: bytes) -> bytes:
    """A reply line as gbatchd wrote it, without its newline; RequestFailed for a refusal.

    gbatchd writes {"ok":true,...} with "ok" first (replies.encode_reply), so such a line
    passes undecoded; a line of any other shape is decoded to tell a refusal from a
    reply.
    """
    if not line.startswith(OK_PREFIXES):
        reply = json.loads(line)
        if not reply.get("ok", False):
            raise _refusal(reply)
    return line.rstrip(b"\n")


def _refusal(reply: Mapping[str, Any]) -> RequestFailed:
    from gbatch.protocol import requests

    return RequestFailed(
        requests.error_kind(reply.get("kind")), reply.get("error", "unknown error")
    )


class Client:
    def __init__(self, socket_path: str | Path, timeout: float = CLIENT_TIMEOUT_S) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._sock: unix_socket | None = None
        self._reader: _Lines | None = None

    def _connect(self) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            sock = unix_socket(AF_UNIX, SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(str(self.socket_path))
                break
            except BlockingIOError as err:
                # The daemon's listen backlog is full: it is busy, not gone.
                sock.close()
                if time.monotonic() >= deadline:
                    raise DaemonUnavailable(self.socket_path, "busy: too many connections") from err
                time.sleep(0.01)
            except (FileNotFoundError, ConnectionRefusedError) as err:
                sock.close()
                raise DaemonUnavailable(self.socket_path, err.strerror or str(err)) from err
            except PermissionError as err:
                sock.close()
                raise SocketPermissionDenied(self.socket_path) from err
        self._sock = sock
        # A listing's line is megabytes: read in 256 kB chunks, not io's 8 kB (fewer
        # reads per such line).
        self._reader = _Lines(sock)

    def call(self, request: Request) -> dict[str, Any]:
        """Send one request; return the reply's fields or raise RequestFailed."""
        from gbatch.protocol import requests  # deferred: `gbatch --help` sends nothing

        return self.send(requests.encode_request(request))

    def send(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send a request object as it is, unchecked; return as call() does.

        For tests and tools that speak the protocol by hand, and for squeue's everyday
        listing (gbatch/render/squeue_brief.py), which builds its request without
        gbatch.protocol.requests; the other commands use call(). gbatch.protocol.requests
        is imported only when the daemon refuses.
        """
        return reply_fields(self._exchange(request))

    def send_raw(self, request: Mapping[str, Any]) -> bytes:
        """As send(), but return the reply's line undecoded, as gbatchd wrote it.

        The line is JSON with its "ok" field, without its newline. For a relay (the HTTP
        API) that passes a large reply on as it came: decoded and encoded again, a
        listing's megabytes would be work for nothing. Raises RequestFailed as send()
        does.
        """
        return reply_line(self._exchange(request))

    def _exchange(self, request: Mapping[str, Any]) -> bytes:
        """Write `request`, read its reply's line (the connection opened or reopened as
        needed)."""
        payload = request_line(request)
        line: bytes
        while True:
            # A connection is not looked at before it is used (a peek was 3 system calls
            # and an exception on every request): one gbatchd has closed since (idle for
            # minutes, or it restarted) refuses the request's bytes, and a new one is
            # opened for it below.
            reused = self._sock is not None
            if not reused:
                self._connect()
            assert self._sock is not None and self._reader is not None
            try:
                try:
                    self._sock.sendall(payload)
                except (BrokenPipeError, ConnectionResetError) as err:
                    # gbatchd may answer before it has read the whole request (one it
                    # will not serve) and close: that answer is waiting to be read.
                    line = self._reader.readline()
                    if not line and reused:
                        # Closed before this request: its newline never went, so gbatchd
                        # cannot have acted on it. Sent again, once, on a new connection.
                        self.close()
                        continue
                    if not line:
                        raise err from None
                else:
                    line = self._reader.readline()
            except TimeoutError as err:
                self.close()
                raise ReplyTimeout(self.socket_path, self.timeout) from err
            except OSError as err:
                self.close()
                raise DaemonUnavailable(self.socket_path, f"connection lost: {err}") from err
            break
        if not line:
            self.close()
            raise DaemonUnavailable(self.socket_path, "the daemon closed the connection")
        if not line.endswith(b"\n"):  # gbatchd ends every reply's line
            self.close()
            raise DaemonUnavailable(
                self.socket_path, "the daemon closed the connection before its reply's end"
            )
        return line

    def close(self) -> None:
        if self._sock is not None:
            self._reader = None
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
