"""gbatch beside a real Slurm on the same machine: the same commands, timed in turn.

Run (as root: it starts slurmctld and slurmd, and installs Debian's slurm-wlm and munge
through .ci/setup-slurm.sh when they are missing):

    .venv/bin/python bench/slurm_side_by_side.py [--quick] [--sizes 1000,10000]
        [--python /usr/bin/python3] [--runs N]

Two schedulers, each one node with 8 GPUs and nothing else to do:
  - gbatch: a daemon in a throw-away GBATCH_HOME with 8 simulated GPUs, the daemon on
    the interpreter running this script, the CLI on `--python` (default: Debian's
    /usr/bin/python3 when there is one) with this checkout on PYTHONPATH;
  - Slurm: its own slurmctld and slurmd in a throw-away directory (SLURM_CONF, its own
    ports, so the shared 2-GPU test cluster of .ci/setup-slurm.sh is left alone), one
    node of 8 CPUs (one job per GPU fits) and 8 GPUs (gres.conf files are symlinks to
    /dev/null: Slurm wants a device file per GPU and checks no more with task/none).

Each row runs the same command line on both (`sbatch`, `squeue`, `scancel` with the same
options), one of each in turn, the order swapped every round, so that a busy moment of a
shared machine falls on both alike. Rows:
  - `sbatch -H --wrap true`, one process per job, and `sbatch --help`, whole process;
  - for each --sizes N, with N held jobs queued on both (one submit each: no arrays, which
    both would list as one line): `squeue`, `squeue -t R` (none run), `squeue -j ONE`,
    `scancel -u root` (one run per size: it needs a fresh queue) and the scheduler's RSS
    (gbatch's daemon against slurmctld);
  - `squeue -r` over one held pending array of --array-tasks tasks (default 100,000: one
    line a task), and `squeue` with it pending (one line);
  - drain: 200 held one-GPU `true` jobs released at once, until the last has ended
    (jobs/s, polled every 50 ms on both);
  - submits while jobs start: `sbatch --gres=gpu:1 --wrap 'sleep 0.5'`, one process
    each, 100 in a loop on one side, then on the other, twice (who goes first swapped),
    each job starting as a GPU frees (8 GPUs: up to 16 starts a second); a line after
    the row gives each side's p50 and p99 and the rate the loop submitted at;
  - hand-off: jobs that each take all 8 GPUs, run back to back; each writes `date` when
    it starts and when its command is done, and the gap is one's end to the next's start.

Printed: one line per row as it is measured, then a table of medians with p90 (the
pessimistic side: the 90th percentile of durations, the 10th of rates), min-max, the ratio
gbatch / Slurm and which one wins, and the load average before and after.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from common import (
    PYTHON,
    REPO,
    Stats,
    daemon_pid,
    gbatch_argv,
    load_average,
    machine_note,
    median,
    memory_kib,
    percentile,
    python_env,
    quick_help,
    running_daemon,
    summarize,
    temp_home,
    time_process,
)

from gbatch.protocol import requests
from gbatch.protocol.client import Client

SETUP_SLURM = REPO / ".ci" / "setup-slurm.sh"
DEBIAN_PYTHON = Path("/usr/bin/python3")
GPUS = 8
DRAIN_JOBS = 200
ARRAY_TASKS = 100_000  # the `squeue -r` row's array (both sides' MaxArraySize allow it)
BUSY_SUBMITS = 200  # sbatch calls while their jobs start (issue 35, item 2)
BUSY_SLEEP = "0.5"  # each such job's own work, seconds: 8 GPUs, up to 16 starts a second
POLL_SECONDS = 0.05
HANDOFF_SLEEP = "0.2"  # each hand-off job's own work, seconds
FILL_WORKERS = 4  # submit processes (Slurm) or connections (gbatch) filling a queue
EVEN = 0.05  # within 5 %: neither wins
ABSENT = "Slurm absent"  # a row's Slurm side in a --quick run without Slurm
NODE = "sidenode"
USER = "root"


# --- the pure part: statistics, rows, the table, arguments ----------------------------


@dataclass(frozen=True)
class Row:
    """One line of the table: the same operation on both, in `unit` (ms, jobs/s, MB)."""

    what: str
    unit: str
    gbatch: Stats
    slurm: Stats | None  # None: no Slurm in this run (--quick without one)
    higher_is_better: bool = False

    @property
    def ratio(self) -> float | None:
        """gbatch's median over Slurm's (for ms and MB, under 1 means gbatch wins); None
        without Slurm."""
        if self.slurm is None:
            return None
        return self.gbatch.median / self.slurm.median

    @property
    def winner(self) -> str:
        """'gbatch 2.5x', 'Slurm 1.3x' (how many times better the winner is), 'even', or
        'Slurm absent'."""
        ratio = self.ratio
        if ratio is None:
            return ABSENT
        if abs(ratio - 1) <= EVEN:
            return "even"
        gbatch_wins = ratio > 1 if self.higher_is_better else ratio < 1
        factor = ratio if ratio > 1 else 1 / ratio
        return f"{'gbatch' if gbatch_wins else 'Slurm'} {factor:.1f}x"


def format_value(value: float, unit: str) -> str:
    if unit == "MB" or value >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def format_stats(stats: Stats, unit: str) -> str:
    """`12.3 ms (p90 14.0; 11.1-15.2)`; a single sample is just its value."""
    if stats.count == 1:
        return f"{format_value(stats.median, unit)} {unit}"
    return (
        f"{format_value(stats.median, unit)} {unit} (p90 {format_value(stats.p90, unit)}; "
        f"{format_value(stats.low, unit)}-{format_value(stats.high, unit)})"
    )


def format_slurm(row: Row) -> str:
    """The Slurm side of a row: its stats, or `absent`."""
    return "absent" if row.slurm is None else format_stats(row.slurm, row.unit)


def format_ratio(row: Row) -> str:
    """gbatch / Slurm to two places, or `-` without Slurm."""
    return "-" if row.ratio is None else f"{row.ratio:.2f}"


def format_row_line(row: Row) -> str:
    """The line printed as soon as a row is measured."""
    return (
        f"{row.what}: gbatch {format_stats(row.gbatch, row.unit)}, "
        f"Slurm {format_slurm(row)}, gbatch/Slurm {format_ratio(row)} "
        f"({row.winner}; {row.gbatch.count} samples each)"
    )


def format_table(rows: Sequence[Row]) -> str:
    """A Markdown table of the rows, as bench/README.md quotes it."""
    lines = [
        "| what | gbatch: median (p90; min-max) | Slurm: median (p90; min-max) "
        "| gbatch / Slurm | better | n |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row.what} | {format_stats(row.gbatch, row.unit)} "
            f"| {format_slurm(row)} | {format_ratio(row)} | {row.winner} "
            f"| {row.gbatch.count} |"
        )
    return "\n".join(lines)


def parse_sizes(text: str) -> tuple[int, ...]:
    """'1000,10k,100k' -> (1000, 10000, 100000): queue sizes, each >= 1, in the order given."""
    sizes = []
    for word in text.split(","):
        word = word.strip().lower().replace("_", "")
        multiplier = 1
        if word.endswith("k"):
            word, multiplier = word[:-1], 1000
        if not word.isdigit() or int(word) * multiplier < 1:
            raise argparse.ArgumentTypeError(
                f"not a queue size: {word!r}. Give counts like 1000,10k,100k"
            )
        sizes.append(int(word) * multiplier)
    return tuple(sizes)


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]
    runs: int  # samples per row (squeue at sizes over 10,000: a third of them, >= 3)
    drain_rounds: int
    handoff_jobs: int
    python: Path  # the interpreter the gbatch CLI runs on
    slurm_scheduler: str | None = None  # SchedulerParameters; None: Slurm's defaults
    drain_jobs: int = DRAIN_JOBS
    array_tasks: int = ARRAY_TASKS
    arrays_only: bool = False
    quick: bool = False  # a smoke run: without a Slurm to start, gbatch alone
    busy_submits: int = BUSY_SUBMITS  # sbatch calls in a loop while their jobs start

    def runs_at(self, size: int) -> int:
        return self.runs if size <= 10_000 else max(3, self.runs // 3)


def default_python() -> Path:
    return DEBIAN_PYTHON if DEBIAN_PYTHON.exists() else PYTHON


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Needs root (and installs Slurm when missing); --help needs neither. "
        "--quick needs neither: without root or an installed Slurm (.ci/setup-slurm.sh "
        "installs it, as CI does) it times gbatch alone and prints the Slurm column as "
        "absent; with both it runs beside its own Slurm as the full run does.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help(
            "a queue of 20, 2 runs a row, one drain of 16 jobs, 3 hand-offs; beside Slurm "
            "where it is installed and this runs as root, else gbatch alone, Slurm absent"
        ),
    )
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        metavar="N,N",
        help="queue sizes for squeue, scancel and RSS (default 1000,10000; "
        "--quick 20; 100k takes Slurm minutes to fill on two cores)",
    )
    parser.add_argument("--runs", type=int, metavar="N", help="samples per row (default 15)")
    parser.add_argument(
        "--python",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"the interpreter the gbatch CLI runs on (default {default_python()})",
    )
    parser.add_argument(
        "--slurm-scheduler-parameters",
        metavar="K=V,...",
        help="SchedulerParameters for the side Slurm (default: none, Slurm's own; e.g. "
        "batch_sched_delay=0: its main scheduler then runs each second, not every 3 s)",
    )
    parser.add_argument(
        "--array-tasks",
        type=int,
        metavar="N",
        help=f"tasks of the array `squeue -r` lists (default {ARRAY_TASKS:,}; --quick 100)",
    )
    parser.add_argument(
        "--arrays-only",
        action="store_true",
        help="only the array rows (squeue -r and squeue over one large pending array)",
    )
    args = parser.parse_args(argv)
    if args.array_tasks is not None and not 1 <= args.array_tasks <= ARRAY_TASKS:
        parser.error(f"--array-tasks must be 1 to {ARRAY_TASKS:,}")
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be at least 1")
    return Settings(
        sizes=args.sizes or ((20,) if args.quick else (1000, 10_000)),
        runs=args.runs or (2 if args.quick else 15),
        drain_rounds=1 if args.quick else 3,
        handoff_jobs=3 if args.quick else 11,
        python=args.python or default_python(),
        arrays_only=args.arrays_only,
        slurm_scheduler=args.slurm_scheduler_parameters,
        drain_jobs=16 if args.quick else DRAIN_JOBS,
        array_tasks=args.array_tasks or (100 if args.quick else ARRAY_TASKS),
        quick=args.quick,
        busy_submits=10 if args.quick else BUSY_SUBMITS,
    )


# --- the two schedulers ------------------------------------------------------------------


@dataclass
class Side:
    """How to run one scheduler's commands: argv prefix (gbatch's interpreter; none for
    Slurm's C programs), environment, a working directory for job files, and where the
    scheduler keeps its state (GBATCH_HOME; the side Slurm's directory)."""

    name: str
    prefix: list[str]
    env: dict[str, str]
    cwd: Path
    home: Path

    def argv(self, *words: str) -> list[str]:
        return [*self.prefix, *words]


def free_ports(count: int) -> list[int]:
    """Ports free now (bound together, so they differ); a race with others is unlikely."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def slurm_conf(
    workdir: Path, host: str, ctld_port: int, slurmd_port: int, scheduler: str | None = None
) -> str:
    """The side cluster's slurm.conf: Debian's defaults but for what one node with 8
    GPUs needs, and `scheduler` as SchedulerParameters when given."""
    extra = f"SchedulerParameters={scheduler}\n" if scheduler else ""
    return (
        f"""\
# Written by gbatch's bench/slurm_side_by_side.py: a throw-away one-node cluster.
ClusterName=gbatchside
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={workdir}/state
SlurmdSpoolDir={workdir}/spool
SlurmctldPidFile={workdir}/slurmctld.pid
SlurmdPidFile={workdir}/slurmd.pid
SlurmctldLogFile={workdir}/slurmctld.log
SlurmdLogFile={workdir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MaxJobCount=1000000
MaxArraySize={ARRAY_TASKS + 1}
MinJobAge=10
MailProg=/bin/true
ReturnToService=2
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={GPUS} RealMemory=4000 \
Gres=gpu:{GPUS} State=UNKNOWN
PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""
        + extra
    )


SLURM_PROGRAMS = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "munge")


