"""A submit's latency while the same user's jobs start (issue 35, item 2).

Run: `.venv/bin/python bench/bench_submit_busy.py [--submits 200] [--checkout DIR ...]
[--runs N] [--quick]` (~1 min a run).

One daemon per run (8 simulated GPUs, the checkout's code), then:
  - idle: `--idle` submits of `gbatch sbatch -H --gpus 1 --wrap true` (held: nothing
    starts), whole processes, and as many `submit` requests from an in-process client;
  - busy: `--submits` calls of `gbatch sbatch --gpus 1 --wrap 'sleep 0.5'` in a loop,
    each job starting as soon as a GPU frees (8 GPUs, 0.5 s each: up to 16 starts a
    second, as many as the loop submits), with an in-process `submit` request of the
    same job between two processes (the request alone, without Python's start-up).
Printed: p50 / p99 of each, the starts a second during the busy loop, and the load.
With several `--checkout` directories their daemons and CLIs run in turn (A, B, A, B).

Goal (issue 35): a submit's latency independent of the start rate: `sbatch` while jobs
start at ~14/s <= 25 ms (Slurm's 5.1 ms, gbatch's 74 ms when filed, 17.6 ms idle).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from common import PYTHON, gbatch_env, machine_note, percentile, quick_help

from gbatch.protocol import requests
from gbatch.protocol.client import Client

ME = pwd.getpwuid(os.getuid()).pw_name
ENTRY = "import sys\nfrom gbatch.cli._main import main\nsys.exit(main())"
GPUS = 8
GOAL_MS = 25.0


def _env(home: Path, checkout: Path) -> dict[str, str]:
    env = gbatch_env(home, GPUS)
    env["PYTHONPATH"] = str(checkout)
    return env


# The interpreter of the timed `sbatch` processes (--python: e.g. Debian's /usr/bin/python3,
# which has no venv's editable-install finder in its start-up); the daemon runs on PYTHON.
CLI_PYTHON = [PYTHON]


def _gbatch(home: Path, checkout: Path, *args: str) -> float:
    """One CLI process's wall time in s (it must succeed)."""
    python = PYTHON if args[0] == "daemon" else CLI_PYTHON[0]
    began = time.perf_counter()
    subprocess.run(
        [str(python), "-c", ENTRY, *args],
        env=_env(home, checkout),
        cwd=checkout,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - began


def _request(sock: Path, command: str, held: bool) -> float:
    spec = {"name": "busy", "command": ["/bin/sh", "-c", command], "gpus": 1, "workdir": "/tmp"}
    began = time.perf_counter()
    with Client(sock) as client:
        client.call(requests.Submit(spec=spec, held=held))
    return time.perf_counter() - began


def _cpu(pid: int) -> tuple[float, float]:
    """(pid's own CPU seconds, its reaped children's) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU ticks of the whole machine so far (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return float(sum(fields) - idle), float(sum(fields))


def _role(proc: Path, name: str) -> str:
    """What a process of gbatchd's is: the daemon, its agent, its shim server, a shim."""
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return name
    words = [w.decode(errors="replace") for w in argv if w]
    for role in ("gbatch_agent", "shimserver", "gbatch.shim", "daemon"):
        if any(role in w for w in words):
            return role
    return name


def _tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds so far of `root` and its live descendants, by command name (a process's
    own, plus its reaped children's under its name)."""
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name = _role(entry, text[text.index("(") + 1 : text.rindex(")")])
        fields = text.rpartition(")")[2].split()
        parents[int(entry.name)] = int(fields[1])
        stats[int(entry.name)] = [name, *fields]
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid, fields in stats.items():
        up = pid
        while up not in (root, 0, 1) and up in parents:
            up = parents[up]
        if up != root:
            continue
        cpu = sum(int(x) for x in fields[12:16]) / tick
        out[fields[0]] = out.get(fields[0], 0.0) + cpu
    return out


def _started(sock: Path) -> int:
    """Jobs that have started (running or ended) so far."""
    with Client(sock, timeout=120) as client:
        reply = client.call(requests.ListJobs(history=True, brief=True, since=0.0))
    return sum(1 for job in reply["jobs"] if job.get("start_time") is not None)


def one_run(checkout: Path, idle: int, submits: int, sleep: float) -> dict[str, list[float]]:
    home = Path(f"/tmp/gbsb-{os.getpid()}-{time.monotonic_ns() % 10**6}")
    home.mkdir(mode=0o700)
    sock = home / "gbatchd.sock"
    figures: dict[str, list[float]] = {k: [] for k in ("idle", "idle req", "busy", "busy req")}
    load = os.getloadavg()[0]
    try:
        _gbatch(home, checkout, "daemon", "start")
        try:
            for _ in range(idle):
                figures["idle"].append(_gbatch(home, checkout, "sbatch", "-H", "--gpus", "1",
                                               "--wrap", "true"))  # fmt: skip
                figures["idle req"].append(_request(sock, "true", held=True))
            with Client(sock) as client:
                client.call(requests.Cancel(users=(ME,)))
            command = f"sleep {sleep}"
            pid = int((home / "gbatchd.lock").read_text().split()[0])
            cpu, tree, machine = _cpu(pid), _tree_cpu(pid), _machine_busy()
            began, before = time.monotonic(), _started(sock)
            for _ in range(submits):
                figures["busy"].append(_gbatch(home, checkout, "sbatch", "--gpus", "1",
                                               "--wrap", command))  # fmt: skip
                figures["busy req"].append(_request(sock, command, held=False))
            took = time.monotonic() - began
            figures["starts/s"] = [(_started(sock) - before) / took]
            figures["cpu"] = [(a - b) / took for a, b in zip(_cpu(pid), cpu, strict=True)]
            busy, total = _machine_busy()
            figures["machine"] = [(busy - machine[0]) / (total - machine[1])]
            after = _tree_cpu(pid)
            figures["tree"] = sorted(((after[k] - tree.get(k, 0.0)) / took, k) for k in after)  # type: ignore[misc]
        finally:
            with Client(sock, timeout=120) as client:
                client.call(requests.Cancel(users=(ME,)))
            _gbatch(home, checkout, "daemon", "stop")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    load = (load + os.getloadavg()[0]) / 2
    print(f"  run ({checkout}), load {load:.1f}:", flush=True)
    for what in ("idle", "idle req", "busy", "busy req"):
        samples = [s * 1000 for s in figures[what]]
        label = {
            "idle": "`sbatch -H --gpus 1 --wrap true`, nothing starting",
            "idle req": "  its submit request alone (in-process client)",
            "busy": f"`sbatch --gpus 1 --wrap 'sleep {sleep}'` while jobs start",
            "busy req": "  its submit request alone (in-process client)",
        }[what]
        verdict = ""
        if what == "busy":
            met = "met" if percentile(samples, 0.5) <= GOAL_MS else "MISSED"
            verdict = f" (goal <= {GOAL_MS:.0f} ms: {met})"
        print(
            f"    {label}: p50 {percentile(samples, 0.5):.1f} ms, p99 "
            f"{percentile(samples, 0.99):.1f} ms{verdict}",
            flush=True,
        )
    by_name = ", ".join(f"{name} {cpu:.2f}" for cpu, name in reversed(figures["tree"]) if cpu)  # type: ignore[misc]
    print(
        f"    busy loop: the machine's CPUs {figures['machine'][0]:.0%} busy; gbatchd's "
        f"processes, CPU s/s: {by_name}",
        flush=True,
    )
    own, children = figures["cpu"]
    print(
        f"    starts during the busy loop: {figures['starts/s'][0]:.1f}/s; gbatchd's CPU "
        f"{own:.2f} s/s, its ended children's (shims, jobs) {children:.2f} s/s",
        flush=True,
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=int, default=30)
    parser.add_argument("--submits", type=int, default=200)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--checkout", action="append", type=Path)
    parser.add_argument("--python", type=Path, default=PYTHON, help="runs the timed sbatch calls")
    parser.add_argument("--quick", action="store_true", help=quick_help("5 idle, 10 busy"))
    args = parser.parse_args()
    idle, submits, sleep = (5, 10, 0.2) if args.quick else (args.idle, args.submits, 0.5)
    CLI_PYTHON[0] = args.python
    checkouts = [c.resolve() for c in args.checkout or [Path(__file__).resolve().parent.parent]]
    print(machine_note())
    print(f"# the timed sbatch calls run by {args.python}")
    for _ in range(args.runs):
        for checkout in checkouts:
            one_run(checkout, idle, submits, sleep)


if __name__ == "__main__":
    main()
