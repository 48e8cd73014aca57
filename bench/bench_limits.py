"""What max_pending_jobs costs a submit: the count of the caller's pending jobs, taken
inside each submit's transaction.

Run as root: `.venv/bin/python bench/bench_limits.py [--quick]` (~1.5 min; --quick
a few s). Each repetition gets a fresh daemon (2 simulated GPUs, socket 666 in a 0711 home);
clients send sequential held submits on one connection, as bench_submit's (a), in
alternate blocks of 100 so that both callers see the same load:

  - as the daemon's own user, who is never refused at submit: no count is taken;
  - as `nobody` (a forked child that drops to it), whose limits apply: the count runs,
    over the index of pending jobs, so it grows with nobody's own pending jobs only,
    and max_pending_jobs (10,000 by default) bounds it;

each with 0 and 9,000 of the caller's jobs already pending (one held array); then, as
nobody at the limit (10,000 pending), submits that are refused.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from common import machine_note, quick_help, report_ms, report_rate, running_daemon, temp_home

from gbatch.core.model import JobSpec
from gbatch.protocol import requests
from gbatch.protocol.client import Client, RequestFailed

SPEC: dict[str, Any] = JobSpec(name="b", command=("/bin/true",)).to_dict()
BACKLOG = 9_000
LIMIT = 10_000  # the default max_pending_jobs


def as_nobody(action: Callable[[], Any]) -> Any:
    """`action()` in a forked child that became nobody; its JSON result."""
    nobody = pwd.getpwnam("nobody")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            data = json.dumps({"ok": action()})
        except BaseException as err:  # the child reports, never returns into the bench
            data = json.dumps({"crash": repr(err)})
        with os.fdopen(write_end, "w") as pipe:
            pipe.write(data)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        raw = pipe.read()
    os.waitpid(pid, 0)
    reply = json.loads(raw)
    if "crash" in reply:
        raise RuntimeError(f"the child acting as nobody failed: {reply['crash']}")
    return reply["ok"]


def submits(socket: Path, count: int, backlog: int = 0, refused: bool = False) -> dict[str, Any]:
    """Queue `backlog` held jobs (one array), then time `count` sequential submits:
    {"rate": submits/s, "latencies": [s, ...]}. `refused`: each must be refused."""
    latencies: list[float] = []
    with Client(socket, timeout=120) as client:
        if backlog:
            client.call(requests.Submit(spec=SPEC, held=True, count=backlog))
        client.call(requests.Ping())
        start = time.perf_counter()
        for _ in range(count):
            before = time.perf_counter()
            try:
                client.call(requests.Submit(spec=SPEC, held=True))
                if refused:
                    raise RuntimeError("a submit past the limit was queued")
            except RequestFailed as err:
                if not refused or "max_pending_jobs" not in err.message:
                    raise
            latencies.append(time.perf_counter() - before)
        elapsed = time.perf_counter() - start
    return {"rate": count / elapsed, "latencies": latencies}


@contextlib.contextmanager
def shared_daemon(limit: int = LIMIT) -> Iterator[Path]:
    """A fresh daemon nobody may reach, max_pending_jobs `limit`; yields its socket."""
    with temp_home("gbl-") as home:
        home.chmod(0o711)  # nobody reaches the socket inside, lists nothing
        config = "socket_mode: '666'\n"
        if limit != LIMIT:
            config += f"limits: {{max_pending_jobs: {limit}}}\n"
        (home / "config.yaml").write_text(config)
        with running_daemon(home):
            yield home / "gbatchd.sock"


def compare(backlog: int, reps: int, rounds: int, block: int, limit: int = LIMIT) -> None:
    """The daemon's user and nobody, each `backlog` pending, in alternate blocks of
    `block` submits on one daemon (so that both see the same machine load)."""
    results: dict[str, list[dict[str, Any]]] = {"daemon's user (no count)": [], "nobody": []}
    for _ in range(reps):
        with shared_daemon(limit) as sock:
            submits(sock, 0, backlog)
            as_nobody(lambda: submits(sock, 0, backlog))
            for _ in range(rounds):
                results["daemon's user (no count)"].append(submits(sock, block))
                results["nobody"].append(as_nobody(lambda: submits(sock, block)))
    for who, runs in results.items():
        report_rate(
            f"submits as {who}, {backlog:,} of theirs pending", [r["rate"] for r in runs], "/s"
        )
        report_ms("  latency of one", [t for r in runs for t in r["latencies"]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help("1 daemon, 2 blocks of 10; max_pending_jobs 100, 40 pending"),
    )
    args = parser.parse_args()
    if os.getuid() != 0:
        sys.exit("bench_limits.py: run it as root (it submits as nobody too)")
    reps, rounds, block = (1, 2, 10) if args.quick else (3, 6, 100)
    backlog, limit = (40, 100) if args.quick else (BACKLOG, LIMIT)
    print(machine_note())
    print(f"# {reps} daemons x {rounds} alternate blocks of {block} sequential held submits")
    for pending in (0, backlog):
        compare(pending, reps, rounds, block, limit)
    refusals = []
    for _ in range(reps):
        with shared_daemon(limit) as sock:
            refusals.append(as_nobody(lambda: submits(sock, rounds * block, limit, refused=True)))
    report_rate(
        f"refused submits, nobody at {limit:,} pending", [r["rate"] for r in refusals], "/s"
    )
    report_ms("  latency of one refusal", [t for r in refusals for t in r["latencies"]])


if __name__ == "__main__":
    main()
