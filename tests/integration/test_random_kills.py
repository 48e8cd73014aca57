"""The daemon SIGKILLed at random moments while short jobs come and go, and restarted
each time: no acknowledged job is lost, none runs twice or overlaps itself, every job
ends as its command implies, and the store stays intact.

Seeded: the seed is printed; GBATCH_TEST_SEED=<seed> replays the same jobs, waves and
kill delays (the moments the kills land still depend on the machine's timing).
The long version is bench/bench_soak.py.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from conftest import Head, is_gone, kill_leftover_jobs, make_head, wait_for
from ledger import Run, check, first_start_after, ledger_command, read_runs

from gbatch.core.model import FINAL_STATES, Event, JobState
from gbatch.head.store import Store
from gbatch.site.config import Paths

JOBS = 40
GPUS = 2
FINAL = {state.value for state in FINAL_STATES}


@dataclass(frozen=True)
class JobPlan:
    seconds: float
    gpus: bool
    fail_first: bool

    def sbatch_args(self, ledger: Path) -> list[str]:
        args = ["--wrap", ledger_command(ledger, self.seconds, fail_first=self.fail_first)]
        if self.gpus:
            args += ["--gpus", "1"]
        if self.fail_first:
            args += ["--retries", "1"]
        return args


@dataclass(frozen=True)
class Kill:
    at_wall: float  # time.time() just before the SIGKILL
    restart_wall: float  # time.time() as `gbatch daemon start` was called
    answering_s: float  # SIGKILL -> the restarted daemon answered `squeue`


def plan_jobs(rng: random.Random) -> list[JobPlan]:
    return [
        JobPlan(
            seconds=round(rng.uniform(0.2, 1.0), 2),
            gpus=rng.random() < 0.5,
            fail_first=rng.random() < 0.2,
        )
        for _ in range(JOBS)
    ]


def integrity(store: Path) -> str:
    """PRAGMA integrity_check on the store as it is, read-only (no checkpoint on close,
    so a restarted daemon still recovers the WAL itself)."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return ", ".join(row[0] for row in db.execute("PRAGMA integrity_check"))
    finally:
        db.close()


def kill_and_restart(head: Head, store: Path, rng: random.Random) -> Kill:
    """SIGKILL the daemon, check the store it left, restart it (sometimes after a
    pause, so runs end while nobody watches) and time it until `squeue` answers."""
    pid = head.daemon_pid()
    at_wall, at = time.time(), time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: is_gone(pid), 10, f"the daemon (pid {pid}) to die")
    assert integrity(store) == "ok"
    time.sleep(rng.choice((0.0, 0.0, rng.uniform(0.1, 0.8))))
    restart_wall = time.time()
    head.start()
    head.run("squeue", check=True)
    return Kill(at_wall, restart_wall, time.monotonic() - at)


def states(head: Head, ids: list[int]) -> dict[int, str]:
    out = head.run("squeue", "-t", "all", "-h", "-o", "%i %T", check=True).stdout
    wanted = set(ids)
    pairs = (line.split() for line in out.splitlines())
    return {int(job): state for job, state in pairs if int(job) in wanted}


def all_final(head: Head, ids: list[int]) -> dict[int, str] | None:
    """Every job's state once all are final (and listed), else None."""
    now = states(head, ids)
    done = len(now) == len(ids) and all(s in FINAL for s in now.values())
    return now if done else None


def first_change_after(events: list[Event], after: float) -> float | None:
    """The first recorded state change after `after`, submissions aside."""
    return min((e.time for e in events if e.time > after and e.reason != "submitted"), default=None)


def report_recovery(kills: list[Kill], events: list[Event], runs: list[Run]) -> None:
    """Printed, not asserted: timings depend on the machine."""
    dispatches = [(e.time, e.job_id) for e in events if e.state is JobState.CONFIGURING]
    answering, to_change, restart_to_change, to_start = [], [], [], []
    for k in kills:
        answering.append(k.answering_s)
        change = first_change_after(events, k.at_wall)
        if change is not None:
            to_change.append(change - k.at_wall)
            restart_to_change.append(max(0.0, change - k.restart_wall))
        start = first_start_after(runs, dispatches, k.at_wall)
        if start is not None:
            to_start.append(start - k.at_wall)
    for what, samples in (
        ("kill -> squeue answers", answering),
        ("kill -> first job state change", to_change),
        ("restart -> first job state change", restart_to_change),
        ("kill -> next run starts", to_start),
    ):
        if samples:
            print(
                f"recovery, {what}: median {statistics.median(samples) * 1000:.0f} ms, "
                f"max {max(samples) * 1000:.0f} ms ({len(samples)} kills)"
            )


def test_random_sigkills_lose_nothing_and_run_nothing_twice(tmp_path: Path) -> None:
    seed = int(os.environ.get("GBATCH_TEST_SEED") or random.randrange(2**32))
    print(f"\nGBATCH_TEST_SEED={seed}")
    rng = random.Random(seed)
    jobs = plan_jobs(rng)
    kills_wanted = rng.randint(4, 6)
    # One wave of jobs before each kill and one after the last, so runs are being
    # dispatched, running and ending whenever a kill lands.
    waves = [jobs[i :: kills_wanted + 1] for i in range(kills_wanted + 1)]
    head = make_head(tmp_path / "home", gpus=GPUS)
    store = Paths(head.home).store
    ledger = tmp_path / "ledger"
    head.start()
    acknowledged: list[int] = []
    kills: list[Kill] = []
    started = time.monotonic()
    try:
        for wave in waves[:-1]:
            acknowledged += [head.sbatch(*job.sbatch_args(ledger)) for job in wave]
            time.sleep(rng.uniform(0.05, 1.2))
            kills.append(kill_and_restart(head, store, rng))
        acknowledged += [head.sbatch(*job.sbatch_args(ledger)) for job in waves[-1]]
        final = wait_for(
            lambda: all_final(head, acknowledged), 60, "every job to reach a final state"
        )
        assert isinstance(final, dict)
        print(f"{len(kills)} kills, {len(acknowledged)} jobs, {time.monotonic() - started:.1f} s")
        head.stop()
        result = check(ledger, acknowledged)
        print(result.summary())
        assert result.ok, result.summary()
        assert result.incomplete == (), f"runs that never ended: {result.summary()}"
        assert result.unacknowledged == (), result.summary()
        assert {job: s for job, s in final.items() if s != "COMPLETED"} == {}
        assert integrity(store) == "ok"
        db = Store(store)
        try:
            events = [e for job in acknowledged for e in db.events(job)]
        finally:
            db.close()
        runs, _ = read_runs(ledger.read_text().splitlines())
        report_recovery(kills, events, runs)
    finally:
        head.stop()
        kill_leftover_jobs(head.home)
