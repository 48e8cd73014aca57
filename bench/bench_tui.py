"""`gbatch tui` with 10,000 (or --active N: 100,000) active jobs: first paint, and
the cost of one refresh.

Run: `.venv/bin/python bench/bench_tui.py [--quick] [--active N]`.

The fixture: one daemon (8 simulated GPUs) with 8 one-GPU `sleep` jobs RUNNING, one
held array of 1,000 tasks, and held PENDING jobs submitted one by one (each its own
submit time, as a lab's queue has) until the queue view has N rows (10,000 by
default), all the caller's, so the queue view's default filter (mine, any state)
shows every one. The array's pending tasks beyond the first few are one record (its
tail, one row `N_[K-M]`, as squeue shows it), so most rows are the single jobs:
seeding 100,000 takes a few minutes. The sleepers are cancelled before the daemon
stops (runs outlive their daemon by design).

- First paint, whole process (goal <= 400 ms): what a user waits for. `gbatch tui`
  is started on a fresh pty of 160x48 (TERM=xterm-256color), and the figure is the
  time from the fork to the moment the terminal has received the counts line with
  "10000 shown" and the first sleeper's name. It includes the interpreter's start,
  the imports (textual's is most of it), the `jobs` request and its decoding, the
  app's start, the cells, filling the table, layout, rendering and the write to the
  terminal. The app is then quit with `q`.
- First paint, in-process: the same app headless (`App.run_test(size=(160, 48))`,
  as the Pilot tests run it), with a wrapper around `App._display` (where textual
  writes each frame to the terminal) that timestamps every frame and turns it into
  the terminal's bytes, the step a headless run skips. From entering `run_test` (no
  screen, no connection yet) to the end of the first frame that shows the same two
  texts, the table then holding all N rows: the import and the early read that
  `gbatch tui` overlaps with it are not in it, so the read is. Printed with its two
  parts: start -> the end of the app's first `queue()` read (request, reply,
  decoding), and from there -> the frame. Each run starts after a gc.collect(), as a
  fresh process would have no earlier run's garbage.
- One refresh (what the queue's timer does each second), the app already showing
  the N rows, its own timer stopped so only the bench refreshes:
  the fetch (`DaemonLink.queue`, off the UI thread as the app does it) and the UI
  thread's part (`QueueScreen.show_queue`: cells, filter, sort, `sync_rows`, counts)
  with nothing changed (the same snapshot again), with one job changed (two
  snapshots alternated that differ in one held job's hold, so its reason cell
  changes), with one job gone (alternated with and without the middle job, as when
  a job ends: the rows are loaded anew), and the whole cycle as the app runs it
  (fetch, then show).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import gc
import os
import pty
import pwd
import select
import signal
import struct
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from common import GBATCH, gbatch_env, machine_note, median, report_ms, running_daemon

from gbatch import wire
from gbatch.client import Client
from gbatch.model import JobSpec, JobState
from gbatch.tui.app import GbatchApp, make_app
from gbatch.tui.data import QueueSnapshot
from gbatch.tui.queue import QueueScreen

FIRST_PAINT_GOAL_MS = 400.0
# Issue 16's goals for 100,000 active jobs: first paint <= 500 ms, a refresh <= 300 ms.
LARGE_QUEUE = 100_000
LARGE_FIRST_PAINT_GOAL_MS = 500.0
LARGE_REFRESH_GOAL_MS = 300.0
GPUS = 8
ACTIVE = 10_000  # the default; --active sets it
ARRAY_TASKS = 1000
RUNNING = GPUS
SIZE = (160, 48)
ME = pwd.getpwuid(os.getuid()).pw_name
SETTLE_TIMEOUT_S = 30.0


# -- fixture ------------------------------------------------------------------------


def seed(socket: Path, active: int) -> list[int]:
    """RUNNING sleepers on every GPU, a held array, then held jobs submitted one by one
    until the queue lists `active` rows; the sleepers' ids."""
    sleeper = JobSpec(name="sleeper", command=("sleep", "600"), gpus=1).to_dict()
    held = JobSpec(name="train", command=("python", "train.py"), gpus=1).to_dict()
    with Client(socket, timeout=120) as client:
        ids: list[int] = client.call(wire.Submit(spec=sleeper, count=RUNNING))["ids"]
        wait_states(client, ids, lambda states: states.count("RUNNING") == RUNNING)
        client.call(wire.Submit(spec=held, count=ARRAY_TASKS, held=True))
        rows = len(client.call(wire.ListJobs(columns=True))["columns"]["id"])
        for _ in range(active - rows):
            client.call(wire.Submit(spec=held, held=True))
        assert len(client.call(wire.ListJobs(columns=True))["columns"]["id"]) == active
    return ids


def cancel(socket: Path, ids: list[int]) -> None:
    """Cancel the sleepers and wait for them to end, so no run outlives the bench."""
    with Client(socket, timeout=120) as client:
        client.call(wire.Cancel(ids=tuple(ids)))
        wait_states(client, ids, lambda states: all(JobState(s).is_final for s in states))


