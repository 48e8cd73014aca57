"""Bulk work on 500,000 jobs: one user's `scancel --me` (and `scontrol hold`/`release`
of the range) while another user's `squeue --me` keeps being answered; the daemon's
memory with 500,000 stored jobs.

Run as root (it makes two throw-away Unix users and removes them afterwards):
`.venv/bin/python bench/bench_bulk.py [--jobs 500000] [--runs 3] [--listing] [--quick]`
(~6 min for 3 runs of 500,000 on two busy cores; --quick: 1 run of 1,000, ~15 s).

The fixture is written once with the Store API before any daemon starts (the same
transactions and event rows a submit writes, without the socket): the other user's two
one-GPU `sleep` jobs, submitted first, then the student's jobs as arrays of 10,000 (one
GPU each, `GBATCH_ARRAY_TASK_ID` in each spec's env, as `sbatch --array` makes them).
Each run copies that store into a fresh GBATCH_HOME (0711, socket 666) and starts
`gbatch daemon start` with 2 simulated GPUs: the other user's sleeps take both, and the
student's jobs all wait for Resources, runnable, as in the abuse that prompted this.
(Written to the store directly, so no submit-time limit applies. If a later gbatch
also applies `limits:` to jobs already stored, this bench's config.yaml needs
`limits: {max_pending_jobs: 1000000, max_array_size: 100001}`; today that key is
unknown and refused, so it is not written.)

Then, as the student, each timed inside the student's own process (`gbatch.cli` main,
no interpreter start-up), in this order: `gbatch scontrol hold FIRST-LAST`, `gbatch
scontrol release FIRST-LAST`, `gbatch scancel --me`; before them, 5 s of nothing (the
baseline for the squeue figures). During each, the other user runs
`gbatch squeue --me` five times a second (each its own connection; the next one at
once when one takes longer), and every call that started while the operation ran
counts. The daemon's RSS (VmRSS) is read after the loop has planned over the queue for
a few ticks, its peak (VmHWM, reset before each operation through
/proc/PID/clear_refs) during each operation, and RSS again at the end with all the jobs
stored and cancelled. With --listing, the first run then asks for every stored job in
one request (what `sacct -a -S all` sends) and prints its time and the daemon's peak.
The 1-minute load average around each operation is printed: on a shared machine it
says more about the figures than anything gbatch does.

Goals: cancel <= 10 s, squeue p99 <= 500 ms during it, RSS <= 400 MB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from common import (
    REPO,
    daemon_pid,
    machine_note,
    median,
    memory_kib,
    percentile,
    quick_help,
    report_ms,
    start_daemon,
    stop_daemon,
)

from gbatch.core.model import JobSpec
from gbatch.head.store import Store
from gbatch.protocol import requests
from gbatch.protocol.client import Client

sys.path.insert(0, str(REPO / "tests" / "integration"))
from asuser import User, as_user, preload, run_cli, temp_users

CANCEL_GOAL_MS = 10_000.0
SQUEUE_P99_GOAL_MS = 500.0
RSS_GOAL_MB = 400.0
ARRAY = 10_000  # tasks per submit, as one `sbatch --array` is (one transaction)
GPUS = 2
CONFIG = "socket_mode: '666'\n"
SQUEUE_EVERY = 0.2  # the other user's squeue: five a second
IDLE_SECONDS = 5.0  # squeues with no bulk work running: the baseline


def build_fixture(path: Path, student: User, other: User, jobs: int) -> float:
    """Write the other user's two sleeps, then the student's `jobs`; seconds it took."""
    store = Store(path)
    start = time.perf_counter()
    now = time.time()
    sleep = JobSpec(name="other", command=("sleep", "3600"), gpus=1, workdir="/tmp")
    store.submit([sleep, sleep], other.uid, other.name, now - 60)
    sweep = JobSpec(name="sweep", command=("python", "train.py"), gpus=1, workdir="/tmp")
    for first in range(0, jobs, ARRAY):
        tasks = [
            replace(sweep, env=(("GBATCH_ARRAY_TASK_ID", str(i)),))
            for i in range(min(ARRAY, jobs - first))
        ]
        store.submit(tasks, student.uid, student.name, now)
    store.close()
    return time.perf_counter() - start


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)


def wait_running(home: Path, count: int, timeout: float = 60.0) -> None:
    """Until `count` jobs run (the other user's sleeps), polling the daemon."""
    deadline = time.monotonic() + timeout
    with Client(home / "gbatchd.sock", timeout=60) as client:
        while time.monotonic() < deadline:
            running = client.call(requests.ListJobs(states=("R",), brief=True))["jobs"]
            if len(running) >= count:
                return
            time.sleep(0.2)
    raise RuntimeError(f"{count} jobs did not start within {timeout:g} s")


def counts(home: Path, user: str) -> dict[str, int]:
    """The user's jobs by state, read from the store (read-only) rather than through
    the daemon: a 500,000-line squeue is not what is measured here."""
    db = sqlite3.connect(f"file:{home / 'gbatch.db'}?mode=ro", uri=True, timeout=60)
    try:
        rows = db.execute(
            "SELECT state, held, count(*) FROM jobs WHERE user = ? GROUP BY state, held", (user,)
        ).fetchall()
    finally:
        db.close()
    return {f"{state}{' held' if held else ''}": n for state, held, n in rows}


def squeue_loop(home: Path, stop: Path) -> list[tuple[float, float]]:
    """`gbatch squeue --me` every SQUEUE_EVERY seconds (or as soon as the last one has
    answered, when it took longer) until `stop` exists: (start, seconds) each. Paced, not
    back to back: on two cores a loop of squeues would be half the machine's load."""
    samples: list[tuple[float, float]] = []
    while not stop.exists():
        start = time.monotonic()
        result = run_cli(home, "squeue", "--me")
        samples.append((start, time.monotonic() - start))
        if result["rc"] != 0:
            raise RuntimeError(f"squeue failed: {result['err']}")
        time.sleep(max(0.0, start + SQUEUE_EVERY - time.monotonic()))
    return samples


def timed_cli(home: Path, *argv: str) -> Callable[[], dict[str, Any]]:
    def action() -> dict[str, Any]:
        start = time.monotonic()
        result = run_cli(home, *argv)
        return {**result, "start": start, "seconds": time.monotonic() - start}

    return action


def idle(seconds: float) -> Callable[[], dict[str, Any]]:
    """The student doing nothing for `seconds`: the squeue figures' baseline."""

    def action() -> dict[str, Any]:
        start = time.monotonic()
        time.sleep(seconds)
        return {"rc": 0, "start": start, "seconds": time.monotonic() - start}

    return action


def while_squeued(
    home: Path, student: User, other: User, action: Callable[[], dict[str, Any]]
) -> tuple[float, list[float], int]:
    """Run `action` (timed_cli's) as the student while the other user squeues: its
    seconds, the squeue latencies that started during it, the daemon's peak RSS (KiB)."""
    pid = daemon_pid(home)
    stop = home / "stop-squeue"
    stop.unlink(missing_ok=True)
    found: dict[str, Any] = {}

    def squeue_as_other() -> None:
        try:
            found["samples"] = as_user(other, lambda: squeue_loop(home, stop), timeout=900)
        except AssertionError as err:
            found["error"] = err

    sampler = threading.Thread(target=squeue_as_other)
    reset_peak(pid)
    sampler.start()
    time.sleep(0.5)  # the sampler's first squeue is under way before the command starts
    try:
        result = as_user(student, action, timeout=900)
    finally:
        stop.touch()
        sampler.join()
    if "error" in found:
        raise found["error"]
    if result["rc"] != 0:
        raise RuntimeError(f"the student's command exited {result['rc']}: {result['err']}")
    began, took = result["start"], result["seconds"]
    during = [s for t, s in found["samples"] if began <= t <= began + took]
    return took, during, memory_kib(pid, "VmHWM")


def full_listing(home: Path, pid: int) -> tuple[float, int, int]:
    """Every stored job in one `jobs` request, as `gbatch sacct -a -S all` asks for them
    (with a long timeout: the CLI's 30 s is not enough): seconds, the daemon's peak RSS
    and its RSS a second after (KiB)."""
    reset_peak(pid)
    start = time.monotonic()
    with Client(home / "gbatchd.sock", timeout=900) as client:
        reply = client.call(requests.ListJobs(history=True, brief=True))
    took = time.monotonic() - start
    del reply
    time.sleep(1.0)
    return took, memory_kib(pid, "VmHWM"), memory_kib(pid, "VmRSS")


def one_run(
    template: Path,
    student: User,
    other: User,
    jobs: int,
    listing: bool,
    idle_seconds: float = IDLE_SECONDS,
    settle_seconds: float = 3.0,
) -> dict[str, Any]:
    """One daemon over a copy of `template`: its RSS, and the timed bulk operations with
    the other user's squeues during each (`settle_seconds` of loop ticks first)."""
    figures: dict[str, Any] = {}
    home = Path(f"/tmp/gbb-{os.getpid()}-{time.monotonic_ns() % 10**6}")
    home.mkdir(mode=0o711)
    home.chmod(0o711)  # others reach the socket, list nothing
    try:
        shutil.copy(template, home / "gbatch.db")
        (home / "config.yaml").write_text(CONFIG)
        start_daemon(home, GPUS)
        try:
            wait_running(home, 2)
            pid = daemon_pid(home)
            time.sleep(settle_seconds)  # a few ticks of the loop over the whole queue
            figures["rss_pending"] = memory_kib(pid, "VmRSS")
            span = counts(home, student.name)
            assert span == {"PENDING": jobs}, span
            first = 3  # the other user's two jobs are 1 and 2
            ids = f"{first}-{first + jobs - 1}"
            for op, action in (
                ("idle", idle(idle_seconds)),
                ("hold", timed_cli(home, "scontrol", "hold", ids)),
                ("release", timed_cli(home, "scontrol", "release", ids)),
                ("cancel", timed_cli(home, "scancel", "--me")),
            ):
                load = os.getloadavg()[0]
                took, during, peak = while_squeued(home, student, other, action)
                figures[f"{op}_load"] = (load + os.getloadavg()[0]) / 2
                figures[op] = took
                figures[f"{op}_squeue"] = during
                figures[f"{op}_peak"] = peak
                if op == "hold":
                    assert counts(home, student.name) == {"PENDING held": jobs}
            assert counts(home, student.name) == {"CANCELLED": jobs}, counts(home, student.name)
            figures["rss_after"] = memory_kib(pid, "VmRSS")
            if listing:
                figures["listing"] = full_listing(home, pid)
        finally:
            with Client(home / "gbatchd.sock", timeout=60) as client:
                client.call(requests.Cancel(users=(other.name,)))
            stop_daemon(home)
            time.sleep(0.5)  # the sleeps' SIGTERM lands before their run dirs go
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return figures


def report_latency(what: str, samples: list[float], goal_ms: float | None) -> None:
    """`<what>: p50 X ms, p99 Y ms (goal p99 <= G ms; N samples)`."""
    if not samples:
        print(f"{what}: no samples", flush=True)
        return
    p50, p99 = median(samples) * 1000, percentile(samples, 0.99) * 1000
    goal = f"goal p99 <= {goal_ms:g} ms" if goal_ms is not None else "no goal"
    verdict = "" if goal_ms is None else (", met" if p99 <= goal_ms else ", MISSED")
    print(
        f"{what}: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(samples) * 1000:.1f} ms "
        f"({goal}{verdict}; {len(samples)} samples)",
        flush=True,
    )


def report_mb(what: str, kib: list[int], goal_mb: float | None) -> None:
    mb = [k / 1024 for k in kib]
    goal = f"goal <= {goal_mb:g} MB" if goal_mb is not None else "no goal"
    verdict = "" if goal_mb is None else (", met" if median(mb) <= goal_mb else ", MISSED")
    print(
        f"{what}: median {median(mb):.0f} MB, max {max(mb):.0f} MB "
        f"({goal}{verdict}; {len(mb)} samples)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help("1 run of 1,000 jobs, 1 s idle, 1 s of loop ticks"),
    )
    parser.add_argument(
        "--listing",
        action="store_true",
        help="then list every stored job once (first run only; ~30 s and ~1 GB at 500,000)",
    )
    args = parser.parse_args()
    idle_seconds, settle_seconds = IDLE_SECONDS, 3.0
    if args.quick:
        args.jobs, args.runs, idle_seconds, settle_seconds = 1_000, 1, 1.0, 1.0
    if os.getuid() != 0:
        sys.exit("bench_bulk.py: error: run it as root: it acts as two throw-away users")
    print(machine_note())
    preload()
    with temp_users("gbb", ["student", "other"]) as users:
        student, other = users["student"], users["other"]
        fixture = Path(f"/tmp/gbb-fixture-{os.getpid()}")
        fixture.mkdir(mode=0o700)
        try:
            filled = build_fixture(fixture / "gbatch.db", student, other, args.jobs)
            print(f"fixture: {args.jobs:,} pending jobs written in {filled:.1f} s", flush=True)
            runs = [
                one_run(
                    fixture / "gbatch.db",
                    student,
                    other,
                    args.jobs,
                    args.listing and i == 0,
                    idle_seconds,
                    settle_seconds,
                )
                for i in range(args.runs)
            ]
        finally:
            shutil.rmtree(fixture, ignore_errors=True)
    n = f"{args.jobs:,}"
    report_mb(f"daemon RSS, {n} pending jobs stored", [r["rss_pending"] for r in runs], RSS_GOAL_MB)
    report_latency(
        f"other user's squeue --me, no bulk work running ({idle_seconds:g} s a run)",
        [s for r in runs for s in r["idle_squeue"]],
        None,
    )
    for op, goal in (("hold", None), ("release", None), ("cancel", CANCEL_GOAL_MS)):
        command = {"hold": "scontrol hold FIRST-LAST", "release": "scontrol release FIRST-LAST"}
        report_ms(f"{command.get(op, 'scancel --me')}, {n} jobs", [r[op] for r in runs], goal)
        report_latency(
            "  other user's squeue --me during it",
            [s for r in runs for s in r[f"{op}_squeue"]],
            SQUEUE_P99_GOAL_MS if op == "cancel" else None,
        )
        report_mb("  daemon peak RSS during it", [r[f"{op}_peak"] for r in runs], RSS_GOAL_MB)
        loads = ", ".join(f"{r[f'{op}_load']:.1f}" for r in runs)
        print(f"  load average (1 min) around it: {loads}", flush=True)
    after = [r["rss_after"] for r in runs]
    report_mb(f"daemon RSS after, {n} jobs stored (cancelled)", after, None)
    if "listing" in runs[0]:
        took, peak, rest = runs[0]["listing"]
        print(
            f"one listing of all {n} stored jobs (what sacct -a -S all asks): {took:.1f} s, "
            f"daemon peak RSS {peak / 1024:.0f} MB, {rest / 1024:.0f} MB after (1 sample)",
            flush=True,
        )


if __name__ == "__main__":
    main()
