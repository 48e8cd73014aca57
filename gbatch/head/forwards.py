"""Port forwards in gbatchd: each connection counted against its user, relayed off the loop.

`gbatch port-forward` (and the HTTP API's tunnel) carries each TCP connection on a
connection of its own to gbatchd (requests.OpenForward). Once answered, that connection
is relayed to the job's port by two threads of its own (the socket server's thread for
one direction, one more for the other), never by the loop, whose only part is to say
when a job's run ends (`job_ended`, a few non-blocking shutdowns): every tunnel of that
job then closes, and a forward's watch gets one line saying how the job ended.

A user holds at most MAX_PER_USER of these connections at once (tunnels and watches
together), so that one user's flood of connections cannot take every thread and
descriptor gbatchd has (the socket's own cap per user is higher: their other commands
still get in). Each connection is audited, at most `LINES` lines per user and job in a
window, then counted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable

from gbatch.core.loglines import LINES, WINDOW_SECONDS, LineBudget
from gbatch.nodes.base import PortStream

log = logging.getLogger("gbatchd")
# Connections one user may have forwarded at once (each holds two threads).
MAX_PER_USER = 32
# The most bytes read in one go from either side of a tunnel.
CHUNK = 256 * 1024


class Slot:
    """One of a user's MAX_PER_USER, held by one connection; released once."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            release, self._release = self._release, None
        if release is not None:
            release()


class Tunnel:
    """A forwarded connection (or a forward's watch, without `target`) of one job's run.

    `end` (the loop's, when the run ends) wakes its threads without blocking; they close
    what they hold themselves.
    """

    def __init__(self, client: socket.socket, target: PortStream | None) -> None:
        self.client = client
        self.target = target
        self.ended: str | None = None  # the state the job's run ended in
        self._woken = False
        self._lock = threading.Lock()

    def end(self, state: str) -> None:
        """The job's run ended in `state`: a watch says so; every tunnel is shut."""
        self.ended = state
        if self.target is None:
            line = json.dumps({"ended": state}).encode() + b"\n"
            with contextlib.suppress(OSError):
                self.client.send(line, socket.MSG_DONTWAIT)
        with contextlib.suppress(OSError):
            self.client.shutdown(socket.SHUT_RDWR)

    def wake_target(self) -> None:
        """Stop the target's side: a thread blocked on it returns (idempotent)."""
        with self._lock:
            if self._woken or self.target is None:
                return
            self._woken = True
        target = self.target
        if isinstance(target, socket.socket):
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_RDWR)
        else:  # an SSH channel: its close wakes a blocked recv (a shutdown would not)
            with contextlib.suppress(OSError, EOFError):
                target.close()

    def relay(self) -> None:
        """Carry bytes both ways until both sides are done, or the run ends; then close."""
        target = self.target
        assert target is not None
        back = threading.Thread(
            target=self._pump, args=(target, self.client), name="forward-back", daemon=True
        )
        back.start()
        try:
            self._pump(self.client, target)
            if self.ended is not None:
                self.wake_target()
            back.join()
        finally:
            self.wake_target()
            with contextlib.suppress(OSError, EOFError):
                target.close()

    def _pump(self, source: PortStream, sink: PortStream) -> None:
        """One direction: bytes from `source` to `sink` until its end, then half-close
        `sink`; a failure on either side ends both directions."""
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except (OSError, EOFError):
            with contextlib.suppress(OSError):
                self.client.shutdown(socket.SHUT_RDWR)
            self.wake_target()

    def watch(self) -> None:
        """A watch: wait until the client leaves or the run ends (end() shuts it)."""
        with contextlib.suppress(OSError):
            while self.client.recv(4096):
                pass  # a client sends nothing; whatever it sends is dropped


class Forwards:
    """The forwarded connections gbatchd carries: counted per user, listed per job."""

    def __init__(
        self,
        monotonic: Callable[[], float],
        per_user: int = MAX_PER_USER,
        lines: int = LINES,
        window: float = WINDOW_SECONDS,
    ) -> None:
        self.per_user = per_user
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}  # uid -> connections held
        self._tunnels: dict[int, set[Tunnel]] = {}  # job id -> its open tunnels and watches
        self.lines = LineBudget(monotonic, _summarize, lines, window, timer=True)

    def take(self, uid: int) -> Slot | None:
        """One of `uid`'s connections, or None when they hold per_user already."""
        with self._lock:
            held = self._held.get(uid, 0)
            if held >= self.per_user:
                return None
            self._held[uid] = held + 1
        return Slot(lambda: self._give_back(uid))

    def held(self, uid: int) -> int:
        """How many connections `uid` holds now."""
        with self._lock:
            return self._held.get(uid, 0)

    def _give_back(self, uid: int) -> None:
        with self._lock:
            left = self._held.get(uid, 0) - 1
            if left > 0:
                self._held[uid] = left
            else:
                self._held.pop(uid, None)

    def add(self, job_id: int, tunnel: Tunnel) -> None:
        """List `tunnel` under its job, for job_ended to end it."""
        with self._lock:
            self._tunnels.setdefault(job_id, set()).add(tunnel)

    def remove(self, job_id: int, tunnel: Tunnel) -> None:
        with self._lock:
            tunnels = self._tunnels.get(job_id)
            if tunnels is not None:
                tunnels.discard(tunnel)
                if not tunnels:
                    del self._tunnels[job_id]

    def job_ended(self, job_id: int, state: str) -> None:
        """The loop's word that `job_id`'s run ended in `state`: its forwards end too.

        Never blocks: each tunnel's own threads close what they hold."""
        with self._lock:
            tunnels = self._tunnels.pop(job_id, set())
        for tunnel in tunnels:
            tunnel.end(state)

    def open_count(self, job_id: int) -> int:
        """How many tunnels and watches `job_id` has open."""
        with self._lock:
            return len(self._tunnels.get(job_id, ()))


def _summarize(key: tuple[str, str], unlogged: int) -> None:
    party, what = key
    log.info(
        "audit: %s op=port_forward %s -> allowed: and %d more connections, not logged one "
        "by one (at most %d lines per user and job per %g s)",
        party,
        what,
        unlogged,
        LINES,
        WINDOW_SECONDS,
    )