def wait_states(client: Client, ids: list[int], done: Callable[[list[str]], bool]) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        states = [j["state"] for j in client.call(wire.ListJobs(ids=tuple(ids)))["jobs"]]
        if done(states):
            return
        time.sleep(0.2)
    raise RuntimeError(f"jobs {ids[0]}..{ids[-1]} did not settle: {states}")


# -- frames -------------------------------------------------------------------------


class FrameClock:
    """Wraps `app._display`: records when each frame ends and renders it to the
    terminal's bytes (headless textual composes frames but skips that last step)."""

    def __init__(self, app: GbatchApp) -> None:
        self.app = app
        self.frames: list[tuple[float, str]] = []
        self._display = app._display
        app._display = self._record  # type: ignore[method-assign]

    def _record(self, screen: Any, renderable: Any) -> None:
        self._display(screen, renderable)
        output = ""
        if renderable is not None and hasattr(renderable, "render_segments"):
            output = renderable.render_segments(self.app.console)
        self.frames.append((time.perf_counter(), output))

    def first_showing(self, *texts: str, since: int = 0) -> float | None:
        """When the first frame from index `since` holding every text ended."""
        for at, output in self.frames[since:]:
            if all(text in output for text in texts):
                return at
        return None


def queue_screen(app: GbatchApp) -> QueueScreen:
    screen = app.screen
    assert isinstance(screen, QueueScreen), screen
    return screen


async def until(predicate: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


# -- figures ------------------------------------------------------------------------


async def one_first_paint(socket: Path, active: int) -> tuple[float, float]:
    """Seconds from entering run_test to the end of the first frame with the rows, and
    to the end of the first `queue()` (the reply decoded, nothing shown yet)."""
    app = make_app(socket, user=ME)
    clock = FrameClock(app)
    fetched: list[float] = []
    link = app.services.link
    fetch = link.queue

    def timed_fetch(**kwargs: Any) -> QueueSnapshot:
        snapshot = fetch(**kwargs)
        fetched.append(time.perf_counter())
        return snapshot

    link.queue = timed_fetch  # type: ignore[method-assign]
    start = time.perf_counter()
    async with app.run_test(size=SIZE):
        marks = (f"{active} shown", "sleeper")
        await until(lambda: clock.first_showing(*marks) is not None, "the rows on screen")
        painted = clock.first_showing(*marks)
        assert painted is not None
        table = queue_screen(app).query_one("#jobs")
        assert getattr(table, "row_count", None) == active
    return painted - start, fetched[0] - start


def first_paint(socket: Path, runs: int, active: int) -> tuple[list[float], list[float]]:
    """First paint, and the part of it until the reply is decoded, `runs` times."""
    asyncio.run(one_first_paint(socket, active))  # warm-up: caches, the daemon's page cache
    samples = []
    for _ in range(runs):
        # Start each run as a fresh process would: without the last run's garbage
        # (10,000 jobs' worth) left for the collector to find during this one.
        gc.collect()
        samples.append(asyncio.run(one_first_paint(socket, active)))
    return [total for total, _ in samples], [fetched for _, fetched in samples]


def one_terminal_paint(argv: list[str], env: dict[str, str], marks: tuple[bytes, ...]) -> float:
    """Seconds from starting `argv` on a fresh terminal (a pty of SIZE) to the moment
    every one of `marks` has reached it. The app is then asked to quit with `q` (and
    ctrl+q, textual's own quit key), as a user would."""
    winsize = struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0)
    start = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its terminal
        fcntl.ioctl(0, termios.TIOCSWINSZ, winsize)
        os.execve(argv[0], argv, {**env, "TERM": "xterm-256color"})
    painted = None
    seen = b""
    try:
        while painted is None and time.perf_counter() - start < SETTLE_TIMEOUT_S:
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            seen += chunk
            if all(mark in seen for mark in marks):
                painted = time.perf_counter() - start
        if painted is None:
            raise RuntimeError(f"{argv} never showed {marks}: {seen[-400:]!r}")
        os.write(fd, b"q\x11")
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            with contextlib.suppress(OSError):  # drain: a full pty would block its exit
                if select.select([fd], [], [], 0.05)[0]:
                    os.read(fd, 1 << 20)
    finally:
        os.close(fd)
    return painted


# The peer: textual's floor on this machine, now. A textual app with one line of text,
# started the same way with the same interpreter: its import, its start, one frame.
PEER_APP = """
from textual.app import App
from textual.widgets import Static


class Peer(App[None]):
    def compose(self):
        yield Static("peer-painted")


Peer().run()
"""


def terminal_paint(home: Path, runs: int, active: int) -> tuple[list[float], list[float]]:
    """`gbatch tui` showing the N rows, and the peer, each `runs` times,
    alternately (so that a slow spell of the machine hits both alike)."""
    gbatch_tui = ([str(GBATCH), "tui"], gbatch_env(home, simulate_gpus=GPUS))
    marks = (f"{active} shown".encode(), b"sleeper")
    peer_file = home / "peer_app.py"
    peer_file.write_text(PEER_APP)
    peer = ([sys.executable, str(peer_file)], gbatch_env(home))
    tui_samples, peer_samples = [], []
    for run in range(runs + 1):  # the first of each is a warm-up: caches
        tui = one_terminal_paint(*gbatch_tui, marks)
        floor = one_terminal_paint(*peer, (b"peer-painted",))
        if run:
            tui_samples.append(tui)
            peer_samples.append(floor)
    return tui_samples, peer_samples


