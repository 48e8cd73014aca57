"""A 100,000-task Slurm array: submit, list and cancel it (issue 15's goals).

Run: `.venv/bin/python bench/bench_arrays.py [--quick]`.

A daemon in a temp GBATCH_HOME (2 simulated GPUs; limits raised so that one array may
hold 100,000 tasks). Each sample submits `--array=0-99999` held (nothing runs), so the
figures are the store's and the daemon's, not the jobs'. Figures:
  - submit: tasks queued per second over the request's round trip (in-process client;
    goal >= 100,000 tasks/s), and the whole `gbatch sbatch` process;
  - `gbatch squeue` with that array pending, beside `gbatch squeue` with a queue of 10
    plain jobs measured in the same run (goal: the same time; one row either way);
  - `scancel N` of the whole array: the request's round trip (goal <= 100 ms) and the
    whole `gbatch scancel` process (the interpreter's start is most of it).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import (
    GBATCH,
    gbatch_env,
    machine_note,
    median,
    report_ms,
    report_rate,
    running_daemon,
    temp_home,
    time_process,
)

from gbatch import wire
from gbatch.client import Client

TASKS = 100_000
CONFIG = f"limits: {{max_pending_jobs: {10 * TASKS}, max_array_size: {TASKS}}}\n"
SPEC = {"name": "sweep", "command": ["true"], "gpus": 1}


def submit_array(sock: Path) -> tuple[int, float]:
    with Client(sock) as client:
        start = time.perf_counter()
        reply = client.call(wire.Submit(spec=SPEC, array=f"0-{TASKS - 1}", held=True))
        elapsed = time.perf_counter() - start
    return int(reply["ids"][0]), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    runs = 3 if parser.parse_args().quick else 9
    print(machine_note())
    with temp_home() as home:
        (home / "config.yaml").write_text(CONFIG)
        with running_daemon(home):
            sock = home / "gbatchd.sock"
            env = gbatch_env(home)
            rates, sbatch_s, squeue_s, small_s, scancel_s, trip_s = [], [], [], [], [], []
            for _ in range(runs):
                array, took = submit_array(sock)
                rates.append(TASKS / took)
                with Client(sock) as client:
                    start = time.perf_counter()
                    client.call(wire.Cancel(jobs=(str(array),)))
                    trip_s.append(time.perf_counter() - start)
                array, _ = submit_array(sock)
                squeue_s += time_process([str(GBATCH), "squeue"], env, 1, warmup=1)
                scancel_s += time_process([str(GBATCH), "scancel", str(array)], env, 1, warmup=0)
                sbatch_s += time_process(
                    [str(GBATCH), "sbatch", "-H", f"--array=0-{TASKS - 1}", "--wrap", "true"],
                    env,
                    1,
                    warmup=0,
                    cwd=home,
                )
                with Client(sock) as client:
                    client.call(wire.Cancel(users=("root",)))
            with Client(sock) as client:
                for _ in range(10):
                    client.call(wire.Submit(spec=SPEC, held=True))
            small_s = time_process([str(GBATCH), "squeue"], env, runs, warmup=1)
    report_rate("submit --array=0-99999, round trip", rates, "tasks/s", goal=100_000)
    report_ms("gbatch sbatch --array=0-99999, whole process", sbatch_s)
    report_ms("gbatch squeue, one 100,000-task array pending", squeue_s)
    report_ms("gbatch squeue, a queue of 10 jobs (same run)", small_s)
    print(
        f"ratio squeue(array) / squeue(10 jobs): {median(squeue_s) / median(small_s):.2f} (goal ~1)"
    )
    report_ms("scancel N of that array, round trip", trip_s, goal_ms=100)
    report_ms("gbatch scancel N of that array, whole process", scancel_s)


if __name__ == "__main__":
    main()
