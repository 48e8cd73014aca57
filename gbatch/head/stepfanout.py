"""A step of several tasks (srun across a job's nodes, or -n): one client, a task per rank.

A one-task step's client is handed to its node's step shim (or relay) whole. A step of
several tasks has one client and a shim (or a host's relay) per task, each started by
its node exactly as a one-task step is (Node.start_step, on one end of a socket pair).
gbatchd keeps the client's connection and joins them, one thread per step:

    client STDIN, STDIN_EOF, RESIZE, SIGNAL   -> every task (srun's default --input=all;
                                                 Ctrl-C and scancel -s reach each task)
    each task's STDOUT, STDERR                -> the client in whole lines, never one
                                                 task's cut into another's; with
                                                 `label`, each prefixed `R: ` (srun -l)
    a task that fails                         -> Slurm's `srun: error: NODE: task R:
                                                 Exited with exit code N` on stderr; with
                                                 kill_on_bad_exit, SIGTERM to the others
                                                 (SIGKILL after the grace)
    every task ended                          -> one EXIT: the first failing task's
                                                 status, else 0

A client that goes away closes every task's connection: each shim hangs its task up as
for a one-task step. What a task's node records of it (its exit) is the loop's to read
(head/loop/steps.py joins the tasks' ends into the step's). The line handling
(TaskLines) is pure.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from gbatch.core import stepframes as frames
from gbatch.core.multinode import rank_label as rank_label

log = logging.getLogger("gbatchd")

# Output held for the client past which the tasks are no longer read (back-pressure).
HIGH_WATER = 1 << 20
# A line longer than this is passed on in pieces (a task that never ends its line).
LONGEST_LINE = 64 * 1024
# How long the last frames may take to reach a client that stopped reading.
FLUSH_SECONDS = 10.0


class TaskLines:
    """One task's output stream cut into whole lines (each ending in a line end)."""

    def __init__(self) -> None:
        self.partial = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The whole lines `data` completes; a line past LONGEST_LINE in pieces."""
        self.partial += data
        cut = self.partial.rfind(b"\n") + 1
        lines: list[bytes] = []
        if cut:
            lines = bytes(self.partial[:cut]).splitlines(keepends=True)
            del self.partial[:cut]
        while len(self.partial) >= LONGEST_LINE:
            lines.append(bytes(self.partial[:LONGEST_LINE]) + b"\n")
            del self.partial[:LONGEST_LINE]
        return lines

    def rest(self) -> list[bytes]:
        """What is left of a last line with no line end (the task ended), ended."""
        if not self.partial:
            return []
        line = bytes(self.partial) + b"\n"
        self.partial.clear()
        return [line]


def task_failure(node: str, rank: int, code: int, signum: int) -> str:
    """Slurm's srun line for a task that failed: `srun: error: NODE: task R: ...`."""
    what = signal.strsignal(signum) if signum else f"Exited with exit code {code}"
    return f"srun: error: {node}: task {rank}: {what}"


@dataclass
class Task:
    """One task of the step as the fan-out sees it: its connection and its output."""

    rank: int
    node: str
    sock: socket.socket | None
    prefix: bytes  # its rank as srun -l prints it (rank_label)
    out: TaskLines = field(default_factory=TaskLines)
    err: TaskLines = field(default_factory=TaskLines)
    reader: frames.FrameReader = field(default_factory=lambda: frames.FrameReader(frames.TO_CLIENT))
    to_task: bytearray = field(default_factory=bytearray)
    result: tuple[int, int] | None = None
    start_error: str = ""  # why its node did not start it (then it has no connection)


