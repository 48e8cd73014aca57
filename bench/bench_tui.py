"""`gbatch tui` with 10,000 (or --active N: 100,000) active jobs: first paint, and
the cost of one refresh; with --checkout, several checkouts' TUI in turn (A/B).

Run: `.venv/bin/python bench/bench_tui.py [--quick] [--active N] [--checkout DIR ...]`.

The fixture: one daemon (8 simulated GPUs, this checkout's code) with 8 one-GPU
`sleep` jobs RUNNING, one held array of 1,000 tasks, and held PENDING jobs until the
queue view has N rows (10,000 by default), all the caller's, so the queue view's
default filter (mine, any state) shows every one. The array's pending tasks beyond the
first few are one record (its tail, one row `N_[K-M]`, as squeue shows it), so most
rows are the single jobs. The jobs are written into the store before the daemon
starts (the Store API, 10,000 a transaction, each batch its own submit time), which
takes seconds where submitting 100,000 one by one took minutes; the daemon then
starts the sleepers. They are cancelled before the daemon stops (runs outlive their
daemon by design).

Each checkout (`--checkout DIR`, repeatable, e.g. /work/main and a branch's worktree;
default: this one) is timed in turn, round after round (A, B, A, B, ...), against the
same daemon, so that a busy spell of the shared machine falls on both alike. The
in-process figures run in a subprocess that imports that checkout's gbatch; the load
average is printed with each round.

- First paint, whole process (goal <= 400 ms; 500 ms at 100,000): what a user waits
  for. `gbatch tui` (the checkout's code on PYTHONPATH) is started on a fresh pty of
  160x48 (TERM=xterm-256color), and the figure is the time from the fork to the moment
  the terminal has received the counts line with "N shown" and the first sleeper's
  name. It includes the interpreter's start, the imports (textual's is most of it),
  the queue read and its decoding, the app's start, the cells, the table, layout,
  rendering and the write to the terminal. The app is then quit with `q`. A peer, a
  one-line textual app started the same way, is timed beside it: textual's floor.
- First paint, in-process: the same app headless (`App.run_test(size=(160, 48))`,
  as the Pilot tests run it), with a wrapper around `App._display` (where textual
  writes each frame to the terminal) that timestamps every frame and turns it into
  the terminal's bytes, the step a headless run skips. From entering `run_test` (no
  screen, no connection yet) to the end of the first frame that shows the same two
  texts, the table then counting all N rows: the import and the early read that
  `gbatch tui` overlaps with it are not in it, so the read is. Printed with its two
  parts: start -> the end of the app's first queue read (request, reply, decoding),
  and from there -> the frame. Each run starts after a gc.collect().
- One refresh (what the queue's timer does each second), the app already showing
  the rows, its own timer stopped so only the bench refreshes: the fetch (the app's
  read, off the UI thread as the app does it: `DaemonLink.queue`, every job, before
  the paged view; `DaemonLink.queue_page`, the page in view, after) and the UI
  thread's part (`QueueScreen.show_queue`) with nothing changed (the same read
  again), with one job changed (two reads alternated that differ in one held job's
  hold, so its reason cell changes), with one job gone (alternated with and without
  the middle job, as when a job ends), and the whole cycle as the app runs it (fetch,
  then show_queue), with the view at the top and scrolled to the middle of the queue,
  then at the top with a text filter (SEARCH, in the sleepers' names alone: the daemon
  searches every row), then sorted by NODE(REASON) (a computed cell) without it. The
  daemon runs this checkout's code whatever `--checkout` says: for the daemon's side of
  an A/B, run the bench from each checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import gc
import json
import os
import pty
import pwd
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from common import (
    GBATCH,
    REPO,
    gbatch_env,
    machine_note,
    median,
    quick_help,
    report_ms,
    running_daemon,
    temp_home,
)

# A worker (the in-process figures of one --checkout) imports that checkout's gbatch:
# common put this one first on the path.
_WORKER_CHECKOUT = os.environ.get("GBATCH_BENCH_CHECKOUT")
if _WORKER_CHECKOUT:
    sys.path.insert(0, _WORKER_CHECKOUT)

from gbatch.core.arrays import ARRAY_ROWS  # noqa: E402
from gbatch.core.model import JobSpec, JobState, TaskArray  # noqa: E402
from gbatch.head.store import Store, Submission  # noqa: E402
from gbatch.protocol import requests  # noqa: E402
from gbatch.protocol.client import Client  # noqa: E402
from gbatch.site.config import Paths  # noqa: E402
from gbatch.tui.app import GbatchApp, make_app  # noqa: E402
from gbatch.tui.queue import QueueScreen  # noqa: E402

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
# The refresh with a text filter searches for this: in the sleepers' NAME cells alone.
SEARCH = "sleep"


# -- fixture ------------------------------------------------------------------------


HELD_BATCH = 10_000


def build_store(home: Path, active: int) -> None:
    """Write the queue into home's store before the daemon starts: the sleepers
    (pending, the daemon starts them), the held array (its first ARRAY_ROWS tasks rows,
    the rest one record, as the submit handler stores it), then held single jobs,
    HELD_BATCH a transaction, until the queue lists `active` rows."""
    store = Store(Paths(home).store)
    uid, now = os.getuid(), time.time() - 3600
    sleeper = JobSpec(name="sleeper", command=("sleep", "600"), gpus=1)
    store.submit([sleeper] * RUNNING, uid, ME, now)
    held = JobSpec(name="train", command=("python", "train.py"), gpus=1)
    sweep = replace(held, array=TaskArray.of_text(f"0-{ARRAY_TASKS - 1}"))
    tasks = tuple(replace(sweep, array_task=i, array_pos=i) for i in range(ARRAY_ROWS))
    store.submit_many([Submission(tasks, uid, ME, held=True, tail_count=ARRAY_TASKS)], now)
    left = active - RUNNING - ARRAY_ROWS - 1  # the tail is one row
    for batch, first in enumerate(range(0, left, HELD_BATCH)):
        count = min(HELD_BATCH, left - first)
        store.submit([held] * count, uid, ME, now + batch, held=True)
    store.close()


def sleepers_running(socket: Path, active: int) -> list[int]:
    """Wait for the daemon to start the sleepers; their ids. Checks the queue's rows."""
    with Client(socket, timeout=120) as client:
        ids = list(range(1, RUNNING + 1))
        wait_states(client, ids, lambda states: states.count("RUNNING") == RUNNING)
        assert len(client.call(requests.ListJobs(columns=True))["columns"]["id"]) == active
    return ids


