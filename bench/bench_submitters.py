"""Many submitter processes at once against one daemon while its planner works.

Run: `.venv/bin/python bench/bench_submitters.py [--submitters 32] [--each 500] [--quick]`.
One daemon (8 simulated GPUs) in a temp GBATCH_HOME. Each submitter is a process with
its own connection (gbatch.protocol.client.Client); they connect one at a time, then start
together. Each submits `--each` one-GPU jobs, one request per job; one job in ten is
runnable (`true`), the rest held, so the scheduler plans and the dispatcher starts runs
throughout. Each submitter counts the ids acknowledged, times each request, and keeps
every error message ("database is locked" counted apart).

Afterwards the store is read back with `gbatch sacct -a -S all` and compared with the
acknowledged ids. Figures: stored and acknowledged jobs, duplicate ids, acknowledged
ids missing from the store, "database is locked" (replies, and the daemon's own log,
where a failing loop step would show it), other errors and tracebacks in that log,
submits/s over the whole burst, and the latency of one submit request. Goal: every job
stored once, no lock errors.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pwd
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from common import (
    GBATCH,
    gbatch_env,
    machine_note,
    quick_help,
    report_ms,
    report_rate,
    running_daemon,
)

from gbatch.protocol import requests
from gbatch.protocol.client import Client, DaemonUnavailable, RequestFailed

GPUS = 8
RUNNABLE_EVERY = 10  # one job in this many is not held
SPEC: dict[str, Any] = {"name": "burst", "command": ["true"], "gpus": 1}
LOCKED = "database is locked"


@dataclass
class Outcome:
    """What one submitter saw."""

    ids: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _submitter(socket: Path, each: int, go: Any, results: Connection) -> None:
    outcome = Outcome()
    with Client(socket, timeout=120) as client:
        client.call(requests.Ping())  # connect before the clock starts
        results.send("ready")
        go.wait()
        for n in range(each):
            before = time.perf_counter()
            try:
                reply = client.call(requests.Submit(spec=SPEC, held=n % RUNNABLE_EVERY != 0))
            except RequestFailed as err:
                outcome.errors.append(err.message)
                continue
            except DaemonUnavailable as err:
                outcome.errors.append(str(err))
                break  # the connection is gone; what follows would say the same
            outcome.latencies.append(time.perf_counter() - before)
            outcome.ids.extend(reply["ids"])
    results.send(outcome)


def submit_burst(socket: Path, submitters: int, each: int) -> tuple[list[Outcome], float]:
    """Every submitter's outcome, and the seconds from the start signal to the last."""
    context = mp.get_context("fork")
    go = context.Event()
    pipes = [context.Pipe(duplex=False) for _ in range(submitters)]
    workers = [
        context.Process(target=_submitter, args=(socket, each, go, send))
        for _receive, send in pipes
    ]
    # One at a time: a burst of connects can overflow the daemon's listen backlog;
    # this is about submits on open connections (as in bench_submit.py).
    for worker, (receive, send) in zip(workers, pipes, strict=True):
        worker.start()
        send.close()  # the child's copy remains: its death reads as EOFError, not a hang
        assert receive.recv() == "ready"
    start = time.perf_counter()
    go.set()
    outcomes = [receive.recv() for receive, _send in pipes]
    elapsed = time.perf_counter() - start
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError(f"a submitter process exited {worker.exitcode}")
    return outcomes, elapsed


