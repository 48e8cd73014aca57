"""The relay of a host's step (gbatch/nodes/steprelay.py) against a channel made of pipes.

What the client sends reaches the channel as its operations (input, resize, signals,
the end of input); what the command prints comes back as frames, its status as EXIT;
a client that goes hangs the step up; a channel lost is said to the client.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time

import pytest

from gbatch.core import stepframes as frames
from gbatch.nodes.base import StepStatus
from gbatch.nodes.ssh import RemoteError
from gbatch.nodes.steprelay import StepRelay


class FakeChannel:
    """An AttachedCommand's surface over a pipe that wakes the relay."""

    def __init__(self) -> None:
        self._wake_read, self._wake_write = os.pipe()
        self.lock = threading.Lock()
        self.out = bytearray()
        self.err = bytearray()
        self.finished = False
        self.status: int | None = None
        self.is_lost = False
        self.sent = bytearray()
        self.resized: list[tuple[int, int]] = []
        self.input_ended = False
        self.closed = False
        self.got_input = threading.Event()

    # what the test does as the remote command
    def emit(self, out: bytes = b"", err: bytes = b"", *, status: int | None = None) -> None:
        with self.lock:
            self.out += out
            self.err += err
            if status is not None:
                self.status, self.finished = status, True
        os.write(self._wake_write, b"x")

    def lose(self) -> None:
        with self.lock:
            self.is_lost = self.finished = True
        os.write(self._wake_write, b"x")

    # AttachedCommand
    def fileno(self) -> int:
        return self._wake_read

    def read(self) -> tuple[bytes, bytes, bool]:
        os.set_blocking(self._wake_read, False)
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_read, 4096)
        with self.lock:
            out, err = bytes(self.out), bytes(self.err)
            self.out.clear()
            self.err.clear()
            return out, err, self.finished

    def send(self, data: bytes) -> int:
        if self.closed:
            raise RemoteError("closed")
        self.sent += data
        self.got_input.set()
        return len(data)

    def resize(self, rows: int, cols: int) -> None:
        self.resized.append((rows, cols))

    def end_input(self) -> None:
        self.input_ended = True

    def exit_status(self, timeout: float) -> int | None:
        return self.status

    @property
    def lost(self) -> bool:
        return self.is_lost

    def close(self) -> None:
        if not self.closed:
            os.close(self._wake_read)
            os.close(self._wake_write)
        self.closed = True


class Harness:
    def __init__(self, pty: bool) -> None:
        self.client, relay_side = socket.socketpair()
        self.channel = FakeChannel()
        self.delivered: list[int] = []
        self.ended: list[StepStatus] = []
        self.relay = StepRelay(
            relay_side,
            self.channel,  # type: ignore[arg-type]
            label="7.0",
            pty=pty,
            deliver=self.delivered.append,
            ended=self.ended.append,
            lost_reason=lambda: "the SSH connection was lost",
        )
        self.thread = self.relay.start()
        self.reader = frames.FrameReader(frames.TO_CLIENT)
        self.client.settimeout(10)

    def frames_until_exit(self) -> list[tuple[int, bytes]]:
        got: list[tuple[int, bytes]] = []
        while not got or got[-1][0] != frames.EXIT:
            data = self.client.recv(65536)
            assert data, f"the relay closed before EXIT: {got}"
            got += self.reader.feed(data)
        return got

    def done(self) -> StepStatus:
        self.thread.join(10)
        assert not self.thread.is_alive()
        (status,) = self.ended
        return status


@pytest.fixture
def pipes() -> Harness:
    return Harness(pty=False)


def test_input_output_and_the_exit_status_cross_the_relay(pipes: Harness) -> None:
    pipes.client.sendall(frames.frame(frames.STDIN, b"hello\n") + frames.frame(frames.STDIN_EOF))
    assert pipes.channel.got_input.wait(10)
    pipes.client.sendall(frames.signal_frame(signal.SIGUSR1) + frames.resize_frame(30, 100))
    # The signal is relayed before the step ends: else the relay may see the exit first
    # and the signal is rightly dropped (seen in a loaded CI run).
    waiting = threading.Event()
    deadline = time.monotonic() + 10
    while pipes.delivered != [signal.SIGUSR1] and time.monotonic() < deadline:
        waiting.wait(0.01)
    pipes.channel.emit(b"HELLO\n", b"warn\n")
    pipes.channel.emit(status=3)
    got = pipes.frames_until_exit()
    assert (frames.STDOUT, b"HELLO\n") in got and (frames.STDERR, b"warn\n") in got
    assert frames.read_exit(got[-1][1]) == (3, 0)
    status = pipes.done()
    assert (status.state, status.exit_code, status.hangup) == ("exited", 3, False)
    assert pipes.channel.sent == b"hello\n" and pipes.channel.input_ended
    assert pipes.delivered == [signal.SIGUSR1]
    assert pipes.channel.resized == []  # pipes have no terminal to resize
    assert pipes.channel.closed


def test_a_terminal_is_resized_and_its_input_ends_with_its_eof_character() -> None:
    term = Harness(pty=True)
    term.client.sendall(frames.resize_frame(25, 90) + frames.frame(frames.STDIN_EOF))
    deadline = threading.Event()
    while term.channel.sent != b"\x04" and not deadline.wait(0.01):
        pass
    assert term.channel.resized == [(25, 90)] and not term.channel.input_ended
    term.channel.emit(status=0)
    assert frames.read_exit(term.frames_until_exit()[-1][1]) == (0, 0)
    term.done()


def test_a_client_that_goes_hangs_the_step_up(pipes: Harness) -> None:
    pipes.client.close()
    status = pipes.done()
    assert (status.state, status.signal, status.hangup) == ("exited", signal.SIGHUP, True)
    assert pipes.channel.closed


def test_a_lost_channel_is_told_to_the_client_and_hangs_the_step_up(pipes: Harness) -> None:
    pipes.channel.emit(b"partial")
    pipes.channel.lose()
    got = pipes.frames_until_exit()
    assert (frames.STDOUT, b"partial") in got
    assert (frames.ERROR, b"the SSH connection was lost") in got
    assert frames.read_exit(got[-1][1]) == (255, 0)
    status = pipes.done()
    assert (status.exit_code, status.hangup, status.error) == (
        255,
        True,
        "the SSH connection was lost",
    )


def test_a_client_sending_what_is_not_a_frame_is_taken_for_gone(pipes: Harness) -> None:
    pipes.client.sendall(b"\xff" * 8)
    assert pipes.done().hangup


def test_notices_told_from_another_thread_reach_the_client_as_stderr_before_exit() -> None:
    """gbatchd's lines for a host step's terminal (Node.tell_step): on lines of their own."""
    term = Harness(pty=True)
    term.relay.tell(["srun: Job 7 will be cancelled in 5 minutes (time limit)"])
    got: list[tuple[int, bytes]] = []
    while not got:
        got += term.reader.feed(term.client.recv(65536))
    assert got == [
        (frames.STDERR, b"\r\nsrun: Job 7 will be cancelled in 5 minutes (time limit)\r\n")
    ]
    term.relay.tell(["srun: Job step aborted: Waiting up to 30 seconds for job step to finish."])
    term.channel.emit(status=0)
    rest = term.frames_until_exit()
    assert rest[-1][0] == frames.EXIT
    assert (frames.STDERR, b"\r\nsrun: Job step aborted: Waiting up to 30 seconds for job step "
            b"to finish.\r\n") in rest  # fmt: skip
    assert term.done().exit_code == 0
