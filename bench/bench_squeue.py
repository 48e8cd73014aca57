"""Whole-process `gbatch squeue` and `gbatch sacct` against a store of 100,000 jobs.

Run: `.venv/bin/python bench/bench_squeue.py [--quick]`.

The fixture, in a temp GBATCH_HOME, before the daemon starts:
  - 99,000 finished jobs (COMPLETED, with a few FAILED and CANCELLED), inserted with raw
    SQL in one transaction. This is a fixture shortcut: walking 99,000 jobs through
    PENDING -> CONFIGURING -> RUNNING -> COMPLETED with Store.set_state (one durable
    commit per step) would take minutes. Their events are left out; no figure here
    reads them;
  - 984 held PENDING jobs through Store.submit (one transaction).
Then the daemon starts (16 simulated GPUs) and 16 one-GPU `sleep` jobs are submitted
through it and left RUNNING: a RUNNING row written with SQL would be requeued by the
daemon's first tick, since no run backs it. They are cancelled before the daemon stops.

Figures: the default `gbatch squeue` (1,000 active jobs shown; goal <= 60 ms), the same
request's round trip without the process (in-process client, to split the cost), and,
without a goal, `gbatch squeue -t all -h` (all 100,000, piped and counted as `| wc -l`
would) and `gbatch sacct -a -S all`.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import sqlite3
import subprocess
import time
from pathlib import Path

from common import (
    GBATCH,
    gbatch_env,
    machine_note,
    report_ms,
    running_daemon,
    temp_home,
    time_process,
)

from gbatch.core.model import JobSpec, JobState
from gbatch.head.store import Store
from gbatch.protocol import wire
from gbatch.protocol.client import Client

SQUEUE_GOAL_MS = 60.0
FINISHED = 99_000
HELD = 984
SMALL_QUEUE = 100  # the second default-view figure: a typical lab's queue
RUNNING = 16
GPUS = 16
NOW = time.time()
USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")


def _finished_rows(spec_json: str) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for i in range(FINISHED):
        submit = NOW - 30 * 86_400 + i * 25.0  # spread over the last month
        start = submit + 5.0
        end = start + 60.0 + (i % 3600)
        state, code = "COMPLETED", 0
        if i % 50 == 0:
            state, code = "FAILED", 1
        elif i % 70 == 0:
            state, code = "CANCELLED", 0
        user = USERS[i % len(USERS)]
        uid = 1000 + i % len(USERS)
        job = (uid, user, f"train{i % 100}", spec_json, state, "", 0, submit)
        rows.append((*job, start, end, "local", str(i % GPUS), 1, code, 0))
    return rows


def build_fixture(home: Path) -> None:
    """Write the 99,000 finished and 984 held jobs into home's store (daemon stopped)."""
    path = home / "gbatch.db"
    store = Store(path)  # creates the schema at the current version
    spec = JobSpec(name="train", command=("python", "train.py", "--epochs", "90"), gpus=1)
    spec_json = json.dumps(spec.to_dict())
    store.close()
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    db.executemany(
        "INSERT INTO jobs (uid, user, name, spec, state, reason, held, submit_time,"
        " start_time, end_time, node, gpus, attempt, exit_code, exit_signal)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        _finished_rows(spec_json),
    )
    db.execute("COMMIT")
    db.close()
    store = Store(path)
    me = pwd.getpwuid(os.getuid()).pw_name
    store.submit([spec] * HELD, os.getuid(), me, NOW, held=True)
    assert store.count() == FINISHED + HELD
    store.close()


