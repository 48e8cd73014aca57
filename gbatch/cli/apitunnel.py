"""`gbatch port-forward --api URL`: each connection through the HTTP API's WebSocket tunnel.

For users off the head, who reach gbatch only through its HTTP API: a WebSocket to
`URL/api/v1/jobs/N/ports/PORT` (gbatch/api/tunnel.py) with the API token as a bearer
token carries one TCP connection, its bytes in binary messages; `?watch=1` waits for
the job's end. WebSockets are spoken with wsproto (sans-I/O, a dependency), imported
only here: the plain port-forward never loads it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from urllib.parse import quote, urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError

from gbatch.cli.exits import CliError, Exit
from gbatch.protocol.client import RequestFailed
from gbatch.protocol.requests import error_kind

API_PREFIX = "/api/v1"
CONNECT_SECONDS = 30.0
KIND_OF_STATUS = {400: "invalid", 401: "unauthenticated", 403: "permission", 404: "not_found"}


class ApiWay:
    """Tunnels and the watch through the HTTP API at `url`, as the bearer of `token`."""

    def __init__(self, url: str, token: str, job: int, task: int | None) -> None:
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CliError(f"--api: {url!r} is not an http(s) URL like https://head:8080")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.netloc = parts.netloc
        self.base = parts.path.rstrip("/")
        if not self.base.endswith(API_PREFIX):
            self.base += API_PREFIX
        self.token = token
        self.job = f"{job}_{task}" if task is not None else str(job)

    def _open(self, port: int, watch: bool) -> WebSocketStream:
        path = f"{self.base}/jobs/{quote(self.job)}/ports/{port}" + ("?watch=1" if watch else "")
        try:
            sock = socket.create_connection((self.host, self.port), timeout=CONNECT_SECONDS)
            if self.tls:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        except OSError as err:
            raise CliError(f"--api: cannot reach {self.netloc}: {err}", Exit.NO_DAEMON) from err
        stream = WebSocketStream(sock)
        try:
            stream.handshake(self.netloc, path, self.token)
        except BaseException:
            stream.close()
            raise
        sock.settimeout(None)
        return stream

    def watch(self, ports: tuple[int, ...]) -> tuple[WebSocketStream, bytes]:
        """The watch's WebSocket, once the API and gbatchd have accepted the forward."""
        stream = self._open(ports[0], True)
        return stream, b""

    def tunnel(self, port: int) -> tuple[WebSocketStream, bytes]:
        """A WebSocket carrying one TCP connection to `port` in the job."""
        return self._open(port, False), b""


class WebSocketStream:
    """A client WebSocket as a socket: recv, sendall, shutdown, close (binary messages).

    One thread may read while another writes: writes (and the pongs and close a read
    answers with) go out under a lock. A WebSocket has no half-close: shutdown for
    writing alone does nothing (the port's end closes the tunnel)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.ws = WSConnection(ConnectionType.CLIENT)
        self._pending = bytearray()
        self._closed = False
        self._reply: dict[str, object] | None = None  # gbatchd's, the first message
        self._write_lock = threading.Lock()

    def _send(self, event: object) -> None:
        with self._write_lock:
            self.sock.sendall(self.ws.send(event))  # type: ignore[arg-type]

    def handshake(self, netloc: str, path: str, token: str) -> None:
        """Open the WebSocket; RequestFailed for a refusal, said as gbatchd said it."""
        headers = [(b"authorization", f"Bearer {token}".encode())]
        self._send(Request(host=netloc, target=path, extra_headers=headers))
        status, body = 0, bytearray()
        accepted = False
        while not accepted:
            data = self.sock.recv(65536)
            self.ws.receive_data(data or None)
            for event in self.ws.events():
                if isinstance(event, AcceptConnection):
                    accepted = True
                    break
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        raise _failed(status, b"")
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        raise _failed(status, bytes(body))
            if not data and not accepted:
                raise _failed(status or 502, bytes(body))
        self._check_refusal()

    def _check_refusal(self) -> None:
        """The first message is gbatchd's reply (text): a refusal is raised."""
        self.sock.settimeout(CONNECT_SECONDS)
        while self._reply is None and not self._closed:
            self._read()
        reply = self._reply or requests_error("the API closed the tunnel without a word")
        if reply.get("ok") is not True:
            raise RequestFailed(error_kind(reply.get("kind")), str(reply.get("error", "")))

    def recv(self, size: int) -> bytes:
        """Bytes from the far end (b'' once it closed)."""
        while not self._pending and not self._closed:
            self._read()
        taken = bytes(self._pending[:size])
        del self._pending[:size]
        return taken

    def _read(self) -> None:
        """The events wsproto holds already (the handshake's read may have brought some);
        else one read from the socket, and its events."""
        if self._take_events():
            return
        data = self.sock.recv(65536)
        self.ws.receive_data(data or None)
        self._take_events()
        if not data:
            self._closed = True

    def _take_events(self) -> bool:
        """Take the events wsproto has; whether there were any."""
        took = False
        for event in self.ws.events():
            took = True
            if isinstance(event, BytesMessage):
                self._pending += event.data
            elif isinstance(event, TextMessage):
                self._take_text(event.data)
            elif isinstance(event, Ping):
                self._send(event.response())
            elif isinstance(event, CloseConnection):
                self._closed = True
                with contextlib.suppress(OSError, LocalProtocolError):
                    self._send(event.response())
        return took

    def _take_text(self, text: str) -> None:
        try:
            reply = json.loads(text)
        except ValueError:
            return
        if isinstance(reply, dict) and self._reply is None:
            self._reply = reply

    def sendall(self, data: bytes) -> None:
        from wsproto.events import Message

        self._send(Message(data=data))

    def shutdown(self, how: int) -> None:
        if how == socket.SHUT_WR:
            return  # no half-close in a WebSocket
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError, LocalProtocolError):
                self._send(CloseConnection(code=1000))
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def requests_error(message: str) -> dict[str, object]:
    return {"ok": False, "kind": "unavailable", "error": message}


def _failed(status: int, body: bytes) -> RequestFailed:
    """The refusal of a handshake: the API's JSON error when it sent one."""
    try:
        reply = json.loads(body)
        return RequestFailed(error_kind(reply.get("kind")), str(reply.get("error")))
    except (ValueError, AttributeError):
        kind = KIND_OF_STATUS.get(status, "unavailable")
        what = "no token, or a token the API would not take" if status == 403 else "refused"
        return RequestFailed(error_kind(kind), f"the API answered HTTP {status}: {what}")