class Fanout:
    """The relay between one client and the tasks of its step; `run` on a thread."""

    def __init__(
        self,
        client: socket.socket,
        tasks: list[Task],
        *,
        label: str,
        labelled: bool,
        kill_on_bad_exit: bool,
        grace: float,
        copy: IO[bytes] | None = None,
        copy_limit: int = 0,
        ended: Callable[[], None] = lambda: None,
    ) -> None:
        self.client = client
        self.tasks = tasks
        self.label = label
        self.labelled = labelled
        self.kill_on_bad_exit = kill_on_bad_exit
        # The job's task log (`gbatch logs --label`): every line with its rank, up to
        # `copy_limit` bytes.
        self.copy = copy
        self.copy_left = copy_limit
        self.grace = grace
        self.ended = ended
        self.reader = frames.FrameReader(frames.TO_STEP)
        self.to_client = bytearray()
        self.client_gone = False
        self.first_failure: tuple[int, int] | None = None
        self.stopping_at: float | None = None
        self.killed = False

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name=f"step-{self.label}", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        try:
            self._relay()
            self._finish()
        except Exception as err:  # a thread's entry point: say why, never die silently
            log.warning("step %s: its fan-out failed: %s", self.label, err)
        finally:
            for task in self.tasks:
                self._close(task)
            with contextlib.suppress(OSError):
                self.client.close()
            if self.copy is not None:
                with contextlib.suppress(OSError):
                    self.copy.close()
            self.ended()

    # -- the loop ---------------------------------------------------------------------

    def _relay(self) -> None:
        selector = selectors.DefaultSelector()
        self.client.setblocking(False)
        for task in self.tasks:
            if task.sock is not None:
                task.sock.setblocking(False)
        for task in self.tasks:
            if task.start_error:
                self._task_ended(task, 1, 0, task.start_error)
        try:
            while not self.client_gone and any(t.result is None for t in self.tasks):
                self._register(selector)
                for key, events in selector.select(self._timeout()):
                    if key.data is None:
                        if events & selectors.EVENT_READ:
                            self._from_client()
                        if events & selectors.EVENT_WRITE:
                            self._flush_client()
                    else:
                        task = key.data
                        if events & selectors.EVENT_WRITE:
                            self._flush_task(task)
                        if events & selectors.EVENT_READ:
                            self._from_task(task)
                self._after_grace()
        finally:
            selector.close()

    def _register(self, selector: selectors.BaseSelector) -> None:
        # The client is read only while every task takes its input: a task that does not
        # read its stdin would otherwise make gbatchd hold whatever the client sends
        # (back-pressure, as the one-task step shim does).
        taking = all(len(t.to_task) < HIGH_WATER for t in self.tasks if t.sock is not None)
        wanted: dict[socket.socket, tuple[int, Task | None]] = {}
        events = (selectors.EVENT_READ if taking else 0) | (
            selectors.EVENT_WRITE if self.to_client else 0
        )
        if events:
            wanted[self.client] = (events, None)
        reading = len(self.to_client) < HIGH_WATER
        for task in self.tasks:
            if task.sock is None:
                continue
            events = (selectors.EVENT_READ if reading else 0) | (
                selectors.EVENT_WRITE if task.to_task else 0
            )
            if events:
                wanted[task.sock] = (events, task)
        registered = {key.fileobj: key for key in selector.get_map().values()}
        for sock in set(registered) - set(wanted):
            selector.unregister(sock)
        for sock, (events, data) in wanted.items():
            key = registered.get(sock)
            if key is None:
                selector.register(sock, events, data)
            elif key.events != events:
                selector.modify(sock, events, data)

    def _timeout(self) -> float | None:
        if self.stopping_at is None or self.killed:
            return None
        return max(0.05, self.stopping_at + self.grace - time.monotonic())

    # -- client -> tasks --------------------------------------------------------------

    def _from_client(self) -> None:
        try:
            data = self.client.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        try:
            received = self.reader.feed(data) if data else None
        except frames.FrameError:
            received = None
        if received is None:
            self._client_left()
            return
        for kind, payload in received:
            self._to_every_task(frames.frame(kind, payload))

    def _to_every_task(self, data: bytes) -> None:
        for task in self.tasks:
            if task.sock is not None and task.result is None:
                task.to_task += data
                self._flush_task(task)

    def _flush_task(self, task: Task) -> None:
        while task.to_task and task.sock is not None:
            try:
                sent = task.sock.send(task.to_task[: 1 << 16])
            except BlockingIOError:
                return
            except OSError:
                task.to_task.clear()  # its shim is gone: its EXIT or EOF tells
                return
            del task.to_task[:sent]

    def _client_left(self) -> None:
        """The client went away: every task's connection closes, and its shim hangs it up."""
        self.client_gone = True
        self.to_client.clear()
        for task in self.tasks:
            self._close(task)

    # -- tasks -> client --------------------------------------------------------------

    def _from_task(self, task: Task) -> None:
        assert task.sock is not None
        try:
            data = task.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._task_ended(task, 255, 0, "its connection was lost")
            return
        try:
            received = task.reader.feed(data)
        except frames.FrameError as err:
            self._task_ended(task, 255, 0, f"it sent what is not a frame ({err})")
            return
        for kind, payload in received:
            if kind == frames.STDOUT:
                self._lines(task, frames.STDOUT, task.out.feed(payload))
            elif kind == frames.STDERR:
                self._lines(task, frames.STDERR, task.err.feed(payload))
            elif kind == frames.ERROR:
                message = payload.decode("utf-8", "replace")
                self._send(frames.error_frame(f"{task.node}: task {task.rank}: {message}"))
            elif kind == frames.EXIT:
                self._task_ended(task, *frames.read_exit(payload))
                return

    def _task_ended(self, task: Task, code: int, signum: int, error: str = "") -> None:
        """Task `task` ended: its last partial lines out, its failure said, the others
        stopped where it failed and kill_on_bad_exit holds."""
        task.result = (code, signum)
        self._lines(task, frames.STDOUT, task.out.rest())
        self._lines(task, frames.STDERR, task.err.rest())
        self._close(task)
        if error:
            self._say(f"srun: error: {task.node}: task {task.rank}: {error}")
        if code == 0 and signum == 0:
            return
        self._say(task_failure(task.node, task.rank, code, signum))
        if self.first_failure is None:
            self.first_failure = (code, signum)
            if self.kill_on_bad_exit and any(t.result is None for t in self.tasks):
                self._say(f"srun: Terminating StepId={self.label}")
                self.stopping_at = time.monotonic()
                self._to_every_task(frames.signal_frame(signal.SIGTERM))

    def _after_grace(self) -> None:
        """The tasks told to stop that still run after the grace are killed."""
        if self.stopping_at is None or self.killed:
            return
        if time.monotonic() >= self.stopping_at + self.grace:
            self.killed = True
            self._to_every_task(frames.signal_frame(signal.SIGKILL))

    def _lines(self, task: Task, kind: int, lines: list[bytes]) -> None:
        """Whole lines of `task`'s to the client (labelled with -l) and the task log."""
        if not lines:
            return
        labelled = b"".join(task.prefix + line for line in lines)
        self._write_copy(labelled)
        data = labelled if self.labelled else b"".join(lines)
        for piece in frames.data_frames(kind, data):
            self._send(piece)

    def _write_copy(self, data: bytes) -> None:
        if self.copy is None or self.copy_left <= 0:
            return
        try:
            self.copy.write(data[: self.copy_left])
            self.copy_left -= len(data)
        except OSError as err:  # a full disk: the client's copy goes on
            log.warning("step %s: its task log is not written: %s", self.label, err)
            self.copy_left = 0

    def _say(self, line: str) -> None:
        self._send(frames.frame(frames.STDERR, line.encode("utf-8", "replace")[:4096] + b"\n"))

    def _send(self, data: bytes) -> None:
        if not self.client_gone:
            self.to_client += data
            self._flush_client()

    def _flush_client(self) -> None:
        if not frames.flush(self.client, self.to_client):
            self._client_left()

    # -- the end ----------------------------------------------------------------------

    def _finish(self) -> None:
        """Every task has ended: the step's exit to the client, then the connection closed."""
        if self.client_gone:
            return
        code, signum = self.first_failure or (0, 0)
        self.to_client += frames.exit_frame(code, signum)
        deadline = time.monotonic() + FLUSH_SECONDS
        self.client.setblocking(True)
        while self.to_client and time.monotonic() < deadline:
            self.client.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                sent = self.client.send(self.to_client[: 1 << 16])
            except OSError:
                return
            del self.to_client[:sent]

    @staticmethod
    def _close(task: Task) -> None:
        if task.sock is not None:
            with contextlib.suppress(OSError):
                task.sock.close()
            task.sock = None