def cancel(socket: Path, ids: list[int]) -> None:
    """Cancel the sleepers and wait for them to end, so no run outlives the bench."""
    with Client(socket, timeout=120) as client:
        client.call(requests.Cancel(ids=tuple(ids)))
        wait_states(client, ids, lambda states: all(JobState(s).is_final for s in states))


def wait_states(client: Client, ids: list[int], done: Callable[[list[str]], bool]) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        states = [j["state"] for j in client.call(requests.ListJobs(ids=tuple(ids)))["jobs"]]
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


def read_method(app: GbatchApp) -> str:
    """The DaemonLink method the checkout's queue view reads with: `queue_page` (the
    page in view), or before it `queue` (every job)."""
    return "queue_page" if hasattr(app.services.link, "queue_page") else "queue"


async def read_queue(app: GbatchApp) -> Any:
    """What the app's refresh reads, read as it does (in a thread)."""
    link = app.services.link
    if read_method(app) == "queue_page":
        screen = queue_screen(app)
        window = screen.query_one("#jobs").wanted()  # type: ignore[attr-defined]
        return await asyncio.to_thread(link.queue_page, screen.view(), *window)  # type: ignore[attr-defined]
    return await asyncio.to_thread(link.queue)


async def one_first_paint(socket: Path, active: int) -> tuple[float, float]:
    """Seconds from entering run_test to the end of the first frame with the rows, and
    to the end of the first queue read (the reply decoded, nothing shown yet)."""
    app = make_app(socket, user=ME)
    clock = FrameClock(app)
    fetched: list[float] = []
    link = app.services.link
    name = read_method(app)
    fetch = getattr(link, name)

    def timed_fetch(*args: Any, **kwargs: Any) -> Any:
        read = fetch(*args, **kwargs)
        fetched.append(time.perf_counter())
        return read

    setattr(link, name, timed_fetch)
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


