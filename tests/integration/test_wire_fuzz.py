"""The wire protocol fuzzed against one real daemon on its real socket: objects shaped
like requests with values of every type, raw bytes (invalid UTF-8, NULs, brackets, no
newline, many lines), big and deep values. Every line sent gets one JSON reply (the
sender half-closes, so a last line without a newline is answered too), the daemon logs
no traceback, and it answers a ping after every example.

One daemon serves the whole module; the examples are derandomized and bounded to run in
seconds on a loaded machine."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Head, kill_leftover_jobs, make_head
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wirefuzz import JSON_VALUES, RAW_LINES, nested, request_shaped

from gbatch.protocol import wire
from gbatch.protocol.client import Client

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# Shutdown would end the run; the rest may be sent (a submit is made held below).
OPS = tuple(op for op in sorted(wire.REQUESTS) if op != "shutdown")


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    head = make_head(tmp_path_factory.mktemp("fuzz") / "home")
    head.start()
    yield head
    head.stop()
    kill_leftover_jobs(head.home)


class Daemon:
    """The fuzzed daemon's socket and its log, read from where the last example left."""

    def __init__(self, head: Head) -> None:
        self.socket = head.home / "gbatchd.sock"
        self.log = head.home / "gbatchd.log"
        self.pid = head.daemon_pid()
        self._log_offset = self.log.stat().st_size

    def new_log(self) -> str:
        with self.log.open("rb") as log:
            log.seek(self._log_offset)
            text = log.read().decode(errors="replace")
        self._log_offset += len(text.encode(errors="replace"))
        return text


@pytest.fixture
def daemon(fuzzed: Head) -> Daemon:
    return Daemon(fuzzed)


def exchange(path: Path, payload: bytes) -> bytes:
    """Send `payload`, say it is all (half-close), and read until the daemon closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)  # a bound on a broken daemon, not a measure
        sock.connect(str(path))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                received += chunk
    return received


def lines_in(payload: bytes) -> int:
    """The requests a payload holds: its lines, a last one without a newline included."""
    return payload.count(b"\n") + (0 if payload.endswith(b"\n") or not payload else 1)


def check_exchange(daemon: Daemon, payload: bytes) -> list[dict[str, Any]]:
    received = exchange(daemon.socket, payload)
    assert received.endswith(b"\n") or not received, received[-200:]
    replies = [json.loads(line) for line in received.splitlines()]
    assert len(replies) == lines_in(payload), (payload[:200], received[:400])
    for reply in replies:
        assert reply["ok"] in (True, False), reply
        if not reply["ok"]:
            assert reply["kind"] in wire.ERROR_KINDS and reply["kind"] != "internal", reply
            # Bounded whatever the input (a value is echoed shortened); 500, not less:
            # the job file's unknown-key refusal lists every valid key, as its fix.
            assert reply["error"].isprintable() and len(reply["error"]) < 500, reply
    log = daemon.new_log()
    assert "Traceback" not in log, log[-2000:]
    with Client(daemon.socket, timeout=60) as client:
        assert client.call(wire.Ping())["pid"] == daemon.pid
    return replies


def as_line(value: object) -> bytes:
    if isinstance(value, dict) and value.get("op") == "submit":
        value = {**value, "held": True}  # whatever validates, nothing runs
    return json.dumps(value).encode() + b"\n"


@FUZZ
@given(st.lists(request_shaped(OPS) | JSON_VALUES, min_size=1, max_size=4))
def test_request_shapes_of_any_types_each_get_one_reply(
    daemon: Daemon, values: list[object]
) -> None:
    check_exchange(daemon, b"".join(as_line(v) for v in values))


@FUZZ
@given(st.lists(RAW_LINES, min_size=1, max_size=4), st.booleans())
def test_raw_bytes_each_line_gets_one_reply(
    daemon: Daemon, lines: list[bytes], final_newline: bool
) -> None:
    payload = b"\n".join(lines) + (b"\n" if final_newline else b"")
    check_exchange(daemon, payload)


@settings(FUZZ, max_examples=25)
@given(
    st.sampled_from(OPS),
    st.sampled_from(
        [
            "x" * 1_000_000,
            "\u00e9\U0001f600" * 100_000,
            "\x00" * 100_000,
            9**4000,
            nested(wire.MAX_NESTING - 2).decode(),
        ]
    ),
    st.sampled_from(["spec", "ids", "name", "pad", "states", "secret_env"]),
)
def test_big_values_in_any_field_get_one_reply(
    daemon: Daemon, op: str, value: object, field: str
) -> None:
    if isinstance(value, str) and value.startswith(("[", "{")):
        line = b'{"op":"' + op.encode() + b'","' + field.encode() + b'":' + value.encode() + b"}\n"
    else:
        line = as_line({"op": op, field: value})
    check_exchange(daemon, line)


def test_many_lines_on_one_connection_each_get_a_reply(daemon: Daemon) -> None:
    replies = check_exchange(daemon, b'{"op":"ping"}\n\n\x00\n' * 300)
    assert [r["ok"] for r in replies[:3]] == [True, False, False]


def test_a_line_over_the_limit_gets_one_reply_and_the_connection_closes(daemon: Daemon) -> None:
    received = exchange(daemon.socket, b'{"op":"ping","pad":"' + b"x" * wire.MAX_REQUEST_BYTES)
    assert json.loads(received) == wire.error_reply(
        "invalid",
        "bad request: a request line over 4 MiB, the most gbatchd reads. Pass large data in "
        "a file the job mounts",
    )
    assert "Traceback" not in daemon.new_log()
    with Client(daemon.socket) as client:
        assert client.call(wire.Ping())["pid"] == daemon.pid
