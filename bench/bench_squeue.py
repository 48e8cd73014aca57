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
from dataclasses import dataclass
from pathlib import Path

from common import (
    GBATCH,
    finished_rows,
    gbatch_env,
    insert_jobs,
    machine_note,
    quick_help,
    report_ms,
    running_daemon,
    temp_home,
    time_process,
)

from gbatch.core.model import JobSpec, JobState
from gbatch.head.store import Store
from gbatch.protocol import requests
from gbatch.protocol.client import Client

SQUEUE_GOAL_MS = 60.0
GPUS = 16


@dataclass(frozen=True)
class Sizes:
    """The fixture's jobs: finished, held, the small queue, running (at most GPUS)."""

    finished: int = 99_000
    held: int = 984
    small: int = 100  # the second default-view figure: a typical lab's queue
    running: int = 16

    @property
    def total(self) -> int:
        """Every job stored."""
        return self.finished + self.held + self.running


QUICK = Sizes(finished=990, held=6, small=5, running=4)  # small > running
NOW = time.time()


def build_fixture(home: Path, sizes: Sizes) -> None:
    """Write the finished and held jobs into home's store (daemon stopped)."""
    path = home / "gbatch.db"
    store = Store(path)  # creates the schema at the current version
    spec = JobSpec(name="train", command=("python", "train.py", "--epochs", "90"), gpus=1)
    spec_json = json.dumps(spec.to_dict())
    store.close()
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    # Spread over the last month.
    insert_jobs(db, finished_rows(spec_json, sizes.finished, NOW - 30 * 86_400, 25.0, GPUS))
    db.execute("COMMIT")
    db.close()
    store = Store(path)
    me = pwd.getpwuid(os.getuid()).pw_name
    store.submit([spec] * sizes.held, os.getuid(), me, NOW, held=True)
    assert store.count() == sizes.finished + sizes.held
    store.close()


def start_running_jobs(socket: Path, running: int) -> list[int]:
    """Submit `running` one-GPU sleepers; wait until the daemon has started them all."""
    spec = JobSpec(name="sleeper", command=("sleep", "600"), gpus=1).to_dict()
    with Client(socket) as client:
        ids: list[int] = client.call(requests.Submit(spec=spec, count=running))["ids"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = [j["state"] for j in client.call(requests.ListJobs(ids=tuple(ids)))["jobs"]]
            if states.count("RUNNING") == running:
                return ids
            time.sleep(0.2)
    raise RuntimeError(f"the sleepers did not all start: {states}")


def cancel_jobs(socket: Path, ids: list[int]) -> None:
    """Cancel the sleepers and wait for them to end, so no run outlives the bench."""
    with Client(socket) as client:
        client.call(requests.Cancel(ids=tuple(ids)))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jobs = client.call(requests.ListJobs(ids=tuple(ids)))["jobs"]
            if all(JobState(j["state"]).is_final for j in jobs):
                return
            time.sleep(0.2)
    raise RuntimeError("the sleepers did not stop")


def squeue_round_trip(socket: Path, runs: int, active: int) -> list[float]:
    """The default squeue's request alone (its columns, as squeue_brief.list_jobs asks):
    send, daemon query and encode, receive, decode."""
    samples = []
    request = requests.ListJobs(brief=True, columns=True)
    with Client(socket) as client:
        client.call(requests.Ping())
        for _ in range(runs):
            start = time.perf_counter()
            reply = client.call(request)
            samples.append(time.perf_counter() - start)
    assert len(reply["columns"]["id"]) == active
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help(
            f"{QUICK.total:,} jobs, {QUICK.held + QUICK.running} active; 2 runs, 1 of the big "
            f"listings"
        ),
    )
    args = parser.parse_args()
    runs = 2 if args.quick else 30
    big_runs = 1 if args.quick else 3
    sizes = QUICK if args.quick else Sizes()
    active = sizes.held + sizes.running
    print(machine_note())
    with temp_home() as home:
        start = time.perf_counter()
        build_fixture(home, sizes)
        took = time.perf_counter() - start
        print(f"# fixture: {sizes.finished + sizes.held:,} jobs written in {took:.1f} s")
        with running_daemon(home, simulate_gpus=GPUS):
            socket = home / "gbatchd.sock"
            sleepers = start_running_jobs(socket, sizes.running)
            try:
                env = gbatch_env(home, GPUS)
                lines = subprocess.run(
                    [str(GBATCH), "squeue", "-h"], env=env, capture_output=True, check=True
                ).stdout.count(b"\n")
                assert lines == active, lines
                report_ms(
                    f"`gbatch squeue` (default view, {lines:,} active jobs of {sizes.total:,})",
                    time_process([str(GBATCH), "squeue"], env, runs),
                    SQUEUE_GOAL_MS,
                )
                report_ms(
                    "  of which the `jobs` request round trip (in-process client)",
                    squeue_round_trip(socket, runs, active),
                )
                # A lab's usual queue is smaller: cancel most held jobs (they stay in
                # the store as finished rows) and time the default view again.
                with Client(socket) as client:
                    held = [j["id"] for j in client.call(requests.ListJobs(states=("PD",)))["jobs"]]
                    client.call(requests.Cancel(ids=tuple(held[: active - sizes.small])))
                lines = subprocess.run(
                    [str(GBATCH), "squeue", "-h"], env=env, capture_output=True, check=True
                ).stdout.count(b"\n")
                assert lines == sizes.small, lines
                report_ms(
                    f"`gbatch squeue` (default view, {lines:,} active jobs of {sizes.total:,})",
                    time_process([str(GBATCH), "squeue"], env, runs),
                    SQUEUE_GOAL_MS,
                )
                lines = subprocess.run(
                    [str(GBATCH), "squeue", "-t", "all", "-h"],
                    env=env,
                    capture_output=True,
                    check=True,
                ).stdout.count(b"\n")
                assert lines == sizes.total, lines  # cancelled ones included
                report_ms(
                    f"`gbatch squeue -t all -h | wc -l` ({lines:,} lines)",
                    time_process([str(GBATCH), "squeue", "-t", "all", "-h"], env, big_runs),
                )
                report_ms(
                    f"`gbatch sacct -a -S all` ({sizes.total:,} jobs)",
                    time_process([str(GBATCH), "sacct", "-a", "-S", "all"], env, big_runs),
                )
            finally:
                cancel_jobs(socket, sleepers)


if __name__ == "__main__":
    main()
