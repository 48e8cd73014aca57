"""Shared helpers for gbatch's benchmarks: a daemon in a throw-away GBATCH_HOME,
whole-process timing, and the one line each figure prints.

Percentiles: for a duration, p90 is the value 90 % of the samples stayed under. For a
rate, p90 is the rate 90 % of the samples reached (the 10th percentile), so in both
cases the p90 is the pessimistic side of the median.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The interpreter running the bench; `gbatch` is its console script, next to it.
PYTHON = Path(sys.executable)
GBATCH = PYTHON.parent / "gbatch"

sys.path.insert(0, str(REPO))


def quick_help(sizes: str) -> str:
    """The help of a bench's `--quick`: what every bench's smoke form is, and its sizes."""
    return (
        f"a smoke run in seconds at tiny sizes ({sizes}): it proves the bench still runs "
        f"and prints its figures, which mean nothing at that size (./test.sh runs it: "
        f"tests/integration/test_benches_quick.py)"
    )


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default); samples unsorted."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


@dataclass(frozen=True)
class Stats:
    """A figure's samples summed up. p90 is the pessimistic side of the median: the 90th
    percentile of durations, the 10th of rates (what 90 % of samples reached)."""

    median: float
    p90: float
    low: float
    high: float
    count: int


def summarize(samples: Sequence[float], higher_is_better: bool = False) -> Stats:
    if not samples:
        raise ValueError("no samples")
    fraction = 0.1 if higher_is_better else 0.9
    return Stats(
        median(samples), percentile(samples, fraction), min(samples), max(samples), len(samples)
    )


def p90_duration(samples: Sequence[float]) -> float:
    return percentile(samples, 0.9)


def p90_rate(samples: Sequence[float]) -> float:
    return percentile(samples, 0.1)


def report_ms(what: str, seconds: Sequence[float], goal_ms: float | None = None) -> None:
    """Print `<what>: median X ms, p90 Y ms (goal <= G ms; N samples)`."""
    goal = f"goal <= {goal_ms:g} ms" if goal_ms is not None else "no goal"
    verdict = ""
    if goal_ms is not None:
        verdict = ", met" if median(seconds) * 1000 <= goal_ms else ", MISSED"
    print(
        f"{what}: median {median(seconds) * 1000:.1f} ms, "
        f"p90 {p90_duration(seconds) * 1000:.1f} ms "
        f"({goal}{verdict}; {len(seconds)} samples)",
        flush=True,
    )


def report_rate(what: str, rates: Sequence[float], unit: str, goal: float | None = None) -> None:
    """Print `<what>: median X unit, p90 Y unit (goal >= G unit; N samples)`."""
    target = f"goal >= {goal:,.0f} {unit}" if goal is not None else "no goal"
    verdict = ""
    if goal is not None:
        verdict = ", met" if median(rates) >= goal else ", MISSED"
    print(
        f"{what}: median {median(rates):,.0f} {unit}, p90 {p90_rate(rates):,.0f} {unit} "
        f"({target}{verdict}; {len(rates)} samples)",
        flush=True,
    )


def gbatch_env(home: Path, simulate_gpus: int = 2) -> dict[str, str]:
    env = dict(os.environ)
    # Time what users get: Python's bytecode cache on. Some shells here set
    # PYTHONDONTWRITEBYTECODE, which makes every run recompile gbatch (~10 ms).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["GBATCH_HOME"] = str(home)
    env["GBATCH_SIMULATE_GPUS"] = str(simulate_gpus)
    return env


@contextlib.contextmanager
def temp_home(prefix: str = "gbatch-bench-") -> Iterator[Path]:
    """A fresh GBATCH_HOME, removed afterwards. Short path: a socket path has a limit."""
    home = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def start_daemon(home: Path, simulate_gpus: int = 2) -> Path:
    """`gbatch daemon start` (returns once the socket answers); the socket's path. The
    daemon runs this checkout's code (python_env), as the bench itself does: without it,
    a venv's editable install would serve another checkout's (e.g. a worktree's bench
    run with main's venv would time main's daemon)."""
    subprocess.run(
        [str(GBATCH), "daemon", "start"],
        env=python_env(home, simulate_gpus),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return home / "gbatchd.sock"


def stop_daemon(home: Path) -> None:
    subprocess.run(
        [str(GBATCH), "daemon", "stop"],
        env=python_env(home),
        check=True,
        stdout=subprocess.DEVNULL,
    )


@contextlib.contextmanager
def running_daemon(home: Path | None = None, simulate_gpus: int = 2) -> Iterator[Path]:
    """A daemon serving `home` (a fresh temp one when None); yields its GBATCH_HOME."""
    with contextlib.ExitStack() as stack:
        if home is None:
            home = stack.enter_context(temp_home())
        start_daemon(home, simulate_gpus)
        try:
            yield home
        finally:
            stop_daemon(home)


def time_process(
    argv: Sequence[str],
    env: Mapping[str, str],
    runs: int,
    *,
    expect_status: int | None = 0,
    warmup: int = 2,
    cwd: Path | None = None,
) -> list[float]:
    """Wall time of the whole process (fork, interpreter start, imports, work, exit).

    Output goes to a pipe that is read to the end, as `| wc -l` would. A run that ends
    with another status than `expect_status` (None: any) raises: a failing command
    would otherwise be timed as a fast one.
    """
    samples: list[float] = []
    for i in range(warmup + runs):
        start = time.perf_counter()
        done = subprocess.run(list(argv), env=dict(env), capture_output=True, check=False, cwd=cwd)
        elapsed = time.perf_counter() - start
        if expect_status is not None and done.returncode != expect_status:
            raise RuntimeError(
                f"{' '.join(argv)} exited {done.returncode}, expected {expect_status}: "
                f"{done.stderr.decode(errors='replace').strip()}"
            )
        if i >= warmup:
            samples.append(elapsed)
    return samples


def machine_note() -> str:
    """One line saying what the figures were measured on."""
    return (
        f"# {os.cpu_count()} CPUs, Python {sys.version.split()[0]} ({PYTHON}); "
        f"shared machines are noisy: compare medians, not single runs"
    )


# What the `gbatch` console script runs (pip's, less its argv[0] fix-up): how another
# interpreter (e.g. Debian's /usr/bin/python3) runs gbatch from this checkout.
ENTRY = "import sys\nfrom gbatch.cli._main import main\nsys.exit(main())"


def gbatch_argv(python: Path) -> list[str]:
    """How `python` runs gbatch: the venv's console script, else the script's code (with
    python_env's PYTHONPATH)."""
    if python == PYTHON and GBATCH.exists():
        return [str(GBATCH)]
    return [str(python), "-c", ENTRY]


def python_env(home: Path, simulate_gpus: int = 2) -> dict[str, str]:
    """gbatch_env, plus this checkout on PYTHONPATH whatever the interpreter has installed."""
    env = gbatch_env(home, simulate_gpus)
    env["PYTHONPATH"] = str(REPO)
    return env


def load_average() -> str:
    """/proc/loadavg's 1, 5 and 15 minute figures, e.g. "1.72 1.73 1.10"."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def daemon_pid(home: Path) -> int:
    """The pid of the daemon serving `home` (from its lock file)."""
    return int((home / "gbatchd.lock").read_text().split()[0])


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int, field: str) -> int:
    """A /proc/PID/status figure in KiB, e.g. VmRSS or VmHWM."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def offset_job_ids(store_path: Path) -> int:
    """Make the store's first job id high and particular to this process; return it.

    Job containers are named gbatch-<job>-<attempt> on the one engine every test and
    bench here shares: with ids from 1, a concurrent fleet test's job 7 and ours would
    fight over one name (and each head would take the other's container for its own
    run). The store is made here, before its daemon starts."""
    # Imported here: common is imported before a bench chooses whose gbatch it runs
    # (bench_plan's --checkout children put theirs first on the path afterwards).
    import sqlite3

    from gbatch.head.store import Store

    first = (os.getpid() % 10_000 + 1) * 100_000 + 1
    Store(store_path).close()  # the schema
    db = sqlite3.connect(store_path)
    try:
        with db:
            db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', ?)", (first - 1,))
    finally:
        db.close()
    return first


# Users of the finished history the listing benches write straight into a store.
HISTORY_USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")


def finished_rows(
    spec_json: str, count: int, first: float, spacing: float, gpus: int
) -> Iterator[tuple[object, ...]]:
    """`count` finished jobs' rows for insert_jobs: submitted `spacing` s apart from
    `first`, each run a minute or more on one of `gpus` GPUs, one in 50 FAILED and one in
    70 CANCELLED, by HISTORY_USERS in turn."""
    users = HISTORY_USERS
    for i in range(count):
        submit = first + i * spacing
        start = submit + 5.0
        end = start + 60.0 + (i % 3600)
        state, code = "COMPLETED", 0
        if i % 50 == 0:
            state, code = "FAILED", 1
        elif i % 70 == 0:
            state, code = "CANCELLED", 0
        job = (1000 + i % len(users), users[i % len(users)], f"train{i % 100}", spec_json)
        yield (*job, state, "", 0, submit, start, end, "local", str(i % gpus), 1, code, 0)


def insert_jobs(db: Any, rows: Iterable[tuple[object, ...]]) -> None:
    """Write finished_rows' rows into a store's jobs table (an open sqlite3 connection)."""
    db.executemany(
        "INSERT INTO jobs (uid, user, name, spec, state, reason, held, submit_time,"
        " start_time, end_time, node, gpus, attempt, exit_code, exit_signal)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
