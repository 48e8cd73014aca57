"""A step's byte stream: the frames a step's connection carries once its request is answered.

`gbatch srun` asks gbatchd for a step (protocol.requests.OpenStep) and gets one JSON
line back; from then on the connection carries frames both ways, each a kind byte, a
4-byte big-endian length and that many bytes of payload:

    client -> step   STDIN (bytes for the step's stdin or terminal), STDIN_EOF (its
                     stdin ended), RESIZE (rows, cols: the terminal's new size), SIGNAL
                     (a signal number for the step's processes)
    step -> client   STDOUT, STDERR (the step's output; a terminal's is all STDOUT),
                     EXIT (its exit code and the signal that killed it, 0 if none),
                     ERROR (a line saying why the step did not start or was ended)

The same frames travel whatever carries them (the local node's step shim, a host's SSH
channel relayed by the head), so the client never knows which. Pure: no I/O; the
readers are fed bytes and give frames.
"""

from __future__ import annotations

import socket
import struct

TYPE_CHECKING = False  # typing's, not importing typing (srun's start-up)
if TYPE_CHECKING:
    from collections.abc import Iterator

STDIN = 1
STDIN_EOF = 2
RESIZE = 3
SIGNAL = 4
STDOUT = 11
STDERR = 12
EXIT = 13
ERROR = 14

TO_STEP = frozenset({STDIN, STDIN_EOF, RESIZE, SIGNAL})
TO_CLIENT = frozenset({STDOUT, STDERR, EXIT, ERROR})

HEADER = struct.Struct(">BI")
MAX_PAYLOAD = 64 * 1024
"""The largest payload a frame may carry: output is cut into frames of at most this."""

_SIZE = struct.Struct(">HH")
_EXIT = struct.Struct(">ii")


class FrameError(ValueError):
    """Bytes that are not frames of the expected direction; str() says what was wrong."""


def frame(kind: int, payload: bytes = b"") -> bytes:
    """One frame of `kind` with `payload` (at most MAX_PAYLOAD bytes)."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"a frame's payload is at most {MAX_PAYLOAD} bytes, not {len(payload)}")
    return HEADER.pack(kind, len(payload)) + payload


def data_frames(kind: int, data: bytes) -> Iterator[bytes]:
    """`data` as frames of `kind`, cut at MAX_PAYLOAD."""
    for start in range(0, len(data), MAX_PAYLOAD):
        yield frame(kind, data[start : start + MAX_PAYLOAD])


def resize_frame(rows: int, cols: int) -> bytes:
    return frame(RESIZE, _SIZE.pack(_clamp(rows), _clamp(cols)))


def signal_frame(signum: int) -> bytes:
    if not 1 <= signum <= 64:
        raise ValueError(f"{signum} is not a signal number")
    return frame(SIGNAL, bytes([signum]))


def exit_frame(exit_code: int, signum: int = 0) -> bytes:
    return frame(EXIT, _EXIT.pack(exit_code, signum))


def error_frame(message: str) -> bytes:
    return frame(ERROR, message.encode("utf-8", "replace")[:MAX_PAYLOAD])


def read_size(payload: bytes) -> tuple[int, int]:
    """A RESIZE frame's (rows, cols); FrameError for a payload of the wrong size."""
    if len(payload) != _SIZE.size:
        raise FrameError(f"a resize frame holds {_SIZE.size} bytes, not {len(payload)}")
    rows, cols = _SIZE.unpack(payload)
    return rows, cols


def read_signal(payload: bytes) -> int:
    """A SIGNAL frame's signal number; FrameError for anything but one byte in 1..64."""
    if len(payload) != 1 or not 1 <= payload[0] <= 64:
        raise FrameError("a signal frame holds one signal number, 1 to 64")
    return payload[0]


def read_exit(payload: bytes) -> tuple[int, int]:
    """An EXIT frame's (exit code, signal)."""
    if len(payload) != _EXIT.size:
        raise FrameError(f"an exit frame holds {_EXIT.size} bytes, not {len(payload)}")
    code, signum = _EXIT.unpack(payload)
    return code, signum


def exit_status(exit_code: int, signum: int) -> int:
    """What a shell says a command exited with: its code, or 128 + the signal that killed it."""
    return 128 + signum if signum else exit_code & 0xFF


def _clamp(size: int) -> int:
    return max(0, min(size, 0xFFFF))


def flush(sock: socket.socket, pending: bytearray) -> bool:
    """Send what non-blocking `sock` takes now of `pending`, removing it from there.

    False when the peer is gone (the caller drops the connection); True otherwise, with
    what the socket would not take yet left in `pending`. A step's shim and srun's
    fan-out in gbatchd write to their clients alike."""
    while pending:
        try:
            sent = sock.send(pending[: 1 << 16])
        except BlockingIOError:
            return True
        except OSError:
            return False
        del pending[:sent]
    return True


class FrameReader:
    """Frames out of a byte stream fed in pieces, checked against the kinds `allowed`.

    `feed(data)` returns the frames completed so far, each (kind, payload); what is left
    of a frame waits for the next feed. FrameError for an unknown kind or a payload over
    MAX_PAYLOAD: the stream is then no longer to be trusted.
    """

    def __init__(self, allowed: frozenset[int]) -> None:
        self._allowed = allowed
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buffer += data
        frames: list[tuple[int, bytes]] = []
        buffer = self._buffer
        start = 0
        while len(buffer) - start >= HEADER.size:
            kind, size = HEADER.unpack_from(buffer, start)
            if kind not in self._allowed:
                raise FrameError(f"unexpected frame kind {kind}")
            if size > MAX_PAYLOAD:
                raise FrameError(f"a frame of {size} bytes, more than {MAX_PAYLOAD}")
            end = start + HEADER.size + size
            if len(buffer) < end:
                break
            frames.append((kind, bytes(buffer[start + HEADER.size : end])))
            start = end
        del buffer[:start]
        return frames

    @property
    def pending(self) -> int:
        """Bytes held of a frame not yet complete."""
        return len(self._buffer)
