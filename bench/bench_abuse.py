"""Another user's `squeue` while one user attacks the daemon's socket.

Run as root (it makes two throw-away Unix users, and acts as them):
`.venv/bin/python bench/bench_abuse.py [--quick] [--samples N]`.

One daemon (2 simulated GPUs, socket 666) in a temp GBATCH_HOME that others may enter.
For each attack in turn, the attacker (one user, its own processes, from
tests/abuse.py) gets in place, then the victim (another user) runs `gbatch squeue`
`--samples` times one after another, in-process (the CLI's main() in a child that
became the victim: the daemon's share of the latency, without an interpreter start),
each timed; then the attack stops. Attacks:

  none   the daemon alone (the floor);
  idle   1,000 connections held open, sending nothing (64 get in, the rest refused);
  slow   300 connections with half a request each; every one the daemon ends (refused,
         or closed unfinished after 10 s) is opened again at once, as a slowloris does;
  flood  16 processes sending `jobs` requests (what squeue sends) as fast as replies
         come, each on its own connection;
  heavy  the same, each request listing the 2,000 finished jobs of the history (seeded
         before the first attack: an array submitted held, then cancelled);
  all    idle, slow and flood at once.

Goal: the victim's p99 <= 200 ms under every attack. Prints median, p90 and p99 per
attack, and what the attacker got (requests served, connections refused or closed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import GBATCH, REPO, gbatch_env, machine_note, median, percentile, quick_help

sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "integration"))
from abuse import (
    Account,
    AttackFunction,
    Stop,
    attacks_stopped,
    flood,
    hold_idle,
    hold_slow,
    start_as,
)
from asuser import as_user, preload, run_cli, temp_users

from gbatch.protocol import requests
from gbatch.protocol.client import Client

GOAL_P99_MS = 200.0


@dataclass(frozen=True)
class Sizes:
    """How hard each attack pushes, and the history the heavy flood lists."""

    idle: int = 1000
    slow: int = 300
    flooders: int = 16
    finished: int = 2000  # in the history the heavy flood lists


QUICK = Sizes(idle=80, slow=10, flooders=2, finished=100)


def attacks(socket_path: Path, sizes: Sizes) -> dict[str, list[tuple[str, AttackFunction]]]:
    """Each attack by name: the attacker's processes (a name and what each does)."""
    idle = [("idle", hold_idle(socket_path, sizes.idle))]
    slow = [("slow", hold_slow(socket_path, sizes.slow, keep=True))]
    listing = requests.ListJobs()
    floods = [(f"flood{i}", flood(socket_path, listing)) for i in range(sizes.flooders)]
    history = requests.ListJobs(history=True)
    heavy = [(f"heavy{i}", flood(socket_path, history)) for i in range(sizes.flooders)]
    return {
        "none": [],
        "idle": idle,
        "slow": slow,
        "flood": floods,
        "heavy": heavy,
        "all": floods + slow + idle,
    }


def seed_history(socket_path: Path, finished: int) -> None:
    """`finished` jobs for the heavy flood to list: an array, held, then cancelled."""
    with Client(socket_path) as client:
        spec = {"name": "old", "command": ["true"]}
        client.call(requests.Submit(spec=spec, count=finished, held=True))
        client.call(requests.Cancel(users=("root",)))


def squeues(home: Path, samples: int) -> list[float]:
    """In the victim's child: `samples` squeues one after another, each timed."""
    seconds = []
    for _ in range(samples + 3):  # three to warm up, not counted
        start = time.perf_counter()
        out = run_cli(home, "squeue")
        seconds.append(time.perf_counter() - start)
        if out["rc"] != 0:
            raise RuntimeError(f"squeue failed under attack: {out['err'].strip()}")
    return seconds[3:]


def summary(tallies: dict[str, dict[str, Any]]) -> str:
    served = sum(t.get("served", 0) for t in tallies.values())
    refused = sum(t.get("refused", 0) for t in tallies.values())
    ends: dict[str, int] = {}
    for tally in tallies.values():
        for what, n in tally.get("ends", {}).items():
            ends[what] = ends.get(what, 0) + n
    parts = [f"{served:,} requests served"] if served else []
    parts += [f"{refused:,} refused"] if refused else []
    parts += [f"{n:,} connections {what}" for what, n in sorted(ends.items())]
    return "; ".join(parts) or "-"


def report(what: str, seconds: list[float], attacker: str) -> None:
    p99 = percentile(seconds, 0.99) * 1000
    verdict = "met" if p99 <= GOAL_P99_MS else "MISSED"
    print(
        f"victim squeue, attack {what}: median {median(seconds) * 1000:.1f} ms, "
        f"p90 {percentile(seconds, 0.9) * 1000:.1f} ms, p99 {p99:.1f} ms "
        f"(goal p99 <= {GOAL_P99_MS:g} ms, {verdict}; {len(seconds)} samples); "
        f"attacker: {attacker}",
        flush=True,
    )


def shared_home() -> tuple[Path, Callable[[], None]]:
    """A GBATCH_HOME other users may enter (0711 in a 0755 directory), socket 666."""
    base = Path(tempfile.mkdtemp(prefix="gbatch-abuse-", dir="/tmp"))
    base.chmod(0o755)
    home = base / "home"
    home.mkdir(mode=0o711)
    home.chmod(0o711)
    (home / "config.yaml").write_text("socket_mode: '666'\n")
    return home, lambda: shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help(
            f"5 squeues per attack; {QUICK.idle} idle, {QUICK.slow} slow connections, "
            f"{QUICK.flooders} flooders, {QUICK.finished} jobs of history"
        ),
    )
    parser.add_argument("--samples", type=int, default=300, help="squeues per attack")
    parser.add_argument(
        "--attacks",
        default="none,idle,slow,flood,heavy,all",
        help="which, comma-separated, in order",
    )
    args = parser.parse_args()
    samples = 5 if args.quick else args.samples
    sizes = QUICK if args.quick else Sizes()
    if os.getuid() != 0:
        print("bench_abuse.py needs root: it makes two users and acts as them", file=sys.stderr)
        return 2
    print(machine_note())
    preload()
    home, remove_home = shared_home()
    env = gbatch_env(home)
    try:
        with temp_users("gbab", ["attacker", "victim"]) as users:
            bad = users["attacker"]
            attacker = Account(bad.name, bad.uid, bad.gid)
            start = [str(GBATCH), "daemon", "start"]
            subprocess.run(start, env=env, check=True, capture_output=True)
            try:
                seed_history(home / "gbatchd.sock", sizes.finished)
                known = attacks(home / "gbatchd.sock", sizes)
                for what in args.attacks.split(","):
                    parts = known[what]
                    stop = Stop()
                    started = []
                    with attacks_stopped(stop, started) as tallies:
                        for name, attack in parts:
                            started.append(start_as(attacker, name, attack, stop))
                        for each in started:
                            each.wait_ready()
                        seconds = as_user(
                            users["victim"], lambda: squeues(home, samples), timeout=1800
                        )
                    report(what, seconds, summary(tallies))
            finally:
                subprocess.run([str(GBATCH), "daemon", "stop"], env=env, capture_output=True)
        log = (home / "gbatchd.log").read_text()
        print(f"tracebacks in the daemon's log: {log.count('Traceback')}")
    finally:
        remove_home()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
