"""The fan-out between one srun client and a step's tasks (gbatch/head/stepfanout.py)."""

from __future__ import annotations

import contextlib
import socket
import time

from gbatch.core import stepframes as frames
from gbatch.head.stepfanout import HIGH_WATER, Fanout, Task

PAYLOAD = b"x" * 60000
CHUNK = frames.frame(frames.STDIN, PAYLOAD)


def test_a_client_flooding_stdin_is_held_back_while_a_task_does_not_read() -> None:
    # A task that never reads its stdin must not make gbatchd hold the client's stream
    # in memory (it held 280 MB after 10 s): past HIGH_WATER for any task, the client is
    # no longer read, as the one-task step shim does, and the kernel pushes back on it.
    client, client_end = socket.socketpair()
    task_sock, task_end = socket.socketpair()
    task = Task(rank=0, node="n1", sock=task_sock, prefix=b"0: ")
    fanout = Fanout(
        client_end, [task], label="7.0", labelled=False, kill_on_bad_exit=False, grace=1
    )
    thread = fanout.start()
    client.setblocking(False)
    frames_sent, pending = 0, bytearray()
    stalled_since = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not pending:
            pending += CHUNK
            frames_sent += 1
        try:
            del pending[: client.send(pending)]
            stalled_since = None
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 0.5:
                break  # pushed back for half a second: the fan-out stopped reading
            time.sleep(0.01)
    assert stalled_since is not None, f"{frames_sent} frames sent without any push-back"
    assert thread.is_alive()  # held back, not failed
    assert len(task.to_task) <= HIGH_WATER + 2 * len(CHUNK)

    # Once the task reads, the client is read again and every byte arrives.
    task_end.setblocking(False)
    reader = frames.FrameReader(frames.TO_STEP)
    received = 0
    deadline = time.monotonic() + 30
    while received < frames_sent * len(PAYLOAD) and time.monotonic() < deadline:
        if pending:
            with contextlib.suppress(BlockingIOError):
                del pending[: client.send(pending)]
        try:
            data = task_end.recv(1 << 20)
        except BlockingIOError:
            time.sleep(0.005)
            continue
        received += sum(len(payload) for _, payload in reader.feed(data) or [])
    assert received == frames_sent * len(PAYLOAD)
    client.close()
    task_end.close()
    thread.join(10)
    assert not thread.is_alive()
