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

`--lookup [--checkout DIR ...]`: one task of that array named alone (issue 16): for each
checkout (default: this one) a daemon running that checkout's code (PYTHONPATH) holds
the array; rounds take the checkouts in turn (A, B, A, B, ...), each timing the round
trip of `squeue -j N_K` (the everyday path's request: columns) for a task that is a
row (K = 5) and one still in the array's tail (K = 50000), the daemon's CPU seconds
per request (/proc, less load-sensitive than wall time), and the whole
`gbatch squeue -j N_50000` process run from that checkout.

`--expand [--checkout DIR ...] [--python PATH]`: every task of that array printed (issue
35), each checkout's daemon in turn as with --lookup, the CLI on `--python` (default
Debian's /usr/bin/python3, as bench/slurm_side_by_side.py) with the checkout on
PYTHONPATH, run from `/`: the whole `gbatch squeue -r` process (100,000 lines, read to
the end), `squeue -r -o '%i %A %K %T'` (the full renderer), `sacct -j N --array -X`, and
`gbatch squeue` (its one folded line) beside them.

`--depend [--checkout DIR ...]`: a dependency on one task of that array (issue 16), each
checkout's daemon in turn as with --lookup: the round trip of a submit whose
`--dependency=afterok:N_50000` (a task still in the tail) is checked at submit, with
the daemon's CPU per request; the whole `gbatch sbatch --dependency=afterok:N_50000
--wrap true` process; then one more submit, `afterok:N` (the whole array, stored
`N_*`), untimed; and the daemon's CPU seconds per wall second while those dependents
wait (each loop pass decides them: it reads what they name), measured over an idle
stretch after each round's submits.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from common import (
    ENTRY,
    GBATCH,
    PYTHON,
    cpu_seconds,
    gbatch_env,
    load_average,
    machine_note,
    median,
    quick_help,
    report_ms,
    report_rate,
    running_daemon,
    temp_home,
    time_process,
)

from gbatch.protocol import requests
from gbatch.protocol.client import Client

TASKS = 100_000
CONFIG = f"limits: {{max_pending_jobs: {10 * TASKS}, max_array_size: {TASKS}}}\n"
SPEC = {"name": "sweep", "command": ["true"], "gpus": 1}
SUBMITS = 10  # --depend: dependents submitted per round (CPU clock ticks are 10 ms)


def submit_array(sock: Path) -> tuple[int, float]:
    with Client(sock) as client:
        start = time.perf_counter()
        reply = client.call(requests.Submit(spec=SPEC, array=f"0-{TASKS - 1}", held=True))
        elapsed = time.perf_counter() - start
    return int(reply["ids"][0]), elapsed


Served = tuple[str, Path, dict[str, str], int, int]
"""A checkout's daemon with its array: (checkout, home, environment, pid, array id)."""


@contextmanager
def served_arrays(checkouts: Sequence[Path]) -> Iterator[list[Served]]:
    """A daemon per checkout, each running that checkout's code in a home of its own
    with a held 100,000-task array submitted; stopped on leaving."""
    from common import temp_home as make_home

    with ExitStack() as stack:
        served: list[Served] = []
        for checkout in checkouts:
            home = stack.enter_context(make_home())
            (home / "config.yaml").write_text(CONFIG)
            env = {**gbatch_env(home), "PYTHONPATH": str(checkout.resolve())}
            started = subprocess.run(
                [str(PYTHON), "-c", ENTRY, "daemon", "start"],
                env=env,
                check=True,
                capture_output=True,
                text=True,
                cwd="/",  # `python -m`/`-c` put the working directory first on sys.path
            ).stdout
            stack.callback(
                subprocess.run,
                [str(PYTHON), "-c", ENTRY, "daemon", "stop"],
                env=env,
                check=False,
                capture_output=True,
            )
            pid = int(re.search(r"pid (\d+)", started).group(1))  # type: ignore[union-attr]
            array, _ = submit_array(home / "gbatchd.sock")
            served.append((str(checkout), home, env, pid, array))
        yield served


def bench_lookup(checkouts: Sequence[Path], rounds: int) -> None:
    """`squeue -j N_K` of one task of a 100,000-task array, each checkout's daemon in
    turn (module docstring)."""
    with served_arrays(checkouts) as served:
        trips: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        whole: dict[str, list[float]] = {}
        print(f"load average before: {load_average()}")
        for round_ in range(rounds + 1):  # round 0 warms up
            for name, home, env, pid, array in served:
                for task in (5, 50_000):
                    request = requests.ListJobs(jobs=(f"{array}_{task}",), brief=True, columns=True)
                    key = f"squeue -j N_{task} round trip [{name}]"
                    with Client(home / "gbatchd.sock") as client:
                        before = cpu_seconds(pid)
                        start = time.perf_counter()
                        for _ in range(10):
                            client.call(request)
                        took = (time.perf_counter() - start) / 10
                        used = (cpu_seconds(pid) - before) / 10
                    if round_:
                        trips.setdefault(key, []).append(took)
                        cpu.setdefault(key, []).append(used)
                argv = [str(PYTHON), "-c", ENTRY, "squeue", "-j", f"{array}_50000"]
                took_s = time_process(argv, env, 1, warmup=0, cwd=Path("/"))
                if round_:
                    whole.setdefault(
                        f"gbatch squeue -j N_50000, whole process [{name}]", []
                    ).extend(took_s)
        for key, samples in trips.items():
            report_ms(key, samples)
            print(f"  ... daemon CPU per request: median {median(cpu[key]) * 1000:.2f} ms")
        for key, samples in whole.items():
            report_ms(key, samples)
        print(f"load average after: {load_average()}")


def bench_expand(checkouts: Sequence[Path], rounds: int, python: Path) -> None:
    """Every task of a 100,000-task array printed, each checkout's daemon and CLI in turn
    (module docstring)."""
    with served_arrays(checkouts) as served:
        whole: dict[str, list[float]] = {}
        print(f"load average before: {load_average()}")
        for round_ in range(rounds + 1):  # round 0 warms up
            for name, _home, env, _pid, array in served:
                for what, words in (
                    ("gbatch squeue -r", ["squeue", "-r"]),
                    ("gbatch squeue -r -o '%i %A %K %T'", ["squeue", "-r", "-o", "%i %A %K %T"]),
                    ("gbatch sacct -j N --array -X", ["sacct", "-j", str(array), "--array", "-X"]),
                    ("gbatch squeue", ["squeue"]),
                ):
                    argv = [str(python), "-c", ENTRY, *words]
                    took_s = time_process(argv, env, 1, warmup=0, cwd=Path("/"))
                    if round_:
                        whole.setdefault(f"{what}, whole process [{name}]", []).extend(took_s)
        for key, samples in whole.items():
            report_ms(key, samples)
        print(f"load average after: {load_average()}")


def bench_depend(checkouts: Sequence[Path], rounds: int) -> None:
    """`sbatch --dependency=afterok:N_50000` against a 100,000-task array and the
    daemon's idle CPU with such dependents waiting, each checkout's daemon in turn
    (module docstring)."""
    with served_arrays(checkouts) as served:
        trips: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        idle: dict[str, list[float]] = {}
        whole: dict[str, list[float]] = {}
        print(f"load average before: {load_average()}")
        for round_ in range(rounds + 1):  # round 0 warms up
            for name, home, env, pid, array in served:
                dependent = {**SPEC, "dependency": f"afterok:{array}_50000"}
                key = f"submit --dependency=afterok:N_50000 round trip [{name}]"
                with Client(home / "gbatchd.sock") as client:
                    before = cpu_seconds(pid)
                    start = time.perf_counter()
                    for _ in range(SUBMITS):
                        client.call(requests.Submit(spec=dependent))
                    took = (time.perf_counter() - start) / SUBMITS
                    used = (cpu_seconds(pid) - before) / SUBMITS
                    # and one on the whole array (stored N_*), untimed: the idle stretch
                    # below has both kinds waiting
                    client.call(requests.Submit(spec={**SPEC, "dependency": f"afterok:{array}"}))
                argv = [str(PYTHON), "-c", ENTRY, "sbatch", "-G", "1"]
                argv += [f"--dependency=afterok:{array}_50000", "--wrap", "true"]
                took_s = time_process(argv, env, 1, warmup=0, cwd=Path("/"))
                before, start = cpu_seconds(pid), time.perf_counter()
                time.sleep(2.0)
                spent = (cpu_seconds(pid) - before) / (time.perf_counter() - start)
                if round_:
                    trips.setdefault(key, []).append(took)
                    cpu.setdefault(key, []).append(used)
                    whole.setdefault(
                        f"gbatch sbatch --dependency=afterok:N_50000, whole process [{name}]",
                        [],
                    ).extend(took_s)
                    waiting = (SUBMITS + 2) * (round_ + 1)
                    idle.setdefault(name, []).append(spent)
                    print(f"  [{name}] {waiting} dependents waiting: daemon CPU {spent:.2f} s/s")
        for key, samples in trips.items():
            report_ms(key, samples)
            print(f"  ... daemon CPU per request: median {median(cpu[key]) * 1000:.2f} ms")
        for key, samples in whole.items():
            report_ms(key, samples)
        for name, samples in idle.items():
            print(
                f"daemon CPU per wall second, dependents waiting [{name}]: median "
                f"{median(samples):.2f} s/s ({len(samples)} samples)"
            )
        print(f"load average after: {load_average()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help(
            "1 sample of each figure (2 rounds with --lookup, 1 with --depend); the array "
            "stays 100,000 tasks, one record whatever its size"
        ),
    )
    parser.add_argument(
        "--lookup", action="store_true", help="time squeue -j N_K of one task (issue 16) alone"
    )
    parser.add_argument(
        "--depend",
        action="store_true",
        help="time sbatch --dependency=afterok:N_K on one task (issue 16) and the "
        "daemon's CPU while such dependents wait",
    )
    parser.add_argument(
        "--expand",
        action="store_true",
        help="time squeue -r, squeue -r -o and sacct --array over the array (issue 35) alone",
    )
    parser.add_argument(
        "--python",
        type=Path,
        default=Path("/usr/bin/python3") if Path("/usr/bin/python3").exists() else PYTHON,
        metavar="PATH",
        help="with --expand: the interpreter the CLI runs on (default Debian's /usr/bin/python3)",
    )
    parser.add_argument(
        "--checkout",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="with --lookup, --depend or --expand: a checkout whose code serves its own "
        "daemon (repeatable; default: this one), timed in turn with the others",
    )
    args = parser.parse_args()
    runs = 1 if args.quick else 9
    print(machine_note())
    if args.depend:
        bench_depend(args.checkout or [Path(__file__).resolve().parent.parent], runs)
        return
    if args.expand:
        bench_expand(args.checkout or [Path(__file__).resolve().parent.parent], runs, args.python)
        return
    if args.lookup:
        bench_lookup(args.checkout or [Path(__file__).resolve().parent.parent], 2 * runs)
        return
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
                    client.call(requests.Cancel(jobs=(str(array),)))
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
                    client.call(requests.Cancel(users=("root",)))
            with Client(sock) as client:
                for _ in range(10):
                    client.call(requests.Submit(spec=SPEC, held=True))
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