def slurm_missing() -> str | None:
    """Why no side Slurm can start here without installing one (not root, or a program
    missing); None when one can."""
    if os.getuid() != 0:
        return "not root (the side Slurm's daemons need root)"
    missing = [name for name in SLURM_PROGRAMS if shutil.which(name) is None]
    if missing:
        return f"not installed ({', '.join(missing)} missing; .ci/setup-slurm.sh installs it)"
    return None


def ensure_slurm_installed() -> None:
    """Debian's slurm-wlm and munge installed and munged answering (idempotent)."""
    if os.getuid() != 0:
        raise SystemExit(
            "slurm_side_by_side: error: must run as root: it starts its own slurmctld and "
            "slurmd (and installs Slurm when missing). Run it with sudo"
        )
    subprocess.run(
        ["bash", str(SETUP_SLURM)], env={**os.environ, "SLURM_PACKAGES_ONLY": "1"}, check=True
    )


def _stop(pidfile: Path) -> None:
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 15)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            os.kill(pid, 0)  # ProcessLookupError once it is gone
            time.sleep(0.1)


@contextlib.contextmanager
def private_slurm(scheduler: str | None = None) -> Iterator[tuple[dict[str, str], Path]]:
    """A one-node, 8-GPU Slurm of its own; yields (environment with SLURM_CONF, workdir).
    Its jobs are cancelled and its daemons stopped afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="gbatch-side-slurm-", dir="/tmp"))
    host = socket.gethostname().split(".")[0]
    ctld_port, slurmd_port = free_ports(2)
    conf = workdir / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        (workdir / "state").mkdir()
        (workdir / "spool").mkdir()
        conf.write_text(slurm_conf(workdir, host, ctld_port, slurmd_port, scheduler))
        gres = []
        for index in range(GPUS):
            (workdir / f"gpu{index}").symlink_to("/dev/null")
            gres.append(f"NodeName={NODE} Name=gpu File={workdir}/gpu{index}")
        (workdir / "gres.conf").write_text("\n".join(gres) + "\n")
        subprocess.run(["slurmctld", "-i", "-f", str(conf)], env=env, check=True)
        subprocess.run(["slurmd", "-N", NODE, "-f", str(conf)], env=env, check=True)
        _wait_idle(env, workdir)
        yield env, workdir
    finally:
        subprocess.run(["scancel", "-u", USER], env=env, check=False, capture_output=True)
        _stop(workdir / "slurmd.pid")
        _stop(workdir / "slurmctld.pid")
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_idle(env: dict[str, str], workdir: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True
        ).stdout.strip()
        if state == "idle":
            return
        subprocess.run(
            ["scontrol", "update", f"nodename={NODE}", "state=resume"],
            env=env,
            capture_output=True,
            check=False,
        )
        time.sleep(0.5)
    raise RuntimeError(f"the side Slurm's node is {state!r}, not idle; see {workdir}/*.log")


# gbatch: the queue is filled and watched through the socket (the CLI is what is timed).


def gbatch_spec(command: str, gpus: int = 0) -> dict[str, object]:
    return {"name": "side", "command": ["/bin/sh", "-c", command], "gpus": gpus}


def gbatch_submit_held(sock: Path, spec: dict[str, object], count: int) -> list[int]:
    """`count` separate held jobs (not an array), over FILL_WORKERS connections."""

    def submit(share: int) -> list[int]:
        with Client(sock, timeout=120) as client:
            return [
                client.call(requests.Submit(spec=spec, held=True))["ids"][0] for _ in range(share)
            ]

    shares = [count // FILL_WORKERS + (i < count % FILL_WORKERS) for i in range(FILL_WORKERS)]
    with concurrent.futures.ThreadPoolExecutor(FILL_WORKERS) as pool:
        return sorted(i for ids in pool.map(submit, shares) for i in ids)


GBATCH_ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")


def gbatch_active(sock: Path, ids: Sequence[int] = ()) -> int:
    """How many of `ids` (all jobs: none given) are not finished."""
    # Named ids list finished jobs too, as squeue -j does: the states narrow them.
    request = requests.ListJobs(ids=tuple(ids), states=GBATCH_ACTIVE if ids else (), brief=True)
    with Client(sock, timeout=120) as client:
        return len(client.call(request)["jobs"])


def gbatch_release(sock: Path, ids: Sequence[int]) -> None:
    with Client(sock, timeout=120) as client:
        client.call(requests.Release(ids=tuple(ids)))


def gbatch_cancel_all(sock: Path) -> None:
    with Client(sock, timeout=120) as client:
        client.call(requests.Cancel(users=(USER,)))


# Slurm: the same through its own commands.

SLURM_ACTIVE = "PENDING,CONFIGURING,RUNNING,COMPLETING,SUSPENDED"


def slurm_submit_held(env: dict[str, str], options: Sequence[str], count: int) -> list[int]:
    """`count` separate held jobs, one `sbatch` each, FILL_WORKERS at a time."""

    def submit(_: int) -> int:
        done = subprocess.run(
            ["sbatch", "-H", "--parsable", "-J", "side", "-o", "/dev/null", *options],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return int(done.stdout.strip().split(";")[0])

    with concurrent.futures.ThreadPoolExecutor(FILL_WORKERS) as pool:
        return sorted(pool.map(submit, range(count)))


def slurm_active(env: dict[str, str], ids: Sequence[int] = (), states: str = SLURM_ACTIVE) -> int:
    """How many of `ids` (all jobs: none given) are in `states`; -1 when squeue fails (a
    busy slurmctld times out: "Socket timed out on send/recv operation")."""
    argv = ["squeue", "-h", "-t", states, "-o", "%i"]
    if ids:
        argv += ["-j", ",".join(map(str, ids))]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"# squeue failed, polled again: {done.stderr.strip()}", flush=True)
        return -1
    return len(done.stdout.split())


def slurm_release(env: dict[str, str], ids: Sequence[int]) -> None:
    subprocess.run(
        ["scontrol", "release", ",".join(map(str, ids))], env=env, check=True, capture_output=True
    )


def slurm_cancel_all(env: dict[str, str]) -> None:
    subprocess.run(["scancel", "-u", USER], env=env, check=True)
    _wait_until(lambda: slurm_active(env) == 0, "Slurm's queue to empty")


def slurm_forget_finished(env: dict[str, str]) -> None:
    """Until slurmctld has purged its finished jobs (MinJobAge, then its purge pass):
    purging 10,000 of them keeps it too busy to answer for seconds, which would fall
    on the next row."""
    _wait_until(lambda: slurm_active(env, states="all") == 0, "Slurm's purge", timeout=300)


# --- measuring ---------------------------------------------------------------------------


def _wait_until(done: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(POLL_SECONDS)


def in_turn(
    gbatch: tuple[Side, Sequence[str]],
    slurm: tuple[Side, Sequence[str]] | None,
    runs: int,
    warmup: int = 1,
) -> tuple[list[float], list[float]]:
    """Each side's command once per round, who goes first swapped each round: (gbatch's
    samples, Slurm's) in seconds, whole process; Slurm's empty without Slurm."""
    samples: tuple[list[float], list[float]] = ([], [])
    sides = (gbatch, slurm)
    for index in range(warmup + runs):
        order = (0, 1) if index % 2 == 0 else (1, 0)
        for which in order:
            chosen = sides[which]
            if chosen is None:
                continue
            side, words = chosen
            took = time_process(side.argv(*words), side.env, 1, warmup=0, cwd=side.cwd)
            if index >= warmup:
                samples[which].extend(took)
    return samples


def stats_or_absent(samples: Sequence[float], higher_is_better: bool = False) -> Stats | None:
    """summarize(samples), or None for a side that took none (no Slurm in the run)."""
    return summarize(samples, higher_is_better) if samples else None


def ms_row(what: str, samples: tuple[list[float], list[float]]) -> Row:
    gbatch, slurm = samples
    return Row(
        what,
        "ms",
        summarize([s * 1000 for s in gbatch]),
        stats_or_absent([s * 1000 for s in slurm]),
    )


class Bench:
    """Both schedulers running (gbatch alone when `slurm` is None); each method measures
    rows and prints each as it goes."""

    def __init__(self, settings: Settings, gbatch: Side, slurm: Side | None, sock: Path) -> None:
        self.settings = settings
        self.gbatch = gbatch
        self.slurm = slurm
        self.sock = sock
        self.slurmctld_pid = (
            None if slurm is None else int((slurm.home / "slurmctld.pid").read_text().split()[0])
        )
        self.rows: list[Row] = []

    def add(self, row: Row) -> None:
        self.rows.append(row)
        print(f"{format_row_line(row)} [load {load_average()}]", flush=True)

    def same(self, words: Sequence[str], runs: int) -> tuple[list[float], list[float]]:
        slurm = None if self.slurm is None else (self.slurm, words)
        return in_turn((self.gbatch, words), slurm, runs)

    def empty_queues(self) -> None:
        gbatch_cancel_all(self.sock)
        if self.slurm is not None:
            slurm_cancel_all(self.slurm.env)

    def submit_rows(self) -> None:
        runs = self.settings.runs
        words = ["sbatch", "-H", "--wrap", "true"]
        self.add(ms_row("`sbatch -H --wrap true`, one process per job", self.same(words, runs)))
        self.add(ms_row("`sbatch --help`, whole process", self.same(["sbatch", "--help"], runs)))
        self.empty_queues()

    def fill(self, size: int) -> tuple[list[int], list[int]]:
        """`size` held jobs on both (each queue empty before); (gbatch's ids, Slurm's)."""
        started = time.perf_counter()
        gbatch_ids = gbatch_submit_held(self.sock, gbatch_spec("true"), size)
        gbatch_took = time.perf_counter() - started
        if self.slurm is None:
            print(f"# {size:,} held jobs queued: gbatch {gbatch_took:.1f} s", flush=True)
            if (count := gbatch_active(self.sock)) != size:
                raise RuntimeError(f"queued {count} (gbatch), not {size}")
            return gbatch_ids, []
        started = time.perf_counter()
        slurm_ids = slurm_submit_held(self.slurm.env, ["--wrap", "true"], size)
        slurm_took = time.perf_counter() - started
        print(
            f"# {size:,} held jobs queued: gbatch {gbatch_took:.1f} s (socket, {FILL_WORKERS} "
            f"connections), Slurm {slurm_took:.1f} s ({FILL_WORKERS} sbatch at a time)",
            flush=True,
        )
        counts = gbatch_active(self.sock), slurm_active(self.slurm.env)
        if counts != (size, size):
            raise RuntimeError(f"queued {counts} (gbatch, Slurm), not {size} each")
        return gbatch_ids, slurm_ids

    def size_rows(self, size: int) -> None:
        gbatch_ids, slurm_ids = self.fill(size)
        runs = self.settings.runs_at(size)
        self.add(ms_row(f"`squeue`, {size:,} pending", self.same(["squeue"], runs)))
        self.add(ms_row(f"`squeue -t R`, {size:,} pending", self.same(["squeue", "-t", "R"], runs)))
        one_gbatch = (self.gbatch, ["squeue", "-j", str(gbatch_ids[size // 2])])
        one_slurm = (
            None
            if self.slurm is None
            else (self.slurm, ["squeue", "-j", str(slurm_ids[size // 2])])
        )
        self.add(ms_row(f"`squeue -j ONE`, {size:,} pending", in_turn(one_gbatch, one_slurm, runs)))
        time.sleep(2.0)  # a few of the daemons' own passes over the full queue first
        ctld = [] if self.slurmctld_pid is None else [memory_kib(self.slurmctld_pid, "VmRSS")]
        self.add(
            Row(
                f"scheduler RSS, {size:,} pending (gbatchd / slurmctld)",
                "MB",
                summarize([memory_kib(daemon_pid(self.gbatch.home), "VmRSS") / 1024]),
                stats_or_absent([kib / 1024 for kib in ctld]),
            )
        )
        # One run each (a cancel needs a full queue); the order alternates with the size.
        cancel = ["scancel", "-u", USER]
        took: dict[str, list[float]] = {"gbatch": [], "Slurm": []}
        order = (self.gbatch, self.slurm) if size % 2 == 0 else (self.slurm, self.gbatch)
        for side in order:
            if side is not None:
                took[side.name] += time_process(
                    side.argv(*cancel), side.env, 1, warmup=0, cwd=side.cwd
                )
        self.add(ms_row(f"`scancel -u {USER}`, {size:,} pending", (took["gbatch"], took["Slurm"])))
        self.empty_queues()
        if self.slurm is not None:
            slurm_forget_finished(self.slurm.env)

    def array_rows(self) -> None:
        """One held array of array_tasks pending on both: `squeue -r` (a line a task) and
        `squeue` (its one folded line)."""
        tasks = self.settings.array_tasks
        words = ["sbatch", "-H", f"--array=0-{tasks - 1}", "--wrap", "true"]
        for side in (self.gbatch, self.slurm):
            if side is not None:
                subprocess.run(
                    side.argv(*words), env=side.env, cwd=side.cwd, check=True, capture_output=True
                )
        for side in (self.gbatch, self.slurm):  # every task listed, on both
            if side is not None:
                listed = subprocess.run(
                    side.argv("squeue", "-r", "-h"),
                    env=side.env,
                    cwd=side.cwd,
                    check=True,
                    capture_output=True,
                ).stdout.count(b"\n")
                if listed != tasks:
                    raise RuntimeError(f"{side.name}'s squeue -r listed {listed}, not {tasks}")
        runs = max(3, self.settings.runs // 3) if tasks > 10_000 else self.settings.runs
        self.add(
            ms_row(
                f"`squeue -r`, one {tasks:,}-task pending array ({tasks:,} lines)",
                self.same(["squeue", "-r"], runs),
            )
        )
        self.add(ms_row(f"`squeue`, one {tasks:,}-task pending array", self.same(["squeue"], runs)))
        self.empty_queues()
        if self.slurm is not None:
            slurm_forget_finished(self.slurm.env)

    def drain_rows(self) -> None:
        """drain_jobs held one-GPU jobs released at once; jobs/s until the last ended."""
        jobs = self.settings.drain_jobs
        rates: tuple[list[float], list[float]] = ([], [])
        for round_ in range(self.settings.drain_rounds):
            order = (0, 1) if round_ % 2 == 0 else (1, 0)
            for which in order:
                if which == 0:
                    rates[0].append(jobs / self.drain_gbatch(jobs))
                elif self.slurm is not None:
                    rates[1].append(jobs / self.drain_slurm(self.slurm, jobs))
        self.add(
            Row(
                f"drain {jobs} one-GPU `true` jobs on {GPUS} GPUs",
                "jobs/s",
                summarize(rates[0], higher_is_better=True),
                stats_or_absent(rates[1], higher_is_better=True),
                higher_is_better=True,
            )
        )

    def drain_gbatch(self, jobs: int) -> float:
        ids = gbatch_submit_held(self.sock, gbatch_spec("true", gpus=1), jobs)
        started = time.perf_counter()
        gbatch_release(self.sock, ids)
        _wait_until(lambda: gbatch_active(self.sock, ids) == 0, "gbatch's drain")
        return time.perf_counter() - started

    def drain_slurm(self, slurm: Side, jobs: int) -> float:
        env = slurm.env
        ids = slurm_submit_held(env, ["--gres=gpu:1", "--wrap", "true"], jobs)
        started = time.perf_counter()
        slurm_release(env, ids)
        _wait_until(lambda: slurm_active(env, ids) == 0, "Slurm's drain")
        return time.perf_counter() - started

    def busy_submit_rows(self) -> None:
        """`sbatch` of a short one-GPU job, busy_submits in a loop on one side, then on
        the other (who goes first swapped each round, 2 rounds), each job starting as
        soon as a GPU frees: a submit's latency while the same user's jobs start."""
        words = ["sbatch", "--gres=gpu:1", "--wrap", f"sleep {BUSY_SLEEP}"]
        per_round = max(1, self.settings.busy_submits // 2)
        samples: tuple[list[float], list[float]] = ([], [])
        starts: tuple[list[float], list[float]] = ([], [])
        for round_ in range(2):
            order = (0, 1) if round_ % 2 == 0 else (1, 0)
            for which in order:
                side = self.gbatch if which == 0 else self.slurm
                if side is None:
                    continue
                began = time.perf_counter()
                for _ in range(per_round):
                    samples[which].extend(
                        time_process(side.argv(*words), side.env, 1, warmup=0, cwd=side.cwd)
                    )
                took = time.perf_counter() - began
                self._drained(which)
                starts[which].append(per_round / took)
        row = ms_row(
            f"`sbatch --gres=gpu:1 --wrap 'sleep {BUSY_SLEEP}'` while its jobs start "
            f"({2 * per_round} in loops)",
            samples,
        )
        self.add(row)
        for which, name in ((0, "gbatch"), (1, "Slurm")):
            if samples[which]:
                ms = [x * 1000 for x in samples[which]]
                print(
                    f"#   {name}: p50 {percentile(ms, 0.5):.1f} ms, p99 "
                    f"{percentile(ms, 0.99):.1f} ms; submitted (and started) "
                    f"{median(starts[which]):.1f} jobs/s",
                    flush=True,
                )

    def _drained(self, which: int) -> None:
        """Wait until gbatch's (0) or Slurm's (1) queue has no active job left."""
        if which == 0:
            _wait_until(lambda: gbatch_active(self.sock) == 0, "gbatch's busy jobs")
        else:
            assert self.slurm is not None
            env = self.slurm.env
            _wait_until(lambda: slurm_active(env) == 0, "Slurm's busy jobs")

    def handoff_rows(self) -> None:
        """Jobs taking all GPUs, back to back: each one's end to the next one's start."""
        count = self.settings.handoff_jobs
        gbatch = handoff_gaps(self.gbatch.cwd / "handoff", count, self.handoff_gbatch)
        slurm = (
            []
            if self.slurm is None
            else handoff_gaps(self.slurm.cwd / "handoff", count, self.handoff_slurm)
        )
        self.add(
            Row(
                f"GPU hand-off, a job's end -> the next one's start ({count} jobs x {GPUS} GPUs)",
                "ms",
                summarize(gbatch),
                stats_or_absent(slurm),
            )
        )

    def handoff_gbatch(self, script: str, count: int) -> None:
        ids: list[int] = []
        for _ in range(count):  # one at a time: they run in submission order
            ids += gbatch_submit_held(self.sock, gbatch_spec(script, gpus=GPUS), 1)
        gbatch_release(self.sock, ids)
        _wait_until(lambda: gbatch_active(self.sock, ids) == 0, "gbatch's hand-offs")

    def handoff_slurm(self, script: str, count: int) -> None:
        assert self.slurm is not None  # handoff_rows asks only with Slurm
        env = self.slurm.env
        ids = [
            slurm_submit_held(env, [f"--gres=gpu:{GPUS}", "--wrap", script], 1)[0]
            for _ in range(count)
        ]
        slurm_release(env, ids)
        _wait_until(lambda: slurm_active(env, ids) == 0, "Slurm's hand-offs")


def handoff_gaps(marks: Path, count: int, run: Callable[[str, int], None]) -> list[float]:
    """Run `count` jobs that note their start and end in `marks`; the gaps in ms between
    one's end and the next one's start."""
    marks.mkdir()
    run(f"date +%s.%N >> {marks}/start; sleep {HANDOFF_SLEEP}; date +%s.%N >> {marks}/end", count)
    starts = sorted(float(x) for x in (marks / "start").read_text().split())
    ends = sorted(float(x) for x in (marks / "end").read_text().split())
    if len(starts) != count or len(ends) != count:
        raise RuntimeError(f"{len(starts)} starts and {len(ends)} ends in {marks}, not {count}")
    return gaps_ms(starts, ends)


def gaps_ms(starts: Sequence[float], ends: Sequence[float]) -> list[float]:
    """Back-to-back runs' (sorted) start and end times in s -> each end to the next start, ms."""
    return [(start - end) * 1000 for start, end in zip(starts[1:], ends[:-1], strict=True)]


