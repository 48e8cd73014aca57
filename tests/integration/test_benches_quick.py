"""Every bench under bench/ still runs: its `--quick` smoke form (seconds, tiny sizes)
as a subprocess, exit 0, and the lines of its figures printed.

Nothing about speed is asserted: the figures of a tiny run mean nothing, and speed is
never a test's business. What rots is a bench nobody runs (bench_soak --fleet once
failed before it started, for months), so each bench is a test of its own and names
itself when it fails. A bench that needs root, sshd, a docker engine or Slurm is skipped
without it locally and fails without it in CI, as every other test here does.

Each run carries a marker in its environment (BENCH_RUN), which its daemons and their
jobs inherit: a process still holding it once the bench has ended (a daemon a failing
bench left behind) is killed, and the test fails for it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import require_root
from dockerenv import require_docker
from sshd import require_sshd

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
TIMEOUT = 240.0  # a quick run takes seconds to ~40 s on two loaded cores
MARK = "BENCH_RUN"
# The heavier quick runs take turns on one worker; the docker ones share the engine's
# group (the `docker` mark), the Slurm one the Slurm group.
HEAVY = "benches-heavy"


@dataclass(frozen=True)
class Bench:
    """One bench's quick run: its file and extra arguments, what it needs, and the
    starts of the lines its figures print (regular expressions, each matched at a
    line's start)."""

    script: str
    figures: tuple[str, ...]
    args: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()  # "root", "sshd", "docker", "slurm"
    group: str | None = None

    @property
    def name(self) -> str:
        """The test's id: the script, and its arguments past --quick."""
        return " ".join([self.script.removesuffix(".py"), *self.args])


def ms(what: str) -> str:
    """A report_ms/report_rate line for `what`: `what: median N`."""
    return re.escape(what) + r": median [\d,.]+"


BENCHES = (
    Bench(
        "bench_abuse.py",
        (
            ms("victim squeue, attack none"),
            ms("victim squeue, attack idle"),
            ms("victim squeue, attack heavy"),
            ms("victim squeue, attack all"),
            r"tracebacks in the daemon's log: \d+",
        ),
        needs=("root",),
    ),
    Bench(
        "bench_api.py",
        (
            ms("(a) HTTP submits, 1 client, keep-alive, JSON (20 per run)"),
            ms("(a) latency of one HTTP submit"),
            re.escape("(a) CPU per submit: API process "),
            r"\(b\) GET /api/v1/jobs, [\d,]+ jobs pending \(.*\): median",
            re.escape("(c) GET /metrics over HTTP, "),
            ms("(c) of which the Metrics request on the socket"),
            re.escape("(d) metrics.render(), 100 nodes x 8 GPUs made up, in-process: median"),
        ),
    ),
    Bench(
        "bench_arrays.py",
        (
            ms("submit --array=0-99999, round trip"),
            ms("gbatch squeue, one 100,000-task array pending"),
            ms("scancel N of that array, round trip"),
            ms("gbatch scancel N of that array, whole process"),
        ),
    ),
    Bench(
        "bench_bulk.py",
        (
            ms("daemon RSS, 1,000 pending jobs stored"),
            ms("scontrol hold FIRST-LAST, 1,000 jobs"),
            ms("scancel --me, 1,000 jobs"),
            ms("daemon RSS after, 1,000 jobs stored (cancelled)"),
        ),
        needs=("root",),
        group=HEAVY,
    ),
    Bench(
        "bench_drain.py",
        (r".+: drain 16 one-GPU `true` jobs on 8 GPUs: median [\d.]+ jobs/s",),
    ),
    Bench(
        "bench_cluster.py",
        (
            r"sent 5 jobs with sbatch in [\d.]+ s",
            re.escape("calls to the cluster per mirror pass over 5 jobs: squeue 1"),
            ms("mirror pass over 5 cluster jobs"),
            ms("bare squeue of 5 jobs over the same SSH connection"),
        ),
        needs=("docker",),
        group=HEAVY,
    ),
    Bench(
        "bench_gpu_history.py",
        (
            r"  on disk: [\d,]+ bytes allocated, [\d,]+ bytes of files \(the bound",
            r"  head CPU: [\d.]+ us per GPU sample",
            r"  read one GPU's last hour: [\d.]+ ms",
        ),
    ),
    Bench(
        "bench_fleet.py",
        (
            ms("(a) one report round from 5 hosts on open SSH channels"),
            ms("(b) GPU freed -> next job RUNNING (includes its docker run)"),
            re.escape("(b) gbatch's own overhead"),
        ),
        needs=("sshd", "docker"),
    ),
    Bench(
        "bench_fleet.py",
        (
            r"\(c\) 2 hosts, 20 pending: loop passes [\d.]+/s, mean [\d.]+ ms",
            r"\(c\) 2 hosts: head CPU \d+ ms per s of wall, [\d.]+ ms per host",
            ms("(c) 2 hosts: GPU freed on any host -> next job RUNNING there"),
            ms("    of which the end noticed and committed"),
            ms("    then planned, next CONFIGURING committed"),
            r"\(c\) 2 hosts: head RSS \d+ MiB",
        ),
        args=("--scale", "2"),
        needs=("sshd", "docker"),
    ),
    Bench(
        "bench_history.py",
        (
            r"2,000 finished jobs stored in ",
            re.escape("    sacct -a -S all: ") + r"[\d.]+ s, 4,002 lines; peak RSS client",
            re.escape("    sacct -a -S now-1day: "),
            re.escape("    sreport -a (every job): ") + r"[\d.]+ s",
        ),
    ),
    Bench(
        "bench_limits.py",
        (
            ms("submits as daemon's user (no count), 0 of theirs pending"),
            ms("submits as nobody, 40 of theirs pending"),
            ms("refused submits, nobody at 100 pending"),
        ),
        needs=("root",),
    ),
    Bench(
        "bench_memory.py",
        (
            r".+: 1,000 pending plain jobs; load",
            r".+: 1,000 pending array jobs; load",
            r"  RSS idle: [\d,]+ MiB",
            r"  sacct -a -S all: [\d.]+ s, peak",
            r"  RSS settled 1 s later: [\d,]+ MiB",
        ),
    ),
    Bench(
        "bench_plan.py",
        (
            re.escape("plan(): 500 pending, 100 nodes x 8 GPUs, half occupied: median"),
            re.escape("Planner.plan() (incremental): "),
            re.escape("Daemon.schedule(): 500 pending in the store"),
        ),
    ),
    Bench(
        "bench_pty.py",
        (
            ms("plain local pty: write a byte, read its echo"),
            ms("gbatch srun --pty (local node): write a byte, read its echo"),
        ),
    ),
    Bench(
        "bench_sbatch_script.py",
        (
            ms("`gbatch sbatch job.sh`, 20-line #SBATCH header"),
            ms("`gbatch sbatch --wrap true -H` (floor)"),
            re.escape("gbatch: script / --wrap = "),
            ms("`gbatch sbatch -H everyday.sh in.csv`, 7 everyday #SBATCH lines"),
        ),
    ),
    Bench(
        "bench_slowloris.py",
        (
            re.escape("no attack: 3 requests"),
            re.escape("during 10 slow connections: "),
            re.escape("the slow connections: "),
        ),
    ),
    Bench(
        "bench_soak.py",
        (
            r"accepted: \d+ jobs",
            r"lost: \d+",
            r"duplicates: \d+",
            r"store integrity_check: ",
            r"total wall time: ",
        ),
        group=HEAVY,
    ),
    Bench(
        "bench_soak.py",
        (
            r"accepted: \d+ jobs",
            r"lost: \d+",
            r"duplicates: \d+",
            r"jobs per host \(where each ended\): ",
            r"job containers killed or removed by another client of the engine",
        ),
        args=("--fleet", "1"),
        needs=("docker",),
    ),
    Bench(
        "bench_squeue.py",
        (
            ms("`gbatch squeue` (default view, 10 active jobs of 1,000)"),
            ms("  of which the `jobs` request round trip (in-process client)"),
            ms("`gbatch sacct -a -S all` (1,000 jobs)"),
        ),
    ),
    Bench(
        "bench_ssh.py",
        (
            ms('run(["true"]), open connection, shell rc skipped'),
            ms("connect() (handshake + host key + auth)"),
            ms("put_bytes 64 KiB (mkdir -p + SFTP + rename), login shell as is"),
        ),
        needs=("sshd",),
    ),
    Bench(
        "bench_startup.py",
        (
            ms("`gbatch --help`"),
            ms("`gbatch squeue`, 10 jobs queued"),
            ms("`gbatch sbatch -H --wrap true`"),
            ms("`gbatch sbatch -H --gpus 1 --wrap true` (full path)"),
            ms("`gbatch sinfo`"),
            ms("`gbatch sacct`"),
            ms("`gbatch sbatch --help`"),
            ms("`gbatch squeue` with no daemon (error path, exit 3)"),
            re.escape("heavy imports by `gbatch squeue` (textual, paramiko, yaml): "),
        ),
    ),
    Bench(
        "bench_submit.py",
        (
            ms("(a) single submits, 1 client, 1 connection (20 per run)"),
            ms("(b) single submits, 4 concurrent clients (processes, 2 each)"),
            ms("(c) array submission, count=500"),
            ms("(d) single submits with 500 held jobs queued, 1 client (4 per run)"),
            ms("(e) whole process `gbatch sbatch --wrap true -H`"),
        ),
        group=HEAVY,
    ),
    Bench(
        "bench_submit_busy.py",
        (
            re.escape("    `sbatch -H --gpus 1 --wrap true`, nothing starting: p50 "),
            re.escape("    `sbatch --gpus 1 --wrap 'sleep 0.2'` while jobs start: p50 "),
            re.escape("      its submit request alone (in-process client): p50 "),
            re.escape("    starts during the busy loop: "),
        ),
    ),
    Bench(
        "bench_submitters.py",
        (
            r"stored jobs \(sacct -a -S all\): 40 ",
            r"acknowledged jobs: 40 ",
            ms("submits, 4 processes at once (whole burst)"),
            ms("latency of one submit request"),
        ),
    ),
    Bench(
        "bench_tui.py",
        (
            re.escape("TUI first paint, 50 active jobs, whole process (") + r".*: median",
            re.escape("TUI first paint, 50 active jobs, in-process (") + r".*: median",
            ms("  refresh: whole cycle, read + show_queue"),
        ),
        group=HEAVY,
    ),
    Bench(
        "slurm_side_by_side.py",
        (
            re.escape("`sbatch -H --wrap true`, one process per job: gbatch "),
            re.escape("`squeue`, 20 pending: gbatch "),
            re.escape("drain 16 one-GPU `true` jobs on 8 GPUs: gbatch "),
            re.escape("`sbatch --gres=gpu:1 --wrap 'sleep 0.5'` while its jobs start (10 in loops)")
            + ": gbatch ",
            re.escape("GPU hand-off, a job's end -> the next one's start (3 jobs x 8 GPUs): "),
            re.escape("| what | gbatch: median (p90; min-max) | Slurm: median"),
        ),
        needs=("slurm",),
        group="slurm",
    ),
)


def _param(bench: Bench) -> object:
    marks = [pytest.mark.docker] if "docker" in bench.needs else []
    if bench.group is not None:
        marks.append(pytest.mark.xdist_group(bench.group))
    return pytest.param(bench, id=bench.name, marks=marks)


def test_every_bench_has_a_quick_run_here() -> None:
    """A new bench joins BENCHES, or this fails: none goes unrun."""
    scripts = {path.name for path in BENCH.glob("*.py")} - {"common.py"}
    assert scripts == {bench.script for bench in BENCHES}


def _require(needs: tuple[str, ...]) -> None:
    """Skip (locally) or fail (CI) without what the bench needs. Slurm is needed in CI
    only: elsewhere slurm_side_by_side's quick run times gbatch alone."""
    if "root" in needs:
        require_root("to run this bench (it acts as other users)")
    if "sshd" in needs:
        require_sshd()
    if "docker" in needs:
        require_docker()


def _marked(marker: str) -> list[int]:
    """Pids of live processes whose environment holds `MARK=marker` (readable ones)."""
    needle = f"{MARK}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def _left_behind(marker: str, grace: float = 15.0) -> list[str]:
    """The processes a finished bench left running (each killed); waits `grace` s for
    those that were already on their way out (a job's SIGTERM landing)."""
    deadline = time.monotonic() + grace
    while (pids := _marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = []
    for pid in pids:
        try:
            left.append(f"{pid} {Path(f'/proc/{pid}/cmdline').read_bytes()!r}")
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    return left


def _run(bench: Bench, marker: str) -> subprocess.CompletedProcess[str]:
    """The bench's quick run; on a timeout, SIGINT first (its `finally` blocks stop its
    daemons, as after Ctrl-C), then SIGKILL."""
    argv = [sys.executable, str(BENCH / bench.script), "--quick", *bench.args]
    env = {**os.environ, MARK: marker}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            out, err = process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGINT)
            try:
                out, err = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                out, err = process.communicate()
            err += f"\n(timed out after {TIMEOUT:g} s: interrupted)"
            return subprocess.CompletedProcess(argv, -1, out, err)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


@pytest.mark.timeout(TIMEOUT + 120)  # past the bench's own, to report what it printed
@pytest.mark.parametrize("bench", [_param(b) for b in BENCHES])
def test_quick_run_prints_its_figures(bench: Bench) -> None:
    """`bench --quick` exits 0, prints each of its figures, and leaves nothing running."""
    _require(bench.needs)
    marker = uuid.uuid4().hex
    try:
        done = _run(bench, marker)
    finally:
        left = _left_behind(marker)
    shown = f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"{bench.name} --quick exited {done.returncode}\n{shown}"
    missing = [f for f in bench.figures if not re.search(f"^(?:{f})", done.stdout, re.M)]
    assert missing == [], f"{bench.name} --quick printed no line for {missing}\n{shown}"
    assert left == [], f"{bench.name} --quick left processes running (killed): {left}"
    if "slurm" in bench.needs and os.environ.get("CI") == "true":
        assert "# Slurm: absent" not in done.stdout, f"CI needs a real Slurm beside\n{shown}"
