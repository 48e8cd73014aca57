"""Start-up cost of the `gbatch` program: whole-process wall time of the everyday commands.

Run: `.venv/bin/python bench/bench_startup.py [--quick] [--python /usr/bin/python3 ...]`.

Each `--python` interpreter (default: the one running the bench, whose console script
`gbatch` is used) runs gbatch from this checkout (PYTHONPATH) as the console script
does. Figures, medians of runs taken in turn (one of each case per round, so that a
busy moment of a shared machine falls on all of them alike):

- `gbatch --help`; `gbatch squeue` against a daemon holding a small queue (10 held
  jobs); `gbatch squeue -j ONE` (the first of them); `gbatch sbatch -H --wrap true` (a
  held job, queued durably); `gbatch scancel -n NAME` (a name no job has: it cancels
  nothing, exit 0); `gbatch squeue -r`; and commands on the full (argparse) path:
  `gbatch sbatch -H --gpus 1 --wrap true` (an option the everyday line does not read),
  `gbatch sinfo`, `gbatch sacct` (the day's jobs: none finished) and `gbatch sbatch
  --help`: goal <= 25 ms each, and <= the interpreter's floor + 12 ms;
  with each case's CPU time (user + system, the process's own), which a busy machine
  inflates less than the wall time;
- with `--queued N`: N held single jobs queued (N - 10 written into the store before
  the daemon starts, as bench_submit.py --queued does, then the 10), and `gbatch squeue
  -j ONE` (job 1) timed alone with the floors (the other cases would list or grow the
  whole queue);
- the floors: `python -c pass`, and `python -S -c pass` (without site: what the
  interpreter itself costs; gbatch cannot run without site);
- on an interpreter other than the venv's, `gbatch squeue` as the console script that
  Debian 12's pip (23.0.1) writes runs it: `import re` first (pip 26's script does not);
- `gbatch squeue` with no daemon (the error path, exit status 3);
- with `--checkout DIR` (repeatable, e.g. main's and a branch's worktree): the three
  gbatch cases of each checkout, one of each per round (a before/after A/B in one run,
  the same daemon and queue); run from `/`, so that `python -c` puts no checkout first;
- for the first interpreter, the ten costliest imports of `gbatch squeue` by
  `python -X importtime`, and which heavy libraries it imports (printed, not asserted:
  tests/unit/test_startup_imports.py asserts them).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from common import (
    ENTRY,
    PYTHON,
    gbatch_argv,
    load_average,
    machine_note,
    median,
    python_env,
    quick_help,
    report_ms,
    running_daemon,
    temp_home,
    time_process,
)

GOAL_MS = 25.0
OVER_FLOOR_GOAL_MS = 12.0
NO_DAEMON_STATUS = 3
QUEUED = 10
HEAVY = ("textual", "paramiko", "yaml")

# Run `gbatch squeue` in-process the way the console script does, then list which heavy
# top-level packages ended up in sys.modules. The exit status is the command's own.
_PROBE = """
import sys
from gbatch.cli._main import main
try:
    status = main(["squeue"])
finally:
    loaded = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[1:]))
    print("HEAVY:" + ",".join(loaded), file=sys.stderr)
