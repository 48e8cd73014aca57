"""Attacks on gbatchd's socket by one real user, each in processes of its own: idle
connections held open, slow clients (half a request, then nothing), and a flood of
requests. Shared by tests/integration/test_dos.py and bench/bench_abuse.py (pytest puts
tests/ on sys.path; the bench inserts it). Stdlib and gbatch's client only.

An attack is forked as root and becomes the user in the child (supplementary groups
included) after raising its descriptor limit; whatever the child needs is imported
before the fork. Each child writes one line when it is in place ("ready") and one JSON
line with its tally when told to stop (the stop pipe closed), then exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gbatch.protocol import wire
from gbatch.protocol.client import Client, DaemonUnavailable, ReplyTimeout, RequestFailed

HALF_REQUEST = b'{"op":"ping"'  # no closing brace, no newline
# An attack: run in the child with the stop pipe and `ready()`, returns its tally.
AttackFunction = Callable[["Stop", Callable[[], None]], dict[str, Any]]


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int


@dataclass
class Attack:
    """One forked attacker: its pid and where its lines come from."""

    what: str
    pid: int
    lines: Any  # a text file object on the child's report pipe

    def wait_ready(self, timeout: float = 120.0) -> None:
        ready, _, _ = select.select([self.lines], [], [], timeout)
        line = self.lines.readline() if ready else ""
        if line.strip() != "ready":
            raise AssertionError(f"{self.what} did not get in place: {line.strip() or 'nothing'}")

    def tally(self, timeout: float = 120.0) -> dict[str, Any]:
        ready, _, _ = select.select([self.lines], [], [], timeout)
        line = self.lines.readline() if ready else ""
        os.waitpid(self.pid, 0)
        self.lines.close()
        if not line:
            raise AssertionError(f"{self.what} died without a tally")
        result: dict[str, Any] = json.loads(line)
        if "crash" in result:
            raise AssertionError(f"{self.what} failed: {result['crash']}")
        return result


class Stop:
    """A pipe whose closing tells every attacker to stop."""

    def __init__(self) -> None:
        self.read_end, self._write_end = os.pipe()

    def stopped(self, timeout: float = 0.0) -> bool:
        ready, _, _ = select.select([self.read_end], [], [], timeout)
        return bool(ready)

    def now(self) -> None:
        """Stop every attacker (each child closed its copy of this end at its start)."""
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1


def start_as(
    account: Account,
    what: str,
    attack: AttackFunction,
    stop: Stop,
    *,
    descriptors: int = 4096,
    nice: int = 0,
) -> Attack:
    """Fork, become `account` with `descriptors` open files allowed, and run
    `attack(stop, ready)`; its tally comes back through Attack.tally()."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into the caller
        os.close(read_end)
        stop.now()  # this copy of the write end would keep the pipe open for ever
        report = os.fdopen(write_end, "w", buffering=1)

        def ready() -> None:
            report.write("ready\n")

        try:
            signal.alarm(900)  # a hung child must not outlive its test
            resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, descriptors))
            os.setgroups(os.getgrouplist(account.name, account.gid))
            os.setgid(account.gid)
            os.setuid(account.uid)
            if nice:
                os.nice(nice)
            outcome = attack(stop, ready)
        except BaseException as err:
            outcome = {"crash": repr(err)}
        with contextlib.suppress(OSError):
            report.write(json.dumps(outcome) + "\n")
            report.flush()
        os._exit(0)
    os.close(write_end)
    return Attack(what, pid, os.fdopen(read_end, "r"))


@contextlib.contextmanager
def attacks_stopped(stop: Stop, attacks: list[Attack]) -> Iterator[dict[str, dict[str, Any]]]:
    """Yield a dict that, once the block ends, holds each attack's tally by its name;
    every attacker is stopped and reaped however the block ends."""
    tallies: dict[str, dict[str, Any]] = {}
    try:
        yield tallies
    finally:
        stop.now()
        for attack in attacks:
            tallies[attack.what] = attack.tally()


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)
    while True:
        try:
            sock.connect(str(path))
            return sock
        except BlockingIOError:  # the listen backlog is full: the daemon is busy
            time.sleep(0.01)


def _what_came(sock: socket.socket) -> str:
    """What the daemon said on a connection that sent no whole request: "refused" (too
    many open), "unfinished" (closed for a half-sent request), "closed" (closed without
    a word) or "open" (nothing yet)."""
    sock.setblocking(False)
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return "open"
    except OSError:
        return "closed"
    if not data:
        return "closed"
    reply = json.loads(data.split(b"\n", 1)[0])
    if reply.get("kind") == "unavailable":
        return "refused"
    if "left unfinished" in reply.get("error", ""):
        return "unfinished"
    return f"other: {reply}"


def hold_idle(path: Path, count: int) -> AttackFunction:
    """Open `count` connections and send nothing on them."""

    def attack(stop: Stop, ready: Callable[[], None]) -> dict[str, Any]:
        held = [_connect(path) for _ in range(count)]
        ready()
        stop.stopped(timeout=None)  # type: ignore[arg-type]
        return _ends(held)

    return attack


def hold_slow(path: Path, count: int, *, keep: bool = False) -> AttackFunction:
    """Open `count` connections and send half a request on each, then nothing more.
    With `keep`, open another at once whenever the daemon ends one (refused, or closed
    unfinished), as a slowloris does, until stopped; the tally then counts those ends."""

    def half_sent() -> socket.socket:
        sock = _connect(path)
        with contextlib.suppress(OSError):  # refused and closed already
            sock.sendall(HALF_REQUEST)
        return sock

    def attack(stop: Stop, ready: Callable[[], None]) -> dict[str, Any]:
        held = [half_sent() for _ in range(count)]
        ready()
        if not keep:
            stop.stopped(timeout=None)  # type: ignore[arg-type]
            return _ends(held)
        ends: dict[str, int] = {}
        while not stop.stopped():
            ended, _, _ = select.select(held, [], [], 0.2)
            for sock in ended:
                what = _what_came(sock)
                ends[what] = ends.get(what, 0) + 1
                sock.close()
                held[held.index(sock)] = half_sent()
        left = _ends(held)["ends"]
        return {"ends": {what: ends.get(what, 0) + left.get(what, 0) for what in {*ends, *left}}}

    return attack


def _ends(held: list[socket.socket]) -> dict[str, Any]:
    ends: dict[str, int] = {}
    for sock in held:
        what = _what_came(sock)
        ends[what] = ends.get(what, 0) + 1
        sock.close()
    return {"ends": ends}


def flood(path: Path, request: wire.Request) -> AttackFunction:
    """Send `request` as fast as replies come, on one connection while the daemon keeps
    it, at once on a new one when it refuses or closes it. Ready once the first request
    has had its answer, so that an attack started after this one finds the connection
    held (a Client connects on its first request)."""

    def attack(stop: Stop, ready: Callable[[], None]) -> dict[str, Any]:
        served = refused = lost = 0
        refusals: set[str] = set()
        client = Client(path, timeout=60)

        def one() -> None:
            nonlocal served, refused, lost
            try:
                client.call(request)
                served += 1
            except RequestFailed as err:
                refused += 1
                refusals.add(f"{err.kind}: {err.message}")
                client.close()
            except (DaemonUnavailable, ReplyTimeout):
                lost += 1
                client.close()

        one()
        ready()
        while not stop.stopped():
            one()
        client.close()
        return {"served": served, "refused": refused, "lost": lost, "refusals": sorted(refusals)}

    return attack
