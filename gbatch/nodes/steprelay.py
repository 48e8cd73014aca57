"""A step on a GPU host: its client's frames relayed over an SSH channel, in gbatchd.

The local node's step shim (gbatch/nodes/stepshim.py) holds its client's connection
itself. A host has no gbatch code beyond its agent, so there gbatchd keeps the client's
connection and relays it, one thread per step, to a command the node started over SSH
(`docker exec -i [-t]` into the job's container, on a pseudo-terminal sshd made with
`get_pty` where the client asked for one):

    STDIN      -> the channel's input (sent as its window allows, never blocking)
    STDIN_EOF  -> the byte 0x04 on a terminal (its EOF character), else the input closed
    RESIZE     -> `resize_pty` (sshd sets its terminal's size; docker follows it)
    SIGNAL     -> `deliver` (the node signals the step's processes in the container)
    output     -> STDOUT (a terminal's whole stream, or stdout) and STDERR frames
    its end    -> EXIT with the command's status

gbatchd's notices for the client (a warning before its job's time limit, why its job is
ending: Node.tell_step) come in through `tell`, from any thread, and go out as STDERR
frames, as the local node's shim sends them.

The client sees the same frames as from the local node's shim. How the step ends:
`ended(StepStatus)` once, with `hangup` when the client went away (the node then hangs
the step's processes up on the host), an error when the SSH channel was lost.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence

from gbatch.core import stepframes as frames
from gbatch.nodes.base import HostError, StepStatus
from gbatch.nodes.ssh import AttachedCommand

# Bytes for the channel held back before the client's input is no longer read.
HIGH_WATER = 1 << 20
# How often to try the channel again while its window is full (paramiko tells no one).
SEND_RETRY_SECONDS = 0.02
# After the command's output ended: how long its exit status may take.
STATUS_WAIT_SECONDS = 5.0
# How long the last frames may take to reach a client that stopped reading.
FLUSH_SECONDS = 10.0


class StepRelay:
    """One step's relay between its client's socket and its SSH channel."""

    def __init__(
        self,
        client: socket.socket,
        channel: AttachedCommand,
        *,
        label: str,
        pty: bool,
        deliver: Callable[[int], None],
        ended: Callable[[StepStatus], None],
        lost_reason: Callable[[], str],
    ) -> None:
        self.client = client
        self.channel = channel
        self.label = label
        self.pty = pty
        self.deliver = deliver
        self.ended = ended
        self.lost_reason = lost_reason
        self.reader = frames.FrameReader(frames.TO_STEP)
        self.to_channel = bytearray()
        self.input_ended = False
        self.input_closed = False
        # Notices told from another thread (tell), and the pipe that wakes the relay.
        self._notices = bytearray()
        self._notices_lock = threading.Lock()
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def tell(self, lines: Sequence[str]) -> None:
        """Show `lines` on the client's stderr, on lines of their own; from any thread."""
        end = b"\r\n" if self.pty else b"\n"
        data = (end if self.pty else b"") + b"".join(
            line.encode("utf-8", "replace")[:4096] + end for line in lines
        )
        with self._notices_lock:
            self._notices += frames.frame(frames.STDERR, data[: frames.MAX_PAYLOAD])
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")

    def _send_notices(self) -> bool:
        """The notices told so far, to the client; False when it has gone."""
        with contextlib.suppress(OSError):
            os.read(self._wake_read, 4096)
        with self._notices_lock:
            data, self._notices = bytes(self._notices), bytearray()
        return not data or self._send_client(data)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name=f"step-{self.label}", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        """Relay until the command ends, the client goes or the channel is lost.

        Then tell `ended` how the step ended."""
        status = StepStatus("exited", 255, error="its relay stopped")
        try:
            status = self._relay()
        except Exception as err:  # a thread's entry point: say why, never die silently
            status = StepStatus("exited", 255, end_time=time.time(), error=f"relay failed: {err}")
            self._tell_client(frames.error_frame(status.error) + frames.exit_frame(255))
        finally:
            self.channel.close()
            with contextlib.suppress(OSError):
                self.client.close()
            for fd in (self._wake_read, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.ended(status)

    def _relay(self) -> StepStatus:
        selector = selectors.DefaultSelector()
        self.client.setblocking(False)
        selector.register(self.channel.fileno(), selectors.EVENT_READ, "channel")
        selector.register(self._wake_read, selectors.EVENT_READ, "notices")
        client_registered = False
        try:
            while True:
                wanted = len(self.to_channel) < HIGH_WATER
                if wanted and not client_registered:
                    selector.register(self.client, selectors.EVENT_READ, "client")
                elif not wanted and client_registered:
                    selector.unregister(self.client)
                client_registered = wanted
                timeout = SEND_RETRY_SECONDS if self.to_channel else None
                for key, _ in selector.select(timeout):
                    if key.data == "client" and not self._from_client():
                        return self._client_left()
                    if key.data == "notices" and not self._send_notices():
                        return self._client_left()
                if self._to_channel_failed():
                    return self._lost()
                finished = self._from_channel()
                if finished is None:
                    return self._client_left()
                if finished:
                    return self._finish()
        finally:
            selector.close()

    # -- client -> step -------------------------------------------------------------

    def _from_client(self) -> bool:
        """Take the client's frames; False once it has gone (closed, or sent no frames)."""
        try:
            data = self.client.recv(65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        try:
            received = self.reader.feed(data)
        except frames.FrameError:
            return False
        for kind, payload in received:
            try:
                if kind == frames.STDIN:
                    self.to_channel += payload
                elif kind == frames.STDIN_EOF:
                    self.input_ended = True
                elif kind == frames.RESIZE and self.pty:
                    self.channel.resize(*frames.read_size(payload))
                elif kind == frames.SIGNAL:
                    self.deliver(frames.read_signal(payload))
            except frames.FrameError:
                continue
        return True

    def _to_channel_failed(self) -> bool:
        """Send what the channel's window takes; True when the channel is gone."""
        try:
            while self.to_channel:
                sent = self.channel.send(bytes(self.to_channel[: 1 << 16]))
                if sent <= 0:
                    return False
                del self.to_channel[:sent]
            if self.input_ended and not self.input_closed:
                if self.pty:
                    # A terminal's EOF character: a reader in canonical mode sees EOF.
                    if self.channel.send(b"\x04") <= 0:
                        return False
                    self.input_ended = False
                else:
                    self.channel.end_input()
                    self.input_closed = True
        except HostError:
            return self.channel.lost
        return False

    # -- step -> client -------------------------------------------------------------

    def _from_channel(self) -> bool | None:
        """Pass the command's output on; True once it has ended, None when the client is
        gone."""
        out, err, finished = self.channel.read()
        pieces = [*frames.data_frames(frames.STDOUT, out), *frames.data_frames(frames.STDERR, err)]
        if pieces and not self._send_client(b"".join(pieces)):
            return None
        return finished

    def _send_client(self, data: bytes, timeout: float | None = None) -> bool:
        """Write `data` to the client whole (blocking: the client's pace is the step's);
        False when it has gone."""
        try:
            self.client.settimeout(timeout)
            self.client.sendall(data)
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                self.client.setblocking(False)
        return True

    def _tell_client(self, data: bytes) -> None:
        with contextlib.suppress(OSError):
            self._send_client(data, FLUSH_SECONDS)

    # -- ends -----------------------------------------------------------------------

    def _finish(self) -> StepStatus:
        """The command's output ended: its exit status to the client, or the loss."""
        self._send_notices()  # told as it ended (why its job is ending): before EXIT
        if self.channel.lost:
            return self._lost()
        code = self.channel.exit_status(STATUS_WAIT_SECONDS)
        now = time.time()
        if code is None:
            if self.channel.lost:
                return self._lost()
            message = f"step {self.label} ended without an exit status (killed by a signal?)"
            self._tell_client(frames.error_frame(message) + frames.exit_frame(255))
            return StepStatus("exited", 255, end_time=now, error=message)
        self._tell_client(frames.exit_frame(code))
        return StepStatus("exited", code, end_time=now)

    def _lost(self) -> StepStatus:
        message = self.lost_reason()
        self._tell_client(frames.error_frame(message) + frames.exit_frame(255))
        return StepStatus("exited", 255, end_time=time.time(), hangup=True, error=message)

    def _client_left(self) -> StepStatus:
        # Its terminal closed: the step is hung up, as a closed terminal's session is
        # (the node signals its processes on the host, sshd's pty hangs up docker exec).
        return StepStatus("exited", 0, int(signal.SIGHUP), time.time(), hangup=True)
