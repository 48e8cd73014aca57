"""One user attacks the daemon's socket with everything at once: 1,000 idle connections,
300 slow clients (half a request each, then nothing) and a 16-process request flood,
against a daemon that may open only 1,024 files. Meanwhile another user's `squeue`
answers every time and that user's job starts and finishes; the attacker's own commands
get the one-line refusal; the daemon keeps well within its descriptors and threads,
closes the slow clients it let in once their pause runs out, and logs no traceback.

squeue's latency under attack is printed (p50, p99), not asserted: bench/bench_abuse.py
measures it; the bound here (30 s) only tells an answer from none."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from abuse import Account, Stop, attacks_stopped, flood, hold_idle, hold_slow, start_as
from asuser import User, as_user, preload, run_cli, temp_users
from conftest import GBATCH, Head, require_root, shared_home, wait_for

from gbatch.head.server import MAX_CONNECTIONS_PER_USER
from gbatch.protocol import wire

DAEMON_FILES = 1024  # the soft limit systemd's default would give
IDLE, SLOW, FLOODERS = 1000, 300, 16
SQUEUES = 40


@pytest.fixture(autouse=True)
def _root_only() -> None:
    require_root("to create Unix users and act as them")
    preload()


@pytest.fixture
def users() -> Iterator[dict[str, User]]:
    with temp_users("gbdos", ["mallory", "alice"]) as made:
        yield made


@pytest.fixture
def small_head() -> Iterator[Head]:
    """A shared head (socket 666) whose daemon may open only DAEMON_FILES files."""

    def few_files() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (DAEMON_FILES, hard))

    with shared_home("gbatch-dos-") as head:
        subprocess.run(
            [*GBATCH, "daemon", "start"],
            env=head.env,
            check=True,
            capture_output=True,
            timeout=60,
            preexec_fn=few_files,
        )
        yield head


def soft_file_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-files line")


def account(user: User) -> Account:
    return Account(user.name, user.uid, user.gid)


def squeue_as_victim(home: Path) -> list[dict[str, object]]:
    """In the victim's child: SQUEUES squeues one after another, each timed."""
    samples = []
    for _ in range(SQUEUES):
        start = time.perf_counter()
        out = run_cli(home, "squeue")
        samples.append({"rc": out["rc"], "s": time.perf_counter() - start, "err": out["err"]})
    return samples


def refused_squeue(home: Path) -> dict[str, object]:
    """In the attacker's child: its own squeue, until one is refused (a slot may free
    for a moment when the daemon closes a slow client)."""
    for _ in range(50):
        out = run_cli(home, "squeue")
        if out["rc"] != 0:
            return out
    return out


def test_one_users_flood_leaves_another_user_served(
    small_head: Head, users: dict[str, User]
) -> None:
    head, mallory, alice = small_head, users["mallory"], users["alice"]
    socket_path, pid = head.home / "gbatchd.sock", head.daemon_pid()
    assert soft_file_limit(pid) == DAEMON_FILES

    stop = Stop()
    attacker = account(mallory)
    started = []
    with attacks_stopped(stop, started) as tallies:
        # The flood first, so that it holds connections; then the slow clients take the
        # rest of the attacker's share and are refused past it, and so are the idle ones.
        # Each in place before the next starts: started together, the idle ones could
        # take the whole share first, leaving no slow client to be closed unfinished.
        flooders = [
            start_as(attacker, f"flood{i}", flood(socket_path, wire.ListJobs()), stop)
            for i in range(FLOODERS)
        ]
        started.extend(flooders)
        for attack in flooders:
            attack.wait_ready()
        for name, attack_function in (
            ("slow", hold_slow(socket_path, SLOW)),
            ("idle", hold_idle(socket_path, IDLE)),
        ):
            started.append(start_as(attacker, name, attack_function, stop))
            started[-1].wait_ready()

        # Refused connections hold neither a descriptor nor a thread in the daemon.
        open_files = len(os.listdir(f"/proc/{pid}/fd"))
        threads = len(os.listdir(f"/proc/{pid}/task"))
        assert open_files < 300, open_files
        assert threads < MAX_CONNECTIONS_PER_USER + 50, threads

        attacked = time.monotonic()
        samples = as_user(alice, lambda: squeue_as_victim(head.home), timeout=600)
        submit = ("sbatch", "--parsable", "--wrap", "true")
        submitted = as_user(alice, lambda: run_cli(head.home, *submit))
        assert submitted["rc"] == 0, submitted
        job_id = int(submitted["out"])
        own = as_user(mallory, lambda: refused_squeue(head.home))
        head.wait_state(job_id, "COMPLETED", timeout=120)
        attack_seconds = time.monotonic() - attacked
        # The slow clients the daemon let in are closed once their pause runs out.
        log_path = head.home / "gbatchd.log"
        unfinished = f"user={mallory.name} uid={mallory.uid}"
        wait_for(
            lambda: any(
                unfinished in line and "request line left unfinished" in line
                for line in log_path.read_text().splitlines()
            ),
            60,
            "the daemon to close a slow client",
        )

    latencies = [float(s["s"]) for s in samples]  # type: ignore[arg-type]
    quantiles = statistics.quantiles(latencies, n=100, method="inclusive")
    print(
        f"\nsqueue under attack: p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"p99 {quantiles[98] * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms "
        f"({len(latencies)} samples); daemon: {open_files} files, {threads} threads; "
        f"{attack_seconds:.0f} s under attack; attacker: "
        f"{sum(t.get('served', 0) for t in tallies.values())} requests served, "
        f"idle {tallies['idle']['ends']}, slow {tallies['slow']['ends']}"
    )
    assert all(s["rc"] == 0 for s in samples), [s for s in samples if s["rc"] != 0][:3]
    assert max(latencies) < 30

    refusal = (
        f"{mallory.name} has {MAX_CONNECTIONS_PER_USER} connections open to gbatchd, the most "
        "one user may. Close some (each running gbatch command or TUI holds one) and try again"
    )
    assert own["rc"] == 5, own
    assert own["err"] == f"gbatch squeue: error: {refusal}\n", own
    assert own["out"] == ""

    floods = [t for name, t in tallies.items() if name.startswith("flood")]
    assert sum(t["served"] for t in floods) > 0
    assert {r for t in floods for r in t["refusals"]} <= {f"unavailable: {refusal}"}
    assert sum(t["lost"] for t in floods) == 0
    idle, slow = tallies["idle"]["ends"], tallies["slow"]["ends"]
    assert set(idle) <= {"refused", "open"} and sum(idle.values()) == IDLE, idle
    assert idle["refused"] >= IDLE - MAX_CONNECTIONS_PER_USER, idle
    assert set(slow) <= {"refused", "open", "unfinished"} and sum(slow.values()) == SLOW, slow
    assert slow["refused"] >= SLOW - MAX_CONNECTIONS_PER_USER, slow
    assert slow["unfinished"] >= 1, slow

    log = (head.home / "gbatchd.log").read_text()
    assert "Traceback" not in log
    refusals_logged = [line for line in log.splitlines() if f"user={mallory.name}" in line]
    assert 1 <= len(refusals_logged) < 60, refusals_logged[:5]  # once per 10 s and kind
    assert head.run("squeue").returncode == 0
