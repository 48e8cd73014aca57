"""No client holds a thread or a connection for ever: the real socket server (in this
process, with short Limits), a real store, real sockets. A half-sent request, one that
trickles in, one over the size limit, a connection idle too long and a reply nobody
reads each end with the connection closed (and a one-line answer where one is due),
while other clients are served all along."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gbatch.core import constants
from gbatch.core.model import JobSpec
from gbatch.head import handlers, refusals, server
from gbatch.head.daemon import Daemon
from gbatch.protocol import requests
from gbatch.protocol.client import Client, RequestFailed

ROOT = handlers.Caller(uid=0, user="root", pid=1)
SHORT = server.Limits(idle_seconds=0.5, pause_seconds=0.5, line_seconds=2.0, reply_seconds=0.5)


@contextlib.contextmanager
def serving(daemon: Daemon, limits: server.Limits = SHORT) -> Iterator[server._Server]:
    """The daemon's socket server on a short path (AF_UNIX paths are short), in a thread."""
    base = Path(tempfile.mkdtemp(prefix="gbsrv-", dir="/tmp"))
    made = server._Server(str(base / "s.sock"), limits)
    made.daemon = daemon
    thread = threading.Thread(target=made.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield made
    finally:
        made.shutdown()
        made.server_close()
        shutil.rmtree(base, ignore_errors=True)


def socket_path(made: server._Server) -> Path:
    return Path(made.server_address)  # type: ignore[arg-type]


def connect(made: server._Server) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)  # a bound on a broken test, not a measure
    sock.connect(str(socket_path(made)))
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the daemon sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def one_reply_then_closed(sock: socket.socket) -> dict[str, object]:
    data = read_to_end(sock)
    assert data.count(b"\n") == 1 and data.endswith(b"\n"), data[:200]
    reply: dict[str, object] = json.loads(data)
    return reply


