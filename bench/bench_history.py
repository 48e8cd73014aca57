"""History at size: `gbatch sacct` and `gbatch sreport` over many finished jobs (issue 35).

Run: `.venv/bin/python bench/bench_history.py [--jobs 1000000] [--checkout DIR ...]
[--runs N] [--quick]` (a run at 1,000,000 takes minutes on two busy cores).

The store: `--jobs` finished jobs (COMPLETED, a few FAILED and CANCELLED) of 8 users,
submitted one every 2.5 s up to an hour ago (1,000,000 span about 29 days), inserted
with raw SQL before any daemon starts (a fixture shortcut, as bench_squeue.py's: walking
each through Store.set_state would take hours; their events are left out, no figure
reads them). Each run copies it into a fresh GBATCH_HOME, starts `gbatch daemon start`
with one `--checkout`'s code, and times whole processes of that checkout's CLI, each
piped and read to the end (as `| wc -l`):
  - `sacct -a -S all` (every job): wall time, lines, the client's peak RSS (its
    rusage), the daemon's peak RSS (VmHWM, reset through /proc/PID/clear_refs before);
  - `sacct -a -S now-1day` (the last day's ~35,000 at 1,000,000): a window;
  - `sacct -S now-1hours -u USER` (nothing in it): a window that is empty;
  - `sreport -a -S (the first submit) -E now` (every job ran in the period): wall, the
    daemon's peak.
With several `--checkout` directories (`--checkout /work/main --checkout .`), their
daemons and CLIs run in turn (A, B, A, B, ...) on the same store. The 1-minute load is
printed with each run.

Goals (issue 35): client + daemon peak <= 300 MiB for `sacct -a -S all` at 1,000,000;
a window read by index (its time independent of the history's size).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from common import (
    PYTHON,
    finished_rows,
    gbatch_env,
    insert_jobs,
    machine_note,
    memory_kib,
    quick_help,
)

from gbatch.core.model import JobSpec

ENTRY = "import sys\nfrom gbatch.cli._main import main\nsys.exit(main())"
GOAL_MIB = 300.0
MAKE_STORE = (
    "import sys, pathlib; from gbatch.head.store import Store; "
    "Store(pathlib.Path(sys.argv[1])).close()"
)
SPACING_S = 2.5


def build(path: Path, jobs: int, now: float, oldest: Path) -> None:
    """`jobs` finished jobs in a new store at `path`, the last submitted an hour before
    `now`; its schema of the `oldest` checkout (a later one's daemon migrates it)."""
    subprocess.run(
        [
            str(PYTHON),
            "-c",
            MAKE_STORE,
            str(path),
        ],
        env={**os.environ, "PYTHONPATH": str(oldest)},
        cwd=oldest,
        check=True,
    )
    spec = JobSpec(name="train", command=("python", "train.py", "--epochs", "90"), gpus=1)
    spec_json = json.dumps(spec.to_dict())
    first = now - 3600 - jobs * SPACING_S
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    rows = finished_rows(spec_json, jobs, first, SPACING_S, 8)
    while batch := list(itertools.islice(rows, 50_000)):
        insert_jobs(db, batch)
    db.execute("COMMIT")
    db.close()


def _env(home: Path, checkout: Path) -> dict[str, str]:
    env = gbatch_env(home, 2)
    env["PYTHONPATH"] = str(checkout)
    return env


def _daemon(home: Path, checkout: Path, action: str) -> None:
    subprocess.run(
        [str(PYTHON), "-c", ENTRY, "daemon", action],
        env=_env(home, checkout),
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=checkout,
    )


def _command(home: Path, checkout: Path, args: list[str]) -> tuple[float, int, int, str]:
    """(wall seconds, lines, peak RSS KiB, its error when it failed) of one CLI process,
    its output read to the end."""
    began = time.monotonic()
    proc = subprocess.Popen(
        [str(PYTHON), "-c", ENTRY, *args],
        env=_env(home, checkout),
        cwd=checkout,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines = 0
    while chunk := proc.stdout.read(1 << 16):
        lines += chunk.count(b"\n")
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    took = time.monotonic() - began
    failed = "" if proc.returncode == 0 else f"exit {proc.returncode}: {err.decode().strip()}"
    return took, lines, usage.ru_maxrss, failed


def one_run(
    template: Path, checkout: Path, jobs: int, first_submit: float, only: list[str]
) -> dict[str, Any]:
    home = Path(f"/tmp/gbh-{os.getpid()}-{time.monotonic_ns() % 10**6}")
    home.mkdir(mode=0o700)
    figures: dict[str, Any] = {"load": os.getloadavg()[0]}
    try:
        shutil.copy(template, home / "gbatch.db")
        _daemon(home, checkout, "start")
        try:
            pid = int((home / "gbatchd.lock").read_text().split()[0])
            commands = {
                "sacct -a -S all": ["sacct", "-a", "-S", "all"],
                "sacct -a -S all -X": ["sacct", "-a", "-S", "all", "-X"],
                "sacct -a -S now-1day": ["sacct", "-a", "-S", "now-1day"],
                "sacct -u alice -S now-1hours": ["sacct", "-u", "alice", "-S", "now-1hours"],
                "sreport -a (every job)": [
                    "sreport",
                    "-a",
                    "-S",
                    time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(first_submit - 60)),
                    "-E",
                    "now",
                ],
            }
            for what, args in commands.items():
                if only and not any(what.startswith(o) for o in only):
                    continue
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
                took, lines, client, failed = _command(home, checkout, args)
                figures[what] = (took, lines, client, memory_kib(pid, "VmHWM"), failed)
        finally:
            _daemon(home, checkout, "stop")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    figures["load"] = (figures["load"] + os.getloadavg()[0]) / 2
    print(f"  run ({checkout}), load {figures['load']:.1f}:", flush=True)
    for what, (took, lines, client, daemon, failed) in _rows(figures):
        total = (client + daemon) / 1024
        verdict = ""
        if what.startswith("sacct -a -S all") and jobs >= 1_000_000:
            verdict = ", met" if total <= GOAL_MIB and not failed else ", MISSED"
        if failed:
            print(f"    {what}: FAILED after {took:.2f} s ({failed})", flush=True)
        print(
            f"    {what}: {'FAILED ' if failed else ''}{took:.2f} s, {lines:,} lines; "
            f"peak RSS client {client / 1024:,.0f}"
            f" MiB + daemon {daemon / 1024:,.0f} MiB = {total:,.0f} MiB"
            f" (goal <= {GOAL_MIB:.0f} at 1,000,000{verdict})",
            flush=True,
        )
    return figures


def _rows(figures: dict[str, Any]) -> list[tuple[str, tuple[float, int, int, int, str]]]:
    return [(k, v) for k, v in figures.items() if k != "load"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--checkout", action="append", type=Path)
    parser.add_argument(
        "--only", action="append", default=[], help="only the commands that start so"
    )
    parser.add_argument("--quick", action="store_true", help=quick_help("2,000 jobs, one run"))
    args = parser.parse_args()
    jobs = 2_000 if args.quick else args.jobs
    checkouts = [c.resolve() for c in args.checkout or [Path(__file__).resolve().parent.parent]]
    print(machine_note())
    now = time.time()
    with_template = Path(f"/tmp/gbh-template-{os.getpid()}.db")
    try:
        began = time.monotonic()
        build(with_template, jobs, now, checkouts[0])
        print(f"{jobs:,} finished jobs stored in {time.monotonic() - began:.0f} s", flush=True)
        for _ in range(args.runs):
            for checkout in checkouts:
                one_run(with_template, checkout, jobs, now - 3600 - jobs * SPACING_S, args.only)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{with_template}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
