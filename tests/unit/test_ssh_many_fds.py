"""A head with many SSH channels open: their file descriptors pass 1024.

At 100 hosts (bench_fleet.py --scale 100) the head holds a few channels a host (the
agent's reports, each run's `docker wait` and `docker logs -f`), and each paramiko
channel's fileno() is a pipe of its own: past fd 1023, select.select() raised
"filedescriptor out of range", which killed the exit watchers and failed every pass's
launches.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from typing import Any

import pytest

from gbatch.nodes.ssh import RemoteStream

HIGH_FD = 1500


class _Channel:
    """A channel whose one line is ready, readable through a descriptor past 1023."""

    closed = False
    eof_received = False

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._data = b"report\n"

    def fileno(self) -> int:
        return self._fd

    def recv_ready(self) -> bool:
        return bool(self._data)

    def recv(self, size: int) -> bytes:
        data, self._data = self._data[:size], self._data[size:]
        return data

    def recv_stderr_ready(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def high_fd() -> Iterator[int]:
    """A readable descriptor numbered HIGH_FD (a pipe with a byte in it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= HIGH_FD:
        pytest.skip(f"the hard limit on open files ({hard}) is under {HIGH_FD}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH_FD + 1), hard))
    read, write = os.pipe()
    try:
        os.write(write, b"x")
        os.dup2(read, HIGH_FD)
        yield HIGH_FD
    finally:
        os.close(HIGH_FD)
        os.close(read)
        os.close(write)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_stream_reads_its_lines_through_a_descriptor_past_1023(high_fd: int) -> None:
    channel: Any = _Channel(high_fd)
    stream = RemoteStream(channel, "agent watch")
    assert stream.readline(timeout=5.0) == b"report\n"
