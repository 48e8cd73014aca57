"""Soak: 1,000 short jobs while gbatchd is SIGKILLed every few seconds and once at each
named crash point (gbatch/crashpoints.py), then a Jepsen-style count from a ledger the
jobs write themselves (tests/ledger.py): lost, duplicated, overlapping runs.

A submitter thread keeps a backlog of jobs queued through the daemon socket (a reply
is an acknowledgement: the job is committed). Meanwhile the main thread, at random
moments, either SIGKILLs the daemon and restarts it at once, or stops it and restarts
it with GBATCH_CRASH_AT=<point> so that it kills itself there, then restarts it clean.
Each crash point comes once, at a random place among the kills. At the end every job in
the store must be final; the ledger says whether each acknowledged job completed
exactly once, and SQLite's integrity_check (after every kill and at the end) whether the
store survived.

Recovery times, per kill: until the restarted daemon answers a `jobs` request (what
squeue sends), and until the first run the new daemon dispatched writes its start line.
For a crash point the kill time is when its death was seen (polled every 10 ms).

Run: .venv/bin/python bench/bench_soak.py [--quick] [--jobs N] [--kills N] [--seed S]
Prints figures; asserts nothing (tests/integration/test_random_kills.py is the test).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from common import GBATCH, REPO, gbatch_env, machine_note, report_ms, temp_home

sys.path.insert(0, str(REPO / "tests"))

from ledger import check, first_start_after, ledger_command, read_runs

from gbatch.client import Client, DaemonUnavailable, RequestFailed
from gbatch.config import Paths
from gbatch.crashpoints import POINTS
from gbatch.model import FINAL_STATES, JobState
from gbatch.store import Store

CONFIG = "tick_seconds: 0.2\nreport_interval: 0.2\nkill_grace_seconds: 1\n"
FINAL = {state.value for state in FINAL_STATES}
CRASH_TIMEOUT = 60.0  # an armed daemon that has not reached its point by then: skipped
DRAIN_TIMEOUT = 600.0  # after the last submit, for every job to become final


@dataclass(frozen=True)
class JobPlan:
    seconds: float
    gpus: int
    fail_first: bool

    def spec(self, ledger: Path) -> dict[str, object]:
        command = ledger_command(ledger, self.seconds, fail_first=self.fail_first)
        return {
            "name": "soak",
            "command": command,
            "gpus": self.gpus,
            "retries": 1 if self.fail_first else 0,
        }


@dataclass(frozen=True)
class Kill:
    what: str  # "SIGKILL" or the crash point's name
    at_wall: float  # time.time() of the kill (of its death being seen, for a point)
    answering_s: float  # kill -> the restarted daemon answered a `jobs` request


# -- the daemon -------------------------------------------------------------------------


class Head:
    """One daemon's home: start, kill, restart it, and ask it things."""

    def __init__(self, home: Path, gpus: int) -> None:
        self.home = home
        self.paths = Paths(home)
        self.env = gbatch_env(home, gpus)

    def start(self, crash_at: str | None = None) -> bool:
        """`gbatch daemon start`; False when it did not answer (an armed daemon may die
        before its socket answers)."""
        env = {**self.env, "GBATCH_CRASH_AT": crash_at} if crash_at else self.env
        done = subprocess.run(
            [str(GBATCH), "daemon", "start"], env=env, capture_output=True, text=True
        )
        return done.returncode == 0

    def stop(self) -> None:
        subprocess.run([str(GBATCH), "daemon", "stop"], env=self.env, capture_output=True)

    def pid(self) -> int:
        return int(self.paths.lock.read_text().strip())

    def jobs(self) -> list[dict[str, object]]:
        """Every job in the store, active and finished (id, state, ...)."""
        with Client(self.paths.socket, timeout=30) as client:
            jobs: list[dict[str, object]] = client.call("jobs", history=True, brief=True)["jobs"]
        return jobs

    def wait_answering(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with Client(self.paths.socket, timeout=5) as client:
                    client.call("jobs", brief=True)
                return
            except DaemonUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def integrity(self) -> str:
        """PRAGMA integrity_check, read-only: no checkpoint on close, so the next daemon
        still recovers the WAL itself."""
        db = sqlite3.connect(f"file:{self.paths.store}?mode=ro", uri=True)
        try:
            return ", ".join(row[0] for row in db.execute("PRAGMA integrity_check"))
        finally:
            db.close()

    def kill_leftover_runs(self) -> None:
        for run_dir in self.paths.runs.glob("*.*"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                pids = json.loads((run_dir / "pids.json").read_text())
                os.killpg(int(pids["pgid"]), signal.SIGKILL)


def is_gone(pid: int) -> bool:
    """Dead and reaped, or a zombie nobody has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not is_gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# -- load -------------------------------------------------------------------------------


class Submitter(threading.Thread):
    """Submits every plan, keeping at most `backlog` acknowledged jobs unfinished (by
    the ledger). A daemon that is down is waited for; a submit whose connection died
    after the request went out is "in doubt" (the job may exist) and is not retried
    under the same id: the plan is submitted again as a new job."""

    def __init__(self, head: Head, ledger: Path, plans: list[JobPlan], backlog: int) -> None:
        super().__init__(name="submitter", daemon=True)
        self.head, self.ledger, self.plans, self.backlog = head, ledger, plans, backlog
        self.acknowledged: list[int] = []
        self.in_doubt = 0
        self.refused = 0
        self.stopping = threading.Event()

    def unfinished(self) -> int:
        try:
            lines = self.ledger.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            lines = []
        runs, _ = read_runs(lines)
        finished = {r.job for r in runs if r.completed}
        return len(set(self.acknowledged) - finished)

    def run(self) -> None:
        for plan in self.plans:
            while not self.stopping.is_set():
                if self.unfinished() >= self.backlog:
                    time.sleep(0.05)
                    continue
                job_ids = self._submit(plan)
                if job_ids is not None:
                    self.acknowledged.extend(job_ids)
                    break
                time.sleep(0.05)

    def _submit(self, plan: JobPlan) -> list[int] | None:
        """The new job's ids, or None when not acknowledged. Each submit gets a fresh
        connection that has answered a ping first: a connection that dies after that
        died with the submit in flight (in doubt), not before it was sent."""
        with Client(self.head.paths.socket, timeout=30) as client:
            try:
                client.call("ping")
            except DaemonUnavailable:
                return None  # down: not sent
            try:
                reply = client.call("submit", spec=plan.spec(self.ledger))
            except DaemonUnavailable:
                self.in_doubt += 1
                return None
            except RequestFailed:
                self.refused += 1
                return None
        return [int(i) for i in reply["ids"]]


def plan_jobs(rng: random.Random, count: int) -> list[JobPlan]:
    return [
        JobPlan(
            seconds=round(rng.uniform(0.2, 1.5), 2),
            gpus=1 if rng.random() < 0.5 else 0,
            fail_first=rng.random() < 0.15,
        )
        for _ in range(count)
    ]


# -- faults -----------------------------------------------------------------------------


def sigkill_and_restart(head: Head, integrity: list[str]) -> Kill:
    pid = head.pid()
    at_wall, at = time.time(), time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid, 30)
    integrity.append(head.integrity())
    head.start()
    head.wait_answering()
    return Kill("SIGKILL", at_wall, time.monotonic() - at)


def crash_at_point(head: Head, point: str, integrity: list[str]) -> Kill | None:
    """Restart the daemon armed at `point`, wait for it to die there, restart it clean.
    None when it did not reach the point within CRASH_TIMEOUT."""
    head.stop()
    before = head.pid()
    head.start(crash_at=point)
    pid = head.pid()
    died = pid != before and wait_gone(pid, CRASH_TIMEOUT)
    at_wall, at = time.time(), time.monotonic()
    if not died:
        head.stop()
    else:
        integrity.append(head.integrity())
    head.start()
    head.wait_answering()
    return Kill(point, at_wall, time.monotonic() - at) if died else None


def all_final(head: Head) -> bool:
    return all(job["state"] in FINAL for job in head.jobs())


# -- the run ----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 jobs, 6 kills")
    parser.add_argument("--jobs", type=int, help="jobs to submit (default 1,000)")
    parser.add_argument("--kills", type=int, help="random SIGKILLs (default 40)")
    parser.add_argument("--seed", type=int, help="default: random (printed)")
    parser.add_argument("--gpus", type=int, default=4, help="simulated GPUs (default 4)")
    parser.add_argument("--backlog", type=int, default=32, help="unfinished jobs at most")
    args = parser.parse_args()
    jobs = args.jobs or (100 if args.quick else 1000)
    kills_wanted = args.kills if args.kills is not None else (6 if args.quick else 40)
    gap = 2.0 if args.quick else 4.0  # seconds between faults: uniform(0.5, gap)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    print(machine_note())
    print(
        f"# soak: {jobs} jobs, {kills_wanted} random SIGKILLs + {len(POINTS)} crash points, "
        f"{args.gpus} simulated GPUs, backlog {args.backlog}, seed {seed}",
        flush=True,
    )
    faults = ["SIGKILL"] * kills_wanted + list(POINTS)
    rng.shuffle(faults)
    with temp_home("gbatch-soak-") as home:
        (home / "config.yaml").write_text(CONFIG)
        head = Head(home, args.gpus)
        ledger = home / "ledger"
        soak(head, ledger, plan_jobs(rng, jobs), faults, rng, args.backlog, gap)


def soak(
    head: Head,
    ledger: Path,
    plans: list[JobPlan],
    faults: list[str],
    rng: random.Random,
    backlog: int,
    gap: float,
) -> None:
    started = time.monotonic()
    integrity: list[str] = []
    kills: list[Kill] = []
    skipped: list[str] = []
    head.start()
    submitter = Submitter(head, ledger, plans, backlog)
    try:
        submitter.start()
        for fault in faults:
            time.sleep(rng.uniform(0.5, gap))
            if not submitter.is_alive() and all_final(head):
                skipped.append(fault)  # nothing left to disturb
                continue
            if fault == "SIGKILL":
                kills.append(sigkill_and_restart(head, integrity))
            elif (kill := crash_at_point(head, fault, integrity)) is not None:
                kills.append(kill)
            else:
                skipped.append(fault)
        submitter.join(DRAIN_TIMEOUT)  # lost jobs would hold its backlog forever
        submitter.stopping.set()
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while not all_final(head) and time.monotonic() < deadline:
            time.sleep(0.2)
        wall = time.monotonic() - started
        states = collections.Counter(str(job["state"]) for job in head.jobs())
        all_ids = [int(str(job["id"])) for job in head.jobs()]
    finally:
        submitter.stopping.set()
        head.stop()
        head.kill_leftover_runs()
    integrity.append(head.integrity())
    report(head, ledger, submitter, kills, skipped, integrity, states, all_ids, wall)


def report(
    head: Head,
    ledger: Path,
    submitter: Submitter,
    kills: list[Kill],
    skipped: list[str],
    integrity: list[str],
    states: collections.Counter[str],
    all_ids: list[int],
    wall: float,
) -> None:
    result = check(ledger, submitter.acknowledged)
    runs, _ = read_runs(ledger.read_text(errors="replace").splitlines())
    store = Store(head.paths.store)
    try:
        dispatches = [
            (event.time, event.job_id)
            for job_id in all_ids
            for event in store.events(job_id)
            if event.state is JobState.CONFIGURING
        ]
    finally:
        store.close()
    points = [k.what for k in kills if k.what != "SIGKILL"]
    bad_integrity = [i for i in integrity if i != "ok"]
    print(f"accepted: {result.acknowledged} jobs", flush=True)
    print(
        f"submits in doubt (the daemon died with the request in flight): "
        f"{submitter.in_doubt}; refused: {submitter.refused}"
    )
    print(f"finished: {result.finished} jobs (a completed run in the ledger)")
    print(f"lost: {len(result.lost)} {list(result.lost)[:20]}")
    print(f"duplicates: {len(result.duplicates)} {list(result.duplicates)[:20]}")
    print(f"overlap: {result.overlap_seconds:.3f} s")
    print(f"incomplete runs (a start, no end): {len(result.incomplete)}")
    print(f"jobs that ran without an acknowledgement: {len(result.unacknowledged)}")
    print(f"runs: {result.runs}; garbage ledger lines: {result.garbage}")
    print("final states: " + ", ".join(f"{s} {n}" for s, n in sorted(states.items())))
    print(
        f"kills: {len(kills)} ({len(kills) - len(points)} random SIGKILLs, "
        f"{len(points)} at crash points: {', '.join(points) or 'none'}); "
        f"skipped: {', '.join(skipped) or 'none'}"
    )
    if kills:
        report_ms("recovery, kill -> daemon answering", [k.answering_s for k in kills])
        to_start = [
            start - k.at_wall
            for k in kills
            if (start := first_start_after(runs, dispatches, k.at_wall)) is not None
        ]
        if to_start:
            report_ms("recovery, kill -> next job start", to_start)
    print(
        f"store integrity_check: {'ok' if not bad_integrity else bad_integrity[:3]} "
        f"({len(integrity)} checks: after each kill and at the end)"
    )
    print(f"total wall time: {wall:.1f} s", flush=True)


if __name__ == "__main__":
    main()