def slurm_version() -> str:
    done = subprocess.run(["sbatch", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def interpreter_version(python: Path) -> str:
    done = subprocess.run(
        [str(python), "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def main(argv: Sequence[str] | None = None) -> None:
    settings = parse_args(argv)
    absent = slurm_missing() if settings.quick else None
    if absent is None:
        ensure_slurm_installed()
    print(machine_note())
    if absent is not None:
        print(f"# Slurm: absent, {absent}: gbatch alone, its column says absent", flush=True)
    version = slurm_version() if absent is None else "no Slurm"
    print(
        f"# gbatch CLI on {settings.python} (Python {interpreter_version(settings.python)}), "
        f"daemon on {PYTHON}; {version}; {GPUS} GPUs each; sizes "
        f"{', '.join(f'{s:,}' for s in settings.sizes)}; {settings.runs} runs a row; Slurm's "
        f"SchedulerParameters: {settings.slurm_scheduler or 'its defaults'}",
        flush=True,
    )
    before = load_average()
    print(f"# load average before: {before}", flush=True)
    with contextlib.ExitStack() as stack:
        home = stack.enter_context(temp_home("gbatch-side-"))
        most = max(settings.sizes)
        (home / "config.yaml").write_text(
            f"limits: {{max_pending_jobs: {2 * most + settings.drain_jobs + ARRAY_TASKS}, "
            f"max_array_size: {ARRAY_TASKS}}}\n"
        )
        stack.enter_context(running_daemon(home, simulate_gpus=GPUS))
        slurm: Side | None = None
        if absent is None:
            slurm_env, slurm_dir = stack.enter_context(private_slurm(settings.slurm_scheduler))
            slurm = Side("Slurm", [], slurm_env, slurm_dir / "jobs", slurm_dir)
            slurm.cwd.mkdir()
        gbatch_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gbatch-side-")))
        gbatch = Side(
            "gbatch", gbatch_argv(settings.python), python_env(home, GPUS), gbatch_dir, home
        )
        bench = Bench(settings, gbatch, slurm, home / "gbatchd.sock")
        try:
            if not settings.arrays_only:
                bench.submit_rows()
                for size in settings.sizes:
                    bench.size_rows(size)
            bench.array_rows()
            if not settings.arrays_only:
                bench.drain_rows()
                bench.busy_submit_rows()
                bench.handoff_rows()
        finally:
            # The rows measured so far, even when one failed (its traceback follows).
            print_table(bench.rows, before)
            with contextlib.suppress(Exception):
                bench.empty_queues()


def print_table(rows: Sequence[Row], load_before: str) -> None:
    if not rows:
        return
    print()
    print(format_table(rows))
    print()
    print(
        f"gbatch / Slurm: a ratio under 1 means gbatch takes less (time, memory); for jobs/s, "
        f"over 1 means gbatch is faster. Load average before: {load_before}; after: "
        f"{load_average()}.",
        flush=True,
    )


if __name__ == "__main__":
    main()
