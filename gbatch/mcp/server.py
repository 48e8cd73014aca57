"""The Model Context Protocol's stdio transport and lifecycle, written by hand.

Newline-delimited JSON-RPC 2.0 on stdin/stdout, revision 2025-06-18, server side only.
Written by hand: README, "For coding agents (MCP)", says why not the SDK.

Methods: initialize, ping, tools/list, tools/call; notifications are taken and never
answered (notifications/initialized, notifications/cancelled: a call here is over
before the next line is read). Protocol faults are JSON-RPC errors: -32700 (a line
that is not JSON), -32600 (not a request object), -32601 (no such method), -32602
(bad params: an unknown tool, arguments off their schema, naming the field). A tool
that gbatch refuses answers normally with `isError: true` and gbatch's one line.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any

from gbatch import __version__

if TYPE_CHECKING:
    from gbatch.mcp.tools import Context, Tool

PROTOCOL_VERSION = "2025-06-18"
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
MAX_LINE_BYTES = 4 << 20  # a job file is at most 1 MiB; a message past this is refused
INSTRUCTIONS = (
    "gbatch queues GPU jobs on a lab's servers, Slurm style. Submit a job (a YAML job "
    "file's text, a batch script with #SBATCH lines, or a shell command), follow it with "
    "queue and why-pending, read its output with logs, cancel it. Job ids are N, or N_K "
    "for task K of array N. You act as the user who started this server."
)


class ProtocolError(Exception):
    """A JSON-RPC error to answer with (code, message)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Server:
    """Answers one message at a time (handle); `tools` by name."""

    def __init__(self, tools: Mapping[str, Tool]) -> None:
        self.tools = tools
        self.methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "initialize": self.initialize,
            "ping": lambda params: {},
            "tools/list": self.list_tools,
            "tools/call": self.call_tool,
        }

    def handle(self, line: bytes) -> dict[str, Any] | None:
        """The reply to one line of input, or None where no reply is owed.

        None for a notification, a client's response, or a blank line.
        """
        if not line.strip():
            return None
        try:
            message = json.loads(line)
        except ValueError as err:  # UnicodeDecodeError is a ValueError too
            return error_reply(None, PARSE_ERROR, f"Parse error: the line is not JSON ({err})")
        if not isinstance(message, dict):
            return error_reply(
                None,
                INVALID_REQUEST,
                "Invalid Request: send one JSON-RPC object a line (2025-06-18 takes no batches)",
            )
        ident = message.get("id")
        has_id = "id" in message
        if has_id and not _valid_id(ident):
            return error_reply(
                None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer"
            )
        method = message.get("method")
        if "method" not in message and has_id and ("result" in message or "error" in message):
            return None  # a response: this server sends no requests, so it awaits none
        if message.get("jsonrpc") != "2.0" or not isinstance(method, str):
            return error_reply(
                ident, INVALID_REQUEST, 'Invalid Request: give "jsonrpc": "2.0" and a "method"'
            )
        params = message.get("params", {})
        if not has_id:
            return None  # a notification: nothing here needs one, and none is answered
        try:
            if not isinstance(params, dict):
                raise ProtocolError(INVALID_PARAMS, "Invalid params: params must be an object")
            found = self.methods.get(method)
            if found is None:
                raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")
            result = found(params)
        except ProtocolError as err:
            return error_reply(ident, err.code, err.message)
        return {"jsonrpc": "2.0", "id": ident, "result": result}

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise ProtocolError(INVALID_PARAMS, "Invalid params: protocolVersion: give a string")
        # Version negotiation: a client asking for another revision (older, or newer)
        # is answered with the one spoken here; it decides whether to go on.
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "gbatch", "title": "gbatch", "version": __version__},
            "instructions": INSTRUCTIONS,
        }

    def list_tools(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"tools": [tool.describe() for tool in self.tools.values()]}

    def call_tool(self, params: dict[str, Any]) -> dict[str, Any]:
        from gbatch.mcp.tools import BadArguments, ToolRefused, check_arguments

        name = params.get("name")
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            known = ", ".join(self.tools)
            raise ProtocolError(INVALID_PARAMS, f"Unknown tool: {name!r}. Tools: {known}")
        arguments = params.get("arguments", {})
        problem = check_arguments(tool.input_schema, arguments)
        if problem is not None:
            raise ProtocolError(INVALID_PARAMS, f"Invalid arguments for tool {name}: {problem}")
        try:
            parts = tool.run(arguments)
        except BadArguments as err:
            raise ProtocolError(
                INVALID_PARAMS, f"Invalid arguments for tool {name}: {err}"
            ) from err
        except ToolRefused as err:
            return {"content": [{"type": "text", "text": err.message}], "isError": True}
        content = [{"type": "text", "text": text} for text in parts if text] or [
            {"type": "text", "text": ""}
        ]
        return {"content": content, "isError": False}


def error_reply(ident: object, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def _valid_id(ident: object) -> bool:
    # MCP narrows JSON-RPC: an id is a string or an integer, never null.
    return isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool))


def serve(ctx: Context, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None) -> int:
    """Answer messages from `stdin` (default: fd 0) on `stdout` (default: fd 1) until EOF.

    Returns 0, the exit status. With the defaults, fd 1 is kept for the protocol alone:
    whatever else would print there (a library, a stray print) goes to stderr instead.
    """
    from gbatch.mcp.tools import make_tools

    if stdin is None:  # fd 0 itself, whatever sys.stdin was made
        stdin = open(0, "rb", closefd=False)  # noqa: SIM115 (fd 0 outlives the loop)
    server = Server(make_tools(ctx))
    if stdout is not None:
        _answer_all(server, stdin, stdout)
        return 0
    protocol = os.fdopen(os.dup(1), "wb")
    saved = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    try:
        _answer_all(server, stdin, protocol)
    finally:
        protocol.close()
        sys.stdout.flush()  # what was printed meanwhile, out to stderr before fd 1 is back
        os.dup2(saved, 1)  # as it was, for whatever the process does next
        os.close(saved)
    return 0


def _answer_all(server: Server, stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """Answer each line of `stdin` on `stdout` until end of input."""
    while True:
        line = stdin.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):  # the rest of the message, unread
                line = stdin.readline(MAX_LINE_BYTES)
            reply: dict[str, Any] | None = error_reply(
                None, INVALID_REQUEST, f"Invalid Request: a message over {MAX_LINE_BYTES >> 20} MiB"
            )
        else:
            reply = _answer(server, line)
        if reply is not None:
            stdout.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
            stdout.flush()


def _answer(server: Server, line: bytes) -> dict[str, Any] | None:
    try:
        return server.handle(line)
    except Exception as err:  # the server's boundary: one bad call must not end the session
        import traceback

        traceback.print_exc(file=sys.stderr)
        try:
            ident = json.loads(line).get("id")
        except Exception:
            ident = None
        return error_reply(
            ident if _valid_id(ident) else None, INTERNAL_ERROR, f"Internal error: {err!r}"
        )
