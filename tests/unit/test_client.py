"""The client's side of the socket: a daemon that takes a request and never replies."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gbatch import wire
from gbatch.client import Client, ReplyTimeout


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