"""

PIP23_SQUEUE = f"`gbatch squeue`, {QUEUED} jobs, under pip 23's console script (`import re` first)"
ONE = "{ONE}"  # in a case's words: the id of the first job queued
SQUEUE_ONE = "`gbatch squeue -j ONE`"
CASES: dict[str, tuple[list[str], int]] = {
    "`gbatch --help`": (["--help"], 0),
    f"`gbatch squeue`, {QUEUED} jobs queued": (["squeue"], 0),
    SQUEUE_ONE: (["squeue", "-j", ONE], 0),
    "`gbatch sbatch -H --wrap true`": (["sbatch", "-H", "--wrap", "true"], 0),
    # A cancel that finds nothing (no job has that name): the whole path, and the queue
    # squeue lists stays as it is.
    "`gbatch scancel -n NAME`, none named so": (["scancel", "-n", "no-such-job"], 0),
    "`gbatch squeue -r`": (["squeue", "-r"], 0),
    # The full (argparse) path: options the everyday lines do not read, and --help.
    "`gbatch sbatch -H --gpus 1 --wrap true` (full path)": (
        ["sbatch", "-H", "--gpus", "1", "--wrap", "true"],
        0,
    ),
    "`gbatch sinfo`": (["sinfo"], 0),
    "`gbatch sacct`": (["sacct"], 0),
    "`gbatch sbatch --help`": (["sbatch", "--help"], 0),
}


def interleaved(
    cases: dict[str, tuple[list[str], int]],
    env: dict[str, str],
    runs: int,
    envs: dict[str, dict[str, str]] | None = None,
    after_round: Callable[[], None] = lambda: None,
    cpu: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Each case once per round, `runs` rounds: samples by case. `envs`: a case's own
    environment (a checkout's PYTHONPATH), run from `/`. `after_round`: untimed. `cpu`:
    filled with each run's CPU time (user + system), which a busy machine's waits do
    not inflate as they do the wall time."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        after_round()
        for name, (argv, status) in cases.items():
            own = (envs or {}).get(name)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            samples[name] += time_process(
                argv,
                own or env,
                1,
                expect_status=status,
                warmup=0,
                cwd=Path("/") if own else None,
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            if cpu is not None:
                cpu.setdefault(name, []).append(used)
    return samples


def import_costs(python: Path, env: dict[str, str], top: int) -> list[tuple[int, int, str]]:
    """(self us, cumulative us, module) of the `top` costliest imports of `gbatch squeue`
    by cumulative time."""
    done = subprocess.run(
        [str(python), "-X", "importtime", "-c", ENTRY, "squeue"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line.removeprefix("import time:").split("|")
        rows.append((int(self_us), int(cumulative_us), name.rstrip()))
    rows.sort(key=lambda row: row[1], reverse=True)
    return rows[:top]


def heavy_imports_of_squeue(python: Path, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [str(python), "-c", _PROBE, *HEAVY], env=env, capture_output=True, text=True, check=False
    )
    for line in done.stderr.splitlines():
        if line.startswith("HEAVY:"):
            return [name for name in line.removeprefix("HEAVY:").split(",") if name]
    raise RuntimeError(f"the probe printed no HEAVY line: {done.stderr.strip()}")


def bench_interpreter(
    python: Path,
    home: Path,
    runs: int,
    details: bool,
    checkouts: Sequence[Path] = (),
    queued: int = QUEUED,
) -> None:
    env = python_env(home)
    # The queue squeue lists stays the 10 held jobs (or `queued`): each round cancels
    # the jobs the sbatch cases queued (ids past the last of those).
    listed = subprocess.run(
        [*gbatch_argv(PYTHON), "squeue", "-h", "-o", "%i"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    first, last = min(int(job_id) for job_id in listed), max(int(job_id) for job_id in listed)
    timed = CASES if queued == QUEUED else {SQUEUE_ONE: CASES[SQUEUE_ONE]}
    timed = {
        name: ([str(first) if word == ONE else word for word in words], status)
        for name, (words, status) in timed.items()
    }
    version = subprocess.run(
        [str(python), "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"## {python} (Python {version}); load average before: {load_average()}")
    gbatch = gbatch_argv(python)
    cases = {name: ([*gbatch, *words], status) for name, (words, status) in timed.items()}
    if gbatch[-1] == ENTRY and queued == QUEUED:
        # The console script Debian 12's pip (23.0.1) writes imports re before gbatch
        # (distlib's template); the venv's pip 26 writes one that does not.
        cases[PIP23_SQUEUE] = ([str(python), "-c", "import re\n" + ENTRY, "squeue"], 0)
    cases["`python -c pass` (the floor)"] = ([str(python), "-c", "pass"], 0)
    cases["`python -S -c pass` (no site)"] = ([str(python), "-S", "-c", "pass"], 0)
    envs: dict[str, dict[str, str]] = {}
    for checkout in checkouts:
        for name, (words, status) in timed.items():
            mine = f"{name} [{checkout}]"
            cases[mine] = ([str(python), "-c", ENTRY, *words], status)
            envs[mine] = {**env, "PYTHONPATH": str(checkout.resolve())}

    def trim() -> None:
        subprocess.run(
            [*gbatch_argv(PYTHON), "scancel", f"{last + 1}-{last + 100_000}"],
            env=env,
            capture_output=True,
            check=False,
        )

    interleaved(cases, env, 2, envs, trim)  # warm-up: bytecode caches, the page cache
    cpu: dict[str, list[float]] = {}
    samples = interleaved(cases, env, runs, envs, trim, cpu)
    trim()
    floor_ms = median(samples["`python -c pass` (the floor)"]) * 1000
    if queued != QUEUED:
        print(f"{queued:,} held jobs queued; ONE is job {first}")
    for name in timed:
        report_ms(name, samples[name], GOAL_MS)
        over = median(samples[name]) * 1000 - floor_ms
        verdict = "met" if over <= OVER_FLOOR_GOAL_MS else "MISSED"
        print(f"  ... {over:.1f} ms over the floor (goal <= {OVER_FLOOR_GOAL_MS:g} ms, {verdict})")
        print(f"  ... CPU (user + system): median {median(cpu[name]) * 1000:.1f} ms")
    for name in list(cases)[len(timed) :]:
        report_ms(name, samples[name], GOAL_MS if name in envs or name == PIP23_SQUEUE else None)
        print(f"  ... CPU (user + system): median {median(cpu[name]) * 1000:.1f} ms")
    print(f"load average after: {load_average()}")
    if not details:
        return
    with temp_home() as empty:
        report_ms(
            "`gbatch squeue` with no daemon (error path, exit 3)",
            time_process([*gbatch, "squeue"], python_env(empty), runs, expect_status=3),
        )
    print("top-10 imports of `gbatch squeue` by cumulative time (python -X importtime):")
    for self_us, cumulative_us, name in import_costs(python, env, 10):
        print(f"  {cumulative_us / 1000:7.2f} ms cumulative, {self_us / 1000:6.2f} ms self  {name}")
    loaded = heavy_imports_of_squeue(python, env)
    print(
        f"heavy imports by `gbatch squeue` ({', '.join(HEAVY)}): "
        + (", ".join(loaded) if loaded else "none")
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help("2 runs a case"))
    parser.add_argument(
        "--python",
        action="append",
        type=Path,
        metavar="PATH",
        help="an interpreter to time gbatch on (repeatable; default: this one). The "
        "daemon always runs on this one",
    )
    parser.add_argument(
        "--checkout",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="also time the gbatch cases of this checkout (repeatable), interleaved with "
        "the others: e.g. main's worktree and a branch's, for a before/after A/B",
    )
    parser.add_argument(
        "--queued",
        type=int,
        default=QUEUED,
        metavar="N",
        help=f"queue N held jobs (default {QUEUED}) and time `squeue -j ONE` alone (with "
        "the floors) against that queue",
    )
    args = parser.parse_args(argv)
    runs = 2 if args.quick else 30
    pythons = args.python or [PYTHON]
    print(machine_note())
    with temp_home() as home, running_daemon(fill_store(home, args.queued - QUEUED)):
        env = python_env(home)
        for index, python in enumerate(pythons):
            queue_held_jobs(env, QUEUED)
            bench_interpreter(
                python,
                home,
                runs,
                details=index == 0 and args.queued == QUEUED,
                checkouts=args.checkout,
                queued=args.queued,
            )
            # Each interpreter's squeue lists the same small queue: the held jobs that
            # sbatch queued go.
            subprocess.run(
                [*gbatch_argv(PYTHON), "scancel", "--me", "-t", "PD"], env=env, check=True
            )


def queue_held_jobs(env: dict[str, str], count: int) -> None:
    for _ in range(count):
        time_process([*gbatch_argv(PYTHON), "sbatch", "-H", "--wrap", "true"], env, 1, warmup=0)


def fill_store(home: Path, count: int) -> Path:
    """`count` held single jobs (each its own row) written into home's store, 10,000 a
    transaction, before a daemon serves it (one process each would take minutes); home."""
    import os
    import pwd
    import time

    from gbatch.core.model import JobSpec
    from gbatch.core.paths import Paths
    from gbatch.head.store import Store, Submission

    if count <= 0:
        return home
    store = Store(Paths(home).store)
    spec = JobSpec(name="q", command=("/bin/true",))
    user = pwd.getpwuid(os.getuid()).pw_name
    for start in range(0, count, 10_000):
        specs = (spec,) * min(10_000, count - start)
        store.submit_many([Submission(specs, os.getuid(), user, held=True)], time.time())
    store.close()
    return home


if __name__ == "__main__":
    main()
