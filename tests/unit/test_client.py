"""The client's side of the socket: a daemon that takes a request and never replies."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gbatch import wire
from gbatch.client import Client, DaemonUnavailable, ReplyTimeout, RequestFailed


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
        client.call(wire.Cancel(ids=(1,)))
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
        request = wire.encode_request(wire.ListJobs())
        for reply in replies[:3]:
            assert client.send_raw(request) == reply.rstrip(b"\n")
        with pytest.raises(RequestFailed) as caught:
            client.send_raw(request)
    assert (caught.value.kind, caught.value.message) == ("permission", "not yours")
    thread.join(5)


def test_the_async_exchange_gives_what_the_blocking_one_does(tmp_path: Path) -> None:
    path = tmp_path / "gbatchd.sock"
    big = b'{"ok":true,"log":"' + b"x" * (3 << 20) + b'"}\n'  # many reads' worth
    replies = [
        b'{"ok":true,"ids":[7]}\n',
        b'{"ok":true,"jobs":[],"now":1.5}\n',
        big,
        b'{"ok": false, "kind": "permission", "error": "not yours"}\n',
        b'{"ok":true,"ids":[8]}\n',  # after a refusal the connection serves on
    ]
    thread = scripted_daemon(path, replies)
    request = wire.encode_request(wire.ListJobs())

    async def exchanges(client: Client) -> None:
        assert await client.send_async(request) == {"ids": [7]}
        assert await client.send_raw_async(request) == replies[1].rstrip(b"\n")
        assert await client.send_raw_async(request) == big.rstrip(b"\n")
        with pytest.raises(RequestFailed) as caught:
            await client.send_async(request)
        assert (caught.value.kind, caught.value.message) == ("permission", "not yours")
        assert client.send(request) == {"ids": [8]}  # the blocking path, on the same socket

    with Client(path, timeout=5) as client:
        asyncio.run(exchanges(client))
    thread.join(5)


def test_the_async_exchange_times_out_as_the_blocking_one_does(silent_daemon: Path) -> None:
    with Client(silent_daemon, timeout=0.3) as client, pytest.raises(ReplyTimeout) as caught:
        asyncio.run(client.send_async(wire.encode_request(wire.Cancel(ids=(1,)))))
    assert "did not reply within 0.3 s" in str(caught.value)
    assert client._sock is None  # a connection in an unknown state is not reused


def test_the_async_exchange_reopens_a_connection_the_daemon_closed(tmp_path: Path) -> None:
    path = tmp_path / "gbatchd.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(2)

    def serve() -> None:
        first, _ = server.accept()
        first.close()  # as gbatchd closes an idle connection
        second, _ = server.accept()
        with second, second.makefile("rb") as lines:
            lines.readline()
            second.sendall(b'{"ok":true,"ids":[3]}\n')

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def twice(client: Client) -> dict[str, object]:
        await asyncio.get_running_loop().run_in_executor(None, client._connect)
        while not client._closed_by_daemon():
            await asyncio.sleep(0.01)  # wait for the close, a state, before sending
        return await client.send_async(wire.encode_request(wire.Ping()))

    with Client(path, timeout=5) as client:
        assert asyncio.run(twice(client)) == {"ids": [3]}
    thread.join(5)
    server.close()


def test_the_async_exchange_says_when_no_daemon_answers(tmp_path: Path) -> None:
    with pytest.raises(DaemonUnavailable):
        asyncio.run(Client(tmp_path / "none.sock").send_async({"op": "ping"}))
