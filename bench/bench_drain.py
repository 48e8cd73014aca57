"""Drain and hand-off on the local node: `bench/bench_drain.py [--checkout DIR ...]
[--runs N] [--quick]` (~15 s a run).

Each run starts a daemon (`gbatch daemon start`, 8 simulated GPUs, a fresh
GBATCH_HOME) and measures:
- drain: 200 held one-GPU `true` jobs released at once, until the last has ended
  (jobs/s), with the CPU the daemon and the runs used meanwhile (the runs: what the
  daemon reaped, plain shims and their jobs, and its shim server with the shims it
  forked and reaped);
- hand-off: 12 eight-GPU jobs back to back (each notes its start and end, sleeps
  0.2 s): each one's end to the next one's start, ms.
With several `--checkout` directories (e.g. `--checkout /tmp/main-copy --checkout .`)
the daemons run each checkout's code in turn, run after run (A, B, A, B, ...), so a
busy machine weighs on both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from common import GBATCH, gbatch_env, load_average, percentile, quick_help, temp_home

from gbatch.protocol import requests
from gbatch.protocol.client import Client

GPUS = 8
DRAIN_JOBS = 200
HANDOFF_JOBS = 12
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")


def daemon(home: Path, checkout: Path, action: str) -> None:
    env = gbatch_env(home, GPUS)
    env["PYTHONPATH"] = str(checkout)
    # From the checkout: the daemon runs as `python -m gbatch`, which puts its working
    # directory first on sys.path, before PYTHONPATH (from another checkout's root, that
    # one's code would run).
    subprocess.run(
        [str(GBATCH), "daemon", action],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=checkout,
    )


def submit_held(sock: Path, command: str, gpus: int, count: int) -> list[int]:
    spec = {"name": "drain", "command": ["/bin/sh", "-c", command], "gpus": gpus}
    with Client(sock, timeout=120) as client:
        return [client.call(requests.Submit(spec=spec, held=True))["ids"][0] for _ in range(count)]


def run_all(sock: Path, ids: Sequence[int]) -> None:
    """Release `ids` and return once none is active."""
    with Client(sock, timeout=120) as client:
        client.call(requests.Release(ids=tuple(ids)))
        while client.call(requests.ListJobs(ids=tuple(ids), states=ACTIVE, brief=True))["jobs"]:
            time.sleep(0.02)


def wait_gpus(sock: Path, timeout: float = 60.0) -> None:
    """Return once the local node reports its GPUs (its agent has started)."""
    deadline = time.monotonic() + timeout
    with Client(sock, timeout=120) as client:
        while not any(len(n["gpus"]) == GPUS for n in client.call(requests.ListNodes())["nodes"]):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no node with {GPUS} GPUs after {timeout:g} s")
            time.sleep(0.05)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's own CPU, that of the children it reaped), in s."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def shim_server_cpu(daemon: int) -> float:
    """The CPU of the daemon's shim server (gbatch.nodes.shimserver, if it has one) and
    of the shims it reaped, in s."""
    total = 0.0
    children: set[str] = set()
    for task in Path(f"/proc/{daemon}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that just ended
            children.update((task / "children").read_text().split())
    for pid in children:
        with contextlib.suppress(OSError):
            if b"gbatch.nodes.shimserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                total += sum(cpu_seconds(int(pid)))
    return total


def one_run(
    checkout: Path, drain_jobs: int = DRAIN_JOBS, handoff_jobs: int = HANDOFF_JOBS
) -> tuple[float, float, float, list[float]]:
    """(jobs/s, daemon CPU s, the runs' CPU s, hand-off gaps ms)."""
    with temp_home("gbatch-drain-") as home:
        (home / "config.yaml").write_text(f"limits: {{max_pending_jobs: {2 * drain_jobs}}}\n")
        daemon(home, checkout, "start")
        try:
            sock = home / "gbatchd.sock"
            pid = int((home / "gbatchd.lock").read_text().split()[0])
            wait_gpus(sock)
            ids = submit_held(sock, "true", 1, drain_jobs)
            own, reaped = cpu_seconds(pid)
            reaped += shim_server_cpu(pid)
            began = time.perf_counter()
            run_all(sock, ids)
            rate = drain_jobs / (time.perf_counter() - began)
            own_after, reaped_after = cpu_seconds(pid)
            reaped_after += shim_server_cpu(pid)
            marks = home / "marks"
            marks.mkdir()
            script = f"date +%s.%N >> {marks}/start; sleep 0.2; date +%s.%N >> {marks}/end"
            run_all(sock, submit_held(sock, script, GPUS, handoff_jobs))
        finally:
            daemon(home, checkout, "stop")
        starts = sorted(float(x) for x in (marks / "start").read_text().split())
        ends = sorted(float(x) for x in (marks / "end").read_text().split())
        gaps = [(start - end) * 1000 for start, end in zip(starts[1:], ends[:-1], strict=True)]
        return rate, own_after - own, reaped_after - reaped, gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, action="append", default=[])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help=quick_help("1 run: 16 jobs drained, 3 hand-offs")
    )
    args = parser.parse_args()
    drain_jobs, handoff_jobs = (16, 3) if args.quick else (DRAIN_JOBS, HANDOFF_JOBS)
    if args.quick:
        args.runs = 1
    checkouts = [path.resolve() for path in args.checkout] or [Path(__file__).parent.parent]
    print(f"# load average before: {load_average()}", flush=True)
    results: dict[Path, list[tuple[float, float, float, list[float]]]] = {c: [] for c in checkouts}
    for run in range(args.runs):
        for checkout in checkouts:
            rate, own, reaped, gaps = one_run(checkout, drain_jobs, handoff_jobs)
            results[checkout].append((rate, own, reaped, gaps))
            print(
                f"  run {run} ({checkout}): {rate:.1f} jobs/s; CPU s daemon {own:.2f}, "
                f"runs {reaped:.2f}; hand-off median {statistics.median(gaps):.1f} ms; "
                f"load {load_average()}",
                flush=True,
            )
    for checkout, runs in results.items():
        rates = [r[0] for r in runs]
        gaps = [gap for r in runs for gap in r[3]]
        reaped = statistics.median(r[2] for r in runs) / drain_jobs * 1000
        print(
            f"{checkout}: drain {drain_jobs} one-GPU `true` jobs on {GPUS} GPUs: median "
            f"{statistics.median(rates):.1f} jobs/s ({min(rates):.1f}-{max(rates):.1f}; goal "
            f">= 100); the runs' CPU {reaped:.1f} ms a job; hand-off median "
            f"{statistics.median(gaps):.1f} ms, p90 {percentile(gaps, 0.9):.1f} ms (goal <= 100)"
        )
    print(f"# load average after: {load_average()}")


if __name__ == "__main__":
    main()
