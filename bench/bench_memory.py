"""gbatchd's memory with a large queue, and after large listings (issue 16, goal 5).

Run: `.venv/bin/python bench/bench_memory.py [--jobs 100000] [--kind plain|array|both]
[--checkout DIR ...] [--runs N] [--quick]` (~1 min a run at 100,000 on two busy
cores, several at 1,000,000).

The queue: `--jobs` pending jobs of one user (`--users N`: spread over N users, whose
first 1,000 each the loop's planning window holds), written once before any daemon starts:
plain jobs (10,000 specs a transaction, each its own row, as bench_bulk.py writes
them), or `--array=0-99999` arrays (each one's first tasks rows, the rest one record
until they start, as the submit handler stores it); both with the Store API. Each run copies
that store into a fresh GBATCH_HOME and starts `gbatch daemon start` with 2 simulated
GPUs, both taken by two `sleep` jobs submitted first, so every other job waits for
Resources, planned over every tick.

Then, in this order, the daemon's VmRSS (and its peak, VmHWM, reset through
/proc/PID/clear_refs before each request), each request sent as the CLI sends it
(in-process client, long timeout):
  - idle: after a few ticks of the loop over the whole queue;
  - `squeue` (the default listing: pending and running jobs, every user);
  - `squeue -t all` (every stored job, as columns);
  - `sacct -a -S all` (every stored job, as records);
  - settled: RSS again SETTLE seconds after the last reply, nothing asked meanwhile.
Each listing's RSS "after" is read one second after its reply has been read whole.

`--idle-only`: the idle figure alone (no listings).

With several `--checkout` directories (e.g. `--checkout /work/main --checkout .`), the
daemons run each checkout's code in turn, run after run (A, B, A, B, ...), on the same
store, so that the shared machine's noise falls on both alike. The 1-minute load
average is printed with each run.

Goals: RSS <= 150 MiB with 100,000 pending, <= 400 MiB with 1,000,000; after a large
listing, RSS comes back near where it was.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common import (
    GBATCH,
    REPO,
    daemon_pid,
    gbatch_env,
    machine_note,
    median,
    memory_kib,
    quick_help,
)

from gbatch.core.arrays import ARRAY_ROWS
from gbatch.core.limits import ARRAY_HARD_CAP
from gbatch.core.model import JobSpec, TaskArray
from gbatch.head.store import Store, Submission
from gbatch.protocol import requests
from gbatch.protocol.client import Client

GPUS = 2
ARRAY = 10_000  # specs per Store.submit (one transaction), as bench_bulk.py
SETTLE = 10.0  # seconds after the last listing before "settled" is read


@dataclass(frozen=True)
class Waits:
    """Seconds waited: loop ticks before "idle", after each listing's reply, before
    "settled"."""

    ticks: float = 5.0
    after: float = 1.0
    settle: float = SETTLE


QUICK_WAITS = Waits(ticks=1.0, after=0.2, settle=1.0)
GOALS_MIB = {100_000: 150.0, 1_000_000: 400.0}


def config(jobs: int) -> str:
    return (
        f"limits: {{max_pending_jobs: {jobs + 10}, max_array_size: {min(jobs, ARRAY_HARD_CAP)}}}\n"
    )


def start(home: Path, checkout: Path) -> None:
    env = gbatch_env(home, GPUS)
    env["PYTHONPATH"] = str(checkout)
    # From the checkout: the daemon runs as `python -m gbatch`, which puts its working
    # directory first on sys.path, before PYTHONPATH (from another checkout's root, that
    # one's code would run).
    subprocess.run(
        [str(GBATCH), "daemon", "start"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=checkout,
    )


def stop(home: Path, checkout: Path) -> None:
    env = gbatch_env(home, GPUS)
    env["PYTHONPATH"] = str(checkout)
    subprocess.run(
        [str(GBATCH), "daemon", "stop"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=checkout,
    )


def wait_running(sock: Path, count: int, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    with Client(sock, timeout=300) as client:
        while time.monotonic() < deadline:
            if len(client.call(requests.ListJobs(states=("R",), brief=True))["jobs"]) >= count:
                return
            time.sleep(0.2)
    raise RuntimeError(f"{count} jobs did not start within {timeout:g} s")


def build_plain(db: Path, jobs: int, users: int = 1) -> None:
    """The two sleeps, then `jobs` plain pending jobs, straight into the store: of one
    user, or in turn of `users` users (bench00, bench01, ...)."""
    store = Store(db)
    now = time.time()
    uid, user = os.getuid(), "bench"
    sleep = JobSpec(name="sleep", command=("sleep", "3600"), gpus=1, workdir="/tmp")
    store.submit([sleep, sleep], uid, user, now - 60)
    sweep = JobSpec(name="sweep", command=("python", "train.py"), gpus=1, workdir="/tmp")
    for first in range(0, jobs, ARRAY):
        for each in range(users):
            specs = [
                replace(sweep, env=(("GBATCH_ARRAY_TASK_ID", str(i)),))
                for i in range(first + each, min(first + ARRAY, jobs), users)
            ]
            store.submit(specs, uid, user if users == 1 else f"bench{each:02d}", now)
    store.close()


def build_array(db: Path, jobs: int) -> None:
    """The two sleeps, then `jobs` tasks as arrays of at most ARRAY_HARD_CAP (gbatch's
    cap per submit), each as the submit handler stores it: its first ARRAY_ROWS tasks
    as rows, the rest as one record (the array's tail)."""
    store = Store(db)
    now = time.time()
    uid, user = os.getuid(), "bench"
    sleep = JobSpec(name="sleep", command=("sleep", "3600"), gpus=1, workdir="/tmp")
    store.submit([sleep, sleep], uid, user, now - 60)
    for first in range(0, jobs, ARRAY_HARD_CAP):
        count = min(ARRAY_HARD_CAP, jobs - first)
        sweep = JobSpec(
            name="sweep",
            command=("python", "train.py"),
            gpus=1,
            workdir="/tmp",
            array=TaskArray.of_text(f"0-{count - 1}"),
        )
        specs = tuple(
            replace(sweep, array_task=i, array_pos=i) for i in range(min(count, ARRAY_ROWS))
        )
        tail = count if count > ARRAY_ROWS else 0
        store.submit_many([Submission(specs, uid, user, tail_count=tail)], now)
    store.close()


LISTINGS = (
    ("squeue", requests.ListJobs(brief=True, columns=True)),
    ("squeue -t all", requests.ListJobs(history=True, brief=True, columns=True)),
    ("sacct -a -S all", requests.ListJobs(history=True, brief=True)),
)


def one_run(
    template: Path, checkout: Path, jobs: int, idle_only: bool = False, waits: Waits = Waits()
) -> dict[str, Any]:
    """One daemon over a copy of `template`: its RSS idle, around each listing, settled."""
    home = Path(f"/tmp/gbm-{os.getpid()}-{time.monotonic_ns() % 10**6}")
    home.mkdir(mode=0o700)
    figures: dict[str, Any] = {"load": os.getloadavg()[0]}
    try:
        shutil.copy(template, home / "gbatch.db")
        (home / "config.yaml").write_text(config(jobs))
        start(home, checkout)
        sock = home / "gbatchd.sock"
        try:
            began = time.monotonic()
            wait_running(sock, GPUS)
            figures["started"] = time.monotonic() - began
            pid = daemon_pid(home)
            time.sleep(waits.ticks)  # a few ticks of the loop over the whole queue
            figures["idle"] = memory_kib(pid, "VmRSS")
            for what, request in () if idle_only else LISTINGS:
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
                began = time.monotonic()
                with Client(sock, timeout=900) as client:
                    reply = client.call(request)
                took = time.monotonic() - began
                del reply
                time.sleep(waits.after)
                figures[what] = (took, memory_kib(pid, "VmHWM"), memory_kib(pid, "VmRSS"))
            if not idle_only:
                time.sleep(waits.settle)
                figures["settled"] = memory_kib(pid, "VmRSS")
        finally:
            with Client(sock, timeout=300) as client:
                client.call(requests.Cancel(ids=(1, 2)))  # the sleeps: they outlive the daemon
            stop(home, checkout)
            time.sleep(0.5)  # the sleeps' SIGTERM lands before their run dirs go
    finally:
        shutil.rmtree(home, ignore_errors=True)
    figures["load"] = (figures["load"] + os.getloadavg()[0]) / 2
    if idle_only:
        print(
            f"  run ({checkout}): sleeps running after {figures['started']:.0f} s; RSS MiB "
            f"idle {mib(figures['idle'])}; load {figures['load']:.1f}",
            flush=True,
        )
        return figures
    listed = ", ".join(
        f"{what} {figures[what][0]:.1f} s peak {mib(figures[what][1])} "
        f"after {mib(figures[what][2])}"
        for what, _ in LISTINGS
    )
    print(
        f"  run ({checkout}): sleeps running after {figures['started']:.0f} s; RSS MiB idle "
        f"{mib(figures['idle'])}; {listed}; settled {mib(figures['settled'])}; "
        f"load {figures['load']:.1f}",
        flush=True,
    )
    return figures


def mib(kib: float) -> str:
    return f"{kib / 1024:.0f}"


def report(
    kind: str, jobs: int, checkout: Path, runs: list[dict[str, Any]], waits: Waits = Waits()
) -> None:
    """The medians of `runs`: RSS idle, each listing's time, peak and after, settled."""
    goal = GOALS_MIB.get(jobs)
    idle = median([r["idle"] for r in runs])
    verdict = (
        ""
        if goal is None
        else f" (goal <= {goal:g} MiB: {'met' if idle / 1024 <= goal else 'MISSED'})"
    )
    loads = ", ".join(f"{r['load']:.1f}" for r in runs)
    print(f"{checkout}: {jobs:,} pending {kind} jobs; load {loads}", flush=True)
    print(f"  RSS idle: {mib(idle)} MiB{verdict}", flush=True)
    if "settled" not in runs[0]:  # --idle-only
        return
    for what, _ in LISTINGS:
        took = median([r[what][0] for r in runs])
        peak = median([r[what][1] for r in runs])
        after = median([r[what][2] for r in runs])
        print(
            f"  {what}: {took:.1f} s, peak {mib(peak)} MiB, {mib(after)} MiB "
            f"{waits.after:g} s after",
            flush=True,
        )
    print(
        f"  RSS settled {waits.settle:g} s later: {mib(median([r['settled'] for r in runs]))} MiB",
        flush=True,
    )
    print(f"  (medians of {len(runs)} runs)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument(
        "--quick", action="store_true", help=quick_help("1,000 jobs of each kind, short waits")
    )
    parser.add_argument("--kind", choices=("plain", "array", "both"), default="both")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--users", type=int, default=1, help="plain jobs spread over N users")
    parser.add_argument("--idle-only", action="store_true", help="no listings: idle RSS only")
    parser.add_argument(
        "--checkout",
        action="append",
        type=Path,
        help="a checkout whose daemon to measure (repeat to compare; default: this one)",
    )
    args = parser.parse_args()
    waits = QUICK_WAITS if args.quick else Waits()
    if args.quick:
        args.jobs = 1_000
    checkouts = [c.resolve() for c in args.checkout or [REPO]]
    print(machine_note(), flush=True)
    kinds = ("plain", "array") if args.kind == "both" else (args.kind,)
    for kind in kinds:
        fixture = Path(f"/tmp/gbm-fixture-{os.getpid()}")
        fixture.mkdir(mode=0o700)
        try:
            began = time.monotonic()
            if kind == "plain":
                build_plain(fixture / "gbatch.db", args.jobs, args.users)
            else:
                build_array(fixture / "gbatch.db", args.jobs)
            took = time.monotonic() - began
            print(f"fixture: {args.jobs:,} pending {kind} jobs in {took:.0f} s", flush=True)
            results: dict[Path, list[dict[str, Any]]] = {c: [] for c in checkouts}
            for _ in range(args.runs):
                for checkout in checkouts:
                    results[checkout].append(
                        one_run(fixture / "gbatch.db", checkout, args.jobs, args.idle_only, waits)
                    )
            for checkout in checkouts:
                report(kind, args.jobs, checkout, results[checkout], waits)
        finally:
            shutil.rmtree(fixture, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