def one_job_gone(snapshot: QueueSnapshot) -> QueueSnapshot:
    """`snapshot` without its middle job (as if it had ended): the rows are reloaded."""
    jobs = list(snapshot.jobs)
    del jobs[len(jobs) // 2]
    return replace(snapshot, jobs=tuple(jobs))


def one_job_changed(snapshot: QueueSnapshot) -> QueueSnapshot:
    """`snapshot` with one held job (the middle one) released: its reason differs."""
    jobs = list(snapshot.jobs)
    middle = len(jobs) // 2
    assert jobs[middle].held
    jobs[middle] = replace(jobs[middle], held=False, reason="Resources")
    return replace(snapshot, jobs=tuple(jobs))


async def refresh_figures(socket: Path, runs: int, active: int) -> dict[str, list[float]]:
    """The parts of one refresh, timed `runs` times each in one running app."""
    # A timer this slow never fires: only the bench refreshes.
    app = make_app(socket, user=ME, refresh_seconds=3600)
    clock = FrameClock(app)
    samples: dict[str, list[float]] = {
        "fetch": [],
        "same": [],
        "changed": [],
        "gone": [],
        "cycle": [],
    }
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: clock.first_showing(f"{active} shown"), "the first paint")
        screen = queue_screen(app)
        link = app.services.link
        for _ in range(runs):
            start = time.perf_counter()
            snapshot = await asyncio.to_thread(link.queue)
            samples["fetch"].append(time.perf_counter() - start)
        await pilot.pause()
        for _ in range(runs):
            start = time.perf_counter()
            screen.show_queue(snapshot)
            samples["same"].append(time.perf_counter() - start)
            await pilot.pause()
        changed = one_job_changed(snapshot)
        for i in range(runs):
            start = time.perf_counter()
            screen.show_queue(changed if i % 2 == 0 else snapshot)
            samples["changed"].append(time.perf_counter() - start)
            await pilot.pause()
        gone = one_job_gone(snapshot)
        for i in range(runs):
            start = time.perf_counter()
            screen.show_queue(gone if i % 2 == 0 else snapshot)
            samples["gone"].append(time.perf_counter() - start)
            await pilot.pause()
        for _ in range(runs):
            start = time.perf_counter()
            screen.show_queue(await asyncio.to_thread(link.queue))
            samples["cycle"].append(time.perf_counter() - start)
            await pilot.pause()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--active", type=int, default=ACTIVE, help="rows in the queue view")
    args = parser.parse_args()
    active = args.active
    large = active >= LARGE_QUEUE
    paint_goal = LARGE_FIRST_PAINT_GOAL_MS if large else FIRST_PAINT_GOAL_MS
    refresh_goal = LARGE_REFRESH_GOAL_MS if large else None
    runs = 5 if args.quick else 15
    print(machine_note())
    with running_daemon(simulate_gpus=GPUS) as home:
        socket = home / "gbatchd.sock"
        sleepers = seed(socket, active)
        try:
            whole, peer = terminal_paint(home, runs, active)
            report_ms(
                f"TUI first paint, {active:,} active jobs, whole process "
                f"(`gbatch tui` on a {SIZE[0]}x{SIZE[1]} pty)",
                whole,
                paint_goal,
            )
            report_ms("  peer: a one-line textual app, same pty and interpreter", peer)
            print(
                f"  gbatch tui / peer: {median(whole) / median(peer):.2f}x; "
                f"gbatch's own share (median of the differences): "
                f"{median([w - p for w, p in zip(whole, peer, strict=True)]) * 1000:.1f} ms",
                flush=True,
            )
            totals, fetched = first_paint(socket, runs, active)
            report_ms(
                f"TUI first paint, {active:,} active jobs, in-process "
                f"(headless {SIZE[0]}x{SIZE[1]}, the read not overlapped)",
                totals,
                paint_goal,
            )
            report_ms("  of which start -> the `jobs` reply decoded", fetched)
            report_ms(
                "  of which the reply -> the painted frame",
                [total - part for total, part in zip(totals, fetched, strict=True)],
            )
            parts = asyncio.run(refresh_figures(socket, runs * 2, active))
            report_ms(f"  refresh: fetch {active:,} jobs (`jobs` request, decoded)", parts["fetch"])
            report_ms("  refresh: show_queue, nothing changed (UI thread)", parts["same"])
            report_ms("  refresh: show_queue, one job changed (UI thread)", parts["changed"])
            report_ms(
                "  refresh: show_queue, one job gone: rows reloaded (UI thread)", parts["gone"]
            )
            report_ms("  refresh: whole cycle, fetch + show_queue", parts["cycle"], refresh_goal)
        finally:
            cancel(socket, sleepers)


if __name__ == "__main__":
    main()