def wait_for(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def pings(made: server._Server) -> bool:
    with Client(socket_path(made), timeout=30) as client:
        return bool(client.call(requests.Ping())["pid"])


def test_a_half_sent_request_is_answered_then_closed_and_others_are_served(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    with serving(daemon) as made, connect(made) as slow:
        slow.sendall(b'{"op":"pi')
        assert pings(made)  # served while the half-sent request waits
        assert one_reply_then_closed(slow) == requests.error_reply(
            "invalid",
            "bad request: a request line left unfinished: nothing more came for 0.5 s. "
            "Send each request whole, ending in a newline",
        )
    assert "op=request target=daemon -> refused: a request line left unfinished" in caplog.text


def test_a_request_that_trickles_in_is_closed_when_its_line_takes_too_long(
    daemon: Daemon,
) -> None:
    limits = server.Limits(pause_seconds=5.0, line_seconds=1.0)
    with serving(daemon, limits) as made, connect(made) as slow:
        trickled = 0
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while trickled < 1000:  # a byte well within each pause, never a newline
                slow.send(b" ")
                trickled += 1
                time.sleep(0.1)
        assert trickled < 1000, "the daemon never closed the connection"
        assert one_reply_then_closed(slow) == requests.error_reply(
            "invalid",
            "bad request: a request line left unfinished: it did not end within 1 s. "
            "Send each request whole, ending in a newline",
        )


def test_an_idle_connection_is_closed_and_the_client_opens_another(daemon: Daemon) -> None:
    with serving(daemon) as made, Client(socket_path(made), timeout=30) as client:
        first = client.call(requests.Ping())
        held = client._sock
        assert held is not None
        assert held.recv(1) == b""  # the daemon closed it, idle (the socket's timeout: 30 s)
        assert client.call(requests.Ping())["pid"] == first["pid"]
        assert client._sock is not held


def test_a_line_over_the_limit_is_refused_before_its_end_and_closed(daemon: Daemon) -> None:
    with serving(daemon) as made, connect(made) as sock:

        def send_too_much() -> None:
            with contextlib.suppress(OSError):  # the daemon stops reading, and closes
                sock.sendall(b"x" * (constants.MAX_REQUEST_BYTES + 1))

        sender = threading.Thread(target=send_too_much, daemon=True)
        sender.start()  # no newline ever: the daemon must answer without one
        assert one_reply_then_closed(sock) == requests.error_reply(
            "invalid",
            "bad request: a request line over 4 MiB, the most gbatchd reads. Pass large data "
            "in a file the job mounts",
        )
        sender.join(30)
        assert pings(made)


def test_a_line_at_the_limit_is_read_and_answered(daemon: Daemon) -> None:
    pad = constants.MAX_REQUEST_BYTES - len(b'{"op":"ping","pad":""}')
    line = b'{"op":"ping","pad":"' + b"x" * pad + b'"}'
    assert len(line) == constants.MAX_REQUEST_BYTES
    with serving(daemon) as made, connect(made) as sock:
        sock.sendall(line + b"\n" + b'{"op":"ping"}\n')
        replies = sock.makefile("rb")
        assert json.loads(replies.readline())["ok"] is True
        assert json.loads(replies.readline())["ok"] is True


def test_a_client_that_does_not_read_its_replies_is_closed_and_stalls_no_one(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    # 2,000 rows (an array this size would list as a few rows and one record).
    daemon.store.submit([JobSpec(name="j", command=("true",))] * 2000, 0, "root", 0, held=True)
    request = json.dumps(requests.encode_request(requests.ListJobs())).encode() + b"\n"
    with serving(daemon) as made, connect(made) as deaf:
        deaf.sendall(request * 20)  # replies of ~1 MB each, none read for now
        assert pings(made)  # served meanwhile
        with Client(socket_path(made)) as other:
            assert len(other.call(requests.ListJobs())["jobs"]) == 2000
        wait_for(lambda: "op=reply" in caplog.text, "the daemon to give up on the reply")
        received = read_to_end(deaf)  # ends: the daemon closed the connection
        assert received.count(b"\n") == 0  # not even the first reply was taken whole
    assert "op=reply target=daemon -> refused: its reply was not taken within 0.5 s" in (
        caplog.text
    )


def test_a_refused_connection_is_answered_at_once_and_starts_no_thread(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[object] = []
    with serving(daemon, server.Limits(per_user=1)) as made:
        made._exempt = set()  # count root like anyone (the tests run as root)
        original = made.process_request_thread

        def counted(request: object, address: object) -> None:
            threads.append(address)
            original(request, address)

        monkeypatch.setattr(made, "process_request_thread", counted)
        with Client(socket_path(made)) as first:
            first.call(requests.Ping())
            for _ in range(20):
                with connect(made) as refused:
                    # Nothing sent: the answer comes anyway, then the end.
                    reply = one_reply_then_closed(refused)
                assert reply["kind"] == "unavailable"
                assert str(reply["error"]).startswith(
                    "root has 1 connections open to gbatchd, the most one user may."
                )
            with Client(socket_path(made)) as client, pytest.raises(RequestFailed) as caught:
                client.call(requests.Ping())  # gbatch's own client reads the answer too
            assert caught.value.kind == "unavailable"
            assert first.call(requests.Ping())
    assert len(threads) == 1  # the first client's; none for the refused ones


def test_refused_connections_get_the_users_refusal_budget_of_log_lines(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    with serving(daemon, server.Limits(per_user=0)) as made:
        made._exempt = set()
        for _ in range(refusals.LINES + 5):
            with connect(made) as refused:
                one_reply_then_closed(refused)
    assert caplog.text.count("op=connect") == refusals.LINES


def test_one_users_requests_are_worked_on_one_at_a_time_and_an_admins_are_not(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = handlers.Caller(uid=4242, user="flooder", pid=1)
    inside: list[int] = []
    most: dict[int, int] = {}
    lock = threading.Lock()
    admins_together = threading.Barrier(2, timeout=30)

    def handle(
        daemon: Daemon, caller: handlers.Caller, data: object, *, stream: bool = False
    ) -> dict[str, object]:
        with lock:
            inside.append(caller.uid)
            most[caller.uid] = max(most.get(caller.uid, 0), inside.count(caller.uid))
        if caller.uid == 0:
            admins_together.wait()  # passes only with two of root's requests at once
        else:
            time.sleep(0.05)  # room for another of the user's to overlap, were it let in
        with lock:
            inside.remove(caller.uid)
        return {"ok": True}

    callers = iter([user] * 4 + [ROOT] * 2)
    monkeypatch.setattr(handlers, "handle", handle)
    monkeypatch.setattr(server, "peer_caller", lambda sock: next(callers))
    with serving(daemon) as made:
        socks = [connect(made) for _ in range(6)]
        for sock in socks:
            sock.sendall(b'{"op":"ping"}\n')
        for sock in socks:
            assert json.loads(sock.makefile("rb").readline()) == {"ok": True}
            sock.close()
    assert most == {4242: 1, 0: 2}


def test_a_connection_is_read_with_its_limits_again_after_a_reply_written_in_pieces(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply larger than the socket's buffer is written with a timeout of its own;
    the socket is then blocking again, its waits timed by SO_RCVTIMEO (else the next
    wait would be that reply's timeout, not idle_seconds)."""
    daemon.store.submit([JobSpec(name="j", command=("true",))] * 2000, 0, "root", 0, held=True)
    readers: list[socket.socket] = []
    original = server.LineReader

    def recorded(sock: socket.socket, limits: server.Limits) -> server.LineReader:
        readers.append(sock)
        return original(sock, limits)

    monkeypatch.setattr(server, "LineReader", recorded)
    # Idle time is not what this test is about: decoding 2,000 jobs may take the client
    # longer than SHORT's half second on a loaded machine, and the ping would then come
    # on a second connection.
    limits = dataclasses.replace(SHORT, idle_seconds=30.0)
    with serving(daemon, limits) as made, Client(socket_path(made), timeout=30) as client:
        assert len(client.call(requests.ListJobs())["jobs"]) == 2000  # ~1 MB: in pieces
        assert client.call(requests.Ping())["pid"]
        (sock,) = readers
        assert sock.gettimeout() is None


def test_a_receive_timeout_ends_a_blocking_recv_however_short() -> None:
    left, right = socket.socketpair()
    with left, right:
        for seconds in (0.0, 1e-9, 0.01):  # SO_RCVTIMEO's zero would wait for ever
            server.set_receive_timeout(left, seconds)
            with pytest.raises(BlockingIOError):
                left.recv(1)
