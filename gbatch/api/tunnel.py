"""The HTTP API's port tunnel: a WebSocket carrying one TCP connection to a job's port.

`GET /api/v1/jobs/{job}/ports/{port}` with `Upgrade: websocket` and the user's bearer
token (scope `ports`): the API sends gbatchd requests.OpenForward inside
requests.WithToken on a connection of its own, and once gbatchd has answered, accepts
the WebSocket. The first message is always gbatchd's reply, as text (`{"ok": true, ...}`
once the job's port is connected); after it each binary message the client sends is
bytes to the job's port, each one it gets is bytes from it. The port
closing closes the WebSocket (1000); the WebSocket closing closes the connection.

A refusal (no such job, not the owner, not running, nothing listening, the scope
missing) is the daemon's reply as that text message, then a close with code 4000 plus the
HTTP status the same refusal has elsewhere (4403 permission, 4404 not found, 4400
invalid, 4401 unauthenticated, 4503 unavailable) and its line as the reason. Without
a token the handshake is refused (HTTP 403) before gbatchd is asked. With `?watch=1`
nothing is connected: the WebSocket stays open until the job's run ends, then carries
gbatchd's one line {"ended": STATE} (what `gbatch port-forward --api` waits on).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from gbatch.api.ratelimit import bearer, client_address
from gbatch.core.jobids import ONE, JobIdError, parse_one_job
from gbatch.core.loglines import loggable
from gbatch.protocol import requests

TUNNEL_PATH = "/jobs/{job}/ports/{port}"
CHUNK = 256 * 1024
# How long gbatchd may take to answer (it connects to the port first: an SSH channel).
ANSWER_SECONDS = 30.0
HTTP_STATUS = {
    "invalid": 400,
    "unauthenticated": 401,
    "permission": 403,
    "not_found": 404,
    "internal": 500,
    "unavailable": 503,
}


def close_code(kind: str) -> int:
    """The WebSocket close code of a refusal of `kind` (4000 + its HTTP status)."""
    return 4000 + HTTP_STATUS.get(kind, 500)


class PortTunnel:
    """The WebSocket route, sending to the daemon at `socket_path`."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path

    async def __call__(self, ws: WebSocket) -> None:
        token = bearer(ws.scope)
        if token is None:
            await ws.close(code=1008)  # before accept: the handshake gets HTTP 403
            return
        client = ws.scope.get("client")
        client_address.set(client[0] if client else "")
        try:
            target = parse_one_job(ws.path_params["job"], ONE)
            port = int(ws.path_params["port"])
        except (JobIdError, ValueError) as err:
            await _refuse(ws, requests.error_reply("invalid", f"job or port: {err}"))
            return
        task = target.tasks[0][0] if target.tasks else None
        watch = ws.query_params.get("watch", "") in ("1", "true")
        inner = requests.OpenForward(job=target.job, ports=(port,), watch=watch, task=task)
        wrapped = requests.WithToken(
            token=token, request=requests.encode_request(inner), client=client_address.get()
        )
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.socket_path))
        except OSError as err:
            reply = requests.error_reply("unavailable", f"gbatchd does not answer: {err}")
            await _refuse(ws, reply)
            return
        try:
            writer.write(json.dumps(requests.encode_request(wrapped)).encode() + b"\n")
            line = await asyncio.wait_for(reader.readline(), ANSWER_SECONDS)
            reply = _reply(line)
            if not reply.get("ok"):
                await _refuse(ws, reply)
                return
            await ws.accept()
            await ws.send_text(json.dumps(reply))
            await _relay(ws, reader, writer)
        except (TimeoutError, OSError) as err:
            with contextlib.suppress(RuntimeError, OSError):
                await _refuse(ws, requests.error_reply("unavailable", f"gbatchd: {err}"))
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def _reply(line: bytes) -> dict[str, Any]:
    if not line.endswith(b"\n"):
        return requests.error_reply("unavailable", "gbatchd closed the connection")
    try:
        reply = json.loads(line)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        return requests.error_reply("internal", "gbatchd's reply is not a JSON object")
    return reply


async def _refuse(ws: WebSocket, reply: dict[str, Any]) -> None:
    """Accept, say the refusal (the daemon's reply, a text message), close with its code."""
    kind = str(reply.get("kind", "internal"))
    await ws.accept()
    await ws.send_text(json.dumps(reply))
    reason = loggable(str(reply.get("error", "")), 100)
    await ws.close(code=close_code(kind), reason=reason)


async def _relay(ws: WebSocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes both ways until either side ends; then both are closed."""

    async def inward() -> None:
        with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("bytes")
                if data is None and message.get("text") is not None:
                    data = message["text"].encode()
                if data:
                    writer.write(data)
                    await writer.drain()

    async def outward() -> None:
        with contextlib.suppress(OSError, RuntimeError):
            while data := await reader.read(CHUNK):
                await ws.send_bytes(data)

    tasks = [asyncio.ensure_future(inward()), asyncio.ensure_future(outward())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(RuntimeError, OSError):
            await ws.close(code=1000)
