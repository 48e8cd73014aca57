"""Closing a remote command's channel over a connection that is already gone."""

from __future__ import annotations

from typing import Any

from gbatch.nodes.ssh import RemoteStream


class _DeadChannel:
    """A paramiko channel whose transport's socket is gone: close() raises EOFError."""

    closed = False

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        raise EOFError()


def test_a_streams_close_over_a_dropped_connection_does_not_raise() -> None:
    # A fleet node's stop() closed its agent's stream after the connection dropped, and
    # paramiko's EOFError ended the caller (bench_fleet --quick in a CI run).
    channel: Any = _DeadChannel()
    RemoteStream(channel, "agent watch").close()
