"""Soak: 1,000 short jobs while gbatchd is SIGKILLed every few seconds and once at each
named crash point (gbatch/core/crashpoints.py), then a Jepsen-style count from a ledger the
jobs write themselves (tests/ledger.py): lost, duplicated, overlapping runs.

A submitter thread keeps a backlog of jobs queued through the daemon socket (a reply
is an acknowledgement: the job is committed). Meanwhile the main thread, at random
moments, either SIGKILLs the daemon and restarts it at once, or stops it and restarts
it with GBATCH_CRASH_AT=<point> so that it kills itself there, then restarts it clean.
Each crash point comes once, at a random place among the kills. At the end every job in
the store must be final; the ledger says whether each acknowledged job completed
exactly once, and SQLite's integrity_check (after every kill and at the end) whether the
store survived.

Recovery times, per kill: until the restarted daemon answers a `jobs` request (what
squeue sends), and until the first run the new daemon dispatched writes its start line.
For a crash point the kill time is when its death was seen (polled every 10 ms).

With --fleet N the same soak runs on a test fleet instead of the embedded local node:
N GPU host containers (tests/integration/fleet.py: each its own sshd on a 127.0.0.1
port, the agent, --gpus simulated GPUs), every job a container of gbatch-host:latest
with the ledger's directory mounted at the same path. Hosts and job containers are
removed at the end, whatever happens (Ctrl-C, SIGTERM, a failure).

Run: .venv/bin/python bench/bench_soak.py [--quick] [--jobs N] [--kills N] [--seed S]
                                          [--fleet [N]] [--point-rounds R] [--keep DIR]
Prints figures; asserts nothing (tests/integration/test_random_kills.py is the test).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from common import (
    GBATCH,
    REPO,
    gbatch_env,
    machine_note,
    offset_job_ids,
    quick_help,
    report_ms,
    temp_home,
)

sys.path.insert(0, str(REPO / "tests"))

from ledger import Run, check, first_start_after, ledger_command, read_runs

from gbatch.core.crashpoints import POINTS
from gbatch.core.model import FINAL_STATES, JobState
from gbatch.head.store import Store
from gbatch.nodes.docker import LABEL_JOB, LABEL_NODE
from gbatch.protocol import requests
from gbatch.protocol.client import Client, DaemonUnavailable, RequestFailed
from gbatch.site.config import Paths

CONFIG = "tick_seconds: 0.2\nreport_interval: 0.2\nkill_grace_seconds: 1\n"
FINAL = {state.value for state in FINAL_STATES}
CRASH_TIMEOUT = 60.0  # an armed daemon that has not reached its point by then: skipped
DRAIN_TIMEOUT = 600.0  # after the last submit, for every job to become final
# A fleet's head must never fence or requeue a host because the head itself was down
# for a restart: a fence kill here would be a bug to report, not a figure.
FLEET_CONFIG = CONFIG + "node_down_seconds: 60\nnode_lease_seconds: 60\n"
JOB_IMAGE = "gbatch-host:latest"  # coreutils: the ledger's `date +%s.%N` needs it


def fleet_config(ledger_dir: Path) -> str:
    """FLEET_CONFIG, with the ledger's directory a mount root: container jobs mount it
    (a site allows no mounts until its config names a root)."""
    return FLEET_CONFIG + f"mount_roots: [{{path: {ledger_dir}, writable: true}}]\n"


@dataclass(frozen=True)
class JobPlan:
    seconds: float
    gpus: int
    fail_first: bool

    def spec(self, ledger: Path, image: str | None = None) -> dict[str, object]:
        """A bare job, or with `image` a container job that sees the ledger's
        directory at the same path."""
        command = ledger_command(ledger, self.seconds, fail_first=self.fail_first)
        spec: dict[str, object] = {
            "name": "soak",
            "command": command,
            "gpus": self.gpus,
            "retries": 1 if self.fail_first else 0,
        }
        if image is not None:
            spec["image"] = image
            spec["mounts"] = [f"{ledger.parent}:{ledger.parent}"]
        return spec


@dataclass(frozen=True)
class Kill:
    what: str  # "SIGKILL" or the crash point's name
    at_wall: float  # time.time() of the kill (of its death being seen, for a point)
    answering_s: float  # kill -> the restarted daemon answered a `jobs` request


# -- the daemon -------------------------------------------------------------------------


class Head:
    """One daemon's home: start, kill, restart it, and ask it things."""

    def __init__(self, home: Path, gpus: int, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.paths = Paths(home)
        self.env = gbatch_env(home, gpus) if env is None else env

    def start(self, crash_at: str | None = None) -> bool:
        """`gbatch daemon start`; False when it did not answer (an armed daemon may die
        before its socket answers)."""
        env = {**self.env, "GBATCH_CRASH_AT": crash_at} if crash_at else self.env
        done = subprocess.run(
            [str(GBATCH), "daemon", "start"], env=env, capture_output=True, text=True
        )
        return done.returncode == 0

    def stop(self) -> None:
        subprocess.run([str(GBATCH), "daemon", "stop"], env=self.env, capture_output=True)

    def pid(self) -> int:
        return int(self.paths.lock.read_text().strip())

    def jobs(self) -> list[dict[str, object]]:
        """Every job in the store, active and finished (id, state, ...)."""
        with Client(self.paths.socket, timeout=30) as client:
            reply = client.call(requests.ListJobs(history=True, brief=True))
        jobs: list[dict[str, object]] = reply["jobs"]
        return jobs

    def wait_answering(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with Client(self.paths.socket, timeout=5) as client:
                    client.call(requests.ListJobs(brief=True))
                return
            except DaemonUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def integrity(self) -> str:
        """PRAGMA integrity_check, read-only: no checkpoint on close, so the next daemon
        still recovers the WAL itself."""
        db = sqlite3.connect(f"file:{self.paths.store}?mode=ro", uri=True)
        try:
            return ", ".join(row[0] for row in db.execute("PRAGMA integrity_check"))
        finally:
            db.close()

    def kill_leftover_runs(self) -> None:
        for run_dir in self.paths.runs.glob("*.*"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                pids = json.loads((run_dir / "pids.json").read_text())
                os.killpg(int(pids["pgid"]), signal.SIGKILL)


def is_gone(pid: int) -> bool:
    """Dead and reaped, or a zombie nobody has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def wait_gone(pid: int, timeout: float, give_up: Callable[[], bool] | None = None) -> bool:
    """True once `pid` is gone; False after `timeout`, or as soon as `give_up()` (asked
    every half second) says there is no point waiting."""
    deadline = time.monotonic() + timeout
    next_ask = time.monotonic() + 0.5
    while not is_gone(pid):
        now = time.monotonic()
        if now > deadline:
            return False
        if give_up is not None and now > next_ask:
            if give_up():
                return is_gone(pid)
            next_ask = time.monotonic() + 0.5
        time.sleep(0.01)
    return True


# -- load -------------------------------------------------------------------------------


class Submitter(threading.Thread):
    """Submits every plan, keeping at most `backlog` acknowledged jobs unfinished (by
    the ledger). A daemon that is down is waited for; a submit whose connection died
    after the request went out is "in doubt" (the job may exist) and is not retried
    under the same id: the plan is submitted again as a new job. A refusal that says
    nothing was queued for now (kind "unavailable": a daemon stopping as a kill lands)
    is counted and submitted again; any other stops it (`refusal` says why): the same
    spec would be refused again, and the soak would wait for jobs that never come."""

    def __init__(
        self,
        head: Head,
        ledger: Path,
        plans: list[JobPlan],
        backlog: int,
        image: str | None = None,
    ) -> None:
        super().__init__(name="submitter", daemon=True)
        self.head, self.ledger, self.plans, self.backlog = head, ledger, plans, backlog
        self.image = image
        self.acknowledged: list[int] = []
        self.in_doubt = 0
        self.refused = 0
        self.refusal: str | None = None
        self.stopping = threading.Event()

    def unfinished(self) -> int:
        try:
            lines = self.ledger.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            lines = []
        runs, _ = read_runs(lines)
        finished = {r.job for r in runs if r.completed}
        return len(set(self.acknowledged) - finished)

    def run(self) -> None:
        for plan in self.plans:
            while not self.stopping.is_set():
                if self.unfinished() >= self.backlog:
                    time.sleep(0.05)
                    continue
                job_ids = self._submit(plan)
                if self.refusal is not None:
                    return
                if job_ids is not None:
                    self.acknowledged.extend(job_ids)
                    break
                time.sleep(0.05)

    def _submit(self, plan: JobPlan) -> list[int] | None:
        """The new job's ids, or None when not acknowledged. Each submit gets a fresh
        connection that has answered a ping first: a connection that dies after that
        died with the submit in flight (in doubt), not before it was sent."""
        with Client(self.head.paths.socket, timeout=30) as client:
            try:
                client.call(requests.Ping())
            except DaemonUnavailable:
                return None  # down: not sent
            try:
                reply = client.call(requests.Submit(spec=plan.spec(self.ledger, self.image)))
            except DaemonUnavailable:
                self.in_doubt += 1
                return None
            except RequestFailed as err:
                self.refused += 1
                if err.kind != "unavailable":
                    self.refusal = str(err)
                return None
        return [int(i) for i in reply["ids"]]


def plan_jobs(rng: random.Random, count: int) -> list[JobPlan]:
    return [
        JobPlan(
            seconds=round(rng.uniform(0.2, 1.5), 2),
            gpus=1 if rng.random() < 0.5 else 0,
            fail_first=rng.random() < 0.15,
        )
        for _ in range(count)
    ]


# -- faults -----------------------------------------------------------------------------


def sigkill_and_restart(head: Head, integrity: list[str]) -> Kill:
    pid = head.pid()
    at_wall, at = time.time(), time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid, 30)
    integrity.append(head.integrity())
    head.start()
    head.wait_answering()
    return Kill("SIGKILL", at_wall, time.monotonic() - at)


def crash_at_point(
    head: Head, point: str, integrity: list[str], idle: Callable[[], bool]
) -> Kill | None:
    """Restart the daemon armed at `point`, wait for it to die there, restart it clean.
    None when it did not reach the point within CRASH_TIMEOUT, or before `idle()` said
    no job was left to bring it there."""
    head.stop()
    before = head.pid()
    head.start(crash_at=point)
    pid = head.pid()
    died = pid != before and wait_gone(pid, CRASH_TIMEOUT, idle)
    at_wall, at = time.time(), time.monotonic()
    if not died:
        head.stop()
    else:
        integrity.append(head.integrity())
    head.start()
    head.wait_answering()
    return Kill(point, at_wall, time.monotonic() - at) if died else None


def all_final(head: Head) -> bool:
    """Every job in the store has ended (the daemon must answer)."""
    return all(job["state"] in FINAL for job in head.jobs())


def nothing_left(head: Head, submitter: Submitter) -> bool:
    """Every plan submitted and every job ended: no fault can disturb anything now. False
    while the daemon does not answer."""
    if submitter.is_alive():
        return False
    try:
        return all_final(head)
    except (DaemonUnavailable, RequestFailed):
        return False


# -- the run ----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help(
            "10 jobs, 2 random SIGKILLs and each crash point once, faults 0.5-1 s apart; "
            "with --fleet name 1 host"
        ),
    )
    parser.add_argument("--jobs", type=int, help="jobs to submit (default 1,000)")
    parser.add_argument("--kills", type=int, help="random SIGKILLs (default 40)")
    parser.add_argument("--seed", type=int, help="default: random (printed)")
    parser.add_argument(
        "--gpus", type=int, default=4, help="simulated GPUs (per host with --fleet; default 4)"
    )
    parser.add_argument(
        "--backlog", type=int, help="unfinished jobs at most (default 32; --quick 4)"
    )
    parser.add_argument(
        "--fleet",
        type=int,
        nargs="?",
        const=2,
        metavar="N",
        help="run on N GPU host containers (default 2) instead of the local node",
    )
    parser.add_argument(
        "--point-rounds", type=int, default=1, help="kills at each crash point (default 1)"
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="copy the run's files (store, gbatchd.log, ledger; with --fleet each host's "
        "sshd log and docker calls, and the engine's events for gbatch job containers) to "
        "DIR, which must not exist",
    )
    args = parser.parse_args()
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep {args.keep}: it exists already. Name a new directory")
    jobs = args.jobs or (10 if args.quick else 1000)
    if args.backlog is None:
        args.backlog = 4 if args.quick else 32
    kills_wanted = args.kills if args.kills is not None else (2 if args.quick else 40)
    gap = 1.0 if args.quick else 4.0  # seconds between faults: uniform(0.5, gap)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    points = len(POINTS) * args.point_rounds
    print(machine_note())
    where = (
        f"{args.fleet} hosts x {args.gpus} simulated GPUs, container jobs ({JOB_IMAGE})"
        if args.fleet
        else f"{args.gpus} simulated GPUs"
    )
    print(
        f"# soak: {jobs} jobs, {kills_wanted} random SIGKILLs + {points} crash points, "
        f"{where}, backlog {args.backlog}, seed {seed}",
        flush=True,
    )
    faults = ["SIGKILL"] * kills_wanted + list(POINTS) * args.point_rounds
    rng.shuffle(faults)
    with temp_home("gbatch-soak-") as home, keeping(home, args.keep):
        if args.fleet:
            soak_on_fleet(home, args.fleet, args.gpus, jobs, faults, rng, args.backlog, gap)
            return
        (home / "config.yaml").write_text(CONFIG)
        head = Head(home, args.gpus)
        ledger = home / "ledger"
        soak(head, ledger, plan_jobs(rng, jobs), faults, rng, args.backlog, gap)


@contextlib.contextmanager
def keeping(home: Path, keep: Path | None) -> Iterator[None]:
    """On leaving (even by an error), copy `home` to `keep` when given: no sockets, no
    keys (each host's ssh/ directory)."""
    try:
        yield
    finally:
        if keep is not None:
            shutil.copytree(home, keep, ignore=shutil.ignore_patterns("*.sock", "ssh"))
            print(f"# the run's files: {keep}", flush=True)


def soak_on_fleet(
    base: Path,
    hosts: int,
    gpus: int,
    jobs: int,
    faults: list[str],
    rng: random.Random,
    backlog: int,
    gap: float,
) -> None:
    """The soak on `hosts` host containers; one `bench_soak: error: ...` line when the
    fleet cannot be built (no engine, no host image)."""
    # Imported here: the local mode needs neither pytest nor testcontainers.
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    import pytest

    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        ledger = base / "ledger" / "ledger"
        ledger.parent.mkdir()
        with fleet_head(base, hosts, gpus, ledger.parent) as fleet:
            plans = plan_jobs(rng, jobs)
            soak(fleet.head, ledger, plans, faults, rng, backlog, gap, JOB_IMAGE, fleet.figures)
    except (pytest.skip.Exception, pytest.fail.Exception) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        sys.exit(f"bench_soak: error: no test fleet: {first}")
    except KeyboardInterrupt:
        sys.exit("bench_soak: interrupted; the hosts and their job containers were removed")
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupted(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as Ctrl-C: unwinds through every `finally`, so the fleet is removed."""
    raise KeyboardInterrupt


# -- the fleet --------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetRun:
    head: Head
    base: Path  # holds each host's files (<base>/<node>/share) and docker-events.txt
    nodes: list[str]

    def figures(self) -> list[str]:
        foreign = foreign_removals(self.base, self.nodes)
        return [
            f"job containers killed or removed by another client of the engine (no gbatch "
            f"call asked): {len(foreign)} {foreign[:3]}"
        ]


@contextlib.contextmanager
def fleet_head(base: Path, count: int, gpus: int, ledger_dir: Path) -> Iterator[FleetRun]:
    """`count` host containers under `base` with `gpus` simulated GPUs each, and a head
    started against them (tests/integration/fleet.py's set-up; fleet_config).

    The hosts are named soak<pid>-<i>, so that this run's job containers (labelled
    gbatch.node=<host>) are told apart from anyone else's on the shared engine, and the
    store's job ids start high (see offset_job_ids). On leaving, whatever happened: the
    daemon stops, the hosts go, and so does every job container labelled with one of
    their names (and no other container).
    """
    from fleet import _start_head
    from hosts import HOST_IMAGE, Host, start_host

    names = [f"soak{os.getpid()}-{i}" for i in range(1, count + 1)]
    hosts: dict[str, Host] = {}
    home = base / "home"
    started = time.monotonic()
    events: subprocess.Popen[bytes] | None = None
    try:
        events = watch_engine_events(base / "docker-events.txt")
        for name in names:
            hosts[name] = start_host(base, name)
        # The daemon refuses a home others may enter: made 0700 here, before the store
        # (offset_job_ids) would make it with the umask's mode.
        home.mkdir(mode=0o700)
        first_id = offset_job_ids(Paths(home).store)
        fleet = _start_head(
            base,
            hosts,
            dict.fromkeys(names, gpus),
            HOST_IMAGE,
            trusted=True,
            installed=True,
            config=fleet_config(ledger_dir),
            features={},
        )
        env = {k: v for k, v in fleet.head.env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        head = Head(home, gpus, env)
        head.stop()  # started by _start_head; restarted by soak() on traced docker CLIs
        trace_docker_calls(base / "inventory.yaml", {n: h.share for n, h in hosts.items()})
        print(
            f"# fleet: hosts {', '.join(names)} up in {time.monotonic() - started:.1f} s; "
            f"job ids from {first_id}; node_down_seconds and node_lease_seconds 60",
            flush=True,
        )
        yield FleetRun(head, base, names)
    finally:
        if Paths(home).lock.exists():
            subprocess.run(
                [str(GBATCH), "daemon", "stop"], env=gbatch_env(home), capture_output=True
            )
        for host in hosts.values():
            try:
                (base / host.name / "sshd.log").write_text(host.logs())
                host.stop()
            except Exception as err:  # keep removing the others
                print(f"# could not remove host {host.name}: {err}", file=sys.stderr)
        remove_job_containers(names)
        if events is not None:
            events.terminate()
            events.wait()


TRACED_DOCKER = """\
#!/bin/sh
# The docker CLI, each call logged first (bench_soak: did gbatch remove that container?)
printf '%s %s\\n' "$(date +%s.%N)" "$*" >> {log}
exec docker "$@"
"""


def trace_docker_calls(inventory: Path, shares: dict[str, Path]) -> None:
    """Point each node's `docker` at a wrapper in its share dir that logs every call
    (the head's over SSH and the agent's, the fence's included) to docker-calls.log
    there: so that a job container killed or removed by another client of the shared
    engine is told apart from one gbatch stopped (see foreign_removals)."""
    import yaml

    data = yaml.safe_load(inventory.read_text())
    for node in data["nodes"]:
        share = shares[node["name"]]
        wrapper = share / "docker-traced"
        wrapper.write_text(TRACED_DOCKER.format(log=share / "docker-calls.log"))
        wrapper.chmod(0o755)
        node["docker"] = str(wrapper)
    inventory.write_text(yaml.safe_dump(data))


def foreign_removals(base: Path, nodes: list[str]) -> list[str]:
    """The kills and removals of this run's job containers that no call through the
    traced CLIs asked for (within the minute before): another client of the engine did
    them. Each as `<time> <action> <container>`."""
    asked: dict[str, list[float]] = collections.defaultdict(list)
    for node in nodes:
        calls = base / node / "share" / "docker-calls.log"
        lines = calls.read_text(errors="replace").splitlines() if calls.exists() else []
        for line in lines:
            stamp, _, command = line.partition(" ")
            words = command.split()
            if words and words[0] in ("rm", "kill", "stop"):
                for word in words[1:]:  # names from the head, ids from the fence
                    with contextlib.suppress(ValueError):
                        asked[word].append(float(stamp))
    found = []
    for line in (base / "docker-events.txt").read_text(errors="replace").splitlines():
        words = line.split()
        if len(words) != 5 or words[4] not in nodes or words[1] not in ("kill", "destroy"):
            continue
        when = int(words[0]) / 1e9
        requests = asked.get(words[2], []) + asked.get(words[3], [])
        if not any(when - 60 <= at <= when + 0.05 for at in requests):
            found.append(f"{when:.3f} {words[1]} {words[2]}")
    return found


def watch_engine_events(out: Path) -> subprocess.Popen[bytes]:
    """`docker events` for every gbatch job container on the engine, ours and anyone
    else's, into `out` (for --keep: when each run was started, killed or removed, and
    whether other containers went at the same moment)."""
    fields = "{{.TimeNano}} {{.Action}} {{.Actor.Attributes.name}} {{.Actor.ID}}"
    node = "{{index .Actor.Attributes " + f'"{LABEL_NODE}"' + "}}"
    with out.open("wb") as sink:
        return subprocess.Popen(
            [
                "docker",
                "events",
                "--filter",
                f"label={LABEL_JOB}",
                "--filter",
                "type=container",
                "--format",
                f"{fields} {node}",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def remove_job_containers(nodes: list[str]) -> None:
    """`docker rm -f` every container labelled gbatch.node=<one of nodes>, twice over
    a second: a `docker run` in flight when its host went may still create one."""
    for attempt in range(2):
        found: list[str] = []
        for node in nodes:
            listed = subprocess.run(
                ["docker", "ps", "-aq", "--filter", f"label={LABEL_NODE}={node}"],
                capture_output=True,
                text=True,
                check=False,
            )
            found += listed.stdout.split()
        if found:
            subprocess.run(["docker", "rm", "-f", *found], capture_output=True, check=False)
        if attempt == 0:
            time.sleep(1.0)


def soak(
    head: Head,
    ledger: Path,
    plans: list[JobPlan],
    faults: list[str],
    rng: random.Random,
    backlog: int,
    gap: float,
    image: str | None = None,
    more_figures: Callable[[], list[str]] | None = None,
) -> None:
    """Submit `plans` (container jobs with `image`) while dealing `faults`; report
    (with `more_figures()` too)."""
    started = time.monotonic()
    integrity: list[str] = []
    kills: list[Kill] = []
    skipped: list[str] = []
    head.start()
    submitter = Submitter(head, ledger, plans, backlog, image)
    try:
        submitter.start()
        for fault in faults:
            time.sleep(rng.uniform(0.5, gap))
            stop_if_refused(submitter)
            if nothing_left(head, submitter):
                skipped.append(fault)  # nothing left to disturb
                continue
            if fault == "SIGKILL":
                kills.append(sigkill_and_restart(head, integrity))
            elif (
                kill := crash_at_point(
                    head, fault, integrity, lambda: nothing_left(head, submitter)
                )
            ) is not None:
                kills.append(kill)
            elif nothing_left(head, submitter):
                skipped.append(f"{fault} (every job ended before it was reached)")
            else:
                skipped.append(f"{fault} (not reached in {CRASH_TIMEOUT:g} s)")
        submitter.join(DRAIN_TIMEOUT)  # lost jobs would hold its backlog forever
        submitter.stopping.set()
        stop_if_refused(submitter)
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while not all_final(head) and time.monotonic() < deadline:
            time.sleep(0.2)
        wall = time.monotonic() - started
        final = head.jobs()
    finally:
        submitter.stopping.set()
        head.stop()
        head.kill_leftover_runs()
    integrity.append(head.integrity())
    states = collections.Counter(str(job["state"]) for job in final)
    all_ids = [int(str(job["id"])) for job in final]
    fleet_lines = []
    if image is not None:
        hosts = collections.Counter(str(job["node"]) for job in final if job["node"])
        per_host = ", ".join(f"{h} {n}" for h, n in sorted(hosts.items()))
        failures = launch_failures(head, all_ids)
        fleet_lines = [
            f"jobs per host (where each ended): {per_host}",
            f"launch failures (store events): {len(failures)} {failures[:3]}",
        ]
    if more_figures is not None:
        fleet_lines += more_figures()
    report(head, ledger, submitter, kills, skipped, integrity, states, all_ids, wall, fleet_lines)


def stop_if_refused(submitter: Submitter) -> None:
    """Exit with one error line when the daemon refused a submit (the bench's own
    spec or config is wrong: the figures would mean nothing)."""
    if submitter.refusal is not None:
        sys.exit(f"bench_soak: error: the daemon refused a submit: {submitter.refusal}")


def launch_failures(head: Head, job_ids: list[int]) -> list[str]:
    """The reason of every `launch failed` event in the store (a requeue or the end)."""
    store = Store(head.paths.store)
    try:
        return [
            f"{event.job_id}: {event.reason}"
            for job_id in job_ids
            for event in store.events(job_id)
            if event.reason.startswith("launch failed")
        ]
    finally:
        store.close()


def report(
    head: Head,
    ledger: Path,
    submitter: Submitter,
    kills: list[Kill],
    skipped: list[str],
    integrity: list[str],
    states: collections.Counter[str],
    all_ids: list[int],
    wall: float,
    extra: list[str],
) -> None:
    """Print the figures (`extra` lines before the wall time), then what the store and
    the ledger say of the first lost or duplicated jobs."""
    result = check(ledger, submitter.acknowledged)
    runs, _ = read_runs(ledger.read_text(errors="replace").splitlines())
    store = Store(head.paths.store)
    try:
        dispatches = [
            (event.time, event.job_id)
            for job_id in all_ids
            for event in store.events(job_id)
            if event.state is JobState.CONFIGURING
        ]
    finally:
        store.close()
    points = [k.what for k in kills if k.what != "SIGKILL"]
    # Each point once (the default): its name; more often: `name xN`.
    point_counts = collections.Counter(points)
    points_note = ", ".join(p if n == 1 else f"{p} x{n}" for p, n in point_counts.items())
    bad_integrity = [i for i in integrity if i != "ok"]
    print(f"accepted: {result.acknowledged} jobs", flush=True)
    print(
        f"submits in doubt (the daemon died with the request in flight): "
        f"{submitter.in_doubt}; refused: {submitter.refused}"
    )
    print(f"finished: {result.finished} jobs (a completed run in the ledger)")
    print(f"lost: {len(result.lost)} {list(result.lost)[:20]}")
    print(f"duplicates: {len(result.duplicates)} {list(result.duplicates)[:20]}")
    print(f"overlap: {result.overlap_seconds:.3f} s")
    print(f"incomplete runs (a start, no end): {len(result.incomplete)}")
    print(f"jobs that ran without an acknowledgement: {len(result.unacknowledged)}")
    print(f"runs: {result.runs}; garbage ledger lines: {result.garbage}")
    print("final states: " + ", ".join(f"{s} {n}" for s, n in sorted(states.items())))
    print(
        f"kills: {len(kills)} ({len(kills) - len(points)} random SIGKILLs, "
        f"{len(points)} at crash points: {points_note or 'none'}); "
        f"skipped: {', '.join(skipped) or 'none'}"
    )
    if kills:
        report_ms("recovery, kill -> daemon answering", [k.answering_s for k in kills])
        to_start = [
            start - k.at_wall
            for k in kills
            if (start := first_start_after(runs, dispatches, k.at_wall)) is not None
        ]
        if to_start:
            report_ms("recovery, kill -> next job start", to_start)
    print(
        f"store integrity_check: {'ok' if not bad_integrity else bad_integrity[:3]} "
        f"({len(integrity)} checks: after each kill and at the end)"
    )
    for line in extra:
        print(line)
    print(f"total wall time: {wall:.1f} s", flush=True)
    for job_id in [*result.lost, *result.duplicates][:5]:
        explain(head, job_id, [r for r in runs if r.job == job_id])


def explain(head: Head, job_id: int, runs: list[Run]) -> None:
    """What the store and the ledger say of a lost or duplicated job."""
    store = Store(head.paths.store)
    try:
        job = store.get(job_id)
        events = store.events(job_id)
    finally:
        store.close()
    if job is None:
        print(f"  job {job_id}: not in the store")
    else:
        print(
            f"  job {job_id}: {job.state.value} attempt {job.attempt} on {job.node} "
            f"exit {job.exit_code} signal {job.exit_signal}; reason: {job.reason!r}"
        )
    for event in events:
        print(f"    {event.time:.3f} {event.state.value}: {event.reason}")
    try:
        log_lines = head.paths.daemon_log.read_text(errors="replace").splitlines()
    except OSError:
        log_lines = []
    mentions = [line for line in log_lines if re.search(rf"\b{job_id}\b", line)]
    for line in mentions[:10]:
        print(f"    gbatchd.log: {line}")
    for run in runs:
        print(
            f"    ledger: attempt {run.attempt} on {run.host} ({run.token}) "
            f"{run.start:.3f} -> {run.end if run.end is None else f'{run.end:.3f}'} "
            f"{'completed' if run.completed else 'not completed'}"
        )


if __name__ == "__main__":
    main()
