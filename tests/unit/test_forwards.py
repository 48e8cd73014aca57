"""Forwarded connections in gbatchd (gbatch/head/forwards.py): capped per user, relayed both
ways off the loop, ended with their job's run."""

from __future__ import annotations

import json
import socket
import threading

from gbatch.head.forwards import Forwards, Tunnel


def test_a_users_forwarded_connections_are_capped_and_given_back() -> None:
    forwards = Forwards(lambda: 0.0, per_user=2)
    first, second = forwards.take(1001), forwards.take(1001)
    assert first is not None and second is not None
    assert forwards.take(1001) is None  # the third, at the cap
    assert forwards.take(1002) is not None  # another user's are their own
    first.release()
    first.release()  # once only
    assert forwards.held(1001) == 1
    assert forwards.take(1001) is not None


def test_a_tunnel_carries_bytes_both_ways_and_ends_with_its_job() -> None:
    forwards = Forwards(lambda: 0.0)
    client, daemon_side = socket.socketpair()
    server, target = socket.socketpair()
    tunnel = Tunnel(daemon_side, target)
    forwards.add(12, tunnel)
    relay = threading.Thread(target=tunnel.relay)
    relay.start()
    client.sendall(b"GET / HTTP/1.0\r\n\r\n")
    assert server.recv(100) == b"GET / HTTP/1.0\r\n\r\n"
    server.sendall(b"HTTP/1.0 200 OK\r\n")
    assert client.recv(100) == b"HTTP/1.0 200 OK\r\n"
    assert forwards.open_count(12) == 1
    forwards.job_ended(12, "COMPLETED")  # the loop's call: nothing in it blocks
    relay.join(timeout=10)
    assert not relay.is_alive()
    assert client.recv(100) == b""
    assert server.recv(100) == b""  # the job's side is closed too
    assert forwards.open_count(12) == 0
    for end in (client, daemon_side, server):
        end.close()


def test_a_watch_is_told_how_its_job_ended() -> None:
    forwards = Forwards(lambda: 0.0)
    client, daemon_side = socket.socketpair()
    watch = Tunnel(daemon_side, None)
    forwards.add(12, watch)
    waiting = threading.Thread(target=watch.watch)
    waiting.start()
    forwards.job_ended(12, "TIMEOUT")
    waiting.join(timeout=10)
    assert not waiting.is_alive()
    line = client.makefile("rb").readline()
    assert json.loads(line) == {"ended": "TIMEOUT"}
    client.close()
    daemon_side.close()