def stored_ids(home: Path) -> list[int]:
    """Every job id the store holds, through the same read path users have (-X: jobs,
    not their N.batch lines)."""
    done = subprocess.run(
        [str(GBATCH), "sacct", "-X", "-a", "-S", "all", "-n", "-P", "-o", "JobID"],
        env=gbatch_env(home, GPUS),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return [int(line) for line in done.stdout.split()]


def started_count(home: Path) -> int:
    """Jobs that got as far as a run (the dispatcher worked during the burst)."""
    done = subprocess.run(
        [str(GBATCH), "sacct", "-X", "-a", "-S", "all", "-n", "-P", "-o", "State"],
        env=gbatch_env(home, GPUS),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    states = Counter(done.stdout.split())
    return sum(n for state, n in states.items() if state not in ("PENDING", "CANCELLED"))


def drain(home: Path) -> tuple[int, float]:
    """Cancel every active job in one request and let the running ones end before the
    daemon stops: runs outlive their daemon by design, and their home is about to be
    removed. Returns (jobs cancelled, seconds the request took).

    Through a client with a long timeout, not `gbatch scancel --me`: the CLI gives up
    after 30 s, and cancelling 16,000 jobs took longer before sweeps cancelled pending
    jobs by batch (issue 13, item 5).
    """
    me = pwd.getpwuid(os.getuid()).pw_name
    start = time.perf_counter()
    with Client(home / "gbatchd.sock", timeout=600) as client:
        cancelled = int(client.call(requests.Cancel(users=(me,)))["done"])
    took = time.perf_counter() - start
    env = gbatch_env(home, GPUS)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        active = subprocess.run(
            [str(GBATCH), "squeue", "-h"], env=env, capture_output=True, text=True, timeout=60
        ).stdout
        if not active.strip():
            break
        time.sleep(0.5)
    return cancelled, took


def report_count(what: str, value: int, goal: int | None = None) -> None:
    """Print `<what>: N (goal = G, met)`, the count twin of common.report_ms."""
    if goal is None:
        print(f"{what}: {value:,} (no goal)", flush=True)
        return
    verdict = "met" if value == goal else "MISSED"
    print(f"{what}: {value:,} (goal = {goal:,}, {verdict})", flush=True)


def print_first_traceback(log: str, context: int = 25) -> None:
    """The first traceback in the daemon's log, as comment lines (what went wrong)."""
    lines = log.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("Traceback"):
            for shown in lines[max(0, number - 6) : number + context]:
                print(f"#   {shown}")
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submitters", type=int, default=32, help="processes (default 32)")
    parser.add_argument("--each", type=int, default=500, help="jobs per submitter (500)")
    parser.add_argument("--quick", action="store_true", help=quick_help("4 submitters x 10 jobs"))
    args = parser.parse_args()
    submitters, each = (4, 10) if args.quick else (args.submitters, args.each)
    expected = submitters * each
    print(machine_note())
    print(
        f"# {submitters} submitter processes x {each} jobs, 1 in {RUNNABLE_EVERY} runnable "
        f"(`true`, 1 of {GPUS} simulated GPUs), the rest held",
        flush=True,
    )

    with running_daemon(simulate_gpus=GPUS) as home:
        outcomes, elapsed = submit_burst(home / "gbatchd.sock", submitters, each)
        started = started_count(home)
        stored = stored_ids(home)
        cancelled, cancel_took = drain(home)
        daemon_log = (home / "gbatchd.log").read_text(errors="replace")

    acknowledged = [job_id for o in outcomes for job_id in o.ids]
    errors = [message for o in outcomes for message in o.errors]
    lock_errors = [message for message in errors if LOCKED in message]
    report_count("stored jobs (sacct -a -S all)", len(stored), expected)
    report_count("acknowledged jobs", len(acknowledged), expected)
    report_count("duplicate ids among acknowledged", len(acknowledged) - len(set(acknowledged)), 0)
    report_count("duplicate ids in the store", len(stored) - len(set(stored)), 0)
    report_count("acknowledged but not stored", len(set(acknowledged) - set(stored)), 0)
    report_count(f'"{LOCKED}" replies', len(lock_errors), 0)
    report_count(f'"{LOCKED}" in the daemon log', daemon_log.count(LOCKED), 0)
    report_count("other errors", len(errors) - len(lock_errors), 0)
    report_count("tracebacks in the daemon log", daemon_log.count("Traceback"), 0)
    print_first_traceback(daemon_log)
    for message, count in Counter(e for e in errors if LOCKED not in e).most_common(5):
        print(f"#   {count} x {message}")
    report_count("runnable jobs started by the end of the burst", started)
    report_rate(
        f"submits, {submitters} processes at once (whole burst)",
        [len(acknowledged) / elapsed],
        "jobs/s",
    )
    report_ms("latency of one submit request", [s for o in outcomes for s in o.latencies])
    report_ms(f"afterwards: one cancel request for all {cancelled:,} active jobs", [cancel_took])


if __name__ == "__main__":
    main()
