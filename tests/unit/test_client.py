"""The client's side of the socket: a daemon that takes a request and never replies."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gbatch.protocol import requests
from gbatch.protocol.client import Client, DaemonUnavailable, ReplyTimeout, RequestFailed


@pytest.fixture
def silent_daemon(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "gbatchd.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    taken: list[socket.socket] = []

    def accept() -> None:
        conn, _ = server.accept()
        taken.append(conn)  # read nothing, answer nothing

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield path
    thread.join(5)
    for conn in taken:
        conn.close()
    server.close()


def test_a_request_taken_but_not_answered_in_time_says_it_may_still_happen(
    silent_daemon: Path,
) -> None:
    with Client(silent_daemon, timeout=0.3) as client, pytest.raises(ReplyTimeout) as caught:
        client.call(requests.Cancel(ids=(1,)))
    message = str(caught.value)
    assert "did not reply within 0.3 s" in message
    assert "may still carry the request out" in message


def scripted_daemon(path: Path, replies: list[bytes]) -> threading.Thread:
    """A daemon at `path` that answers each request line with the next of `replies`."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server, conn.makefile("rb") as lines:
            for reply in replies:
                lines.readline()
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_send_raw_passes_an_ok_reply_on_as_written_and_raises_a_refusal(tmp_path: Path) -> None:
    path = tmp_path / "gbatchd.sock"
    replies = [
        b'{"ok":true,"jobs":[{"name":"\\u00e9"}],"now":1.5}\n',
        b'{"ok": true, "now": 2}\n',  # an older gbatchd's spaces
        b'{"now": 2, "ok": true}\n',  # "ok" not first: read to tell, passed on all the same
        b'{"ok": false, "kind": "permission", "error": "not yours"}\n',
    ]
    thread = scripted_daemon(path, replies)
    with Client(path, timeout=5) as client:
        request = requests.encode_request(requests.ListJobs())
        for reply in replies[:3]:
            assert client.send_raw(request) == reply.rstrip(b"\n")
        with pytest.raises(RequestFailed) as caught:
            client.send_raw(request)
    assert (caught.value.kind, caught.value.message) == ("permission", "not yours")
    thread.join(5)


def counting_daemon(
    path: Path, connections: list[list[bytes | None]]
) -> tuple[socket.socket, list[bytes]]:
    """A daemon at `path` serving one connection per item of `connections`: for each
    reply in it, it reads one request line and answers it (bytes) or not (None); then
    it closes the connection. Returns the listening socket and the lines it read."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    read: list[bytes] = []

    def serve() -> None:
        for replies in connections:
            conn, _ = server.accept()
            with conn, conn.makefile("rb") as lines:
                for reply in replies:
                    read.append(lines.readline())
                    if reply is not None:
                        conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return server, read


def test_a_request_on_a_connection_the_daemon_closed_since_goes_once_on_a_new_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gbatchd.sock"
    # The first connection answers one request and is closed (an idle connection's
    # end, or a restart); the second answers the next request.
    server, read = counting_daemon(path, [[b'{"ok":true,"n":1}\n'], [b'{"ok":true,"n":2}\n']])
    with server, Client(path, timeout=30) as client:
        assert client.send({"op": "ping", "i": 1}) == {"n": 1}
        first = client._sock
        assert first is not None and first.recv(1) == b""  # closed by the daemon
        assert client.send({"op": "ping", "i": 2}) == {"n": 2}
        assert client._sock is not first
    assert read == [b'{"op": "ping", "i": 1}\n', b'{"op": "ping", "i": 2}\n']


def test_a_request_the_daemon_took_and_left_unanswered_is_not_sent_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gbatchd.sock"
    server, read = counting_daemon(path, [[b'{"ok":true}\n', None]])
    with server, Client(path, timeout=30) as client:
        client.send({"op": "ping"})
        with pytest.raises(DaemonUnavailable, match="closed the connection"):
            # Taken whole on a reused connection, then closed: it may have been acted
            # on, so it must not go again.
            client.send({"op": "submit"})
        server.settimeout(0)
        with pytest.raises(BlockingIOError):
            server.accept()  # no second connection: nothing was sent again
    assert read == [b'{"op": "ping"}\n', b'{"op": "submit"}\n']


@pytest.mark.parametrize(
    "sends",
    [
        [],
        [b"one\n"],
        [b"one\ntwo\n", b"three\n"],
        [b"spl", b"it\nand a", b" tail without newline"],
        [b"\n\n", b"x\n"],
        [b"a" * (3 * 256 * 1024 + 17) + b"\nb\n"],  # a line over several reads
        [b"c" * 1000 for _ in range(300)] + [b"\n"],
    ],
    ids=["nothing", "one", "two-sends", "split", "empty-lines", "large", "many-chunks"],
)
def test_the_clients_lines_are_makefiles_lines(sends: list[bytes]) -> None:
    """client._Lines (read on _socket, without socket.py: start-up) answers readline()
    as socket.makefile("rb", buffering=READ_BUFFER) does, to the stream's end."""
    from gbatch.protocol.client import READ_BUFFER, _Lines

    def lines_read(reader: Callable[[socket.socket], Callable[[], bytes]]) -> list[bytes]:
        ours, theirs = socket.socketpair()

        def send() -> None:
            for chunk in sends:
                theirs.sendall(chunk)
            theirs.shutdown(socket.SHUT_WR)

        with ours, theirs:
            sender = threading.Thread(target=send)
            sender.start()
            readline = reader(ours)
            read = []
            while line := readline():
                read.append(line)
            assert readline() == b""
            sender.join()
            return read

    expected = lines_read(lambda sock: sock.makefile("rb", buffering=READ_BUFFER).readline)
    assert lines_read(lambda sock: _Lines(sock).readline) == expected
    assert b"".join(expected) == b"".join(sends)