def terminal_paints(
    home: Path, checkout: Path, active: int, runs: int
) -> tuple[list[float], list[float]]:
    """`gbatch tui` of `checkout` showing the N rows, and the peer, `runs` times each,
    alternately, after one warm-up of each (caches)."""
    env = {**gbatch_env(home, simulate_gpus=GPUS), "PYTHONPATH": str(checkout)}
    marks = (f"{active} shown".encode(), b"sleeper")
    peer_file = home / "peer_app.py"
    peer_file.write_text(PEER_APP)
    peer = ([sys.executable, str(peer_file)], gbatch_env(home))
    tui_samples, peer_samples = [], []
    for run in range(runs + 1):
        tui = one_terminal_paint([str(GBATCH), "tui"], env, marks)
        floor = one_terminal_paint(*peer, (b"peer-painted",))
        if run:
            tui_samples.append(tui)
            peer_samples.append(floor)
    return tui_samples, peer_samples


def one_job_gone(snapshot: Any) -> Any:
    """`snapshot` (a read: QueuePage, or QueueSnapshot before it) without its middle
    job (as if it had ended)."""
    jobs = list(snapshot.jobs)
    del jobs[len(jobs) // 2]
    return replace(snapshot, jobs=tuple(jobs))


def one_job_changed(snapshot: Any) -> Any:
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
        name: []
        for name in (
            "fetch",
            "same",
            "changed",
            "gone",
            "cycle",
            "cycle_middle",
            "cycle_search",
            "cycle_where",
        )
    }
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: clock.first_showing(f"{active} shown"), "the first paint")
        screen = queue_screen(app)
        for _ in range(runs):
            start = time.perf_counter()
            read = await read_queue(app)
            samples["fetch"].append(time.perf_counter() - start)
        await pilot.pause()
        variants = {
            "same": (read, read),
            "changed": (one_job_changed(read), read),
            "gone": (one_job_gone(read), read),
        }
        for name, pair in variants.items():
            for i in range(runs):
                start = time.perf_counter()
                screen.show_queue(pair[i % 2])
                samples[name].append(time.perf_counter() - start)
                await pilot.pause()
        for name in ("cycle", "cycle_middle", "cycle_search", "cycle_where"):
            if name == "cycle_middle":  # the view in the middle of the queue
                screen.query_one("#jobs").scroll_to(y=active // 2, animate=False)
            elif name == "cycle_search":  # a text filter: every row searched
                screen.query_one("#jobs").scroll_to(y=0, animate=False)
                screen.filter = replace(screen.filter, text=SEARCH)
            elif name == "cycle_where":  # sorted by NODE(REASON), the filter cleared
                screen.filter = replace(screen.filter, text="")
                screen.sort_column = "where"
            if name != "cycle":
                await pilot.pause()
                screen.show_queue(await read_queue(app))  # the page there, once
                await pilot.pause()
            for _ in range(runs):
                start = time.perf_counter()
                screen.show_queue(await read_queue(app))
                samples[name].append(time.perf_counter() - start)
                await pilot.pause()
    return samples


def worker(socket: Path, active: int, paints: int, runs: int) -> None:
    """One round of the in-process figures of this process's gbatch, as JSON."""
    totals, fetched = first_paint(socket, paints, active)
    parts = asyncio.run(refresh_figures(socket, runs, active))
    print(json.dumps({"paint": totals, "fetched": fetched, **parts}))


def worker_round(
    checkout: Path, socket: Path, active: int, paints: int, runs: int
) -> dict[str, list[float]]:
    """worker() in a process of its own that imports `checkout`'s gbatch."""
    env = {**os.environ, "GBATCH_BENCH_CHECKOUT": str(checkout)}
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            str(socket),
            "--active",
            str(active),
            "--paints",
            str(paints),
            "--runs",
            str(runs),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    if done.returncode:
        raise RuntimeError(f"the worker of {checkout} failed: {done.stderr[-2000:]}")
    figures: dict[str, list[float]] = json.loads(done.stdout.splitlines()[-1])
    return figures


def report(checkout: Path, figures: dict[str, list[float]], active: int, large: bool) -> None:
    paint_goal = LARGE_FIRST_PAINT_GOAL_MS if large else FIRST_PAINT_GOAL_MS
    refresh_goal = LARGE_REFRESH_GOAL_MS if large else None
    print(f"\n## {checkout}", flush=True)
    whole, peer = figures["whole"], figures["peer"]
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
    totals, fetched = figures["paint"], figures["fetched"]
    report_ms(
        f"TUI first paint, {active:,} active jobs, in-process "
        f"(headless {SIZE[0]}x{SIZE[1]}, the read not overlapped)",
        totals,
        paint_goal,
    )
    report_ms("  of which start -> the queue read decoded", fetched)
    report_ms(
        "  of which the reply -> the painted frame",
        [total - part for total, part in zip(totals, fetched, strict=True)],
    )
    report_ms("  refresh: the read (request, reply, decoded)", figures["fetch"])
    report_ms("  refresh: show_queue, nothing changed (UI thread)", figures["same"])
    report_ms("  refresh: show_queue, one job changed (UI thread)", figures["changed"])
    report_ms("  refresh: show_queue, one job gone (UI thread)", figures["gone"])
    report_ms("  refresh: whole cycle, read + show_queue", figures["cycle"], refresh_goal)
    report_ms(
        "  refresh: whole cycle, the view in the middle of the queue",
        figures["cycle_middle"],
        refresh_goal,
    )
    for name, what in (
        ("cycle_search", f"a text filter ({SEARCH!r})"),
        ("cycle_where", "by NODE(REASON)"),
    ):
        if figures.get(name):
            report_ms(f"  refresh: whole cycle, {what}", figures[name], refresh_goal)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help=quick_help("1 round over 50 active jobs")
    )
    parser.add_argument("--active", type=int, default=ACTIVE, help="rows in the queue view")
    parser.add_argument(
        "--checkout", type=Path, action="append", help="a checkout to time (repeatable)"
    )
    parser.add_argument("--rounds", type=int, help="rounds (default 5; --quick 1)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # a daemon's socket
    parser.add_argument("--paints", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    active = 50 if args.quick else args.active
    if args.worker is not None:
        worker(args.worker, active, args.paints, args.runs)
        return
    checkouts = [path.resolve() for path in args.checkout or [REPO]]
    rounds = args.rounds or (1 if args.quick else 5)
    print(machine_note())
    figures: dict[Path, dict[str, list[float]]] = {path: {} for path in checkouts}
    with contextlib.ExitStack() as stack:
        home = stack.enter_context(temp_home())
        build_store(home, active)
        stack.enter_context(running_daemon(home, simulate_gpus=GPUS))
        socket = home / "gbatchd.sock"
        sleepers = sleepers_running(socket, active)
        try:
            for round_no in range(rounds):
                for checkout in checkouts:
                    load = os.getloadavg()[0]
                    got = worker_round(checkout, socket, active, args.paints, args.runs)
                    got["whole"], got["peer"] = terminal_paints(home, checkout, active, 1)
                    for name, values in got.items():
                        figures[checkout].setdefault(name, []).extend(values)
                    print(
                        f"# round {round_no + 1}, {checkout}: load {load:.1f}, "
                        f"in-process paint {median(got['paint']) * 1000:.0f} ms, "
                        f"cycle {median(got['cycle']) * 1000:.0f} ms",
                        flush=True,
                    )
        finally:
            cancel(socket, sleepers)
    for checkout in checkouts:
        report(checkout, figures[checkout], active, active >= LARGE_QUEUE)


if __name__ == "__main__":
    main()
