"""Durable submits per second through gbatchd's socket.

Run: `.venv/bin/python bench/bench_submit.py [--quick]`. Every repetition gets a fresh
daemon in a temp GBATCH_HOME (2 simulated GPUs) so the repetitions do not slow each
other down with the held jobs they leave behind; one figure measures exactly that
effect on purpose (submits with 10,000 held jobs already queued). Jobs are submitted
held, so nothing runs while we measure. A submit is durable when its reply arrives
(SQLite WAL, synchronous=FULL, one commit per request).

Figures:
  (a) one client, sequential requests on one connection: submits/s, and the latency
      of one request;
  (b) 8 and 32 concurrent clients, each a process with its own connection;
  (c) one array request of 10,000 tasks: jobs/s;
  (d) (a) again with 10,000 held jobs already in the queue;
  (e) the whole process `gbatch sbatch --wrap true -H`.

`--queued N [--checkout DIR ...] [--runs R]` measures one figure instead: (a) with N held single
jobs already queued (each its own row, written into the store before the daemon
starts: submitting 100,000 one by one would take minutes), one daemon per checkout
(PYTHONPATH), the checkouts' runs alternating (A, B, A, B, ...).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from common import (
    GBATCH,
    REPO,
    cpu_seconds,
    daemon_pid,
    gbatch_env,
    load_average,
    machine_note,
    quick_help,
    report_ms,
    report_rate,
    running_daemon,
    temp_home,
    time_process,
)

from gbatch.core.model import JobSpec
from gbatch.protocol import requests
from gbatch.protocol.client import Client

SINGLE_GOAL = 2_000.0  # submits/s
ARRAY_GOAL = 20_000.0  # jobs/s
ARRAY_SIZE = 10_000
SPEC: dict[str, Any] = JobSpec(name="b", command=("/bin/true",)).to_dict()


def sequential_submits(socket: Path, count: int) -> tuple[float, list[float]]:
    """`count` submits on one connection: (submits/s, each request's latency in s)."""
    latencies: list[float] = []
    with Client(socket) as client:
        client.call(requests.Submit(spec=SPEC, held=True))  # connect, and warm the daemon's caches
        start = time.perf_counter()
        for _ in range(count):
            before = time.perf_counter()
            client.call(requests.Submit(spec=SPEC, held=True))
            latencies.append(time.perf_counter() - before)
        elapsed = time.perf_counter() - start
    return count / elapsed, latencies


def _client_worker(socket: Path, count: int, go: Any, ready: Connection) -> None:
    with Client(socket) as client:
        client.call(requests.Ping())  # connect before the clock starts
        ready.send("ready")
        go.wait()
        for _ in range(count):
            client.call(requests.Submit(spec=SPEC, held=True))
        ready.send("done")


def concurrent_submits(socket: Path, clients: int, per_client: int) -> float:
    """`clients` processes submit `per_client` jobs each at once: total submits/s.

    The clock runs from releasing the clients (all connected) to the last one done.
    """
    context = mp.get_context("fork")
    go = context.Event()
    pipes = [context.Pipe(duplex=False) for _ in range(clients)]
    workers = [
        context.Process(target=_client_worker, args=(socket, per_client, go, send))
        for _receive, send in pipes
    ]
    # One at a time: a burst of connects can overflow the daemon's listen backlog (see
    # bench/README.md); this figure is about submits on open connections.
    for worker, (receive, send) in zip(workers, pipes, strict=True):
        worker.start()
        send.close()  # the child's copy remains: its death reads as EOFError, not a hang
        assert receive.recv() == "ready"
    start = time.perf_counter()
    go.set()
    for receive, _send in pipes:
        assert receive.recv() == "done"
    elapsed = time.perf_counter() - start
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError(f"a client process exited {worker.exitcode}")
    return clients * per_client / elapsed


def array_submit(socket: Path, size: int) -> float:
    with Client(socket, timeout=300) as client:
        client.call(requests.Ping())
        start = time.perf_counter()
        ids = client.call(requests.Submit(spec=SPEC, held=True, count=size))["ids"]
        elapsed = time.perf_counter() - start
    assert len(ids) == size
    return size / elapsed


# Run with a checkout's PYTHONPATH: `count` held single jobs into GBATCH_HOME's store.
FILL = """
import os, pwd, sys, time
from pathlib import Path
from gbatch.head.store import Store, Submission
from gbatch.core.model import JobSpec
from gbatch.core.paths import Paths
store = Store(Paths(Path(sys.argv[1])).store)
spec, count = JobSpec(name="q", command=("/bin/true",)), int(sys.argv[2])
user = pwd.getpwuid(os.getuid()).pw_name
for start in range(0, count, 10_000):
    specs = (spec,) * min(10_000, count - start)
    store.submit_many([Submission(specs, os.getuid(), user, held=True)], time.time())
store.close()
"""


def queued_submits(checkouts: list[Path], queued: int, runs: int, count: int) -> None:
    """(a) with `queued` held single jobs already queued, each checkout's daemon in turn."""
    print(f"# load average before: {load_average()}", flush=True)
    with ExitStack() as stack:
        homes: list[Path] = []
        for checkout in checkouts:
            home = stack.enter_context(temp_home())
            env = {**gbatch_env(home), "PYTHONPATH": str(checkout)}
            # From the checkout: `python -c` and `python -m gbatch` (the daemon) put the
            # working directory first on sys.path, ahead of PYTHONPATH.
            subprocess.run(
                [sys.executable, "-c", FILL, str(home), str(queued)],
                env=env,
                check=True,
                cwd=checkout,
            )
            daemon = [str(GBATCH), "daemon"]
            subprocess.run(
                [*daemon, "start"], env=env, check=True, stdout=subprocess.DEVNULL, cwd=checkout
            )
            stack.callback(
                subprocess.run,
                [*daemon, "stop"],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
                cwd=checkout,
            )
            homes.append(home)
        time.sleep(2.0)  # the daemons' first passes over the queue
        rates: dict[Path, list[float]] = {c: [] for c in checkouts}
        cpu: dict[Path, float] = {c: 0.0 for c in checkouts}
        for _ in range(runs):
            for checkout, home in zip(checkouts, homes, strict=True):
                pid = daemon_pid(home)
                before = cpu_seconds(pid)
                rates[checkout].append(sequential_submits(home / "gbatchd.sock", count)[0])
                cpu[checkout] += cpu_seconds(pid) - before
    for checkout in checkouts:
        report_rate(
            f"(d) single submits with {queued:,} held single jobs queued, 1 client "
            f"({count} per run) [{checkout}]",
            rates[checkout],
            "submits/s",
            SINGLE_GOAL,
        )
        print(
            f"    runs {', '.join(f'{r:,.0f}' for r in rates[checkout])}; daemon CPU per "
            f"submit {cpu[checkout] / (runs * (count + 1)) * 1e6:,.0f} us; median "
            f"{statistics.median(rates[checkout]):,.0f}/s",
            flush=True,
        )
    print(f"# load average after: {load_average()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help(
            "1 daemon a figure: 20 single submits, 2 and 4 clients, an array of 500; with "
            "--queued: 1 run"
        ),
    )
    parser.add_argument(
        "--queued", type=int, help="only (d), with this many held single jobs queued"
    )
    parser.add_argument(
        "--checkout",
        type=Path,
        action="append",
        default=[],
        help="with --queued: a daemon of this checkout's code (repeat: runs alternate)",
    )
    parser.add_argument(
        "--runs",
        type=int,
        help="with --queued: runs of 500 submits per checkout (default 5, 1 with --quick); "
        "more runs give a steadier median on a noisy machine",
    )
    args = parser.parse_args()
    if args.queued is not None:
        print(machine_note())
        checkouts = [path.resolve() for path in args.checkout] or [REPO]
        runs = args.runs or (1 if args.quick else 5)
        queued_submits(checkouts, args.queued, runs, 500)
        return
    reps = 1 if args.quick else 7
    single_count = 20 if args.quick else 500
    per_client_total = 8 if args.quick else 1024  # submits per repetition, all clients
    cli_runs = 2 if args.quick else 20
    client_counts = (2, 4) if args.quick else (8, 32)
    array_size = 500 if args.quick else ARRAY_SIZE
    print(machine_note())

    rates: list[float] = []
    latencies: list[float] = []
    for _ in range(reps):
        with running_daemon() as home:
            rate, each = sequential_submits(home / "gbatchd.sock", single_count)
        rates.append(rate)
        latencies.extend(each)
    report_rate(
        f"(a) single submits, 1 client, 1 connection ({single_count} per run)",
        rates,
        "submits/s",
        SINGLE_GOAL,
    )
    report_ms("(a) latency of one submit request", latencies)

    for clients in client_counts:
        rates = []
        for _ in range(reps):
            with running_daemon() as home:
                per_client = max(1, per_client_total // clients)
                rates.append(concurrent_submits(home / "gbatchd.sock", clients, per_client))
        report_rate(
            f"(b) single submits, {clients} concurrent clients (processes, "
            f"{per_client_total // clients} each)",
            rates,
            "submits/s",
            SINGLE_GOAL,
        )

    rates = []
    for _ in range(reps):
        with running_daemon() as home:
            rates.append(array_submit(home / "gbatchd.sock", array_size))
    report_rate(f"(c) array submission, count={array_size:,}", rates, "jobs/s", ARRAY_GOAL)

    rates = []
    for _ in range(1 if args.quick else max(2, reps // 2)):
        with running_daemon() as home:
            socket = home / "gbatchd.sock"
            array_submit(socket, array_size)
            time.sleep(1.0)  # let the loop's wake-up for the array pass
            rates.append(sequential_submits(socket, single_count // 5)[0])
    report_rate(
        f"(d) single submits with {array_size:,} held jobs queued, 1 client "
        f"({single_count // 5} per run)",
        rates,
        "submits/s",
        SINGLE_GOAL,
    )

    with running_daemon() as home:
        samples = time_process(
            [str(GBATCH), "sbatch", "--wrap", "true", "-H"], gbatch_env(home), cli_runs
        )
    report_ms("(e) whole process `gbatch sbatch --wrap true -H`", samples)


if __name__ == "__main__":
    main()