def start_running_jobs(socket: Path) -> list[int]:
    """Submit RUNNING one-GPU sleepers and wait until the daemon has started them all."""
    spec = JobSpec(name="sleeper", command=("sleep", "600"), gpus=1).to_dict()
    with Client(socket) as client:
        ids: list[int] = client.call(wire.Submit(spec=spec, count=RUNNING))["ids"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = [j["state"] for j in client.call(wire.ListJobs(ids=tuple(ids)))["jobs"]]
            if states.count("RUNNING") == RUNNING:
                return ids
            time.sleep(0.2)
    raise RuntimeError(f"the sleepers did not all start: {states}")


def cancel_jobs(socket: Path, ids: list[int]) -> None:
    """Cancel the sleepers and wait for them to end, so no run outlives the bench."""
    with Client(socket) as client:
        client.call(wire.Cancel(ids=tuple(ids)))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jobs = client.call(wire.ListJobs(ids=tuple(ids)))["jobs"]
            if all(JobState(j["state"]).is_final for j in jobs):
                return
            time.sleep(0.2)
    raise RuntimeError("the sleepers did not stop")


def squeue_round_trip(socket: Path, runs: int) -> list[float]:
    """The default squeue's request alone: send, daemon query and encode, receive, decode."""
    samples = []
    with Client(socket) as client:
        client.call(wire.Ping())
        for _ in range(runs):
            start = time.perf_counter()
            reply = client.call(wire.ListJobs())
            samples.append(time.perf_counter() - start)
    assert len(reply["jobs"]) == HELD + RUNNING
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    args = parser.parse_args()
    runs = 10 if args.quick else 30
    big_runs = 1 if args.quick else 3
    print(machine_note())
    with temp_home() as home:
        start = time.perf_counter()
        build_fixture(home)
        print(f"# fixture: {FINISHED + HELD:,} jobs written in {time.perf_counter() - start:.1f} s")
        with running_daemon(home, simulate_gpus=GPUS):
            socket = home / "gbatchd.sock"
            sleepers = start_running_jobs(socket)
            try:
                env = gbatch_env(home, GPUS)
                lines = subprocess.run(
                    [str(GBATCH), "squeue", "-h"], env=env, capture_output=True, check=True
                ).stdout.count(b"\n")
                assert lines == HELD + RUNNING, lines
                report_ms(
                    f"`gbatch squeue` (default view, {lines:,} active jobs of 100,000)",
                    time_process([str(GBATCH), "squeue"], env, runs),
                    SQUEUE_GOAL_MS,
                )
                report_ms(
                    "  of which the `jobs` request round trip (in-process client)",
                    squeue_round_trip(socket, runs),
                )
                # A lab's usual queue is smaller: cancel most held jobs (they stay in
                # the store as finished rows) and time the default view again.
                with Client(socket) as client:
                    held = [j["id"] for j in client.call(wire.ListJobs(states=("PD",)))["jobs"]]
                    client.call(wire.Cancel(ids=tuple(held[: HELD + RUNNING - SMALL_QUEUE])))
                lines = subprocess.run(
                    [str(GBATCH), "squeue", "-h"], env=env, capture_output=True, check=True
                ).stdout.count(b"\n")
                assert lines == SMALL_QUEUE, lines
                report_ms(
                    f"`gbatch squeue` (default view, {lines:,} active jobs of 100,000)",
                    time_process([str(GBATCH), "squeue"], env, runs),
                    SQUEUE_GOAL_MS,
                )
                lines = subprocess.run(
                    [str(GBATCH), "squeue", "-t", "all", "-h"],
                    env=env,
                    capture_output=True,
                    check=True,
                ).stdout.count(b"\n")
                assert lines == FINISHED + HELD + RUNNING, lines  # cancelled ones included
                report_ms(
                    f"`gbatch squeue -t all -h | wc -l` ({lines:,} lines)",
                    time_process([str(GBATCH), "squeue", "-t", "all", "-h"], env, big_runs),
                )
                report_ms(
                    "`gbatch sacct -a -S all` (100,000 jobs)",
                    time_process([str(GBATCH), "sacct", "-a", "-S", "all"], env, big_runs),
                )
            finally:
                cancel_jobs(socket, sleepers)


if __name__ == "__main__":
    main()
